"""What several plugins share: array aliases, the column view over candidates, kube's
ToleratesTaint, the requested/allocatable columns of one resource, and `ShapeCache`.

All but `ShapeCache` are pure functions over a NodeTable. `ShapeCache` keeps per-node results
for the pod shapes seen recently (a plugin's verdict or score for "100m cpu, 500Mi"), so a
stream of like pods costs a gather per cycle instead of the arithmetic over every node; it is
owned by one plugin on the scheduler's event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import (
    EventKind,
    NodeTable,
    Taint,
)
from scheduler.podinfo import CPU, MEMORY, PodInfo
from tinykube.v1 import pod_pb2

I64 = npt.NDArray[np.int64]
IDX = npt.NDArray[np.intp] | None

# Plugins whose verdict changes only when a node appears.
NODE_EVENTS = frozenset({EventKind.NODE_ADD})


def column(a: npt.NDArray[Any], n: int, idx: IDX) -> npt.NDArray[Any]:
    """The first n entries of a node column, or the candidates' entries when idx is given."""
    return a[:n] if idx is None else a[idx]


def tolerates(t: pod_pb2.Toleration, taint: Taint) -> bool:
    """kube's ToleratesTaint: empty effect/key match any; Exists ignores the value."""
    if t.effect and t.effect != taint.effect:
        return False
    if t.key and t.key != taint.key:
        return False
    if t.operator == "Exists":
        return True
    return t.value == taint.value


def tolerated(tols: Sequence[pod_pb2.Toleration], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tols)


def resource_arrays(
    nodes: NodeTable, pod: PodInfo, name: str, idx: IDX, nonzero: bool
) -> tuple[I64, I64]:
    """(requested including the pod, allocatable) for one resource over the candidates."""
    n = nodes.n
    if name == CPU:
        node_req = nodes.nz_cpu if nonzero else nodes.req_cpu
        return column(node_req, n, idx) + (pod.nz_cpu if nonzero else pod.cpu), column(
            nodes.alloc_cpu, n, idx
        )
    if name == MEMORY:
        node_req = nodes.nz_mem if nonzero else nodes.req_mem
        return column(node_req, n, idx) + (pod.nz_memory if nonzero else pod.memory), column(
            nodes.alloc_mem, n, idx
        )
    amount = pod.extended.get(name, 0)
    col = nodes.ext.get(name)
    size = n if idx is None else len(idx)
    if amount == 0 or col is None:
        # kube-scheduler ignores extended resources the pod does not ask for
        return np.zeros(size, np.int64), np.zeros(size, np.int64)
    return column(col.req, n, idx) + amount, column(col.alloc, n, idx)


K = TypeVar("K", bound=Hashable)


class ShapeCache(Generic[K]):
    """Per-node values of a function of (a node's columns, a pod shape `K`), for a few shapes.

    `full(nodes, key)` computes the array over the first `nodes.n` slots; `one(nodes, key,
    slot)` one slot's value, bit for bit the same. A slot is recomputed when a pod is placed on
    it or leaves it (the pod index's listener: assume, bind confirmations, deletions, the
    preemption dry run and nominated pods all go through it), and everything when node-static
    data changes (`node_generation`: node added, removed, allocatable, labels, taints).

    A shape is cached from the second time it is asked for, while fewer than `entries` are
    (a stream of unlike pods costs nothing extra: `get` answers None and the plugin computes
    over its candidates as before).
    The arrays returned are shared: callers must not write into them.
    """

    def __init__(
        self,
        full: Callable[[NodeTable, K], npt.NDArray[Any]],
        one: Callable[[NodeTable, K, int], Any],
        entries: int = 8,
    ) -> None:
        self._full = full
        self._one = one
        self._entries = entries
        self._table: NodeTable | None = None
        self._generation = -1
        self._cached: OrderedDict[K, tuple[npt.NDArray[Any], set[int]]] = OrderedDict()
        self._seen: OrderedDict[K, None] = OrderedDict()

    def _placed(self, slot: int, info: PodInfo, sign: int) -> None:
        for _, dirty in self._cached.values():
            dirty.add(slot)

    def get(self, nodes: NodeTable, key: K) -> npt.NDArray[Any] | None:
        if self._table is not nodes:
            if self._table is not None:
                self._table.pod_index.listeners.remove(self._placed)
            self._table = nodes
            nodes.pod_index.listeners.append(self._placed)
            self._cached.clear()
        if self._generation != nodes.node_generation:
            self._generation = nodes.node_generation
            self._cached.clear()
        hit = self._cached.get(key)
        if hit is not None:
            values, dirty = hit
            if len(values) != nodes.n:
                del self._cached[key]  # cannot happen without a new generation; be safe
            else:
                if dirty:
                    one = self._one
                    for slot in dirty:
                        values[slot] = one(nodes, key, slot)
                    dirty.clear()
                return values
        if key not in self._seen:
            self._seen[key] = None
            if len(self._seen) > 64:
                self._seen.popitem(last=False)
            return None
        if len(self._cached) >= self._entries:
            # Full: keep the shapes already here (until nodes change) rather than evict one;
            # evicting would make more shapes than entries each cost a full computation.
            return None
        values = self._full(nodes, key)
        self._cached[key] = (values, set())
        return values
