"""TokenRequest's rules and errors, tokens bound to secrets, the reviews' authorization, OIDC
discovery's, and two apiservers sharing one service account key (HA).

In-process apiservers on TLS with the PKI's certificates and its sa.key/sa.pub, over the session
etcd; REST requests with aiohttp as the admin (client certificate) or with a bearer token only.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import pytest

from apiserver.app import APIServer
from apiserver.settings import Settings
from tests.integration.conftest import make_settings
from tinykube.localetcd import EtcdServer
from tinykube.pki import PKI, cluster_specs

pytestmark = pytest.mark.integration

NS = "team"
ISSUER = "https://kubernetes.default.svc.cluster.local"
TOKEN = f"/api/v1/namespaces/{NS}/serviceaccounts/robot/token"
KUBELET_NODE = "tok-kubelet"


async def eventually(check: Callable[[], Awaitable[Any]], limit: float, what: str) -> Any:
    """Poll `check` until it returns something truthy (the caches follow etcd's watch)."""
    deadline = asyncio.get_running_loop().time() + limit
    while True:
        last = await check()
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}; last: {last!r}")
        await asyncio.sleep(0.1)


@dataclass
class Api:
    url: str
    pki: PKI
    session: aiohttp.ClientSession

    def _ssl(self, admin: bool, cert: str = "admin") -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert_path))
        if admin:
            paths = self.pki.paths(cert)
            ctx.load_cert_chain(str(paths.cert), str(paths.key))
        return ctx

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        cert: str = "admin",
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.request(
            method,
            self.url + path,
            json=body,
            headers=headers,
            ssl=self._ssl(token is None, cert),
        ) as r:
            return r.status, await r.json(content_type=None)

    async def token_for(self, spec: dict[str, Any] | None = None) -> str:
        code, body = await self.call("POST", TOKEN, {"spec": spec or {}})
        assert code == 201, body
        return str(body["status"]["token"])


def settings_for(pki: PKI, etcd: EtcdServer, **overrides: Any) -> Settings:
    api = pki.paths("apiserver")
    sa = pki.ensure_service_account_key()
    return make_settings(
        etcd.endpoint,
        rest_port=0,
        tls_cert_file=str(api.cert),
        tls_private_key_file=str(api.key),
        client_ca_file=str(pki.ca_cert_path),
        service_account_key_files=(str(sa.cert),),
        service_account_signing_key_file=str(sa.key),
        service_account_max_token_expiration_seconds=7200,
        **overrides,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    pki = PKI(tmp_path_factory.mktemp("tokens") / "pki")
    pki.ensure_all(cluster_specs([KUBELET_NODE]))
    return pki


@pytest.fixture(scope="module")
async def server(pki: PKI, etcd_server: EtcdServer) -> AsyncIterator[APIServer]:
    server = APIServer(settings_for(pki, etcd_server))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def api(server: APIServer, pki: PKI) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        api = Api(server.rest_url, pki, session)
        await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        for account in ("robot", "other"):
            await api.call(
                "POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": account}}
            )
        yield api


