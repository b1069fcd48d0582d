"""Authentication and authorization enforced on a TLS apiserver, over gRPC and REST alike.

An in-process apiserver with the PKI's certificates over its own TLS etcd. Each identity (the
components', a `view` user bound cluster-wide, an `edit` user bound in namespace "team", the
admin, and nobody) runs every operation of `OPS` through both front ends; the outcome of each
is "allow" (the request got past authorization and admission: it succeeded, or failed for
another reason such as a missing object), "deny" (PERMISSION_DENIED / 403), "unauth"
(UNAUTHENTICATED / 401) or "refused" (gRPC's TLS handshake wants a client certificate).
Writes that would change state are made harmless: no-op updates, deletes whose uid
precondition fails, creates that fail validation, binds of a pod that does not exist.
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from apiserver.app import APIServer
from apiserver.auth import bootstrap
from tests.integration.conftest import make_node, make_pod, make_settings
from tinykube.client import Client
from tinykube.errors import ForbiddenError, TinykubeError
from tinykube.kinds import (
    CLUSTER_ROLE_BINDING,
    LEASE,
    NAMESPACE,
    NODE,
    POD,
    ROLE_BINDING,
    SERVICE_ACCOUNT,
)
from tinykube.kubeconfig import write_kubeconfig
from tinykube.localetcd import EtcdServer, EtcdTLS
from tinykube.pki import PKI, CertSpec, cluster_specs
from tinykube.tls import Credentials, TransportSecurityError
from tinykube.v1 import (
    event_pb2,
    lease_pb2,
    meta_pb2,
    namespace_pb2,
    pod_pb2,
    rbac_pb2,
    serviceaccount_pb2,
)

pytestmark = pytest.mark.integration

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
WRONG_TOKEN = "not-a-token"
CM_LEASE = bootstrap.CONTROLLER_MANAGER_LEASE


@dataclass
class Cluster:
    pki: PKI
    server: APIServer

    def creds(self, who: str) -> Credentials:
        ca = self.pki.ca_cert_path.read_bytes()
        if who == "anonymous":
            return Credentials(ca=ca)
        if who == "wrong token":
            return Credentials(ca=ca, token=WRONG_TOKEN)
        paths = self.pki.paths(CERTS[who])
        return Credentials(ca=ca, cert=paths.cert.read_bytes(), key=paths.key.read_bytes())


CERTS = {
    "node-1": "kubelet-node-1",
    "node-2": "kubelet-node-2",
    "scheduler": "scheduler",
    "controller-manager": "controller-manager",
    "proxy": "proxy",
    "viewer": "viewer",
    "editor": "editor",
    "admin": "admin",
}
IDENTITIES = ["anonymous", "wrong token", *CERTS]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    pki = PKI(tmp_path_factory.mktemp("enforce") / "pki")
    pki.ensure_all(
        [
            *cluster_specs(["node-1", "node-2"]),
            CertSpec("viewer", "alice", client=True),
            CertSpec("editor", "erin", client=True),
        ]
    )
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


async def _create(server: APIServer, info: Any, obj: Any) -> Any:
    return await server.services[info.kind].create(info.create_request(**{info.request_field: obj}))


def _subject(kind: str, name: str) -> rbac_pb2.Subject:
    return rbac_pb2.Subject(kind=kind, apiGroup="rbac.authorization.k8s.io", name=name)


async def _populate(server: APIServer) -> None:
    """What the matrix reads and writes, written straight to the resource layer."""
    await _create(
        server, NAMESPACE, namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name="team"))
    )
    # Its default ServiceAccount, as the controller manager (not running here) would make it:
    # the ServiceAccount admission refuses pods in "team" until it exists.
    await _create(
        server,
        SERVICE_ACCOUNT,
        serviceaccount_pb2.ServiceAccount(
            metadata=meta_pb2.ObjectMeta(name="default", namespace="team")
        ),
    )
    for node in ("node-1", "node-2"):
        await _create(server, NODE, make_node(node))
        pod = make_pod(f"pod-on-{node}")
        pod.spec.nodeName = node
        await _create(server, POD, pod)
        lease = lease_pb2.Lease(
            metadata=meta_pb2.ObjectMeta(name=node, namespace="kube-node-lease"),
            spec=lease_pb2.LeaseSpec(holderIdentity=node, leaseDurationSeconds=40),
        )
        await _create(server, LEASE, lease)
    leader = lease_pb2.Lease(
        metadata=meta_pb2.ObjectMeta(name=CM_LEASE, namespace="kube-system"),
        spec=lease_pb2.LeaseSpec(holderIdentity="cm-1", leaseDurationSeconds=15),
    )
    await _create(server, LEASE, leader)
    await _create(
        server,
        CLUSTER_ROLE_BINDING,
        rbac_pb2.ClusterRoleBinding(
            metadata=meta_pb2.ObjectMeta(name="alice-view"),
            roleRef=rbac_pb2.RoleRef(
                apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="view"
            ),
            subjects=[_subject("User", "alice")],
        ),
    )
    await _create(
        server,
        ROLE_BINDING,
        rbac_pb2.RoleBinding(
            metadata=meta_pb2.ObjectMeta(name="erin-edit", namespace="team"),
            roleRef=rbac_pb2.RoleRef(
                apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="edit"
            ),
            subjects=[_subject("User", "erin")],
        ),
    )
    # The authorizers read the watch caches: wait until they hold what was written.
    pods = server.caches[POD.kind]
    key = server.services[POD.kind].key("default", "pod-on-node-2")
    for _ in range(200):
        if key in pods.state and server.rbac.allows(
            _identity("erin"), _attrs("list", "pods", "team")
        ):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the watch caches did not catch up with the test's objects")


def _identity(name: str) -> Any:
    from apiserver.auth.authorizer import Identity

    return Identity(name, ("system:authenticated",))


def _attrs(verb: str, resource: str, namespace: str) -> Any:
    from apiserver.auth.authorizer import Attributes

    return Attributes(verb, resource, "", "", namespace)


@pytest.fixture(scope="module")
async def cluster(
    pki: PKI, tls_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    api, etcd_client = pki.paths("apiserver"), pki.paths("apiserver-etcd-client")
    tokens = tmp_path_factory.mktemp("tokens") / "tokens.csv"
    tokens.write_text("alice-token,alice,uid-1\n")
    settings = make_settings(
        tls_etcd.url,
        rest_port=0,
        tls_cert_file=str(api.cert),
        tls_private_key_file=str(api.key),
        client_ca_file=str(pki.ca_cert_path),
        token_auth_file=str(tokens),
        etcd_cafile=str(pki.ca_cert_path),
        etcd_certfile=str(etcd_client.cert),
        etcd_keyfile=str(etcd_client.key),
    )
    server = APIServer(settings)
    await server.start()
    try:
        await _populate(server)
        yield Cluster(pki, server)
    finally:
        await server.stop()


# ---- the operations -----------------------------------------------------------------------------

Grpc = Callable[[Client, Client], Awaitable[object]]


@dataclass(frozen=True)
class Op:
    """One request, as a gRPC call (the identity's client, the admin's) and a REST request
    (method, path, body; a PUT's body is the object as the admin GETs it: a no-op)."""

    grpc: Grpc
    method: str
    path: str
    body: dict[str, Any] | None = None


def _invalid_pod(namespace: str) -> pod_pb2.Pod:
    # No containers: refused by validation, after authorization and admission.
    return pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name="invalid", namespace=namespace))


