"""NodeResourcesBalancedAllocation (Score; weight 1): prefer nodes whose resource use stays even.

The score is 100 * (1 - std) of the requested/allocatable fractions over cpu and memory (or the
configured resources), each fraction capped at 1, requests counted as they are (no defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from scheduler.cache import (
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    MAX_NODE_SCORE,
    CycleState,
)
from scheduler.plugins.helper import I64, IDX, resource_arrays
from scheduler.podinfo import CPU, MEMORY, PodInfo


class NodeResourcesBalancedAllocation:
    name: ClassVar[str] = "NodeResourcesBalancedAllocation"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = False

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        args = args or {}
        resources = args.get("resources") or [{"name": CPU}, {"name": MEMORY}]
        self.resources = [str(r["name"]) for r in resources]

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        cols = [resource_arrays(nodes, pod, name, idx, nonzero=False) for name in self.resources]
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
        if len(self.resources) == 2:
            std = np.where(cnt == 2, np.abs(fr[0] - fr[1]) / 2, 0.0)
        else:
            mean = fr.sum(axis=0) / np.maximum(cnt, 1)
            var = (((fr - mean) ** 2) * pr).sum(axis=0) / np.maximum(cnt, 1)
            std = np.where(cnt >= 2, np.sqrt(var), 0.0)
        out: I64 = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
        return out
