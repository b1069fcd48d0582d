"""Groups the scheduler's binds into Pods/BindBatch RPCs.

Each binding cycle calls `BindBatcher.bind(item)` and gets the pod's new resourceVersion or the
exact error its own Bind would have raised, so the binding cycle's failure handling (unreserve,
forget, requeue; ALREADY_EXISTS not retried) is unchanged. Under it, binds that are ready at the
same moment share one RPC: when no RPC is in flight a bind leaves on the next turn of the event
loop (no timer, so no added latency when idle); while `max_in_flight` RPCs are out, new binds
wait and leave together (at most `max_batch` per RPC) as soon as one returns. The apiserver
still runs every binding as its own compare-and-swap txn; what is saved is the per-RPC cost,
which dominates a Python gRPC server's CPU per bind.

If the apiserver does not serve BindBatch (UNIMPLEMENTED), the batcher falls back to one Bind
per pod for the rest of its life.

Concurrency: one event loop; `bind` may be called from any number of tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from tinykube.client import BindItem
from tinykube.errors import TinykubeError, UnimplementedError

log = logging.getLogger(__name__)

SendBatch = Callable[[Sequence[BindItem]], Awaitable[list[str | TinykubeError]]]
SendOne = Callable[[BindItem], Awaitable[str]]


class BindBatcher:
    def __init__(
        self,
        send_batch: SendBatch,
        send_one: SendOne,
        *,
        max_batch: int = 100,
        max_in_flight: int = 2,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        self._send_batch = send_batch
        self._send_one = send_one
        self.max_batch = max_batch
        self.max_in_flight = max_in_flight
        self._on_batch = on_batch
        self._pending: list[tuple[BindItem, asyncio.Future[str]]] = []
        self._in_flight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.batching = True  # False after the apiserver said UNIMPLEMENTED

    async def bind(self, item: BindItem) -> str:
        """Bind one pod; raises the TinykubeError its own Bind would have raised."""
        if not self.batching:
            return await self._send_one(item)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        self._kick()
        return await fut

    def _kick(self) -> None:
        if self._scheduled or not self._pending or self._in_flight >= self.max_in_flight:
            return
        # call_soon rather than sending now: binds readied in this same turn of the loop join
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._launch)

    def _launch(self) -> None:
        self._scheduled = False
        while self._pending and self._in_flight < self.max_in_flight:
            batch = [(i, f) for i, f in self._pending[: self.max_batch] if not f.done()]
            del self._pending[: self.max_batch]
            if not batch:
                continue
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[BindItem, asyncio.Future[str]]]) -> None:
        try:
            self._on_batch(len(batch))
            results: list[str | TinykubeError] | None = None
            error: BaseException | None = None
            try:
                results = await self._send_batch([item for item, _ in batch])
            except UnimplementedError:
                log.warning("apiserver does not serve Pods/BindBatch; binding one pod per RPC")
                self.batching = False
                results = await asyncio.gather(
                    *(self._send_one(item) for item, _ in batch), return_exceptions=True
                )  # type: ignore[assignment]
            except asyncio.CancelledError:
                error = TinykubeError("bind batch cancelled")
                raise
            except Exception as exc:  # the whole RPC failed: every bind in it failed
                error = exc
            for k, (_, fut) in enumerate(batch):
                if fut.done():
                    continue  # its binding cycle was cancelled
                if results is None:
                    fut.set_exception(error or TinykubeError("bind batch failed"))
                    continue
                r = results[k]
                if isinstance(r, BaseException):
                    fut.set_exception(r)
                else:
                    fut.set_result(r)
        finally:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(TinykubeError("bind batch cancelled"))
            self._in_flight -= 1
            self._kick()

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