_EVENT = event_pb2.Event(metadata=meta_pb2.ObjectMeta(name="ev", namespace="default"))
_LEASES = "/apis/coordination.k8s.io/v1/namespaces"

OPS: dict[str, Op] = {
    "list all pods": Op(lambda c, a: c.pods.list(), "GET", "/api/v1/pods"),
    "list pods in team": Op(
        lambda c, a: c.pods.list("team"), "GET", "/api/v1/namespaces/team/pods"
    ),
    "list pods on node-1": Op(
        lambda c, a: c.pods.list(field_selector="spec.nodeName=node-1"),
        "GET",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1",
    ),
    "get the pod on node-1": Op(
        lambda c, a: c.pods.get("pod-on-node-1", "default"),
        "GET",
        "/api/v1/namespaces/default/pods/pod-on-node-1",
    ),
    "get the pod on node-2": Op(
        lambda c, a: c.pods.get("pod-on-node-2", "default"),
        "GET",
        "/api/v1/namespaces/default/pods/pod-on-node-2",
    ),
    "create a pod in team": Op(
        lambda c, a: c.pods.create(_invalid_pod("team")),
        "POST",
        "/api/v1/namespaces/team/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "invalid"}, "spec": {}},
    ),
    "delete the pod on node-2": Op(
        lambda c, a: c.pods.delete("pod-on-node-2", "default", uid="not-its-uid"),
        "DELETE",
        "/api/v1/namespaces/default/pods/pod-on-node-2",
        {"preconditions": {"uid": "not-its-uid"}},
    ),
    "update the status of the pod on node-2": Op(
        lambda c, a: _same(a.pods.get("pod-on-node-2", "default"), c.pods.update_status),
        "PUT",
        "/api/v1/namespaces/default/pods/pod-on-node-2/status",
    ),
    "bind a pod": Op(
        lambda c, a: c.bind("default", "no-such-pod", "node-1"),
        "POST",
        "/api/v1/namespaces/default/pods/no-such-pod/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "no-such-pod"},
            "target": {"kind": "Node", "name": "node-1"},
        },
    ),
    "list nodes": Op(lambda c, a: c.nodes.list(), "GET", "/api/v1/nodes"),
    "get node-1": Op(lambda c, a: c.nodes.get("node-1"), "GET", "/api/v1/nodes/node-1"),
    "update node-2": Op(
        lambda c, a: _same(a.nodes.get("node-2"), c.nodes.update), "PUT", "/api/v1/nodes/node-2"
    ),
    "update node-2's status": Op(
        lambda c, a: _same(a.nodes.get("node-2"), c.nodes.update_status),
        "PUT",
        "/api/v1/nodes/node-2/status",
    ),
    "delete a node": Op(lambda c, a: c.nodes.delete("no-such-node"), "DELETE", "/api/v1/nodes/x"),
    "renew node-1's lease": Op(
        lambda c, a: _same(a.leases.get("node-1", "kube-node-lease"), c.leases.update),
        "PUT",
        f"{_LEASES}/kube-node-lease/leases/node-1",
    ),
    "renew node-2's lease": Op(
        lambda c, a: _same(a.leases.get("node-2", "kube-node-lease"), c.leases.update),
        "PUT",
        f"{_LEASES}/kube-node-lease/leases/node-2",
    ),
    "take the controller manager's lease": Op(
        lambda c, a: _same(a.leases.get(CM_LEASE, "kube-system"), c.leases.update),
        "PUT",
        f"{_LEASES}/kube-system/leases/{CM_LEASE}",
    ),
    "create an event": Op(
        lambda c, a: c.events.create(_EVENT),
        "POST",
        "/api/v1/namespaces/default/events",
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev"}},
    ),
    "list services": Op(lambda c, a: c.services.list(), "GET", "/api/v1/services"),
}


