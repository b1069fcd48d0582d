"""ServiceAccount tokens against `tinykube up`, with the real kubectl and the Python client.

`kubectl create token` prints a JWT signed with the cluster's sa.key; a kubeconfig holding only
that token and the CA lets kubectl and the official `kubernetes` client do what RBAC grants the
account (view in its namespace) and refuses the rest with kube's 403; an expired token (crafted
with the session PKI's sa.key) is 401; a token bound to a pod stops working once the pod is
gone; TokenReview and SubjectAccessReview answer as kube's; the OIDC discovery documents'
key verifies a token; discovery lists the new resources. Each test uses names of its own.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from apiserver.auth.tokens import Ref, claims, encode, load_private_key, parse, public_key_from_jwk
from apiserver.auth.tokens import verify as verify_signature
from tests.e2e.conftest import CLIResult, UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e

ISSUER = "https://kubernetes.default.svc.cluster.local"


def payload(token: str) -> dict[str, Any]:
    parsed = parse(token)
    assert parsed is not None, token
    return parsed.claims


def token_kubeconfig(cluster: UpCluster, path: Path, token: str) -> Path:
    """A kubeconfig with the cluster's CA and `token` only: no client certificate."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    ca = admin["clusters"][0]["cluster"]["certificate-authority-data"]
    conf = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tinykube",
                "cluster": {"server": cluster.rest_url, "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": "robot", "user": {"token": token}}],
        "contexts": [{"name": "robot", "context": {"cluster": "tinykube", "user": "robot"}}],
        "current-context": "robot",
    }
    path.write_text(yaml.safe_dump(conf))
    return path


def as_token(cluster: UpCluster, conf: Path, *args: str, stdin: str | None = None) -> CLIResult:
    """kubectl with `conf` instead of the admin kubeconfig."""
    return cluster.kubectl("--kubeconfig", str(conf), *args, stdin=stdin)


def create_namespace(cluster: UpCluster, namespace: str) -> str:
    """The namespace, once its `default` account exists; returns that account's uid."""
    ok(cluster.kubectl("create", "namespace", namespace))

    def uid() -> str:
        got = cluster.kubectl(
            "get", "sa", "default", "-n", namespace, "-o", "jsonpath={.metadata.uid}"
        )
        return got.out if got.code == 0 else ""

    return until(uid, f"serviceaccount default in {namespace}")


def sleeper(name: str, namespace: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}],
            },
        }
    )


