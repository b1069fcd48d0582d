"""Table-driven tests of every filter and score plugin, through the real Algorithm."""

from __future__ import annotations

import pytest

from scheduler.config import ProfileConfig
from scheduler.core import Algorithm, Profile
from scheduler.framework import CycleState
from scheduler.plugins import (
    ImageLocality,
    NodeAffinity,
    NodePorts,
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    TaintToleration,
)
from scheduler.podinfo import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, PodInfo
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder, make_cache

GI = 1024**3
MI = 1024**2


def feasible(pod: PodBuilder, *nodes: NodeBuilder, pods: tuple[PodInfo, ...] = ()) -> list[str]:
    """Names of the nodes that pass every filter (from the Explain view of the attempt)."""
    cache = make_cache(*nodes, pods=pods)
    algo = Algorithm(cache, Profile())
    algo.schedule(pod.info())
    view = algo.attempts[pod.info().key].view(100)
    ok = [True] * len(view.nodes)
    for verdicts in view.filters.values():
        for i, v in enumerate(verdicts):
            if v or v is None:  # a reason (None: not run because every node had already failed)
                ok[i] = False
    return [nm for nm, good in zip(view.nodes, ok, strict=True) if good]


def message(pod: PodBuilder, *nodes: NodeBuilder, pods: tuple[PodInfo, ...] = ()) -> str:
    cache = make_cache(*nodes, pods=pods)
    return Algorithm(cache, Profile()).schedule(pod.info()).message


# ----- PodInfo request rules ----------------------------------------------------------------
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


# ----- filters ------------------------------------------------------------------------------
def n(name: str) -> NodeBuilder:
    return NodeBuilder(name)


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
    ("unschedulable", PodBuilder(), [n("a").unschedulable(), n("b")], ["b"]),
    (
        "unschedulable tolerated by exists-all",
        PodBuilder().toleration(operator="Exists"),
        [n("a").unschedulable()],
        ["a"],
    ),
    ("taint", PodBuilder(), [n("a").taint("k", "v"), n("b")], ["b"]),
    ("noexecute taint blocks", PodBuilder(), [n("a").taint("k", "v", "NoExecute")], []),
    (
        "prefer taint does not block",
        PodBuilder(),
        [n("a").taint("k", "v", "PreferNoSchedule")],
        ["a"],
    ),
    (
        "toleration equal",
        PodBuilder().toleration("k", "Equal", "v"),
        [n("a").taint("k", "v")],
        ["a"],
    ),
    (
        "toleration wrong value",
        PodBuilder().toleration("k", "Equal", "x"),
        [n("a").taint("k", "v")],
        [],
    ),
    (
        "taint empty value, toleration empty value",
        PodBuilder().toleration("k"),
        [n("a").taint("k", "")],
        ["a"],
    ),
    ("toleration exists", PodBuilder().toleration("k", "Exists"), [n("a").taint("k", "v")], ["a"]),
    (
        "toleration wrong effect",
        PodBuilder().toleration("k", "Exists", effect="NoExecute"),
        [n("a").taint("k", "v")],
        [],
    ),
    (
        "empty key exists tolerates all",
        PodBuilder().toleration(operator="Exists"),
        [n("a").taint("x", "y").taint("k", "v", "NoExecute")],
        ["a"],
    ),
    (
        "node selector",
        PodBuilder().node_selector(zone="z1"),
        [n("a").labels(zone="z1"), n("b").labels(zone="z2"), n("c")],
        ["a"],
    ),
    (
        "node selector unknown value",
        PodBuilder().node_selector(zone="z9"),
        [n("a").labels(zone="z1")],
        [],
    ),
    (
        "In",
        PodBuilder().required([("zone", "In", ["z1", "z2"])]),
        [n("a").labels(zone="z1"), n("b").labels(zone="z2"), n("c").labels(zone="z3"), n("d")],
        ["a", "b"],
    ),
    (
        "NotIn matches missing label",
        PodBuilder().required([("zone", "NotIn", ["z1"])]),
        [n("a").labels(zone="z1"), n("b").labels(zone="z2"), n("c")],
        ["b", "c"],
    ),
    (
        "NotIn on a key no node has",
        PodBuilder().required([("nokey", "NotIn", ["v"])]),
        [n("a"), n("b")],
        ["a", "b"],
    ),
    (
        "Exists",
        PodBuilder().required([("gpu", "Exists", [])]),
        [n("a").labels(gpu="x"), n("b")],
        ["a"],
    ),
    (
        "DoesNotExist matches missing",
        PodBuilder().required([("gpu", "DoesNotExist", [])]),
        [n("a").labels(gpu="x"), n("b")],
        ["b"],
    ),
    (
        "Gt",
        PodBuilder().required([("cores", "Gt", ["4"])]),
        [n("a").labels(cores="8"), n("b").labels(cores="4"), n("c").labels(cores="many"), n("d")],
        ["a"],
    ),
    (
        "Lt",
        PodBuilder().required([("cores", "Lt", ["5"])]),
        [n("a").labels(cores="8"), n("b").labels(cores="4"), n("c").labels(cores="x"), n("d")],
        ["b"],
    ),
    (
        "Gt non-numeric bound matches nothing",
        PodBuilder().required([("cores", "Gt", ["x"])]),
        [n("a").labels(cores="8")],
        [],
    ),
    (
        "terms are ORed",
        PodBuilder().required([("zone", "In", ["z1"])], [("gpu", "Exists", [])]),
        [n("a").labels(zone="z1"), n("b").labels(gpu="1"), n("c")],
        ["a", "b"],
    ),
    (
        "expressions are ANDed",
        PodBuilder().required([("zone", "In", ["z1"]), ("gpu", "Exists", [])]),
        [n("a").labels(zone="z1"), n("b").labels(zone="z1", gpu="1")],
        ["b"],
    ),
    (
        "selector and affinity both apply",
        PodBuilder().node_selector(zone="z1").required([("gpu", "Exists", [])]),
        [n("a").labels(zone="z1"), n("b").labels(zone="z1", gpu="1"), n("c").labels(gpu="1")],
        ["b"],
    ),
    ("node name", PodBuilder().node_name("b"), [n("a"), n("b")], ["b"]),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filters(pod: PodBuilder, nodes: list[NodeBuilder], want: list[str]) -> None:
    assert feasible(pod, *nodes) == want


