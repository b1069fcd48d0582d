"""One fake-runtime kubelet process hosting many nodes, as the scale benchmarks use it.

Five hollow nodes register, each with its own Lease; a ReplicaSet's pods go Running on them at
once (nothing runs); deleting the ReplicaSet removes the pods (the fake kubelet confirms).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.e2e.test_workloads import binder, schedulable, sleeper_rs
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster, has_main

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NODES = 5


@pytest.fixture(scope="module")
async def fake_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    use_scheduler = has_main("scheduler")
    cl = LocalCluster(
        tmp_path_factory.mktemp("fake"),
        scheduler=use_scheduler,
        kubelets=("hollow",),
        kubelet_runtime="fake",
        extra_args={
            "kubelet": ["--fake-nodes", str(NODES), "--node-name-prefix", "hollow-"],
            "controller": ["--leader-elect", "false"],
        },
    )
    await asyncio.to_thread(cl.start)
    client = Client(cl.api_address)
    bind_task = None if use_scheduler else asyncio.create_task(binder(client))
    try:
        yield cl
    finally:
        if bind_task is not None:
            bind_task.cancel()
        await client.close()
        await asyncio.to_thread(cl.stop)


async def test_hollow_nodes_register_and_run_pods(fake_cluster: LocalCluster) -> None:
    async with Client(fake_cluster.api_address) as client:

        async def all_ready() -> bool:
            nodes = (await client.nodes.list()).items
            names = {n.metadata.name for n in nodes if schedulable(n)}
            return names == {f"hollow-{i}" for i in range(NODES)}

        await eventually(all_ready, what=f"{NODES} Ready hollow nodes")
        leases = (await client.leases.list("kube-node-lease")).items
        assert {lease.spec.holderIdentity for lease in leases} >= {
            f"hollow-{i}" for i in range(NODES)
        }

        await client.replica_sets.create(sleeper_rs("hollow-web", 20, "1000"))

        async def all_running() -> bool:
            pods = (await client.pods.list("default", label_selector="app=hollow-web")).items
            return len(pods) == 20 and all(
                p.status.phase == "Running" and p.spec.nodeName.startswith("hollow-") for p in pods
            )

        await eventually(all_running, what="20 Running pods on hollow nodes")
        pods = (await client.pods.list("default", label_selector="app=hollow-web")).items
        assert len({p.spec.nodeName for p in pods}) > 1
        await client.replica_sets.delete("hollow-web", "default")

        async def gone() -> bool:
            pods = (await client.pods.list("default", label_selector="app=hollow-web")).items
            return not pods

        await eventually(gone, what="pods of the deleted ReplicaSet to go")
