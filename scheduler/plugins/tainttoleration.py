"""TaintToleration (Filter, Score; weight 3).

Filter: a NoSchedule or NoExecute taint the pod does not tolerate keeps it off the node; the
reason names the first such taint, "node(s) had untolerated taint {key: value}". Score: fewer
untolerated PreferNoSchedule taints is better (reverse-normalised), counting only tolerations
with an empty or PreferNoSchedule effect, as kube-scheduler. Verdicts are computed once per
distinct taint set and gathered over nodes.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from scheduler.cache import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    EventKind,
    NodeTable,
)
from scheduler.framework import (
    CycleState,
    FilterResult,
    Status,
    default_normalize,
)
from scheduler.plugins.helper import I64, IDX, column, tolerated
from scheduler.podinfo import PodInfo


class TaintToleration:
    name: ClassVar[str] = "TaintToleration"
    events: ClassVar[frozenset[EventKind]] = frozenset({EventKind.NODE_ADD, EventKind.NODE_TAINT})
    node_static: ClassVar[bool] = True

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        tols = pod.pod.spec.tolerations
        # one verdict per distinct taint set, then a gather over nodes
        per_set = np.zeros(len(nodes.taint_sets), np.int32)
        reasons: list[str] = []
        for sid, taints in enumerate(nodes.taint_sets):
            for taint in taints:
                if taint.effect not in (NO_SCHEDULE, NO_EXECUTE):
                    continue
                if not tolerated(tols, taint):
                    reasons.append(f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}")
                    per_set[sid] = len(reasons)
                    break
        if not reasons:
            return None
        return FilterResult(
            per_set[nodes.taint_set[: nodes.n]], reasons, code=Status.unresolvable().code
        )

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        tols = [t for t in pod.pod.spec.tolerations if t.effect in ("", PREFER_NO_SCHEDULE)]
        per_set = np.zeros(len(nodes.taint_sets), np.int64)
        for sid, taints in enumerate(nodes.taint_sets):
            per_set[sid] = sum(
                1 for t in taints if t.effect == PREFER_NO_SCHEDULE and not tolerated(tols, t)
            )
        out: I64 = per_set[column(nodes.taint_set, nodes.n, idx)]
        return out

    def normalize(self, state: CycleState, pod: PodInfo, scores: I64) -> I64:
        return default_normalize(scores, reverse=True)
