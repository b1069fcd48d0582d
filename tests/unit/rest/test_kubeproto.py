"""Kubernetes-protobuf request bodies (what kubectl's typed commands send) read as JSON dicts."""

from __future__ import annotations

import pytest

from apiserver.rest import kubeproto
from tinykube.errors import BadRequestError

# `kubectl create namespace scratch` (v1.37), byte for byte.
KUBECTL_CREATE_NAMESPACE = bytes.fromhex(
    "6b387300 0a0f0a02 76311209 4e616d65 73706163 65121f0a 170a0773 63726174"
    "63681200 1a002200 2a003200 38004200 12001a02 0a001a00 2200"
)


def field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def text(number: int, value: str) -> bytes:
    return field(number, value.encode())


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = text(1, api_version) + text(2, kind)
    return kubeproto.MAGIC + field(1, type_meta) + field(2, raw)


def test_what_kubectl_create_namespace_sends() -> None:
    assert kubeproto.decode(KUBECTL_CREATE_NAMESPACE) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "scratch"},
    }


def test_labels_annotations_finalizers_and_owner_references() -> None:
    meta = (
        text(1, "team")
        + field(11, text(1, "a") + text(2, "1"))
        + field(11, text(1, "b") + text(2, "2"))
        + field(12, text(1, "note") + text(2, "hi"))
        + text(14, "example.com/x")
        + field(13, text(1, "Thing") + text(3, "t") + text(4, "u-1") + bytes([6 << 3, 1]))
        + bytes([7 << 3, 3])  # generation
    )
    spec = text(1, "kubernetes") + text(1, "example.com/y")
    body = envelope(
        "v1", "Namespace", field(1, meta) + field(2, spec) + field(3, text(1, "Active"))
    )
    assert kubeproto.decode(body) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "team",
            "labels": {"a": "1", "b": "2"},
            "annotations": {"note": "hi"},
            "finalizers": ["example.com/x"],
            "ownerReferences": [{"kind": "Thing", "name": "t", "uid": "u-1", "controller": True}],
            "generation": 3,
        },
        "spec": {"finalizers": ["kubernetes", "example.com/y"]},
        "status": {"phase": "Active"},
    }


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"kind": "Namespace"}', "it does not start with the k8s protobuf prefix"),
        (envelope("autoscaling/v2", "Scale", b""), "autoscaling/v2 Scale is not read"),
        (KUBECTL_CREATE_NAMESPACE[:-3], "truncated"),
        (envelope("v1", "Namespace", field(1, text(1, "x")[:-1] + b"\xff")), "not UTF-8"),
    ],
    ids=["JSON", "another kind", "cut short", "bad text"],
)
def test_bodies_that_cannot_be_read_are_bad_requests(body: bytes, detail: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        kubeproto.decode(body)
    assert detail in caught.value.message


def test_every_served_kind_and_only_those_are_supported() -> None:
    assert kubeproto.supports("v1", "Namespace")
    assert kubeproto.supports("v1", "Pod")
    assert kubeproto.supports("apps/v1", "DeploymentList")
    assert kubeproto.supports("v1", "Status")
    assert not kubeproto.supports("autoscaling/v2", "HorizontalPodAutoscaler")
    assert not kubeproto.supports("apps/v1beta1", "Deployment")


def varint(number: int, value: int) -> bytes:
    out = bytearray([number << 3])
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def long_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field of any length (the length as a varint)."""
    return bytes([number << 3 | 2]) + varint(0, len(payload))[1:] + payload


def test_a_deployment_as_kubectl_create_deployment_sends_it() -> None:
    labels = field(11, text(1, "app") + text(2, "web"))
    container = text(1, "busybox") + text(2, "busybox") + text(3, "sleep") + text(3, "3600")
    container += field(6, varint(3, 8080) + text(4, "TCP")) + field(8, b"")
    template = field(1, labels) + field(2, field(2, container))
    surge = field(2, varint(1, 1) + text(3, "25%"))  # maxSurge "25%"
    unavailable = field(1, varint(2, 0))  # maxUnavailable 0
    spec = (
        varint(1, 0)  # replicas 0 is kept: it is not "unset"
        + field(2, field(1, text(1, "app") + text(2, "web")))
        + field(3, template)
        + field(4, text(1, "RollingUpdate") + field(2, unavailable + surge))
    )
    raw = field(1, text(1, "web") + labels) + long_field(2, spec)
    type_meta = text(1, "apps/v1") + text(2, "Deployment")
    body = kubeproto.MAGIC + field(1, type_meta) + long_field(2, raw)
    assert kubeproto.decode(body) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "busybox",
                            "image": "busybox",
                            "command": ["sleep", "3600"],
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        }
                    ]
                },
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"},
            },
        },
    }
    assert kubeproto.supports("apps/v1", "Deployment")


def test_what_kubectl_create_job_sends() -> None:
    """`kubectl create job hello --image=busybox -- sh -c true`: batch/v1 numbering, pointer
    fields kept when zero (backoffLimit 0 is not unset), negative numbers as Go writes them."""
    container = text(1, "hello") + text(2, "busybox") + text(3, "sh") + text(3, "-c")
    container += text(3, "true") + field(8, b"")
    pod_spec = field(2, container) + text(3, "Never")
    template = field(1, b"") + field(2, pod_spec)
    spec = field(6, template) + varint(7, 0) + varint(1, -1) + varint(10, 0)
    body = envelope("batch/v1", "Job", field(1, text(1, "hello")) + field(2, spec))
    assert kubeproto.decode(body) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "hello"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "hello", "image": "busybox", "command": ["sh", "-c", "true"]}
                    ],
                    "restartPolicy": "Never",
                }
            },
            "backoffLimit": 0,
            "parallelism": -1,
            "suspend": False,
        },
    }


RBAC_ROWS = [
    # (behaviour, kind, raw object, the JSON it reads as (apiVersion and kind added))
    (
        "a RoleBinding as `kubectl create rolebinding` sends it",
        "RoleBinding",
        field(1, text(1, "b") + text(3, "team"))
        + field(2, text(1, "User") + text(2, "rbac.authorization.k8s.io") + text(3, "bob"))
        + field(2, text(1, "ServiceAccount") + text(3, "ci") + text(4, "team"))
        + field(3, text(1, "rbac.authorization.k8s.io") + text(2, "ClusterRole") + text(3, "view")),
        {
            "metadata": {"name": "b", "namespace": "team"},
            "subjects": [
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"},
                {"kind": "ServiceAccount", "name": "ci", "namespace": "team"},
            ],
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
        },
    ),
    (
        "a ClusterRole's rules (the core group is an empty string) and aggregationRule",
        "ClusterRole",
        field(1, text(1, "c"))
        + field(2, text(1, "get") + text(1, "list") + text(2, "") + text(3, "pods") + text(4, "p"))
        + field(2, text(1, "get") + text(5, "/healthz"))
        + field(
            3,
            field(
                1,
                field(1, text(1, "agg") + text(2, "true"))
                + field(2, text(1, "tier") + text(2, "In") + text(3, "a")),
            ),
        ),
        {
            "metadata": {"name": "c"},
            "rules": [
                {
                    "verbs": ["get", "list"],
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "resourceNames": ["p"],
                },
                {"verbs": ["get"], "nonResourceURLs": ["/healthz"]},
            ],
            "aggregationRule": {
                "clusterRoleSelectors": [
                    {
                        "matchLabels": {"agg": "true"},
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}],
                    }
                ]
            },
        },
    ),
]


@pytest.mark.parametrize(
    ("kind", "raw", "expected"), [r[1:] for r in RBAC_ROWS], ids=[r[0] for r in RBAC_ROWS]
)
def test_rbac_kinds(kind: str, raw: bytes, expected: dict[str, object]) -> None:
    api_version = "rbac.authorization.k8s.io/v1"
    assert kubeproto.decode(envelope(api_version, kind, raw)) == {
        "apiVersion": api_version,
        "kind": kind,
        **expected,
    }


def test_every_field_is_read_and_unknown_numbers_are_reported() -> None:
    """A container's resources (field 8) read as Kubernetes' JSON; a field number no table
    knows is reported by path (fieldValidation decides), zero values Go always writes are not."""
    resources = field(1, text(1, "cpu") + field(2, text(1, "500m")))  # limits: cpu 500m
    container = (
        text(1, "app") + text(2, "busybox") + field(8, resources) + b"\xf8\x01\x01"
    )  # field 31 = 1
    spec = field(6, field(1, b"") + field(2, field(2, container) + text(3, "Never")))
    meta = text(1, "j") + field(8, varint(1, 1700000000)) + b"\xf0\x01\x00"  # field 30 = 0
    body = envelope("batch/v1", "Job", field(1, meta) + field(2, spec))
    doc, unknown = kubeproto.decode_unknown(body)
    assert doc["metadata"] == {"name": "j", "creationTimestamp": "2023-11-14T22:13:20Z"}
    (container_json,) = doc["spec"]["template"]["spec"]["containers"]
    assert container_json["resources"] == {"limits": {"cpu": "500m"}}
    assert unknown == ["spec.template.spec.containers[0].<field 31>"]


def test_a_service_account_in_core_v1_numbering() -> None:
    """`kubectl create serviceaccount robot` sends only metadata; a full one reads secrets (2),
    imagePullSecrets (3) and automountServiceAccountToken (4) as k8s.io/api numbers them."""
    raw = field(1, text(1, "robot") + text(3, "team"))
    raw += field(2, text(1, "Secret") + text(3, "robot-token"))
    raw += field(3, text(1, "registry")) + varint(4, 0)
    assert kubeproto.decode(envelope("v1", "ServiceAccount", raw)) == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "robot", "namespace": "team"},
        "secrets": [{"kind": "Secret", "name": "robot-token"}],
        "imagePullSecrets": [{"name": "registry"}],
        "automountServiceAccountToken": False,
    }


def test_a_pod_spec_reads_its_service_account_fields() -> None:
    """PodSpec's serviceAccountName 8, serviceAccount 9, automountServiceAccountToken 21."""
    container = text(1, "c") + text(2, "busybox")
    automount = bytes([21 << 3 & 0x7F | 0x80, 21 >> 4, 1])  # field 21's key is two bytes
    pod_spec = field(2, container) + text(8, "robot") + text(9, "robot") + automount
    template = field(1, b"") + field(2, pod_spec)
    body = envelope("batch/v1", "Job", field(1, text(1, "j")) + field(2, field(6, template)))
    spec = kubeproto.decode(body)["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "robot"
    assert spec["serviceAccount"] == "robot"
    assert spec["automountServiceAccountToken"] is True


# `kubectl create deployment pd --image=busybox --replicas=2 --port=8080` (v1.37), byte for
# byte as kubectl -v=9 printed it: Go writes every non-pointer field, zero or not.
KUBECTL_CREATE_DEPLOYMENT = bytes.fromhex(
    "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412b9010a1d"
    "0a02706412001a0022002a003200380042005a090a0361707012027064128901"
    "0802120b0a090a03617070120270641a700a1b0a0012001a0022002a00320038"
    "0042005a090a0361707012027064125112330a0762757379626f781207627573"
    "79626f782a00320b0a00100018903f22002a0042006a00720080010088010090"
    "0100a201001a00320042004a0052005800600068008201008a01009a0100c201"
    "0022020a00280038001a0c0800100018002000280038001a002200"
)
# `kubectl drain --disable-eviction --grace-period=7` deleting a pod: client-go's DeleteOptions.
KUBECTL_DRAIN_DELETE_OPTIONS = bytes.fromhex(
    "6b3873000a130a027631120d44656c6574654f7074696f6e73120208071a002200"
)


def test_what_kubectl_create_deployment_sends_reads_whole() -> None:
    doc, unknown = kubeproto.decode_unknown(KUBECTL_CREATE_DEPLOYMENT)
    assert unknown == []
    labels = {"app": "pd"}
    assert doc == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "pd", "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "busybox", "image": "busybox", "ports": [{"containerPort": 8080}]}
                    ]
                },
            },
        },
    }


def test_client_go_delete_options() -> None:
    assert kubeproto.delete_options(KUBECTL_DRAIN_DELETE_OPTIONS) == {"gracePeriodSeconds": 7}
    wrong = envelope("v1", "Namespace", b"")
    with pytest.raises(BadRequestError, match="not DeleteOptions"):
        kubeproto.delete_options(wrong)


def test_fixed_width_fields_are_unknown_fields_or_truncation() -> None:
    """No Kubernetes field is fixed64/fixed32: one is an unknown field (fieldValidation
    decides); one cut short is a malformed body."""
    meta = text(1, "cm")
    fixed = bytes([14 << 3 | 1]) + (7).to_bytes(8, "little")  # field 14, fixed64
    _, unknown = kubeproto.decode_unknown(envelope("v1", "ConfigMap", field(1, meta) + fixed))
    assert unknown == ["<field 14>"]
    with pytest.raises(BadRequestError, match="truncated"):
        kubeproto.decode(envelope("v1", "ConfigMap", field(1, meta) + fixed[:5]))
