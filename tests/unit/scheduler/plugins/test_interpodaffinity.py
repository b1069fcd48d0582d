"""InterPodAffinity: kube v1.36's filter verdicts, reasons, preemption resolvability and
scores, each row naming the kube behaviour it checks; and the placed pods' terms staying right
as pods come and go."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from scheduler.cache import SchedulerCache
from scheduler.core import Algorithm, Profile
from scheduler.framework import Code, CycleState, Handle
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
