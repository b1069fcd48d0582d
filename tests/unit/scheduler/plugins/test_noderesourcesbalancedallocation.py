"""NodeResourcesBalancedAllocation: even use of cpu and memory scores higher."""

from __future__ import annotations

from scheduler.plugins.noderesourcesbalancedallocation import NodeResourcesBalancedAllocation
from tests.unit.scheduler.builders import PodBuilder
from tests.unit.scheduler.plugins.harness import n, score_of


def test_balanced_allocation() -> None:
    nodes = [
        n("a").alloc(cpu="4", memory="4Gi", pods="10"),
        n("b").alloc(cpu="4", memory="16Gi", pods="10"),
    ]
    pod = PodBuilder().req(cpu="2", memory="2Gi")
    # a: 0.5/0.5 -> std 0 -> 100; b: 0.5/0.125 -> std 0.1875 -> 81
    assert score_of(NodeResourcesBalancedAllocation(), pod, *nodes) == [100, 81]


def test_balanced_allocation_over_capacity_caps_fractions() -> None:
    nodes = [n("a").alloc(cpu="1", memory="1Gi", pods="10")]
    pod = PodBuilder().req(cpu="4", memory="512Mi")
    # cpu fraction capped at 1, memory 0.5 -> std 0.25 -> 75
    assert score_of(NodeResourcesBalancedAllocation(), pod, *nodes) == [75]
