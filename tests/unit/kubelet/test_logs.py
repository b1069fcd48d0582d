"""The Kubelet.Logs servicer, called directly (no sockets) over a temporary log file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc

from kubelet.fake import FakeRuntime
from kubelet.logs import KubeletService, tail
from kubelet.process import ProcessRuntime
from tinykube.clock import Clock
from tinykube.v1 import kubelet_pb2, pod_pb2


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted(details)


def make_pod(*containers: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = "web"
    pod.metadata.namespace = "default"
    pod.metadata.uid = "u1"
    pod.status.phase = "Running"
    for c in containers:
        pod.spec.containers.add(name=c, image="x")
        pod.status.containerStatuses.add(name=c).state.running.SetInParent()
    return pod


async def collect(service: KubeletService, request: kubelet_pb2.LogsRequest) -> tuple[bytes, Any]:
    ctx = FakeContext()
    out = b""
    try:
        async for chunk in service.Logs(request, ctx):  # type: ignore[arg-type]
            out += chunk.data
    except Aborted:
        pass
    return out, ctx


def test_tail() -> None:
    assert tail(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert tail(b"a\nb", 5) == b"a\nb"
    assert tail(b"a\n", 0) == b""


async def test_whole_log_tail_and_errors(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    pods = {("default", "web"): make_pod("main")}
    log_path = runtime.log_path("u1", "main")
    assert log_path is not None
    log_path.parent.mkdir(parents=True)
    log_path.write_bytes(b"one\ntwo\nthree\n")
    service = KubeletService(lambda ns, n: pods.get((ns, n)), runtime)

    out, _ = await collect(service, kubelet_pb2.LogsRequest(namespace="default", name="web"))
    assert out == b"one\ntwo\nthree\n"
    out, _ = await collect(
        service, kubelet_pb2.LogsRequest(namespace="default", name="web", tailLines=1)
    )
    assert out == b"three\n"
    _, ctx = await collect(service, kubelet_pb2.LogsRequest(namespace="default", name="nope"))
    assert ctx.code == grpc.StatusCode.NOT_FOUND
    _, ctx = await collect(
        service, kubelet_pb2.LogsRequest(namespace="default", name="web", container="side")
    )
    assert (ctx.code, ctx.details) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "container side is not valid for pod web",
    )
    pods[("default", "web")] = make_pod("a", "b")
    _, ctx = await collect(service, kubelet_pb2.LogsRequest(namespace="default", name="web"))
    assert ctx.details == "a container name must be specified for pod web, choose one of: [a b]"


async def test_follow_streams_new_output_until_the_pod_finishes(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    pod = make_pod("main")
    pods = {("default", "web"): pod}
    log_path = runtime.log_path("u1", "main")
    assert log_path is not None
    log_path.parent.mkdir(parents=True)
    log_path.write_bytes(b"first\n")
    service = KubeletService(lambda ns, n: pods.get((ns, n)), runtime, clock=Clock())
    request = kubelet_pb2.LogsRequest(namespace="default", name="web", follow=True)
    task = asyncio.create_task(collect(service, request))
    await asyncio.sleep(0.3)
    with log_path.open("ab") as f:
        f.write(b"second\n")
    await asyncio.sleep(0.5)
    assert not task.done(), "follow ended while the pod was running"
    pod.status.phase = "Succeeded"
    out, _ = await asyncio.wait_for(task, 5)
    assert out == b"first\nsecond\n"


async def test_fake_runtime_has_no_logs() -> None:
    service = KubeletService(lambda ns, n: make_pod("main"), FakeRuntime())
    _, ctx = await collect(service, kubelet_pb2.LogsRequest(namespace="default", name="web"))
    assert ctx.code == grpc.StatusCode.UNIMPLEMENTED


def _waiting(reason: str) -> pod_pb2.Pod:
    pod = make_pod("main")
    pod.status.containerStatuses[0].state.Clear()
    if reason:
        pod.status.containerStatuses[0].state.waiting.reason = reason
    return pod


def _no_status() -> pod_pb2.Pod:
    pod = make_pod("main")
    del pod.status.containerStatuses[:]
    return pod


def _restarted() -> pod_pb2.Pod:
    pod = make_pod("main")
    pod.status.containerStatuses[0].lastState.terminated.exitCode = 1
    return pod


async def test_log_status_refusals_and_limit_bytes(tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path)
    path = runtime.log_path("u1", "main")
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"one\ntwo\nthree\n")
    where = 'container "main" in pod "web"'
    cases: list[tuple[pod_pb2.Pod, dict[str, Any], bytes, str]] = [
        (make_pod("main"), {"limitBytes": 5}, b"one\nt", ""),
        (make_pod("main"), {"tailLines": 2, "limitBytes": 100}, b"two\nthree\n", ""),
        (_waiting("ContainerCreating"), {}, b"", f"{where} is waiting to start: ContainerCreating"),
        (_no_status(), {}, b"", f"{where} is waiting to start - no logs yet"),
        (make_pod("main"), {"previous": True}, b"", f"previous terminated {where} not found"),
        (_restarted(), {}, b"one\ntwo\nthree\n", ""),
    ]
    for pod, fields, want, error in cases:
        service = KubeletService(lambda ns, n, p=pod: p, runtime)  # type: ignore[misc]
        request = kubelet_pb2.LogsRequest(namespace="default", name="web", **fields)
        out, ctx = await collect(service, request)
        assert (out, ctx.details) == (want, error), fields
        if error:
            assert ctx.code == grpc.StatusCode.INVALID_ARGUMENT
