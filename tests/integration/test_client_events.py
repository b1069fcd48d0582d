"""EventRecorder against the real apiserver: identical events become one Event with a count."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.conftest import RunningAPIServer
from tests.integration.test_client_support import make_node, make_pod
from tinykube.client import Client
from tinykube.events import EventRecorder

pytestmark = pytest.mark.integration


async def test_recorder_dedupes_and_counts(apiserver: RunningAPIServer) -> None:
    async with Client(apiserver.address) as client:
        pod = await client.pods.create(make_pod("web"))
        node = await client.nodes.create(make_node("n1"))
        recorder = EventRecorder(client, "tinykube-scheduler", "host-a")
        message = "0/1 nodes are available: 1 Insufficient cpu."
        await recorder.record(pod, "Warning", "FailedScheduling", message)
        await recorder.record(pod, "Warning", "FailedScheduling", message)
        await asyncio.gather(
            *(recorder.record(pod, "Warning", "FailedScheduling", message) for _ in range(3))
        )
        await recorder.record(pod, "Normal", "Scheduled", "Successfully assigned default/web to n1")
        await recorder.record(node, "Normal", "NodeReady", "Node n1 status is now: NodeReady")
        # A second process (fresh recorder, empty cache) bumps the same Event.
        await EventRecorder(client, "tinykube-scheduler", "host-a").record(
            pod, "Warning", "FailedScheduling", message
        )
        assert recorder.failures == 0

        events = (await client.events.list("default")).items
        by_reason = {e.reason: e for e in events}
        assert sorted(by_reason) == ["FailedScheduling", "NodeReady", "Scheduled"]
        assert len(events) == 3
        failed = by_reason["FailedScheduling"]
        assert failed.count == 6
        assert failed.type == "Warning"
        assert failed.message == message
        assert failed.involvedObject.kind == "Pod"
        assert failed.involvedObject.name == "web"
        assert failed.involvedObject.uid == pod.metadata.uid
        assert failed.source.component == "tinykube-scheduler"
        assert failed.source.host == "host-a"
        assert failed.metadata.name.startswith("web.")
        # Event times are whole seconds (metav1.Time), so the six recordings may share one.
        assert failed.lastTimestamp.ToDatetime() >= failed.firstTimestamp.ToDatetime()
        assert failed.lastTimestamp.nanos == failed.firstTimestamp.nanos == 0
        assert by_reason["Scheduled"].count == 1
        assert by_reason["NodeReady"].involvedObject.kind == "Node"


async def test_recorder_never_raises_when_the_apiserver_is_gone() -> None:
    async with Client("127.0.0.1:1", timeout=0.5, retries=1) as nowhere:
        recorder = EventRecorder(nowhere, "c")
        await recorder.record(make_pod("x"), "Normal", "Tick", "t")
        assert recorder.failures == 1