async def _same(get: Awaitable[Any], write: Callable[[Any], Awaitable[Any]]) -> Any:
    return await write(await get)


# Who may do what (everyone else is denied; anonymous and a wrong token never get that far).
ALL_COMPONENTS = {"node-1", "node-2", "scheduler", "controller-manager", "proxy", "admin"}
ALLOWED: dict[str, set[str]] = {
    "list all pods": {"scheduler", "controller-manager", "viewer", "admin"},
    "list pods in team": {"scheduler", "controller-manager", "viewer", "editor", "admin"},
    "list pods on node-1": {"node-1", "scheduler", "controller-manager", "viewer", "admin"},
    "get the pod on node-1": {"node-1", "scheduler", "controller-manager", "viewer", "admin"},
    "get the pod on node-2": {"node-2", "scheduler", "controller-manager", "viewer", "admin"},
    # nodes: NodeRestriction refuses every pod create (tinykube has no mirror pods)
    "create a pod in team": {"controller-manager", "editor", "admin"},
    "delete the pod on node-2": {"node-2", "scheduler", "controller-manager", "admin"},
    "update the status of the pod on node-2": {
        "node-2",
        "scheduler",
        "controller-manager",
        "admin",
    },
    "bind a pod": {"scheduler", "admin"},
    "list nodes": {"scheduler", "controller-manager", "proxy", "admin"},
    "get node-1": {"node-1", "scheduler", "controller-manager", "proxy", "admin"},
    "update node-2": {"node-2", "controller-manager", "admin"},
    "update node-2's status": {"node-2", "controller-manager", "admin"},
    "delete a node": {"controller-manager", "admin"},
    # the garbage collector's role updates anything, so the controller manager may too (kube's)
    "renew node-1's lease": {"node-1", "controller-manager", "admin"},
    "renew node-2's lease": {"node-2", "controller-manager", "admin"},
    "take the controller manager's lease": {"controller-manager", "admin"},
    "create an event": ALL_COMPONENTS,
    "list services": {*ALL_COMPONENTS, "viewer"},
}


