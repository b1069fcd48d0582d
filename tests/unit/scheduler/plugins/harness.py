"""What the plugin table tests share: run the real Algorithm over built nodes and pods and read
which nodes passed, the message, or one plugin's normalised scores."""

from __future__ import annotations

from scheduler.core import Algorithm, Profile
from scheduler.framework import CycleState
from scheduler.podinfo import PodInfo
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


def n(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def bound(name: str, node: str, **req: str) -> PodInfo:
    b = PodBuilder(name).node_name(node)
    b.req(**req) if req else b.container()
    return b.info()


def score_of(
    plugin: object, pod: PodBuilder, *nodes: NodeBuilder, pods: tuple[PodInfo, ...] = ()
) -> list[int]:
    cache = make_cache(*nodes, pods=pods)
    s = plugin.score(CycleState(), pod.info(), cache.nodes, None)  # type: ignore[attr-defined]
    if hasattr(plugin, "normalize"):
        s = plugin.normalize(CycleState(), pod.info(), s)
    return [int(x) for x in s]
