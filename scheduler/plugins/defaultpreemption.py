"""DefaultPreemption (PostFilter): when no node fits, evict lower-priority pods to make room.

Follows kube-scheduler v1.36's defaultpreemption plugin and framework/preemption evaluator:
- eligibility first: a pod with preemptionPolicy Never does not preempt ("not eligible due to
  preemptionPolicy=Never."), nor one whose nominated node still has a lower-priority pod
  terminating because the scheduler preempted it (DisruptionTarget/PreemptionByScheduler), unless
  that node now fails unresolvably;
- only nodes whose first failing filter was resolvable (Unschedulable: resources, host ports,
  InterPodAffinity's anti-affinity, PodTopologySpread's skew; not taints, node affinity or
  cordon) are candidates; the others are "Preemption is not helpful for scheduling";
- SelectVictimsOnNode on a candidate: every lower-priority pod (not already terminating) is
  taken off the node in the cache for the dry run (`SchedulerCache.removing`: the columns and
  the PodIndex follow, assumed and nominated pods stay as they are, everything is put back
  however the run ends) and the profile's PreFilter and Filter plugins run as in the cycle
  (`Handle.filter_node`, with the pods nominated for the cycle counted). If the pod still does
  not fit, the node reports the first failing filter's reasons (or "No preemption victims found
  for incoming pod" when it has no lower-priority pod). Otherwise the victims are "reprieved"
  from the most important down (priority, then earliest start), each kept if the filters still
  pass with it back: first those whose eviction would break a PodDisruptionBudget
  (filterPodsWithPDBViolation: a budget's disruptionsAllowed is spent by each selected victim
  not already in its disruptedPods), then the rest; a violating victim that cannot be
  reprieved is a PDB violation. A node where nothing needs to go is kube's error "expected at
  least one victim pod on node ...";
- DryRunPreemption: the potential nodes are tried from a random offset (GetOffsetAndNumCandidates;
  `rng` is injectable), wrapping, until enough candidates are found (10% of the nodes, at
  least `max_candidates` = minCandidateNodesAbsolute 100, one of them without violations);
  each of the two lists (without / with violations) keeps that many at most. Then one is
  picked: the fewest PDB violations, the lowest highest-victim priority, the lowest sum of
  victim priorities, the fewest victims, the latest start among the highest-priority victims,
  then the first found, those without violations first.
A failure is Status.unschedulable with kube's text, `preemption: ...`, which the algorithm
appends to the FitError message. The plugin only decides; the scheduler marks the victims with
DisruptionTarget, deletes them with their grace periods and sets status.nominatedNodeName. The
preemptor is nominated to the node (status.nominatedNodeName, and at once in the cache); while
nominated, its requests count on that node for pods of lower priority, so the freed room waits
for it. Not modelled: extenders; kube also takes terminating lower-priority pods as victims
(skipping their deletion), tinykube leaves them out.

Runs in the scheduling cycle, only for pods that fit nowhere. Cost: per node tried, one filter
pass (numpy over all node slots) with the victims removed and one per victim put back, except
where the NodePorts/NodeResourcesFit check alone decides: a pod that cannot fit by resources or
ports fails without a pass, and a victim the other filters cannot see (`PodIndex.visible`: it
matches no registered selector and carries no affinity terms) is judged by that check alone.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import EventKind, NodeTable, SchedulerCache
from scheduler.framework import Code, CycleState, Handle, Status
from scheduler.plugins.nodeports import ERR_PORTS
from scheduler.plugins.noderesourcesfit import ERR_TOO_MANY_PODS
from scheduler.podinfo import PodInfo
from tinykube import disruption
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

VICTIMS_KEY = "DefaultPreemption/victims"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
# The DisruptionTarget condition the scheduler sets on its victims (kube's preemption).
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_REASON = "PreemptionByScheduler"


def disruption_message(scheduler_name: str) -> str:
    """The DisruptionTarget condition's message on a victim, as kube-scheduler words it."""
    return f"{scheduler_name}: preempting to accommodate a higher priority pod"


