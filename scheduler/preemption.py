"""DefaultPreemption: when no node fits, find lower-priority pods whose removal makes room.

Follows kube-scheduler's algorithm, simplified:
- a pod with preemptionPolicy Never, or whose earlier nomination still waits for terminating
  victims, does not preempt;
- only nodes whose first failing filter was resolvable (Unschedulable: resources or host
  ports, not taints/affinity/cordon) are candidates;
- on a candidate node every lower-priority pod is removed; if the pod then fits, victims are
  "reprieved" from the highest priority down while it still fits; what remains are the victims;
- among candidates: the lowest highest-victim priority, then the lowest sum of victim
  priorities, then the fewest victims, then the first node in the scheduler's order.
The plugin only decides; the scheduler deletes the victims and sets status.nominatedNodeName.
The preemptor is nominated to the node (status.nominatedNodeName, and at once in the cache);
while nominated, its requests count on that node for pods of lower priority, so the freed
room waits for it. Not modelled: PodDisruptionBudgets.

Runs in the scheduling cycle, only for pods that fit nowhere; a Python loop over candidate
nodes and their pods (bounded by `max_candidates`) is acceptable on this failure path.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import EventKind, NodeTable, SchedulerCache
from scheduler.framework import CycleState, Handle, Status
from scheduler.podinfo import PodInfo

VICTIMS_KEY = "DefaultPreemption/victims"


def fits_without(
    pod: PodInfo, nodes: NodeTable, slot: int, removed: list[PodInfo], remaining: list[PodInfo]
) -> bool:
    """Would `pod` pass NodeResourcesFit and NodePorts on `slot` with `removed` pods gone?"""
    if nodes.free_pods[slot] + len(removed) < 1:
        return False
    if not pod.zero_request:
        if pod.cpu > 0 and pod.cpu > nodes.free_cpu[slot] + sum(p.cpu for p in removed):
            return False
        if pod.memory > 0 and pod.memory > nodes.free_mem[slot] + sum(p.memory for p in removed):
            return False
        for name, amount in pod.extended.items():
            col = nodes.ext.get(name)
            if col is None:
                return False
            free = int(col.alloc[slot] - col.req[slot]) + sum(
                p.extended.get(name, 0) for p in removed
            )
            if amount > free:
                return False
    for hp in pod.host_ports:
        if any(hp.conflicts(other) for p in remaining for other in p.host_ports):
            return False
    return True


class DefaultPreemption:
    name: ClassVar[str] = "DefaultPreemption"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = False

    def __init__(self, handle: Handle, max_candidates: int = 100) -> None:
        self.handle = handle
        self.max_candidates = max_candidates

    def post_filter(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: NodeTable,
        resolvable: npt.NDArray[np.bool_],
    ) -> tuple[str | None, Status]:
        cache: SchedulerCache | None = self.handle.cache
        if cache is None:
            return None, Status.unschedulable("preemption is not configured", plugin=self.name)
        if not any(prio < pod.priority for prio in cache.priorities):
            # the common case: nothing on any node has a lower priority
            return None, Status.unschedulable(
                "No preemption victims found for incoming pod.", plugin=self.name
            )
        if pod.pod.spec.preemptionPolicy == "Never":
            return None, Status.unresolvable("not eligible due to preemptionPolicy=Never.")
        nominated = pod.pod.status.nominatedNodeName
        if nominated and any(
            p.terminating and p.priority < pod.priority for p in cache.pods_on(nominated)
        ):
            # an earlier preemption is still making room: wait for it, do not evict more
            return None, Status.unschedulable("waiting for victims of an earlier preemption")
        best: tuple[tuple[int, int, int, int], str, list[PodInfo]] | None = None
        for order, slot in enumerate(np.flatnonzero(resolvable).tolist()[: self.max_candidates]):
            node = nodes.names[slot]
            on_node = list(cache.pods_on(node))
            lower = [p for p in on_node if p.priority < pod.priority and not p.terminating]
            if not lower:
                continue
            higher = [p for p in on_node if not (p.priority < pod.priority and not p.terminating)]
            if not fits_without(pod, nodes, slot, lower, higher):
                continue
            # reprieve the most important pods first while the pod still fits
            lower.sort(key=lambda p: (-p.priority, p.created))
            victims = list(lower)
            kept = list(higher)
            for p in lower:
                trial = [v for v in victims if v is not p]
                if fits_without(pod, nodes, slot, trial, [*kept, p]):
                    victims = trial
                    kept.append(p)
            if not victims:
                # resources were never short here (a resolvable rejection by another filter,
                # e.g. PodTopologySpread's skew, which this simplified search does not model)
                continue
            key = (
                max(v.priority for v in victims),
                sum(v.priority for v in victims),
                len(victims),
                order,
            )
            if best is None or key < best[0]:
                best = (key, node, victims)
        if best is None:
            return None, Status.unschedulable(
                "No preemption victims found for incoming pod.", plugin=self.name
            )
        state.write(VICTIMS_KEY, best[2])
        return best[1], Status(plugin=self.name)


def victims(state: CycleState) -> list[PodInfo]:
    found: Any = state.read(VICTIMS_KEY)
    return list(found or [])
