"""The disruption controller: keeps each PodDisruptionBudget's status, which evictions spend.

Modelled on kube-controller-manager's pkg/controller/disruption. Informer handlers only enqueue
budget keys (a pod change enqueues the budgets that select it before or after; a ReplicaSet
whose replicas change enqueues the budgets of its namespace); `sync(key)` is level-triggered:
it re-reads the budget, its pods and their ReplicaSets from the caches and computes
(`compute_status`, a pure function):
- expectedPods: for maxUnavailable, or minAvailable as a percentage, the sum of spec.replicas
  of the selected pods' controllers (ReplicaSets; pods without a controller are reported in
  an UnmanagedPods event and not counted; a controller that is not a known ReplicaSet fails
  the sync); for minAvailable as a number, the number of selected pods;
- desiredHealthy: minAvailable (a percentage of expectedPods rounded up), or expectedPods
  minus maxUnavailable (rounded up likewise), at least 0;
- currentHealthy: selected pods that are Ready, not being deleted, and not in disruptedPods;
- disruptionsAllowed: currentHealthy - desiredHealthy, 0 when negative or expectedPods is 0;
- disruptedPods: the eviction API's entries for pods that still exist and are not being
  deleted, dropped two minutes after the eviction (the budget is rechecked then).
The status is written only when it differs, with the DisruptionAllowed condition
(SufficientPods / InsufficientPods). A failed sync writes disruptionsAllowed 0 with the
condition False/SyncFailed and the error as its message (kube's failSafe); a conflict just
retries.

Concurrency: one event loop; the work queue never hands the same budget key to two workers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from controller.api import NullRecorder, Queue, Recorder, Store
from controller.util import key_of, scaled_int_or_percent
from tinykube import disruption
from tinykube.errors import ConflictError, NotFoundError
from tinykube.meta import int_or_string, set_timestamp
from tinykube.protocols import StatusResourceAPI
from tinykube.v1 import pod_pb2, replicaset_pb2
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

log = logging.getLogger(__name__)

Pod = pod_pb2.Pod
PDB = pdb_pb2.PodDisruptionBudget
ReplicaSet = replicaset_pb2.ReplicaSet

NAMESPACE_INDEX = "namespace"
# How long an eviction's entry in disruptedPods keeps its pod from counting as healthy: the
# pod should be gone by then; if not, the eviction did not happen.
DELETION_TIMEOUT = timedelta(minutes=2)


class SyncError(Exception):
    """A budget whose status cannot be computed; the message becomes SyncFailed's."""


@dataclass
class Computed:
    expected: int
    desired: int
    current: int
    disrupted: dict[str, datetime]
    recheck: datetime | None = None  # when the earliest disruptedPods entry expires
    unmanaged: list[str] = field(default_factory=list)
    # Pods the eviction API let go that were not deleted in time (a NotDeleted event each).
    not_deleted: list[Pod] = field(default_factory=list)

    @property
    def allowed(self) -> int:
        allowed = self.current - self.desired
        return 0 if self.expected <= 0 or allowed <= 0 else allowed


def scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp: "50%" of 3 is 2."""
    try:
        return scaled_int_or_percent(value, total, round_up=True)
    except ValueError as exc:
        raise SyncError(str(exc)) from None


def _bound(value: Any) -> int | str | None:
    if value.WhichOneof("kind") in (None, "null_value"):
        return None
    return int_or_string(value)


def expected_scale(
    pods: Iterable[Pod], replica_set: Callable[[str, str], ReplicaSet | None]
) -> tuple[int, list[str]]:
    """The sum of the selected pods' controllers' replicas, and the pods without one."""
    scale: dict[str, int] = {}
    unmanaged: list[str] = []
    for pod in pods:
        ref = next((r for r in pod.metadata.ownerReferences if r.controller), None)
        if ref is None:
            unmanaged.append(pod.metadata.name)
            continue
        if ref.uid in scale:
            continue
        group = ref.apiVersion.split("/", 1)[0] if "/" in ref.apiVersion else ""
        rs = None
        if ref.kind == "ReplicaSet" and group in ("apps", "extensions"):
            rs = replica_set(pod.metadata.namespace, ref.name)
        if rs is None or rs.metadata.uid != ref.uid:
            raise SyncError(f'found no controllers for pod "{pod.metadata.name}"')
        scale[ref.uid] = rs.spec.replicas if rs.spec.HasField("replicas") else 1
    return sum(scale.values()), unmanaged


def compute_status(
    pdb: PDB,
    pods: list[Pod],
    replica_set: Callable[[str, str], ReplicaSet | None],
    now: datetime,
) -> Computed:
    """The counts `pdb`'s status should hold given the pods it selects (kube's trySync)."""
    min_available = _bound(pdb.spec.minAvailable)
    max_unavailable = _bound(pdb.spec.maxUnavailable)
    expected = desired = 0
    unmanaged: list[str] = []
    if max_unavailable is not None:
        expected, unmanaged = expected_scale(pods, replica_set)
        desired = max(expected - scaled(max_unavailable, expected), 0)
    elif isinstance(min_available, int):
        desired, expected = min_available, len(pods)
    elif min_available is not None:
        expected, unmanaged = expected_scale(pods, replica_set)
        desired = scaled(min_available, expected)
    result = Computed(expected=expected, desired=desired, current=0, disrupted={})
    result.unmanaged = unmanaged
    recorded = pdb.status.disruptedPods
    for pod in pods:
        if pod.metadata.HasField("deletionTimestamp"):
            continue
        entry = recorded.get(pod.metadata.name)
        if entry is None:
            continue
        when = entry.ToDatetime(tzinfo=now.tzinfo)
        expires = when + DELETION_TIMEOUT
        if expires < now:
            result.not_deleted.append(pod)
            continue
        result.disrupted[pod.metadata.name] = when
        if result.recheck is None or expires < result.recheck:
            result.recheck = expires
    for pod in pods:
        if pod.metadata.HasField("deletionTimestamp"):
            continue
        since = result.disrupted.get(pod.metadata.name)
        if since is not None and since + DELETION_TIMEOUT > now:
            continue
        if disruption.is_pod_ready(pod):
            result.current += 1
    return result


def status_differs(pdb: PDB, c: Computed) -> bool:
    s = pdb.status
    recorded = {k: v.ToMicroseconds() for k, v in s.disruptedPods.items()}
    wanted = {k: round(v.timestamp() * 1_000_000) for k, v in c.disrupted.items()}
    return not (
        s.currentHealthy == c.current
        and s.desiredHealthy == c.desired
        and s.expectedPods == c.expected
        and s.disruptionsAllowed == c.allowed
        and recorded == wanted
        and s.observedGeneration == pdb.metadata.generation
        and disruption.conditions_up_to_date(pdb)
    )


class DisruptionController:
    def __init__(
        self,
        api: StatusResourceAPI[PDB],
        pdbs: Store[PDB],
        pods: Store[Pod],
        replica_sets: Store[ReplicaSet],
        queue: Queue,
        *,
        now: Callable[[], datetime],
        recorder: Recorder | None = None,
    ) -> None:
        self.api = api
        self.pdbs = pdbs
        self.pods = pods
        self.replica_sets = replica_sets
        self.queue = queue
        self.now = now
        self.recorder = recorder or NullRecorder()
        self._indexed = hasattr(pods, "add_index") and hasattr(pods, "by_index")
        if self._indexed:
            indexed: Any = pods
            # Controllers sharing the pod informer share its indexes.
            with contextlib.suppress(ValueError):
                indexed.add_index(NAMESPACE_INDEX, lambda p: str(p.metadata.namespace))

    # ---- handlers (sync callables: enqueue only) ---------------------------------------

    def on_pdb_add(self, pdb: PDB) -> None:
        self.queue.add(key_of(pdb))

    def on_pdb_update(self, old: PDB, new: PDB) -> None:
        self.queue.add(key_of(new))

    def on_pdb_delete(self, pdb: PDB) -> None:
        self.queue.add(key_of(pdb))

    def _budgets_for(self, pod: Pod) -> list[str]:
        return [key_of(b) for b in self.pdbs.list() if disruption.selects(b, pod)]

    def on_pod_add(self, pod: Pod) -> None:
        for key in self._budgets_for(pod):
            self.queue.add(key)

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        if old.metadata.resourceVersion == new.metadata.resourceVersion:
            return  # a resync: nothing changed
        for key in {*self._budgets_for(old), *self._budgets_for(new)}:
            self.queue.add(key)

    def on_pod_delete(self, pod: Pod) -> None:
        self.on_pod_add(pod)

    def on_rs_add(self, rs: ReplicaSet) -> None:
        # A ReplicaSet's scale is the expectedPods of the budgets over its pods.
        namespace = rs.metadata.namespace
        for b in self.pdbs.list():
            if b.metadata.namespace == namespace:
                self.queue.add(key_of(b))

    def on_rs_update(self, old: ReplicaSet, new: ReplicaSet) -> None:
        if old.spec.replicas != new.spec.replicas:
            self.on_rs_add(new)

    def on_rs_delete(self, rs: ReplicaSet) -> None:
        self.on_rs_add(rs)

    # ---- reconcile ---------------------------------------------------------------------

    def _pods_for(self, pdb: PDB) -> list[Pod]:
        namespace = pdb.metadata.namespace
        if self._indexed:
            indexed: Any = self.pods
            candidates: Iterable[Pod] = indexed.by_index(NAMESPACE_INDEX, namespace)
        else:
            candidates = self.pods.list()
        pods = [p for p in candidates if disruption.selects(pdb, p)]
        pods.sort(key=lambda p: p.metadata.name)
        return pods

    def _replica_set(self, namespace: str, name: str) -> ReplicaSet | None:
        return self.replica_sets.get(f"{namespace}/{name}")

    async def sync(self, key: str) -> None:
        cached = self.pdbs.get(key)
        if cached is None:
            return
        pdb = PDB()
        pdb.CopyFrom(cached)
        try:
            await self._try_sync(pdb)
        except ConflictError:
            self.queue.add_after(key, 0.1)  # our cache is behind: retry once it catches up
        except NotFoundError:
            return
        except SyncError as exc:
            log.warning("disruption budget %s: %s", key, exc)
            await self._fail_safe(pdb, str(exc))

    async def _try_sync(self, pdb: PDB) -> None:
        pods = self._pods_for(pdb)
        if not pods:
            await self.recorder.record(pdb, "Normal", "NoPods", "No matching pods found")
        now = self.now()
        try:
            computed = compute_status(pdb, pods, self._replica_set, now)
        except SyncError as exc:
            await self.recorder.record(
                pdb,
                "Warning",
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {exc}",
            )
            raise
        if computed.unmanaged:
            await self.recorder.record(
                pdb,
                "Warning",
                "UnmanagedPods",
                "Pods selected by this PodDisruptionBudget (selector: "
                f"{_selector_text(pdb)}) were found to be unmanaged. As a result, the status of "
                "the PDB cannot be calculated correctly, which may result in undefined "
                'behavior. To account for these pods please set ".spec.minAvailable" field of '
                "the PDB to an integer value.",
            )
        for pod in computed.not_deleted:
            await self.recorder.record(
                pod,
                "Warning",
                "NotDeleted",
                f"Pod was expected by PDB {pdb.metadata.namespace}/{pdb.metadata.name} to be "
                "deleted but it wasn't",
            )
        if status_differs(pdb, computed):
            status = pdb.status
            status.currentHealthy = computed.current
            status.desiredHealthy = computed.desired
            status.expectedPods = computed.expected
            status.disruptionsAllowed = computed.allowed
            status.observedGeneration = pdb.metadata.generation
            status.disruptedPods.clear()
            for name, when in computed.disrupted.items():
                set_timestamp(status.disruptedPods[name], when)
            disruption.update_disruption_allowed_condition(pdb, now)
            await self.api.update_status(pdb)
            log.info(
                "disruption budget %s: %d healthy, %d desired, %d expected, %d allowed",
                key_of(pdb),
                computed.current,
                computed.desired,
                computed.expected,
                computed.allowed,
            )
        if computed.recheck is not None:
            self.queue.add_after(key_of(pdb), max((computed.recheck - now).total_seconds(), 0))

    async def _fail_safe(self, pdb: PDB, message: str) -> None:
        pdb.status.disruptionsAllowed = 0
        disruption.set_condition(
            pdb.status.conditions,
            type_=disruption.DISRUPTION_ALLOWED,
            status="False",
            reason=disruption.SYNC_FAILED,
            message=message,
            observed_generation=pdb.status.observedGeneration,
            now=self.now(),
        )
        with contextlib.suppress(ConflictError, NotFoundError):
            await self.api.update_status(pdb)


def _selector_text(pdb: PDB) -> str:
    selector = disruption.budget_selector(pdb)
    return str(selector) if selector is not None else "<none>"
