"""NodeResourcesBalancedAllocation (PreScore, Score; weight 1): prefer nodes whose resource use
the pod makes more even.

A node's balance is 100 * (1 - std) of its requested/allocatable fractions over cpu and memory
(or the configured resources), each fraction capped at 1, requests counted as they are (no
defaults), resources the node lacks left out. As kube v1.36 (kubernetes PR #135573) the score is
the change the pod causes, kept in 50-100: 50 + (50 + balance with the pod - balance without it)
/ 2 in integers, so no change scores 75, perfectly balanced to perfectly imbalanced 50, and the
reverse 100. PreScore skips the plugin for a pod that requests none of the resources (kube's
best-effort rule, so such pods are not all drawn to one node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from scheduler.cache import (
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    MAX_NODE_SCORE,
    SKIP,
    SUCCESS,
    CycleState,
    Status,
)
from scheduler.plugins.helper import I64, IDX, ShapeCache, column, resource_arrays
from scheduler.podinfo import CPU, MEMORY, PodInfo


def balance(cols: Sequence[tuple[I64, I64]]) -> I64:
    """int64((1 - std) * 100) per node over (requested, allocatable) column pairs."""
    if len(cols) == 2 and all(len(a) and a.min() > 0 for _, a in cols):
        # fast path: two resources every node has; std of two fractions is |f1 - f2| / 2
        (r1, a1), (r2, a2) = cols
        f1 = np.minimum(r1 / a1, 1.0)
        f2 = np.minimum(r2 / a2, 1.0)
        fast: I64 = ((1.0 - np.abs(f1 - f2) / 2) * MAX_NODE_SCORE).astype(np.int64)
        return fast
    fractions = []
    present = []
    for req, alloc in cols:
        has = alloc > 0
        f = np.minimum(req / np.where(has, alloc, 1), 1.0)
        fractions.append(np.where(has, f, 0.0))
        present.append(has)
    fr = np.array(fractions)
    pr = np.array(present)
    cnt = pr.sum(axis=0)
    if len(cols) == 2:
        std = np.where(cnt == 2, np.abs(fr[0] - fr[1]) / 2, 0.0)
    else:
        mean = fr.sum(axis=0) / np.maximum(cnt, 1)
        var = (((fr - mean) ** 2) * pr).sum(axis=0) / np.maximum(cnt, 1)
        std = np.where(cnt >= 2, np.sqrt(var), 0.0)
    out: I64 = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
    return out


def _balance_of(r1: int, a1: int, r2: int, a2: int) -> int:
    """One node's balance, as `balance` computes it (Python floats are the same doubles)."""
    # float() first, as numpy converts int64 columns before dividing
    f = min(float(r1) / float(a1 or 1), 1.0) - min(float(r2) / float(a2 or 1), 1.0)
    return int((1.0 - abs(f) / 2) * MAX_NODE_SCORE)


