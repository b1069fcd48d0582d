"""PodIndex: per-slot counts of pods matching a selector stay equal to a fresh count through
every way a pod comes to or leaves a node (assigned, updated, assumed, forgotten, nominated and
reserved for a cycle, node removed and re-added)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.cache import SchedulerCache
from scheduler.podinfo import PodInfo
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder, make_cache
from tinykube.selectors import EVERYTHING, LabelSelector, parse_label_selector

WEB = parse_label_selector("app=web")


def pod(name: str, node: str = "", ns: str = "default", **labels: str) -> PodInfo:
    b = PodBuilder(name, ns).labels(**labels).container()
    if node:
        b.node_name(node)
    return b.info()


def per_node(
    cache: SchedulerCache, sel: LabelSelector, ns: frozenset[str] | None = None
) -> dict[str, int]:
    arr = cache.pod_index.counts(ns, sel)
    return {name: int(arr[slot]) for name, slot in sorted(cache.nodes.index.items())}


def fresh(
    cache: SchedulerCache, sel: LabelSelector, ns: frozenset[str] | None = None
) -> dict[str, int]:
    """The same counts, computed from scratch from the cache's pods."""
    out = {name: 0 for name in cache.nodes.index}
    for state in cache.pods.values():
        meta = state.info.pod.metadata
        in_ns = ns is None or meta.namespace in ns
        if state.node in out and in_ns and not state.info.terminating and sel.matches(meta.labels):
            out[state.node] += 1
    return dict(sorted(out.items()))


Step = Callable[[SchedulerCache], object]
STEPS: list[tuple[str, list[Step]]] = [
    ("assigned pods", [lambda c: c.add_pod(pod("x", "a", app="web"))]),
    (
        "relabelled pod moves out of the count",
        [
            lambda c: c.add_pod(pod("x", "a", app="web")),
            lambda c: c.update_pod(pod("x", "a", app="db")),
        ],
    ),
    (
        "deleted pod",
        [lambda c: c.add_pod(pod("x", "a", app="web")), lambda c: c.remove_pod("default/x")],
    ),
    ("assumed pod counts", [lambda c: c.assume(pod("x", app="web"), "b")]),
    (
        "forgotten assumption",
        [lambda c: c.assume(pod("x", app="web"), "b"), lambda c: c.forget("default/x")],
    ),
    (
        "node removed: its pods stop counting, and count again when it returns",
        [
            lambda c: c.add_pod(pod("x", "a", app="web")),
            lambda c: c.remove_node("a"),
            lambda c: c.add_node(NodeBuilder("a").obj()),
        ],
    ),
    (
        "a removed node's slot is reused by another node, which starts at 0",
        [
            lambda c: c.add_pod(pod("x", "a", app="web")),
            lambda c: c.remove_node("a"),
            lambda c: c.add_node(NodeBuilder("c").obj()),
        ],
    ),
    (
        "a pod on a node not yet known counts once the node appears",
        [
            lambda c: c.add_pod(pod("x", "z", app="web")),
            lambda c: c.add_node(NodeBuilder("z").obj()),
        ],
    ),
    (
        "terminating pods do not count",
        [
            lambda c: c.add_pod(
                PodBuilder("x").labels(app="web").node_name("a").terminating().info()
            )
        ],
    ),
    ("other namespaces are filtered", [lambda c: c.add_pod(pod("x", "a", ns="other", app="web"))]),
]


@pytest.mark.parametrize("steps", [s for _, s in STEPS], ids=[n for n, _ in STEPS])
@pytest.mark.parametrize("register_first", [True, False], ids=["registered-before", "after"])
def test_counts_match_a_fresh_count(steps: list[Step], register_first: bool) -> None:
    cache = make_cache(NodeBuilder("a"), NodeBuilder("b"), pods=(pod("y", "a", app="web"),))
    ns = frozenset({"default"})
    if register_first:
        per_node(cache, WEB, ns)
    for step in steps:
        step(cache)
        assert per_node(cache, WEB, ns) == fresh(cache, WEB, ns)
        assert per_node(cache, EVERYTHING) == fresh(cache, EVERYTHING)


def test_nominated_reservation_counts_only_while_reserved() -> None:
    cache = make_cache(NodeBuilder("a"))
    per_node(cache, WEB)
    nominated = pod("n", app="web")
    cache.nominate(nominated, "a")
    added = cache.reserve_nominated(pod("incoming"))
    assert per_node(cache, WEB) == {"a": 1}
    cache.release_nominated(added)
    assert per_node(cache, WEB) == {"a": 0}