def bound(name: str, node: str, **req: str) -> PodInfo:
    b = PodBuilder(name).node_name(node)
    b.req(**req) if req else b.container()
    return b.info()


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


# ----- the message --------------------------------------------------------------------------
def test_message_shape_sorted_reasons() -> None:
    nodes = [
        n("n1").alloc(cpu="1", memory="1Gi", pods="10"),
        n("n2").taint("dedicated", "gpu"),
        n("n3").taint("dedicated", "gpu"),
        n("n4").taint("dedicated", "gpu"),
        n("n5").alloc(cpu="1", memory="1Gi", pods="10"),
    ]
    assert message(PodBuilder().req(cpu="2"), *nodes) == (
        "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint "
        "{dedicated: gpu}."
    )


def test_message_only_first_failing_filter_per_node() -> None:
    # the tainted node is also too small, but only the taint (earlier plugin) is reported
    nodes = [n("a").alloc(cpu="1", memory="1Gi", pods="9").taint("k", "v"), n("b").unschedulable()]
    assert message(PodBuilder().req(cpu="2"), *nodes) == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {k: v}, "
        "1 node(s) were unschedulable."
    )


def test_message_lists_every_insufficient_resource() -> None:
    nodes = [n("a").alloc(cpu="1", memory="1Gi", pods="0")]
    assert message(PodBuilder().req(cpu="2", memory="2Gi", example_com__gpu="1"), *nodes) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient example.com/gpu, "
        "1 Insufficient memory, 1 Too many pods."
    )


def test_message_affinity_and_ports() -> None:
    existing = PodBuilder("x").node_name("b").host_port(80).info()
    nodes = [n("a").labels(zone="z2"), n("b").labels(zone="z1")]
    msg = message(PodBuilder().node_selector(zone="z1").host_port(80), *nodes, pods=(existing,))
    assert msg == (
        "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, "
        "1 node(s) didn't match Pod's node affinity/selector."
    )


def test_no_nodes() -> None:
    assert message(PodBuilder()) == "no nodes available to schedule pods"


# ----- scores -------------------------------------------------------------------------------
def score_of(
    plugin: object, pod: PodBuilder, *nodes: NodeBuilder, pods: tuple[PodInfo, ...] = ()
) -> list[int]:
    cache = make_cache(*nodes, pods=pods)
    s = plugin.score(CycleState(), pod.info(), cache.nodes, None)  # type: ignore[attr-defined]
    if hasattr(plugin, "normalize"):
        s = plugin.normalize(CycleState(), pod.info(), s)
    return [int(x) for x in s]


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


def test_balanced_allocation() -> None:
    nodes = [
        n("a").alloc(cpu="4", memory="4Gi", pods="10"),
        n("b").alloc(cpu="4", memory="16Gi", pods="10"),
    ]
    pod = PodBuilder().req(cpu="2", memory="2Gi")
    # a: 0.5/0.5 -> std 0 -> 100; b: 0.5/0.125 -> std 0.1875 -> 81
    assert score_of(NodeResourcesBalancedAllocation(), pod, *nodes) == [100, 81]


