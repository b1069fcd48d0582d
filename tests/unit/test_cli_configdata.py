"""The tinykube CLI's ConfigMap and Secret columns and describe, as kubectl prints them (the
describe texts are what the real kubectl printed against tinykube in tests/e2e)."""

from __future__ import annotations

from datetime import UTC, datetime

from tinykube import kinds
from tinykube.cli import printers
from tinykube.cli.describe import (
    describe_config_map,
    describe_pod,
    describe_secret,
    describe_service_account,
)
from tinykube.v1 import configmap_pb2, pod_pb2, secret_pb2, serviceaccount_pb2

NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
SECRET_VALUE = "s3cr3t-value-16b"


def make_cm() -> configmap_pb2.ConfigMap:
    cm = configmap_pb2.ConfigMap(
        data={"mode": "fast", "app.properties": "color=blue\nsize=10\n"},
        binaryData={"logo.png": b"\x89PNG"},
    )
    cm.metadata.name, cm.metadata.namespace = "app-config", "default"
    cm.metadata.creationTimestamp.FromDatetime(datetime(2026, 1, 1))
    return cm


def make_secret() -> secret_pb2.Secret:
    secret = secret_pb2.Secret(type="Opaque", data={"user": b"admin", "password": b"x" * 16})
    secret.data["password"] = SECRET_VALUE.encode()
    secret.metadata.name, secret.metadata.namespace = "db", "default"
    secret.metadata.labels["app"] = "db"
    secret.metadata.creationTimestamp.FromDatetime(datetime(2026, 1, 1, 0, 4))
    return secret


def test_columns_and_rows() -> None:
    assert printers.columns(kinds.CONFIG_MAP, wide=True) == ["NAME", "DATA", "AGE"]
    assert printers.row(kinds.CONFIG_MAP, make_cm(), NOW) == ["app-config", "3", "5m"]
    assert printers.columns(kinds.SECRET, wide=True) == ["NAME", "TYPE", "DATA", "AGE"]
    assert printers.row(kinds.SECRET, make_secret(), NOW) == ["db", "Opaque", "2", "60s"]


def test_describe_config_map() -> None:
    assert describe_config_map(make_cm(), [], NOW) == (
        "Name:         app-config\n"
        "Namespace:    default\n"
        "Labels:       <none>\n"
        "Annotations:  <none>\n"
        "\n"
        "Data\n"
        "====\n"
        "app.properties:\n"
        "----\n"
        "color=blue\n"
        "size=10\n"
        "\n"
        "\n"
        "mode:\n"
        "----\n"
        "fast\n"
        "\n"
        "\n"
        "BinaryData\n"
        "====\n"
        "logo.png: 4 bytes\n"
        "\n"
        "Events:  <none>\n"
    )


def test_describe_secret_shows_sizes_never_values() -> None:
    text = describe_secret(make_secret(), [], NOW)
    assert SECRET_VALUE not in text
    assert text == (
        "Name:         db\n"
        "Namespace:    default\n"
        "Labels:       app=db\n"
        "Annotations:  <none>\n"
        "\n"
        "Type:  Opaque\n"
        "\n"
        "Data\n"
        "====\n"
        "password:  16 bytes\n"
        "user:      5 bytes\n"
    )


# ---- ServiceAccounts ------------------------------------------------------------------------


def make_sa() -> serviceaccount_pb2.ServiceAccount:
    sa = serviceaccount_pb2.ServiceAccount()
    sa.metadata.name, sa.metadata.namespace, sa.metadata.uid = "robot", "default", "u-1"
    sa.metadata.creationTimestamp.FromDatetime(datetime(2026, 1, 1))
    return sa


def test_service_account_columns_and_rows() -> None:
    sa = make_sa()
    assert printers.columns(kinds.SERVICE_ACCOUNT, wide=True) == ["NAME", "SECRETS", "AGE"]
    assert printers.row(kinds.SERVICE_ACCOUNT, sa, NOW) == ["robot", "0", "5m"]
    sa.secrets.add(name="a")
    assert printers.row(kinds.SERVICE_ACCOUNT, sa, NOW)[1] == "1"


def test_describe_a_service_account_with_nothing() -> None:
    assert describe_service_account(make_sa(), [], [], NOW) == (
        "Name:                robot\n"
        "Namespace:           default\n"
        "Labels:              <none>\n"
        "Annotations:         <none>\n"
        "Image pull secrets:  <none>\n"
        "Events:              <none>\n"
    )


def test_describe_marks_secrets_the_namespace_lacks_and_lists_tokens() -> None:
    sa = make_sa()
    sa.secrets.add(name="db")
    sa.secrets.add(name="gone")
    sa.imagePullSecrets.add(name="registry")
    token = secret_pb2.Secret(type="kubernetes.io/service-account-token")
    token.metadata.name = "robot-token"
    token.metadata.annotations["kubernetes.io/service-account.name"] = "robot"
    token.metadata.annotations["kubernetes.io/service-account.uid"] = "u-1"
    text = describe_service_account(sa, [make_secret(), token], [], NOW)
    assert text.splitlines()[4:8] == [
        "Image pull secrets:  registry (not found)",
        "Mountable secrets:   db",
        "                     gone (not found)",
        "Tokens:              robot-token",
    ]


def test_describe_pod_names_its_service_account_after_priority() -> None:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace = "web", "default"
    lines = describe_pod(pod, [], NOW).splitlines()
    assert not any(line.startswith("Service Account:") for line in lines)  # unset: no line
    pod.spec.serviceAccountName = "robot"
    lines = describe_pod(pod, [], NOW).splitlines()
    assert lines[2:4] == ["Priority:         0", "Service Account:  robot"]
