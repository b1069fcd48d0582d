"""InterPodAffinity (PreFilter, Filter, PreScore, Score; weight 2): where a pod goes relative to
the pods already placed, as kube-scheduler v1.36's interpodaffinity plugin.

Filter, in kube's order, a node fails:
- "node(s) didn't match pod affinity rules" (UnschedulableAndUnresolvable) when it lacks the
  topologyKey label of a required affinity term, or some term's domain (the nodes sharing the
  node's value of that key) holds no pod matching all of the terms; unless no matching pod is in
  any domain and the pod matches all its own terms (the first pod of a group may go anywhere);
- "node(s) didn't match pod anti-affinity rules" (Unschedulable) when a domain of a required
  anti-affinity term holds a pod the term matches (a node without the key passes);
- "node(s) didn't satisfy existing pods anti-affinity rules" (Unschedulable) when a placed pod's
  required anti-affinity term matches the incoming pod and the node is in that pod's domain.
A term selects pods in its namespaces (the owner's own when namespaces and namespaceSelector are
unset) or in namespaces whose labels its namespaceSelector matches (`{}`: all); a term without
labelSelector matches nothing. PreFilter skips the filter when there is nothing to check.

Score: per topology domain, + weight for each placed pod matching a preferred affinity term of
the pod, - weight for each matching a preferred anti-affinity term, + hardPodAffinityWeight
(argument, default 1, 0-100) for each placed pod whose required affinity term matches the pod,
and +/- weight for each placed pod whose preferred (anti-)affinity term matches it; a node scores
its domains' sum, normalised min-max over the scored nodes to 0-100 (negative sums included).
PreScore skips when no term reaches any domain. `ignorePreferredTermsOfExistingPods` (argument,
default false) skips scoring for pods without preferred terms of their own.

Queueing hints (kube v1.36's isSchedulableAfterPodChange / isSchedulableAfterNodeChange): a pod
this plugin rejected moves back when an assigned pod is added matching all its required
affinity terms, relabelled into all of them or out of one of its required anti-affinity terms,
or deleted matching one anti-affinity term (kube v1.36 asks all of them; fixed upstream by PR
#139161) or carrying a required anti-affinity term that matches the pod (kube PR #135325); when
a node is added with an affinity topology key (any node, for a pod with anti-affinity), gains
an affinity key or leaves an anti-affinity key, or changes a key's value. Beyond kube, which
misses these: a namespaceSelector is read against the namespaces' labels (#141953), deleting or
relabelling away the last peer of a self-affine pod queues it (#141354), node events consider
the keys of placed pods' anti-affinity terms that repel the pod, and a namespace relabel
queues pods whose terms select namespaces by label. Only assigned pods of the namespaces its
terms look at are asked about (all, for explicit other namespaces or a namespaceSelector).

Columnar: the counts of pods matching the pod's own terms come from the cache's PodIndex (kept
per node slot as pods are placed), the placed pods' terms are kept per slot by a PodIndex
listener; a cycle turns per-slot counts into per-domain sums with one bincount per topology key
and gathers them back per node. No loop over pods or nodes in Python per scheduled pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import EventKind, NodeTable
from scheduler.framework import (
    MAX_NODE_SCORE,
    QUEUE,
    QUEUE_SKIP,
    SKIP,
    SUCCESS,
    ClusterEvent,
    CycleState,
    EventHint,
    FilterResult,
    Handle,
    NamespaceObject,
    QueueingHint,
    Status,
)
from scheduler.plugins.helper import I64, IDX
from scheduler.podindex import PodIndex
from scheduler.podinfo import AffinityTerm, PodInfo
from tinykube.selectors import LabelSelector, Requirement
from tinykube.v1 import node_pb2

ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

_FILTER_KEY = "InterPodAffinity/filter"
_SCORE_KEY = "InterPodAffinity/score"

_REASONS = (ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY)
# kube: affinity failures are UnschedulableAndUnresolvable, the anti-affinity ones Unschedulable
_UNRESOLVABLE = frozenset({1})


def _sized(arr: I64, n: int) -> I64:
    """The first n entries of a per-slot array (zero-padded if the node table grew since)."""
    if len(arr) >= n:
        return arr[:n]
    out = np.zeros(n, np.int64)
    out[: len(arr)] = arr
    return out


def spread(nodes: NodeTable, key: str, per_slot: I64, weights: I64 | None = None) -> I64 | None:
    """Per node slot, the sum of `weights` (default `per_slot`) over the slots in its domain of
    `key` (0 for nodes without the key); None when no slot with per_slot != 0 has the key (kube's
    topology map gets no entry then)."""
    lc = nodes.labels.get(key)
    if lc is None:
        return None
    n = len(per_slot)
    ids = lc.ids[:n]
    src = np.flatnonzero(per_slot)
    dom_ids = ids[src]
    keep = dom_ids >= 0
    if not keep.any():
        return None
    w = (per_slot if weights is None else weights)[src][keep]
    # one extra trailing domain, always 0, which nodes without the key (id -1) pick
    dom = np.bincount(dom_ids[keep], weights=w, minlength=len(lc.values) + 1)
    return np.rint(dom).astype(np.int64)[ids]


@dataclass
class _Carriers:
    """Per slot, how many placed pods carry one term, and their summed (signed) weights."""

    count: I64
    weight: I64
    total: int = 0


@dataclass
class PlacedTerms:
    """The (anti-)affinity terms of the pods placed on nodes, per slot, kept by a PodIndex
    listener so a cycle reads them instead of walking every pod."""

    capacity: int
    required_anti: dict[AffinityTerm, _Carriers] = field(default_factory=dict)
    required_affinity: dict[AffinityTerm, _Carriers] = field(default_factory=dict)
    preferred: dict[AffinityTerm, _Carriers] = field(default_factory=dict)

    def _bump(
        self, table: dict[AffinityTerm, _Carriers], t: AffinityTerm, slot: int, sign: int, w: int
    ) -> None:
        c = table.get(t)
        if c is None:
            if sign < 0:
                return
            size = max(self.capacity, slot + 1)
            c = table[t] = _Carriers(np.zeros(size, np.int64), np.zeros(size, np.int64))
        if slot >= len(c.count):
            c.count = _sized(c.count, max(slot + 1, 2 * len(c.count))).copy()
            c.weight = _sized(c.weight, len(c.count)).copy()
        c.count[slot] += sign
        c.weight[slot] += sign * w
        c.total += sign
        if c.total <= 0:
            del table[t]  # distinct terms come and go with their pods; keep only live ones

    def placed(self, slot: int, info: PodInfo, sign: int) -> None:
        aff = info.affinity
        if aff is None:
            return
        for t in aff.required_anti_affinity:
            self._bump(self.required_anti, t, slot, sign, 1)
        for t in aff.required_affinity:
            self._bump(self.required_affinity, t, slot, sign, 1)
        for wt in aff.preferred_affinity:
            self._bump(self.preferred, wt.term, slot, sign, wt.weight)
        for wt in aff.preferred_anti_affinity:
            self._bump(self.preferred, wt.term, slot, sign, -wt.weight)


def _own_namespace_terms(pod: PodInfo) -> bool:
    """Only assigned pods of the pod's own namespace can change what its required terms see:
    no term names another namespace or selects namespaces by label."""
    aff = pod.affinity
    if aff is None:
        return True
    own = frozenset({pod.namespace})
    return all(
        t.namespace_selector is None and t.namespaces <= own
        for t in (*aff.required_affinity, *aff.required_anti_affinity)
    )


def _no_required_affinity(pod: PodInfo) -> bool:
    return pod.affinity is None or not pod.affinity.required_affinity


def _no_required_terms(pod: PodInfo) -> bool:
    aff = pod.affinity
    return aff is None or not (aff.required_affinity or aff.required_anti_affinity)


def _anti_terms_reach(event: ClusterEvent) -> frozenset[str] | None:
    """The namespaces whose waiting pods a deleted pod's own required anti-affinity terms may
    have repelled (None: any, for a namespaceSelector); nothing beyond its own otherwise."""
    old: PodInfo | None = event.old
    if event.kind != EventKind.POD_DELETE or old is None or old.affinity is None:
        return frozenset()
    out: set[str] = set()
    for t in old.affinity.required_anti_affinity:
        if t.namespace_selector is not None:
            return None
        out |= t.namespaces
    return frozenset(out)


def _int_arg(args: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    v = args.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        # kube's ValidateInterPodAffinityArgs wording
        raise ValueError(f"{name}: Invalid value: {v!r}: not in valid range [{lo}-{hi}]")
    return v


class InterPodAffinity:
    name: ClassVar[str] = "InterPodAffinity"
    # kube v1.36 with queueing hints: assigned-pod add, label change and delete; node add and
    # label change (the taint change kube adds only when it pre-checks node adds, which this
    # queue never does); and a namespace's labels (namespaceSelector), which kube misses
    events: ClassVar[frozenset[EventKind]] = frozenset(
        {
            EventKind.POD_ADD,
            EventKind.POD_LABEL,
            EventKind.POD_DELETE,
            EventKind.NODE_ADD,
            EventKind.NODE_LABEL,
            EventKind.NAMESPACE_LABEL,
        }
    )
    node_static: ClassVar[bool] = False

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None) -> None:
        args = args or {}
        unknown = set(args) - {"hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"}
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]}: unknown field")
        self.hard_weight = _int_arg(args, "hardPodAffinityWeight", 1, 0, 100)
        ignore = args.get("ignorePreferredTermsOfExistingPods", False)
        if not isinstance(ignore, bool):
            raise ValueError(
                f"ignorePreferredTermsOfExistingPods: must be a boolean, got {ignore!r}"
            )
        self.ignore_preferred_of_existing = ignore
        self.handle = handle or Handle()
        self._tracked: tuple[PodIndex, PlacedTerms] | None = None

    # ----- the placed pods' terms and the namespaces ----------------------------------------
    def placed_terms(self, nodes: NodeTable) -> PlacedTerms:
        index = nodes.pod_index
        if self._tracked is not None and self._tracked[0] is index:
            return self._tracked[1]
        if self._tracked is not None:
            old_index, old = self._tracked
            if old.placed in old_index.listeners:
                old_index.listeners.remove(old.placed)
        terms = PlacedTerms(index.capacity)
        for slot in range(index.capacity):
            for info in index.pods_on_slot(slot):
                terms.placed(slot, info, 1)
        index.listeners.append(terms.placed)
        self._tracked = (index, terms)
        return terms

    def _namespaces(self) -> Mapping[str, Mapping[str, str]]:
        cache = self.handle.cache
        return getattr(cache, "namespaces", None) or {}

    def _merged(self, t: AffinityTerm) -> AffinityTerm:
        """kube's mergeAffinityTermNamespacesIfNotEmpty for the incoming pod's own terms: the
        namespaces a (non-empty) namespaceSelector picks now join the term's namespaces."""
        sel = t.namespace_selector
        if sel is None or sel.empty:
            return t
        picked = {name for name, labels in self._namespaces().items() if sel.matches(labels)}
        return AffinityTerm(t.namespaces | picked, None, t.selector, t.topology_key)

    @staticmethod
    def _counts(nodes: NodeTable, terms: list[AffinityTerm]) -> I64:
        """Per slot, the placed pods matching every one of `terms` (kube counts terminating
        pods too: they still occupy their node)."""
        n = nodes.n
        ns: frozenset[str] | None = None
        reqs: list[Requirement] = []
        for t in terms:
            if t.selector is None:
                return np.zeros(n, np.int64)
            if not t.all_namespaces:
                ns = t.namespaces if ns is None else ns & t.namespaces
            reqs.extend(t.selector.requirements)
        sel = LabelSelector(tuple(reqs))
        return _sized(nodes.pod_index.counts(ns, sel, True), n)

    # ----- queueing hints (kube's isSchedulableAfterPodChange / ...NodeChange) -------------
    def queueing_hints(self) -> Mapping[EventKind, EventHint]:
        pods = EventHint(self._after_pod_change, _own_namespace_terms, _anti_terms_reach)
        nodes = EventHint(self._after_node_change)
        return {
            # an added pod only helps required affinity; a relabel only the pod's own terms
            # (the deleted pod's terms, the symmetric case, can repel any pod)
            EventKind.POD_ADD: replace(pods, never=_no_required_affinity),
            EventKind.POD_LABEL: replace(pods, never=_no_required_terms),
            EventKind.POD_DELETE: pods,
            EventKind.NODE_ADD: nodes,
            EventKind.NODE_LABEL: nodes,
            EventKind.NAMESPACE_LABEL: EventHint(self._after_namespace_change),
        }

    def _matches(self, t: AffinityTerm, other: PodInfo) -> bool:
        """Whether a (required) term selects `other`, its namespaceSelector read against the
        namespaces' labels now (kube's hint leaves the selector unresolved and so misses such
        pods: kubernetes issue #141953)."""
        return t.matches(
            other.namespace, other.pod.metadata.labels, self._namespaces().get(other.namespace)
        )

    def _after_pod_change(self, pod: PodInfo, event: ClusterEvent) -> QueueingHint:
        """An assigned pod was added, relabelled or deleted: Queue when it may have brought
        what the pod's required affinity needs or taken away what repelled it."""
        old: PodInfo | None = event.old
        new: PodInfo | None = event.new
        aff = pod.affinity
        required = aff.required_affinity if aff is not None else ()
        anti = aff.required_anti_affinity if aff is not None else ()
        namespaces = self._namespaces()

        def match(t: AffinityTerm, other: PodInfo) -> bool:
            # the namespaceSelector read against the namespaces' labels now (kube's hint leaves
            # it unresolved and so misses such pods: kubernetes issue #141953)
            ns = other.namespace
            return t.matches(ns, other.pod.metadata.labels, namespaces.get(ns))

        def all_match(other: PodInfo) -> bool:
            return bool(required) and all(match(t, other) for t in required)

        def self_affine() -> bool:
            # the first pod of a group may go anywhere once no pod matches its terms any more
            labels = pod.pod.metadata.labels
            return all(t.matches(pod.namespace, labels, None) for t in required)

        if old is not None and new is not None:
            if required:
                before, after = all_match(old), all_match(new)
                if not before and after:
                    return QUEUE  # relabelled to match all of the pod's affinity terms
                if before and not after and self_affine():
                    return QUEUE  # maybe the last match of a self-affine group (#141354)
            if any(match(t, old) and not match(t, new) for t in anti):
                return QUEUE  # relabelled away from one of its anti-affinity terms
            return QUEUE_SKIP
        if new is not None:
            return QUEUE if all_match(new) else QUEUE_SKIP
        if old is None:
            return QUEUE_SKIP
        if any(match(t, old) for t in anti):
            # any one term repels (kube v1.36 asks all: fixed upstream by PR #139161)
            return QUEUE
        if old.affinity is not None and any(
            match(t, pod) for t in old.affinity.required_anti_affinity
        ):
            return QUEUE  # the deleted pod's own anti-affinity repelled the pod (PR #135325)
        if required and all_match(old) and self_affine():
            return QUEUE  # #141354, as for a relabel
        return QUEUE_SKIP

    def _after_node_change(self, pod: PodInfo, event: ClusterEvent) -> QueueingHint:
        """A node was added or relabelled: Queue when it joins, leaves or moves between the
        domains of a topology key the pod's terms (or the terms repelling it) use."""
        old: node_pb2.Node | None = event.old
        new: node_pb2.Node | None = event.new
        if new is None:
            return QUEUE_SKIP
        aff = pod.affinity
        required = aff.required_affinity if aff is not None else ()
        anti_keys = {t.topology_key for t in aff.required_anti_affinity} if aff else set()
        new_labels = new.metadata.labels
        if old is None:
            if any(t.topology_key in new_labels for t in required):
                return QUEUE
            # a node without the key, or in a domain free of what the pod hates, may take it
            if anti_keys or self._repelling_keys(pod):
                return QUEUE
            return QUEUE_SKIP
        old_labels = old.metadata.labels
        for t in required:
            k = t.topology_key
            if k in new_labels and old_labels.get(k) != new_labels[k]:
                return QUEUE  # gained the key, or moved to another domain
        for k in anti_keys | self._repelling_keys(pod):
            if k in old_labels and old_labels[k] != new_labels.get(k):
                return QUEUE  # lost the key (a node without it passes), or moved
        return QUEUE_SKIP

    def _repelling_keys(self, pod: PodInfo) -> set[str]:
        """The topology keys of placed pods' required anti-affinity terms that match the pod
        (the symmetric case; kube's node hint looks at the pod's own terms only)."""
        cache = self.handle.cache
        if cache is None:
            return set()
        placed = self.placed_terms(cache.nodes)
        return {t.topology_key for t in placed.required_anti if self._matches(t, pod)}

    def _after_namespace_change(self, pod: PodInfo, event: ClusterEvent) -> QueueingHint:
        """A namespace's labels changed: Queue when a namespaceSelector of the pod's required
        terms now picks it or no longer does, or when it is the pod's own namespace and placed
        pods' anti-affinity terms select namespaces by label. (kube v1.36 has no such event:
        kubernetes issue #141953.)"""
        old: NamespaceObject | None = event.old
        new: NamespaceObject | None = event.new
        if old is None or new is None:
            return QUEUE
        aff = pod.affinity
        terms = [*aff.required_affinity, *aff.required_anti_affinity] if aff else []
        for t in terms:
            sel = t.namespace_selector
            if sel is not None and sel.matches(old.labels) != sel.matches(new.labels):
                return QUEUE
        if new.name == pod.namespace:
            cache = self.handle.cache
            if cache is not None:
                placed = self.placed_terms(cache.nodes)
                if any(t.namespace_selector is not None for t in placed.required_anti):
                    return QUEUE
        return QUEUE_SKIP

    # ----- PreFilter / Filter --------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        aff = pod.affinity
        if aff is not None and aff.parse_error:
            return Status.unresolvable(f"parsing pod: {aff.parse_error}", plugin=self.name)
        placed = self.placed_terms(nodes)
        if not placed.required_anti and (
            aff is None or not (aff.required_affinity or aff.required_anti_affinity)
        ):
            return SKIP  # the common case, before any array is made: nothing to check
        n = nodes.n
        labels = pod.pod.metadata.labels
        ns_labels = self._namespaces().get(pod.namespace)

        existing: dict[str, I64] = {}
        for t, c in placed.required_anti.items():
            if t.matches(pod.namespace, labels, ns_labels):
                cnt = _sized(c.count, n)
                prev = existing.get(t.topology_key)
                existing[t.topology_key] = cnt if prev is None else prev + cnt
        existing_fail = np.zeros(n, bool)
        existing_counted = False
        for key, per_slot in existing.items():
            v = spread(nodes, key, per_slot)
            if v is not None:
                existing_counted = True
                existing_fail |= v > 0
        required = [self._merged(t) for t in aff.required_affinity] if aff else []
        anti = [self._merged(t) for t in aff.required_anti_affinity] if aff else []
        if not existing_counted and not required and not anti:
            return SKIP

        affinity_ok = np.ones(n, bool)
        if required:
            matching = self._counts(nodes, required)
            pods_exist = np.ones(n, bool)
            counted = False
            for t in required:
                lc = nodes.labels.get(t.topology_key)
                if lc is None:
                    affinity_ok[:] = False  # every topology label must exist on the node
                    continue
                affinity_ok &= lc.ids[:n] >= 0
                v = spread(nodes, t.topology_key, matching)
                if v is None:
                    pods_exist[:] = False
                else:
                    counted = True
                    pods_exist &= v > 0
            first_of_group = not counted and all(
                t.matches(pod.namespace, labels, None) for t in required
            )
            if not first_of_group:
                affinity_ok &= pods_exist

        anti_fail = np.zeros(n, bool)
        by_key: dict[str, I64] = {}
        for t in anti:
            cnt = self._counts(nodes, [t])
            prev = by_key.get(t.topology_key)
            by_key[t.topology_key] = cnt if prev is None else prev + cnt
        for key, per_slot in by_key.items():
            v = spread(nodes, key, per_slot)
            if v is not None:
                anti_fail |= v > 0

        codes = np.where(
            ~affinity_ok, 1, np.where(anti_fail, 2, np.where(existing_fail, 3, 0))
        ).astype(np.int32)
        state.write(_FILTER_KEY, FilterResult(codes, _REASONS, unresolvable_codes=_UNRESOLVABLE))
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        res: FilterResult | None = state.read(_FILTER_KEY)
        return res

    # ----- PreScore / Score ----------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        aff = pod.affinity
        has_preferred = aff is not None and bool(
            aff.preferred_affinity or aff.preferred_anti_affinity
        )
        if self.ignore_preferred_of_existing and not has_preferred:
            return SKIP
        placed = self.placed_terms(nodes)
        if (
            not has_preferred
            and not placed.preferred
            and not (self.hard_weight > 0 and placed.required_affinity)
        ):
            return SKIP  # no term of the pod's or of a placed pod's can score it
        n = nodes.n
        labels = pod.pod.metadata.labels
        ns_labels = self._namespaces().get(pod.namespace)
        # per topology key: per slot, the pods that count and their summed weights
        parts: dict[str, tuple[I64, I64]] = {}

        def add(key: str, count: I64, weight: I64) -> None:
            prev = parts.get(key)
            parts[key] = (count, weight) if prev is None else (prev[0] + count, prev[1] + weight)

        if aff is not None:
            for wt in aff.preferred_affinity:
                cnt = self._counts(nodes, [self._merged(wt.term)])
                add(wt.term.topology_key, cnt, cnt * wt.weight)
            for wt in aff.preferred_anti_affinity:
                cnt = self._counts(nodes, [self._merged(wt.term)])
                add(wt.term.topology_key, cnt, cnt * -wt.weight)
        if self.hard_weight > 0:
            for t, c in placed.required_affinity.items():
                if t.matches(pod.namespace, labels, ns_labels):
                    cnt = _sized(c.count, n)
                    add(t.topology_key, cnt, cnt * self.hard_weight)
        for t, c in placed.preferred.items():
            if t.matches(pod.namespace, labels, ns_labels):
                add(t.topology_key, _sized(c.count, n), _sized(c.weight, n))

        total = np.zeros(n, np.int64)
        counted = False
        for key, (count, weight) in parts.items():
            v = spread(nodes, key, count, weight)
            if v is not None:
                counted = True
                total += v
        if not counted:
            return SKIP
        state.write(_SCORE_KEY, total)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        total: I64 | None = state.read(_SCORE_KEY)
        if total is None:
            size = nodes.n if idx is None else len(idx)
            return np.zeros(size, np.int64)
        return total if idx is None else total[idx]

    def normalize(self, state: CycleState, pod: PodInfo, scores: I64) -> I64:
        """kube's min-max over the scored nodes: 100 * (s - min) / (max - min), truncated."""
        if len(scores) == 0:
            return scores
        lo, hi = int(scores.min()), int(scores.max())
        if hi == lo:
            return np.zeros(len(scores), np.int64)
        frac: npt.NDArray[np.float64] = (scores - lo).astype(np.float64) / float(hi - lo)
        return (float(MAX_NODE_SCORE) * frac).astype(np.int64)
