"""The apiserver while its etcd dies and comes back (a dedicated etcd, not the shared one).

While etcd is down every call is UNAVAILABLE with a message naming etcd and health reports
NOT_SERVING; when etcd returns the apiserver recovers by itself and open watches resume from
their last revision with nothing lost or repeated.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.conftest import (
    RunningAPIServer,
    expect_error,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.kinds import ALL_KINDS
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, pod_pb2

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
async def own_etcd() -> AsyncIterator[EtcdServer]:
    server = EtcdServer()
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.cleanup)


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"condition not met within {within}s")


async def test_etcd_down_is_unavailable_and_the_apiserver_recovers(own_etcd: EtcdServer) -> None:
    running: RunningAPIServer = await start_apiserver(
        make_settings(own_etcd.endpoint, etcd_request_timeout_seconds=2.0)
    )
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        stubs = make_stubs(ch)
        health = health_pb2_grpc.HealthStub(ch)

        async def serving() -> bool:
            resp = await health.Check(health_pb2.HealthCheckRequest(service=""))
            return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

        assert await serving()
        first = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("p0")))
        watch = stubs.pods.Watch(
            meta_pb2.WatchRequest(resourceVersion=first.metadata.resourceVersion)
        )
        # The watch must be serving before etcd goes: one from a revision the cache has not
        # reached yet waits for it only a few seconds, then ends "Too large resource version"
        # (as kube's does), and with etcd down the cache would not get there in time.
        await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("p-live")))
        live = await asyncio.wait_for(watch.read(), 20)
        while isinstance(live, pod_pb2.PodWatchEvent) and live.type == "BOOKMARK":
            live = await asyncio.wait_for(watch.read(), 20)
        assert isinstance(live, pod_pb2.PodWatchEvent)
        assert (live.type, live.object.metadata.name) == ("ADDED", "p-live")

        await asyncio.to_thread(own_etcd.kill)
        get = meta_pb2.GetRequest(namespace="default", name="p0")
        details = await expect_error(stubs.pods.Get(get), grpc.StatusCode.UNAVAILABLE)
        assert details.startswith("etcd is unavailable: ")
        await expect_error(
            stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("p1"))),
            grpc.StatusCode.UNAVAILABLE,
        )
        await expect_error(stubs.pods.List(meta_pb2.ListRequest()), grpc.StatusCode.UNAVAILABLE)
        await eventually(lambda: _not(serving()))

        await asyncio.to_thread(own_etcd.start)

        async def get_works() -> bool:
            try:
                await stubs.pods.Get(get)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                return False
            return True

        await eventually(get_works)
        await eventually(serving)
        # The open watch resumed: later changes arrive, in order, none repeated.
        await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("p1")))
        await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("p2")))
        names: list[tuple[str, str]] = []
        while len(names) < 2:
            msg = await asyncio.wait_for(watch.read(), 20)
            assert isinstance(msg, pod_pb2.PodWatchEvent)
            if msg.type != "BOOKMARK":
                names.append((msg.type, msg.object.metadata.name))
        assert names == [("ADDED", "p1"), ("ADDED", "p2")]
        listed = await stubs.pods.List(meta_pb2.ListRequest())
        assert [p.metadata.name for p in listed.items] == ["p-live", "p0", "p1", "p2"]
        # Still one etcd watch per kind.
        assert running.server.etcd_watch_count() == len(ALL_KINDS)
        watch.cancel()
    finally:
        await ch.close()
        await running.server.stop()


async def _not(value: Awaitable[bool]) -> bool:
    return not await value
