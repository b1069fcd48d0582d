"""The scheduler process: gRPC server, leader election, informers feeding the scheduling loop.

`SchedulerApp.start()` serves health, reflection and `tinykube.v1.Scheduler` at once (a standby
replica is healthy too), then campaigns for the Lease kube-system/tinykube-scheduler (unless
leader election is disabled). While leading it runs a pod informer (every pod: pending pods
with our schedulerName are queued, assigned ones are counted in the cache), a node informer and
Service and ReplicaSet informers (PodTopologySpread's default selectors) and a
PodDisruptionBudget informer (for preemption), waits for them to sync, and runs the serial
scheduling loop. Losing the lease ends the process's work (`done` completes with an error), as
kube-scheduler exits on lost leadership: a fresh process starts with a fresh cache, so no state
of an old term can leak into a new one. Preemption marks each victim DisruptionTarget
(PreemptionByScheduler) before deleting it with its grace period.

Unschedulable pods get condition PodScheduled=False/Unschedulable with the message (written
only when it changes) and a FailedScheduling Event (the recorder counts repeats); bound pods
get a Scheduled Event; Events are written in the background (EventRecorder.emit: bounded, drops
counted in scheduler_events_dropped_total), never on the scheduling path. Binds go through a
`BindBatcher` (Pods/BindBatch). One event loop; informer handlers, the cycle and RPCs
interleave only at awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from scheduler.binder import BindBatcher
from scheduler.config import SchedulerConfig, load_config
from scheduler.core import Profile
from scheduler.cycle import Reporter, Scheduler
from scheduler.framework import Handle
from scheduler.metrics import Metrics
from scheduler.plugins.defaultpreemption import (
    DISRUPTION_TARGET,
    PREEMPTION_REASON,
    disruption_message,
)
from scheduler.podinfo import PodInfo
from scheduler.service import SchedulerService
from scheduler.settings import Settings
from tinykube.client import BindItem, Client
from tinykube.clock import Clock
from tinykube.errors import ConflictError, NotFoundError, TinykubeError
from tinykube.events import NORMAL, WARNING, EventRecorder
from tinykube.informer import Informer, without_managed_fields
from tinykube.leaderelection import LeaderElector
from tinykube.meta import timestamp
from tinykube.serving import GrpcServer
from tinykube.v1 import (
    namespace_pb2,
    node_pb2,
    pod_pb2,
    replicaset_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
    service_pb2,
)
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

log = logging.getLogger(__name__)

SERVICE_NAME = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name
COMPONENT = "tinykube-scheduler"


class SchedulerApp:
    def __init__(
        self,
        settings: Settings,
        config: SchedulerConfig | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.config = config or load_config(settings.config_file)
        self.clock = clock or Clock()
        self.metrics = metrics or Metrics()
        self.client = Client(
            settings.apiserver,
            timeout=settings.request_timeout,
            credentials=settings.security.credentials(),
        )
        # client-go's broadcaster: a queue of at most 1,000 events (the rest dropped, counted)
        # written one at a time, so a burst of binds never has Event writes competing with it
        # at the apiserver; they catch up when scheduling quiets down
        self.recorder = EventRecorder(
            self.client, COMPONENT, settings.identity, max_concurrency=1, max_pending=1000
        )
        self.metrics.track_events(lambda: self.recorder.dropped)
        self.binder = BindBatcher(
            self.client.bind_batch,
            lambda i: self.client.bind(i.namespace, i.name, i.node_name, uid=i.uid),
            on_batch=self.metrics.observe_bind_batch,
        )
        self.server = GrpcServer(settings.listen, [SERVICE_NAME], tls=settings.security.serving())
        self.scheduler: Scheduler | None = None
        self.elector: LeaderElector | None = None
        self.pod_informer: Informer[pod_pb2.Pod] | None = None
        self._main: asyncio.Task[None] | None = None
        self.port = 0

    # ----- lifecycle --------------------------------------------------------------------
    async def start(self) -> int:
        service = SchedulerService(lambda: self.scheduler, self._leader)
        self.server.add(lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(service, s))
        self.port = await self.server.start()
        self.metrics.serve(self.settings.metrics_port, host=self.settings.bind_address)
        self._main = asyncio.create_task(self._run(), name="scheduler-main")
        log.info("scheduler serving on port %d (apiserver %s)", self.port, self.settings.apiserver)
        return self.port

    @property
    def done(self) -> asyncio.Task[None]:
        assert self._main is not None
        return self._main

    async def stop(self) -> None:
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._main
        await self.server.stop(1.0)
        await self.binder.close()
        await self.recorder.close()
        await self.client.close()

    def _leader(self) -> str:
        return self.elector.leader_identity if self.elector is not None else ""

    async def _run(self) -> None:
        s = self.settings
        if not s.leader_elect:
            await self._lead()
            return
        self.elector = LeaderElector(
            self.client,
            namespace=s.lease_namespace,
            name=s.lease_name,
            identity=s.identity,
            lease_duration=s.lease_duration,
            renew_deadline=s.renew_deadline,
            retry_period=s.retry_period,
            clock=self.clock,
        )
        await self.elector.run(self._lead)

    # ----- while leading ----------------------------------------------------------------
    async def _lead(self) -> None:
        cfg = self.config
        profile = Profile(cfg.profile, Handle(bind=self._bind))
        sched = Scheduler(
            profile,
            clock=self.clock,
            percentage_of_nodes_to_score=cfg.percentage_of_nodes_to_score,
            initial_backoff=cfg.pod_initial_backoff_seconds,
            max_backoff=cfg.pod_max_backoff_seconds,
            max_binds=self.settings.max_binds,
            reporter=Reporter(
                self._report_unschedulable,
                self._report_scheduled,
                self.metrics.observe_attempt,
                self.metrics.observe_e2e,
                self._preempt,
            ),
        )
        self.metrics.track_queue(sched.queue.lengths)
        # Every informer drops managedFields, as kube-scheduler's pod informer: nothing here
        # reads them, and the only writes of cached objects (_update_status,
        # _mark_disruption_target) are UpdateStatus, which keeps the stored metadata.
        informing: dict[str, Any] = {
            "clock": self.clock,
            "on_handler_error": self._refused,
            "transform": without_managed_fields,
        }
        nodes: Informer[node_pb2.Node] = Informer.for_resource(self.client.nodes, **informing)
        pods: Informer[pod_pb2.Pod] = Informer.for_resource(self.client.pods, **informing)
        # PodTopologySpread's default constraints take their selector from the Services and
        # ReplicaSets that manage a pod, as kube-scheduler's listers
        services: Informer[service_pb2.Service] = Informer.for_resource(
            self.client.services, **informing
        )
        replica_sets: Informer[replicaset_pb2.ReplicaSet] = Informer.for_resource(
            self.client.replica_sets, **informing
        )
        nodes.add_handler(sched.on_node_add, sched.on_node_update, sched.on_node_delete)
        pods.add_handler(sched.on_pod_add, sched.on_pod_update, sched.on_pod_delete)
        services.add_handler(sched.on_service_add, sched.on_service_update, sched.on_service_delete)
        replica_sets.add_handler(
            sched.on_replica_set_add, sched.on_replica_set_update, sched.on_replica_set_delete
        )
        # Preemption prefers victims whose eviction breaks no PodDisruptionBudget.
        pdbs: Informer[pdb_pb2.PodDisruptionBudget] = Informer.for_resource(
            self.client.pod_disruption_budgets, **informing
        )
        profile.handle.pdbs = pdbs.store
        # InterPodAffinity's namespaceSelector matches namespaces by their labels.
        namespaces: Informer[namespace_pb2.Namespace] = Informer.for_resource(
            self.client.namespaces, **informing
        )
        namespaces.add_handler(
            sched.on_namespace_add, sched.on_namespace_update, sched.on_namespace_delete
        )
        self.pod_informer = pods
        informers = (nodes, pods, services, replica_sets, pdbs, namespaces)
        tasks = [inf.start() for inf in informers]
        try:
            await namespaces.wait_synced()
            await nodes.wait_synced()
            await services.wait_synced()
            await replica_sets.wait_synced()
            await pods.wait_synced()
            await pdbs.wait_synced()
            log.info(
                "caches synced: %d nodes, %d pods; scheduling as %r",
                len(nodes.store),
                len(pods.store),
                profile.scheduler_name,
            )
            self.scheduler = sched
            await sched.run()
        finally:
            self.scheduler = None
            for t in tasks:
                t.cancel()
            await sched.cancel_tasks()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ----- the outside world ------------------------------------------------------------
    def _refused(self, obj: Message, exc: Exception) -> None:
        """An object the cache could not take (the informer logged it and kept its store)."""
        kind = type(obj).__name__
        self.metrics.informer_handler_errors.labels(kind).inc()
        self.recorder.emit(
            obj, WARNING, "FailedToCache", f"the scheduler cannot use this {kind}: {exc}"
        )

    async def _bind(self, pod: PodInfo, node: str) -> None:
        # binds ready at the same moment share one Pods/BindBatch RPC; errors are per pod
        await self.binder.bind(BindItem(pod.namespace, pod.name, node, pod.uid))

    async def _report_scheduled(self, pod: PodInfo, node: str) -> None:
        self.recorder.emit(
            pod.pod, NORMAL, "Scheduled", f"Successfully assigned {pod.key} to {node}"
        )

    async def _report_unschedulable(self, pod: PodInfo, message: str) -> None:
        self.recorder.emit(pod.pod, WARNING, "FailedScheduling", message)
        await self._set_unschedulable_condition(pod, message)

    async def _set_unschedulable_condition(self, info: PodInfo, message: str) -> None:
        await self._update_status(info, lambda pod: _set_condition(pod, self.clock, message))

    async def _preempt(self, pod: PodInfo, node: str, victims: list[PodInfo]) -> None:
        """Evict the victims and nominate the node for `pod`, as kube's prepareCandidate: each
        victim first gets the DisruptionTarget condition (PreemptionByScheduler), then is
        deleted with its own grace period (uid precondition: never a namesake)."""
        message = disruption_message(pod.scheduler_name or self.config.profile.scheduler_name)
        for v in victims:
            await self._mark_disruption_target(v, message)
            self.recorder.emit(
                v.pod, NORMAL, "Preempted", f"Preempted by pod {pod.uid} on node {node}"
            )
            spec = v.pod.spec
            grace = (
                spec.terminationGracePeriodSeconds
                if spec.HasField("terminationGracePeriodSeconds")
                else 30
            )
            try:
                await self.client.pods.delete(
                    v.name, v.namespace, grace_period_seconds=grace, uid=v.uid
                )
            except NotFoundError:
                pass
            except TinykubeError as exc:
                log.warning("could not preempt %s: %s", v.key, exc)

        def nominate(p: pod_pb2.Pod) -> bool:
            if p.status.nominatedNodeName == node:
                return False
            p.status.nominatedNodeName = node
            return True

        await self._update_status(pod, nominate)

    async def _mark_disruption_target(self, victim: PodInfo, message: str) -> None:
        """Set DisruptionTarget=True/PreemptionByScheduler on a victim (re-read on conflict);
        a failure is logged and the victim deleted all the same, as kube-scheduler does."""
        for _ in range(5):
            current: Any = None
            if self.pod_informer is not None:
                current = self.pod_informer.store.get(victim.key)
            try:
                if current is None or current.metadata.uid != victim.uid:
                    current = await self.client.pods.get(victim.name, victim.namespace)
                if current.metadata.uid != victim.uid:
                    return
                pod = pod_pb2.Pod()
                pod.CopyFrom(current)  # informer objects are shared: never mutate them
                if not _set_disruption_target(pod, self.clock, message):
                    return
                await self.client.pods.update_status(pod)
                return
            except ConflictError:
                current = None
                continue
            except NotFoundError:
                return
            except TinykubeError as exc:
                log.warning("could not mark %s as a disruption target: %s", victim.key, exc)
                return

    async def _update_status(self, info: PodInfo, mutate: Callable[[pod_pb2.Pod], bool]) -> None:
        """Apply `mutate` to the pending pod's status and write it, re-reading on conflict."""
        current: Any = None
        if self.pod_informer is not None:
            current = self.pod_informer.store.get(info.key)
        for _ in range(5):
            if current is None:
                try:
                    current = await self.client.pods.get(info.name, info.namespace)
                except NotFoundError:
                    return
            if current.spec.nodeName or current.metadata.uid != info.uid:
                return  # bound meanwhile, or a different pod with the same name
            pod = pod_pb2.Pod()
            pod.CopyFrom(current)  # informer objects are shared: never mutate them
            if not mutate(pod):
                return
            try:
                await self.client.pods.update_status(pod)
                return
            except ConflictError:
                current = None  # re-read and try again
            except NotFoundError:
                return
            except TinykubeError as exc:
                log.warning("could not update status of %s: %s", info.key, exc)
                return


