"""CustomResourceDefinitions against a real apiserver on a real etcd: the real kubectl applies,
waits for Established and lists them; kube's validation refuses a bad one (422, kube's
wording); the naming controller refuses a name another CRD of the group holds; the Python
client reads them back as V1CustomResourceDefinition; the storage version joins
storedVersions."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import grpc
import pytest
import yaml
from google.protobuf import json_format, struct_pb2
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from controller.discovery import Discovery
from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.client import Client
from tinykube.errors import NotFoundError
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import apiextensions_pb2, apiextensions_pb2_grpc, meta_pb2

pytestmark = pytest.mark.integration

T = TypeVar("T")
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def crontab_crd(name: str = "crontabs", short: str = "ct", kind: str = "CronTab") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{name}.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": name, "singular": name[:-1], "kind": kind, "shortNames": [short]},
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
                                        "cronSpec": {"type": "string"},
                                        "replicas": {"type": "integer", "minimum": 1, "default": 1},
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"replicas": {"type": "integer"}},
                                },
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    ],
                }
            ],
        },
    }


@pytest.fixture(scope="module")
async def served(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    try:
        yield running
    finally:
        await running.server.stop()


async def in_thread(fn: Callable[[], T]) -> T:
    return await asyncio.to_thread(fn)


async def kubectl(
    running: RunningAPIServer, home: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    command = [KUBECTL, "--server", f"http://{running.server.rest_address}", *args]
    env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(home / "none")}
    return await in_thread(
        lambda: subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=120, env=env, check=False
        )
    )


def extensions(running: RunningAPIServer) -> Any:
    config = k8s.Configuration()
    config.host = f"http://{running.server.rest_address}"
    return k8s.ApiextensionsV1Api(k8s.ApiClient(config))


@needs_kubectl
async def test_kubectl_applies_a_crd_that_becomes_established(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    manifest = yaml.safe_dump(crontab_crd())
    applied = await kubectl(served, tmp_path, "apply", "-f", "-", stdin=manifest)
    assert (applied.returncode, applied.stdout, applied.stderr) == (
        0,
        "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created\n",
        "",
    )
    waited = await kubectl(
        served, tmp_path, "wait", "--for=condition=Established", "--timeout=60s",
        "crd/crontabs.stable.example.com",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    assert (
        waited.stdout
        == "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com "
        "condition met\n"
    )
    got = await kubectl(served, tmp_path, "get", "crd", "crontabs.stable.example.com", "-o", "json")
    crd = json.loads(got.stdout)
    status = crd["status"]
    assert status["acceptedNames"]["plural"] == "crontabs"
    assert status["acceptedNames"]["shortNames"] == ["ct"]
    assert status["storedVersions"] == ["v1"]
    conds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conds == {
        "NamesAccepted": ("True", "NoConflicts"),
        "Established": ("True", "InitialNamesAccepted"),
    }
    version = crd["spec"]["versions"][0]
    # The schema comes back as written (whole numbers stay integers); kube's defaults are set.
    replicas = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
    assert replicas == {"type": "integer", "minimum": 1, "default": 1}
    assert version["subresources"]["status"] == {}
    assert crd["spec"]["names"]["listKind"] == "CronTabList"
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    listed = await kubectl(served, tmp_path, "get", "crds")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "CREATED", "AT"]
    assert lines[1].split()[0] == "crontabs.stable.example.com"
    # A second apply with no change is unchanged; the Python client reads the CRD.
    again = await kubectl(served, tmp_path, "apply", "-f", "-", stdin=manifest)
    assert again.stdout.endswith("unchanged\n"), again
    read: Any = await in_thread(
        lambda: extensions(served).read_custom_resource_definition("crontabs.stable.example.com")
    )
    assert read.spec.names.kind == "CronTab"
    assert read.spec.versions[0].subresources.scale.spec_replicas_path == ".spec.replicas"


@needs_kubectl
async def test_kubectl_gets_kubes_validation_errors(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    bad = crontab_crd("badtabs", "bt", "BadTab")
    bad["metadata"]["name"] = "badtab.stable.example.com"
    bad["spec"]["scope"] = "Global"
    bad["spec"]["versions"][0]["storage"] = False
    created = await kubectl(served, tmp_path, "create", "-f", "-", stdin=yaml.safe_dump(bad))
    assert created.returncode == 1
    assert created.stderr.startswith(
        'The CustomResourceDefinition "badtab.stable.example.com" is invalid: '
    ), created.stderr
    for problem in (
        'metadata.name: Invalid value: "badtab.stable.example.com": '
        'must be spec.names.plural+"."+spec.group',
        'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
        "must have exactly one version marked as storage version",
    ):
        assert problem in created.stderr


@needs_kubectl
async def test_a_short_name_held_by_another_crd_of_the_group_is_not_accepted(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    first = await kubectl(
        served,
        tmp_path,
        "create",
        "-f",
        "-",
        stdin=yaml.safe_dump(crontab_crd("alphas", "al", "Alpha")),
    )
    assert first.returncode == 0, first.stderr
    waited = await kubectl(
        served,
        tmp_path,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/alphas.stable.example.com",
    )
    assert waited.returncode == 0, waited.stderr
    second = await kubectl(
        served,
        tmp_path,
        "create",
        "-f",
        "-",
        stdin=yaml.safe_dump(crontab_crd("betas", "al", "Beta")),
    )
    assert second.returncode == 0, second.stderr
    waited = await kubectl(
        served,
        tmp_path,
        "wait",
        "--for=condition=NamesAccepted=False",
        "--timeout=60s",
        "crd/betas.stable.example.com",
    )
    assert waited.returncode == 0, waited.stderr
    got = await kubectl(served, tmp_path, "get", "crd", "betas.stable.example.com", "-o", "json")
    conds = {c["type"]: c for c in json.loads(got.stdout)["status"]["conditions"]}
    assert (conds["NamesAccepted"]["reason"], conds["NamesAccepted"]["message"]) == (
        "ShortNamesConflict",
        '"al" is already in use',
    )
    assert (conds["Established"]["status"], conds["Established"]["reason"]) == (
        "False",
        "NotAccepted",
    )
    # Changing the short name resolves it: the CRD is then established.
    patched = await kubectl(
        served, tmp_path, "patch", "crd", "betas.stable.example.com", "--type=merge",
        "-p", '{"spec": {"names": {"shortNames": ["be"]}}}',
    )  # fmt: skip
    assert patched.returncode == 0, patched.stderr
    waited = await kubectl(
        served,
        tmp_path,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/betas.stable.example.com",
    )
    assert waited.returncode == 0, waited.stderr


@needs_kubectl
async def test_scope_is_immutable_once_established_and_delete_removes_it(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    created = await kubectl(
        served,
        tmp_path,
        "create",
        "-f",
        "-",
        stdin=yaml.safe_dump(crontab_crd("gammas", "ga", "Gamma")),
    )
    assert created.returncode == 0, created.stderr
    waited = await kubectl(
        served,
        tmp_path,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/gammas.stable.example.com",
    )
    assert waited.returncode == 0, waited.stderr
    patched = await kubectl(
        served, tmp_path, "patch", "crd", "gammas.stable.example.com", "--type=merge",
        "-p", '{"spec": {"scope": "Cluster"}}',
    )  # fmt: skip
    assert patched.returncode == 1
    assert 'spec.scope: Invalid value: "Cluster": field is immutable' in patched.stderr
    deleted = await kubectl(served, tmp_path, "delete", "crd", "gammas.stable.example.com")
    assert deleted.returncode == 0, deleted.stderr
    assert (
        deleted.stdout
        == 'customresourcedefinition.apiextensions.k8s.io "gammas.stable.example.com" deleted\n'
    )


CRONTAB = """
apiVersion: stable.example.com/v1
kind: CronTab
metadata:
  name: nightly
  labels:
    tier: batch
