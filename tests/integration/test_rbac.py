"""RBAC in a running apiserver: the bootstrap policy is there after start, kubectl reads and
writes the four kinds, the authorizer follows the watch caches, and `kubectl auth can-i` asks
SelfSubjectAccessReview (with the identity the test hands the REST front end)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from apiserver.auth import bootstrap
from apiserver.auth.authorizer import Attributes, Identity
from apiserver.podstore import PodStore
from apiserver.rest.app import anonymous
from tests.integration.conftest import (
    RunningAPIServer,
    bind_request,
    make_node,
    make_pod,
    make_settings,
    start_apiserver,
)
from tests.integration.test_rest_clients import KUBECTL, in_thread, kubectl
from tinykube.client import Client
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING
from tinykube.localetcd import EtcdServer
from tinykube.v1 import meta_pb2, namespace_pb2, node_pb2, pod_pb2

pytestmark = pytest.mark.integration
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
async def served(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    # As on Kubernetes, the namespace the tests' Roles and bindings go in must exist first.
    async with Client(running.address) as client:
        await client.namespaces.create(
            namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name="team"))
        )
    try:
        yield running
    finally:
        await running.server.stop()


async def test_the_bootstrap_policy_exists_after_start(served: RunningAPIServer) -> None:
    server = served.server
    expectations: list[tuple[Any, list[Any]]] = [
        (CLUSTER_ROLE, list(bootstrap.cluster_roles())),
        (CLUSTER_ROLE_BINDING, list(bootstrap.cluster_role_bindings())),
    ]
    for info, expected in expectations:
        _, items, _ = await server.services[info.kind].list_objects(meta_pb2.ListRequest())
        stored: dict[str, Any] = {o.obj.metadata.name: o.obj for o in items}  # type: ignore[attr-defined]
        assert set(stored) == {o.metadata.name for o in expected}
        for obj in expected:
            got = stored[obj.metadata.name]
            assert got.metadata.labels["kubernetes.io/bootstrapping"] == "rbac-defaults"
    # Starting again (a restart) writes nothing.
    assert await server.reconcile_policy() == {
        "create": 0,
        "update": 0,
        "recreate": 0,
        "protected": 0,
    }


async def eventually(check: Any, within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


BINDING_YAML = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: alice-edits
  namespace: team
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: edit
subjects:
- kind: User
  name: alice
- kind: Group
  name: devs
- kind: ServiceAccount
  name: ci
  namespace: build
"""


