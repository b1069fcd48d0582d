"""A Deployment rolled to a new command while requests go through its Service: none fails.

Six `python -m http.server` pods on six kubelets (real processes, each on its own loopback
node IP, one pod per node as every pod serves port 8080 on its node), behind a Service reached
through the proxies at its cluster IP. Each pod has an httpGet readiness probe, and stops as a
well-behaved server does: on SIGTERM it keeps serving for two seconds (the time for its
endpoint to leave the Service, what a preStop sleep gives in Kubernetes), then exits. The
rollout (maxSurge 0, maxUnavailable 1) replaces the pods one at a time while this test sends
20 requests a second to the cluster IP and watches the pods: no request may fail, never fewer
than 5 pods may be ready, and the answers move from v1 to v2.
"""

from __future__ import annotations

import asyncio
import http.client
import sys
import time
from collections.abc import AsyncIterator

import pytest

from tests.e2e import waiting
from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.launcher import LocalCluster, has_main
from tinykube.meta import int_or_string_value
from tinykube.v1 import deployment_pb2, pod_pb2, service_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

NS = "default"
NODES = tuple(f"node-{i}" for i in range(1, 7))
PORT = 8080
KUBELET_ARGS = ["--node-status-update-frequency", "1s", "--poll-interval", "200ms"]


def command(version: str) -> list[str]:
    # The server ignores SIGTERM (the kubelet signals the whole process group); the shell
    # catches it, serves on for 2 s while the endpoint leaves the Service, then stops it.
    script = (
        f"echo {version} > version.txt; "
        f'(trap "" TERM; exec {sys.executable} -m http.server {PORT} --bind "$POD_IP") & '
        'pid=$!; trap "sleep 2; kill -9 $pid" TERM; wait $pid; wait $pid'
    )
    return ["sh", "-c", script]


def deployment() -> deployment_pb2.Deployment:
    d = deployment_pb2.Deployment()
    d.metadata.name = "traffic"
    d.metadata.namespace = NS
    d.spec.replicas = len(NODES)
    d.spec.selector.matchLabels["app"] = "traffic"
    d.spec.strategy.type = "RollingUpdate"
    d.spec.strategy.rollingUpdate.maxSurge.CopyFrom(int_or_string_value(0))
    d.spec.strategy.rollingUpdate.maxUnavailable.CopyFrom(int_or_string_value(1))
    t = d.spec.template
    t.metadata.labels["app"] = "traffic"
    t.spec.terminationGracePeriodSeconds = 10
    c = t.spec.containers.add(name="web", image="python", command=command("v1"))
    c.ports.add(name="http", containerPort=PORT)
    probe = c.readinessProbe
    probe.httpGet.path = "/version.txt"
    probe.httpGet.port.CopyFrom(int_or_string_value("http"))
    probe.periodSeconds = 1
    return d


def service() -> service_pb2.Service:
    svc = service_pb2.Service()
    svc.metadata.name = "traffic"
    svc.metadata.namespace = NS
    svc.spec.selector["app"] = "traffic"
    svc.spec.ports.add(port=PORT, targetPort=int_or_string_value("http"))
    return svc


def fetch(ip: str) -> str:
    conn = http.client.HTTPConnection(ip, PORT, timeout=5)
    try:
        conn.request("GET", "/version.txt")
        response = conn.getresponse()
        body = response.read().decode().strip()
        if response.status != 200:
            raise http.client.HTTPException(f"HTTP {response.status}")
        return body
    finally:
        conn.close()


def ready(pod: pod_pb2.Pod) -> bool:
    return not pod.metadata.HasField("deletionTimestamp") and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions
    )


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    if not has_main("scheduler"):
        pytest.skip("needs the scheduler")
    cl = LocalCluster(
        tmp_path_factory.mktemp("traffic"),
        kubelets=NODES,
        proxies=True,
        node_ips=True,
        extra_args={"kubelet": KUBELET_ARGS},
        start_timeout=180.0,
    )
    await asyncio.to_thread(cl.start)
    try:
        yield cl
    finally:
        await asyncio.to_thread(cl.stop)


async def test_rollout_under_traffic_fails_no_request(cluster: LocalCluster) -> None:
    async with Client(cluster.api_address, credentials=cluster.credentials) as client:
        svc = await client.services.create(service())
        await client.deployments.create(deployment())
        ip = svc.spec.clusterIP

        async def all_answer() -> bool:
            d = await client.deployments.get("traffic", NS)
            if d.status.availableReplicas != len(NODES):
                return False
            return await asyncio.to_thread(fetch, ip) == "v1"

        await waiting.eventually(
            all_answer,
            180,
            "six available pods answering v1 through the Service",
            tolerate=(TinykubeError, OSError, http.client.HTTPException),
        )

        answers: list[str] = []
        failures: list[str] = []
        min_ready = len(NODES)
        done = asyncio.Event()

        async def traffic() -> None:
            while not done.is_set():
                began = time.monotonic()
                try:
                    answers.append(await asyncio.to_thread(fetch, ip))
                except (OSError, http.client.HTTPException) as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(max(0.0, 0.05 - (time.monotonic() - began)))

        async def watch_ready() -> None:
            nonlocal min_ready
            while not done.is_set():
                pods = await client.pods.list(NS, label_selector="app=traffic")
                min_ready = min(min_ready, sum(1 for p in pods.items if ready(p)))
                await asyncio.sleep(0.2)

        tasks = [asyncio.create_task(traffic()), asyncio.create_task(watch_ready())]
        try:
            d = await client.deployments.get("traffic", NS)
            d.spec.template.spec.containers[0].command[:] = command("v2")
            generation = (await client.deployments.update(d)).metadata.generation

            async def rolled_out() -> bool:
                st = (await client.deployments.get("traffic", NS)).status
                return (
                    st.observedGeneration >= generation
                    and st.updatedReplicas == st.availableReplicas == st.replicas == len(NODES)
                )

            await waiting.eventually(rolled_out, 240, "the rollout to finish")
            # The last old pod may still be serving its 2 s; v2 from here on.
            await asyncio.sleep(3)
            tail = len(answers)
            await asyncio.sleep(2)
        finally:
            done.set()
            await asyncio.gather(*tasks)

    assert failures == [], f"{len(failures)} of {len(answers) + len(failures)} failed"
    assert len(answers) >= 200  # about 20 a second through a rollout of several seconds
    assert min_ready >= len(NODES) - 1
    assert answers[0] == "v1" and set(answers[tail:]) == {"v2"}
