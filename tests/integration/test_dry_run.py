"""Dry run is a flag of the store, the same for both front ends: a dry-run create, update,
delete or bind runs every check the write runs (NodeRestriction, RBAC escalation, nodePort
allocation, the bind's deletion and node checks, delete's preconditions) and answers what the
write would answer, refusal or object, while etcd keeps what it had.

An in-process apiserver with TLS and the PKI's identities (a kubelet "node-1", the admin, and
"nadia", admin of namespace "dry" only) over its own TLS etcd. Each refusal is asked twice per
front end, dry and real, and both answers must be the same; each check of "writes nothing"
compares the etcd keys (and their mod revisions) under the kind's prefix before and after.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from apiserver.app import APIServer
from tests.integration.conftest import make_node, make_pod, make_settings
from tinykube.client import Client
from tinykube.kinds import (
    NAMESPACE,
    NODE,
    POD,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    KindInfo,
)
from tinykube.kubeconfig import write_kubeconfig
from tinykube.localetcd import EtcdServer, EtcdTLS
from tinykube.pki import PKI, CertSpec, cluster_specs
from tinykube.tls import Credentials
from tinykube.v1 import (
    meta_pb2,
    namespace_pb2,
    pod_pb2,
    rbac_pb2,
    service_pb2,
    serviceaccount_pb2,
)

pytestmark = pytest.mark.integration

RBAC = "rbac.authorization.k8s.io"
NS = "dry"
CERTS = {"node-1": "kubelet-node-1", "admin": "admin", "nadia": "nsadmin"}
TRANSPORTS = ("grpc", "rest")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    pki = PKI(tmp_path_factory.mktemp("dryrun") / "pki")
    pki.ensure_all(
        [*cluster_specs(["node-1", "node-2"]), CertSpec("nsadmin", "nadia", client=True)]
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


@dataclass(frozen=True)
class Answer:
    """A request's outcome: gRPC code name or HTTP status, the message, and the object."""

    code: str
    message: str
    body: dict[str, Any]


@dataclass
class Cluster:
    pki: PKI
    server: APIServer

    def creds(self, who: str) -> Credentials:
        paths = self.pki.paths(CERTS[who])
        return Credentials(
            ca=self.pki.ca_cert_path.read_bytes(),
            cert=paths.cert.read_bytes(),
            key=paths.key.read_bytes(),
        )

    async def grpc(self, who: str, info: KindInfo, method: str, request: Any) -> Answer:
        async with self.creds(who).channel(self.server.address) as channel:
            stub = info.stub(channel)
            try:
                answer = await getattr(stub, method)(request, timeout=10)
            except grpc.aio.AioRpcError as exc:
                return Answer(exc.code().name, exc.details() or "", {})
        return Answer("OK", "", MessageToDict(answer))

    async def rest(self, who: str, method: str, path: str, body: Any = None, **kw: Any) -> Answer:
        ctx = self.creds(who).ssl_context()
        assert ctx is not None
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session,
            session.request(method, self.server.rest_url + path, json=body, **kw) as resp,
        ):
            data = json.loads(await resp.text())
        return Answer(str(resp.status), data.get("message", ""), data)

    async def keys(self, info: KindInfo, prefix: str = "") -> list[tuple[bytes, int]]:
        """The kind's etcd keys under `prefix` and their mod revisions: what a dry run must
        leave alone."""
        base = self.server.services[info.kind].prefix + prefix.encode()
        result = await self.server.storage.list_prefix(base)
        return [(kv.key, kv.mod_revision) for kv in result.kvs]

    async def allocations(self) -> list[tuple[bytes, int]]:
        result = await self.server.storage.list_prefix(b"/registry/ranges/")
        return [(kv.key, kv.mod_revision) for kv in result.kvs]


async def _create(server: APIServer, info: KindInfo, obj: Any) -> Any:
    return await server.services[info.kind].create(info.create_request(**{info.request_field: obj}))


def _role_ref(kind: str, name: str) -> rbac_pb2.RoleRef:
    return rbac_pb2.RoleRef(apiGroup=RBAC, kind=kind, name=name)


def _user(name: str) -> rbac_pb2.Subject:
    return rbac_pb2.Subject(kind="User", apiGroup=RBAC, name=name)


def _rule(verbs: list[str], resources: list[str]) -> rbac_pb2.PolicyRule:
    return rbac_pb2.PolicyRule(verbs=verbs, apiGroups=[""], resources=resources)


