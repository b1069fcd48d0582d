"""NodeName (Filter): a pod with spec.nodeName fits only the node of that name.

Reason "node(s) didn't match the requested node name"; not resolvable by preemption.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduler.cache import (
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    CycleState,
    FilterResult,
    Status,
)
from scheduler.plugins.helper import NODE_EVENTS
from scheduler.podinfo import PodInfo

ERR_NODE_NAME = "node(s) didn't match the requested node name"


class NodeName:
    name: ClassVar[str] = "NodeName"
    events: ClassVar[frozenset[EventKind]] = NODE_EVENTS
    node_static: ClassVar[bool] = True

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        if not pod.node_name:
            return None
        codes = np.ones(nodes.n, np.int32)
        slot = nodes.index.get(pod.node_name)
        if slot is not None:
            codes[slot] = 0
        return FilterResult(codes, (ERR_NODE_NAME,), code=Status.unresolvable().code)
