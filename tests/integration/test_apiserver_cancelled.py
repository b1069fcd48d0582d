"""No RPC ends CANCELLED because the apiserver was busy, and cancelled handlers are counted.

grpc.aio accepts calls one at a time per method, each needing a turn of the event loop. While
the loop is busy, arrived calls wait unaccepted in gRPC core, which used to drop them with
status CANCELLED (past 1000 waiting, or after 30 s) without the handler ever running: under load
1-3 % of Creates were lost, and clients do not retry CANCELLED. These tests stall the
apiserver's event loop (the test shares it) while a thread with a synchronous channel fires
Creates at it, then check every call's status.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any

import grpc
import pytest

from tinykube.errors import RETRY_PUSHBACK_KEY
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, pod_pb2, pod_pb2_grpc

from .conftest import RunningAPIServer

pytestmark = pytest.mark.integration


def _pod(name: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = name
    pod.metadata.namespace = "default"
    container = pod.spec.containers.add()
    container.name = "c"
    container.image = "registry.k8s.io/pause:3.9"
    return pod


class _Firing:
    """Hand-offs between the test (which stalls the loop) and the client thread."""

    def __init__(self) -> None:
        self.connected = threading.Event()
        self.go = threading.Event()
        self.issued = threading.Event()


def _fire_creates(
    address: str, count: int, timeout: float, firing: _Firing
) -> collections.Counter[str]:
    """Connect; on `go` start `count` Creates at once (sync channel, core threads); wait."""
    codes: collections.Counter[str] = collections.Counter()
    with grpc.insecure_channel(address, options=list(CHANNEL_OPTIONS)) as channel:
        create = channel.unary_unary(
            "/tinykube.v1.Pods/Create",
            request_serializer=pod_pb2.CreatePodRequest.SerializeToString,
            response_deserializer=pod_pb2.Pod.FromString,
        )
        grpc.channel_ready_future(channel).result(timeout=30)
        firing.connected.set()
        firing.go.wait(60)
        futures = [
            create.future(pod_pb2.CreatePodRequest(pod=_pod(f"p-{i:05d}")), timeout=timeout)
            for i in range(count)
        ]
        firing.issued.set()
        for future in futures:
            try:
                future.result()
                codes["OK"] += 1
            except grpc.RpcError as exc:
                code = exc.code().name
                trailers: Any = exc.trailing_metadata() or ()
                keys = {str(k) for k, _ in trailers}
                if code == "RESOURCE_EXHAUSTED" and RETRY_PUSHBACK_KEY in keys:
                    code = "RESOURCE_EXHAUSTED with a retry hint"  # the in-flight limit's
                codes[code] += 1
    return codes


async def _fire_while_stalled(
    address: str, count: int, deadline: float
) -> collections.Counter[str]:
    """Fire Creates while the (shared) event loop is blocked; every call's final status.

    Blocking is the point: it is what a busy apiserver loop looks like to gRPC core. The loop
    stays blocked until all calls are issued and have had a moment to reach the server.
    """
    firing = _Firing()
    fired = asyncio.create_task(asyncio.to_thread(_fire_creates, address, count, deadline, firing))
    await asyncio.to_thread(firing.connected.wait, 60)
    firing.go.set()
    assert firing.issued.wait(60), "the client thread did not issue its calls"
    time.sleep(1.0)  # noqa: ASYNC251 - stalling the loop on purpose
    return await fired


def _count(apiserver: RunningAPIServer, method: str, code: str) -> float:
    value = apiserver.server.metrics.registry.get_sample_value(
        "apiserver_request_total", {"method": method, "code": code}
    )
    return value or 0.0


async def test_calls_queued_while_the_loop_is_busy_are_served_not_cancelled(
    apiserver: RunningAPIServer,
) -> None:
    # More than core's former pending limit (1000, random drops up to 3000) wait at once.
    count = 2500
    codes = await _fire_while_stalled(apiserver.address, count, 120.0)
    # Served, or refused by the in-flight limit with its retry hint (the call never ran, so a
    # client sends it again) once its queue is full; never dropped as CANCELLED.
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED with a retry hint"}, codes
    assert codes["OK"] >= 1000, codes
    async with grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS)) as ch:
        pods = await pod_pb2_grpc.PodsStub(ch).List(
            meta_pb2.ListRequest(namespace="default"), timeout=30
        )
    assert len(pods.items) == codes["OK"]


async def test_a_deadline_that_passes_while_queued_is_deadline_exceeded(
    apiserver: RunningAPIServer,
) -> None:
    # DEADLINE_EXCEEDED (retried by tinykube.client), never CANCELLED (not retried).
    codes = await _fire_while_stalled(apiserver.address, 50, 0.3)
    assert set(codes) <= {"OK", "DEADLINE_EXCEEDED"}, codes
    assert codes["DEADLINE_EXCEEDED"] > 0, codes


async def test_a_handler_cancelled_by_its_deadline_is_counted(
    apiserver: RunningAPIServer,
) -> None:
    cache = apiserver.server.caches["Pod"]
    future_rv = str(cache.revision + 1_000_000)
    before = _count(apiserver, "Pods/List", "DEADLINE_EXCEEDED")
    async with grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS)) as ch:
        stub = pod_pb2_grpc.PodsStub(ch)
        # A resourceVersion from the future makes List wait for the cache (cache_wait_seconds,
        # 3 s) inside the handler; the client's deadline ends it first.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.List(meta_pb2.ListRequest(resourceVersion=future_rv), timeout=0.5)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    for _ in range(200):
        if _count(apiserver, "Pods/List", "DEADLINE_EXCEEDED") > before:
            break
        await asyncio.sleep(0.05)
    assert _count(apiserver, "Pods/List", "DEADLINE_EXCEEDED") == before + 1


async def test_a_handler_cancelled_by_the_client_is_counted(
    apiserver: RunningAPIServer,
) -> None:
    cache = apiserver.server.caches["Pod"]
    future_rv = str(cache.revision + 1_000_000)
    before = _count(apiserver, "Pods/List", "CANCELLED")
    async with grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS)) as ch:
        stub = pod_pb2_grpc.PodsStub(ch)
        call = stub.List(meta_pb2.ListRequest(resourceVersion=future_rv), timeout=30)
        # Cancel only once the handler is waiting inside the watch cache.
        for _ in range(200):
            if cache._waiters:
                break
            await asyncio.sleep(0.01)
        assert cache._waiters, "the List handler never started waiting"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    for _ in range(200):
        if _count(apiserver, "Pods/List", "CANCELLED") > before:
            break
        await asyncio.sleep(0.05)
    assert _count(apiserver, "Pods/List", "CANCELLED") == before + 1


async def test_a_watch_ended_by_the_client_is_counted_cancelled(
    apiserver: RunningAPIServer,
) -> None:
    before_cancelled = _count(apiserver, "Pods/Watch", "CANCELLED")
    before_ok = _count(apiserver, "Pods/Watch", "OK")
    async with grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS)) as ch:
        stub = pod_pb2_grpc.PodsStub(ch)
        cache = apiserver.server.caches["Pod"]
        watchers = cache.watcher_count()
        call = stub.Watch(meta_pb2.WatchRequest(namespace="default"), timeout=30)
        for _ in range(500):
            if cache.watcher_count() > watchers:
                break
            await asyncio.sleep(0.01)
        assert cache.watcher_count() > watchers, "the watch never reached the watch cache"
        call.cancel()
    for _ in range(200):
        if _count(apiserver, "Pods/Watch", "CANCELLED") > before_cancelled:
            break
        await asyncio.sleep(0.05)
    assert _count(apiserver, "Pods/Watch", "CANCELLED") == before_cancelled + 1
    assert _count(apiserver, "Pods/Watch", "OK") == before_ok
