"""The watch cache's in-memory logic, driven by hand-made etcd events (no etcd, no sockets).

Window replay and OUT_OF_RANGE, filter transitions, watcher indexing by spec.nodeName, slow
watchers, and the wire encoding of events and lists.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from apiserver import watchcache
from apiserver.metrics import Metrics
from apiserver.registry import INDEX_FIELD, fields_of
from apiserver.storage import EVENT_DELETE, EVENT_PUT, WatchEvent
from apiserver.watchcache import (
    Codec,
    WatchCache,
    Watcher,
    batch_messages,
    encode_event,
    encode_list,
)
from tinykube.clock import FakeClock
from tinykube.errors import ResourceExhaustedError, ResourceExpiredError, UnavailableError
from tinykube.meta import get_continue
from tinykube.selectors import (
    EVERYTHING,
    FIELD_EVERYTHING,
    parse_field_selector,
    parse_label_selector,
)
from tinykube.v1 import meta_pb2, pod_pb2

PREFIX = b"/registry/pods/"


def make_cache(window: int = 100, queue: int = 100, queue_bytes: int = 0) -> WatchCache:
    cache = WatchCache(
        kind="Pod",
        prefix=PREFIX,
        codec=Codec(pod_pb2.Pod, True, fields_of("Pod")),
        storage=None,  # type: ignore[arg-type]  # nothing here talks to etcd
        metrics=Metrics(),
        window_size=window,
        watcher_queue_size=queue,
        watcher_queue_bytes=queue_bytes,
        bookmark_interval=60,
        wait_timeout=0.1,
        index_field=INDEX_FIELD["Pod"],
    )
    cache.synced.set()
    return cache


def put(name: str, revision: int, node: str = "", **labels: str) -> WatchEvent:
    pod = pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="default", labels=labels),
        spec=pod_pb2.PodSpec(nodeName=node),
    )
    return WatchEvent(
        EVENT_PUT, PREFIX + f"default/{name}".encode(), pod.SerializeToString(), revision
    )


def delete(name: str, revision: int) -> WatchEvent:
    return WatchEvent(EVENT_DELETE, PREFIX + f"default/{name}".encode(), b"", revision)


def decode(data: list[tuple[bytes, int]]) -> list[tuple[str, str, str]]:
    out = []
    for raw, _revision in data:
        ev = pod_pb2.PodWatchEvent.FromString(raw)
        out.append((ev.type, ev.object.metadata.name, ev.object.metadata.resourceVersion))
    return out


def queued(watcher: Any) -> list[tuple[str, str, str]]:
    items = list(watcher._queue)
    watcher._queue.clear()
    return decode(items)


async def test_replay_from_revision_then_live() -> None:
    cache = make_cache()
    cache._apply([put("a", 10), put("b", 11), put("a", 12, v="2"), delete("b", 13)])
    w, initial = await cache.watch(resource_version=11)
    assert decode(initial) == [("MODIFIED", "a", "12"), ("DELETED", "b", "13")]
    cache._apply([put("c", 14)])
    assert queued(w) == [("ADDED", "c", "14")]
    _, initial2 = await cache.watch(resource_version=None)
    assert decode(initial2) == [("ADDED", "a", "12"), ("ADDED", "c", "14")]
    assert cache.watcher_count() == 2


async def test_window_eviction_makes_old_revisions_too_old() -> None:
    cache = make_cache(window=3)
    cache.window_start = 9
    cache._apply([put(f"p{i}", 10 + i) for i in range(5)])  # revisions 10..14
    assert cache.window_start == 11
    with pytest.raises(ResourceExpiredError) as info:
        await cache.watch(resource_version=10)
    assert info.value.message == "too old resource version: 10 (11)"
    _, initial = await cache.watch(resource_version=11)
    assert [n for _, n, _ in decode(initial)] == ["p2", "p3", "p4"]
    cache.trim_below(13)
    with pytest.raises(ResourceExpiredError):
        await cache.watch(resource_version=12)


def put_big(name: str, revision: int, annotation_bytes: int) -> WatchEvent:
    pod = pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(
            name=name, namespace="default", annotations={"big": "x" * annotation_bytes}
        )
    )
    return WatchEvent(
        EVENT_PUT, PREFIX + f"default/{name}".encode(), pod.SerializeToString(), revision
    )


# One event's bytes as the cache counts them: the object serialized with its resourceVersion
# (every event below has the same size: same name length, same revision digits).
BIG = 10_000
BIG_EVENT = len(
    Codec(pod_pb2.Pod, True, fields_of("Pod")).decode(b"k", put_big("p0", 10, BIG).value, 10).data
)


@pytest.mark.parametrize(
    ("count", "limit", "kept"),
    [
        (100, 0, ["p0", "p1", "p2", "p3", "p4"]),  # no byte bound
        (100, 3 * BIG_EVENT, ["p2", "p3", "p4"]),  # exactly three fit
        (100, 3 * BIG_EVENT - 1, ["p3", "p4"]),
        (100, BIG_EVENT // 2, ["p4"]),  # the newest event stays even when over alone
        (2, 100 * BIG_EVENT, ["p3", "p4"]),  # the count bound still applies
    ],
)
async def test_window_byte_bound_evicts_oldest(count: int, limit: int, kept: list[str]) -> None:
    cache = make_cache(window=count)
    cache.window_bytes = limit
    cache.window_start = 9
    cache._apply([put_big(f"p{i}", 10 + i, BIG) for i in range(5)])  # revisions 10..14
    assert [e.cur.obj.metadata.name for e in cache.window] == kept  # type: ignore[attr-defined]
    assert cache.window_used == len(kept) * BIG_EVENT
    first = 10 + int(kept[0][1:])
    assert cache.window_start == max(first - 1, 9)
    if first > 10:
        too_old = first - 2
        with pytest.raises(ResourceExpiredError) as info:
            await cache.watch(resource_version=too_old)
        assert info.value.message == f"too old resource version: {too_old} ({first - 1})"
    _, initial = await cache.watch(resource_version=first - 1)
    assert [n for _, n, _ in decode(initial)] == kept
    cache.trim_below(14)
    assert cache.window_used == 0 and not cache.window


async def test_window_byte_bound_counts_the_encodings_made_for_watchers() -> None:
    cache = make_cache()
    cache.window_bytes = 6 * BIG_EVENT  # six objects' bytes, or three with their event bytes
    w, _ = await cache.watch(resource_version=0)  # a gRPC watcher: each event gets encoded
    cache._apply([put_big(f"p{i}", 10 + i, BIG) for i in range(5)])
    assert [e.cur.obj.metadata.name for e in cache.window] == ["p3", "p4"]  # type: ignore[attr-defined]
    assert cache.window_used == sum(e.resident() for e in cache.window) <= 6 * BIG_EVENT
    assert len(await w.drain()) == 5  # the watcher still got every event
    cache.trim_below(14)
    assert cache.window_used == 0


async def test_label_filter_transitions() -> None:
    cache = make_cache()
    w, _ = await cache.watch(labels=parse_label_selector("app=web"), resource_version=0)
    cache._apply(
        [
            put("p", 10, app="web"),
            put("p", 11, app="web", x="1"),
            put("p", 12, app="db"),
            put("p", 13, app="db", x="2"),
            put("p", 14, app="web"),
            delete("p", 15),
        ]
    )
    events = list(w._queue)
    assert decode(events) == [
        ("ADDED", "p", "10"),
        ("MODIFIED", "p", "11"),
        ("DELETED", "p", "12"),
        ("ADDED", "p", "14"),
        ("DELETED", "p", "15"),
    ]
    # Leaving the filter shows the last state the watcher could see.
    left = pod_pb2.PodWatchEvent.FromString(events[2][0])
    assert left.object.metadata.labels["app"] == "web"


async def test_watchers_indexed_by_node_only_see_their_pods() -> None:
    cache = make_cache()
    on_n1, _ = await cache.watch(
        fields=parse_field_selector("spec.nodeName=n1"), resource_version=0
    )
    on_n2, _ = await cache.watch(
        fields=parse_field_selector("spec.nodeName=n2"), resource_version=0
    )
    everyone, _ = await cache.watch(resource_version=0)
    assert set(cache._indexed) == {"n1", "n2"}
    cache._apply([put("a", 10), put("a", 11, node="n1"), put("b", 12, node="n2"), delete("a", 13)])
    assert queued(on_n1) == [("ADDED", "a", "11"), ("DELETED", "a", "13")]
    assert queued(on_n2) == [("ADDED", "b", "12")]
    assert len(queued(everyone)) == 4
    assert [
        o.key
        for o in cache.snapshot(
            "", parse_label_selector(""), parse_field_selector("spec.nodeName=n2")
        )
    ] == [PREFIX + b"default/b"]
    cache.unregister(on_n1)
    assert set(cache._indexed) == {"n2"}


async def test_slow_watcher_is_closed_with_resource_exhausted() -> None:
    cache = make_cache(queue=3)
    slow, _ = await cache.watch(resource_version=0)
    fast, _ = await cache.watch(resource_version=0)
    cache._apply([put(f"p{i}", 10 + i) for i in range(3)])
    assert len(await fast.drain()) == 3
    cache._apply([put("p9", 20)])
    assert len(await fast.drain()) == 1
    assert slow.closed
    # What was queued is dropped with it (kube's cacheWatcher): the error comes next, and the
    # client resumes from the last resourceVersion it received.
    assert not slow._queue
    with pytest.raises(ResourceExhaustedError) as info:
        await slow.drain()
    assert "too slow" in info.value.message


async def test_watcher_over_its_byte_bound_is_dropped_and_its_queue_freed() -> None:
    probe = make_cache()
    w, _ = await probe.watch(resource_version=0)
    probe._apply([put("p0", 10)])
    one = len((await w.drain())[0])  # one encoded event
    cache = make_cache(queue=1000, queue_bytes=3 * one + one // 2)
    slow, _ = await cache.watch(resource_version=0)
    fast, _ = await cache.watch(resource_version=0)
    cache._apply([put(f"p{i}", 10 + i) for i in range(3)])
    assert len(await fast.drain()) == 3
    assert not slow.closed and slow._queued_bytes == 3 * one
    cache._apply([put("p3", 20)])
    assert slow.closed and not slow._queue and slow._queued_bytes == 0
    assert len(await fast.drain()) == 1
    with pytest.raises(ResourceExhaustedError) as info:
        await slow.drain()
    assert "too slow" in info.value.message and "bytes queued" in info.value.message


async def test_one_event_over_the_byte_bound_is_still_delivered() -> None:
    cache = make_cache(queue_bytes=10)
    w, _ = await cache.watch(resource_version=0)
    cache._apply([put("big", 10)])
    assert not w.closed
    assert len(await w.drain()) == 1


async def test_drain_waits_for_events() -> None:
    cache = make_cache()
    w, _ = await cache.watch(resource_version=0)
    task = asyncio.create_task(w.drain_events())
    await asyncio.sleep(0)
    assert not task.done()
    cache._apply([put("a", 10)])
    assert decode(await task) == [("ADDED", "a", "10")]
    w.close()
    assert await w.drain() == []


def test_wire_encoding_matches_protobuf() -> None:
    pod = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name="a" * 300, resourceVersion="7"))
    data = pod.SerializeToString()
    assert encode_event("MODIFIED", data) == (
        pod_pb2.PodWatchEvent(type="MODIFIED", object=pod).SerializeToString()
    )
    listed = pod_pb2.PodList.FromString(encode_list("42", [data, data], "tok"))
    assert listed.metadata.resourceVersion == "42"
    assert get_continue(listed.metadata) == "tok"
    assert list(listed.items) == [pod, pod]


def test_batch_messages_decode_as_the_kinds_event_batch_and_split_between_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = []
    for i in range(10):
        pod = pod_pb2.Pod()
        pod.metadata.name = f"p{i}"
        pod.metadata.annotations["pad"] = "x" * (100 + 37 * i)  # sizes across a varint byte
        pod.metadata.resourceVersion = str(100 + i)
        events.append(encode_event("ADDED", pod.SerializeToString()))
    assert batch_messages([]) == []
    queued = [(e, 100 + i) for i, e in enumerate(events)]
    (one,) = batch_messages(queued)
    decoded = pod_pb2.PodWatchEventBatch.FromString(one)
    assert [e.object.metadata.name for e in decoded.events] == [f"p{i}" for i in range(10)]
    assert [e.SerializeToString() for e in decoded.events] == events
    # Over the size limit a new message starts; no event is ever cut in two.
    monkeypatch.setattr(watchcache, "MAX_BATCH_BYTES", 1000)
    messages = batch_messages(queued)
    assert len(messages) > 1
    names = [
        e.object.metadata.name
        for m in messages
        for e in pod_pb2.PodWatchEventBatch.FromString(m).events
    ]
    assert names == [f"p{i}" for i in range(10)]
    for m in messages:
        batch = pod_pb2.PodWatchEventBatch.FromString(m)
        assert len(m) <= 1000 or len(batch.events) == 1


def test_batch_messages_never_split_one_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchcache, "MAX_BATCH_BYTES", 300)
    # Three objects written in one etcd txn (revision 7), then one at 8.
    pod = pod_pb2.Pod()
    pod.metadata.annotations["pad"] = "x" * 200
    queued = [(encode_event("ADDED", pod.SerializeToString()), rev) for rev in (7, 7, 7, 8)]
    messages = batch_messages(queued)
    sizes = [len(pod_pb2.PodWatchEventBatch.FromString(m).events) for m in messages]
    assert sizes == [3, 1]


def test_overflow_never_leaves_part_of_a_revision_queued() -> None:
    cache = make_cache(queue=4)
    w = Watcher(
        namespace="",
        labels=parse_label_selector(""),
        fields=parse_field_selector(""),
        bookmarks=False,
        max_queue=4,
    )
    cache._register(w)
    cache._apply([put("a", 5), put("b", 6)])
    # One etcd transaction wrote three objects at revision 7: the queue overflows at the third.
    cache._apply([put("c", 7), put("d", 7), put("e", 7)])
    assert w.closed and isinstance(w.error, ResourceExhaustedError)
    # Nothing of revision 7 stays queued (nothing at all: a dropped watcher's queue is freed).
    assert not w._queue


class ScriptedWatch:
    """An etcd watch that yields a fixed script of (events, header revision, created[,
    ordered]) (a progress notification is a requested one unless `ordered` says otherwise)."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script

    async def batches(self) -> Any:
        for item in self.script:
            if isinstance(item, Exception):
                raise item
            yield item if len(item) == 4 else (*item, False)

    def request_progress(self) -> None:
        pass

    def cancel(self) -> None:
        pass


