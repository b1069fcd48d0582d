"""The narrow view of the API the controllers use, as Protocols.

The real `tinykube.client.Client` and the informers' stores satisfy these structurally; unit
tests pass in-memory fakes (tests/unit/controller/fakes.py) instead, so every reconcile runs
without sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tinykube.v1 import lease_pb2, node_pb2, pod_pb2, replicaset_pb2

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


class ClientAPI(Protocol):
    @property
    def pods(self) -> StatusResourceAPI[pod_pb2.Pod]: ...

    @property
    def nodes(self) -> StatusResourceAPI[node_pb2.Node]: ...

    @property
    def replica_sets(self) -> StatusResourceAPI[replicaset_pb2.ReplicaSet]: ...

    @property
    def leases(self) -> ResourceAPI[lease_pb2.Lease]: ...


class Store(Protocol[T]):
    """The read side of an informer's cache."""

    def get(self, key: str) -> T | None: ...

    def list(self) -> list[T]: ...


class Queue(Protocol):
    """The subset of tinykube.workqueue.WorkQueue a controller's handlers use."""

    def add(self, key: str) -> None: ...

    def add_after(self, key: str, seconds: float) -> None: ...


class Recorder(Protocol):
    async def record(self, obj: Any, type: str, reason: str, message: str) -> None: ...


class NullRecorder:
    """Records nothing: for tests and for when Events cannot be written."""

    async def record(self, obj: Any, type: str, reason: str, message: str) -> None:
        return None


Handler = Callable[..., None]
