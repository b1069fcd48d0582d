"""Node registration/lease/status and pod workers, against an in-memory fake client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kubelet.fake import FakeRuntime
from kubelet.node import NODE_LEASE_NAMESPACE, NodeAgent, NodeConfig
from kubelet.pods import PodManager
from tests.unit.controller.fakes import FakeClient
from tinykube.clock import FakeClock
from tinykube.errors import ConflictError, DeadlineExceededError
from tinykube.v1 import node_pb2, pod_pb2


def config(**kw: object) -> NodeConfig:
    base: dict[str, object] = {
        "name": "n1",
        "node_ip": "10.0.0.5",
        "kubelet_port": 10250,
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "labels": {"zone": "a"},
        "taints": [("dedicated", "gpu", "NoSchedule")],
        "runtime": "fake",
    }
    base.update(kw)
    return NodeConfig(**base)  # type: ignore[arg-type]


async def test_register_creates_the_node_with_status_and_endpoint() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(), lambda: client.nodes.objects.get("n1"), clock=clock)
    await agent.register()
    node = client.nodes.objects["n1"]
    assert node.metadata.labels["zone"] == "a"
    assert node.metadata.labels["kubernetes.io/hostname"] == "n1"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("dedicated", "gpu", "NoSchedule")
    ]
    assert dict(node.status.allocatable) == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    assert {a.type: a.address for a in node.status.addresses}["InternalIP"] == "10.0.0.5"
    assert node.status.daemonEndpoints.kubeletEndpoint.Port == 10250
    (ready,) = node.status.conditions
    assert (ready.type, ready.status, ready.reason) == ("Ready", "True", "KubeletReady")


async def test_reregistration_keeps_the_node_and_restores_ready() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(), lambda: client.nodes.objects.get("n1"), clock=clock)
    await agent.register()
    node = client.nodes.objects["n1"]
    uid = node.metadata.uid
    node.status.conditions[0].status = "Unknown"  # the node lifecycle controller's verdict
    assert agent.needs_update(node)
    await agent.sync_status()
    assert client.nodes.objects["n1"].status.conditions[0].status == "True"
    again = NodeAgent(client, config(), lambda: client.nodes.objects.get("n1"), clock=clock)
    await again.register()
    assert client.nodes.objects["n1"].metadata.uid == uid
    assert not again.needs_update(client.nodes.objects["n1"])


async def test_a_changed_node_is_compared_again_and_its_status_put_back() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(), lambda: client.nodes.objects.get("n1"), clock=clock)
    await agent.register()
    node = client.nodes.objects["n1"]
    assert not agent.needs_update(node)
    assert not agent.needs_update(node)  # the same (unchanged) object: not compared again
    # Someone else's write: a new object (as the informer delivers it) with other capacity.
    changed = node_pb2.Node()
    changed.CopyFrom(node)
    changed.status.capacity["cpu"] = "64"
    assert agent.needs_update(changed)
    client.nodes.objects["n1"] = changed
    await agent.sync_status()
    assert client.nodes.objects["n1"].status.capacity["cpu"] == "4"
    assert not agent.needs_update(client.nodes.objects["n1"])
    assert agent.needs_update(changed)  # the old, different object is still different


async def test_lease_is_created_then_renewed() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(lease_duration_seconds=40), lambda: None, clock=clock)
    await agent.renew_lease()
    lease = client.leases.objects[f"{NODE_LEASE_NAMESPACE}/n1"]
    assert (lease.spec.holderIdentity, lease.spec.leaseDurationSeconds) == ("n1", 40)
    first = lease.spec.renewTime.seconds
    clock.advance(10)
    await agent.renew_lease()
    assert client.leases.objects[f"{NODE_LEASE_NAMESPACE}/n1"].spec.renewTime.seconds == (
        first + 10
    )


async def test_lease_loop_backs_off_on_failure() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(), lambda: None, clock=clock)
    from tinykube.errors import UnavailableError

    client.leases.fail_creates = UnavailableError("apiserver down")
    task = asyncio.create_task(agent.lease_loop())
    await clock.step(0)
    await clock.step(0.2)
    await clock.step(0.4)
    assert f"{NODE_LEASE_NAMESPACE}/n1" not in client.leases.objects
    client.leases.fail_creates = None
    await clock.step(0.8)
    assert f"{NODE_LEASE_NAMESPACE}/n1" in client.leases.objects
    task.cancel()


async def test_lease_backoff_never_exceeds_the_renew_interval() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    # A 4 s lease renews every second: retries back off 0.2, 0.4, 0.8, then 1 s, not 1.6 ... 7.
    agent = NodeAgent(client, config(lease_duration_seconds=4), lambda: None, clock=clock)
    from tinykube.errors import UnavailableError

    client.leases.fail_creates = UnavailableError("apiserver down")
    task = asyncio.create_task(agent.lease_loop())
    for step in (0, 0.2, 0.4, 0.8, 1.0, 1.0):
        await clock.step(step)
    assert f"{NODE_LEASE_NAMESPACE}/n1" not in client.leases.objects
    client.leases.fail_creates = None
    await clock.step(0.99)
    assert f"{NODE_LEASE_NAMESPACE}/n1" not in client.leases.objects
    await clock.step(0.01)
    assert f"{NODE_LEASE_NAMESPACE}/n1" in client.leases.objects
    task.cancel()


async def test_a_renewal_whose_answer_was_lost_is_found_stored_not_resent() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(), lambda: None, clock=clock)
    await agent.renew_lease()  # created
    await agent.renew_lease()  # renewed: an Update from the Lease last stored, no read
    key = f"{NODE_LEASE_NAMESPACE}/n1"
    assert (client.leases.reads, client.leases.calls) == (1, [("create", key), ("update", key)])
    client.leases.lose_update_answers = DeadlineExceededError("Deadline Exceeded")
    clock.advance(10)
    with pytest.raises(DeadlineExceededError):
        await agent.renew_lease()
    landed = client.leases.objects[key].spec.renewTime.seconds
    client.leases.lose_update_answers = None
    clock.advance(1)
    # The next attempt reads the Lease, finds that renewal stored, and writes nothing: it was
    # sent a second ago.
    assert await agent.renew_lease() == 1.0
    assert client.leases.reads == 2
    assert client.leases.calls == [("create", key), ("update", key), ("update", key)]
    assert client.leases.objects[key].spec.renewTime.seconds == landed
    # And the renewal after it is an Update from the Lease read.
    clock.advance(10)
    assert await agent.renew_lease() == 0.0
    assert client.leases.reads == 2
    assert client.leases.calls[-1] == ("update", key)


async def test_a_renewal_that_did_not_land_is_written_from_the_lease_read() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(), lambda: None, clock=clock)
    await agent.renew_lease()
    key = f"{NODE_LEASE_NAMESPACE}/n1"
    client.leases.fail_updates = DeadlineExceededError("Deadline Exceeded")
    clock.advance(10)
    with pytest.raises(DeadlineExceededError):
        await agent.renew_lease()
    client.leases.fail_updates = None
    clock.advance(1)
    assert await agent.renew_lease() == 0.0
    assert client.leases.reads == 2  # the read before the create, the read after the timeout
    assert client.leases.objects[key].spec.renewTime.seconds == clock.now().timestamp() // 1


async def test_a_conflicting_renewal_reads_the_lease_and_writes_at_once() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(client, config(), lambda: None, clock=clock)
    await agent.renew_lease()
    key = f"{NODE_LEASE_NAMESPACE}/n1"
    # Someone else's write: our version is stale.
    client.leases.objects[key].metadata.resourceVersion = "999"
    clock.advance(10)
    assert await agent.renew_lease() == 0.0
    assert client.leases.reads == 2
    # (the fake records the writes it applied: the conflicting one is not among them)
    assert [c for c, _ in client.leases.calls] == ["create", "update"]
    assert client.leases.objects[key].spec.renewTime.seconds == clock.now().timestamp() // 1


async def test_a_node_status_write_whose_answer_was_lost_is_not_written_again() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(
        client,
        config(status_report_frequency=300),
        lambda: client.nodes.objects.get("n1"),
        clock=clock,
    )
    await agent.register()
    clock.advance(300)
    client.nodes.lose_update_answers = DeadlineExceededError("Deadline Exceeded")
    with pytest.raises(DeadlineExceededError):
        await agent.sync_status()
    client.nodes.lose_update_answers = None
    writes = len(client.nodes.calls)
    clock.advance(10)
    await agent.sync_status()  # the informer shows our heartbeat: that was the report
    assert len(client.nodes.calls) == writes
    clock.advance(290)
    await agent.sync_status()
    assert len(client.nodes.calls) == writes + 1


def bound_pod(name: str, node: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = name
    pod.metadata.namespace = "default"
    pod.spec.nodeName = node
    pod.spec.containers.add(name="c", image="img")
    pod.status.conditions.add(type="PodScheduled", status="True")
    return pod


async def wait_for(pred: object, clock: FakeClock) -> None:
    for _ in range(100):
        if pred():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_pod_worker_reports_running_and_confirms_deletion() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    manager = PodManager(client, FakeRuntime(clock), {"n1"}, lambda _n: "10.0.0.5", clock=clock)
    mine = await client.pods.create(bound_pod("mine", "n1"))
    other = await client.pods.create(bound_pod("other", "n2"))
    manager.on_add(mine)
    manager.on_add(other)
    assert list(manager.workers) == [mine.metadata.uid], "took another node's pod"

    def running() -> bool:
        return client.pods.objects["default/mine"].status.phase == "Running"

    await wait_for(running, clock)
    status = client.pods.objects["default/mine"].status
    assert status.hostIP == "10.0.0.5"
    assert {c.type: c.status for c in status.conditions} == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert client.pods.objects["default/other"].status.phase == ""

    terminating = pod_pb2.Pod()
    terminating.CopyFrom(client.pods.objects["default/mine"])
    terminating.metadata.deletionTimestamp.seconds = 1
    terminating.metadata.deletionGracePeriodSeconds = 0
    manager.on_update(mine, terminating)
    await wait_for(lambda: "default/mine" not in client.pods.objects, clock)
    assert ("delete/0", "default/mine") in client.pods.calls
    await wait_for(lambda: not manager.workers, clock)
    await manager.stop()


async def test_pod_worker_puts_back_a_status_someone_else_overwrote() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    manager = PodManager(client, FakeRuntime(clock), {"n1"}, lambda _n: "10.0.0.5", clock=clock)
    pod = await client.pods.create(bound_pod("p", "n1"))
    manager.on_add(pod)

    def ready() -> str:
        conds = client.pods.objects["default/p"].status.conditions
        return next((c.status for c in conds if c.type == "Ready"), "")

    await wait_for(lambda: ready() == "True", clock)
    ours = pod_pb2.Pod()
    ours.CopyFrom(client.pods.objects["default/p"])

    # A watch event older than our own write changes nothing (no rewrite for a lagging watch).
    writes = len(client.pods.calls)
    manager.on_update(pod, pod)
    await clock.step(0)
    assert len(client.pods.calls) == writes

    # The node lifecycle controller marks the pod not ready while this node was out of touch,
    # and the eviction API adds a DisruptionTarget condition: the kubelet reports Ready again
    # and keeps the other component's condition.
    marked = pod_pb2.Pod()
    marked.CopyFrom(ours)
    for cond in marked.status.conditions:
        if cond.type == "Ready":
            cond.status = "False"
    marked.status.conditions.add(type="DisruptionTarget", status="True", reason="Test")
    marked = await client.pods.update_status(marked)
    manager.on_update(ours, marked)
    await wait_for(lambda: ready() == "True", clock)
    types = [c.type for c in client.pods.objects["default/p"].status.conditions]
    assert sorted(types) == [
        "ContainersReady", "DisruptionTarget", "Initialized", "PodScheduled", "Ready"
    ]  # fmt: skip
    # Once: our answer is the newest version, so the next event causes no write.
    writes = len(client.pods.calls)
    manager.on_update(marked, client.pods.objects["default/p"])
    await clock.step(0)
    assert len(client.pods.calls) == writes
    await manager.stop()


async def test_a_pod_status_write_found_stored_after_a_conflict_is_not_sent_again() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    manager = PodManager(client, FakeRuntime(clock), {"n1"}, lambda _n: "10.0.0.5", clock=clock)
    pod = await client.pods.create(bound_pod("p", "n1"))
    # Each status write lands and then comes back ABORTED: what the client's re-send of a
    # write whose answer was lost gets. The worker's read finds its own status stored.
    client.pods.lose_update_answers = ConflictError("the object has been modified")
    manager.on_add(pod)
    await wait_for(lambda: client.pods.objects["default/p"].status.phase == "Running", clock)
    await clock.step(0)
    assert client.pods.calls.count(("update_status", "default/p")) == 1
    client.pods.lose_update_answers = None
    await manager.stop()


async def test_orphans_from_a_previous_run_are_cleaned_up() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    runtime = FakeRuntime(clock)
    await runtime.sync_pod(bound_pod("stale", "n1"))
    manager = PodManager(client, runtime, {"n1"}, lambda _n: "h", clock=clock)
    await asyncio.gather(*await manager.cleanup_orphans(set()))
    assert runtime.known_pods() == []


def test_node_helpers_build_a_kubernetes_shaped_status() -> None:
    from kubelet.node import desired_status

    status = desired_status(config(), "host-a")
    assert isinstance(status, node_pb2.NodeStatus)
    assert status.nodeInfo.kubeletVersion.startswith("tinykube")
    assert {a.type for a in status.addresses} == {"InternalIP", "Hostname"}
    # The machine's identity, as the kubelet reads it; kubeProxyVersion is deprecated, empty.
    assert status.nodeInfo.bootID == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert status.nodeInfo.systemUUID
    assert status.nodeInfo.kubeProxyVersion == ""


def test_fake_nodes_have_a_system_uuid_each_stable_across_restarts() -> None:
    from kubelet.node import system_uuid

    a, b = config(runtime="fake"), config(runtime="fake")
    b.name = "n2"
    assert system_uuid(a) == system_uuid(config(runtime="fake")) != system_uuid(b)


async def test_ready_heartbeat_moves_with_each_periodic_status_report() -> None:
    """Ready's lastHeartbeatTime is re-posted every status_report_frequency with nothing else
    changed (Kubernetes' nodeStatusReportFrequency), keeping its lastTransitionTime; between
    reports the kubelet posts nothing."""
    clock = FakeClock()
    client = FakeClient(clock)
    agent = NodeAgent(
        client,
        config(status_report_frequency=300.0),
        lambda: client.nodes.objects.get("n1"),
        clock=clock,
    )
    await agent.register()
    (first,) = client.nodes.objects["n1"].status.conditions
    version = client.nodes.objects["n1"].metadata.resourceVersion
    clock.advance(299)
    await agent.sync_status()
    assert client.nodes.objects["n1"].metadata.resourceVersion == version
    clock.advance(2)
    await agent.sync_status()
    (ready,) = client.nodes.objects["n1"].status.conditions
    assert ready.lastHeartbeatTime.seconds - first.lastHeartbeatTime.seconds == 301
    assert ready.lastTransitionTime == first.lastTransitionTime


async def test_hollow_nodes_spread_their_first_periodic_report() -> None:
    """Nodes of one process registered together report at independent phases, each still
    every status_report_frequency after its first report (a burst of every node's status
    write every 5 minutes otherwise)."""
    clock = FakeClock()
    client = FakeClient(clock)
    names = [f"n{i}" for i in range(40)]
    agents = [
        NodeAgent(
            client,
            config(name=name, status_report_frequency=300.0, first_report_spread=0.5),
            lambda name=name: client.nodes.objects.get(name),  # type: ignore[misc]
            clock=clock,
        )
        for name in names
    ]
    for agent in agents:
        await agent.register()

    async def tick(seconds: float) -> set[str]:
        versions = {n: client.nodes.objects[n].metadata.resourceVersion for n in names}
        clock.advance(seconds)
        for agent in agents:
            await agent.sync_status()
        return {n for n in names if client.nodes.objects[n].metadata.resourceVersion != versions[n]}

    assert await tick(149) == set()  # nobody before half the period
    first = await tick(76)  # 225 s: about half of them
    assert 0 < len(first) < len(names)
    rest = await tick(76)  # 301 s: the others
    assert rest == set(names) - first
    assert await tick(200) == set()  # 501 s: each is 5 minutes from its own first report
    assert await tick(50) == first  # 551 s (first at 225 s)
    assert await tick(50) == rest  # 601 s (first at 301 s)
