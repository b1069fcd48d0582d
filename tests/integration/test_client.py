"""The typed client against the real apiserver and etcd: CRUD, watch, error mapping, retries."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tests.integration.test_client_support import TcpProxy, eventually, make_node, make_pod
from tinykube import errors
from tinykube.client import Client
from tinykube.localetcd import EtcdServer
from tinykube.v1 import pod_pb2

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(apiserver: RunningAPIServer) -> AsyncIterator[Client]:
    async with Client(apiserver.address, timeout=5.0) as c:
        await c.wait_ready(5.0)
        yield c


class CountingStub:
    """Wraps a generated stub, counting calls per method (to observe retries)."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self.calls: dict[str, int] = {}

    def __getattr__(self, method: str) -> Any:
        inner = getattr(self._stub, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[method] = self.calls.get(method, 0) + 1
            return inner(*args, **kwargs)

        return call


async def test_crud_roundtrip_is_typed_and_versioned(client: Client) -> None:
    created = await client.pods.create(make_pod("web", app="web"))
    assert isinstance(created, pod_pb2.Pod)
    assert created.metadata.uid and created.metadata.resourceVersion
    got = await client.pods.get("web", "default")
    assert got.metadata.uid == created.metadata.uid
    got.metadata.labels["tier"] = "front"
    updated = await client.pods.update(got)
    assert int(updated.metadata.resourceVersion) > int(created.metadata.resourceVersion)
    listed = await client.pods.list("default", label_selector="tier=front")
    assert [p.metadata.name for p in listed.items] == ["web"]
    assert listed.metadata.resourceVersion
    items, rv = await client.pods.list_all("default", page_size=1)
    assert [p.metadata.name for p in items] == ["web"] and rv
    updated.status.phase = "Running"
    status = await client.pods.update_status(updated)
    assert status.status.phase == "Running"
    await client.nodes.create(make_node("n1"))
    assert (await client.nodes.get("n1")).metadata.name == "n1"
    await client.pods.delete("web", "default", grace_period_seconds=0)
    with pytest.raises(errors.NotFoundError):
        await client.pods.get("web", "default")


async def test_bind_sets_node_and_second_bind_is_already_exists(client: Client) -> None:
    await client.nodes.create(make_node("n1"))
    pod = await client.pods.create(make_pod("bindme"))
    rv = await client.bind("default", "bindme", "n1", uid=pod.metadata.uid)
    assert int(rv) > int(pod.metadata.resourceVersion)
    assert (await client.pods.get("bindme", "default")).spec.nodeName == "n1"
    with pytest.raises(errors.AlreadyExistsError, match="already assigned"):
        await client.bind("default", "bindme", "n1")
    await client.pods.create(make_pod("nowhere"))
    with pytest.raises(errors.NotFoundError):
        await client.bind("default", "nowhere", "no-such-node")
    with pytest.raises(errors.PreconditionFailedError):
        await client.bind("default", "nowhere", "n1", uid="not-the-uid")


async def test_each_status_code_maps_to_its_error(client: Client) -> None:
    with pytest.raises(errors.NotFoundError) as not_found:
        await client.pods.get("missing", "default")
    assert isinstance(not_found.value.__cause__, grpc.aio.AioRpcError)
    assert not_found.value.__cause__.code() == grpc.StatusCode.NOT_FOUND

    await client.pods.create(make_pod("dup"))
    with pytest.raises(errors.AlreadyExistsError):
        await client.pods.create(make_pod("dup"))

    with pytest.raises(errors.InvalidError, match=r"metadata\.name"):
        await client.pods.create(make_pod("Not_A_DNS_Name"))

    stale = await client.pods.get("dup", "default")
    fresh = pod_pb2.Pod()
    fresh.CopyFrom(stale)
    fresh.metadata.labels["a"] = "1"
    await client.pods.update(fresh)
    stale.metadata.labels["b"] = "2"
    with pytest.raises(errors.ConflictError):
        await client.pods.update(stale)

    # As in Kubernetes, a failed delete precondition is a conflict (409), not FAILED_PRECONDITION.
    with pytest.raises(errors.ConflictError, match="Precondition failed"):
        await client.pods.delete("dup", "default", uid="wrong-uid")

    await client.nodes.create(make_node("n-pre"))
    with pytest.raises(errors.PreconditionFailedError):
        await client.bind("default", "dup", "n-pre", uid="wrong-uid")

    hole = await TcpProxy(client.target).start()
    hole.blackhole = True  # a server that never answers
    try:
        async with Client(hole.address, timeout=0.3, retries=1) as hurried:
            with pytest.raises(errors.DeadlineExceededError):
                await hurried.pods.get("dup", "default")
    finally:
        await hole.close()

    with pytest.raises(errors.UnavailableError):
        async with Client("127.0.0.1:1", timeout=1.0, retries=1) as nowhere:
            await nowhere.pods.get("dup", "default")


async def test_watch_streams_typed_events_in_order(client: Client) -> None:
    start = await client.pods.list("default")
    rv0 = start.metadata.resourceVersion
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event in client.pods.watch("default", resource_version=rv0):
            assert isinstance(event, pod_pb2.PodWatchEvent)
            seen.append((event.type, event.object.metadata.name))
            if len(seen) == 3:
                return

    task = asyncio.ensure_future(consume())
    await client.pods.create(make_pod("w1"))
    w1 = await client.pods.get("w1", "default")
    w1.metadata.labels["x"] = "y"
    await client.pods.update(w1)
    await client.pods.delete("w1", "default", grace_period_seconds=0)
    await asyncio.wait_for(task, 10)
    assert seen == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]


