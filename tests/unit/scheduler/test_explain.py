"""Explain/Simulate responses and the `tinykube explain` table, from real attempts."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from scheduler.core import Profile
from scheduler.cycle import Scheduler
from scheduler.service import SchedulerService, to_response
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tinykube.cli.explain import render
from tinykube.v1 import scheduler_pb2


def sched(*nodes: NodeBuilder) -> Scheduler:
    s = Scheduler(Profile())
    for n in nodes:
        s.on_node_add(n.obj())
    return s


def test_explain_unschedulable_pod() -> None:
    s = sched(
        NodeBuilder("n1").alloc(cpu="1", memory="1Gi", pods="9"), NodeBuilder("n2").taint("k", "v")
    )
    info = PodBuilder("web").req(cpu="2").info()
    s.algorithm.schedule(info)
    resp = to_response(s.algorithm.attempts[info.key], "default", "web", 10)
    assert resp.selectedNode == ""
    assert resp.message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k: v}. "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )
    by_node = {n.node: n for n in resp.nodes}
    n1 = {f.plugin: f for f in by_node["n1"].filters}
    assert n1["TaintToleration"].verdict == "PASSED"
    assert n1["NodeResourcesFit"].verdict == "FAILED"
    assert list(n1["NodeResourcesFit"].reasons) == ["Insufficient cpu"]
    n2 = {f.plugin: f for f in by_node["n2"].filters}
    assert list(n2["TaintToleration"].reasons) == ["node(s) had untolerated taint {k: v}"]
    assert not by_node["n1"].feasible and not by_node["n2"].feasible
    text = render(resp)
    assert text.startswith("Pod default/web: unschedulable: 0/2 nodes are available")
    assert "Insufficient cpu" in text and "Scores" not in text


def test_explain_scored_pod_and_table() -> None:
    s = sched(NodeBuilder("a"), NodeBuilder("b"), NodeBuilder("c").taint("k", "v"))
    s.cache.add_pod(PodBuilder("x").req(cpu="3").node_name("a").info())
    info = PodBuilder("web").req(cpu="500m").info()
    result = s.algorithm.schedule(info)
    assert result.node == "b"
    resp = to_response(s.algorithm.attempts[info.key], "default", "web", 10)
    assert resp.selectedNode == "b" and resp.feasibleNodes == 2 and resp.totalNodes == 3
    by_node = {n.node: n for n in resp.nodes}
    assert by_node["a"].scored and by_node["b"].scored and not by_node["c"].scored
    assert by_node["b"].totalScore > by_node["a"].totalScore
    weights = {sc.plugin: sc.weight for sc in by_node["a"].scores}
    assert weights["TaintToleration"] == 3 and weights["NodeResourcesFit"] == 1
    assert sum(sc.weighted for sc in by_node["b"].scores) == by_node["b"].totalScore
    text = render(resp)
    assert "scheduled to b; 2/3 nodes feasible" in text
    assert "TOTAL" in text and f"{by_node['b'].totalScore} <" in text


ZONE = "topology.kubernetes.io/zone"
SPREAD = "node(s) didn't match pod topology spread constraints"


def zoned(name: str, zone: str | None) -> NodeBuilder:
    b = NodeBuilder(name).label("kubernetes.io/hostname", name)
    return b if zone is None else b.label(ZONE, zone)


def spread_pod(when: str) -> PodBuilder:
    b = PodBuilder("web").labels(app="web").container()
    c = b.pod.spec.topologySpreadConstraints.add(
        maxSkew=1, topologyKey=ZONE, whenUnsatisfiable=when
    )
    c.labelSelector.matchLabels["app"] = "web"
    return b


# PodTopologySpread in Explain: (what the row checks, when, zones of a/b/c, filter verdicts by
# node, PodTopologySpread's normalized scores by node (None: not scored)).
SPREAD_CASES: list[
    tuple[str, str, tuple[str | None, ...], dict[str, list[str]], dict[str, int] | None]
] = [
    (
        "DoNotSchedule: the crowded zones fail with kube's reason, the empty one passes",
        "DoNotSchedule",
        ("z1", "z2", "z3"),
        {"a": [SPREAD], "b": [SPREAD], "c": []},
        None,  # one feasible node: not scored
    ),
    (
        "DoNotSchedule: a node without the key fails with the missing-label reason",
        "DoNotSchedule",
        ("z1", "z2", None),
        {"a": [SPREAD], "b": [], "c": [SPREAD + " (missing required label)"]},
        None,
    ),
    (
        "ScheduleAnyway: every node passes, scored by its zone's matching pods (fewest: 100)",
        "ScheduleAnyway",
        ("z1", "z2", "z3"),
        {"a": [], "b": [], "c": []},
        # raw: round(count * log(3 domains + 2)) = 3, 2, 0; normalized 100 * (3 - s) / 3
        {"a": 0, "b": 33, "c": 100},
    ),
]


@pytest.mark.parametrize(
    ("when", "zones", "verdicts", "scores"),
    [c[1:] for c in SPREAD_CASES],
    ids=[c[0] for c in SPREAD_CASES],
)
def test_explain_shows_pod_topology_spread(
    when: str,
    zones: tuple[str | None, ...],
    verdicts: dict[str, list[str]],
    scores: dict[str, int] | None,
) -> None:
    s = sched(*(zoned(n, z) for n, z in zip("abc", zones, strict=True)))
    for i, node in enumerate("aab"):  # zone of a: 2 matching pods, of b: 1, of c: none
        s.cache.add_pod(PodBuilder(f"w{i}").labels(app="web").node_name(node).container().info())
    info = spread_pod(when).info()
    s.algorithm.schedule(info)
    resp = to_response(s.algorithm.attempts[info.key], "default", "web", 10)
    by_node = {n.node: n for n in resp.nodes}
    got = {}
    for name, ne in by_node.items():
        f = {v.plugin: v for v in ne.filters}["PodTopologySpread"]
        assert f.verdict == ("FAILED" if verdicts[name] else "PASSED"), name
        got[name] = list(f.reasons)
    assert got == verdicts
    text = render(resp)
    if scores is None:
        assert all(sc.plugin != "PodTopologySpread" for n in resp.nodes for sc in n.scores)
        if when == "DoNotSchedule" and not verdicts["c"]:
            assert resp.selectedNode == "c"
        for reasons in verdicts.values():
            for r in reasons:
                assert r in text
        return
    spread = {n.node: {sc.plugin: sc for sc in n.scores}["PodTopologySpread"] for n in resp.nodes}
    assert {n: sc.score for n, sc in spread.items()} == scores
    assert all(sc.weight == 2 and sc.weighted == 2 * sc.score for sc in spread.values())
    assert resp.selectedNode == "c"
    assert "PodTopologySpread" in text and f"{scores['c']}x2={2 * scores['c']}" in text


def test_explain_max_nodes_limits_rows() -> None:
    s = sched(*(NodeBuilder(f"n{i}") for i in range(30)))
    info = PodBuilder("web").info()
    s.algorithm.schedule(info)
    resp = to_response(s.algorithm.attempts[info.key], "default", "web", 5)
    assert [n.node for n in resp.nodes] == ["n0", "n1", "n2", "n3", "n4"]
    assert "(first 5 of 30)" in render(resp)


class Aborted(Exception):
    pass


class FakeContext:
    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        raise Aborted(code, message)

    def time_remaining(self) -> float | None:
        return None  # no deadline


async def test_simulate_does_not_bind_or_perturb() -> None:
    s = sched(NodeBuilder("a"), NodeBuilder("b").taint("dedicated", "gpu"))
    svc = SchedulerService(lambda: s, lambda: "")
    pod = PodBuilder("what-if").req(cpu="1").toleration("dedicated", "Exists").obj()
    start = s.algorithm.next_start
    ctx: Any = FakeContext()
    resp = await svc.Simulate(scheduler_pb2.SimulateRequest(pod=pod), ctx)
    assert resp.selectedNode in ("a", "b") and resp.feasibleNodes == 2
    assert s.algorithm.next_start == start
    assert not s.cache.pods and not s.algorithm.attempts


async def test_simulate_shows_pod_topology_spread() -> None:
    s = sched(zoned("a", "z1"), zoned("b", "z2"), zoned("c", None))
    s.cache.add_pod(PodBuilder("w0").labels(app="web").node_name("a").container().info())
    svc = SchedulerService(lambda: s, lambda: "")
    ctx: Any = FakeContext()
    pod = spread_pod("DoNotSchedule").obj()
    resp = await svc.Simulate(scheduler_pb2.SimulateRequest(pod=pod), ctx)
    verdicts = {
        n.node: list({f.plugin: f for f in n.filters}["PodTopologySpread"].reasons)
        for n in resp.nodes
    }
    assert verdicts == {"a": [SPREAD], "b": [], "c": [SPREAD + " (missing required label)"]}
    assert resp.selectedNode == "b" and list(s.cache.pods) == ["default/w0"]


async def test_explain_unknown_pod_and_standby() -> None:
    s = sched(NodeBuilder("a"))
    ctx: Any = FakeContext()
    svc = SchedulerService(lambda: s, lambda: "")
    with pytest.raises(Aborted) as err:
        await svc.Explain(scheduler_pb2.ExplainRequest(namespace="default", name="nope"), ctx)
    assert err.value.args[0] == grpc.StatusCode.NOT_FOUND
    standby = SchedulerService(lambda: None, lambda: "host_42")
    with pytest.raises(Aborted) as err:
        await standby.Explain(scheduler_pb2.ExplainRequest(name="x"), ctx)
    assert err.value.args[0] == grpc.StatusCode.UNAVAILABLE
    assert "host_42" in err.value.args[1]


async def test_simulate_rejects_bad_quantity() -> None:
    s = sched(NodeBuilder("a"))
    ctx: Any = FakeContext()
    pod = PodBuilder("bad").req(cpu="lots").obj()
    with pytest.raises(Aborted) as err:
        await SchedulerService(lambda: s, lambda: "").Simulate(
            scheduler_pb2.SimulateRequest(pod=pod), ctx
        )
    assert err.value.args[0] == grpc.StatusCode.INVALID_ARGUMENT
