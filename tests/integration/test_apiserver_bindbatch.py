"""Pods/BindBatch against a real etcd: every item behaves exactly as its own Bind.

Mixed success and failure in one request (per-item codes and Kubernetes' messages, the failed
items leave their pods untouched), the request size limit, races with single Binds (exactly one
binder wins each pod), and `Client.bind_batch` mapping item failures to tinykube errors.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from apiserver.podstore import MAX_BIND_BATCH
from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    bind_request,
    expect_error,
    make_node,
    make_pod,
    make_stubs,
)
from tinykube.client import BindItem, Client
from tinykube.errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2

pytestmark = pytest.mark.integration


def binding(name: str, node: str, namespace: str = "default", uid: str = "") -> pod_pb2.Binding:
    return pod_pb2.Binding(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace, uid=uid),
        target=meta_pb2.ObjectReference(kind="Node", name=node),
    )


async def create_pod(stubs: Stubs, name: str) -> pod_pb2.Pod:
    return await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(name)))


async def get_pod(stubs: Stubs, name: str) -> pod_pb2.Pod:
    return await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name=name))


async def test_bind_batch_mixed_results(stubs: Stubs) -> None:
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    ok = await create_pod(stubs, "ok")
    await create_pod(stubs, "taken")
    await stubs.pods.Bind(bind_request("taken", "n1"))
    await create_pod(stubs, "nonode")
    await create_pod(stubs, "wronguid")
    await create_pod(stubs, "ok2")
    resp = await stubs.pods.BindBatch(
        pod_pb2.BindBatchRequest(
            bindings=[
                binding("ok", "n1", uid=ok.metadata.uid),
                binding("taken", "n1"),
                binding("missing", "n1"),
                binding("nonode", "n9"),
                binding("wronguid", "n1", uid="not-the-uid"),
                binding("", "n1"),
                binding("ok2", "n1"),
            ]
        )
    )
    assert [r.name for r in resp.results] == [
        "ok",
        "taken",
        "missing",
        "nonode",
        "wronguid",
        "",
        "ok2",
    ]
    codes = [r.code for r in resp.results]
    assert codes == [
        0,
        grpc.StatusCode.ALREADY_EXISTS.value[0],
        grpc.StatusCode.NOT_FOUND.value[0],
        grpc.StatusCode.NOT_FOUND.value[0],
        grpc.StatusCode.FAILED_PRECONDITION.value[0],
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
        0,
    ]
    msgs = [r.message for r in resp.results]
    assert msgs[0] == "" and msgs[6] == ""
    assert msgs[1] == "pod default/taken is already assigned to node n1"
    assert msgs[2] == 'pods "missing" not found'
    assert msgs[3] == 'nodes "n9" not found'
    assert "UID in precondition: not-the-uid" in msgs[4]
    assert "metadata.name: Required value" in msgs[5]
    assert all(r.namespace == "default" for r in resp.results)

    # successes are real binds with their own resourceVersions; failures left pods untouched
    pod = await get_pod(stubs, "ok")
    assert pod.spec.nodeName == "n1"
    assert pod.metadata.resourceVersion == resp.results[0].resourceVersion
    assert [c.status for c in pod.status.conditions if c.type == "PodScheduled"] == ["True"]
    assert (await get_pod(stubs, "ok2")).spec.nodeName == "n1"
    assert resp.results[0].resourceVersion != resp.results[6].resourceVersion
    for name in ("nonode", "wronguid"):
        assert (await get_pod(stubs, name)).spec.nodeName == ""
    assert all(not r.resourceVersion for r in resp.results[1:6])


async def test_bind_batch_empty_and_too_large(stubs: Stubs) -> None:
    resp = await stubs.pods.BindBatch(pod_pb2.BindBatchRequest())
    assert list(resp.results) == []
    request = pod_pb2.BindBatchRequest(
        bindings=[binding(f"p{i}", "n1") for i in range(MAX_BIND_BATCH + 1)]
    )
    await expect_error(
        stubs.pods.BindBatch(request),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"BindBatch: at most {MAX_BIND_BATCH} bindings per request, got {MAX_BIND_BATCH + 1}",
    )


async def test_bind_batch_races_single_bind_exactly_one_wins(apiserver: RunningAPIServer) -> None:
    channels = [
        grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS))
        for _ in range(2)
    ]
    try:
        a, b = (make_stubs(ch) for ch in channels)
        for n in ("n1", "n2"):
            await a.nodes.Create(node_pb2.CreateNodeRequest(node=make_node(n)))
        names = [f"r{i}" for i in range(20)]
        await asyncio.gather(*(create_pod(a, n) for n in names))

        async def single(name: str) -> str:
            try:
                await b.pods.Bind(bind_request(name, "n2"))
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.ALREADY_EXISTS, exc.details()
                return "lost"
            return "n2"

        batch_call = a.pods.BindBatch(
            pod_pb2.BindBatchRequest(bindings=[binding(n, "n1") for n in names])
        )
        batch_task = asyncio.ensure_future(batch_call)
        singles = await asyncio.gather(*(single(n) for n in names))
        batch: pod_pb2.BindBatchResponse = await batch_task
        for i, name in enumerate(names):
            r = batch.results[i]
            assert r.code in (0, grpc.StatusCode.ALREADY_EXISTS.value[0]), r.message
            batch_won = r.code == 0
            single_won = singles[i] == "n2"
            assert batch_won != single_won, name  # exactly one binder wins each pod
            pod = await get_pod(a, name)
            assert pod.spec.nodeName == ("n1" if batch_won else "n2")
            if not batch_won:
                assert r.message == f"pod default/{name} is already assigned to node n2"
    finally:
        for ch in channels:
            await ch.close()


async def test_client_bind_batch_maps_item_errors(apiserver: RunningAPIServer) -> None:
    async with Client(apiserver.address) as client:
        await client.nodes.create(make_node("n1"))
        pod = await client.pods.create(make_pod("c1"))
        await client.pods.create(make_pod("c2"))
        await client.bind("default", "c2", "n1")
        out = await client.bind_batch(
            [
                BindItem("default", "c1", "n1", pod.metadata.uid),
                BindItem("default", "c2", "n1"),
                BindItem("default", "gone", "n1"),
                BindItem("default", "c1", "n1", "other-uid"),
            ]
        )
        assert out[0] == (await client.pods.get("c1", "default")).metadata.resourceVersion
        assert isinstance(out[1], AlreadyExistsError)
        assert str(out[1]) == "pod default/c2 is already assigned to node n1"
        assert isinstance(out[2], NotFoundError)
        # c1 is bound by item 0 or checked for its uid first: either way it is refused
        assert isinstance(out[3], (PreconditionFailedError, AlreadyExistsError))
        assert await client.bind_batch([]) == []
