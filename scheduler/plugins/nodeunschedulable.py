"""NodeUnschedulable (Filter): a cordoned node (spec.unschedulable) takes no new pods.

As kube-scheduler, a cordon is the taint node.kubernetes.io/unschedulable:NoSchedule for this
check, so a pod tolerating it (or tolerating everything: empty key, operator Exists) passes.
Reason "node(s) were unschedulable"; not resolvable by preemption.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduler.cache import (
    NO_SCHEDULE,
    EventKind,
    NodeTable,
    Taint,
)
from scheduler.framework import (
    CycleState,
    FilterResult,
    Status,
)
from scheduler.plugins.helper import tolerated
from scheduler.podinfo import PodInfo

ERR_UNSCHEDULABLE = "node(s) were unschedulable"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"


class NodeUnschedulable:
    name: ClassVar[str] = "NodeUnschedulable"
    events: ClassVar[frozenset[EventKind]] = frozenset({EventKind.NODE_ADD, EventKind.NODE_TAINT})
    node_static: ClassVar[bool] = True

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        taint = Taint(TAINT_UNSCHEDULABLE, "", NO_SCHEDULE)
        if tolerated(pod.pod.spec.tolerations, taint):
            return None
        return FilterResult(
            nodes.unschedulable[: nodes.n].astype(np.int32),
            (ERR_UNSCHEDULABLE,),
            code=Status.unresolvable().code,
        )