@needs_kubectl
async def test_kubectl_reads_and_writes_rbac_and_the_authorizer_follows(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    def run(*args: str, stdin: str = "") -> Any:
        return kubectl(served, tmp_path, *args, stdin=stdin)

    roles = await in_thread(lambda: run("get", "clusterroles"))
    assert roles.returncode == 0, roles.stderr
    lines = roles.stdout.splitlines()
    assert lines[0].split() == ["NAME", "CREATED", "AT"]
    names = {line.split()[0] for line in lines[1:]}
    assert {"cluster-admin", "admin", "edit", "view", "system:kube-scheduler"} <= names
    bindings = await in_thread(
        lambda: run("get", "clusterrolebindings", "cluster-admin", "-o", "wide")
    )
    assert bindings.returncode == 0, bindings.stderr
    header, row = bindings.stdout.splitlines()
    assert header.split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert row.split()[:2] == ["cluster-admin", "ClusterRole/cluster-admin"]
    assert row.split()[-1] == "system:masters"

    alice, attrs = Identity("alice"), Attributes("create", "pods", namespace="team")
    authorizer = served.server.authorizer
    assert not authorizer.authorize(alice, attrs).allowed
    created = await in_thread(lambda: run("create", "-f", "-", stdin=BINDING_YAML))
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "rolebinding.rbac.authorization.k8s.io/alice-edits created"
    await eventually(lambda: authorizer.authorize(alice, attrs).allowed)
    assert authorizer.authorize(Identity("bob", ("devs",)), attrs).allowed
    assert authorizer.authorize(Identity("system:serviceaccount:build:ci"), attrs).allowed
    assert not authorizer.authorize(alice, Attributes("create", "pods", namespace="other")).allowed

    wide = await in_thread(lambda: run("get", "rolebindings", "-n", "team", "-o", "wide"))
    assert wide.returncode == 0, wide.stderr
    assert wide.stdout.splitlines()[1].split() == [
        "alice-edits",
        "ClusterRole/edit",
        wide.stdout.splitlines()[1].split()[2],
        "alice",
        "devs",
        "build/ci",
    ]
    described = await in_thread(lambda: run("describe", "rolebinding", "alice-edits", "-n", "team"))
    assert described.returncode == 0, described.stderr
    assert "ClusterRole" in described.stdout and "alice" in described.stdout

    # roleRef is immutable, as Kubernetes words it.
    changed = BINDING_YAML.replace("name: edit", "name: view")
    replaced = await in_thread(lambda: run("replace", "-f", "-", stdin=changed))
    assert replaced.returncode != 0
    # (kubectl words the 422 from its details: "The RoleBinding ... is invalid".)
    assert (
        'The RoleBinding "alice-edits" is invalid: roleRef: Invalid value: '
        'rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"view"}: '
        "cannot change roleRef"
    ) in replaced.stderr

    deleted = await in_thread(lambda: run("delete", "rolebinding", "alice-edits", "-n", "team"))
    assert deleted.returncode == 0, deleted.stderr
    await eventually(lambda: not authorizer.authorize(alice, attrs).allowed)


@needs_kubectl
async def test_a_bad_role_is_refused_naming_the_field(
    served: RunningAPIServer, tmp_path: Path
) -> None:
    bad = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bad, namespace: team}
rules:
- apiGroups: [""]
  resources: [pods]
- nonResourceURLs: ["/healthz"]
  verbs: [get]
