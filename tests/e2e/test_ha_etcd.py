"""`LocalCluster(ha=True)` (what `tinykube up --ha` runs): three etcd members, two apiservers.

Separate OS processes over TLS: etcd-0..etcd-2, apiserver and apiserver-2, a scheduler and a
fake kubelet hosting 10 nodes. Pods are created through the first apiserver while the etcd
leader is killed (SIGKILL) and restarted, then a follower; a watch through the second
apiserver (an informer's list-then-watch loop) must see every pod bound exactly once, and a
final List through either holds every pod once. Then `tinykube up --ha`'s second apiserver
serves the REST API too.
"""

from __future__ import annotations

import asyncio
import signal
import ssl
import urllib.request
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.e2e.test_etcd_restart import create_until_done, record_placements
from tests.e2e.test_workloads import schedulable
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NODES = 10
PODS = 150


async def test_ha_cluster_rides_out_etcd_member_kills(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path,
        ha=True,
        controller=False,
        kubelets=("hollow",),
        kubelet_runtime="fake",
        extra_args={
            # The scheduler stays leader-elected: its Lease renewals ride out the kills too.
            "kubelet": ["--fake-nodes", str(NODES), "--node-name-prefix", "hollow-"],
        },
    )
    await asyncio.to_thread(cluster.start)
    assert list(cluster.etcd_members) == ["etcd-0", "etcd-1", "etcd-2"]
    assert cluster.apiserver_names == ["apiserver", "apiserver-2"]
    assert cluster.api_addresses[0] == cluster.api_address
    assert len(set(cluster.api_addresses)) == 2 and len(set(cluster.rest_urls)) == 2
    one = Client(cluster.api_addresses[0], timeout=10.0, credentials=cluster.credentials)
    two = Client(cluster.api_addresses[1], timeout=10.0, credentials=cluster.credentials)
    nodes_seen: dict[str, list[str]] = defaultdict(list)
    watch_task: asyncio.Task[None] | None = None
    try:

        async def ready_nodes() -> bool:
            nodes = (await two.nodes.list()).items
            return sum(1 for n in nodes if schedulable(n)) == NODES

        await eventually(ready_nodes, 60, f"{NODES} hollow nodes Ready")

        watch_task = asyncio.create_task(record_placements(two, nodes_seen))
        names = iter(f"ha-{i:04d}" for i in range(PODS))
        created = 0

        async def creator() -> None:
            nonlocal created
            for name in names:
                await create_until_done(one, name)
                created += 1

        def at_least(n: int) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                return created >= n

            return check

        creators = [asyncio.create_task(creator()) for _ in range(16)]
        leader = await asyncio.to_thread(cluster.etcd_leader)
        follower = next(m for m in cluster.etcd_members if m != leader)
        for i, member in enumerate((leader, follower)):
            await eventually(at_least(PODS * (i + 1) // 3), 60, "pods created")
            await asyncio.to_thread(cluster.kill, member, signal.SIGKILL)
            await eventually(at_least(PODS * (i + 1) // 3 + 10), 60, "creates with a member gone")
            await asyncio.to_thread(cluster.start_component, member)
        await asyncio.wait_for(asyncio.gather(*creators), 120)

        async def all_bound() -> bool:
            return sum(1 for s in nodes_seen.values() if s and s[-1]) >= PODS

        await eventually(all_bound, 120, f"{PODS} pods seen bound through apiserver-2")
        want = sorted(f"ha-{i:04d}" for i in range(PODS))
        for client in (one, two):
            listed = (await client.pods.list("default")).items
            assert sorted(p.metadata.name for p in listed) == want, "a pod lost or made twice"
        for p in listed:
            seen = [n for n in nodes_seen[p.metadata.name] if n]
            assert seen == [p.spec.nodeName], f"{p.metadata.name} was bound {seen}"

        # The second apiserver's REST API answers with the same cluster.
        ctx = cluster.credentials.ssl_context()
        assert isinstance(ctx, ssl.SSLContext)
        url = f"{cluster.rest_urls[1]}/api/v1/namespaces/default/pods?limit=1"
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(url, timeout=10, context=ctx).read()
        )
        assert b'"kind":"PodList"' in body.replace(b" ", b"")
    finally:
        if watch_task is not None:
            watch_task.cancel()
        await one.close()
        await two.close()
        await asyncio.to_thread(cluster.stop)
