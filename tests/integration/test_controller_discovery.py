"""The controller manager's view of the API: discovery over gRPC server reflection and the
shared informer factory, against a real apiserver."""

from __future__ import annotations

import asyncio

import pytest

from controller.discovery import Discovery, DiscoveryError
from tests.integration.conftest import RunningAPIServer, make_pod
from tinykube import kinds
from tinykube.client import Client
from tinykube.informer import InformerFactory

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
