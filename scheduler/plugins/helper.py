"""What several plugins share: array aliases, the column view over candidates, kube's
ToleratesTaint, and the requested/allocatable columns of one resource.

Pure functions over a NodeTable; no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
