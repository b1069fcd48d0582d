"""EventRecorder: writes Kubernetes-style Events about objects, deduplicated into counts.

An Event is named "<object name>.<hash>", the hash covering the object (kind, namespace, name,
uid), the source component and the (type, reason, message). Recording the same thing again bumps
`count` and `lastTimestamp` on that Event instead of creating another, as client-go's event
correlator does; the recorder keeps the Events it wrote in a bounded LRU so a bump is usually one
Update, and falls back to Get + Update when another process (or a restarted one) wrote it (an
unconditional Update when the writer may not read events, as a kubelet).

Recording is best effort: failures are logged, never raised into the caller. `record` awaits the
write; `emit` is fire-and-forget for hot paths. Writes run on the caller's event loop, at most
`max_concurrency` at once, serialised per Event name so concurrent bumps do not conflict.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from typing import Any, Protocol

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from tinykube.clock import Clock
from tinykube.errors import AlreadyExistsError, ConflictError, ForbiddenError, NotFoundError
from tinykube.meta import timestamp
from tinykube.v1 import event_pb2, meta_pb2

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

# Kubernetes stores events about cluster-scoped objects (nodes) in "default".
CLUSTER_EVENTS_NAMESPACE = "default"


class EventAPI(Protocol):
    async def get(self, name: str, namespace: str = "") -> event_pb2.Event: ...
    async def create(self, obj: event_pb2.Event) -> event_pb2.Event: ...
    async def update(self, obj: event_pb2.Event) -> event_pb2.Event: ...


class HasEvents(Protocol):
    @property
    def events(self) -> EventAPI: ...


def _kind_of(obj: Any) -> str:
    kind = getattr(obj, "kind", "")
    if isinstance(kind, str) and kind:
        return kind
    descriptor = getattr(type(obj), "DESCRIPTOR", None)
    return str(descriptor.name) if descriptor is not None else type(obj).__name__


def event_name(obj: Any, component: str, type_: str, reason: str, message: str) -> str:
    """The deterministic Event name for this (object, source, type, reason, message)."""
    meta = obj.metadata
    digest = hashlib.sha256(
        "\x00".join(
            (_kind_of(obj), meta.namespace, meta.name, meta.uid, component, type_, reason, message)
        ).encode()
    ).hexdigest()[:16]
    base: str = meta.name or "unnamed"
    return f"{base[:200]}.{digest}"


class EventRecorder:
    """`await recorder.record(pod, "Warning", "FailedScheduling", "0/3 nodes are available")`."""

    def __init__(
        self,
        client: HasEvents,
        component: str,
        host: str = "",
        *,
        clock: Clock | None = None,
        max_concurrency: int = 8,
        cache_size: int = 4096,
        max_pending: int = 1000,
    ) -> None:
        self._events = client.events
        self.component = component
        self.host = host
        self.clock = clock or Clock()
        self._slots = asyncio.Semaphore(max_concurrency)
        self._cache: OrderedDict[str, event_pb2.Event] = OrderedDict()
        self._cache_size = cache_size
        # Per Event name: a lock and how many records use it (dropped when unused).
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self._max_pending = max_pending
        self.failures = 0
        self.dropped = 0

    async def record(self, obj: Message, type: str, reason: str, message: str) -> None:
        """Create or bump the Event; never raises (failures are logged and counted)."""
        try:
            await self._record(obj, type, reason, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failures += 1
            log.warning(
                "%s: could not record event %s %s on %s: %s",
                self.component,
                type,
                reason,
                getattr(getattr(obj, "metadata", None), "name", "?"),
                exc,
            )

    def emit(self, obj: Message, type: str, reason: str, message: str) -> None:
        """Record in the background (drops, and counts, events beyond `max_pending`)."""
        if len(self._pending) >= self._max_pending:
            self.dropped += 1
            return
        task = asyncio.get_running_loop().create_task(self.record(obj, type, reason, message))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait for every `emit`ted event to be written (or to fail)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self) -> None:
        await self.flush()

    def _now(self) -> Timestamp:
        return timestamp(self.clock.now())

    async def _record(self, obj: Any, type_: str, reason: str, message: str) -> None:
        name = event_name(obj, self.component, type_, reason, message)
        meta = obj.metadata
        namespace = meta.namespace or CLUSTER_EVENTS_NAMESPACE
        lock, users = self._locks.get(name, (asyncio.Lock(), 0))
        self._locks[name] = (lock, users + 1)
        try:
            async with lock, self._slots:
                await self._write(obj, name, namespace, type_, reason, message)
        finally:
            lock, users = self._locks[name]
            if users <= 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)

    async def _write(
        self, obj: Any, name: str, namespace: str, type_: str, reason: str, message: str
    ) -> None:
        cached = self._cache.get(name)
        if cached is not None:
            try:
                self._remember(await self._events.update(self._bumped(cached)))
                return
            except (ConflictError, NotFoundError):
                self._cache.pop(name, None)  # someone else changed it: re-read below
        now = self._now()
        meta = obj.metadata
        event = event_pb2.Event(
            apiVersion="v1",
            kind="Event",
            metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace),
            involvedObject=meta_pb2.ObjectReference(
                kind=_kind_of(obj),
                namespace=meta.namespace,
                name=meta.name,
                uid=meta.uid,
                apiVersion=getattr(obj, "apiVersion", "") or "v1",
                resourceVersion=meta.resourceVersion,
            ),
            reason=reason,
            message=message,
            type=type_,
            source=event_pb2.EventSource(component=self.component, host=self.host),
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
            reportingComponent=self.component,
            reportingInstance=self.host,
        )
        for _ in range(3):
            try:
                self._remember(await self._events.create(event))
                return
            except AlreadyExistsError:
                pass
            try:
                existing = await self._events.get(name, namespace)
            except NotFoundError:
                continue  # deleted in between: create again
            except ForbiddenError:
                # A kubelet may write events but not read them (kube's node rules): bump it
                # unconditionally from what this recorder knows, as client-go's patch does.
                try:
                    self._remember(await self._events.update(self._bumped(event)))
                    return
                except NotFoundError:
                    continue
            try:
                self._remember(await self._events.update(self._bumped(existing)))
                return
            except (ConflictError, NotFoundError):
                continue
        raise ConflictError(f"event {namespace}/{name} kept changing; gave up")

    def _bumped(self, existing: event_pb2.Event) -> event_pb2.Event:
        bumped = event_pb2.Event()
        bumped.CopyFrom(existing)
        bumped.count = max(1, existing.count) + 1
        bumped.lastTimestamp.CopyFrom(self._now())
        return bumped

    def _remember(self, event: event_pb2.Event) -> None:
        self._cache[event.metadata.name] = event
        self._cache.move_to_end(event.metadata.name)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
