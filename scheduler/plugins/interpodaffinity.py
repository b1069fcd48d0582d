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

Columnar: the counts of pods matching the pod's own terms come from the cache's PodIndex (kept
per node slot as pods are placed), the placed pods' terms are kept per slot by a PodIndex
listener; a cycle turns per-slot counts into per-domain sums with one bincount per topology key
and gathers them back per node. No loop over pods or nodes in Python per scheduled pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import EventKind, NodeTable
from scheduler.framework import (
    MAX_NODE_SCORE,
    SKIP,
    SUCCESS,
    CycleState,
    FilterResult,
    Handle,
    Status,
)
from scheduler.plugins.helper import I64, IDX
from scheduler.podindex import PodIndex
from scheduler.podinfo import AffinityTerm, PodInfo
from tinykube.selectors import LabelSelector, Requirement

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


def _int_arg(args: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    v = args.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        # kube's ValidateInterPodAffinityArgs wording
        raise ValueError(f"{name}: Invalid value: {v!r}: not in valid range [{lo}-{hi}]")
    return v


class InterPodAffinity:
    name: ClassVar[str] = "InterPodAffinity"
    # kube v1.36: any assigned-pod add, label change or delete; node add, label change, and
    # taint change (kube's workaround for node adds its pre-check drops)
    events: ClassVar[frozenset[EventKind]] = frozenset(
        {
            EventKind.POD_ADD,
            EventKind.POD_LABEL,
            EventKind.POD_DELETE,
            EventKind.NODE_ADD,
            EventKind.NODE_LABEL,
            EventKind.NODE_TAINT,
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

    # ----- PreFilter / Filter --------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        aff = pod.affinity
        if aff is not None and aff.parse_error:
            return Status.unresolvable(f"parsing pod: {aff.parse_error}", plugin=self.name)
        n = nodes.n
        labels = pod.pod.metadata.labels
        ns_labels = self._namespaces().get(pod.namespace)
        placed = self.placed_terms(nodes)

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
        n = nodes.n
        labels = pod.pod.metadata.labels
        ns_labels = self._namespaces().get(pod.namespace)
        placed = self.placed_terms(nodes)
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