"""
    out = await in_thread(lambda: kubectl(served, tmp_path, "create", "-f", "-", stdin=bad))
    assert out.returncode != 0
    assert (
        'The Role "bad" is invalid: \n* rules[0].verbs: Required value: verbs '
        "must contain at least one value\n* rules[1].nonResourceURLs: Invalid value: "
        '[]string{"/healthz"}: namespaced rules cannot apply to non-resource URLs'
    ) in out.stderr


@needs_kubectl
async def test_kubectl_auth_can_i(served: RunningAPIServer, tmp_path: Path) -> None:
    rest = served.server.rest
    assert rest is not None

    def can_i(*args: str) -> Any:
        return kubectl(served, tmp_path, "auth", "can-i", *args)

    try:
        rest.identify = lambda request: Identity("root", ("system:masters", "system:authenticated"))
        yes = await in_thread(lambda: can_i("delete", "nodes"))
        assert (yes.returncode, yes.stdout.strip()) == (0, "yes"), yes.stderr
        rest.identify = lambda request: Identity(
            "system:node:node-1", ("system:nodes", "system:authenticated")
        )
        own = await in_thread(lambda: can_i("get", "nodes/node-1"))
        assert (own.returncode, own.stdout.strip()) == (0, "yes"), own.stderr
        other = await in_thread(lambda: can_i("get", "nodes/node-2"))
        # kubectl shows the Node authorizer's reason, as against Kubernetes.
        assert (other.returncode, other.stdout.strip()) == (
            1,
            "no - node 'node-1' cannot read 'node-2', only its own Node object",
        )
        rest.identify = anonymous
        anon = await in_thread(lambda: can_i("list", "pods"))
        assert (anon.returncode, anon.stdout.strip()) == (1, "no")
    finally:
        rest.identify = anonymous


@needs_kubectl
async def test_kubectl_auth_can_i_list(served: RunningAPIServer, tmp_path: Path) -> None:
    """`kubectl auth can-i --list` posts a SelfSubjectRulesReview: the rules bound to the
    requester cluster-wide and in the namespace (system:basic-user's included)."""
    rest = served.server.rest
    assert rest is not None
    policy = """\
apiVersion: v1
kind: Namespace
metadata: {name: lister}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: lister}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
- {apiGroups: [apps], resources: [deployments], resourceNames: [web], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: lister}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: lister}]
"""
    try:
        rest.identify = lambda request: Identity("root", ("system:masters", "system:authenticated"))
        made = await in_thread(lambda: kubectl(served, tmp_path, "create", "-f", "-", stdin=policy))
        assert made.returncode == 0, made.stderr
        rest.identify = lambda request: Identity("lister", ("system:authenticated",))

        def listed() -> Any:
            return kubectl(served, tmp_path, "auth", "can-i", "--list", "--namespace=lister")

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        out = await in_thread(listed)
        # The authorizer follows its watch caches: wait for the binding to arrive.
        while "deployments.apps" not in out.stdout and loop.time() < deadline:
            await asyncio.sleep(0.1)
            out = await in_thread(listed)
        assert out.returncode == 0, out.stderr
        rows = [line.split() for line in out.stdout.splitlines()]
        assert rows[0] == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
        assert ["pods", "[]", "[]", "[get", "list]"] in rows
        assert ["deployments.apps", "[]", "[web]", "[patch]"] in rows
        assert ["selfsubjectrulesreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows
        assert ["[/healthz]", "[]", "[get]"] in rows
        # Elsewhere only the cluster-wide rules apply.
        other = await in_thread(
            lambda: kubectl(served, tmp_path, "auth", "can-i", "--list", "--namespace=default")
        )
        assert other.returncode == 0, other.stderr
        assert "deployments.apps" not in other.stdout and "pods " not in other.stdout
    finally:
        rest.identify = anonymous


async def test_access_review_errors(served: RunningAPIServer) -> None:
    import aiohttp

    url = (
        f"http://{served.server.rest_address}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    )
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={"kind": "SelfSubjectAccessReview", "spec": {}}) as resp:
            assert resp.status == 422
            body = json.loads(await resp.read())
        assert body["message"] == (
            'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
            'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes '
            "must be specified"
        )
        assert body["details"]["causes"][0]["field"] == "spec.resourceAttributes"
        async with session.get(url) as resp:
            assert resp.status == 405
        review = {"spec": {"nonResourceAttributes": {"verb": "get", "path": "/healthz"}}}
        async with session.post(url, json=review) as resp:
            assert resp.status == 201
            answer = json.loads(await resp.read())
        # Anonymous until authentication exists: system:public-info-viewer covers /healthz.
        assert answer["status"]["allowed"] is True
        assert answer["status"]["reason"].startswith(
            'RBAC: allowed by ClusterRoleBinding "system:public-info-viewer"'
        )


async def test_the_node_authorizer_follows_the_pod_cache(served: RunningAPIServer) -> None:
    server = served.server
    pods = server.services["Pod"]
    assert isinstance(pods, PodStore)
    nodes = server.services["Node"]
    await nodes.create(node_pb2.CreateNodeRequest(node=make_node("node-a")))
    await pods.create(pod_pb2.CreatePodRequest(pod=make_pod("bound-a")))
    node_a = Identity("system:node:node-a", ("system:nodes", "system:authenticated"))
    node_b = Identity("system:node:node-b", ("system:nodes", "system:authenticated"))
    get = Attributes("get", "pods", namespace="default", name="bound-a")
    authorizer = server.authorizer
    assert not authorizer.authorize(node_a, get).allowed  # not bound yet
    await pods.bind(bind_request("bound-a", "node-a"))
    await eventually(lambda: authorizer.authorize(node_a, get).allowed)
    decision = authorizer.authorize(node_b, get)
    assert not decision.allowed
    assert decision.reason == "no relationship found between node 'node-b' and this object"
    await pods.delete(
        meta_pb2.DeleteRequest(namespace="default", name="bound-a", gracePeriodSeconds=0)
    )
    await eventually(lambda: not authorizer.authorize(node_a, get).allowed)
