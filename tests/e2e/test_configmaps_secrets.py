"""The real kubectl's ConfigMap and Secret verbs against `tinykube up`, as against Kubernetes.

`kubectl create configmap` (--from-literal, --from-file; posted as protobuf), `kubectl create
secret generic|tls|docker-registry`, `get cm,secrets` and the jsonpath of a value, `describe`
(sizes, never values, for a Secret), `apply` of a Secret with stringData, and an immutable
ConfigMap's update refused with kube's message and 422. Each test uses names of its own.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import assert_output, ok

pytestmark = pytest.mark.e2e

SECRET_VALUE = "s3cr3t-e2e-value"
IMMUTABLE = "field is immutable when `immutable` is set"


def test_create_get_and_describe_config_map(tinykube_up: UpCluster, tmp_path: Path) -> None:
    settings = tmp_path / "app.properties"
    settings.write_text("color=blue\nsize=10\n")
    created = tinykube_up.kubectl(
        "create", "configmap", "app-config", "--from-literal=mode=fast", f"--from-file={settings}"
    )
    assert (created.code, created.out, created.err) == (0, "configmap/app-config created\n", "")
    cm = json.loads(ok(tinykube_up.kubectl("get", "configmap", "app-config", "-o", "json")))
    assert cm["data"] == {"app.properties": "color=blue\nsize=10\n", "mode": "fast"}
    assert ok(tinykube_up.kubectl("get", "cm", "app-config", "-o", "jsonpath={.data.mode}")) == (
        "fast"
    )
    assert_output(
        ok(tinykube_up.kubectl("get", "cm", "app-config")),
        """
NAME         DATA   AGE
app-config   2      <age>
""",
    )
    assert_output(
        ok(tinykube_up.kubectl("describe", "configmap", "app-config")),
        """
Name:         app-config
Namespace:    default
Labels:       <none>
Annotations:  <none>

Data
====
app.properties:
----
color=blue
size=10


mode:
----
fast


BinaryData
====

Events:  <none>
""",
    )
    # kubectl create configmap checks keys itself; a manifest reaches the server's check.
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad-key}\ndata: {'a b': c}\n"
    refused = tinykube_up.kubectl("create", "-f", "-", stdin=manifest)
    assert refused.code == 1
    assert refused.err.startswith(
        'The ConfigMap "bad-key" is invalid: data[a b]: Invalid value: "a b": a valid config '
        "key must consist of alphanumeric characters"
    ), refused.err


def test_create_secrets_of_three_types(tinykube_up: UpCluster) -> None:
    generic = tinykube_up.kubectl(
        "create", "secret", "generic", "db", "--from-literal=user=admin",
        f"--from-literal=password={SECRET_VALUE}",
    )  # fmt: skip
    assert (generic.code, generic.out) == (0, "secret/db created\n"), generic.err
    pki = tinykube_up.pki_dir
    tls = tinykube_up.kubectl(
        "create", "secret", "tls", "web-tls", f"--cert={pki / 'ca.crt'}", f"--key={pki / 'ca.key'}"
    )
    assert (tls.code, tls.out) == (0, "secret/web-tls created\n"), tls.err
    registry = tinykube_up.kubectl(
        "create", "secret", "docker-registry", "regcred", "--docker-server=registry.example",
        "--docker-username=me", f"--docker-password={SECRET_VALUE}",
    )  # fmt: skip
    assert (registry.code, registry.out) == (0, "secret/regcred created\n"), registry.err

    encoded = ok(tinykube_up.kubectl("get", "secret", "db", "-o", "jsonpath={.data.password}"))
    assert base64.b64decode(encoded).decode() == SECRET_VALUE
    assert_output(
        ok(tinykube_up.kubectl("get", "secrets", "db", "web-tls", "regcred")),
        """
NAME      TYPE                             DATA   AGE
db        Opaque                           2      <age>
web-tls   kubernetes.io/tls                2      <age>
regcred   kubernetes.io/dockerconfigjson   1      <age>
""",
    )
    described = ok(tinykube_up.kubectl("describe", "secret", "db"))
    assert SECRET_VALUE not in described
    assert_output(
        described,
        f"""
Name:         db
Namespace:    default
Labels:       <none>
Annotations:  <none>

Type:  Opaque

Data
====
password:  {len(SECRET_VALUE)} bytes
user:      5 bytes
""",
    )
    # tinykube's own CLI, over gRPC, prints the same.
    own = ok(tinykube_up.cli("describe", "secret", "db"))
    assert SECRET_VALUE not in own
    assert f"password:  {len(SECRET_VALUE)} bytes" in own
    assert ok(tinykube_up.cli("get", "secret", "db")).split("\n")[1].split()[:3] == [
        "db",
        "Opaque",
        "2",
    ]
    ok(tinykube_up.kubectl("create", "configmap", "listed", "--from-literal=a=b"))
    listing = ok(tinykube_up.kubectl("get", "cm,secrets")).splitlines()
    assert any(line.split()[:2] == ["configmap/listed", "1"] for line in listing), listing
    assert any(line.split()[:3] == ["secret/db", "Opaque", "2"] for line in listing), listing


def test_apply_secret_with_string_data(tinykube_up: UpCluster, tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: applied-secret\n"
        f"stringData:\n  token: {SECRET_VALUE}\n"
    )
    assert ok(tinykube_up.kubectl("apply", "-f", str(path))) == "secret/applied-secret created\n"
    secret = json.loads(ok(tinykube_up.kubectl("get", "secret", "applied-secret", "-o", "json")))
    assert "stringData" not in secret
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["token"]).decode() == SECRET_VALUE
    path.write_text(path.read_text().replace(SECRET_VALUE, "rotated"))
    assert ok(tinykube_up.kubectl("apply", "-f", str(path))) == (
        "secret/applied-secret configured\n"
    )
    token = ok(
        tinykube_up.kubectl("get", "secret", "applied-secret", "-o", "jsonpath={.data.token}")
    )
    assert base64.b64decode(token) == b"rotated"


def test_immutable_config_map_update_is_refused(tinykube_up: UpCluster) -> None:
    ok(tinykube_up.kubectl("create", "configmap", "frozen", "--from-literal=a=b"))
    ok(tinykube_up.kubectl("patch", "configmap", "frozen", "-p", '{"immutable": true}'))
    refused = tinykube_up.kubectl(
        "patch", "configmap", "frozen", "-p", '{"data": {"a": "c"}}', "-v=6"
    )
    assert refused.code == 1
    assert f'The ConfigMap "frozen" is invalid: data: Forbidden: {IMMUTABLE}' in refused.err
    assert "422 Unprocessable Entity" in refused.err
    assert ok(tinykube_up.kubectl("get", "cm", "frozen", "-o", "jsonpath={.data.a}")) == "b"
    # Metadata may still change.
    assert ok(tinykube_up.kubectl("label", "configmap", "frozen", "tier=web")) == (
        "configmap/frozen labeled\n"
    )


def test_no_secret_value_in_the_apiserver_log(tinykube_up: UpCluster) -> None:
    ok(
        tinykube_up.kubectl(
            "create", "secret", "generic", "logged", f"--from-literal=k={SECRET_VALUE}"
        )
    )
    log = (tinykube_up.data_dir / "logs" / "apiserver.log").read_text()
    assert SECRET_VALUE not in log
    assert base64.b64encode(SECRET_VALUE.encode()).decode() not in log
