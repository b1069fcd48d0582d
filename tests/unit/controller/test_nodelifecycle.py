"""Node lifecycle: Lease silence -> Ready=Unknown + taints -> pod eviction, zone by zone."""

from __future__ import annotations

from collections.abc import Sequence

from controller.nodelifecycle import (
    FULL_DISRUPTION,
    NORMAL,
    PARTIAL_DISRUPTION,
    TAINT_NOT_READY,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
    NodeLifecycleController,
    toleration_seconds,
    zone_key,
    zone_state,
)
from controller.util import datetime_to_ts
from tests.unit.controller.fakes import FakeClient, FakeResource, FakeStore
from tinykube.clock import FakeClock
from tinykube.informer import Store
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

NE, NS = "NoExecute", "NoSchedule"


class IndexedPods(Store[pod_pb2.Pod]):
    """The real informer store (indexes and all), kept equal to the fake API's pods by `sync`
    (an informer that has caught up); counts the calls that read every pod."""

    def __init__(self, resource: FakeResource[pod_pb2.Pod]) -> None:
        super().__init__()
        self.resource = resource
        self.full_reads = 0

    def sync(self) -> None:
        for key in set(self.keys()) - set(self.resource.objects):
            self._remove(key)
        for key, obj in self.resource.objects.items():
            self._put(key, obj)

    def list(self) -> list[pod_pb2.Pod]:
        self.full_reads += 1
        return super().list()


class Env:
    def __init__(
        self,
        grace: float = 40.0,
        toleration: float = 300.0,
        indexed: bool = False,
        **kwargs: float,
    ) -> None:
        self.clock = FakeClock()
        self.client = FakeClient(self.clock)
        self.pod_store = IndexedPods(self.client.pods) if indexed else None
        self.ctrl = NodeLifecycleController(
            self.client,
            FakeStore(self.client.nodes),
            FakeStore(self.client.leases),
            self.pod_store if self.pod_store is not None else FakeStore(self.client.pods),
            clock=self.clock,
            grace_period=grace,
            default_unreachable_toleration=toleration,
            **kwargs,  # type: ignore[arg-type]
        )

    async def add_node(self, name: str, zone: str = "", **labels: str) -> None:
        node = node_pb2.Node(apiVersion="v1", kind="Node")
        node.metadata.name = name
        if zone:
            node.metadata.labels["topology.kubernetes.io/zone"] = zone
        node.metadata.labels.update(labels)
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

    def taints(self, name: str) -> list[tuple[str, str]]:
        return [(t.key, t.effect) for t in self.node(name).spec.taints]

    async def pass_(self, seconds: float, alive: Sequence[str]) -> None:
        """`seconds` go by, the kubelets of `alive` renew their Leases, one monitor pass."""
        self.clock.advance(seconds)
        for name in alive:
            await self.renew(name)
        if self.pod_store is not None:
            self.pod_store.sync()
        await self.ctrl.monitor()


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
    # Not Schedulable at once; NoExecute through the zone's queue (its one token is there).
    assert env.taints("n1") == [(TAINT_UNREACHABLE, NE), (TAINT_UNREACHABLE, NS)]
    assert env.node("n1").spec.taints[0].HasField("timeAdded")
    assert not env.node("n1").spec.taints[1].HasField("timeAdded")
    # The conditions the kubelet would have reported are Unknown too, as kube adds them.
    assert {c.type: (c.status, c.reason) for c in env.node("n1").status.conditions} == {
        "Ready": ("Unknown", "NodeStatusUnknown"),
        "MemoryPressure": ("Unknown", "NodeStatusNeverUpdated"),
        "DiskPressure": ("Unknown", "NodeStatusNeverUpdated"),
        "PIDPressure": ("Unknown", "NodeStatusNeverUpdated"),
    }
    assert not env.node("n2").spec.taints

    # The kubelet comes back: renews its lease and reports Ready=True; the taint goes.
    await env.renew("n1")
    node = env.node("n1")
    del node.status.conditions[:]  # the kubelet reports what it knows: Ready only
    node.status.conditions.add(type="Ready", status="True", reason="KubeletReady")
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
    await env.add_node("healthy")
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
    await env.pass_(5, ["healthy"])  # Unknown + tainted now
    assert len(env.client.pods.objects) == 3
    await env.pass_(2, ["healthy"])
    assert sorted(env.client.pods.objects) == ["default/default-tol", "default/forever"]
    await env.pass_(4, ["healthy"])
    assert sorted(env.client.pods.objects) == ["default/forever"]
    assert ("delete/0", "default/short-tol") in env.client.pods.calls


