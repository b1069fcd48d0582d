"""Services (core/v1): defaults, validation and the allocations an update keeps.

As kube's pkg/registry/core/service strategy and core/v1 defaults: the status is the
server's, the spec gets type ClusterIP, TCP, targetPort = port and single-stack IPv4, an update
that leaves clusterIP or a nodePort out keeps the allocated one, and the clusterIP is
immutable except to and from ExternalName. The allocator (apiserver/allocator.py) checks
addresses against their ranges. Pure functions.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime

from apiserver.registry.base import META_FIELDS, Strategy
from apiserver.validation import (
    GoValue,
    dns1123_label,
    dns1123_subdomain,
    duplicate,
    forbidden,
    invalid,
    label_name,
    port_number,
    required,
    unsupported,
    validate_labels,
    value_text,
)
from tinykube.errors import FieldError
from tinykube.meta import int_or_string, int_or_string_problem, set_int_or_string
from tinykube.v1 import service_pb2

SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")

# Accepted as Kubernetes does, and recorded; the proxy treats every Service alike.
SESSION_AFFINITIES = ("ClientIP", "None")

IP_FAMILY_POLICIES = ("SingleStack",)

IP_FAMILIES = ("IPv4",)

TRAFFIC_POLICIES = ("Cluster", "Local")

SERVICE_PROTOCOLS = ("TCP", "UDP", "SCTP")

_IANA_SVC_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?\Z")


def validate_service(svc: service_pb2.Service) -> list[FieldError]:
    """Shape only; the apiserver's allocator checks clusterIP and nodePort against its ranges."""
    errs: list[FieldError] = []
    spec = svc.spec
    errs.extend(dns1123_label("metadata.name", svc.metadata.name) if svc.metadata.name else [])
    if spec.type not in SERVICE_TYPES:
        errs.append(unsupported("spec.type", spec.type, SERVICE_TYPES))
    if spec.type == "ExternalName":
        if not spec.externalName:
            errs.append(required("spec.externalName"))
        else:
            errs.extend(dns1123_subdomain("spec.externalName", spec.externalName.rstrip(".")))
        if spec.clusterIP and spec.clusterIP != "None":
            errs.append(forbidden("spec.clusterIPs", "may not be set for ExternalName services"))
    if spec.clusterIP == "None" and spec.type in ("NodePort", "LoadBalancer"):
        errs.append(
            invalid("spec.clusterIP", "None", f"may not be set to 'None' for {spec.type} services")
        )
    for path, value, allowed in (
        ("spec.sessionAffinity", spec.sessionAffinity, SESSION_AFFINITIES),
        ("spec.ipFamilyPolicy", spec.ipFamilyPolicy, IP_FAMILY_POLICIES),
        ("spec.internalTrafficPolicy", spec.internalTrafficPolicy, TRAFFIC_POLICIES),
    ):
        if value not in allowed:
            errs.append(unsupported(path, value, allowed))
    if spec.externalTrafficPolicy and spec.externalTrafficPolicy not in TRAFFIC_POLICIES:
        errs.append(
            unsupported("spec.externalTrafficPolicy", spec.externalTrafficPolicy, TRAFFIC_POLICIES)
        )
    for i, family in enumerate(spec.ipFamilies):
        if family not in IP_FAMILIES:
            errs.append(unsupported(f"spec.ipFamilies[{i}]", family, IP_FAMILIES))
    if not spec.ports and spec.clusterIP != "None" and spec.type != "ExternalName":
        errs.append(required("spec.ports"))  # headless and ExternalName Services need none
    names: set[str] = set()
    ports: set[tuple[int, str]] = set()
    for i, p in enumerate(spec.ports):
        pp = f"spec.ports[{i}]"
        if len(spec.ports) > 1 and not p.name:
            errs.append(required(f"{pp}.name"))
        elif p.name:
            errs.extend(dns1123_label(f"{pp}.name", p.name))
            if p.name in names:
                errs.append(duplicate(f"{pp}.name", p.name))
            names.add(p.name)
        if p.protocol not in SERVICE_PROTOCOLS:
            errs.append(unsupported(f"{pp}.protocol", p.protocol, SERVICE_PROTOCOLS))
        errs.extend(port_number(f"{pp}.port", p.port))
        if (p.port, p.protocol) in ports:
            errs.append(duplicate(pp, f"{p.port}/{p.protocol}"))
        ports.add((p.port, p.protocol))
        target = int_or_string(p.targetPort)
        problem = int_or_string_problem(p.targetPort)
        if problem:
            errs.append(invalid(f"{pp}.targetPort", value_text(p.targetPort), problem))
        elif isinstance(target, int):
            errs.extend(port_number(f"{pp}.targetPort", target))
        elif target is not None and (len(target) > 15 or not _IANA_SVC_NAME_RE.match(target)):
            errs.append(
                invalid(
                    f"{pp}.targetPort",
                    target,
                    "must be a port number (1-65535) or an IANA_SVC_NAME (at most 15 lower case "
                    "alphanumeric characters or '-')",
                )
            )
        if p.nodePort and not 1 <= p.nodePort <= 65535:
            errs.extend(port_number(f"{pp}.nodePort", p.nodePort))
    errs.extend(validate_labels("spec.selector", spec.selector))
    errs.extend(validate_service_session_affinity(spec))
    errs.extend(validate_service_load_balancer(spec))
    errs.extend(validate_load_balancer_status(svc.status.loadBalancer))
    return errs


