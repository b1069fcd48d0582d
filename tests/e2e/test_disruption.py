"""PodDisruptionBudgets across real processes: etcd, apiserver, scheduler, controller manager.

No kubelets: pods are placed with spec.nodeName (they count on their node but never run), so
the disruption controller sees them unready and the budget over them allows no disruption.
Preemption must then take the victim whose eviction keeps the budget, although the other victim
has the lower priority (without budgets it would be chosen). Every wait polls a condition.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from tests.e2e.test_scheduler import SCHED_ARGS, make_node, make_pod
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.v1 import pod_pb2, priorityclass_pb2
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NS = "default"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    lc = LocalCluster(
        tmp_path,
        kubelets=(),
        extra_args={"scheduler": SCHED_ARGS, "controller": ["--leader-elect", "false"]},
    )
    await asyncio.to_thread(lc.start)
    try:
        async with Client(lc.api_address) as c:
            yield c
    finally:
        await asyncio.to_thread(lc.stop)


def placed(name: str, node: str, priority: int, app: str) -> pod_pb2.Pod:
    p = make_pod(name, cpu="2")
    p.spec.nodeName = node
    p.spec.priorityClassName = f"prio-{priority}"
    p.metadata.labels["app"] = app
    return p


async def create_classes(client: Client, *values: int) -> None:
    """As on Kubernetes, a pod's priority comes from its PriorityClass (admission fills it in)."""
    for value in values:
        pc = priorityclass_pb2.PriorityClass(value=value)
        pc.metadata.name = f"prio-{value}"
        await client.priority_classes.create(pc)


def condition(pod: pod_pb2.Pod, type_: str) -> pod_pb2.PodCondition | None:
    return next((c for c in pod.status.conditions if c.type == type_), None)


async def test_preemption_takes_the_victim_that_keeps_the_budget(client: Client) -> None:
    for name in ("a", "b"):
        await client.nodes.create(make_node(name, cpu="2"))
    await create_classes(client, 1, 2, 100)
    await client.pods.create(placed("guarded", "a", 1, "guarded"))
    await client.pods.create(placed("free", "b", 2, "free"))
    await client.pod_disruption_budgets.create(
        json_format.ParseDict(
            {
                "metadata": {"name": "guarded", "namespace": NS},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
            },
            pdb_pb2.PodDisruptionBudget(),
        )
    )

    async def synced() -> pdb_pb2.PodDisruptionBudgetStatus | None:
        s = (await client.pod_disruption_budgets.get("guarded", NS)).status
        return s if s.observedGeneration == 1 and s.expectedPods == 1 else None

    status = await eventually(synced, what="the disruption controller's status")
    assert (status.currentHealthy, status.desiredHealthy, status.disruptionsAllowed) == (0, 1, 0)
    (cond,) = status.conditions
    assert (cond.type, cond.status, cond.reason) == (
        "DisruptionAllowed",
        "False",
        "InsufficientPods",
    )

    high = make_pod("high", cpu="1")
    high.spec.priorityClassName = "prio-100"
    assert (await client.pods.create(high)).spec.priority == 100

    async def nominated() -> str:
        return (await client.pods.get("high", NS)).status.nominatedNodeName

    assert await eventually(nominated, what="the preemptor nominated") == "b"
    victim = await client.pods.get("free", NS)
    assert victim.metadata.HasField("deletionTimestamp")  # graceful: no kubelet confirms it
    target = condition(victim, "DisruptionTarget")
    assert target is not None
    assert (target.status, target.reason, target.message) == (
        "True",
        "PreemptionByScheduler",
        "tinykube: preempting to accommodate a higher priority pod",
    )
    spared = await client.pods.get("guarded", NS)
    assert not spared.metadata.HasField("deletionTimestamp")
    assert condition(spared, "DisruptionTarget") is None

    # The victim goes (as its kubelet would confirm): the preemptor binds and is no longer
    # nominated.
    await client.pods.delete("free", NS, grace_period_seconds=0)

    async def bound() -> pod_pb2.Pod | None:
        p = await client.pods.get("high", NS)
        return p if p.spec.nodeName else None

    high_now = await eventually(bound, what="the preemptor bound")
    assert (high_now.spec.nodeName, high_now.status.nominatedNodeName) == ("b", "")
