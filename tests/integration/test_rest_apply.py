"""Server-side apply and managed fields over REST, against a real apiserver on a real etcd, and
`kubectl apply --server-side` with the real kubectl binary.

Apply creating an object, re-applying it changed, a field the manager stops applying removed,
two managers sharing and fighting over fields (409 with Kubernetes' message and causes), force
taking ownership, the managedFields entries other writes record, and the PatchOptions errors.
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
import pytest

from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.localetcd import EtcdServer

pytestmark = pytest.mark.integration

APPLY = {"Content-Type": "application/apply-patch+yaml"}
RS = "/apis/apps/v1/namespaces/default/replicasets"
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


class Rest:
    def __init__(self, running: RunningAPIServer, session: aiohttp.ClientSession) -> None:
        self.running = running
        self.session = session
        self.base = f"http://{running.server.rest_address}"

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = body if isinstance(body, str) or body is None else json.dumps(body)
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as r:
            return r.status, json.loads(await r.read())

    async def apply(self, name: str, config: Any, query: str) -> tuple[int, Any]:
        return await self.call("PATCH", f"{RS}/{name}?{query}", config, APPLY)


@pytest.fixture(scope="module")
async def rest(etcd_server: EtcdServer) -> AsyncIterator[Rest]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    session = aiohttp.ClientSession()
    try:
        yield Rest(running, session)
    finally:
        await session.close()
        await running.server.stop()


def rs_config(name: str, *, replicas: int | None = 2, image: str = "nginx", **labels: str) -> Any:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": {"app": name, **labels}},
        "spec": spec,
    }


def entries(obj: Any) -> dict[tuple[str, str], Any]:
    return {(e["manager"], e["operation"]): e for e in obj["metadata"].get("managedFields", [])}


async def test_apply_creates_updates_and_prunes(rest: Rest) -> None:
    code, created = await rest.apply("a1", rs_config("a1", tier="web"), "fieldManager=alice")
    assert code == 201, created
    assert created["spec"]["replicas"] == 2
    [entry] = created["metadata"]["managedFields"]
    assert entry["manager"] == "alice" and entry["operation"] == "Apply"
    assert entry["apiVersion"] == "apps/v1" and entry["fieldsType"] == "FieldsV1"
    assert entry["time"].endswith("Z")
    assert entry["fieldsV1"]["f:metadata"] == {"f:labels": {"f:app": {}, "f:tier": {}}}
    assert entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"] == {
        'k:{"name":"c"}': {".": {}, "f:image": {}, "f:name": {}}
    }
    # Re-applied changed, without the tier label: the label goes, the image changes.
    code, updated = await rest.apply("a1", rs_config("a1", image="nginx:2"), "fieldManager=alice")
    assert code == 200, updated
    assert updated["metadata"]["labels"] == {"app": "a1"}
    assert updated["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    # The same configuration again changes nothing: same resourceVersion.
    code, again = await rest.apply("a1", rs_config("a1", image="nginx:2"), "fieldManager=alice")
    assert code == 200
    assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


async def test_two_managers_conflict_and_force(rest: Rest) -> None:
    code, _ = await rest.apply("a2", rs_config("a2", replicas=2), "fieldManager=alice")
    assert code == 201
    # bob applies the same replicas: shared ownership, no conflict.
    bob = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "a2"}}
    code, shared = await rest.apply("a2", {**bob, "spec": {"replicas": 2}}, "fieldManager=bob")
    assert code == 200, shared
    assert set(entries(shared)) == {("alice", "Apply"), ("bob", "Apply")}
    # bob wants 5: alice owns spec.replicas.
    code, status = await rest.apply("a2", {**bob, "spec": {"replicas": 5}}, "fieldManager=bob")
    assert code == 409, status
    assert status["reason"] == "Conflict"
    assert (
        status["message"] == 'Apply failed with 1 conflict: conflict with "alice": .spec.replicas'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "alice"',
            "field": ".spec.replicas",
        }
    ]
    code, forced = await rest.apply(
        "a2", {**bob, "spec": {"replicas": 5}}, "fieldManager=bob&force=true"
    )
    assert code == 200, forced
    assert forced["spec"]["replicas"] == 5
    alice = entries(forced)[("alice", "Apply")]["fieldsV1"]
    assert "f:replicas" not in alice["f:spec"]
    # alice no longer owns replicas; applying without it leaves bob's value.
    code, kept = await rest.apply("a2", rs_config("a2", replicas=None), "fieldManager=alice")
    assert code == 200, kept
    assert kept["spec"]["replicas"] == 5


async def test_update_records_and_conflicts_with_apply(rest: Rest) -> None:
    code, created = await rest.call(
        "POST", f"{RS}?fieldManager=kubectl-client-side-apply", rs_config("a3", replicas=3)
    )
    assert code == 201, created
    [entry] = created["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("kubectl-client-side-apply", "Update")
    assert entry["fieldsV1"]["f:metadata"]["f:labels"] == {".": {}, "f:app": {}}
    code, status = await rest.apply("a3", rs_config("a3", replicas=4), "fieldManager=kubectl")
    assert code == 409
    assert status["message"] == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: '
        ".spec.replicas"
    )
    # A merge patch takes ownership for its manager (from the user agent when unnamed).
    code, patched = await rest.call(
        "PATCH",
        f"{RS}/a3",
        {"spec": {"replicas": 6}},
        {"Content-Type": "application/merge-patch+json", "User-Agent": "scaler/1.0 (linux)"},
    )
    assert code == 200, patched
    got = entries(patched)
    assert got[("scaler", "Update")]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in got[("kubectl-client-side-apply", "Update")]["fieldsV1"]["f:spec"]
    # A PUT without managedFields keeps them.
    body = dict(patched)
    body["metadata"] = {k: v for k, v in patched["metadata"].items() if k != "managedFields"}
    code, put = await rest.call("PUT", f"{RS}/a3?fieldManager=editor", body)
    assert code == 200, put
    assert put["metadata"]["managedFields"] == patched["metadata"]["managedFields"]


@pytest.mark.parametrize(
    ("query", "headers", "code", "message"),
    [
        (
            "",
            APPLY,
            422,
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required '
            "for apply patch",
        ),
        (
            "force=true",
            {"Content-Type": "application/merge-patch+json"},
            422,
            'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
            "non-apply patch",
        ),
    ],
)
async def test_patch_options_errors(
    rest: Rest, query: str, headers: dict[str, str], code: int, message: str
) -> None:
    got, status = await rest.call("PATCH", f"{RS}/nope?{query}", rs_config("nope"), headers)
    assert (got, status["message"]) == (code, message)


async def test_apply_refuses_managed_fields_and_wrong_version(rest: Rest) -> None:
    config = rs_config("a4")
    config["metadata"]["managedFields"] = []
    code, status = await rest.apply("a4", config, "fieldManager=x")
    assert (code, status["message"]) == (400, "metadata.managedFields must be nil")
    code, status = await rest.apply("a4", {**rs_config("a4"), "apiVersion": "v1"}, "fieldManager=x")
    assert code == 400
    assert status["message"] == (
        "Incorrect version specified in apply patch. Specified patch version: v1, expected: apps/v1"
    )


MANIFEST = """\
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: kssa
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: kssa}}
  template:
    metadata:
      labels: {{app: kssa}}
    spec:
      containers:
      - name: c
        image: busybox
