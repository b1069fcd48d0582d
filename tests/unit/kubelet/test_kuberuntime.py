"""The kubelet's lifecycle decisions (kubelet/kuberuntime.py `KubeRuntime.sync_pod`) over an
in-memory runtime: sandbox first, init containers in order, restartPolicy and the crash-loop
back-off, a changed image, a failed pull's ErrImagePull then ImagePullBackOff."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.kuberuntime import KubeRuntime
from kubelet.runtime import (
    RUNNING,
    TERMINATED,
    WAITING,
    ContainerRecord,
    PodRecord,
    Termination,
    pod_phase,
)
from tinykube.clock import FakeClock
from tinykube.v1 import pod_pb2


class MemoryRuntime(KubeRuntime):
    """Containers that exist only in memory: tests say which exit and which images are
    missing; every call is logged."""

    def __init__(self, root: Path, clock: FakeClock) -> None:
        super().__init__(root, clock=clock, backoff_initial=10, backoff_max=40)
        self.calls: list[tuple[str, str]] = []
        self.exits: dict[str, int] = {}  # container id -> exit code
        self.missing_images: set[str] = set()
        self.sandbox_ready = True
        self._next = 0

    def _adopted(self, crec: ContainerRecord) -> bool:
        return True

    async def _prepare_pod(self, pod: pod_pb2.Pod, rec: PodRecord) -> bool:
        if not rec.sandbox_id and self.sandbox_ready:
            rec.sandbox_id = "sandbox-1"
            rec.pod_ips = ["10.244.1.2"]
            self.calls.append(("sandbox", pod.metadata.name))
        return bool(rec.sandbox_id)

    async def _launch(
        self,
        pod: pod_pb2.Pod,
        rec: PodRecord,
        container: pod_pb2.Container,
        crec: ContainerRecord,
        resolved: dict[str, str],
    ) -> None:
        if container.image in self.missing_images:
            crec.state, crec.waiting_reason = WAITING, "ErrImagePull"
            crec.next_start = self._now() + self._backoff(crec)
            return
        self._next += 1
        if crec.last is not None:
            crec.restart_count += 1
        crec.container_id = f"c{self._next}"
        crec.state, crec.image, crec.started_at = RUNNING, container.image, self._now()
        crec.terminated = None
        self.calls.append(("start", container.name))

    async def _exit_status(self, uid: str, crec: ContainerRecord) -> Termination | None:
        code = self.exits.pop(crec.container_id, None)
        if code is None:
            return None
        return Termination(code, "Error" if code else "Completed", crec.started_at, self._now())

    async def _kill_changed(self, pod: pod_pb2.Pod, rec: PodRecord, crec: ContainerRecord) -> None:
        self.calls.append(("kill", crec.name))
        crec.last = Termination(137, "Error", crec.started_at, self._now())
        crec.state, crec.next_start = WAITING, 0.0

    async def kill_pod(self, uid: str, grace_seconds: float) -> None:
        return None

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        return None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock) -> MemoryRuntime:
    return MemoryRuntime(tmp_path, clock)


def make_pod(*containers: str, init: tuple[str, ...] = (), policy: str = "Always") -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace, pod.metadata.uid = "p", "ns", "u1"
    pod.spec.restartPolicy = policy
    for name in init:
        pod.spec.initContainers.add(name=name, image="img:1")
    for name in containers:
        pod.spec.containers.add(name=name, image="img:1")
    return pod


async def test_no_container_starts_before_the_sandbox(rt: MemoryRuntime) -> None:
    rt.sandbox_ready = False
    pod = make_pod("app")
    rec = await rt.sync_pod(pod)
    assert rt.calls == [] and pod_phase(pod, rec) == "Pending"
    rt.sandbox_ready = True
    rec = await rt.sync_pod(pod)
    assert rt.calls == [("sandbox", "p"), ("start", "app")]
    assert rec.pod_ips == ["10.244.1.2"]


async def test_init_containers_run_in_order_each_to_success(rt: MemoryRuntime) -> None:
    pod = make_pod("app", init=("first", "second"))
    rec = await rt.sync_pod(pod)
    assert rt.calls[-1] == ("start", "first")
    await rt.sync_pod(pod)
    assert rt.calls[-1] == ("start", "first")  # still running: nothing else starts
    rt.exits[rec.init_containers["first"].container_id] = 0
    await rt.sync_pod(pod)
    assert rt.calls[-1] == ("start", "second")
    rt.exits[rec.init_containers["second"].container_id] = 0
    await rt.sync_pod(pod)
    assert rt.calls[-1] == ("start", "app")
    assert pod_phase(pod, rec) == "Running"


async def test_crash_loop_back_off_doubles(rt: MemoryRuntime, clock: FakeClock) -> None:
    pod = make_pod("app")
    rec = await rt.sync_pod(pod)
    crec = rec.containers["app"]
    rt.exits[crec.container_id] = 1
    await rt.sync_pod(pod)
    assert (crec.state, crec.waiting_reason) == (WAITING, "CrashLoopBackOff")
    clock.advance(9)
    await rt.sync_pod(pod)
    assert crec.state == WAITING
    clock.advance(1)
    await rt.sync_pod(pod)
    assert crec.state == RUNNING and crec.restart_count == 1
    rt.exits[crec.container_id] = 1
    await rt.sync_pod(pod)
    assert "back-off 20s" in crec.waiting_message


async def test_restart_policy_never_leaves_it_terminated(rt: MemoryRuntime) -> None:
    pod = make_pod("app", policy="Never")
    rec = await rt.sync_pod(pod)
    rt.exits[rec.containers["app"].container_id] = 3
    await rt.sync_pod(pod)
    assert rec.containers["app"].state == TERMINATED
    assert rec.final_phase == "Failed"


async def test_a_changed_image_restarts_the_container_at_once(rt: MemoryRuntime) -> None:
    pod = make_pod("app")
    rec = await rt.sync_pod(pod)
    pod.spec.containers[0].image = "img:2"
    await rt.sync_pod(pod)
    assert rt.calls[-2:] == [("kill", "app"), ("start", "app")]
    assert rec.containers["app"].image == "img:2"


async def test_a_failed_pull_shows_image_pull_back_off_then_pulls_again(
    rt: MemoryRuntime, clock: FakeClock
) -> None:
    rt.missing_images.add("img:1")
    pod = make_pod("app")
    rec = await rt.sync_pod(pod)
    crec = rec.containers["app"]
    assert crec.waiting_reason == "ErrImagePull"
    rec.events.clear()
    await rt.sync_pod(pod)
    assert crec.waiting_reason == "ImagePullBackOff"
    assert crec.waiting_message == 'Back-off pulling image "img:1"'
    assert rec.events == [("Normal", "BackOff", 'Back-off pulling image "img:1"')]
    rt.missing_images.clear()
    clock.advance(10)
    await rt.sync_pod(pod)
    assert crec.state == RUNNING
