"""The node IPAM controller: gives each Node a pod CIDR (spec.podCIDR) from the cluster CIDR,
as kube-controller-manager's range allocator (`--allocate-node-cidrs`, `--cluster-cidr`,
`--node-cidr-mask-size`, 24 by default for IPv4).

The allocator marks every CIDR the Nodes already hold (also one set by hand) as taken, then
gives a Node without one the first free subnet, writing it with a resourceVersion precondition;
a deleted Node's CIDR becomes free again. When the cluster CIDR is exhausted the Node gets a
Warning Event `CIDRNotAvailable` ("Node <name> status is now: CIDRNotAvailable", as kube words
it) and is tried again when another Node goes away. A Node's podCIDR is never changed once set.
The kubelet writes its CNI network from it (kubelet/app.py).

Concurrency: one asyncio event loop; the work queue never hands out one key twice at once.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Protocol

from controller.api import Queue, Recorder, Store
from tinykube.errors import ConflictError, NotFoundError
from tinykube.events import WARNING
from tinykube.protocols import StatusResourceAPI
from tinykube.v1 import node_pb2

log = logging.getLogger(__name__)

Node = node_pb2.Node
CIDR_NOT_AVAILABLE = "CIDRNotAvailable"


class NodeIPAMClientAPI(Protocol):
    @property
    def nodes(self) -> StatusResourceAPI[node_pb2.Node]: ...


class CIDRSet:
    """The subnets of `mask` bits in `cluster`, each free or taken."""

    def __init__(self, cluster: str, mask: int) -> None:
        self.cluster = ipaddress.ip_network(cluster, strict=True)
        if mask < self.cluster.prefixlen or mask > self.cluster.max_prefixlen:
            raise ValueError(
                f"--node-cidr-mask-size {mask} must be between the cluster CIDR's prefix "
                f"({self.cluster.prefixlen}) and {self.cluster.max_prefixlen}"
            )
        self.mask = mask
        self.taken: set[str] = set()

    def occupy(self, cidr: str) -> None:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return
        if net.version == self.cluster.version and net.subnet_of(self.cluster):  # type: ignore[arg-type]
            self.taken.add(str(net))

    def release(self, cidr: str) -> None:
        self.taken.discard(cidr)

    def allocate(self) -> str | None:
        for net in self.cluster.subnets(new_prefix=self.mask):
            text = str(net)
            if text not in self.taken:
                self.taken.add(text)
                return text
        return None


class NodeIPAMController:
    name = "nodeipam"

    def __init__(
        self,
        client: NodeIPAMClientAPI,
        node_store: Store[Node],
        queue: Queue,
        cidrs: CIDRSet,
        recorder: Recorder | None = None,
    ) -> None:
        self.client = client
        self.node_store = node_store
        self.queue = queue
        self.cidrs = cidrs
        self.recorder = recorder
        # Nodes that found no free CIDR: tried again when one is released.
        self._starved: set[str] = set()

    def on_node(self, node: Node) -> None:
        if node.spec.podCIDR:
            self.cidrs.occupy(node.spec.podCIDR)
        else:
            self.queue.add(node.metadata.name)

    def on_node_update(self, old: Node, new: Node) -> None:
        self.on_node(new)

    def on_node_delete(self, node: Node) -> None:
        if node.spec.podCIDR:
            self.cidrs.release(str(ipaddress.ip_network(node.spec.podCIDR, strict=False)))
            for name in sorted(self._starved):
                self.queue.add(name)
            self._starved.clear()

    async def sync(self, key: str) -> None:
        node = self.node_store.get(key)
        if node is None or node.spec.podCIDR:
            return
        # Every CIDR in the cache is taken, whatever order the events came in.
        for other in self.node_store.list():
            if other.spec.podCIDR:
                self.cidrs.occupy(other.spec.podCIDR)
        cidr = self.cidrs.allocate()
        if cidr is None:
            self._starved.add(key)
            if self.recorder is not None:
                message = f"Node {key} status is now: {CIDR_NOT_AVAILABLE}"
                await self.recorder.record(node, WARNING, CIDR_NOT_AVAILABLE, message)
            log.warning("node %s: no pod CIDR left in %s", key, self.cidrs.cluster)
            return
        updated = Node()
        updated.CopyFrom(node)
        updated.spec.podCIDR = cidr
        try:
            await self.client.nodes.update(updated)
        except (ConflictError, NotFoundError):
            self.cidrs.release(cidr)
            raise
        log.info("node %s: pod CIDR %s", key, cidr)
