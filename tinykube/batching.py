"""Micro-batching: requests that are ready at the same moment leave together.

`MicroBatcher` holds the queue and the flow control shared by the scheduler's bind batcher, the
kubelet's status writer and the apiserver's etcd txn batcher. A request waits only while
`max_in_flight` batches are out: with none in flight it leaves on the next turn of the event
loop (no timer, so nothing is added to an idle request's latency; requests made in the same turn
join it), and while batches are out new requests queue and leave together as soon as one
returns, at most `max_batch` in one (None: no limit). Subclasses say how a batch is sent
(`send`; `settle` hands each waiter its item's result or error), what the waiters of a batch
that ended without settling them get (`abandoned`: the send was cancelled) and, where the
defaults do not fit, how a batch is cut from the queue (`take_batch`) and when another batch may
leave while some are out (`may_launch`). A waiter `send` leaves unsettled fails with
`abandoned()`.

Concurrency: one event loop; `enqueue` may be called from any number of tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")  # what a queued request carries
R = TypeVar("R")  # what its caller gets back


class MicroBatcher(Generic[T, R]):
    def __init__(self, *, max_in_flight: int = 2, max_batch: int | None = None) -> None:
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch
        self.pending: list[tuple[T, asyncio.Future[R]]] = []
        self._in_flight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def enqueue(self, item: T) -> R:
        """Queue `item` and wait for its result (or its error)."""
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.pending.append((item, fut))
        self._kick()
        try:
            return await fut
        finally:
            # A failed future holds its error, whose traceback holds this frame once raised
            # here: naming the future still would make a cycle only the cyclic GC frees.
            del fut

    def take_batch(self) -> list[tuple[T, asyncio.Future[R]]]:
        """Remove and return the next batch from `pending` (waiters whose future is done, i.e.
        cancelled callers, are to be dropped). The default takes the first `max_batch` waiting
        (all of them if None), dropping the cancelled among them."""
        n = len(self.pending) if self.max_batch is None else self.max_batch
        batch = [(i, f) for i, f in self.pending[:n] if not f.done()]
        del self.pending[:n]
        return batch

    async def send(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        """Send one batch and settle its futures."""
        raise NotImplementedError

    def settle(
        self, batch: list[tuple[T, asyncio.Future[R]]], results: Sequence[R | BaseException]
    ) -> None:
        """Give each waiter of `batch` its result, in order: an exception is raised to its caller,
        anything else returned. Waiters already done (cancelled callers) are passed over."""
        for (_, fut), result in zip(batch, results, strict=True):
            if fut.done():
                continue
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)

    def may_launch(self) -> bool:
        """Whether a batch may leave now, `pending` being non-empty. The default: while fewer
        than `max_in_flight` are out."""
        return self._in_flight < self.max_in_flight

    def abandoned(self) -> Exception:
        """The error of a waiter whose batch ended without settling it (a cancelled send)."""
        return RuntimeError("batch abandoned")

    def _kick(self) -> None:
        if self._scheduled or not self.pending or not self.may_launch():
            return
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._launch)

    def _launch(self) -> None:
        self._scheduled = False
        while self.pending and self.may_launch():
            batch = self.take_batch()
            if not batch:
                continue
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            await self.send(batch)
        finally:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(self.abandoned())
            self._in_flight -= 1
            self._kick()

    async def close(self) -> None:
        """Cancel the batches in flight (their waiters fail with `abandoned()`)."""
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
