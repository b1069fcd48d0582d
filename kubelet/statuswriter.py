"""Groups the kubelet's pod status writes into Pods/UpdateStatusBatch RPCs.

Each pod worker calls `StatusWriter.write(pod)` and gets the pod's new resourceVersion or the
exact error its own UpdateStatus would have raised (ConflictError, NotFoundError, ...), so the
worker's handling (re-read on conflict, stop on not-found) is unchanged. Under it, the writes
that are ready at the same moment share one RPC, as the scheduler's binds share BindBatch
(scheduler/binder.py): with no RPC in flight a write leaves on the next turn of the event loop
(no timer: an idle kubelet adds no latency), and while `max_in_flight` RPCs are out new writes
wait and leave together (at most `max_batch` per RPC) as soon as one returns. The apiserver
still runs every pod as its own UpdateStatus (NodeRestriction, validation, compare-and-swap);
what is saved is the per-RPC cost on both ends, which dominates when many of a node's pods
change together (after a kubelet restart, a DaemonSet rollout, a burst of pods landing on the
node). The kubelet keeps one writer per node, so a process hosting many (hollow) nodes makes
the calls as many real kubelets would, never one call across nodes.

A write made while nothing is out, and a batch of one, go as a plain UpdateStatus: a batch of
one would cost both ends more than the call it replaces. With `streams` (the kubelet's default;
--write-streams=false turns it off) those go as messages of the node's own
Pods/UpdateStatusStream (`pipelined`: one stream per writer, so per node; each message is
exactly an UpdateStatus call to the apiserver, at a fraction of a call's cost on both ends;
unary calls where the apiserver does not serve it). The status subresource stores the status as
sent, so a batch's answer carries only each pod's new resourceVersion.

Authorization covers a whole request, so a batch refused as a whole (PERMISSION_DENIED: one of
its pods is no longer the node's to write) is sent again one UpdateStatus per pod, each getting
its own answer. If the apiserver does not serve UpdateStatusBatch (UNIMPLEMENTED), or the client
has no `update_status_batch` (an in-memory fake), the writer sends one UpdateStatus per pod.

Concurrency: one event loop; `write` may be called from any number of tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tinykube.batching import MicroBatcher
from tinykube.errors import ForbiddenError, TinykubeError, UnimplementedError
from tinykube.protocols import pipelined
from tinykube.v1 import pod_pb2

log = logging.getLogger(__name__)

SendBatch = Callable[[Sequence[pod_pb2.Pod]], Awaitable[list[str | TinykubeError]]]


class StatusWriter(MicroBatcher[pod_pb2.Pod, str]):
    def __init__(
        self,
        client: Any,
        *,
        max_batch: int = 100,
        max_in_flight: int = 2,
        on_batch: Callable[[int], None] = lambda size: None,
        streams: bool = False,
    ) -> None:
        super().__init__(max_in_flight=max_in_flight, max_batch=max_batch)
        self._client = client
        # With `streams`: this writer's (so this node's) own write stream for single writes.
        self._pods = pipelined(client.pods) if streams else client.pods
        self._send_batch: SendBatch | None = getattr(client, "update_status_batch", None)
        self._on_batch = on_batch

    @property
    def batching(self) -> bool:
        """False without UpdateStatusBatch (the apiserver said UNIMPLEMENTED, or a fake)."""
        return self._send_batch is not None

    async def write(self, pod: pod_pb2.Pod) -> str:
        """Write `pod`'s status (its resourceVersion a precondition); the new resourceVersion,
        or raises the TinykubeError its own UpdateStatus would have raised."""
        if self._send_batch is None:
            return await self._send_one(pod)
        if self._in_flight == 0 and not self.pending:
            # Nothing out: this write goes alone, as a plain UpdateStatus (a batch of one
            # costs both ends more); writes made while it is out queue and go together.
            self._in_flight += 1
            try:
                return await self._send_one(pod)
            finally:
                self._in_flight -= 1
                self._kick()
        return await self.enqueue(pod)

    async def _send_one(self, pod: pod_pb2.Pod) -> str:
        stored = await self._pods.update_status(pod)
        return str(stored.metadata.resourceVersion)

    def abandoned(self) -> Exception:
        return TinykubeError("status write batch cancelled")

    async def send(self, batch: list[tuple[pod_pb2.Pod, asyncio.Future[str]]]) -> None:
        pods = [p for p, _ in batch]
        results: list[Any]
        try:
            if len(pods) == 1:  # alone: a plain UpdateStatus
                results = list(
                    await asyncio.gather(self._send_one(pods[0]), return_exceptions=True)
                )
            elif self._send_batch is None:  # became unbatched while this batch waited
                raise UnimplementedError("UpdateStatusBatch")
            else:
                self._on_batch(len(batch))
                results = list(await self._send_batch(pods))
        except UnimplementedError:
            if self._send_batch is not None:
                log.warning("apiserver does not serve Pods/UpdateStatusBatch; one RPC per pod")
            self._send_batch = None
            results = await asyncio.gather(
                *(self._send_one(p) for p in pods), return_exceptions=True
            )
        except ForbiddenError as exc:
            # Authorization covers the whole request: one pod the node may not write (bound
            # elsewhere since) refuses them all. Each pod alone gets its own answer.
            if len(pods) == 1:
                results = [exc]
            else:
                results = await asyncio.gather(
                    *(self._send_one(p) for p in pods), return_exceptions=True
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the whole RPC failed: every write in it failed
            results = [exc] * len(batch)
        self.settle(batch, results)
        # The errors' tracebacks hold this frame; its names for them (the results, and the
        # batch's futures now holding them) would make cycles only the cyclic GC frees.
        del batch, results
