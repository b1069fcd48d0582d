"""Group concurrent guarded writes into one etcd transaction.

Every apiserver write is a compare-and-swap txn on one key. Under load hundreds of them per
second are in flight at once, and each etcd call costs the apiserver more CPU (grpc.aio's call
set-up and completion) than the handler's own work, and costs etcd a raft entry. `TxnBatcher`
sends the txns submitted in the same turn of the event loop, and those that arrive while a
batch is in flight (tinykube/batching.py), as one Txn whose compares and success ops are the
concatenation of theirs. While one batch is out the next leaves when it returns, unless
`FULL_BATCH` writes are already waiting or it has been out `SLOW_TXN`: only then does a second
batch go alongside (`max_in_flight`, 2). A second txn for a few waiting writes saves them one
etcd round trip (a few ms) and costs a call: with two always allowed, 10,000 pod Creates at 32
in flight cost the apiserver about 20 % more CPU and etcd about 50 % more than with this rule
(bench/RESULTS.md, session 6). Compares are ANDed, so the batch succeeds only if every item's
compares hold: then every item succeeded, all at the one revision etcd answers (several objects
share that resourceVersion, each still its own key with its own mod_revision). If any compare
fails, nothing was written and each item is sent again alone, so each gets exactly the result
(and the current value on failure) it would have had unbatched. Conflicts are rare on the hot
paths (creates of new names, renewals, status updates, binds), so the fallback is rare too.

Several objects sharing a revision is invisible to WatchBatch clients (tinykube's own), which
get a revision's events in one message. A plain Watch sends one event per message, so a stream
cut between two events of one revision and resumed from that revision would miss the rest:
while a kind has plain watchers (`exclusive` names the kind of a key then), a batch holds at
most one write of that kind, so the events such a watcher sees live never share a revision.

A batch never holds two items writing the same key (etcd refuses duplicate keys in a txn, and
the second item's compare would be against the pre-txn value) and stays within etcd's default
limits of 128 ops per txn and 1.5 MiB per request. When idle an item is sent at once; while a
txn is out, an item waits for it (one etcd round trip) at most, or `SLOW_TXN` if it is slow.

Runs on the apiserver's event loop; `submit` may be called from any number of tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from aetcd import rpc

from tinykube.batching import MicroBatcher
from tinykube.errors import DeadlineExceededError, UnavailableError

log = logging.getLogger(__name__)

# etcd's --max-txn-ops default is 128 (for compares and for ops each); --max-request-bytes 1.5 MiB.
MAX_TXN_OPS = 128
MAX_BATCH_BYTES = 1024 * 1024
# Writes waiting that justify a second txn while one is in flight (half a full one).
FULL_BATCH = MAX_TXN_OPS // 2
# Seconds after which a txn still out no longer holds back the writes queued behind it: a
# healthy etcd answers in a few ms; one that does not (its member died, a slow fsync) gets a
# second txn beside it, which round_robin sends to another member.
SLOW_TXN = 0.05

# etcd's answers that mean it refused a txn without applying it (too many ops, too large, no
# space, ...). Any other failure leaves a batch's outcome unknown.
_REFUSED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        # "requested lease not found": etcd checks a put's lease before applying anything.
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


def refused(exc: BaseException) -> bool:
    """Whether a failed txn (a mapped API error, its gRPC error as the cause) was surely
    not applied."""
    cause = exc.__cause__
    return isinstance(cause, grpc.aio.AioRpcError) and cause.code() in _REFUSED


@dataclass(slots=True)
class TxnItem:
    key: bytes
    request: Any  # rpc.TxnRequest of this write alone (with its failure reads)
    operation: str  # "create", "update", "delete": the metric label when sent alone
    # The request's encoded size, measured only when it joins a batch (`take_batch`): upb
    # measures a message by encoding it, and a write sent alone (every write of a quiet
    # apiserver) never needs it. -1: not measured yet.
    size: int = -1


@dataclass(frozen=True, slots=True)
class BatchedResult:
    """What a write that succeeded as part of a batch gets back: the txn's revision."""

    revision: int
    succeeded: bool = True


SendBatch = Callable[[Any], Awaitable[Any]]
SendOne = Callable[[Any, str], Awaitable[Any]]
Waiter = tuple[TxnItem, "asyncio.Future[Any]"]


