"""The DaemonSet controller: one pod of each DaemonSet on every node that should run it.

Modelled on kube-controller-manager's pkg/controller/daemon. Informer handlers (DaemonSets,
pods, nodes, ControllerRevisions) only enqueue DaemonSet keys and lower expectations;
`sync(key)` is level-triggered over the caches, as kube's syncDaemonSet:

1. the template history: the DaemonSet's ControllerRevisions are claimed (orphans whose labels
   match are adopted), the one holding the current template is found or created (named
   `<ds>-<hash>`, revision one above the others, hash collisions bump status.collisionCount),
   and its `controller-revision-hash` is the hash new pods carry;
2. unless earlier creations/deletions are still unobserved (expectations), `manage`: a pod for
   every node that should run one and has none (created in slow-start batches, placed by the
   scheduler through a required node affinity on the node's name), the pods of nodes that no
   longer qualify deleted, failed pods deleted with per-node back-off (1 s doubling to 15 min)
   so that a new one is made, extra pods on a node removed;
3. the update strategy: RollingUpdate deletes old pods (or, with maxSurge, creates new ones
   beside them) within maxUnavailable / maxSurge (`daemonutil.rolling_update_plan`); OnDelete
   waits for old pods to be deleted by someone else;
4. old revisions beyond revisionHistoryLimit that no pod uses are deleted;
5. the status (desired, current, ready, available, unavailable, misscheduled, updated,
   observedGeneration) through UpdateStatus.

The work queue keeps one sync per key at a time; many keys sync concurrently on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from controller.api import NullRecorder, PodIndex, Queue, Recorder, Store
from controller.controllerref import ControllerRefManager
from controller.daemonutil import (
    API_VERSION,
    HASH_LABEL,
    KIND,
    DaemonSet,
    Eligibility,
    Node,
    Pod,
    allows_surge,
    compute_hash,
    creation_order,
    eligibility_check,
    is_pod_updated,
    new_revision,
    node_should_run,
    pod_for_node,
    revision_matches,
    rolling_update_plan,
    selects,
    target_node,
    template_generation,
)
from controller.expectations import Expectations
from controller.replicaset import slow_start_batch
from controller.util import (
    controller_ref,
    is_pod_available,
    is_pod_ready,
    is_terminating,
    key_of,
    resolve_controller_ref,
    selector_is_empty,
)
from tinykube.clock import Clock
from tinykube.errors import (
    AlreadyExistsError,
    ConflictError,
    DeadlineExceededError,
    NotFoundError,
    TinykubeError,
    UnavailableError,
)
from tinykube.protocols import ResourceAPI, StatusResourceAPI
from tinykube.retry import is_unsent
from tinykube.v1 import controllerrevision_pb2, daemonset_pb2

log = logging.getLogger(__name__)

# kube's DaemonSetsController burstReplicas: at most this many creates (or deletes) per sync.
BURST_REPLICAS = 250
SLOW_START_INITIAL_BATCH = 1
# kube's failedPodsBackoff: flowcontrol.NewBackOff(1s, 15min).
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 15 * 60.0
STATUS_UPDATE_RETRIES = 1

ControllerRevision = controllerrevision_pb2.ControllerRevision

SELECTING_ALL = "This daemon set is selecting all pods. A non-empty selector is required."


class DaemonSetClientAPI(Protocol):
    @property
    def pods(self) -> StatusResourceAPI[Pod]: ...

    @property
    def daemon_sets(self) -> StatusResourceAPI[DaemonSet]: ...

    @property
    def controller_revisions(self) -> ResourceAPI[ControllerRevision]: ...


@dataclass
class _BackoffEntry:
    delay: float
    last_update: float


class Backoff:
    """client-go's flowcontrol.Backoff, keyed: each `next` doubles the delay (from `initial`,
    to `maximum`); an entry idle for twice the maximum starts over."""

    def __init__(self, initial: float = BACKOFF_INITIAL, maximum: float = BACKOFF_MAX) -> None:
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, _BackoffEntry] = {}

    def get(self, key: str) -> float:
        entry = self._entries.get(key)
        return entry.delay if entry is not None else 0.0

    def in_backoff_since_update(self, key: str, now: float) -> bool:
        entry = self._entries.get(key)
        return entry is not None and now - entry.last_update < entry.delay

    def next(self, key: str, now: float) -> None:
        entry = self._entries.get(key)
        if entry is None or now - entry.last_update > 2 * self.maximum:
            self._entries[key] = _BackoffEntry(self.initial, now)
        else:
            entry.delay = min(entry.delay * 2, self.maximum)
            entry.last_update = now

    def gc(self, now: float) -> None:
        for key in [k for k, e in self._entries.items() if now - e.last_update > 2 * self.maximum]:
            del self._entries[key]


def _copy(obj: Any) -> Any:
    out = type(obj)()
    out.CopyFrom(obj)
    return out


class DaemonSetController:
    name = "daemonset"

    def __init__(
        self,
        client: DaemonSetClientAPI,
        ds_store: Store[DaemonSet],
        pod_store: Store[Pod],
        node_store: Store[Node],
        history_store: Store[ControllerRevision],
        queue: Queue,
        *,
        clock: Clock | None = None,
        recorder: Recorder | None = None,
        burst_replicas: int = BURST_REPLICAS,
    ) -> None:
        self.client = client
        self.ds_store = ds_store
        self.pod_store = pod_store
        self.node_store = node_store
        self.history_store = history_store
        self.queue = queue
        self.clock = clock or Clock()
        self.recorder = recorder or NullRecorder()
        self.burst_replicas = burst_replicas
        self.expectations = Expectations(self.clock)
        self.failed_pods_backoff = Backoff()
        self.pod_index = PodIndex(pod_store)
        self.history_index = PodIndex(history_store)

    # ---- informer handlers: cheap, synchronous, only enqueue and count ----

    def _daemon_sets(self, namespace: str | None = None) -> list[DaemonSet]:
        return [
            ds
            for ds in self.ds_store.list()
            if namespace is None or ds.metadata.namespace == namespace
        ]

    def on_ds_add(self, ds: DaemonSet) -> None:
        self.queue.add(key_of(ds))

    def on_ds_update(self, old: DaemonSet, new: DaemonSet) -> None:
        self.queue.add(key_of(new))

    def on_ds_delete(self, ds: DaemonSet) -> None:
        key = key_of(ds)
        self.expectations.delete(key)
        self.queue.add(key)

    def _owner(self, obj: Any) -> DaemonSet | None:
        """The DaemonSet an object's controller reference names, if it is in the cache."""
        return resolve_controller_ref(
            obj.metadata.namespace, controller_ref(obj.metadata), KIND, self.ds_store
        )

    def _enqueue_selecting(self, obj: Any) -> None:
        for ds in self._daemon_sets(obj.metadata.namespace):
            if selects(ds, obj.metadata.labels):
                self.queue.add(key_of(ds))

    def on_pod_add(self, pod: Pod) -> None:
        if is_terminating(pod):
            self.on_pod_delete(pod)
            return
        ds = self._owner(pod)
        if ds is not None:
            key = key_of(ds)
            self.expectations.creation_observed(key)
            self.queue.add(key)
        elif controller_ref(pod.metadata) is None:
            self._enqueue_selecting(pod)

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        if old.metadata.resourceVersion == new.metadata.resourceVersion:
            return
        if is_terminating(new):
            self.on_pod_delete(new)
            return
        old_ref, new_ref = controller_ref(old.metadata), controller_ref(new.metadata)
        if old_ref is not None and (new_ref is None or new_ref.uid != old_ref.uid):
            old_ds = self._owner(old)
            if old_ds is not None:
                self.queue.add(key_of(old_ds))
        ds = self._owner(new)
        if ds is not None:
            key = key_of(ds)
            self.queue.add(key)
            min_ready = ds.spec.minReadySeconds
            if min_ready > 0 and not is_pod_ready(old) and is_pod_ready(new):
                self.queue.add_after(key, float(min_ready) + 1.0)
        elif new_ref is None and (
            old_ref is not None or dict(old.metadata.labels) != dict(new.metadata.labels)
        ):
            self._enqueue_selecting(new)

    def on_pod_delete(self, pod: Pod) -> None:
        ds = self._owner(pod)
        if ds is None:
            return
        key = key_of(ds)
        self.expectations.deletion_observed(key, key_of(pod))
        self.queue.add(key)

    def on_node_add(self, node: Node) -> None:
        for ds in self._daemon_sets():
            if node_should_run(node, ds).should_run:
                self.queue.add(key_of(ds))

    def on_node_update(self, old: Node, new: Node) -> None:
        # Only the name, labels and taints decide eligibility: status heartbeats (every node's,
        # every few seconds) cost a comparison, and nothing at all without DaemonSets.
        daemon_sets = self._daemon_sets()
        if not daemon_sets or (
            old.spec.taints == new.spec.taints and old.metadata.labels == new.metadata.labels
        ):
            return
        for ds in daemon_sets:
            if node_should_run(old, ds) != node_should_run(new, ds):
                self.queue.add(key_of(ds))

    def on_node_delete(self, node: Node) -> None:
        # kube leaves a deleted node's pods to the pod garbage collector (here the node
        # lifecycle controller) and notices through their deletion; an unscheduled pod for the
        # node is the DaemonSet's to remove, so look at every DaemonSet now.
        for ds in self._daemon_sets():
            self.queue.add(key_of(ds))

    def on_history_add(self, cr: ControllerRevision) -> None:
        ds = self._owner(cr)
        if ds is not None:
            self.queue.add(key_of(ds))
        elif controller_ref(cr.metadata) is None:
            self._enqueue_selecting(cr)

    def on_history_update(self, old: ControllerRevision, new: ControllerRevision) -> None:
        if old.metadata.resourceVersion != new.metadata.resourceVersion:
            self.on_history_add(new)

    def on_history_delete(self, cr: ControllerRevision) -> None:
        ds = self._owner(cr)
        if ds is not None:
            self.queue.add(key_of(ds))

    # ---- the reconcile ----

    async def sync(self, key: str) -> None:
        ds = self.ds_store.get(key)
        if ds is None:
            self.expectations.delete(key)
            return
        if selector_is_empty(ds.spec.selector):
            await self._event(ds, "Warning", "SelectingAll", SELECTING_ALL)
            return
        if is_terminating(ds):
            # Its revisions may be going or orphaned: the status cannot be computed reliably.
            return
        # kube collects idle back-off entries once a minute; here each sync does (it is cheap).
        self.failed_pods_backoff.gc(self.clock.monotonic())
        check = eligibility_check(ds)
        nodes = {n.metadata.name: check(n) for n in self.node_store.list()}
        current, old = await self._construct_history(ds)
        hash_ = current.metadata.labels.get(HASH_LABEL, "")
        if not self.expectations.satisfied(key):
            # The last creations/deletions are not seen yet: the status only, at the old
            # observedGeneration (this generation was not acted on).
            await self._update_status(ds, nodes, hash_, observed=False)
            return
        error: BaseException | None = None
        try:
            await self._manage(ds, nodes, hash_)
            if self.expectations.satisfied(key) and ds.spec.updateStrategy.type == "RollingUpdate":
                await self._rolling_update(ds, nodes, hash_)
            await self._cleanup_history(ds, old)
        except TinykubeError as exc:
            error = exc
        await self._update_status(ds, nodes, hash_, observed=True)
        if error is not None:
            try:
                raise error
            finally:
                del error  # (its traceback holds this frame: a name for it here would make a cycle)

    # ---- pods by node ----

    def _ref_manager(self, ds: DaemonSet) -> ControllerRefManager:
        return ControllerRefManager(ds, API_VERSION, KIND, self.client.daemon_sets)

    async def _claim_pods(self, ds: DaemonSet) -> list[Pod]:
        """kube's getDaemonPods: pods `ds` controls, after adopting matching orphans and
        releasing owned pods whose labels no longer match."""
        return await self._ref_manager(ds).claim(
            self.pod_index.claim_candidates(ds),
            lambda pod: selects(ds, pod.metadata.labels),
            self.client.pods,
        )

    async def _nodes_to_daemon_pods(
        self, ds: DaemonSet, *, include_deleted_terminal: bool = False
    ) -> dict[str, list[Pod]]:
        """kube's getNodesToDaemonPods: claimed pods by the node they are for."""
        out: dict[str, list[Pod]] = {}
        for pod in await self._claim_pods(ds):
            terminal = pod.status.phase in ("Succeeded", "Failed")
            if not include_deleted_terminal and terminal and is_terminating(pod):
                continue  # going already; nothing left for the DaemonSet to do with it
            node = target_node(pod)
            if node is None:
                log.debug("%s: pod %s names no node", key_of(ds), key_of(pod))
                continue
            out.setdefault(node, []).append(pod)
        return out

    # ---- manage: a pod per eligible node ----

    def _pods_should_be_on_node(
        self,
        name: str,
        eligibility: Eligibility,
        node_to_pods: dict[str, list[Pod]],
        ds: DaemonSet,
        hash_: str,
        events: list[tuple[str, str, str]],
    ) -> tuple[list[str], list[Pod]]:
        """kube's podsShouldBeOnNode: (nodes needing a pod, pods to delete) for one node; the
        Events to record go to `events`."""
        pods = node_to_pods.get(name)
        if eligibility.should_run and not pods:
            return [name], []
        if not pods:
            return [], []
        if not eligibility.should_continue_running:
            return [], [p for p in pods if not is_terminating(p)]
        delete: list[Pod] = []
        running: list[Pod] = []
        now = self.clock.monotonic()
        for pod in pods:
            if is_terminating(pod):
                continue
            if pod.status.phase == "Failed":
                # The kubelet may keep refusing the pod: replace it, but not in a hot loop.
                backoff_key = f"{ds.metadata.uid}/{ds.status.observedGeneration}/{name}"
                if self.failed_pods_backoff.in_backoff_since_update(backoff_key, now):
                    delay = self.failed_pods_backoff.get(backoff_key)
                    self.queue.add_after(key_of(ds), delay)
                    continue
                self.failed_pods_backoff.next(backoff_key, now)
                events.append(
                    (
                        "Warning",
                        "FailedDaemonPod",
                        f"Found failed daemon pod {pod.metadata.namespace}/{pod.metadata.name} "
                        f"on node {name}, will try to kill it",
                    )
                )
                delete.append(pod)
            elif pod.status.phase == "Succeeded":
                events.append(
                    (
                        "Normal",
                        "SucceededDaemonPod",
                        f"Found succeeded daemon pod {pod.metadata.namespace}/{pod.metadata.name} "
                        f"on node {name}, will try to delete it",
                    )
                )
                delete.append(pod)
            else:
                running.append(pod)
        running.sort(key=creation_order)
        if not allows_surge(ds):
            return [], delete + running[1:]  # one pod per node: the oldest stays
        if len(running) <= 1:
            need = [name] if not running and eligibility.should_run else []
            return need, delete
        # Surging: keep the oldest new pod, and the oldest old pod until the new one is
        # available (or drop it at once if it is not ready itself).
        oldest_new = oldest_old = None
        for pod in running:
            if pod.metadata.labels.get(HASH_LABEL) == hash_:
                if oldest_new is None:
                    oldest_new = pod
                    continue
            elif oldest_old is None:
                oldest_old = pod
                continue
            delete.append(pod)
        if (
            oldest_new is not None
            and oldest_old is not None
            and (
                not is_pod_ready(oldest_old)
                or is_pod_available(oldest_new, ds.spec.minReadySeconds, self.clock.now())
            )
        ):
            delete.append(oldest_old)
        return [], delete

    async def _manage(self, ds: DaemonSet, nodes: dict[str, Eligibility], hash_: str) -> None:
        node_to_pods = await self._nodes_to_daemon_pods(ds)
        create: list[str] = []
        delete: list[Pod] = []
        events: list[tuple[str, str, str]] = []
        for name, eligibility in nodes.items():
            c, d = self._pods_should_be_on_node(name, eligibility, node_to_pods, ds, hash_, events)
            create += c
            delete += d
        for type_, reason, message in events:
            await self._event(ds, type_, reason, message)
        # Unscheduled pods for nodes that are gone: no pod garbage collector will see them.
        for node_name, pods in node_to_pods.items():
            if node_name not in nodes:
                delete += [p for p in pods if not p.spec.nodeName and not is_terminating(p)]
        await self._sync_nodes(ds, delete, create, hash_)

    async def _sync_nodes(
        self, ds: DaemonSet, delete: list[Pod], create: list[str], hash_: str
    ) -> None:
        """kube's syncNodes: create a pod on each node of `create`, delete `delete`, at most
        burstReplicas of each; raise the first error after all were tried."""
        if not delete and not create:
            return
        key = key_of(ds)
        create = create[: self.burst_replicas]
        delete = delete[: self.burst_replicas]
        self.expectations.expect(key, len(create), [key_of(p) for p in delete])
        errors: list[BaseException] = []
        if create:
            targets: Iterator[str] = iter(create)
            successes, error = await slow_start_batch(
                len(create),
                SLOW_START_INITIAL_BATCH,
                lambda: self._create_pod(ds, next(targets), hash_),
            )
            for _ in range(len(create) - successes):
                self.expectations.creation_observed(key)  # failed or never tried
            if error is not None:
                errors.append(error)
            del error
        if delete:
            results = await asyncio.gather(
                *(self._delete_pod(ds, p) for p in delete), return_exceptions=True
            )
            errors += [r for r in results if isinstance(r, BaseException)]
            del results
        if errors:
            # Only `first` names the error when it leaves: its traceback holds this frame, and
            # another name for it here would make a cycle only the cyclic GC frees.
            first = errors[0]
            errors.clear()
            try:
                raise first
            finally:
                del first

    async def _create_pod(self, ds: DaemonSet, node_name: str, hash_: str) -> None:
        pod = pod_for_node(ds, node_name, hash_)
        for attempt in range(3):
            try:
                created = await self.client.pods.create(pod)
            except AlreadyExistsError:
                if attempt == 2:
                    raise
                continue  # every generated name tried was taken
            except (DeadlineExceededError, UnavailableError) as exc:
                if is_unsent(exc):
                    raise
                # Maybe made (the answer was lost): count it made, as the ReplicaSet
                # controller does; the expectation expires if it never landed.
                log.info("creating a pod for %s on %s: %s", key_of(ds), node_name, exc)
                return
            except TinykubeError as exc:
                await self._event(ds, "Warning", "FailedCreate", f"Error creating: {exc}")
                raise
            await self._event(
                ds, "Normal", "SuccessfulCreate", f"Created pod: {created.metadata.name}"
            )
            return

    async def _delete_pod(self, ds: DaemonSet, pod: Pod) -> None:
        try:
            await self.client.pods.delete(
                pod.metadata.name, pod.metadata.namespace, uid=pod.metadata.uid
            )
        except TinykubeError as exc:
            self.expectations.deletion_observed(key_of(ds), key_of(pod))
            if isinstance(exc, NotFoundError):
                return
            await self._event(ds, "Warning", "FailedDelete", f"Error deleting: {exc}")
            raise
        await self._event(ds, "Normal", "SuccessfulDelete", f"Deleted pod: {pod.metadata.name}")

    # ---- rolling update ----

    async def _rolling_update(
        self, ds: DaemonSet, nodes: dict[str, Eligibility], hash_: str
    ) -> None:
        node_to_pods = await self._nodes_to_daemon_pods(ds)
        eligible = {name: e.should_run for name, e in nodes.items()}
        for name, should_run in eligible.items():
            if should_run:
                node_to_pods.setdefault(name, [])
        plan = rolling_update_plan(
            ds, node_to_pods, hash_, lambda n: eligible.get(n, False), self.clock.now()
        )
        by_name = {p.metadata.name: p for pods in node_to_pods.values() for p in pods}
        victims = [by_name[n] for n in plan.delete if n in by_name]
        await self._sync_nodes(ds, victims, plan.create, hash_)

    # ---- history ----

    async def _controlled_histories(self, ds: DaemonSet) -> list[ControllerRevision]:
        """kube's controlledHistories: revisions `ds` controls, after adoption and release."""
        return await self._ref_manager(ds).claim(
            self.history_index.claim_candidates(ds),
            lambda cr: selects(ds, cr.metadata.labels),
            self.client.controller_revisions,
        )

    async def _construct_history(
        self, ds: DaemonSet
    ) -> tuple[ControllerRevision, list[ControllerRevision]]:
        """kube's constructHistory: (the current revision, the old ones)."""
        current: list[ControllerRevision] = []
        old: list[ControllerRevision] = []
        for cr in await self._controlled_histories(ds):
            if HASH_LABEL not in cr.metadata.labels:
                # Name it by its name: no hash to recompute, no collision to fear.
                updated = _copy(cr)
                updated.metadata.labels[HASH_LABEL] = cr.metadata.name
                cr = await self.client.controller_revisions.update(updated)
            (current if revision_matches(ds, cr) else old).append(cr)
        next_revision = max((r.revision for r in old), default=0) + 1
        if not current:
            return await self._snapshot(ds, next_revision), old
        cur = await self._dedup(ds, current)
        if cur.revision < next_revision:
            updated = _copy(cur)
            updated.revision = next_revision
            cur = await self.client.controller_revisions.update(updated)
        return cur, old

    async def _snapshot(self, ds: DaemonSet, number: int) -> ControllerRevision:
        collision = ds.status.collisionCount if ds.status.HasField("collisionCount") else None
        hash_ = compute_hash(ds.spec.template, collision)
        wanted = new_revision(ds, hash_, number)
        try:
            return await self.client.controller_revisions.create(wanted)
        except AlreadyExistsError as exc:
            existing = await self.client.controller_revisions.get(
                wanted.metadata.name, ds.metadata.namespace
            )
            if revision_matches(ds, existing):
                return existing
            # Another template has this hash: bump collisionCount and try again next sync.
            fresh = await self.client.daemon_sets.get(ds.metadata.name, ds.metadata.namespace)
            fresh_collision = (
                fresh.status.collisionCount if fresh.status.HasField("collisionCount") else None
            )
            if fresh_collision != collision:
                raise ConflictError(
                    f"found a stale collision count ({collision}, expected {fresh_collision}) "
                    f"of DaemonSet {ds.metadata.name!r} while processing; will retry until it "
                    "is updated"
                ) from exc
            fresh.status.collisionCount = (collision or 0) + 1
            await self.client.daemon_sets.update_status(fresh)
            log.info(
                "%s: hash collision; collisionCount now %d",
                key_of(ds),
                fresh.status.collisionCount,
            )
            raise

    async def _dedup(self, ds: DaemonSet, current: list[ControllerRevision]) -> ControllerRevision:
        """kube's dedupCurHistories: keep the highest revision, relabel pods, delete the rest."""
        if len(current) == 1:
            return current[0]
        keep = max(current, key=lambda r: r.revision)
        keep_hash = keep.metadata.labels.get(HASH_LABEL, "")
        for pod in await self._claim_pods(ds):
            if pod.metadata.labels.get(HASH_LABEL) != keep_hash:
                updated = _copy(pod)
                updated.metadata.labels[HASH_LABEL] = keep_hash
                with contextlib.suppress(ConflictError, NotFoundError):
                    await self.client.pods.update(updated)
        for cr in current:
            if cr.metadata.name != keep.metadata.name:
                with contextlib.suppress(NotFoundError):
                    await self.client.controller_revisions.delete(
                        cr.metadata.name, cr.metadata.namespace
                    )
        return keep

    async def _cleanup_history(self, ds: DaemonSet, old: list[ControllerRevision]) -> None:
        """kube's cleanupHistory: delete the oldest unused revisions beyond the limit."""
        limit = ds.spec.revisionHistoryLimit if ds.spec.HasField("revisionHistoryLimit") else 10
        to_kill = len(old) - limit
        if to_kill <= 0:
            return
        node_to_pods = await self._nodes_to_daemon_pods(ds, include_deleted_terminal=True)
        live = {
            p.metadata.labels[HASH_LABEL]
            for pods in node_to_pods.values()
            for p in pods
            if p.metadata.labels.get(HASH_LABEL)
        }
        for cr in sorted(old, key=lambda r: r.revision):
            if to_kill <= 0:
                break
            if cr.metadata.labels.get(HASH_LABEL) in live:
                continue
            with contextlib.suppress(NotFoundError):
                await self.client.controller_revisions.delete(
                    cr.metadata.name, cr.metadata.namespace
                )
            to_kill -= 1

    # ---- status ----

    def calculate_status(
        self,
        ds: DaemonSet,
        nodes: dict[str, Eligibility],
        node_to_pods: dict[str, list[Pod]],
        hash_: str,
        *,
        observed: bool,
    ) -> daemonset_pb2.DaemonSetStatus:
        """kube's updateDaemonSetStatus: the counts over the nodes, each node's oldest pod."""
        now = self.clock.now()
        generation = template_generation(ds)
        status = daemonset_pb2.DaemonSetStatus()
        status.CopyFrom(ds.status)
        desired = current = misscheduled = ready = updated = available = 0
        for name, eligibility in nodes.items():
            pods = node_to_pods.get(name) or []
            if not eligibility.should_run:
                misscheduled += bool(pods)
                continue
            desired += 1
            if not pods:
                continue
            current += 1
            pod = min(pods, key=creation_order)
            if is_pod_ready(pod):
                ready += 1
                available += is_pod_available(pod, ds.spec.minReadySeconds, now)
            updated += is_pod_updated(pod, hash_, generation)
        status.desiredNumberScheduled = desired
        status.currentNumberScheduled = current
        status.numberMisscheduled = misscheduled
        status.numberReady = ready
        status.updatedNumberScheduled = updated
        status.numberAvailable = available
        status.numberUnavailable = desired - available
        if observed:
            status.observedGeneration = ds.metadata.generation
        return status

    async def _update_status(
        self, ds: DaemonSet, nodes: dict[str, Eligibility], hash_: str, *, observed: bool
    ) -> None:
        node_to_pods = await self._nodes_to_daemon_pods(ds)
        status = self.calculate_status(ds, nodes, node_to_pods, hash_, observed=observed)
        key = key_of(ds)
        if ds.spec.minReadySeconds > 0 and status.numberReady != status.numberAvailable:
            self.queue.add_after(key, float(ds.spec.minReadySeconds))
        if status == ds.status and ds.status.observedGeneration >= ds.metadata.generation:
            return
        current = ds
        for attempt in range(STATUS_UPDATE_RETRIES + 1):
            updated = _copy(current)
            updated.status.CopyFrom(status)
            if current is not ds:
                # Keep what changed meanwhile and is not ours to compute.
                updated.status.collisionCount = current.status.collisionCount
                if not current.status.HasField("collisionCount"):
                    updated.status.ClearField("collisionCount")
                if observed:
                    updated.status.observedGeneration = min(
                        ds.metadata.generation, current.metadata.generation
                    )
            try:
                await self.client.daemon_sets.update_status(updated)
                return
            except NotFoundError:
                return
            except ConflictError:
                if attempt == STATUS_UPDATE_RETRIES:
                    raise
                try:
                    current = await self.client.daemon_sets.get(
                        ds.metadata.name, ds.metadata.namespace
                    )
                except NotFoundError:
                    return

    # ---- events ----

    async def _event(self, ds: DaemonSet, type_: str, reason: str, message: str) -> None:
        try:
            await self.recorder.record(ds, type_, reason, message)
        except Exception:  # events are best effort: never fail a sync over one
            log.debug("could not record event %s for %s", reason, key_of(ds), exc_info=True)
