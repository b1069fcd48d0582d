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

from tinykube.batching import MicroBatcher
from tinykube.client import BindItem
from tinykube.errors import TinykubeError, UnimplementedError

log = logging.getLogger(__name__)

SendBatch = Callable[[Sequence[BindItem]], Awaitable[list[str | TinykubeError]]]
SendOne = Callable[[BindItem], Awaitable[str]]


class BindBatcher(MicroBatcher[BindItem, str]):
    def __init__(
        self,
        send_batch: SendBatch,
        send_one: SendOne,
        *,
        max_batch: int = 100,
        max_in_flight: int = 2,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        super().__init__(max_in_flight=max_in_flight, max_batch=max_batch)
        self._send_batch = send_batch
        self._send_one = send_one
        self._on_batch = on_batch
        self.batching = True  # False after the apiserver said UNIMPLEMENTED

    async def bind(self, item: BindItem) -> str:
        """Bind one pod; raises the TinykubeError its own Bind would have raised."""
        if not self.batching:
            return await self._send_one(item)
        return await self.enqueue(item)

    def abandoned(self) -> Exception:
        return TinykubeError("bind batch cancelled")

    async def send(self, batch: list[tuple[BindItem, asyncio.Future[str]]]) -> None:
        self._on_batch(len(batch))
        results: Sequence[str | BaseException]
        try:
            results = await self._send_batch([item for item, _ in batch])
        except UnimplementedError:
            log.warning("apiserver does not serve Pods/BindBatch; binding one pod per RPC")
            self.batching = False
            results = await asyncio.gather(
                *(self._send_one(item) for item, _ in batch), return_exceptions=True
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the whole RPC failed: every bind in it failed
            results = [exc] * len(batch)
        self.settle(batch, results)
        # The errors' tracebacks hold this frame; its names for them (the results, and the
        # batch's futures now holding them) would make cycles only the cyclic GC frees.
        del batch, results
