"""Informers: a local, indexed, always-converging copy of one kind, fed by list + watch.

Modelled on client-go's reflector + indexer + shared informer, collapsed into one class:
`run()` lists, replaces the store (emitting the difference to handlers), then watches from the
list's resourceVersion. A dropped stream (UNAVAILABLE, keepalive timeout, server restart) is
resumed from the last resourceVersion seen, with jittered backoff (0.2 s doubling to 5 s: shorter
than client-go's 30 s cap, so a toy cluster recovers quickly from an apiserver restart) and no
relist; OUT_OF_RANGE ("too old resource version": the window was compacted) relists, and the
relist emits adds, updates and deletes for whatever changed meanwhile, so the store and every
handler converge on the server's state. BOOKMARK events only advance the resourceVersion.

Several apiservers (a `Client` over several fails over, tinykube/client.py): a watch cut by its
apiserver's death is resumed from the last resourceVersion on the next one, whose watch cache
replays every event after it (nothing lost or repeated: resourceVersions are etcd revisions,
the same on every apiserver), or, if its window does not reach back that far, answers
OUT_OF_RANGE and the informer relists there, emitting only what changed. A resourceVersion that
apiserver has not seen yet is waited for there (DEADLINE_EXCEEDED after a few seconds, then
retried). Informers ask for bookmarks, which carry the apiserver's current revision even when
nothing they watch changes, so a quiet watch's resourceVersion stays within every apiserver's
window and a resume usually succeeds without a relist.

Handlers are plain synchronous callables run inline on the informer's task, in event order. A
handler that raises (an object the component cannot digest, or a bug) is reported - logged,
counted in `handler_errors`, passed to `on_handler_error` (for a metric and an Event) - the other
handlers still run, and the store is put back as it was before that event, so the store never
holds what a handler refused; the next event for the object or a relist offers it again
(level-triggered). The informer carries on. They should be quick (enqueue a key,
update a cache): the store is read by reference, never deep-copied or re-serialized on the way
out (each object is copied once on its way in: see below), so handlers and readers must treat
objects as immutable.

Memory (issue 26: the scheduler and the controller manager hold every pod). Every object is
passed through a transform before the store and the handlers see it (client-go's SetTransform).
The default, `compact`, copies it into a message of its own: a decoded upb message shares one
arena with everything decoded with it and keeps all of it alive, so a pod taken from a
WatchBatch message (several events, most of them other pods' superseded versions) or from a
List kept that whole message; and the decoder leaves its growth garbage in the arena, which a
copy does not (a pod of bench/load.py: 10.6 KiB decoded alone, 5.3 KiB copied; bench/
informer_memory.py). `without_managed_fields` also drops metadata.managedFields, as
kube-scheduler's and kube-controller-manager's informers do: nothing in those processes reads
them, and a write carrying none keeps the stored ones (the apiserver's rule for clients that
do not know them), so an object from such a store may be written back. The informer owns the
objects it is given (`apply`, `replace`): a transform may change them in place.

Concurrency: one asyncio task runs `run()`; store reads from other tasks are safe because there
are no threads and the store is only changed between awaits.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol

from google.protobuf.message import Message
from typing_extensions import TypeVar

from tinykube.clock import Clock
from tinykube.errors import ResourceExpiredError, TinykubeError
from tinykube.retry import Backoff

if TYPE_CHECKING:
    from tinykube.client import ResourceClient

T = TypeVar("T", bound=Message, default=Any)

log = logging.getLogger(__name__)

ListFn = Callable[[], Awaitable[Any]]  # returns a <Kind>List (has .items and .metadata)
WatchFn = Callable[[str], AsyncIterator[Any]]  # resourceVersion -> <Kind>WatchEvent stream

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"


def meta_namespace_key(obj: Any) -> str:
    """client-go's key: "namespace/name", or "name" for cluster-scoped objects."""
    meta = obj.metadata
    namespace: str = meta.namespace
    name: str = meta.name
    return f"{namespace}/{name}" if namespace else name


