"""The kubelet acting on pod updates: a changed image restarts the container (kube's
containerChanged: Killing "definition changed", Pulled, Created, Started, restart count + 1, the
status reporting the running instance's image), and a passed activeDeadlineSeconds fails the pod
(DeadlineExceeded). Fake runtime through the pod workers; the process runtime with real
processes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kubelet.fake import FakeRuntime
from kubelet.pods import PodManager
from kubelet.process import ProcessRuntime
from kubelet.runtime import RUNNING, WAITING, build_pod_status
from tests.unit.controller.fakes import FakeClient
from tinykube.clock import Clock, FakeClock
from tinykube.v1 import pod_pb2


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, obj: Any, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason, message))


def bound_pod(image: str = "nginx:1.26") -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = "web"
    pod.metadata.namespace = "default"
    pod.spec.nodeName = "n1"
    pod.spec.containers.add(name="web", image=image)
    return pod


async def wait_for(pred: Any) -> None:
    for _ in range(200):
        if pred():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_changed_image_restarts_the_container_fake_runtime() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    events = Recorded()
    manager = PodManager(
        client, FakeRuntime(clock), {"n1"}, lambda _n: "10.0.0.5", clock=clock, events=events
    )
    pod = await client.pods.create(bound_pod())
    manager.on_add(pod)

    def status() -> pod_pb2.ContainerStatus:
        statuses = client.pods.objects["default/web"].status.containerStatuses
        return statuses[0] if statuses else pod_pb2.ContainerStatus()

    await wait_for(lambda: status().state.HasField("running"))
    assert (status().image, status().restartCount) == ("nginx:1.26", 0)
    assert events.events == []  # fake pods start silently

    clock.advance(5)
    updated = pod_pb2.Pod()
    updated.CopyFrom(client.pods.objects["default/web"])
    updated.spec.containers[0].image = "nginx:1.27"
    updated = await client.pods.update(updated)
    manager.on_update(pod, updated)
    await wait_for(lambda: status().restartCount == 1)
    cs = status()
    assert cs.image == "nginx:1.27"
    assert cs.state.HasField("running") and cs.ready
    assert (cs.lastState.terminated.exitCode, cs.lastState.terminated.reason) == (143, "Error")
    assert events.events == [
        ("Normal", "Killing", "Container web definition changed, will be restarted"),
        ("Normal", "Pulled", 'Container image "nginx:1.27" already present on machine'),
        ("Normal", "Created", "Created container: web"),
        ("Normal", "Started", "Started container web"),
    ]
    # The same spec again restarts nothing.
    manager.on_update(updated, updated)
    await clock.step(0)
    assert status().restartCount == 1
    await manager.stop()


async def test_lowered_active_deadline_fails_the_pod() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    events = Recorded()
    manager = PodManager(
        client, FakeRuntime(clock), {"n1"}, lambda _n: "10.0.0.5", clock=clock, events=events
    )
    created = bound_pod()
    created.spec.activeDeadlineSeconds = 600
    pod = await client.pods.create(created)
    manager.on_add(pod)
    await wait_for(lambda: client.pods.objects["default/web"].status.phase == "Running")

    clock.advance(60)  # active for a minute: within 600 s, past 30 s
    lowered = pod_pb2.Pod()
    lowered.CopyFrom(client.pods.objects["default/web"])
    lowered.spec.activeDeadlineSeconds = 30
    lowered = await client.pods.update(lowered)
    manager.on_update(pod, lowered)
    await wait_for(lambda: client.pods.objects["default/web"].status.phase == "Failed")
    status = client.pods.objects["default/web"].status
    assert (status.reason, status.message) == (
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    )
    assert status.containerStatuses[0].state.terminated.reason == "Error"
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.status == "False"
    assert (
        "Normal",
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    ) in events.events
    await manager.stop()


def process_pod(uid: str, image: str, policy: str) -> pod_pb2.Pod:
    pod = bound_pod(image)
    pod.metadata.uid = uid
    pod.spec.restartPolicy = policy
    pod.spec.terminationGracePeriodSeconds = 5
    pod.spec.containers[0].command[:] = ["sleep", "3600"]
    return pod


async def test_changed_image_restarts_a_process_whatever_the_restart_policy(
    tmp_path: Path,
) -> None:
    rt = ProcessRuntime(tmp_path, clock=Clock(), backoff_initial=10, backoff_max=40)
    pod = process_pod("u1", "busybox:1.36", "Never")
    rec = await rt.sync_pod(pod)
    first = rec.containers["web"]
    first_pid = first.pid
    assert first.state == RUNNING and first.image == "busybox:1.36"
    assert [r for _, r, _ in rec.events] == ["Pulled", "Created", "Started"]
    rec.events.clear()

    pod.spec.containers[0].image = "busybox:1.37"
    rec = await rt.sync_pod(pod)
    crec = rec.containers["web"]
    assert crec.state == RUNNING, crec
    assert crec.pid != first_pid
    assert (crec.restart_count, crec.image) == (1, "busybox:1.37")
    assert crec.last is not None
    assert (crec.last.exit_code, crec.last.signal, crec.last.reason) == (143, 15, "Error")
    assert rec.events == [
        ("Normal", "Killing", "Container web definition changed, will be restarted"),
        ("Normal", "Pulled", 'Container image "busybox:1.37" already present on machine'),
        ("Normal", "Created", "Created container: web"),
        ("Normal", "Started", "Started container web"),
    ]
    status = build_pod_status(pod, rec, "h", pod_pb2.PodStatus(), 0.0)
    cs = status.containerStatuses[0]
    assert (status.phase, cs.image, cs.restartCount) == ("Running", "busybox:1.37", 1)
    assert cs.lastState.terminated.exitCode == 143
    # Its log: the previous instance's file is the killed one's.
    assert rt.log_path("u1", "web", previous=True) == rt.instance_log("u1", "web", 0)
    assert rt.log_path("u1", "web") == rt.instance_log("u1", "web", 1)

    # A restarted kubelet knows the running instance's image: no second restart.
    again = ProcessRuntime(tmp_path, clock=Clock())
    assert again.load() == ["u1"]
    rec = await again.sync_pod(pod)
    assert (rec.containers["web"].restart_count, rec.containers["web"].pid) == (1, crec.pid)
    await again.kill_pod("u1", 0)
    rt._children.pop(crec.pid).wait()  # reap: it was the first runtime's child


async def test_status_shows_the_old_image_until_the_restart(tmp_path: Path) -> None:
    rt = ProcessRuntime(tmp_path, clock=Clock())
    pod = process_pod("u2", "busybox:1.36", "Always")
    rec = await rt.sync_pod(pod)
    changed = pod_pb2.Pod()
    changed.CopyFrom(pod)
    changed.spec.containers[0].image = "busybox:1.37"
    # Not yet synced: the running instance is still the old image's.
    assert build_pod_status(changed, rec, "h", pod_pb2.PodStatus(), 0.0).containerStatuses[
        0
    ].image == ("busybox:1.36")
    await rt.kill_pod("u2", 0)


async def test_exited_container_with_restart_policy_never_stays_terminated(
    tmp_path: Path,
) -> None:
    """Only a running container is restarted for a changed image (kube's computePodActions)."""
    rt = ProcessRuntime(tmp_path, clock=Clock())
    pod = process_pod("u3", "busybox:1.36", "Never")
    pod.spec.containers[0].command[:] = ["true"]
    for _ in range(200):
        rec = await rt.sync_pod(pod)
        if rec.final_phase:
            break
        await asyncio.sleep(0.02)
    assert rec.final_phase == "Succeeded"
    pod.spec.containers[0].image = "busybox:1.37"
    rec = await rt.sync_pod(pod)
    assert rec.containers["web"].restart_count == 0
    assert rec.containers["web"].state != WAITING


async def test_crash_looping_container_with_a_new_image_starts_at_once(tmp_path: Path) -> None:
    """Kube's back-off key includes the container's hash: a new image is not held back by the
    old one's crash loop."""
    rt = ProcessRuntime(tmp_path, clock=Clock(), backoff_initial=300, backoff_max=300)
    pod = process_pod("u4", "busybox:1.36", "Always")
    pod.spec.containers[0].command[:] = ["sh", "-c", "exit 1"]
    for _ in range(200):
        rec = await rt.sync_pod(pod)
        if rec.containers["web"].waiting_reason == "CrashLoopBackOff":
            break
        await asyncio.sleep(0.02)
    assert rec.containers["web"].waiting_reason == "CrashLoopBackOff"
    pod.spec.containers[0].image = "busybox:1.37"
    pod.spec.containers[0].command[:] = ["sleep", "3600"]  # (as if the new image fixed it)
    rec = await rt.sync_pod(pod)
    crec = rec.containers["web"]
    assert (crec.state, crec.image, crec.restart_count) == (RUNNING, "busybox:1.37", 1)
    await rt.kill_pod("u4", 0)


class CountingRuntime(FakeRuntime):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.syncs = 0

    async def sync_pod(self, pod: pod_pb2.Pod) -> Any:
        self.syncs += 1
        return await super().sync_pod(pod)


async def test_the_echo_of_our_own_status_write_does_not_resync_the_pod() -> None:
    """The watch delivers every UpdateStatus back: that version holds nothing new, so the worker
    does not sync again; any other version (someone's label, say) still syncs."""
    clock = FakeClock()
    client = FakeClient(clock)
    runtime = CountingRuntime(clock)
    manager = PodManager(client, runtime, {"n1"}, lambda _n: "10.0.0.5", clock=clock)
    pod = await client.pods.create(bound_pod())
    manager.on_add(pod)
    worker = manager.workers[pod.metadata.uid]
    await wait_for(lambda: worker.stored is not None)
    assert runtime.syncs == 1
    echo = client.pods.objects["default/web"]
    assert worker.stored is not None
    assert echo.metadata.resourceVersion == worker.stored.metadata.resourceVersion
    manager.on_update(pod, echo)
    for _ in range(20):
        await asyncio.sleep(0)
    assert runtime.syncs == 1
    assert worker.latest is echo  # kept for the next sync all the same

    labelled = pod_pb2.Pod()
    labelled.CopyFrom(echo)
    labelled.metadata.labels["team"] = "a"
    labelled = await client.pods.update(labelled)
    manager.on_update(echo, labelled)
    await wait_for(lambda: runtime.syncs == 2)
    assert len(client.pods.objects["default/web"].status.containerStatuses) == 1