class ScriptedStorage:
    def __init__(self, script: list[Any]) -> None:
        self.script = script

    def watch(self, prefix: bytes, revision: int) -> ScriptedWatch:
        return ScriptedWatch(self.script)


@pytest.mark.parametrize(
    ("script", "revision", "covered_to"),
    [
        # etcd 3.5.1 may send a progress notification for revision 20 while the pod written at
        # 15 is still in flight: the cache's revision moves, the state is not known to cover it.
        ([([], 12, True), ([], 20, False)], 20, 12),
        # the event arrives: now the state holds everything up to its revision
        ([([], 12, True), ([], 20, False), ([put("late", 15)], 20, False)], 20, 15),
        # progress first, then events past it: covered to the last event
        ([([], 12, True), ([put("a", 21), put("b", 22)], 22, False)], 22, 22),
    ],
)
async def test_progress_ahead_of_events_is_not_coverage(
    script: list[tuple[list[WatchEvent], int, bool]], revision: int, covered_to: int
) -> None:
    cache = make_cache()
    cache.storage = ScriptedStorage(script)  # type: ignore[assignment]
    cache.revision = cache.event_revision = cache.window_start = 12  # as after a relist at 12
    await cache._watch_once()
    assert cache.revision == revision
    assert cache.event_revision == covered_to
    assert cache.state_covers(covered_to)
    assert cache.state_covers(revision) == (covered_to >= revision)


