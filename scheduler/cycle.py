"""The scheduler loop: informer events in, a serial scheduling cycle, concurrent binding cycles.

`Scheduler` owns the cache, the queue and the algorithm. Informer handlers (`on_pod_*`,
`on_node_*`) keep the cache and queue current. `run` pops one pod at a time and runs its
scheduling cycle synchronously (PreFilter..Score, Reserve, Permit); the pod is then assumed in
the cache and its binding cycle (PreBind, Bind, PostBind) runs as a separate task, at most
`max_binds` at once, so the next pod's cycle starts while earlier binds are in flight. A failed
bind un-reserves, forgets the assumption and requeues with backoff; a bind that failed because
the pod is already bound (ALREADY_EXISTS) is not retried.

The outside world is reached only through the `Reporter` callbacks (status updates, events,
metrics) and the profile's Bind plugin, so the loop runs in-process with fakes in tests.
Single event loop; no locks needed because handlers and the cycle never interleave mid-step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from scheduler.cache import EventKind, SchedulerCache
from scheduler.core import Algorithm, Profile, ScheduleResult
from scheduler.framework import Code, CycleState, NamespaceObject, Status
from scheduler.plugins.defaultbinder import bind_already_exists
from scheduler.plugins.defaultpreemption import victims
from scheduler.podinfo import PodInfo
from scheduler.queue import QueuedPod, SchedulingQueue, ShutDown
from scheduler.workloads import Workloads
from tinykube.clock import Clock
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2, replicaset_pb2, service_pb2

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


async def _noop_unschedulable(pod: PodInfo, message: str) -> None:
    return None


async def _noop_scheduled(pod: PodInfo, node: str) -> None:
    return None


def _noop_result(result: str, seconds: float) -> None:
    return None


def _noop_e2e(seconds: float) -> None:
    return None


async def _noop_preempt(pod: PodInfo, node: str, victims: list[PodInfo]) -> None:
    return None


class _Named(Protocol):
    """An object with Kubernetes metadata (the Namespace informer's objects)."""

    @property
    def metadata(self) -> meta_pb2.ObjectMeta: ...


@dataclass
class Reporter:
    """Side effects of a cycle, injected so the core stays testable."""

    unschedulable: Callable[[PodInfo, str], Awaitable[None]] = _noop_unschedulable
    scheduled: Callable[[PodInfo, str], Awaitable[None]] = _noop_scheduled
    attempt: Callable[[str, float], None] = _noop_result  # result, attempt seconds
    e2e: Callable[[float], None] = _noop_e2e  # first queued -> bound, seconds
    # delete the victims and set the preemptor's status.nominatedNodeName
    preempt: Callable[[PodInfo, str, list[PodInfo]], Awaitable[None]] = _noop_preempt


def _labels_differ(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    # a protobuf map's == walks both through Python's Mapping protocol; dict() is C
    if len(a) != len(b):
        return True
    return bool(len(a)) and dict(a) != dict(b)


class Scheduler:
    def __init__(
        self,
        profile: Profile,
        *,
        clock: Clock | None = None,
        percentage_of_nodes_to_score: int = 0,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_binds: int = 32,
        assumed_ttl: float = 30.0,
        reporter: Reporter | None = None,
    ) -> None:
        self.clock = clock or Clock()
        self.profile = profile
        self.cache = SchedulerCache(self.clock, assumed_ttl)
        self.queue = SchedulingQueue(
            self.clock,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            plugin_events=profile.plugins_for_events(),
            plugin_hints=profile.plugins_for_hints(),
            pre_enqueue=profile.pre_enqueue,
        )
        profile.handle.cache = self.cache  # for PostFilter (preemption) and pod counts
        self.workloads = Workloads()
        profile.handle.workloads = self.workloads  # PodTopologySpread's default selectors
        self.algorithm = Algorithm(
            self.cache, profile, percentage_of_nodes_to_score=percentage_of_nodes_to_score
        )
        self.reporter = reporter or Reporter()
        self._bind_slots = asyncio.Semaphore(max_binds)
        self._tasks: set[asyncio.Task[None]] = set()
        self.binding: dict[str, str] = {}  # pod key -> node, binds in flight
        self._last_cleanup = self.clock.monotonic()

    # ----- informer handlers ------------------------------------------------------------
    def _responsible(self, pod: pod_pb2.Pod) -> bool:
        name = pod.spec.schedulerName or "tinykube"
        return name == self.profile.scheduler_name

    def on_pod_add(self, pod: pod_pb2.Pod) -> None:
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        if pod.spec.nodeName:
            self.queue.delete(key)
            if pod.status.phase in TERMINAL_PHASES:
                gone = self.cache.pods.get(key)
                if gone is not None and self.cache.remove_pod(key):
                    self.queue.move_on_event(EventKind.POD_DELETE, old=gone.info)
            else:
                cached = self.cache.pods.get(key)
                # the PodState is updated in place: keep what it held, for the hints
                before = cached.info if cached is not None else None
                was_placed = cached is not None and not cached.assumed
                confirmed = self.cache.confirm(key, pod.metadata.uid, pod.spec.nodeName)
                relabelled = (
                    confirmed
                    and cached is not None
                    and _labels_differ(cached.info.pod.metadata.labels, pod.metadata.labels)
                )
                if (
                    not confirmed
                    or relabelled
                    or (
                        pod.metadata.HasField("deletionTimestamp")
                        and not self.cache.pods[key].info.terminating
                    )
                ):
                    # a pod's resources and ports are immutable once bound, so the confirmation
                    # of our own bind and later status updates (the kubelet's) need no
                    # re-parsing; only new labels (the pod counts of spreading and affinity) or
                    # a graceful deletion (preemption must know) refresh the cached pod
                    self.cache.add_pod(PodInfo.from_pod(pod))
                else:
                    self.cache.keep_current(key, pod)
                if not was_placed:
                    # kube's AssignedPodAdd: a pod newly seen bound, our own binds included
                    self.queue.move_on_event(EventKind.POD_ADD, new=self.cache.pods[key].info)
                elif relabelled:
                    self.queue.move_on_event(
                        EventKind.POD_LABEL, old=before, new=self.cache.pods[key].info
                    )
            return
        if pod.metadata.HasField("deletionTimestamp"):
            self.queue.delete(key)
            self.cache.clear_nomination(key)
            return
        if not self._responsible(pod) or self.cache.is_assumed(key):
            return
        info = PodInfo.from_pod(pod)
        if pod.status.nominatedNodeName:
            self.cache.nominate(info, pod.status.nominatedNodeName)
        else:
            self.cache.clear_nomination(key)
        self.queue.update(info)

    def on_pod_update(self, old: pod_pb2.Pod, new: pod_pb2.Pod) -> None:
        self.on_pod_add(new)

    def on_pod_delete(self, pod: pod_pb2.Pod) -> None:
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        self.queue.delete(key)
        self.algorithm.forget_attempt(key)
        gone = self.cache.pods.get(key)
        if gone is not None and self.cache.remove_pod(key):
            self.queue.move_on_event(EventKind.POD_DELETE, old=gone.info)

    def on_service_add(self, svc: service_pb2.Service) -> None:
        self.workloads.set_service(svc)

    def on_service_update(self, old: service_pb2.Service, new: service_pb2.Service) -> None:
        self.workloads.set_service(new)

    def on_service_delete(self, svc: service_pb2.Service) -> None:
        self.workloads.remove_service(svc)

    def on_replica_set_add(self, rs: replicaset_pb2.ReplicaSet) -> None:
        self.workloads.set_replica_set(rs)

    def on_replica_set_update(
        self, old: replicaset_pb2.ReplicaSet, new: replicaset_pb2.ReplicaSet
    ) -> None:
        self.workloads.set_replica_set(new)

    def on_replica_set_delete(self, rs: replicaset_pb2.ReplicaSet) -> None:
        self.workloads.remove_replica_set(rs)

    def on_namespace_add(self, ns: _Named) -> None:
        """A namespace's labels, for InterPodAffinity's namespaceSelector; a change of them is
        a NamespaceLabelChange (a new namespace has no pods yet: nothing to move)."""
        name = ns.metadata.name
        labels = dict(ns.metadata.labels)
        before = self.cache.namespaces.get(name)
        self.cache.namespaces[name] = labels
        if before is not None and before != labels:
            self.queue.move_on_event(
                EventKind.NAMESPACE_LABEL,
                old=NamespaceObject(name, before),
                new=NamespaceObject(name, labels),
            )

    def on_namespace_update(self, old: _Named, new: _Named) -> None:
        self.on_namespace_add(new)

    def on_namespace_delete(self, ns: _Named) -> None:
        # its pods were deleted first (each an AssignedPodDelete); nothing else to tell
        self.cache.namespaces.pop(ns.metadata.name, None)

    def on_node_add(self, node: node_pb2.Node) -> None:
        nodes = self.cache.nodes
        slot = nodes.index.get(node.metadata.name)
        before = nodes.nodes[slot] if slot is not None else None
        for ev in sorted(self.cache.add_node(node), key=lambda e: e.value):
            self.queue.move_on_event(ev, old=before, new=node)

    def on_node_update(self, old: node_pb2.Node, new: node_pb2.Node) -> None:
        self.on_node_add(new)

    def on_node_delete(self, node: node_pb2.Node) -> None:
        nodes = self.cache.nodes
        slot = nodes.index.get(node.metadata.name)
        if slot is None:
            return
        before = nodes.nodes[slot]
        self.cache.remove_node(node.metadata.name)
        # fewer topology domains can lower a spreading minimum (kube's Node/Delete)
        self.queue.move_on_event(EventKind.NODE_DELETE, old=before)

    # ----- the loop ---------------------------------------------------------------------
    async def run(self) -> None:
        flusher = asyncio.create_task(self.queue.run_flusher())
        try:
            while True:
                try:
                    qp = await self.queue.pop()
                except ShutDown:
                    return
                await self.schedule_one(qp)
                # pop and a free bind slot do not suspend: yield so informer events, binds
                # and RPCs are not starved while the active queue is long
                await asyncio.sleep(0)
                now = self.clock.monotonic()
                if now - self._last_cleanup >= 1.0:
                    self._last_cleanup = now
                    self.cache.cleanup_expired()
        finally:
            flusher.cancel()
            self.queue.close()

    async def schedule_one(self, qp: QueuedPod) -> ScheduleResult:
        pod = qp.info
        start = self.clock.monotonic()
        try:
            result = self.algorithm.schedule(pod)
        except Exception:
            log.exception("scheduling %s failed", pod.key)
            self.queue.add_backoff(qp)
            self.reporter.attempt("error", self.clock.monotonic() - start)
            return ScheduleResult(None, Status.error("internal error"))
        if result.node is None:
            if result.status.code == Code.ERROR:
                self.queue.add_backoff(qp)
                self.reporter.attempt("error", self.clock.monotonic() - start)
            else:
                self.queue.add_unschedulable(qp, result.unschedulable_plugins)
                self.reporter.attempt("unschedulable", self.clock.monotonic() - start)
                self._spawn(self.reporter.unschedulable(pod, result.message))
                if result.nominated_node is not None:
                    self.cache.nominate(pod, result.nominated_node)
                    chosen = victims(result.state)
                    log.info(
                        "preempting %s on %s for %s",
                        ", ".join(v.key for v in chosen),
                        result.nominated_node,
                        pod.key,
                    )
                    self._spawn(self.reporter.preempt(pod, result.nominated_node, chosen))
            return result
        node = result.node
        state = result.state
        st = self._reserve(state, pod, node)
        if st.ok:
            for p in self.profile.permits:
                st = p.permit(state, pod, node)
                if not st.ok:
                    break
        if not st.ok:
            self._unreserve(state, pod, node)
            self.queue.add_backoff(qp)
            self.reporter.attempt("error", self.clock.monotonic() - start)
            return result
        self.cache.assume(pod, node)
        self.binding[pod.key] = node
        await self._bind_slots.acquire()
        self._spawn(self._binding_cycle(qp, node, state, start))
        return result

    def _reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for p in self.profile.reservers:
            st: Status = p.reserve(state, pod, node)
            if not st.ok:
                return st
        return Status()

    def _unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        for p in reversed(self.profile.reservers):
            p.unreserve(state, pod, node)

    async def _binding_cycle(
        self, qp: QueuedPod, node: str, state: CycleState, start: float
    ) -> None:
        pod = qp.info
        try:
            st = Status()
            for p in self.profile.pre_binds:
                st = await p.pre_bind(state, pod, node)
                if not st.ok:
                    break
            if st.ok:
                st = Status(Code.SKIP)
                for p in self.profile.binders:
                    st = await p.bind(state, pod, node)
                    if st.code != Code.SKIP:
                        break
            if not st.ok:
                self._unreserve(state, pod, node)
                self.cache.forget(pod.key)
                if bind_already_exists(state):
                    # someone else bound it: the informer will tell us where; never retry
                    self.queue.done(pod.key)
                    self.reporter.attempt("error", self.clock.monotonic() - start)
                else:
                    log.warning("binding %s to %s failed: %s", pod.key, node, st.message())
                    self.queue.add_backoff(qp)
                    self.reporter.attempt("error", self.clock.monotonic() - start)
                return
            self.cache.finish_binding(pod.key)
            self.queue.done(pod.key)
            for p in self.profile.post_binds:
                p.post_bind(state, pod, node)
            now = self.clock.monotonic()
            self.reporter.attempt("scheduled", now - start)
            self.reporter.e2e(now - qp.initial)
            await self.reporter.scheduled(pod, node)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("binding cycle of %s failed", pod.key)
            self.cache.forget(pod.key)
            self.queue.add_backoff(qp)
        finally:
            self.binding.pop(pod.key, None)
            self._bind_slots.release()

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def wrap() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task failed")

        task = asyncio.create_task(wrap())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for in-flight binds and reports (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel_tasks(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
