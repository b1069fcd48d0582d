"""ShapeCache: the plugins' cached answers for a pod shape equal what they compute afresh, as
pods come and go, nodes change, and the preemption dry run takes pods off a node."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scheduler.cache import SchedulerCache
from scheduler.framework import CycleState
from scheduler.plugins.noderesourcesbalancedallocation import NodeResourcesBalancedAllocation
from scheduler.plugins.noderesourcesfit import NodeResourcesFit
from scheduler.podinfo import PodInfo
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder

SHAPES = [
    {"cpu": "100m", "memory": "500Mi"},
    {"cpu": "1", "memory": "1Gi"},
    {"cpu": "3500m"},  # cpu only
    {"memory": "7Gi"},
    {},  # no requests: scored as 100m / 200Mi, fits as zero
]
ALLOCATABLE = [
    {"cpu": "4", "memory": "8Gi", "pods": "110"},
    {"cpu": "2", "memory": "32Gi", "pods": "3"},
    {"cpu": "16", "memory": "4Gi", "pods": "110"},
    {"cpu": "4", "pods": "110"},  # no memory: the general paths
]


def pod(i: int, shape: dict[str, str], node: str = "") -> PodInfo:
    b = PodBuilder(f"p{i}")
    b.req(**shape) if shape else b.container()
    if node:
        b.node_name(node)
    return b.info()


def answers(
    fit: NodeResourcesFit, ba: NodeResourcesBalancedAllocation, cache: SchedulerCache, p: PodInfo
) -> tuple[list[int], list[int], list[int]]:
    nodes = cache.nodes
    state = CycleState()
    res = fit.filter(state, p, nodes)
    assert res is not None
    valid = np.flatnonzero(nodes.valid[: nodes.n])
    codes = [int(res.codes[s]) for s in valid]
    return (
        codes,
        [int(x) for x in fit.score(state, p, nodes, valid)],
        [int(x) for x in ba.score(state, p, nodes, valid)],
    )


@pytest.mark.parametrize("seed", range(6))
def test_cached_answers_equal_fresh_ones(seed: int) -> None:
    rng = random.Random(seed)
    cache = SchedulerCache()
    for i in range(12):
        cache.add_node(NodeBuilder(f"n{i}").alloc(**rng.choice(ALLOCATABLE)).obj())
    fit, ba = NodeResourcesFit(), NodeResourcesBalancedAllocation()
    probes = [pod(1000 + i, s) for i, s in enumerate(SHAPES)]
    bound: list[str] = []
    hits = 0
    for step in range(150):
        op = rng.random()
        if op < 0.5:
            p = pod(step, rng.choice(SHAPES))
            cache.assume(p, f"n{rng.randrange(12)}")
            bound.append(p.key)
        elif op < 0.7 and bound:
            cache.forget(bound.pop(rng.randrange(len(bound))))
        elif op < 0.8:
            name = f"n{rng.randrange(12)}"
            cache.add_node(NodeBuilder(name).alloc(**rng.choice(ALLOCATABLE)).obj())
        elif op < 0.9:
            slot = cache.nodes.index[f"n{rng.randrange(12)}"]
            with cache.removing(slot) as removal:
                for p in list(cache.nodes.pod_index.pods_on_slot(slot))[:2]:
                    removal.remove(p)
                for probe in probes:
                    fresh = answers(
                        NodeResourcesFit(), NodeResourcesBalancedAllocation(), cache, probe
                    )
                    assert answers(fit, ba, cache, probe) == fresh
        for probe in probes:
            fresh = answers(NodeResourcesFit(), NodeResourcesBalancedAllocation(), cache, probe)
            assert answers(fit, ba, cache, probe) == fresh, (seed, step, probe.key)
            hits += fit._fits._cached.get((probe.cpu, probe.memory)) is not None
    assert hits > 0  # the cache was used, not only the fresh path
