"""The REST front end against a real apiserver on a real etcd, over HTTP with aiohttp.

Every verb and subresource, watch (resume, 410 as an ERROR event, bookmarks, timeouts, the
watch-list protocol), dryRun, fieldValidation, and the status codes and Status bodies of bad
input, checked against what kube-apiserver answers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.integration.conftest import Rest, make_settings, rest_apiserver, start_apiserver
from tinykube.localetcd import EtcdServer

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}
PODS = "/api/v1/namespaces/default/pods"
RS = "/apis/apps/v1/namespaces/default/replicasets"


@pytest.fixture(scope="module")
async def rest(etcd_server: EtcdServer) -> AsyncIterator[Rest]:
    async with rest_apiserver(etcd_server) as rest:
        yield rest


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def replica_set(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def status(code: int, reason: str, message: str, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


async def read_events(resp: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while len(events) < count:
        line = await asyncio.wait_for(resp.content.readline(), 10)
        if not line:
            break
        events.append(json.loads(line))
    return events


# ---- discovery and plumbing ----------------------------------------------------------------


async def test_version_and_health(rest: Rest) -> None:
    code, body, _ = await rest.call("GET", "/version")
    assert code == 200
    assert body["gitVersion"] == "v1.37.0+tinykube"
    assert (body["major"], body["minor"]) == ("1", "37")
    for path in ("/healthz", "/readyz", "/livez"):
        code, text, _ = await rest.call("GET", path)
        assert (code, text) == (200, "ok")
    code, text, _ = await rest.call("GET", "/readyz?verbose")
    assert "[+]etcd ok" in text and text.endswith("readyz check passed\n")
    code, text, _ = await rest.call("GET", "/metrics")
    assert code == 200 and "apiserver_registered_watchers" in text


async def test_legacy_discovery(rest: Rest) -> None:
    code, body, _ = await rest.call("GET", "/api")
    assert code == 200 and body["kind"] == "APIVersions" and body["versions"] == ["v1"]
    _, body, _ = await rest.call("GET", "/apis")
    names = [g["name"] for g in body["groups"]]
    # kube-apiserver lists its groups in its own priority order, not alphabetically
    kube_order = [
        "apps",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
    ]
    served = [n for n in names if n in kube_order]
    assert served == [g for g in kube_order if g in served]
    assert names[0] == "apps" and {"authorization.k8s.io", "coordination.k8s.io"} <= set(served)
    assert "storage.k8s.io" in names and "resource.k8s.io" in names
    _, body, _ = await rest.call("GET", "/api/v1")
    by_name = {r["name"]: r for r in body["resources"]}
    assert by_name["pods"]["shortNames"] == ["po"]
    assert by_name["pods"]["namespaced"] is True
    assert by_name["pods/binding"]["verbs"] == ["create"]
    assert by_name["nodes"]["namespaced"] is False
    assert by_name["persistentvolumes"]["verbs"] == ["get", "list", "watch"]
    _, body, _ = await rest.call("GET", "/apis/apps/v1")
    by_name = {r["name"]: r for r in body["resources"]}
    assert by_name["replicasets/scale"]["group"] == "autoscaling"
    assert "statefulsets" in by_name
    code, body, _ = await rest.call("GET", "/apis/apps")
    assert body["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}


async def test_aggregated_discovery(rest: Rest) -> None:
    accept = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
        "application/json"
    )
    code, body, resp = await rest.call("GET", "/api", headers={"Accept": accept})
    assert code == 200
    assert resp.headers["Content-Type"] == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    )
    assert body["kind"] == "APIGroupDiscoveryList"
    core = body["items"][0]["versions"][0]
    pods = next(r for r in core["resources"] if r["resource"] == "pods")
    assert pods["responseKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert pods["scope"] == "Namespaced"
    subs = {s["subresource"]: s for s in pods["subresources"]}
    assert subs["binding"]["responseKind"]["kind"] == "Binding"
    _, body, _ = await rest.call("GET", "/apis", headers={"Accept": accept})
    apps = next(i for i in body["items"] if i["metadata"]["name"] == "apps")
    rs = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "replicasets")
    scale = next(s for s in rs["subresources"] if s["subresource"] == "scale")
    assert scale["responseKind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}


# ---- CRUD ----------------------------------------------------------------------------------


async def test_create_get_list_update_delete(rest: Rest) -> None:
    code, created, _ = await rest.call("POST", PODS, pod("crud", app="web"))
    assert code == 201
    assert (created["kind"], created["apiVersion"]) == ("Pod", "v1")
    assert list(created)[:2] == ["kind", "apiVersion"]
    assert created["metadata"]["namespace"] == "default"
    rv = created["metadata"]["resourceVersion"]
    code, got, _ = await rest.call("GET", f"{PODS}/crud")
    assert code == 200 and got["metadata"]["uid"] == created["metadata"]["uid"]
    code, listed, _ = await rest.call("GET", f"{PODS}?labelSelector=app%3Dweb")
    assert listed["kind"] == "PodList"
    assert [p["metadata"]["name"] for p in listed["items"]] == ["crud"]
    _, everywhere, _ = await rest.call("GET", "/api/v1/pods?fieldSelector=metadata.name%3Dcrud")
    assert len(everywhere["items"]) == 1
    got["metadata"]["labels"]["tier"] = "x"
    code, updated, _ = await rest.call("PUT", f"{PODS}/crud", got)
    assert code == 200 and updated["metadata"]["labels"]["tier"] == "x"
    assert int(updated["metadata"]["resourceVersion"]) > int(rv)
    # A stale resourceVersion is a Conflict with Kubernetes' message.
    code, body, _ = await rest.call("PUT", f"{PODS}/crud", got)
    assert code == 409
    assert body == status(
        409,
        "Conflict",
        'Operation cannot be fulfilled on pods "crud": the object has been modified; please '
        "apply your changes to the latest version and try again",
        {"name": "crud", "kind": "pods"},
    )
    code, deleted, _ = await rest.call("DELETE", f"{PODS}/crud", {"gracePeriodSeconds": 0})
    assert code == 200 and deleted["kind"] == "Pod"
    code, body, _ = await rest.call("GET", f"{PODS}/crud")
    assert code == 404
    assert body == status(
        404, "NotFound", 'pods "crud" not found', {"name": "crud", "kind": "pods"}
    )


async def test_yaml_body_and_yaml_answer(rest: Rest) -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: yml\nspec:\n  containers:\n" + (
        "  - name: c\n    image: busybox\n"
    )
    code, _, _ = await rest.call("POST", PODS, text, headers={"Content-Type": "application/yaml"})
    assert code == 201
    code, body, resp = await rest.call("GET", f"{PODS}/yml", headers={"Accept": "application/yaml"})
    assert resp.headers["Content-Type"] == "application/yaml"
    assert "kind: Pod\napiVersion: v1\n" in body


async def test_cluster_scoped_delete_answers_status(rest: Rest) -> None:
    code, created, _ = await rest.call("POST", "/api/v1/nodes", node("gone"))
    assert code == 201
    code, body, _ = await rest.call("DELETE", "/api/v1/nodes/gone")
    assert code == 200
    assert body["status"] == "Success"
    assert body["details"] == {"name": "gone", "kind": "nodes", "uid": created["metadata"]["uid"]}


async def test_services_and_service_accounts_answer_a_delete_with_the_object(rest: Rest) -> None:
    """kube's ReturnDeletedObject: the typed clients read `delete_namespaced_service`'s answer
    as a V1Service (a Status there fails their model: `status` is not a ServiceStatus)."""
    base = "/api/v1/namespaces/default"
    svc = {"metadata": {"name": "gone"}, "spec": {"ports": [{"port": 80}]}}
    for plural, kind, body in (
        ("services", "Service", svc),
        ("serviceaccounts", "ServiceAccount", {"metadata": {"name": "gone"}}),
    ):
        code, created, _ = await rest.call("POST", f"{base}/{plural}", body)
        assert code == 201, created
        code, deleted, _ = await rest.call("DELETE", f"{base}/{plural}/gone")
        assert code == 200, deleted
        assert deleted["kind"] == kind
        assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
        code, _, _ = await rest.call("GET", f"{base}/{plural}/gone")
        assert code == 404


async def test_delete_preconditions_and_options(rest: Rest) -> None:
    await rest.call("POST", "/api/v1/nodes", node("pre"))
    code, body, _ = await rest.call(
        "DELETE", "/api/v1/nodes/pre", {"preconditions": {"uid": "not-it"}}
    )
    assert code == 409 and body["reason"] == "Conflict"
    assert "Precondition failed: UID in precondition: not-it" in body["message"]
    code, body, _ = await rest.call("DELETE", "/api/v1/nodes/pre?propagationPolicy=Sideways")
    assert code == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "propagationPolicy"
    code, _, _ = await rest.call("DELETE", "/api/v1/nodes/pre?propagationPolicy=Background")
    assert code == 200


@pytest.mark.parametrize(
    ("name", "body", "code", "message"),
    [
        # Kubernetes' gracePeriodSeconds is an int64: past int32 it is accepted (was a 500).
        ("grace-2e32", {"gracePeriodSeconds": 2**32}, 200, None),
        ("grace-int64", {"gracePeriodSeconds": 2**63 - 1}, 200, None),
        # A precondition that is not a string was a 500 ParseError.
        (
            "pre-uid-number",
            {"preconditions": {"uid": 5}},
            400,
            "preconditions.uid: expected a string, got 5",
        ),
        (
            "pre-rv-list",
            {"preconditions": {"resourceVersion": ["1"]}},
            400,
            'preconditions.resourceVersion: expected a string, got ["1"]',
        ),
        (
            "grace-2e64",
            {"gracePeriodSeconds": 2**64},
            400,
            "json: cannot unmarshal number 18446744073709551616 into Go struct field "
            "DeleteOptions.gracePeriodSeconds of type int64",
        ),
    ],
)
async def test_delete_options_range_and_types(
    rest: Rest, name: str, body: dict[str, Any], code: int, message: str | None
) -> None:
    await rest.call("POST", "/api/v1/nodes", node(name))
    got, answer, _ = await rest.call("DELETE", f"/api/v1/nodes/{name}", body)
    assert got == code, answer
    if message is not None:
        assert answer["message"] == message


async def test_deletecollection(rest: Rest) -> None:
    for name in ("dc-1", "dc-2", "dc-keep"):
        await rest.call("POST", PODS, pod(name, batch="dc" if name != "dc-keep" else "no"))
    code, body, _ = await rest.call("DELETE", f"{PODS}?labelSelector=batch%3Ddc")
    assert code == 200 and body["kind"] == "PodList"
    assert sorted(p["metadata"]["name"] for p in body["items"]) == ["dc-1", "dc-2"]
    _, left, _ = await rest.call("GET", f"{PODS}?labelSelector=batch")
    names = [
        p["metadata"]["name"] for p in left["items"] if "deletionTimestamp" not in p["metadata"]
    ]
    assert names == ["dc-keep"]


async def test_dry_run_validates_and_stores_nothing(rest: Rest) -> None:
    code, body, _ = await rest.call("POST", f"{PODS}?dryRun=All", pod("dry"))
    assert code == 201 and body["metadata"]["name"] == "dry"
    code, _, _ = await rest.call("GET", f"{PODS}/dry")
    assert code == 404
    bad = pod("dry")
    bad["spec"]["containers"] = []
    code, body, _ = await rest.call("POST", f"{PODS}?dryRun=All", bad)
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.containers"
    code, body, _ = await rest.call("POST", f"{PODS}?dryRun=Some", pod("dry"))
    assert code == 400


@pytest.mark.parametrize(
    ("validation", "code", "stored_foo", "warning"),
    [
        ("Strict", 400, None, None),
        ("Warn", 201, False, '299 - "unknown field \\"spec.foo\\""'),
        ("Ignore", 201, False, None),
        ("", 201, False, '299 - "unknown field \\"spec.foo\\""'),  # Kubernetes' default: Warn
    ],
)
async def test_field_validation(
    rest: Rest, validation: str, code: int, stored_foo: bool | None, warning: str | None
) -> None:
    name = f"fv-{validation.lower() or 'default'}"
    body = pod(name)
    body["spec"]["foo"] = 1
    query = f"?fieldValidation={validation}" if validation else ""
    got, answer, resp = await rest.call("POST", PODS + query, body)
    assert got == code
    if code == 400:
        assert answer == status(
            400,
            "BadRequest",
            'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown '
            'field "spec.foo"',
        )
        return
    assert "foo" not in answer["spec"]
    assert resp.headers.get("Warning") == warning


# ---- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "code", "reason"),
    [
        ("GET", "/api/v1/widgets", None, {}, 404, "NotFound"),
        ("GET", "/apis/nope/v1", None, {}, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/default/nodes", None, {}, 404, "NotFound"),
        ("GET", "/api/v1/pods/x", None, {}, 404, "NotFound"),
        ("GET", f"{PODS}/x/exec", None, {}, 404, "NotFound"),
        ("PUT", PODS, b"{}", JSON, 405, "MethodNotAllowed"),
        ("POST", "/api/v1/pods", b"{}", JSON, 405, "MethodNotAllowed"),
        ("POST", "/version", b"{}", JSON, 405, "MethodNotAllowed"),
        ("GET", f"{PODS}?limit=abc", None, {}, 400, "BadRequest"),
        # Go's strconv.ParseInt: ASCII digits within int64 (Python's int() took these).
        ("GET", f"{PODS}?limit=1_0", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?limit=%201", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?limit=%D9%A1", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?limit=9223372036854775808", None, {}, 400, "BadRequest"),
        ("DELETE", f"{PODS}/x?gracePeriodSeconds={'9' * 5000}", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?watch=maybe", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?labelSelector=a%20in", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?fieldSelector=spec.foo%3Dx", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?resourceVersion=abc", None, {}, 400, "BadRequest"),
        # ASCII digits within int64, as Go reads them (Python's int() took "1_000" as 1000).
        ("GET", f"{PODS}?resourceVersion=1_000", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?watch=1&resourceVersion=1_000", None, {}, 400, "BadRequest"),
        ("GET", f"{PODS}?resourceVersion=9223372036854775808", None, {}, 400, "BadRequest"),
        ("POST", PODS, b"{not json", JSON, 400, "BadRequest"),
        ("POST", PODS, b"a: [b", {"Content-Type": "application/yaml"}, 400, "BadRequest"),
        ("POST", PODS, b"[1]", JSON, 400, "BadRequest"),
        ("POST", PODS, b'{"spec": 3}', JSON, 400, "BadRequest"),
        ("POST", PODS, b'{"kind": "Node"}', JSON, 400, "BadRequest"),
        ("POST", PODS, b"{}", {"Content-Type": "text/plain"}, 415, "UnsupportedMediaType"),
        (
            "GET",
            PODS,
            None,
            {"Accept": "application/cbor"},
            406,
            "NotAcceptable",
        ),
        ("POST", "/api/v1/persistentvolumes", b"{}", JSON, 405, "MethodNotAllowed"),
        ("GET", "/api/v1/persistentvolumes/pv1", None, {}, 404, "NotFound"),
    ],
)
async def test_bad_requests(
    rest: Rest,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    code: int,
    reason: str,
) -> None:
    got, answer, resp = await rest.call(method, path, body, headers)
    assert (got, answer["reason"], answer["code"]) == (code, reason, code), answer
    assert answer["kind"] == "Status" and answer["status"] == "Failure"
    assert resp.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "headers", "code"),
    [
        # kube-apiserver reads 1 MiB of request line and headers; aiohttp's 8 KiB default
        # refused these with a plain-text 400 and a traceback logged at ERROR each time.
        (f"{PODS}?labelSelector=app%20in%20({','.join(['v'] * 5000)})", {}, 200),
        (PODS, {"X-Padding": "x" * 20_000}, 200),
        (f"{PODS}?labelSelector={'x' * (1 << 20)}", {}, 400),
    ],
)
async def test_long_request_lines(
    rest: Rest, caplog: pytest.LogCaptureFixture, path: str, headers: dict[str, str], code: int
) -> None:
    got, _, _ = await rest.call("GET", path, headers=headers)
    assert got == code
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert logged == []


async def test_unknown_path_is_kube_apiservers_body(rest: Rest) -> None:
    _, body, _ = await rest.call("GET", "/api/v1/widgets")
    assert body == status(404, "NotFound", "the server could not find the requested resource", {})


async def test_malformed_json_names_the_position(rest: Rest) -> None:
    _, body, _ = await rest.call("POST", PODS, b'{"a": 1,\n "b" }')
    assert "line 2, column 6" in body["message"]


async def test_invalid_object_has_causes(rest: Rest) -> None:
    bad = pod("Bad_Name")
    code, body, _ = await rest.call("POST", PODS, bad)
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('Pod "Bad_Name" is invalid: metadata.name: Invalid value')
    assert body["details"]["name"] == "Bad_Name" and body["details"]["kind"] == "Pod"
    cause = body["details"]["causes"][0]
    assert (cause["reason"], cause["field"]) == ("FieldValueInvalid", "metadata.name")


async def test_already_exists(rest: Rest) -> None:
    await rest.call("POST", PODS, pod("twice"))
    code, body, _ = await rest.call("POST", PODS, pod("twice"))
    assert body == status(
        409, "AlreadyExists", 'pods "twice" already exists', {"name": "twice", "kind": "pods"}
    )
    await rest.call("POST", RS, replica_set("twice"))
    code, body, _ = await rest.call("POST", RS, replica_set("twice"))
    assert code == 409
    assert body["message"] == 'replicasets.apps "twice" already exists'
    assert body["details"] == {"name": "twice", "group": "apps", "kind": "replicasets"}


async def test_namespace_and_name_mismatch(rest: Rest) -> None:
    body = pod("ns")
    body["metadata"]["namespace"] = "other"
    code, answer, _ = await rest.call("POST", PODS, body)
    assert code == 400 and "namespace of the provided object" in answer["message"]
    await rest.call("POST", PODS, pod("named"))
    code, answer, _ = await rest.call("PUT", f"{PODS}/other-name", pod("named"))
    assert code == 400
    assert answer["message"] == (
        "the name of the object (named) does not match the name on the URL (other-name)"
    )


async def test_body_over_the_limit(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(
        make_settings(etcd_server.endpoint, rest_port=0, max_request_bytes=1000)
    )
    try:
        async with aiohttp.ClientSession() as session:
            url = f"http://{running.server.rest_address}{PODS}"
            big = json.dumps(pod("big", note="x" * 2000))
            async with session.post(url, data=big, headers=JSON) as resp:
                body = await resp.json()
        assert resp.status == 413
        assert body == status(
            413, "RequestEntityTooLarge", "Request entity too large: limit is 1000"
        )
    finally:
        await running.server.stop()


async def test_objects_over_the_size_limits(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(
        make_settings(etcd_server.endpoint, rest_port=0, max_object_bytes=8192)
    )
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://{running.server.rest_address}"
            # Under the body limit, over the stored-object limit: 413 naming the size.
            big = pod("big")
            big["spec"]["containers"][0]["args"] = ["x" * 10_000]
            async with session.post(base + PODS, json=big) as resp:
                body = await resp.json()
            assert resp.status == 413, body
            assert body["reason"] == "RequestEntityTooLarge" and body["code"] == 413
            assert body["message"].startswith('Request entity too large: Pod "big" is 10')
            assert body["message"].endswith(
                "bytes as stored, the limit is 8192 bytes (max_object_bytes)"
            )
            # Annotations past 256 KiB in total: 422 as Kubernetes.
            noted = pod("noted")
            noted["metadata"]["annotations"] = {"a": "x" * 262_144}
            async with session.post(base + PODS, json=noted) as resp:
                body = await resp.json()
            assert resp.status == 422, body
            assert body["message"] == (
                'Pod "noted" is invalid: metadata.annotations: Too long: must have at most '
                "262144 bytes"
            )
            assert body["details"]["causes"] == [
                {
                    "reason": "FieldValueTooLong",
                    "message": "Too long: must have at most 262144 bytes",
                    "field": "metadata.annotations",
                }
            ]
            async with session.get(base + PODS) as resp:
                assert (await resp.json())["items"] == []
    finally:
        await running.server.stop()


# ---- paging and resourceVersion --------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    ['{"v": 1, "rv": 1e400, "start": ""}', '{"v": 1, "rv": 1000000000000000000000000000000}'],
)
async def test_forged_continue_token_is_400(rest: Rest, payload: str) -> None:
    token = base64.urlsafe_b64encode(payload.encode()).decode()
    code, body, _ = await rest.call("GET", f"{PODS}?limit=2&continue={token}")
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion"
    )


@pytest.mark.parametrize(
    ("limit", "code"),
    [
        # Kubernetes' limit is an int64; one past int32 lists everything (was a 500).
        ("2147483648", 200),
        ("9223372036854775807", 200),
    ],
)
async def test_list_limit_range(rest: Rest, limit: str, code: int) -> None:
    got, answer, _ = await rest.call("GET", f"/api/v1/nodes?limit={limit}")
    assert got == code, answer
    if code == 200:
        assert answer["kind"] == "NodeList" and "continue" not in answer["metadata"]


async def test_pages_without_selectors_count_the_items_left(rest: Rest) -> None:
    """kube's remainingItemCount: on every page but the last of an unfiltered list (etcd
    counts the keys after the page); never with a selector, which etcd cannot count."""
    base = "/api/v1/namespaces/remaining/configmaps"
    await rest.call("POST", "/api/v1/namespaces", {"metadata": {"name": "remaining"}})
    for i in range(5):
        code, _, _ = await rest.call("POST", base, {"metadata": {"name": f"cm-{i}"}})
        assert code == 201
    seen: list[int | None] = []
    names: list[str] = []
    token = ""
    while True:
        code, body, _ = await rest.call(
            "GET", f"{base}?limit=2" + (f"&continue={token}" if token else "")
        )
        assert code == 200, body
        seen.append(body["metadata"].get("remainingItemCount"))
        names += [i["metadata"]["name"] for i in body["items"]]
        token = body["metadata"].get("continue", "")
        if not token:
            break
    assert names == [f"cm-{i}" for i in range(5)]
    assert seen == [3, 1, None]
    code, body, _ = await rest.call("GET", f"{base}?limit=2&labelSelector=a!%3Db")
    assert code == 200 and body["metadata"]["continue"]
    assert "remainingItemCount" not in body["metadata"]
    # The Table kubectl asks for carries it too.
    code, table, _ = await rest.call(
        "GET",
        f"{base}?limit=4",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    assert code == 200 and table["metadata"]["remainingItemCount"] == 1


async def test_limit_continue_and_exact(rest: Rest) -> None:
    for i in range(5):
        await rest.call("POST", PODS, pod(f"page-{i}", paged="yes"))
    names: list[str] = []
    token = ""
    pages = 0
    while True:
        query = f"{PODS}?labelSelector=paged&limit=2" + (f"&continue={token}" if token else "")
        code, body, _ = await rest.call("GET", query)
        assert code == 200
        pages += 1
        names += [p["metadata"]["name"] for p in body["items"]]
        token = body["metadata"].get("continue", "")
        if not token:
            break
    assert names == [f"page-{i}" for i in range(5)] and pages == 3
    _, now, _ = await rest.call("GET", f"{PODS}?labelSelector=paged")
    rv = now["metadata"]["resourceVersion"]
    await rest.call("POST", PODS, pod("page-late", paged="yes"))
    _, exact, _ = await rest.call(
        "GET", f"{PODS}?labelSelector=paged&resourceVersion={rv}&resourceVersionMatch=Exact"
    )
    assert len(exact["items"]) == 5
    code, body, _ = await rest.call("GET", f"{PODS}?resourceVersionMatch=Exact")
    assert code == 422 and body["details"]["causes"][0]["field"] == "resourceVersionMatch"
    code, body, _ = await rest.call("GET", f"{PODS}?resourceVersion=0&resourceVersionMatch=Exact")
    assert code == 422


# ---- watch ---------------------------------------------------------------------------------


async def test_watch_streams_changes_and_resumes(rest: Rest) -> None:
    _, listed, _ = await rest.call("GET", f"{PODS}?labelSelector=w%3D1")
    rv = listed["metadata"]["resourceVersion"]
    url = f"{rest.base}{PODS}?watch=true&labelSelector=w%3D1&resourceVersion={rv}"
    async with rest.session.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/json"
        _, created, _ = await rest.call("POST", PODS, pod("watched", w="1"))
        created["metadata"]["labels"]["more"] = "y"
        await rest.call("PUT", f"{PODS}/watched", created)
        await rest.call("DELETE", f"{PODS}/watched?gracePeriodSeconds=0")
        events = await read_events(resp, 3)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert all(e["object"]["kind"] == "Pod" for e in events)
    # Resume after the first event: exactly the rest, nothing repeated.
    first_rv = events[0]["object"]["metadata"]["resourceVersion"]
    url = f"{rest.base}{PODS}?watch=1&labelSelector=w%3D1&resourceVersion={first_rv}"
    async with rest.session.get(url) as resp:
        resumed = await read_events(resp, 2)
    assert [e["type"] for e in resumed] == ["MODIFIED", "DELETED"]


async def test_watch_too_old_is_an_error_event(rest: Rest) -> None:
    server = rest.running.server
    await rest.call("POST", PODS, pod("old-1"))
    revision = await server.compact()
    await rest.call("POST", PODS, pod("old-2"))
    url = f"{rest.base}{PODS}?watch=1&resourceVersion={revision - 1}"
    async with rest.session.get(url) as resp:
        assert resp.status == 200
        events = await read_events(resp, 1)
    assert events[0]["type"] == "ERROR"
    err = events[0]["object"]
    assert (err["kind"], err["code"], err["reason"]) == ("Status", 410, "Expired")
    assert err["message"].startswith("too old resource version")


async def test_watch_timeout_and_initial_state(rest: Rest) -> None:
    await rest.call("POST", PODS, pod("initial", initial="y"))
    url = f"{rest.base}{PODS}?watch=1&labelSelector=initial&timeoutSeconds=1"
    async with rest.session.get(url) as resp:
        raw = await asyncio.wait_for(resp.read(), 10)  # the stream ends by itself
    events = [json.loads(line) for line in raw.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "initial")]


async def test_watch_list_protocol(rest: Rest) -> None:
    """client-go's WatchListClient (on by default in kubectl 1.37): initial state, then a
    bookmark annotated k8s.io/initial-events-end, then changes."""
    await rest.call("POST", PODS, pod("wl", wl="y"))
    url = (
        f"{rest.base}{PODS}?watch=1&labelSelector=wl&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5"
    )
    async with rest.session.get(url) as resp:
        events = await read_events(resp, 2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}
    code, _, _ = await rest.call("GET", f"{PODS}?watch=1&sendInitialEvents=true")
    assert code == 422


async def test_unmodeled_kinds_list_and_watch_empty(rest: Rest) -> None:
    code, body, _ = await rest.call("GET", "/apis/storage.k8s.io/v1/storageclasses")
    assert code == 200
    assert (body["kind"], body["apiVersion"], body["items"]) == (
        "StorageClassList",
        "storage.k8s.io/v1",
        [],
    )
    url = f"{rest.base}/api/v1/persistentvolumes?watch=1&timeoutSeconds=1"
    async with rest.session.get(url) as resp:
        assert resp.status == 200
        assert await asyncio.wait_for(resp.read(), 10) == b""
    url = (
        f"{rest.base}/apis/resource.k8s.io/v1/resourceslices?watch=1&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    async with rest.session.get(url) as resp:
        events = await read_events(resp, 1)
    assert events[0]["type"] == "BOOKMARK"
    code, body, _ = await rest.call("DELETE", "/apis/apps/v1/namespaces/default/statefulsets/x")
    assert code == 405 and "statefulsets" in body["message"]


async def test_rest_watchers_share_one_encoding(rest: Rest) -> None:
    cache = rest.running.server.caches["Pod"]
    urls = [f"{rest.base}{PODS}?watch=1&labelSelector=share&resourceVersion=0"] * 3
    async with (
        rest.session.get(urls[0]) as a,
        rest.session.get(urls[1]) as b,
        rest.session.get(urls[2]) as c,
    ):
        await rest.call("POST", PODS, pod("shared", share="y"))
        got = [await read_events(r, 1) for r in (a, b, c)]
    assert all(g[0]["object"]["metadata"]["name"] == "shared" for g in got)
    key = next(k for k in cache.state if k.endswith(b"/default/shared"))
    # Encoded once, kept with the window's event (not with the cached object: a LIST must not
    # leave a JSON copy of every object behind).
    event = next(e for e in cache.window if e.cur.key == key)
    assert event._main_json is not None
    assert not hasattr(cache.state[key], "_json")
    _, listed, _ = await rest.call("GET", f"{PODS}?labelSelector=share")
    assert json.loads(event._main_json)["object"] == listed["items"][0]


# ---- subresources --------------------------------------------------------------------------


async def test_binding_as_kube_scheduler_sends_it(rest: Rest) -> None:
    await rest.call("POST", "/api/v1/nodes", node("bind-node"))
    _, created, _ = await rest.call("POST", PODS, pod("bound"))
    binding = {
        "kind": "Binding",
        "apiVersion": "v1",
        "metadata": {
            "name": "bound",
            "namespace": "default",
            "uid": created["metadata"]["uid"],
            "creationTimestamp": None,
        },
        "target": {"kind": "Node", "name": "bind-node"},
    }
    code, body, _ = await rest.call("POST", f"{PODS}/bound/binding", binding)
    assert (code, body) == (
        201,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
    )
    _, got, _ = await rest.call("GET", f"{PODS}/bound")
    assert got["spec"]["nodeName"] == "bind-node"
    code, body, _ = await rest.call("POST", f"{PODS}/bound/binding", binding)
    assert code == 409 and body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on pods/binding "bound": ')
    await rest.call("POST", PODS, pod("unbound"))
    binding["metadata"] = {"name": "unbound"}
    binding["target"] = {"kind": "Node", "name": "no-such-node"}
    code, body, _ = await rest.call("POST", f"{PODS}/unbound/binding", binding)
    assert code == 404 and body["message"] == 'nodes "no-such-node" not found'


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        # A metadata that is not an object was a 500 AttributeError.
        (True, "metadata: expected an object, got true"),
        ("bound", 'metadata: expected an object, got "bound"'),
        (5, "metadata: expected an object, got 5"),
    ],
)
async def test_binding_with_malformed_metadata_is_400(
    rest: Rest, metadata: Any, message: str
) -> None:
    binding = {"kind": "Binding", "metadata": metadata, "target": {"kind": "Node", "name": "n"}}
    code, body, _ = await rest.call("POST", f"{PODS}/bad-binding/binding", binding)
    assert (code, body["reason"], body["message"]) == (
        400,
        "BadRequest",
        f'Binding in version "v1" cannot be handled as a Binding: {message}',
    )


async def test_status_subresource(rest: Rest) -> None:
    _, created, _ = await rest.call("POST", PODS, pod("st"))
    created["status"] = {"phase": "Running"}
    created["spec"]["containers"][0]["image"] = "ignored"
    code, body, _ = await rest.call("PUT", f"{PODS}/st/status", created)
    assert code == 200
    assert body["status"]["phase"] == "Running"
    assert body["spec"]["containers"][0]["image"] == "busybox"  # status writes keep the spec
    code, body, _ = await rest.call("GET", f"{PODS}/st/status")
    assert code == 200 and body["status"]["phase"] == "Running"


async def test_scale_subresource(rest: Rest) -> None:
    await rest.call("POST", RS, replica_set("scaled", 2))
    code, scale, _ = await rest.call("GET", f"{RS}/scaled/scale")
    assert code == 200
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"]["selector"] == "app=scaled"
    scale["spec"]["replicas"] = 5
    code, scale, _ = await rest.call("PUT", f"{RS}/scaled/scale", scale)
    assert code == 200 and scale["spec"]["replicas"] == 5
    _, rs, _ = await rest.call("GET", f"{RS}/scaled")
    assert rs["spec"]["replicas"] == 5
    scale["spec"]["replicas"] = -1
    code, body, _ = await rest.call("PUT", f"{RS}/scaled/scale", scale)
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.replicas"


@pytest.mark.parametrize(
    ("content_type", "patch"),
    [
        ("application/merge-patch+json", {"metadata": {"labels": {"patched": "yes"}}}),
        ("application/strategic-merge-patch+json", {"metadata": {"labels": {"patched": "yes"}}}),
        (
            "application/json-patch+json",
            [{"op": "add", "path": "/metadata/labels/patched", "value": "yes"}],
        ),
    ],
)
async def test_patch(rest: Rest, content_type: str, patch: Any) -> None:
    name = "patch-" + content_type.split("/")[1].split("+")[0]
    await rest.call("POST", PODS, pod(name, app="x"))
    code, body, _ = await rest.call(
        "PATCH", f"{PODS}/{name}", patch, {"Content-Type": content_type}
    )
    assert code == 200, body
    assert body["metadata"]["labels"] == {"app": "x", "patched": "yes"}


@pytest.mark.parametrize(
    ("method", "body", "content_type", "message"),
    [
        # A spec or metadata that is not an object was a 500 AttributeError.
        (
            "PUT",
            {"kind": "Scale", "spec": "3"},
            "application/json",
            'Scale in version "v1" cannot be handled as a Scale: spec: expected an object, got "3"',
        ),
        (
            "PATCH",
            {"spec": [3]},
            "application/merge-patch+json",
            'Scale in version "v1" cannot be handled as a Scale: spec: expected an object, got [3]',
        ),
        (
            "PATCH",
            {"metadata": "x"},
            "application/strategic-merge-patch+json",
            'Scale in version "v1" cannot be handled as a Scale: metadata: expected an object, '
            'got "x"',
        ),
    ],
)
async def test_scale_with_a_malformed_body_is_400(
    rest: Rest, method: str, body: dict[str, Any], content_type: str, message: str
) -> None:
    await rest.call("POST", RS, replica_set("scale-bad"))
    code, answer, _ = await rest.call(
        method, f"{RS}/scale-bad/scale", body, {"Content-Type": content_type}
    )
    assert (code, answer["reason"], answer["message"]) == (400, "BadRequest", message)


async def test_scale_by_merge_patch(rest: Rest) -> None:
    await rest.call("POST", RS, replica_set("kscale", 1))
    code, body, _ = await rest.call(
        "PATCH",
        f"{RS}/kscale/scale",
        {"spec": {"replicas": 3}},
        {"Content-Type": "application/merge-patch+json"},
    )
    assert code == 200 and body["spec"]["replicas"] == 3


async def test_patch_with_unknown_type_is_415(rest: Rest) -> None:
    await rest.call("POST", PODS, pod("patch-415"))
    code, body, _ = await rest.call(
        "PATCH", f"{PODS}/patch-415", b"{}", {"Content-Type": "application/json"}
    )
    assert code == 415 and body["reason"] == "UnsupportedMediaType"