async def test_not_ready_node_gets_the_not_ready_taints() -> None:
    env = Env()
    await env.add_node("n1")
    await env.add_node("n2")
    env.node("n1").status.conditions[0].status = "False"
    await env.ctrl.monitor()
    assert env.taints("n1") == [(TAINT_NOT_READY, NE), (TAINT_NOT_READY, NS)]
    # Unreachable next: the NoExecute taint swaps at once, without waiting for a token.
    env.clock.advance(1)
    env.node("n1").status.conditions[0].status = "Unknown"
    await env.ctrl.monitor()
    assert env.taints("n1") == [(TAINT_UNREACHABLE, NE), (TAINT_UNREACHABLE, NS)]


async def test_pressure_conditions_become_no_schedule_taints() -> None:
    env = Env()
    await env.add_node("n1")
    conds = env.node("n1").status.conditions
    conds.add(type="MemoryPressure", status="True")
    conds.add(type="DiskPressure", status="False")
    conds.add(type="PIDPressure", status="True")
    conds.add(type="NetworkUnavailable", status="True")
    await env.ctrl.monitor()
    assert env.taints("n1") == [
        ("node.kubernetes.io/memory-pressure", NS),
        ("node.kubernetes.io/network-unavailable", NS),
        ("node.kubernetes.io/pid-pressure", NS),
    ]
    conds = env.node("n1").status.conditions  # the controller's write stored a new object
    conds[1].status = "False"
    conds[2].status = "True"
    conds[3].status = "False"
    conds[4].status = "False"
    await env.ctrl.monitor()
    assert env.taints("n1") == [("node.kubernetes.io/disk-pressure", NS)]