def _held_pod(name: str, node: str = "") -> pod_pb2.Pod:
    pod = make_pod(name, NS)
    pod.metadata.finalizers.append("example.com/hold")
    pod.spec.nodeName = node
    return pod


async def _populate(server: APIServer) -> None:
    await _create(server, NAMESPACE, namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name=NS)))
    await _create(
        server,
        SERVICE_ACCOUNT,
        serviceaccount_pb2.ServiceAccount(
            metadata=meta_pb2.ObjectMeta(name="default", namespace=NS)
        ),
    )
    for node in ("node-1", "node-2"):
        await _create(server, NODE, make_node(node))
    await _create(server, POD, _held_pod("on-node-2", "node-2"))
    await _create(server, POD, _held_pod("doomed"))
    await _create(server, POD, _held_pod("waiting"))
    await server.services[POD.kind].delete(meta_pb2.DeleteRequest(namespace=NS, name="doomed"))
    await _create(
        server,
        ROLE_BINDING,
        rbac_pb2.RoleBinding(
            metadata=meta_pb2.ObjectMeta(name="nadia-admin", namespace=NS),
            roleRef=_role_ref("ClusterRole", "admin"),
            subjects=[_user("nadia")],
        ),
    )
    await _create(
        server,
        ROLE,
        rbac_pb2.Role(
            metadata=meta_pb2.ObjectMeta(name="limited", namespace=NS),
            rules=[_rule(["get"], ["pods"])],
        ),
    )
    svc = service_pb2.Service(
        metadata=meta_pb2.ObjectMeta(name="first", namespace=NS),
        spec=service_pb2.ServiceSpec(
            type="NodePort",
            selector={"app": "web"},
            ports=[service_pb2.ServicePort(port=80, nodePort=30555)],
        ),
    )
    await _create(server, SERVICE, svc)
    from apiserver.auth.authorizer import Attributes, Identity

    # The authorizers read the watch caches: wait until they hold what was written.
    nadia = Identity("nadia", ("system:authenticated",))
    pods = server.caches[POD.kind]
    key = server.services[POD.kind].key(NS, "on-node-2")
    for _ in range(400):
        if key in pods.state and server.rbac.allows(
            nadia, Attributes("update", "roles", RBAC, "", NS)
        ):
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the watch caches did not catch up with the test's objects")


