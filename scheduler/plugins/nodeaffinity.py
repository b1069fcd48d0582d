"""NodeAffinity (Filter, PreScore, Score; weight 2): nodeSelector and node affinity.

Filter: every nodeSelector pair and at least one required term (terms are ORed, a term's
expressions ANDed, an empty term matches nothing) must match; NotIn and DoesNotExist match
nodes without the label, Gt/Lt never match a missing or non-numeric label; matchFields supports
metadata.name In/NotIn. Reason "node(s) didn't match Pod's node affinity/selector". Score: the
sum of the weights of the preferred terms a node matches, normalised to 0-100.

PreFilter (kube v1.36): when every required term names nodes (matchFields metadata.name In), only
the union of those names can fit, and the plugin narrows the candidates to them (a DaemonSet
pod's cycle looks at one node): nodes outside the set are reported as "node(s) didn't satisfy
plugin(s) [NodeAffinity]" (UnschedulableAndUnresolvable), not as an affinity mismatch; terms
whose name sets are all empty (conflicting In lists) reject the pod with "pod affinity terms
conflict". A term without such a field requirement leaves every node possible.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import (
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    FilterResult,
    Status,
    default_normalize,
)
from scheduler.plugins.helper import I64, IDX
from scheduler.podinfo import PodInfo
from tinykube.v1 import node_pb2, pod_pb2

ERR_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ERR_CONFLICT = "pod affinity terms conflict"

# strconv.ParseInt's syntax (the label column's numeric view uses the same)
_INTEGER = re.compile(r"^[+-]?[0-9]+$")


def _requirement_mask(
    nodes: NodeTable, req: pod_pb2.NodeSelectorRequirement, n: int
) -> npt.NDArray[np.bool_]:
    lc = nodes.labels.get(req.key)
    op = req.operator
    if lc is None:
        return np.full(n, op in ("NotIn", "DoesNotExist"))
    ids = lc.ids[:n]
    if op == "Exists":
        return ids >= 0
    if op == "DoesNotExist":
        return ids < 0
    if op in ("In", "NotIn"):
        wanted = [lc.value_ids[v] for v in req.values if v in lc.value_ids]
        if not wanted:
            hit = np.zeros(n, bool)
        elif len(wanted) == 1:
            hit = ids == wanted[0]
        else:
            # a lookup table over value ids (the last entry, id -1, is "missing"): one gather
            # instead of np.isin's sort
            table = np.zeros(len(lc.values) + 1, bool)
            table[wanted] = True
            hit = table[ids]
        return hit if op == "In" else ~hit
    if op in ("Gt", "Lt"):
        if len(req.values) != 1:
            return np.zeros(n, bool)
        try:
            bound = int(req.values[0])
        except ValueError:
            return np.zeros(n, bool)
        vals = lc.numeric()[ids]  # id -1 picks the trailing NaN: missing never matches
        with np.errstate(invalid="ignore"):
            return vals > bound if op == "Gt" else vals < bound
    return np.zeros(n, bool)


def _field_mask(
    nodes: NodeTable, req: pod_pb2.NodeSelectorRequirement, n: int
) -> npt.NDArray[np.bool_]:
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        return np.zeros(n, bool)
    hit = np.zeros(n, bool)
    for v in req.values:
        slot = nodes.index.get(v)
        if slot is not None:
            hit[slot] = True
    return hit if req.operator == "In" else ~hit


def term_mask(nodes: NodeTable, term: pod_pb2.NodeSelectorTerm, n: int) -> npt.NDArray[np.bool_]:
    """A term ANDs its requirements; an empty term matches no node."""
    if not term.matchExpressions and not term.matchFields:
        return np.zeros(n, bool)
    mask = np.ones(n, bool)
    for r in term.matchExpressions:
        mask &= _requirement_mask(nodes, r, n)
    for r in term.matchFields:
        mask &= _field_mask(nodes, r, n)
    return mask


def required_node_names(
    terms: Sequence[pod_pb2.NodeSelectorTerm],
) -> frozenset[str] | None:
    """The only node names the required terms can match, or None when any term can match a
    node by other means (kube's NodeAffinity PreFilter): a term's metadata.name In lists
    intersect, the terms' sets unite."""
    if not terms:
        return None
    union: set[str] = set()
    for term in terms:
        term_names: set[str] | None = None
        for r in term.matchFields:
            if r.key == "metadata.name" and r.operator == "In":
                vals = set(r.values)
                term_names = vals if term_names is None else term_names & vals
        if term_names is None:
            return None
        union |= term_names
    return frozenset(union)


def required_mask(nodes: NodeTable, pod: PodInfo) -> npt.NDArray[np.bool_]:
    """kube's RequiredNodeAffinity.Match over slots: every nodeSelector pair and at least one
    required term (all slots when the pod has neither)."""
    spec = pod.pod.spec
    n = nodes.n
    mask = np.ones(n, bool)
    for k, v in spec.nodeSelector.items():
        lc = nodes.labels.get(k)
        if lc is None or v not in lc.value_ids:
            mask[:] = False
            return mask
        mask &= lc.ids[:n] == lc.value_ids[v]
    terms = spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    if terms.nodeSelectorTerms:
        any_term = np.zeros(n, bool)
        for term in terms.nodeSelectorTerms:
            any_term |= term_mask(nodes, term, n)
        mask &= any_term
    return mask


def _requirement_matches(req: pod_pb2.NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One matchExpressions requirement on one node's labels, as `_requirement_mask`."""
    op = req.operator
    if req.key not in labels:
        return op in ("NotIn", "DoesNotExist")
    v = labels[req.key]
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in ("In", "NotIn"):
        return (v in req.values) == (op == "In")
    if op in ("Gt", "Lt") and len(req.values) == 1:
        if not _INTEGER.match(v):
            return False
        try:
            bound = int(req.values[0])
        except ValueError:
            return False
        return int(v) > bound if op == "Gt" else int(v) < bound
    return False


def node_matches_required(pod: PodInfo, node: node_pb2.Node) -> bool:
    """kube's RequiredNodeAffinity.Match on one node (queueing hints look at one node): every
    nodeSelector pair and at least one required term."""
    spec = pod.pod.spec
    labels = node.metadata.labels
    for k, v in spec.nodeSelector.items():
        if labels.get(k) != v:
            return False
    terms = spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    if not terms.nodeSelectorTerms:
        return True
    for term in terms.nodeSelectorTerms:
        if not term.matchExpressions and not term.matchFields:
            continue
        if all(_requirement_matches(r, labels) for r in term.matchExpressions) and all(
            r.key == "metadata.name"
            and (node.metadata.name in r.values) == (r.operator == "In")
            and r.operator in ("In", "NotIn")
            for r in term.matchFields
        ):
            return True
    return False


class NodeAffinity:
    name: ClassVar[str] = "NodeAffinity"
    events: ClassVar[frozenset[EventKind]] = frozenset({EventKind.NODE_ADD, EventKind.NODE_LABEL})
    node_static: ClassVar[bool] = True

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        required = pod.pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        names = required_node_names(required.nodeSelectorTerms)
        if names is None:
            return SUCCESS
        if not names:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_CONFLICT,), self.name)
        state.narrow(self.name, names)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        spec = pod.pod.spec
        required = spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        terms = required.nodeSelectorTerms
        if not spec.nodeSelector and not terms:
            return None
        mask = required_mask(nodes, pod)
        return FilterResult(
            (~mask).astype(np.int32), (ERR_AFFINITY,), code=Status.unresolvable().code
        )

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        na = pod.pod.spec.affinity.nodeAffinity
        if not na.preferredDuringSchedulingIgnoredDuringExecution:
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        n = nodes.n
        total = np.zeros(n, np.int64)
        for (
            pref
        ) in pod.pod.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution:
            if pref.weight == 0:
                continue
            total += term_mask(nodes, pref.preference, n) * pref.weight
        return total if idx is None else total[idx]

    def normalize(self, state: CycleState, pod: PodInfo, scores: I64) -> I64:
        return default_normalize(scores, reverse=False)
