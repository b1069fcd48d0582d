"""The `fake` runtime: pods are Running at once and stay so, as KWOK's nodes do.

Nothing runs; a record is kept in memory so the status looks like a real pod's. Cheap enough
for one process to host thousands of pods across many fake nodes.
"""

from __future__ import annotations

from pathlib import Path

from kubelet.runtime import RUNNING, TERMINATED, ContainerRecord, PodRecord, Termination
from tinykube.clock import Clock
from tinykube.v1 import pod_pb2


class FakeRuntime:
    poll_interval: float | None = None

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._pods: dict[str, PodRecord] = {}

    def load(self) -> list[str]:
        return []

    def known_pods(self) -> list[str]:
        return list(self._pods)

    def record(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def log_path(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        return None

    async def sync_pod(self, pod: pod_pb2.Pod) -> PodRecord:
        rec = self._pods.get(pod.metadata.uid)
        if rec is None:
            now = self.clock.now().timestamp()
            rec = PodRecord(pod.metadata.uid, pod.metadata.namespace, pod.metadata.name, now)
            for c in pod.spec.initContainers:
                done = Termination(exit_code=0, reason="Completed", started_at=now, finished_at=now)
                rec.init_containers[c.name] = ContainerRecord(
                    c.name, state=TERMINATED, terminated=done
                )
            for c in pod.spec.containers:
                rec.containers[c.name] = ContainerRecord(c.name, state=RUNNING, started_at=now)
            self._pods[pod.metadata.uid] = rec
        return rec

    async def kill_pod(self, uid: str, grace_seconds: float) -> None:
        return None

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        return None  # fake pods have no probes: their containers are never killed

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)