def misfit(
    pod: PodInfo, nodes: NodeTable, slot: int, removed: list[PodInfo], remaining: list[PodInfo]
) -> list[str]:
    """Why `pod` fails NodePorts or NodeResourcesFit on `slot` with `removed` pods gone (the
    first failing plugin's reasons, in kube's filter order); [] when it fits."""
    for hp in pod.host_ports:
        if any(hp.conflicts(other) for p in remaining for other in p.host_ports):
            return [ERR_PORTS]
    reasons = []
    if nodes.free_pods[slot] + len(removed) < 1:
        reasons.append(ERR_TOO_MANY_PODS)
    if not pod.zero_request:
        if pod.cpu > 0 and pod.cpu > nodes.free_cpu[slot] + sum(p.cpu for p in removed):
            reasons.append("Insufficient cpu")
        if pod.memory > 0 and pod.memory > nodes.free_mem[slot] + sum(p.memory for p in removed):
            reasons.append("Insufficient memory")
        for name, amount in sorted(pod.extended.items()):
            col = nodes.ext.get(name)
            free = 0
            if col is not None:
                free = int(col.alloc[slot] - col.req[slot]) + sum(
                    p.extended.get(name, 0) for p in removed
                )
            if col is None or amount > free:
                reasons.append(f"Insufficient {name}")
    return reasons


def start_time(p: PodInfo) -> float:
    """GetPodStartTime: status.startTime, else (not started yet) its creation."""
    st = p.pod.status.startTime
    if st.seconds or st.nanos:
        return st.seconds + st.nanos / 1e9
    return p.created


def more_important_first(p: PodInfo) -> tuple[int, float]:
    """MoreImportantPod as a sort key: higher priority, then the earlier start."""
    return (-p.priority, start_time(p))


