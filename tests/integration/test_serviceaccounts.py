"""ServiceAccounts against a real apiserver on a real etcd, over gRPC and REST.

The system namespaces' default accounts made at start, pods defaulted to `default`, the
deprecated serviceAccount alias, kube's ServiceAccount admission refusal (PERMISSION_DENIED /
403 with kube's message), the wait for `default` in a new namespace, validation naming the
field, and serviceAccountName's immutability on pod update. The controller manager does not run
here (tests/e2e/test_serviceaccounts.py has it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import grpc
import pytest

from apiserver import masterservice
from tests.integration.conftest import (
    RunningAPIServer,
    expect_error,
    make_pod,
    make_settings,
    start_apiserver,
)
from tinykube.errors import NotFoundError
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import (
    endpoints_pb2,
    meta_pb2,
    namespace_pb2,
    namespace_pb2_grpc,
    pod_pb2,
    pod_pb2_grpc,
    serviceaccount_pb2,
    serviceaccount_pb2_grpc,
)

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Api:
    running: RunningAPIServer
    session: aiohttp.ClientSession
    base: str
    accounts: serviceaccount_pb2_grpc.ServiceAccountsAsyncStub
    pods: pod_pb2_grpc.PodsAsyncStub
    namespaces: namespace_pb2_grpc.NamespacesAsyncStub

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        headers = JSON if body is not None else {}
        async with self.session.request(method, self.base + path, data=data, headers=headers) as r:
            return r.status, json.loads(await r.read())

    async def create_account(self, namespace: str, name: str) -> serviceaccount_pb2.ServiceAccount:
        sa = serviceaccount_pb2.ServiceAccount(
            metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace)
        )
        return await self.accounts.Create(
            serviceaccount_pb2.CreateServiceAccountRequest(serviceAccount=sa)
        )

    async def create_pod(self, pod: pod_pb2.Pod) -> pod_pb2.Pod:
        return await self.pods.Create(pod_pb2.CreatePodRequest(pod=pod))


@pytest.fixture(scope="module")
async def api(etcd_server: EtcdServer) -> AsyncIterator[Api]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    session = aiohttp.ClientSession()
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        yield Api(
            running,
            session,
            f"http://{running.server.rest_address}",
            serviceaccount_pb2_grpc.ServiceAccountsStub(channel),
            pod_pb2_grpc.PodsStub(channel),
            namespace_pb2_grpc.NamespacesStub(channel),
        )
    finally:
        await session.close()
        await channel.close()
        await running.server.stop()


async def test_the_system_namespaces_have_their_default_account_from_the_start(api: Api) -> None:
    for namespace in SYSTEM_NAMESPACES:
        sa = await api.accounts.Get(meta_pb2.GetRequest(namespace=namespace, name="default"))
        assert (sa.apiVersion, sa.kind, sa.metadata.namespace) == (
            "v1",
            "ServiceAccount",
            namespace,
        )
    status, body = await api.call("GET", "/api/v1/serviceaccounts")
    assert status == 200
    listed = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]}
    assert {(ns, "default") for ns in SYSTEM_NAMESPACES} <= listed


async def test_a_pod_naming_no_account_runs_as_default(api: Api) -> None:
    pod = await api.create_pod(make_pod("plain"))
    assert (pod.spec.serviceAccountName, pod.spec.serviceAccount) == ("default", "default")
    status, body = await api.call("GET", "/api/v1/namespaces/default/pods/plain")
    assert status == 200
    assert body["spec"]["serviceAccountName"] == body["spec"]["serviceAccount"] == "default"


async def test_a_pod_whose_account_is_missing_is_forbidden_over_grpc_and_rest(api: Api) -> None:
    message = (
        'pods "lost" is forbidden: error looking up service account default/ghost: '
        'serviceaccount "ghost" not found'
    )
    pod = make_pod("lost")
    pod.spec.serviceAccountName = "ghost"
    await expect_error(api.create_pod(pod), grpc.StatusCode.PERMISSION_DENIED, message)
    status, body = await api.call(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "lost"},
            "spec": {"serviceAccountName": "ghost", "containers": [{"name": "c", "image": "b"}]},
        },
    )
    assert status == 403
    assert (body["reason"], body["message"]) == ("Forbidden", message)


async def test_an_account_created_over_rest_admits_pods_that_name_it_by_the_alias(api: Api) -> None:
    status, body = await api.call(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "robot"},
            "secrets": [{"name": "robot-token", "namespace": "elsewhere"}],
            "automountServiceAccountToken": False,
        },
    )
    assert status == 201, body
    assert body["secrets"] == [{"name": "robot-token"}]  # kube keeps only the name
    assert body["automountServiceAccountToken"] is False
    assert "generation" not in body["metadata"]
    pod = make_pod("robot-pod")
    pod.spec.serviceAccount = "robot"  # the deprecated alias alone
    created = await api.create_pod(pod)
    assert (created.spec.serviceAccountName, created.spec.serviceAccount) == ("robot", "robot")


async def test_invalid_names_are_refused_naming_the_field(api: Api) -> None:
    sa = serviceaccount_pb2.ServiceAccount(
        metadata=meta_pb2.ObjectMeta(name="Bad_Name", namespace="default")
    )
    details = await expect_error(
        api.accounts.Create(serviceaccount_pb2.CreateServiceAccountRequest(serviceAccount=sa)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert details.startswith(
        'ServiceAccount "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a '
        "lowercase RFC 1123 subdomain"
    )
    status, body = await api.call(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bad-sa"},
            "spec": {"serviceAccountName": "Bad_Name", "containers": [{"name": "c", "image": "b"}]},
        },
    )
    # Admission refuses before validation can (kube's order): the account cannot exist.
    assert status == 403, body
    # A pod template is not admitted, only validated: 422 naming the field.
    status, body = await api.call(
        "POST",
        "/apis/apps/v1/namespaces/default/replicasets",
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "bad-sa"},
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {
                        "serviceAccountName": "Bad_Name",
                        "containers": [{"name": "c", "image": "b"}],
                    },
                },
            },
        },
    )
    assert status == 422, body
    assert body["details"]["causes"][0]["field"] == "spec.template.spec.serviceAccountName"


async def test_service_account_name_cannot_change_on_a_pod(api: Api) -> None:
    await api.create_account("default", "other")
    pod = await api.create_pod(make_pod("fixed"))
    pod.spec.serviceAccountName = "other"
    details = await expect_error(
        api.pods.Update(pod_pb2.UpdatePodRequest(pod=pod)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert "pod updates may not change fields other than" in details


async def test_default_is_awaited_in_a_new_namespace_then_refused(api: Api) -> None:
    """Without a controller manager nothing makes `default` in a new namespace: admission looks
    for it about a second (kube's 10 tries), then refuses; made meanwhile, the pod is in."""
    for name in ("late", "never"):
        ns = namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name=name))
        await api.namespaces.Create(namespace_pb2.CreateNamespaceRequest(namespace=ns))
    waiting = asyncio.create_task(api.create_pod(make_pod("early", namespace="late")))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await api.create_account("late", "default")
    admitted = await waiting
    assert admitted.spec.serviceAccountName == "default"
    await expect_error(
        api.create_pod(make_pod("orphan", namespace="never")),
        grpc.StatusCode.PERMISSION_DENIED,
        'pods "orphan" is forbidden: error looking up service account never/default: '
        'serviceaccount "default" not found',
    )


