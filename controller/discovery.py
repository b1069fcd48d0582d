"""Which kinds the API serves, for the controllers that act on every kind.

kube's garbage collector and namespace controller ask the apiserver's discovery endpoints which
resources exist, so kinds added later (CustomResourceDefinitions) are collected and emptied
without a code change. The controller manager speaks the typed gRPC API, whose discovery is
gRPC server reflection: `ListServices` names every service the apiserver serves
("tinykube.v1.Pods", ...). A kind is served when its service is; the kinds' facts (Kind,
plural, scope) come from `tinykube.kinds`, the table the typed client is built from.
Custom kinds come from the apiserver's generic `tinykube.v1.CustomResources` service
(`ListKinds`); the garbage collector watches them and the namespace controller empties them
through it too (controller/customresources.py).

No caching: the garbage collector asks again every resync period, the namespace controller
once per sync of a namespace being deleted (kube's namespace deleter does the same).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from controller.customresources import CustomResourceAPI
from tinykube import kinds
from tinykube.errors import TinykubeError
from tinykube.kinds import KindInfo
from tinykube.v1 import apiextensions_pb2, apiextensions_pb2_grpc

if TYPE_CHECKING:
    from tinykube.client import Client

log = logging.getLogger(__name__)

DISCOVERY_TIMEOUT = 10.0
# kube's garbage collector ignores Events (ignoredResources): nothing owns them, and
# watching them all would cost more than everything else together.
GC_IGNORED_KINDS = frozenset({"Event"})


class DiscoveryError(TinykubeError):
    """The apiserver could not say which kinds it serves."""


async def served_services(
    channel: grpc.aio.Channel, deadline: float = DISCOVERY_TIMEOUT
) -> set[str]:
    """The full names of the services the server at the channel's end serves."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    names: set[str] = set()
    try:
        call: Any = stub.ServerReflectionInfo(iter([request]), timeout=deadline)
        async for response in call:
            if response.HasField("error_response"):
                err = response.error_response
                raise DiscoveryError(f"server reflection: {err.error_message} ({err.error_code})")
            names.update(s.name for s in response.list_services_response.service)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
        raise DiscoveryError(f"server reflection failed: {code}: {detail}") from exc
    return names


def kinds_served(services: set[str], table: Sequence[KindInfo] = kinds.ALL_KINDS) -> list[KindInfo]:
    return [info for info in table if info.service in services]


class Discovery:
    """The kinds the apiserver serves, asked over the client's current channel."""

    def __init__(self, client: Client, *, timeout: float = DISCOVERY_TIMEOUT) -> None:
        self.client = client
        self.timeout = timeout

    async def served_kinds(self) -> list[KindInfo]:
        """Raises DiscoveryError if the apiserver cannot answer."""
        return kinds_served(await served_services(self.client.channel, self.timeout))

    async def collectable_kinds(self) -> list[KindInfo]:
        """What the garbage collector watches: every served kind but Events. If discovery
        fails, every kind the typed client knows (their informers retry until served)."""
        try:
            served = await self.served_kinds()
        except DiscoveryError as exc:
            log.warning("%s; watching every known kind", exc)
            served = list(kinds.ALL_KINDS)
        return self.collectable(served)

    @staticmethod
    def collectable(served: Sequence[KindInfo]) -> list[KindInfo]:
        return [k for k in served if k.kind not in GC_IGNORED_KINDS]

    async def custom_kinds(self, services: set[str] | None = None) -> list[Any]:
        """The custom kinds (CustomResourceKind: group, version, kind, plural, namespaced) the
        apiserver serves now, from tinykube.v1.CustomResources/ListKinds; none if it does not
        serve that service. Raises DiscoveryError if the apiserver cannot answer."""
        if services is None:
            services = await served_services(self.client.channel, self.timeout)
        if CUSTOM_RESOURCES not in services:
            return []
        stub = apiextensions_pb2_grpc.CustomResourcesStub(self.client.channel)
        try:
            served: Any = await stub.ListKinds(
                apiextensions_pb2.ListCustomResourceKindsRequest(), timeout=self.timeout
            )
        except grpc.RpcError as exc:
            raise DiscoveryError(f"custom resource kinds: {exc}") from exc
        return list(served.kinds)

    async def namespaced_contents(self) -> list[tuple[KindInfo, Any]]:
        """Every served namespaced kind with its API (list, delete), for emptying a namespace:
        the typed kinds and the custom kinds of CRDs (tinykube.v1.CustomResources/ListKinds).
        Raises DiscoveryError if the apiserver cannot answer."""
        services = await served_services(self.client.channel, self.timeout)
        contents: list[tuple[KindInfo, Any]] = [
            (k, self.client.resource(k)) for k in kinds_served(services) if k.namespaced
        ]
        for kind in await self.custom_kinds(services):
            if kind.namespaced:
                contents.append(
                    (
                        custom_kind_info(kind),
                        CustomResourceAPI(self.client, kind, timeout=self.timeout),
                    )
                )
        return contents


CUSTOM_RESOURCES = "tinykube.v1.CustomResources"


def custom_kind_info(kind: Any) -> KindInfo:
    """A KindInfo naming a custom kind (a CustomResourceKind) for the controllers' messages and
    conditions; it has no typed client."""
    return dataclasses.replace(
        kinds.CUSTOM_RESOURCE_DEFINITION,
        kind=kind.kind,
        plural=kind.plural,
        group=kind.group,
        version=kind.version,
        namespaced=kind.namespaced,
        short_names=(),
        categories=(),
        custom=True,
    )
