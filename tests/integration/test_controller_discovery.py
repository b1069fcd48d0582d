"""The controller manager's view of the API: discovery over gRPC server reflection and the
shared informer factory, against a real apiserver."""

from __future__ import annotations

import asyncio

import pytest

from controller.app import ControllerManager
from controller.discovery import Discovery, DiscoveryError
from controller.settings import Settings as ControllerSettings
from tests.integration.conftest import RunningAPIServer, make_pod
from tinykube import kinds
from tinykube.client import Client
from tinykube.errors import NotFoundError
from tinykube.informer import InformerFactory
from tinykube.v1 import configmap_pb2, secret_pb2

pytestmark = pytest.mark.integration


async def test_discovery_names_every_kind_the_apiserver_serves(
    module_apiserver: RunningAPIServer,
) -> None:
    async with Client(module_apiserver.address) as client:
        discovery = Discovery(client)
        served = await discovery.served_kinds()
        assert {k.kind for k in served} == {k.kind for k in kinds.ALL_KINDS}
        collectable = {k.kind for k in await discovery.collectable_kinds()}
        assert "Event" not in collectable
        assert {"Pod", "ConfigMap", "Node", "ClusterRole", "Lease"} <= collectable
        contents = await discovery.namespaced_contents()
        assert all(info.namespaced for info, _ in contents)
        assert {info.kind for info, _ in contents} >= {"Pod", "Secret", "Role", "Event"}
        assert "Node" not in {info.kind for info, _ in contents}


async def test_an_unreachable_apiserver_is_a_discovery_error() -> None:
    async with Client("127.0.0.1:1", timeout=1.0, retries=0) as client:
        discovery = Discovery(client, timeout=2.0)
        with pytest.raises(DiscoveryError, match="server reflection failed"):
            await discovery.served_kinds()
        # The garbage collector still watches every known kind (its informers retry).
        fallback = {k.kind for k in await discovery.collectable_kinds()}
        assert fallback == {k.kind for k in kinds.ALL_KINDS} - {"Event"}


async def test_the_factory_shares_one_informer_per_kind(
    module_apiserver: RunningAPIServer,
) -> None:
    async with Client(module_apiserver.address) as client:
        await client.pods.create(make_pod("shared-1"))
        factory = InformerFactory(client)
        pods = factory.for_kind(kinds.POD)
        assert factory.for_kind("Pod") is pods
        assert factory.for_kind("pods") is pods
        in_default = factory.for_kind(kinds.POD, namespace="default")
        assert in_default is not pods
        seen: list[str] = []
        pods.add_handler(on_add=lambda p: seen.append(p.metadata.name))
        factory.start()
        factory.start()  # idempotent: still one task per informer
        try:
            await asyncio.wait_for(factory.wait_for_cache_sync(), 30)
            assert "shared-1" in seen
            assert pods.lists == 1 and in_default.lists == 1
            # One asked for after the start runs at the next start().
            nodes = factory.for_kind(kinds.NODE)
            factory.start()
            await asyncio.wait_for(factory.wait_for_cache_sync(), 30)
            assert nodes.has_synced()
        finally:
            await factory.shutdown()


async def test_the_garbage_collector_collects_kinds_no_controller_reads(
    module_apiserver: RunningAPIServer,
) -> None:
    """A ConfigMap owned by a Secret goes with it, and a ConfigMap deleted with
    propagationPolicy Orphan loses its `orphan` finalizer and goes: no controller reads either
    kind, so only discovery brings them to the collector."""
    manager = ControllerManager(
        ControllerSettings(
            apiserver=module_apiserver.address,
            bind_address="127.0.0.1:0",
            leader_elect=False,
            controllers=("garbage-collector-controller",),
        )
    )
    await manager.start()
    try:
        async with Client(module_apiserver.address) as client:
            await asyncio.wait_for(manager.leading.wait(), 30)
            owner = secret_pb2.Secret()
            owner.metadata.name, owner.metadata.namespace = "owner", "default"
            owner = await client.secrets.create(owner)
            for name in ("dependent", "orphaning"):
                cm = configmap_pb2.ConfigMap()
                cm.metadata.name, cm.metadata.namespace = name, "default"
                if name == "dependent":
                    cm.metadata.ownerReferences.add(
                        apiVersion="v1", kind="Secret", name="owner", uid=owner.metadata.uid
                    )
                await client.config_maps.create(cm)
            gone = {"dependent": asyncio.Event(), "orphaning": asyncio.Event()}
            watcher = InformerFactory(client).for_kind(kinds.CONFIG_MAP, namespace="default")

            def on_delete(cm: configmap_pb2.ConfigMap) -> None:
                if cm.metadata.name in gone:
                    gone[cm.metadata.name].set()

            watcher.add_handler(on_delete=on_delete)
            task = watcher.start()
            try:
                await asyncio.wait_for(watcher.wait_synced(), 30)
                await client.secrets.delete("owner", "default")
                marked = await client.config_maps.delete(
                    "orphaning", "default", propagation_policy="Orphan"
                )
                assert list(marked.metadata.finalizers) == ["orphan"]
                await asyncio.wait_for(gone["dependent"].wait(), 30)
                await asyncio.wait_for(gone["orphaning"].wait(), 30)
            finally:
                task.cancel()
            for name in gone:
                with pytest.raises(NotFoundError):
                    await client.config_maps.get(name, "default")
    finally:
        await manager.stop()