class KilledMemberStorage:
    """etcd whose watch history is `history` (etcd at `head` when the first watch starts): the
    first watch stream answers the cache's progress request with `head` at once, ahead of the
    events still queued behind it (etcd 3.5.1 does), then breaks (its member was SIGKILLed);
    every later stream replays the history from its start revision. Records each start."""

    def __init__(self, history: list[WatchEvent], head: int) -> None:
        self.history = history
        self.head = head
        self.starts: list[int] = []

    def watch(self, prefix: bytes, revision: int) -> ScriptedWatch:
        self.starts.append(revision)
        if len(self.starts) == 1:
            lost = UnavailableError("etcd is unavailable: UNAVAILABLE: Socket closed")
            return ScriptedWatch([([], revision - 1, True), ([], self.head, False), lost])
        replay = [e for e in self.history if e.revision >= revision]
        return ScriptedWatch([([], self.history[-1].revision, True), (replay, 0, False)])


async def test_a_watch_broken_after_a_progress_ahead_of_its_events_resumes_before_them() -> None:
    """The HA e2e test's flake: a pod created while the cache's etcd member was killed must
    not be skipped by the resumed watch, nor missing from a consistent List the cache answers
    afterwards (once later events show the state current)."""
    cache = make_cache()
    storage = KilledMemberStorage([put("late", 15), put("after", 21)], head=20)
    cache.storage = storage  # type: ignore[assignment]
    cache._apply([put("early", 12)])
    cache.window_start = 11
    with pytest.raises(UnavailableError):
        await cache._watch_once()
    assert (cache.revision, cache.event_revision) == (20, 12)
    await cache._watch_once()
    assert storage.starts == [13, 13]
    assert cache.state_covers(21)
    names = [o.obj.metadata.name for o in cache.snapshot("default", EVERYTHING, FIELD_EVERYTHING)]  # type: ignore[attr-defined]
    assert names == ["after", "early", "late"]


