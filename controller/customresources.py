"""Custom objects (kinds of CustomResourceDefinitions) for the controllers that act on every kind.

kube's garbage collector and namespace controller reach custom kinds through the dynamic client
(unstructured objects over discovery's resources). Here the generic gRPC service
`tinykube.v1.CustomResources` plays that part: a `CustomResourceAPI` lists, watches, reads,
updates and deletes one custom kind, and a `CustomObject` is one object as the controllers read
it: its `metadata` as the built-in ObjectMeta message (what the garbage collector and the
namespace controller look at and change) and the rest of its JSON as the server sent it, written
back unchanged. Numbers travel as the Struct's doubles (docs/crds.md: integers beyond 2^53 are
not exact over gRPC), so the collector's writes, which change only metadata, leave the rest of
an object as the apiserver gave it for any integer within that range.

Concurrency: calls are independent coroutines on the client's current channel (its failover
applies); errors are TinykubeErrors, as the typed client's. No retries here: the informer
resumes its watch, the controllers' work queues requeue a failed sync.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format, struct_pb2

from tinykube.errors import from_rpc_error
from tinykube.v1 import apiextensions_pb2, apiextensions_pb2_grpc, meta_pb2

if TYPE_CHECKING:
    from tinykube.client import Client

TIMEOUT = 10.0


def custom_kind_key(kind: str, group: str) -> str:
    """How the controllers name a custom kind: "Kind.group" (a built-in kind is its bare Kind),
    so two CRDs with one kind name in different groups stay apart."""
    return f"{kind}.{group}"


class CustomObject:
    """One custom object: `metadata` (ObjectMeta) plus the rest of its JSON (`body`).

    Copyable as a protobuf message is (`type(obj)()` then `CopyFrom`), which is all the garbage
    collector's rewrites need."""

    __slots__ = ("body", "metadata")

    def __init__(
        self, metadata: meta_pb2.ObjectMeta | None = None, body: dict[str, Any] | None = None
    ) -> None:
        self.metadata = metadata if metadata is not None else meta_pb2.ObjectMeta()
        self.body: dict[str, Any] = body if body is not None else {}

    def CopyFrom(self, other: CustomObject) -> None:
        self.metadata = meta_pb2.ObjectMeta()
        self.metadata.CopyFrom(other.metadata)
        self.body = copy.deepcopy(other.body)

    @classmethod
    def from_struct(cls, data: struct_pb2.Struct) -> CustomObject:
        body = json_format.MessageToDict(data)
        meta = meta_pb2.ObjectMeta()
        json_format.ParseDict(body.pop("metadata", None) or {}, meta, ignore_unknown_fields=True)
        return cls(meta, body)

    def to_struct(self) -> struct_pb2.Struct:
        data = dict(self.body)
        data["metadata"] = json_format.MessageToDict(self.metadata)
        return _struct(data)

    def __repr__(self) -> str:
        return (
            f"CustomObject({self.body.get('kind')} {self.metadata.namespace}/{self.metadata.name})"
        )


def _struct(data: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(data)
    return out


@dataclasses.dataclass
class CustomObjectList:
    items: list[CustomObject]
    metadata: meta_pb2.ListMeta


@dataclasses.dataclass
class CustomWatchEvent:
    type: str
    object: CustomObject


class CustomResourceAPI:
    """The verbs of one custom kind (`kind`: a CustomResourceKind from ListKinds) through
    tinykube.v1.CustomResources, shaped as the typed client's ResourceClient."""

    def __init__(self, client: Client, kind: Any, *, timeout: float = TIMEOUT) -> None:
        self.client = client
        self.kind = kind
        self.where = {"group": kind.group, "version": kind.version, "plural": kind.plural}
        self.timeout = timeout

    @property
    def name(self) -> str:
        return f"{self.kind.plural}.{self.kind.group}"

    def _stub(self) -> Any:
        return apiextensions_pb2_grpc.CustomResourcesStub(self.client.channel)

    def _request(self, **fields: Any) -> apiextensions_pb2.CustomResourceRequest:
        return apiextensions_pb2.CustomResourceRequest(**self.where, **fields)

    async def _call(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self._stub(), method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def get(self, name: str, namespace: str = "") -> CustomObject:
        got = await self._call("Get", self._request(namespace=namespace, name=name))
        return CustomObject.from_struct(got)

    async def create(self, obj: CustomObject) -> CustomObject:
        request = self._request(namespace=obj.metadata.namespace)
        request.object.CopyFrom(obj.to_struct())
        return CustomObject.from_struct(await self._call("Create", request))

    async def update(self, obj: CustomObject) -> CustomObject:
        request = self._request(namespace=obj.metadata.namespace)
        request.object.CopyFrom(obj.to_struct())
        return CustomObject.from_struct(await self._call("Update", request))

    async def delete(
        self,
        name: str,
        namespace: str = "",
        *,
        grace_period_seconds: int | None = None,
        uid: str = "",
        resource_version: str = "",
        propagation_policy: str = "",
    ) -> CustomObject:
        request = self._request(
            namespace=namespace,
            name=name,
            preconditions=meta_pb2.Preconditions(uid=uid, resourceVersion=resource_version),
            propagationPolicy=propagation_policy,
        )
        return CustomObject.from_struct(await self._call("Delete", request))

    async def list(
        self, namespace: str = "", *, label_selector: str = "", field_selector: str = ""
    ) -> CustomObjectList:
        listed = await self._call(
            "List",
            self._request(
                namespace=namespace, labelSelector=label_selector, fieldSelector=field_selector
            ),
        )
        return CustomObjectList(
            [CustomObject.from_struct(item) for item in listed.items],
            meta_pb2.ListMeta(resourceVersion=listed.resourceVersion),
        )

    async def watch(
        self,
        namespace: str = "",
        *,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str = "",
    ) -> AsyncIterator[CustomWatchEvent]:
        """Events after `resource_version` until the server ends the stream (the kind stopped
        being served, or the apiserver went away: UnavailableError)."""
        request = self._request(
            namespace=namespace,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            resourceVersion=resource_version,
        )
        call: Any = self._stub().Watch(request)
        try:
            async for event in call:
                yield CustomWatchEvent(event.type, CustomObject.from_struct(event.object))
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()
