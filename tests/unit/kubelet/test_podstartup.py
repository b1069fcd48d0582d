"""The pod startup trace (kubelet/podstartup.py): a pod worker logs "Observed pod startup
duration" once, when its status write first reports Running, with the runtime's stage spans in
order, and gives the seconds from seeing the pod to that write to its observer; a pod that was
running before the worker started logs nothing. The CRI operation types the kubelet's runtime
metrics are labelled with (kube's), and the runtime Status call that a burst of new pods shares
(one, not one per pod)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, cast

import pytest

from kubelet.cri import CRIRuntime, TimedStub, operation_type
from kubelet.fake import FakeRuntime
from kubelet.pods import PodManager
from kubelet.podstartup import LINE_PREFIX, MAX_SPANS, StartupTrace, parse_line
from kubelet.runtime import PodRecord
from tests.unit.controller.fakes import FakeClient
from tinykube.clock import FakeClock
from tinykube.cri.v1 import cri_pb2 as cri
from tinykube.v1 import pod_pb2


class StagedRuntime(FakeRuntime):
    """Pods start as fake ones do, after a sandbox and a container start that take time."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.fake_clock = clock
        self.started: set[str] = set()

    async def sync_pod(self, pod: pod_pb2.Pod) -> PodRecord:
        first = pod.metadata.uid not in self.started
        self.started.add(pod.metadata.uid)
        t0 = self.fake_clock.now().timestamp()
        if first:
            self.fake_clock.advance(1.5)
        rec = await super().sync_pod(pod)
        if first:
            rec.timings += [("sandbox", t0, t0 + 1.0), ("start:app", t0 + 1.0, t0 + 1.5)]
        return rec


def bound_pod(name: str = "web") -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = name
    pod.metadata.namespace = "default"
    pod.spec.nodeName = "n1"
    pod.spec.containers.add(name="app", image="busybox:1")
    return pod