async def test_an_ordered_progress_notification_is_coverage_and_moves_the_resume_point() -> None:
    """etcd's periodic progress notification comes after the watch's events: the state covers
    its revision, and a watch broken after it resumes from there (a quiet kind does not replay
    history from its last event)."""
    cache = make_cache()
    storage = KilledMemberStorage([put("after", 31)], head=0)
    cache.storage = ScriptedStorage(  # type: ignore[assignment]
        [([], 12, True), ([], 30, False, True), UnavailableError("etcd is unavailable")]
    )
    cache.revision = cache.event_revision = cache.window_start = 12
    with pytest.raises(UnavailableError):
        await cache._watch_once()
    assert cache.event_revision == 30 and cache.state_covers(30)
    storage.starts.append(0)  # as if it had served the first stream
    cache.storage = storage  # type: ignore[assignment]
    await cache._watch_once()
    assert storage.starts == [0, 31]
    assert cache.event_revision == 31


# ---- what a cached object keeps ---------------------------------------------------------------


async def test_decoded_message_kept_only_while_recent() -> None:
    cache = make_cache(window=10)
    cache.codec.decoded_kept = 2
    cache._apply([put("a", 10, app="web"), put("b", 11), put("c", 12)])
    a = cache.state[PREFIX + b"default/a"]
    c = cache.state[PREFIX + b"default/c"]
    # Three decoded, two kept: the oldest gave its message back, its bytes stay.
    assert a._obj is None and c._obj is not None
    pod = a.obj
    assert isinstance(pod, pod_pb2.Pod)
    assert (pod.metadata.name, pod.metadata.resourceVersion) == ("a", "10")
    assert dict(pod.metadata.labels) == {"app": "web"}
    assert a.obj is pod  # decoded again, it is among the recent ones for a while
    # A deletion event's last state is made from the bytes too.
    cache._apply([delete("a", 13)])
    gone = cache.window[-1].cur.obj
    assert isinstance(gone, pod_pb2.Pod)
    assert (gone.metadata.name, gone.metadata.resourceVersion) == ("a", "13")