def expected_row(transport: str, who: str) -> dict[str, str]:
    if who in ("anonymous", "wrong token"):
        # gRPC's TLS port requires a client certificate; REST answers 401.
        outcome = "refused" if transport.startswith("grpc") else "unauth"
        return dict.fromkeys(OPS, outcome)
    return {op: "allow" if who in ALLOWED[op] else "deny" for op in OPS}


async def _grpc_outcome(op: Op, client: Client, admin: Client) -> tuple[str, str]:
    try:
        await op.grpc(client, admin)
    except ForbiddenError as exc:
        return "deny", exc.message
    except TransportSecurityError as exc:
        return "refused", exc.message
    except TinykubeError as exc:
        if exc.message.startswith("UNAUTHENTICATED"):
            return "unauth", exc.message
        return "allow", exc.message
    return "allow", ""


async def _rest_outcome(
    op: Op, session: aiohttp.ClientSession, admin: aiohttp.ClientSession, base: str
) -> tuple[str, str]:
    body = op.body
    if op.method == "PUT":
        async with admin.get(base + op.path) as resp:
            assert resp.status == 200, await resp.text()
            body = await resp.json()
    async with session.request(op.method, base + op.path, json=body) as resp:
        text = await resp.text()
        status = resp.status
    message = json.loads(text).get("message", "") if text.startswith("{") else text
    if status == 403:
        return "deny", message
    if status == 401:
        return "unauth", message
    return "allow", message


def _client(cluster: Cluster, who: str, transport: str) -> Client:
    """`who`'s gRPC client; "grpc-stream": its Create, Update and UpdateStatus calls go as
    messages of write streams (docs/api.md), each authorized as its unary call."""
    return Client(
        cluster.server.address,
        credentials=cluster.creds(who),
        retries=0,
        timeout=5,
        pipeline=transport == "grpc-stream",
    )


def _session(cluster: Cluster, who: str) -> aiohttp.ClientSession:
    creds = cluster.creds(who)
    ctx = creds.ssl_context()
    assert ctx is not None
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx), headers=creds.headers())


async def _run_row(cluster: Cluster, transport: str, who: str) -> dict[str, tuple[str, str]]:
    server = cluster.server
    out: dict[str, tuple[str, str]] = {}
    if transport.startswith("grpc"):
        async with (
            _client(cluster, who, transport) as c,
            Client(server.address, credentials=cluster.creds("admin"), timeout=5) as admin,
        ):
            for name, op in OPS.items():
                out[name] = await _grpc_outcome(op, c, admin)
            if transport == "grpc-stream" and who not in ("anonymous", "wrong token"):
                # Every write went as a stream message; a refused one did not end its stream.
                assert c._write_streams
                assert all(s.supported and s.opened == 1 for s in c._write_streams)
        return out
    async with _session(cluster, who) as session, _session(cluster, "admin") as admin_session:
        for name, op in OPS.items():
            out[name] = await _rest_outcome(op, session, admin_session, server.rest_url)
    return out


@pytest.mark.parametrize("who", IDENTITIES)
@pytest.mark.parametrize("transport", ["grpc", "grpc-stream", "rest"])
async def test_the_matrix(cluster: Cluster, transport: str, who: str) -> None:
    got = await _run_row(cluster, transport, who)
    outcomes = {op: outcome for op, (outcome, _) in got.items()}
    expected = expected_row(transport, who)
    wrong = {op: got[op] for op in OPS if outcomes[op] != expected[op]}
    assert outcomes == expected, wrong