def test_counts_survive_growth_of_the_node_table() -> None:
    cache = make_cache(NodeBuilder("n0"), pods=(pod("x", "n0", app="web"),))
    per_node(cache, WEB)
    for i in range(1, 200):
        cache.add_node(NodeBuilder(f"n{i}").obj())
        cache.add_pod(pod(f"p{i}", f"n{i}", app="web" if i % 2 else "db"))
    assert per_node(cache, WEB) == fresh(cache, WEB)


def test_least_recently_used_selectors_are_dropped() -> None:
    cache = make_cache(NodeBuilder("a"), pods=(pod("x", "a", app="web"),))
    cache.pod_index.max_selectors = 2
    for app in ("web", "db", "cache"):
        per_node(cache, parse_label_selector(f"app={app}"))
    assert cache.pod_index.selectors == 2
    # a dropped selector is rebuilt by a scan on its next use, with the right answer
    assert per_node(cache, WEB) == {"a": 1}


def test_listeners_see_every_placement() -> None:
    cache = make_cache(NodeBuilder("a"))
    seen: list[tuple[int, str, int]] = []
    cache.pod_index.listeners.append(lambda slot, info, sign: seen.append((slot, info.key, sign)))
    cache.add_pod(pod("x", "a"))
    cache.remove_pod("default/x")
    assert seen == [(0, "default/x", 1), (0, "default/x", -1)]


def _with_anti_affinity(name: str) -> PodInfo:
    b = PodBuilder(name).labels(app="db").container()
    term = b.pod.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
    term.topologyKey = "kubernetes.io/hostname"
    term.labelSelector.matchLabels["app"] = "web"
    return b.info()


VISIBLE_CASES: list[tuple[str, bool, bool, PodInfo, bool]] = [
    # (why, a selector app=web registered, a listener added, the pod, visible)
    ("nothing registered: no plugin reads any pod", False, False, pod("w", app="web"), False),
    ("the pod matches a registered selector", True, False, pod("w", app="web"), True),
    ("the pod matches no registered selector", True, False, pod("d", app="db"), False),
    ("a listener tracks the pod's affinity terms", False, True, _with_anti_affinity("g"), True),
    ("a pod without affinity terms is no listener's business", False, True, pod("d"), False),
    (
        "affinity terms with no listener to track them",
        False,
        False,
        _with_anti_affinity("g"),
        False,
    ),
]


@pytest.mark.parametrize(
    "registered,listening,info,want",
    [c[1:] for c in VISIBLE_CASES],
    ids=[c[0] for c in VISIBLE_CASES],
)
def test_visible(registered: bool, listening: bool, info: PodInfo, want: bool) -> None:
    """Whether placing the pod changes anything plugins read (preemption's dry run relies on it
    to skip re-running the filters)."""
    cache = make_cache(NodeBuilder("a"))
    if registered:
        cache.pod_index.counts(None, WEB)
    if listening:
        cache.pod_index.listeners.append(lambda slot, info, sign: None)
    assert cache.pod_index.visible(info) is want


def test_selectors_filed_under_their_rarest_pair_stay_exact_through_churn_and_eviction() -> None:
    """Many Deployment-like selectors (a common pair and a rare one): each is filed under its
    rarest pair, registration scans only the pods carrying it, and the counts equal a fresh
    count through placements, relabels, removals and LRU evictions; selectors that pin no
    single value (a two-value `in`, an existence test) are counted by a full scan."""
    cache = make_cache(NodeBuilder("a"), NodeBuilder("b"))
    cache.pod_index.max_selectors = 3
    selectors = [parse_label_selector(f"group=load,deploy=d{i}") for i in range(4)]
    selectors += [parse_label_selector("deploy in (d0,d1)"), parse_label_selector("tier")]
    for i in range(12):
        cache.add_pod(pod(f"p{i}", "ab"[i % 2], group="load", deploy=f"d{i % 4}"))

    def check() -> None:
        for sel in selectors:
            assert per_node(cache, sel) == fresh(cache, sel), str(sel)

    check()
    cache.update_pod(pod("p0", "a", group="load", deploy="d1", tier="web"))
    cache.remove_pod("default/p5")
    cache.assume(pod("new", group="load", deploy="d2"), "b")
    check()
    filed = cache.pod_index._filed_under
    assert all(pair is None or pair[0] == "deploy" for pair in filed.values()), filed
    assert cache.pod_index.selectors == 3