async def test_label_sets_and_field_names_shared() -> None:
    cache = make_cache()
    cache._apply([put("a", 10, "n1", app="web"), put("b", 11, "n1", app="web"), put("c", 12)])
    a, b, c = (cache.state[PREFIX + f"default/{n}".encode()] for n in "abc")
    assert a.labels == {"app": "web"} and a.labels is b.labels
    assert c.labels == {}
    fields = a.fields
    assert fields["spec.nodeName"] == "n1" and fields.get("metadata.name") == "a"
    assert fields.get("no.such.field") is None and fields.get("no.such.field", "") == ""
    assert "status.phase" in fields and "no.such.field" not in fields
    assert dict(fields)["metadata.namespace"] == "default"
    assert a.fields._index is c.fields._index  # type: ignore[attr-defined]
    assert a.fields["spec.nodeName"] is b.fields["spec.nodeName"]  # interned
    with pytest.raises(KeyError):
        fields["no.such.field"]
    # Selectors and the node index read them as before.
    assert parse_field_selector("spec.nodeName=n1").matches(fields)
    web = parse_label_selector("app=web")
    assert [o.key for o in cache.snapshot("", web, FIELD_EVERYTHING)] == [
        PREFIX + b"default/a",
        PREFIX + b"default/b",
    ]


