"""Group concurrent guarded writes into one etcd transaction.

Every apiserver write is a compare-and-swap txn on one key. Under load hundreds of them per
second are in flight at once, and each etcd call costs the apiserver more CPU (grpc.aio's call
set-up and completion) than the handler's own work, and costs etcd a raft entry. `TxnBatcher`
sends the txns submitted in the same turn of the event loop, and those that arrive while
`max_in_flight` batches are in flight, as one Txn whose compares and success ops are the
concatenation of theirs. Compares are ANDed, so the batch succeeds only if every item's
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
limits of 128 ops per txn and 1.5 MiB per request. When idle an item is sent at once: batching
adds no latency, it only uses the time a busy apiserver would have waited anyway.

Runs on the apiserver's event loop; `submit` may be called from any number of tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aetcd import rpc

log = logging.getLogger(__name__)

# etcd's --max-txn-ops default is 128 (for compares and for ops each); --max-request-bytes 1.5 MiB.
MAX_TXN_OPS = 128
MAX_BATCH_BYTES = 1024 * 1024


@dataclass(slots=True)
class _Item:
    key: bytes
    request: Any  # rpc.TxnRequest of this write alone (with its failure reads)
    operation: str  # "create", "update", "delete": the metric label when sent alone
    future: asyncio.Future[Any]
    size: int = field(default=0)


@dataclass(frozen=True, slots=True)
class BatchedResult:
    """What a write that succeeded as part of a batch gets back: the txn's revision."""

    revision: int
    succeeded: bool = True


SendBatch = Callable[[Any], Awaitable[Any]]
SendOne = Callable[[Any, str], Awaitable[Any]]


class TxnBatcher:
    def __init__(
        self,
        send_batch: SendBatch,
        send_one: SendOne,
        *,
        max_in_flight: int = 2,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        # send_batch(TxnRequest) -> TxnResponse for a combined txn; send_one(TxnRequest,
        # operation) -> TxnResponse for one item alone. Both raise the mapped API error.
        self._send_batch = send_batch
        self._send_one = send_one
        self.max_in_flight = max_in_flight
        self._on_batch = on_batch
        self._pending: list[_Item] = []
        self._in_flight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        # The group (a kind's key prefix) of a key whose writes must not share a txn, or None.
        self.exclusive: Callable[[bytes], bytes | None] = lambda key: None

    async def submit(self, key: bytes, request: Any, operation: str) -> Any:
        """Run `request` (a txn writing `key` only); a TxnResponse or a `BatchedResult`."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item(key, request, operation, fut, request.ByteSize()))
        self._kick()
        return await fut

    def _kick(self) -> None:
        if self._scheduled or not self._pending or self._in_flight >= self.max_in_flight:
            return
        # call_soon, not now: writes submitted in this same turn of the loop join the batch.
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._launch)

    def _take_batch(self) -> list[_Item]:
        batch: list[_Item] = []
        rest: list[_Item] = []
        keys: set[bytes] = set()
        groups: set[bytes] = set()
        exclusive = self.exclusive
        compares = ops = size = 0
        for item in self._pending:
            if item.future.done():
                continue  # its caller was cancelled
            req = item.request
            n_cmp, n_ops = len(req.compare), len(req.success)
            group = exclusive(item.key)
            fits = (
                item.key not in keys
                and (group is None or group not in groups)
                and compares + n_cmp <= MAX_TXN_OPS
                and ops + n_ops <= MAX_TXN_OPS
                and (not batch or size + item.size <= MAX_BATCH_BYTES)
            )
            if not fits:
                rest.append(item)
                continue
            if group is not None:
                groups.add(group)
            batch.append(item)
            keys.add(item.key)
            compares += n_cmp
            ops += n_ops
            size += item.size
        self._pending = rest
        return batch

    def _launch(self) -> None:
        self._scheduled = False
        while self._pending and self._in_flight < self.max_in_flight:
            batch = self._take_batch()
            if not batch:
                continue
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[_Item]) -> None:
        try:
            self._on_batch(len(batch))
            if len(batch) == 1:
                await self._alone(batch[0])
                return
            combined = rpc.TxnRequest(
                compare=[c for item in batch for c in item.request.compare],
                success=[op for item in batch for op in item.request.success],
            )
            try:
                resp = await self._send_batch(combined)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # etcd failed the whole call (unavailable, timed out): as each write alone
                # would have, every one of them fails with that error.
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                return
            if resp.succeeded:
                result = BatchedResult(int(resp.header.revision))
                for item in batch:
                    if not item.future.done():
                        item.future.set_result(result)
                return
            # Some compare failed, so nothing was written: each write again, alone, for its
            # own answer (the others most likely succeed now).
            await asyncio.gather(*(self._alone(item) for item in batch))
        finally:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(RuntimeError("etcd write batch abandoned"))
            self._in_flight -= 1
            self._kick()

    async def _alone(self, item: _Item) -> None:
        try:
            resp = await self._send_one(item.request, item.operation)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not item.future.done():
                item.future.set_exception(exc)
            return
        if not item.future.done():
            item.future.set_result(resp)