@pytest.fixture(scope="module")
async def cluster(pki: PKI, tls_etcd: EtcdServer) -> AsyncIterator[Cluster]:
    api, etcd_client = pki.paths("apiserver"), pki.paths("apiserver-etcd-client")
    settings = make_settings(
        tls_etcd.url,
        rest_port=0,
        tls_cert_file=str(api.cert),
        tls_private_key_file=str(api.key),
        client_ca_file=str(pki.ca_cert_path),
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


def _dry(dry: bool) -> str:
    return "?dryRun=All" if dry else ""


def _rest_body(obj: Any, kind: str, api_version: str = "v1") -> dict[str, Any]:
    body = MessageToDict(obj)
    body["apiVersion"], body["kind"] = api_version, kind
    return body


async def _same_refusal(
    cluster: Cluster, info: KindInfo, ask: Any, code: str, text: str, prefix: str = ""
) -> None:
    """`ask(dry)` answers `code` with `text` in its message, dry or not, and a dry run leaves
    the kind's keys as they were."""
    before = await cluster.keys(info, prefix)
    dry = await ask(True)
    assert (dry.code, text in dry.message) == (code, True), dry
    assert await cluster.keys(info, prefix) == before
    real = await ask(False)
    assert (real.code, real.message) == (dry.code, dry.message)


# ---- refusals: the dry run answers what the write answers ----------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_node_creating_a_pod_is_refused_by_noderestriction_when_dry_too(
    cluster: Cluster, transport: str
) -> None:
    pod = make_pod("sneaky", NS)
    pod.spec.nodeName = "node-2"

    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = pod_pb2.CreatePodRequest(pod=pod, dryRun=["All"] if dry else [])
            return await cluster.grpc("node-1", POD, "Create", req)
        path = f"/api/v1/namespaces/{NS}/pods{_dry(dry)}"
        return await cluster.rest("node-1", "POST", path, _rest_body(pod, "Pod"))

    code = "PERMISSION_DENIED" if transport == "grpc" else "403"
    await _same_refusal(cluster, POD, ask, code, "can only create mirror pods", NS)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_node_deleting_another_nodes_pod_is_refused_when_dry_too(
    cluster: Cluster, transport: str
) -> None:
    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = meta_pb2.DeleteRequest(namespace=NS, name="on-node-2", dryRun=["All"] * dry)
            return await cluster.grpc("node-1", POD, "Delete", req)
        return await cluster.rest(
            "node-1", "DELETE", f"/api/v1/namespaces/{NS}/pods/on-node-2{_dry(dry)}"
        )

    code = "PERMISSION_DENIED" if transport == "grpc" else "403"
    text = "can only delete pods with spec.nodeName set to itself"
    await _same_refusal(cluster, POD, ask, code, text, NS)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_escalating_role_update_is_refused_when_dry_too(
    cluster: Cluster, transport: str
) -> None:
    role: Any = await cluster.server.services[ROLE.kind].get(
        meta_pb2.GetRequest(namespace=NS, name="limited")
    )
    role.rules.append(_rule(["delete"], ["nodes"]))

    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = rbac_pb2.UpdateRoleRequest(role=role, dryRun=["All"] * dry)
            return await cluster.grpc("nadia", ROLE, "Update", req)
        path = f"/apis/{RBAC}/v1/namespaces/{NS}/roles/limited{_dry(dry)}"
        return await cluster.rest("nadia", "PUT", path, _rest_body(role, "Role", f"{RBAC}/v1"))

    code = "PERMISSION_DENIED" if transport == "grpc" else "403"
    text = "is attempting to grant RBAC permissions not currently held"
    await _same_refusal(cluster, ROLE, ask, code, text, NS)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_binding_cluster_admin_is_refused_when_dry_too(
    cluster: Cluster, transport: str
) -> None:
    binding = rbac_pb2.RoleBinding(
        metadata=meta_pb2.ObjectMeta(name="grab", namespace=NS),
        roleRef=_role_ref("ClusterRole", "cluster-admin"),
        subjects=[_user("nadia")],
    )

    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = rbac_pb2.CreateRoleBindingRequest(roleBinding=binding, dryRun=["All"] * dry)
            return await cluster.grpc("nadia", ROLE_BINDING, "Create", req)
        path = f"/apis/{RBAC}/v1/namespaces/{NS}/rolebindings{_dry(dry)}"
        return await cluster.rest(
            "nadia", "POST", path, _rest_body(binding, "RoleBinding", f"{RBAC}/v1")
        )

    code = "PERMISSION_DENIED" if transport == "grpc" else "403"
    text = "is attempting to grant RBAC permissions not currently held"
    await _same_refusal(cluster, ROLE_BINDING, ask, code, text, NS)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_taken_node_port_is_refused_when_dry_too(cluster: Cluster, transport: str) -> None:
    svc = service_pb2.Service(
        metadata=meta_pb2.ObjectMeta(name="second", namespace=NS),
        spec=service_pb2.ServiceSpec(
            type="NodePort",
            selector={"app": "web"},
            ports=[service_pb2.ServicePort(port=80, nodePort=30555)],
        ),
    )

    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = service_pb2.CreateServiceRequest(service=svc, dryRun=["All"] * dry)
            return await cluster.grpc("admin", SERVICE, "Create", req)
        path = f"/api/v1/namespaces/{NS}/services{_dry(dry)}"
        return await cluster.rest("admin", "POST", path, _rest_body(svc, "Service"))

    allocated = await cluster.allocations()
    # tinykube answers a taken requested value as AlreadyExists (409), the write and the dry
    # run alike.
    code = "ALREADY_EXISTS" if transport == "grpc" else "409"
    await _same_refusal(cluster, SERVICE, ask, code, "provided port is already allocated", NS)
    assert await cluster.allocations() == allocated


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_binding_a_pod_being_deleted_is_refused_when_dry_too(
    cluster: Cluster, transport: str
) -> None:
    binding = pod_pb2.Binding(
        metadata=meta_pb2.ObjectMeta(name="doomed", namespace=NS),
        target=meta_pb2.ObjectReference(kind="Node", name="node-1"),
    )

    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = pod_pb2.BindRequest(binding=binding, dryRun=["All"] * dry)
            return await cluster.grpc("admin", POD, "Bind", req)
        body = {"apiVersion": "v1", "kind": "Binding", **MessageToDict(binding)}
        path = f"/api/v1/namespaces/{NS}/pods/doomed/binding{_dry(dry)}"
        return await cluster.rest("admin", "POST", path, body)

    code = "FAILED_PRECONDITION" if transport == "grpc" else "409"
    await _same_refusal(cluster, POD, ask, code, "is being deleted", NS)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_binding_to_a_missing_node_is_refused_when_dry_too(
    cluster: Cluster, transport: str
) -> None:
    binding = pod_pb2.Binding(
        metadata=meta_pb2.ObjectMeta(name="waiting", namespace=NS),
        target=meta_pb2.ObjectReference(kind="Node", name="no-such-node"),
    )

    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = pod_pb2.BindRequest(binding=binding, dryRun=["All"] * dry)
            return await cluster.grpc("admin", POD, "Bind", req)
        body = {"apiVersion": "v1", "kind": "Binding", **MessageToDict(binding)}
        path = f"/api/v1/namespaces/{NS}/pods/waiting/binding{_dry(dry)}"
        return await cluster.rest("admin", "POST", path, body)

    code = "NOT_FOUND" if transport == "grpc" else "404"
    await _same_refusal(cluster, POD, ask, code, '"no-such-node" not found', NS)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_failed_delete_precondition_is_refused_when_dry_too(
    cluster: Cluster, transport: str
) -> None:
    async def ask(dry: bool) -> Answer:
        if transport == "grpc":
            req = meta_pb2.DeleteRequest(
                namespace=NS,
                name="waiting",
                preconditions=meta_pb2.Preconditions(uid="not-its-uid"),
                dryRun=["All"] * dry,
            )
            return await cluster.grpc("admin", POD, "Delete", req)
        body = {"preconditions": {"uid": "not-its-uid"}}
        path = f"/api/v1/namespaces/{NS}/pods/waiting{_dry(dry)}"
        return await cluster.rest("admin", "DELETE", path, body)

    code = "ABORTED" if transport == "grpc" else "409"
    await _same_refusal(cluster, POD, ask, code, "Precondition failed: UID in precondition", NS)


