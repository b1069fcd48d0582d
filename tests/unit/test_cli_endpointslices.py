"""tinykube's CLI for EndpointSlices and Services: the `get` row and `describe svc` as kubectl
v1.37 prints them (its Endpoints line read from the Service's EndpointSlices)."""

from __future__ import annotations

from datetime import UTC, datetime

from tinykube import kinds
from tinykube.cli import printers
from tinykube.cli.describe import (
    describe_endpoint_slice,
    describe_service,
    format_endpoint_slices,
    tabwrite,
)
from tinykube.meta import int_or_string_value
from tinykube.v1 import endpointslice_pb2, service_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def slice_of(
    name: str, ips: list[str], ready: list[bool | None], port: int | None = 8080
) -> endpointslice_pb2.EndpointSlice:
    eps = endpointslice_pb2.EndpointSlice(addressType="IPv4")
    eps.metadata.name = name
    eps.metadata.creationTimestamp.FromDatetime(NOW.replace(tzinfo=None))
    if port is not None:
        eps.ports.add(name="web", port=port, protocol="TCP")
    for ip, r in zip(ips, ready, strict=True):
        e = eps.endpoints.add(addresses=[ip])
        if r is not None:
            e.conditions.ready = r
    return eps


def test_get_row() -> None:
    eps = slice_of("web-abcde", [f"10.0.0.{i}" for i in range(5)], [True] * 5)
    assert printers.columns(kinds.ENDPOINT_SLICE) == [
        "NAME",
        "ADDRESSTYPE",
        "PORTS",
        "ENDPOINTS",
        "AGE",
    ]
    assert printers.row(kinds.ENDPOINT_SLICE, eps, NOW) == [
        "web-abcde",
        "IPv4",
        "8080",
        "10.0.0.0,10.0.0.1,10.0.0.2 + 2 more...",
        "0s",
    ]
    empty = slice_of("idle-abcde", [], [], port=None)
    assert printers.row(kinds.ENDPOINT_SLICE, empty, NOW)[2:4] == ["<unset>", "<unset>"]


def test_endpoints_line_as_kubectl_formats_slices() -> None:
    assert format_endpoint_slices([], "web") == "<none>"
    a = slice_of("a", ["10.0.0.1", "10.0.0.2", "10.0.0.3"], [True, False, None])
    assert format_endpoint_slices([a], "web") == "10.0.0.1:8080,10.0.0.3:8080"
    assert format_endpoint_slices([a], "other") == ""
    b = slice_of("b", ["10.0.1.1", "10.0.1.2"], [True, True])
    assert format_endpoint_slices([a, b], "web") == (
        "10.0.0.1:8080,10.0.0.3:8080,10.0.1.1:8080 + 1 more..."
    )
    placeholder = slice_of("p", [], [], port=None)
    assert format_endpoint_slices([placeholder], "web") == ""


def test_describe_service() -> None:
    svc = service_pb2.Service()
    svc.metadata.name = "web"
    svc.metadata.namespace = "default"
    svc.spec.type = "ClusterIP"
    svc.spec.selector["app"] = "web"
    svc.spec.clusterIP = "127.100.0.5"
    svc.spec.clusterIPs.append("127.100.0.5")
    svc.spec.ipFamilies.append("IPv4")
    svc.spec.ipFamilyPolicy = "SingleStack"
    svc.spec.sessionAffinity = "None"
    svc.spec.internalTrafficPolicy = "Cluster"
    svc.spec.ports.add(name="web", port=80, targetPort=int_or_string_value(8080), protocol="TCP")
    eps = slice_of("web-abcde", ["127.0.1.1", "127.0.1.2"], [True, True])
    assert describe_service(svc, [eps], [], NOW) == (
        "Name:                     web\n"
        "Namespace:                default\n"
        "Labels:                   <none>\n"
        "Annotations:              <none>\n"
        "Selector:                 app=web\n"
        "Type:                     ClusterIP\n"
        "IP Family Policy:         SingleStack\n"
        "IP Families:              IPv4\n"
        "IP:                       127.100.0.5\n"
        "IPs:                      127.100.0.5\n"
        "Port:                     web  80/TCP\n"
        "TargetPort:               8080/TCP\n"
        "Endpoints:                127.0.1.1:8080,127.0.1.2:8080\n"
        "Session Affinity:         None\n"
        "Internal Traffic Policy:  Cluster\n"
        "Events:                   <none>\n"
    )


def test_tabwrite_aligns_per_block_as_go_tabwriter() -> None:
    assert tabwrite(["a:\t1", "long key:\t2", "break", "b:\tx\ty", "cc:\tz"]) == [
        "a:         1",
        "long key:  2",
        "break",
        "b:   x  y",
        "cc:  z",
    ]


def test_describe_endpoint_slice_as_kubectl() -> None:
    eps = slice_of("manual", ["10.0.0.3"], [False])
    eps.metadata.namespace = "default"
    eps.metadata.annotations["a"] = "b"
    eps.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    eps.endpoints[0].nodeName = "node-1"
    first = eps.endpoints.add(addresses=["10.0.0.1", "10.0.0.2"], hostname="h1", zone="z")
    first.targetRef.kind, first.targetRef.name = "Pod", "web-1"
    eps.ports.add(name="longer-name", protocol="UDP")
    assert describe_endpoint_slice(eps, [], NOW) == (
        "Name:         manual\n"
        "Namespace:    default\n"
        "Labels:       <none>\n"
        "Annotations:  a: b\n"
        "AddressType:  IPv4\n"
        "Ports:\n"
        "  Name         Port     Protocol\n"
        "  ----         ----     --------\n"
        "  web          8080     TCP\n"
        "  longer-name  <unset>  UDP\n"
        "Endpoints:\n"
        "  - Addresses:  10.0.0.3\n"
        "    Conditions:\n"
        # One tab block from Ready to the next endpoint's Addresses: the wider key sets it.
        "      Ready:    false\n"
        "    Hostname:   <unset>\n"
        "    NodeName:   node-1\n"
        "    Zone:       <unset>\n"
        "  - Addresses:  10.0.0.1, 10.0.0.2\n"
        "    Conditions:\n"
        "      Ready:    <unset>\n"
        "    Hostname:   h1\n"
        "    TargetRef:  Pod/web-1\n"
        "    NodeName:   <unset>\n"
        "    Zone:       z\n"
        "Events:         <none>\n"
    )