def test_token_of_an_account_does_what_rbac_allows(tinykube_up: UpCluster, tmp_path: Path) -> None:
    ns = "tok-view"
    sa_uid = create_namespace(tinykube_up, ns)
    created = tinykube_up.kubectl("create", "token", "default", "-n", ns)
    assert created.code == 0, created.err
    token = created.out.strip()
    assert token.count(".") == 2
    c = payload(token)
    assert c["iss"] == ISSUER
    assert c["aud"] == [ISSUER]
    assert c["sub"] == f"system:serviceaccount:{ns}:default"
    assert c["exp"] - c["iat"] == 3600 and c["nbf"] == c["iat"]
    assert c["jti"]
    assert c["kubernetes.io"] == {
        "namespace": ns,
        "serviceaccount": {"name": "default", "uid": sa_uid},
    }
    ok(
        tinykube_up.kubectl(
            "create",
            "rolebinding",
            "robot-view",
            "--clusterrole=view",
            f"--serviceaccount={ns}:default",
            "-n",
            ns,
        )
    )
    conf = token_kubeconfig(tinykube_up, tmp_path / "robot.conf", token)
    whoami = as_token(tinykube_up, conf, "auth", "whoami", "-o", "json")
    assert whoami.code == 0, whoami.err
    info = json.loads(whoami.out)["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{ns}:default"
    assert info["uid"] == sa_uid
    assert info["extra"] == {"authentication.kubernetes.io/credential-id": [f"JTI={c['jti']}"]}
    table = ok(as_token(tinykube_up, conf, "auth", "whoami"))
    assert f"Extra: authentication.kubernetes.io/credential-id   [JTI={c['jti']}]" in table
    assert set(info["groups"]) == {
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    }
    listed = as_token(tinykube_up, conf, "get", "pods", "-n", ns)
    assert (listed.code, listed.out) == (0, ""), listed.err
    assert "No resources found" in listed.err
    refused = as_token(tinykube_up, conf, "create", "-f", "-", stdin=sleeper("nope", ns))
    assert refused.code == 1
    assert refused.err == (
        f'Error from server (Forbidden): error when creating "STDIN": pods is forbidden: User '
        f'"system:serviceaccount:{ns}:default" cannot create resource "pods" in API group "" '
        f'in the namespace "{ns}"\n'
    )
    other = as_token(tinykube_up, conf, "get", "pods", "-n", "default")
    assert other.code == 1 and 'cannot list resource "pods"' in other.err

    # The official Python client, with the same kubeconfig.
    api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(conf)))  # type: ignore[no-untyped-call]
    assert api.list_namespaced_pod(ns).items == []
    with pytest.raises(k8s.ApiException) as denied:
        api.create_namespaced_pod(ns, json.loads(sleeper("nope", ns)))
    assert denied.value.status == 403
    assert json.loads(str(denied.value.body))["message"] == (
        f'pods is forbidden: User "system:serviceaccount:{ns}:default" cannot create resource '
        f'"pods" in API group "" in the namespace "{ns}"'
    )
    # view grants no tokens: the subresource is refused with kube's message.
    request = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[]))
    with pytest.raises(k8s.ApiException) as no_token:
        api.create_namespaced_service_account_token("default", ns, request)
    assert no_token.value.status == 403
    assert json.loads(str(no_token.value.body))["message"] == (
        f'serviceaccounts "default" is forbidden: User "system:serviceaccount:{ns}:default" '
        f'cannot create resource "serviceaccounts/token" in API group "" in the namespace "{ns}"'
    )
    # The admin's client mints one with the official client's TokenRequest.
    admin = k8s.CoreV1Api(
        k8s_config.new_client_from_config(config_file=str(tinykube_up.kubeconfig))  # type: ignore[no-untyped-call]
    )
    minted = admin.create_namespaced_service_account_token(
        "default", ns, k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(audiences=[ISSUER], expiration_seconds=1200)
        ),
    )  # fmt: skip
    assert minted.spec is not None and minted.spec.expiration_seconds == 1200
    assert minted.status is not None
    minted_token = str(minted.status.token)
    assert payload(minted_token)["sub"] == f"system:serviceaccount:{ns}:default"
    review = k8s.AuthenticationV1Api(admin.api_client).create_token_review(
        k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=minted_token))
    )
    assert review.status is not None and review.status.authenticated is True
    assert review.status.user is not None
    assert review.status.user.username == f"system:serviceaccount:{ns}:default"


def test_expired_tampered_and_foreign_tokens_are_unauthorized(
    tinykube_up: UpCluster, tmp_path: Path
) -> None:
    ns = "tok-expired"
    sa_uid = create_namespace(tinykube_up, ns)
    key = load_private_key(str(tinykube_up.pki_dir / "sa.key"))
    now = time.time()

    def crafted(issued: float, **kw: Any) -> str:
        body = claims(
            issuer=kw.pop("issuer", ISSUER),
            namespace=ns,
            service_account=Ref("default", kw.pop("uid", sa_uid)),
            audiences=[ISSUER],
            now=datetime.fromtimestamp(issued, UTC),
            expiration_seconds=600,
        )
        return encode(body, kw.pop("key", key))

    good = crafted(now)
    conf = token_kubeconfig(tinykube_up, tmp_path / "good.conf", good)
    assert as_token(tinykube_up, conf, "auth", "whoami").code == 0
    for name, token in {
        "expired": crafted(now - 3600),
        "wrong uid": crafted(now, uid="0000"),
        "wrong issuer": crafted(now, issuer="https://elsewhere.example"),
        "tampered": good[:-6] + ("AAAAAA" if not good.endswith("AAAAAA") else "BBBBBB"),
    }.items():
        conf = token_kubeconfig(tinykube_up, tmp_path / "bad.conf", token)
        got = as_token(tinykube_up, conf, "get", "pods", "-n", ns)
        assert got.code == 1, name
        assert got.err == "error: You must be logged in to the server (Unauthorized)\n", name


