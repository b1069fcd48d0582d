"""tinykube/podrefs.py: the ConfigMaps and Secrets a pod names, one walk for the kubelet's
volume cache and the Node authorizer."""

from __future__ import annotations

from google.protobuf import json_format

from apiserver.auth.node import pod_references as node_references
from tinykube.podrefs import pod_references, volume_references
from tinykube.v1 import pod_pb2

POD = {
    "metadata": {"name": "web", "namespace": "ns"},
    "spec": {
        "serviceAccountName": "runner",
        "imagePullSecrets": [{"name": "registry"}],
        "volumes": [
            {"name": "a", "configMap": {"name": "vol-cm"}},
            {"name": "b", "secret": {"secretName": "vol-secret"}},
            {
                "name": "c",
                "projected": {
                    "sources": [
                        {"configMap": {"name": "proj-cm"}},
                        {"secret": {"name": "proj-secret"}},
                        {"downwardAPI": {"items": [{"path": "n"}]}},
                        {"serviceAccountToken": {"path": "t"}},
                    ]
                },
            },
            {"name": "d", "emptyDir": {}},
            {"name": "e", "hostPath": {"path": "/tmp"}},
        ],
        "initContainers": [
            {"name": "init", "envFrom": [{"configMapRef": {"name": "init-cm"}}]},
        ],
        "containers": [
            {
                "name": "app",
                "envFrom": [{"secretRef": {"name": "app-secret"}, "prefix": "X_"}],
                "env": [
                    {"name": "PLAIN", "value": "1"},
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "key-cm", "key": "k"}}},
                    {
                        "name": "B",
                        "valueFrom": {"secretKeyRef": {"name": "key-secret", "key": "k"}},
                    },
                    {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
            }
        ],
        "ephemeralContainers": [
            {
                "name": "debug",
                "envFrom": [{"configMapRef": {"name": "debug-cm"}}],
                "env": [
                    {
                        "name": "D",
                        "valueFrom": {"secretKeyRef": {"name": "debug-secret", "key": "k"}},
                    }
                ],
            }
        ],
    },
}
VOLUMES = {
    ("configmaps", "ns", "vol-cm"),
    ("secrets", "ns", "vol-secret"),
    ("configmaps", "ns", "proj-cm"),
    ("secrets", "ns", "proj-secret"),
}


def pod() -> pod_pb2.Pod:
    return json_format.ParseDict(POD, pod_pb2.Pod())


def test_volume_references_are_what_configmap_secret_and_projected_volumes_name() -> None:
    assert volume_references(pod()) == VOLUMES


def test_pod_references_add_image_pull_secrets_and_every_containers_env() -> None:
    assert pod_references(pod()) == VOLUMES | {
        ("secrets", "ns", "registry"),
        ("configmaps", "ns", "init-cm"),
        ("secrets", "ns", "app-secret"),
        ("configmaps", "ns", "key-cm"),
        ("secrets", "ns", "key-secret"),
        ("configmaps", "ns", "debug-cm"),
        ("secrets", "ns", "debug-secret"),
    }


def test_the_node_authorizer_adds_the_service_account_to_the_same_walk() -> None:
    assert node_references(pod()) == pod_references(pod()) | {("serviceaccounts", "ns", "runner")}


def test_a_pod_naming_nothing_has_no_references() -> None:
    bare = pod_pb2.Pod()
    bare.metadata.namespace = "ns"
    bare.spec.containers.add(name="app", image="busybox")
    assert pod_references(bare) == set()
    assert volume_references(bare) == set()
