"""InterPodAffinity: kube v1.36's filter verdicts, reasons, preemption resolvability and
scores, each row naming the kube behaviour it checks; and the placed pods' terms staying right
as pods come and go."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from scheduler.cache import EventKind, SchedulerCache
from scheduler.core import Algorithm, Profile
from scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ClusterEvent,
    Code,
    CycleState,
    Handle,
    NamespaceObject,
    QueueingHint,
)
from scheduler.plugins.interpodaffinity import (
    ERR_AFFINITY,
    ERR_ANTI_AFFINITY,
    ERR_EXISTING_ANTI_AFFINITY,
    InterPodAffinity,
)
from scheduler.podinfo import PodInfo
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder, make_cache
from tests.unit.scheduler.plugins.harness import n

HOST = "kubernetes.io/hostname"
ZONE = "zone"


def term(
    key: str = HOST,
    labels: dict[str, str] | None = None,
    *,
    namespaces: list[str] | None = None,
    ns_selector: dict[str, str] | None = None,
    no_selector: bool = False,
) -> dict[str, Any]:
    t: dict[str, Any] = {"topologyKey": key}
    if not no_selector:
        t["labelSelector"] = {"matchLabels": labels or {}}
    if namespaces:
        t["namespaces"] = namespaces
    if ns_selector is not None:
        t["namespaceSelector"] = {"matchLabels": ns_selector}
    return t


def pod(
    name: str = "p",
    ns: str = "default",
    *,
    node: str = "",
    labels: dict[str, str] | None = None,
    affinity: list[dict[str, Any]] | None = None,
    anti: list[dict[str, Any]] | None = None,
    pref: list[tuple[int, dict[str, Any]]] | None = None,
    pref_anti: list[tuple[int, dict[str, Any]]] | None = None,
    terminating: bool = False,
) -> PodBuilder:
    from google.protobuf import json_format

    b = PodBuilder(name, ns).labels(**(labels or {})).container()
    if node:
        b.node_name(node)
    if terminating:
        b.terminating()
    spec: dict[str, Any] = {}
    if affinity or pref:
        spec["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": affinity or [],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in pref or []
            ],
        }
    if anti or pref_anti:
        spec["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": anti or [],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in pref_anti or []
            ],
        }
    if spec:
        json_format.ParseDict(spec, b.pod.spec.affinity)
    return b


def hosts(*names: str, zones: dict[str, str] | None = None) -> list[NodeBuilder]:
    out = []
    for nm in names:
        b = n(nm).label(HOST, nm)
        if zones and nm in zones:
            b.label(ZONE, zones[nm])
        out.append(b)
    return out


def verdicts(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    placed: list[PodBuilder],
    namespaces: dict[str, dict[str, str]] | None = None,
) -> dict[str, str]:
    """node -> InterPodAffinity's reason ("" passes), from the Explain view of a real attempt."""
    cache = make_cache(*nodes, pods=tuple(p.info() for p in placed))
    cache.namespaces = namespaces or {}
    algo = Algorithm(cache, Profile(handle=Handle(cache=cache)))
    algo.schedule(incoming.info())
    view = algo.attempts[incoming.info().key].view(100)
    got = view.filters["InterPodAffinity"]
    return {nm: v or "" for nm, v in zip(view.nodes, got, strict=True)}


WEB = {"app": "web"}
ZONES = {"a": "z1", "b": "z1", "c": "z2"}  # and node d has no zone label

