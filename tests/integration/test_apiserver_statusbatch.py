"""Pods/UpdateStatusBatch against a real etcd: every pod behaves exactly as its own UpdateStatus.

Mixed success and failure in one request (per-item codes and Kubernetes' messages, failed items
leave their pods untouched, a stale resourceVersion is a conflict), the status stored as sent
at the answered resourceVersion, the request size limit, and `Client.update_status_batch`
mapping item failures to tinykube errors.
"""

from __future__ import annotations

import grpc
import pytest

from apiserver.podstore import MAX_STATUS_BATCH
from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    expect_error,
    make_pod,
)
from tinykube.client import Client
from tinykube.errors import ConflictError, InvalidError, NotFoundError
from tinykube.v1 import meta_pb2, pod_pb2

pytestmark = pytest.mark.integration


def running(pod: pod_pb2.Pod, ip: str = "10.0.0.9") -> pod_pb2.Pod:
    new = pod_pb2.Pod()
    new.CopyFrom(pod)
    new.status.phase = "Running"
    new.status.podIP = ip
    return new


async def test_update_status_batch_mixed_results(stubs: Stubs) -> None:
    ok = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("ok")))
    stale = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("stale")))
    bad = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("bad")))
    ok2 = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("ok2")))
    # "stale" changes after the kubelet read it
    await stubs.pods.UpdateStatus(pod_pb2.UpdatePodRequest(pod=running(stale, "10.0.0.1")))
    invalid = running(bad)
    invalid.status.phase = "Sleeping"
    missing = make_pod("missing")
    missing.metadata.resourceVersion = ok.metadata.resourceVersion
    resp = await stubs.pods.UpdateStatusBatch(
        pod_pb2.UpdateStatusBatchRequest(
            pods=[running(ok), running(stale), missing, invalid, running(ok2, "10.0.0.2")]
        )
    )
    assert [r.name for r in resp.results] == ["ok", "stale", "missing", "bad", "ok2"]
    assert [r.code for r in resp.results] == [
        0,
        grpc.StatusCode.ABORTED.value[0],
        grpc.StatusCode.NOT_FOUND.value[0],
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
        0,
    ]
    assert resp.results[1].message == (
        'Operation cannot be fulfilled on pods "stale": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert resp.results[2].message == 'pods "missing" not found'
    assert 'status.phase: Unsupported value: "Sleeping"' in resp.results[3].message
    assert all(r.namespace == "default" for r in resp.results)

    # successes stored the status as sent, at the answered resourceVersion
    for name, result, ip in (
        ("ok", resp.results[0], "10.0.0.9"),
        ("ok2", resp.results[4], "10.0.0.2"),
    ):
        stored = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name=name))
        assert stored.metadata.resourceVersion == result.resourceVersion
        assert (stored.status.phase, stored.status.podIP) == ("Running", ip)
    # failures left their pods as they were
    stored = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="stale"))
    assert stored.status.podIP == "10.0.0.1"
    stored = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="bad"))
    assert stored.metadata.resourceVersion == bad.metadata.resourceVersion
    assert all(not r.resourceVersion for r in resp.results[1:4])


async def test_update_status_batch_empty_and_too_large(stubs: Stubs) -> None:
    resp = await stubs.pods.UpdateStatusBatch(pod_pb2.UpdateStatusBatchRequest())
    assert list(resp.results) == []
    request = pod_pb2.UpdateStatusBatchRequest(
        pods=[make_pod(f"p{i}") for i in range(MAX_STATUS_BATCH + 1)]
    )
    await expect_error(
        stubs.pods.UpdateStatusBatch(request),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"UpdateStatusBatch: at most {MAX_STATUS_BATCH} pods per request, "
        f"got {MAX_STATUS_BATCH + 1}",
    )


async def test_client_update_status_batch_maps_item_errors(apiserver: RunningAPIServer) -> None:
    async with Client(apiserver.address) as client:
        a = await client.pods.create(make_pod("a"))
        b = await client.pods.create(make_pod("b"))
        await client.pods.update_status(running(b, "10.0.0.3"))
        gone = make_pod("gone")
        gone.metadata.resourceVersion = "1"
        invalid = running(a)
        invalid.status.phase = "Sleeping"
        out = await client.update_status_batch([running(a), running(b), gone, invalid])
        assert out[0] == (await client.pods.get("a", "default")).metadata.resourceVersion
        assert isinstance(out[1], ConflictError)
        assert isinstance(out[2], NotFoundError)
        # item 0 moved "a" on: item 3's resourceVersion is stale or its phase invalid
        assert isinstance(out[3], (ConflictError, InvalidError))
        assert await client.update_status_batch([]) == []