def compact(obj: T) -> T:
    """`obj` copied into a message of its own, so the store keeps no other object's arena and
    no decoder garbage alive (the default transform; see the module docstring). Objects that
    are not protobuf messages (the garbage collector's custom objects) are returned as they
    are."""
    if not isinstance(obj, Message):
        return obj
    copy = type(obj)()
    copy.CopyFrom(obj)
    return copy


def without_managed_fields(obj: T) -> T:
    """kube-scheduler's and kube-controller-manager's informer transform: metadata.managedFields
    dropped (from `obj` itself, which the informer owns), then `compact`."""
    meta = getattr(obj, "metadata", None)
    if meta is not None and meta.managedFields:
        del meta.managedFields[:]
    return compact(obj)


def _index_values(result: str | Iterable[str] | None) -> tuple[str, ...]:
    if result is None:
        return ()
    if isinstance(result, str):
        return (result,)
    return tuple(result)


class Store(Generic[T]):
    """Objects by key, plus named secondary indexes (e.g. pods by spec.nodeName)."""

    def __init__(self) -> None:
        self._items: dict[str, T] = {}
        self._index_fns: dict[str, Callable[[T], str | Iterable[str] | None]] = {}
        # index name -> index value -> keys (a bucket: see _add_to)
        self._indices: dict[str, dict[str, list[str] | set[str]]] = {}

    def get(self, key: str) -> T | None:
        return self._items.get(key)

    def get_by_name(self, name: str, namespace: str = "") -> T | None:
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> builtins.list[T]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        """Iterates keys (a snapshot, so handlers may change the store meanwhile)."""
        return iter(builtins.list(self._items))

    def add_index(self, name: str, fn: Callable[[T], str | Iterable[str] | None]) -> None:
        """Maintain index `name`: fn(obj) gives the value(s) under which obj is found."""
        if name in self._index_fns:
            raise ValueError(f"index {name!r} already exists")
        self._index_fns[name] = fn
        index: dict[str, list[str] | set[str]] = {}
        for key, obj in self._items.items():
            for value in _index_values(fn(obj)):
                _add_to(index, value, key)
        self._indices[name] = index

    def by_index(self, index_name: str, value: str) -> builtins.list[T]:
        """The objects whose index function yields `value` (KeyError for an unknown index)."""
        keys = self._indices[index_name].get(value)
        if not keys:
            return []
        items = self._items
        return [items[k] for k in keys]

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        return list(self._indices[index_name].get(value, ()))

    def index_values(self, index_name: str) -> builtins.list[str]:
        """Every value the index currently holds (e.g. every node name that has pods)."""
        return list(self._indices[index_name])

    # Mutations are the informer's; consumers only read.

    def _put(self, key: str, obj: T) -> T | None:
        old = self._items.get(key)
        self._items[key] = obj
        if self._index_fns:
            self._reindex(key, old, obj)
        return old

    def _remove(self, key: str) -> T | None:
        old = self._items.pop(key, None)
        if old is not None and self._index_fns:
            self._reindex(key, old, None)
        return old

    def _reindex(self, key: str, old: T | None, new: T | None) -> None:
        for name, fn in self._index_fns.items():
            old_values = _index_values(fn(old)) if old is not None else ()
            new_values = _index_values(fn(new)) if new is not None else ()
            if old_values == new_values:
                continue
            index = self._indices[name]
            for value in old_values:
                _remove_from(index, value, key)
            for value in new_values:
                _add_to(index, value, key)


# An index bucket (the keys under one value) is a list while it is small, a set beyond: most
# buckets are a ReplicaSet's pods, a node's, a label pair's in a small Deployment (CL2's are of
# 5 and 30), and a set of 5 keys takes 32 slots (about 730 bytes) where a list takes 100; a
# list's scan for a removal stays cheap up to SMALL_BUCKET keys.
SMALL_BUCKET = 32


