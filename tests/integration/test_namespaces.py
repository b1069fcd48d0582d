"""Namespaces and PriorityClasses against a real apiserver on a real etcd, over gRPC and REST:
the built-in objects, NamespaceLifecycle and Priority admission, namespace deletion and
Finalize, with the codes and Status bodies kube-apiserver answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest

from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    create_namespaces,
    expect_error,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, namespace_pb2, pod_pb2, priorityclass_pb2

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def server(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    try:
        yield running
    finally:
        await running.server.stop()


@pytest.fixture
async def stubs(server: RunningAPIServer) -> AsyncIterator[Stubs]:
    channel = grpc.aio.insecure_channel(server.address, options=list(CHANNEL_OPTIONS))
    try:
        yield make_stubs(channel)
    finally:
        await channel.close()


@pytest.fixture
async def http(server: RunningAPIServer) -> AsyncIterator[Any]:
    async with aiohttp.ClientSession(base_url=f"http://{server.server.rest_address}") as s:
        yield s


async def call(http: Any, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body)
    async with http.request(method, path, data=data, headers=JSON) as r:
        return r.status, await r.json()


def pod_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def priority_class(name: str, value: int, **fields: Any) -> priorityclass_pb2.PriorityClass:
    pc = priorityclass_pb2.PriorityClass(value=value, **fields)
    pc.metadata.name = name
    return pc


async def create_class(stubs: Stubs, pc: priorityclass_pb2.PriorityClass) -> Any:
    req = priorityclass_pb2.CreatePriorityClassRequest(priorityClass=pc)
    return await stubs.priority_classes.Create(req)


async def test_system_namespaces_and_priority_classes_exist_from_the_start(stubs: Stubs) -> None:
    listed = await stubs.namespaces.List(meta_pb2.ListRequest())
    assert {n.metadata.name: n.status.phase for n in listed.items} == {
        "default": "Active",
        "kube-node-lease": "Active",
        "kube-public": "Active",
        "kube-system": "Active",
    }
    for ns in listed.items:
        assert ns.metadata.labels["kubernetes.io/metadata.name"] == ns.metadata.name
        assert list(ns.spec.finalizers) == ["kubernetes"]
    classes = await stubs.priority_classes.List(meta_pb2.ListRequest())
    assert {(c.metadata.name, c.value, c.preemptionPolicy) for c in classes.items} == {
        ("system-cluster-critical", 2000000000, "PreemptLowerPriority"),
        ("system-node-critical", 2000001000, "PreemptLowerPriority"),
    }


async def test_a_second_apiserver_finds_them_in_place(
    etcd_server: EtcdServer, server: RunningAPIServer, stubs: Stubs
) -> None:
    settings = make_settings(etcd_server.endpoint, etcd_prefix=server.settings.etcd_prefix)
    second = await start_apiserver(settings)
    try:
        listed = await stubs.namespaces.List(meta_pb2.ListRequest())
        assert len(listed.items) == 4
    finally:
        await second.server.stop()


async def test_create_in_a_missing_namespace_is_not_found(stubs: Stubs, http: Any) -> None:
    await expect_error(
        stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web", namespace="nowhere"))),
        grpc.StatusCode.NOT_FOUND,
        'namespaces "nowhere" not found',
    )
    code, body = await call(http, "POST", "/api/v1/namespaces/nowhere/pods", pod_body("web"))
    assert code == 404
    assert body["reason"] == "NotFound"
    assert body["message"] == 'namespaces "nowhere" not found'
    assert body["details"] == {"name": "nowhere", "kind": "namespaces"}


async def test_deleting_a_namespace_terminates_it_until_it_is_finalized(
    stubs: Stubs, http: Any
) -> None:
    await create_namespaces(stubs, "team")
    await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("old", namespace="team")))
    deleted = await stubs.namespaces.Delete(meta_pb2.DeleteRequest(name="team"))
    assert deleted.status.phase == "Terminating"
    assert deleted.metadata.HasField("deletionTimestamp")
    assert list(deleted.spec.finalizers) == ["kubernetes"]
    # Deleting again changes nothing while the finalizer is there.
    again = await stubs.namespaces.Delete(meta_pb2.DeleteRequest(name="team"))
    assert again.metadata.resourceVersion == deleted.metadata.resourceVersion
    # Nothing new may go in: over gRPC and REST, with kube's message and cause.
    message = (
        'pods "web" is forbidden: unable to create new content in namespace team because it '
        "is being terminated"
    )
    await expect_error(
        stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web", namespace="team"))),
        grpc.StatusCode.PERMISSION_DENIED,
        message,
    )
    code, body = await call(http, "POST", "/api/v1/namespaces/team/pods", pod_body("web"))
    assert (code, body["reason"], body["message"]) == (403, "Forbidden", message)
    assert body["details"] == {
        "name": "web",
        "kind": "pods",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace team is being terminated",
                "field": "metadata.namespace",
            }
        ],
    }
    # A status update (the namespace controller's conditions) does not remove it.
    current = await stubs.namespaces.Get(meta_pb2.GetRequest(name="team"))
    current.status.conditions.add(type="NamespaceContentRemaining", status="True")
    await stubs.namespaces.UpdateStatus(namespace_pb2.UpdateNamespaceRequest(namespace=current))
    # Existing content may still be deleted; then finalizing removes the namespace.
    await stubs.pods.Delete(meta_pb2.DeleteRequest(namespace="team", name="old"))
    current = await stubs.namespaces.Get(meta_pb2.GetRequest(name="team"))
    del current.spec.finalizers[:]
    await stubs.namespaces.Finalize(namespace_pb2.UpdateNamespaceRequest(namespace=current))
    await expect_error(
        stubs.namespaces.Get(meta_pb2.GetRequest(name="team")), grpc.StatusCode.NOT_FOUND
    )


async def test_finalize_over_rest_and_a_namespace_recreated_is_active(
    stubs: Stubs, http: Any
) -> None:
    code, created = await call(
        http, "POST", "/api/v1/namespaces", {"metadata": {"name": "scratch"}}
    )
    assert code == 201
    assert created["status"] == {"phase": "Active"}
    assert created["spec"] == {"finalizers": ["kubernetes"]}
    code, deleted = await call(http, "DELETE", "/api/v1/namespaces/scratch")
    assert (code, deleted["status"]["phase"]) == (200, "Terminating")
    deleted["spec"]["finalizers"] = []
    code, _ = await call(http, "PUT", "/api/v1/namespaces/scratch/finalize", deleted)
    assert code == 200
    code, _ = await call(http, "GET", "/api/v1/namespaces/scratch")
    assert code == 404
    code, again = await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "scratch"}})
    assert (code, again["status"]["phase"]) == (201, "Active")


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public", "kube-node-lease"])
async def test_system_namespaces_may_not_be_deleted(stubs: Stubs, http: Any, name: str) -> None:
    message = f'namespaces "{name}" is forbidden: this namespace may not be deleted'
    await expect_error(
        stubs.namespaces.Delete(meta_pb2.DeleteRequest(name=name)),
        grpc.StatusCode.PERMISSION_DENIED,
        message,
    )
    code, body = await call(http, "DELETE", f"/api/v1/namespaces/{name}")
    assert (code, body["reason"], body["message"]) == (403, "Forbidden", message)
    assert body["details"] == {"name": name, "kind": "namespaces"}


async def test_namespaces_are_not_deleted_as_a_collection(http: Any) -> None:
    code, body = await call(http, "DELETE", "/api/v1/namespaces")
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
    code, _ = await call(http, "GET", "/api/v1/namespaces/default")
    assert code == 200


async def test_pods_get_their_class_priority(stubs: Stubs, http: Any) -> None:
    await create_class(stubs, priority_class("high", 1000, preemptionPolicy="Never"))
    pod = make_pod("important")
    pod.spec.priorityClassName = "high"
    created = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod))
    assert (created.spec.priority, created.spec.preemptionPolicy) == (1000, "Never")
    plain = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("plain")))
    assert (plain.spec.priority, plain.spec.preemptionPolicy) == (0, "PreemptLowerPriority")
    assert plain.spec.priorityClassName == ""
    body = pod_body("lost")
    body["spec"]["priorityClassName"] = "missing"
    code, status = await call(http, "POST", "/api/v1/namespaces/default/pods", body)
    assert (code, status["message"]) == (
        403,
        'pods "lost" is forbidden: no PriorityClass with name missing was found',
    )
    # dryRun goes through admission too.
    code, dry = await call(
        http, "POST", "/api/v1/namespaces/default/pods?dryRun=All", {**pod_body("dry")}
    )
    assert (code, dry["spec"]["priority"]) == (201, 0)


async def test_one_global_default_and_it_applies_to_pods_without_a_class(
    stubs: Stubs, http: Any
) -> None:
    await create_class(stubs, priority_class("base", 10, globalDefault=True))
    await expect_error(
        create_class(stubs, priority_class("other", 20, globalDefault=True)),
        grpc.StatusCode.PERMISSION_DENIED,
        'priorityclasses "other" is forbidden: PriorityClass base is already marked as '
        "default. Only one default can exist",
    )
    code, body = await call(
        http,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "other"}, "value": 20, "globalDefault": True},
    )
    assert (code, body["message"]) == (
        403,
        'priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass base is already '
        "marked as default. Only one default can exist",
    )
    assert body["details"] == {
        "name": "other",
        "group": "scheduling.k8s.io",
        "kind": "priorityclasses",
    }
    created = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web")))
    assert (created.spec.priorityClassName, created.spec.priority) == ("base", 10)


async def test_priority_class_validation_over_rest(http: Any) -> None:
    code, body = await call(
        http,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "system-mine"}, "value": 2000000001},
    )
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["details"] == {
        "name": "system-mine",
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "causes": body["details"]["causes"],
    }
    assert body["message"] == (
        'PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: '
        "priority class names with 'system-' prefix are reserved for system use only. error: "
        "system-mine is not a known system priority class"
    )
    code, made = await call(
        http, "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": "v"}}
    )
    assert (code, made.get("value", 0), made["preemptionPolicy"]) == (
        201,
        0,
        "PreemptLowerPriority",
    )
    made["value"] = 5
    code, body = await call(http, "PUT", "/apis/scheduling.k8s.io/v1/priorityclasses/v", made)
    assert (code, body["details"]["causes"]) == (
        422,
        [
            {
                "reason": "FieldValueForbidden",
                "message": "Forbidden: may not be changed in an update.",
                "field": "value",
            }
        ],
    )


async def test_tables_for_kubectl_get(http: Any) -> None:
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    async with http.get("/api/v1/namespaces", headers=accept) as r:
        table = await r.json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert [row["cells"][:2] for row in table["rows"]] == [
        ["default", "Active"],
        ["kube-node-lease", "Active"],
        ["kube-public", "Active"],
        ["kube-system", "Active"],
    ]
    async with http.get("/apis/scheduling.k8s.io/v1/priorityclasses", headers=accept) as r:
        table = await r.json()
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Value",
        "Global-Default",
        "Age",
        "PreemptionPolicy",
    ]
    cells = [row["cells"] for row in table["rows"]]
    assert [[c[0], c[1], c[2], c[4]] for c in cells] == [
        ["system-cluster-critical", 2000000000, False, "PreemptLowerPriority"],
        ["system-node-critical", 2000001000, False, "PreemptLowerPriority"],
    ]
