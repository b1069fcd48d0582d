"""The narrow view of the API the kubelet uses, as Protocols.

`tinykube.client.Client` satisfies it structurally; unit tests pass an in-memory fake.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

T = TypeVar("T")


class ResourceAPI(Protocol[T]):
    async def create(self, obj: T) -> T: ...

    async def get(self, name: str, namespace: str = "") -> T: ...

    async def update(self, obj: T) -> T: ...

    async def delete(
        self,
        name: str,
        namespace: str = "",
        *,
        grace_period_seconds: int | None = None,
        uid: str = "",
        resource_version: str = "",
    ) -> T: ...


class StatusResourceAPI(ResourceAPI[T], Protocol[T]):
    async def update_status(self, obj: T) -> T: ...


class KubeletAPI(Protocol):
    @property
    def pods(self) -> StatusResourceAPI[pod_pb2.Pod]: ...

    @property
    def nodes(self) -> StatusResourceAPI[node_pb2.Node]: ...

    @property
    def leases(self) -> ResourceAPI[lease_pb2.Lease]: ...