spec:
  cronSpec: "0 3 * * *"
  replicas: 2
"""


async def established(running: RunningAPIServer, home: Path, crd: dict[str, Any]) -> None:
    created = await kubectl(running, home, "apply", "-f", "-", stdin=yaml.safe_dump(crd))
    assert created.returncode == 0, created.stderr
    name = crd["metadata"]["name"]
    waited = await kubectl(
        running, home, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}"
    )
    assert waited.returncode == 0, waited.stderr


@needs_kubectl
async def test_kubectl_creates_gets_lists_and_deletes_custom_objects(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    await established(served, tmp_path, crontab_crd("deltas", "dt", "Delta"))
    manifest = CRONTAB.replace("CronTab", "Delta")
    created = await kubectl(served, tmp_path, "create", "-f", "-", stdin=manifest)
    assert created.returncode == 0, created.stderr
    assert (created.returncode, created.stdout, created.stderr) == (
        0,
        "delta.stable.example.com/nightly created\n",
        "",
    )
    got = await kubectl(served, tmp_path, "get", "deltas", "nightly", "-o", "json")
    assert got.returncode == 0, got.stderr
    obj = json.loads(got.stdout)
    assert obj["apiVersion"] == "stable.example.com/v1"
    assert obj["kind"] == "Delta"
    assert obj["spec"] == {"cronSpec": "0 3 * * *", "replicas": 2}
    assert obj["metadata"]["namespace"] == "default"
    assert int(obj["metadata"]["resourceVersion"]) > 0
    listed = await kubectl(served, tmp_path, "get", "dt", "-l", "tier=batch", "-o", "name")
    assert listed.stdout == "delta.stable.example.com/nightly\n", listed.stderr
    deleted = await kubectl(served, tmp_path, "delete", "delta", "nightly")
    assert deleted.stdout == 'delta.stable.example.com "nightly" deleted from default namespace\n'
    gone = await kubectl(served, tmp_path, "get", "deltas", "nightly")
    assert gone.returncode == 1
    assert 'deltas.stable.example.com "nightly" not found' in gone.stderr


def validated_crd(name: str, kind: str, short: str) -> dict[str, Any]:
    crd = crontab_crd(name, short, kind)
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["cronSpec"]["pattern"] = r"^(\S+ ){4}\S+$"
    spec_schema["properties"]["image"] = {"type": "string", "default": "busybox"}
    spec_schema["x-kubernetes-validations"] = [
        {"rule": "self.replicas <= 10", "message": "at most 10 replicas"},
        {
            "rule": "!has(oldSelf.cronSpec) || self.cronSpec == oldSelf.cronSpec",
            "message": "cronSpec is immutable",
        },
    ]
    return crd


@needs_kubectl
async def test_schema_validation_pruning_defaults_and_cel_rules(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    await established(served, tmp_path, validated_crd("epsilons", "Epsilon", "ep"))
    body = CRONTAB.replace("CronTab", "Epsilon").replace("replicas: 2", "replicas: 2\n  extra: 1")
    created = await kubectl(served, tmp_path, "create", "--validate=false", "-f", "-", stdin=body)
    assert created.returncode == 0, created.stderr
    got = json.loads(
        (await kubectl(served, tmp_path, "get", "epsilon", "nightly", "-o", "json")).stdout
    )
    # The unknown field is pruned, the default applied.
    assert got["spec"] == {"cronSpec": "0 3 * * *", "replicas": 2, "image": "busybox"}
    # The schema refuses a bad value with kube's wording.
    bad = (
        CRONTAB.replace("CronTab", "Epsilon")
        .replace("nightly", "bad")
        .replace("replicas: 2", "replicas: 0")
    )
    refused = await kubectl(served, tmp_path, "create", "-f", "-", stdin=bad)
    assert refused.returncode == 1
    assert (
        'The Epsilon "bad" is invalid: spec.replicas: Invalid value: 0: '
        "spec.replicas in body should be greater than or equal to 1" in refused.stderr
    ), refused.stderr
    # A CEL rule refuses a create and a transition rule an update.
    many = (
        CRONTAB.replace("CronTab", "Epsilon")
        .replace("nightly", "many")
        .replace("replicas: 2", "replicas: 11")
    )
    refused = await kubectl(served, tmp_path, "create", "-f", "-", stdin=many)
    assert refused.returncode == 1
    assert 'spec: Invalid value: "object": at most 10 replicas' in refused.stderr, refused.stderr
    patched = await kubectl(
        served, tmp_path, "patch", "epsilon", "nightly", "--type=merge",
        "-p", '{"spec": {"cronSpec": "0 4 * * *"}}',
    )  # fmt: skip
    assert patched.returncode == 1
    assert "cronSpec is immutable" in patched.stderr, patched.stderr
    # Strategic merge patches are refused as kube does (415).
    smp = await kubectl(
        served, tmp_path, "patch", "epsilon", "nightly", "--type=strategic",
        "-p", '{"spec": {"replicas": 3}}',
    )  # fmt: skip
    assert smp.returncode == 1
    assert smp.stderr == (
        "error: application/strategic-merge-patch+json is not supported by "
        "stable.example.com/v1, Kind=Epsilon: the body of the request was in an unknown format - "
        "accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/apply-patch+yaml\n"
    )
    json_patch = await kubectl(
        served, tmp_path, "patch", "epsilon", "nightly", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/replicas", "value": 3}]',
    )  # fmt: skip
    assert json_patch.returncode == 0, json_patch.stderr


@needs_kubectl
async def test_status_subresource_generation_and_describe(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    await established(served, tmp_path, crontab_crd("zetas", "zt", "Zeta"))
    body = CRONTAB.replace("CronTab", "Zeta") + "status:\n  replicas: 5\n"
    created = await kubectl(served, tmp_path, "create", "-f", "-", stdin=body)
    assert created.returncode == 0, created.stderr
    got = json.loads(
        (await kubectl(served, tmp_path, "get", "zeta", "nightly", "-o", "json")).stdout
    )
    # With the status subresource, a create's status is dropped ...
    assert "status" not in got or got["status"] in ({}, None)
    assert got["metadata"]["generation"] == 1
    status = await kubectl(
        served, tmp_path, "patch", "zeta", "nightly", "--subresource=status", "--type=merge",
        "-p", '{"status": {"replicas": 2}, "spec": {"replicas": 7}}',
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    got = json.loads(
        (await kubectl(served, tmp_path, "get", "zeta", "nightly", "-o", "json")).stdout
    )
    # ... a status write changes only the status ...
    assert got["status"] == {"replicas": 2}
    assert got["spec"]["replicas"] == 2
    main = await kubectl(
        served, tmp_path, "patch", "zeta", "nightly", "--type=merge",
        "-p", '{"status": {"replicas": 9}, "spec": {"replicas": 3}}',
    )  # fmt: skip
    assert main.returncode == 0, main.stderr
    got = json.loads(
        (await kubectl(served, tmp_path, "get", "zeta", "nightly", "-o", "json")).stdout
    )
    # ... and a main write keeps the stored status; a spec change bumps the generation.
    assert (got["status"], got["spec"]["replicas"], got["metadata"]["generation"]) == (
        {"replicas": 2},
        3,
        2,
    )
    # A label change is metadata: no new generation.
    labeled = await kubectl(served, tmp_path, "label", "zeta", "nightly", "extra=yes")
    assert labeled.returncode == 0, labeled.stderr
    got = json.loads(
        (await kubectl(served, tmp_path, "get", "zeta", "nightly", "-o", "json")).stdout
    )
    assert got["metadata"]["generation"] == 2
    described = await kubectl(served, tmp_path, "describe", "zeta", "nightly")
    assert described.returncode == 0, described.stderr
    for line in (
        "Name:         nightly",
        "Namespace:    default",
        "API Version:  stable.example.com/v1",
        "Kind:         Zeta",
    ):
        assert line in described.stdout, described.stdout
    assert "Cron Spec:  0 3 * * *" in described.stdout, described.stdout


def custom_api(running: RunningAPIServer) -> Any:
    config = k8s.Configuration()
    config.host = f"http://{running.server.rest_address}"
    return k8s.CustomObjectsApi(k8s.ApiClient(config))


async def test_python_client_custom_objects_and_watch(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    await established(served, tmp_path, crontab_crd("etas", "et", "Eta"))
    api = custom_api(served)
    group, version = "stable.example.com", "v1"
    listed: Any = await in_thread(
        lambda: api.list_namespaced_custom_object(group, version, "default", "etas")
    )
    assert listed["items"] == []
    rv = listed["metadata"]["resourceVersion"]
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "Eta",
        "metadata": {"name": "py"},
        "spec": {"cronSpec": "* * * * *"},
    }
    created: Any = await in_thread(
        lambda: api.create_namespaced_custom_object(group, version, "default", "etas", body)
    )
    # The schema's default.
    assert created["spec"] == {"cronSpec": "* * * * *", "replicas": 1}

    def watch_one() -> list[tuple[str, str]]:
        w: Any = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        seen = []
        for event in w.stream(
            api.list_namespaced_custom_object, group, version, "default", "etas",
            resource_version=rv, timeout_seconds=10,
        ):  # fmt: skip
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            w.stop()
        return seen

    assert await in_thread(watch_one) == [("ADDED", "py")]
    by_field: Any = await in_thread(
        lambda: api.list_namespaced_custom_object(
            group, version, "default", "etas", field_selector="metadata.name=py"
        )
    )
    assert [o["metadata"]["name"] for o in by_field["items"]] == ["py"]
    await in_thread(
        lambda: api.delete_namespaced_custom_object(group, version, "default", "etas", "py")
    )


@needs_kubectl
async def test_deleting_a_crd_deletes_its_objects_first(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    await established(served, tmp_path, crontab_crd("thetas", "th", "Theta"))
    # The controller adds the cleanup finalizer to an Established CRD.
    finalized = await kubectl(
        served, tmp_path, "wait", "--timeout=60s", "crd/thetas.stable.example.com",
        "--for=jsonpath={.metadata.finalizers[0]}=customresourcecleanup.apiextensions.k8s.io",
    )  # fmt: skip
    assert finalized.returncode == 0, finalized.stderr
    for name in ("a", "b"):
        body = CRONTAB.replace("CronTab", "Theta").replace("nightly", name)
        created = await kubectl(served, tmp_path, "create", "-f", "-", stdin=body)
        assert created.returncode == 0, created.stderr
    deleted = await kubectl(
        served, tmp_path, "delete", "crd", "thetas.stable.example.com", "--timeout=60s"
    )
    assert deleted.returncode == 0, deleted.stderr
    # The objects went before the CRD: nothing is left under their etcd prefix.
    prefix = f"{served.settings.prefix}/stable.example.com/thetas/".encode()
    assert (await served.server.storage.list_prefix(prefix)).kvs == []
    gone = await kubectl(served, tmp_path, "get", "crd", "thetas.stable.example.com")
    assert gone.returncode == 1


@needs_kubectl
async def test_kubectl_get_prints_the_additional_printer_columns(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    crd = crontab_crd("iotas", "io", "Iota")
    crd["spec"]["versions"][0]["additionalPrinterColumns"].append(
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    )
    await established(served, tmp_path, crd)
    created = await kubectl(
        served, tmp_path, "create", "-f", "-", stdin=CRONTAB.replace("CronTab", "Iota")
    )
    assert created.returncode == 0, created.stderr
    listed = await kubectl(served, tmp_path, "get", "iotas")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "SPEC", "REPLICAS", "AGE"]
    assert row.split()[:7] == ["nightly", "0", "3", "*", "*", "*", "2"]
    # A kind without columns: NAME and AGE.
    plain = crontab_crd("lambdas", "lm", "Lambda")
    del plain["spec"]["versions"][0]["additionalPrinterColumns"]
    await established(served, tmp_path, plain)
    created = await kubectl(
        served, tmp_path, "create", "-f", "-", stdin=CRONTAB.replace("CronTab", "Lambda")
    )
    assert created.returncode == 0, created.stderr
    listed = await kubectl(served, tmp_path, "get", "lambdas")
    assert listed.stdout.splitlines()[0].split() == ["NAME", "AGE"], listed


@needs_kubectl
async def test_kubectl_scale_and_discovery(served: RunningAPIServer, tmp_path: Path) -> None:
    crd = crontab_crd("mus", "mm", "Mu")
    crd["spec"]["names"]["categories"] = ["all", "crontabs"]
    crd["spec"]["versions"][0]["subresources"]["scale"]["labelSelectorPath"] = ".status.selector"
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "selector"
    ] = {"type": "string"}
    await established(served, tmp_path, crd)
    created = await kubectl(
        served, tmp_path, "create", "-f", "-", stdin=CRONTAB.replace("CronTab", "Mu")
    )
    assert created.returncode == 0, created.stderr
    scaled = await kubectl(served, tmp_path, "scale", "mu", "nightly", "--replicas=4")
    assert (scaled.returncode, scaled.stdout) == (0, "mu.stable.example.com/nightly scaled\n"), (
        scaled
    )
    got = await kubectl(served, tmp_path, "get", "mu", "nightly", "-o", "jsonpath={.spec.replicas}")
    assert got.stdout == "4"
    raw = await kubectl(
        served,
        tmp_path,
        "get",
        "--raw",
        "/apis/stable.example.com/v1/namespaces/default/mus/nightly/scale",
    )
    scale = json.loads(raw.stdout)
    assert (scale["kind"], scale["spec"], scale["status"]) == (
        "Scale",
        {"replicas": 4},
        {"replicas": 0},
    )
    resources = json.loads(
        (await kubectl(served, tmp_path, "get", "--raw", "/apis/stable.example.com/v1")).stdout
    )
    entries = {r["name"]: r for r in resources["resources"]}
    assert entries["mus"]["shortNames"] == ["mm"]
    assert entries["mus"]["categories"] == ["all", "crontabs"]
    assert entries["mus"]["kind"] == "Mu"
    assert entries["mus/scale"]["kind"] == "Scale"
    assert entries["mus/status"]["kind"] == "Mu"
    by_category = await kubectl(served, tmp_path, "get", "crontabs", "-o", "name")
    assert "mu.stable.example.com/nightly" in by_category.stdout.split(), by_category


@needs_kubectl
async def test_kubectl_apply_client_and_server_side(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    await established(served, tmp_path, crontab_crd("nus", "nn", "Nu"))
    manifest = CRONTAB.replace("CronTab", "Nu")
    applied = await kubectl(served, tmp_path, "apply", "-f", "-", stdin=manifest)
    assert (applied.returncode, applied.stdout) == (0, "nu.stable.example.com/nightly created\n"), (
        applied
    )
    changed = manifest.replace("replicas: 2", "replicas: 3")
    applied = await kubectl(served, tmp_path, "apply", "-f", "-", stdin=changed)
    assert (applied.returncode, applied.stdout) == (
        0,
        "nu.stable.example.com/nightly configured\n",
    ), applied
    ssa = manifest.replace("nightly", "ssa")
    applied = await kubectl(served, tmp_path, "apply", "--server-side", "-f", "-", stdin=ssa)
    assert (applied.returncode, applied.stdout) == (
        0,
        "nu.stable.example.com/ssa serverside-applied\n",
    ), applied
    got = json.loads(
        (
            await kubectl(
                served, tmp_path, "get", "nu", "ssa", "-o", "json", "--show-managed-fields"
            )
        ).stdout
    )
    managers = {m["manager"]: m for m in got["metadata"]["managedFields"]}
    assert managers["kubectl"]["operation"] == "Apply"
    assert "f:spec" in managers["kubectl"]["fieldsV1"]
    again = await kubectl(
        served,
        tmp_path,
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=ssa.replace("replicas: 2", "replicas: 5"),
    )
    assert again.returncode == 0, again.stderr
    got = json.loads((await kubectl(served, tmp_path, "get", "nu", "ssa", "-o", "json")).stdout)
    assert got["spec"]["replicas"] == 5


@needs_kubectl
async def test_kubectl_explain_reads_the_schema(served: RunningAPIServer, tmp_path: Path) -> None:
    crd = crontab_crd("xis", "xi", "Xi")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["description"] = "What the Xi should run."
    spec["properties"]["cronSpec"]["description"] = "When, in cron syntax."
    await established(served, tmp_path, crd)
    explained = await kubectl(served, tmp_path, "explain", "xis.spec")
    assert explained.returncode == 0, explained.stderr
    text = explained.stdout
    assert "GROUP:      stable.example.com" in text
    assert "KIND:       Xi" in text
    assert "What the Xi should run." in text
    assert "cronSpec\t<string>" in text
    assert "When, in cron syntax." in text
    field = await kubectl(served, tmp_path, "explain", "xi.spec.replicas")
    assert "FIELD: replicas <integer>" in field.stdout, field


@needs_kubectl
async def test_unknown_fields_follow_field_validation(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    await established(served, tmp_path, crontab_crd("omicrons", "om", "Omicron"))
    body = CRONTAB.replace("CronTab", "Omicron").replace(
        "replicas: 2", "replicas: 2\n  color: blue"
    )
    strict = await kubectl(served, tmp_path, "create", "-f", "-", stdin=body)
    assert strict.returncode == 1
    assert strict.stderr == (
        'Error from server (BadRequest): error when creating "STDIN": Omicron in version "v1" '
        'cannot be handled as a Omicron: strict decoding error: unknown field "spec.color"\n'
    )
    warned = await kubectl(served, tmp_path, "create", "--validate=warn", "-f", "-", stdin=body)
    assert warned.returncode == 0, warned.stderr
    assert 'unknown field "spec.color"' in warned.stderr


async def test_every_apiserver_of_a_pair_serves_the_custom_kind(etcd_server: EtcdServer) -> None:
    """A CRD created through one apiserver is served by the other (each watches the CRDs), and
    both run the controller without fighting over the status."""
    settings = make_settings(etcd_server.endpoint, rest_port=0)
    first = await start_apiserver(settings)
    second = await start_apiserver(
        dataclasses.replace(settings, bind_address="127.0.0.1:0", rest_port=0)
    )
    try:
        async with aiohttp.ClientSession() as session:
            one = f"http://{first.server.rest_address}"
            two = f"http://{second.server.rest_address}"
            async with session.post(
                one + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                json=crontab_crd("pis", "pi", "Pi"),
            ) as r:
                assert r.status == 201, await r.text()
            objects = "/apis/stable.example.com/v1/namespaces/default/pis"
            body = {
                "apiVersion": "stable.example.com/v1",
                "kind": "Pi",
                "metadata": {"name": "p"},
                "spec": {"cronSpec": "* * * * *"},
            }
            status = 404
            while status == 404:  # until the second apiserver serves the kind
                async with session.post(two + objects, json=body) as r:
                    status = r.status
                    created = await r.json()
                if status == 404:
                    await asyncio.sleep(0.05)
            assert status == 201, created
            assert created["spec"]["replicas"] == 1
            # Paged lists and dry run work on custom kinds as on the built-in ones.
            for name in ("q", "r"):
                async with session.post(
                    two + objects, json={**body, "metadata": {"name": name}}
                ) as r:
                    assert r.status == 201
            async with session.post(
                two + objects + "?dryRun=All", json={**body, "metadata": {"name": "dry"}}
            ) as r:
                assert r.status == 201
            async with session.get(one + objects + "?limit=2") as r:
                page = await r.json()
            assert [o["metadata"]["name"] for o in page["items"]] == ["p", "q"]
            token = page["metadata"]["continue"]
            async with session.get(one + objects + f"?limit=2&continue={token}") as r:
                rest = await r.json()
            assert [o["metadata"]["name"] for o in rest["items"]] == ["r"]
            async with session.get(
                one
                + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pis.stable.example.com"
            ) as r:
                crd = await r.json()
            conds = [(c["type"], c["status"]) for c in crd["status"]["conditions"]]
            assert conds == [("NamesAccepted", "True"), ("Established", "True")]
    finally:
        await second.server.stop()
        await first.server.stop()


async def test_grpc_custom_resources_service(served: RunningAPIServer, tmp_path: Path) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    await established(served, tmp_path, crontab_crd("rhos", "rh", "Rho"))
    channel = grpc.aio.insecure_channel(served.address, options=list(CHANNEL_OPTIONS))
    try:
        stub = apiextensions_pb2_grpc.CustomResourcesStub(channel)
        kinds = await stub.ListKinds(apiextensions_pb2.ListCustomResourceKindsRequest())
        rho = next(k for k in kinds.kinds if k.kind == "Rho")
        assert (rho.group, rho.version, rho.plural, rho.namespaced, rho.status) == (
            "stable.example.com", "v1", "rhos", True, True,
        )  # fmt: skip
        where: dict[str, Any] = {"group": "stable.example.com", "version": "v1", "plural": "rhos"}
        listed = await stub.List(
            apiextensions_pb2.CustomResourceRequest(**where, namespace="default")
        )
        obj = struct_pb2.Struct()
        obj.update(
            {
                "apiVersion": "stable.example.com/v1",
                "kind": "Rho",
                "metadata": {"name": "g"},
                "spec": {"cronSpec": "x"},
            }
        )
        watch = stub.Watch(
            apiextensions_pb2.CustomResourceRequest(
                **where, namespace="default", resourceVersion=listed.resourceVersion
            )
        )
        created = await stub.Create(
            apiextensions_pb2.CustomResourceRequest(**where, namespace="default", object=obj)
        )
        created_dict = json_format.MessageToDict(created)
        assert created_dict["spec"] == {"cronSpec": "x", "replicas": 1}
        assert created_dict["metadata"]["namespace"] == "default"
        event: Any = await watch.read()
        assert event.type == "ADDED"
        assert json_format.MessageToDict(event.object)["metadata"]["name"] == "g"
        watch.cancel()
        got = await stub.Get(
            apiextensions_pb2.CustomResourceRequest(**where, namespace="default", name="g")
        )
        assert json_format.MessageToDict(got)["metadata"]["uid"] == created_dict["metadata"]["uid"]
        status = struct_pb2.Struct()
        status.update({**created_dict, "status": {"replicas": 1}})
        updated = await stub.UpdateStatus(
            apiextensions_pb2.CustomResourceRequest(**where, object=status)
        )
        assert json_format.MessageToDict(updated)["status"] == {"replicas": 1.0}
        # Schema errors are INVALID_ARGUMENT with kube's wording; an unserved kind NOT_FOUND.
        bad = struct_pb2.Struct()
        bad.update({"metadata": {"name": "b"}, "spec": {"replicas": 0}})
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Create(
                apiextensions_pb2.CustomResourceRequest(**where, namespace="default", object=bad)
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "spec.replicas in body should be greater than or equal to 1" in (
            refused.value.details() or ""
        )
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.Get(
                apiextensions_pb2.CustomResourceRequest(
                    group="x.io", version="v1", plural="nopes", name="n"
                )
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        # Delete takes preconditions and a propagation policy (the garbage collector's).
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            await stub.Delete(
                apiextensions_pb2.CustomResourceRequest(
                    **where,
                    namespace="default",
                    name="g",
                    preconditions=meta_pb2.Preconditions(uid="not-its-uid"),
                )
            )
        assert stale.value.code() == grpc.StatusCode.ABORTED
        assert "Precondition failed: UID in precondition: not-its-uid" in (
            stale.value.details() or ""
        )
        marked = await stub.Delete(
            apiextensions_pb2.CustomResourceRequest(
                **where,
                namespace="default",
                name="g",
                preconditions=meta_pb2.Preconditions(uid=created_dict["metadata"]["uid"]),
                propagationPolicy="Foreground",
            )
        )
        meta = json_format.MessageToDict(marked)["metadata"]
        assert meta["finalizers"] == ["foregroundDeletion"] and meta["deletionTimestamp"]
    finally:
        await channel.close()


@needs_kubectl
async def test_a_crd_whose_objects_are_held_is_terminating_until_they_go(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    await established(served, tmp_path, crontab_crd("sigmas", "sg", "Sigma"))
    held = CRONTAB.replace("CronTab", "Sigma").replace(
        "  labels:", "  finalizers: [example.com/hold]\n  labels:"
    )
    created = await kubectl(served, tmp_path, "create", "-f", "-", stdin=held)
    assert created.returncode == 0, created.stderr
    deleting = await kubectl(
        served, tmp_path, "delete", "crd", "sigmas.stable.example.com", "--wait=false"
    )
    assert deleting.returncode == 0, deleting.stderr
    waited = await kubectl(
        served, tmp_path, "wait", "--for=condition=Terminating", "--timeout=60s",
        "crd/sigmas.stable.example.com",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    # The object is being deleted (its finalizer holds it); no new object may be created.
    got = json.loads(
        (await kubectl(served, tmp_path, "get", "sigma", "nightly", "-o", "json")).stdout
    )
    assert got["metadata"]["deletionTimestamp"]
    another = CRONTAB.replace("CronTab", "Sigma").replace("nightly", "late")
    refused = await kubectl(served, tmp_path, "create", "-f", "-", stdin=another)
    assert refused.returncode == 1
    assert "create not allowed while custom resource definition is terminating" in refused.stderr
    released = await kubectl(
        served,
        tmp_path,
        "patch",
        "sigma",
        "nightly",
        "--type=merge",
        "-p",
        '{"metadata": {"finalizers": null}}',
    )
    assert released.returncode == 0, released.stderr
    waited = await kubectl(
        served, tmp_path, "wait", "--for=delete", "--timeout=60s", "crd/sigmas.stable.example.com"
    )
    assert waited.returncode == 0, waited.stderr


@needs_kubectl
async def test_every_served_version_is_served(served: RunningAPIServer, tmp_path: Path) -> None:
    crd = crontab_crd("taus", "ta", "Tau")
    v1 = crd["spec"]["versions"][0]
    beta = json.loads(json.dumps(v1))
    beta["name"], beta["storage"], beta["deprecated"] = "v1beta1", False, True
    del beta["additionalPrinterColumns"]
    crd["spec"]["versions"] = [beta, v1]
    await established(served, tmp_path, crd)
    body = CRONTAB.replace("CronTab", "Tau").replace(
        "stable.example.com/v1", "stable.example.com/v1beta1"
    )
    created = await kubectl(served, tmp_path, "create", "-f", "-", stdin=body)
    assert created.returncode == 0, created.stderr
    # The deprecated version warns, naming the version to use.
    assert created.stderr == (
        "Warning: stable.example.com/v1beta1 Tau is deprecated; use stable.example.com/v1 Tau\n"
    )
    # Read through either version; stored as the storage version.
    for version in ("v1", "v1beta1"):
        raw = await kubectl(
            served, tmp_path, "get", "--raw",
            f"/apis/stable.example.com/{version}/namespaces/default/taus/nightly",
        )  # fmt: skip
        assert json.loads(raw.stdout)["apiVersion"] == f"stable.example.com/{version}", raw
    key = f"{served.settings.prefix}/stable.example.com/taus/default/nightly".encode()
    stored = await served.server.storage.get(key)
    assert stored is not None
    assert json.loads(stored.value)["apiVersion"] == "stable.example.com/v1"
    group = json.loads(
        (await kubectl(served, tmp_path, "get", "--raw", "/apis/stable.example.com")).stdout
    )
    assert group["preferredVersion"]["version"] == "v1"
    # kubectl uses the preferred version.
    got = await kubectl(served, tmp_path, "get", "tau", "nightly", "-o", "jsonpath={.apiVersion}")
    assert got.stdout == "stable.example.com/v1"


OPERATOR = """
import kopf


