"""Pod volumes: kube's validation messages, the ServiceAccount admission's kube-api-access
volume, and the node authorizer's references through volumes."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.auth.node import pod_references
from apiserver.serviceaccount import (
    API_TOKEN_MOUNT_PATH,
    add_api_access_volume,
    should_automount,
)
from apiserver.validation import validate_pod_spec
from tinykube.v1 import pod_pb2, serviceaccount_pb2


def _spec(
    volumes: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None
) -> pod_pb2.PodSpec:
    return json_format.ParseDict(
        {
            "containers": [{"name": "c", "image": "busybox", "volumeMounts": mounts or []}],
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "volumes": volumes,
        },
        pod_pb2.PodSpec(),
    )


def _errors(spec: pod_pb2.PodSpec) -> list[str]:
    return [f"{e.field}: {e.message}" for e in validate_pod_spec("spec", spec)]


CASES = [
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/data"}], []),
    (
        [{"name": "v", "emptyDir": {}}],
        [{"name": "x", "mountPath": "/data"}],
        ['spec.containers[0].volumeMounts[0].name: Not found: "x"'],
    ),
    (
        [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}],
        [],
        ['spec.volumes[1].name: Duplicate value: "v"'],
    ),
    ([{"name": "v"}], [], ["spec.volumes[0]: Required value: must specify a volume type"]),
    (
        [{"name": "v", "emptyDir": {}, "configMap": {"name": "c"}}],
        [],
        ["spec.volumes[0].configMap: Forbidden: may not specify more than 1 volume type"],
    ),
    (
        [{"name": "V_1", "emptyDir": {}}],
        [],
        ['spec.volumes[0].name: Invalid value: "V_1": a lowercase RFC 1123 label'],
    ),
    (
        [{"name": "v", "emptyDir": {}}],
        [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/a"}],
        ['spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/a": must be unique'],
    ),
    (
        [{"name": "v", "secret": {"secretName": "s", "defaultMode": 512}}],
        [],
        [
            "spec.volumes[0].secret.defaultMode: Invalid value: 512: must be a number between 0 "
            "and 0777 (octal), both inclusive"
        ],
    ),
    (
        [{"name": "v", "configMap": {"name": "c", "items": [{"key": "k", "path": "../x"}]}}],
        [],
        [
            "spec.volumes[0].configMap.items[0].path: Invalid value: "
            "\"../x\": must not contain '..'",
            'spec.volumes[0].configMap.items[0].path: Invalid value: "../x": must not start '
            "with '..'",
        ],
    ),
    ([{"name": "v", "secret": {}}], [], ["spec.volumes[0].secret.secretName: Required value"]),
    ([{"name": "v", "hostPath": {}}], [], ["spec.volumes[0].hostPath.path: Required value"]),
    (
        [{"name": "v", "emptyDir": {"medium": "Disk"}}],
        [],
        ['spec.volumes[0].emptyDir.medium: Unsupported value: "Disk"'],
    ),
    (
        [
            {
                "name": "v",
                "downwardAPI": {
                    "items": [{"path": "n", "fieldRef": {"fieldPath": "spec.nodeName"}}]
                },
            }
        ],
        [],
        [
            "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: "
            'Unsupported value: "spec.nodeName"'
        ],
    ),
    (
        [
            {
                "name": "v",
                "projected": {
                    "sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 60}}]
                },
            }
        ],
        [],
        [
            "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid "
            "value: 60: may not specify a duration less than 10 minutes"
        ],
    ),
    (
        [{"name": "v", "emptyDir": {}}],
        [{"name": "v", "mountPath": "/a", "subPath": "/abs"}],
        [
            "spec.containers[0].volumeMounts[0].subPath: "
            'Invalid value: "/abs": must be a relative path'
        ],
    ),
]


@pytest.mark.parametrize(("volumes", "mounts", "want"), CASES)
def test_validation(
    volumes: list[dict[str, Any]], mounts: list[dict[str, Any]], want: list[str]
) -> None:
    got = _errors(_spec(volumes, mounts))
    assert len(got) == len(want), got
    for g, w in zip(got, want, strict=True):
        assert g.startswith(w), (g, w)


def test_admission_adds_kube_api_access() -> None:
    spec = _spec([], [])
    spec.initContainers.add(name="init", image="busybox")
    add_api_access_volume(spec, "abcde")
    (vol,) = spec.volumes
    assert vol.name == "kube-api-access-abcde"
    assert json_format.MessageToDict(vol.projected) == {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": "3607", "path": "token"}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
    }
    for c in (*spec.initContainers, *spec.containers):
        assert [(m.name, m.mountPath, m.readOnly) for m in c.volumeMounts] == [
            ("kube-api-access-abcde", API_TOKEN_MOUNT_PATH, True)
        ]
    assert _errors(spec) == []


def test_admission_leaves_a_container_that_mounts_the_path() -> None:
    spec = _spec(
        [{"name": "mine", "emptyDir": {}}], [{"name": "mine", "mountPath": API_TOKEN_MOUNT_PATH}]
    )
    add_api_access_volume(spec, "abcde")
    assert [v.name for v in spec.volumes] == ["mine"]


@pytest.mark.parametrize(
    ("pod", "account", "want"),
    [(None, None, True), (False, None, False), (None, False, False), (True, False, True)],
)
def test_should_automount(pod: bool | None, account: bool | None, want: bool) -> None:
    spec = pod_pb2.PodSpec()
    if pod is not None:
        spec.automountServiceAccountToken = pod
    sa = serviceaccount_pb2.ServiceAccount()
    if account is not None:
        sa.automountServiceAccountToken = account
    assert should_automount(spec, sa) is want


def test_node_references_through_volumes() -> None:
    pod = pod_pb2.Pod()
    pod.metadata.namespace = "ns"
    pod.spec.CopyFrom(
        _spec(
            [
                {"name": "a", "configMap": {"name": "cm"}},
                {"name": "b", "secret": {"secretName": "sec"}},
                {
                    "name": "c",
                    "projected": {
                        "sources": [{"configMap": {"name": "cm2"}}, {"secret": {"name": "s2"}}]
                    },
                },
            ]
        )
    )
    refs = pod_references(pod)
    assert {
        ("configmaps", "ns", "cm"),
        ("secrets", "ns", "sec"),
        ("configmaps", "ns", "cm2"),
        ("secrets", "ns", "s2"),
    } <= refs