class TxnBatcher(MicroBatcher[TxnItem, Any]):
    def __init__(
        self,
        send_batch: SendBatch,
        send_one: SendOne,
        *,
        max_in_flight: int = 2,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        super().__init__(max_in_flight=max_in_flight)
        # send_batch(TxnRequest) -> TxnResponse for a combined txn; send_one(TxnRequest,
        # operation) -> TxnResponse for one item alone. Both raise the mapped API error.
        self._send_batch = send_batch
        self._send_one = send_one
        self._on_batch = on_batch
        # The group (a kind's key prefix) of a key whose writes must not share a txn, or None.
        self.exclusive: Callable[[bytes], bytes | None] = lambda key: None
        self.slow_txn = SLOW_TXN
        # When each txn now out was sent (loop time), and the timer that lets the queue go
        # beside one that is slow.
        self._sent_at: list[float] = []
        self._slow_timer: asyncio.TimerHandle | None = None

    def submit(self, key: bytes, request: Any, operation: str) -> asyncio.Future[Any]:
        """Run `request` (a txn writing `key` only): the future of a TxnResponse or a
        `BatchedResult`. `enqueue` without its coroutine: a write's await chain is walked on
        every resume, and this is the bottom of every write's."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((TxnItem(key, request, operation), fut))
        self._kick()
        return fut

    def may_launch(self) -> bool:
        if self._in_flight == 0:
            return True
        if self._in_flight >= self.max_in_flight:
            return False
        if len(self.pending) >= FULL_BATCH:
            return True
        loop = asyncio.get_running_loop()
        waited = loop.time() - min(self._sent_at, default=loop.time())
        if waited >= self.slow_txn:
            return True
        if self._slow_timer is None:
            self._slow_timer = loop.call_later(self.slow_txn - waited, self._slow)
        return False

    def _slow(self) -> None:
        self._slow_timer = None
        self._kick()

    def take_batch(self) -> list[Waiter]:
        pending = self.pending
        if len(pending) == 1:
            # Alone (every write of a quiet apiserver): it fits, whatever its group.
            self.pending = []
            return [] if pending[0][1].done() else pending
        batch: list[Waiter] = []
        rest: list[Waiter] = []
        keys: set[bytes] = set()
        groups: set[bytes] = set()
        exclusive = self.exclusive
        compares = ops = size = 0
        for waiter in self.pending:
            item, fut = waiter
            if fut.done():
                continue  # its caller was cancelled
            req = item.request
            n_cmp, n_ops = len(req.compare), len(req.success)
            if item.size < 0:
                item.size = req.ByteSize()
            group = exclusive(item.key)
            fits = not batch or (
                item.key not in keys
                and (group is None or group not in groups)
                and compares + n_cmp <= MAX_TXN_OPS
                and ops + n_ops <= MAX_TXN_OPS
                and size + item.size <= MAX_BATCH_BYTES
            )
            if not fits:
                rest.append(waiter)
                continue
            if group is not None:
                groups.add(group)
            batch.append(waiter)
            keys.add(item.key)
            compares += n_cmp
            ops += n_ops
            size += item.size
        self.pending = rest
        return batch

    def abandoned(self) -> Exception:
        return RuntimeError("etcd write batch abandoned")

    async def send(self, batch: list[Waiter]) -> None:
        sent_at = asyncio.get_running_loop().time()
        self._sent_at.append(sent_at)
        try:
            await self._send(batch)
        finally:
            self._sent_at.remove(sent_at)

    async def _send(self, batch: list[Waiter]) -> None:
        self._on_batch(len(batch))
        if len(batch) == 1:
            await self._alone(batch[0])
            return
        combined = rpc.TxnRequest(
            compare=[c for item, _ in batch for c in item.request.compare],
            success=[op for item, _ in batch for op in item.request.success],
        )
        try:
            resp = await self._send_batch(combined)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, (UnavailableError, DeadlineExceededError)) or not refused(exc):
                # etcd is unreachable, timed out, or failed in a way that leaves open whether
                # the batch was applied: every write gets that error, and only its own caller
                # (Storage._txn, which knows what it wrote) can tell on a retry.
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                return
            # etcd refused the combination itself (an etcd started with a smaller
            # --max-txn-ops or --max-request-bytes, say): each write alone gets its own answer.
            log.warning(
                "etcd refused a txn of %d writes (%s); sending them one by one", len(batch), exc
            )
            await asyncio.gather(*(self._alone(waiter) for waiter in batch))
            return
        if resp.succeeded:
            result = BatchedResult(int(resp.header.revision))
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(result)
            return
        # Some compare failed, so nothing was written: each write again, alone, for its own
        # answer (the others most likely succeed now).
        await asyncio.gather(*(self._alone(waiter) for waiter in batch))

    async def _alone(self, waiter: Waiter) -> None:
        item, fut = waiter
        try:
            resp = await self._send_one(item.request, item.operation)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not fut.done():
                fut.set_exception(exc)
            return
        if not fut.done():
            fut.set_result(resp)
