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
from scheduler.plugins.helper import I64, IDX, ShapeCache, column, resource_arrays
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
        # Verdicts and scores of pods without extended resources, by their cpu and memory.
        self._fits: ShapeCache[tuple[int, int]] = ShapeCache(self._fit_codes, self._fit_code)
        self._default_scoring = self.resources == [(CPU, 1), (MEMORY, 1)]
        self._scores: ShapeCache[tuple[int, int]] = ShapeCache(self._full_score, self._one_score)

    # ----- the verdicts of a cpu/memory shape (ShapeCache) ------------------------------
    @staticmethod
    def _fit_codes(nodes: NodeTable, shape: tuple[int, int]) -> npt.NDArray[Any]:
        n = nodes.n
        cpu, memory = shape
        codes: npt.NDArray[Any] = np.less(nodes.free_pods[:n], 1).view(np.uint8)
        if cpu > 0:
            codes = codes | (np.less(nodes.free_cpu[:n], cpu).view(np.uint8) << 1)
        if memory > 0:
            codes = codes | (np.less(nodes.free_mem[:n], memory).view(np.uint8) << 2)
        return codes

    @staticmethod
    def _fit_code(nodes: NodeTable, shape: tuple[int, int], slot: int) -> int:
        cpu, memory = shape
        code = int(nodes.free_pods[slot] < 1)
        if cpu > 0 and nodes.free_cpu[slot] < cpu:
            code |= 2
        if memory > 0 and nodes.free_mem[slot] < memory:
            code |= 4
        return code

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        n = nodes.n
        reasons = [ERR_TOO_MANY_PODS, "Insufficient cpu", "Insufficient memory"]
        if not pod.extended:
            shape = (0, 0) if pod.zero_request else (pod.cpu, pod.memory)
            cached = self._fits.get(nodes, shape)
            if cached is not None:
                return FilterResult(cached, reasons, bitmask=True)
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

    # ----- the default scoring of a cpu/memory shape (ShapeCache) -----------------------
    def _full_score(self, nodes: NodeTable, shape: tuple[int, int]) -> I64:
        """Every node's score for non-zero requests `shape`; -1 where a node lacks cpu or
        memory (the general path handles those)."""
        n = nodes.n
        cpu, memory = shape
        a1 = nodes.alloc_cpu[:n]
        a2 = nodes.alloc_mem[:n]
        ok = (a1 > 0) & (a2 > 0)
        s1 = np.maximum((a1 - (nodes.nz_cpu[:n] + cpu)) * MAX_NODE_SCORE // np.where(ok, a1, 1), 0)
        s2 = np.maximum(
            (a2 - (nodes.nz_mem[:n] + memory)) * MAX_NODE_SCORE // np.where(ok, a2, 1), 0
        )
        out: I64 = np.where(ok, (s1 + s2) // 2, -1)
        return out

    @staticmethod
    def _one_score(nodes: NodeTable, shape: tuple[int, int], slot: int) -> int:
        cpu, memory = shape
        a1 = int(nodes.alloc_cpu[slot])
        a2 = int(nodes.alloc_mem[slot])
        if a1 <= 0 or a2 <= 0:
            return -1
        # Python's // floors as numpy's does; both numerators are clamped at 0 after it
        s1 = max((a1 - (int(nodes.nz_cpu[slot]) + cpu)) * MAX_NODE_SCORE // a1, 0)
        s2 = max((a2 - (int(nodes.nz_mem[slot]) + memory)) * MAX_NODE_SCORE // a2, 0)
        return (s1 + s2) // 2

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        if self._default_scoring and self.strategy == "LeastAllocated":
            cached = self._scores.get(nodes, (pod.nz_cpu, pod.nz_memory))
            if cached is not None:
                out: I64 = column(cached, nodes.n, idx)
                if not len(out) or out.min() >= 0:
                    return out
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
        mixed: I64 = np.where(total_den > 0, num // np.maximum(total_den, 1), 0)
        return mixed
