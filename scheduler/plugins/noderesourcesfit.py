"""NodeResourcesFit (Filter, Score; weight 1): requests must fit the node's free allocatable.

Filter: "Too many pods" when the node has no pod slot left (a node without a pods allocatable
holds none), then "Insufficient <resource>" for each resource short, every one listed; a pod
that requests nothing fits as zero. Score: LeastAllocated (default) or MostAllocated over the
configured resources with weights, counting a pod without requests as 100m cpu and 200Mi memory,
with kube's integer arithmetic; a node without a resource leaves it out of its weighted mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import (
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    MAX_NODE_SCORE,
    CycleState,
    FilterResult,
)
from scheduler.plugins.helper import I64, IDX, resource_arrays
from scheduler.podinfo import CPU, MEMORY, PodInfo

ERR_TOO_MANY_PODS = "Too many pods"


class NodeResourcesFit:
    name: ClassVar[str] = "NodeResourcesFit"
    events: ClassVar[frozenset[EventKind]] = frozenset(
        {EventKind.NODE_ADD, EventKind.NODE_ALLOCATABLE, EventKind.POD_DELETE}
    )
    node_static: ClassVar[bool] = False
    STRATEGIES = ("LeastAllocated", "MostAllocated")

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        args = args or {}
        strategy = args.get("scoringStrategy", {}) or {}
        self.strategy = str(strategy.get("type", "LeastAllocated"))
        if self.strategy not in self.STRATEGIES:
            raise ValueError(
                f"scoringStrategy.type: unsupported value {self.strategy!r}, "
                f"expected one of {', '.join(self.STRATEGIES)}"
            )
        resources = strategy.get("resources") or [
            {"name": CPU, "weight": 1},
            {"name": MEMORY, "weight": 1},
        ]
        self.resources = [(str(r["name"]), int(r.get("weight", 1))) for r in resources]

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        n = nodes.n
        reasons = [ERR_TOO_MANY_PODS, "Insufficient cpu", "Insufficient memory"]
        # bit 0: pods, 1: cpu, 2: memory, 3+: extended resources in sorted order
        wide = len(pod.extended) > 5
        codes: npt.NDArray[Any] = np.less(nodes.free_pods[:n], 1).view(np.uint8)
        if wide:
            codes = codes.astype(np.int32)
        if not pod.zero_request:
            if pod.cpu > 0:
                codes = codes | (np.less(nodes.free_cpu[:n], pod.cpu).view(np.uint8) << 1)
            if pod.memory > 0:
                codes = codes | (np.less(nodes.free_mem[:n], pod.memory).view(np.uint8) << 2)
            for name, amount in sorted(pod.extended.items()):
                bit = len(reasons)
                reasons.append(f"Insufficient {name}")
                col = nodes.ext.get(name)
                if col is None:
                    codes = codes | (1 << bit)
                else:
                    short = np.less(col.alloc[:n] - col.req[:n], amount).astype(codes.dtype)
                    codes = codes | (short << bit)
        return FilterResult(codes, reasons, bitmask=True)

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        size = nodes.n if idx is None else len(idx)
        num: I64 = np.zeros(size, np.int64)
        den = 0
        den_arr: I64 | None = None
        least = self.strategy == "LeastAllocated"
        for name, weight in self.resources:
            req, alloc = resource_arrays(nodes, pod, name, idx, nonzero=True)
            if len(alloc) and alloc.min() > 0:
                # fast path (every node has the resource): kube's integer formulas, unmasked
                if least:
                    s = np.maximum((alloc - req) * MAX_NODE_SCORE // alloc, 0)
                else:
                    s = np.minimum(req, alloc) * MAX_NODE_SCORE // alloc
                num += s * weight
                den += weight
                continue
            # nodes without the resource leave it out of their weighted mean
            has = alloc > 0
            safe = np.where(has, alloc, 1)
            if least:
                s = np.where(req > alloc, 0, (alloc - req) * MAX_NODE_SCORE // safe)
            else:
                s = np.minimum(req, alloc) * MAX_NODE_SCORE // safe
            num += np.where(has, s * weight, 0)
            part = np.where(has, weight, 0)
            den_arr = part if den_arr is None else den_arr + part
        if den_arr is None:
            return num // den if den else num * 0
        total_den = den_arr + den
        out: I64 = np.where(total_den > 0, num // np.maximum(total_den, 1), 0)
        return out
