"""A handler that answers after its call's deadline: gRPC already sent DEADLINE_EXCEEDED.

Under load the event loop learns of a passed deadline late (the handler's cancellation is queued
behind the work that made it late), so a handler can reach `abort_with` (or `answer_with`, which
sets the status its return sends) after gRPC core ended the call. The abort then failed
(ExecuteBatchError, then "Abort already called!" from the error path: two tracebacks in the
apiserver's log and an INTERNAL in its metrics, 93 of them in a 2,000-node load run). A real
grpc.aio server in this process, no etcd.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tinykube.errors import NotFoundError, abort_with, answer_with

pytestmark = pytest.mark.integration


class LateHealth(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    def __init__(self, abort: bool) -> None:
        self.abort = abort
        self.raised: list[str] = []

    async def Check(self, request: Any, context: Any) -> Any:
        # A busy event loop (blocked on purpose): the client's 0.1 s deadline passes meanwhile.
        time.sleep(0.4)  # noqa: ASYNC251
        error = NotFoundError('pods "web" not found')
        try:
            if self.abort:
                await abort_with(context, error)
            answer_with(context, error)
            return None
        except BaseException as exc:
            self.raised.append(type(exc).__name__)
            raise


@pytest.mark.parametrize("abort", [True, False], ids=["abort_with", "answer_with"])
async def test_abort_after_the_deadline_ends_the_call_quietly(
    caplog: pytest.LogCaptureFixture, abort: bool
) -> None:
    servicer = LateHealth(abort)
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        with caplog.at_level(logging.ERROR):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Check(health_pb2.HealthCheckRequest(), timeout=0.1)
            assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            for _ in range(50):
                if servicer.raised:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)  # let gRPC finish the handler's task
        assert servicer.raised == ["CancelledError"]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        await server.stop(0)
