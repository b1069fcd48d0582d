"""SchedulingGates (PreEnqueue): a pod with spec.schedulingGates never enters activeQ.

As kube-scheduler's schedulinggates plugin: PreEnqueue answers UnschedulableAndUnresolvable
"waiting for scheduling gates: [a b]" while any gate is left, so the queue parks the pod in its
gated set, where no cluster event and no timeout moves it; it takes no scheduling cycle and
reserves nothing. The pod's own update that removes the last gate (the only event that can
help: gates may only be removed) runs PreEnqueue again and queues it. Other spec changes the
apiserver allows while gated (nodeSelector additions, narrower node affinity) arrive with
that update and are what the cycle sees.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.cache import EventKind
from scheduler.framework import SUCCESS, Status
from scheduler.podinfo import PodInfo


class SchedulingGates:
    name: ClassVar[str] = "SchedulingGates"
    # Cluster events never help; the pod's own update is handled by the queue's PreEnqueue.
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = True

    def pre_enqueue(self, pod: PodInfo) -> Status:
        gates = pod.pod.spec.schedulingGates
        if not gates:
            return SUCCESS
        names = " ".join(g.name for g in gates)
        return Status.unresolvable(f"waiting for scheduling gates: [{names}]", plugin=self.name)
