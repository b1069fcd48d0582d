"""Inter-pod anti-affinity across real processes: a ReplicaSet of 6 whose pods refuse to share a
node, on 4 hollow nodes (one fake-runtime kubelet), ends with 4 Running, one per node, and 2
Pending with kube-scheduler's FitError message for anti-affinity; deleting a Running replica
frees its node for another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.e2e.test_workloads import schedulable, sleeper_rs
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster, has_main
from tinykube.v1 import namespace_pb2, pod_pb2

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not has_main("scheduler"), reason="needs the scheduler"),
]

NODES = 4
NS = "default"
RS = "spread-out"
# kube-scheduler's FitError; the PostFilter tail (preemption's verdict) follows it once the
# scheduler prints one
WANT = (
    f"0/{NODES} nodes are available: {NODES} node(s) didn't match pod anti-affinity rules. "
    f"preemption: 0/{NODES} nodes are available: {NODES} No preemption victims found for "
    "incoming pod."
)


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    cl = LocalCluster(
        tmp_path_factory.mktemp("ipa"),
        kubelets=("hollow",),
        kubelet_runtime="fake",
        extra_args={
            "kubelet": ["--fake-nodes", str(NODES), "--node-name-prefix", "hollow-"],
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


async def test_required_hostname_anti_affinity_leaves_the_extra_replicas_pending(
    cluster: LocalCluster,
) -> None:
    async with Client(cluster.api_address) as client:

        async def all_ready() -> bool:
            nodes = (await client.nodes.list()).items
            return sum(1 for n in nodes if schedulable(n)) == NODES

        await eventually(all_ready, what=f"{NODES} Ready hollow nodes")
        rs = sleeper_rs(RS, 6, "1000")
        term = rs.spec.template.spec.affinity.podAntiAffinity
        t = term.requiredDuringSchedulingIgnoredDuringExecution.add()
        t.topologyKey = "kubernetes.io/hostname"
        t.labelSelector.matchLabels["app"] = RS
        await client.replica_sets.create(rs)

        async def settled() -> tuple[list[pod_pb2.Pod], list[pod_pb2.Pod]] | None:
            pods = (await client.pods.list(NS, label_selector=f"app={RS}")).items
            running = [p for p in pods if p.status.phase == "Running" and p.spec.nodeName]
            pending = [
                p
                for p in pods
                if not p.spec.nodeName
                and (c := condition(p, "PodScheduled")) is not None
                and c.status == "False"
                and c.reason == "Unschedulable"
            ]
            if len(pods) == 6 and len(running) == NODES and len(pending) == 2:
                return running, pending
            return None

        running, pending = await eventually(
            settled, limit=120, what="4 Running and 2 Unschedulable replicas"
        )
        assert sorted(p.spec.nodeName for p in running) == [f"hollow-{i}" for i in range(NODES)]
        for p in pending:
            c = condition(p, "PodScheduled")
            assert c is not None
            # exactly kube's FitError, then (once the scheduler prints one) its PostFilter tail
            assert c.message == WANT, c.message

        # a replica gone frees its node (AssignedPodDelete moves the pending ones): the node is
        # taken again, by a pending replica or by the replacement the ReplicaSet makes (which
        # is first depends on the pending pods' backoff, as in kube-scheduler)
        gone = running[0].metadata.name
        await client.pods.delete(gone, NS, grace_period_seconds=0)

        async def replaced() -> bool:
            pods = (await client.pods.list(NS, label_selector=f"app={RS}")).items
            live = [p for p in pods if not p.metadata.HasField("deletionTimestamp")]
            bound = [p for p in live if p.spec.nodeName]
            return (
                gone not in {p.metadata.name for p in live}
                and sorted(p.spec.nodeName for p in bound) == [f"hollow-{i}" for i in range(NODES)]
                and len(live) == 6
            )

        await eventually(replaced, limit=120, what="the freed node taken by a pending replica")


async def test_namespace_selector_finds_pods_in_namespaces_by_their_labels(
    cluster: LocalCluster,
) -> None:
    """Required pod affinity to pods in the namespaces labelled team=a: the scheduler reads
    namespaces' labels through its Namespace informer (without it the selector matched no
    namespace and the pod stayed Pending: "didn't match pod affinity rules")."""
    async with Client(cluster.api_address) as client:
        ns = namespace_pb2.Namespace()
        ns.metadata.name = "team-a"
        ns.metadata.labels["team"] = "a"
        await client.namespaces.create(ns)
        db = pod_pb2.Pod()
        db.metadata.name, db.metadata.namespace = "db", "team-a"
        db.metadata.labels["app"] = "db"
        db.spec.nodeName = "hollow-2"
        db.spec.containers.add(name="db", image="db")
        await client.pods.create(db)
        web = pod_pb2.Pod()
        web.metadata.name, web.metadata.namespace = "near-db", NS
        web.spec.containers.add(name="web", image="web")
        term = web.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
        term.topologyKey = "kubernetes.io/hostname"
        term.labelSelector.matchLabels["app"] = "db"
        term.namespaceSelector.matchLabels["team"] = "a"
        await client.pods.create(web)

        async def bound() -> str:
            return (await client.pods.get("near-db", NS)).spec.nodeName

        assert await eventually(bound, limit=60, what="near-db bound") == "hollow-2"