"""


def kubectl(running: RunningAPIServer, home: Path, *args: str, stdin: str = "") -> Any:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--server", f"http://{running.server.rest_address}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(home), "KUBECONFIG": str(home / "none")},
        check=False,
    )


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_apply_server_side(rest: Rest, tmp_path: Path) -> None:
    def run(*args: str, replicas: int = 1) -> Any:
        return kubectl(rest.running, tmp_path, *args, stdin=MANIFEST.format(replicas=replicas))

    first = await asyncio.to_thread(run, "apply", "--server-side", "-f", "-")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "replicaset.apps/kssa serverside-applied"
    other = await asyncio.to_thread(
        run, "apply", "--server-side", "--field-manager=other", "-f", "-", replicas=3
    )
    assert other.returncode == 1
    assert other.stderr.startswith(
        'error: Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas'
    ), other.stderr
    forced = await asyncio.to_thread(
        run,
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        "-",
        replicas=3,
    )
    assert forced.returncode == 0, forced.stderr
    got = await asyncio.to_thread(run, "get", "rs", "kssa", "--show-managed-fields", "-o", "json")
    assert got.returncode == 0, got.stderr
    obj = json.loads(got.stdout)
    assert obj["spec"]["replicas"] == 3
    assert {e["manager"] for e in obj["metadata"]["managedFields"]} == {"kubectl", "other"}
