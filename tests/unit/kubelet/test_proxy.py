"""The proxy's pure parts: routes from Services and EndpointSlices, round robin, skipping
failures, kube-proxy's choice of endpoints (ready, else serving and terminating)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kubelet.proxy.metrics import Metrics
from kubelet.proxy.proxier import (
    Listener,
    Proxier,
    RoundRobin,
    ServicePortName,
    desired_state,
    group_slices,
    ready_endpoints,
)
from kubelet.proxy.settings import Settings
from tinykube.meta import int_or_string_value
from tinykube.v1 import endpointslice_pb2, service_pb2

WEB = ServicePortName("default", "web", "")


def service(type_: str = "ClusterIP", node_port: int = 0) -> service_pb2.Service:
    svc = service_pb2.Service()
    svc.metadata.name = "web"
    svc.metadata.namespace = "default"
    svc.spec.clusterIP = "127.100.0.7"
    svc.spec.type = type_
    svc.spec.ports.add(
        port=80, targetPort=int_or_string_value(8080), protocol="TCP", nodePort=node_port
    )
    return svc


def endpoints(
    *ips: str, not_ready: tuple[str, ...] = (), terminating: tuple[str, ...] = ()
) -> list[endpointslice_pb2.EndpointSlice]:
    """The slices of Service web: `ips` ready, `not_ready` not, `terminating` serving and
    terminating."""
    eps = endpointslice_pb2.EndpointSlice(addressType="IPv4")
    eps.metadata.name = "web-abcde"
    eps.metadata.namespace = "default"
    eps.metadata.labels["kubernetes.io/service-name"] = "web"
    eps.ports.add(name="", port=8080, protocol="TCP")
    for ip in ips:
        c = eps.endpoints.add(addresses=[ip]).conditions
        c.ready, c.serving, c.terminating = True, True, False
    for ip in not_ready:
        c = eps.endpoints.add(addresses=[ip]).conditions
        c.ready, c.serving, c.terminating = False, False, False
    for ip in terminating:
        c = eps.endpoints.add(addresses=[ip]).conditions
        c.ready, c.serving, c.terminating = False, True, True
    return [eps]


def test_routes_only_for_ports_with_ready_endpoints() -> None:
    eps = {"default/web": endpoints("127.0.1.1", "127.0.1.2", not_ready=("127.0.1.3",))}
    routes, backends = desired_state([service("NodePort", 30080)], eps, "127.0.1.9")
    assert routes == {
        Listener("127.100.0.7", 80): WEB,
        Listener("127.0.1.9", 30080): WEB,
    }
    assert backends[WEB] == [("127.0.1.1", 8080), ("127.0.1.2", 8080)]

    # No ready endpoint: no listener at all, so connections are refused at once.
    routes, backends = desired_state(
        [service("NodePort", 30080)], {"default/web": endpoints(not_ready=("127.0.1.3",))}, "n"
    )
    assert routes == {} and backends == {WEB: []}
    routes, _ = desired_state([service()], {}, "127.0.1.9")
    assert routes == {}


def test_ready_endpoints_match_the_port_name() -> None:
    ep = endpoints("10.0.0.1")
    ep[0].ports[0].name = "http"
    assert ready_endpoints(ep, "http") == [("10.0.0.1", 8080)]
    assert ready_endpoints(ep, "") == []
    assert ready_endpoints(None, "") == []


def test_serving_terminating_endpoints_only_when_none_is_ready() -> None:
    both = endpoints("10.0.0.1", not_ready=("10.0.0.2",), terminating=("10.0.0.3",))
    assert ready_endpoints(both, "") == [("10.0.0.1", 8080)]
    draining = endpoints(not_ready=("10.0.0.2",), terminating=("10.0.0.3",))
    assert ready_endpoints(draining, "") == [("10.0.0.3", 8080)]
    # A terminating endpoint that no longer serves gets nothing.
    done = endpoints(terminating=("10.0.0.3",))
    done[0].endpoints[0].conditions.serving = False
    assert ready_endpoints(done, "") == []


def test_unset_conditions_count_as_ready_and_pairs_are_used_once() -> None:
    [eps] = endpoints()
    eps.endpoints.add(addresses=["10.0.0.1"])  # no conditions: ready, as kube-proxy reads it
    eps.endpoints.add(addresses=["10.0.0.1"])  # the same address:port again
    ipv6 = endpointslice_pb2.EndpointSlice(addressType="IPv6")
    ipv6.ports.add(name="", port=8080, protocol="TCP")
    ipv6.endpoints.add(addresses=["fd00::1"])
    assert ready_endpoints([eps, ipv6], "") == [("10.0.0.1", 8080)]


def test_slices_group_by_their_service_name_label() -> None:
    a, b, stray = (endpointslice_pb2.EndpointSlice() for _ in range(3))
    for eps, name in ((a, "web-b"), (b, "web-a"), (stray, "x")):
        eps.metadata.name = name
        eps.metadata.namespace = "default"
    a.metadata.labels["kubernetes.io/service-name"] = "web"
    b.metadata.labels["kubernetes.io/service-name"] = "web"
    assert group_slices([a, stray, b]) == {"default/web": [b, a]}


def test_round_robin_rotates_and_survives_endpoint_changes() -> None:
    rr = RoundRobin()
    rr.set_all({WEB: [("a", 1), ("b", 1), ("c", 1)]})
    firsts = [rr.order(WEB)[0] for _ in range(6)]
    assert firsts == [("a", 1), ("b", 1), ("c", 1), ("a", 1), ("b", 1), ("c", 1)]
    assert rr.order(WEB) == [("a", 1), ("b", 1), ("c", 1)]
    rr.set_all({WEB: [("a", 1)]})
    assert rr.order(WEB) == [("a", 1)]
    rr.set_all({})
    assert rr.order(WEB) == []


class FakeConnector:
    """Records connection attempts; endpoints in `refusing` raise ConnectionRefusedError."""

    def __init__(self, refusing: set[str], hanging: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.refusing = refusing
        self.hanging = hanging
        self.attempts: list[str] = []

    async def __call__(self, host: str, port: int) -> Any:
        self.attempts.append(host)
        if host in self.refusing:
            raise ConnectionRefusedError(111, "Connection refused")
        if host in self.hanging:
            await asyncio.Event().wait()
        return f"reader-{host}", f"writer-{host}"


def proxier(connector: FakeConnector, timeout: float = 5.0) -> Proxier:
    return Proxier(Metrics(CollectorRegistry()), connect=connector, connect_timeout=timeout)


async def test_dial_goes_round_robin_and_skips_an_endpoint_that_refuses() -> None:
    connector = FakeConnector(refusing={"b"})
    p = proxier(connector)
    p.lb.set_all({WEB: [("a", 80), ("b", 80), ("c", 80)]})
    picked = []
    for _ in range(6):
        result = await p.dial(WEB)
        assert result is not None
        picked.append(result[0][0])
    # b refuses: its turns go to the next endpoint, so no connection fails.
    assert picked == ["a", "c", "c", "a", "c", "c"]
    assert connector.attempts.count("b") == 2
    refused = p.metrics.registry.get_sample_value(
        "proxy_errors_total", {"service": "default/web", "reason": "endpoint_refused"}
    )
    assert refused == 2.0


async def test_dial_gives_up_when_every_endpoint_fails_or_none_exist() -> None:
    p = proxier(FakeConnector(refusing={"a", "b"}))
    p.lb.set_all({WEB: [("a", 80), ("b", 80)]})
    assert await p.dial(WEB) is None
    assert await p.dial(ServicePortName("default", "nothing", "")) is None


async def test_dial_skips_an_endpoint_that_does_not_accept_in_time() -> None:
    connector = FakeConnector(refusing=set(), hanging={"a"})
    p = proxier(connector, timeout=0.01)
    p.lb.set_all({WEB: [("a", 80), ("b", 80)]})
    result = await p.dial(WEB)
    assert result is not None and result[0] == ("b", 80)


def test_settings_require_a_node_name() -> None:
    s = Settings.from_args(["--node-name", "n1", "--node-ip", "127.0.1.1", "--port", "0"])
    assert (s.node_name, s.node_ip, s.bind_address) == ("n1", "127.0.1.1", "127.0.0.1:0")
    with pytest.raises(SystemExit):
        Settings.from_args([])


def test_headless_and_external_name_services_get_no_listener() -> None:
    eps = {"default/web": endpoints("127.0.1.1")}
    headless = service()
    headless.spec.clusterIP = "None"
    external = service()
    external.spec.clusterIP, external.spec.type = "", "ExternalName"
    external.spec.externalName = "smtp.example.org"
    for svc in (headless, external):
        routes, backends = desired_state([svc], eps, "127.0.1.9")
        assert routes == {} and backends == {}


def test_load_balancer_ingress_ips_get_listeners_unless_ip_mode_proxy() -> None:
    svc = service("LoadBalancer", node_port=30080)
    svc.status.loadBalancer.ingress.add(ip="127.101.0.1", ipMode="VIP")
    svc.status.loadBalancer.ingress.add(ip="127.101.0.2")  # no ipMode: VIP
    svc.status.loadBalancer.ingress.add(ip="127.101.0.3", ipMode="Proxy")
    routes, _ = desired_state([svc], {"default/web": endpoints("10.0.0.1")}, "127.0.1.1")
    assert set(routes) == {
        Listener("127.100.0.7", 80),
        Listener("127.0.1.1", 30080),
        Listener("127.101.0.1", 80),
        Listener("127.101.0.2", 80),
    }


async def test_client_ip_affinity_keeps_a_client_on_its_endpoint_until_the_timeout() -> None:
    now = [1000.0]
    p = Proxier(
        Metrics(CollectorRegistry()), connect=FakeConnector(refusing=set()), now=lambda: now[0]
    )
    svc = service()
    svc.spec.sessionAffinity = "ClientIP"
    svc.spec.sessionAffinityConfig.clientIP.timeoutSeconds = 60
    await p.sync([svc], {"default/web": endpoints("a", "b", "c")}, "")
    try:
        first = await p.dial(WEB, "192.0.2.7")
        assert first is not None
        for _ in range(5):
            again = await p.dial(WEB, "192.0.2.7")
            assert again is not None and again[0] == first[0]
            now[0] += 59  # each connection renews it
        # another client is spread, then sticks to its own
        second = await p.dial(WEB, "192.0.2.8")
        assert second is not None
        assert p._order(WEB, "192.0.2.8")[0] == second[0]
        now[0] += 61  # expired: round robin again, so two orders in a row start apart
        assert p._order(WEB, "192.0.2.7")[0] != p._order(WEB, "192.0.2.7")[0]
    finally:
        await p.close()
