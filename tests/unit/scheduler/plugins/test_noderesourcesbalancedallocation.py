"""NodeResourcesBalancedAllocation: the change in balance the pod causes, as kube v1.36 scores it
(kubernetes PR #135573), and PreScore's skip of pods that request nothing."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.framework import Code, CycleState
from scheduler.plugins.noderesourcesbalancedallocation import NodeResourcesBalancedAllocation
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder, make_cache
from tests.unit.scheduler.plugins.harness import bound, n, score_of

SCORE_CASES = [
    (
        "no change in balance scores 75 (balanced before and after)",
        PodBuilder().req(cpu="2", memory="2Gi"),
        [n("a").alloc(cpu="4", memory="4Gi", pods="10")],
        (),
        [75],
    ),
    (
        "balanced to slightly imbalanced loses half the drop: 50 + (50 + 81 - 100) / 2",
        PodBuilder().req(cpu="2", memory="2Gi"),
        [n("a").alloc(cpu="4", memory="16Gi", pods="10")],
        (),
        [65],
    ),
    (
        "perfectly imbalanced to perfectly balanced scores 100",
        PodBuilder().req(memory="4Gi"),
        [n("a").alloc(cpu="4", memory="4Gi", pods="10")],
        (bound("busy", "a", cpu="4"),),
        [100],
    ),
    (
        "perfectly balanced to perfectly imbalanced scores 50",
        PodBuilder().req(cpu="1"),
        [n("a").alloc(cpu="1", memory="1Gi", pods="10")],
        (),
        [50],
    ),
    (
        "a fraction past allocatable is capped at 1 (0.25 std after, balanced before)",
        PodBuilder().req(cpu="4", memory="512Mi"),
        [n("a").alloc(cpu="1", memory="1Gi", pods="10")],
        (),
        [62],
    ),
    (
        "equally balanced after, the node the pod makes more even scores higher",
        PodBuilder().req(memory="1Gi"),
        [
            # a: 0.5/0 (75) -> 0.5/0.25 (87): 81;  b: 0/0 (100) -> 0/0.25 (87): 68
            n("a").alloc(cpu="4", memory="4Gi", pods="10"),
            n("b").alloc(cpu="4", memory="4Gi", pods="10"),
        ],
        (bound("half", "a", cpu="2"),),
        [81, 68],
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "pods", "want"),
    [c[1:] for c in SCORE_CASES],
    ids=[c[0] for c in SCORE_CASES],
)
def test_score(pod: PodBuilder, nodes: list[NodeBuilder], pods: Any, want: list[int]) -> None:
    assert score_of(NodeResourcesBalancedAllocation(), pod, *nodes, pods=pods) == want


SKIP_CASES = [
    (
        "a pod with no requests is skipped (kube's best-effort rule)",
        PodBuilder().container(),
        {},
        True,
    ),
    ("a pod requesting cpu is scored", PodBuilder().req(cpu="100m"), {}, False),
    (
        "only the configured resources count: an extended-only request is still skipped",
        PodBuilder().req(example_com__gpu="1"),
        {},
        True,
    ),
    (
        "an extended resource in the configured list makes the pod scored",
        PodBuilder().req(example_com__gpu="1"),
        {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "example.com/gpu"}]},
        False,
    ),
]


@pytest.mark.parametrize(
    ("pod", "args", "skipped"),
    [c[1:] for c in SKIP_CASES],
    ids=[c[0] for c in SKIP_CASES],
)
def test_pre_score_skips_pods_requesting_nothing(
    pod: PodBuilder, args: dict[str, Any], skipped: bool
) -> None:
    cache = make_cache(n("a"))
    st = NodeResourcesBalancedAllocation(args).pre_score(CycleState(), pod.info(), cache.nodes)
    assert (st.code == Code.SKIP) is skipped


def test_cpu_memory_fast_path_equals_the_general_formula() -> None:
    """The default resources take a shorter path; it must give the general path's integers on
    every node, including fractions capped at 1 and whole-number balances."""
    import random

    import numpy as np

    rng = random.Random(7)
    nodes = [
        n(f"n{i}").alloc(cpu=rng.choice(["1", "2", "3", "4"]), memory=f"{rng.choice([1, 3, 8])}Gi")
        for i in range(300)
    ]
    placed = tuple(
        bound(
            f"x{i}",
            f"n{rng.randrange(300)}",
            cpu=f"{rng.randint(1, 1500)}m",
            memory=f"{rng.randint(1, 1500)}Mi",
        )
        for i in range(900)
    )
    cache = make_cache(*nodes, pods=placed)
    plugin = NodeResourcesBalancedAllocation()
    general = NodeResourcesBalancedAllocation({"resources": [{"name": "memory"}, {"name": "cpu"}]})
    for cpu, memory in [("250m", "256Mi"), ("1", "1Gi"), ("3", "100Mi"), ("500m", "0")]:
        pod = PodBuilder().req(cpu=cpu, memory=memory).info()
        for idx in (None, np.arange(0, 300, 3, dtype=np.intp)):
            fast = plugin.score(CycleState(), pod, cache.nodes, idx)
            slow = general.score(CycleState(), pod, cache.nodes, idx)
            assert fast.tolist() == slow.tolist()


def test_kept_balances_follow_every_change_of_the_nodes() -> None:
    """The balance without the pod is kept per node between cycles; after pods are assumed,
    forgotten, bound and removed, and nodes change, it must equal the general path's."""
    import random

    import numpy as np

    rng = random.Random(11)
    cache = make_cache(*(n(f"n{i}").alloc(cpu="4", memory="8Gi") for i in range(50)))
    plugin = NodeResourcesBalancedAllocation()
    general = NodeResourcesBalancedAllocation({"resources": [{"name": "memory"}, {"name": "cpu"}]})
    pod = PodBuilder().req(cpu="300m", memory="700Mi").info()
    placed: list[str] = []
    for step in range(200):
        roll = rng.random()
        if roll < 0.5 or not placed:
            info = (
                PodBuilder(f"p{step}")
                .req(cpu=f"{rng.randint(1, 900)}m", memory=f"{rng.randint(1, 900)}Mi")
                .info()
            )
            cache.assume(info, f"n{rng.randrange(50)}")
            placed.append(info.key)
        elif roll < 0.8:
            cache.forget(placed.pop(rng.randrange(len(placed))))
        elif roll < 0.9:  # a node's allocatable changes
            cache.update_node(
                n(f"n{rng.randrange(50)}").alloc(cpu=str(rng.randint(2, 8)), memory="8Gi").obj()
            )
        else:  # a node goes and comes back
            name = f"n{rng.randrange(50)}"
            cache.remove_node(name)
            cache.add_node(n(name).alloc(cpu="4", memory="8Gi").obj())
        idx = np.arange(rng.randrange(3), 50, 2, dtype=np.intp)
        fast = plugin.score(CycleState(), pod, cache.nodes, idx)
        slow = general.score(CycleState(), pod, cache.nodes, idx)
        assert fast.tolist() == slow.tolist(), step
