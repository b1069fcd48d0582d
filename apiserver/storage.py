"""The tiny revision-based storage interface over etcd (modelled on etcd's kubernetes interface).

Keys are bytes under the apiserver's prefix (`<prefix>/<plural>/<namespace>/<name>`, cluster-scoped
kinds without the namespace); values are opaque bytes. Every write is a guarded etcd transaction
whose compare is on the key's create or mod revision, so optimistic concurrency is etcd's own.
Single-key writes in flight at the same time are sent together as one transaction by
`TxnBatcher` (apiserver/txnbatch.py): each keeps its own compare and its own outcome, and the
objects written together share that transaction's revision. Callers get revisions back and
turn failed compares into API errors themselves.

We talk to etcd through the generated stubs shipped with `aetcd` (`aetcd.rpc`) on our own grpc.aio
channel: that gives multi-op transactions, per-call deadlines, keepalive, watch progress requests
and the watch response header revision, which aetcd's convenience layer hides. Connection failures
become `UnavailableError("etcd is unavailable: ...")`; the channel reconnects by itself, so the
apiserver recovers when etcd comes back without any restart logic here. One instance is shared by
all request handlers on the event loop; grpc.aio multiplexes the calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from aetcd import rpc
from aetcd.exceptions import RevisionCompactedError

from apiserver.metrics import Metrics
from apiserver.txnbatch import BatchedResult, TxnBatcher
from tinykube.errors import (
    InternalError,
    RequestEntityTooLargeError,
    ResourceExpiredError,
    TinykubeError,
    UnavailableError,
)
from tinykube.tls import PLAINTEXT, Credentials

T = TypeVar("T")

_CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 5_000),
    ("grpc.keepalive_timeout_ms", 3_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    ("grpc.max_receive_message_length", 512 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)

EVENT_PUT = 0
EVENT_DELETE = 1


@dataclass(frozen=True, slots=True)
class KV:
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int


@dataclass(frozen=True, slots=True)
class ListResult:
    kvs: list[KV]
    revision: int  # the revision the list was read at
    more: bool


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Outcome of a guarded write: on failure, `current` is the key's value now (None: absent)."""

    succeeded: bool
    revision: int
    current: KV | None = None
    missing: tuple[bytes, ...] = ()
    # Claim keys (see `create`) that already existed.
    taken: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: int  # EVENT_PUT or EVENT_DELETE
    key: bytes
    value: bytes  # empty for deletes
    revision: int  # mod_revision of the put, or the revision of the delete


class CompactedError(RevisionCompactedError):  # type: ignore[misc]
    """An etcd watch asked for a revision that was compacted away (aetcd's error, typed)."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(compact_revision)
        self.compact_revision = compact_revision


def prefix_end(prefix: bytes) -> bytes:
    """The range end that selects every key starting with `prefix`."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"


def _kv(kv: Any) -> KV:
    return KV(bytes(kv.key), bytes(kv.value), int(kv.mod_revision), int(kv.create_revision))


def _is_unavailable(exc: grpc.aio.AioRpcError) -> bool:
    return exc.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    )


def map_etcd_error(exc: BaseException) -> TinykubeError:
    """The API error a failed etcd call stands for."""
    if isinstance(exc, TinykubeError):
        return exc
    if isinstance(exc, grpc.aio.AioRpcError):
        details = exc.details() or exc.code().name
        if _is_unavailable(exc):
            return UnavailableError(f"etcd is unavailable: {exc.code().name}: {details}")
        if exc.code() == grpc.StatusCode.OUT_OF_RANGE or "compacted" in details:
            return ResourceExpiredError(f"too old resource version: {details}")
        if "request is too large" in details:
            # etcd's --max-request-bytes counts the whole txn, so a value just under the
            # apiserver's own object limit can still be refused here: the client's fault.
            return RequestEntityTooLargeError(f"Request entity too large: {details}")
        return InternalError(f"etcd error: {exc.code().name}: {details}")
    if isinstance(exc, (OSError, asyncio.TimeoutError)):
        return UnavailableError(f"etcd is unavailable: {type(exc).__name__}: {exc}")
    return InternalError(f"etcd error: {type(exc).__name__}: {exc}")