async def test_cordoned_node_carries_the_unschedulable_taint_until_uncordoned() -> None:
    env = Env()
    await env.add_node("n1")
    env.node("n1").spec.taints.add(key="dedicated", value="gpu", effect="NoSchedule")
    env.node("n1").spec.unschedulable = True
    await env.ctrl.monitor()
    taints = [(t.key, t.effect) for t in env.node("n1").spec.taints]
    assert taints == [("dedicated", NS), (TAINT_UNSCHEDULABLE, NS)]
    assert not env.node("n1").spec.taints[1].HasField("timeAdded")
    # Nothing changes while the node stays cordoned: no write on the next pass.
    rv = env.node("n1").metadata.resourceVersion
    await env.ctrl.monitor()
    assert env.node("n1").metadata.resourceVersion == rv
    # Not ready as well: the not-ready NoSchedule taint joins, the user's is kept (the only
    # node not Ready: master disruption mode, so no NoExecute taint).
    env.node("n1").status.conditions[0].status = "False"
    await env.ctrl.monitor()
    assert sorted(env.taints("n1")) == sorted(
        [("dedicated", NS), (TAINT_NOT_READY, NS), (TAINT_UNSCHEDULABLE, NS)]
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


async def test_a_pass_reads_only_the_pods_of_tainted_or_vanished_nodes() -> None:
    # With the informer's spec.nodeName index, a pass looks up the pods of the few nodes that
    # can lose theirs; at 150,000 pods reading every pod every 5 s was most of a core.
    env = Env(grace=4, toleration=5, indexed=True)
    for name in ("n1", "h1", "h2"):
        await env.add_node(name)
    for i in range(20):
        await env.add_pod(f"h1-{i}", "h1")
        await env.add_pod(f"h2-{i}", "h2")
    await env.add_pod("on-n1", "n1")
    await env.add_pod("lost", "gone-node")
    await env.pass_(0, ["h1", "h2"])
    assert "default/lost" not in env.client.pods.objects  # its node no longer exists
    await env.pass_(5, ["h1", "h2"])  # n1 silent: Unknown, tainted
    assert env.taints("n1") == [(TAINT_UNREACHABLE, NE), (TAINT_UNREACHABLE, NS)]
    assert "default/on-n1" in env.client.pods.objects  # within its default toleration
    await env.pass_(6, ["h1", "h2"])
    assert "default/on-n1" not in env.client.pods.objects
    assert ("delete/0", "default/on-n1") in env.client.pods.calls
    assert len(env.client.pods.objects) == 40  # every pod of the healthy nodes is kept
    assert env.pod_store is not None and env.pod_store.full_reads == 0


async def test_when_no_node_is_ready_nothing_is_evicted_master_disruption_mode() -> None:
    # The control plane lost sight of every kubelet at once (an apiserver outage, say): kube
    # assumes the fault is its own and evicts nothing.
    env = Env(grace=5, toleration=8)
    for name in ("n1", "n2", "n3"):
        await env.add_node(name)
        await env.add_pod(f"p-{name}", name)
    await env.ctrl.monitor()
    # n1 goes first: tainted (the zone is Normal: 1 of 3 not Ready).
    await env.pass_(4, ["n2", "n3"])
    await env.pass_(2, ["n2", "n3"])
    assert env.taints("n1") == [(TAINT_UNREACHABLE, NE), (TAINT_UNREACHABLE, NS)]
    # Then the other two, before n1's pods ran out of toleration.
    await env.pass_(1, [])
    assert len(env.client.pods.objects) == 3
    await env.pass_(5, [])
    assert {env.ready(n).status for n in ("n1", "n2", "n3")} == {"Unknown"}
    assert env.ctrl.master_disruption
    assert env.ctrl.zone_states == {"": FULL_DISRUPTION}
    for name in ("n1", "n2", "n3"):
        # No NoExecute taint (n1's removed); still not schedulable.
        assert env.taints(name) == [(TAINT_UNREACHABLE, NS)], name
    for _ in range(5):
        await env.pass_(5, [])
    assert len(env.client.pods.objects) == 3  # nobody evicted, however long it lasts

    # n2's kubelet is heard again: the mode ends, every node gets a fresh grace period, and the
    # silent ones are tainted at the normal rate, starting one interval (10 s) later.
    await env.renew("n2")
    node = env.node("n2")
    del node.status.conditions[:]
    node.status.conditions.add(type="Ready", status="True")
    await env.pass_(1, ["n2"])
    assert not env.ctrl.master_disruption
    assert env.ctrl.zone_states == {"": NORMAL}
    assert env.taints("n2") == []
    assert env.taints("n1") == [(TAINT_UNREACHABLE, NS)]
    await env.pass_(9.5, ["n2"])
    assert [(TAINT_UNREACHABLE, NE) in env.taints(n) for n in ("n1", "n3")] == [False, False]
    await env.pass_(0.5, ["n2"])
    assert [(TAINT_UNREACHABLE, NE) in env.taints(n) for n in ("n1", "n3")] == [True, False]
    await env.pass_(10, ["n2"])
    assert [(TAINT_UNREACHABLE, NE) in env.taints(n) for n in ("n1", "n3")] == [True, True]


async def test_no_execute_taints_go_on_at_the_eviction_rate() -> None:
    env = Env(grace=5, eviction_rate=0.1)
    for name in "abcdefg":
        await env.add_node(name)
    await env.ctrl.monitor()
    # Two of seven die together: one tainted now, the other 10 s later (burst 1, 0.1/s).
    await env.pass_(6, "cdefg")
    tainted = [n for n in "ab" if (TAINT_UNREACHABLE, NE) in env.taints(n)]
    assert len(tainted) == 1
    assert all((TAINT_UNREACHABLE, NS) in env.taints(n) for n in "ab")  # NoSchedule at once
    await env.pass_(5, "cdefg")
    assert len([n for n in "ab" if (TAINT_UNREACHABLE, NE) in env.taints(n)]) == 1
    await env.pass_(5, "cdefg")
    assert all((TAINT_UNREACHABLE, NE) in env.taints(n) for n in "ab")


async def test_a_mostly_dead_small_zone_is_not_tainted_partial_disruption() -> None:
    env = Env(grace=5, large_cluster_threshold=50, unhealthy_zone_threshold=0.55)
    for name in "abcde":
        await env.add_node(name, zone="z1")
    await env.ctrl.monitor()
    # 3 of 5 (60 %) not Ready in a zone of at most 50 nodes: no tainting at all.
    await env.pass_(6, "de")
    assert env.ctrl.zone_states == {zone_key(env.node("a")): PARTIAL_DISRUPTION}
    for _ in range(4):
        await env.pass_(10, "de")
    assert not [n for n in "abcde" if any(e == NE for _, e in env.taints(n))]
    # A larger zone would taint at the secondary rate (0.01/s): checked on the rule itself.
    assert zone_state([False, False, False, True, True], 0.55) == (3, PARTIAL_DISRUPTION)
    assert zone_state([False, False, True, True], 0.55) == (2, NORMAL)  # needs more than 2
    assert zone_state([False, False], 0.55) == (2, FULL_DISRUPTION)
    assert zone_state([True], 0.55) == (0, NORMAL)


async def test_a_dead_zone_is_tainted_while_another_zone_is_healthy() -> None:
    env = Env(grace=5)
    await env.add_node("a1", zone="a")
    await env.add_node("a2", zone="a")
    await env.add_node("b1", zone="b")
    await env.add_node("x", zone="a", **{"node.kubernetes.io/exclude-disruption": ""})
    await env.ctrl.monitor()
    await env.pass_(6, ["b1", "x"])
    states = env.ctrl.zone_states
    assert states == {zone_key(env.node("a1")): FULL_DISRUPTION, zone_key(env.node("b1")): NORMAL}
    # Zone a is down but b is up: not the control plane's fault, so a is tainted (one token).
    assert len([n for n in ("a1", "a2") if (TAINT_UNREACHABLE, NE) in env.taints(n)]) == 1
    # The excluded node, Ready, does not make zone a healthy.
    assert env.ready("x").status == "True"


async def test_pods_of_a_node_turned_unknown_are_marked_not_ready() -> None:
    env = Env(grace=5)
    await env.add_node("n1")
    await env.add_node("n2")
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        await env.add_pod(name, node)
        env.client.pods.objects[f"default/{name}"].status.conditions.add(
            type="Ready", status="True"
        )
    await env.ctrl.monitor()
    # The controller's pod cache lags behind a write to pod b: its update of b conflicts.
    env.ctrl.pod_store.lag()  # type: ignore[attr-defined]
    b = env.client.pods.objects["default/b"]
    b.metadata.labels["touched"] = "yes"
    await env.client.pods.update(b)
    await env.pass_(6, ["n2"])
    ready = {
        k: next(c.status for c in p.status.conditions if c.type == "Ready")
        for k, p in env.client.pods.objects.items()
    }
    assert ready == {"default/a": "False", "default/b": "True", "default/c": "True"}
    # Retried on the next pass, with the cache caught up.
    env.ctrl.pod_store.catch_up()  # type: ignore[attr-defined]
    await env.pass_(1, ["n2"])
    status = {
        k: next(c.status for c in p.status.conditions if c.type == "Ready")
        for k, p in env.client.pods.objects.items()
    }
    assert status == {"default/a": "False", "default/b": "False", "default/c": "True"}
    assert env.client.pods.objects["default/a"].status.phase == "Running"  # only Ready changes
    # Once only: a later pass writes nothing more to the pods.
    writes = len(env.client.pods.calls)
    await env.pass_(1, ["n2"])
    assert len(env.client.pods.calls) == writes


def test_zone_key_is_region_and_zone_ga_labels_first() -> None:
    node = node_pb2.Node()
    assert zone_key(node) == ""
    node.metadata.labels["failure-domain.beta.kubernetes.io/zone"] = "old"
    assert zone_key(node) == ":\x00:old"
    node.metadata.labels["topology.kubernetes.io/zone"] = "z1"
    node.metadata.labels["topology.kubernetes.io/region"] = "r1"
    assert zone_key(node) == "r1:\x00:z1"


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
