"""Admission webhooks with the real kubectl against `tinykube up`: configurations applied from
YAML, a mutating webhook injecting a label into pods, a validating one refusing some with
kube's message, warnings on kubectl's stderr, and a server-side dry run.

The webhook server is an aiohttp HTTPS server on its own event loop in a thread of the test
process, with a CA and certificate of its own (tinykube.pki, made with `cryptography`); the
apiserver, a separate process, reaches it at https://127.0.0.1:<port> and verifies it with
the caBundle of the configurations. A configuration takes effect once the apiserver's watch
cache has it, so each test first waits until a server-side dry run shows its effect.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until
from tinykube.pki import PKI, CertSpec

pytestmark = pytest.mark.e2e


@dataclass
class Server:
    url: str
    ca_b64: str


def _patch(ops: list[dict[str, Any]]) -> str:
    return base64.b64encode(json.dumps(ops).encode()).decode()


async def _handle(request: web.Request) -> web.Response:
    review = await request.json()
    req = review["request"]
    response: dict[str, Any] = {"uid": req["uid"], "allowed": True}
    if request.path == "/label":
        labels = (req["object"].get("metadata") or {}).get("labels")
        ops = [] if labels else [{"op": "add", "path": "/metadata/labels", "value": {}}]
        ops.append({"op": "add", "path": "/metadata/labels/injected", "value": "by-webhook"})
        response.update(patchType="JSONPatch", patch=_patch(ops))
    elif request.path == "/deny" and req["name"].startswith("forbidden-"):
        response.update(
            allowed=False,
            status={"code": 403, "reason": "Forbidden", "message": "forbidden-* pods are refused"},
        )
    elif request.path == "/warn":
        response["warnings"] = ["pods here are checked by warn.example.com"]
    body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}
    return web.json_response(body)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pki = PKI(tmp_path_factory.mktemp("webhook-pki"))
    spec = CertSpec("webhook", "webhook", ip_addresses=("127.0.0.1",), server=True)
    paths = pki.ensure_all([spec])["webhook"]
    ca = Path(pki.ca_cert_path).read_bytes()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    state: dict[str, Any] = {}

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", _handle)
        runner = web.AppRunner(app)
        await runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(paths.cert, paths.key)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        state["runner"] = runner
        state["port"] = runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30), "the webhook server did not start"
    try:
        yield Server(f"https://127.0.0.1:{state['port']}", base64.b64encode(ca).decode())
    finally:
        asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def configuration(
    kind: str, name: str, hook: str, server: Server, path: str, extra: str = ""
) -> str:
    return f"""
apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata:
  name: {name}
webhooks:
- name: {hook}
  clientConfig:
    url: {server.url}{path}
    caBundle: {server.ca_b64}
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["pods"]
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 5
{extra}"""


def pod(name: str, label: str = "") -> str:
    labels = f"\n  labels: {{{label}}}" if label else ""
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}{labels}
spec:
  containers:
  - name: main
    image: busybox
    command: [sleep, "3600"]
"""


def test_a_mutating_webhook_injects_a_label(tinykube_up: UpCluster, server: Server) -> None:
    manifest = configuration(
        "MutatingWebhookConfiguration",
        "inject-label",
        "label.example.com",
        server,
        "/label",
        '  objectSelector: {matchLabels: {inject: "yes"}}',
    )
    assert ok(tinykube_up.kubectl("apply", "-f", "-", stdin=manifest)) == (
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/inject-label created\n"
    )
    # Applied again with a change: kubectl's three-way strategic merge (webhooks by name).
    changed = manifest.replace("timeoutSeconds: 5", "timeoutSeconds: 7")
    assert ok(tinykube_up.kubectl("apply", "-f", "-", stdin=changed)) == (
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/inject-label configured\n"
    )
    timeout = tinykube_up.kubectl(
        "get",
        "mutatingwebhookconfiguration",
        "inject-label",
        "-o",
        "jsonpath={.webhooks[0].timeoutSeconds}",
    )
    assert ok(timeout) == "7"
    listed = ok(tinykube_up.kubectl("get", "mutatingwebhookconfigurations"))
    header, row = listed.splitlines()[:2]
    assert header.split() == ["NAME", "WEBHOOKS", "AGE"]
    assert row.split()[:2] == ["inject-label", "1"]

    def injected() -> bool:
        result = tinykube_up.kubectl(
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
            stdin=pod("probe", "inject: 'yes'"),
        )
        return (
            result.code == 0
            and json.loads(result.out)["metadata"]["labels"].get("injected") == "by-webhook"
        )

    until(injected, "the mutating webhook to take effect")
    assert ok(tinykube_up.kubectl("apply", "-f", "-", stdin=pod("mutated", "inject: 'yes'"))) == (
        "pod/mutated created\n"
    )
    labels = ok(tinykube_up.kubectl("get", "pod", "mutated", "-o", "jsonpath={.metadata.labels}"))
    assert json.loads(labels) == {"inject": "yes", "injected": "by-webhook"}
    # The dry run stored nothing.
    assert tinykube_up.kubectl("get", "pod", "probe").code == 1
    ok(tinykube_up.kubectl("delete", "mutatingwebhookconfiguration", "inject-label"))


def test_a_validating_webhook_refuses_and_warns(tinykube_up: UpCluster, server: Server) -> None:
    deny = configuration(
        "ValidatingWebhookConfiguration", "deny-forbidden", "deny.example.com", server, "/deny"
    )
    warn = configuration(
        "ValidatingWebhookConfiguration",
        "warn-pods",
        "warn.example.com",
        server,
        "/warn",
        '  objectSelector: {matchLabels: {warn: "yes"}}',
    )
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=deny + "---" + warn))

    def refused() -> Any:
        result = tinykube_up.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=pod("forbidden-probe")
        )
        return result if result.code == 1 and "denied the request" in result.err else None

    until(refused, "the validating webhook to take effect")
    refusal = tinykube_up.kubectl("create", "-f", "-", stdin=pod("forbidden-1"))
    assert refusal.code == 1
    assert refusal.err == (
        'Error from server (Forbidden): error when creating "STDIN": admission webhook '
        '"deny.example.com" denied the request: forbidden-* pods are refused\n'
    )

    def warned() -> Any:
        result = tinykube_up.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=pod("warn-probe", "warn: 'yes'")
        )
        return result if "Warning:" in result.err else None

    until(warned, "the warning webhook to take effect")
    created = tinykube_up.kubectl("create", "-f", "-", stdin=pod("warned", "warn: 'yes'"))
    assert created.code == 0, created.err
    assert created.out == "pod/warned created\n"
    assert created.err == "Warning: pods here are checked by warn.example.com\n"
    ok(
        tinykube_up.kubectl(
            "delete", "validatingwebhookconfiguration", "deny-forbidden", "warn-pods"
        )
    )
