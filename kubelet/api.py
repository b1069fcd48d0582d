"""The narrow view of the API the kubelet uses, as Protocols.

`tinykube.client.Client` satisfies it structurally; unit tests pass an in-memory fake.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from tinykube.protocols import ResourceAPI, StatusResourceAPI
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

T = TypeVar("T")


class KubeletAPI(Protocol):
    @property
    def pods(self) -> StatusResourceAPI[pod_pb2.Pod]: ...

    @property
    def nodes(self) -> StatusResourceAPI[node_pb2.Node]: ...

    @property
    def leases(self) -> ResourceAPI[lease_pb2.Lease]: ...
