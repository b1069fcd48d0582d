"""NodeAffinity: nodeSelector and required terms filter (kube's operator semantics), preferred
terms score."""

from __future__ import annotations

import pytest

from scheduler.plugins.nodeaffinity import NodeAffinity, node_matches_required, required_mask
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder, make_cache
from tests.unit.scheduler.plugins.harness import feasible, message, n, score_of

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


def by_name(pod: PodBuilder, *terms: list[tuple[str, list[str]]]) -> PodBuilder:
    """Required terms of matchFields on metadata.name: each term a list of (operator, names)."""
    sel = pod.pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    for term in terms:
        t = sel.nodeSelectorTerms.add()
        for op, names in term:
            t.matchFields.add(key="metadata.name", operator=op, values=names)
    return pod


PREFILTER_CASES = [
    (
        "PreFilter narrows to the named node; the others are not affinity mismatches",
        by_name(PodBuilder().node_selector(zone="z9"), [("In", ["a"])]),
        [n("a").labels(zone="z1"), n("b"), n("c").unschedulable()],
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 node(s) didn't satisfy plugin(s) [NodeAffinity].",
    ),
    (
        "a name no node has leaves no candidate: every node is outside the PreFilter set",
        by_name(PodBuilder(), [("In", ["zz"])]),
        [n("a"), n("b")],
        "0/2 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeAffinity].",
    ),
    (
        "In lists of one term intersect; empty means the terms conflict (PreFilter rejects)",
        by_name(PodBuilder(), [("In", ["a"]), ("In", ["b"])]),
        [n("a"), n("b")],
        "0/2 nodes are available: 2 pod affinity terms conflict.",
    ),
    (
        "NotIn does not narrow: the filter reports the mismatch",
        by_name(PodBuilder(), [("NotIn", ["a", "b"])]),
        [n("a"), n("b")],
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"),
    [c[1:] for c in PREFILTER_CASES],
    ids=[c[0] for c in PREFILTER_CASES],
)
def test_prefilter_message(pod: PodBuilder, nodes: list[NodeBuilder], want: str) -> None:
    assert message(pod, *nodes) == want


def _with_expression_term(pod: PodBuilder) -> PodBuilder:
    return pod.required([("zone", "In", ["z2"])])


NARROW_CASES = [
    (
        "terms unite their name sets",
        by_name(PodBuilder(), [("In", ["a"])], [("In", ["c"])]),
        ["a", "c"],
    ),
    (
        "one term's In lists intersect",
        by_name(PodBuilder(), [("In", ["a", "b"]), ("In", ["b", "c"])]),
        ["b"],
    ),
    (
        "a term without a name field keeps every node possible (terms are ORed)",
        _with_expression_term(by_name(PodBuilder(), [("In", ["a"])])),
        ["a", "b"],
    ),
]


@pytest.mark.parametrize(
    ("pod", "want"), [c[1:] for c in NARROW_CASES], ids=[c[0] for c in NARROW_CASES]
)
def test_prefilter_narrows(pod: PodBuilder, want: list[str]) -> None:
    nodes = [n("a").labels(zone="z1"), n("b").labels(zone="z2"), n("c").labels(zone="z3")]
    assert feasible(pod, *nodes) == want


def _mixed() -> PodBuilder:
    pod = PodBuilder().required([("zone", "In", ["z1"])])
    terms = pod.pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    terms.nodeSelectorTerms[0].matchFields.add(key="metadata.name", operator="In", values=["a"])
    terms.nodeSelectorTerms.add()
    return pod


ONE_NODE_CASES = [
    *[(c[0], c[1], c[2]) for c in FILTER_CASES],
    (
        "matchFields metadata.name In / NotIn",
        by_name(PodBuilder(), [("In", ["a"])], [("NotIn", ["a", "b"])]),
        [n("a"), n("b"), n("c")],
    ),
    (
        "a term of expressions and fields ANDs them; an empty term matches nothing",
        _mixed(),
        [n("a").labels(zone="z1"), n("b").labels(zone="z1"), n("c")],
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes"), [c[1:] for c in ONE_NODE_CASES], ids=[c[0] for c in ONE_NODE_CASES]
)
def test_one_node_match_agrees_with_the_columns(pod: PodBuilder, nodes: list[NodeBuilder]) -> None:
    """node_matches_required (queueing hints look at one node) gives, node by node, what the
    columnar required_mask gives over the table."""
    cache = make_cache(*nodes)
    mask = required_mask(cache.nodes, pod.info())
    info = pod.info()
    for b in nodes:
        node = b.obj()
        slot = cache.nodes.index[node.metadata.name]
        assert node_matches_required(info, node) == bool(mask[slot]), node.metadata.name
