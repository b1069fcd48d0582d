"""EndpointSlices (discovery.k8s.io/v1) in the registry: defaults and validation.

Kubernetes' rules, as pkg/apis/discovery/v1 defaults and pkg/apis/discovery/validation have them
(ValidateEndpointSlice): addressType is required, one of IPv4, IPv6 or FQDN, and immutable; at
most 1000 endpoints, each with 1 to 100 addresses valid for the addressType, a DNS-subdomain
nodeName, a DNS-label hostname, at most 16 valid deprecatedTopology labels and at most 8
distinct zone hints; at most 20000 ports (kube's limit since v1.22; it was 100), each named by
a DNS label (or ""), names unique, protocol TCP, UDP or SCTP, appProtocol a qualified name.
A port without a name gets "" and one without a protocol TCP (SetDefaults_EndpointPort). The
strategy sets generation 1 on create and bumps it when anything but metadata changes.

One departure: an endpoint IP may be a loopback address. kube's ValidateEndpointIP refuses
127.0.0.0/8, but tinykube's process runtime runs pods on the node's loopback IPs (127.0.1.x),
so those are its pod IPs; unspecified and link-local addresses are refused as kube does.

Pure functions over messages.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime

from apiserver.registry.base import Strategy
from apiserver.validation import (
    dns1123_label,
    dns1123_subdomain,
    duplicate,
    invalid,
    required,
    unsupported,
)
from tinykube.errors import FieldError
from tinykube.selectors import validate_label_key, validate_label_value
from tinykube.v1 import endpointslice_pb2

EndpointSlice = endpointslice_pb2.EndpointSlice

ADDRESS_TYPES = ("FQDN", "IPv4", "IPv6")
PROTOCOLS = ("SCTP", "TCP", "UDP")
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
MAX_PORTS = 20000
MAX_TOPOLOGY_LABELS = 16
MAX_ZONE_HINTS = 8

# The labels the controllers set and readers select on (k8s.io/api/discovery/v1).
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"


def too_many(path: str, actual: int, limit: int) -> FieldError:
    return FieldError(path, f"Too many: {actual}: must have at most {limit} items")


def prepare(eps: EndpointSlice) -> None:
    """Create and update alike: kube's defaults for ports."""
    for port in eps.ports:
        if not port.HasField("name"):
            port.name = ""
        if not port.HasField("protocol"):
            port.protocol = "TCP"


def bump_generation(new: EndpointSlice, old: EndpointSlice) -> None:
    """kube's strategy: any change but metadata's is a new generation."""
    a, b = EndpointSlice(), EndpointSlice()
    a.CopyFrom(new)
    b.CopyFrom(old)
    for m in (a, b):
        m.ClearField("metadata")
        m.ClearField("apiVersion")
        m.ClearField("kind")
    if a != b:
        new.metadata.generation = old.metadata.generation + 1


def _ip(path: str, address: str, version: int) -> list[FieldError]:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None
    if ip is None or ip.version != version:
        return [invalid(path, address, f"must be a valid IPv{version} address")]
    if ip.is_unspecified:
        shown = "0.0.0.0" if version == 4 else "::"
        return [invalid(path, address, f"may not be unspecified ({shown})")]
    if ip.is_link_local:
        return [
            invalid(path, address, "may not be in the link-local range (169.254.0.0/16, fe80::/10)")
        ]
    link_local_multicast = (
        ipaddress.ip_network("224.0.0.0/24") if version == 4 else ipaddress.ip_network("ff02::/16")
    )
    if ip in link_local_multicast:
        return [
            invalid(
                path,
                address,
                "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
            )
        ]
    return []


def _fqdn(path: str, name: str) -> list[FieldError]:
    """kube's IsFullyQualifiedDomainName."""
    if not name:
        return [required(path)]
    name = name.removesuffix(".")
    errs = dns1123_subdomain(path, name)
    if errs:
        return errs
    labels = name.split(".")
    if len(labels) < 2:
        return [
            invalid(path, name, "should be a domain with at least two segments separated by dots")
        ]
    for label in labels:
        errs.extend(dns1123_label(path, label))
    return errs


