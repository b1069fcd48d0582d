"""Endpoints (core/v1): validation of the subsets' addresses and ports. Pure functions."""

from __future__ import annotations

from apiserver.registry.base import Strategy
from apiserver.validation import (
    PROTOCOLS,
    port_number,
    required,
    unsupported,
)
from tinykube.errors import FieldError
from tinykube.v1 import endpoints_pb2


def validate_endpoints(ep: endpoints_pb2.ServiceEndpoints) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, subset in enumerate(ep.subsets):
        sp = f"subsets[{i}]"
        for group, addresses in (
            ("addresses", subset.addresses),
            ("notReadyAddresses", subset.notReadyAddresses),
        ):
            for j, a in enumerate(addresses):
                if not a.ip:
                    errs.append(required(f"{sp}.{group}[{j}].ip"))
        for j, port in enumerate(subset.ports):
            errs.extend(port_number(f"{sp}.ports[{j}].port", port.port))
            if port.protocol and port.protocol not in PROTOCOLS:
                errs.append(unsupported(f"{sp}.ports[{j}].protocol", port.protocol, PROTOCOLS))
    return errs


class EndpointsStrategy(Strategy[endpoints_pb2.ServiceEndpoints]):
    def check(self, obj: endpoints_pb2.ServiceEndpoints) -> list[FieldError]:
        return validate_endpoints(obj)