async def test_kubectl_get_sa_table(api: Api) -> None:
    async with api.session.get(
        api.base + "/api/v1/namespaces/default/serviceaccounts",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    ) as r:
        table = json.loads(await r.read())
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Secrets", "Age"]
    cells = {row["cells"][0]: row["cells"][1] for row in table["rows"]}
    assert cells["default"] == 0


async def test_admission_mounts_kube_api_access_unless_automount_is_false(api: Api) -> None:
    # This apiserver has no signing key, so it mounts no tokens: no volume.
    assert not api.running.server.admission.mount_tokens
    assert list((await api.create_pod(make_pod("keyless"))).spec.volumes) == []
    # With a key (tests/e2e run with one), every pod gets kube's token volume.
    api.running.server.admission.mount_tokens = True
    try:
        await _check_kube_api_access(api)
    finally:
        api.running.server.admission.mount_tokens = False


async def _check_kube_api_access(api: Api) -> None:
    status, body = await api.call(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "with-token"},
            "spec": {
                "initContainers": [{"name": "i", "image": "b"}],
                "containers": [{"name": "c", "image": "b"}],
            },
        },
    )
    assert status == 201, body
    (vol,) = body["spec"]["volumes"]
    name = vol["name"]
    assert name.startswith("kube-api-access-") and len(name) == len("kube-api-access-") + 5
    sources = vol["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert vol["projected"]["defaultMode"] == 420
    for c in (*body["spec"]["initContainers"], *body["spec"]["containers"]):
        assert c["volumeMounts"] == [
            {
                "name": name,
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ]
    pod = make_pod("no-token")
    pod.spec.automountServiceAccountToken = False
    created = await api.create_pod(pod)
    assert list(created.spec.volumes) == []
    # The account's own automountServiceAccountToken: false (robot, above) decides too.
    pod = make_pod("robot-no-token")
    pod.spec.serviceAccountName = "robot"
    created = await api.create_pod(pod)
    assert list(created.spec.volumes) == []


async def test_volume_mounts_are_validated_in_pods_and_templates(api: Api) -> None:
    spec = {
        "containers": [
            {"name": "c", "image": "b", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
    }
    status, body = await api.call(
        "POST",
        "/api/v1/namespaces/default/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-mount"}, "spec": spec},
    )
    assert status == 422, body
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueNotFound",
            "message": 'Not found: "x"',
            "field": "spec.containers[0].volumeMounts[0].name",
        }
    ]
    template = {"metadata": {"labels": {"app": "v"}}, "spec": spec}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vols"},
        "spec": {"selector": {"matchLabels": {"app": "v"}}, "template": template},
    }
    status, body = await api.call(
        "POST", "/apis/apps/v1/namespaces/default/deployments", deployment
    )
    assert status == 422, body
    assert body["details"]["causes"][0]["field"] == (
        "spec.template.spec.containers[0].volumeMounts[0].name"
    )
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]  # type: ignore[index]
    status, body = await api.call(
        "POST", "/apis/apps/v1/namespaces/default/deployments", deployment
    )
    assert status == 201, body
    got = body["spec"]["template"]["spec"]
    assert got["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert got["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


async def test_the_apiserver_keeps_the_kubernetes_service_and_its_endpoints(api: Api) -> None:
    rest_port = int(api.base.rsplit(":", 1)[1])

    async def fetch(kind: str) -> Any:
        status, body = await api.call("GET", f"/api/v1/namespaces/default/{kind}/kubernetes")
        return body if status == 200 else None

    for _ in range(600):  # up to a minute on a loaded machine
        svc, ep = await fetch("services"), await fetch("endpoints")
        if svc and ep:
            break
        await asyncio.sleep(0.1)
    assert svc["spec"]["clusterIP"] == "127.100.0.1"
    assert svc["spec"]["ports"] == [
        {"name": "https", "protocol": "TCP", "port": 443, "targetPort": rest_port}
    ]
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    assert ep["subsets"] == [
        {
            "addresses": [{"ip": "127.0.0.1"}],
            "ports": [{"name": "https", "port": rest_port, "protocol": "TCP"}],
        }
    ]


async def test_the_kubernetes_endpoints_follow_the_live_apiservers(
    etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube's lease endpoint reconciler: each apiserver keeps a master lease in etcd and the
    Endpoints hold every apiserver whose lease is alive. A second apiserver joins; one that
    stops gracefully leaves at once; one that dies (a lease nobody renews) leaves when the
    lease expires."""
    monkeypatch.setattr(masterservice, "RECONCILE_SECONDS", 0.3)
    first = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    second = await start_apiserver(replace(first.settings, rest_port=0))
    ports = [int(r.server.rest_address.rsplit(":", 1)[1]) for r in (first, second)]
    stopped = False

    async def subsets() -> list[Any]:
        try:
            ep = await first.server.services["Endpoints"].get(
                meta_pb2.GetRequest(namespace="default", name="kubernetes")
            )
        except NotFoundError:
            return []
        assert isinstance(ep, endpoints_pb2.ServiceEndpoints)
        return [([a.ip for a in s.addresses], [p.port for p in s.ports]) for s in ep.subsets]

    async def until(want: list[Any], seconds: float) -> None:
        for _ in range(int(seconds * 10)):
            if await subsets() == want:
                return
            await asyncio.sleep(0.1)
        assert await subsets() == want

    try:
        both = sorted([(["127.0.0.1"], [port]) for port in ports], key=lambda s: s[1])
        await until(both, 30)
        # A dead apiserver's lease: it shows up, then expires (etcd's shortest TTL is a few
        # seconds) and the address is dropped with nobody removing it.
        storage = first.server.storage
        ghost = masterservice.MasterLeases(storage, first.settings.prefix, "127.0.0.9", 6443)
        await storage.put_leased(ghost._key(), b'{"ip": "127.0.0.9", "port": 6443}', 2)
        await until(sorted([*both, (["127.0.0.9"], [6443])], key=lambda s: s[1]), 30)
        await until(both, 30)
        # A graceful stop takes the apiserver out without waiting for its lease.
        stopped = True
        await second.server.stop()
        await until([(["127.0.0.1"], [ports[0]])], 5)
    finally:
        if not stopped:
            await second.server.stop()
        await first.server.stop()


async def test_a_master_lease_renewal_cut_short_is_still_removed(
    etcd_server: EtcdServer,
) -> None:
    """A renewal cancelled by the stop between its put (the key under a new lease) and its
    revoke of the previous lease: the stop's removal deletes the key all the same."""
    running = await start_apiserver(make_settings(etcd_server.endpoint))
    try:
        storage = running.server.storage
        leases = masterservice.MasterLeases(storage, running.settings.prefix, "127.0.0.7", 6443)
        await leases.renew()
        assert ("127.0.0.7", 6443) in await leases.alive()
        # What the cut-short renewal wrote: the key under a lease `leases` never learned of.
        await storage.put_leased(leases._key(), b'{"ip": "127.0.0.7", "port": 6443}', 15)
        await leases.remove()
        assert ("127.0.0.7", 6443) not in await leases.alive()
    finally:
        await running.server.stop()
