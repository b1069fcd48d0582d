"""NodeUnschedulable: a cordoned node takes no pods unless the pod tolerates the cordon taint."""

from __future__ import annotations

import pytest

from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.plugins.harness import feasible, n

FILTER_CASES = [
    ("unschedulable", PodBuilder(), [n("a").unschedulable(), n("b")], ["b"]),
    (
        "unschedulable tolerated by exists-all",
        PodBuilder().toleration(operator="Exists"),
        [n("a").unschedulable()],
        ["a"],
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter(pod: PodBuilder, nodes: list[NodeBuilder], want: list[str]) -> None:
    assert feasible(pod, *nodes) == want
