"""Leases (coordination.k8s.io/v1): validation of the lease's durations and counts.

Kubelets renew theirs every 10 s and the controller manager and scheduler elect leaders with
them. Pure functions.
"""

from __future__ import annotations

from apiserver.registry.base import Strategy
from apiserver.validation import invalid
from tinykube.errors import FieldError
from tinykube.v1 import lease_pb2


def validate_lease(lease: lease_pb2.Lease) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = lease.spec
    if spec.HasField("leaseDurationSeconds") and spec.leaseDurationSeconds <= 0:
        errs.append(
            invalid(
                "spec.leaseDurationSeconds", spec.leaseDurationSeconds, "must be greater than 0"
            )
        )
    if spec.leaseTransitions < 0:
        errs.append(
            invalid(
                "spec.leaseTransitions",
                spec.leaseTransitions,
                "must be greater than or equal to 0",
            )
        )
    return errs


class LeaseStrategy(Strategy[lease_pb2.Lease]):
    def check(self, obj: lease_pb2.Lease) -> list[FieldError]:
        return validate_lease(obj)