def test_token_bound_to_a_pod_ends_with_the_pod(tinykube_up: UpCluster, tmp_path: Path) -> None:
    ns = "tok-bound"
    create_namespace(tinykube_up, ns)
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=sleeper("holder", ns)))
    pod_uid = ok(
        tinykube_up.kubectl("get", "pod", "holder", "-n", ns, "-o", "jsonpath={.metadata.uid}")
    )
    created = tinykube_up.kubectl(
        "create",
        "token",
        "default",
        "-n",
        ns,
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        "holder",
        "--duration",
        "15m",
        "--audience",
        "https://kubernetes.default.svc.cluster.local",
        "--audience",
        "vault",
    )
    assert created.code == 0, created.err
    token = created.out.strip()
    c = payload(token)
    assert c["exp"] - c["iat"] == 900
    assert c["aud"] == [ISSUER, "vault"]
    assert c["kubernetes.io"]["pod"] == {"name": "holder", "uid": pod_uid}
    conf = token_kubeconfig(tinykube_up, tmp_path / "bound.conf", token)
    whoami = as_token(tinykube_up, conf, "auth", "whoami", "-o", "json")
    assert whoami.code == 0, whoami.err

    # A pod of another name is refused; so is a token for a kind that cannot be bound.
    missing = tinykube_up.kubectl(
        "create", "token", "default", "-n", ns, "--bound-object-kind", "Pod",
        "--bound-object-name", "ghost",
    )  # fmt: skip
    assert missing.code == 1
    assert missing.err == 'error: failed to create token: pods "ghost" not found\n'
    short = tinykube_up.kubectl("create", "token", "default", "-n", ns, "--duration", "5m")
    assert short.code == 1
    assert "may not specify a duration less than 10 minutes" in short.err

    ok(tinykube_up.kubectl("delete", "pod", "holder", "-n", ns, "--wait=true"))

    def refused() -> bool:
        got = as_token(tinykube_up, conf, "auth", "whoami")
        return got.code == 1 and "Unauthorized" in got.err

    until(refused, "the bound token to stop working once the pod is gone")


