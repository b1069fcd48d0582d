"""The `fake` runtime: pods are Running at once and stay so, as KWOK's nodes do.

Nothing runs; a record is kept in memory so the status looks like a real pod's. Cheap enough
for one process to host thousands of pods across many fake nodes: a pod whose containers have
no envFrom or valueFrom costs no environment work at all. One that has them is resolved as the
process runtime would (kubelet/envvars.py, the values then dropped), so a missing ConfigMap or
Secret shows as it would on a real node: the container waits with reason
CreateContainerConfigError, a Warning Event Failed, and another try `retry_seconds` later (the
record's `retry_at` wakes the pod worker); once it resolves, the container is Running.
A running container whose image changed restarts at once, as on a real node (Events Killing,
Pulled, Created, Started; restart count + 1); a killed pod's containers are terminated.
"""

from __future__ import annotations

from pathlib import Path

from kubelet.envvars import (
    CONFIG_ERROR_REASON,
    CONFIG_RETRY_SECONDS,
    ContainerConfigError,
    EnvSources,
    make_environment,
    needs_sources,
)
from kubelet.runtime import (
    RUNNING,
    TERMINATED,
    WAITING,
    ContainerRecord,
    PodRecord,
    Termination,
    definition_changed,
    definition_changed_message,
    start_events,
)
from tinykube.clock import Clock
from tinykube.v1 import pod_pb2


class FakeRuntime:
    poll_interval: float | None = None

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        env_sources: EnvSources | None = None,
        retry_seconds: float = CONFIG_RETRY_SECONDS,
    ) -> None:
        self.clock = clock or Clock()
        self.env_sources = env_sources or EnvSources()
        self.retry_seconds = retry_seconds
        self._pods: dict[str, PodRecord] = {}

    def load(self) -> list[str]:
        return []

    def known_pods(self) -> list[str]:
        return list(self._pods)

    def orphan_grace(self, uid: str) -> float:
        return 0.0

    def record(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def log_path(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        return None

    async def sync_pod(self, pod: pod_pb2.Pod) -> PodRecord:
        rec = self._pods.get(pod.metadata.uid)
        if rec is None:
            now = self.clock.now().timestamp()
            rec = PodRecord(pod.metadata.uid, pod.metadata.namespace, pod.metadata.name, now)
            self._pods[pod.metadata.uid] = rec
            spec = pod.spec
            if any(map(needs_sources, spec.initContainers)) or any(
                map(needs_sources, spec.containers)
            ):
                await self._start_configured(pod, rec)
                return rec
            for c in spec.initContainers:
                rec.init_containers[c.name] = _completed(c.name, now)
            for c in spec.containers:
                rec.containers[c.name] = _running(c, now)
        elif rec.retry_at and self.clock.now().timestamp() >= rec.retry_at:
            await self._start_configured(pod, rec)
        elif not rec.final_phase:
            self._restart_changed(pod, rec)
        return rec

    def _restart_changed(self, pod: pod_pb2.Pod, rec: PodRecord) -> None:
        now = self.clock.now().timestamp()
        for c in pod.spec.containers:
            crec = rec.containers.get(c.name)
            if crec is None or not definition_changed(c, crec):
                continue
            rec.events.append(("Normal", "Killing", definition_changed_message(c.name)))
            rec.events.extend(start_events(c))
            restarted = _running(c, now)
            restarted.restart_count = crec.restart_count + 1
            restarted.last = Termination(
                exit_code=143,
                signal=15,
                reason="Error",
                started_at=crec.started_at,
                finished_at=now,
            )
            rec.containers[c.name] = restarted

    async def _start_configured(self, pod: pod_pb2.Pod, rec: PodRecord) -> None:
        """Start what is not started yet, each container once its environment resolves; init
        containers in order, none of the others before they all have."""
        now = self.clock.now().timestamp()
        rec.retry_at = 0.0
        for c in pod.spec.initContainers:
            done = rec.init_containers.get(c.name)
            if done is not None and done.state == TERMINATED:
                continue
            if not await self._configured(pod, rec, c, rec.init_containers, now):
                return
            rec.init_containers[c.name] = _completed(c.name, now)
        for c in pod.spec.containers:
            current = rec.containers.get(c.name)
            if current is not None and current.state == RUNNING:
                continue
            if await self._configured(pod, rec, c, rec.containers, now):
                rec.containers[c.name] = _running(c, now)

    async def _configured(
        self,
        pod: pod_pb2.Pod,
        rec: PodRecord,
        container: pod_pb2.Container,
        records: dict[str, ContainerRecord],
        now: float,
    ) -> bool:
        if not needs_sources(container):
            return True
        try:
            await make_environment(pod, container, self.env_sources)
        except ContainerConfigError as exc:
            records[container.name] = ContainerRecord(
                container.name,
                state=WAITING,
                waiting_reason=CONFIG_ERROR_REASON,
                waiting_message=str(exc),
            )
            rec.events.append(("Warning", "Failed", f"Error: {exc}"))
            rec.retry_at = now + self.retry_seconds
            return False
        return True

    async def kill_pod(self, uid: str, grace_seconds: float) -> None:
        rec = self._pods.get(uid)
        if rec is None:
            return
        now = self.clock.now().timestamp()
        for crec in rec.containers.values():
            if crec.state == RUNNING:
                crec.state = TERMINATED
                crec.terminated = Termination(
                    exit_code=137 if grace_seconds <= 0 else 143,
                    reason="Error",
                    started_at=crec.started_at,
                    finished_at=now,
                )

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        return None  # fake pods have no probes: their containers are never killed

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)


def _running(container: pod_pb2.Container, now: float) -> ContainerRecord:
    return ContainerRecord(container.name, state=RUNNING, started_at=now, image=container.image)


def _completed(name: str, now: float) -> ContainerRecord:
    done = Termination(exit_code=0, reason="Completed", started_at=now, finished_at=now)
    return ContainerRecord(name, state=TERMINATED, terminated=done)
