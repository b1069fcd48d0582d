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
import json
import os
import signal
import ssl
import subprocess
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.e2e.test_etcd_restart import create_until_done, record_placements
from tests.e2e.test_workloads import schedulable
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.localetcd import find_etcd

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NODES = 10
PODS = 150


def name_diff(names: list[str], want: list[str]) -> str:
    """What `names` has beyond or short of `want` (each wanted name once)."""
    counts = Counter(names)
    missing = sorted(n for n in want if n not in counts)
    twice = sorted(n for n, c in counts.items() if c > 1)
    wanted = set(want)
    extra = sorted(n for n in counts if n not in wanted)
    return f"{len(names)} items, missing {missing}, more than once {twice}, unexpected {extra}"


def etcdctl(cluster: LocalCluster, endpoint: str, *args: str) -> str:
    """etcdctl against one member, as the apiserver's etcd client."""
    client = cluster.pki.paths("apiserver-etcd-client")
    cmd = [
        os.path.join(os.path.dirname(find_etcd()), "etcdctl"),
        f"--endpoints=https://{endpoint}",
        f"--cacert={cluster.pki.ca_cert_path}",
        f"--cert={client.cert}",
        f"--key={client.key}",
        "--command-timeout=10s",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return done.stdout if done.returncode == 0 else f"etcdctl failed: {done.stderr.strip()}"


def etcd_pods_by_member(cluster: LocalCluster, want: list[str]) -> str:
    """Each member's own pod keys (a serializable read, the member's local state) and its
    revision, raft index and KV hash: whether the members agree, and with which apiserver."""
    prefix = "/registry/pods/default/"
    lines = []
    for name, member in cluster.etcd_members.items():
        status = etcdctl(cluster, member.endpoint, "endpoint", "status", "-w", "json")
        try:
            st = json.loads(status)[0]["Status"]
            state = f"revision {st['header']['revision']}, raft index {st['raftIndex']}"
        except (ValueError, KeyError, IndexError):
            state = status
        hashkv = etcdctl(cluster, member.endpoint, "endpoint", "hashkv", "-w", "json")
        keys = etcdctl(
            cluster, member.endpoint, "get", prefix, "--prefix", "--keys-only", "--consistency=s"
        )
        names = [k[len(prefix) :] for k in keys.split() if k.startswith(prefix)]
        lines.append(f"{name}: {state}; hashkv {hashkv.strip()}; {name_diff(names, want)}")
    return "\n".join(lines)


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
        for server, client in zip(cluster.apiserver_names, (one, two), strict=True):
            answer = await client.pods.list("default")
            listed = answer.items
            got = sorted(p.metadata.name for p in listed)
            if got != want:
                by_member = await asyncio.to_thread(etcd_pods_by_member, cluster, want)
                again = await client.pods.list("default")
                pytest.fail(
                    f"a pod lost or made twice: List through {server} at resourceVersion "
                    f"{answer.metadata.resourceVersion}: {name_diff(got, want)}\n"
                    f"List again at {again.metadata.resourceVersion}: "
                    f"{name_diff([p.metadata.name for p in again.items], want)}\n"
                    f"etcd members now:\n{by_member}\nlogs: {cluster.work_dir}"
                )
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
