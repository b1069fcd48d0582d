"""NodeResourcesFit: kube's request rules, the fit filter's reasons, LeastAllocated and
MostAllocated."""

from __future__ import annotations

import pytest

from scheduler.plugins.noderesourcesfit import NodeResourcesFit
from scheduler.podinfo import DEFAULT_MEMORY, DEFAULT_MILLI_CPU
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.plugins.harness import GI, bound, feasible, message, n, score_of


# PodInfo request rules, which the filter and the scores read
@pytest.mark.parametrize(
    ("pod", "cpu", "mem", "nz_cpu", "nz_mem"),
    [
        (PodBuilder().container(), 0, 0, DEFAULT_MILLI_CPU, DEFAULT_MEMORY),
        (PodBuilder().req(cpu="250m"), 250, 0, 250, DEFAULT_MEMORY),
        (PodBuilder().req(cpu="0", memory="0"), 0, 0, 0, 0),
        (PodBuilder().container(limits={"cpu": "2", "memory": "1Gi"}), 2000, GI, 2000, GI),
        (
            PodBuilder().req(cpu="1").req(cpu="500m", memory="1Gi"),
            1500,
            GI,
            1500,
            GI + DEFAULT_MEMORY,
        ),
        # init containers: max(largest init, sum of app)
        (
            PodBuilder().req(cpu="1").req(cpu="1").container({"cpu": "3"}, init=True),
            3000,
            0,
            3000,
            DEFAULT_MEMORY * 2,
        ),
        (
            PodBuilder().req(cpu="1").req(cpu="1").container({"cpu": "1500m"}, init=True),
            2000,
            0,
            2000,
            DEFAULT_MEMORY * 2,
        ),
    ],
)
def test_pod_requests(pod: PodBuilder, cpu: int, mem: int, nz_cpu: int, nz_mem: int) -> None:
    info = pod.info()
    assert (info.cpu, info.memory, info.nz_cpu, info.nz_memory) == (cpu, mem, nz_cpu, nz_mem)


FILTER_CASES = [
    ("fits anywhere", PodBuilder().req(cpu="1"), [n("a"), n("b")], ["a", "b"]),
    (
        "cpu",
        PodBuilder().req(cpu="3"),
        [n("a").alloc(cpu="2", memory="1Gi", pods="9"), n("b")],
        ["b"],
    ),
    (
        "zero request fits full node",
        PodBuilder().container(),
        [n("a").alloc(cpu="0", memory="0", pods="1")],
        ["a"],
    ),
    ("no pods allocatable", PodBuilder().container(), [n("a").alloc(cpu="4", memory="1Gi")], []),
    (
        "extended fits",
        PodBuilder().req(example_com__gpu="1"),
        [n("a").alloc_extra("example.com/gpu", "2"), n("b")],
        ["a"],
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter(pod: PodBuilder, nodes: list[NodeBuilder], want: list[str]) -> None:
    assert feasible(pod, *nodes) == want


def test_resources_count_bound_pods() -> None:
    nodes = [
        n("a").alloc(cpu="2", memory="4Gi", pods="10"),
        n("b").alloc(cpu="2", memory="4Gi", pods="10"),
    ]
    pods = (bound("x", "a", cpu="1500m"),)
    assert feasible(PodBuilder().req(cpu="1"), *nodes, pods=pods) == ["b"]


def test_too_many_pods_counts_zero_request_pods() -> None:
    nodes = [n("a").alloc(cpu="2", memory="4Gi", pods="1")]
    assert feasible(PodBuilder().container(), *nodes, pods=(bound("x", "a"),)) == []


def test_message_lists_every_insufficient_resource() -> None:
    nodes = [n("a").alloc(cpu="1", memory="1Gi", pods="0")]
    assert message(PodBuilder().req(cpu="2", memory="2Gi", example_com__gpu="1"), *nodes) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient example.com/gpu, "
        "1 Insufficient memory, 1 Too many pods."
    )


def test_many_extended_resources_keep_every_reason() -> None:
    names = [f"example.com/r{i}" for i in range(7)]
    node = n("a")
    for nm in names[:3]:
        node.alloc_extra(nm, "1")
    pod = PodBuilder().container({nm: "2" for nm in names})
    assert (
        message(pod, node)
        == "0/1 nodes are available: " + ", ".join(f"1 Insufficient {nm}" for nm in names) + "."
    )


def test_least_allocated() -> None:
    nodes = [
        n("a").alloc(cpu="4", memory="8Gi", pods="10"),
        n("b").alloc(cpu="2", memory="8Gi", pods="10"),
    ]
    # a: cpu (4000-1000)*100/4000=75, mem (8192-200)*100/8192=97 -> 86; b: 50, 97 -> 73
    assert score_of(NodeResourcesFit(), PodBuilder().req(cpu="1"), *nodes) == [86, 73]


def test_least_allocated_zero_request_counts_defaults() -> None:
    nodes = [n("a").alloc(cpu="1", memory="1Gi", pods="10")]
    # 100m of 1000 -> 90; 200Mi of 1Gi -> 80; mean 85
    assert score_of(NodeResourcesFit(), PodBuilder().container(), *nodes) == [85]


def test_most_allocated() -> None:
    nodes = [
        n("a").alloc(cpu="4", memory="8Gi", pods="10"),
        n("b").alloc(cpu="2", memory="8Gi", pods="10"),
    ]
    plugin = NodeResourcesFit({"scoringStrategy": {"type": "MostAllocated"}})
    # a: 25, 2 -> 13; b: 50, 2 -> 26
    assert score_of(plugin, PodBuilder().req(cpu="1"), *nodes) == [13, 26]


def test_bad_strategy_rejected() -> None:
    with pytest.raises(ValueError, match=r"scoringStrategy\.type"):
        NodeResourcesFit({"scoringStrategy": {"type": "Random"}})


def test_least_allocated_node_without_memory_uses_cpu_only() -> None:
    nodes = [n("a").alloc(cpu="4", pods="10"), n("b").alloc(cpu="4", memory="8Gi", pods="10")]
    # a: only cpu counts: 75; b: (75 + 97) // 2 = 86
    assert score_of(NodeResourcesFit(), PodBuilder().req(cpu="1"), *nodes) == [75, 86]
