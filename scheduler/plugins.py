"""kube-scheduler's default plugins, vectorised over node slots.

Each plugin keeps kube-scheduler's name, default weight, failure reasons (the strings users
see in "0/5 nodes are available: ..."), and semantics, including the easy-to-miss ones
listed in DESIGN.md. PodTopologySpread and InterPodAffinity are not implemented (tinykube has
no topology or pod-affinity API yet); DefaultPreemption lives in preemption.py.

Pure and synchronous except DefaultBinder, which awaits the handle's bind call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from scheduler.cache import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    EventKind,
    NodeTable,
    Taint,
)
from scheduler.framework import (
    MAX_NODE_SCORE,
    SKIP,
    SUCCESS,
    CycleState,
    FilterResult,
    Handle,
    Registry,
    Status,
    default_normalize,
)
from scheduler.podinfo import CPU, MEMORY, PodInfo
from scheduler.preemption import DefaultPreemption
from tinykube.errors import AlreadyExistsError, TinykubeError
from tinykube.v1 import pod_pb2

I64 = npt.NDArray[np.int64]
IDX = npt.NDArray[np.intp] | None

ERR_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_NODE_NAME = "node(s) didn't match the requested node name"
ERR_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ERR_PORTS = "node(s) didn't have free ports for the requested pod ports"
ERR_TOO_MANY_PODS = "Too many pods"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

_NODE = frozenset({EventKind.NODE_ADD})


def _col(a: npt.NDArray[Any], n: int, idx: IDX) -> npt.NDArray[Any]:
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


def _tolerated(tols: Sequence[pod_pb2.Toleration], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tols)


class NodeUnschedulable:
    name: ClassVar[str] = "NodeUnschedulable"
    events: ClassVar[frozenset[EventKind]] = frozenset({EventKind.NODE_ADD, EventKind.NODE_TAINT})
    node_static: ClassVar[bool] = True

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        taint = Taint(TAINT_UNSCHEDULABLE, "", NO_SCHEDULE)
        if _tolerated(pod.pod.spec.tolerations, taint):
            return None
        return FilterResult(
            nodes.unschedulable[: nodes.n].astype(np.int32),
            (ERR_UNSCHEDULABLE,),
            code=Status.unresolvable().code,
        )


class NodeName:
    name: ClassVar[str] = "NodeName"
    events: ClassVar[frozenset[EventKind]] = _NODE
    node_static: ClassVar[bool] = True

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        if not pod.node_name:
            return None
        codes = np.ones(nodes.n, np.int32)
        slot = nodes.index.get(pod.node_name)
        if slot is not None:
            codes[slot] = 0
        return FilterResult(codes, (ERR_NODE_NAME,), code=Status.unresolvable().code)


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
                if not _tolerated(tols, taint):
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
                1 for t in taints if t.effect == PREFER_NO_SCHEDULE and not _tolerated(tols, t)
            )
        out: I64 = per_set[_col(nodes.taint_set, nodes.n, idx)]
        return out

    def normalize(self, state: CycleState, pod: PodInfo, scores: I64) -> I64:
        return default_normalize(scores, reverse=True)


def _requirement_mask(
    nodes: NodeTable, req: pod_pb2.NodeSelectorRequirement, n: int
) -> npt.NDArray[np.bool_]:
    lc = nodes.labels.get(req.key)
    op = req.operator
    if lc is None:
        return np.full(n, op in ("NotIn", "DoesNotExist"))
    ids = lc.ids[:n]
    if op == "Exists":
        return ids >= 0
    if op == "DoesNotExist":
        return ids < 0
    if op in ("In", "NotIn"):
        wanted = [lc.value_ids[v] for v in req.values if v in lc.value_ids]
        if not wanted:
            hit = np.zeros(n, bool)
        elif len(wanted) == 1:
            hit = ids == wanted[0]
        else:
            # a lookup table over value ids (the last entry, id -1, is "missing"): one gather
            # instead of np.isin's sort
            table = np.zeros(len(lc.values) + 1, bool)
            table[wanted] = True
            hit = table[ids]
        return hit if op == "In" else ~hit
    if op in ("Gt", "Lt"):
        if len(req.values) != 1:
            return np.zeros(n, bool)
        try:
            bound = int(req.values[0])
        except ValueError:
            return np.zeros(n, bool)
        vals = lc.numeric()[ids]  # id -1 picks the trailing NaN: missing never matches
        with np.errstate(invalid="ignore"):
            return vals > bound if op == "Gt" else vals < bound
    return np.zeros(n, bool)


def _field_mask(
    nodes: NodeTable, req: pod_pb2.NodeSelectorRequirement, n: int
) -> npt.NDArray[np.bool_]:
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        return np.zeros(n, bool)
    hit = np.zeros(n, bool)
    for v in req.values:
        slot = nodes.index.get(v)
        if slot is not None:
            hit[slot] = True
    return hit if req.operator == "In" else ~hit


def term_mask(nodes: NodeTable, term: pod_pb2.NodeSelectorTerm, n: int) -> npt.NDArray[np.bool_]:
    """A term ANDs its requirements; an empty term matches no node."""
    if not term.matchExpressions and not term.matchFields:
        return np.zeros(n, bool)
    mask = np.ones(n, bool)
    for r in term.matchExpressions:
        mask &= _requirement_mask(nodes, r, n)
    for r in term.matchFields:
        mask &= _field_mask(nodes, r, n)
    return mask


class NodeAffinity:
    name: ClassVar[str] = "NodeAffinity"
    events: ClassVar[frozenset[EventKind]] = frozenset({EventKind.NODE_ADD, EventKind.NODE_LABEL})
    node_static: ClassVar[bool] = True

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        spec = pod.pod.spec
        required = spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        terms = required.nodeSelectorTerms
        if not spec.nodeSelector and not terms:
            return None
        n = nodes.n
        mask = np.ones(n, bool)
        for k, v in spec.nodeSelector.items():
            lc = nodes.labels.get(k)
            if lc is None or v not in lc.value_ids:
                mask[:] = False
                break
            mask &= lc.ids[:n] == lc.value_ids[v]
        if terms:
            any_term = np.zeros(n, bool)
            for term in terms:
                any_term |= term_mask(nodes, term, n)
            mask &= any_term
        return FilterResult(
            (~mask).astype(np.int32), (ERR_AFFINITY,), code=Status.unresolvable().code
        )

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status:
        na = pod.pod.spec.affinity.nodeAffinity
        if not na.preferredDuringSchedulingIgnoredDuringExecution:
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        n = nodes.n
        total = np.zeros(n, np.int64)
        for (
            pref
        ) in pod.pod.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution:
            if pref.weight == 0:
                continue
            total += term_mask(nodes, pref.preference, n) * pref.weight
        return total if idx is None else total[idx]

    def normalize(self, state: CycleState, pod: PodInfo, scores: I64) -> I64:
        return default_normalize(scores, reverse=False)


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


def _resource_arrays(
    nodes: NodeTable, pod: PodInfo, name: str, idx: IDX, nonzero: bool
) -> tuple[I64, I64]:
    """(requested including the pod, allocatable) for one resource over the candidates."""
    n = nodes.n
    if name == CPU:
        node_req = nodes.nz_cpu if nonzero else nodes.req_cpu
        return _col(node_req, n, idx) + (pod.nz_cpu if nonzero else pod.cpu), _col(
            nodes.alloc_cpu, n, idx
        )
    if name == MEMORY:
        node_req = nodes.nz_mem if nonzero else nodes.req_mem
        return _col(node_req, n, idx) + (pod.nz_memory if nonzero else pod.memory), _col(
            nodes.alloc_mem, n, idx
        )
    amount = pod.extended.get(name, 0)
    col = nodes.ext.get(name)
    size = n if idx is None else len(idx)
    if amount == 0 or col is None:
        # kube-scheduler ignores extended resources the pod does not ask for
        return np.zeros(size, np.int64), np.zeros(size, np.int64)
    return _col(col.req, n, idx) + amount, _col(col.alloc, n, idx)


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
            req, alloc = _resource_arrays(nodes, pod, name, idx, nonzero=True)
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


class NodeResourcesBalancedAllocation:
    name: ClassVar[str] = "NodeResourcesBalancedAllocation"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = False

    def __init__(self, args: Mapping[str, Any] | None = None) -> None:
        args = args or {}
        resources = args.get("resources") or [{"name": CPU}, {"name": MEMORY}]
        self.resources = [str(r["name"]) for r in resources]

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        cols = [_resource_arrays(nodes, pod, name, idx, nonzero=False) for name in self.resources]
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


MB = 1024 * 1024
IMAGE_MIN_THRESHOLD = 23 * MB
IMAGE_MAX_CONTAINER_THRESHOLD = 1000 * MB


class ImageLocality:
    name: ClassVar[str] = "ImageLocality"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = True

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: IDX) -> I64:
        n = nodes.n
        size = n if idx is None else len(idx)
        held = [(im, nodes.images[im]) for im in pod.images if nodes.images.get(im)]
        if not held:
            return np.zeros(size, np.int64)  # the common case: no node has the images
        total = np.zeros(n, np.int64)
        count = max(nodes.count, 1)
        for _im, holders in held:
            # scaledImageScore: size weighted by the fraction of nodes holding the image
            slots = np.fromiter(holders.keys(), np.intp, len(holders))
            sizes = np.fromiter(holders.values(), np.int64, len(holders))
            total[slots] += sizes * len(holders) // count
        n_containers = max(len(pod.pod.spec.containers), 1)
        hi = IMAGE_MAX_CONTAINER_THRESHOLD * n_containers
        clipped = np.minimum(np.maximum(total, IMAGE_MIN_THRESHOLD), hi)
        out: I64 = MAX_NODE_SCORE * (clipped - IMAGE_MIN_THRESHOLD) // (hi - IMAGE_MIN_THRESHOLD)
        return out if idx is None else out[idx]


class DefaultBinder:
    name: ClassVar[str] = "DefaultBinder"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = False
    ERROR_KEY = "DefaultBinder/error"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        if self.handle.bind is None:
            return Status.error("no binder configured", plugin=self.name)
        try:
            await self.handle.bind(pod, node)
        except TinykubeError as exc:
            state.write(self.ERROR_KEY, exc)
            return Status.error(str(exc), plugin=self.name)
        return SUCCESS


def bind_already_exists(state: CycleState) -> bool:
    return isinstance(state.read(DefaultBinder.ERROR_KEY), AlreadyExistsError)


# name -> default weight (None: not a score plugin), in kube-scheduler's default plugin order
DEFAULT_PLUGINS: dict[str, int | None] = {
    "NodeUnschedulable": None,
    "NodeName": None,
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodePorts": None,
    "NodeResourcesFit": 1,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
    "DefaultPreemption": None,
    "DefaultBinder": None,
}


def default_registry() -> Registry:
    r = Registry()
    r.register("NodeUnschedulable", lambda a, h: NodeUnschedulable())
    r.register("NodeName", lambda a, h: NodeName())
    r.register("TaintToleration", lambda a, h: TaintToleration())
    r.register("NodeAffinity", lambda a, h: NodeAffinity())
    r.register("NodePorts", lambda a, h: NodePorts())
    r.register("NodeResourcesFit", lambda a, h: NodeResourcesFit(a))
    r.register("NodeResourcesBalancedAllocation", lambda a, h: NodeResourcesBalancedAllocation(a))
    r.register("ImageLocality", lambda a, h: ImageLocality())
    r.register("DefaultPreemption", lambda a, h: DefaultPreemption(h))
    r.register("DefaultBinder", lambda a, h: DefaultBinder(h))
    return r
