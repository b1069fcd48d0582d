"""NodeAffinity: nodeSelector and required terms filter (kube's operator semantics), preferred
terms score."""

from __future__ import annotations

import pytest

from scheduler.plugins.nodeaffinity import NodeAffinity
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.plugins.harness import feasible, n, score_of

FILTER_CASES = [
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
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter(pod: PodBuilder, nodes: list[NodeBuilder], want: list[str]) -> None:
    assert feasible(pod, *nodes) == want


def test_node_affinity_preferred_weights() -> None:
    nodes = [n("a").labels(zone="z1"), n("b").labels(zone="z1", disk="ssd"), n("c")]
    pod = PodBuilder().preferred(20, ("zone", "In", ["z1"])).preferred(80, ("disk", "Exists", []))
    assert score_of(NodeAffinity(), pod, *nodes) == [20, 100, 0]
