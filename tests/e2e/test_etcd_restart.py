"""etcd killed (SIGKILL) and restarted while pods are being created, batched and bound.

The apiserver commits concurrent writes in shared etcd txns (apiserver/txnbatch.py); a txn in
flight when etcd dies fails every write in it with UNAVAILABLE, which clients retry. Whatever
happens, no pod is lost, none is bound twice or moved, and every watcher (here one that
resumes from its last resourceVersion, as an informer does) sees each pod bound exactly once.
Separate OS processes: etcd, apiserver, scheduler and a fake kubelet hosting 20 nodes.
"""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from tests.e2e.test_workloads import schedulable
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.errors import AlreadyExistsError, ResourceExpiredError, TinykubeError
from tinykube.launcher import LocalCluster
from tinykube.localetcd import free_port
from tinykube.v1 import pod_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NODES = 20
PODS = 400


def pod(name: str) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = name
    p.metadata.namespace = "default"
    c = p.spec.containers.add(name="c", image="pause")
    c.resources.requests.update({"cpu": "10m", "memory": "16Mi"})
    return p


async def create_until_done(client: Client, name: str) -> None:
    """Create `name`, riding out etcd's absence as a user would: retry until it is there."""
    attempt = 0
    while True:
        attempt += 1
        try:
            await client.pods.create(pod(name))
            return
        except AlreadyExistsError:
            if attempt > 1:
                return  # an earlier attempt landed before its answer was lost
            raise
        except TinykubeError:
            await asyncio.sleep(0.2)


def etcd_errors(metrics_port: int) -> float:
    """Failed etcd calls the apiserver has counted (its Prometheus endpoint)."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("apiserver_etcd_requests_total{") and 'result="error"' in line
    )


async def record_placements(client: Client, nodes_seen: dict[str, list[str]]) -> None:
    """Each default-namespace pod's nodeName history into `nodes_seen` (a change appended only
    when it differs from the last), until cancelled. An informer's loop in miniature: list,
    then watch, resuming from the last resourceVersion received whenever the stream breaks
    (relisting if it is too old)."""

    def saw(p: pod_pb2.Pod) -> None:
        seen = nodes_seen[p.metadata.name]
        if not seen or seen[-1] != p.spec.nodeName:
            seen.append(p.spec.nodeName)

    rv = ""
    while True:
        try:
            if not rv:
                listed = await client.pods.list("default")
                for p in listed.items:
                    saw(p)
                rv = listed.metadata.resourceVersion
            async for ev in client.pods.watch("default", resource_version=rv):
                rv = ev.object.metadata.resourceVersion
                if ev.type in ("ADDED", "MODIFIED"):
                    saw(ev.object)
        except ResourceExpiredError:
            rv = ""
        except TinykubeError:
            await asyncio.sleep(0.2)


async def test_etcd_killed_mid_burst_loses_no_pod_and_binds_each_once(tmp_path: Path) -> None:
    metrics_port = free_port()
    cluster = LocalCluster(
        tmp_path,
        controller=False,
        kubelets=("hollow",),
        kubelet_runtime="fake",
        extra_args={
            "kubelet": ["--fake-nodes", str(NODES), "--node-name-prefix", "hollow-"],
            "scheduler": ["--leader-elect", "false"],
            "apiserver": ["--metrics-port", str(metrics_port)],
        },
    )
    await asyncio.to_thread(cluster.start)
    client = Client(cluster.api_address, timeout=5.0)
    nodes_seen: dict[str, list[str]] = defaultdict(list)
    watch_task: asyncio.Task[None] | None = None
    try:

        async def ready_nodes() -> bool:
            nodes = (await client.nodes.list()).items
            return sum(1 for n in nodes if schedulable(n)) == NODES

        await eventually(ready_nodes, 60, f"{NODES} hollow nodes Ready")

        watch_task = asyncio.create_task(record_placements(client, nodes_seen))
        await asyncio.sleep(0.5)
        names = iter(f"burst-{i:04d}" for i in range(PODS))
        created = 0

        async def creator() -> None:
            nonlocal created
            for name in names:
                await create_until_done(client, name)
                created += 1

        async def a_quarter_created() -> bool:
            return created >= PODS // 4

        creators = [asyncio.create_task(creator()) for _ in range(32)]
        await eventually(a_quarter_created, 60, "a quarter of the pods created")
        await asyncio.to_thread(cluster.kill, "etcd", signal.SIGKILL)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.start_component, "etcd")
        await asyncio.wait_for(asyncio.gather(*creators), 120)
        # The kill hit writes in flight (in shared txns), not an idle apiserver.
        assert await asyncio.to_thread(etcd_errors, metrics_port) > 0

        async def all_bound() -> bool:
            return sum(1 for s in nodes_seen.values() if s and s[-1]) >= PODS

        await eventually(all_bound, 120, f"{PODS} pods seen bound on the watch")
        listed = (await client.pods.list("default")).items
        assert sorted(p.metadata.name for p in listed) == sorted(
            f"burst-{i:04d}" for i in range(PODS)
        ), "a pod was lost or made twice"
        for p in listed:
            seen = [n for n in nodes_seen[p.metadata.name] if n]
            assert seen == [p.spec.nodeName], f"{p.metadata.name} was bound {seen}"
    finally:
        if watch_task is not None:
            watch_task.cancel()
        await client.close()
        await asyncio.to_thread(cluster.stop)