async def test_watch_from_too_old_revision_is_resource_expired(
    etcd_server: EtcdServer,
) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, watch_cache_size=3))
    try:
        async with Client(running.address) as c:
            first = await c.pods.create(make_pod("p0"))
            for i in range(1, 8):
                await c.pods.create(make_pod(f"p{i}"))
            with pytest.raises(errors.ResourceExpiredError, match="too old resource version"):
                async for _ in c.pods.watch(resource_version=first.metadata.resourceVersion):
                    pass
    finally:
        await running.server.stop()


async def test_not_retried_on_aborted(client: Client) -> None:
    await client.pods.create(make_pod("race"))
    stale = await client.pods.get("race", "default")
    changed = await client.pods.get("race", "default")
    changed.metadata.labels["changed"] = "yes"  # a no-op update would not bump resourceVersion
    await client.pods.update(changed)
    counting = CountingStub(client.pods._stub)
    client.pods._stub = counting
    with pytest.raises(errors.ConflictError):
        await client.pods.update(stale)
    assert counting.calls == {"Update": 1}
    with pytest.raises(errors.NotFoundError):
        await client.pods.get("nope", "default")
    assert counting.calls["Get"] == 1


async def test_retried_on_unavailable_until_the_apiserver_is_back(
    etcd_server: EtcdServer,
) -> None:
    settings = make_settings(etcd_server.endpoint)
    running = await start_apiserver(settings)
    port = running.address.rsplit(":", 1)[1]
    pinned = settings.__class__(**{**settings.__dict__, "bind_address": f"127.0.0.1:{port}"})
    restarted: RunningAPIServer | None = None
    async with Client(running.address, timeout=2.0, retries=30) as c:
        await c.pods.create(make_pod("survivor"))
        await running.server.stop()
        counting = CountingStub(c.pods._stub)
        c.pods._stub = counting

        async def restart_later() -> RunningAPIServer:
            await eventually(lambda: counting.calls.get("Get", 0) >= 2, what="failed attempts")
            return await start_apiserver(pinned)

        restart = asyncio.ensure_future(restart_later())
        try:
            got = await c.pods.get("survivor", "default")
            assert got.metadata.name == "survivor"
            assert counting.calls["Get"] >= 3  # at least two UNAVAILABLE attempts, then success
        finally:
            restarted = await restart
            with contextlib.suppress(Exception):
                await restarted.server.stop()


async def test_retries_give_up_with_unavailable(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint))
    address = running.address
    await running.server.stop()
    async with Client(address, timeout=1.0, retries=2) as c:
        counting = CountingStub(c.pods._stub)
        c.pods._stub = counting
        with pytest.raises(errors.UnavailableError):
            await c.pods.get("x", "default")
    assert counting.calls == {"Get": 3}