def pod(name: str, account: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": account,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


async def test_token_request_rules(api: Api) -> None:
    code, body = await api.call(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/ghost/token", {"spec": {}}
    )
    assert (code, body["reason"], body["message"]) == (
        404,
        "NotFound",
        'serviceaccounts "ghost" not found',
    )
    code, body = await api.call("POST", TOKEN, {"spec": {"expirationSeconds": 599}})
    assert code == 422
    assert body["message"] == (
        'TokenRequest.authentication.k8s.io "robot" is invalid: spec.expirationSeconds: Invalid '
        "value: 599: may not specify a duration less than 10 minutes"
    )
    assert body["details"]["causes"][0]["field"] == "spec.expirationSeconds"
    code, body = await api.call("POST", TOKEN, {"metadata": {"name": "other"}, "spec": {}})
    assert code == 422 and "must match the service account name" in body["message"]
    # Longer than --service-account-max-token-expiration: shortened to it.
    code, body = await api.call("POST", TOKEN, {"spec": {"expirationSeconds": 86400}})
    assert code == 201 and body["spec"]["expirationSeconds"] == 7200
    assert body["spec"]["audiences"] == [ISSUER]
    assert body["kind"] == "TokenRequest" and body["status"]["expirationTimestamp"].endswith("Z")
    code, body = await api.call("POST", TOKEN + "?dryRun=All", {"spec": {}})
    assert code == 201 and body["status"]["token"] == ""

    bound = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    code, body = await api.call("POST", TOKEN, {"spec": {"boundObjectRef": bound}})
    assert (code, body["message"]) == (
        400,
        "cannot bind token to object of type apps/v1, Kind=Deployment",
    )
    await api.call("POST", f"/api/v1/namespaces/{NS}/pods", pod("theirs", "other"))
    bound = {"apiVersion": "v1", "kind": "Pod", "name": "theirs"}
    code, body = await api.call("POST", TOKEN, {"spec": {"boundObjectRef": bound}})
    assert (code, body["message"]) == (
        400,
        'cannot bind token for serviceaccount "robot" to pod running with different '
        "serviceaccount name.",
    )
    await api.call("POST", f"/api/v1/namespaces/{NS}/pods", pod("mine", "robot"))
    bound = {"apiVersion": "v1", "kind": "Pod", "name": "mine", "uid": "stale"}
    code, body = await api.call("POST", TOKEN, {"spec": {"boundObjectRef": bound}})
    assert code == 409 and "does not match the UID in record" in body["message"]


async def test_secret_bound_token_ends_with_the_secret(api: Api) -> None:
    await api.call(
        "POST", f"/api/v1/namespaces/{NS}/secrets", {"metadata": {"name": "anchor"}, "data": {}}
    )
    bound = {"apiVersion": "v1", "kind": "Secret", "name": "anchor"}
    token = await api.token_for({"boundObjectRef": bound})
    code, _ = await api.call("GET", f"/api/v1/namespaces/{NS}/pods", token=token)
    assert code == 403  # authenticated; robot is granted nothing
    await api.call("DELETE", f"/api/v1/namespaces/{NS}/secrets/anchor")

    async def refused() -> bool:
        code, body = await api.call("GET", f"/api/v1/namespaces/{NS}/pods", token=token)
        return code == 401 and body["message"] == "Unauthorized"

    await eventually(refused, 30, "the token to stop working with its secret")


async def test_recreated_service_account_invalidates_its_tokens(api: Api) -> None:
    path = f"/api/v1/namespaces/{NS}/serviceaccounts"
    await api.call("POST", path, {"metadata": {"name": "phoenix"}})
    code, body = await api.call("POST", f"{path}/phoenix/token", {"spec": {}})
    assert code == 201, body
    token = body["status"]["token"]
    await api.call("DELETE", f"{path}/phoenix")
    await api.call("POST", path, {"metadata": {"name": "phoenix"}})

    async def review_error() -> str:
        _, review = await api.call(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
             "spec": {"token": token}},
        )  # fmt: skip
        return str(review["status"].get("error", ""))

    error = await eventually(review_error, 30, "the old token to be refused")
    assert "does not match claim" in error or "not found" in error


async def test_reviews_and_discovery_are_authorized(api: Api) -> None:
    token = await api.token_for()
    review = {"spec": {"token": token}}
    code, body = await api.call(
        "POST", "/apis/authentication.k8s.io/v1/tokenreviews", review, token=token
    )
    assert (code, body["message"]) == (
        403,
        f'tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:{NS}:'
        'robot" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at '
        "the cluster scope",
    )
    code, body = await api.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {})
    assert code == 422 and body["message"].endswith("spec.token: Required value")
    code, body = await api.call(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {"spec": {}}
    )
    assert code == 422 and "at least one of user or group must be specified" in body["message"]
    await api.call(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "robot-delegator"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:auth-delegator",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": NS}],
        },
    )

    async def delegated() -> bool:
        code, body = await api.call(
            "POST", "/apis/authentication.k8s.io/v1/tokenreviews", review, token=token
        )
        return code == 201 and body["status"]["authenticated"] is True

    await eventually(delegated, 30, "system:auth-delegator to let robot review tokens")

    # OIDC discovery: any service account may read it; nobody else by default.
    code, doc = await api.call("GET", "/.well-known/openid-configuration", token=token)
    assert code == 200 and doc["issuer"] == ISSUER
    code, doc = await api.call("GET", "/openid/v1/jwks", token=token)
    assert code == 200 and len(doc["keys"]) == 1
    async with api.session.get(api.url + "/openid/v1/jwks", ssl=api._ssl(admin=False)) as anonymous:
        assert anonymous.status == 401


async def test_a_second_apiserver_with_the_same_key_accepts_the_tokens(
    api: Api, pki: PKI, etcd_server: EtcdServer, server: APIServer
) -> None:
    token = await api.token_for()
    second = APIServer(replace(server.settings))
    await second.start()
    try:
        other = Api(second.rest_url, pki, api.session)

        async def who() -> bool:
            code, body = await other.call(
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                token=token,
            )
            return code == 201 and body["status"]["userInfo"]["username"] == (
                f"system:serviceaccount:{NS}:robot"
            )

        await eventually(who, 30, "the second apiserver to accept the first's token")
    finally:
        await second.stop()


