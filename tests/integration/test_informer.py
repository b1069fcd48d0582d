"""Informers against the real apiserver: resume after dropped streams, relist after OUT_OF_RANGE."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tests.integration.test_client_support import TcpProxy, eventually, make_node, make_pod
from tinykube.client import Client
from tinykube.informer import Informer
from tinykube.localetcd import EtcdServer
from tinykube.v1 import pod_pb2

pytestmark = pytest.mark.integration


class Seen:
    """What the handlers were told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.rvs: list[int] = []

    def _note(self, kind: str, p: pod_pb2.Pod) -> None:
        self.events.append((kind, p.metadata.name))
        self.rvs.append(int(p.metadata.resourceVersion))

    def add(self, p: pod_pb2.Pod) -> None:
        self._note("add", p)

    def update(self, old: pod_pb2.Pod, new: pod_pb2.Pod) -> None:
        assert old.metadata.name == new.metadata.name
        self._note("update", new)

    def delete(self, p: pod_pb2.Pod) -> None:
        self._note("delete", p)


@contextlib.asynccontextmanager
async def proxied_informer(
    address: str,
) -> AsyncIterator[tuple[TcpProxy, Informer[pod_pb2.Pod], Seen]]:
    proxy = await TcpProxy(address).start()
    client = Client(proxy.address, timeout=3.0, retries=2)
    informer = Informer.for_resource(client.pods, namespace="default", min_backoff=0.05)
    informer.add_index("node", lambda p: p.spec.nodeName or None)
    seen = Seen()
    informer.add_handler(seen.add, seen.update, seen.delete)
    task = informer.start()
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        yield proxy, informer, seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
        await proxy.close()


async def server_state(client: Client) -> dict[str, str]:
    listed = await client.pods.list("default")
    return {p.metadata.name: p.metadata.resourceVersion for p in listed.items}


def store_state(informer: Informer[pod_pb2.Pod]) -> dict[str, str]:
    return {p.metadata.name: p.metadata.resourceVersion for p in informer.store.list()}


async def test_dropped_streams_resume_with_no_event_lost_or_repeated(
    apiserver: RunningAPIServer,
) -> None:
    async with Client(apiserver.address) as writer:
        for i in range(3):
            await writer.pods.create(make_pod(f"base-{i}"))
        async with proxied_informer(apiserver.address) as (proxy, informer, seen):
            assert sorted(seen.events) == [("add", f"base-{i}") for i in range(3)]
            seen.events.clear()
            seen.rvs.clear()
            expected: list[tuple[str, str]] = []
            last_rv = 0

            async def write(n: int) -> None:
                nonlocal last_rv
                name = f"p-{n}"
                created = await writer.pods.create(make_pod(name))
                expected.append(("add", name))
                created.metadata.labels["step"] = "2"
                updated = await writer.pods.update(created)
                expected.append(("update", name))
                last_rv = int(updated.metadata.resourceVersion)
                if n % 3 == 0:
                    await writer.pods.delete(name, "default", grace_period_seconds=0)
                    expected.append(("delete", name))
                    last_rv = int((await writer.pods.list("default")).metadata.resourceVersion)

            connections_before = proxy.connections
            cuts = 0
            for n in range(30):
                await write(n)
                if n % 6 == 5 and n < 29:  # the last cut is followed by more writes
                    # The link drops mid-stream, several times: each time once the current stream
                    # has delivered everything so far (so the cut surely hits a live stream).
                    await eventually(
                        lambda: int(informer.last_resource_version or 0) >= last_rv,
                        what="the stream to deliver",
                    )
                    proxy.cut()
                    cuts += 1
            await eventually(
                lambda: int(informer.last_resource_version or 0) >= last_rv,
                what="informer to catch up",
            )
            await eventually(lambda: len(seen.events) >= len(expected), within=5)
            await asyncio.sleep(0.2)  # anything extra (a repeat) would arrive meanwhile
            assert seen.events == expected
            assert seen.rvs == sorted(set(seen.rvs))  # strictly increasing: nothing repeated
            assert informer.lists == 1  # resumed from the last resourceVersion, never relisted
            assert informer.watches >= cuts + 1
            assert proxy.connections > connections_before
            assert store_state(informer) == await server_state(writer)


