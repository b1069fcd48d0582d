"""The scheduler's view of the cluster, kept columnar so filters and scores are vector ops.

`NodeTable` holds one row ("slot") per node in numpy columns: allocatable and requested cpu
(milli), memory (bytes), pod counts and extended resources (whole units, as kube-scheduler's
ScalarResources), the non-zero requests used
for scoring, an unschedulable mask, a column of value ids per label key, a taint-set id per
node (distinct taint sets are few, so taint logic runs once per set, not per node), host ports
and images. Deleted nodes leave a free slot that the next node reuses; `valid` masks them out.

`SchedulerCache` adds the pods: every pod with spec.nodeName (bound by anyone) counts against
its node; a pod the scheduler assumed counts from `assume` until the informer confirms the bind,
or until it expires `assumed_ttl` seconds after its binding finished without confirmation. Pods
on a node the cache does not know yet are parked and applied when the node appears.

`node_generation` changes whenever node-static data (labels, taints, unschedulable, images,
allocatable) changes; plugins whose result depends only on that data may be cached against it.

Not thread-safe: owned by the scheduler's event loop (informer handlers and the serial
scheduling cycle run on the same loop, never concurrently).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from scheduler.podindex import PodIndex
from scheduler.podinfo import (
    CPU,
    MEMORY,
    PODS,
    HostPort,
    PodInfo,
    PodRejectedError,
    normalize_image,
)
from tinykube.clock import Clock
from tinykube.quantity import QuantityError, milli_value, value
from tinykube.v1 import node_pb2, pod_pb2

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
BOOL = npt.NDArray[np.bool_]

_INTEGER = re.compile(r"^[+-]?[0-9]+$")

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"


class EventKind(StrEnum):
    """Cluster events that can make an unschedulable pod schedulable."""

    NODE_ADD = "NodeAdd"
    NODE_ALLOCATABLE = "NodeAllocatableChange"
    NODE_LABEL = "NodeLabelChange"
    NODE_TAINT = "NodeTaintChange"  # includes spec.unschedulable, as kube-scheduler does
    NODE_IMAGES = "NodeImagesChange"
    NODE_DELETE = "NodeDelete"  # a node went away (fewer topology domains for spreading)
    POD_ADD = "AssignedPodAdd"  # a pod newly seen bound, including our own binds' confirmations
    POD_LABEL = "AssignedPodLabelChange"  # an assigned pod's labels changed
    POD_DELETE = "AssignedPodDelete"
    NAMESPACE_LABEL = "NamespaceLabelChange"  # (InterPodAffinity's namespaceSelector)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass
class LabelColumn:
    """Value ids of one label key across slots (-1: the node lacks the key)."""

    ids: I32
    values: list[str] = field(default_factory=list)
    value_ids: dict[str, int] = field(default_factory=dict)
    _numeric: npt.NDArray[np.float64] | None = None

    def id_of(self, v: str) -> int:
        i = self.value_ids.get(v)
        if i is None:
            i = len(self.values)
            self.values.append(v)
            self.value_ids[v] = i
            self._numeric = None
        return i

    def numeric(self) -> npt.NDArray[np.float64]:
        """Per value id its integer value, NaN where the value is not an integer."""
        if self._numeric is None or len(self._numeric) != len(self.values):
            out = np.full(len(self.values) + 1, np.nan)
            for i, v in enumerate(self.values):
                # strconv.ParseInt semantics: optional sign and digits only (no "1_0", " 1")
                if _INTEGER.match(v):
                    out[i] = int(v)
            self._numeric = out  # last entry (index -1) is the "missing" value: NaN
        return self._numeric


@dataclass
class ExtColumn:
    alloc: I64
    req: I64


@functools.lru_cache(maxsize=4096)
def _quantity(name: str, text: str) -> int:
    try:
        # cpu in millis, everything else in whole units (memory bytes, pods, a GPU is 1)
        return milli_value(text) if name == CPU else value(text)
    except QuantityError:
        return 0


_INT64_MAX = 2**63 - 1


class NodeRejectedError(ValueError):
    """A node the cache cannot hold (an allocatable amount past int64, stored before the
    apiserver refused such values): it is refused whole, so no column is half-written."""


def _allocatable_amounts(node: node_pb2.Node) -> dict[str, int]:
    """Every allocatable amount as the int64 its column holds; NodeRejectedError otherwise."""
    amounts: dict[str, int] = {}
    for name, text in node.status.allocatable.items():
        amount = _quantity(name, text)
        if not -_INT64_MAX <= amount <= _INT64_MAX:
            raise NodeRejectedError(
                f"node {node.metadata.name!r}: status.allocatable[{name}] {text!r} does not fit "
                "an int64 in its unit"
            )
        amounts[name] = amount
    return amounts


class NodeTable:
    """Columns over node slots; `n` is the high-water mark of slots ever used."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.n = 0
        self.count = 0
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.free: list[int] = []
        self.nodes: list[node_pb2.Node | None] = []
        self.valid = np.zeros(capacity, bool)
        self.unschedulable = np.zeros(capacity, bool)
        self.alloc_cpu = np.zeros(capacity, np.int64)
        self.alloc_mem = np.zeros(capacity, np.int64)
        self.alloc_pods = np.zeros(capacity, np.int64)
        self.req_cpu = np.zeros(capacity, np.int64)
        self.req_mem = np.zeros(capacity, np.int64)
        self.req_pods = np.zeros(capacity, np.int64)
        self.nz_cpu = np.zeros(capacity, np.int64)
        self.nz_mem = np.zeros(capacity, np.int64)
        # allocatable - requested, kept current so the fit filter is one comparison per resource
        self.free_cpu = np.zeros(capacity, np.int64)
        self.free_mem = np.zeros(capacity, np.int64)
        self.free_pods = np.zeros(capacity, np.int64)
        self.ext: dict[str, ExtColumn] = {}
        self.labels: dict[str, LabelColumn] = {}
        self.node_labels: list[dict[str, str]] = []
        # taint sets: id 0 is "no taints"
        self.taint_set = np.zeros(capacity, np.int32)
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self.taint_set_ids: dict[tuple[Taint, ...], int] = {(): 0}
        # host ports in use: port -> slot -> list of HostPort (one per pod using it)
        self.ports: dict[int, dict[int, list[HostPort]]] = {}
        # images: normalized name -> slot -> size in bytes
        self.images: dict[str, dict[int, int]] = {}
        self.node_images: list[dict[str, int]] = []
        self.node_generation = 0
        # the pods on each slot, and per-slot counts of those matching plugins' selectors
        self.pod_index = PodIndex(capacity)

    # ----- growth and slots -------------------------------------------------------------
    def _grow(self) -> None:
        new = self.capacity * 2

        def g(a: npt.NDArray[np.generic], fill: object = 0) -> npt.NDArray[np.generic]:
            b = np.full(new, fill, a.dtype)
            b[: self.capacity] = a
            return b

        self.valid = g(self.valid)
        self.unschedulable = g(self.unschedulable)
        for attr in (
            "alloc_cpu",
            "alloc_mem",
            "alloc_pods",
            "req_cpu",
            "req_mem",
            "req_pods",
            "nz_cpu",
            "nz_mem",
            "free_cpu",
            "free_mem",
            "free_pods",
        ):
            setattr(self, attr, g(getattr(self, attr)))
        self.taint_set = g(self.taint_set)  # type: ignore[assignment]
        for col in self.ext.values():
            col.alloc = g(col.alloc)  # type: ignore[assignment]
            col.req = g(col.req)  # type: ignore[assignment]
        for lc in self.labels.values():
            lc.ids = g(lc.ids, -1)  # type: ignore[assignment]
        self.pod_index.grow(new)
        self.capacity = new

    def _new_slot(self) -> int:
        if self.free:
            return self.free.pop()
        if self.n == self.capacity:
            self._grow()
        slot = self.n
        self.n += 1
        self.names.append("")
        self.nodes.append(None)
        self.node_labels.append({})
        self.node_images.append({})
        return slot

    def ext_column(self, name: str) -> ExtColumn:
        col = self.ext.get(name)
        if col is None:
            col = ExtColumn(np.zeros(self.capacity, np.int64), np.zeros(self.capacity, np.int64))
            self.ext[name] = col
        return col

    def label_column(self, key: str) -> LabelColumn | None:
        return self.labels.get(key)

    # ----- node rows --------------------------------------------------------------------
    def set_node(self, node: node_pb2.Node) -> tuple[int, set[EventKind]]:
        """Add or update a node's static columns; returns its slot and what changed."""
        name = node.metadata.name
        slot = self.index.get(name)
        old = None if slot is None else self.nodes[slot]
        # Everything that can refuse the node runs before the first write to a column.
        amounts = None
        if old is None or dict(old.status.allocatable) != dict(node.status.allocatable):
            amounts = _allocatable_amounts(node)
        changes: set[EventKind] = set()
        if slot is None:
            slot = self._new_slot()
            self.index[name] = slot
            self.names[slot] = name
            self.valid[slot] = True
            self.count += 1
            changes.add(EventKind.NODE_ADD)
        self.nodes[slot] = node
        if amounts is not None:
            self._set_allocatable(slot, amounts)
            changes.add(EventKind.NODE_ALLOCATABLE)
        if old is None or dict(old.metadata.labels) != dict(node.metadata.labels):
            self._set_labels(slot, dict(node.metadata.labels))
            changes.add(EventKind.NODE_LABEL)
        if (
            old is None
            or old.spec.unschedulable != node.spec.unschedulable
            or list(old.spec.taints) != list(node.spec.taints)
        ):
            self.unschedulable[slot] = node.spec.unschedulable
            taints = tuple(Taint(t.key, t.value, t.effect) for t in node.spec.taints)
            tid = self.taint_set_ids.get(taints)
            if tid is None:
                tid = len(self.taint_sets)
                self.taint_sets.append(taints)
                self.taint_set_ids[taints] = tid
            self.taint_set[slot] = tid
            changes.add(EventKind.NODE_TAINT)
        if old is None or list(old.status.images) != list(node.status.images):
            self._set_images(slot, node)
            changes.add(EventKind.NODE_IMAGES)
        if changes:
            self.node_generation += 1
        return slot, changes

    def _set_allocatable(self, slot: int, amounts: dict[str, int]) -> None:
        self.alloc_cpu[slot] = amounts.get(CPU, 0)
        self.alloc_mem[slot] = amounts.get(MEMORY, 0)
        self.alloc_pods[slot] = amounts.get(PODS, 0)
        for name, col in self.ext.items():
            if name not in amounts:
                col.alloc[slot] = 0
        for name, amount in amounts.items():
            if name in (CPU, MEMORY, PODS):
                continue
            self.ext_column(name).alloc[slot] = amount
        self._refresh_free(slot)

    def _refresh_free(self, slot: int) -> None:
        self.free_cpu[slot] = self.alloc_cpu[slot] - self.req_cpu[slot]
        self.free_mem[slot] = self.alloc_mem[slot] - self.req_mem[slot]
        self.free_pods[slot] = self.alloc_pods[slot] - self.req_pods[slot]

    def _set_labels(self, slot: int, labels: dict[str, str]) -> None:
        old = self.node_labels[slot]
        for k in old:
            if k not in labels:
                self.labels[k].ids[slot] = -1
        for k, v in labels.items():
            lc = self.labels.get(k)
            if lc is None:
                lc = LabelColumn(np.full(self.capacity, -1, np.int32))
                self.labels[k] = lc
            lc.ids[slot] = lc.id_of(v)
        self.node_labels[slot] = labels

    def _set_images(self, slot: int, node: node_pb2.Node | None) -> None:
        for im in self.node_images[slot]:
            holders = self.images.get(im)
            if holders is not None:
                holders.pop(slot, None)
                if not holders:
                    del self.images[im]
        new: dict[str, int] = {}
        if node is not None:
            for image in node.status.images:
                for nm in image.names:
                    new[normalize_image(nm)] = image.sizeBytes
        for im, size in new.items():
            self.images.setdefault(im, {})[slot] = size
        self.node_images[slot] = new

    def remove_node(self, name: str) -> int | None:
        slot = self.index.pop(name, None)
        if slot is None:
            return None
        self.valid[slot] = False
        self.count -= 1
        self.nodes[slot] = None
        self.names[slot] = ""
        self._set_labels(slot, {})
        self._set_images(slot, None)
        self.unschedulable[slot] = False
        self.taint_set[slot] = 0
        for arr in (
            self.alloc_cpu,
            self.alloc_mem,
            self.alloc_pods,
            self.req_cpu,
            self.req_mem,
            self.req_pods,
            self.nz_cpu,
            self.nz_mem,
            self.free_cpu,
            self.free_mem,
            self.free_pods,
        ):
            arr[slot] = 0
        for col in self.ext.values():
            col.alloc[slot] = 0
            col.req[slot] = 0
        for users in self.ports.values():
            users.pop(slot, None)
        self.pod_index.cleared(slot)
        self.free.append(slot)
        self.node_generation += 1
        return slot

    # ----- pod accounting ---------------------------------------------------------------
    def overflow(self, slot: int, p: PodInfo, replacing: PodInfo | None = None) -> str | None:
        """The resource whose sum on `slot` would pass an int64 if `p` were added (in place of
        `replacing`, already counted there), if any.

        Each pod's requests fit an int64 (PodInfo refuses others), but pods bound by nodeName
        skip the fit filter, so several can add up past it; numpy would wrap the sum negative
        and make a full node look empty."""
        r = replacing
        for name, used, amount, old in (
            (CPU, self.req_cpu, p.cpu, r.cpu if r else 0),
            (CPU, self.nz_cpu, p.nz_cpu, r.nz_cpu if r else 0),
            (MEMORY, self.req_mem, p.memory, r.memory if r else 0),
            (MEMORY, self.nz_mem, p.nz_memory, r.nz_memory if r else 0),
        ):
            if int(used[slot]) - old + amount > _INT64_MAX:
                return name
        for name, amount in p.extended.items():
            col = self.ext.get(name)
            old = r.extended.get(name, 0) if r else 0
            used_ext = 0 if col is None else int(col.req[slot])
            if used_ext - old + amount > _INT64_MAX:
                return name
        return None

    def add_pod(self, slot: int, p: PodInfo, sign: int = 1) -> None:
        self.req_cpu[slot] += sign * p.cpu
        self.req_mem[slot] += sign * p.memory
        self.req_pods[slot] += sign
        self.nz_cpu[slot] += sign * p.nz_cpu
        self.nz_mem[slot] += sign * p.nz_memory
        self.free_cpu[slot] -= sign * p.cpu
        self.free_mem[slot] -= sign * p.memory
        self.free_pods[slot] -= sign
        for name, amount in p.extended.items():
            self.ext_column(name).req[slot] += sign * amount
        for hp in p.host_ports:
            users = self.ports.setdefault(hp.port, {})
            lst = users.setdefault(slot, [])
            if sign > 0:
                lst.append(hp)
            else:
                if hp in lst:
                    lst.remove(hp)
                if not lst:
                    del users[slot]
                    if not users:
                        del self.ports[hp.port]
        self.pod_index.placed(slot, p, sign)

    def remove_pod(self, slot: int, p: PodInfo) -> None:
        self.add_pod(slot, p, -1)