def _set_disruption_target(pod: pod_pb2.Pod, clock: Clock, message: str) -> bool:
    """Add or update DisruptionTarget=True/PreemptionByScheduler; False when already so."""
    for cond in pod.status.conditions:
        if cond.type == DISRUPTION_TARGET:
            if (cond.status, cond.reason, cond.message) == ("True", PREEMPTION_REASON, message):
                return False
            if cond.status != "True":
                cond.lastTransitionTime.CopyFrom(timestamp(clock.now()))
            cond.status, cond.reason, cond.message = "True", PREEMPTION_REASON, message
            return True
    pod.status.conditions.add(
        type=DISRUPTION_TARGET,
        status="True",
        reason=PREEMPTION_REASON,
        message=message,
        lastTransitionTime=timestamp(clock.now()),
    )
    return True


def _set_condition(pod: pod_pb2.Pod, clock: Clock, message: str) -> bool:
    """Set PodScheduled=False/Unschedulable; False when it already says exactly that."""
    now = timestamp(clock.now())
    for cond in pod.status.conditions:
        if cond.type == "PodScheduled":
            if (
                cond.status == "False"
                and cond.reason == "Unschedulable"
                and cond.message == message
            ):
                return False
            if cond.status != "False":
                cond.lastTransitionTime.CopyFrom(now)
            cond.status, cond.reason, cond.message = "False", "Unschedulable", message
            cond.lastProbeTime.CopyFrom(now)
            return True
    pod.status.conditions.add(
        type="PodScheduled",
        status="False",
        reason="Unschedulable",
        message=message,
        lastProbeTime=now,
        lastTransitionTime=now,
    )
    if not pod.status.phase:
        pod.status.phase = "Pending"
    return True
