"""EventRecorder with an in-memory Events API: dedupe into counts, never raises, namespaces."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from tinykube.clock import FakeClock
from tinykube.errors import (
    AlreadyExistsError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnavailableError,
)
from tinykube.events import EventRecorder
from tinykube.v1 import event_pb2, meta_pb2, node_pb2, pod_pb2


class FakeEvents:
    def __init__(self) -> None:
        self.items: dict[str, event_pb2.Event] = {}
        self.rev = 0
        self.down = False
        self.may_read = True  # False: a kubelet's rights (create, update, no get)
        self.calls: list[str] = []

    def _stamp(self, ev: event_pb2.Event) -> event_pb2.Event:
        self.rev += 1
        stored = event_pb2.Event()
        stored.CopyFrom(ev)
        stored.metadata.resourceVersion = str(self.rev)
        self.items[f"{ev.metadata.namespace}/{ev.metadata.name}"] = stored
        out = event_pb2.Event()
        out.CopyFrom(stored)
        return out

    async def get(self, name: str, namespace: str = "") -> event_pb2.Event:
        self.calls.append("get")
        if self.down:
            raise UnavailableError("down")
        if not self.may_read:
            raise ForbiddenError("events is forbidden")
        if f"{namespace}/{name}" not in self.items:
            raise NotFoundError("not found")
        out = event_pb2.Event()
        out.CopyFrom(self.items[f"{namespace}/{name}"])
        return out

    async def create(self, obj: event_pb2.Event) -> event_pb2.Event:
        self.calls.append("create")
        await asyncio.sleep(0)
        if self.down:
            raise UnavailableError("down")
        if f"{obj.metadata.namespace}/{obj.metadata.name}" in self.items:
            raise AlreadyExistsError("exists")
        return self._stamp(obj)

    async def update(self, obj: event_pb2.Event) -> event_pb2.Event:
        self.calls.append("update")
        await asyncio.sleep(0)
        if self.down:
            raise UnavailableError("down")
        key = f"{obj.metadata.namespace}/{obj.metadata.name}"
        if key not in self.items:
            raise NotFoundError("not found")
        rv = obj.metadata.resourceVersion
        if rv and self.items[key].metadata.resourceVersion != rv:
            raise ConflictError("modified")
        return self._stamp(obj)


class FakeClient:
    def __init__(self) -> None:
        self.events = FakeEvents()


def web() -> pod_pb2.Pod:
    return pod_pb2.Pod(
        kind="Pod", metadata=meta_pb2.ObjectMeta(name="web", namespace="default", uid="u1")
    )


async def test_same_event_is_counted_not_duplicated() -> None:
    client, clock = FakeClient(), FakeClock()
    rec = EventRecorder(client, "tinykube-scheduler", "host-1", clock=clock)
    await rec.record(web(), "Warning", "FailedScheduling", "0/1 nodes are available")
    clock.advance(30)
    await rec.record(web(), "Warning", "FailedScheduling", "0/1 nodes are available")
    await rec.record(web(), "Normal", "Scheduled", "Successfully assigned default/web to n1")
    assert len(client.events.items) == 2
    failed = next(e for e in client.events.items.values() if e.reason == "FailedScheduling")
    assert failed.count == 2
    assert failed.metadata.name.startswith("web.")
    assert failed.lastTimestamp.ToDatetime() - failed.firstTimestamp.ToDatetime() == timedelta(
        seconds=30
    )
    assert failed.involvedObject.kind == "Pod"
    assert failed.involvedObject.uid == "u1"
    assert failed.source.component == "tinykube-scheduler"
    assert failed.source.host == "host-1"
    assert failed.type == "Warning"


async def test_bumps_an_event_written_by_an_earlier_process() -> None:
    client = FakeClient()
    await EventRecorder(client, "c").record(web(), "Normal", "Pulled", "ok")
    fresh = EventRecorder(client, "c")  # empty cache: create fails, falls back to get+update
    await fresh.record(web(), "Normal", "Pulled", "ok")
    (event,) = client.events.items.values()
    assert event.count == 2


async def test_a_writer_that_may_not_read_events_still_bumps_one() -> None:
    client = FakeClient()
    await EventRecorder(client, "kubelet").record(web(), "Normal", "Pulled", "ok")
    client.events.may_read = False
    fresh = EventRecorder(client, "kubelet")  # create fails, get is forbidden: update blindly
    await fresh.record(web(), "Normal", "Pulled", "ok")
    (event,) = client.events.items.values()
    assert event.count == 2
    assert client.events.calls[-3:] == ["create", "get", "update"]


async def test_concurrent_identical_records_all_counted() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c")
    await asyncio.gather(*(rec.record(web(), "Normal", "Tick", "same") for _ in range(10)))
    (event,) = client.events.items.values()
    assert event.count == 10


async def test_failures_are_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    client = FakeClient()
    client.events.down = True
    rec = EventRecorder(client, "c")
    await rec.record(web(), "Warning", "Oops", "x")
    assert rec.failures == 1
    assert "could not record event" in caplog.text


async def test_cluster_scoped_objects_get_events_in_default() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "kubelet")
    node = node_pb2.Node(metadata=meta_pb2.ObjectMeta(name="n1"))
    await rec.record(node, "Normal", "NodeReady", "Node n1 status is now: NodeReady")
    (event,) = client.events.items.values()
    assert event.metadata.namespace == "default"
    assert event.involvedObject.kind == "Node"  # from the message type when kind is unset


async def test_emit_runs_in_background_and_flush_waits() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c", max_concurrency=2)
    for i in range(5):
        rec.emit(web(), "Normal", "Tick", f"message {i}")
    await rec.flush()
    assert len(client.events.items) == 5
