"""Container environments across real processes: a pod's `sh` prints variables from fieldRef,
resourceFieldRef, a ConfigMap, a Secret and envFrom (read back with `tinykube logs`); a pod
whose ConfigMap does not exist yet waits with CreateContainerConfigError and a Failed Event,
and starts once the ConfigMap is created.

One kubelet (process runtime) with a 1 s initial back-off, so a retry comes within seconds.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.v1 import configmap_pb2, pod_pb2, secret_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NS = "default"
KUBELET_ARGS = [
    "--node-status-update-frequency", "1s",
    "--crash-loop-backoff", "1s",
    "--poll-interval", "200ms",
    "--capacity", "cpu=2,memory=4Gi,pods=20",
]  # fmt: skip


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    cl = LocalCluster(
        tmp_path_factory.mktemp("env"),
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


def config_map(name: str, data: dict[str, str]) -> configmap_pb2.ConfigMap:
    cm = configmap_pb2.ConfigMap(apiVersion="v1", kind="ConfigMap", data=data)
    cm.metadata.name, cm.metadata.namespace = name, NS
    return cm


def shell_pod(name: str, script: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name, pod.metadata.namespace = name, NS
    pod.metadata.labels["app"] = "env-test"
    pod.spec.nodeName = "node-1"
    pod.spec.terminationGracePeriodSeconds = 1
    pod.spec.containers.add(name="main", image="busybox", command=["sh", "-c", script])
    return pod


def logs(cluster: LocalCluster, pod: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tinykube.cli.main", "--server", cluster.api_address, "logs", pod],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return out.stdout


async def test_a_container_prints_variables_from_every_source(
    client: Client, cluster: LocalCluster
) -> None:
    await client.config_maps.create(config_map("env-config", {"COLOR": "blue", "SIZE": "L"}))
    secret = secret_pb2.Secret(apiVersion="v1", kind="Secret", data={"password": b"hunter2"})
    secret.metadata.name, secret.metadata.namespace = "env-secret", NS
    await client.secrets.create(secret)

    script = (
        'echo "name=$POD_NAME node=$NODE ip=$MY_IP app=$APP"; '
        'echo "mem=$MEM_MI cpu=$CPU_LIMIT"; '
        'echo "color=$COLOR pass=$PASSWORD"; '
        'echo "from=$CFG_COLOR,$CFG_SIZE greeting=$GREETING"; sleep 600'
    )
    pod = shell_pod("printer", script)
    c = pod.spec.containers[0]
    c.resources.limits["memory"] = "64Mi"
    for name, path in (
        ("POD_NAME", "metadata.name"),
        ("NODE", "spec.nodeName"),
        ("MY_IP", "status.podIP"),
        ("APP", "metadata.labels['app']"),
    ):
        c.env.add(name=name).valueFrom.fieldRef.fieldPath = path
    mem = c.env.add(name="MEM_MI").valueFrom.resourceFieldRef
    mem.resource, mem.divisor = "limits.memory", "1Mi"
    c.env.add(name="CPU_LIMIT").valueFrom.resourceFieldRef.resource = "limits.cpu"  # allocatable
    c.env.add(name="COLOR").valueFrom.configMapKeyRef.CopyFrom(
        pod_pb2.ConfigMapKeySelector(name="env-config", key="COLOR")
    )
    c.env.add(name="PASSWORD").valueFrom.secretKeyRef.CopyFrom(
        pod_pb2.SecretKeySelector(name="env-secret", key="password")
    )
    c.envFrom.add(prefix="CFG_").configMapRef.name = "env-config"
    c.env.add(name="GREETING", value="hi $(POD_NAME)")
    await client.pods.create(pod)

    async def printed() -> str | None:
        out = await asyncio.to_thread(logs, cluster, "printer")
        return out if "greeting=" in out else None

    out = await eventually(printed, what="the printer's output")
    assert out.splitlines() == [
        "name=printer node=node-1 ip=127.0.0.1 app=env-test",
        "mem=64 cpu=2",
        "color=blue pass=hunter2",
        "from=blue,L greeting=hi printer",
    ]
    await client.pods.delete("printer", NS, grace_period_seconds=0)


async def test_a_missing_config_map_holds_the_container_until_it_is_created(
    client: Client, cluster: LocalCluster
) -> None:
    pod = shell_pod("waiter", 'echo "got $(LEVEL)"; sleep 600')
    pod.spec.containers[0].env.add(name="LEVEL").valueFrom.configMapKeyRef.CopyFrom(
        pod_pb2.ConfigMapKeySelector(name="late-config", key="level")
    )
    await client.pods.create(pod)

    async def waiting() -> pod_pb2.ContainerStateWaiting | None:
        p = await client.pods.get("waiter", NS)
        statuses = p.status.containerStatuses
        if statuses and statuses[0].state.waiting.reason == "CreateContainerConfigError":
            return statuses[0].state.waiting
        return None

    state = await eventually(waiting, what="CreateContainerConfigError")
    assert state.message == 'configmap "late-config" not found'
    assert (await client.pods.get("waiter", NS)).status.phase == "Pending"

    async def failed_event() -> bool:
        events = (await client.events.list(NS)).items
        return any(
            e.involvedObject.name == "waiter"
            and e.reason == "Failed"
            and e.type == "Warning"
            and e.message == 'Error: configmap "late-config" not found'
            for e in events
        )

    await eventually(failed_event, what="the Failed event")

    await client.config_maps.create(config_map("late-config", {"level": "debug"}))

    async def running() -> bool:
        p = await client.pods.get("waiter", NS)
        return p.status.phase == "Running"

    await eventually(running, what="the waiter running once its ConfigMap exists")

    async def printed() -> str | None:
        out = await asyncio.to_thread(logs, cluster, "waiter")
        return out if out else None

    assert await eventually(printed, what="the waiter's output") == "got debug\n"
    await client.pods.delete("waiter", NS, grace_period_seconds=0)