MESSAGES = [
    (
        "viewer",
        "create a pod in team",
        'pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the '
        'namespace "team"',
    ),
    (
        "editor",
        "list all pods",
        'pods is forbidden: User "erin" cannot list resource "pods" in API group "" at the '
        "cluster scope",
    ),
    (
        "node-1",
        "get the pod on node-2",
        'pods "pod-on-node-2" is forbidden: User "system:node:node-1" cannot get resource '
        '"pods" in API group "" in the namespace "default": no relationship found between '
        "node 'node-1' and this object",
    ),
    (
        "node-1",
        "update node-2's status",
        'nodes "node-2" is forbidden: node "node-1" is not allowed to modify node "node-2"',
    ),
    (
        "node-1",
        "renew node-2's lease",
        'leases.coordination.k8s.io "node-2" is forbidden: User "system:node:node-1" cannot '
        'update resource "leases" in API group "coordination.k8s.io" in the namespace '
        '"kube-node-lease": can only access node lease with the same name as the requesting '
        "node",
    ),
    (
        "scheduler",
        "take the controller manager's lease",
        f'leases.coordination.k8s.io "{CM_LEASE}" is forbidden: User "system:kube-scheduler" '
        'cannot update resource "leases" in API group "coordination.k8s.io" in the namespace '
        '"kube-system"',
    ),
]


@pytest.mark.parametrize("transport", ["grpc", "grpc-stream", "rest"])
@pytest.mark.parametrize(("who", "op", "message"), MESSAGES)
async def test_kubes_messages(
    cluster: Cluster, transport: str, who: str, op: str, message: str
) -> None:
    server = cluster.server
    if transport.startswith("grpc"):
        async with (
            _client(cluster, who, transport) as c,
            Client(server.address, credentials=cluster.creds("admin"), timeout=5) as admin,
        ):
            got = await _grpc_outcome(OPS[op], c, admin)
    else:
        async with _session(cluster, who) as session, _session(cluster, "admin") as admin_s:
            got = await _rest_outcome(OPS[op], session, admin_s, server.rest_url)
    assert got == ("deny", message)


async def test_rest_401_is_kubes_status(cluster: Cluster) -> None:
    async with (
        _session(cluster, "wrong token") as session,
        session.get(cluster.server.rest_url + "/api/v1/pods") as resp,
    ):
        assert resp.status == 401
        assert await resp.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }


@pytest.mark.parametrize(
    ("path", "status"),
    [("/healthz", 200), ("/livez", 200), ("/readyz", 200), ("/version", 200), ("/api", 401)],
)
async def test_anonymous_reaches_only_the_probes(cluster: Cluster, path: str, status: int) -> None:
    async with (
        _session(cluster, "anonymous") as session,
        session.get(cluster.server.rest_url + path) as resp,
    ):
        assert resp.status == status, await resp.text()


async def test_a_token_authenticates_over_rest(cluster: Cluster) -> None:
    creds = Credentials(ca=cluster.pki.ca_cert_path.read_bytes(), token="alice-token")
    ctx = creds.ssl_context()
    assert ctx is not None
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s,
        s.get(cluster.server.rest_url + "/api/v1/pods", headers=creds.headers()) as resp,
    ):
        assert resp.status == 200  # alice is bound to view