def test_taint_toleration_score_prefers_fewer_prefer_no_schedule() -> None:
    nodes = [
        n("a"),
        n("b").taint("x", "1", "PreferNoSchedule"),
        n("c").taint("x", "1", "PreferNoSchedule").taint("y", "1", "PreferNoSchedule"),
    ]
    assert score_of(TaintToleration(), PodBuilder(), *nodes) == [100, 50, 0]
    tolerant = PodBuilder().toleration("y", "Exists", effect="PreferNoSchedule")
    assert score_of(TaintToleration(), tolerant, *nodes) == [100, 0, 0]


def test_node_affinity_preferred_weights() -> None:
    nodes = [n("a").labels(zone="z1"), n("b").labels(zone="z1", disk="ssd"), n("c")]
    pod = PodBuilder().preferred(20, ("zone", "In", ["z1"])).preferred(80, ("disk", "Exists", []))
    assert score_of(NodeAffinity(), pod, *nodes) == [20, 100, 0]


def test_image_locality() -> None:
    nodes = [n("a").image("nginx:latest", 500 * MI), n("b")]
    pod = PodBuilder().container(image="nginx")
    # 500Mi * (1 node / 2 nodes) = 250Mi; (250-23)*100/(1000-23) = 23
    assert score_of(ImageLocality(), pod, *nodes) == [23, 0]


def test_node_ports_prefilter_skips_without_ports() -> None:
    cache = make_cache(n("a"))
    assert (
        NodePorts().pre_filter(CycleState(), PodBuilder().info(), cache.nodes).code.name == "SKIP"
    )


# ----- selection ----------------------------------------------------------------------------
def test_ties_go_to_first_feasible_node() -> None:
    cache = make_cache(n("a").taint("k", "v"), n("b"), n("c"), n("d"))
    assert Algorithm(cache, Profile()).schedule(PodBuilder().req(cpu="1").info()).node == "b"


def test_prefers_least_allocated_node() -> None:
    cache = make_cache(n("a"), n("b"), pods=(bound("x", "a", cpu="2"),))
    assert Algorithm(cache, Profile()).schedule(PodBuilder().req(cpu="1").info()).node == "b"


def test_spreads_identical_pods() -> None:
    cache = make_cache(n("a"), n("b"), n("c"))
    algo = Algorithm(cache, Profile())
    placed = []
    for i in range(6):
        info = PodBuilder(f"p{i}").req(cpu="500m").info()
        node = algo.schedule(info).node
        assert node is not None
        cache.assume(info, node)
        placed.append(node)
    assert sorted(placed) == ["a", "a", "b", "b", "c", "c"]


def test_node_static_results_invalidated_by_node_change() -> None:
    cache = make_cache(n("a").taint("k", "v"))
    algo = Algorithm(cache, Profile())
    pod = PodBuilder().info()
    assert algo.schedule(pod).node is None
    cache.update_node(n("a").obj())  # taint removed
    assert algo.schedule(pod).node == "a"


def test_percentage_of_nodes_to_score_rotates_start() -> None:
    cache = make_cache(*[n(f"n{i:04d}") for i in range(1000)])
    algo = Algorithm(cache, Profile())
    r1 = algo.schedule(PodBuilder("x").container().info())
    # 1000 nodes: max(5, 50 - 8) = 42% -> 420 nodes scored, the next pod starts after them
    assert r1.feasible == 1000
    assert algo.next_start == 420
    r2 = algo.schedule(PodBuilder("y").container().info())
    assert r2.node == "n0420"


def test_profile_weights_from_config() -> None:
    cfg = ProfileConfig(plugins=[("NodeResourcesFit", 5)])
    prof = Profile(cfg)
    assert [p.name for p in prof.filters] == ["NodeResourcesFit"]
    assert prof.weights == {"NodeResourcesFit": 5}


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


def test_least_allocated_node_without_memory_uses_cpu_only() -> None:
    nodes = [n("a").alloc(cpu="4", pods="10"), n("b").alloc(cpu="4", memory="8Gi", pods="10")]
    # a: only cpu counts: 75; b: (75 + 97) // 2 = 86
    assert score_of(NodeResourcesFit(), PodBuilder().req(cpu="1"), *nodes) == [75, 86]


def test_balanced_allocation_over_capacity_caps_fractions() -> None:
    nodes = [n("a").alloc(cpu="1", memory="1Gi", pods="10")]
    pod = PodBuilder().req(cpu="4", memory="512Mi")
    # cpu fraction capped at 1, memory 0.5 -> std 0.25 -> 75
    assert score_of(NodeResourcesBalancedAllocation(), pod, *nodes) == [75]
