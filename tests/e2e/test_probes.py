"""Container probes across real processes: a real kubelet (process runtime) probes real containers.

Each container works in a directory of the test's (workingDir), so the test decides when a
probe passes by creating or removing files there, and when `python -m http.server` starts.
- an httpGet readiness probe turns the pod Ready only once the server listens, and its Service's
  Endpoints move it from notReadyAddresses to addresses;
- an exec readiness probe that fails keeps the pod NotReady with Kubernetes' conditions, and the
  pod follows the probe both ways;
- a failing exec liveness probe restarts the container (restartCount 1, lastState, Events);
- a ReplicaSet counts only ready pods (readyReplicas, then availableReplicas after
  minReadySeconds), and `kubectl get pod` shows 0/1 while the probe fails;
- a Deployment rolled to a template whose readiness probe fails stalls: no old pod goes;
- `kubectl describe pod` (the real kubectl) and `tinykube describe` show the probes.
Timings are shortened through flags and probe periods of 1 s; every wait polls a condition.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from tests.e2e.conftest import tinykube_command, venv_bin
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster, has_main
from tinykube.meta import int_or_string_value
from tinykube.v1 import deployment_pb2, pod_pb2, replicaset_pb2, service_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NS = "default"
KUBELET_ARGS = [
    "--node-status-update-frequency", "1s",
    "--crash-loop-backoff", "1s",
    "--crash-loop-backoff-max", "2s",
    "--poll-interval", "200ms",
]  # fmt: skip


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    if not has_main("scheduler"):
        pytest.skip("needs the scheduler")
    cl = LocalCluster(
        tmp_path_factory.mktemp("probes"),
        kubelets=("node-1",),
        extra_args={"kubelet": KUBELET_ARGS},
    )
    await asyncio.to_thread(cl.start)
    try:
        yield cl
    finally:
        await asyncio.to_thread(cl.stop)


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[Client]:
    async with Client(cluster.api_address) as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pod(name: str, workdir: Path, script: str, **container: Any) -> pod_pb2.Pod:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "c",
                    "image": "python",
                    "command": ["sh", "-c", script],
                    "workingDir": str(workdir),
                    **container,
                }
            ],
        },
    }
    return json_format.ParseDict(manifest, pod_pb2.Pod())


def conditions(p: pod_pb2.Pod) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in p.status.conditions}


async def events_of(client: Client, name: str) -> list[tuple[str, str, str]]:
    return [
        (e.type, e.reason, e.message)
        for e in (await client.events.list(NS)).items
        if e.involvedObject.name == name
    ]


async def test_http_readiness_waits_for_the_server_and_endpoints_follow(
    client: Client, tmp_path: Path
) -> None:
    port = free_port()
    script = (
        "while [ ! -e go ]; do sleep 0.1; done; "
        f'exec {sys.executable} -m http.server {port} --bind "$POD_IP"'
    )
    web = pod(
        "web",
        tmp_path,
        script,
        ports=[{"name": "http", "containerPort": port}],
        readinessProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    )
    await client.pods.create(web)
    svc = service_pb2.Service()
    svc.metadata.name, svc.metadata.namespace = "web", NS
    svc.spec.selector["app"] = "web"
    svc.spec.ports.add(port=80, targetPort=int_or_string_value("http"))
    await client.services.create(svc)

    async def running_unready() -> pod_pb2.Pod | None:
        p = await client.pods.get("web", NS)
        return p if p.status.phase == "Running" else None

    p = await eventually(running_unready, what="the pod to run")
    assert conditions(p)["Ready"] == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [c]",
    )

    async def not_ready_address() -> list[str]:
        ep = await client.endpoints.get("web", NS)
        assert not [a for s in ep.subsets for a in s.addresses], "an unready pod is in addresses"
        return [a.ip for s in ep.subsets for a in s.notReadyAddresses]

    assert await eventually(not_ready_address, what="notReadyAddresses") == [p.status.podIP]
    p = await client.pods.get("web", NS)
    assert not p.status.containerStatuses[0].ready and p.status.containerStatuses[0].started

    (tmp_path / "go").touch()

    async def ready() -> bool:
        p = await client.pods.get("web", NS)
        return conditions(p)["Ready"][0] == "True" and p.status.containerStatuses[0].ready

    await eventually(ready, what="the pod to turn Ready once the server listens")

    async def in_addresses() -> bool:
        ep = await client.endpoints.get("web", NS)
        addresses = [(a.ip, a.targetRef.name) for s in ep.subsets for a in s.addresses]
        not_ready = [a for s in ep.subsets for a in s.notReadyAddresses]
        return addresses == [(p.status.podIP, "web")] and not not_ready

    await eventually(in_addresses, what="the pod to move to the Endpoints' addresses")
    # The failed probes before the server listened were recorded, in Kubernetes' words.
    unhealthy = [m for t, r, m in await events_of(client, "web") if r == "Unhealthy"]
    assert unhealthy and all(m.startswith("Readiness probe failed: Get ") for m in unhealthy)
    assert any("connect: connection refused" in m for m in unhealthy), unhealthy
    await client.services.delete("web", NS)
    await client.pods.delete("web", NS)


async def test_exec_readiness_keeps_the_pod_not_ready_and_follows_the_probe(
    client: Client, tmp_path: Path
) -> None:
    gate = pod(
        "gate",
        tmp_path,
        "exec sleep 600",
        readinessProbe={
            "exec": {"command": ["sh", "-c", "echo checking; test -e ready"]},
            "periodSeconds": 1,
            "failureThreshold": 2,
        },
    )
    await client.pods.create(gate)

    async def unhealthy_event() -> list[str]:
        return [m for _, r, m in await events_of(client, "gate") if r == "Unhealthy"]

    assert await eventually(unhealthy_event, what="an Unhealthy event") == [
        "Readiness probe failed: checking\n"
    ]
    p = await client.pods.get("gate", NS)
    assert p.status.phase == "Running"
    unready = ("False", "ContainersNotReady", "containers with unready status: [c]")
    assert conditions(p)["ContainersReady"] == unready
    assert conditions(p)["Ready"] == unready
    assert conditions(p)["Initialized"][0] == "True"
    cs = p.status.containerStatuses[0]
    assert (cs.ready, cs.started, cs.restartCount) == (False, True, 0)

    (tmp_path / "ready").touch()

    async def ready_is(value: str) -> pod_pb2.Pod | None:
        p = await client.pods.get("gate", NS)
        return p if conditions(p)["Ready"][0] == value else None

    p = await eventually(lambda: ready_is("True"), what="Ready after the file appeared")
    assert conditions(p)["ContainersReady"] == ("True", "", "")
    became_ready = p.status.conditions[-1].lastTransitionTime
    (tmp_path / "ready").unlink()
    p = await eventually(lambda: ready_is("False"), what="NotReady after the file went")
    assert conditions(p)["Ready"] == unready
    assert p.status.conditions[-1].lastTransitionTime.seconds >= became_ready.seconds
    assert p.status.containerStatuses[0].restartCount == 0, "readiness must not restart"
    await client.pods.delete("gate", NS)


async def test_liveness_failure_restarts_the_container(client: Client, tmp_path: Path) -> None:
    live = pod(
        "live",
        tmp_path,
        "touch alive; exec sleep 600",
        # The delay: a new instance's first probe comes after its `touch`.
        livenessProbe={
            "exec": {"command": ["test", "-e", "alive"]},
            "initialDelaySeconds": 1,
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    )
    await client.pods.create(live)

    async def ready() -> pod_pb2.Pod | None:
        p = await client.pods.get("live", NS)
        return p if conditions(p).get("Ready", ("",))[0] == "True" else None

    first = await eventually(ready, what="the pod to be ready")
    first_id = first.status.containerStatuses[0].containerID
    (tmp_path / "alive").unlink()

    async def restarted() -> pod_pb2.ContainerStatus | None:
        p = await client.pods.get("live", NS)
        cs = p.status.containerStatuses[0]
        return cs if cs.restartCount == 1 and cs.state.HasField("running") else None

    cs = await eventually(restarted, limit=60, what="the container to be restarted")
    assert cs.containerID != first_id
    assert cs.lastState.terminated.exitCode == 143  # SIGTERM, within the grace period
    assert cs.lastState.terminated.reason == "Error"
    events = await events_of(client, "live")
    assert ("Warning", "Unhealthy", "Liveness probe failed: ") in events, events
    assert ("Normal", "Killing", "Container c failed liveness probe, will be restarted") in (
        events
    ), events
    # The new instance recreated the file: it stays alive.
    p = await client.pods.get("live", NS)
    assert p.status.containerStatuses[0].restartCount == 1
    await client.pods.delete("live", NS)


async def test_describe_shows_the_probes(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    shown = pod(
        "shown",
        tmp_path,
        "exec sleep 600",
        ports=[{"name": "http", "containerPort": free_port()}],
        readinessProbe={"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
        livenessProbe={"exec": {"command": ["true"]}, "initialDelaySeconds": 3},
        startupProbe={"tcpSocket": {"port": 5432}, "failureThreshold": 30},
    )
    # Created by kubectl (server-side apply, strict field validation) from the manifest.
    manifest = json_format.MessageToJson(shown)
    applied = await asyncio.to_thread(
        subprocess.run,
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "apply",
         "--server-side", "-f", "-"],
        input=manifest, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    attrs = "timeout=1s period={}s successThreshold=1 failureThreshold={}"
    expected = {
        "Liveness": "exec [true] delay=3s " + attrs.format(10, 3),
        "Readiness": "http-get http://:http/healthz delay=0s " + attrs.format(5, 3),
        "Startup": "tcp-socket :5432 delay=0s " + attrs.format(10, 30),
    }
    kubectl = await asyncio.to_thread(
        subprocess.run,
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "describe",
         "pod", "shown"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert kubectl.returncode == 0, kubectl.stderr
    ours = await asyncio.to_thread(
        subprocess.run,
        [*tinykube_command(), "--server", cluster.api_address, "describe", "pod", "shown"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ours.returncode == 0, ours.stderr
    for out in (kubectl.stdout, ours.stdout):
        lines = {
            key: value.strip()
            for key, _, value in (line.strip().partition(":") for line in out.splitlines())
            if key in expected
        }
        assert lines == expected, out
    # The REST JSON carries the probes as written, IntOrString ports included.
    got = await asyncio.to_thread(
        subprocess.run,
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "get", "pod",
         "shown", "-o", "jsonpath={.spec.containers[0].readinessProbe.httpGet.port} "
         "{.spec.containers[0].startupProbe.tcpSocket.port}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.stdout == "http 5432", got.stderr
    await client.pods.delete("shown", NS)


async def test_replica_set_counts_only_ready_pods(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    template = pod(
        "rs",
        tmp_path,
        "exec sleep 600",
        readinessProbe={"exec": {"command": ["test", "-e", "ready"]}, "periodSeconds": 1},
    )
    rs = replicaset_pb2.ReplicaSet()
    rs.metadata.name, rs.metadata.namespace = "rs", NS
    rs.spec.replicas = 1
    rs.spec.minReadySeconds = 3
    rs.spec.selector.matchLabels["app"] = "rs"
    rs.spec.template.metadata.labels["app"] = "rs"
    rs.spec.template.spec.CopyFrom(template.spec)
    await client.replica_sets.create(rs)

    async def running_pod() -> pod_pb2.Pod | None:
        pods = (await client.pods.list(NS, label_selector="app=rs")).items
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    p = await eventually(running_pod, what="the ReplicaSet's pod to run")
    got = await asyncio.to_thread(
        subprocess.run,
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "get", "pod",
         p.metadata.name, "--no-headers"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.stdout.split()[1:3] == ["0/1", "Running"], got.stdout + got.stderr
    status = (await client.replica_sets.get("rs", NS)).status
    assert (status.replicas, status.readyReplicas, status.availableReplicas) == (1, 0, 0)

    (tmp_path / "ready").touch()

    async def counts(ready: int, available: int) -> bool:
        s = (await client.replica_sets.get("rs", NS)).status
        return (s.readyReplicas, s.availableReplicas) == (ready, available)

    await eventually(lambda: counts(1, 0), what="readyReplicas 1 before minReadySeconds")
    await eventually(lambda: counts(1, 1), what="availableReplicas 1 after minReadySeconds")
    await client.replica_sets.delete("rs", NS)


async def test_a_rollout_to_a_never_ready_template_stalls(client: Client, tmp_path: Path) -> None:
    """Two replicas, maxSurge 1, maxUnavailable 0 (the 25 % defaults, rounded as kube rounds):
    the new ReplicaSet's pod runs but its readiness probe fails, so no old pod goes."""
    (tmp_path / "ready").touch()
    template = pod(
        "roll",
        tmp_path,
        "exec sleep 600",
        readinessProbe={"exec": {"command": ["test", "-e", "ready"]}, "periodSeconds": 1},
    )
    d = deployment_pb2.Deployment()
    d.metadata.name, d.metadata.namespace = "roll", NS
    d.spec.replicas = 2
    d.spec.selector.matchLabels["app"] = "roll"
    d.spec.template.metadata.labels["app"] = "roll"
    d.spec.template.spec.CopyFrom(template.spec)
    await client.deployments.create(d)

    async def status_is(**want: int) -> bool:
        s = (await client.deployments.get("roll", NS)).status
        return all(getattr(s, k) == v for k, v in want.items())

    await eventually(lambda: status_is(readyReplicas=2, availableReplicas=2), what="2 ready")
    d = await client.deployments.get("roll", NS)
    d.spec.template.spec.containers[0].readinessProbe.exec.command[:] = ["test", "-e", "never"]
    await client.deployments.update(d)

    async def new_pod_failing() -> pod_pb2.Pod | None:
        pods = (await client.pods.list(NS, label_selector="app=roll")).items
        for p in pods:
            probe = p.spec.containers[0].readinessProbe.exec.command
            if list(probe) != ["test", "-e", "never"] or p.status.phase != "Running":
                continue
            events = [
                e
                for e in (await client.events.list(NS)).items
                if e.involvedObject.name == p.metadata.name and e.reason == "Unhealthy"
            ]
            if events and events[0].count >= 3:
                return p
        return None

    surged = await eventually(new_pod_failing, what="the new pod to fail its probe 3 times")
    assert conditions(surged)["Ready"][0] == "False"
    s = (await client.deployments.get("roll", NS)).status
    assert (s.replicas, s.updatedReplicas, s.readyReplicas, s.unavailableReplicas) == (3, 1, 2, 1)
    old = [
        p
        for p in (await client.pods.list(NS, label_selector="app=roll")).items
        if p.metadata.name != surged.metadata.name
    ]
    assert len(old) == 2 and all(not p.metadata.HasField("deletionTimestamp") for p in old)
    await client.deployments.delete("roll", NS)