# ---- successes: the dry run answers what the write would store ----------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_dry_run_service_create_shows_its_allocations_and_stores_nothing(
    cluster: Cluster, transport: str
) -> None:
    svc = service_pb2.Service(
        metadata=meta_pb2.ObjectMeta(name=f"shown-{transport}", namespace=NS),
        spec=service_pb2.ServiceSpec(
            type="NodePort",
            selector={"app": "web"},
            ports=[service_pb2.ServicePort(port=80)],
        ),
    )
    before, allocated = await cluster.keys(SERVICE, NS), await cluster.allocations()
    if transport == "grpc":
        req = service_pb2.CreateServiceRequest(service=svc, dryRun=["All"])
        answer = await cluster.grpc("admin", SERVICE, "Create", req)
        assert answer.code == "OK", answer
    else:
        path = f"/api/v1/namespaces/{NS}/services?dryRun=All"
        answer = await cluster.rest("admin", "POST", path, _rest_body(svc, "Service"))
        assert answer.code == "201", answer
    spec, meta = answer.body["spec"], answer.body["metadata"]
    assert spec["clusterIP"] and spec["clusterIPs"] == [spec["clusterIP"]]
    assert 30000 <= spec["ports"][0]["nodePort"] <= 32767
    assert spec["sessionAffinity"] == "None"  # the strategy's defaults ran
    assert meta["uid"] and meta["creationTimestamp"] and not meta.get("resourceVersion")
    assert await cluster.keys(SERVICE, NS) == before
    assert await cluster.allocations() == allocated


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_dry_run_update_answers_the_new_object_and_stores_nothing(
    cluster: Cluster, transport: str
) -> None:
    roles = cluster.server.services[ROLE.kind]
    role: Any = await roles.get(meta_pb2.GetRequest(namespace=NS, name="limited"))
    rv = role.metadata.resourceVersion
    role.rules.append(_rule(["list"], ["pods"]))
    before = await cluster.keys(ROLE, NS)
    if transport == "grpc":
        req = rbac_pb2.UpdateRoleRequest(role=role, dryRun=["All"])
        answer = await cluster.grpc("admin", ROLE, "Update", req)
        assert answer.code == "OK", answer
    else:
        path = f"/apis/{RBAC}/v1/namespaces/{NS}/roles/limited?dryRun=All"
        answer = await cluster.rest("admin", "PUT", path, _rest_body(role, "Role", f"{RBAC}/v1"))
        assert answer.code == "200", answer
    assert [r["verbs"] for r in answer.body["rules"]] == [["get"], ["list"]]
    assert answer.body["metadata"]["resourceVersion"] == rv
    assert await cluster.keys(ROLE, NS) == before


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_dry_run_delete_answers_the_marked_object_and_stores_nothing(
    cluster: Cluster, transport: str
) -> None:
    before = await cluster.keys(POD, NS)
    if transport == "grpc":
        req = meta_pb2.DeleteRequest(namespace=NS, name="waiting", dryRun=["All"])
        answer = await cluster.grpc("admin", POD, "Delete", req)
        assert answer.code == "OK", answer
    else:
        path = f"/api/v1/namespaces/{NS}/pods/waiting?dryRun=All"
        answer = await cluster.rest("admin", "DELETE", path)
        assert answer.code == "200", answer
    # Held by its finalizer: the delete would mark it, and the dry run shows it marked.
    assert answer.body["metadata"]["deletionTimestamp"]
    assert await cluster.keys(POD, NS) == before


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_dry_run_bind_checks_and_binds_nothing(cluster: Cluster, transport: str) -> None:
    binding = pod_pb2.Binding(
        metadata=meta_pb2.ObjectMeta(name="waiting", namespace=NS),
        target=meta_pb2.ObjectReference(kind="Node", name="node-1"),
    )
    before = await cluster.keys(POD, NS)
    if transport == "grpc":
        req = pod_pb2.BindRequest(binding=binding, dryRun=["All"])
        answer = await cluster.grpc("admin", POD, "Bind", req)
        assert answer.code == "OK", answer
    else:
        body = {"apiVersion": "v1", "kind": "Binding", **MessageToDict(binding)}
        path = f"/api/v1/namespaces/{NS}/pods/waiting/binding?dryRun=All"
        answer = await cluster.rest("admin", "POST", path, body)
        assert answer.code == "201", answer
    assert await cluster.keys(POD, NS) == before


