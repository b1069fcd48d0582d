"""Admission webhooks against a real apiserver on a real etcd: an in-process aiohttp HTTPS
webhook server with its own CA (made with tinykube.pki, i.e. `cryptography`), configured by
Mutating- and ValidatingWebhookConfigurations written over REST.

Each test writes its configurations, waits until the apiserver's caches hold them (a
condition, as the webhook plugins of kube-apiserver also see configurations through
informers), then checks what a write answers and what the webhook received.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import ssl
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web
from google.protobuf import json_format

from tests.integration.conftest import Rest, rest_apiserver, until
from tinykube.client import Client
from tinykube.errors import ForbiddenError, InvalidError
from tinykube.localetcd import EtcdServer
from tinykube.pki import PKI, CertSpec
from tinykube.v1 import admissionregistration_pb2, pod_pb2, pod_pb2_grpc

pytestmark = pytest.mark.integration

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


@dataclass
class Hooks:
    """The test webhook server: what it received, per path, and how it answers."""

    url: str
    ca: bytes
    received: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def requests(self, path: str) -> list[dict[str, Any]]:
        return self.received.get(path, [])


def _patch(ops: list[dict[str, Any]]) -> str:
    return base64.b64encode(json.dumps(ops).encode()).decode()


def _answer(path: str, request: dict[str, Any]) -> dict[str, Any]:
    uid = request["uid"]
    if path == "/label":
        obj = request["object"]
        ops: list[dict[str, Any]] = []
        if not (obj.get("metadata") or {}).get("labels"):
            ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
        ops.append({"op": "add", "path": "/metadata/labels/injected", "value": "yes"})
        return {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": _patch(ops)}
    if path == "/annotate-if-labelled":
        # Adds an annotation only once the label is there (reinvocation's test).
        labels = (request["object"].get("metadata") or {}).get("labels") or {}
        if "injected" not in labels:
            return {"uid": uid, "allowed": True}
        ops = [
            {"op": "add", "path": "/metadata/annotations", "value": {"seen-label": "yes"}},
        ]
        return {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": _patch(ops)}
    if path == "/drop-defaults":
        # Removes defaulted fields: the server defaults what a mutating webhook made again.
        obj = request["object"]
        ops = []
        if "restartPolicy" in obj.get("spec", {}):
            ops.append({"op": "remove", "path": "/spec/restartPolicy"})
        if "size" in obj.get("spec", {}):
            ops.append({"op": "remove", "path": "/spec/size"})
        return {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": _patch(ops)}
    if path == "/deny":
        return {
            "uid": uid,
            "allowed": False,
            "status": {
                "code": 403,
                "reason": "Forbidden",
                "message": "pods named bad-* are refused",
            },
        }
    if path == "/deny-plain":
        return {"uid": uid, "allowed": False}
    if path == "/warn":
        return {
            "uid": uid,
            "allowed": True,
            "warnings": ["this pod is watched by a webhook"],
            "auditAnnotations": {"checked": "true"},
        }
    if path == "/wrong-uid":
        return {"uid": "not-" + uid, "allowed": True}
    return {"uid": uid, "allowed": True}


@pytest.fixture(scope="module")
async def hooks(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Hooks]:
    pki = PKI(tmp_path_factory.mktemp("webhook-pki"))
    spec = CertSpec(
        "webhook",
        "webhook",
        dns_names=("localhost", "hooks.webhooks.svc"),
        ip_addresses=("127.0.0.1",),
        server=True,
    )
    paths = pki.ensure_all([spec])["webhook"]
    received: dict[str, list[dict[str, Any]]] = {}
    ca = await asyncio.to_thread(Path(pki.ca_cert_path).read_bytes)
    state = Hooks(url="", ca=ca, received=received)

    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        received.setdefault(request.path, []).append(review)
        if request.path == "/slow":
            await state.release.wait()
        body = {
            "apiVersion": review["apiVersion"],
            "kind": "AdmissionReview",
            "response": _answer(request.path, review["request"]),
        }
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(paths.cert, paths.key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    state.url = f"https://127.0.0.1:{port}"
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()


@pytest.fixture(scope="module")
async def rest(etcd_server: EtcdServer) -> AsyncIterator[Rest]:
    async with rest_apiserver(etcd_server) as rest:
        yield rest


def webhook(name: str, hooks: Hooks, path: str, **extra: Any) -> dict[str, Any]:
    rules = extra.pop(
        "rules",
        [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
    )
    return {
        "name": name,
        "clientConfig": {
            "url": hooks.url + path,
            "caBundle": base64.b64encode(hooks.ca).decode(),
        },
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **extra,
    }


async def configure(
    rest: Rest, collection: str, name: str, *webhooks: dict[str, Any]
) -> dict[str, Any]:
    kind = (
        "MutatingWebhookConfiguration"
        if collection == MUTATING
        else ("ValidatingWebhookConfiguration")
    )
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": list(webhooks),
    }
    status, created, _ = await rest.call("POST", collection, body)
    assert status == 201, created
    assert isinstance(created, dict)
    dispatcher = rest.running.server.webhooks
    names = {w["name"] for w in webhooks}
    mutating = collection == MUTATING
    await until(lambda: names <= {h.name for h in dispatcher.hooks(mutating)})
    return created


async def unconfigure(rest: Rest, collection: str, name: str) -> None:
    status, body, _ = await rest.call("DELETE", f"{collection}/{name}")
    assert status == 200, body
    dispatcher = rest.running.server.webhooks
    mutating = collection == MUTATING
    await until(lambda: all(h.config != name for h in dispatcher.hooks(mutating)))


def pod(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def pods(namespace: str = "default") -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


# ---- the configurations themselves ----------------------------------------------------------


async def test_configuration_gets_kube_defaults_and_prints_its_webhook_count(
    rest: Rest, hooks: Hooks
) -> None:
    created = await configure(
        rest, VALIDATING, "defaults", webhook("defaults.example.com", hooks, "/allow")
    )
    (hook,) = created["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["timeoutSeconds"] == 10
    assert hook["namespaceSelector"] == {}
    assert hook["objectSelector"] == {}
    assert hook["rules"][0]["scope"] == "*"
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == hooks.ca
    async with rest.session.get(
        rest.base + VALIDATING + "/defaults",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    ) as r:
        table = await r.json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Webhooks", "Age"]
    assert table["rows"][0]["cells"][:2] == ["defaults", 1]
    await unconfigure(rest, VALIDATING, "defaults")


async def test_invalid_configuration_is_refused_naming_the_fields(rest: Rest, hooks: Hooks) -> None:
    bad = webhook("short", hooks, "/allow", timeoutSeconds=31)
    del bad["sideEffects"]
    bad["clientConfig"]["url"] = "http://user@127.0.0.1/x?q=1"
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bad"},
        "webhooks": [
            bad,
            webhook("dup.example.com", hooks, "/a"),
            webhook("dup.example.com", hooks, "/b"),
        ],
    }
    status, answer, _ = await rest.call("POST", VALIDATING, body)
    assert status == 422, answer
    fields = {c["field"]: c["message"] for c in answer["details"]["causes"]}
    assert fields["webhooks[0].name"].startswith('Invalid value: "short": should be a domain')
    assert fields["webhooks[0].sideEffects"].startswith("Required value")
    assert "between 1 and 30 seconds" in fields["webhooks[0].timeoutSeconds"]
    assert "webhooks[0].clientConfig.url" in fields
    assert fields["webhooks[2].name"] == 'Duplicate value: "dup.example.com"'
    assert answer["message"].startswith(
        'ValidatingWebhookConfiguration.admissionregistration.k8s.io "bad" is invalid'
    )


# ---- mutating ---------------------------------------------------------------------------------


async def test_mutating_webhook_injects_a_label(rest: Rest, hooks: Hooks) -> None:
    await configure(rest, MUTATING, "inject", webhook("label.example.com", hooks, "/label"))
    try:
        status, created, _ = await rest.call("POST", pods(), pod("mutated"))
        assert status == 201, created
        assert created["metadata"]["labels"] == {"injected": "yes"}
        review = hooks.requests("/label")[-1]
        # The webhook saw the object before the server-owned metadata was set.
        assert "uid" not in review["request"]["object"]["metadata"]
        assert created["metadata"]["uid"]
        assert review["apiVersion"] == "admission.k8s.io/v1"
        req = review["request"]
        assert req["operation"] == "CREATE"
        assert req["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
        assert req["resource"] == {"group": "", "version": "v1", "resource": "pods"}
        assert req["name"] == "mutated" and req["namespace"] == "default"
        assert req["oldObject"] is None and req["dryRun"] is False
        assert req["options"]["kind"] == "CreateOptions"
        status, stored, _ = await rest.call("GET", pods() + "/mutated")
        assert stored["metadata"]["labels"] == {"injected": "yes"}
        assert created["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        # A generated name is made after the mutating webhooks, on what they made.
        generated = pod("")
        generated["metadata"] = {"generateName": "gen-"}
        status, made, _ = await rest.call("POST", pods(), generated)
        assert status == 201, made
        assert made["metadata"]["name"].startswith("gen-")
        assert made["metadata"]["resourceVersion"]
        assert made["metadata"]["labels"] == {"injected": "yes"}
    finally:
        await unconfigure(rest, MUTATING, "inject")


async def test_mutating_webhooks_see_the_kinds_defaults_and_the_server_defaults_again(
    rest: Rest, hooks: Hooks
) -> None:
    """kube-apiserver defaults a body as it decodes it, so a mutating webhook sees the pod's
    defaults; what the webhook removes is defaulted again before validation."""
    await configure(
        rest, MUTATING, "defaults", webhook("drop.example.com", hooks, "/drop-defaults")
    )
    try:
        status, created, _ = await rest.call("POST", pods(), pod("defaulted"))
        assert status == 201, created
        seen = hooks.requests("/drop-defaults")[-1]["request"]["object"]
        spec = seen["spec"]
        assert spec["restartPolicy"] == "Always"
        assert spec["dnsPolicy"] == "ClusterFirst"
        assert spec["terminationGracePeriodSeconds"] == 30
        assert spec["securityContext"] == {}
        container = spec["containers"][0]
        assert container["imagePullPolicy"] == "Always"
        assert container["terminationMessagePath"] == "/dev/termination-log"
        # Admission plugins before the webhooks ran too (ServiceAccount), PrepareForCreate not.
        assert spec["serviceAccountName"] == "default"
        assert "uid" not in seen["metadata"] and not seen.get("status")
        # The webhook removed restartPolicy; the stored pod has it again.
        assert created["spec"]["restartPolicy"] == "Always"
        # An update's body is defaulted too before the webhooks see it.
        await configure(
            rest,
            MUTATING,
            "defaults-update",
            webhook(
                "update.example.com",
                hooks,
                "/allow-update",
                rules=[
                    {
                        "operations": ["UPDATE"],
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "resources": ["deployments"],
                    }
                ],
            ),
        )
        deployment: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "defaulted", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
                },
            },
        }
        path = "/apis/apps/v1/namespaces/default/deployments"
        status, made, _ = await rest.call("POST", path, deployment)
        assert status == 201, made
        deployment["metadata"]["resourceVersion"] = made["metadata"]["resourceVersion"]
        status, updated, _ = await rest.call("PUT", f"{path}/defaulted", deployment)
        assert status == 200, updated
        seen = hooks.requests("/allow-update")[-1]["request"]["object"]
        assert seen["spec"]["replicas"] == 1
        assert seen["spec"]["strategy"]["type"] == "RollingUpdate"
        template = seen["spec"]["template"]["spec"]
        assert template["restartPolicy"] == "Always"
        assert template["containers"][0]["imagePullPolicy"] == "IfNotPresent"
        await rest.call("DELETE", f"{path}/defaulted")
        await unconfigure(rest, MUTATING, "defaults-update")
    finally:
        await unconfigure(rest, MUTATING, "defaults")


async def test_mutating_webhooks_see_a_custom_objects_schema_defaults(
    rest: Rest, hooks: Hooks
) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.hooks.example.com"},
        "spec": {
            "group": "hooks.example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "size": {"type": "integer", "default": 3},
                                        "colour": {"type": "string"},
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    status, body, _ = await rest.call(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
    )
    assert status == 201, body
    gadgets = "/apis/hooks.example.com/v1/namespaces/default/gadgets"
    async with asyncio.timeout(30):
        while (await rest.call("GET", gadgets))[0] != 200:  # noqa: ASYNC110 (polls the API until it serves the new kind)
            await asyncio.sleep(0.05)
    rules = [
        {
            "operations": ["CREATE"],
            "apiGroups": ["hooks.example.com"],
            "apiVersions": ["v1"],
            "resources": ["gadgets"],
        }
    ]
    await configure(
        rest,
        MUTATING,
        "gadgets",
        webhook("gadget.example.com", hooks, "/drop-defaults", rules=rules),
    )
    try:
        gadget = {
            "apiVersion": "hooks.example.com/v1",
            "kind": "Gadget",
            "metadata": {"name": "g1"},
            "spec": {"colour": "red", "unknown": "pruned"},
        }
        status, created, _ = await rest.call("POST", gadgets, gadget)
        assert status == 201, created
        seen = hooks.requests("/drop-defaults")[-1]["request"]["object"]
        # Pruned and defaulted as the body was decoded.
        assert seen["spec"] == {"colour": "red", "size": 3}
        # The webhook removed size; the schema's default is applied again after it.
        assert created["spec"] == {"colour": "red", "size": 3}
    finally:
        await unconfigure(rest, MUTATING, "gadgets")
        await rest.call(
            "DELETE",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.hooks.example.com",
        )


async def test_reinvocation_runs_an_if_needed_webhook_again(rest: Rest, hooks: Hooks) -> None:
    # "a-annotate" sorts first: it sees no label, then "b-label" adds one, and the IfNeeded
    # policy calls "a-annotate" again, which now annotates.
    await configure(
        rest,
        MUTATING,
        "a-annotate",
        webhook(
            "annotate.example.com",
            hooks,
            "/annotate-if-labelled",
            reinvocationPolicy="IfNeeded",
        ),
    )
    await configure(rest, MUTATING, "b-label", webhook("label.example.com", hooks, "/label"))
    try:
        status, created, _ = await rest.call("POST", pods(), pod("reinvoked"))
        assert status == 201, created
        assert created["metadata"]["labels"] == {"injected": "yes"}
        assert created["metadata"]["annotations"] == {"seen-label": "yes"}
    finally:
        await unconfigure(rest, MUTATING, "a-annotate")
        await unconfigure(rest, MUTATING, "b-label")


# ---- validating -------------------------------------------------------------------------------


async def test_validating_webhook_refuses_with_kube_message_and_code(
    rest: Rest, hooks: Hooks
) -> None:
    await configure(
        rest,
        VALIDATING,
        "deny",
        webhook("deny.example.com", hooks, "/deny", objectSelector={"matchLabels": {"app": "bad"}}),
        webhook(
            "plain.example.com",
            hooks,
            "/deny-plain",
            objectSelector={"matchLabels": {"app": "plain"}},
        ),
    )
    try:
        status, body, _ = await rest.call("POST", pods(), pod("bad-1", app="bad"))
        assert status == 403, body
        assert body["message"] == (
            'admission webhook "deny.example.com" denied the request: pods named bad-* are refused'
        )
        assert body["reason"] == "Forbidden"
        registry = rest.running.server.metrics.registry
        labels = {
            "name": "deny.example.com",
            "type": "validating",
            "operation": "CREATE",
            "error_type": "no_error",
            "rejection_code": "403",
        }
        assert (
            registry.get_sample_value("apiserver_admission_webhook_rejection_count_total", labels)
            == 1.0
        )
        assert (
            registry.get_sample_value(
                "apiserver_admission_webhook_admission_duration_seconds_count",
                {
                    "name": "deny.example.com",
                    "type": "validating",
                    "operation": "CREATE",
                    "rejected": "true",
                },
            )
            == 1.0
        )
        status, body, _ = await rest.call("POST", pods(), pod("plain-1", app="plain"))
        assert status == 400, body
        assert body["message"] == (
            'admission webhook "plain.example.com" denied the request without explanation'
        )
        # objectSelector: a pod without the label is not sent to either.
        before = len(hooks.requests("/deny"))
        status, body, _ = await rest.call("POST", pods(), pod("other", app="good"))
        assert status == 201, body
        assert len(hooks.requests("/deny")) == before
        status, _, _ = await rest.call("GET", pods() + "/bad-1")
        assert status == 404
    finally:
        await unconfigure(rest, VALIDATING, "deny")


async def test_validating_webhook_sees_updates_and_deletes(rest: Rest, hooks: Hooks) -> None:
    rules = [
        {
            "operations": ["UPDATE", "DELETE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["configmaps"],
            "scope": "Namespaced",
        }
    ]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}}
    status, _, _ = await rest.call("POST", "/api/v1/namespaces/default/configmaps", cm)
    assert status == 201
    await configure(rest, VALIDATING, "cm", webhook("cm.example.com", hooks, "/allow", rules=rules))
    try:
        cm["data"] = {"k": "v"}
        path = "/api/v1/namespaces/default/configmaps/watched"
        status, _, _ = await rest.call("PUT", path, cm)
        assert status == 200
        status, _, _ = await rest.call("DELETE", path)
        assert status == 200
        ops = [
            r["request"]
            for r in hooks.requests("/allow")
            if r["request"]["resource"]["resource"] == "configmaps"
        ]
        assert [r["operation"] for r in ops] == ["UPDATE", "DELETE"]
        assert ops[0]["oldObject"]["metadata"]["name"] == "watched"
        assert ops[0]["object"]["data"] == {"k": "v"}
        assert ops[1]["object"] is None and ops[1]["oldObject"]["data"] == {"k": "v"}
        assert ops[1]["options"]["kind"] == "DeleteOptions"
    finally:
        await unconfigure(rest, VALIDATING, "cm")


async def test_failure_policy_fail_refuses_and_ignore_survives_a_dead_webhook(
    rest: Rest, hooks: Hooks
) -> None:
    dead = webhook("dead.example.com", hooks, "/x", objectSelector={"matchLabels": {"dead": "y"}})
    dead["clientConfig"]["url"] = "https://127.0.0.1:1/x"
    await configure(rest, VALIDATING, "dead", dead)
    try:
        status, body, _ = await rest.call("POST", pods(), pod("dead-fail", dead="y"))
        assert status == 500, body
        assert body["reason"] == "InternalError"
        assert body["message"] == (
            'Internal error occurred: failed calling webhook "dead.example.com": failed to call '
            'webhook: Post "https://127.0.0.1:1/x?timeout=10s": dial tcp 127.0.0.1:1: connect: '
            "connection refused"
        )
    finally:
        await unconfigure(rest, VALIDATING, "dead")
    await configure(rest, VALIDATING, "dead-ignored", {**dead, "failurePolicy": "Ignore"})
    try:
        status, body, _ = await rest.call("POST", pods(), pod("dead-ignore", dead="y"))
        assert status == 201, body
    finally:
        await unconfigure(rest, VALIDATING, "dead-ignored")


async def test_a_webhook_past_its_timeout_fails_the_request(rest: Rest, hooks: Hooks) -> None:
    slow = webhook(
        "slow.example.com",
        hooks,
        "/slow",
        timeoutSeconds=1,
        objectSelector={"matchLabels": {"slow": "y"}},
    )
    await configure(rest, VALIDATING, "slow", slow)
    try:
        status, body, _ = await rest.call("POST", pods(), pod("slow-1", slow="y"))
        assert status == 500, body
        assert body["message"] == (
            'Internal error occurred: failed calling webhook "slow.example.com": failed to call '
            f'webhook: Post "{hooks.url}/slow?timeout=1s": context deadline exceeded'
        )
    finally:
        hooks.release.set()
        await unconfigure(rest, VALIDATING, "slow")


async def test_a_response_for_another_request_is_a_failure(rest: Rest, hooks: Hooks) -> None:
    await configure(
        rest,
        VALIDATING,
        "uid",
        webhook(
            "uid.example.com", hooks, "/wrong-uid", objectSelector={"matchLabels": {"uid": "y"}}
        ),
    )
    try:
        status, body, _ = await rest.call("POST", pods(), pod("uid-1", uid="y"))
        assert status == 500, body
        assert 'failed calling webhook "uid.example.com": expected response.uid=' in body["message"]
    finally:
        await unconfigure(rest, VALIDATING, "uid")


async def test_namespace_selector_matches_the_namespace_labels(rest: Rest, hooks: Hooks) -> None:
    for name, labels in (("guarded", {"guard": "on"}), ("open", {})):
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        status, body, _ = await rest.call("POST", "/api/v1/namespaces", ns)
        assert status == 201, body
    for name in ("guarded", "open"):
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        await rest.call("POST", f"/api/v1/namespaces/{name}/serviceaccounts", sa)
    await configure(
        rest,
        VALIDATING,
        "ns",
        webhook(
            "ns.example.com",
            hooks,
            "/deny-plain",
            namespaceSelector={"matchLabels": {"guard": "on"}},
        ),
    )
    try:
        status, body, _ = await rest.call("POST", pods("guarded"), pod("p", "guarded"))
        assert status == 400, body
        assert "ns.example.com" in body["message"]
        status, body, _ = await rest.call("POST", pods("open"), pod("p", "open"))
        assert status == 201, body
    finally:
        await unconfigure(rest, VALIDATING, "ns")


async def test_dry_run_calls_side_effect_free_webhooks_and_stores_nothing(
    rest: Rest, hooks: Hooks
) -> None:
    await configure(rest, MUTATING, "dry", webhook("label.example.com", hooks, "/label"))
    try:
        status, created, _ = await rest.call("POST", pods() + "?dryRun=All", pod("dry-1"))
        assert status == 201, created
        assert created["metadata"]["labels"] == {"injected": "yes"}
        review = hooks.requests("/label")[-1]["request"]
        assert review["dryRun"] is True
        assert review["options"]["dryRun"] == ["All"]
        status, _, _ = await rest.call("GET", pods() + "/dry-1")
        assert status == 404
    finally:
        await unconfigure(rest, MUTATING, "dry")


async def test_warnings_reach_the_client_as_warning_headers(rest: Rest, hooks: Hooks) -> None:
    await configure(rest, VALIDATING, "warn", webhook("warn.example.com", hooks, "/warn"))
    try:
        status, body, resp = await rest.call("POST", pods(), pod("warned"))
        assert status == 201, body
        assert resp.headers.getall("Warning") == ['299 - "this pod is watched by a webhook"']
    finally:
        await unconfigure(rest, VALIDATING, "warn")


async def test_match_conditions_skip_the_call_and_their_errors_follow_failure_policy(
    rest: Rest, hooks: Hooks
) -> None:
    conditions = [
        {"name": "named-ok", "expression": "object.metadata.name != 'skip-me'"},
        {
            "name": "mc-labelled",
            "expression": "has(object.metadata.labels) && 'mc' in object.metadata.labels",
        },
    ]
    await configure(
        rest,
        VALIDATING,
        "mc",
        webhook("mc.example.com", hooks, "/deny-plain", matchConditions=conditions),
        webhook(
            "mc-error.example.com",
            hooks,
            "/allow",
            failurePolicy="Ignore",
            matchConditions=[
                {"name": "broken", "expression": "object.metadata.labels['nope'] == 'x'"}
            ],
        ),
    )
    try:
        status, body, _ = await rest.call("POST", pods(), pod("skip-me", mc="y"))
        assert status == 201, body
        status, body, _ = await rest.call("POST", pods(), pod("no-label"))
        assert status == 201, body
        status, body, _ = await rest.call("POST", pods(), pod("called", mc="y"))
        assert status == 400, body
        assert body["message"].startswith('admission webhook "mc.example.com" denied')
    finally:
        await unconfigure(rest, VALIDATING, "mc")
    await configure(
        rest,
        VALIDATING,
        "mc-fail",
        webhook(
            "mc-fail.example.com",
            hooks,
            "/allow",
            matchConditions=[
                {"name": "broken", "expression": "object.metadata.labels['nope'] == 'x'"}
            ],
        ),
    )
    try:
        status, body, _ = await rest.call("POST", pods(), pod("mc-broken", a="b"))
        assert status == 500, body
        assert body["message"].startswith(
            'Internal error occurred: failed calling webhook "mc-fail.example.com": '
            "failed evaluating match condition 'broken'"
        )
    finally:
        await unconfigure(rest, VALIDATING, "mc-fail")


async def test_a_match_condition_that_does_not_compile_is_refused(rest: Rest, hooks: Hooks) -> None:
    bad = webhook(
        "cel.example.com",
        hooks,
        "/allow",
        matchConditions=[
            {"name": "a", "expression": "object.metadata.name =="},
            {"name": "a", "expression": "true"},
        ],
    )
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "bad-cel"},
        "webhooks": [bad],
    }
    status, answer, _ = await rest.call("POST", MUTATING, body)
    assert status == 422, answer
    fields = {c["field"]: c["message"] for c in answer["details"]["causes"]}
    assert fields["webhooks[0].matchConditions[0].expression"].startswith(
        'Invalid value: "object.metadata.name ==": compilation failed'
    )
    assert fields["webhooks[0].matchConditions[1].name"] == 'Duplicate value: "a"'


async def test_a_webhook_behind_a_service_is_reached_at_its_endpoints(
    rest: Rest, hooks: Hooks
) -> None:
    port = int(hooks.url.rsplit(":", 1)[1])
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "webhooks"}}
    assert (await rest.call("POST", "/api/v1/namespaces", ns))[0] == 201
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "hooks"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
    }
    status, body, _ = await rest.call("POST", "/api/v1/namespaces/webhooks/services", svc)
    assert status == 201, body
    eps = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "hooks-1", "labels": {"kubernetes.io/service-name": "hooks"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    slices = "/apis/discovery.k8s.io/v1/namespaces/webhooks/endpointslices"
    status, body, _ = await rest.call("POST", slices, eps)
    assert status == 201, body
    dispatcher = rest.running.server.webhooks
    prefix = rest.running.settings.etcd_prefix
    key = f"{prefix}/endpointslices/webhooks/hooks-1".encode()
    svc_key = f"{prefix}/services/webhooks/hooks".encode()
    await until(lambda: key in dispatcher.slices.state and svc_key in dispatcher.services.state)
    hook = webhook(
        "svc.example.com", hooks, "/label", objectSelector={"matchLabels": {"via": "svc"}}
    )
    hook["clientConfig"] = {
        "service": {"namespace": "webhooks", "name": "hooks", "path": "/label"},
        "caBundle": base64.b64encode(hooks.ca).decode(),
    }
    created = await configure(rest, MUTATING, "svc", hook)
    assert created["webhooks"][0]["clientConfig"]["service"]["port"] == 443
    try:
        status, body, _ = await rest.call("POST", pods(), pod("via-svc", via="svc"))
        assert status == 201, body
        assert body["metadata"]["labels"] == {"via": "svc", "injected": "yes"}
    finally:
        await unconfigure(rest, MUTATING, "svc")


async def test_warnings_reach_a_grpc_client_as_trailing_metadata(rest: Rest, hooks: Hooks) -> None:
    await configure(rest, VALIDATING, "warn-grpc", webhook("warn.example.com", hooks, "/warn"))
    channel = grpc.aio.insecure_channel(rest.running.address)
    try:
        stub = pod_pb2_grpc.PodsStub(channel)
        msg = pod_pb2.Pod()
        msg.metadata.name = "warned-grpc"
        msg.metadata.namespace = "default"
        msg.spec.containers.add(name="c", image="busybox")
        call = stub.Create(pod_pb2.CreatePodRequest(pod=msg))
        created = await call
        assert created.metadata.uid
        trailing = await call.trailing_metadata()
        assert ("warning", "this pod is watched by a webhook") in list(trailing or ())
    finally:
        await channel.close()
        await unconfigure(rest, VALIDATING, "warn-grpc")


async def test_binding_and_eviction_are_creates_of_pod_subresources(
    rest: Rest, hooks: Hooks
) -> None:
    rules = [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods/binding", "pods/eviction"],
        }
    ]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sub-node"}}
    assert (await rest.call("POST", "/api/v1/nodes", node))[0] == 201
    status, body, _ = await rest.call("POST", pods(), pod("sub-1"))
    assert status == 201, body
    await configure(
        rest, VALIDATING, "subs", webhook("subs.example.com", hooks, "/allow", rules=rules)
    )
    try:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "sub-1"},
            "target": {"kind": "Node", "name": "sub-node"},
        }
        status, body, _ = await rest.call("POST", pods() + "/sub-1/binding", binding)
        assert status == 201, body
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "sub-1", "namespace": "default"},
        }
        status, body, _ = await rest.call("POST", pods() + "/sub-1/eviction", eviction)
        assert status == 201, body
        seen = [
            r["request"]
            for r in hooks.requests("/allow")
            if r["request"].get("subResource") in ("binding", "eviction")
        ]
        assert [(r["subResource"], r["kind"]) for r in seen] == [
            ("binding", {"group": "", "version": "v1", "kind": "Binding"}),
            ("eviction", {"group": "policy", "version": "v1", "kind": "Eviction"}),
        ]
        assert seen[0]["resource"] == {"group": "", "version": "v1", "resource": "pods"}
        assert seen[0]["object"]["target"]["name"] == "sub-node"
        assert seen[1]["object"]["apiVersion"] == "policy/v1"
    finally:
        await unconfigure(rest, VALIDATING, "subs")


async def test_namespaces_are_matched_by_their_own_labels_and_deletes_are_admitted(
    rest: Rest, hooks: Hooks
) -> None:
    rules = [
        {
            "operations": ["CREATE", "DELETE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["namespaces", "pods"],
        }
    ]
    await configure(
        rest,
        VALIDATING,
        "ns-own",
        webhook(
            "ns-own.example.com",
            hooks,
            "/deny-plain",
            rules=rules,
            namespaceSelector={"matchLabels": {"locked": "yes"}},
        ),
    )
    try:
        locked = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "locked-ns", "labels": {"locked": "yes"}},
        }
        status, body, _ = await rest.call("POST", "/api/v1/namespaces", locked)
        assert status == 400, body
        assert "ns-own.example.com" in body["message"]
        free: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "free-ns"},
        }
        status, body, _ = await rest.call("POST", "/api/v1/namespaces", free)
        assert status == 201, body
        # Labelled afterwards: its deletion (marking it Terminating) is refused.
        free["metadata"]["labels"] = {"locked": "yes"}
        status, body, _ = await rest.call("PUT", "/api/v1/namespaces/free-ns", free)
        assert status == 200, body
        status, body, _ = await rest.call("DELETE", "/api/v1/namespaces/free-ns")
        assert status == 400, body
        assert "ns-own.example.com" in body["message"]
        status, ns, _ = await rest.call("GET", "/api/v1/namespaces/free-ns")
        assert ns["status"]["phase"] == "Active"
    finally:
        await unconfigure(rest, VALIDATING, "ns-own")


async def test_an_eviction_is_admitted_once_as_its_create(rest: Rest, hooks: Hooks) -> None:
    rules = [
        {
            "operations": ["DELETE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
        }
    ]
    status, body, _ = await rest.call("POST", pods(), pod("evicted-1"))
    assert status == 201, body
    await configure(
        rest,
        VALIDATING,
        "no-pod-deletes",
        webhook("nodel.example.com", hooks, "/deny-plain", rules=rules),
    )
    try:
        status, body, _ = await rest.call("DELETE", pods() + "/evicted-1")
        assert status == 400, body
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "evicted-1", "namespace": "default"},
        }
        status, body, _ = await rest.call("POST", pods() + "/evicted-1/eviction", eviction)
        assert status == 201, body
    finally:
        await unconfigure(rest, VALIDATING, "no-pod-deletes")


async def test_a_ca_bundle_that_is_not_pem_fails_the_call(rest: Rest, hooks: Hooks) -> None:
    hook = webhook(
        "badca.example.com", hooks, "/allow", objectSelector={"matchLabels": {"ca": "bad"}}
    )
    hook["clientConfig"]["caBundle"] = base64.b64encode(b"not a certificate").decode()
    await configure(rest, VALIDATING, "badca", hook)
    try:
        status, body, _ = await rest.call("POST", pods(), pod("badca-1", ca="bad"))
        assert status == 500, body
        assert body["message"].startswith(
            'Internal error occurred: failed calling webhook "badca.example.com": could not get '
            "REST client: unable to load root certificates"
        )
        # Another CA than the server's: the TLS handshake fails, under failurePolicy Fail.
        other = PKI(Path(tempfile.mkdtemp(prefix="other-ca-")))
        other.ensure_all([CertSpec("x", "x", client=True)])
        hook["clientConfig"]["caBundle"] = base64.b64encode(
            other.ca_cert_path.read_bytes()
        ).decode()
        hook["name"] = "otherca.example.com"
        await unconfigure(rest, VALIDATING, "badca")
        await configure(rest, VALIDATING, "otherca", hook)
        status, body, _ = await rest.call("POST", pods(), pod("otherca-1", ca="bad"))
        assert status == 500, body
        assert "failed calling webhook" in body["message"]
        assert body["message"].endswith(
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        )
        shutil.rmtree(other.directory)
    finally:
        for name in ("badca", "otherca"):
            if (await rest.call("GET", f"{VALIDATING}/{name}"))[0] == 200:
                await unconfigure(rest, VALIDATING, name)


async def test_configurations_over_grpc_with_the_typed_client(rest: Rest, hooks: Hooks) -> None:
    config = admissionregistration_pb2.ValidatingWebhookConfiguration()
    json_format.ParseDict(
        {
            "metadata": {"name": "grpc-made"},
            "webhooks": [webhook("grpc.example.com", hooks, "/allow")],
        },
        config,
    )
    async with Client(rest.running.address, timeout=10.0) as client:
        made = await client.validating_webhook_configurations.create(config)
        assert made.webhooks[0].failurePolicy == "Fail"
        assert made.webhooks[0].timeoutSeconds == 10
        listed = await client.validating_webhook_configurations.list()
        assert "grpc-made" in {c.metadata.name for c in listed.items}
        config.webhooks[0].sideEffects = "Unknown"
        config.metadata.name = "grpc-bad"
        with pytest.raises(InvalidError) as refused:
            await client.validating_webhook_configurations.create(config)
        assert 'webhooks[0].sideEffects: Unsupported value: "Unknown"' in str(refused.value)
        await client.validating_webhook_configurations.delete("grpc-made")


async def test_updates_and_status_updates_are_mutated_and_validated(
    rest: Rest, hooks: Hooks
) -> None:
    status, created, _ = await rest.call("POST", pods(), pod("upd-1", phase="one"))
    assert status == 201, created
    update_rules = [
        {
            "operations": ["UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods", "pods/status"],
        }
    ]
    await configure(
        rest,
        MUTATING,
        "upd",
        webhook(
            "upd.example.com",
            hooks,
            "/label",
            rules=update_rules,
            objectSelector={"matchLabels": {"phase": "two"}},
        ),
    )
    try:
        created["metadata"]["labels"]["phase"] = "two"
        status, updated, _ = await rest.call("PUT", pods() + "/upd-1", created)
        assert status == 200, updated
        assert updated["metadata"]["labels"] == {"phase": "two", "injected": "yes"}
        req = hooks.requests("/label")[-1]["request"]
        assert req["operation"] == "UPDATE" and "subResource" not in req
        assert req["oldObject"]["metadata"]["labels"] == {"phase": "one"}
        assert req["options"]["kind"] == "UpdateOptions"
        updated["status"] = {"phase": "Pending", "message": "from a test"}
        status, body, _ = await rest.call("PUT", pods() + "/upd-1/status", updated)
        assert status == 200, body
        req = hooks.requests("/label")[-1]["request"]
        assert req["subResource"] == "status"
        assert req["requestSubResource"] == "status"
    finally:
        await unconfigure(rest, MUTATING, "upd")


async def test_a_refusal_over_grpc_carries_the_webhooks_code(rest: Rest, hooks: Hooks) -> None:
    await configure(
        rest,
        VALIDATING,
        "deny-grpc",
        webhook("deny.example.com", hooks, "/deny", objectSelector={"matchLabels": {"app": "bad"}}),
    )
    try:
        msg = pod_pb2.Pod()
        msg.metadata.name = "bad-grpc"
        msg.metadata.namespace = "default"
        msg.metadata.labels["app"] = "bad"
        msg.spec.containers.add(name="c", image="busybox")
        async with Client(rest.running.address, timeout=10.0) as client:
            with pytest.raises(ForbiddenError) as refused:
                await client.pods.create(msg)
        assert str(refused.value) == (
            'admission webhook "deny.example.com" denied the request: pods named bad-* are refused'
        )
    finally:
        await unconfigure(rest, VALIDATING, "deny-grpc")
