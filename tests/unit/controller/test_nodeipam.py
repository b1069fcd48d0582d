"""The node IPAM controller (controller/nodeipam.py): Nodes get pod CIDRs from the cluster
CIDR, as kube's range allocator gives them."""

from __future__ import annotations

import pytest

from controller.nodeipam import CIDR_NOT_AVAILABLE, CIDRSet, NodeIPAMController
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeRecorder, FakeStore
from tinykube.clock import FakeClock
from tinykube.v1 import node_pb2


def test_cidr_set_hands_out_subnets_in_order_skipping_taken_ones() -> None:
    cidrs = CIDRSet("10.244.0.0/16", 24)
    cidrs.occupy("10.244.1.0/24")
    cidrs.occupy("192.168.0.0/24")  # not in the cluster CIDR: ignored
    assert cidrs.allocate() == "10.244.0.0/24"
    assert cidrs.allocate() == "10.244.2.0/24"
    cidrs.release("10.244.0.0/24")
    assert cidrs.allocate() == "10.244.0.0/24"


def test_mask_must_fit_the_cluster_cidr() -> None:
    with pytest.raises(ValueError, match="node-cidr-mask-size 8"):
        CIDRSet("10.244.0.0/16", 8)


def _setup(
    cluster: str = "10.244.0.0/16", mask: int = 24
) -> tuple[FakeClient, NodeIPAMController, FakeQueue, FakeRecorder]:
    client = FakeClient(FakeClock())
    queue, recorder = FakeQueue(), FakeRecorder()
    ctrl = NodeIPAMController(
        client, FakeStore(client.nodes), queue, CIDRSet(cluster, mask), recorder=recorder
    )
    return client, ctrl, queue, recorder


def _node(client: FakeClient, name: str, cidr: str = "") -> node_pb2.Node:
    node = node_pb2.Node()
    node.metadata.name = name
    node.metadata.resourceVersion = "1"
    node.spec.podCIDR = cidr
    client.nodes.objects[name] = node
    return node


async def test_nodes_get_distinct_cidrs_and_keep_them() -> None:
    client, ctrl, queue, _ = _setup()
    _node(client, "a", "10.244.0.0/24")  # set before: taken, never changed
    ctrl.on_node(_node(client, "b"))
    ctrl.on_node(_node(client, "c"))
    assert queue.added == ["b", "c"]
    for key in queue.added:
        await ctrl.sync(key)
    cidrs = {n: client.nodes.objects[n].spec.podCIDR for n in "abc"}
    assert cidrs == {"a": "10.244.0.0/24", "b": "10.244.1.0/24", "c": "10.244.2.0/24"}


async def test_exhausted_cluster_cidr_is_an_event_and_a_deleted_node_frees_its_cidr() -> None:
    client, ctrl, queue, recorder = _setup("10.244.0.0/23", 24)
    _node(client, "a", "10.244.0.0/24")
    _node(client, "b", "10.244.1.0/24")
    ctrl.on_node(_node(client, "c"))
    await ctrl.sync("c")
    assert client.nodes.objects["c"].spec.podCIDR == ""
    assert recorder.events == [
        ("Warning", CIDR_NOT_AVAILABLE, f"Node c status is now: {CIDR_NOT_AVAILABLE}")
    ]
    gone = client.nodes.objects.pop("a")
    ctrl.on_node_delete(gone)
    assert queue.added[-1] == "c"
    await ctrl.sync("c")
    assert client.nodes.objects["c"].spec.podCIDR == "10.244.0.0/24"
