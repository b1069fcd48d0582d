"""TaintToleration: NoSchedule/NoExecute taints filter, PreferNoSchedule taints score."""

from __future__ import annotations

import pytest

from scheduler.plugins.tainttoleration import TaintToleration
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.plugins.harness import feasible, n, score_of

FILTER_CASES = [
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
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter(pod: PodBuilder, nodes: list[NodeBuilder], want: list[str]) -> None:
    assert feasible(pod, *nodes) == want


def test_taint_toleration_score_prefers_fewer_prefer_no_schedule() -> None:
    nodes = [
        n("a"),
        n("b").taint("x", "1", "PreferNoSchedule"),
        n("c").taint("x", "1", "PreferNoSchedule").taint("y", "1", "PreferNoSchedule"),
    ]
    assert score_of(TaintToleration(), PodBuilder(), *nodes) == [100, 50, 0]
    tolerant = PodBuilder().toleration("y", "Exists", effect="PreferNoSchedule")
    assert score_of(TaintToleration(), tolerant, *nodes) == [100, 0, 0]