async def test_lists_and_bookmarks_report_the_revision_the_state_is_complete_at() -> None:
    """A requested progress notification (etcd < 3.5.8) may name revision 20 while the pod
    written at 15 is still in flight. A List from the cache that reported 20 would send the
    informer's watch from 20, and the pod at 15 would never reach it: the List and the
    bookmarks report 12 until the event arrives, and admission's memos see the state move."""
    cache = make_cache()
    cache.storage = ScriptedStorage([([], 12, True), ([], 20, False)])  # type: ignore[assignment]
    cache.revision = cache.event_revision = cache.window_start = 12
    await cache._watch_once()
    assert (cache.revision, cache.state_revision) == (20, 12)
    cache.synced.set()
    w, _ = await cache.watch(resource_version=None, bookmarks=True)
    assert w.last_revision == 12
    cache.storage = ScriptedStorage([([put("late", 15)], 20, False)])  # type: ignore[assignment]
    await cache._watch_once()
    assert (cache.revision, cache.state_revision) == (20, 15)


async def test_a_watch_registering_after_shut_down_ends_at_once() -> None:
    """A watch still waiting for the cache (a consistent start) when the apiserver stopped
    must not register afterwards: its RPC would hold the server's graceful stop."""
    cache = make_cache()
    cache.synced.set()
    live, _ = await cache.watch(resource_version=None)
    cache.shut_down(UnavailableError("watch closed: the apiserver is shutting down"))
    assert live.closed and isinstance(live.error, UnavailableError)
    with pytest.raises(UnavailableError, match="shutting down"):
        await cache.watch(resource_version=None)


async def test_bookmarks_follow_kubes_schedule_a_minute_apart_and_before_the_deadline() -> None:
    """kube-apiserver's cacheWatcher: a watch that asks for bookmarks gets one about a minute
    after it started and every minute after, and one 2 s before its own deadline if that
    comes first; none once that moment has passed, and none while its revision is current."""
    clock = FakeClock()
    cache = make_cache()
    cache.clock = clock
    cache.revision = cache.event_revision = 10
    quiet, _ = await cache.watch(resource_version=None, bookmarks=True)
    ending, _ = await cache.watch(resource_version=None, bookmarks=True, ends_in=30)
    never, _ = await cache.watch(resource_version=None, bookmarks=False)
    cache.event_revision = 11  # etcd's progress moved the state on
    clock.advance(28)
    cache.send_due_bookmarks()
    assert (quiet.take_events(), never.take_events()) == ([], [])
    assert [rev for _, rev in ending.take_events()] == [11]
    clock.advance(32)
    cache.event_revision = 12
    cache.send_due_bookmarks()
    assert [rev for _, rev in quiet.take_events()] == [12]
    assert ending.take_events() == []  # its last bookmark was the one before the deadline
    clock.advance(60)
    cache.send_due_bookmarks()  # due again, but nothing moved: no bookmark
    assert quiet.take_events() == []
    cache.event_revision = 13
    clock.advance(30)
    cache.send_due_bookmarks()  # moved, but the next one is due only a minute after the last
    assert quiet.take_events() == []
    clock.advance(30)
    cache.send_due_bookmarks()
    assert [rev for _, rev in quiet.take_events()] == [13]
    assert never.take_events() == []