class NodeResourcesBalancedAllocation:
    name: ClassVar[str] = "NodeResourcesBalancedAllocation"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = False

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        args = args or {}
        resources = args.get("resources") or [{"name": CPU}, {"name": MEMORY}]
        self.resources = [str(r["name"]) for r in resources]
        # the balance without the pod, per node slot, for the default resources
        self._table: NodeTable | None = None
        self._balance: I64 = np.zeros(0, np.int64)
        self._generation = -1
        self._dirty: set[int] = set()
        # the scores of the pod shapes seen lately, by (cpu, memory) requested
        self._shapes: ShapeCache[tuple[int, int]] = ShapeCache(self._shape_full, self._shape_one)

    def _shape_full(self, nodes: NodeTable, shape: tuple[int, int]) -> I64:
        """Every node's score for a pod requesting `shape`; -1 where a node lacks cpu or
        memory (`score` then takes the general path)."""
        n = nodes.n
        a1 = nodes.alloc_cpu[:n]
        a2 = nodes.alloc_mem[:n]
        ok = (a1 > 0) & (a2 > 0)
        every = np.arange(n)
        scores = self._cpu_memory_over(
            shape[0], shape[1], nodes, every, np.where(ok, a1, 1), np.where(ok, a2, 1)
        )
        out: I64 = np.where(ok, scores, -1)
        return out

    def _shape_one(self, nodes: NodeTable, shape: tuple[int, int], slot: int) -> int:
        a1 = int(nodes.alloc_cpu[slot])
        a2 = int(nodes.alloc_mem[slot])
        if a1 <= 0 or a2 <= 0:
            return -1
        r1 = int(nodes.req_cpu[slot])
        r2 = int(nodes.req_mem[slot])
        half = MAX_NODE_SCORE // 2
        with_pod = _balance_of(r1 + shape[0], a1, r2 + shape[1], a2)
        return half + (half + with_pod - _balance_of(r1, a1, r2, a2)) // 2

    def _cpu_memory(self, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64 | None:
        """The default resources on nodes that all have both: the same arithmetic as `balance`
        (kube's int64((1 - |f1 - f2| / 2) * 100), fractions capped at 1), with the balance
        without the pod kept per node between cycles (see `_without`). None when a candidate
        lacks cpu or memory."""
        n = nodes.n
        a1 = column(nodes.alloc_cpu, n, idx)
        a2 = column(nodes.alloc_mem, n, idx)
        if not len(a1) or a1.min() <= 0 or a2.min() <= 0:
            return None
        return self._cpu_memory_over(pod.cpu, pod.memory, nodes, idx, a1, a2)

    def _cpu_memory_over(
        self, cpu: int, memory: int, nodes: NodeTable, idx: IDX, a1: I64, a2: I64
    ) -> I64:
        n = nodes.n
        r1 = column(nodes.req_cpu, n, idx)
        r2 = column(nodes.req_mem, n, idx)
        # divisions, not multiplications by 1/a: the fractions must be kube's to the last bit,
        # or a balance that is a whole number could truncate to the one below
        with_pod = np.minimum((r1 + cpu) / a1, 1.0) - np.minimum((r2 + memory) / a2, 1.0)
        b_with = ((1.0 - np.abs(with_pod) / 2) * MAX_NODE_SCORE).astype(np.int64)
        half = MAX_NODE_SCORE // 2
        out: I64 = half + (half + b_with - column(self._without(nodes), n, idx)) // 2
        return out

    def _without(self, nodes: NodeTable) -> I64:
        """Each node's cpu/memory balance as it is, before the pod: it changes only when a pod
        is placed on or leaves the node (the pod index's listener marks the slot) or a node
        changes (node_generation), so a cycle recomputes one or two slots, not every node."""
        if self._table is not nodes:
            self._table = nodes
            nodes.pod_index.listeners.append(self._placed)
            self._generation = -1
        n = nodes.n
        if self._generation != nodes.node_generation or len(self._balance) < n:
            a1 = nodes.alloc_cpu[:n]
            a2 = nodes.alloc_mem[:n]
            f = np.minimum(nodes.req_cpu[:n] / np.where(a1 > 0, a1, 1), 1.0) - np.minimum(
                nodes.req_mem[:n] / np.where(a2 > 0, a2, 1), 1.0
            )
            self._balance = ((1.0 - np.abs(f) / 2) * MAX_NODE_SCORE).astype(np.int64)
            self._generation = nodes.node_generation
            self._dirty.clear()
        elif self._dirty:
            for slot in self._dirty:
                if slot < n:
                    self._balance[slot] = _balance_of(
                        int(nodes.req_cpu[slot]),
                        int(nodes.alloc_cpu[slot]),
                        int(nodes.req_mem[slot]),
                        int(nodes.alloc_mem[slot]),
                    )
            self._dirty.clear()
        return self._balance

    def _placed(self, slot: int, info: PodInfo, sign: int) -> None:
        self._dirty.add(slot)

    def _request(self, pod: PodInfo, name: str) -> int:
        if name == CPU:
            return pod.cpu
        if name == MEMORY:
            return pod.memory
        return pod.extended.get(name, 0)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        if all(self._request(pod, name) == 0 for name in self.resources):
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        if self.resources == [CPU, MEMORY]:
            cached = self._shapes.get(nodes, (pod.cpu, pod.memory))
            if cached is not None:
                out: I64 = column(cached, nodes.n, idx)
                if not len(out) or out.min() >= 0:
                    return out
            fast = self._cpu_memory(pod, nodes, idx)
            if fast is not None:
                return fast
        with_pod = [
            resource_arrays(nodes, pod, name, idx, nonzero=False) for name in self.resources
        ]
        without = [
            (req - self._request(pod, name), alloc)
            for name, (req, alloc) in zip(self.resources, with_pod, strict=True)
        ]
        half = MAX_NODE_SCORE // 2
        # both balances lie in 50..100, so the numerator is never negative: // is Go's /
        general: I64 = half + (half + balance(with_pod) - balance(without)) // 2
        return general
