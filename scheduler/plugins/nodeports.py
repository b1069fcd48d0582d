"""NodePorts (PreFilter, Filter): a host port the pod wants must be free on the node.

Ports conflict on the same port and protocol when either host IP is 0.0.0.0 or both are equal.
Unlike kube-scheduler a bare containerPort counts too (see PodInfo: pods of the process runtime
share their node's network). Reason "node(s) didn't have free ports for the requested pod ports".
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduler.cache import (
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    SKIP,
    SUCCESS,
    CycleState,
    FilterResult,
    Status,
)
from scheduler.podinfo import PodInfo

ERR_PORTS = "node(s) didn't have free ports for the requested pod ports"


class NodePorts:
    name: ClassVar[str] = "NodePorts"
    events: ClassVar[frozenset[EventKind]] = frozenset({EventKind.NODE_ADD, EventKind.POD_DELETE})
    node_static: ClassVar[bool] = False

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        return SUCCESS if pod.host_ports else SKIP

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        if not pod.host_ports:
            return None
        codes = np.zeros(nodes.n, np.int32)
        for hp in pod.host_ports:
            for slot, used in nodes.ports.get(hp.port, {}).items():
                if any(hp.conflicts(u) for u in used):
                    codes[slot] = 1
        return FilterResult(codes, (ERR_PORTS,))
