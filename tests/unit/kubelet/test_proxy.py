"""The proxy's pure parts: routes from Services and Endpoints, round robin, skipping failures."""

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
    ready_endpoints,
)
from kubelet.proxy.settings import Settings
from tinykube.meta import int_or_string_value
from tinykube.v1 import endpoints_pb2, service_pb2

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


def endpoints(*ips: str, not_ready: tuple[str, ...] = ()) -> endpoints_pb2.ServiceEndpoints:
    ep = endpoints_pb2.ServiceEndpoints()
    ep.metadata.name = "web"
    ep.metadata.namespace = "default"
    if ips or not_ready:
        subset = ep.subsets.add()
        subset.addresses.extend(endpoints_pb2.EndpointAddress(ip=ip) for ip in ips)
        subset.notReadyAddresses.extend(endpoints_pb2.EndpointAddress(ip=ip) for ip in not_ready)
        subset.ports.add(name="", port=8080, protocol="TCP")
    return ep


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
    ep.subsets[0].ports[0].name = "http"
    assert ready_endpoints(ep, "http") == [("10.0.0.1", 8080)]
    assert ready_endpoints(ep, "") == []
    assert ready_endpoints(None, "") == []


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
