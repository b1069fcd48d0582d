"""Delete's propagationPolicy and deletecollection, on a real apiserver over a real etcd.

The apiserver's half of cascading deletion (the garbage collector's half is unit-tested and
run end to end in tests/e2e/test_cascade.py): which finalizers each policy leaves, that the
object stays until they are removed, Kubernetes' refusal of a bad policy over gRPC and REST,
and deletecollection through the same Delete.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import pytest

from tests.integration.conftest import (
    Stubs,
    bind_request,
    expect_error,
    make_node,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import event_pb2, meta_pb2, node_pb2, pod_pb2, replicaset_pb2

pytestmark = pytest.mark.integration

RS_PATH = "/apis/apps/v1/namespaces/default/replicasets"
PODS_PATH = "/api/v1/namespaces/default/pods"
BAD_POLICY = (
    'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
    '"Sideways": supported values: "Foreground", "Background", "Orphan", "nil"'
)


@dataclass
class Api:
    stubs: Stubs
    session: aiohttp.ClientSession
    base: str

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        async with self.session.request(method, self.base + path, data=data, headers=headers) as r:
            return r.status, json.loads(await r.read())


@pytest.fixture
async def api(etcd_server: EtcdServer) -> AsyncIterator[Api]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    session = aiohttp.ClientSession()
    try:
        yield Api(make_stubs(channel), session, f"http://{running.server.rest_address}")
    finally:
        await session.close()
        await channel.close()
        await running.server.stop()


def make_rs(name: str = "web", finalizers: tuple[str, ...] = ()) -> replicaset_pb2.ReplicaSet:
    return replicaset_pb2.ReplicaSet(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="default", finalizers=finalizers),
        spec=replicaset_pb2.ReplicaSetSpec(
            replicas=1,
            selector=meta_pb2.LabelSelector(matchLabels={"app": name}),
            template=replicaset_pb2.PodTemplateSpec(
                metadata=meta_pb2.ObjectMeta(labels={"app": name}),
                spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="x")]),
            ),
        ),
    )


async def create_rs(stubs: Stubs, name: str = "web", *fins: str) -> replicaset_pb2.ReplicaSet:
    request = replicaset_pb2.CreateReplicaSetRequest(replicaSet=make_rs(name, fins))
    return await stubs.replica_sets.Create(request)


async def delete_rs(stubs: Stubs, policy: str = "", name: str = "web") -> Any:
    return await stubs.replica_sets.Delete(
        meta_pb2.DeleteRequest(namespace="default", name=name, propagationPolicy=policy)
    )


async def get_rs(stubs: Stubs, name: str = "web") -> replicaset_pb2.ReplicaSet:
    return await stubs.replica_sets.Get(meta_pb2.GetRequest(namespace="default", name=name))


# ---- gRPC ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "finalizer"), [("Orphan", "orphan"), ("Foreground", "foregroundDeletion")]
)
async def test_orphan_and_foreground_keep_the_object_until_the_finalizer_goes(
    api: Api, policy: str, finalizer: str
) -> None:
    created = await create_rs(api.stubs)
    marked = await delete_rs(api.stubs, policy)
    assert list(marked.metadata.finalizers) == [finalizer]
    assert marked.metadata.HasField("deletionTimestamp")
    assert marked.metadata.deletionGracePeriodSeconds == 0
    # Controllers see deletion start as a new generation, as in Kubernetes.
    assert marked.metadata.generation == created.metadata.generation + 1
    stored = await get_rs(api.stubs)
    assert stored.metadata.deletionTimestamp == marked.metadata.deletionTimestamp
    # Deleting again with no policy changes nothing: the finalizer decides.
    again = await delete_rs(api.stubs)
    assert again.metadata.resourceVersion == stored.metadata.resourceVersion
    # What the garbage collector does when done: the finalizer goes, and so does the object.
    del stored.metadata.finalizers[:]
    await api.stubs.replica_sets.Update(replicaset_pb2.UpdateReplicaSetRequest(replicaSet=stored))
    await expect_error(get_rs(api.stubs), grpc.StatusCode.NOT_FOUND)


@pytest.mark.parametrize("policy", ["", "Background"])
async def test_background_deletes_at_once(api: Api, policy: str) -> None:
    await create_rs(api.stubs)
    deleted = await delete_rs(api.stubs, policy)
    assert not deleted.metadata.finalizers
    await expect_error(get_rs(api.stubs), grpc.StatusCode.NOT_FOUND)


async def test_a_later_delete_switches_the_policy_and_keeps_other_finalizers(api: Api) -> None:
    await create_rs(api.stubs, "web", "example.com/keep")
    marked = await delete_rs(api.stubs, "Orphan")
    assert list(marked.metadata.finalizers) == ["example.com/keep", "orphan"]
    switched = await delete_rs(api.stubs, "Foreground")
    assert list(switched.metadata.finalizers) == ["example.com/keep", "foregroundDeletion"]
    assert switched.metadata.deletionTimestamp == marked.metadata.deletionTimestamp
    background = await delete_rs(api.stubs, "Background")
    assert list(background.metadata.finalizers) == ["example.com/keep"]
    # Still held by the other finalizer.
    assert (await get_rs(api.stubs)).metadata.HasField("deletionTimestamp")


async def test_bad_policy_is_refused_with_kubernetes_message(api: Api) -> None:
    await create_rs(api.stubs)
    await expect_error(
        delete_rs(api.stubs, "Sideways"), grpc.StatusCode.INVALID_ARGUMENT, BAD_POLICY
    )
    assert not (await get_rs(api.stubs)).metadata.HasField("deletionTimestamp")


async def test_events_are_never_finalized_for_the_collector(api: Api) -> None:
    event = event_pb2.Event(
        metadata=meta_pb2.ObjectMeta(name="e", namespace="default"),
        involvedObject=meta_pb2.ObjectReference(kind="Pod", name="p", namespace="default"),
        reason="Test",
        message="m",
    )
    await api.stubs.events.Create(event_pb2.CreateEventRequest(event=event))
    deleted = await api.stubs.events.Delete(
        meta_pb2.DeleteRequest(namespace="default", name="e", propagationPolicy="Orphan")
    )
    assert not deleted.metadata.finalizers
    await expect_error(
        api.stubs.events.Get(meta_pb2.GetRequest(namespace="default", name="e")),
        grpc.StatusCode.NOT_FOUND,
    )


async def test_a_graceful_pod_deletion_under_way_keeps_its_finalizers(api: Api) -> None:
    await api.stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    await api.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web")))
    await api.stubs.pods.Bind(bind_request("web", "n1"))
    delete = meta_pb2.DeleteRequest(namespace="default", name="web", propagationPolicy="Orphan")
    marked = await api.stubs.pods.Delete(delete)
    assert list(marked.metadata.finalizers) == ["orphan"]
    assert marked.metadata.deletionGracePeriodSeconds == 30
    delete.propagationPolicy = "Foreground"
    again = await api.stubs.pods.Delete(delete)
    assert list(again.metadata.finalizers) == ["orphan"]
    # The kubelet's final delete (grace 0) leaves it to the finalizer.
    delete.gracePeriodSeconds = 0
    delete.propagationPolicy = ""
    last = await api.stubs.pods.Delete(delete)
    assert last.metadata.deletionGracePeriodSeconds == 0
    assert list(last.metadata.finalizers) == ["orphan"]


# ---- REST ----------------------------------------------------------------------------------


async def test_rest_passes_the_policy_through(api: Api) -> None:
    await create_rs(api.stubs)
    code, body = await api.call("DELETE", f"{RS_PATH}/web", {"propagationPolicy": "Orphan"})
    # The object is still there: Kubernetes answers with it, not a Status.
    assert code == 200 and body["kind"] == "ReplicaSet"
    assert body["metadata"]["finalizers"] == ["orphan"]
    assert "deletionTimestamp" in body["metadata"]
    code, body = await api.call("DELETE", f"{RS_PATH}/web?propagationPolicy=Foreground")
    assert code == 200 and body["metadata"]["finalizers"] == ["foregroundDeletion"]


@pytest.mark.parametrize(
    ("options", "code", "finalizers"),
    [
        ({"orphanDependents": True}, 200, ["example.com/keep", "orphan"]),
        # The deprecated spelling's quirk: 202 when it asked for cascading and the object stays.
        ({"orphanDependents": False}, 202, ["example.com/keep"]),
    ],
)
async def test_rest_orphan_dependents_is_the_deprecated_spelling(
    api: Api, options: dict[str, Any], code: int, finalizers: list[str]
) -> None:
    await create_rs(api.stubs, "web", "example.com/keep")
    got, body = await api.call("DELETE", f"{RS_PATH}/web", options)
    assert got == code
    assert body["metadata"]["finalizers"] == finalizers


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (f"{RS_PATH}/web?propagationPolicy=Sideways", None, BAD_POLICY),
        (f"{RS_PATH}/web", {"propagationPolicy": "Sideways"}, BAD_POLICY),
        (
            f"{RS_PATH}/web",
            {"propagationPolicy": "Orphan", "orphanDependents": True},
            'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: '
            '"Orphan": orphanDependents and deletionPropagation cannot be both set',
        ),
        (f"{PODS_PATH}?propagationPolicy=Sideways", None, BAD_POLICY),  # deletecollection
    ],
)
async def test_rest_refuses_bad_delete_options(
    api: Api, path: str, body: Any, message: str
) -> None:
    await create_rs(api.stubs)
    code, status = await api.call("DELETE", path, body)
    assert code == 422
    assert status["reason"] == "Invalid" and status["message"] == message
    assert status["details"]["kind"] == "DeleteOptions"
    assert status["details"]["group"] == "meta.k8s.io"
    assert status["details"]["causes"][0]["field"] == "propagationPolicy"
    assert not (await get_rs(api.stubs)).metadata.HasField("deletionTimestamp")


async def test_deletecollection_deletes_each_through_delete_and_answers_the_list(
    api: Api,
) -> None:
    for name, app in (("a", "web"), ("b", "web"), ("c", "db")):
        await api.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(name, app=app)))
    code, body = await api.call(
        "DELETE", f"{PODS_PATH}?labelSelector=app%3Dweb", {"propagationPolicy": "Orphan"}
    )
    assert code == 200 and body["kind"] == "PodList" and body["apiVersion"] == "v1"
    # The list as it was listed, before the deletions (kube-apiserver's answer).
    assert sorted(p["metadata"]["name"] for p in body["items"]) == ["a", "b"]
    assert all("deletionTimestamp" not in p["metadata"] for p in body["items"])
    # Each went through Delete with the options: held by the orphan finalizer.
    for name in ("a", "b"):
        pod = await api.stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name=name))
        assert list(pod.metadata.finalizers) == ["orphan"]
    code, body = await api.call("DELETE", f"{PODS_PATH}?labelSelector=app%3Ddb")
    assert code == 200 and [p["metadata"]["name"] for p in body["items"]] == ["c"]
    await expect_error(
        api.stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="c")),
        grpc.StatusCode.NOT_FOUND,
    )


async def test_deletecollection_applies_preconditions_to_each(api: Api) -> None:
    a = await api.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("a", app="web")))
    await api.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("b", app="web")))
    code, status = await api.call(
        "DELETE",
        f"{PODS_PATH}?labelSelector=app%3Dweb",
        {"preconditions": {"uid": a.metadata.uid}},
    )
    # "a" matches its uid and goes; "b" fails the precondition, which stops the request.
    assert code == 409 and status["reason"] == "Conflict"
    assert "Precondition failed: UID in precondition" in status["message"]
    await expect_error(
        api.stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="a")),
        grpc.StatusCode.NOT_FOUND,
    )
    await api.stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="b"))


async def test_an_eviction_deletes_with_its_propagation_policy(api: Api) -> None:
    await api.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web")))
    eviction = pod_pb2.Eviction(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default"),
        deleteOptions=meta_pb2.DeleteOptions(propagationPolicy="Orphan"),
    )
    evicted = await api.stubs.pods.Evict(pod_pb2.EvictRequest(eviction=eviction))
    assert list(evicted.pod.metadata.finalizers) == ["orphan"]
    pod = await api.stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="web"))
    assert pod.metadata.HasField("deletionTimestamp")