# kube's core.MaxClientIPServiceAffinitySeconds
MAX_CLIENT_IP_AFFINITY_SECONDS = 86400


def validate_service_session_affinity(spec: service_pb2.ServiceSpec) -> list[FieldError]:
    """sessionAffinityConfig: required with ClientIP (the defaults fill it), forbidden with
    None; clientIP.timeoutSeconds in 1..86400."""
    path = "spec.sessionAffinityConfig"
    if spec.sessionAffinity == "None":
        if spec.HasField("sessionAffinityConfig"):
            return [forbidden(path, "must not be set when session affinity is None")]
        return []
    if spec.sessionAffinity != "ClientIP":
        return []
    when = "when session affinity type is ClientIP"
    if not spec.HasField("sessionAffinityConfig"):
        return [required(path, when)]
    if not spec.sessionAffinityConfig.HasField("clientIP"):
        return [required(f"{path}.clientIP", when)]
    client_ip = spec.sessionAffinityConfig.clientIP
    if not client_ip.HasField("timeoutSeconds"):
        return [required(f"{path}.clientIP.timeoutSeconds", when)]
    timeout = client_ip.timeoutSeconds
    if not 0 < timeout <= MAX_CLIENT_IP_AFFINITY_SECONDS:
        detail = f"must be greater than 0 and less than {MAX_CLIENT_IP_AFFINITY_SECONDS}"
        return [invalid(f"{path}.clientIP.timeoutSeconds", timeout, detail)]
    return []


def validate_service_load_balancer(spec: service_pb2.ServiceSpec) -> list[FieldError]:
    """allocateLoadBalancerNodePorts and loadBalancerClass: LoadBalancer Services only (the
    former defaulted there), the class a qualified name as a label key."""
    errs: list[FieldError] = []
    lb = spec.type == "LoadBalancer"
    only_lb = "may only be used when `type` is 'LoadBalancer'"
    if lb and not spec.HasField("allocateLoadBalancerNodePorts"):
        errs.append(required("spec.allocateLoadBalancerNodePorts"))
    elif not lb and spec.HasField("allocateLoadBalancerNodePorts"):
        errs.append(forbidden("spec.allocateLoadBalancerNodePorts", only_lb))
    if spec.loadBalancerIP:
        try:
            ipaddress.ip_address(spec.loadBalancerIP)
        except ValueError:
            detail = "must be a valid IP address"
            errs.append(invalid("spec.loadBalancerIP", spec.loadBalancerIP, detail))
    if spec.HasField("loadBalancerClass"):
        if not lb:
            errs.append(forbidden("spec.loadBalancerClass", only_lb))
        else:
            errs.extend(label_name("spec.loadBalancerClass", spec.loadBalancerClass))
    return errs


