"""PodTopologySpread (PreFilter, Filter, PreScore, Score; weight 2): spread matching pods over
topology domains, as kube-scheduler v1.36's podtopologyspread plugin.

Constraints are the pod's own, or, for a pod without any, the default ones (system defaulting:
hostname maxSkew 3 and zone maxSkew 5, both ScheduleAnyway) with the selector of the Services and
ReplicaSet that manage the pod (scheduler/workloads.py; no such selector, no defaults). A
constraint's selector is its labelSelector with the pod's values of matchLabelKeys ANDed in (the
apiserver folds them at creation too; kube v1.36's scheduler still merges, which is idempotent).
An unset labelSelector matches nothing; an empty one (`{}`) counts no existing pod but matches
the pod itself, as v1.36's countPodsMatchSelector short-circuits on Selector.Empty() (fixed
upstream after v1.36 by kubernetes PR #141340).

Counting: pods in the pod's namespace that match, not terminating, on the nodes (assigned,
assumed, and nominated pods reserved for the cycle), read per node slot from the cache's
PodIndex and summed per domain with one np.bincount over the topology key's label column. Only
eligible nodes count: nodes carrying every constraint's key, that pass the pod's required node
affinity / nodeSelector when nodeAffinityPolicy is Honor (the default) and that have no
untolerated NoSchedule/NoExecute taint when nodeTaintsPolicy is Honor (default Ignore).

Filter (DoNotSchedule constraints), per constraint in order, first failure wins: a node without
the key is "node(s) didn't match pod topology spread constraints (missing required label)"
(UnschedulableAndUnresolvable); otherwise matching pods in its domain + 1 if the pod matches its
own selector - the global minimum over eligible domains must not exceed maxSkew, else "node(s)
didn't match pod topology spread constraints" (Unschedulable: preemption may help). With fewer
eligible domains than minDomains the global minimum is 0.

Score (ScheduleAnyway constraints) over the nodes being scored: each constraint adds, for a node
with its key, count * log(domains + 2) + (maxSkew - 1), where count is the matching pods of the
node's domain (of the node itself for kubernetes.io/hostname, counted without the inclusion
policies) and domains the distinct values among the scored nodes (their number for hostname);
the sum is rounded. Scored nodes lacking a key score 0, except under the system defaults, where
a missing zone only drops that constraint. NormalizeScore: 100 * (max + min - s) / max over the
nodes not ignored (100 for all when max is 0).

Queueing hints (kube v1.36's isSchedulableAfterPodChange / isSchedulableAfterNodeChange, over
the DoNotSchedule constraints, the only ones that reject): a pod this plugin rejected moves back
when an assigned pod of its own namespace is added or deleted matching a constraint's selector
or relabelled into or out of one; when a node with every constraint's key is added or deleted,
a node gains or loses one of the keys, or, having them all, changes a key's value or its
taints; and, beyond kube's hint, when a node enters or leaves the pod's required node affinity
under nodeAffinityPolicy Honor. Only assigned pods of the pod's own namespace are asked about.

Pure and synchronous: PreFilter/PreScore parse the constraints; Filter and Score are numpy over
node slots, with no loop over pods or nodes in Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import NO_EXECUTE, NO_SCHEDULE, EventKind, NodeTable
from scheduler.framework import (
    MAX_NODE_SCORE,
    QUEUE,
    QUEUE_SKIP,
    SKIP,
    SUCCESS,
    ClusterEvent,
    Code,
    CycleState,
    EventHint,
    FilterResult,
    Handle,
    QueueingHint,
    Status,
)
from scheduler.plugins.helper import I64, IDX, tolerated
from scheduler.plugins.nodeaffinity import node_matches_required, required_mask
from scheduler.podinfo import PodInfo
from tinykube.selectors import EQUALS, LabelSelector, Requirement, SelectorError, from_proto
from tinykube.v1 import node_pb2, pod_pb2

ERR_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
ERR_MISSING_LABEL = ERR_CONSTRAINTS + " (missing required label)"

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"

PRE_FILTER_KEY = "PreFilterPodTopologySpread"
PRE_SCORE_KEY = "PreScorePodTopologySpread"

BOOL = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Constraint:
    max_skew: int
    key: str
    # None: matches nothing (labelSelector unset)
    selector: LabelSelector | None
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and self.selector.matches(labels)


# kube's systemDefaultConstraints
SYSTEM_DEFAULTS: tuple[tuple[str, int], ...] = ((HOSTNAME, 3), (ZONE, 5))


def _merge_match_label_keys(
    selector: LabelSelector | None, keys: Sequence[str], labels: Mapping[str, str]
) -> LabelSelector | None:
    """kube's mergeLabelSetWithSelector: the pod's values of `keys` ANDed with the selector; a
    selector that matches nothing stays so."""
    if selector is None:
        return None
    pinned = {k: labels[k] for k in keys if k in labels}
    if not pinned:
        return selector
    reqs = [Requirement(k, EQUALS, frozenset({v})) for k, v in sorted(pinned.items())]
    return LabelSelector((*reqs, *selector.requirements))


def _parse(tsc: pod_pb2.TopologySpreadConstraint, labels: Mapping[str, str]) -> Constraint:
    selector = from_proto(tsc.labelSelector) if tsc.HasField("labelSelector") else None
    selector = _merge_match_label_keys(selector, tsc.matchLabelKeys, labels)
    return Constraint(
        max_skew=tsc.maxSkew,
        key=tsc.topologyKey,
        selector=selector,
        min_domains=tsc.minDomains if tsc.HasField("minDomains") else 1,
        honor_affinity=(tsc.nodeAffinityPolicy or HONOR) == HONOR,
        honor_taints=(tsc.nodeTaintsPolicy or IGNORE) == HONOR,
    )


@dataclass
class _FilterState:
    constraints: list[Constraint]


@dataclass
class _ScoreState:
    constraints: list[Constraint]
    require_all: bool
    ignored: BOOL | None = None  # over the scored candidates, set by score()


class PodTopologySpread:
    name: ClassVar[str] = "PodTopologySpread"
    # kube's EventsToRegister: pods added, relabelled or deleted; nodes added, deleted (fewer
    # domains can raise the global minimum) or whose labels or taints changed; each with a hint
    events: ClassVar[frozenset[EventKind]] = frozenset(
        {
            EventKind.POD_ADD,
            EventKind.POD_LABEL,
            EventKind.POD_DELETE,
            EventKind.NODE_ADD,
            EventKind.NODE_LABEL,
            EventKind.NODE_TAINT,
            EventKind.NODE_DELETE,
        }
    )
    node_static: ClassVar[bool] = False

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None) -> None:
        args = args or {}
        self.handle = handle or Handle()
        defaulting = str(args.get("defaultingType", "System"))
        if defaulting not in ("System", "List"):
            raise ValueError(
                f"defaultingType: Unsupported value: {defaulting!r}: supported values: "
                '"List", "System"'
            )
        self.system_defaulted = defaulting == "System"
        self.defaults: list[tuple[str, int, str]] = []  # (key, maxSkew, whenUnsatisfiable)
        if self.system_defaulted:
            if args.get("defaultConstraints"):
                raise ValueError(
                    "defaultConstraints: Invalid value: when .defaultingType is System, "
                    "defaultConstraints must be empty"
                )
            self.defaults = [(k, s, SCHEDULE_ANYWAY) for k, s in SYSTEM_DEFAULTS]
        else:
            for i, c in enumerate(args.get("defaultConstraints") or []):
                if c.get("labelSelector"):
                    raise ValueError(
                        f"defaultConstraints[{i}].labelSelector: Forbidden: constraint must not "
                        "define a selector, as they deduced for each pod"
                    )
                self.defaults.append(
                    (
                        str(c["topologyKey"]),
                        int(c["maxSkew"]),
                        str(c.get("whenUnsatisfiable", DO_NOT_SCHEDULE)),
                    )
                )

    # ----- constraints ------------------------------------------------------------------
    def constraints(self, pod: PodInfo, action: str) -> list[Constraint]:
        """kube's getConstraints: the pod's own constraints of `action`, else the defaults.

        Raises SelectorError for a selector the apiserver should have refused."""
        spec = pod.pod.spec
        labels = pod.pod.metadata.labels
        if spec.topologySpreadConstraints:
            return [
                _parse(c, labels)
                for c in spec.topologySpreadConstraints
                if c.whenUnsatisfiable == action
            ]
        wanted = [(k, s) for k, s, when in self.defaults if when == action]
        if not wanted:
            return []
        workloads = self.handle.workloads
        selector = workloads.default_selector(pod) if workloads is not None else None
        if selector is None:
            return []
        return [Constraint(max_skew=s, key=k, selector=selector) for k, s in wanted]

    # ----- queueing hints (kube's isSchedulableAfterPodChange / ...NodeChange) -----------
    def queueing_hints(self) -> Mapping[EventKind, EventHint]:
        # only pods of the pod's own namespace are counted, so only they can help it
        pods = EventHint(self._after_pod_change, lambda pod: True)
        nodes = EventHint(self._after_node_change)
        return {
            EventKind.POD_ADD: pods,
            EventKind.POD_LABEL: pods,
            EventKind.POD_DELETE: pods,
            EventKind.NODE_ADD: nodes,
            EventKind.NODE_LABEL: nodes,
            EventKind.NODE_TAINT: nodes,
            EventKind.NODE_DELETE: nodes,
        }

    def _after_pod_change(self, pod: PodInfo, event: ClusterEvent) -> QueueingHint:
        """An assigned pod of the pod's namespace was added or deleted matching one of its
        DoNotSchedule constraints' selectors, or relabelled into or out of one."""
        old: PodInfo | None = event.old
        new: PodInfo | None = event.new
        if any(p is not None and p.namespace != pod.namespace for p in (old, new)):
            return QUEUE_SKIP
        cons = self.constraints(pod, DO_NOT_SCHEDULE)  # a SelectorError queues (kube: error)
        if old is not None and new is not None:
            before, after = old.pod.metadata.labels, new.pod.metadata.labels
            if before == after:
                return QUEUE_SKIP
            changed = any(c.matches(before) != c.matches(after) for c in cons)
            return QUEUE if changed else QUEUE_SKIP
        changed_pod = new if new is not None else old
        if changed_pod is None:
            return QUEUE_SKIP
        labels = changed_pod.pod.metadata.labels
        return QUEUE if any(c.matches(labels) for c in cons) else QUEUE_SKIP

    def _after_node_change(self, pod: PodInfo, event: ClusterEvent) -> QueueingHint:
        """A node with every constraint's key was added or deleted; or a node gained or lost
        one of the keys, changed one's value or its taints while it has them all; or (beyond
        kube's hint) it entered or left the nodes the pod's node affinity admits, which decides
        whether its domain counts under nodeAffinityPolicy Honor."""
        old: node_pb2.Node | None = event.old
        new: node_pb2.Node | None = event.new
        cons = self.constraints(pod, DO_NOT_SCHEDULE)
        if not cons:
            return QUEUE_SKIP

        def has_keys(node: node_pb2.Node | None) -> bool:
            return node is not None and all(c.key in node.metadata.labels for c in cons)

        if old is None or new is None:
            return QUEUE if has_keys(new if new is not None else old) else QUEUE_SKIP
        if has_keys(old) != has_keys(new):
            return QUEUE
        if not has_keys(new):
            return QUEUE_SKIP
        before, after = old.metadata.labels, new.metadata.labels
        if any(before.get(c.key) != after.get(c.key) for c in cons):
            return QUEUE
        if list(old.spec.taints) != list(new.spec.taints):
            return QUEUE
        if any(c.honor_affinity for c in cons) and node_matches_required(
            pod, old
        ) != node_matches_required(pod, new):
            return QUEUE
        return QUEUE_SKIP

    def _counts(self, pod: PodInfo, c: Constraint, n: int) -> I64:
        """Matching, non-terminating pods of the pod's namespace per node slot."""
        if c.selector is None or c.selector.empty:
            # nil selects nothing; kube v1.36 also counts nothing for an empty selector
            return np.zeros(n, np.int64)
        cache = self.handle.cache
        if cache is None:
            return np.zeros(n, np.int64)
        arr = cache.pod_index.counts(frozenset({pod.namespace}), c.selector)
        out: I64 = arr[:n]
        return out

    def _policies(self, pod: PodInfo, nodes: NodeTable, cons: Sequence[Constraint]) -> BOOL:
        """Slots each constraint's inclusion policies admit, one row per constraint."""
        n = nodes.n
        affinity: BOOL | None = None
        taints: BOOL | None = None
        rows = np.ones((len(cons), n), bool)
        for i, c in enumerate(cons):
            if c.honor_affinity:
                if affinity is None:
                    affinity = required_mask(nodes, pod)
                rows[i] &= affinity
            if c.honor_taints:
                if taints is None:
                    taints = _tolerated_slots(pod, nodes)
                rows[i] &= taints
        return rows

    # ----- PreFilter / Filter -----------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        try:
            cons = self.constraints(pod, DO_NOT_SCHEDULE)
        except SelectorError as exc:
            return Status.error(f"obtaining pod's hard topology spread constraints: {exc}")
        if not cons:
            return SKIP
        state.write(PRE_FILTER_KEY, _FilterState(cons))
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        fs: _FilterState | None = state.read(PRE_FILTER_KEY)
        if fs is None:
            return None
        n = nodes.n
        cons = fs.constraints
        ids_of = [_ids(nodes, c.key, n) for c in cons]
        has_all = nodes.valid[:n].copy()
        for ids in ids_of:
            has_all &= ids >= 0
        policies = self._policies(pod, nodes, cons)
        labels = pod.pod.metadata.labels
        codes = np.zeros(n, np.int32)
        for i, c in enumerate(cons):
            ids = ids_of[i]
            eligible = has_all & policies[i]
            width = _width(nodes, c.key) + 1  # one spare entry, so a key no node has works
            e_ids = ids[eligible]
            per_domain = np.bincount(
                e_ids, weights=self._counts(pod, c, n)[eligible], minlength=width
            ).astype(np.int64)
            present = np.bincount(e_ids, minlength=width) > 0
            domains = int(np.count_nonzero(present))
            global_min = int(per_domain[present].min()) if domains >= c.min_domains else 0
            self_match = 1 if c.matches(labels) else 0
            missing = ids < 0
            skew = per_domain[np.where(missing, 0, ids)] + self_match - global_min
            free = codes == 0
            codes[free & missing] = 2
            codes[free & ~missing & (skew > c.max_skew)] = 1
        return FilterResult(
            codes,
            (ERR_CONSTRAINTS, ERR_MISSING_LABEL),
            code=Code.UNSCHEDULABLE,
            unresolvable_codes=frozenset({2}),
        )

    # ----- PreScore / Score -------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        try:
            cons = self.constraints(pod, SCHEDULE_ANYWAY)
        except SelectorError as exc:
            return Status.error(f"obtaining pod's soft topology spread constraints: {exc}")
        if not cons or nodes.count == 0:
            return SKIP
        # only the pod's own (or configured) constraints need every key on a node, so nodes
        # without a zone label still get hostname spreading from the system defaults
        require_all = bool(pod.pod.spec.topologySpreadConstraints) or not self.system_defaulted
        state.write(PRE_SCORE_KEY, _ScoreState(cons, require_all))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        n = nodes.n
        cand = np.arange(n) if idx is None else idx
        ss: _ScoreState | None = state.read(PRE_SCORE_KEY)
        if ss is None:
            return np.zeros(len(cand), np.int64)
        cons = ss.constraints
        ids_of = [_ids(nodes, c.key, n) for c in cons]
        has_all = nodes.valid[:n].copy()
        if ss.require_all:
            for ids in ids_of:
                has_all &= ids >= 0
        ignored = ~has_all[cand]
        kept = cand[~ignored]
        policies = self._policies(pod, nodes, cons)
        total = np.zeros(len(cand), np.float64)
        for i, c in enumerate(cons):
            ids = ids_of[i]
            counts = self._counts(pod, c, n)
            on_key = ids[cand] >= 0
            if c.key == HOSTNAME:
                size = len(kept)
                per_node = counts[cand]
            else:
                # a missing key is the domain "" in kube, shared with an empty label value
                width = _width(nodes, c.key)
                lc = nodes.labels.get(c.key)
                blank = lc.value_ids.get("", width) if lc is not None else width
                eff = np.where(ids < 0, blank, ids)
                in_scored = np.zeros(width + 1, bool)
                in_scored[eff[kept]] = True
                size = int(np.count_nonzero(in_scored))
                eligible = has_all & policies[i]
                per_domain = np.bincount(
                    eff[eligible], weights=counts[eligible], minlength=width + 1
                )
                per_node = per_domain[eff[cand]]
            weight = math.log(size + 2)
            total += np.where(on_key, per_node * weight + (c.max_skew - 1), 0.0)
        # Go's math.Round: halves away from zero (scores are never negative)
        out: I64 = np.floor(total + 0.5).astype(np.int64)
        out[ignored] = 0
        ss.ignored = ignored
        return out

    def normalize(self, state: CycleState, pod: PodInfo, scores: I64) -> I64:
        ss: _ScoreState | None = state.read(PRE_SCORE_KEY)
        if ss is None or ss.ignored is None or len(scores) == 0:
            return scores
        ignored = ss.ignored
        valid = scores[~ignored]
        if len(valid) == 0:
            return np.zeros(len(scores), np.int64)
        top = int(valid.max())
        low = int(valid.min())
        if top == 0:
            out = np.full(len(scores), MAX_NODE_SCORE, np.int64)
        else:
            out = MAX_NODE_SCORE * (top + low - scores) // top
        out[ignored] = 0
        return out


def _ids(nodes: NodeTable, key: str, n: int) -> npt.NDArray[np.int32]:
    lc = nodes.labels.get(key)
    if lc is None:
        return np.full(n, -1, np.int32)
    return lc.ids[:n]


def _width(nodes: NodeTable, key: str) -> int:
    lc = nodes.labels.get(key)
    return 0 if lc is None else len(lc.values)


def _tolerated_slots(pod: PodInfo, nodes: NodeTable) -> BOOL:
    """Slots without a NoSchedule/NoExecute taint the pod does not tolerate (per taint set)."""
    tols = pod.pod.spec.tolerations
    ok = np.array(
        [
            all(t.effect not in (NO_SCHEDULE, NO_EXECUTE) or tolerated(tols, t) for t in taints)
            for taints in nodes.taint_sets
        ],
        bool,
    )
    out: BOOL = ok[nodes.taint_set[: nodes.n]]
    return out