@pytest.mark.usefixtures("saved_garbage")
async def test_refusals_leave_no_exception_in_a_cycle(cluster: Cluster) -> None:
    """A refused request (PERMISSION_DENIED; 403, 401) is answered without an exception left for
    the cyclic GC (tests/integration/test_apiserver_error_cycles.py has the other answers; gRPC
    without a client certificate is refused in the TLS handshake, before any handler)."""
    server = cluster.server
    refused = pod_pb2.Pod()
    refused.CopyFrom(make_pod("refused"))
    refused.metadata.namespace = "team"

    async def count(fail: Callable[[], Awaitable[object]]) -> list[str]:
        await fail()  # (what is built on first use is not a refusal's garbage)
        gc.collect()
        del gc.garbage[:]
        for _ in range(5):
            await fail()
        gc.collect()
        found = sorted(type(o).__name__ for o in gc.garbage if isinstance(o, BaseException))
        del gc.garbage[:]
        return found

    async with (
        _client(cluster, "viewer", "grpc") as viewer,
        _session(cluster, "viewer") as viewer_rest,
        _session(cluster, "wrong token") as stranger_rest,
    ):

        async def denied() -> None:
            with pytest.raises(ForbiddenError):
                await viewer.pods.create(refused)

        async def rest(session: aiohttp.ClientSession, status: int) -> None:
            async with session.get(server.rest_url + "/api/v1/nodes") as resp:
                assert resp.status == status
                await resp.read()

        async def rest_denied() -> None:
            async with viewer_rest.delete(server.rest_url + "/api/v1/nodes/node-1") as resp:
                assert resp.status == 403
                await resp.read()

        found = {
            "PERMISSION_DENIED": await count(denied),
            "403": await count(rest_denied),
            "401": await count(lambda: rest(stranger_rest, 401)),
        }
    assert found == {"PERMISSION_DENIED": [], "403": [], "401": []}


# ---- kubectl: auth can-i and --as ---------------------------------------------------------------

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def _kubeconfig(cluster: Cluster, who: str, directory: Path) -> Path:
    creds = cluster.creds(who)
    return write_kubeconfig(
        directory / f"{who}.conf",
        cluster.server.rest_url,
        ca=creds.ca,
        cert=creds.cert,
        key=creds.key,
        token=creds.token,
    )


def _kubectl(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": str(config.parent), "PATH": "/usr/bin:/bin"},
        check=False,
    )


@needs_kubectl
@pytest.mark.parametrize(
    ("who", "question", "answer"),
    [
        ("admin", ("delete", "nodes"), "yes"),
        ("viewer", ("list", "pods", "-A"), "yes"),
        ("viewer", ("create", "pods"), "no"),
        ("editor", ("create", "pods", "-n", "team"), "yes"),
        ("editor", ("create", "pods", "-n", "default"), "no"),
        ("node-1", ("get", "nodes/node-1"), "yes"),
        (
            "node-1",
            ("get", "nodes/node-2"),
            "no - node 'node-1' cannot read 'node-2', only its own Node object",
        ),
        ("scheduler", ("create", "pods", "--subresource=binding"), "yes"),
    ],
)
async def test_kubectl_auth_can_i_answers_for_the_kubeconfig_user(
    cluster: Cluster, tmp_path: Path, who: str, question: tuple[str, ...], answer: str
) -> None:
    config = _kubeconfig(cluster, who, tmp_path)
    done = await asyncio.to_thread(_kubectl, config, "auth", "can-i", *question)
    assert (done.stdout.strip(), done.returncode) == (answer, 0 if answer == "yes" else 1), (
        done.stderr
    )


@needs_kubectl
async def test_kubectl_as_works_for_the_admin_and_is_refused_to_others(
    cluster: Cluster, tmp_path: Path
) -> None:
    admin = _kubeconfig(cluster, "admin", tmp_path)
    as_alice = await asyncio.to_thread(
        _kubectl, admin, "--as", "alice", "auth", "can-i", "create", "pods"
    )
    assert (as_alice.stdout.strip(), as_alice.returncode) == ("no", 1), as_alice.stderr
    listed = await asyncio.to_thread(
        _kubectl, admin, "--as", "alice", "get", "pods", "-A", "-o", "name"
    )
    assert listed.returncode == 0, listed.stderr
    assert "pod/pod-on-node-1" in listed.stdout.split()
    denied = await asyncio.to_thread(_kubectl, admin, "--as", "erin", "get", "pods", "-A")
    assert denied.returncode == 1
    assert 'User "erin" cannot list resource "pods" in API group "" at the cluster scope' in (
        denied.stderr
    )
    viewer = _kubeconfig(cluster, "viewer", tmp_path)
    refused = await asyncio.to_thread(_kubectl, viewer, "--as", "admin", "get", "pods")
    assert refused.returncode == 1
    assert (
        'users "admin" is forbidden: User "alice" cannot impersonate resource "users" in API '
        'group "" at the cluster scope'
    ) in refused.stderr