class Storage:
    """Revision-based get/list/create/update/delete/watch over one etcd cluster."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        timeout: float,
        metrics: Metrics,
        batch_writes: bool = True,
        credentials: Credentials = PLAINTEXT,
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints given")
        # gRPC's ipv4/dns resolvers take several addresses and fail over between them.
        self.target = endpoints[0] if len(endpoints) == 1 else "ipv4:" + ",".join(endpoints)
        self.timeout = timeout
        self.metrics = metrics
        # TLS to etcd with the apiserver's etcd client certificate (--etcd-certfile)
        self.credentials = credentials
        self._children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._channel: grpc.aio.Channel | None = None
        self._kv: Any = None
        self._watch: Any = None
        # Concurrent single-key writes share etcd txns (apiserver/txnbatch.py); Service
        # allocations, which write several keys, always go alone.
        self._batcher = (
            TxnBatcher(
                lambda req: self._send_txn(req, "batch"),
                self._send_txn,
                on_batch=metrics.etcd_txn_batch_size.observe,
            )
            if batch_writes
            else None
        )

    def set_exclusive(self, exclusive: Callable[[bytes], bytes | None]) -> None:
        """Keys for which `exclusive` names a group: at most one write of a group per txn."""
        if self._batcher is not None:
            self._batcher.exclusive = exclusive

    def connect(self) -> None:
        """Create the channel; connection happens lazily and is retried by gRPC forever."""
        if self._channel is None:
            self._channel = self.credentials.channel(self.target, _CHANNEL_OPTIONS)
            self._kv = rpc.KVStub(self._channel)
            self._watch = rpc.WatchStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _metric(self, operation: str, result: str) -> tuple[Any, Any]:
        # prometheus_client label lookups are slow-ish; memoize the children per operation.
        children = self._children.get((operation, result))
        if children is None:
            children = (
                self.metrics.etcd_requests.labels(operation, result),
                self.metrics.etcd_request_duration.labels(operation),
            )
            self._children[(operation, result)] = children
        return children

    async def _call(self, operation: str, fn: Callable[[], Awaitable[T]]) -> T:
        start = time.perf_counter()
        try:
            result = await fn()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            self._metric(operation, "error")[0].inc()
            raise map_etcd_error(exc) from exc
        counter, histogram = self._metric(operation, "ok")
        counter.inc()
        histogram.observe(time.perf_counter() - start)
        return result

    # ---- reads -----------------------------------------------------------------------------

    async def get(self, key: bytes) -> KV | None:
        req = rpc.RangeRequest(key=key)
        resp = await self._call("get", lambda: self._kv.Range(req, timeout=self.timeout))
        return _kv(resp.kvs[0]) if resp.kvs else None

    async def list_prefix(
        self, prefix: bytes, *, revision: int = 0, limit: int = 0, start: bytes = b""
    ) -> ListResult:
        """Keys under `prefix` (from `start`, inclusive) at `revision` (0: now), sorted by key."""
        req = rpc.RangeRequest(
            key=start or prefix, range_end=prefix_end(prefix), revision=revision, limit=limit
        )
        resp = await self._call("list", lambda: self._kv.Range(req, timeout=self.timeout))
        return ListResult([_kv(kv) for kv in resp.kvs], int(resp.header.revision), bool(resp.more))

    async def current_revision(self) -> int:
        """etcd's revision now (a linearizable read)."""
        req = rpc.RangeRequest(key=b"\x00", count_only=True)
        resp = await self._call("revision", lambda: self._kv.Range(req, timeout=self.timeout))
        return int(resp.header.revision)

    # ---- writes ----------------------------------------------------------------------------

    async def _txn(
        self,
        operation: str,
        key: bytes,
        compares: list[Any],
        success: list[Any],
        require: tuple[bytes, ...] = (),
        claims: Sequence[tuple[bytes, bytes]] = (),
        release: Sequence[bytes] = (),
    ) -> WriteResult:
        """`claims`: (key, value) pairs created in the same transaction, each only if absent
        (allocations: a Service's cluster IP and nodePorts); `release`: keys deleted with it."""
        claim_keys = tuple(k for k, _ in claims)
        compares = list(compares)
        success = list(success)
        for ck, cv in claims:
            compares.append(
                rpc.Compare(
                    key=ck,
                    result=rpc.Compare.CompareResult.EQUAL,
                    target=rpc.Compare.CompareTarget.CREATE,
                    create_revision=0,
                )
            )
            success.append(rpc.RequestOp(request_put=rpc.PutRequest(key=ck, value=cv)))
        for rk in release:
            success.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=rk)))
        failure = [
            rpc.RequestOp(request_range=rpc.RangeRequest(key=k))
            for k in (key, *require, *claim_keys)
        ]
        req = rpc.TxnRequest(compare=compares, success=success, failure=failure)
        if self._batcher is not None and not claims and not release:
            resp = await self._batcher.submit(key, req, operation)
            if isinstance(resp, BatchedResult):
                return WriteResult(True, resp.revision)
        else:
            resp = await self._send_txn(req, operation)
        revision = int(resp.header.revision)
        if resp.succeeded:
            return WriteResult(True, revision)
        kvs = resp.responses[0].response_range.kvs
        rest = resp.responses[1:]
        missing = tuple(
            k
            for k, r in zip(require, rest[: len(require)], strict=True)
            if not r.response_range.kvs
        )
        taken = tuple(
            k for k, r in zip(claim_keys, rest[len(require) :], strict=True) if r.response_range.kvs
        )
        return WriteResult(False, revision, _kv(kvs[0]) if kvs else None, missing, taken)

    def _send_txn(self, req: Any, operation: str) -> Awaitable[Any]:
        return self._call(operation, lambda: self._kv.Txn(req, timeout=self.timeout))

    async def create(
        self, key: bytes, value: bytes, *, claims: Sequence[tuple[bytes, bytes]] = ()
    ) -> WriteResult:
        """Put `key` only if it does not exist. The new revision, or the existing value.

        `claims` are created in the same transaction, each only if absent (`taken` on failure).
        """
        compare = rpc.Compare(
            key=key,
            result=rpc.Compare.CompareResult.EQUAL,
            target=rpc.Compare.CompareTarget.CREATE,
            create_revision=0,
        )
        put = rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))
        return await self._txn("create", key, [compare], [put], claims=claims)

    async def update(
        self,
        key: bytes,
        value: bytes,
        mod_revision: int,
        *,
        require: tuple[bytes, ...] = (),
        claims: Sequence[tuple[bytes, bytes]] = (),
        release: Sequence[bytes] = (),
    ) -> WriteResult:
        """Put `key` only if it was last written at `mod_revision` (guaranteed update).

        `require`: other keys that must exist in the same transaction (Bind: the node); on
        failure `missing` names those that did not.
        """
        compares = [
            rpc.Compare(
                key=key,
                result=rpc.Compare.CompareResult.EQUAL,
                target=rpc.Compare.CompareTarget.MOD,
                mod_revision=mod_revision,
            )
        ]
        for other in require:
            compares.append(
                rpc.Compare(
                    key=other,
                    result=rpc.Compare.CompareResult.GREATER,
                    target=rpc.Compare.CompareTarget.CREATE,
                    create_revision=0,
                )
            )
        put = rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))
        return await self._txn(
            "update", key, compares, [put], require, claims=claims, release=release
        )

    async def delete(
        self, key: bytes, mod_revision: int, *, release: Sequence[bytes] = ()
    ) -> WriteResult:
        """Delete `key` only if it was last written at `mod_revision` (and `release` with it)."""
        compare = rpc.Compare(
            key=key,
            result=rpc.Compare.CompareResult.EQUAL,
            target=rpc.Compare.CompareTarget.MOD,
            mod_revision=mod_revision,
        )
        op = rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))
        return await self._txn("delete", key, [compare], [op], release=release)

    async def compact(self, revision: int) -> None:
        req = rpc.CompactionRequest(revision=revision)
        await self._call("compact", lambda: self._kv.Compact(req, timeout=self.timeout))

    # ---- watch -----------------------------------------------------------------------------

    def watch(self, prefix: bytes, start_revision: int) -> EtcdWatch:
        """A watch of every key under `prefix` from `start_revision` (inclusive)."""
        self.connect()
        return EtcdWatch(self._watch, prefix, start_revision)