def _endpoints(eps: EndpointSlice) -> list[FieldError]:
    errs: list[FieldError] = []
    if len(eps.endpoints) > MAX_ENDPOINTS:
        return [too_many("endpoints", len(eps.endpoints), MAX_ENDPOINTS)]
    for i, ep in enumerate(eps.endpoints):
        path = f"endpoints[{i}]"
        ap = f"{path}.addresses"
        if not ep.addresses:
            errs.append(required(ap, "must contain at least 1 address"))
        elif len(ep.addresses) > MAX_ADDRESSES:
            errs.append(too_many(ap, len(ep.addresses), MAX_ADDRESSES))
        for j, address in enumerate(ep.addresses):
            if eps.addressType == "IPv4":
                errs.extend(_ip(f"{ap}[{j}]", address, 4))
            elif eps.addressType == "IPv6":
                errs.extend(_ip(f"{ap}[{j}]", address, 6))
            elif eps.addressType == "FQDN":
                errs.extend(_fqdn(f"{ap}[{j}]", address))
        if ep.HasField("nodeName"):
            errs.extend(dns1123_subdomain(f"{path}.nodeName", ep.nodeName))
        tp = f"{path}.deprecatedTopology"
        if len(ep.deprecatedTopology) > MAX_TOPOLOGY_LABELS:
            errs.append(too_many(tp, len(ep.deprecatedTopology), MAX_TOPOLOGY_LABELS))
        for key in sorted(ep.deprecatedTopology):
            errs.extend(invalid(tp, key, p) for p in validate_label_key(key))
            value = ep.deprecatedTopology[key]
            errs.extend(invalid(tp, value, p) for p in validate_label_value(value))
        if ep.HasField("hostname"):
            errs.extend(dns1123_label(f"{path}.hostname", ep.hostname))
        if ep.HasField("hints"):
            zp = f"{path}.hints.forZones"
            if len(ep.hints.forZones) > MAX_ZONE_HINTS:
                errs.append(too_many(zp, len(ep.hints.forZones), MAX_ZONE_HINTS))
                continue
            zones: set[str] = set()
            for k, zone in enumerate(ep.hints.forZones):
                np = f"{zp}[{k}].name"
                if zone.name in zones:
                    errs.append(duplicate(np, zone.name))
                zones.add(zone.name)
                errs.extend(invalid(np, zone.name, p) for p in validate_label_value(zone.name))
    return errs


def _ports(eps: EndpointSlice) -> list[FieldError]:
    errs: list[FieldError] = []
    if len(eps.ports) > MAX_PORTS:
        return [too_many("ports", len(eps.ports), MAX_PORTS)]
    names: set[str] = set()
    for i, port in enumerate(eps.ports):
        path = f"ports[{i}]"
        if port.name:
            errs.extend(dns1123_label(f"{path}.name", port.name))
        if port.name in names:
            errs.append(duplicate(f"{path}.name", port.name))
        names.add(port.name)
        if not port.HasField("protocol"):
            errs.append(required(f"{path}.protocol"))
        elif port.protocol not in PROTOCOLS:
            errs.append(unsupported(f"{path}.protocol", port.protocol, PROTOCOLS))
        if port.HasField("appProtocol"):
            ap = f"{path}.appProtocol"
            errs.extend(
                invalid(ap, port.appProtocol, p) for p in validate_label_key(port.appProtocol)
            )
    return errs


def validate(eps: EndpointSlice) -> list[FieldError]:
    """kube's ValidateEndpointSlice (the generic metadata checks run before it)."""
    errs: list[FieldError] = []
    if not eps.addressType:
        errs.append(required("addressType"))
    elif eps.addressType not in ADDRESS_TYPES:
        errs.append(unsupported("addressType", eps.addressType, ADDRESS_TYPES))
    return errs + _endpoints(eps) + _ports(eps)


def validate_update(new: EndpointSlice, old: EndpointSlice) -> list[FieldError]:
    if new.addressType != old.addressType:
        return [invalid("addressType", new.addressType, "field is immutable")]
    return []


class EndpointSliceStrategy(Strategy[EndpointSlice]):
    def default(self, obj: EndpointSlice, now: datetime) -> None:
        prepare(obj)

    def on_update(self, new: EndpointSlice, old: EndpointSlice) -> None:
        prepare(new)
        bump_generation(new, old)

    def check(self, obj: EndpointSlice) -> list[FieldError]:
        return validate(obj)

    def check_update(self, new: EndpointSlice, old: EndpointSlice) -> list[FieldError]:
        return validate_update(new, old)
