"""The scheduler across real processes: etcd, apiserver and `python -m scheduler`, no kubelets.

Nodes are created through the API (as a kubelet would register them). Each test starts its own
small cluster so node sets do not leak between tests; leader-election timings are shortened by
flags. Every wait polls for a condition.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.errors import NotFoundError
from tinykube.informer import Informer
from tinykube.launcher import LocalCluster
from tinykube.quantity import milli_value, value
from tinykube.v1 import node_pb2, pod_pb2, priorityclass_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NS = "default"
SCHED_ARGS = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "1"]


def make_node(
    name: str, cpu: str = "2", memory: str = "4Gi", taints: tuple[tuple[str, str, str], ...] = ()
) -> node_pb2.Node:
    n = node_pb2.Node()
    n.metadata.name = name
    n.status.allocatable.update({"cpu": cpu, "memory": memory, "pods": "110"})
    n.status.capacity.update({"cpu": cpu, "memory": memory, "pods": "110"})
    for key, val, effect in taints:
        n.spec.taints.add(key=key, value=val, effect=effect)
    return n


def make_pod(name: str, cpu: str = "100m", memory: str = "128Mi") -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = name
    p.metadata.namespace = NS
    c = p.spec.containers.add(name="app", image="busybox")
    c.command.extend(["sleep", "3600"])
    c.resources.requests.update({"cpu": cpu, "memory": memory})
    return p


class Cluster:
    def __init__(self, lc: LocalCluster, client: Client) -> None:
        self.lc = lc
        self.client = client


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    lc = LocalCluster(
        tmp_path,
        controller=False,
        kubelets=(),
        extra_args={"scheduler": SCHED_ARGS},
    )
    await asyncio.to_thread(lc.start)
    try:
        async with Client(lc.api_address) as client:
            yield Cluster(lc, client)
    finally:
        await asyncio.to_thread(lc.stop)


async def pods(client: Client) -> list[pod_pb2.Pod]:
    return list((await client.pods.list(NS)).items)


async def all_bound(client: Client, count: int) -> list[pod_pb2.Pod] | None:
    items = await pods(client)
    bound = [p for p in items if p.spec.nodeName]
    return items if len(items) == count and len(bound) == count else None


def condition(pod: pod_pb2.Pod, type_: str) -> pod_pb2.PodCondition | None:
    for c in pod.status.conditions:
        if c.type == type_:
            return c
    return None


class BindWatcher:
    """Records each transition of a pod's spec.nodeName from empty to set, through an
    Informer (which resumes a dropped watch and relists, so no transition is missed)."""

    def __init__(self, client: Client) -> None:
        self.binds: dict[str, list[str]] = defaultdict(list)
        self.informer: Informer[pod_pb2.Pod] = Informer.for_resource(client.pods, namespace=NS)
        self.informer.add_handler(self._add, self._update)
        self.task: asyncio.Task[None] | None = None

    def _add(self, pod: pod_pb2.Pod) -> None:
        if pod.spec.nodeName:
            self.binds[pod.metadata.name].append(pod.spec.nodeName)

    def _update(self, old: pod_pb2.Pod, new: pod_pb2.Pod) -> None:
        if new.spec.nodeName and not old.spec.nodeName:
            self.binds[new.metadata.name].append(new.spec.nodeName)
        elif old.spec.nodeName and new.spec.nodeName != old.spec.nodeName:
            self.binds[new.metadata.name].append(f"moved to {new.spec.nodeName!r}")

    async def __aenter__(self) -> BindWatcher:
        self.task = self.informer.start()
        await asyncio.wait_for(self.informer.wait_synced(), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def settle(self, count: int) -> None:
        """Wait until the watch has delivered `count` bound pods."""

        async def seen() -> bool:
            return sum(1 for p in self.informer.store.list() if p.spec.nodeName) >= count

        await eventually(seen, what=f"the watch to show {count} bound pods")


def assert_not_overcommitted(nodes: list[node_pb2.Node], items: list[pod_pb2.Pod]) -> None:
    used_cpu: dict[str, int] = defaultdict(int)
    used_mem: dict[str, int] = defaultdict(int)
    for p in items:
        for c in p.spec.containers:
            used_cpu[p.spec.nodeName] += milli_value(c.resources.requests.get("cpu", "0"))
            used_mem[p.spec.nodeName] += value(c.resources.requests.get("memory", "0"))
    for n in nodes:
        name = n.metadata.name
        assert used_cpu[name] <= milli_value(n.status.allocatable["cpu"]), name
        assert used_mem[name] <= value(n.status.allocatable["memory"]), name


async def test_fifty_pods_on_five_nodes_then_unschedulable_then_fits(cluster: Cluster) -> None:
    client = cluster.client
    nodes = [await client.nodes.create(make_node(f"n{i}")) for i in range(1, 6)]
    async with BindWatcher(client) as watcher:
        await asyncio.gather(
            *(client.pods.create(make_pod(f"p{i:02d}", "150m", "256Mi")) for i in range(50))
        )
        items = await eventually(lambda: all_bound(client, 50), what="50 pods bound")
        await watcher.settle(50)
    assert_not_overcommitted(nodes, items)
    per_node: dict[str, int] = defaultdict(int)
    for p in items:
        per_node[p.spec.nodeName] += 150
    assert sum(per_node.values()) == 50 * 150
    assert set(per_node) == {f"n{i}" for i in range(1, 6)}  # LeastAllocated spreads them
    assert len(watcher.binds) == 50
    assert all(len(v) == 1 for v in watcher.binds.values())
    bound = await client.pods.get("p00", NS)
    cond = condition(bound, "PodScheduled")
    assert cond is not None and cond.status == "True"

    # a Scheduled event for one pod
    async def scheduled_event() -> bool:
        evs = (await client.events.list(NS)).items
        return any(
            e.reason == "Scheduled"
            and e.involvedObject.name == "p00"
            and e.message == f"Successfully assigned default/p00 to {bound.spec.nodeName}"
            for e in evs
        )

    await eventually(scheduled_event, what="Scheduled event")

    # a pod that fits nowhere stays Pending with kube-scheduler's message
    await client.pods.create(make_pod("huge", cpu="8"))
    want = (
        "0/5 nodes are available: 5 Insufficient cpu. preemption: 0/5 nodes are available: "
        "5 No preemption victims found for incoming pod."
    )

    async def pending_with_message() -> pod_pb2.Pod | None:
        p = await client.pods.get("huge", NS)
        c = condition(p, "PodScheduled")
        return (
            p
            if c and c.status == "False" and c.reason == "Unschedulable" and c.message == want
            else None
        )

    await eventually(pending_with_message, what="Unschedulable condition")

    async def failed_events() -> list[Any]:
        return [
            e
            for e in (await client.events.list(NS)).items
            if e.reason == "FailedScheduling" and e.involvedObject.name == "huge"
        ]

    evs = await eventually(failed_events, what="FailedScheduling event")
    assert len(evs) == 1 and evs[0].message == want and evs[0].type == "Warning"

    # `tinykube explain pod huge` asks the scheduler process for that attempt
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tinykube.cli.main", "-s", cluster.lc.api_address, "explain",
         "pod", "huge", "--scheduler", cluster.lc.address("scheduler")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"Pod default/huge: unschedulable: {want}")
    assert sum(1 for ln in lines if ln.startswith("n") and "Insufficient cpu" in ln) == 5

    # add a node that fits: bound within seconds
    await client.nodes.create(make_node("big", cpu="16", memory="32Gi"))

    async def huge_bound() -> str:
        return (await client.pods.get("huge", NS)).spec.nodeName

    assert await eventually(huge_bound, limit=15, what="huge bound after node added") == "big"


async def test_taints_and_deleted_while_queued(cluster: Cluster) -> None:
    client = cluster.client
    await client.nodes.create(
        make_node("gpu", cpu="8", taints=(("dedicated", "gpu", "NoSchedule"),))
    )
    await client.nodes.create(make_node("small", cpu="1"))
    async with BindWatcher(client) as watcher:
        for i in range(4):
            await client.pods.create(make_pod(f"plain{i}", cpu="200m"))
        items = await eventually(lambda: all_bound(client, 4), what="plain pods bound")
        assert {p.spec.nodeName for p in items} == {"small"}

        # too big for "small", not tolerating "gpu"
        await client.pods.create(make_pod("needs-gpu-node", cpu="2"))
        want = (
            "0/2 nodes are available: 1 Insufficient cpu, "
            "1 node(s) had untolerated taint {dedicated: gpu}. preemption: 0/2 nodes are "
            "available: 1 No preemption victims found for incoming pod, "
            "1 Preemption is not helpful for scheduling."
        )

        async def message() -> str:
            c = condition(await client.pods.get("needs-gpu-node", NS), "PodScheduled")
            return c.message if c is not None and c.message == want else ""

        await eventually(message, what="taint message")
        # deleted while queued (unschedulable), then a node it would fit on appears
        await client.pods.delete("needs-gpu-node", NS)
        with pytest.raises(NotFoundError):
            await client.pods.get("needs-gpu-node", NS)

        # a dry run first: `tinykube explain -f` asks the scheduler's Simulate
        manifest = cluster.lc.work_dir / "tolerant.yaml"
        manifest.write_text(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: tolerant}\nspec:\n"
            "  containers: [{name: app, image: busybox, resources: {requests: {cpu: '2'}}}]\n"
            "  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]\n"
        )
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tinykube.cli.main", "-s", cluster.lc.api_address, "explain",
             "-f", str(manifest), "--scheduler", cluster.lc.address("scheduler")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("Pod default/tolerant: would be scheduled to gpu; 1/2")
        with pytest.raises(NotFoundError):
            await client.pods.get("tolerant", NS)  # nothing was created

        tolerant = make_pod("tolerant", cpu="2")
        tolerant.spec.tolerations.add(
            key="dedicated", operator="Equal", value="gpu", effect="NoSchedule"
        )
        await client.pods.create(tolerant)

        async def tolerant_bound() -> str:
            return (await client.pods.get("tolerant", NS)).spec.nodeName

        assert await eventually(tolerant_bound, what="tolerant pod bound") == "gpu"
        await client.nodes.create(make_node("roomy", cpu="8"))
        await asyncio.sleep(0)  # the deleted pod must not be bound to the new node either
        items = await eventually(lambda: all_bound(client, 5), what="5 pods bound")
        await watcher.settle(5)
    assert "needs-gpu-node" not in watcher.binds
    assert {p.metadata.name for p in items} == {"plain0", "plain1", "plain2", "plain3", "tolerant"}
    log = cluster.lc.log_path("scheduler").read_text()
    assert "needs-gpu-node to" not in log


async def test_kill9_mid_run_every_pod_bound_once(cluster: Cluster) -> None:
    client = cluster.client
    nodes = [await client.nodes.create(make_node(f"n{i}", cpu="4")) for i in range(4)]
    async with BindWatcher(client) as watcher:

        async def create_all() -> None:
            for i in range(120):  # one by one, so the kill lands mid-stream
                await client.pods.create(make_pod(f"k{i:03d}", "100m"))

        creator = asyncio.create_task(create_all())

        async def some_bound() -> bool:
            return sum(1 for v in watcher.binds.values() if v) >= 20

        await eventually(some_bound, what="20 pods bound before the kill")
        await asyncio.to_thread(cluster.lc.kill, "scheduler", signal.SIGKILL)
        await creator
        await asyncio.to_thread(cluster.lc.start_component, "scheduler")
        items = await eventually(lambda: all_bound(client, 120), limit=90, what="120 pods bound")
        await watcher.settle(120)
    assert_not_overcommitted(nodes, items)
    assert len(watcher.binds) == 120
    assert all(len(v) == 1 for v in watcher.binds.values()), {
        k: v for k, v in watcher.binds.items() if len(v) != 1
    }


async def test_two_schedulers_leader_election_no_double_binding(cluster: Cluster) -> None:
    client = cluster.client
    lc = cluster.lc
    await asyncio.to_thread(lc.start_component, "scheduler-2", SCHED_ARGS)
    nodes = [await client.nodes.create(make_node(f"n{i}", cpu="8")) for i in range(3)]

    async def holder() -> str:
        lease = await client.leases.get("tinykube-scheduler", "kube-system")
        return lease.spec.holderIdentity

    async with BindWatcher(client) as watcher:
        await asyncio.gather(*(client.pods.create(make_pod(f"a{i:02d}")) for i in range(40)))
        await eventually(lambda: all_bound(client, 40), what="40 pods bound")
        leader = await eventually(holder, what="a lease holder")
        pid = int(leader.rsplit("_", 1)[1])
        name = next(n for n, p in lc.processes.items() if p.pid == pid)
        assert name in ("scheduler", "scheduler-2")
        await asyncio.to_thread(lc.kill, name, signal.SIGKILL)
        await asyncio.gather(*(client.pods.create(make_pod(f"b{i:02d}")) for i in range(40)))
        items = await eventually(lambda: all_bound(client, 80), limit=60, what="80 pods bound")
        assert await holder() != leader
        await watcher.settle(80)
    assert_not_overcommitted(nodes, items)
    assert len(watcher.binds) == 80
    assert all(len(v) == 1 for v in watcher.binds.values())


async def test_preemption_evicts_lower_priority_pod(cluster: Cluster) -> None:
    client = cluster.client
    await client.nodes.create(make_node("only", cpu="2"))
    for name in ("low-a", "low-b"):
        low = make_pod(name, cpu="1")
        low.spec.terminationGracePeriodSeconds = 0  # no kubelet here to confirm deletion
        await client.pods.create(low)
    await eventually(lambda: all_bound(client, 2), what="low-priority pods bound")
    # As on Kubernetes, a pod's priority comes from its PriorityClass (admission fills it in).
    pc = priorityclass_pb2.PriorityClass(value=1000)
    pc.metadata.name = "high"
    await client.priority_classes.create(pc)
    high = make_pod("high", cpu="1")
    high.spec.priorityClassName = "high"
    created = await client.pods.create(high)
    assert created.spec.priority == 1000

    async def high_bound() -> str:
        return (await client.pods.get("high", NS)).spec.nodeName

    assert await eventually(high_bound, what="high-priority pod bound") == "only"
    left = {p.metadata.name for p in await pods(client)}
    assert left in ({"high", "low-a"}, {"high", "low-b"})  # exactly one victim

    async def preempted_event() -> bool:
        return any(
            e.reason == "Preempted" and e.involvedObject.name.startswith("low-")
            for e in (await client.events.list(NS)).items
        )

    await eventually(preempted_event, what="Preempted event")
