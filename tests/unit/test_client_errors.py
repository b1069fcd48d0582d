"""Client error mapping and retry policy for every gRPC status code, with a fake stub (no I/O)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tinykube import errors
from tinykube.client import Client
from tinykube.v1 import pod_pb2

EXPECTED: dict[grpc.StatusCode, type[errors.TinykubeError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidError,
    grpc.StatusCode.NOT_FOUND: errors.NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: errors.AlreadyExistsError,
    grpc.StatusCode.ABORTED: errors.ConflictError,
    grpc.StatusCode.FAILED_PRECONDITION: errors.PreconditionFailedError,
    grpc.StatusCode.OUT_OF_RANGE: errors.ResourceExpiredError,
    grpc.StatusCode.UNAVAILABLE: errors.UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceededError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhaustedError,
    grpc.StatusCode.UNIMPLEMENTED: errors.UnimplementedError,
    grpc.StatusCode.CANCELLED: errors.CancelledError,
    grpc.StatusCode.INTERNAL: errors.InternalError,
    grpc.StatusCode.PERMISSION_DENIED: errors.ForbiddenError,
    grpc.StatusCode.UNAUTHENTICATED: errors.UnauthenticatedError,
}


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class FailingStub:
    """Every unary method fails `failures` times with `code`, then returns a Pod."""

    def __init__(self, code: grpc.StatusCode, failures: int = 1000) -> None:
        self.code = code
        self.failures = failures
        self.calls = 0
        self.timeouts: list[float] = []

    def __getattr__(self, method: str) -> Any:
        async def call(request: Any, timeout: float | None = None) -> pod_pb2.Pod:  # noqa: ASYNC109
            self.calls += 1
            self.timeouts.append(timeout or 0.0)
            if self.calls <= self.failures:
                raise rpc_error(self.code, f"{method} failed")
            return pod_pb2.Pod()

        return call


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    # The channel never connects: the stub is replaced before any RPC.
    async with Client(
        "127.0.0.1:9", timeout=7.5, retries=3, backoff_initial=0.001, backoff_max=0.001
    ) as c:
        yield c


@pytest.mark.parametrize("code", list(EXPECTED), ids=lambda c: c.name)
async def test_each_code_maps_to_its_error_and_only_transient_ones_retry(
    client: Client, code: grpc.StatusCode
) -> None:
    stub = FailingStub(code)
    client.pods._stub = stub
    with pytest.raises(errors.TinykubeError) as caught:
        await client.pods.get("web", "default")
    assert type(caught.value) is EXPECTED[code]
    assert isinstance(caught.value.__cause__, grpc.aio.AioRpcError)
    assert "Get failed" in caught.value.message
    retried = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert stub.calls == (4 if retried else 1)
    assert stub.timeouts == [7.5] * stub.calls  # a deadline on every attempt


async def test_transient_failure_then_success(client: Client) -> None:
    stub = FailingStub(grpc.StatusCode.UNAVAILABLE, failures=2)
    client.pods._stub = stub
    assert await client.pods.get("web", "default") == pod_pb2.Pod()
    assert stub.calls == 3


class Stream:
    """A fake server stream: yields `items`, then raises `error` (if any)."""

    def __init__(self, items: list[Any], error: grpc.aio.AioRpcError | None = None) -> None:
        self.items = list(items)
        self.error = error
        self.cancelled = False

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Any:
        if self.items:
            return self.items.pop(0)
        if self.error is not None:
            raise self.error
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.cancelled = True


class WatchStub:
    """Records which watch methods were called; WatchBatch is UNIMPLEMENTED if `batch` is None."""

    def __init__(self, batch: Stream | None, plain: Stream | None = None) -> None:
        self.batch = batch
        self.plain = plain
        self.calls: list[str] = []

    def WatchBatch(self, request: Any) -> Stream:
        self.calls.append("WatchBatch")
        assert request.resourceVersion == "1"
        assert request.allowWatchBookmarks
        if self.batch is None:
            return Stream([], rpc_error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!"))
        return self.batch

    def Watch(self, request: Any) -> Stream:
        self.calls.append("Watch")
        assert self.plain is not None
        return self.plain


def _event(name: str, kind: str = "ADDED") -> pod_pb2.PodWatchEvent:
    event = pod_pb2.PodWatchEvent(type=kind)
    event.object.metadata.name = name
    return event


@pytest.mark.parametrize("batched", [True, False])
async def test_watch_maps_stream_errors(batched: bool) -> None:
    async with Client("127.0.0.1:9") as c:
        too_old = rpc_error(grpc.StatusCode.OUT_OF_RANGE, "too old resource version: 1 (5)")
        stream = Stream([], too_old)
        stub = WatchStub(stream if batched else None, stream)
        c.pods._stub = stub
        with pytest.raises(errors.ResourceExpiredError, match="too old"):
            async for _ in c.pods.watch(resource_version="1", allow_bookmarks=True):
                pass
        assert stream.cancelled
        assert stub.calls == (["WatchBatch"] if batched else ["WatchBatch", "Watch"])


async def test_watch_yields_the_events_of_each_batch_in_order() -> None:
    async with Client("127.0.0.1:9") as c:
        batches = [
            pod_pb2.PodWatchEventBatch(events=[_event("a"), _event("b")]),
            pod_pb2.PodWatchEventBatch(events=[_event("a", "MODIFIED")]),
        ]
        c.pods._stub = WatchStub(Stream(batches))
        seen = [
            (e.type, e.object.metadata.name)
            async for e in c.pods.watch(resource_version="1", allow_bookmarks=True)
        ]
        assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a")]


async def test_watch_falls_back_to_watch_once_watchbatch_is_unimplemented() -> None:
    async with Client("127.0.0.1:9") as c:
        stub = WatchStub(None, Stream([_event("a")]))
        c.pods._stub = stub
        seen = [
            e.object.metadata.name
            async for e in c.pods.watch("", resource_version="1", allow_bookmarks=True)
        ]
        assert seen == ["a"]
        # Remembered for the channel: the next watch goes straight to Watch.
        stub.plain = Stream([_event("b")])
        seen = [
            e.object.metadata.name
            async for e in c.pods.watch("", resource_version="1", allow_bookmarks=True)
        ]
        assert seen == ["b"]
        assert stub.calls == ["WatchBatch", "Watch", "Watch"]


async def test_watch_error_after_a_batch_is_not_taken_for_an_old_server() -> None:
    async with Client("127.0.0.1:9") as c:
        broken = rpc_error(grpc.StatusCode.UNIMPLEMENTED, "some other failure")
        stub = WatchStub(Stream([pod_pb2.PodWatchEventBatch(events=[_event("a")])], broken))
        c.pods._stub = stub
        with pytest.raises(errors.UnimplementedError):
            async for _ in c.pods.watch(resource_version="1", allow_bookmarks=True):
                pass
        assert stub.calls == ["WatchBatch"]