def validate_service_load_balancer_update(
    new: service_pb2.ServiceSpec, old: service_pb2.ServiceSpec
) -> list[FieldError]:
    """A LoadBalancer Service's class may not change while it stays a LoadBalancer."""
    if new.type != "LoadBalancer" or old.type != "LoadBalancer":
        return []
    if new.HasField("loadBalancerClass") == old.HasField("loadBalancerClass") and (
        new.loadBalancerClass == old.loadBalancerClass
    ):
        return []
    value: object = new.loadBalancerClass if new.HasField("loadBalancerClass") else GoValue("null")
    return [invalid("spec.loadBalancerClass", value, "may not change once set")]


IP_MODES = ("Proxy", "VIP")


def validate_load_balancer_status(status: service_pb2.LoadBalancerStatus) -> list[FieldError]:
    """kube's ValidateLoadBalancerStatus: each ingress point's ip an IP address, its hostname a
    DNS name (not an address), ipMode VIP or Proxy and only with an ip."""
    errs: list[FieldError] = []
    for i, ingress in enumerate(status.ingress):
        path = f"status.loadBalancer.ingress[{i}]"
        if ingress.ip:
            try:
                ipaddress.ip_address(ingress.ip)
            except ValueError:
                errs.append(invalid(f"{path}.ip", ingress.ip, "must be a valid IP address"))
        if ingress.hostname:
            errs.extend(dns1123_subdomain(f"{path}.hostname", ingress.hostname))
            try:
                ipaddress.ip_address(ingress.hostname)
            except ValueError:
                pass
            else:
                detail = "must be a DNS name, not an IP address"
                errs.append(invalid(f"{path}.hostname", ingress.hostname, detail))
        if ingress.HasField("ipMode"):
            if not ingress.ip:
                detail = "may not be specified when `ip` is not set"
                errs.append(forbidden(f"{path}.ipMode", detail))
            elif ingress.ipMode not in IP_MODES:
                errs.append(unsupported(f"{path}.ipMode", ingress.ipMode, IP_MODES))
    return errs


# kube's DefaultClientIPServiceAffinitySeconds
DEFAULT_CLIENT_IP_AFFINITY_SECONDS = 10800


def default_service_affinity_and_lb(spec: service_pb2.ServiceSpec) -> None:
    """kube's SetDefaults_Service for sessionAffinityConfig (ClientIP: a 10800 s timeout) and
    allocateLoadBalancerNodePorts (LoadBalancer: true)."""
    client_ip = spec.sessionAffinityConfig.clientIP
    if spec.sessionAffinity == "ClientIP" and not client_ip.HasField("timeoutSeconds"):
        client_ip.timeoutSeconds = DEFAULT_CLIENT_IP_AFFINITY_SECONDS
    if spec.type == "LoadBalancer" and not spec.HasField("allocateLoadBalancerNodePorts"):
        spec.allocateLoadBalancerNodePorts = True


def default_load_balancer_status(status: service_pb2.LoadBalancerStatus) -> None:
    """kube's defaults (1.30+): an ingress point with an ip has ipMode VIP unless said."""
    for ingress in status.ingress:
        if ingress.ip and not ingress.HasField("ipMode"):
            ingress.ipMode = "VIP"


def wants_node_ports(spec: service_pb2.ServiceSpec) -> bool:
    """NodePort Services, and LoadBalancer ones unless allocateLoadBalancerNodePorts is false."""
    if spec.type == "LoadBalancer":
        return spec.allocateLoadBalancerNodePorts or not spec.HasField(
            "allocateLoadBalancerNodePorts"
        )
    return spec.type == "NodePort"


def default_service_spec(spec: service_pb2.ServiceSpec) -> None:
    """Kubernetes' Service defaults: type ClusterIP, protocol TCP, targetPort = port, session
    affinity None, single-stack IPv4, traffic policies Cluster (the allocator sets clusterIPs)."""
    if not spec.type:
        spec.type = "ClusterIP"
    if not spec.clusterIP and spec.clusterIPs:
        spec.clusterIP = spec.clusterIPs[0]
    if not spec.sessionAffinity:
        spec.sessionAffinity = "None"
    if not spec.ipFamilies:
        spec.ipFamilies.append("IPv4")
    if not spec.HasField("ipFamilyPolicy"):
        spec.ipFamilyPolicy = "SingleStack"
    if not spec.HasField("internalTrafficPolicy"):
        spec.internalTrafficPolicy = "Cluster"
    if spec.type in ("NodePort", "LoadBalancer") and not spec.externalTrafficPolicy:
        spec.externalTrafficPolicy = "Cluster"
    default_service_affinity_and_lb(spec)
    for port in spec.ports:
        if not port.protocol:
            port.protocol = "TCP"
        if int_or_string(port.targetPort) in (None, 0, "") and not int_or_string_problem(
            port.targetPort
        ):
            set_int_or_string(port.targetPort, port.port)