@kopf.on.create("stable.example.com", "v1", "upsilons")
def created(spec, patch, **_):
    patch.status["seen"] = spec.get("cronSpec", "")


@kopf.on.delete("stable.example.com", "v1", "upsilons")
def deleted(name, logger, **_):
    logger.info(f"goodbye {name}")
"""


@needs_kubectl
async def test_a_kopf_operator_reconciles_custom_objects(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    pytest.importorskip("kopf")
    kopf_bin = Path(sys.executable).parent / "kopf"
    crd = crontab_crd("upsilons", "up", "Upsilon")
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    status["properties"]["seen"] = {"type": "string"}  # else pruned, as kube prunes it
    await established(served, tmp_path, crd)
    (tmp_path / "op.py").write_text(OPERATOR)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://{served.server.rest_address}"}}
                ],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig)}
    operator = await in_thread(
        lambda: subprocess.Popen(
            [str(kopf_bin), "run", "--standalone", "--namespace=default", str(tmp_path / "op.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
    )
    try:
        body = CRONTAB.replace("CronTab", "Upsilon")
        created = await kubectl(served, tmp_path, "create", "-f", "-", stdin=body)
        assert created.returncode == 0, created.stderr
        seen = await kubectl(
            served, tmp_path, "wait", "--timeout=60s", "upsilon/nightly",
            "--for=jsonpath={.status.seen}=0 3 * * *",
        )  # fmt: skip
        if seen.returncode != 0:
            operator.terminate()
            logs = (await in_thread(lambda: operator.communicate(timeout=30)))[0]
            pytest.fail(f"{seen.stderr}\n{logs[-4000:]}")
        got = json.loads(
            (await kubectl(served, tmp_path, "get", "upsilon", "nightly", "-o", "json")).stdout
        )
        assert "kopf.zalando.org/KopfFinalizerMarker" in got["metadata"]["finalizers"]
        # The delete waits for the operator's delete handler, which lets the finalizer go.
        deleted = await kubectl(served, tmp_path, "delete", "upsilon", "nightly", "--timeout=60s")
        assert deleted.returncode == 0, deleted.stderr
    finally:
        operator.terminate()
        try:
            output, _ = await in_thread(lambda: operator.communicate(timeout=30))
        except subprocess.TimeoutExpired:
            operator.kill()
            output, _ = await in_thread(operator.communicate)
    assert "goodbye nightly" in output, output[-3000:]


async def test_the_controller_managers_discovery_finds_custom_kinds(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    await established(served, tmp_path, crontab_crd("phis", "ph", "Phi"))
    for name in ("a", "b"):
        body = CRONTAB.replace("CronTab", "Phi").replace("nightly", name)
        created = await kubectl(served, tmp_path, "create", "-n", "default", "-f", "-", stdin=body)
        assert created.returncode == 0, created.stderr
    async with Client(served.address) as client:
        contents = dict(
            (f"{info.plural}.{info.group}", api)
            for info, api in await Discovery(client).namespaced_contents()
        )
        assert "pods." in contents
        phis = contents["phis.stable.example.com"]
        listed = await phis.list("default")
        assert sorted(o.metadata.name for o in listed.items) == ["a", "b"]
        assert all(o.metadata.uid for o in listed.items)
        await phis.delete("a", "default")
        assert [o.metadata.name for o in (await phis.list("default")).items] == ["b"]
        with pytest.raises(NotFoundError):
            await phis.delete("a", "default")


BIG = 2**53 + 1  # 9007199254740993: the first integer a double cannot hold


def numbers_crd(
    root_preserves: bool = False, names: tuple[str, str, str] = ("numbers", "nb", "Number")
) -> dict[str, Any]:
    crd = crontab_crd(*names)
    version = crd["spec"]["versions"][0]
    del version["subresources"], version["additionalPrinterColumns"]
    schema = version["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {
            "count": {"type": "integer", "format": "int64"},
            "capped": {"type": "integer", "maximum": 2**53, "minimum": -(2**53)},
        },
    }
    if root_preserves:
        schema["x-kubernetes-preserve-unknown-fields"] = True
    return crd


async def _rest(
    session: aiohttp.ClientSession, method: str, url: str, body: Any = None, **headers: str
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body)
    async with session.request(method, url, data=data, headers=headers) as r:
        return r.status, json.loads(await r.text())


async def test_integers_beyond_2_to_the_53_stay_exact(served: RunningAPIServer) -> None:
    """kube keeps a custom object's integers as int64: create, get, list, watch, merge and JSON
    patch, and the etcd JSON (read back by the watch cache) keep 2^53 + 1 and int64's ends."""
    base = f"http://{served.server.rest_address}"
    objects = base + "/apis/stable.example.com/v1/namespaces/default/numbers"
    spec = {"count": BIG, "nested": {"list": [2**63 - 1, -(2**63), -BIG, 2**53, 1.5]}}
    async with aiohttp.ClientSession() as session:
        status, crd = await _rest(
            session,
            "POST",
            base + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            numbers_crd(),
            **{"Content-Type": "application/json"},
        )
        assert status == 201, crd
        status = 404
        body = {"apiVersion": "stable.example.com/v1", "kind": "Number", "metadata": {"name": "n"}}
        while status == 404:  # until the kind is served
            status, listed = await _rest(session, "GET", objects)
            if status == 404:
                await asyncio.sleep(0.05)
        json_type = {"Content-Type": "application/json"}
        async with session.get(
            objects + f"?watch=1&resourceVersion={listed['metadata']['resourceVersion']}"
        ) as watch:
            status, created = await _rest(
                session, "POST", objects, {**body, "spec": spec}, **json_type
            )
            assert status == 201, created
            assert created["spec"] == spec
            event = json.loads(await watch.content.readline())
        assert event["type"] == "ADDED" and event["object"]["spec"] == spec
        status, got = await _rest(session, "GET", objects + "/n")
        assert got["spec"] == spec
        status, listed = await _rest(session, "GET", objects)
        assert listed["items"][0]["spec"] == spec
        status, patched = await _rest(
            session,
            "PATCH",
            objects + "/n",
            {"spec": {"count": BIG + 2}},
            **{"Content-Type": "application/merge-patch+json"},
        )
        assert status == 200, patched
        assert patched["spec"]["count"] == BIG + 2
        assert patched["spec"]["nested"] == spec["nested"]
        status, patched = await _rest(
            session,
            "PATCH",
            objects + "/n",
            [{"op": "test", "path": "/spec/count", "value": BIG + 2},
             {"op": "replace", "path": "/spec/count", "value": -BIG}],
            **{"Content-Type": "application/json-patch+json"},
        )  # fmt: skip
        assert status == 200, patched
        assert patched["spec"]["count"] == -BIG
        # Server-side apply (its merge and managedFields work on the JSON) keeps them too.
        status, applied = await _rest(
            session, "PATCH", objects + "/n?fieldManager=numbers&force=true",
            {**body, "spec": {"count": BIG + 4}},
            **{"Content-Type": "application/apply-patch+yaml"},
        )  # fmt: skip
        assert status == 200, applied
        assert applied["spec"]["count"] == BIG + 4
        assert applied["spec"]["nested"] == spec["nested"]
        # The schema's bounds are doubles in kube (JSONSchemaProps.Maximum is a float64): 2^53
        # is allowed, 2^53 + 1 is past it.
        status, ok = await _rest(
            session, "PATCH", objects + "/n", {"spec": {"capped": 2**53}},
            **{"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        assert status == 200 and ok["spec"]["capped"] == 2**53, ok
        status, refused = await _rest(
            session, "PATCH", objects + "/n", {"spec": {"capped": BIG}},
            **{"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        assert status == 422, refused
        assert "spec.capped in body should be less than or equal to" in refused["message"]
        # A fraction is refused by the schema's format int64, with kube's message.
        status, refused = await _rest(
            session, "PATCH", objects + "/n", {"spec": {"count": 1.5}},
            **{"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        assert status == 422, refused
        assert "spec.count in body must be of type int64" in refused["message"]


async def test_integers_beyond_2_to_the_53_over_grpc(served: RunningAPIServer) -> None:
    """A Struct's numbers are doubles: CustomResources carries an integer beyond 2^53 as
    {"\\u0000int64": "<decimal>"} both ways, so a client that writes back what it read (the
    garbage collector does) keeps it exact; REST shows the integer."""
    base = f"http://{served.server.rest_address}"
    objects = base + "/apis/stable.example.com/v1/namespaces/default/numbers"
    async with aiohttp.ClientSession() as session:
        status, _ = await _rest(
            session,
            "POST",
            base + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            numbers_crd(),
            **{"Content-Type": "application/json"},
        )
        assert status in (201, 409)
        status = 404
        while status == 404:
            status, _ = await _rest(session, "GET", objects)
            if status == 404:
                await asyncio.sleep(0.05)
        body = {
            "apiVersion": "stable.example.com/v1",
            "kind": "Number",
            "metadata": {"name": "g"},
            "spec": {"count": BIG, "small": 7},
        }
        status, created = await _rest(
            session, "POST", objects, body, **{"Content-Type": "application/json"}
        )
        assert status == 201, created
        channel = grpc.aio.insecure_channel(served.address, options=list(CHANNEL_OPTIONS))
        try:
            stub = apiextensions_pb2_grpc.CustomResourcesStub(channel)
            where: dict[str, Any] = {
                "group": "stable.example.com", "version": "v1", "plural": "numbers",
                "namespace": "default",
            }  # fmt: skip
            got = await stub.Get(apiextensions_pb2.CustomResourceRequest(**where, name="g"))
            data = json_format.MessageToDict(got)
            assert data["spec"] == {"count": {"\u0000int64": str(BIG)}, "small": 7.0}
            data["metadata"]["labels"] = {"touched": "yes"}
            back = struct_pb2.Struct()
            back.update(data)
            await stub.Update(apiextensions_pb2.CustomResourceRequest(**where, object=back))
        finally:
            await channel.close()
        status, after = await _rest(session, "GET", objects + "/g")
        assert after["metadata"]["labels"] == {"touched": "yes"}
        assert after["spec"] == {"count": BIG, "small": 7}


async def test_a_root_that_preserves_unknown_fields_keeps_top_level_ones(
    served: RunningAPIServer,
) -> None:
    """kube keeps the top-level fields a schema does not name when its root has
    x-kubernetes-preserve-unknown-fields: true (and prunes them without it)."""
    base = f"http://{served.server.rest_address}"
    json_type = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        for names, preserves in ((("opens", "op", "Open"), True), (("shuts", "sh", "Shut"), False)):
            status, crd = await _rest(
                session,
                "POST",
                base + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                numbers_crd(preserves, names),
                **json_type,
            )
            assert status == 201, crd
            objects = base + f"/apis/stable.example.com/v1/namespaces/default/{names[0]}"
            status = 404
            while status == 404:
                status, _ = await _rest(session, "GET", objects)
                if status == 404:
                    await asyncio.sleep(0.05)
            body = {
                "apiVersion": "stable.example.com/v1",
                "kind": names[2],
                "metadata": {"name": "o"},
                "spec": {"count": 1},
                "data": {"k": "v", "n": BIG},
                "x__unknown_fields": "mine",
                "top": 3,
            }
            # Strict field validation: nothing is unknown under the root's preserve.
            status, created = await _rest(
                session, "POST", objects + "?fieldValidation=Strict", body, **json_type
            )
            if not preserves:
                assert status == 400, created
                assert 'unknown field "data"' in created["message"], created
                status, created = await _rest(session, "POST", objects, body, **json_type)
                assert status == 201, created
                assert set(created) == {"apiVersion", "kind", "metadata", "spec"}
                continue
            assert status == 201, created
            for got in (created, (await _rest(session, "GET", objects + "/o"))[1]):
                assert {k: got[k] for k in ("data", "x__unknown_fields", "top")} == {
                    "data": {"k": "v", "n": BIG},
                    "x__unknown_fields": "mine",
                    "top": 3,
                }
            status, patched = await _rest(
                session, "PATCH", objects + "/o", {"top": None, "more": [1]},
                **{"Content-Type": "application/merge-patch+json"},
            )  # fmt: skip
            assert status == 200, patched
            assert "top" not in patched and patched["more"] == [1]
            assert patched["metadata"]["generation"] == 2
            assert patched["data"] == {"k": "v", "n": BIG}


@needs_kubectl
async def test_server_side_apply_merges_a_map_list_by_its_keys(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    """Two appliers (kubectl apply --server-side) owning different items of a list with
    x-kubernetes-list-type: map merge by key, and conflict on each other's items, as kube."""
    crd = crontab_crd("routes", "rt", "Route")
    version = crd["spec"]["versions"][0]
    version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["ports"] = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
        },
    }
    await established(served, tmp_path, crd)

    def route(*ports: tuple[str, int]) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "stable.example.com/v1",
                "kind": "Route",
                "metadata": {"name": "r", "namespace": "default"},
                "spec": {"ports": [{"name": n, "port": p} for n, p in ports]},
            }
        )

    async def apply_as(manager: str, *ports: tuple[str, int]) -> subprocess.CompletedProcess[str]:
        return await kubectl(
            served, tmp_path, "apply", "--server-side", f"--field-manager={manager}", "-f", "-",
            stdin=route(*ports),
        )  # fmt: skip

    done = await apply_as("alice", ("a", 1))
    assert done.returncode == 0, done.stderr
    done = await apply_as("bob", ("b", 2))
    assert done.returncode == 0, done.stderr
    got = await kubectl(
        served, tmp_path, "get", "route", "r", "-o", "json", "--show-managed-fields"
    )
    obj = json.loads(got.stdout)
    assert obj["spec"]["ports"] == [{"name": "a", "port": 1}, {"name": "b", "port": 2}]
    owners = {
        e["manager"]: e["fieldsV1"]["f:spec"]["f:ports"] for e in obj["metadata"]["managedFields"]
    }
    assert list(owners["alice"]) == ['k:{"name":"a"}']
    assert list(owners["bob"]) == ['k:{"name":"b"}']
    done = await apply_as("bob", ("b", 2), ("a", 3))
    assert done.returncode != 0
    assert 'conflict with "alice": .spec.ports[name="a"].port' in done.stderr, done.stderr
    # Alice dropping her item removes it; Bob's stays.
    done = await apply_as("alice")
    assert done.returncode == 0, done.stderr
    got = await kubectl(served, tmp_path, "get", "route", "r", "-o", "jsonpath={.spec.ports}")
    assert json.loads(got.stdout) == [{"name": "b", "port": 2}]
