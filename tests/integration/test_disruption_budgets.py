"""Evictions against PodDisruptionBudgets (gRPC Pods/Evict and REST pods/eviction), real etcd.

One apiserver with its REST API. Pods are bound to node "ghost" (no kubelet) and made Running
and Ready through UpdateStatus; budgets get the status the disruption controller would write,
so each case pins the numbers the eviction API judges. Evictions use gracePeriodSeconds 0, so an
allowed one removes the pod at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf import json_format

from tests.integration.conftest import (
    RunningAPIServer,
    make_node,
    make_pod,
    make_settings,
    start_apiserver,
)
from tinykube.client import Client
from tinykube.errors import REASON_METADATA_KEY, DisruptionBudgetError, from_rpc_error
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, pod_pb2, pod_pb2_grpc
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

pytestmark = pytest.mark.integration

REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


@pytest.fixture
async def running(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    server = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    try:
        yield server
    finally:
        await server.server.stop()


@pytest.fixture
async def client(running: RunningAPIServer) -> AsyncIterator[Client]:
    async with Client(running.address) as c:
        await c.nodes.create(make_node("ghost"))
        yield c


@pytest.fixture
async def pods_stub(running: RunningAPIServer) -> AsyncIterator[pod_pb2_grpc.PodsAsyncStub]:
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        yield pod_pb2_grpc.PodsStub(channel)
    finally:
        await channel.close()


async def running_pod(
    client: Client, name: str, *, ready: bool = True, **labels: str
) -> pod_pb2.Pod:
    await client.pods.create(make_pod(name, **(labels or {"app": "web"})))
    await client.bind("default", name, "ghost")
    pod = await client.pods.get(name, "default")
    pod.status.phase = "Running"
    pod.status.conditions.add(type="Ready", status="True" if ready else "False")
    return await client.pods.update_status(pod)


async def budget(
    client: Client,
    name: str,
    spec: dict[str, Any],
    *,
    allowed: int,
    current: int,
    desired: int,
    expected: int,
    observed: bool = True,
) -> pdb_pb2.PodDisruptionBudget:
    pdb = json_format.ParseDict(
        {"metadata": {"name": name, "namespace": "default"}, "spec": spec},
        pdb_pb2.PodDisruptionBudget(),
    )
    created = await client.pod_disruption_budgets.create(pdb)
    created.status.observedGeneration = created.metadata.generation if observed else 0
    created.status.disruptionsAllowed = allowed
    created.status.currentHealthy = current
    created.status.desiredHealthy = desired
    created.status.expectedPods = expected
    return await client.pod_disruption_budgets.update_status(created)


def eviction(name: str, *, dry_run: bool = False) -> pod_pb2.EvictRequest:
    options = meta_pb2.DeleteOptions(gracePeriodSeconds=0)
    if dry_run:
        options.dryRun.append("All")
    return pod_pb2.EvictRequest(
        eviction=pod_pb2.Eviction(
            metadata=meta_pb2.ObjectMeta(name=name, namespace="default"), deleteOptions=options
        )
    )


async def evict(stub: pod_pb2_grpc.PodsAsyncStub, name: str) -> grpc.aio.AioRpcError | None:
    try:
        await stub.Evict(eviction(name), timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc
    return None


async def exists(client: Client, name: str) -> bool:
    listed = await client.pods.list("default")
    return any(p.metadata.name == name for p in listed.items)


async def rest_evict(running: RunningAPIServer, name: str) -> tuple[int, Any, dict[str, str]]:
    url = f"http://{running.server.rest_address}/api/v1/namespaces/default/pods/{name}/eviction"
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 0},
    }
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, json.loads(await resp.read()), dict(resp.headers)


WEB = {"selector": {"matchLabels": {"app": "web"}}}


async def test_two_concurrent_evictions_spend_the_last_disruption_once(
    client: Client, pods_stub: pod_pb2_grpc.PodsAsyncStub
) -> None:
    for name in ("web-1", "web-2", "web-3"):
        await running_pod(client, name)
    await budget(
        client, "web", {**WEB, "minAvailable": 2}, allowed=1, current=3, desired=2, expected=3
    )
    results = await asyncio.gather(evict(pods_stub, "web-1"), evict(pods_stub, "web-2"))
    refused = [r for r in results if r is not None]
    assert len(refused) == 1, results
    err = refused[0]
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.details() == REFUSED
    assert (REASON_METADATA_KEY, "DisruptionBudget") in tuple(err.trailing_metadata() or ())
    # The typed client recognises it, and never retries it.
    assert isinstance(from_rpc_error(err), DisruptionBudgetError)
    left = [n for n in ("web-1", "web-2") if await exists(client, n)]
    assert len(left) == 1
    evicted = ({"web-1", "web-2"} - set(left)).pop()
    pdb = await client.pod_disruption_budgets.get("web", "default")
    assert pdb.status.disruptionsAllowed == 0
    assert list(pdb.status.disruptedPods) == [evicted]
    (cond,) = pdb.status.conditions
    assert (cond.type, cond.status, cond.reason) == (
        "DisruptionAllowed",
        "False",
        "InsufficientPods",
    )


async def test_rest_refusal_is_kubernetes_429_with_the_budget_cause(
    client: Client, running: RunningAPIServer
) -> None:
    await running_pod(client, "web-1")
    await budget(
        client, "web", {**WEB, "minAvailable": 1}, allowed=0, current=1, desired=1, expected=1
    )
    code, body, headers = await rest_evict(running, "web-1")
    assert code == 429
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": REFUSED,
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 1 healthy pods and has 1 currently",
                }
            ]
        },
        "code": 429,
    }
    assert "Retry-After" not in headers
    assert await exists(client, "web-1")


async def test_a_budget_its_controller_has_not_seen_refuses_with_retry_after(
    client: Client, running: RunningAPIServer
) -> None:
    await running_pod(client, "web-1")
    await budget(
        client,
        "web",
        {**WEB, "maxUnavailable": 1},
        allowed=1,
        current=1,
        desired=0,
        expected=1,
        observed=False,
    )
    code, body, headers = await rest_evict(running, "web-1")
    assert code == 429
    assert body["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web is still being processed by the server.",
            }
        ],
        "retryAfterSeconds": 10,
    }
    assert headers["Retry-After"] == "10"


async def test_a_pod_under_two_budgets_cannot_be_evicted(
    client: Client, running: RunningAPIServer, pods_stub: pod_pb2_grpc.PodsAsyncStub
) -> None:
    await running_pod(client, "web-1")
    for name in ("a", "b"):
        await budget(
            client, name, {**WEB, "maxUnavailable": 1}, allowed=1, current=1, desired=0, expected=1
        )
    message = (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support."
    )
    code, body, _ = await rest_evict(running, "web-1")
    assert (code, body) == (
        500,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "code": 500},
    )  # fmt: skip
    err = await evict(pods_stub, "web-1")
    assert err is not None
    assert (err.code(), err.details()) == (grpc.StatusCode.FAILED_PRECONDITION, message)


@pytest.mark.parametrize(
    ("policy", "current", "desired", "allowed_through"),
    [
        # IfHealthyBudget (the default): an unready pod goes while the budget is met...
        (None, 2, 2, True),
        ("IfHealthyBudget", 3, 2, True),
        # ...but not while it is not (then it needs a disruption, and none is allowed)...
        (None, 1, 2, False),
        # ...nor when the budget wants no healthy pods (desiredHealthy 0 is not "met").
        (None, 0, 0, False),
        # AlwaysAllow: unready pods always go, without spending the budget.
        ("AlwaysAllow", 1, 2, True),
    ],
)
async def test_unready_pods_follow_the_unhealthy_pod_eviction_policy(
    client: Client,
    pods_stub: pod_pb2_grpc.PodsAsyncStub,
    policy: str | None,
    current: int,
    desired: int,
    allowed_through: bool,
) -> None:
    await running_pod(client, "web-1", ready=False)
    spec: dict[str, Any] = {**WEB, "minAvailable": desired}
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    await budget(
        client, "web", spec, allowed=0, current=current, desired=desired, expected=current + 1
    )
    err = await evict(pods_stub, "web-1")
    if allowed_through:
        assert err is None
        assert not await exists(client, "web-1")
    else:
        assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await exists(client, "web-1")
    pdb = await client.pod_disruption_budgets.get("web", "default")
    assert pdb.status.disruptionsAllowed == 0
    assert not pdb.status.disruptedPods


async def test_dry_run_and_unselected_pods_leave_the_budget_alone(
    client: Client, pods_stub: pod_pb2_grpc.PodsAsyncStub
) -> None:
    await running_pod(client, "web-1")
    await running_pod(client, "db-1", app="db")
    await budget(
        client, "web", {**WEB, "maxUnavailable": 1}, allowed=1, current=1, desired=0, expected=1
    )
    await pods_stub.Evict(eviction("web-1", dry_run=True), timeout=10)
    pdb = await client.pod_disruption_budgets.get("web", "default")
    assert pdb.status.disruptionsAllowed == 1 and not pdb.status.disruptedPods
    assert await exists(client, "web-1")
    await pods_stub.Evict(eviction("db-1"), timeout=10)
    assert not await exists(client, "db-1")
    pdb = await client.pod_disruption_budgets.get("web", "default")
    assert pdb.status.disruptionsAllowed == 1


def disruption_target(pod: pod_pb2.Pod) -> tuple[str, str, str, bool] | None:
    for c in pod.status.conditions:
        if c.type == "DisruptionTarget":
            return (c.status, c.reason, c.message, c.lastTransitionTime.seconds > 0)
    return None


EVICTED = ("True", "EvictionByEvictionAPI", "Eviction API: evicting", True)


@pytest.mark.parametrize(
    "phase,ready,budgeted",
    [
        ("Running", True, True),  # through the budget check, spending a disruption
        ("Running", False, False),  # no budget selects it
        ("", False, False),  # bound but Pending: deleted on the version read (a precondition)
    ],
    ids=["budget-allows", "no-budget", "pending"],
)
async def test_an_evicted_pod_says_so_while_it_terminates(
    client: Client,
    pods_stub: pod_pb2_grpc.PodsAsyncStub,
    phase: str,
    ready: bool,
    budgeted: bool,
) -> None:
    """kube-apiserver's addConditionAndDeletePod: the pod gets DisruptionTarget=True, reason
    EvictionByEvictionAPI, before its graceful deletion starts; its other conditions stay."""
    await client.pods.create(make_pod("web-1", app="web" if budgeted else "other"))
    await client.bind("default", "web-1", "ghost")
    pod = await client.pods.get("web-1", "default")
    if phase:
        pod.status.phase = phase
        pod.status.conditions.add(type="Ready", status="True" if ready else "False")
        pod = await client.pods.update_status(pod)
    if budgeted:
        await budget(
            client, "web", {**WEB, "maxUnavailable": 1}, allowed=1, current=1, desired=0, expected=1
        )
    before = {c.type for c in pod.status.conditions}
    request = eviction("web-1")
    request.eviction.deleteOptions.gracePeriodSeconds = 30
    await pods_stub.Evict(request, timeout=10)
    got = await client.pods.get("web-1", "default")
    assert got.metadata.HasField("deletionTimestamp")
    assert got.metadata.deletionGracePeriodSeconds == 30
    assert disruption_target(got) == EVICTED
    assert {c.type for c in got.status.conditions} == before | {"DisruptionTarget"}
    # evicting it again changes nothing: already marked, already terminating
    await pods_stub.Evict(request, timeout=10)
    again = await client.pods.get("web-1", "default")
    assert again.metadata.resourceVersion == got.metadata.resourceVersion


async def test_dry_run_and_refused_evictions_mark_nothing(
    client: Client, pods_stub: pod_pb2_grpc.PodsAsyncStub, running: RunningAPIServer
) -> None:
    await running_pod(client, "web-1")
    await budget(
        client, "web", {**WEB, "maxUnavailable": 0}, allowed=0, current=1, desired=1, expected=1
    )
    refused = await evict(pods_stub, "web-1")
    assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await client.pod_disruption_budgets.delete("web", "default")
    await pods_stub.Evict(eviction("web-1", dry_run=True), timeout=10)
    pod = await client.pods.get("web-1", "default")
    assert disruption_target(pod) is None and not pod.metadata.HasField("deletionTimestamp")
    # and over REST the condition is kube's JSON, read back while the pod terminates
    url = f"http://{running.server.rest_address}/api/v1/namespaces/default/pods/web-1"
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web-1", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 30},
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/eviction", json=body) as resp:
            assert resp.status == 201, await resp.text()
        async with session.get(url) as resp:
            obj = json.loads(await resp.read())
    assert obj["metadata"]["deletionTimestamp"]
    (cond,) = [c for c in obj["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert {k: cond[k] for k in ("status", "reason", "message")} == {
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    assert cond["lastTransitionTime"]


async def test_binding_clears_the_preemption_nomination(client: Client) -> None:
    await client.pods.create(make_pod("hi"))
    pod = await client.pods.get("hi", "default")
    pod.status.nominatedNodeName = "ghost"
    await client.pods.update_status(pod)
    await client.bind("default", "hi", "ghost")
    bound = await client.pods.get("hi", "default")
    assert (bound.spec.nodeName, bound.status.nominatedNodeName) == ("ghost", "")


async def kubectl(
    running: RunningAPIServer, home: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    server = f"http://{running.server.rest_address}"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KUBECTL, "--server", server, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HOME": str(home), "KUBECONFIG": str(home / "none")},
            check=False,
        )

    return await asyncio.to_thread(run)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_get_pdb_and_a_drain_the_budget_refuses(
    client: Client, running: RunningAPIServer, tmp_path: Path
) -> None:
    await running_pod(client, "web-1")
    await budget(
        client, "web", {**WEB, "minAvailable": 1}, allowed=0, current=1, desired=1, expected=1
    )
    got = await kubectl(running, tmp_path, "get", "pdb")
    assert got.returncode == 0, got.stderr
    header, row = got.stdout.splitlines()
    assert header.split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED",
                              "DISRUPTIONS", "AGE"]  # fmt: skip
    assert row.split()[:4] == ["web", "1", "N/A", "0"]
    drained = await kubectl(
        running, tmp_path, "drain", "ghost", "--force", "--timeout=2s", "--pod-selector=app=web"
    )
    assert drained.returncode != 0
    assert "node/ghost cordoned" in drained.stdout
    assert f'error when evicting pods/"web-1" -n "default" (will retry after 5s): {REFUSED}' in (
        drained.stderr
    )
    assert await exists(client, "web-1")
