"""Pod workers: one asyncio task per pod drives it to its desired state through the runtime.

`PodManager` receives the pod informer's events (only pods bound to a node this process hosts;
anything else is ignored, so a kubelet never runs another node's pod) and keeps one
`PodWorker` per pod uid. A worker loops: if the pod is being deleted, it stops the containers
(SIGTERM, SIGKILL after the grace period) and then deletes the pod object with grace 0 and a uid
precondition, confirming the deletion as the kubelet does; if the pod vanished from the API
(force-deleted), it kills the containers at once; otherwise it calls `runtime.sync_pod`, turns
the record into a PodStatus and writes it with UpdateStatus when it changed (through
`StatusWriter`: writes ready together share one UpdateStatusBatch RPC; retrying on
conflict with a fresh read), or when someone else changed what it reported (the node lifecycle
controller's Ready=False while the node was out of touch): written again, as the kubelet's status
manager reconciles. Conditions the kubelet does not own (PodScheduled, DisruptionTarget) are
taken from the apiserver's copy on each write, never dropped. It then sleeps until the pod
changes, a probe result changes, the runtime's poll interval passes, or the time the runtime
asked to be synced again at (`PodRecord.retry_at`: a container waiting for its ConfigMap).

With a `ProbeManager` (the process runtime), the worker keeps probers on the running containers
after each sync, reads their (started, ready) into the status, and kills a container whose
liveness or startup probe failed (Event Killing "Container c failed liveness probe, will be
restarted", with the probe's terminationGracePeriodSeconds or the pod's), its exit then being
handled as any exit. Without one (the fake runtime), a running container is ready.

spec.activeDeadlineSeconds (kube's activeDeadlineHandler): once the pod has been active on the
node (since the runtime first synced it, status.startTime) that long, the worker kills its
containers with the pod's grace period and reports phase Failed, reason DeadlineExceeded (an Event
of that reason too); the deadline is also a time the worker wakes at, so a lowered deadline
takes effect without waiting for a poll.

Each worker traces its pod's start (kubelet/podstartup.py): when the kubelet first saw it, the
runtime's stages, the status write that first reports it Running; logged once as kube's
"Observed pod startup duration".

`cleanup_orphans` (after the informer's first sync) kills pods the runtime still knows from a
previous run whose objects are gone.

Concurrency: single event loop; a worker is the only writer of its pod's runtime record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from kubelet.api import KubeletAPI
from kubelet.lifecycle import DEFAULT_GRACE_SECONDS
from kubelet.podstartup import StartupTrace
from kubelet.prober import ProbeManager
from kubelet.runtime import PodRecord, Runtime, build_pod_status, with_others_conditions
from kubelet.statuswriter import StatusWriter
from tinykube.clock import Clock
from tinykube.errors import ConflictError, NotFoundError, PreconditionFailedError, TinykubeError
from tinykube.v1 import pod_pb2

log = logging.getLogger(__name__)

DEADLINE_EXCEEDED = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


def grace_seconds(pod: pod_pb2.Pod) -> float:
    if pod.metadata.HasField("deletionGracePeriodSeconds"):
        return float(pod.metadata.deletionGracePeriodSeconds)
    if pod.spec.HasField("terminationGracePeriodSeconds"):
        return float(pod.spec.terminationGracePeriodSeconds)
    return float(DEFAULT_GRACE_SECONDS)


class Emitter(Protocol):
    """Records Events in the background (tinykube.events.EventRecorder.emit)."""

    def emit(self, obj: Any, type: str, reason: str, message: str) -> None: ...


class NullEmitter:
    def emit(self, obj: Any, type: str, reason: str, message: str) -> None:
        return None


class PodWorker:
    def __init__(self, manager: PodManager, pod: pod_pb2.Pod) -> None:
        self.manager = manager
        self.uid = pod.metadata.uid
        self.latest = pod
        self.gone = False
        self.wake = asyncio.Event()
        self.last_posted: pod_pb2.PodStatus | None = None
        # The apiserver's answer to our last UpdateStatus: what it stored, at which revision.
        self.stored: pod_pb2.Pod | None = None
        self.task: asyncio.Task[None] | None = None
        # Where the pod's start goes (kubelet/podstartup.py): from now, when the kubelet first
        # sees the pod, to the status write that first reports it Running.
        self.startup = StartupTrace(
            f"{pod.metadata.namespace}/{pod.metadata.name}", manager.clock.now().timestamp()
        )
        # A pod reported started before (by an earlier run of this kubelet) has no start here.
        self.startup.done = pod.status.phase in ("Running", "Succeeded", "Failed")

    def update(self, pod: pod_pb2.Pod) -> None:
        self.latest = pod
        stored = self.stored
        if (
            stored is not None
            and pod.metadata.resourceVersion
            and pod.metadata.resourceVersion == stored.metadata.resourceVersion
            and pod == stored
        ):
            # The watch's echo of our own last UpdateStatus, exactly what the apiserver answered
            # it with: nothing in it is new, so a sync would build the same status and write
            # nothing (kube's kubelet does not resync on a status-only update either). Half the
            # syncs of a pod that starts at once.
            return
        self.wake.set()

    def vanish(self, pod: pod_pb2.Pod) -> None:
        self.latest = pod
        self.gone = True
        self.wake.set()

    async def run(self) -> None:
        m = self.manager
        key = f"{self.latest.metadata.namespace}/{self.latest.metadata.name}"
        failures = 0
        while True:
            self.wake.clear()
            pod = self.latest
            retry_at = 0.0
            try:
                if m.probes is not None and (
                    self.gone or pod.metadata.HasField("deletionTimestamp")
                ):
                    m.probes.forget(self.uid)
                if self.gone:
                    grace = 0.0 if pod.metadata.HasField("deletionTimestamp") else 2.0
                    await m.runtime.kill_pod(self.uid, min(grace, grace_seconds(pod)))
                    m.runtime.forget(self.uid)
                    log.info("pod %s (%s) is gone from the API; stopped", key, self.uid)
                    return
                if pod.metadata.HasField("deletionTimestamp"):
                    await m.runtime.kill_pod(self.uid, grace_seconds(pod))
                    m.flush_events(pod)
                    await self._confirm_deletion(pod)
                    m.runtime.forget(self.uid)
                    return
                self.startup.sync_began(m.clock.now().timestamp())
                rec = await m.runtime.sync_pod(pod)
                if rec.timings:
                    self.startup.add(rec.timings)
                    rec.timings.clear()
                deadline = await self._active_deadline(pod, rec)
                retry_at = min((t for t in (rec.retry_at, deadline) if t), default=0.0)
                verdicts = None
                if m.probes is not None:
                    rec = await self._probe(pod, rec, m.probes)
                    verdicts = m.probes.verdicts(self.uid)
                m.flush_events(pod)
                previous = self.last_posted or pod.status
                status = build_pod_status(
                    pod,
                    rec,
                    m.host_ip(pod.spec.nodeName),
                    previous,
                    m.clock.now().timestamp(),
                    container_id_prefix=getattr(m.runtime, "container_id_prefix", "process://"),
                    probes=verdicts,
                )
                if (status != self.last_posted or self._overwritten(pod)) and not self.gone:
                    await self._post_status(pod, status)
                failures = 0
            except asyncio.CancelledError:
                raise
            except TinykubeError as exc:
                failures += 1
                log.warning("pod %s: %s: %s", key, type(exc).__name__, exc)
                await m.clock.sleep(min(0.2 * 2**failures, 5.0))
                continue
            except Exception:
                failures += 1
                log.exception("pod %s: worker failed", key)
                await m.clock.sleep(min(0.2 * 2**failures, 5.0))
                continue
            poll = m.runtime.poll_interval
            if retry_at:
                # The runtime wants another sync then (a container waits for its config).
                delay = max(0.0, retry_at - m.clock.now().timestamp())
                poll = delay if poll is None else min(poll, delay)
            if poll is None:
                await self.wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), poll)

    async def _active_deadline(self, pod: pod_pb2.Pod, rec: PodRecord) -> float:
        """Fail the pod once it has been active longer than spec.activeDeadlineSeconds; the
        wall time of a deadline still ahead (to wake at), else 0."""
        if rec.final_phase or not pod.spec.HasField("activeDeadlineSeconds"):
            return 0.0
        deadline = rec.start_time + pod.spec.activeDeadlineSeconds
        if self.manager.clock.now().timestamp() < deadline:
            return deadline
        # Set first: the runtime saves them with the killed containers' state.
        rec.final_phase, rec.final_reason, rec.final_message = (
            "Failed",
            DEADLINE_EXCEEDED,
            DEADLINE_MESSAGE,
        )
        rec.events.append(("Normal", DEADLINE_EXCEEDED, DEADLINE_MESSAGE))
        if self.manager.probes is not None:
            self.manager.probes.forget(self.uid)
        await self.manager.runtime.kill_pod(self.uid, grace_seconds(pod))
        return 0.0

    async def _probe(self, pod: pod_pb2.Pod, rec: PodRecord, probes: ProbeManager) -> PodRecord:
        """Keep the probers on the running containers; kill those whose liveness (or startup)
        probe failed, and let the runtime restart them as restartPolicy says."""
        probes.sync(pod, rec)
        failed = probes.take_failures(self.uid)
        if not failed:
            return rec
        restart = (pod.spec.restartPolicy or "Always") != "Never"
        for container in pod.spec.containers:
            why = failed.get(container.name)
            if why is None:
                continue
            message = f"Container {container.name} failed {why} probe"
            if restart:
                message += ", will be restarted"
            probe = container.startupProbe if why == "startup" else container.livenessProbe
            grace = (
                float(probe.terminationGracePeriodSeconds)
                if probe.HasField("terminationGracePeriodSeconds")
                else grace_seconds(pod)
            )
            await self.manager.runtime.kill_container(self.uid, container.name, grace, message)
        rec = await self.manager.runtime.sync_pod(pod)
        probes.sync(pod, rec)
        return rec

    async def _confirm_deletion(self, pod: pod_pb2.Pod) -> None:
        try:
            await self.manager.client.pods.delete(
                pod.metadata.name,
                pod.metadata.namespace,
                grace_period_seconds=0,
                uid=pod.metadata.uid,
            )
            log.info(
                "pod %s/%s: containers stopped; deleted", pod.metadata.namespace, pod.metadata.name
            )
        except (NotFoundError, PreconditionFailedError):
            pass  # already gone (or a new pod of the same name, which is not ours to delete)

    def _overwritten(self, pod: pod_pb2.Pod) -> bool:
        """Someone else changed what we reported since (the node lifecycle controller's Ready=False
        while this node was out of touch, say): report ours again, as the kubelet's status
        manager reconciles. Only for versions newer than our own write, so a watch that lags
        behind it does not trigger a rewrite."""
        stored = self.stored
        if stored is None or not pod.metadata.resourceVersion.isdigit():
            return False
        if int(pod.metadata.resourceVersion) <= int(stored.metadata.resourceVersion or 0):
            return False
        return with_others_conditions(stored.status, pod.status) != pod.status

    async def _post_status(self, pod: pod_pb2.Pod, status: pod_pb2.PodStatus) -> None:
        current = pod
        sent = 0.0
        for attempt in range(5):
            updated = pod_pb2.Pod()
            updated.CopyFrom(current)
            updated.status.CopyFrom(with_others_conditions(status, current.status))
            try:
                # The status subresource stores the status as sent (its metadata and spec
                # those of the stored pod, which the resourceVersion precondition proves are
                # these): the answer is the new resourceVersion.
                writer = self.manager.status_writer(pod.spec.nodeName)
                sent = self.manager.clock.now().timestamp()
                updated.metadata.resourceVersion = await writer.write(updated)
                self._posted(updated, status, sent)
                return
            except NotFoundError:
                return  # deleted: the watch will tell the worker
            except ConflictError:
                if attempt == 4:
                    raise
                current = await self.manager.client.pods.get(
                    pod.metadata.name, pod.metadata.namespace
                )
                if current.metadata.uid != self.uid:
                    return
                if with_others_conditions(status, current.status) == current.status:
                    # It says what we would write: most often our own write, whose answer
                    # was lost and whose re-sent copy met it (ABORTED). Nothing to send.
                    self._posted(current, status, sent)
                    return

    def _posted(self, stored: pod_pb2.Pod, status: pod_pb2.PodStatus, sent: float) -> None:
        """`stored` (the pod as the apiserver has it) holds `status`, sent at `sent`."""
        self.stored = stored
        self.last_posted = status
        if status.phase == "Running" and not self.startup.done:
            self.startup.running(
                sent, self.manager.clock.now().timestamp(), self.manager.on_pod_started
            )


class PodManager:
    def __init__(
        self,
        client: KubeletAPI,
        runtime: Runtime,
        node_names: set[str],
        host_ip: Callable[[str], str],
        *,
        clock: Clock | None = None,
        events: Emitter | None = None,
        on_event: Callable[[str], object] = lambda reason: None,
        probes: ProbeManager | None = None,
        on_pod_started: Callable[[float], None] | None = None,
        write_streams: bool = False,
    ) -> None:
        self.on_event = on_event
        # Seconds from the kubelet seeing a pod to the write that reported it Running.
        self.on_pod_started = on_pod_started
        # None: the runtime's containers are not probed (fake pods are ready at once).
        self.probes = probes
        self.client = client
        self.events: Emitter = events or NullEmitter()
        self.runtime = runtime
        self.node_names = node_names
        self.host_ip = host_ip
        self.clock = clock or Clock()
        # Per node: the status writes of one node's pods that are ready together share one
        # Pods/UpdateStatusBatch RPC. Never across nodes, even in a process hosting many
        # (hollow) nodes: the apiserver sees the calls that as many real kubelets would make.
        self._status_writers: dict[str, StatusWriter] = {}
        self.write_streams = write_streams  # each writer's single writes on a stream of its own
        self.workers: dict[str, PodWorker] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def status_writer(self, node: str) -> StatusWriter:
        writer = self._status_writers.get(node)
        if writer is None:
            writer = self._status_writers[node] = StatusWriter(
                self.client, streams=self.write_streams
            )
        return writer

    def _mine(self, pod: pod_pb2.Pod) -> bool:
        return pod.spec.nodeName in self.node_names

    def on_add(self, pod: pod_pb2.Pod) -> None:
        if not self._mine(pod):
            return
        worker = self.workers.get(pod.metadata.uid)
        if worker is not None:
            worker.update(pod)
            return
        worker = PodWorker(self, pod)
        self.workers[pod.metadata.uid] = worker
        task = asyncio.get_running_loop().create_task(
            self._run(worker), name=f"pod-{pod.metadata.namespace}/{pod.metadata.name}"
        )
        worker.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, worker: PodWorker) -> None:
        try:
            await worker.run()
        finally:
            if self.workers.get(worker.uid) is worker:
                del self.workers[worker.uid]

    def on_update(self, old: pod_pb2.Pod, new: pod_pb2.Pod) -> None:
        self.on_add(new)

    def on_delete(self, pod: pod_pb2.Pod) -> None:
        worker = self.workers.get(pod.metadata.uid)
        if worker is not None:
            worker.vanish(pod)
        elif pod.metadata.uid in self.runtime.known_pods():
            self.on_add(pod)
            worker = self.workers.get(pod.metadata.uid)
            if worker is not None:
                worker.vanish(pod)

    def flush_events(self, pod: pod_pb2.Pod) -> None:
        rec = self.runtime.record(pod.metadata.uid)
        if rec is None or not rec.events:
            return
        for type_, reason, message in rec.events:
            self.events.emit(pod, type_, reason, message)
            self.on_event(reason)
        rec.events.clear()

    async def cleanup_orphans(self, live_uids: set[str]) -> list[asyncio.Task[None]]:
        """Kill what a previous run of this kubelet started for pods that no longer exist
        (force-deleted while no kubelet ran), each in the background as kube's pod workers
        do: the preStop hooks run and the containers get the grace period their spec gave,
        which the runtime kept when it started them. Returns the killing tasks."""
        started: list[asyncio.Task[None]] = []
        for uid in self.runtime.known_pods():
            if uid in live_uids or uid in self.workers:
                continue
            rec = self.runtime.record(uid)
            name = f"{rec.namespace}/{rec.name}" if rec else uid
            grace = self.runtime.orphan_grace(uid)
            log.info(
                "pod %s (%s) no longer exists; killing what is left of it (grace %gs)",
                name,
                uid,
                grace,
            )
            task = asyncio.get_running_loop().create_task(
                self._kill_orphan(uid, grace), name=f"orphan-{name}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started.append(task)
        return started

    async def _kill_orphan(self, uid: str, grace: float) -> None:
        try:
            await self.runtime.kill_pod(uid, grace)
        except Exception:  # a runtime error must not end the kubelet; the next start retries
            log.exception("killing what is left of pod %s failed", uid)
            return
        self.runtime.forget(uid)

    def wake(self, uid: str) -> None:
        """Have the pod's worker sync now (a probe result changed)."""
        worker = self.workers.get(uid)
        if worker is not None:
            worker.wake.set()

    async def stop(self) -> None:
        """Stop the workers, leaving the containers running (a restart adopts them)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for writer in self._status_writers.values():
            await writer.close()
        if self.probes is not None:
            await self.probes.close()