async def wait_for(pred: Any) -> None:
    for _ in range(200):
        if pred():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def traces(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [t for t in (parse_line(r.getMessage()) for r in caplog.records) if t is not None]


async def test_the_first_running_write_logs_the_trace_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubelet.podstartup")
    clock = FakeClock()
    client = FakeClient(clock)
    observed: list[float] = []
    manager = PodManager(
        client,
        StagedRuntime(clock),
        {"n1"},
        lambda _n: "10.0.0.5",
        clock=clock,
        on_pod_started=observed.append,
    )
    pod = await client.pods.create(bound_pod())
    seen = clock.now().timestamp()
    manager.on_add(pod)
    await wait_for(lambda: client.pods.objects["default/web"].status.phase == "Running")
    await wait_for(lambda: traces(caplog))

    (trace,) = traces(caplog)
    assert trace["pod"] == "default/web"
    assert trace["seen"] == pytest.approx(seen)
    assert trace["first_sync"] == pytest.approx(seen)
    assert trace["spans"] == [
        ["sandbox", pytest.approx(seen), pytest.approx(seen + 1.0)],
        ["start:app", pytest.approx(seen + 1.0), pytest.approx(seen + 1.5)],
    ]
    assert trace["status_sent"] == pytest.approx(seen + 1.5)
    assert trace["status_written"] == pytest.approx(seen + 1.5)
    assert observed == [pytest.approx(1.5)]

    # Later writes (the pod changes, the worker writes again) trace nothing more.
    updated = pod_pb2.Pod()
    updated.CopyFrom(client.pods.objects["default/web"])
    updated.metadata.labels["x"] = "y"
    updated = await client.pods.update(updated)
    manager.on_update(pod, updated)
    await clock.step(0)
    assert len(traces(caplog)) == 1 and len(observed) == 1
    await manager.stop()


async def test_a_pod_running_before_the_worker_started_is_not_traced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubelet.podstartup")
    clock = FakeClock()
    client = FakeClient(clock)
    observed: list[float] = []
    manager = PodManager(
        client,
        StagedRuntime(clock),
        {"n1"},
        lambda _n: "10.0.0.5",
        clock=clock,
        on_pod_started=observed.append,
    )
    made = bound_pod()
    made.status.phase = "Running"
    pod = await client.pods.create(made)
    manager.on_add(pod)
    await wait_for(lambda: client.pods.objects["default/web"].status.containerStatuses)
    await clock.step(0)
    assert traces(caplog) == [] and observed == []
    await manager.stop()


def test_trace_line_round_trip_and_foreign_lines() -> None:
    trace = StartupTrace("ns/p", 100.0)
    trace.sync_began(100.25)
    trace.sync_began(101.0)  # only the first sync counts
    trace.add([("sandbox", 100.5, 101.0)])
    line = "2026-12-06 01:26:06,979 INFO kubelet.podstartup: " + LINE_PREFIX
    line += json.dumps(trace.as_dict(101.5, 101.75))
    assert parse_line(line) == {
        "pod": "ns/p",
        "seen": 100.0,
        "first_sync": 100.25,
        "spans": [["sandbox", 100.5, 101.0]],
        "status_sent": 101.5,
        "status_written": 101.75,
    }
    assert parse_line("INFO kubelet.cri: pod ns/p container app started: 0123") is None
    assert parse_line(LINE_PREFIX + "{not json") is None


@pytest.mark.parametrize(
    ("method", "kind"),
    [
        ("/runtime.v1.RuntimeService/RunPodSandbox", "run_podsandbox"),
        ("/runtime.v1.RuntimeService/PodSandboxStatus", "podsandbox_status"),
        ("/runtime.v1.RuntimeService/ListPodSandbox", "list_podsandbox"),
        ("/runtime.v1.RuntimeService/CreateContainer", "create_container"),
        ("/runtime.v1.RuntimeService/ListContainerStats", "list_container_stats"),
        ("/runtime.v1.ImageService/ImageStatus", "image_status"),
        ("/runtime.v1.ImageService/PullImage", "pull_image"),
        ("/runtime.v1.RuntimeService/Status", "status"),
    ],
)
def test_operation_types_are_kubes(method: str, kind: str) -> None:
    assert operation_type(method) == kind


class CountingStatus:
    """A CRI RuntimeService whose Status answers NetworkReady after a while, counting calls."""

    def __init__(self, ready: bool = True) -> None:
        self.calls = 0
        self.ready = ready

    async def Status(self, request: cri.StatusRequest, **_: Any) -> cri.StatusResponse:
        self.calls += 1
        await asyncio.sleep(0.01)
        resp = cri.StatusResponse()
        resp.status.conditions.add(type="NetworkReady", status=self.ready, reason="NoCNIConfig")
        return resp


@pytest.mark.parametrize("ready", [True, False])
async def test_a_burst_of_new_pods_asks_the_runtime_for_its_network_once(
    tmp_path: Path, ready: bool
) -> None:
    runtime = CRIRuntime(tmp_path, "unix:///nonexistent.sock")
    fake = CountingStatus(ready)
    runtime._runtime, runtime._images = cast(Any, fake), cast(Any, object())
    answers = await asyncio.gather(*(runtime._network_not_ready() for _ in range(50)))
    assert fake.calls == 1
    assert set(answers) == ({""} if ready else {answers[0]}) and (answers[0] == "") == ready
    # A ready network is believed for a while; a network that is not is asked again.
    await runtime._network_not_ready()
    assert fake.calls == (1 if ready else 2)


def test_a_pod_that_never_runs_keeps_a_bounded_trace() -> None:
    trace = StartupTrace("ns/p", 0.0)
    for i in range(1000):
        trace.add([("sandbox", float(i), float(i) + 0.5)])
    assert len(trace.spans) == MAX_SPANS
    assert trace.spans[0] == ("sandbox", 0.0, 0.5)


async def test_timed_stub_reports_each_call_and_failures_too() -> None:
    class Stub:
        async def RunPodSandbox(self, request: str, **kwargs: Any) -> str:
            await asyncio.sleep(0.01)
            return f"sandbox for {request} {kwargs}"

        async def StartContainer(self, request: str, **kwargs: Any) -> str:
            raise RuntimeError("refused")

    seen: list[tuple[str, float]] = []
    stub = TimedStub(Stub(), lambda kind, seconds: seen.append((kind, seconds)))
    assert await stub.RunPodSandbox("p", timeout=5) == "sandbox for p {'timeout': 5}"
    with pytest.raises(RuntimeError):
        await stub.StartContainer("c")
    assert [kind for kind, _ in seen] == ["run_podsandbox", "start_container"]
    assert seen[0][1] >= 0.01