async def test_a_dry_run_patch_answers_the_patched_object_and_stores_nothing(
    cluster: Cluster,
) -> None:
    before = await cluster.keys(POD, NS)
    path = f"/api/v1/namespaces/{NS}/pods/waiting?dryRun=All"
    answer = await cluster.rest(
        "admin",
        "PATCH",
        path,
        headers={"Content-Type": "application/merge-patch+json"},
        data=json.dumps({"metadata": {"labels": {"patched": "yes"}}}),
    )
    assert answer.code == "200", answer
    assert answer.body["metadata"]["labels"]["patched"] == "yes"
    assert await cluster.keys(POD, NS) == before


async def test_a_dry_run_apply_creates_nothing(cluster: Cluster) -> None:
    before = await cluster.keys(SERVICE_ACCOUNT, NS)
    config = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "applied", "labels": {"a": "b"}},
    }
    answer = await cluster.rest(
        "admin",
        "PATCH",
        f"/api/v1/namespaces/{NS}/serviceaccounts/applied?dryRun=All&fieldManager=test",
        headers={"Content-Type": "application/apply-patch+yaml"},
        data=json.dumps(config),
    )
    assert answer.code == "201", answer
    assert answer.body["metadata"]["managedFields"][0]["manager"] == "test"
    assert await cluster.keys(SERVICE_ACCOUNT, NS) == before


@pytest.mark.parametrize(
    ("info", "method", "request_"),
    [
        (
            POD,
            "Create",
            pod_pb2.CreatePodRequest(pod=make_pod("x", NS), dryRun=["All", "Nope"]),
        ),
        (POD, "Delete", meta_pb2.DeleteRequest(namespace=NS, name="waiting", dryRun=["Nope"])),
    ],
)
async def test_a_grpc_dry_run_other_than_all_is_invalid_argument(
    cluster: Cluster, info: KindInfo, method: str, request_: Any
) -> None:
    answer = await cluster.grpc("admin", info, method, request_)
    assert answer.code == "INVALID_ARGUMENT"
    assert 'Unsupported value: "Nope": supported values: "All"' in answer.message
    assert "dryRun[" in answer.message