def split_by_pdb_violation(
    victims: list[PodInfo], pdbs: Iterable[pdb_pb2.PodDisruptionBudget]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """filterPodsWithPDBViolation: (violating, non-violating), each in the given order. Every
    victim a budget selects (and has not already let go: disruptedPods) spends one of its
    disruptionsAllowed; a victim that takes a budget below zero violates it."""
    budgets = [b for b in pdbs if disruption.budget_selector(b) is not None]
    allowed = [b.status.disruptionsAllowed for b in budgets]
    violating: list[PodInfo] = []
    fine: list[PodInfo] = []
    for v in victims:
        broke = False
        if v.pod.metadata.labels:
            for i, b in enumerate(budgets):
                if not disruption.selects(b, v.pod) or v.name in b.status.disruptedPods:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    broke = True
        (violating if broke else fine).append(v)
    return violating, fine


@dataclass
class NodeVictims:
    victims: list[PodInfo]
    violations: int


# The filters whose verdict `misfit` computes without touching the cache; with both in the
# profile, a misfit is a failure of the whole filter run and the run can be skipped.
_FIT_FILTERS = frozenset({"NodePorts", "NodeResourcesFit"})


def select_victims_on_node(
    pod: PodInfo,
    cache: SchedulerCache,
    slot: int,
    pdbs: list[pdb_pb2.PodDisruptionBudget],
    filter_node: Callable[[PodInfo, int], Status] | None,
    fit_filters: bool,
) -> NodeVictims | Status:
    """kube's SelectVictimsOnNode: the fewest victims to make room, or the node's status.

    The lower-priority pods are taken off the node in the cache (`SchedulerCache.removing`)
    and the profile's filters run there (`filter_node`); each victim, the most important
    first, PodDisruptionBudget-violating ones before the rest, is put back and kept if the
    filters still pass. Whatever happens, the cache is as before on return. Without
    `filter_node` (a plugin outside an Algorithm) only resources and host ports are checked.
    With `fit_filters` (NodePorts and NodeResourcesFit in the profile) a pod that cannot fit
    by resources or ports is known to fail without running the filters."""
    nodes = cache.nodes
    on_slot = list(nodes.pod_index.pods_on_slot(slot))
    # pods nominated for this cycle are on the slot too, but are no one's victims
    lower = [
        p
        for p in on_slot
        if p.key in cache.pods and p.priority < pod.priority and not p.terminating
    ]
    if not lower:
        return Status.unresolvable(NO_VICTIMS)
    if fit_filters:
        gone = {p.key for p in lower}
        reasons = misfit(pod, nodes, slot, lower, [p for p in on_slot if p.key not in gone])
        if reasons:
            return Status.unschedulable(*reasons)

    def check() -> Status:
        if fit_filters or filter_node is None:
            reasons = misfit(pod, nodes, slot, [], list(nodes.pod_index.pods_on_slot(slot)))
            if reasons:
                return Status.unschedulable(*reasons)
        return filter_node(pod, slot) if filter_node is not None else Status()

    with cache.removing(slot) as removal:
        for p in lower:
            removal.remove(p)
        status = check()
        if not status.ok:
            return status
        lower.sort(key=more_important_first)
        violating, fine = split_by_pdb_violation(lower, pdbs)
        victims: list[PodInfo] = []
        violations = 0
        index = nodes.pod_index
        for group, counts in ((violating, True), (fine, False)):
            for p in group:
                removal.restore(p)
                if fit_filters and filter_node is not None and not index.visible(p):
                    # the filters passed without p and, beyond resources and ports, see pods
                    # only through the PodIndex, to which p is invisible: only the fit can
                    # change (the pass before registered every selector the pod's filters use)
                    fits = not misfit(pod, nodes, slot, [], list(index.pods_on_slot(slot)))
                else:
                    fits = check().ok
                if not fits:
                    removal.remove(p)
                    victims.append(p)
                    violations += counts
    if not victims:
        # the filters pass with nothing removed: the cycle saw otherwise, so kube calls it an
        # error rather than a candidate
        return Status.error(f'expected at least one victim pod on node "{nodes.names[slot]}"')
    if violating and fine:
        victims.sort(key=more_important_first)
    return NodeVictims(victims, violations)


def pick_key(order: int, nv: NodeVictims) -> tuple[int, int, int, int, float, int]:
    """pickOneNodeForPreemption's criteria as a key to minimise."""
    vs = nv.victims
    top = max(v.priority for v in vs)
    earliest = min(start_time(v) for v in vs if v.priority == top)
    return (nv.violations, top, sum(v.priority for v in vs), len(vs), -earliest, order)


def fit_error(total: int, reasons: Counter[str]) -> str:
    """FitError's text: "0/3 nodes are available: 1 Insufficient cpu, 2 No preemption..."."""
    parts = sorted(f"{c} {r}" for r, c in reasons.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


def num_candidates(potential: int, min_percentage: int = 10, min_absolute: int = 100) -> int:
    """GetOffsetAndNumCandidates' count: 10% of the potential nodes, at least 100, at most all."""
    n = potential * min_percentage // 100
    return min(max(n, min_absolute), potential)


def terminating_by_preemption(p: PodInfo) -> bool:
    """podTerminatingByPreemption: being deleted, with DisruptionTarget/PreemptionByScheduler."""
    return p.terminating and any(
        c.type == DISRUPTION_TARGET and c.reason == PREEMPTION_REASON and c.status == "True"
        for c in p.pod.status.conditions
    )


class DefaultPreemption:
    name: ClassVar[str] = "DefaultPreemption"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = False

    def __init__(
        self, handle: Handle, max_candidates: int = 100, rng: random.Random | None = None
    ) -> None:
        self.handle = handle
        # minCandidateNodesAbsolute: how many candidates are enough to stop the dry run.
        self.max_candidates = max_candidates
        self.rng = rng or random.Random()

    def offset(self, potential: int) -> int:
        """GetOffsetAndNumCandidates' offset: where the dry run starts among the potential
        nodes, at random as kube (rand.Int31n), so preemption does not always fall on the
        first nodes of a large cluster."""
        return self.rng.randrange(potential)

    def _budgets(self) -> list[pdb_pb2.PodDisruptionBudget]:
        store: Any = self.handle.pdbs
        return list(store.list()) if store is not None else []

    def post_filter(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: NodeTable,
        resolvable: npt.NDArray[np.bool_],
    ) -> tuple[str | None, Status]:
        cache: SchedulerCache | None = self.handle.cache
        if cache is None:
            return None, Status.unschedulable(plugin=self.name)  # not wired: says nothing
        if pod.pod.spec.preemptionPolicy == "Never":
            return None, self._failed(NEVER)
        total = nodes.count
        valid = nodes.valid[: nodes.n]
        potential_mask = resolvable[: nodes.n] & valid
        nominated = pod.pod.status.nominatedNodeName
        if nominated:
            slot = nodes.index.get(nominated)
            unresolvable = slot is not None and not potential_mask[slot]
            if not unresolvable and any(
                p.priority < pod.priority and terminating_by_preemption(p)
                for p in cache.pods_on(nominated)
            ):
                # an earlier preemption is still making room: wait for it, do not evict more
                return None, self._failed(TERMINATING)
        potential = np.flatnonzero(potential_mask).tolist()
        if not potential:
            return None, self._failed(fit_error(total, Counter({NOT_HELPFUL: total})))
        if not any(prio < pod.priority for prio in cache.priorities):
            # the common case: nothing on any node has a lower priority
            reasons = Counter({NO_VICTIMS: len(potential)})
            if total > len(potential):
                reasons[NOT_HELPFUL] = total - len(potential)
            return None, self._failed(fit_error(total, reasons))
        pdbs = self._budgets()
        wanted = num_candidates(len(potential), min_absolute=self.max_candidates)
        offset = self.offset(len(potential))
        fit_filters = _FIT_FILTERS.issubset(self.handle.filter_names)
        # DryRunPreemption: nodes from a random offset, wrapping; it stops once it has
        # `wanted` candidates of which one breaks no budget. Each list holds `wanted` at most.
        clean: list[tuple[str, NodeVictims]] = []
        violating: list[tuple[str, NodeVictims]] = []
        statuses: Counter[str] = Counter()
        errors: list[str] = []
        for i in range(len(potential)):
            slot = potential[(offset + i) % len(potential)]
            outcome = select_victims_on_node(
                pod, cache, slot, pdbs, self.handle.filter_node, fit_filters
            )
            if isinstance(outcome, Status):
                if outcome.code == Code.ERROR:
                    errors.append(outcome.message())
                for r in outcome.reasons:
                    statuses[r] += 1
                continue
            group = violating if outcome.violations else clean
            if len(group) < wanted:
                group.append((nodes.names[slot], outcome))
            if clean and len(clean) + len(violating) >= wanted:
                break
        found = clean + violating
        if not found:
            if errors:
                return None, self._error(errors)
            if total > len(potential):
                statuses[NOT_HELPFUL] += total - len(potential)
            return None, self._failed(fit_error(total, statuses))
        # pickOneNodeForPreemption; its last tie-break is the first candidate, non-violating
        # ones first, each in the order the dry run found them
        _, node, chosen = min(
            (pick_key(order, nv), name, nv) for order, (name, nv) in enumerate(found)
        )
        state.write(VICTIMS_KEY, chosen.victims)
        return node, Status(plugin=self.name)

    def _error(self, errors: list[str]) -> Status:
        """utilerrors.NewAggregate's text: one error as itself, several as "[a, b]"."""
        unique = list(dict.fromkeys(errors))
        text = unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]"
        return Status.error(f"preemption: {text}", plugin=self.name)

    def _failed(self, message: str) -> Status:
        return Status.unschedulable(f"preemption: {message}", plugin=self.name)


def victims(state: CycleState) -> list[PodInfo]:
    found: Any = state.read(VICTIMS_KEY)
    return list(found or [])