def keep_service_allocations(new: service_pb2.ServiceSpec, old: service_pb2.ServiceSpec) -> None:
    """An Update that leaves clusterIP or a nodePort out keeps the allocated one (applying the
    original manifest again must not change or free them). A change to type ExternalName
    drops the cluster IP the update kept (kube's dropTypeDependentFields): it is released."""
    if new.type == "ExternalName" and old.type != "ExternalName":
        if new.clusterIP in ("", old.clusterIP):
            new.clusterIP = ""
            del new.clusterIPs[:]
    elif not new.clusterIP:
        new.clusterIP = old.clusterIP
        new.clusterIPs[:] = old.clusterIPs
    # kube's dropTypeDependentFields: what a type needs goes with it, unless the update
    # changed it itself (then validation judges it)
    external = ("NodePort", "LoadBalancer")
    if old.type in external and new.type not in external:
        same = [p.nodePort for p in new.ports] == [p.nodePort for p in old.ports][: len(new.ports)]
        for p in new.ports if same else ():
            p.nodePort = 0
        if new.externalTrafficPolicy == old.externalTrafficPolicy:
            new.externalTrafficPolicy = ""
    if old.type == "LoadBalancer" and new.type != "LoadBalancer":
        new.ClearField("allocateLoadBalancerNodePorts")
        new.ClearField("loadBalancerClass")
    if not (wants_node_ports(new) and old.type in ("NodePort", "LoadBalancer")):
        return
    by_name = {(p.name, p.port): p.nodePort for p in old.ports}
    by_port = {p.port: p.nodePort for p in old.ports}
    for i, p in enumerate(new.ports):
        if p.nodePort == 0:
            p.nodePort = by_name.get((p.name, p.port)) or by_port.get(p.port, 0)
        if p.nodePort == 0 and i < len(old.ports) and old.ports[i].name == p.name:
            p.nodePort = old.ports[i].nodePort  # the same port entry, renumbered


class ServiceStrategy(Strategy[service_pb2.Service]):
    selectable_fields = (*META_FIELDS, "spec.clusterIP", "spec.type")
    reset_status_on_create = True

    def decode_defaults(self, obj: service_pb2.Service) -> None:
        default_service_spec(obj.spec)

    def default(self, obj: service_pb2.Service, now: datetime) -> None:
        default_service_spec(obj.spec)

    def on_update(self, new: service_pb2.Service, old: service_pb2.Service) -> None:
        default_service_spec(new.spec)
        keep_service_allocations(new.spec, old.spec)

    def on_status_update(self, merged: service_pb2.Service, new: service_pb2.Service) -> None:
        default_load_balancer_status(merged.status.loadBalancer)

    def check(self, obj: service_pb2.Service) -> list[FieldError]:
        return validate_service(obj)

    def check_update(self, new: service_pb2.Service, old: service_pb2.Service) -> list[FieldError]:
        nip, oip = new.spec.clusterIP, old.spec.clusterIP
        # kube's exceptions: to type ExternalName (the address is dropped) and from it (one is
        # allocated)
        to_external = new.spec.type == "ExternalName" and not nip
        from_external = old.spec.type == "ExternalName" and not oip
        errs: list[FieldError] = []
        if nip != oip and not (to_external or from_external):
            errs.append(invalid("spec.clusterIP", nip, "field is immutable"))
        errs.extend(validate_service_load_balancer_update(new.spec, old.spec))
        return errs

    def fields(self, obj: service_pb2.Service) -> dict[str, str]:
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": obj.metadata.namespace,
            "spec.clusterIP": obj.spec.clusterIP,
            "spec.type": obj.spec.type,
        }
