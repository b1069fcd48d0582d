"""NodeName: spec.nodeName pins the pod to one node."""

from __future__ import annotations

import pytest

from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tests.unit.scheduler.plugins.harness import feasible, n

FILTER_CASES = [
    ("node name", PodBuilder().node_name("b"), [n("a"), n("b")], ["b"]),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter(pod: PodBuilder, nodes: list[NodeBuilder], want: list[str]) -> None:
    assert feasible(pod, *nodes) == want
