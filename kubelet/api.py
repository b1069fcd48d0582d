"""The narrow view of the API the kubelet uses, as Protocols.

`tinykube.client.Client` satisfies it structurally; unit tests pass an in-memory fake.
Node and Lease writes take `resend_ambiguous` (tinykube.client's `update`): the kubelet sends a
heartbeat whose answer was lost only after reading whether it landed (kubelet/node.py).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from tinykube.protocols import ResourceAPI, StatusResourceAPI
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

T = TypeVar("T")


class HeartbeatAPI(ResourceAPI[T], Protocol[T]):
    """A kind the kubelet heartbeats through (its Lease, its Node)."""

    async def update(self, obj: T, *, resend_ambiguous: bool = True) -> T: ...


class NodeStatusAPI(HeartbeatAPI[T], Protocol[T]):
    async def update_status(self, obj: T, *, resend_ambiguous: bool = True) -> T: ...


class KubeletAPI(Protocol):
    @property
    def pods(self) -> StatusResourceAPI[pod_pb2.Pod]: ...

    @property
    def nodes(self) -> NodeStatusAPI[node_pb2.Node]: ...

    @property
    def leases(self) -> HeartbeatAPI[lease_pb2.Lease]: ...