class EtcdWatch:
    """One etcd watch stream on a prefix.

    Iterate it for batches `(events, header_revision, created)`. The first has `created` set
    and the revision etcd was at when the watch was created; after that, an empty batch is a
    progress notification: every event up to `header_revision` has been delivered.
    `request_progress` asks etcd for one. Raises CompactedError if the start revision is gone,
    or the mapped UnavailableError when the stream breaks; the caller resumes from its last
    revision + 1.
    """

    def __init__(self, stub: Any, prefix: bytes, start_revision: int) -> None:
        self._stub = stub
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        create = rpc.WatchCreateRequest(
            key=prefix, range_end=prefix_end(prefix), start_revision=start_revision
        )
        self._requests.put_nowait(rpc.WatchRequest(create_request=create))
        self._call: Any = None
        self._cancelled = False

    async def _request_iter(self) -> AsyncIterator[Any]:
        while True:
            req = await self._requests.get()
            if req is None:
                return
            yield req

    def request_progress(self) -> None:
        self._requests.put_nowait(rpc.WatchRequest(progress_request=rpc.WatchProgressRequest()))

    def cancel(self) -> None:
        """Close the stream; a reader in `batches` gets UnavailableError."""
        if self._cancelled:
            return
        self._cancelled = True
        self._requests.put_nowait(None)
        if self._call is not None:
            self._call.cancel()

    async def batches(self) -> AsyncIterator[tuple[list[WatchEvent], int, bool]]:
        self._call = self._stub.Watch(self._request_iter())
        try:
            async for resp in self._call:
                if resp.compact_revision:
                    raise CompactedError(int(resp.compact_revision))
                if resp.canceled:
                    raise UnavailableError(
                        f"etcd is unavailable: watch canceled: {resp.cancel_reason or 'no reason'}"
                    )
                if resp.created and not resp.events:
                    # The stream is up; history up to this revision is still to come.
                    yield [], int(resp.header.revision), True
                    continue
                events = [
                    WatchEvent(
                        int(ev.type),
                        bytes(ev.kv.key),
                        bytes(ev.kv.value),
                        int(ev.kv.mod_revision),
                    )
                    for ev in resp.events
                ]
                yield events, int(resp.header.revision), False
        except grpc.aio.AioRpcError as exc:
            raise map_etcd_error(exc) from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._cancelled and task is not None and not task.cancelling():
                # We closed the stream ourselves (not a cancellation of our task).
                raise UnavailableError("etcd watch stream closed; resuming") from None
            raise
        finally:
            self.cancel()
        raise UnavailableError("etcd is unavailable: watch stream ended")
