"""Topology spread across real processes: three fake-runtime kubelets host 3, 2 and 1 hollow nodes
in zones zone-a, zone-b and zone-c. A ReplicaSet whose pods carry a topologySpreadConstraint
(maxSkew 1 on topology.kubernetes.io/zone, DoNotSchedule) ends with per-zone counts that differ
by at most 1, though least-allocated scoring alone would put half of them in zone-a; scaled up,
it keeps that. A pod whose constraint no node can meet (minDomains beyond the zones there are,
which makes the global minimum 0, as kube-scheduler's filter does) stays Pending with kube's
FitError message and DefaultPreemption's PostFilter tail."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from tests.e2e.test_workloads import schedulable, sleeper_rs
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster, has_main
from tinykube.v1 import pod_pb2

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not has_main("scheduler"), reason="needs the scheduler"),
]

ZONE = "topology.kubernetes.io/zone"
NODES_PER_ZONE = {"zone-a": 3, "zone-b": 2, "zone-c": 1}
NODES = sum(NODES_PER_ZONE.values())
NS = "default"
RS = "zone-spread"
# kube-scheduler's FitError, then DefaultPreemption's PostFilter tail: the ReplicaSet's pods have
# the probe's priority, so no node offers a victim
WANT = (
    f"0/{NODES} nodes are available: {NODES} node(s) didn't match pod topology spread "
    f"constraints. preemption: 0/{NODES} nodes are available: {NODES} No preemption victims "
    "found for incoming pod."
)


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    per_kubelet = {
        f"kubelet-{zone}": [
            *("--fake-nodes", str(n), "--node-name-prefix", f"{zone}-"),
            *("--node-labels", f"{ZONE}={zone}"),
        ]
        for zone, n in NODES_PER_ZONE.items()
    }
    cl = LocalCluster(
        tmp_path_factory.mktemp("spread"),
        kubelets=tuple(NODES_PER_ZONE),
        kubelet_runtime="fake",
        extra_args={
            **per_kubelet,
            "controller": ["--leader-elect", "false"],
            "scheduler": ["--leader-elect", "false"],
        },
    )
    await asyncio.to_thread(cl.start)
    try:
        yield cl
    finally:
        await asyncio.to_thread(cl.stop)


def condition(p: pod_pb2.Pod, kind: str) -> pod_pb2.PodCondition | None:
    return next((c for c in p.status.conditions if c.type == kind), None)


async def zone_counts(client: Client) -> Counter[str] | None:
    """Replicas per zone once the ReplicaSet's live pods are as many as it asks for and all
    Running, else None."""
    want = (await client.replica_sets.get(RS, NS)).spec.replicas
    nodes = {n.metadata.name: n.metadata.labels[ZONE] for n in (await client.nodes.list()).items}
    pods = [
        p
        for p in (await client.pods.list(NS, label_selector=f"app={RS}")).items
        if not p.metadata.HasField("deletionTimestamp")
    ]
    if len(pods) != want or any(p.status.phase != "Running" for p in pods):
        return None
    return Counter(nodes[p.spec.nodeName] for p in pods)


@pytest.fixture(scope="module")
async def spread_rs(cluster: LocalCluster) -> str:
    """The ReplicaSet of 6 spread over the zones, created once every zone's nodes are Ready
    (a zone without a node yet is no domain, and the first replicas would skip it)."""
    async with Client(cluster.api_address) as client:

        async def all_ready() -> bool:
            nodes = (await client.nodes.list()).items
            return sum(1 for n in nodes if schedulable(n) and ZONE in n.metadata.labels) == NODES

        await eventually(all_ready, what=f"{NODES} Ready hollow nodes in 3 zones")
        rs = sleeper_rs(RS, 6, "1000")
        c = rs.spec.template.spec.topologySpreadConstraints.add(
            maxSkew=1, topologyKey=ZONE, whenUnsatisfiable="DoNotSchedule"
        )
        c.labelSelector.matchLabels["app"] = RS
        await client.replica_sets.create(rs)
    return RS


async def test_replicas_spread_evenly_over_zones_and_stay_so_when_scaled(
    cluster: LocalCluster, spread_rs: str
) -> None:
    async with Client(cluster.api_address) as client:
        counts = await eventually(lambda: zone_counts(client), limit=120, what="6 Running replicas")
        assert sum(counts.values()) == 6 and set(counts) == set(NODES_PER_ZONE), counts
        assert max(counts.values()) - min(counts.values()) <= 1, counts

        current = await client.replica_sets.get(spread_rs, NS)
        current.spec.replicas = 10
        await client.replica_sets.update(current)

        async def scaled() -> Counter[str] | None:
            counts = await zone_counts(client)
            return counts if counts is not None and sum(counts.values()) == 10 else None

        counts = await eventually(scaled, limit=120, what="10 Running replicas")
        assert set(counts) == set(NODES_PER_ZONE), counts
        assert max(counts.values()) - min(counts.values()) <= 1, counts


async def test_pod_no_node_can_spread_stays_pending_with_kubes_message(
    cluster: LocalCluster, spread_rs: str
) -> None:
    async with Client(cluster.api_address) as client:
        # Counted pods: the ReplicaSet's, at least 2 per zone once it has settled (the probe
        # does not carry their label, so it adds none of its own). minDomains 4 over 3 zones
        # makes the global minimum 0, so every zone's skew is above maxSkew 1.
        await eventually(lambda: zone_counts(client), limit=120, what="the ReplicaSet settled")
        pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
        pod.metadata.name = "spread-probe"
        pod.metadata.namespace = NS
        pod.metadata.labels["app"] = "spread-probe"
        pod.spec.containers.add(name="sleep", image="busybox", command=["sleep", "1000"])
        c = pod.spec.topologySpreadConstraints.add(
            maxSkew=1, topologyKey=ZONE, whenUnsatisfiable="DoNotSchedule", minDomains=4
        )
        c.labelSelector.matchLabels["app"] = spread_rs
        await client.pods.create(pod)

        async def unschedulable() -> pod_pb2.PodCondition | None:
            got = await client.pods.get("spread-probe", NS)
            if got.spec.nodeName:
                pytest.fail(f"the probe was bound to {got.spec.nodeName}")
            cond = condition(got, "PodScheduled")
            ok = cond is not None and cond.status == "False" and cond.reason == "Unschedulable"
            return cond if ok else None

        cond = await eventually(unschedulable, limit=60, what="the probe marked Unschedulable")
        assert cond.message == WANT