FILTER_CASES: list[tuple[str, PodBuilder, list[NodeBuilder], list[PodBuilder], dict[str, str]]] = [
    (
        "required anti-affinity on hostname keeps the pod off the node with a matching pod",
        pod(labels=WEB, anti=[term(HOST, WEB)]),
        hosts("a", "b"),
        [pod("x", node="a", labels=WEB)],
        {"a": ERR_ANTI_AFFINITY, "b": ""},
    ),
    (
        "anti-affinity on zone blocks the whole zone; a node without the key passes",
        pod(anti=[term(ZONE, WEB)]),
        hosts("a", "b", "c", "d", zones=ZONES),
        [pod("x", node="a", labels=WEB)],
        {"a": ERR_ANTI_AFFINITY, "b": ERR_ANTI_AFFINITY, "c": "", "d": ""},
    ),
    (
        "a term without namespaces looks at the pod's own namespace only",
        pod(anti=[term(HOST, WEB)]),
        hosts("a"),
        [pod("x", "other", node="a", labels=WEB)],
        {"a": ""},
    ),
    (
        "explicit namespaces replace the pod's own",
        pod(anti=[term(HOST, WEB, namespaces=["other"])]),
        hosts("a", "b"),
        [pod("x", "other", node="a", labels=WEB), pod("y", node="b", labels=WEB)],
        {"a": ERR_ANTI_AFFINITY, "b": ""},
    ),
    (
        "namespaceSelector {} selects every namespace",
        pod(anti=[term(HOST, WEB, ns_selector={})]),
        hosts("a", "b"),
        [pod("x", "other", node="a", labels=WEB)],
        {"a": ERR_ANTI_AFFINITY, "b": ""},
    ),
    (
        "a term without labelSelector matches no pod",
        pod(anti=[term(HOST, no_selector=True)]),
        hosts("a"),
        [pod("x", node="a", labels=WEB)],
        {"a": ""},
    ),
    (
        "required affinity: only the domains holding a matching pod; no key fails",
        pod(affinity=[term(ZONE, WEB)]),
        hosts("a", "b", "c", "d", zones=ZONES),
        [pod("x", node="a", labels=WEB)],
        {"a": "", "b": "", "c": ERR_AFFINITY, "d": ERR_AFFINITY},
    ),
    (
        "the first pod of a group matching its own affinity may go to any node with the key",
        pod(labels=WEB, affinity=[term(ZONE, WEB)]),
        hosts("a", "c", "d", zones=ZONES),
        [],
        {"a": "", "c": "", "d": ERR_AFFINITY},
    ),
    (
        "affinity to pods that do not exist, not matching itself, fits nowhere",
        pod(affinity=[term(ZONE, WEB)]),
        hosts("a", "c", zones=ZONES),
        [],
        {"a": ERR_AFFINITY, "c": ERR_AFFINITY},
    ),
    (
        "once a matching pod exists, the self-matching pod must join its domain",
        pod(labels=WEB, affinity=[term(ZONE, WEB)]),
        hosts("a", "c", zones=ZONES),
        [pod("x", node="c", labels=WEB)],
        {"a": ERR_AFFINITY, "c": ""},
    ),
    (
        "a matching pod on a node without the key does not count (first-pod rule applies)",
        pod(labels=WEB, affinity=[term(ZONE, WEB)]),
        hosts("a", "d", zones=ZONES),
        [pod("x", node="d", labels=WEB)],
        {"a": "", "d": ERR_AFFINITY},
    ),
    (
        "several affinity terms: a pod counts only if it matches all of them",
        pod(affinity=[term(ZONE, WEB), term(HOST, {"tier": "fe"})]),
        hosts("a", "b", zones=ZONES),
        [pod("x", node="a", labels=WEB), pod("y", node="b", labels={"tier": "fe"})],
        {"a": ERR_AFFINITY, "b": ERR_AFFINITY},
    ),
    (
        "several affinity terms all satisfied by one pod: its host only",
        pod(affinity=[term(ZONE, WEB), term(HOST, {"tier": "fe"})]),
        hosts("a", "b", zones=ZONES),
        [pod("x", node="a", labels={**WEB, "tier": "fe"})],
        {"a": "", "b": ERR_AFFINITY},
    ),
    (
        "existing pods' anti-affinity is symmetric: a matching pod stays out of their domain",
        pod(labels=WEB),
        hosts("a", "b", "c", zones=ZONES),
        [pod("x", node="a", anti=[term(ZONE, WEB)])],
        {"a": ERR_EXISTING_ANTI_AFFINITY, "b": ERR_EXISTING_ANTI_AFFINITY, "c": ""},
    ),
    (
        "existing pods' anti-affinity does not touch pods it does not match",
        pod(labels={"app": "db"}),
        hosts("a"),
        [pod("x", node="a", anti=[term(HOST, WEB)])],
        {"a": ""},
    ),
    (
        "an existing pod's term without namespaces means its own namespace, not the newcomer's",
        pod("p", "other", labels=WEB),
        hosts("a"),
        [pod("x", node="a", anti=[term(HOST, WEB)])],
        {"a": ""},
    ),
    (
        "an existing pod's namespaceSelector is matched against the newcomer's namespace labels",
        pod("p", "team-b", labels=WEB),
        hosts("a", "b"),
        [pod("x", node="a", anti=[term(HOST, WEB, ns_selector={"team": "b"})])],
        {"a": ERR_EXISTING_ANTI_AFFINITY, "b": ""},
    ),
    (
        "affinity first, then the pod's anti-affinity, then existing pods' (first reason only)",
        pod(labels=WEB, affinity=[term(ZONE, {"app": "cache"})], anti=[term(HOST, WEB)]),
        hosts("a", "b", "c", zones=ZONES),
        [
            pod("cache", node="a", labels={"app": "cache"}),
            pod("x", node="a", labels=WEB),
            pod("y", node="b", anti=[term(HOST, WEB)]),
        ],
        {"a": ERR_ANTI_AFFINITY, "b": ERR_EXISTING_ANTI_AFFINITY, "c": ERR_AFFINITY},
    ),
    (
        "terminating pods still count (they occupy their node until gone)",
        pod(anti=[term(HOST, WEB)]),
        hosts("a"),
        [pod("x", node="a", labels=WEB, terminating=True)],
        {"a": ERR_ANTI_AFFINITY},
    ),
]