class SlotRemoval:
    """Pods taken off one node slot for a preemption dry run: off its columns, and so off the
    PodIndex counts and their listeners, which is all that filters read. The cache's records
    of the pods (assumed, nominated, by node, priorities) stay as they are."""

    def __init__(self, nodes: NodeTable, slot: int) -> None:
        self.nodes = nodes
        self.slot = slot
        self.removed: dict[str, PodInfo] = {}

    def remove(self, info: PodInfo) -> None:
        if info.key not in self.removed:
            self.nodes.remove_pod(self.slot, info)
            self.removed[info.key] = info

    def restore(self, info: PodInfo) -> None:
        if self.removed.pop(info.key, None) is not None:
            self.nodes.add_pod(self.slot, info)


@dataclass(slots=True)  # one per pod in the cluster
class PodState:
    info: PodInfo
    node: str
    assumed: bool = False
    binding_finished: bool = False
    deadline: float | None = None


class SchedulerCache:
    """Nodes plus the pods that use them, including the scheduler's assumed pods."""

    def __init__(self, clock: Clock | None = None, assumed_ttl: float = 30.0) -> None:
        self.clock = clock or Clock()
        self.assumed_ttl = assumed_ttl
        self.nodes = NodeTable()
        self.pods: dict[str, PodState] = {}
        self.assumed: set[str] = set()  # keys of assumed pods, so expiry is not O(pods)
        self.by_node: dict[str, set[str]] = {}  # node name -> keys of pods on it
        self.priorities: dict[int, int] = {}  # priority -> pods placed with it (preemption)
        # pending pods nominated to a node by preemption: pod key -> (node, info)
        self.nominated: dict[str, tuple[str, PodInfo]] = {}
        self.parked: dict[str, set[str]] = {}  # node name -> pod keys waiting for the node
        # keys of parked pods whose requests would overflow their node's sums when it came
        # back: left out of its columns (and so not subtracted when they go)
        self.unaccounted: set[str] = set()
        # namespace name -> its labels (InterPodAffinity's namespaceSelector), from an informer
        self.namespaces: dict[str, dict[str, str]] = {}

    @property
    def pod_index(self) -> PodIndex:
        """Per-node counts of pods matching selectors (InterPodAffinity, PodTopologySpread)."""
        return self.nodes.pod_index

    # ----- nodes ------------------------------------------------------------------------
    def add_node(self, node: node_pb2.Node) -> set[EventKind]:
        is_new = node.metadata.name not in self.nodes.index
        slot, changes = self.nodes.set_node(node)
        if is_new:
            for key in self.parked.pop(node.metadata.name, set()):
                info = self.pods[key].info
                if self.nodes.overflow(slot, info) is not None:
                    self.unaccounted.add(key)
                    continue
                self.nodes.add_pod(slot, info)
        return changes

    update_node = add_node

    def remove_node(self, name: str) -> None:
        keys = list(self.by_node.get(name, ()))
        if self.nodes.remove_node(name) is not None and keys:
            self.parked.setdefault(name, set()).update(keys)
            self.unaccounted.difference_update(keys)  # checked again when the node returns

    def node_names(self) -> list[str]:
        return list(self.nodes.index)

    # ----- pods -------------------------------------------------------------------------
    def _place(self, key: str, info: PodInfo, node: str) -> None:
        self.by_node.setdefault(node, set()).add(key)
        self.priorities[info.priority] = self.priorities.get(info.priority, 0) + 1
        slot = self.nodes.index.get(node)
        if slot is None:
            self.parked.setdefault(node, set()).add(key)
        else:
            self.nodes.add_pod(slot, info)

    def _unplace(self, key: str, state: PodState) -> None:
        left = self.priorities.get(state.info.priority, 0) - 1
        if left > 0:
            self.priorities[state.info.priority] = left
        else:
            self.priorities.pop(state.info.priority, None)
        on = self.by_node.get(state.node)
        if on is not None:
            on.discard(key)
            if not on:
                del self.by_node[state.node]
        slot = self.nodes.index.get(state.node)
        if key in self.unaccounted:
            self.unaccounted.discard(key)
        elif slot is None:
            parked = self.parked.get(state.node)
            if parked is not None:
                parked.discard(key)
                if not parked:
                    del self.parked[state.node]
        else:
            self.nodes.remove_pod(slot, state.info)

    def add_pod(self, info: PodInfo) -> None:
        """An assigned pod seen by the informer (confirms an assumption, or a new pod).

        PodRejectedError, before any change, when its requests would overflow the node's."""
        state = self.pods.get(info.key)
        slot = self.nodes.index.get(info.node_name)
        if slot is not None:
            same = state is not None and state.node == info.node_name
            resource = self.nodes.overflow(slot, info, state.info if same and state else None)
            if resource is not None:
                raise PodRejectedError(
                    f"pod {info.key}: its {resource} requests would take node "
                    f"{info.node_name}'s total past an int64"
                )
        self.nominated.pop(info.key, None)
        if state is not None:
            if state.node == info.node_name and state.info.uid == info.uid:
                # confirmation of our assumption, or a plain update: swap in the new requests
                self._unplace(info.key, state)
                self._place(info.key, info, info.node_name)
                state.info = info
                state.assumed = False
                state.deadline = None
                self.assumed.discard(info.key)
                return
            self._unplace(info.key, state)
            self.assumed.discard(info.key)
        self.pods[info.key] = PodState(info, info.node_name)
        self._place(info.key, info, info.node_name)

    update_pod = add_pod

    def remove_pod(self, key: str) -> bool:
        """Forget a pod (deleted, or terminated); True when it used a node."""
        self.nominated.pop(key, None)
        state = self.pods.pop(key, None)
        if state is None:
            return False
        self.assumed.discard(key)
        self._unplace(key, state)
        return True

    def assume(self, info: PodInfo, node: str) -> None:
        self.nominated.pop(info.key, None)
        if info.key in self.pods:
            self.remove_pod(info.key)
        self.pods[info.key] = PodState(info, node, assumed=True)
        self.assumed.add(info.key)
        self._place(info.key, info, node)

    # ----- nominated pods (preemption) ---------------------------------------------------
    def nominate(self, info: PodInfo, node: str) -> None:
        self.nominated[info.key] = (node, info)

    def clear_nomination(self, key: str) -> None:
        self.nominated.pop(key, None)

    def reserve_nominated(self, pod: PodInfo) -> list[tuple[int, PodInfo]]:
        """Count pods nominated by preemption (of at least `pod`'s priority) on their nodes
        for the duration of one cycle, so the room a preemption freed is not taken by a less
        important pod before the preemptor's retry. Undo with `release_nominated`."""
        if not self.nominated:
            return []
        added = []
        for key, (node, info) in self.nominated.items():
            if key == pod.key or info.priority < pod.priority or key in self.pods:
                continue
            slot = self.nodes.index.get(node)
            if slot is not None:
                self.nodes.add_pod(slot, info)
                added.append((slot, info))
        return added

    def release_nominated(self, added: list[tuple[int, PodInfo]]) -> None:
        for slot, info in added:
            self.nodes.remove_pod(slot, info)

    @contextmanager
    def removing(self, slot: int) -> Iterator[SlotRemoval]:
        """A dry run's scope: every pod still removed from `slot` when it ends, however it
        ends, is put back, so the columns and counts are as before (kube copies the NodeInfo
        instead; a copy of the columns per node tried would cost more than the pods moved)."""
        removal = SlotRemoval(self.nodes, slot)
        try:
            yield removal
        finally:
            for info in list(removal.removed.values()):
                removal.restore(info)

    def finish_binding(self, key: str) -> None:
        state = self.pods.get(key)
        if state is not None and state.assumed:
            state.binding_finished = True
            state.deadline = self.clock.monotonic() + self.assumed_ttl

    def forget(self, key: str) -> None:
        state = self.pods.get(key)
        if state is not None and state.assumed:
            self.remove_pod(key)

    def is_assumed(self, key: str) -> bool:
        return key in self.assumed

    def confirm(self, key: str, uid: str, node: str) -> bool:
        """The informer shows the pod bound to `node`: if the cache already has it there
        (assumed by us, or seen before), mark it confirmed and return True; nothing to parse."""
        state = self.pods.get(key)
        if state is None or state.node != node or state.info.uid != uid:
            return False
        if state.assumed:
            state.assumed = False
            state.deadline = None
            self.assumed.discard(key)
        return True

    def keep_current(self, key: str, pod: pod_pb2.Pod) -> None:
        """Let the cached PodInfo of `key` hold the informer's current version of its pod.

        Called for an update that needed no re-parsing (same node, spec, labels and deletion
        state: the kubelet's status writes), so every field derived from the pod still holds.
        Otherwise the PodInfo kept the version it was parsed from (the pending pod) alive
        beside the informer's: a second decoded pod, about 10 KB, per pod in the cluster."""
        state = self.pods.get(key)
        if state is not None and state.info.uid == pod.metadata.uid:
            object.__setattr__(state.info, "pod", pod)

    def is_confirmed(self, key: str, uid: str, node: str) -> bool:
        """The pod is cached as bound to `node` (not merely assumed)."""
        state = self.pods.get(key)
        return (
            state is not None and not state.assumed and state.node == node and state.info.uid == uid
        )

    def cleanup_expired(self) -> list[str]:
        now = self.clock.monotonic()
        expired = []
        for k in self.assumed:
            s = self.pods[k]
            if s.deadline is not None and s.deadline <= now:
                expired.append(k)
        for k in expired:
            self.remove_pod(k)
        return expired

    def pods_on(self, node: str) -> Iterator[PodInfo]:
        for key in self.by_node.get(node, ()):
            yield self.pods[key].info
