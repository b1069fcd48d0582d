"""Watch semantics of the apiserver's watch cache against a real etcd, through raw stubs.

Resume without loss or repeats, OUT_OF_RANGE for revisions outside the window or compacted,
fan-out to many watchers over a single etcd watch per kind, server-side filtering with
Kubernetes' in/out-of-filter transitions, bookmarks, and slow watchers being cut off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from apiserver.app import APIServer
from apiserver.metrics import Metrics
from apiserver.storage import EtcdWatch, Storage
from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    bind_request,
    expect_error,
    make_node,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.kinds import ALL_KINDS
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2

pytestmark = pytest.mark.integration

Event = tuple[str, str, str]  # (type, name, resourceVersion)


async def read_events(call: Any, n: int, wait: float = 10.0) -> list[pod_pb2.PodWatchEvent]:
    """The next `n` events of a watch stream (fails if they do not come in time)."""
    out: list[pod_pb2.PodWatchEvent] = []
    while len(out) < n:
        msg = await asyncio.wait_for(call.read(), wait)
        assert msg is not grpc.aio.EOF, f"stream ended after {len(out)} events"
        if msg.type != "BOOKMARK":
            out.append(msg)
    return out


def summary(events: list[pod_pb2.PodWatchEvent]) -> list[Event]:
    return [(e.type, e.object.metadata.name, e.object.metadata.resourceVersion) for e in events]


async def create(stubs: Stubs, name: str, **labels: str) -> pod_pb2.Pod:
    return await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(name, **labels)))


async def relabel(stubs: Stubs, name: str, **labels: str) -> pod_pb2.Pod:
    pod = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name=name))
    pod.metadata.labels.clear()
    pod.metadata.labels.update(labels)
    return await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=pod))


async def delete(stubs: Stubs, name: str) -> None:
    await stubs.pods.Delete(
        meta_pb2.DeleteRequest(namespace="default", name=name, gracePeriodSeconds=0)
    )


async def test_watch_from_list_revision_streams_every_change(stubs: Stubs) -> None:
    await create(stubs, "before")
    listed = await stubs.pods.List(meta_pb2.ListRequest())
    call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=listed.metadata.resourceVersion))
    p1 = await create(stubs, "p1")
    p1b = await relabel(stubs, "p1", v="2")
    await delete(stubs, "p1")
    events = await read_events(call, 3)
    assert [(e.type, e.object.metadata.name) for e in events] == [
        ("ADDED", "p1"),
        ("MODIFIED", "p1"),
        ("DELETED", "p1"),
    ]
    assert events[0].object == p1
    assert events[1].object == p1b
    revs = [int(e.object.metadata.resourceVersion) for e in events]
    assert revs == sorted(revs) and len(set(revs)) == 3
    # The DELETED event carries the last state, stamped with the deletion revision.
    assert events[2].object.metadata.labels["v"] == "2"
    call.cancel()


async def test_watch_without_revision_starts_with_current_state(stubs: Stubs) -> None:
    for i in range(3):
        await create(stubs, f"p{i}")
    for rv in ("", "0"):
        call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=rv))
        initial = await read_events(call, 3)
        assert [(e.type, e.object.metadata.name) for e in initial] == [
            ("ADDED", "p0"),
            ("ADDED", "p1"),
            ("ADDED", "p2"),
        ]
        call.cancel()
    call = stubs.pods.Watch(meta_pb2.WatchRequest())
    await read_events(call, 3)
    await create(stubs, "p3")
    (live,) = await read_events(call, 1)
    assert (live.type, live.object.metadata.name) == ("ADDED", "p3")
    call.cancel()


async def test_watch_resume_after_dropped_stream_loses_and_repeats_nothing(stubs: Stubs) -> None:
    start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
    witness = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=start))
    call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=start))
    for i in range(5):
        await create(stubs, f"p{i}")
    seen = await read_events(call, 5)
    call.cancel()  # the stream drops
    for i in range(5):
        await relabel(stubs, f"p{i}", round="2")
    await delete(stubs, "p0")
    await create(stubs, "p5")
    resumed = stubs.pods.Watch(
        meta_pb2.WatchRequest(resourceVersion=seen[-1].object.metadata.resourceVersion)
    )
    seen += await read_events(resumed, 7)
    everything = await read_events(witness, 12)
    assert summary(seen) == summary(everything)
    assert len(set(summary(seen))) == 12
    # Nothing more is pending on the resumed stream.
    with pytest.raises(TimeoutError):
        await read_events(resumed, 1, wait=0.5)
    resumed.cancel()
    witness.cancel()


async def test_watch_older_than_window_is_out_of_range(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, watch_cache_size=5))
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        stubs = make_stubs(ch)
        first = await create(stubs, "p0")
        for i in range(1, 10):
            await create(stubs, f"p{i}")
        await stubs.pods.List(meta_pb2.ListRequest())  # the cache has caught up
        window_start = running.server.caches["Pod"].window_start
        rv = first.metadata.resourceVersion
        call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=rv))
        await expect_error(
            call.read(),
            grpc.StatusCode.OUT_OF_RANGE,
            f"too old resource version: {rv} ({window_start})",
        )
        # The most recent revisions are still served.
        recent = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=str(window_start)))
        events = await read_events(recent, 5)
        assert [e.object.metadata.name for e in events] == [f"p{i}" for i in range(5, 10)]
        recent.cancel()
    finally:
        await ch.close()
        await running.server.stop()


async def test_watch_from_compacted_revision_is_out_of_range(
    apiserver: RunningAPIServer, stubs: Stubs
) -> None:
    old = await create(stubs, "p0")
    await create(stubs, "p1")
    compacted_at = await apiserver.server.compact()
    call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=old.metadata.resourceVersion))
    details = await expect_error(call.read(), grpc.StatusCode.OUT_OF_RANGE)
    assert details.startswith(f"too old resource version: {old.metadata.resourceVersion} (")
    # A client that relists can watch again from the new list's revision.
    listed = await stubs.pods.List(meta_pb2.ListRequest())
    assert int(listed.metadata.resourceVersion) >= compacted_at
    call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=listed.metadata.resourceVersion))
    await create(stubs, "p2")
    (ev,) = await read_events(call, 1)
    assert ev.object.metadata.name == "p2"
    call.cancel()


async def test_200_watchers_see_the_same_ordered_events_over_one_etcd_watch(
    apiserver: RunningAPIServer, stubs: Stubs
) -> None:
    opened_before = apiserver.server.etcd_watches_opened()
    start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
    channels = [
        grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS))
        for _ in range(4)
    ]
    try:
        calls = [
            make_stubs(channels[i % 4]).pods.Watch(meta_pb2.WatchRequest(resourceVersion=start))
            for i in range(200)
        ]
        readers = [asyncio.create_task(read_events(c, 30, wait=30)) for c in calls]
        for i in range(10):
            await create(stubs, f"p{i}")
            await relabel(stubs, f"p{i}", v="1")
            await delete(stubs, f"p{i}")
        results = [summary(r) for r in await asyncio.gather(*readers)]
        assert len(results) == 200
        assert all(r == results[0] for r in results)
        assert [t for t, _, _ in results[0]] == ["ADDED", "MODIFIED", "DELETED"] * 10
        assert apiserver.server.caches["Pod"].watcher_count() == 200
        # One etcd watch per kind, opened once, whatever the number of client watches.
        assert apiserver.server.etcd_watch_count() == len(ALL_KINDS)
        assert apiserver.server.etcd_watches_opened() == opened_before
        for c in calls:
            c.cancel()
    finally:
        for ch in channels:
            await ch.close()


async def test_field_selector_watch_sees_pods_enter_and_leave(stubs: Stubs) -> None:
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
    on_n1 = stubs.pods.Watch(
        meta_pb2.WatchRequest(resourceVersion=start, fieldSelector="spec.nodeName=n1")
    )
    unassigned = stubs.pods.Watch(
        meta_pb2.WatchRequest(resourceVersion=start, fieldSelector="spec.nodeName=")
    )
    await create(stubs, "web")
    await create(stubs, "other")
    await stubs.pods.Bind(bind_request("web", "n1"))
    await delete(stubs, "web")
    got = summary(await read_events(on_n1, 2))
    assert [(t, n) for t, n, _ in got] == [("ADDED", "web"), ("DELETED", "web")]
    got = summary(await read_events(unassigned, 3))
    # Bound away from "unassigned": a DELETED event for that watcher.
    assert [(t, n) for t, n, _ in got] == [("ADDED", "web"), ("ADDED", "other"), ("DELETED", "web")]
    on_n1.cancel()
    unassigned.cancel()


async def test_label_selector_watch_transitions(stubs: Stubs) -> None:
    start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
    call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=start, labelSelector="app=web"))
    await create(stubs, "p", app="web")
    await relabel(stubs, "p", app="web", extra="1")
    moved_out = await relabel(stubs, "p", app="db")
    await relabel(stubs, "p", app="db", extra="2")  # invisible to this watcher
    moved_in = await relabel(stubs, "p", app="web")
    events = await read_events(call, 4)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED", "ADDED"]
    # Leaving the filter: the last state the watcher could see, at the new revision.
    assert events[2].object.metadata.labels["app"] == "web"
    assert events[2].object.metadata.resourceVersion == moved_out.metadata.resourceVersion
    assert events[3].object == moved_in
    call.cancel()


async def test_bookmarks_only_when_asked(stubs: Stubs) -> None:
    created = await create(stubs, "p")
    with_bm = stubs.pods.Watch(
        meta_pb2.WatchRequest(
            resourceVersion=created.metadata.resourceVersion, allowWatchBookmarks=True
        )
    )
    without = stubs.pods.Watch(
        meta_pb2.WatchRequest(resourceVersion=created.metadata.resourceVersion)
    )
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    # A bookmark names the revision the pod cache's state is complete at, which a quiet kind
    # learns from etcd's periodic progress notification (every 5 s; the first after the pod's
    # event may come two intervals later).
    msg = await asyncio.wait_for(with_bm.read(), 20)
    assert isinstance(msg, pod_pb2.PodWatchEvent)
    assert msg.type == "BOOKMARK"
    assert int(msg.object.metadata.resourceVersion) > int(created.metadata.resourceVersion)
    only_rv = pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(resourceVersion=msg.object.metadata.resourceVersion)
    )
    assert msg.object == only_rv
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(without.read(), 2.5)
    with_bm.cancel()
    without.cancel()


async def test_slow_watcher_is_cut_off_without_blocking_others(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, watcher_queue_size=5))
    ch_fast = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    # Without BDP probing the slow client's receive window stays at 64 KiB.
    ch_slow = grpc.aio.insecure_channel(
        running.address, options=[*CHANNEL_OPTIONS, ("grpc.http2.bdp_probe", 0)]
    )
    try:
        stubs = make_stubs(ch_fast)
        start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
        slow = make_stubs(ch_slow).pods.Watch(meta_pb2.WatchRequest(resourceVersion=start))
        fast = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=start))
        fast_reader = asyncio.create_task(read_events(fast, 60, wait=30))
        for i in range(60):
            pod = make_pod(f"p{i}")
            # Big objects fill the HTTP/2 flow-control window of the stream nobody reads.
            pod.metadata.annotations["blob"] = "x" * 50_000
            await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod))
        assert len(await fast_reader) == 60
        received = 0
        with pytest.raises(grpc.aio.AioRpcError) as info:
            while True:
                msg = await asyncio.wait_for(slow.read(), 10)
                assert msg is not grpc.aio.EOF
                received += 1
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too slow" in (info.value.details() or "")
        assert received < 60
        fast.cancel()
    finally:
        await ch_fast.close()
        await ch_slow.close()
        await running.server.stop()


async def eventually(check: Callable[[], bool], within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 (a condition of the apiserver's state, no event)
            await asyncio.sleep(0.05)


async def test_a_watch_stream_nobody_reads_ends_at_the_write_deadline(
    etcd_server: EtcdServer,
) -> None:
    """A client that opens a watch and never reads holds the apiserver's write (HTTP/2 flow
    control); past --write-timeout the stream ends and its watcher and queue are gone."""
    running = await start_apiserver(
        make_settings(etcd_server.endpoint, write_timeout_seconds=1.0, watch_batch_window_seconds=0)
    )
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    ch_slow = grpc.aio.insecure_channel(
        running.address, options=[*CHANNEL_OPTIONS, ("grpc.http2.bdp_probe", 0)]
    )
    cache = running.server.caches["Pod"]
    try:
        stubs = make_stubs(ch)
        start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
        slow = make_stubs(ch_slow).pods.WatchBatch(meta_pb2.WatchRequest(resourceVersion=start))
        await eventually(lambda: cache.watcher_count() == 1)
        for i in range(10):
            pod = make_pod(f"w{i}")
            pod.metadata.annotations["blob"] = "x" * 100_000  # past the 64 KiB window
            await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod))
        await eventually(lambda: cache.watcher_count() == 0)
        slow.cancel()
    finally:
        await ch.close()
        await ch_slow.close()
        await running.server.stop()


async def test_watch_argument_errors(stubs: Stubs) -> None:
    await expect_error(
        stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion="abc")).read(),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await expect_error(
        stubs.pods.Watch(meta_pb2.WatchRequest(labelSelector="a in (")).read(),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await expect_error(
        stubs.nodes.Watch(meta_pb2.WatchRequest(fieldSelector="spec.nodeName=x")).read(),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


class GatedStorage(Storage):
    """Storage whose new etcd watch streams wait for `gate`: lets a test make the cache miss
    events (and etcd compact them) between a broken watch and its resumption."""

    def __init__(self, endpoint: str) -> None:
        super().__init__([endpoint], timeout=5.0, metrics=Metrics())
        self.gate = asyncio.Event()
        self.gate.set()

    def watch(self, prefix: bytes, start_revision: int) -> EtcdWatch:
        inner = super().watch(prefix, start_revision)
        gate = self.gate
        original = inner.batches

        async def gated() -> AsyncIterator[tuple[list[Any], int, bool, bool]]:
            await gate.wait()
            async for batch in original():
                yield batch

        inner.batches = gated  # type: ignore[method-assign]
        return inner


async def test_compacted_resume_relists_and_ends_watchers_with_out_of_range(
    etcd_server: EtcdServer,
) -> None:
    settings = make_settings(etcd_server.endpoint)
    storage = GatedStorage(etcd_server.endpoint)
    server = APIServer(settings, storage=storage)
    await server.start()
    ch = grpc.aio.insecure_channel(server.address, options=list(CHANNEL_OPTIONS))
    try:
        stubs = make_stubs(ch)
        await create(stubs, "p0")
        start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
        call = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=start))
        cache = server.caches["Pod"]
        # Break the etcd watch and hold its resumption while etcd moves on and compacts.
        storage.gate.clear()
        assert cache._etcd_watch is not None
        cache._etcd_watch.cancel()
        for i in range(1, 4):
            await create(stubs, f"p{i}")
        await storage.compact(await storage.current_revision())
        storage.gate.set()
        details = await expect_error(call.read(), grpc.StatusCode.OUT_OF_RANGE)
        assert details.startswith("too old resource version")
        # Never skipped: the relisted cache has every object, and watches work again.
        listed = await stubs.pods.List(meta_pb2.ListRequest())
        assert [p.metadata.name for p in listed.items] == ["p0", "p1", "p2", "p3"]
        again = stubs.pods.Watch(
            meta_pb2.WatchRequest(resourceVersion=listed.metadata.resourceVersion)
        )
        await create(stubs, "p4")
        (ev,) = await read_events(again, 1)
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "p4")
        again.cancel()
    finally:
        await ch.close()
        await server.stop()


async def test_stop_ends_watches_with_unavailable(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, shutdown_grace_seconds=30))
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        call = make_stubs(ch).pods.Watch(meta_pb2.WatchRequest())
        await asyncio.sleep(0.2)
        await asyncio.wait_for(running.server.stop(), 10)  # does not wait out the 30 s grace
        details = await expect_error(call.read(), grpc.StatusCode.UNAVAILABLE)
        assert "shutting down" in details
    finally:
        await ch.close()


async def test_node_watch_by_name_is_indexed(apiserver: RunningAPIServer, stubs: Stubs) -> None:
    start = (await stubs.nodes.List(meta_pb2.ListRequest())).metadata.resourceVersion
    call = stubs.nodes.Watch(
        meta_pb2.WatchRequest(resourceVersion=start, fieldSelector="metadata.name=n1")
    )
    await asyncio.sleep(0.1)
    assert set(apiserver.server.caches["Node"]._indexed) == {"n1"}
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n2")))
    n1 = await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    n1.spec.unschedulable = True
    await stubs.nodes.Update(node_pb2.UpdateNodeRequest(node=n1))
    events = await read_events(call, 2)
    assert [(e.type, e.object.metadata.name) for e in events] == [
        ("ADDED", "n1"),
        ("MODIFIED", "n1"),
    ]
    listed = await stubs.nodes.List(meta_pb2.ListRequest(fieldSelector="metadata.name=n2"))
    assert [n.metadata.name for n in listed.items] == ["n2"]
    call.cancel()


async def read_batched(call: Any, n: int, wait: float = 10.0) -> tuple[list[Any], int]:
    """The next `n` non-bookmark events of a WatchBatch stream, and how many messages held them."""
    out: list[pod_pb2.PodWatchEvent] = []
    messages = 0
    while len(out) < n:
        msg = await asyncio.wait_for(call.read(), wait)
        assert msg is not grpc.aio.EOF, f"stream ended after {len(out)} events"
        assert len(msg.events) > 0, "a WatchBatch message without events"
        messages += 1
        out.extend(e for e in msg.events if e.type != "BOOKMARK")
    return out, messages


async def test_watch_batch_carries_exactly_what_watch_does(stubs: Stubs) -> None:
    start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
    plain = stubs.pods.Watch(meta_pb2.WatchRequest(resourceVersion=start))
    batched = stubs.pods.WatchBatch(meta_pb2.WatchRequest(resourceVersion=start))
    # 60 writes in flight at once: they reach the watch cache faster than one message is sent.
    await asyncio.gather(*(create(stubs, f"p{i}", app="web") for i in range(60)))
    await asyncio.gather(*(relabel(stubs, f"p{i}", app="db") for i in range(0, 60, 2)))
    await delete(stubs, "p1")
    expected = summary(await read_events(plain, 91))
    got, _messages = await read_batched(batched, 91)
    assert summary(got) == expected
    # Every event once, in resourceVersion order.
    assert len(set(expected)) == 91
    revs = [int(rv) for _, _, rv in expected]
    assert revs == sorted(revs)
    # Events that are already there when the watch starts (a replay of the window) go out
    # together: here all 91 in one message, byte for byte the objects Watch sends.
    replay = stubs.pods.WatchBatch(meta_pb2.WatchRequest(resourceVersion=start))
    again, replay_messages = await read_batched(replay, 91)
    assert replay_messages == 1
    assert [e.object for e in again] == [e.object for e in got]
    for c in (plain, batched, replay):
        c.cancel()


async def test_watch_batch_initial_state_filters_and_resume(stubs: Stubs) -> None:
    for i in range(5):
        await create(stubs, f"p{i}", app="web" if i % 2 == 0 else "db")
    call = stubs.pods.WatchBatch(meta_pb2.WatchRequest(labelSelector="app=web"))
    initial, messages = await read_batched(call, 3)
    assert [(e.type, e.object.metadata.name) for e in initial] == [
        ("ADDED", "p0"),
        ("ADDED", "p2"),
        ("ADDED", "p4"),
    ]
    assert messages == 1  # the current state is replayed in one message
    await relabel(stubs, "p2", app="db")  # leaves the filter: DELETED for this watcher
    await relabel(stubs, "p1", app="web")  # enters it: ADDED
    live, _ = await read_batched(call, 2)
    assert [(e.type, e.object.metadata.name) for e in live] == [("DELETED", "p2"), ("ADDED", "p1")]
    call.cancel()
    # Resume from the last resourceVersion received: nothing lost, nothing repeated.
    await relabel(stubs, "p4", app="web", v="2")
    resumed = stubs.pods.WatchBatch(
        meta_pb2.WatchRequest(
            labelSelector="app=web", resourceVersion=live[-1].object.metadata.resourceVersion
        )
    )
    (again,), _ = await read_batched(resumed, 1)
    assert (again.type, again.object.metadata.name) == ("MODIFIED", "p4")
    with pytest.raises(TimeoutError):
        await read_batched(resumed, 1, wait=0.5)
    resumed.cancel()


async def test_watch_batch_errors_like_watch(stubs: Stubs) -> None:
    call = stubs.pods.WatchBatch(meta_pb2.WatchRequest(fieldSelector="spec.bogus=x"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.bogus" in (info.value.details() or "")


async def test_watch_batch_window_groups_a_burst_and_sends_an_idle_event_at_once(
    etcd_server: EtcdServer,
) -> None:
    window = 2.0
    running = await start_apiserver(
        make_settings(etcd_server.endpoint, watch_batch_window_seconds=window)
    )
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    loop = asyncio.get_running_loop()
    try:
        stubs = make_stubs(ch)
        call = stubs.pods.WatchBatch(meta_pb2.WatchRequest())
        await create(stubs, "first")
        (first,), _ = await read_batched(call, 1)  # an idle watcher's event: at once
        assert first.object.metadata.name == "first"
        began = loop.time()
        await asyncio.gather(*(create(stubs, f"burst-{i}") for i in range(30)))
        burst_took = loop.time() - began
        burst, messages = await read_batched(call, 30)
        assert sorted(e.object.metadata.name for e in burst) == sorted(
            f"burst-{i}" for i in range(30)
        )
        # At most one message per window while busy: 30 events, a handful of messages.
        assert messages <= 2 + int(burst_took / window), (messages, burst_took)
        # Idle again (more than a window since the last message): no wait at all.
        await asyncio.sleep(window * 1.2)
        sent = loop.time()
        await create(stubs, "later")
        (later,), _ = await read_batched(call, 1)
        assert later.object.metadata.name == "later"
        assert loop.time() - sent < window / 2
        call.cancel()
    finally:
        await ch.close()
        await running.server.stop()
