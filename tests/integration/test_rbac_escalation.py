"""RBAC's guarantees on a TLS apiserver with real identities, over gRPC and REST alike:
privilege escalation prevention (a namespace admin cannot bind cluster-admin nor write a Role
with rules they lack, and can with `bind` / `escalate`), ClusterRole aggregation (the
clusterrole-aggregation controller running in an in-process controller manager extends `view`
with a user's aggregate-to-view role) and bootstrap reconciliation (an apiserver restart brings a
deleted bootstrap role and a removed subject back, and leaves an autoupdate=false role alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from apiserver.app import APIServer
from apiserver.auth import bootstrap
from apiserver.settings import Settings
from controller.app import ControllerManager
from controller.settings import Settings as ControllerSettings
from tests.integration.conftest import RunningAPIServer, make_settings
from tinykube.client import Client
from tinykube.errors import ForbiddenError, TinykubeError
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, NAMESPACE, ROLE, ROLE_BINDING
from tinykube.kubeconfig import write_kubeconfig
from tinykube.localetcd import EtcdServer, EtcdTLS
from tinykube.pki import PKI, CertSpec, cluster_specs
from tinykube.tls import Credentials, Security
from tinykube.v1 import meta_pb2, namespace_pb2, rbac_pb2

pytestmark = pytest.mark.integration

RBAC = "rbac.authorization.k8s.io"
RBAC_PATH = f"/apis/{RBAC}/v1"
VIEW_LABEL = f"{RBAC}/aggregate-to-view"

# file stem -> common name (no organizations: groups are just system:authenticated)
USERS = {"nsadmin": "nadia", "binder": "bert", "escalator": "esme", "editor": "erin"}


def credentials(pki: PKI, who: str) -> Credentials:
    paths = pki.paths(who)
    return Credentials(
        ca=pki.ca_cert_path.read_bytes(), cert=paths.cert.read_bytes(), key=paths.key.read_bytes()
    )


@dataclass
class Cluster:
    pki: PKI
    server: APIServer

    def creds(self, who: str) -> Credentials:
        return credentials(self.pki, who)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    pki = PKI(tmp_path_factory.mktemp("escalation") / "pki")
    pki.ensure_all([*cluster_specs([]), *(CertSpec(f, cn, client=True) for f, cn in USERS.items())])
    return pki


@pytest.fixture(scope="module")
def tls_etcd(pki: PKI) -> Iterator[EtcdServer]:
    server, peer = pki.paths("etcd-server"), pki.paths("etcd-peer")
    etcd = EtcdServer(
        tls=EtcdTLS(
            str(server.cert), str(server.key), str(pki.ca_cert_path), str(peer.cert), str(peer.key)
        )
    )
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.cleanup()


def tls_settings(pki: PKI, etcd: EtcdServer) -> Settings:
    api, etcd_client = pki.paths("apiserver"), pki.paths("apiserver-etcd-client")
    return make_settings(
        etcd.url,
        rest_port=0,
        tls_cert_file=str(api.cert),
        tls_private_key_file=str(api.key),
        client_ca_file=str(pki.ca_cert_path),
        etcd_cafile=str(pki.ca_cert_path),
        etcd_certfile=str(etcd_client.cert),
        etcd_keyfile=str(etcd_client.key),
    )


def ref(kind: str, name: str) -> rbac_pb2.RoleRef:
    return rbac_pb2.RoleRef(apiGroup=RBAC, kind=kind, name=name)


def user(name: str) -> rbac_pb2.Subject:
    return rbac_pb2.Subject(kind="User", apiGroup=RBAC, name=name)


def rule(
    verbs: list[str], groups: list[str], resources: list[str], names: list[str] | None = None
) -> rbac_pb2.PolicyRule:
    return rbac_pb2.PolicyRule(
        verbs=verbs, apiGroups=groups, resources=resources, resourceNames=names or []
    )


async def _create(server: APIServer, info: Any, obj: Any) -> Any:
    return await server.services[info.kind].create(info.create_request(**{info.request_field: obj}))


async def _populate(server: APIServer) -> None:
    """Namespace "team"; nadia, bert and esme are its admins, erin its editor; bert may also
    bind cluster-admin, esme may escalate Roles in team."""
    await _create(
        server, NAMESPACE, namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name="team"))
    )
    for who, role in (("nadia", "admin"), ("bert", "admin"), ("esme", "admin"), ("erin", "edit")):
        binding = rbac_pb2.RoleBinding(
            metadata=meta_pb2.ObjectMeta(name=f"{who}-{role}", namespace="team"),
            roleRef=ref("ClusterRole", role),
            subjects=[user(who)],
        )
        await _create(server, ROLE_BINDING, binding)
    for name, rules in (
        ("bind-cluster-admin", [rule(["bind"], [RBAC], ["clusterroles"], ["cluster-admin"])]),
        ("escalate-roles", [rule(["escalate"], [RBAC], ["roles"])]),
    ):
        await _create(
            server,
            CLUSTER_ROLE,
            rbac_pb2.ClusterRole(metadata=meta_pb2.ObjectMeta(name=name), rules=rules),
        )
    await _create(
        server,
        CLUSTER_ROLE_BINDING,
        rbac_pb2.ClusterRoleBinding(
            metadata=meta_pb2.ObjectMeta(name="bert-binds"),
            roleRef=ref("ClusterRole", "bind-cluster-admin"),
            subjects=[user("bert")],
        ),
    )
    await _create(
        server,
        ROLE_BINDING,
        rbac_pb2.RoleBinding(
            metadata=meta_pb2.ObjectMeta(name="esme-escalates", namespace="team"),
            roleRef=ref("ClusterRole", "escalate-roles"),
            subjects=[user("esme")],
        ),
    )
    from apiserver.auth.authorizer import Attributes, Identity

    # The authorizer follows the watch caches: wait until it holds what was written.
    esme = Identity("esme", ("system:authenticated",))
    for _ in range(200):
        if server.rbac.allows(esme, Attributes("escalate", "roles", RBAC, "", "team")):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the RBAC caches did not catch up with the test's objects")


@pytest.fixture(scope="module")
async def cluster(
    pki: PKI, tls_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    settings = tls_settings(pki, tls_etcd)
    server = APIServer(settings)
    await server.start()
    cm_paths = pki.paths("controller-manager")
    kubeconfig = write_kubeconfig(
        tmp_path_factory.mktemp("cm") / "controller-manager.conf",
        server.rest_url,
        ca=pki.ca_cert_path.read_bytes(),
        cert=cm_paths.cert.read_bytes(),
        key=cm_paths.key.read_bytes(),
    )
    manager = ControllerManager(
        ControllerSettings(
            apiserver=server.address,
            bind_address="127.0.0.1:0",
            leader_elect=False,
            controllers=("clusterrole-aggregation",),
            security=Security(kubeconfig=str(kubeconfig)),
        )
    )
    try:
        await _populate(server)
        await manager.start()
        yield Cluster(pki, server)
    finally:
        await manager.stop()
        await server.stop()


# ---- writes, over either front end ---------------------------------------------------------------

_PLURALS = {
    rbac_pb2.Role: "roles",
    rbac_pb2.RoleBinding: "rolebindings",
    rbac_pb2.ClusterRole: "clusterroles",
    rbac_pb2.ClusterRoleBinding: "clusterrolebindings",
}


async def create(cluster: Cluster, transport: str, who: str, obj: Any) -> tuple[str, str]:
    """("created", "") or ("forbidden", message) or (another outcome, message)."""
    plural = _PLURALS[type(obj)]
    if transport == "grpc":
        async with Client(
            cluster.server.address, credentials=cluster.creds(who), retries=0, timeout=5
        ) as client:
            api: Any = {
                "roles": client.roles,
                "rolebindings": client.role_bindings,
                "clusterroles": client.cluster_roles,
                "clusterrolebindings": client.cluster_role_bindings,
            }[plural]
            try:
                await api.create(obj)
            except ForbiddenError as exc:
                return "forbidden", exc.message
            except TinykubeError as exc:
                return type(exc).__name__, exc.message
            return "created", ""
    from google.protobuf.json_format import MessageToDict

    body = MessageToDict(obj)
    body["apiVersion"], body["kind"] = f"{RBAC}/v1", type(obj).__name__
    namespace = obj.metadata.namespace
    path = f"{RBAC_PATH}/namespaces/{namespace}/{plural}" if namespace else f"{RBAC_PATH}/{plural}"
    creds = cluster.creds(who)
    ctx = creds.ssl_context()
    assert ctx is not None
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session,
        session.post(cluster.server.rest_url + path, json=body) as resp,
    ):
        status = resp.status
        answer = json.loads(await resp.text())
    if status == 201:
        return "created", ""
    if status == 403:
        assert answer["reason"] == "Forbidden"
        return "forbidden", answer["message"]
    return str(status), answer.get("message", "")


def escalation_message(resource: str, name: str, user: str, *missing: str) -> str:
    return (
        f'{resource}.{RBAC} "{name}" is forbidden: user "{user}" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        "currently held:\n" + "\n".join(missing)
    )


ALL = '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}'
ALL_URLS = '{NonResourceURLs:["*"], Verbs:["*"]}'
DELETE_NODES = '{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}'


def binding_to(name: str, role_kind: str, role: str) -> rbac_pb2.RoleBinding:
    return rbac_pb2.RoleBinding(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="team"),
        roleRef=ref(role_kind, role),
        subjects=[user("someone")],
    )


def team_role(name: str, *rules: rbac_pb2.PolicyRule) -> rbac_pb2.Role:
    return rbac_pb2.Role(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="team"), rules=list(rules)
    )


CASES: list[tuple[str, str, Any, tuple[str, str]]] = [
    # (behaviour, who, object (its name gets the transport appended), outcome)
    (
        "a namespace admin cannot bind cluster-admin",
        "nsadmin",
        binding_to("to-cluster-admin", "ClusterRole", "cluster-admin"),
        (
            "forbidden",
            escalation_message("rolebindings", "to-cluster-admin-{t}", "nadia", ALL, ALL_URLS),
        ),
    ),
    (
        "a namespace admin cannot write a Role with rules they lack",
        "nsadmin",
        team_role("node-deleter", rule(["get"], [""], ["pods"]), rule(["delete"], [""], ["nodes"])),
        ("forbidden", escalation_message("roles", "node-deleter-{t}", "nadia", DELETE_NODES)),
    ),
    (
        "a namespace admin may write a Role with rules they hold",
        "nsadmin",
        team_role("pod-reader", rule(["get", "list"], [""], ["pods"])),
        ("created", ""),
    ),
    (
        "a namespace admin may bind edit (admin holds it)",
        "nsadmin",
        binding_to("to-edit", "ClusterRole", "edit"),
        ("created", ""),
    ),
    (
        "an editor may not write RBAC at all (authorization)",
        "editor",
        binding_to("by-editor", "ClusterRole", "view"),
        (
            "forbidden",
            'rolebindings.rbac.authorization.k8s.io is forbidden: User "erin" cannot create '
            'resource "rolebindings" in API group "rbac.authorization.k8s.io" in the namespace '
            '"team"',
        ),
    ),
    (
        "bind on cluster-admin allows binding it",
        "binder",
        binding_to("bound", "ClusterRole", "cluster-admin"),
        ("created", ""),
    ),
    (
        "escalate on roles allows any rules",
        "escalator",
        team_role("escalated", rule(["delete"], [""], ["nodes"])),
        ("created", ""),
    ),
]


@pytest.mark.parametrize("transport", ["grpc", "rest"])
@pytest.mark.parametrize(
    ("who", "obj", "outcome"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_escalation_prevention(
    cluster: Cluster, transport: str, who: str, obj: Any, outcome: tuple[str, str]
) -> None:
    mine = type(obj)()
    mine.CopyFrom(obj)
    mine.metadata.name = f"{obj.metadata.name}-{transport}"
    got = await create(cluster, transport, who, mine)
    assert got == (outcome[0], outcome[1].replace("{t}", transport))


async def test_a_binding_to_a_missing_role_is_not_found(cluster: Cluster) -> None:
    got = await create(cluster, "rest", "nsadmin", binding_to("ghost", "ClusterRole", "no-such"))
    assert got == ("404", f'clusterroles.{RBAC} "no-such" not found')


# ---- aggregation -------------------------------------------------------------------------------


async def _rules_of(client: Client, name: str) -> list[Any]:
    return list((await client.cluster_roles.get(name)).rules)


async def _until(check: Any, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_an_aggregate_to_view_role_extends_view_edit_and_admin(cluster: Cluster) -> None:
    widgets = rule(["get", "list"], ["example.com"], ["widgets"])
    extra = rbac_pb2.ClusterRole(
        metadata=meta_pb2.ObjectMeta(name="widget-viewer", labels={VIEW_LABEL: "true"}),
        rules=[widgets],
    )
    async with Client(cluster.server.address, credentials=cluster.creds("admin")) as admin:
        before = await _rules_of(admin, "view")
        assert widgets not in before
        assert await create(cluster, "rest", "admin", extra) == ("created", "")

        async def everywhere() -> bool:
            roles = [await _rules_of(admin, n) for n in ("view", "edit", "admin")]
            return all(widgets in r for r in roles)

        await _until(everywhere)
        # Nothing view granted before is lost.
        now = await _rules_of(admin, "view")
        assert all(r in now for r in before)
        await admin.cluster_roles.delete("widget-viewer")

        async def gone() -> bool:
            return await _rules_of(admin, "view") == before

        await _until(gone)


# ---- reconciliation ----------------------------------------------------------------------------


async def test_a_restart_reconciles_the_bootstrap_policy(pki: PKI, tls_etcd: EtcdServer) -> None:
    settings = tls_settings(pki, tls_etcd)
    admin_creds = credentials(pki, "admin")
    first = APIServer(settings)
    await first.start()
    try:
        async with Client(first.address, credentials=admin_creds) as admin:
            await admin.cluster_roles.delete("view")
            basic = await admin.cluster_role_bindings.get("system:basic-user")
            del basic.subjects[:]
            await admin.cluster_role_bindings.update(basic)
            discovery = await admin.cluster_roles.get("system:discovery")
            discovery.metadata.annotations[bootstrap.AUTOUPDATE_ANNOTATION[0]] = "false"
            del discovery.rules[:]
            await admin.cluster_roles.update(discovery)
    finally:
        await first.stop()
    second = APIServer(settings)
    await second.start()
    try:
        async with Client(second.address, credentials=admin_creds) as admin:
            expected = {r.metadata.name: r for r in bootstrap.cluster_roles()}
            view = await admin.cluster_roles.get("view")
            assert list(view.rules) == list(expected["view"].rules)
            assert view.metadata.annotations[bootstrap.AUTOUPDATE_ANNOTATION[0]] == "true"
            basic = await admin.cluster_role_bindings.get("system:basic-user")
            assert [s.name for s in basic.subjects] == ["system:authenticated"]
            discovery = await admin.cluster_roles.get("system:discovery")
            assert list(discovery.rules) == []  # autoupdate "false": left alone
    finally:
        with contextlib.suppress(Exception):
            await second.stop()


async def test_only_an_enforcing_apiserver_checks_escalation(
    cluster: Cluster, apiserver: RunningAPIServer
) -> None:
    """--insecure (and an in-process apiserver without certificates) stays open: no guard."""
    kinds = (CLUSTER_ROLE, CLUSTER_ROLE_BINDING, ROLE, ROLE_BINDING)
    assert all(cluster.server.services[k.kind].escalation is not None for k in kinds)
    assert all(apiserver.server.services[k.kind].escalation is None for k in kinds)
    assert cluster.server.services[NAMESPACE.kind].escalation is None