async def test_node_bound_token_ends_with_the_node(api: Api) -> None:
    code, body = await api.call("POST", "/api/v1/nodes", {"metadata": {"name": "tok-node"}})
    assert code == 201, body
    bound = {"apiVersion": "v1", "kind": "Node", "name": "tok-node"}
    code, body = await api.call("POST", TOKEN, {"spec": {"boundObjectRef": bound}})
    assert code == 201, body
    token = body["status"]["token"]
    code, _ = await api.call("GET", f"/api/v1/namespaces/{NS}/pods", token=token)
    assert code == 403
    await api.call("DELETE", "/api/v1/nodes/tok-node")

    async def refused() -> bool:
        code, _ = await api.call("GET", f"/api/v1/namespaces/{NS}/pods", token=token)
        return code == 401

    await eventually(refused, 30, "the token to stop working with its node")


async def test_a_token_for_objects_the_cache_lags_behind_waits_for_it(
    api: Api, server: APIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa_tokens = server.authenticator.service_accounts
    assert sa_tokens is not None
    lookup = sa_tokens.lookup
    real = lookup.service_account
    asked: list[str] = []

    def lagging(namespace: str, name: str) -> Any:
        # The first look misses, as a cache that has not seen the account yet would.
        asked.append(name)
        return None if len(asked) == 1 else real(namespace, name)

    token = await api.token_for()
    monkeypatch.setattr(lookup, "service_account", lagging)
    code, body = await api.call("GET", f"/api/v1/namespaces/{NS}/pods", token=token)
    assert code == 403, body  # authenticated (robot may not list pods)
    assert asked == ["robot", "robot"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (TOKEN, {"spec": {"expirationSeconds": "600"}}),
        (TOKEN, {"spec": {"expirationSeconds": 600.5}}),
        (TOKEN, {"spec": {"expirationSeconds": True}}),
        (TOKEN, {"spec": {"audiences": "x"}}),
        (TOKEN, {"spec": {"audiences": [1]}}),
        (TOKEN, {"spec": {"boundObjectRef": "pod"}}),
        (TOKEN, {"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1"}}}),
        (TOKEN, {"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": 7}}}),
        (TOKEN, {"metadata": "x", "spec": []}),
        (TOKEN, [1, 2]),
        ("/apis/authentication.k8s.io/v1/tokenreviews", {"spec": {"token": 5}}),
        ("/apis/authentication.k8s.io/v1/tokenreviews", {"spec": "x"}),
        ("/apis/authorization.k8s.io/v1/subjectaccessreviews", {"spec": {"user": "u"}}),
        (
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"spec": {"user": "u", "resourceAttributes": "x"}},
        ),
        (
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"spec": {"groups": "g", "nonResourceAttributes": {"path": 1}}},
        ),
        (
            f"/apis/authorization.k8s.io/v1/namespaces/{NS}/localsubjectaccessreviews",
            {"spec": {"user": "u", "resourceAttributes": {"namespace": 3}}},
        ),
        ("/apis/authorization.k8s.io/v1/localsubjectaccessreviews", {"spec": {"user": "u"}}),
        ("/apis/authentication.k8s.io/v1/tokenreviews/x", {"spec": {"token": "t"}}),
        (f"/api/v1/namespaces/{NS}/serviceaccounts/robot/tokens", {}),
    ],
)
async def test_bad_bodies_are_client_errors(api: Api, path: str, body: Any) -> None:
    code, answer = await api.call("POST", path, body)
    assert 400 <= code < 500, (code, answer)
    assert answer["kind"] == "Status" and answer["message"], answer


async def test_a_kubelet_gets_tokens_only_for_its_pods(api: Api) -> None:
    kubelet = f"kubelet-{KUBELET_NODE}"
    await api.call("POST", "/api/v1/nodes", {"metadata": {"name": KUBELET_NODE}})
    on_node = pod("on-node", "robot")
    on_node["spec"]["nodeName"] = KUBELET_NODE
    code, created = await api.call("POST", f"/api/v1/namespaces/{NS}/pods", on_node)
    assert code == 201, created
    uid = created["metadata"]["uid"]
    bound = {"apiVersion": "v1", "kind": "Pod", "name": "on-node", "uid": uid}

    async def minted() -> Any:
        code, body = await api.call(
            "POST", TOKEN, {"spec": {"boundObjectRef": bound}}, cert=kubelet
        )
        return body if code == 201 else None

    body = await eventually(minted, 30, "the Node authorizer to see the pod on its node")
    assert body["status"]["token"]
    code, body = await api.call("POST", TOKEN, {"spec": {}}, cert=kubelet)
    assert (code, body["message"]) == (
        403,
        'serviceaccounts "robot" is forbidden: node requested token not bound to a pod',
    )
    code, body = await api.call(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts/other/token",
        {"spec": {}},
        cert=kubelet,
    )
    assert code == 403
    assert body["message"] == (
        f'serviceaccounts "other" is forbidden: User "system:node:{KUBELET_NODE}" cannot create '
        f'resource "serviceaccounts/token" in API group "" in the namespace "{NS}": no '
        f"relationship found between node '{KUBELET_NODE}' and this object"
    )
