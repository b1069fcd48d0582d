"""The deployment controller: rolls Deployments out through one ReplicaSet per pod template.

Modelled on kube-controller-manager's pkg/controller/deployment (the arithmetic is in
controller/deploymentutil.py). Informer handlers only enqueue Deployment keys; `sync(key)` is
level-triggered: it re-reads the caches, claims the ReplicaSets the selector matches (adopts
orphans, releases ones that no longer match), then, as Kubernetes' syncDeployment:

- paused, or resized (a ReplicaSet's desired-replicas annotation differs from spec.replicas):
  only scale, proportionally across the active ReplicaSets, and write status;
- RollingUpdate: find or create the new ReplicaSet `<name>-<pod-template-hash>` (a rollback
  re-uses the old ReplicaSet with that template and gives it the next revision), grow it within
  replicas + maxSurge, shrink the old ones (unhealthy pods first) while replicas - maxUnavailable
  stay available; a ReplicaSet status behind its last scale-down counts no more available pods
  than its spec keeps and its pods until they are gone (deploymentutil.available_kept,
  pods_held);
- Recreate: scale every old ReplicaSet to 0, wait until none of their pods runs, then create
  the new one at full size;
- once complete, delete old ReplicaSets beyond revisionHistoryLimit; write status with the
  Available and Progressing conditions, and look again when the progress deadline could pass.

Writes go through the API one at a time (each later step uses the object the previous write
returned); a lost race raises ConflictError and the worker requeues the key. The work queue
guarantees one sync per key at a time; many keys sync concurrently on one event loop.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime
from typing import Protocol

from controller import controllerref
from controller import deploymentutil as du
from controller.api import NullRecorder, PodIndex, Queue, Recorder, Store
from controller.controllerref import ControllerRefManager
from controller.deploymentutil import Deployment, ReplicaSet
from controller.util import (
    controller_ref,
    is_terminating,
    key_of,
    resolve_controller_ref,
    selector_is_empty,
    selector_matches,
    ts_to_datetime,
)
from tinykube.clock import Clock
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError, TinykubeError
from tinykube.protocols import StatusResourceAPI
from tinykube.v1 import deployment_pb2, meta_pb2, pod_pb2

log = logging.getLogger(__name__)

KIND = "Deployment"
API_VERSION = "apps/v1"
Pod = pod_pb2.Pod


class DeploymentClientAPI(Protocol):
    @property
    def deployments(self) -> StatusResourceAPI[Deployment]: ...

    @property
    def replica_sets(self) -> StatusResourceAPI[ReplicaSet]: ...


def new_controller_ref(d: Deployment) -> meta_pb2.OwnerReference:
    return controllerref.new_controller_ref(d, API_VERSION, KIND)


def _copy(obj: ReplicaSet) -> ReplicaSet:
    out = ReplicaSet()
    out.CopyFrom(obj)
    return out


def new_replica_set(d: Deployment, template_hash: str, replicas: int) -> ReplicaSet:
    """The ReplicaSet for the Deployment's current template, before its annotations."""
    rs = ReplicaSet(apiVersion=API_VERSION, kind="ReplicaSet")
    rs.metadata.name = f"{d.metadata.name}-{template_hash}"
    rs.metadata.namespace = d.metadata.namespace
    rs.metadata.ownerReferences.append(new_controller_ref(d))
    rs.spec.replicas = replicas
    rs.spec.minReadySeconds = d.spec.minReadySeconds
    rs.spec.template.CopyFrom(d.spec.template)
    rs.spec.template.metadata.labels[du.POD_TEMPLATE_HASH_LABEL] = template_hash
    rs.metadata.labels.update(rs.spec.template.metadata.labels)
    rs.spec.selector.CopyFrom(d.spec.selector)
    rs.spec.selector.matchLabels[du.POD_TEMPLATE_HASH_LABEL] = template_hash
    return rs


