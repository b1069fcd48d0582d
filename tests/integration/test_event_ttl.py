"""Events expire as kube-apiserver's do (--event-ttl): each Event create and update is written
under an etcd lease of the TTL (shared by the writes of a reuse window), so etcd deletes an
Event that long after its last write and watchers see it DELETED; other kinds never expire."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from aetcd import rpc

from tests.integration.conftest import make_settings, start_apiserver
from tests.integration.test_client_support import make_pod
from tinykube.client import Client
from tinykube.errors import NotFoundError
from tinykube.localetcd import EtcdServer
from tinykube.v1 import configmap_pb2, event_pb2

pytestmark = pytest.mark.integration


def make_event(name: str) -> event_pb2.Event:
    event = event_pb2.Event(apiVersion="v1", kind="Event", reason="Tick", message=name)
    event.metadata.name, event.metadata.namespace = name, "default"
    event.involvedObject.kind, event.involvedObject.name = "Pod", "web"
    event.involvedObject.namespace = "default"
    return event


async def test_events_vanish_their_ttl_after_the_last_write(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, event_ttl_seconds=4))
    try:
        async with Client(running.address) as client:
            watch_started = asyncio.Event()
            deleted: list[tuple[str, float]] = []

            async def watch() -> None:
                async for ev in client.events.watch("default", resource_version="0"):
                    watch_started.set()
                    if ev.type == "DELETED":
                        deleted.append((ev.object.metadata.name, time.monotonic()))
                        if len(deleted) == 2:
                            return

            cm = configmap_pb2.ConfigMap(apiVersion="v1", kind="ConfigMap")
            cm.metadata.name, cm.metadata.namespace = "kept", "default"
            await client.config_maps.create(cm)
            await client.pods.create(make_pod("web"))
            watcher = asyncio.create_task(watch())
            created = time.monotonic()
            await client.events.create(make_event("once"))
            renewed = await client.events.create(make_event("renewed"))
            await asyncio.wait_for(watch_started.wait(), 10)
            await asyncio.sleep(2)
            renewed.count = 2
            await client.events.update(renewed)
            updated = time.monotonic()
            await asyncio.wait_for(watcher, 30)
            # In the order of their last writes, each at least its TTL after it.
            assert [name for name, _ in deleted] == ["once", "renewed"]
            assert deleted[0][1] - created >= 3.5
            assert deleted[1][1] - updated >= 3.5
            for name in ("once", "renewed"):
                with pytest.raises(NotFoundError):
                    await client.events.get(name, "default")
            # What has no TTL stays.
            assert (await client.config_maps.get("kept", "default")).metadata.name == "kept"
            assert (await client.pods.get("web", "default")).metadata.name == "web"
    finally:
        await running.server.stop()


async def test_events_share_a_lease_of_the_ttl_and_its_reuse_window(
    etcd_server: EtcdServer,
) -> None:
    settings = make_settings(etcd_server.endpoint)  # the default TTL: 1 h
    assert settings.event_ttl_seconds == 3600
    running = await start_apiserver(settings)
    channel = grpc.aio.insecure_channel(etcd_server.endpoint)
    try:
        async with Client(running.address) as client:
            for i in range(3):
                await client.events.create(make_event(f"e{i}"))
            cm = configmap_pb2.ConfigMap(apiVersion="v1", kind="ConfigMap")
            cm.metadata.name, cm.metadata.namespace = "plain", "default"
            await client.config_maps.create(cm)
        prefix = settings.etcd_prefix.encode()
        kv = rpc.KVStub(channel)
        events = await kv.Range(
            rpc.RangeRequest(key=prefix + b"/events/", range_end=prefix + b"/events0")
        )
        leases = {item.lease for item in events.kvs}
        assert len(events.kvs) == 3
        assert len(leases) == 1
        lease = leases.pop()
        assert lease != 0
        ttl = await rpc.LeaseStub(channel).LeaseTimeToLive(rpc.LeaseTimeToLiveRequest(ID=lease))
        assert ttl.grantedTTL == 3600 + 60
        plain = await kv.Range(rpc.RangeRequest(key=prefix + b"/configmaps/default/plain"))
        assert plain.kvs[0].lease == 0
    finally:
        await channel.close()
        await running.server.stop()
