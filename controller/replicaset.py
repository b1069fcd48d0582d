"""The ReplicaSet controller: keeps `spec.replicas` active pods for every ReplicaSet.

Modelled on kube-controller-manager's pkg/controller/replicaset. Informer handlers only
enqueue ReplicaSet keys and lower expectations; `sync(key)` is level-triggered: it re-reads the
caches, claims pods (adopts matching orphans, releases pods that no longer match), creates or
deletes the difference in slow-start batches (1, 2, 4, ...) unless earlier creations/deletions
have not been observed yet (expectations), and writes status through UpdateStatus. The work
queue guarantees one sync per key at a time; many keys sync concurrently on one event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime

from controller import controllerref
from controller.api import ClientAPI, NullRecorder, PodIndex, Queue, Recorder, Store
from controller.controllerref import ControllerRefManager
from controller.expectations import Expectations
from controller.util import (
    controller_ref,
    datetime_to_ts,
    is_pod_active,
    is_pod_available,
    is_pod_ready,
    is_terminating,
    key_of,
    pod_condition,
    resolve_controller_ref,
    selector_is_empty,
    selector_matches,
    ts_to_datetime,
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
from tinykube.retry import is_unsent
from tinykube.v1 import meta_pb2, pod_pb2, replicaset_pb2

log = logging.getLogger(__name__)

BURST_REPLICAS = 500
SLOW_START_INITIAL_BATCH = 1
KIND = "ReplicaSet"
API_VERSION = "apps/v1"

Pod = pod_pb2.Pod
ReplicaSet = replicaset_pb2.ReplicaSet


def desired_replicas(rs: ReplicaSet) -> int:
    return rs.spec.replicas if rs.spec.HasField("replicas") else 1


def new_controller_ref(rs: ReplicaSet) -> meta_pb2.OwnerReference:
    return controllerref.new_controller_ref(rs, API_VERSION, KIND)


def pod_from_template(rs: ReplicaSet) -> Pod:
    """A new pod for `rs`: the template's labels, annotations and spec, owned by `rs`.

    Named by the apiserver from generateName "<rs>-" plus 5 random characters.
    """
    tmpl = rs.spec.template
    pod = Pod(apiVersion="v1", kind="Pod")
    pod.metadata.generateName = f"{rs.metadata.name}-"
    pod.metadata.namespace = rs.metadata.namespace
    pod.metadata.labels.update(tmpl.metadata.labels)
    pod.metadata.annotations.update(tmpl.metadata.annotations)
    pod.metadata.finalizers.extend(tmpl.metadata.finalizers)
    pod.metadata.ownerReferences.append(new_controller_ref(rs))
    pod.spec.CopyFrom(tmpl.spec)
    return pod


def pods_to_delete(pods: list[Pod], related: list[Pod], count: int) -> list[Pod]:
    """The `count` pods to delete first, by Kubernetes' ActivePodsWithRanks order.

    Unassigned before assigned, Pending before Unknown before Running, not ready before ready,
    pods on nodes crowded with related pods first, ready for less time first, more restarts
    first, newer first.
    """
    on_node = Counter(p.spec.nodeName for p in related if p.spec.nodeName and is_pod_active(p))
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}

    def sort_key(p: Pod) -> tuple[int, int, int, int, float, int, float]:
        ready = is_pod_ready(p)
        ready_since = 0.0
        cond = pod_condition(p, "Ready")
        if ready and cond is not None and cond.HasField("lastTransitionTime"):
            ready_since = ts_to_datetime(cond.lastTransitionTime).timestamp()
        restarts = sum(cs.restartCount for cs in p.status.containerStatuses)
        created = (
            ts_to_datetime(p.metadata.creationTimestamp).timestamp()
            if p.metadata.HasField("creationTimestamp")
            else 0.0
        )
        return (
            1 if p.spec.nodeName else 0,
            phase_rank.get(p.status.phase, 0),
            1 if ready else 0,
            -on_node.get(p.spec.nodeName, 0),
            -ready_since,  # more recently ready (less time ready) first
            -restarts,
            -created,  # newer first
        )

    return sorted(pods, key=sort_key)[:count]


async def slow_start_batch(
    count: int, initial: int, fn: Callable[[], Awaitable[None]]
) -> tuple[int, BaseException | None]:
    """Call `fn` `count` times in batches of 1, 2, 4, ...; stop after the first failing batch.

    Returns (successes, first error). A quota or admission failure thus costs one call, not a
    thousand.
    """
    remaining = count
    batch = min(remaining, initial)
    successes = 0
    while batch > 0:
        results = await asyncio.gather(*(fn() for _ in range(batch)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        successes += batch - len(errors)
        if errors:
            return successes, errors[0]
        remaining -= batch
        batch = min(2 * batch, remaining)
    return successes, None


class ReplicaSetController:
    name = "replicaset"

    def __init__(
        self,
        client: ClientAPI,
        rs_store: Store[ReplicaSet],
        pod_store: Store[Pod],
        queue: Queue,
        *,
        clock: Clock | None = None,
        recorder: Recorder | None = None,
        burst_replicas: int = BURST_REPLICAS,
    ) -> None:
        self.client = client
        self.rs_store = rs_store
        self.pod_store = pod_store
        self.queue = queue
        self.clock = clock or Clock()
        self.recorder = recorder or NullRecorder()
        self.burst_replicas = burst_replicas
        self.expectations = Expectations(self.clock)
        self.pod_index = PodIndex(pod_store)

    # ---- informer handlers: cheap, synchronous, only enqueue and count ----

    def on_rs_add(self, rs: ReplicaSet) -> None:
        self.queue.add(key_of(rs))

    def on_rs_update(self, old: ReplicaSet, new: ReplicaSet) -> None:
        self.queue.add(key_of(new))

    def on_rs_delete(self, rs: ReplicaSet) -> None:
        key = key_of(rs)
        self.expectations.delete(key)
        self.queue.add(key)

    def _resolve_controller_ref(self, pod: Pod) -> ReplicaSet | None:
        return resolve_controller_ref(
            pod.metadata.namespace, controller_ref(pod.metadata), KIND, self.rs_store
        )

    def _matching_replica_sets(self, pod: Pod) -> list[ReplicaSet]:
        return [
            rs
            for rs in self.rs_store.list()
            if rs.metadata.namespace == pod.metadata.namespace
            and not selector_is_empty(rs.spec.selector)
            and selector_matches(rs.spec.selector, pod.metadata.labels)
        ]

    def on_pod_add(self, pod: Pod) -> None:
        if is_terminating(pod):
            # Seen for the first time already terminating (e.g. after a restart): this is not
            # the creation we may be waiting for.
            self.on_pod_delete(pod)
            return
        rs = self._resolve_controller_ref(pod)
        if rs is not None:
            rs_key = key_of(rs)
            self.expectations.creation_observed(rs_key)
            self.queue.add(rs_key)
            return
        if controller_ref(pod.metadata) is None:
            for match in self._matching_replica_sets(pod):
                self.queue.add(key_of(match))

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        if old.metadata.resourceVersion == new.metadata.resourceVersion:
            return  # a resync: nothing changed
        if is_terminating(new):
            self.on_pod_delete(new)
            if dict(old.metadata.labels) != dict(new.metadata.labels):
                self.on_pod_delete(old)
            return
        old_ref, new_ref = controller_ref(old.metadata), controller_ref(new.metadata)
        if old_ref is not None and (new_ref is None or new_ref.uid != old_ref.uid):
            old_rs = self._resolve_controller_ref(old)
            if old_rs is not None:
                self.queue.add(key_of(old_rs))
        rs = self._resolve_controller_ref(new)
        if rs is not None:
            rs_key = key_of(rs)
            self.queue.add(rs_key)
            min_ready = rs.spec.minReadySeconds
            if min_ready > 0 and not is_pod_ready(old) and is_pod_ready(new):
                # Available only after minReadySeconds: look again then.
                self.queue.add_after(rs_key, float(min_ready) + 1.0)
            return
        if new_ref is None:
            for match in self._matching_replica_sets(new):
                self.queue.add(key_of(match))

    def on_pod_delete(self, pod: Pod) -> None:
        rs = self._resolve_controller_ref(pod)
        if rs is None:
            return
        rs_key = key_of(rs)
        self.expectations.deletion_observed(rs_key, key_of(pod))
        self.queue.add(rs_key)

    # ---- the reconcile ----

    async def sync(self, key: str) -> None:
        rs = self.rs_store.get(key)
        if rs is None:
            self.expectations.delete(key)
            return
        needs_sync = self.expectations.satisfied(key)
        # Ours, plus orphans we might adopt: the only pods a sync can care about.
        all_pods = self.pod_index.claim_candidates(rs)
        active = [p for p in all_pods if is_pod_active(p)]
        owned = await self._claim_pods(rs, active)

        manage_error: BaseException | None = None
        if needs_sync and not is_terminating(rs):
            manage_error = await self._manage_replicas(rs, owned, all_pods)

        await self._update_status(rs, owned, manage_error)
        if manage_error is not None:
            # Its traceback holds this frame: a name for it here would make a cycle.
            try:
                raise manage_error
            finally:
                del manage_error
        min_ready = rs.spec.minReadySeconds
        if min_ready > 0:
            now = self.clock.now()
            ready = sum(1 for p in owned if is_pod_ready(p))
            available = sum(1 for p in owned if is_pod_available(p, min_ready, now))
            if ready != available:
                self.queue.add_after(key, float(min_ready))

    async def _claim_pods(self, rs: ReplicaSet, pods: list[Pod]) -> list[Pod]:
        """Pods `rs` controls after adopting matching orphans and releasing non-matching ones."""
        selector = rs.spec.selector
        if selector_is_empty(selector):
            return []
        manager = ControllerRefManager(rs, API_VERSION, KIND, self.client.replica_sets)
        return await manager.claim(
            pods, lambda p: selector_matches(selector, p.metadata.labels), self.client.pods
        )

    async def _manage_replicas(
        self, rs: ReplicaSet, owned: list[Pod], related: list[Pod]
    ) -> BaseException | None:
        key = key_of(rs)
        diff = len(owned) - desired_replicas(rs)
        if diff < 0:
            count = min(-diff, self.burst_replicas)
            self.expectations.expect_creations(key, count)
            successes, error = await slow_start_batch(
                count, SLOW_START_INITIAL_BATCH, lambda: self._create_pod(rs)
            )
            for _ in range(count - successes):
                # Creations that failed or were never tried will never be observed.
                self.expectations.creation_observed(key)
            if error is not None:
                await self._event(rs, "Warning", "FailedCreate", f"Error creating: {error}")
            return error
        if diff > 0:
            count = min(diff, self.burst_replicas)
            victims = pods_to_delete(owned, related, count)
            self.expectations.expect_deletions(key, [key_of(p) for p in victims])
            results = await asyncio.gather(
                *(self._delete_pod(rs, p) for p in victims), return_exceptions=True
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                await self._event(rs, "Warning", "FailedDelete", f"Error deleting: {errors[0]}")
                return errors[0]
        return None

    async def _create_pod(self, rs: ReplicaSet) -> None:
        for attempt in range(3):
            try:
                created = await self.client.pods.create(pod_from_template(rs))
            except AlreadyExistsError:
                if attempt == 2:
                    raise
                continue  # every generated name the apiserver tried was taken: try again
            except (DeadlineExceededError, UnavailableError) as exc:
                if is_unsent(exc):
                    raise
                # The create may have landed (its answer was lost, and so were those of the
                # client's resends, which would have recognised it). As Kubernetes' ReplicaSet
                # controller does on a timeout, count it as made: the informer observes it,
                # or, if it never landed, the expectation expires and a later sync creates the
                # pod. Counting it failed would let the next sync create a second pod for the
                # same replica.
                log.info("creating a pod for %s: %s; expecting it to appear", key_of(rs), exc)
                return
            await self._event(
                rs, "Normal", "SuccessfulCreate", f"Created pod: {created.metadata.name}"
            )
            return

    async def _delete_pod(self, rs: ReplicaSet, pod: Pod) -> None:
        try:
            await self.client.pods.delete(
                pod.metadata.name, pod.metadata.namespace, uid=pod.metadata.uid
            )
        except TinykubeError as exc:
            # The deletion will not be observed through the watch as ours.
            self.expectations.deletion_observed(key_of(rs), key_of(pod))
            if isinstance(exc, NotFoundError):
                return
            raise
        await self._event(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {pod.metadata.name}")

    async def _event(self, rs: ReplicaSet, type_: str, reason: str, message: str) -> None:
        try:
            await self.recorder.record(rs, type_, reason, message)
        except Exception:  # events are best effort: never fail a sync over one
            log.debug("could not record event %s for %s", reason, key_of(rs), exc_info=True)

    def calculate_status(
        self, rs: ReplicaSet, owned: list[Pod], manage_error: BaseException | None
    ) -> replicaset_pb2.ReplicaSetStatus:
        now: datetime = self.clock.now()
        template_labels = dict(rs.spec.template.metadata.labels)
        status = replicaset_pb2.ReplicaSetStatus()
        status.replicas = len(owned)
        status.fullyLabeledReplicas = sum(
            1
            for p in owned
            if all(p.metadata.labels.get(k) == v for k, v in template_labels.items())
        )
        status.readyReplicas = sum(1 for p in owned if is_pod_ready(p))
        status.availableReplicas = sum(
            1 for p in owned if is_pod_available(p, rs.spec.minReadySeconds, now)
        )
        status.observedGeneration = rs.metadata.generation
        old_failure = next((c for c in rs.status.conditions if c.type == "ReplicaFailure"), None)
        for cond in rs.status.conditions:
            if cond.type != "ReplicaFailure":
                status.conditions.append(cond)
        if manage_error is not None:
            want = len(owned) < desired_replicas(rs)
            reason = "FailedCreate" if want else "FailedDelete"
            cond = replicaset_pb2.ReplicaSetCondition(
                type="ReplicaFailure", status="True", reason=reason, message=str(manage_error)
            )
            if old_failure is not None and old_failure.reason == reason:
                cond.lastTransitionTime.CopyFrom(old_failure.lastTransitionTime)
            else:
                cond.lastTransitionTime.CopyFrom(datetime_to_ts(now))
            status.conditions.append(cond)
        return status

    async def _update_status(
        self, rs: ReplicaSet, owned: list[Pod], manage_error: BaseException | None
    ) -> None:
        status = self.calculate_status(rs, owned, manage_error)
        if status == rs.status:
            return
        current = rs
        for attempt in range(2):
            updated = ReplicaSet()
            updated.CopyFrom(current)
            updated.status.CopyFrom(status)
            try:
                await self.client.replica_sets.update_status(updated)
                return
            except NotFoundError:
                return
            except ConflictError:
                if attempt == 1:
                    raise
                try:
                    current = await self.client.replica_sets.get(
                        rs.metadata.name, rs.metadata.namespace
                    )
                except NotFoundError:
                    return  # deleted meanwhile (its finalizers just went): nothing to report
                status.observedGeneration = min(
                    status.observedGeneration, current.metadata.generation
                )