async def test_out_of_range_relists_and_converges(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, watch_cache_size=5))
    try:
        async with Client(running.address) as writer:
            for i in range(4):
                await writer.pods.create(make_pod(f"old-{i}"))
            async with proxied_informer(running.address) as (proxy, informer, seen):
                assert informer.lists == 1
                seen.events.clear()
                proxy.refusing = True
                proxy.cut()
                await eventually(lambda: informer.watches >= 2, what="a failed re-watch")
                # While the informer is cut off, more changes than the watch window holds.
                for i in range(8):
                    await writer.pods.create(make_pod(f"new-{i}"))
                await writer.pods.delete("old-0", "default", grace_period_seconds=0)
                await writer.pods.delete("old-1", "default", grace_period_seconds=0)
                changed = await writer.pods.get("old-2", "default")
                changed.metadata.labels["changed"] = "yes"
                await writer.pods.update(changed)
                proxy.refusing = False
                await eventually(lambda: informer.lists == 2, what="a relist")
                assert sorted(seen.events) == sorted(
                    [("delete", "old-0"), ("delete", "old-1"), ("update", "old-2")]
                    + [("add", f"new-{i}") for i in range(8)]
                )
                assert store_state(informer) == await server_state(writer)
                # And the watch after the relist carries on.
                await writer.pods.create(make_pod("after"))
                await eventually(lambda: informer.store.get("default/after") is not None)
                assert informer.lists == 2
    finally:
        await running.server.stop()


async def test_index_tracks_binding(apiserver: RunningAPIServer) -> None:
    async with Client(apiserver.address) as writer:
        await writer.nodes.create(make_node("n1"))
        await writer.pods.create(make_pod("a"))
        async with proxied_informer(apiserver.address) as (_, informer, _seen):
            assert informer.store.by_index("node", "n1") == []
            await writer.bind("default", "a", "n1")
            await eventually(lambda: len(informer.store.by_index("node", "n1")) == 1)
            assert informer.store.by_index("node", "n1")[0].spec.nodeName == "n1"


async def test_converges_across_an_apiserver_restart(etcd_server: EtcdServer) -> None:
    settings = make_settings(etcd_server.endpoint)
    first = await start_apiserver(settings)
    port = first.address.rsplit(":", 1)[1]
    pinned = replace(settings, bind_address=f"127.0.0.1:{port}")
    second: RunningAPIServer | None = None
    try:
        async with Client(first.address) as writer:
            for i in range(3):
                await writer.pods.create(make_pod(f"r-{i}"))
            async with proxied_informer(first.address) as (_, informer, seen):
                await first.server.stop()
                await eventually(lambda: informer.watches >= 2, what="the informer to notice")
                second = await start_apiserver(pinned)
                await writer.pods.delete("r-0", "default", grace_period_seconds=0)
                await writer.pods.create(make_pod("r-new"))
                await eventually(
                    lambda: (
                        "default/r-new" in informer.store and "default/r-0" not in informer.store
                    ),
                    within=15,
                    what="the informer to converge after the restart",
                )
                assert store_state(informer) == await server_state(writer)
                assert ("delete", "r-0") in seen.events and ("add", "r-new") in seen.events
    finally:
        for running in (first, second):
            if running is not None:
                with contextlib.suppress(Exception):
                    await running.server.stop()


async def test_field_selected_informer_sees_pods_enter_and_leave(
    apiserver: RunningAPIServer,
) -> None:
    """The kubelet's view: only pods bound to its node, added on bind and deleted on delete."""
    async with Client(apiserver.address) as client:
        await client.nodes.create(make_node("n1"))
        await client.nodes.create(make_node("n2"))
        informer = Informer.for_resource(
            client.pods, field_selector="spec.nodeName=n1", min_backoff=0.05
        )
        seen = Seen()
        informer.add_handler(seen.add, seen.update, seen.delete)
        task = informer.start()
        try:
            await asyncio.wait_for(informer.wait_synced(), 10)
            for name in ("mine", "theirs", "unbound"):
                await client.pods.create(make_pod(name))
            await client.bind("default", "mine", "n1")
            await client.bind("default", "theirs", "n2")
            await eventually(lambda: informer.store.keys() == ["default/mine"])
            await client.pods.delete("mine", "default", grace_period_seconds=0)
            await eventually(lambda: len(informer.store) == 0)
            mine = [kind for kind, name in seen.events if name == "mine"]
            assert mine[0] == "add" and mine[-1] == "delete"
            assert {name for _, name in seen.events} == {"mine"}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
