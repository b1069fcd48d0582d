"""Kubernetes protobuf over the REST API against a real etcd: DeleteOptions bodies on DELETE and
deletecollection (every field the JSON body honours), Eviction, Binding and Scale bodies,
fieldValidation for fields tinykube does not model, and protobuf answers (GET, LIST, Status)
with the JSON fallback. No kubelets: pods bound to node "ghost" stay while they terminate.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from apiserver.rest import kubeproto
from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.kinds import POD
from tinykube.localetcd import EtcdServer
from tinykube.manifest import parse_as
from tinykube.protowire import delimited

pytestmark = pytest.mark.integration

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
PROTOBUF = "application/vnd.kubernetes.protobuf"
PB_BODY = {"Content-Type": PROTOBUF}
PB_FIRST = {"Accept": f"{PROTOBUF}, application/json"}


class Rest:
    def __init__(
        self, session: aiohttp.ClientSession, base: str, running: RunningAPIServer
    ) -> None:
        self.session = session
        self.base = base
        self.running = running

    async def call(
        self,
        method: str,
        path: str,
        body: bytes | dict[str, Any] | None = None,
        /,
        **headers: str,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        """Answers decode from JSON or protobuf by their Content-Type."""
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        hdrs = {"Content-Type": "application/json"} if isinstance(body, dict) else {}
        hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as r:
            raw = await r.read()
            if r.headers.get("Content-Type", "").startswith(PROTOBUF):
                return r.status, kubeproto.decode(raw), r
            return r.status, json.loads(raw) if raw else None, r


@pytest.fixture(scope="module")
async def rest(etcd_server: EtcdServer) -> AsyncIterator[Rest]:
    running: RunningAPIServer = await start_apiserver(
        make_settings(etcd_server.endpoint, rest_port=0)
    )
    session = aiohttp.ClientSession()
    try:
        yield Rest(session, f"http://{running.server.rest_address}", running)
    finally:
        await session.close()
        await running.server.stop()


def delete_options(**options: Any) -> bytes:
    """DeleteOptions as client-go sends them: the envelope with kind DeleteOptions."""
    body = kubeproto.encode({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", **options})
    assert body is not None
    return body


def encoded(doc: dict[str, Any]) -> bytes:
    body = kubeproto.encode(doc)
    assert body is not None
    return body


def ghost_pod(name: str, node: str = "ghost") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def test_delete_options_in_protobuf(rest: Rest) -> None:
    code, pod, _ = await rest.call("POST", PODS, ghost_pod("grace"))
    assert code == 201, pod
    # dryRun in the body: nothing is deleted
    code, _, _ = await rest.call(
        "DELETE", f"{PODS}/grace", delete_options(dryRun=["All"]), **PB_BODY
    )
    assert code == 200
    code, live, _ = await rest.call("GET", f"{PODS}/grace")
    assert code == 200 and "deletionTimestamp" not in live["metadata"]
    # preconditions: a wrong uid is a Conflict, as in JSON
    code, status, _ = await rest.call(
        "DELETE", f"{PODS}/grace", delete_options(preconditions={"uid": "nope"}), **PB_BODY
    )
    assert (code, status["reason"]) == (409, "Conflict"), status
    # gracePeriodSeconds: the pod (on a node without a kubelet) terminates with it
    uid = pod["metadata"]["uid"]
    options = delete_options(gracePeriodSeconds=45, preconditions={"uid": uid})
    code, live, _ = await rest.call("DELETE", f"{PODS}/grace", options, **PB_BODY)
    assert code == 200, live
    assert live["metadata"]["deletionGracePeriodSeconds"] == 45
    # gracePeriodSeconds 0 (a pointer field: zero is sent and kept) deletes at once
    code, _, _ = await rest.call(
        "DELETE", f"{PODS}/grace", delete_options(gracePeriodSeconds=0), **PB_BODY
    )
    assert code == 200
    code, _, _ = await rest.call("GET", f"{PODS}/grace")
    assert code == 404
    # a bad propagationPolicy is the same 422 as in JSON
    await rest.call("POST", CMS, {"metadata": {"name": "pp"}, "data": {"a": "b"}})
    code, status, _ = await rest.call(
        "DELETE", f"{CMS}/pp", delete_options(propagationPolicy="Sideways"), **PB_BODY
    )
    assert (code, status["reason"]) == (422, "Invalid"), status
    assert status["details"]["kind"] == "DeleteOptions"
    code, status, _ = await rest.call(
        "DELETE", f"{CMS}/pp", delete_options(orphanDependents=True), **PB_BODY
    )
    # orphanDependents: the orphan finalizer holds the object for the garbage collector
    assert code == 200, status
    assert status["metadata"]["finalizers"] == ["orphan"]


async def test_deletecollection_with_protobuf_options(rest: Rest) -> None:
    for name in ("dc-a", "dc-b"):
        body = {"metadata": {"name": name, "labels": {"set": "dc"}}}
        assert (await rest.call("POST", CMS, body))[0] == 201
    path = f"{CMS}?labelSelector=set%3Ddc"
    code, listed, _ = await rest.call("DELETE", path, delete_options(dryRun=["All"]), **PB_BODY)
    assert code == 200
    assert len(listed["items"]) == 2
    assert len((await rest.call("GET", path))[1]["items"]) == 2  # dry run
    code, _, _ = await rest.call("DELETE", path, delete_options(), **PB_BODY)
    assert code == 200
    assert (await rest.call("GET", path))[1]["items"] == []


async def test_eviction_binding_and_scale_bodies(rest: Rest) -> None:
    assert (await rest.call("POST", PODS, ghost_pod("evicted")))[0] == 201
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "evicted", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 0},
    }
    code, status, _ = await rest.call(
        "POST", f"{PODS}/evicted/eviction", encoded(eviction), **PB_BODY
    )
    assert code == 201, status
    assert (await rest.call("GET", f"{PODS}/evicted"))[0] == 404

    assert (await rest.call("POST", PODS, ghost_pod("unbound", node="")))[0] == 201
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost"}}
    assert (await rest.call("POST", "/api/v1/nodes", encoded(node), **PB_BODY))[0] == 201
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "unbound", "namespace": "default"},
        "target": {"kind": "Node", "name": "ghost"},
    }
    code, status, _ = await rest.call(
        "POST", f"{PODS}/unbound/binding", encoded(binding), **PB_BODY
    )
    assert code == 201, status
    assert (await rest.call("GET", f"{PODS}/unbound"))[1]["spec"]["nodeName"] == "ghost"

    deployments = "/apis/apps/v1/namespaces/default/deployments"
    labels = {"app": "sc"}
    deployment = {
        "metadata": {"name": "sc"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    assert (await rest.call("POST", deployments, deployment))[0] == 201
    code, scale, _ = await rest.call("GET", f"{deployments}/sc/scale", **PB_FIRST)
    assert code == 200
    assert (scale["kind"], scale["spec"]) == ("Scale", {"replicas": 1})
    scale["spec"]["replicas"] = 3
    code, scaled, response = await rest.call(
        "PUT", f"{deployments}/sc/scale", encoded(scale), **PB_BODY, **PB_FIRST
    )
    assert code == 200, scaled
    assert response.headers["Content-Type"] == PROTOBUF
    assert scaled["spec"]["replicas"] == 3
    assert (await rest.call("GET", f"{deployments}/sc"))[1]["spec"]["replicas"] == 3


async def test_fields_tinykube_does_not_model_follow_field_validation(rest: Rest) -> None:
    pod = ghost_pod("osful")
    pod["spec"]["os"] = {"name": "linux"}  # Kubernetes' PodSpec.os (36): not in tinykube
    body = encoded(pod)
    code, status, _ = await rest.call("POST", f"{PODS}?fieldValidation=Strict", body, **PB_BODY)
    assert code == 400, status
    assert 'unknown field "spec.os"' in status["message"]
    code, created, response = await rest.call("POST", PODS, body, **PB_BODY)
    assert code == 201, created
    assert 'unknown field \\"spec.os\\"' in response.headers["Warning"]

    # A field number no Kubernetes version has: reported the same way
    def odd(name: str) -> bytes:
        meta = delimited(1, delimited(1, name.encode()))
        return kubeproto.envelope("v1", "ConfigMap", meta + b"\xf8\x01\x01")  # field 31 = 1

    strict = f"{CMS}?fieldValidation=Strict"
    code, status, _ = await rest.call("POST", strict, odd("odd-strict"), **PB_BODY)
    assert code == 400, status
    assert 'unknown field "<field 31>"' in status["message"]
    code, _, response = await rest.call("POST", CMS, odd("odd-warn"), **PB_BODY)
    assert code == 201
    assert 'unknown field \\"<field 31>\\"' in response.headers["Warning"]
    ignore = f"{CMS}?fieldValidation=Ignore"
    code, _, response = await rest.call("POST", ignore, odd("odd-ignore"), **PB_BODY)
    assert code == 201
    assert "Warning" not in response.headers


async def test_protobuf_answers_and_their_fallback(rest: Rest) -> None:
    assert (await rest.call("POST", PODS, ghost_pod("answered")))[0] == 201
    code, as_json, _ = await rest.call("GET", f"{PODS}/answered")
    code, as_pb, response = await rest.call("GET", f"{PODS}/answered", Accept=PROTOBUF)
    assert code == 200
    assert response.headers["Content-Type"] == PROTOBUF
    # The same object; the decoder leaves zero values out (omitempty-style) where the JSON
    # answer prints Kubernetes' zero fields, so compare them as objects.
    assert parse_as(POD, as_pb)[0] == parse_as(POD, as_json)[0]
    code, listed, response = await rest.call("GET", PODS, **PB_FIRST)
    assert response.headers["Content-Type"] == PROTOBUF
    assert listed["kind"] == "PodList"
    assert "answered" in [item["metadata"]["name"] for item in listed["items"]]
    # errors are a protobuf Status
    code, status, response = await rest.call("GET", f"{PODS}/missing", **PB_FIRST)
    assert (code, response.headers["Content-Type"]) == (404, PROTOBUF)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "NotFound", 404)
    # a Table in protobuf is not offered: the JSON the client also takes, else 406
    table = f"{PROTOBUF};as=Table;v=v1;g=meta.k8s.io"
    code, _, response = await rest.call("GET", PODS, Accept=f"{table}, application/json")
    assert (code, response.headers["Content-Type"]) == (200, "application/json")
    code, status, _ = await rest.call("GET", PODS, Accept=table)
    assert (code, status["reason"]) == (406, "NotAcceptable")


def frames(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """A protobuf watch stream: (type, object as JSON) per length-prefixed WatchEvent."""
    out = []
    while data:
        size = int.from_bytes(data[:4], "big")
        frame, data = data[4 : 4 + size], data[4 + size :]
        assert not frame.startswith(kubeproto.MAGIC)  # streamed frames are bare WatchEvents
        event = dict(kubeproto.fields(frame))
        extension = event[2]
        assert isinstance(extension, bytes)
        obj = dict(kubeproto.fields(extension))[1]
        assert isinstance(obj, bytes) and isinstance(event[1], bytes)
        out.append((event[1].decode(), kubeproto.decode(obj)))
    return out


async def test_protobuf_watch_initial_events_bookmark_and_error(rest: Rest) -> None:
    body = {"metadata": {"name": "watched", "labels": {"w": "pb"}}, "data": {"k": "v"}}
    assert (await rest.call("POST", CMS, body))[0] == 201
    query = (
        "?watch=1&labelSelector=w%3Dpb&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
    )
    async with rest.session.get(rest.base + CMS + query, headers=PB_FIRST) as r:
        assert r.headers["Content-Type"] == f"{PROTOBUF};stream=watch"
        events = frames(await r.read())
    assert [kind for kind, _ in events] == ["ADDED", "BOOKMARK"]
    added, bookmark = events[0][1], events[1][1]
    assert (added["kind"], added["data"]) == ("ConfigMap", {"k": "v"})
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    # a compacted resourceVersion: the stream carries one ERROR event with a 410 Status
    revision = await rest.running.server.compact()
    await rest.call("POST", CMS, {"metadata": {"name": "after-compaction"}})
    url = f"{rest.base}{CMS}?watch=1&resourceVersion={revision - 1}&timeoutSeconds=1"
    async with rest.session.get(url, headers=PB_FIRST) as r:
        events = frames(await r.read())
    ((kind, status),) = events
    assert kind == "ERROR"
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
