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
    grpc.StatusCode.PERMISSION_DENIED: errors.TinykubeError,
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


async def test_watch_maps_stream_errors() -> None:
    async with Client("127.0.0.1:9") as c:

        class Stream:
            def __init__(self) -> None:
                self.cancelled = False

            def __aiter__(self) -> Stream:
                return self

            async def __anext__(self) -> pod_pb2.PodWatchEvent:
                raise rpc_error(grpc.StatusCode.OUT_OF_RANGE, "too old resource version: 1 (5)")

            def cancel(self) -> None:
                self.cancelled = True

        stream = Stream()

        class WatchStub:
            def Watch(self, request: Any) -> Stream:
                assert request.resource_version == "1"
                assert request.allow_watch_bookmarks
                return stream

        c.pods._stub = WatchStub()
        with pytest.raises(errors.ResourceExpiredError, match="too old"):
            async for _ in c.pods.watch(resource_version="1", allow_bookmarks=True):
                pass
        assert stream.cancelled