def _add_to(index: dict[str, list[str] | set[str]], value: str, key: str) -> None:
    bucket = index.get(value)
    if bucket is None:
        index[value] = [key]
    elif isinstance(bucket, set):
        bucket.add(key)
    elif key not in bucket:
        if len(bucket) < SMALL_BUCKET:
            bucket.append(key)
        else:
            index[value] = {*bucket, key}


def _remove_from(index: dict[str, list[str] | set[str]], value: str, key: str) -> None:
    bucket = index.get(value)
    if bucket is None:
        return
    if isinstance(bucket, set):
        bucket.discard(key)
    elif key in bucket:
        bucket.remove(key)
    if not bucket:
        del index[value]


class _Handler(Generic[T]):
    __slots__ = ("on_add", "on_delete", "on_update")

    def __init__(
        self,
        on_add: Callable[[T], object] | None,
        on_update: Callable[[T, T], object] | None,
        on_delete: Callable[[T], object] | None,
    ) -> None:
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete


class Informer(Generic[T]):
    """List + watch one kind into a `Store`, calling handlers for every change."""

    def __init__(
        self,
        list_fn: ListFn,
        watch_fn: WatchFn,
        *,
        key_fn: Callable[[T], str] = meta_namespace_key,
        clock: Clock | None = None,
        name: str = "informer",
        min_backoff: float = 0.2,
        max_backoff: float = 5.0,
        on_handler_error: Callable[[T, Exception], object] | None = None,
        transform: Callable[[T], T] | None = compact,
    ) -> None:
        self._list_fn = list_fn
        # Applied to every object before the store and the handlers see it (None: kept as
        # given); it may change its argument, which the informer owns.
        self._transform = transform
        self.on_handler_error = on_handler_error
        self._watch_fn = watch_fn
        self._key_fn = key_fn
        self.clock = clock or Clock()
        self.name = name
        self.store: Store[T] = Store()
        self._handlers: list[_Handler[T]] = []
        self._synced = asyncio.Event()
        self._rv = ""
        self._backoff = Backoff(self.clock, initial=min_backoff, maximum=max_backoff)
        # Counters for tests and metrics.
        self.lists = 0
        self.watches = 0
        self.handler_errors = 0

    @classmethod
    def for_resource(
        cls,
        resource: ResourceClient[T, Any, Any],
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        **kwargs: Any,
    ) -> Informer[T]:
        """An informer over `client.pods` (or any ResourceClient), with server-side selectors."""

        async def list_fn() -> Any:
            return await resource.list(
                namespace, label_selector=label_selector, field_selector=field_selector
            )

        def watch_fn(resource_version: str) -> AsyncIterator[Any]:
            return resource.watch(
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                resource_version=resource_version,
                allow_bookmarks=True,
            )

        kwargs.setdefault("name", resource.info.plural)
        return cls(list_fn, watch_fn, **kwargs)

    # -- consumer API -----------------------------------------------------------------------

    def add_handler(
        self,
        on_add: Callable[[T], object] | None = None,
        on_update: Callable[[T, T], object] | None = None,
        on_delete: Callable[[T], object] | None = None,
    ) -> None:
        """Register handlers. Added after sync, on_add is called at once for every object."""
        handler = _Handler(on_add, on_update, on_delete)
        self._handlers.append(handler)
        if on_add is not None and self._synced.is_set():
            for obj in self.store.list():
                try:
                    on_add(obj)
                except Exception as exc:  # reported; the store is shared with older handlers
                    self._failed("add", obj, exc)

    def add_index(self, name: str, fn: Callable[[T], str | Iterable[str] | None]) -> None:
        self.store.add_index(name, fn)

    def has_synced(self) -> bool:
        """True once the first list has been delivered to the store and the handlers."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    @property
    def last_resource_version(self) -> str:
        return self._rv

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever (resume or relist as needed) until cancelled."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list_and_replace()
                    need_list = False
                delivered = await self._watch_once()
                if delivered:
                    self._backoff.reset()
                    continue  # the stream ended cleanly after progress: resume at once
                log.debug("%s: watch from %s ended without events", self.name, self._rv)
            except asyncio.CancelledError:
                raise
            except ResourceExpiredError as exc:
                # The window moved past our resourceVersion: only a relist can catch us up.
                log.info("%s: %s; relisting", self.name, exc.message)
                need_list = True
                if self._backoff.failures == 0:
                    self._backoff.failures = 1  # relist at once, but back off if it repeats
                    continue
            except TinykubeError as exc:
                log.warning(
                    "%s: %s at resourceVersion %r failed: %s: %s",
                    self.name,
                    "list" if need_list else "watch",
                    self._rv,
                    type(exc).__name__,
                    exc.message,
                )
            except Exception:
                log.exception("%s: unexpected failure; retrying", self.name)
            await self._backoff.wait()

    def start(self) -> asyncio.Task[None]:
        """Run in a new task (cancel it to stop)."""
        return asyncio.get_running_loop().create_task(self.run(), name=f"informer-{self.name}")

    async def _list_and_replace(self) -> None:
        result = await self._list_fn()
        self.lists += 1
        self.replace(result.items, result.metadata.resourceVersion)

    def replace(self, items: Iterable[T], resource_version: str) -> None:
        """Make the store equal to `items`, emitting deletes, then adds and updates."""
        key_fn = self._key_fn
        fresh = {key_fn(obj): obj for obj in items}
        store = self.store
        for key in [k for k in store._items if k not in fresh]:
            old = store._remove(key)
            if old is not None and not self._dispatch_delete(old):
                store._put(key, old)
        transform = self._transform
        for key, obj in fresh.items():
            old = store.get(key)
            if old is None:
                if transform is not None:
                    obj = transform(obj)
                store._put(key, obj)
                if not self._dispatch_add(obj):
                    store._remove(key)
            elif old.metadata.resourceVersion != obj.metadata.resourceVersion:  # type: ignore[attr-defined]
                if transform is not None:
                    obj = transform(obj)
                store._put(key, obj)
                if not self._dispatch_update(old, obj):
                    store._put(key, old)
        self._rv = resource_version
        if not self._synced.is_set():
            log.info("%s: synced %d objects at resourceVersion %s", self.name, len(store), self._rv)
        self._synced.set()

    async def _watch_once(self) -> bool:
        """Consume one watch stream; returns whether any event arrived before it ended."""
        self.watches += 1
        delivered = False
        stream = self._watch_fn(self._rv)
        try:
            async for event in stream:
                if not delivered:
                    delivered = True
                    # The stream works: a later drop is a fresh failure, not a repeated one.
                    self._backoff.reset()
                self.apply(event)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return delivered

    def apply(self, event: Any) -> None:
        """Apply one watch event to the store and handlers."""
        kind = event.type
        obj = event.object
        rv = obj.metadata.resourceVersion
        if kind == BOOKMARK:
            self._rv = rv
            return
        if self._transform is not None:
            obj = self._transform(obj)
        key = self._key_fn(obj)
        store = self.store
        if kind == DELETED:
            old = store._remove(key)
            if old is not None and not self._dispatch_delete(obj):
                store._put(key, old)
        elif kind in (ADDED, MODIFIED):
            old = store._put(key, obj)
            if old is None:
                if not self._dispatch_add(obj):
                    store._remove(key)
            elif not self._dispatch_update(old, obj):
                store._put(key, old)
        else:
            log.warning("%s: ignoring watch event of type %r", self.name, kind)
        if rv:
            self._rv = rv

    # -- handler dispatch -------------------------------------------------------------------

    # Each returns whether every handler took the event.
    def _dispatch_add(self, obj: T) -> bool:
        ok = True
        for h in self._handlers:
            if h.on_add is not None:
                try:
                    h.on_add(obj)
                except Exception as exc:
                    ok = self._failed("add", obj, exc)
        return ok

    def _dispatch_update(self, old: T, new: T) -> bool:
        ok = True
        for h in self._handlers:
            if h.on_update is not None:
                try:
                    h.on_update(old, new)
                except Exception as exc:
                    ok = self._failed("update", new, exc)
        return ok

    def _dispatch_delete(self, obj: T) -> bool:
        ok = True
        for h in self._handlers:
            if h.on_delete is not None:
                try:
                    h.on_delete(obj)
                except Exception as exc:
                    ok = self._failed("delete", obj, exc)
        return ok

    def _failed(self, what: str, obj: T, exc: Exception) -> bool:
        self.handler_errors += 1
        meta = obj.metadata  # type: ignore[attr-defined]
        log.error(
            "%s: %s handler failed for %s (resourceVersion %s); the store keeps its previous "
            "state: %s: %s",
            self.name,
            what,
            self._key_fn(obj),
            meta.resourceVersion,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        if self.on_handler_error is not None:
            try:
                self.on_handler_error(obj, exc)
            except Exception:
                log.exception("%s: on_handler_error failed", self.name)
        return False


class _Resources(Protocol):
    """What the factory builds informers from (tinykube.client.Client)."""

    def resource(self, kind: Any) -> ResourceClient[Any, Any, Any]: ...


class InformerFactory:
    """client-go's SharedInformerFactory: one informer per kind (and per namespace and
    selectors, for the rare user that narrows its watch), made on first use and shared by
    every consumer, so a kind is listed and watched once however many controllers read it.

    `start()` runs every informer made so far that is not running yet (call it again after
    asking for more: it is idempotent); `wait_for_cache_sync()` waits for the started ones;
    `shutdown()` cancels them all. Handlers registered before the first sync see the initial
    list as adds; one registered later gets adds for what the store holds at once. `transform`
    is every informer's (kube-controller-manager's factory drops managedFields).
    """

    def __init__(
        self,
        client: _Resources,
        *,
        clock: Clock | None = None,
        on_handler_error: Callable[[Any, Exception], object] | None = None,
        transform: Callable[[Any], Any] | None = compact,
    ) -> None:
        self._client = client
        self.clock = clock or Clock()
        self.on_handler_error = on_handler_error
        self.transform = transform  # every informer's (see Informer)
        self._informers: dict[tuple[str, str, str, str], Informer[Any]] = {}
        self._tasks: dict[tuple[str, str, str, str], asyncio.Task[None]] = {}

    def for_kind(
        self,
        kind: Any,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
    ) -> Informer[Any]:
        """The shared informer of `kind` (a Kind name, plural or KindInfo), made if new."""
        resource = self._client.resource(kind)
        key = (resource.info.plural, namespace, label_selector, field_selector)
        informer = self._informers.get(key)
        if informer is None:
            name = "/".join(p for p in key if p)
            informer = Informer.for_resource(
                resource,
                namespace,
                label_selector,
                field_selector,
                clock=self.clock,
                name=name,
                on_handler_error=self.on_handler_error,
                transform=self.transform,
            )
            self._informers[key] = informer
        return informer

    @property
    def informers(self) -> builtins.list[Informer[Any]]:
        return builtins.list(self._informers.values())

    def start(self) -> None:
        """Run every informer not running yet, each in its own task."""
        for key, informer in self._informers.items():
            if key not in self._tasks:
                self._tasks[key] = informer.start()

    async def wait_for_cache_sync(self) -> None:
        """Wait until every started informer has delivered its first list."""
        started = [self._informers[key] for key in self._tasks]
        await asyncio.gather(*(informer.wait_synced() for informer in started))

    async def shutdown(self) -> None:
        """Cancel every informer's task and wait for them to end."""
        tasks = builtins.list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
