"""Node lifecycle: Lease silence -> Ready=Unknown + NoExecute taint -> pod eviction."""

from __future__ import annotations

from collections.abc import Sequence

from controller.nodelifecycle import (
    TAINT_NOT_READY,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
    NodeLifecycleController,
    toleration_seconds,
)
from controller.util import datetime_to_ts
from tests.unit.controller.fakes import FakeClient, FakeStore
from tinykube.clock import FakeClock
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2


class Env:
    def __init__(self, grace: float = 40.0, toleration: float = 300.0) -> None:
        self.clock = FakeClock()
        self.client = FakeClient(self.clock)
        self.ctrl = NodeLifecycleController(
            self.client,
            FakeStore(self.client.nodes),
            FakeStore(self.client.leases),
            FakeStore(self.client.pods),
            clock=self.clock,
            grace_period=grace,
            default_unreachable_toleration=toleration,
        )

    async def add_node(self, name: str) -> None:
        node = node_pb2.Node(apiVersion="v1", kind="Node")
        node.metadata.name = name
        node.status.conditions.add(type="Ready", status="True", reason="KubeletReady")
        await self.client.nodes.create(node)
        lease = lease_pb2.Lease()
        lease.metadata.name = name
        lease.metadata.namespace = "kube-node-lease"
        lease.spec.holderIdentity = name
        lease.spec.renewTime.CopyFrom(datetime_to_ts(self.clock.now()))
        await self.client.leases.create(lease)

    async def renew(self, name: str) -> None:
        lease = await self.client.leases.get(name, "kube-node-lease")
        lease.spec.renewTime.CopyFrom(datetime_to_ts(self.clock.now()))
        await self.client.leases.update(lease)

    async def add_pod(
        self, name: str, node: str, tolerations: Sequence[pod_pb2.Toleration] = ()
    ) -> None:
        pod = pod_pb2.Pod()
        pod.metadata.name = name
        pod.metadata.namespace = "default"
        pod.spec.nodeName = node
        pod.spec.tolerations.extend(tolerations)
        pod.status.phase = "Running"
        await self.client.pods.create(pod)

    def node(self, name: str) -> node_pb2.Node:
        return self.client.nodes.objects[name]

    def ready(self, name: str) -> node_pb2.NodeCondition:
        return next(c for c in self.node(name).status.conditions if c.type == "Ready")


async def test_silent_node_becomes_unknown_and_tainted_then_recovers() -> None:
    env = Env(grace=40)
    await env.add_node("n1")
    await env.add_node("n2")
    await env.ctrl.monitor()
    for _ in range(5):
        env.clock.advance(10)
        await env.renew("n2")
        await env.ctrl.monitor()
    assert env.ready("n2").status == "True"
    ready = env.ready("n1")
    assert (ready.status, ready.reason, ready.message) == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    taints = [(t.key, t.effect) for t in env.node("n1").spec.taints]
    assert taints == [(TAINT_UNREACHABLE, "NoExecute")]
    assert not env.node("n2").spec.taints

    # The kubelet comes back: renews its lease and reports Ready=True; the taint goes.
    await env.renew("n1")
    node = env.node("n1")
    for cond in node.status.conditions:
        cond.status = "True"
    await env.ctrl.monitor()
    assert not env.node("n1").spec.taints
    assert env.ready("n1").status == "True"


async def test_node_within_grace_period_is_left_alone() -> None:
    env = Env(grace=40)
    await env.add_node("n1")
    await env.ctrl.monitor()
    env.clock.advance(39)
    await env.ctrl.monitor()
    assert env.ready("n1").status == "True"


async def test_pods_on_unreachable_node_are_force_deleted_after_their_toleration() -> None:
    env = Env(grace=4, toleration=5)
    await env.add_node("n1")
    await env.add_pod("default-tol", "n1")
    await env.add_pod(
        "short-tol",
        "n1",
        [
            pod_pb2.Toleration(
                key=TAINT_UNREACHABLE, operator="Exists", effect="NoExecute", tolerationSeconds=1
            )
        ],
    )
    await env.add_pod("forever", "n1", (pod_pb2.Toleration(operator="Exists"),))
    await env.ctrl.monitor()
    env.clock.advance(5)
    await env.ctrl.monitor()  # Unknown + tainted now
    assert len(env.client.pods.objects) == 3
    env.clock.advance(2)
    await env.ctrl.monitor()
    assert sorted(env.client.pods.objects) == ["default/default-tol", "default/forever"]
    env.clock.advance(4)
    await env.ctrl.monitor()
    assert sorted(env.client.pods.objects) == ["default/forever"]
    assert ("delete/0", "default/short-tol") in env.client.pods.calls


async def test_not_ready_node_gets_the_not_ready_taint() -> None:
    env = Env()
    await env.add_node("n1")
    env.node("n1").status.conditions[0].status = "False"
    await env.ctrl.monitor()
    assert [t.key for t in env.node("n1").spec.taints] == [TAINT_NOT_READY]


async def test_cordoned_node_carries_the_unschedulable_taint_until_uncordoned() -> None:
    env = Env()
    await env.add_node("n1")
    env.node("n1").spec.taints.add(key="dedicated", value="gpu", effect="NoSchedule")
    env.node("n1").spec.unschedulable = True
    await env.ctrl.monitor()
    taints = [(t.key, t.effect) for t in env.node("n1").spec.taints]
    assert taints == [("dedicated", "NoSchedule"), (TAINT_UNSCHEDULABLE, "NoSchedule")]
    assert not env.node("n1").spec.taints[1].HasField("timeAdded")
    # Nothing changes while the node stays cordoned: no write on the next pass.
    rv = env.node("n1").metadata.resourceVersion
    await env.ctrl.monitor()
    assert env.node("n1").metadata.resourceVersion == rv
    # Not ready as well: both managed taints, the user's kept.
    env.node("n1").status.conditions[0].status = "False"
    await env.ctrl.monitor()
    assert sorted(t.key for t in env.node("n1").spec.taints) == sorted(
        ["dedicated", TAINT_NOT_READY, TAINT_UNSCHEDULABLE]
    )
    env.node("n1").spec.unschedulable = False
    env.node("n1").status.conditions[0].status = "True"
    await env.ctrl.monitor()
    assert [t.key for t in env.node("n1").spec.taints] == ["dedicated"]


async def test_pods_of_a_deleted_node_are_force_deleted() -> None:
    env = Env()
    await env.add_pod("lost", "gone-node")
    await env.ctrl.monitor()
    assert not env.client.pods.objects
    assert ("delete/0", "default/lost") in env.client.pods.calls


def test_toleration_seconds_rules() -> None:
    taint = node_pb2.Taint(key=TAINT_UNREACHABLE, effect="NoExecute")
    defaults = {TAINT_UNREACHABLE: 300.0}
    pod = pod_pb2.Pod()
    assert toleration_seconds(pod, taint, defaults) == 300.0
    assert toleration_seconds(pod, node_pb2.Taint(key="x", effect="NoExecute"), defaults) == 0.0
    pod.spec.tolerations.add(key=TAINT_UNREACHABLE, operator="Exists", tolerationSeconds=7)
    assert toleration_seconds(pod, taint, defaults) == 7.0
    pod.spec.tolerations.add(key=TAINT_UNREACHABLE, operator="Exists")
    assert toleration_seconds(pod, taint, defaults) is None
    other = pod_pb2.Pod()
    other.spec.tolerations.add(
        key=TAINT_UNREACHABLE, operator="Equal", value="v", tolerationSeconds=1
    )
    assert toleration_seconds(other, taint, defaults) == 300.0  # value mismatch: not matching