# ---- kubectl's --dry-run=server ---------------------------------------------------------------

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


def _kubectl(cluster: Cluster, directory: Path, manifest: dict[str, Any], *args: str) -> Any:
    assert KUBECTL is not None
    creds = cluster.creds("admin")
    config = write_kubeconfig(
        directory / "admin.conf",
        cluster.server.rest_url,
        ca=creds.ca,
        cert=creds.cert,
        key=creds.key,
    )
    path = directory / "manifest.json"
    path.write_text(json.dumps(manifest))
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(config), *args, "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": str(directory), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def _node_port_service(name: str, node_port: int = 0) -> dict[str, Any]:
    port: dict[str, Any] = {"port": 80}
    if node_port:
        port["nodePort"] = node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [port]},
    }


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_dry_run_server_shows_allocations_and_refusals(
    cluster: Cluster, tmp_path: Path
) -> None:
    before, allocated = await cluster.keys(SERVICE, NS), await cluster.allocations()
    done = await asyncio.to_thread(
        _kubectl,
        cluster,
        tmp_path,
        _node_port_service("by-kubectl"),
        "create",
        "--dry-run=server",
        "-o",
        "json",
    )
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout)["spec"]
    assert spec["clusterIP"] and 30000 <= spec["ports"][0]["nodePort"] <= 32767
    refused = await asyncio.to_thread(
        _kubectl,
        cluster,
        tmp_path,
        _node_port_service("clash", 30555),
        "apply",
        "--server-side",
        "--dry-run=server",
    )
    assert refused.returncode != 0
    assert "provided port is already allocated" in refused.stderr
    assert await cluster.keys(SERVICE, NS) == before
    assert await cluster.allocations() == allocated


async def test_the_python_clients_dry_run_stores_nothing(cluster: Cluster) -> None:
    async with Client(
        cluster.server.address, credentials=cluster.creds("admin"), retries=0, timeout=10
    ) as client:
        before = await cluster.keys(SERVICE, NS)
        svc = service_pb2.Service(
            metadata=meta_pb2.ObjectMeta(name="by-client", namespace=NS),
            spec=service_pb2.ServiceSpec(
                selector={"app": "web"}, ports=[service_pb2.ServicePort(port=80)]
            ),
        )
        shown = await client.services.create(svc, dry_run=True)
        assert shown.spec.clusterIP and not shown.metadata.resourceVersion
        first = await client.services.get("first", NS)
        first.metadata.labels["tier"] = "edge"
        updated = await client.services.update(first, dry_run=True)
        assert updated.metadata.labels["tier"] == "edge"
        deleted = await client.services.delete("first", NS, dry_run=True)
        assert deleted.metadata.name == "first"
        assert await cluster.keys(SERVICE, NS) == before


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_dry_run_namespace_delete_and_finalize_store_nothing(
    cluster: Cluster, transport: str
) -> None:
    before = await cluster.keys(NAMESPACE)
    ns: Any = await cluster.server.services[NAMESPACE.kind].get(meta_pb2.GetRequest(name=NS))
    assert list(ns.spec.finalizers) == ["kubernetes"]
    del ns.spec.finalizers[:]
    if transport == "grpc":
        deleted = await cluster.grpc(
            "admin", NAMESPACE, "Delete", meta_pb2.DeleteRequest(name=NS, dryRun=["All"])
        )
        finalized = await cluster.grpc(
            "admin",
            NAMESPACE,
            "Finalize",
            namespace_pb2.UpdateNamespaceRequest(namespace=ns, dryRun=["All"]),
        )
        assert (deleted.code, finalized.code) == ("OK", "OK"), (deleted, finalized)
    else:
        deleted = await cluster.rest("admin", "DELETE", f"/api/v1/namespaces/{NS}?dryRun=All")
        body = _rest_body(ns, "Namespace")
        finalized = await cluster.rest(
            "admin", "PUT", f"/api/v1/namespaces/{NS}/finalize?dryRun=All", body
        )
        assert (deleted.code, finalized.code) == ("200", "200"), (deleted, finalized)
    # The delete would mark it Terminating; the finalize would empty spec.finalizers.
    assert deleted.body["status"]["phase"] == "Terminating"
    assert deleted.body["metadata"]["deletionTimestamp"]
    assert not finalized.body.get("spec", {}).get("finalizers")
    assert await cluster.keys(NAMESPACE) == before
