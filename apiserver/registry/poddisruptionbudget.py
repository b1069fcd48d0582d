"""PodDisruptionBudgets (policy/v1): validation of the budget and of its status.

The status is the disruption controller's, as in Kubernetes; the eviction API and that
controller write it often, so UpdateStatus checks only the status. Pure functions.
"""

from __future__ import annotations

import json

from apiserver.registry.base import Strategy
from apiserver.validation import (
    CONDITION_STATUSES,
    int_or_percent,
    invalid,
    is_set,
    printable,
    required,
    unsupported,
    value_text,
)
from tinykube.errors import FieldError
from tinykube.meta import int_or_string
from tinykube.selectors import label_selector_problems
from tinykube.v1 import poddisruptionbudget_pb2

UNHEALTHY_POD_EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")


def validate_pdb(pdb: poddisruptionbudget_pb2.PodDisruptionBudget) -> list[FieldError]:
    """Kubernetes' ValidatePodDisruptionBudget (spec) and its status checks."""
    errs: list[FieldError] = []
    spec = pdb.spec
    has_min, has_max = is_set(spec.minAvailable), is_set(spec.maxUnavailable)
    if has_min and has_max:
        low, high = (
            json.dumps(held) if (held := int_or_string(v)) is not None else value_text(v)
            for v in (spec.minAvailable, spec.maxUnavailable)
        )
        shown = f"{{minAvailable: {low}, maxUnavailable: {high}}}"
        errs.append(
            FieldError(
                "spec",
                f"Invalid value: {shown}: minAvailable and maxUnavailable cannot be both set",
            )
        )
    if has_min:
        errs.extend(int_or_percent("spec.minAvailable", spec.minAvailable))
    if has_max:
        errs.extend(int_or_percent("spec.maxUnavailable", spec.maxUnavailable))
    for f, m in label_selector_problems(spec.selector, "spec.selector"):
        errs.append(FieldError(f, m))
    if spec.HasField("unhealthyPodEvictionPolicy") and (
        spec.unhealthyPodEvictionPolicy not in UNHEALTHY_POD_EVICTION_POLICIES
    ):
        errs.append(
            unsupported(
                "spec.unhealthyPodEvictionPolicy",
                spec.unhealthyPodEvictionPolicy,
                UNHEALTHY_POD_EVICTION_POLICIES,
            )
        )
    errs.extend(validate_pdb_status(pdb))
    return errs


def validate_pdb_status(pdb: poddisruptionbudget_pb2.PodDisruptionBudget) -> list[FieldError]:
    """Kubernetes' ValidatePodDisruptionBudgetStatusUpdate: no count is negative."""
    errs: list[FieldError] = []
    status = pdb.status
    for name, value in (
        ("disruptionsAllowed", status.disruptionsAllowed),
        ("currentHealthy", status.currentHealthy),
        ("desiredHealthy", status.desiredHealthy),
        ("expectedPods", status.expectedPods),
    ):
        if value < 0:
            errs.append(invalid(f"status.{name}", value, "must be greater than or equal to 0"))
    for i, cond in enumerate(status.conditions):
        cp = f"status.conditions[{i}]"
        if not cond.type:
            errs.append(required(f"{cp}.type"))
        if cond.status not in CONDITION_STATUSES:
            errs.append(unsupported(f"{cp}.status", cond.status, CONDITION_STATUSES))
    return errs


class PodDisruptionBudgetStrategy(Strategy[poddisruptionbudget_pb2.PodDisruptionBudget]):
    reset_status_on_create = True

    def check(self, obj: poddisruptionbudget_pb2.PodDisruptionBudget) -> list[FieldError]:
        return validate_pdb(obj)

    def check_status(
        self,
        new: poddisruptionbudget_pb2.PodDisruptionBudget,
        old: poddisruptionbudget_pb2.PodDisruptionBudget,
    ) -> list[FieldError]:
        return validate_pdb_status(new) + printable("status", new.status)
