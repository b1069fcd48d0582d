"""Apiserver CRUD semantics against a real etcd: status codes and Kubernetes' exact messages."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.integration.conftest import RunningAPIServer, Stubs
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2

pytestmark = pytest.mark.integration


def pod(name: str, namespace: str = "default", **labels: str) -> pod_pb2.Pod:
    return pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="busybox")]),
    )


def node(name: str) -> node_pb2.Node:
    return node_pb2.Node(
        metadata=meta_pb2.ObjectMeta(name=name),
        status=node_pb2.NodeStatus(allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"}),
    )


async def expect_error(call: object, code: grpc.StatusCode, message: str | None = None) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    assert info.value.code() == code, info.value.details()
    details = info.value.details() or ""
    if message is not None:
        assert details == message
    return details


async def test_create_fills_defaults_and_get_returns_it(stubs: Stubs) -> None:
    created = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod("web")))
    meta = created.metadata
    assert meta.uid and meta.resource_version and meta.generation == 1
    assert meta.HasField("creation_timestamp")
    assert (created.api_version, created.kind) == ("v1", "Pod")
    assert created.spec.scheduler_name == "tinykube"
    assert created.spec.restart_policy == "Always"
    assert created.spec.termination_grace_period_seconds == 30
    assert created.status.phase == "Pending"
    got = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="web"))
    assert got == created


async def test_status_codes_and_messages(stubs: Stubs) -> None:
    await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod("web")))
    await expect_error(
        stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod("web"))),
        grpc.StatusCode.ALREADY_EXISTS,
        'pods "web" already exists',
    )
    await expect_error(
        stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="nope")),
        grpc.StatusCode.NOT_FOUND,
        'pods "nope" not found',
    )
    await expect_error(
        stubs.pods.Delete(meta_pb2.DeleteRequest(namespace="default", name="nope")),
        grpc.StatusCode.NOT_FOUND,
        'pods "nope" not found',
    )
    await expect_error(
        stubs.nodes.Get(meta_pb2.GetRequest(name="n9")),
        grpc.StatusCode.NOT_FOUND,
        'nodes "n9" not found',
    )


async def test_fixture_serves_health(
    apiserver: RunningAPIServer, channel: grpc.aio.Channel
) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(channel)
    resp = await stub.Check(health_pb2.HealthCheckRequest(service=""))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    assert apiserver.address.startswith("127.0.0.1:")
    await asyncio.sleep(0)