@pytest.mark.parametrize(
    ("incoming", "nodes", "placed", "want"),
    [c[1:] for c in FILTER_CASES],
    ids=[c[0] for c in FILTER_CASES],
)
def test_filter(
    incoming: PodBuilder, nodes: list[NodeBuilder], placed: list[PodBuilder], want: dict[str, str]
) -> None:
    ns = {"team-b": {"team": "b", "kubernetes.io/metadata.name": "team-b"}}
    assert verdicts(incoming, nodes, placed, ns) == want


def test_namespace_selector_of_the_pods_own_terms_picks_namespaces_by_label() -> None:
    """kube merges the namespaces a namespaceSelector picks into the term at PreFilter."""
    incoming = pod(anti=[term(HOST, WEB, ns_selector={"team": "b"})])
    placed = [pod("x", "team-b", node="a", labels=WEB), pod("y", "team-c", node="b", labels=WEB)]
    namespaces = {"team-b": {"team": "b"}, "team-c": {"team": "c"}}
    assert verdicts(incoming, hosts("a", "b", "c"), placed, namespaces) == {
        "a": ERR_ANTI_AFFINITY,
        "b": "",
        "c": "",
    }


def test_message_and_preemption_resolvability() -> None:
    """kube's reasons in the FitError; affinity failures are UnschedulableAndUnresolvable,
    anti-affinity ones Unschedulable (preemption may remove the conflicting pod)."""
    incoming = pod(labels=WEB, affinity=[term(ZONE, {"app": "cache"})], anti=[term(HOST, WEB)])
    nodes = hosts("a", "b", "c", zones=ZONES)
    placed = [
        pod("cache", node="a", labels={"app": "cache"}),
        pod("x", node="a", labels=WEB),
        pod("y", node="b", anti=[term(HOST, WEB)]),
    ]
    cache = make_cache(*nodes, pods=tuple(p.info() for p in placed))
    algo = Algorithm(cache, Profile(handle=Handle(cache=cache)))
    result = algo.schedule(incoming.info())
    assert result.message == (
        "0/3 nodes are available: 1 node(s) didn't match pod affinity rules, "
        "1 node(s) didn't match pod anti-affinity rules, "
        "1 node(s) didn't satisfy existing pods anti-affinity rules. preemption: 0/3 nodes are "
        "available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )
    # the nodes the FitError hands to PostFilter (preemption) as resolvable
    _, plugins, resolvable = algo._fit_error(3, algo.attempts[incoming.info().key].results)
    assert plugins == {"InterPodAffinity"}
    by_node = {nm: bool(resolvable[slot]) for nm, slot in cache.nodes.index.items()}
    assert by_node == {"a": True, "b": True, "c": False}


def test_prefilter_skips_when_nothing_to_check() -> None:
    cache = make_cache(*hosts("a"), pods=(pod("x", node="a", anti=[term(HOST, WEB)]).info(),))
    plugin = InterPodAffinity({}, Handle(cache=cache))
    # no terms of its own and no existing term matches it
    assert plugin.pre_filter(CycleState(), pod().info(), cache.nodes).code == Code.SKIP
    # an existing pod's term matches it: not skipped
    st = plugin.pre_filter(CycleState(), pod(labels=WEB).info(), cache.nodes)
    assert st.code == Code.SUCCESS


def scores(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    placed: list[PodBuilder],
    args: dict[str, Any] | None = None,
) -> dict[str, int] | None:
    """node -> normalised score over all nodes as candidates; None when PreScore skips."""
    cache = make_cache(*nodes, pods=tuple(p.info() for p in placed))
    plugin = InterPodAffinity(args or {}, Handle(cache=cache))
    state = CycleState()
    info = incoming.info()
    if plugin.pre_score(state, info, cache.nodes).code == Code.SKIP:
        return None
    idx = np.flatnonzero(cache.nodes.valid[: cache.nodes.n])
    s = plugin.normalize(state, info, plugin.score(state, info, cache.nodes, idx))
    return {cache.nodes.names[int(i)]: int(v) for i, v in zip(idx, s, strict=True)}


ABC = {"a": "z1", "b": "z1", "c": "z2", "d": "z3"}

SCORE_CASES: list[
    tuple[str, PodBuilder, list[NodeBuilder], list[PodBuilder], dict[str, Any], Any]
] = [
    (
        "nothing to score: PreScore skips",
        pod(labels=WEB),
        hosts("a", "b"),
        [pod("x", node="a", labels=WEB)],
        {},
        None,
    ),
    (
        "preferred affinity: weight per matching pod in the domain, min-max to 0-100",
        pod(pref=[(5, term(ZONE, WEB))]),
        hosts("a", "b", "c", "d", zones=ABC),
        [pod("x", node="a", labels=WEB), *[pod(f"y{i}", node="c", labels=WEB) for i in (1, 2)]],
        {},
        # z1: 5, z2: 10, z3: 0
        {"a": 50, "b": 50, "c": 100, "d": 0},
    ),
    (
        "preferred anti-affinity scores negative; the normalisation includes negatives",
        pod(pref_anti=[(3, term(ZONE, WEB))]),
        hosts("a", "c", "d", zones=ABC),
        [pod("x", node="a", labels=WEB), *[pod(f"y{i}", node="c", labels=WEB) for i in (1, 2)]],
        {},
        # z1: -3, z2: -6, z3: 0 -> (s + 6) * 100 / 6
        {"a": 50, "c": 0, "d": 100},
    ),
    (
        "existing pods' required affinity to the pod adds hardPodAffinityWeight",
        pod(labels=WEB),
        hosts("a", "c", "d", zones=ABC),
        [pod("x", node="a", affinity=[term(ZONE, WEB)])],
        {"hardPodAffinityWeight": 4},
        {"a": 100, "c": 0, "d": 0},
    ),
    (
        "hardPodAffinityWeight 0 ignores existing pods' required affinity",
        pod(labels=WEB),
        hosts("a", "c", zones=ABC),
        [pod("x", node="a", affinity=[term(ZONE, WEB)])],
        {"hardPodAffinityWeight": 0},
        None,
    ),
    (
        "existing pods' preferred affinity and anti-affinity towards the pod count",
        pod(labels=WEB),
        hosts("a", "c", "d", zones=ABC),
        [
            pod("x", node="a", pref=[(10, term(ZONE, WEB))]),
            pod("y", node="c", pref_anti=[(10, term(ZONE, WEB))]),
        ],
        {},
        # z1: +10, z2: -10, z3: 0
        {"a": 100, "c": 0, "d": 50},
    ),
    (
        "ignorePreferredTermsOfExistingPods skips pods without preferred terms",
        pod(labels=WEB),
        hosts("a", "c", zones=ABC),
        [pod("x", node="a", pref=[(10, term(ZONE, WEB))])],
        {"ignorePreferredTermsOfExistingPods": True},
        None,
    ),
    (
        "contributions that cancel still score (kube's map has the entry): all 0",
        pod(labels=WEB),
        hosts("a", "c", zones=ABC),
        [
            pod("x", node="a", pref=[(10, term(ZONE, WEB))]),
            pod("y", node="a", pref_anti=[(10, term(ZONE, WEB))]),
        ],
        {},
        {"a": 0, "c": 0},
    ),
]


@pytest.mark.parametrize(
    ("incoming", "nodes", "placed", "args", "want"),
    [c[1:] for c in SCORE_CASES],
    ids=[c[0] for c in SCORE_CASES],
)
def test_score(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    placed: list[PodBuilder],
    args: dict[str, Any],
    want: dict[str, int] | None,
) -> None:
    assert scores(incoming, nodes, placed, args) == want


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight: Invalid value: 101"),
        ({"hardPodAffinityWeight": -1}, "not in valid range [0-100]"),
        ({"hardPodAffinityWeight": "1"}, "hardPodAffinityWeight"),
        ({"ignorePreferredTermsOfExistingPods": "yes"}, "must be a boolean"),
        ({"bogus": 1}, "bogus: unknown field"),
    ],
)
def test_args_validation(args: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")):
        InterPodAffinity(args)


def fresh_verdicts(cache: SchedulerCache, incoming: PodInfo) -> dict[str, int]:
    plugin = InterPodAffinity({}, Handle(cache=cache))
    state = CycleState()
    if plugin.pre_filter(state, incoming, cache.nodes).code == Code.SKIP:
        return {nm: 0 for nm in cache.nodes.index}
    res = plugin.filter(state, incoming, cache.nodes)
    assert res is not None
    return {nm: int(res.codes[slot]) for nm, slot in sorted(cache.nodes.index.items())}


def test_placed_terms_follow_pods_and_nodes() -> None:
    """One plugin instance (one listener) through assume, forget, delete, relabel, node
    removal: its verdicts equal those of a fresh instance after every step."""
    cache = make_cache(*hosts("a", "b", "c", zones=ZONES))
    live = InterPodAffinity({}, Handle(cache=cache))
    incoming = pod("new", labels=WEB).info()
    guard = pod("g", anti=[term(ZONE, WEB)])

    def live_verdicts() -> dict[str, int]:
        state = CycleState()
        if live.pre_filter(state, incoming, cache.nodes).code == Code.SKIP:
            return {nm: 0 for nm in cache.nodes.index}
        res = live.filter(state, incoming, cache.nodes)
        assert res is not None
        return {nm: int(res.codes[slot]) for nm, slot in sorted(cache.nodes.index.items())}

    live_verdicts()  # registers the listener before any pod arrives
    steps: list[Callable[[], object]] = [
        lambda: cache.assume(guard.info(), "a"),
        lambda: cache.forget("default/g"),
        lambda: cache.add_pod(pod("g", node="c", anti=[term(ZONE, WEB)]).info()),
        lambda: cache.add_pod(pod("h", node="a", anti=[term(HOST, WEB)]).info()),
        lambda: cache.remove_node("c"),
        lambda: cache.add_node(hosts("c", zones=ZONES)[0].obj()),
        lambda: cache.remove_pod("default/g"),
        lambda: cache.update_pod(pod("h", node="a", labels={"x": "y"}).info()),
    ]
    seen = []
    for step in steps:
        step()
        got = live_verdicts()
        assert got == fresh_verdicts(cache, incoming)
        seen.append(got)
    assert {"a": 3, "b": 3, "c": 0} in seen and {"a": 0, "b": 0, "c": 3} in seen


# ----- queueing hints: kube v1.36's isSchedulableAfterPodChange / ...NodeChange -----------
def _hint(
    kind: EventKind,
    waiting: PodBuilder,
    old: Any = None,
    new: Any = None,
    placed: tuple[PodBuilder, ...] = (),
    namespaces: dict[str, dict[str, str]] | None = None,
) -> QueueingHint:
    cache = make_cache(*hosts("a", "b"), pods=tuple(p.info() for p in placed))
    cache.namespaces = namespaces or {}
    plugin = InterPodAffinity(handle=Handle(cache=cache))
    hint = plugin.queueing_hints()[kind]
    return hint.fn(waiting.info(), ClusterEvent(kind, old, new))


def _on(name: str = "x", ns: str = "default", **kw: Any) -> PodInfo:
    return pod(name, ns, node="a", **kw).info()


def _node(name: str = "n", **labels: str) -> Any:
    return NodeBuilder(name).labels(**labels).obj()


DB = {"app": "db"}
ADD, LABEL, DELETE = EventKind.POD_ADD, EventKind.POD_LABEL, EventKind.POD_DELETE
HINT_POD_CASES: list[tuple[str, EventKind, PodBuilder, PodInfo | None, PodInfo | None, Any]] = [
    (
        "kube: an added pod matching the pod's required affinity queues it",
        ADD,
        pod(affinity=[term(HOST, WEB)]),
        None,
        _on(labels=WEB),
        QUEUE,
    ),
    (
        "kube: an added pod that does not match it is skipped",
        ADD,
        pod(affinity=[term(HOST, WEB)]),
        None,
        _on(labels=DB),
        QUEUE_SKIP,
    ),
    (
        "kube: an added pod must match all the required affinity terms (one pod satisfies them)",
        ADD,
        pod(affinity=[term(HOST, WEB), term(HOST, {"tier": "fe"})]),
        None,
        _on(labels=WEB),
        QUEUE_SKIP,
    ),
    (
        "kube: an added pod cannot lift anti-affinity",
        ADD,
        pod(anti=[term(HOST, WEB)]),
        None,
        _on(labels=WEB),
        QUEUE_SKIP,
    ),
    (
        "kube: a term's namespaces: an added match in another namespace is skipped",
        ADD,
        pod(affinity=[term(HOST, WEB)]),
        None,
        _on(ns="other", labels=WEB),
        QUEUE_SKIP,
    ),
    (
        "kube: explicit namespaces select the added pod's namespace",
        ADD,
        pod(affinity=[term(HOST, WEB, namespaces=["other"])]),
        None,
        _on(ns="other", labels=WEB),
        QUEUE,
    ),
    (
        "namespaceSelector read against the namespace's labels (kube misses it, #141953)",
        ADD,
        pod(affinity=[term(HOST, WEB, ns_selector={"team": "a"})]),
        None,
        _on(ns="other", labels=WEB),
        QUEUE,
    ),
    (
        "kube: a relabel that makes a pod match the affinity queues",
        LABEL,
        pod(affinity=[term(HOST, WEB)]),
        _on(labels=DB),
        _on(labels=WEB),
        QUEUE,
    ),
    (
        "kube: a relabel of a pod that already matched is skipped",
        LABEL,
        pod(affinity=[term(HOST, WEB)]),
        _on(labels={**WEB, "v": "1"}),
        _on(labels={**WEB, "v": "2"}),
        QUEUE_SKIP,
    ),
    (
        "kube: a relabel away from the anti-affinity term queues",
        LABEL,
        pod(anti=[term(HOST, WEB)]),
        _on(labels=WEB),
        _on(labels=DB),
        QUEUE,
    ),
    (
        "kube: a relabel into the anti-affinity term is skipped",
        LABEL,
        pod(anti=[term(HOST, WEB)]),
        _on(labels=DB),
        _on(labels=WEB),
        QUEUE_SKIP,
    ),
    (
        "a relabel away from one of two anti-affinity terms queues (any term repels, #139161)",
        LABEL,
        pod(anti=[term(HOST, WEB), term(HOST, {"tier": "fe"})]),
        _on(labels={**WEB, "tier": "fe"}),
        _on(labels={"tier": "fe"}),
        QUEUE,
    ),
    (
        "kube: deleting a pod the anti-affinity term matches queues",
        DELETE,
        pod(anti=[term(HOST, WEB)]),
        _on(labels=WEB),
        None,
        QUEUE,
    ),
    (
        "kube: deleting an unrelated pod is skipped",
        DELETE,
        pod(anti=[term(HOST, WEB)]),
        _on(labels=DB),
        None,
        QUEUE_SKIP,
    ),
    (
        "deleting a pod one of two anti-affinity terms matches queues (#139161)",
        DELETE,
        pod(anti=[term(HOST, WEB), term(ZONE, {"tier": "fe"})]),
        _on(labels=WEB),
        None,
        QUEUE,
    ),
    (
        "kube PR #135325: deleting a pod whose own anti-affinity repelled the pod queues",
        DELETE,
        pod(labels=WEB),
        _on(labels=DB, anti=[term(HOST, WEB)]),
        None,
        QUEUE,
    ),
    (
        "kube PR #135325: a deleted pod's anti-affinity that does not match the pod is skipped",
        DELETE,
        pod(labels=DB),
        _on(labels=DB, anti=[term(HOST, WEB)]),
        None,
        QUEUE_SKIP,
    ),
    (
        "kube: deleting a pod the affinity needs is skipped",
        DELETE,
        pod(affinity=[term(HOST, WEB)]),
        _on(labels=WEB),
        None,
        QUEUE_SKIP,
    ),
    (
        "deleting the peer of a self-affine pod queues: it may be the first of its group (#141354)",
        DELETE,
        pod(labels=WEB, affinity=[term(HOST, WEB)]),
        _on(labels=WEB),
        None,
        QUEUE,
    ),
    (
        "a pod without required terms is skipped on an add (preferred terms never reject)",
        ADD,
        pod(pref=[(10, term(HOST, WEB))]),
        None,
        _on(labels=WEB),
        QUEUE_SKIP,
    ),
]


@pytest.mark.parametrize(
    ("kind", "waiting", "old", "new", "want"),
    [c[1:] for c in HINT_POD_CASES],
    ids=[c[0] for c in HINT_POD_CASES],
)
def test_pod_change_hint(
    kind: EventKind,
    waiting: PodBuilder,
    old: PodInfo | None,
    new: PodInfo | None,
    want: QueueingHint,
) -> None:
    assert _hint(kind, waiting, old, new, namespaces={"other": {"team": "a"}}) == want


NODE_ADD, NODE_LABEL = EventKind.NODE_ADD, EventKind.NODE_LABEL
HINT_NODE_CASES: list[tuple[str, EventKind, PodBuilder, Any, Any, tuple[PodBuilder, ...], Any]] = [
    (
        "kube: an added node with the affinity's topology key queues",
        NODE_ADD,
        pod(affinity=[term(ZONE, WEB)]),
        None,
        _node(zone="z1"),
        (),
        QUEUE,
    ),
    (
        "kube: an added node without it is skipped",
        NODE_ADD,
        pod(affinity=[term(ZONE, WEB)]),
        None,
        _node(other="x"),
        (),
        QUEUE_SKIP,
    ),
    (
        "kube: any added node queues a pod with anti-affinity (it may be in a free domain)",
        NODE_ADD,
        pod(anti=[term(ZONE, WEB)]),
        None,
        _node(),
        (),
        QUEUE,
    ),
    (
        "kube: a node gaining the affinity's key queues",
        NODE_LABEL,
        pod(affinity=[term(ZONE, WEB)]),
        _node(),
        _node(zone="z1"),
        (),
        QUEUE,
    ),
    (
        "kube: a node moving to another domain of the affinity's key queues",
        NODE_LABEL,
        pod(affinity=[term(ZONE, WEB)]),
        _node(zone="z1"),
        _node(zone="z2"),
        (),
        QUEUE,
    ),
    (
        "kube: a node losing the affinity's key is skipped",
        NODE_LABEL,
        pod(affinity=[term(ZONE, WEB)]),
        _node(zone="z1"),
        _node(),
        (),
        QUEUE_SKIP,
    ),
    (
        "kube: a label change of another key is skipped",
        NODE_LABEL,
        pod(affinity=[term(ZONE, WEB)], anti=[term(HOST, DB)]),
        _node(zone="z1", kubernetes_io="1"),
        _node(zone="z1", kubernetes_io="2"),
        (),
        QUEUE_SKIP,
    ),
    (
        "kube: a node losing the anti-affinity's key queues (a node without it passes)",
        NODE_LABEL,
        pod(anti=[term(ZONE, WEB)]),
        _node(zone="z1"),
        _node(),
        (),
        QUEUE,
    ),
    (
        "kube: a node gaining the anti-affinity's key is skipped",
        NODE_LABEL,
        pod(anti=[term(ZONE, WEB)]),
        _node(),
        _node(zone="z1"),
        (),
        QUEUE_SKIP,
    ),
    (
        "kube: a node moving to another domain of the anti-affinity's key queues",
        NODE_LABEL,
        pod(anti=[term(ZONE, WEB)]),
        _node(zone="z1"),
        _node(zone="z2"),
        (),
        QUEUE,
    ),
    (
        "a pod without terms repelled by a placed pod's anti-affinity: an added node queues",
        NODE_ADD,
        pod(labels=WEB),
        None,
        _node(),
        (pod("x", node="a", anti=[term(ZONE, WEB)]),),
        QUEUE,
    ),
    (
        "... and a node leaving that term's domain queues (kube's hint misses both)",
        NODE_LABEL,
        pod(labels=WEB),
        _node(zone="z1"),
        _node(zone="z2"),
        (pod("x", node="a", anti=[term(ZONE, WEB)]),),
        QUEUE,
    ),
    (
        "a pod without terms that nothing repels is skipped on an added node",
        NODE_ADD,
        pod(labels=WEB),
        None,
        _node(),
        (pod("x", node="a", anti=[term(ZONE, DB)]),),
        QUEUE_SKIP,
    ),
]


@pytest.mark.parametrize(
    ("kind", "waiting", "old", "new", "placed", "want"),
    [c[1:] for c in HINT_NODE_CASES],
    ids=[c[0] for c in HINT_NODE_CASES],
)
def test_node_change_hint(
    kind: EventKind,
    waiting: PodBuilder,
    old: Any,
    new: Any,
    placed: tuple[PodBuilder, ...],
    want: QueueingHint,
) -> None:
    assert _hint(kind, waiting, old, new, placed) == want


NS_CASES: list[
    tuple[str, PodBuilder, dict[str, str], dict[str, str], tuple[PodBuilder, ...], Any]
] = [
    (
        "a namespace newly selected by the affinity's namespaceSelector queues",
        pod(affinity=[term(HOST, WEB, ns_selector={"team": "a"})]),
        {},
        {"team": "a"},
        (),
        QUEUE,
    ),
    (
        "a namespace no longer selected by the anti-affinity's namespaceSelector queues",
        pod(anti=[term(HOST, WEB, ns_selector={"team": "a"})]),
        {"team": "a"},
        {"team": "b"},
        (),
        QUEUE,
    ),
    (
        "a label change that does not change the selection is skipped",
        pod(affinity=[term(HOST, WEB, ns_selector={"team": "a"})]),
        {"team": "a"},
        {"team": "a", "x": "1"},
        (),
        QUEUE_SKIP,
    ),
    (
        "terms without namespaceSelector are skipped",
        pod(affinity=[term(HOST, WEB)]),
        {},
        {"team": "a"},
        (),
        QUEUE_SKIP,
    ),
    (
        "the pod's own namespace relabelled while placed anti-affinity selects by label queues",
        pod(labels=WEB),
        {"team": "a"},
        {},
        (pod("x", node="a", anti=[term(HOST, WEB, ns_selector={"team": "a"})]),),
        QUEUE,
    ),
]


@pytest.mark.parametrize(
    ("waiting", "before", "after", "placed", "want"),
    [c[1:] for c in NS_CASES],
    ids=[c[0] for c in NS_CASES],
)
def test_namespace_label_hint(
    waiting: PodBuilder,
    before: dict[str, str],
    after: dict[str, str],
    placed: tuple[PodBuilder, ...],
    want: QueueingHint,
) -> None:
    old, new = NamespaceObject("default", before), NamespaceObject("default", after)
    assert _hint(EventKind.NAMESPACE_LABEL, waiting, old, new, placed) == want


SCOPE_CASES = [
    ("terms in the pod's own namespace: its namespace's bucket", pod(anti=[term(HOST, WEB)]), True),
    ("no required terms: its namespace's bucket", pod(labels=WEB), True),
    (
        "a term naming another namespace: every namespace's events",
        pod(affinity=[term(HOST, WEB, namespaces=["other"])]),
        False,
    ),
    (
        "a namespaceSelector: every namespace's events",
        pod(anti=[term(HOST, WEB, ns_selector={})]),
        False,
    ),
]


@pytest.mark.parametrize(
    ("waiting", "own"), [c[1:] for c in SCOPE_CASES], ids=[c[0] for c in SCOPE_CASES]
)
def test_pod_hints_scope_waiting_pods_by_namespace(waiting: PodBuilder, own: bool) -> None:
    hint = InterPodAffinity().queueing_hints()[EventKind.POD_ADD]
    assert hint.own_namespace is not None
    assert hint.own_namespace(waiting.info()) == own


REACH_CASES = [
    ("a plain deleted pod reaches only its own namespace", _on(labels=WEB), frozenset()),
    (
        "a deleted pod's anti-affinity namespaces are reached",
        _on(anti=[term(HOST, WEB, namespaces=["b", "c"])]),
        frozenset({"b", "c"}),
    ),
    (
        "a deleted pod's anti-affinity namespaceSelector reaches every namespace",
        _on(anti=[term(HOST, WEB, ns_selector={"team": "a"})]),
        None,
    ),
]


@pytest.mark.parametrize(
    ("deleted", "want"), [c[1:] for c in REACH_CASES], ids=[c[0] for c in REACH_CASES]
)
def test_deleted_pods_anti_affinity_reaches_namespaces(
    deleted: PodInfo, want: frozenset[str] | None
) -> None:
    hint = InterPodAffinity().queueing_hints()[EventKind.POD_DELETE]
    assert hint.reaches is not None
    assert hint.reaches(ClusterEvent(EventKind.POD_DELETE, deleted, None)) == want


NEVER_CASES = [
    (
        "an added pod never helps a pod without required affinity",
        EventKind.POD_ADD,
        pod(anti=[term(HOST, WEB)]),
        True,
    ),
    ("... but may help one with it", EventKind.POD_ADD, pod(affinity=[term(HOST, WEB)]), False),
    (
        "a relabel never helps a pod without required terms",
        EventKind.POD_LABEL,
        pod(labels=WEB),
        True,
    ),
    (
        "... but may help one with anti-affinity",
        EventKind.POD_LABEL,
        pod(anti=[term(HOST, WEB)]),
        False,
    ),
    (
        "a deletion may help any pod (the deleted pod's own anti-affinity)",
        EventKind.POD_DELETE,
        pod(labels=WEB),
        False,
    ),
]


@pytest.mark.parametrize(
    ("kind", "waiting", "never"), [c[1:] for c in NEVER_CASES], ids=[c[0] for c in NEVER_CASES]
)
def test_events_that_can_never_help(kind: EventKind, waiting: PodBuilder, never: bool) -> None:
    hint = InterPodAffinity().queueing_hints()[kind]
    assert (hint.never is not None and hint.never(waiting.info())) == never