class DeploymentController:
    name = "deployment"

    def __init__(
        self,
        client: DeploymentClientAPI,
        d_store: Store[Deployment],
        rs_store: Store[ReplicaSet],
        pod_store: Store[Pod],
        queue: Queue,
        *,
        clock: Clock | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.client = client
        self.d_store = d_store
        self.rs_store = rs_store
        self.queue = queue
        self.clock = clock or Clock()
        self.recorder = recorder or NullRecorder()
        self.rs_index = PodIndex(rs_store)
        self.pod_index = PodIndex(pod_store)

    # ---- informer handlers: cheap, synchronous, only enqueue ----

    def on_deployment_add(self, d: Deployment) -> None:
        self.queue.add(key_of(d))

    def on_deployment_update(self, old: Deployment, new: Deployment) -> None:
        self.queue.add(key_of(new))

    def on_deployment_delete(self, d: Deployment) -> None:
        self.queue.add(key_of(d))

    def _owner(self, rs: ReplicaSet) -> Deployment | None:
        return resolve_controller_ref(
            rs.metadata.namespace, controller_ref(rs.metadata), KIND, self.d_store
        )

    def _matching(self, rs: ReplicaSet) -> list[Deployment]:
        return [
            d
            for d in self.d_store.list()
            if d.metadata.namespace == rs.metadata.namespace
            and not selector_is_empty(d.spec.selector)
            and selector_matches(d.spec.selector, rs.metadata.labels)
        ]

    def on_rs_add(self, rs: ReplicaSet) -> None:
        d = self._owner(rs)
        if d is not None:
            self.queue.add(key_of(d))
        elif controller_ref(rs.metadata) is None:
            for match in self._matching(rs):
                self.queue.add(key_of(match))

    def on_rs_update(self, old: ReplicaSet, new: ReplicaSet) -> None:
        if old.metadata.resourceVersion == new.metadata.resourceVersion:
            return
        old_ref, new_ref = controller_ref(old.metadata), controller_ref(new.metadata)
        if old_ref is not None and (new_ref is None or new_ref.uid != old_ref.uid):
            previous = self._owner(old)
            if previous is not None:
                self.queue.add(key_of(previous))
        self.on_rs_add(new)

    def on_rs_delete(self, rs: ReplicaSet) -> None:
        d = self._owner(rs)
        if d is not None:
            self.queue.add(key_of(d))

    def on_pod_delete(self, pod: Pod) -> None:
        """A Recreate rollout waits for the old pods to be gone: look again when one goes."""
        rs = resolve_controller_ref(
            pod.metadata.namespace, controller_ref(pod.metadata), "ReplicaSet", self.rs_store
        )
        if rs is None:
            return
        d = self._owner(rs)
        if d is not None and d.spec.strategy.type == du.RECREATE:
            self.queue.add(key_of(d))

    # ---- the reconcile ----

    async def sync(self, key: str) -> None:
        cached = self.d_store.get(key)
        if cached is None:
            return
        d = Deployment()
        d.CopyFrom(cached)
        now = self.clock.now()
        if selector_is_empty(d.spec.selector):
            await self.recorder.record(
                d,
                "Warning",
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            )
            if d.status.observedGeneration < d.metadata.generation:
                d.status.observedGeneration = d.metadata.generation
                await self._update_status(d)
            return
        rss = await self._claim_replica_sets(d)
        if is_terminating(d):
            new_rs, old_rss = await self._new_and_old(d, rss, create=False)
            await self._sync_status(d, [*old_rss, new_rs], new_rs, now)
            return
        d = await self._check_paused_conditions(d, now)
        if d.spec.paused or self._is_scaling_event(d, rss):
            await self._sync_scale(d, rss, now)
            return
        if d.spec.strategy.type == du.RECREATE:
            await self._rollout_recreate(d, rss, now)
        else:
            await self._rollout_rolling(d, rss, now)

    # ---- ReplicaSets: claim, find, create ----

    async def _claim_replica_sets(self, d: Deployment) -> list[ReplicaSet]:
        manager = ControllerRefManager(d, API_VERSION, KIND, self.client.deployments)
        return await manager.claim(
            self.rs_index.claim_candidates(d),
            lambda rs: selector_matches(d.spec.selector, rs.metadata.labels),
            self.client.replica_sets,
        )

    async def _new_and_old(
        self, d: Deployment, rss: list[ReplicaSet], *, create: bool, now: datetime | None = None
    ) -> tuple[ReplicaSet | None, list[ReplicaSet]]:
        """getAllReplicaSetsAndSyncRevision: the new ReplicaSet (created if `create`; its
        revision and annotations brought up to date) and every old one."""
        _, all_old = du.find_old_rss(d, rss)
        new_rs = await self._new_rs(d, rss, all_old, create, now or self.clock.now())
        return new_rs, all_old

    async def _new_rs(
        self,
        d: Deployment,
        rss: list[ReplicaSet],
        old_rss: list[ReplicaSet],
        create: bool,
        now: datetime,
    ) -> ReplicaSet | None:
        existing = du.find_new_rs(d, rss)
        new_revision = str(du.max_revision(old_rss) + 1)
        if existing is not None:
            rs = _copy(existing)
            annotations_changed = du.set_new_rs_annotations(d, rs, new_revision, True)
            if annotations_changed or rs.spec.minReadySeconds != d.spec.minReadySeconds:
                rs.spec.minReadySeconds = d.spec.minReadySeconds
                return await self.client.replica_sets.update(rs)
            needs_update = self._set_revision(
                d, rs.metadata.annotations.get(du.REVISION_ANNOTATION, "")
            )
            if du.get_condition(d.status, du.PROGRESSING) is None:
                du.set_condition(
                    d.status,
                    du.new_condition(
                        du.PROGRESSING,
                        "True",
                        du.FOUND_NEW_RS_REASON,
                        f'Found new replica set "{rs.metadata.name}"',
                        now,
                    ),
                )
                needs_update = True
            if needs_update:
                await self._update_status(d)
            return rs
        if not create:
            return None

        collision = d.status.collisionCount if d.status.HasField("collisionCount") else None
        template_hash = du.compute_hash(d.spec.template, collision)
        rs = new_replica_set(d, template_hash, 0)
        rs.spec.replicas = du.new_rs_new_replicas(d, [*old_rss, rs], rs)
        du.set_new_rs_annotations(d, rs, new_revision, False)
        already_exists = False
        try:
            created = await self.client.replica_sets.create(rs)
        except AlreadyExistsError:
            already_exists = True
            found = self.rs_store.get(f"{d.metadata.namespace}/{rs.metadata.name}")
            if found is None:
                # Not in our cache yet (ours, created by an earlier sync the watch has not
                # brought): no template to compare, so no collision; as Kubernetes, whose
                # lister answers NotFound here, try again on the next sync.
                raise
            ref = controller_ref(found.metadata)
            if (
                ref is not None
                and ref.uid == d.metadata.uid
                and du.equal_ignore_hash(d.spec.template, found.spec.template)
            ):
                created = found
            else:
                # Another template hashed to this name: count the collision, which changes the
                # hash, and try again on the next sync.
                d.status.collisionCount = (collision or 0) + 1
                with contextlib.suppress(ConflictError, NotFoundError):
                    await self._update_status(d)
                log.info(
                    "deployment %s: hash collision on %s; collisionCount now %d",
                    key_of(d),
                    rs.metadata.name,
                    d.status.collisionCount,
                )
                raise
        except TinykubeError as exc:
            msg = f'Failed to create new replica set "{rs.metadata.name}": {exc}'
            if du.has_progress_deadline(d):
                du.set_condition(
                    d.status,
                    du.new_condition(du.PROGRESSING, "False", du.FAILED_RS_CREATE_REASON, msg, now),
                )
                with contextlib.suppress(ConflictError, NotFoundError):
                    await self._update_status(d)
            await self.recorder.record(d, "Warning", du.FAILED_RS_CREATE_REASON, msg)
            raise
        if not already_exists and du.replicas_of(rs) > 0:
            await self.recorder.record(
                d,
                "Normal",
                "ScalingReplicaSet",
                f"Scaled up replica set {created.metadata.name} from 0 to {du.replicas_of(rs)}",
            )
        needs_update = self._set_revision(d, new_revision)
        if not already_exists and du.has_progress_deadline(d):
            du.set_condition(
                d.status,
                du.new_condition(
                    du.PROGRESSING,
                    "True",
                    du.NEW_RS_REASON,
                    f'Created new replica set "{created.metadata.name}"',
                    now,
                ),
            )
            needs_update = True
        if needs_update:
            await self._update_status(d)
        return created

    @staticmethod
    def _set_revision(d: Deployment, revision: str) -> bool:
        if d.metadata.annotations.get(du.REVISION_ANNOTATION) == revision:
            return False
        d.metadata.annotations[du.REVISION_ANNOTATION] = revision
        return True

    async def _update_status(self, d: Deployment) -> None:
        """UpdateStatus (it carries the revision annotation too); `d` takes the stored
        resourceVersion so later writes in this sync do not conflict with our own."""
        updated = await self.client.deployments.update_status(d)
        d.metadata.resourceVersion = updated.metadata.resourceVersion

    # ---- scaling ----

    async def _scale_rs(
        self, d: Deployment, rs: ReplicaSet, new_scale: int
    ) -> tuple[bool, ReplicaSet]:
        """scaleReplicaSet: the size and the desired/max annotations; an Event when the size
        changed. Returns (scaled, the ReplicaSet as stored)."""
        old_scale = du.replicas_of(rs)
        size_changes = old_scale != new_scale
        max_replicas = du.replicas_of(d) + du.max_surge(d)
        if not size_changes and not du.replicas_annotations_need_update(
            rs, du.replicas_of(d), max_replicas
        ):
            return False, rs
        updated = _copy(rs)
        updated.spec.replicas = new_scale
        du.set_replicas_annotations(updated, du.replicas_of(d), max_replicas)
        stored = await self.client.replica_sets.update(updated)
        if size_changes:
            op = "up" if old_scale < new_scale else "down"
            await self.recorder.record(
                d,
                "Normal",
                "ScalingReplicaSet",
                f"Scaled {op} replica set {rs.metadata.name} from {old_scale} to {new_scale}",
            )
        return size_changes, stored

    async def _scale_and_record(
        self, d: Deployment, rs: ReplicaSet, new_scale: int
    ) -> tuple[bool, ReplicaSet]:
        if du.replicas_of(rs) == new_scale:
            return False, rs
        return await self._scale_rs(d, rs, new_scale)

    def _is_scaling_event(self, d: Deployment, rss: list[ReplicaSet]) -> bool:
        """A ReplicaSet that is active was sized for another spec.replicas than now."""
        new_rs = du.find_new_rs(d, rss)
        _, old_rss = du.find_old_rss(d, rss)
        for rs in du.active([*old_rss, new_rs]):
            desired = rs.metadata.annotations.get(du.DESIRED_REPLICAS_ANNOTATION)
            if desired is None:
                continue
            try:
                if int(desired) != du.replicas_of(d):
                    return True
            except ValueError:
                continue
        return False

    async def _scale(
        self, d: Deployment, new_rs: ReplicaSet | None, old_rss: list[ReplicaSet]
    ) -> None:
        """Kubernetes' scale(): one active ReplicaSet takes spec.replicas; a saturated new one
        means the old ones go to 0; otherwise the change is spread proportionally."""
        only = du.find_active_or_latest(new_rs, old_rss)
        if only is not None:
            if du.replicas_of(only) != du.replicas_of(d):
                await self._scale_and_record(d, only, du.replicas_of(d))
            return
        if du.is_saturated(d, new_rs):
            for old in du.active(old_rss):
                await self._scale_and_record(d, old, 0)
            return
        if du.is_rolling_update(d):
            all_rss = du.active([*old_rss, new_rs])
            sizes = du.proportional_sizes(d, all_rss)
            for rs in all_rss:
                # Every one, unchanged sizes too: their replica annotations follow the resize.
                await self._scale_rs(d, rs, sizes[rs.metadata.name])

    async def _sync_scale(self, d: Deployment, rss: list[ReplicaSet], now: datetime) -> None:
        """Kubernetes' sync(): scale only (paused, or resized), then status."""
        new_rs, old_rss = await self._new_and_old(d, rss, create=False, now=now)
        await self._scale(d, new_rs, old_rss)
        if d.spec.paused:
            await self._cleanup(d, old_rss)
        # The status is computed from the caches, as Kubernetes' is from its listers; the
        # ReplicaSet events of the writes above bring the next sync.
        await self._sync_status(d, [*old_rss, new_rs], new_rs, now)

    # ---- paused ----

    async def _check_paused_conditions(self, d: Deployment, now: datetime) -> Deployment:
        if not du.has_progress_deadline(d):
            return d
        cond = du.get_condition(d.status, du.PROGRESSING)
        if cond is not None and cond.reason == du.TIMED_OUT_REASON:
            return d  # a timed-out rollout stays reported as such
        paused_cond = cond is not None and cond.reason == du.PAUSED_REASON
        if d.spec.paused and not paused_cond:
            du.set_condition(
                d.status,
                du.new_condition(
                    du.PROGRESSING, "Unknown", du.PAUSED_REASON, "Deployment is paused", now
                ),
            )
        elif not d.spec.paused and paused_cond:
            du.set_condition(
                d.status,
                du.new_condition(
                    du.PROGRESSING, "Unknown", du.RESUMED_REASON, "Deployment is resumed", now
                ),
            )
        else:
            return d
        await self._update_status(d)
        return d

    # ---- RollingUpdate ----

    async def _rollout_rolling(self, d: Deployment, rss: list[ReplicaSet], now: datetime) -> None:
        new_rs, old_rss = await self._new_and_old(d, rss, create=True, now=now)
        assert new_rs is not None
        scaled_up, new_rs = await self._reconcile_new_rs(d, [*old_rss, new_rs], new_rs)
        if scaled_up:
            await self._sync_rollout_status(d, self._fresh([*old_rss, new_rs]), new_rs, now)
            return
        old_rss = self._fresh(old_rss)
        scaled_down = await self._reconcile_old_rss(
            d, [*old_rss, new_rs], du.active(old_rss), new_rs
        )
        if scaled_down:
            await self._sync_rollout_status(d, self._fresh([*old_rss, new_rs]), new_rs, now)
            return
        if du.deployment_complete(d, d.status):
            await self._cleanup(d, old_rss)
        await self._sync_rollout_status(d, self._fresh([*old_rss, new_rs]), new_rs, now)

    def _fresh(self, rss: list[ReplicaSet]) -> list[ReplicaSet]:
        """The cached version of each ReplicaSet where it is newer than ours: its status moves
        on while we sync."""
        out = []
        for rs in rss:
            cached = self.rs_store.get(key_of(rs))
            if cached is not None and cached.metadata.uid == rs.metadata.uid:
                try:
                    newer = int(cached.metadata.resourceVersion) > int(rs.metadata.resourceVersion)
                except ValueError:
                    newer = False
                out.append(cached if newer else rs)
            else:
                out.append(rs)
        return out

    async def _reconcile_new_rs(
        self, d: Deployment, all_rss: list[ReplicaSet], new_rs: ReplicaSet
    ) -> tuple[bool, ReplicaSet]:
        replicas = du.replicas_of(d)
        if du.replicas_of(new_rs) == replicas:
            return False, new_rs
        if du.replicas_of(new_rs) > replicas:
            return await self._scale_and_record(d, new_rs, replicas)
        count = du.new_rs_new_replicas(d, all_rss, new_rs)
        return await self._scale_and_record(d, new_rs, count)

    async def _reconcile_old_rss(
        self,
        d: Deployment,
        all_rss: list[ReplicaSet],
        old_rss: list[ReplicaSet],
        new_rs: ReplicaSet,
    ) -> bool:
        """Shrink the old ReplicaSets as far as availability allows: first pods that are not
        available anyway (they cost nothing), then available ones down to the minimum."""
        if du.spec_total(old_rss) == 0:
            return False
        all_pods = du.spec_total(all_rss)
        min_available = du.replicas_of(d) - du.max_unavailable(d)
        new_unavailable = du.replicas_of(new_rs) - du.available_kept(new_rs)
        max_scaled_down = all_pods - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        old_rss, cleaned = await self._cleanup_unhealthy(d, old_rss, max_scaled_down)
        scaled = await self._scale_down_old_for_rolling(d, [*old_rss, new_rs], old_rss)
        return cleaned + scaled > 0

    async def _cleanup_unhealthy(
        self, d: Deployment, old_rss: list[ReplicaSet], max_cleanup: int
    ) -> tuple[list[ReplicaSet], int]:
        plan = du.cleanup_unhealthy_plan(old_rss, max_cleanup)
        out: list[ReplicaSet] = []
        total = 0
        for rs in sorted(old_rss, key=du.creation_key):
            target = plan.get(rs.metadata.name)
            if target is None:
                out.append(rs)
                continue
            _, stored = await self._scale_and_record(d, rs, target)
            total += du.replicas_of(rs) - target
            out.append(stored)
        return out, total

    async def _scale_down_old_for_rolling(
        self, d: Deployment, all_rss: list[ReplicaSet], old_rss: list[ReplicaSet]
    ) -> int:
        plan = du.scale_down_old_plan(d, all_rss, old_rss)
        total = 0
        for rs in sorted(old_rss, key=du.creation_key):
            target = plan.get(rs.metadata.name)
            if target is None:
                continue
            await self._scale_and_record(d, rs, target)
            total += du.replicas_of(rs) - target
        return total

    # ---- Recreate ----

    async def _rollout_recreate(self, d: Deployment, rss: list[ReplicaSet], now: datetime) -> None:
        new_rs, old_rss = await self._new_and_old(d, rss, create=False, now=now)
        scaled_down = False
        for rs in du.active(old_rss):
            scaled, _ = await self._scale_and_record(d, rs, 0)
            scaled_down = scaled_down or scaled
        if scaled_down:
            await self._sync_rollout_status(d, [*self._fresh(old_rss), new_rs], new_rs, now)
            return
        if self._old_pods_running(new_rs, old_rss):
            await self._sync_rollout_status(d, [*old_rss, new_rs], new_rs, now)
            return
        if new_rs is None:
            new_rs, old_rss = await self._new_and_old(d, rss, create=True, now=now)
            assert new_rs is not None
        _, new_rs = await self._scale_and_record(d, new_rs, du.replicas_of(d))
        if du.deployment_complete(d, d.status):
            await self._cleanup(d, old_rss)
        await self._sync_rollout_status(d, self._fresh([*old_rss, new_rs]), new_rs, now)

    def _old_pods_running(self, new_rs: ReplicaSet | None, old_rss: list[ReplicaSet]) -> bool:
        if du.actual_total(old_rss) > 0:
            return True
        for rs in old_rss:
            if new_rs is not None and rs.metadata.uid == new_rs.metadata.uid:
                continue
            for pod in self.pod_index.controlled_by(rs.metadata.uid):
                if pod.status.phase not in ("Failed", "Succeeded"):
                    return True
        return False

    # ---- history ----

    async def _cleanup(self, d: Deployment, old_rss: list[ReplicaSet]) -> None:
        """Delete the oldest ReplicaSets beyond revisionHistoryLimit (only empty, settled ones)."""
        if not d.spec.HasField("revisionHistoryLimit"):
            return
        for rs in du.history_to_delete(old_rss, d.spec.revisionHistoryLimit):
            log.info("deployment %s: deleting old replica set %s", key_of(d), rs.metadata.name)
            with contextlib.suppress(NotFoundError):
                await self.client.replica_sets.delete(
                    rs.metadata.name, rs.metadata.namespace, uid=rs.metadata.uid
                )

    # ---- status ----

    def _terminating(self, rss: list[ReplicaSet | None]) -> int:
        return sum(
            1
            for rs in rss
            if rs is not None
            for pod in self.pod_index.controlled_by(rs.metadata.uid)
            if is_terminating(pod) and pod.status.phase not in ("Failed", "Succeeded")
        )

    async def _sync_status(
        self,
        d: Deployment,
        all_rss: list[ReplicaSet | None],
        new_rs: ReplicaSet | None,
        now: datetime,
    ) -> None:
        status = du.calculate_status(all_rss, new_rs, d, now, self._terminating(all_rss))
        if status == d.status:
            return
        d.status.CopyFrom(status)
        await self._update_status(d)

    async def _sync_rollout_status(
        self,
        d: Deployment,
        all_rss: list[ReplicaSet | None] | list[ReplicaSet],
        new_rs: ReplicaSet | None,
        now: datetime,
    ) -> None:
        rss: list[ReplicaSet | None] = list(all_rss)
        status = du.rollout_status(d, rss, new_rs, now, self._terminating(rss))
        if status == d.status:
            self._requeue_stuck(d, status, now)
            return
        d.status.CopyFrom(status)
        await self._update_status(d)

    def _requeue_stuck(
        self, d: Deployment, status: deployment_pb2.DeploymentStatus, now: datetime
    ) -> None:
        """Look again when the progress deadline could pass: no event may come before it."""
        cond = du.get_condition(d.status, du.PROGRESSING)
        if not du.has_progress_deadline(d) or cond is None:
            return
        if du.deployment_complete(d, status) or cond.reason == du.TIMED_OUT_REASON:
            return
        deadline = ts_to_datetime(cond.lastUpdateTime).timestamp() + d.spec.progressDeadlineSeconds
        after = deadline - now.timestamp()
        self.queue.add_after(key_of(d), 1.0 if after < 1.0 else after + 1.0)
