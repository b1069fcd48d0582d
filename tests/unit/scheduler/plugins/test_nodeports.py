"""NodePorts: host port conflicts by port, protocol and host IP."""

from __future__ import annotations

import pytest

from scheduler.core import Algorithm, Profile
from scheduler.framework import CycleState
from scheduler.plugins.nodeports import NodePorts
from tests.unit.scheduler.builders import PodBuilder, make_cache
from tests.unit.scheduler.plugins.harness import feasible, n

HOST_PORT_CASES = [
    ("same port wildcard", ("", "TCP", 80), ("", "TCP", 80), False),
    ("different protocol", ("", "UDP", 80), ("", "TCP", 80), True),
    ("different port", ("", "TCP", 81), ("", "TCP", 80), True),
    ("specific vs wildcard", ("10.0.0.1", "TCP", 80), ("0.0.0.0", "TCP", 80), False),
    ("wildcard vs specific", ("", "TCP", 80), ("10.0.0.1", "TCP", 80), False),
    ("two different specific ips", ("10.0.0.2", "TCP", 80), ("10.0.0.1", "TCP", 80), True),
    ("same specific ip", ("10.0.0.1", "TCP", 80), ("10.0.0.1", "TCP", 80), False),
]


@pytest.mark.parametrize(
    ("used", "wanted", "fits"),
    [c[1:] for c in HOST_PORT_CASES],
    ids=[c[0] for c in HOST_PORT_CASES],
)
def test_host_ports(used: tuple[str, str, int], wanted: tuple[str, str, int], fits: bool) -> None:
    existing = PodBuilder("x").node_name("a").host_port(used[2], used[0], used[1]).info()
    pod = PodBuilder().host_port(wanted[2], wanted[0], wanted[1])
    assert feasible(pod, n("a"), pods=(existing,)) == (["a"] if fits else [])


def test_container_port_is_taken_on_the_node() -> None:
    # Pods share their node's network in the process runtime, so two pods declaring the same
    # containerPort (no hostPort) cannot share a node; a different port can.
    existing = PodBuilder("x").node_name("a").container_port(8080).info()
    assert feasible(PodBuilder().container_port(8080), n("a"), pods=(existing,)) == []
    assert feasible(PodBuilder().host_port(8080), n("a"), pods=(existing,)) == []
    assert feasible(PodBuilder().container_port(8081), n("a"), pods=(existing,)) == ["a"]


def test_host_port_released_when_pod_removed() -> None:
    existing = PodBuilder("x").node_name("a").host_port(80).info()
    cache = make_cache(n("a"), pods=(existing,))
    algo = Algorithm(cache, Profile())
    assert algo.schedule(PodBuilder().host_port(80).info()).node is None
    cache.remove_pod(existing.key)
    assert algo.schedule(PodBuilder().host_port(80).info()).node == "a"


def test_node_ports_prefilter_skips_without_ports() -> None:
    cache = make_cache(n("a"))
    assert (
        NodePorts().pre_filter(CycleState(), PodBuilder().info(), cache.nodes).code.name == "SKIP"
    )
