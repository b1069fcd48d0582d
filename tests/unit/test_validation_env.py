"""Container env and envFrom: kube v1.36's ValidateEnv, validateEnvVarValueFrom and
ValidateEnvFrom messages, each naming the field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.registry import strategy_for
from tinykube.kinds import POD
from tinykube.v1 import pod_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)
C = "spec.containers[0]"
SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
RELAXED = (
    "a valid environment variable name must consist only of printable ASCII characters other "
    "than '='"
)
CONFIG_KEY = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
FIELD_PATHS = (
    '"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", '
    '"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", '
    '"status.podIPs"'
)


def errors(container: dict[str, Any], *, init: bool = False) -> list[str]:
    c = {"name": "c", "image": "busybox", **container}
    spec: dict[str, Any] = {"containers": [c]}
    if init:
        spec = {"initContainers": [c], "containers": [{"name": "main", "image": "busybox"}]}
    pod = json_format.ParseDict(
        {"metadata": {"name": "web", "namespace": "default"}, "spec": spec}, pod_pb2.Pod()
    )
    strategy_for(POD).prepare_for_create(pod, NOW)
    return [str(e) for e in strategy_for(POD).validate_create(pod)]


def env(*items: dict[str, Any]) -> dict[str, Any]:
    return {"env": list(items)}


def test_every_source_kind_is_valid() -> None:
    assert (
        errors(
            env(
                {"name": "A", "value": "x"},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {
                    "name": "IDX",
                    "valueFrom": {
                        "fieldRef": {
                            "apiVersion": "v1",
                            "fieldPath": "metadata.annotations['batch.kubernetes.io/x']",
                        }
                    },
                },
                {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "spec.host"}}},
                {
                    "name": "MEM",
                    "valueFrom": {
                        "resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}
                    },
                },
                {
                    "name": "CPU",
                    "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "0"}},
                },
                {
                    "name": "HP",
                    "valueFrom": {"resourceFieldRef": {"resource": "limits.hugepages-2Mi"}},
                },
                {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a.b"}}},
                {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PASS"}}},
                # Relaxed names (GA since 1.34): any printable ASCII but '='.
                {"name": "1st var:with spaces", "value": "x"},
            )
            | {
                "envFrom": [
                    {"configMapRef": {"name": "cfg"}, "prefix": "CFG_"},
                    {"secretRef": {"name": "s-", "optional": True}},
                ]
            }
        )
        == []
    )


@pytest.mark.parametrize(
    ("var", "expected"),
    [
        (
            {"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            f'{C}.env[0].valueFrom: Invalid value: "": may not be specified when `value` is not '
            "empty",
        ),
        (
            {
                "name": "A",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.name"},
                    "configMapKeyRef": {"name": "c", "key": "k"},
                },
            },
            f'{C}.env[0].valueFrom: Invalid value: "": may not have more than one field '
            "specified at a time",
        ),
        (
            {"name": "A", "valueFrom": {}},
            f'{C}.env[0].valueFrom: Invalid value: "": must specify one of: `fieldRef`, '
            "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
        ),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}},
            f'{C}.env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "status.phase": '
            f"supported values: {FIELD_PATHS}",
        ),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}},
            f'{C}.env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "metadata.labels": '
            f"supported values: {FIELD_PATHS}",
        ),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}},
            f'{C}.env[0].valueFrom.fieldRef.fieldPath: Invalid value: "spec.nope": error '
            "converting fieldPath: field label not supported: spec.nope",
        ),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec['x']"}}},
            f"{C}.env[0].valueFrom.fieldRef.fieldPath: Invalid value: \"spec['x']\": error "
            "converting fieldPath: field label does not support subscript: spec['x']",
        ),
        (
            {
                "name": "A",
                "valueFrom": {"fieldRef": {"apiVersion": "v2", "fieldPath": "metadata.name"}},
            },
            f'{C}.env[0].valueFrom.fieldRef.fieldPath: Invalid value: "metadata.name": error '
            "converting fieldPath: unsupported pod version: v2",
        ),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": ""}}},
            f"{C}.env[0].valueFrom.fieldRef.fieldPath: Required value",
        ),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['-x']"}}},
            f'{C}.env[0].valueFrom.fieldRef: Invalid value: "-x": name part must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.pods"}}},
            f'{C}.env[0].valueFrom.resourceFieldRef.resource: Unsupported value: "limits.pods": '
            'supported values: "limits.cpu", "limits.ephemeral-storage", "limits.memory", '
            '"requests.cpu", "requests.ephemeral-storage", "requests.memory"',
        ),
        (
            {"name": "A", "valueFrom": {"resourceFieldRef": {"containerName": "c"}}},
            f"{C}.env[0].valueFrom.resourceFieldRef.resource: Required value",
        ),
        (
            {
                "name": "A",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1Mi"}},
            },
            f'{C}.env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "limits.cpu": only '
            "divisor's values 1m and 1 are supported with the cpu resource",
        ),
        (
            {
                "name": "A",
                "valueFrom": {
                    "resourceFieldRef": {"resource": "requests.memory", "divisor": "1024"}
                },
            },
            f'{C}.env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "requests.memory": '
            "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are "
            "supported with the memory resource",
        ),
        (
            {
                "name": "A",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "lots"}},
            },
            f'{C}.env[0].valueFrom.resourceFieldRef.divisor: Invalid value: "lots": quantities '
            "must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            {"name": "A", "valueFrom": {"configMapKeyRef": {"key": "k"}}},
            f'{C}.env[0].valueFrom.configMapKeyRef.name: Invalid value: "": {SUBDOMAIN}',
        ),
        (
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c"}}},
            f"{C}.env[0].valueFrom.configMapKeyRef.key: Required value",
        ),
        (
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a/b"}}},
            f'{C}.env[0].valueFrom.secretKeyRef.key: Invalid value: "a/b": {CONFIG_KEY}',
        ),
        (
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": ".."}}},
            f"{C}.env[0].valueFrom.secretKeyRef.key: Invalid value: \"..\": must not be '..'",
        ),
        ({"name": "", "value": "x"}, f"{C}.env[0].name: Required value"),
        ({"name": "A=B", "value": "x"}, f'{C}.env[0].name: Invalid value: "A=B": {RELAXED}'),
        (
            {"name": "caf\u00e9", "value": "x"},
            f'{C}.env[0].name: Invalid value: "caf\u00e9": {RELAXED}',
        ),
    ],
)
def test_env_errors_name_the_field(var: dict[str, Any], expected: str) -> None:
    assert errors(env(var)) == [expected]


def test_init_containers_env_is_validated_too() -> None:
    var = {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}
    (only,) = errors(env(var), init=True)
    assert only.startswith("spec.initContainers[0].env[0].valueFrom.fieldRef.fieldPath: ")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({}, f'{C}.envFrom: Invalid value: "": must specify one of: `configMapRef` or `secretRef`'),
        (
            {"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}},
            f'{C}.envFrom: Invalid value: "": may not have more than one field specified at a time',
        ),
        ({"configMapRef": {}}, f"{C}.envFrom[0].configMapRef.name: Required value"),
        (
            {"secretRef": {"name": "Bad_Name"}},
            f'{C}.envFrom[0].secretRef.name: Invalid value: "Bad_Name": {SUBDOMAIN}',
        ),
        (
            {"configMapRef": {"name": "a"}, "prefix": "A="},
            f'{C}.envFrom[0].prefix: Invalid value: "A=": {RELAXED}',
        ),
    ],
)
def test_env_from_errors(source: dict[str, Any], expected: str) -> None:
    assert errors({"envFrom": [source]}) == [expected]


def test_the_job_controllers_index_variable_is_valid() -> None:
    """What addCompletionIndexEnvVariable writes: a fieldRef without apiVersion (the API's
    default, v1)."""
    path = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    var = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": path}}}
    assert errors(env(var)) == []


def test_the_env_example_is_valid_as_the_apiserver_checks_it() -> None:
    from pathlib import Path

    from tinykube.manifest import load_manifests

    text = (Path(__file__).parents[2] / "examples" / "env.yaml").read_text()
    items = load_manifests(text)
    assert [i.info.kind for i in items] == ["ConfigMap", "Secret", "Pod"]
    pod = items[2].obj
    strategy_for(POD).prepare_for_create(pod, NOW)
    pod.metadata.namespace = "default"  # type: ignore[attr-defined]
    assert strategy_for(POD).validate_create(pod) == []
    c = pod.spec.containers[0]  # type: ignore[attr-defined]
    kinds = {f.name for e in c.env for f, _ in e.valueFrom.ListFields()}
    assert kinds == {"fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"}
    assert c.envFrom[0].configMapRef.name == "app-config"
