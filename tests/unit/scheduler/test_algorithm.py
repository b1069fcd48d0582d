"""The default profile as a whole: the message over several plugins, node selection,
percentageOfNodesToScore, weights from config."""

from __future__ import annotations

from scheduler.config import ProfileConfig
from scheduler.core import Algorithm, Profile
from tests.unit.scheduler.builders import PodBuilder, make_cache
from tests.unit.scheduler.plugins.harness import bound, message, n


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