def test_token_review_and_subject_access_review(tinykube_up: UpCluster) -> None:
    ns = "tok-review"
    sa_uid = create_namespace(tinykube_up, ns)
    token = ok(tinykube_up.kubectl("create", "token", "default", "-n", ns)).strip()

    def review(spec: dict[str, Any], kind: str = "TokenReview", **meta: str) -> dict[str, Any]:
        group = "authentication.k8s.io" if kind == "TokenReview" else "authorization.k8s.io"
        doc = {"apiVersion": f"{group}/v1", "kind": kind, "metadata": meta, "spec": spec}
        got = tinykube_up.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(doc))
        assert got.code == 0, got.err
        return json.loads(got.out)  # type: ignore[no-any-return]

    good = review({"token": token})["status"]
    assert good["authenticated"] is True
    assert good["audiences"] == [ISSUER]
    user = good["user"]
    assert user["username"] == f"system:serviceaccount:{ns}:default"
    assert user["uid"] == sa_uid
    assert user["groups"] == [
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    ]
    assert user["extra"] == {
        "authentication.kubernetes.io/credential-id": [f"JTI={payload(token)['jti']}"]
    }
    wrong_audience = review({"token": token, "audiences": ["vault"]})["status"]
    assert wrong_audience["authenticated"] is False
    assert wrong_audience["error"] == (
        f'[invalid bearer token, token audiences ["{ISSUER}"] is invalid for the target '
        'audiences ["vault"]]'
    )
    bad = review({"token": "not-a-token"})["status"]
    assert bad == {"authenticated": False, "user": {}, "error": "invalid bearer token"}

    ok(
        tinykube_up.kubectl(
            "create", "rolebinding", "robot-view", "--clusterrole=view",
            f"--serviceaccount={ns}:default", "-n", ns,
        )
    )  # fmt: skip
    subject = {
        "user": f"system:serviceaccount:{ns}:default",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{ns}"],
    }

    def allowed(verb: str) -> bool:
        attrs = {"namespace": ns, "verb": verb, "resource": "pods"}
        status = review({**subject, "resourceAttributes": attrs}, "SubjectAccessReview")
        return bool(status["status"]["allowed"])

    until(lambda: allowed("list"), "RBAC to see the rolebinding")
    assert allowed("get")
    assert not allowed("create")
    local = review(
        {**subject, "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "pods"}},
        "LocalSubjectAccessReview",
        namespace=ns,
    )
    assert local["status"]["allowed"] is True


def test_oidc_discovery_keys_verify_a_token(tinykube_up: UpCluster, tmp_path: Path) -> None:
    ns = "tok-oidc"
    create_namespace(tinykube_up, ns)
    token = ok(tinykube_up.kubectl("create", "token", "default", "-n", ns)).strip()
    conf = token_kubeconfig(tinykube_up, tmp_path / "oidc.conf", token)
    config = json.loads(
        ok(as_token(tinykube_up, conf, "get", "--raw", "/.well-known/openid-configuration"))
    )
    assert config == {
        "issuer": ISSUER,
        "jwks_uri": f"{ISSUER}/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }
    keys = json.loads(ok(as_token(tinykube_up, conf, "get", "--raw", "/openid/v1/jwks")))["keys"]
    parsed = parse(token)
    assert parsed is not None
    (key,) = [k for k in keys if k["kid"] == parsed.header["kid"]]
    assert (key["kty"], key["alg"], key["use"]) == ("RSA", "RS256", "sig")
    assert verify_signature(
        public_key_from_jwk(key), "RS256", parsed.signing_input, parsed.signature
    )


def test_discovery_lists_the_token_and_review_resources(tinykube_up: UpCluster) -> None:
    listed = ok(tinykube_up.kubectl("api-resources", "--no-headers", "-o", "name"))
    names = set(listed.split())
    assert {
        "tokenreviews.authentication.k8s.io",
        "selfsubjectreviews.authentication.k8s.io",
        "subjectaccessreviews.authorization.k8s.io",
        "localsubjectaccessreviews.authorization.k8s.io",
        "selfsubjectaccessreviews.authorization.k8s.io",
    } <= names
    v1 = json.loads(ok(tinykube_up.kubectl("get", "--raw", "/api/v1")))
    (token,) = [r for r in v1["resources"] if r["name"] == "serviceaccounts/token"]
    assert (token["group"], token["version"], token["kind"], token["verbs"]) == (
        "authentication.k8s.io",
        "v1",
        "TokenRequest",
        ["create"],
    )


def test_a_token_secret_is_filled_by_the_controller_manager(
    tinykube_up: UpCluster, tmp_path: Path
) -> None:
    ns = "tok-secret"
    sa_uid = create_namespace(tinykube_up, ns)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": "default-token",
            "namespace": ns,
            "annotations": {"kubernetes.io/service-account.name": "default"},
        },
    }
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=json.dumps(secret)))

    def filled() -> dict[str, Any] | None:
        got = tinykube_up.kubectl("get", "secret", "default-token", "-n", ns, "-o", "json")
        doc = json.loads(got.out) if got.code == 0 else {}
        return doc if "token" in doc.get("data", {}) else None

    doc = until(filled, "the controller manager to write the token")
    assert doc is not None
    assert doc["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == sa_uid
    assert base64.b64decode(doc["data"]["namespace"]) == ns.encode()
    assert base64.b64decode(doc["data"]["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    token = base64.b64decode(doc["data"]["token"]).decode()
    assert payload(token)["iss"] == "kubernetes/serviceaccount"
    conf = token_kubeconfig(tinykube_up, tmp_path / "legacy.conf", token)
    whoami = as_token(tinykube_up, conf, "auth", "whoami", "-o", "json")
    assert whoami.code == 0, whoami.err
    assert json.loads(whoami.out)["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{ns}:default"
    )
    ok(tinykube_up.kubectl("delete", "secret", "default-token", "-n", ns))

    def refused() -> bool:
        got = as_token(tinykube_up, conf, "auth", "whoami")
        return got.code == 1 and "Unauthorized" in got.err

    until(refused, "the token to stop working with its secret")
