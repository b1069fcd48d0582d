"""The Node authorizer (node-1 against node-2's objects) and NodeRestriction admission."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth import bootstrap
from apiserver.auth.authorizer import (
    Attributes,
    Chain,
    Decision,
    Identity,
    Outcome,
    forbidden_message,
    non_resource,
)
from apiserver.auth.node import (
    NodeAuthorizer,
    PodsFromCache,
    StaticPods,
    forbidden_node_labels,
    node_restriction,
)
from apiserver.auth.rbac import RbacAuthorizer
from apiserver.watchcache import ADDED, DELETED, MODIFIED, CachedObject, CacheEvent
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING
from tinykube.v1 import lease_pb2, meta_pb2, node_pb2, pod_pb2

NODE1 = Identity("system:node:node-1", ("system:nodes", "system:authenticated"))
PODS = StaticPods(
    {("default", "on-1"): "node-1", ("default", "on-2"): "node-2", ("default", "pending"): ""}
)
LEASES = "coordination.k8s.io"
LEASE_NS = "kube-node-lease"


def a(verb: str, resource: str, group: str = "", **kw: Any) -> Attributes:
    return Attributes(verb, resource, group, **kw)


def chain() -> Chain:
    rbac = RbacAuthorizer()
    for role in bootstrap.cluster_roles():
        rbac.apply(CLUSTER_ROLE.kind, None, role)
    for b in bootstrap.cluster_role_bindings():
        rbac.apply(CLUSTER_ROLE_BINDING.kind, None, b)
    return Chain([NodeAuthorizer(PODS), rbac])


MATRIX = [
    # (attributes, allowed through Node,RBAC with the bootstrap policy)
    (a("get", "nodes", name="node-1"), True),
    (a("get", "nodes", name="node-2"), False),
    (a("list", "nodes", name="node-1", field_selector="metadata.name=node-1"), True),
    (a("watch", "nodes", name="node-1", field_selector="metadata.name=node-1"), True),
    (a("list", "nodes"), False),
    (a("create", "nodes"), True),  # NodeRestriction limits it to its own
    (a("update", "nodes", name="node-1"), True),
    (a("update", "nodes", subresource="status", name="node-1"), True),
    (a("patch", "nodes", subresource="status", name="node-2"), True),  # admission refuses it
    (a("delete", "nodes", name="node-1"), False),
    (a("get", "pods", namespace="default", name="on-1"), True),
    (a("get", "pods", namespace="default", name="on-2"), False),
    (a("get", "pods", namespace="default", name="pending"), False),
    (a("get", "pods", namespace="default", name="missing"), False),
    (a("list", "pods", field_selector="spec.nodeName=node-1"), True),
    (a("watch", "pods", field_selector="spec.nodeName=node-1"), True),
    (a("watch", "pods", field_selector="spec.nodeName==node-1,status.phase!=Failed"), True),
    (a("watch", "pods", field_selector="spec.nodeName=node-2"), False),
    (a("watch", "pods", field_selector="spec.nodeName!=node-1"), False),
    (a("list", "pods"), False),
    (a("list", "pods", namespace="default"), False),
    (
        a("list", "pods", namespace="default", name="on-1", field_selector="metadata.name=on-1"),
        True,
    ),
    (
        a("list", "pods", namespace="default", name="on-2", field_selector="metadata.name=on-2"),
        False,
    ),
    (a("update", "pods", subresource="status", namespace="default", name="on-1"), True),
    (
        a("update", "pods", subresource="status", namespace="default", name="on-2"),
        True,
    ),  # admission
    (a("delete", "pods", namespace="default", name="on-1"), True),
    (a("create", "pods", subresource="eviction", namespace="default", name="on-1"), True),
    (a("update", "pods", namespace="default", name="on-1"), False),
    (a("create", "pods", subresource="binding", namespace="default", name="on-1"), False),
    (a("get", "pods", subresource="log", namespace="default", name="on-1"), False),
    (a("get", "leases", LEASES, namespace=LEASE_NS, name="node-1"), True),
    (a("update", "leases", LEASES, namespace=LEASE_NS, name="node-1"), True),
    (a("create", "leases", LEASES, namespace=LEASE_NS), True),  # admission checks the name
    (a("update", "leases", LEASES, namespace=LEASE_NS, name="node-2"), False),
    (
        a("update", "leases", LEASES, namespace="kube-system", name="tinykube-controller-manager"),
        False,
    ),
    (a("list", "leases", LEASES, namespace=LEASE_NS), False),
    (a("create", "events", namespace="default"), True),
    (a("patch", "events", namespace="default", name="e"), True),
    (a("delete", "events", namespace="default", name="e"), False),
    (a("get", "services", namespace="default", name="web"), True),
    (a("watch", "services"), True),
    (a("get", "endpoints", namespace="default", name="web"), True),
    (a("list", "endpoints"), False),
    (a("list", "replicasets", "apps"), False),
    (a("get", "secrets", namespace="default", name="s"), False),
    (a("create", "selfsubjectaccessreviews", "authorization.k8s.io"), True),  # basic-user
    (non_resource("get", "/version"), True),  # system:discovery, through RBAC
]


@pytest.mark.parametrize(("attrs", "allowed"), MATRIX)
def test_node_matrix(attrs: Attributes, allowed: bool) -> None:
    assert chain().authorize(NODE1, attrs).allowed is allowed


def test_what_node_2_may_do_to_its_own_objects_node_1_may_not() -> None:
    node2 = Identity("system:node:node-2", ("system:nodes",))
    own = a("get", "pods", namespace="default", name="on-2")
    assert chain().authorize(node2, own).allowed
    assert not chain().authorize(NODE1, own).allowed


REASONS = [
    (
        a("get", "pods", namespace="default", name="on-2"),
        "no relationship found between node 'node-1' and this object",
    ),
    (a("list", "pods"), "can only list/watch pods with spec.nodeName field selector"),
    (a("list", "nodes"), "node 'node-1' cannot read all nodes, only its own Node object"),
    (
        a("get", "nodes", name="node-2"),
        "node 'node-1' cannot read 'node-2', only its own Node object",
    ),
    (
        a("update", "leases", LEASES, namespace=LEASE_NS, name="node-2"),
        "can only access node lease with the same name as the requesting node",
    ),
    (
        a("get", "leases", LEASES, namespace="default", name="node-1"),
        'can only access leases in the "kube-node-lease" system namespace',
    ),
    (
        a("list", "leases", LEASES, namespace=LEASE_NS),
        "can only get, create, update, patch, or delete a node lease",
    ),
    (a("delete", "nodes", name="node-1"), ""),
]


@pytest.mark.parametrize(("attrs", "reason"), REASONS)
def test_node_reasons(attrs: Attributes, reason: str) -> None:
    assert NodeAuthorizer(PODS).authorize(NODE1, attrs) == Decision(Outcome.NO_OPINION, reason)


def test_a_refusal_message_carries_the_node_authorizers_reason() -> None:
    attrs = a("get", "pods", namespace="default", name="on-2")
    decision = chain().authorize(NODE1, attrs)
    assert forbidden_message(NODE1, attrs, decision.reason) == (
        'pods "on-2" is forbidden: User "system:node:node-1" cannot get resource "pods" in API '
        'group "" in the namespace "default": no relationship found between node \'node-1\' '
        "and this object"
    )


def test_non_nodes_get_no_opinion() -> None:
    node_auth = NodeAuthorizer(PODS)
    attrs = a("get", "nodes", name="node-1")
    for who in (
        Identity("system:node:node-1"),  # not in system:nodes
        Identity("alice", ("system:nodes",)),
        Identity("system:kube-scheduler"),
    ):
        assert node_auth.authorize(who, attrs) == Decision(Outcome.NO_OPINION)
    nameless = Identity("system:node:", ("system:nodes",))
    assert node_auth.authorize(nameless, attrs) == Decision(
        Outcome.NO_OPINION, 'unknown node for user "system:node:"'
    )


# ---- NodeRestriction ---------------------------------------------------------------------------


def pod(
    name: str,
    node: str = "",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> pod_pb2.Pod:
    p = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=name, namespace="default"))
    p.spec.nodeName = node
    p.metadata.annotations.update(annotations or {})
    p.metadata.labels.update(labels or {"app": "web"})
    return p


def node(name: str, labels: dict[str, str] | None = None, *, taints: bool = True) -> node_pb2.Node:
    n = node_pb2.Node(metadata=meta_pb2.ObjectMeta(name=name))
    n.metadata.labels.update(labels or {})
    if taints:
        n.spec.taints.add(key="dedicated", value="gpu", effect="NoSchedule")
    return n


def lease(name: str) -> lease_pb2.Lease:
    return lease_pb2.Lease(metadata=meta_pb2.ObjectMeta(name=name, namespace=LEASE_NS))


ADMISSION = [
    # (attributes, object written, stored object, message or None)
    (
        a("update", "pods", subresource="status", namespace="default", name="p"),
        pod("p", "node-1"),
        pod("p", "node-1"),
        None,
    ),
    (
        a("update", "pods", subresource="status", namespace="default", name="p"),
        pod("p", "node-2"),
        pod("p", "node-2"),
        'pods "p" is forbidden: node "node-1" can only update pod status for pods with '
        "spec.nodeName set to itself",
    ),
    (a("delete", "pods", namespace="default", name="p"), None, pod("p", "node-1"), None),
    (
        a("delete", "pods", namespace="default", name="p"),
        None,
        pod("p", "node-2"),
        'pods "p" is forbidden: node "node-1" can only delete pods with spec.nodeName set to '
        "itself",
    ),
    (
        a("create", "pods", subresource="eviction", namespace="default", name="p"),
        None,
        pod("p", "node-1"),
        None,
    ),
    (
        a("create", "pods", subresource="eviction", namespace="default", name="p"),
        None,
        pod("p", "node-2"),
        'pods "p" is forbidden: node node-1 can only evict pods with spec.nodeName set to itself',
    ),
    (
        a("create", "pods", namespace="default"),
        pod("p", "node-1"),
        None,
        'pods "p" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, '
        'node "node-1" can only create mirror pods',
    ),
    (
        a("create", "pods", namespace="default"),
        pod("p", "node-1", {"kubernetes.io/config.mirror": "x"}),
        None,
        'pods "p" is forbidden: node "node-1" can only create mirror pods',
    ),
    (a("update", "nodes", name="node-1"), node("node-1"), node("node-1"), None),
    (
        a("update", "nodes", subresource="status", name="node-2"),
        node("node-2"),
        node("node-2"),
        'nodes "node-2" is forbidden: node "node-1" is not allowed to modify node "node-2"',
    ),
    (
        a("create", "nodes"),
        node("node-2"),
        None,
        'nodes "node-2" is forbidden: node "node-1" is not allowed to modify node "node-2"',
    ),
    (
        a("create", "nodes"),
        node("node-1", {"kubernetes.io/hostname": "node-1", "team": "a"}),
        None,
        None,
    ),
    (
        a("create", "nodes"),
        node("node-1", {"node-restriction.kubernetes.io/pci": "true"}),
        None,
        'nodes "node-1" is forbidden: node "node-1" is not allowed to set the following labels: '
        "node-restriction.kubernetes.io/pci",
    ),
    (
        a("update", "nodes", name="node-1"),
        node("node-1", {"node-role.kubernetes.io/control-plane": ""}),
        node("node-1"),
        'nodes "node-1" is forbidden: is not allowed to modify labels: '
        "node-role.kubernetes.io/control-plane",
    ),
    (
        a("update", "nodes", name="node-1"),
        node("node-1", {"node-role.kubernetes.io/control-plane": ""}),
        node("node-1", {"node-role.kubernetes.io/control-plane": ""}),
        None,  # unchanged labels are not the node's doing
    ),
    (
        a("update", "nodes", name="node-1"),
        node("node-1", taints=False),
        node("node-1"),
        'nodes "node-1" is forbidden: node "node-1" is not allowed to modify taints',
    ),
    (
        a("update", "pods", subresource="status", namespace="default", name="p"),
        pod("p", "node-1", labels={"app": "changed"}),
        pod("p", "node-1"),
        'pods "p" is forbidden: node "node-1" cannot update labels through pod status',
    ),
    (
        a("update", "pods", namespace="default", name="p"),
        pod("p", "node-1"),
        pod("p", "node-1"),
        'pods "p" is forbidden: unexpected operation "UPDATE", node "node-1" can only create '
        "and delete mirror pods",
    ),
    (
        a("create", "pods", subresource="binding", namespace="default", name="p"),
        None,
        pod("p"),
        'pods "p" is forbidden: unexpected pod subresource "binding", only \'status\' and '
        "'eviction' are allowed",
    ),
    (a("create", "leases", LEASES, namespace=LEASE_NS), lease("node-1"), None, None),
    (
        a("update", "leases", LEASES, namespace=LEASE_NS, name="node-1"),
        lease("node-1"),
        lease("node-1"),
        None,
    ),
    (
        a("update", "leases", LEASES, namespace=LEASE_NS, name="node-2"),
        lease("node-2"),
        lease("node-2"),
        'leases.coordination.k8s.io "node-2" is forbidden: can only access node lease with the '
        "same name as the requesting node",
    ),
    (
        a("update", "leases", LEASES, namespace="kube-system", name="node-1"),
        lease("node-1"),
        lease("node-1"),
        'leases.coordination.k8s.io "node-1" is forbidden: can only access leases in the '
        '"kube-node-lease" system namespace',
    ),
    (
        a("create", "leases", LEASES, namespace=LEASE_NS),
        lease("node-2"),
        None,
        'leases.coordination.k8s.io "node-2" is forbidden: can only access node lease with the '
        "same name as the requesting node",
    ),
    (a("create", "events", namespace="default"), None, None, None),
]


@pytest.mark.parametrize(("attrs", "obj", "old", "message"), ADMISSION)
def test_node_restriction(attrs: Attributes, obj: Any, old: Any, message: str | None) -> None:
    assert node_restriction(NODE1, attrs, obj, old) == message


def test_node_restriction_admits_everyone_else() -> None:
    attrs = a("update", "pods", subresource="status", namespace="default", name="p")
    assert (
        node_restriction(Identity("system:kube-scheduler"), attrs, pod("p"), pod("p", "n2")) is None
    )


@pytest.mark.parametrize(
    ("labels", "old", "forbidden"),
    [
        ({"a.node-restriction.kubernetes.io/x": "1"}, {}, ["a.node-restriction.kubernetes.io/x"]),
        ({"kubelet.kubernetes.io/x": "1", "node.kubernetes.io/y": "1"}, {}, []),
        ({"topology.kubernetes.io/zone": "z"}, {}, []),
        ({"example.k8s.io/x": "1"}, {}, ["example.k8s.io/x"]),
        ({}, {"node-role.kubernetes.io/worker": ""}, ["node-role.kubernetes.io/worker"]),  # removal
        ({"example.com/x": "1", "plain": "1"}, {}, []),
    ],
)
def test_forbidden_node_labels(
    labels: dict[str, str], old: dict[str, str], forbidden: list[str]
) -> None:
    assert forbidden_node_labels(labels, old) == forbidden


# ---- configmaps and secrets: only those a pod bound to the node references -------------------


def referencing_pod(name: str, node: str, **container: Any) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace = name, "default"
    pod.spec.nodeName = node
    c = pod.spec.containers.add(name="c", image="busybox")
    for source in container.get("env_from", ()):
        entry = c.envFrom.add()
        getattr(entry, source[0]).name = source[1]
    for kind, ref in container.get("value_from", ()):
        getattr(c.env.add(name="V").valueFrom, kind).CopyFrom(ref)
    return pod


REFERRING = StaticPods(
    {("default", "web"): "node-1", ("default", "job"): "node-2"},
    {
        ("default", "web"): referencing_pod(
            "web",
            "node-1",
            env_from=[("configMapRef", "web-config")],
            value_from=[("secretKeyRef", pod_pb2.SecretKeySelector(name="db", key="pass"))],
        ),
        ("default", "job"): referencing_pod(
            "job",
            "node-2",
            value_from=[
                ("configMapKeyRef", pod_pb2.ConfigMapKeySelector(name="job-config", key="k"))
            ],
            env_from=[("secretRef", "job-token")],
        ),
    },
)
NO_RELATIONSHIP = "no relationship found between node 'node-1' and this object"


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        (a("get", "configmaps", namespace="default", name="web-config"), None),
        (a("get", "secrets", namespace="default", name="db"), None),
        (a("watch", "secrets", namespace="default", name="db"), None),
        (a("list", "configmaps", namespace="default", name="web-config"), None),
        (a("get", "configmaps", namespace="default", name="job-config"), NO_RELATIONSHIP),
        (a("get", "secrets", namespace="default", name="job-token"), NO_RELATIONSHIP),
        (a("get", "configmaps", namespace="other", name="web-config"), NO_RELATIONSHIP),
        (a("get", "secrets", namespace="default", name="web-config"), NO_RELATIONSHIP),
        (a("list", "secrets", namespace="default"), "No Object name found"),
        (a("list", "configmaps"), "can only read namespaced object of this type"),
        (
            a("update", "configmaps", namespace="default", name="web-config"),
            "can only read resources of this type",
        ),
        (
            a("get", "secrets", namespace="default", name="db", subresource="x"),
            "cannot read subresource",
        ),
    ],
)
def test_a_node_reads_only_what_its_pods_reference(attrs: Attributes, reason: str | None) -> None:
    decision = NodeAuthorizer(REFERRING).authorize(NODE1, attrs)
    if reason is None:
        assert decision.allowed
    else:
        assert decision == Decision(Outcome.NO_OPINION, reason)


class FakePodCache:
    """The two things PodsFromCache uses of the pod watch cache."""

    def __init__(self) -> None:
        self.state: dict[bytes, CachedObject] = {}
        self.listeners: list[Any] = []

    def put(self, pod: pod_pb2.Pod) -> None:
        key = f"/registry/pods/default/{pod.metadata.name}".encode()
        cur = CachedObject(
            key=key,
            namespace="default",
            obj=pod,
            data=b"",
            revision=1,
            labels={},
            fields={"spec.nodeName": pod.spec.nodeName},
        )
        prev = self.state.get(key)
        self.state[key] = cur
        for listener in self.listeners:
            listener(CacheEvent(MODIFIED if prev else ADDED, 1, cur, prev))

    def delete(self, name: str) -> None:
        key = f"/registry/pods/default/{name}".encode()
        prev = self.state.pop(key)
        for listener in self.listeners:
            listener(CacheEvent(DELETED, 2, prev, prev))


def test_the_cache_index_follows_binding_and_deletion() -> None:
    cache = FakePodCache()
    early = referencing_pod("early", "node-1", env_from=[("configMapRef", "shared")])
    cache.put(early)  # already in the cache when the authorizer starts
    pods = PodsFromCache(cache, b"/registry/pods/")  # type: ignore[arg-type]
    assert pods.referenced("node-1", "configmaps", "default", "shared")

    unbound = referencing_pod("late", "", env_from=[("configMapRef", "shared")])
    unbound.spec.containers[0].envFrom.add().secretRef.name = "token"
    cache.put(unbound)
    assert not pods.referenced("node-2", "configmaps", "default", "shared")
    bound = pod_pb2.Pod()
    bound.CopyFrom(unbound)
    bound.spec.nodeName = "node-2"
    cache.put(bound)  # the Bind
    assert pods.referenced("node-2", "configmaps", "default", "shared")
    assert pods.referenced("node-2", "secrets", "default", "token")
    cache.put(bound)  # a status write: nothing changes
    assert pods.index.counts[("node-2", "configmaps", "default", "shared")] == 1

    twin = referencing_pod("twin", "node-1", env_from=[("configMapRef", "shared")])
    cache.put(twin)
    index = pods.index
    # Pods naming the same objects share one reference set (bytes per pod, issue 26).
    assert (
        index.pods[b"/registry/pods/default/twin"][1]
        is index.pods[b"/registry/pods/default/early"][1]
    )
    cache.delete("early")
    assert pods.referenced("node-1", "configmaps", "default", "shared"), "twin still uses it"
    cache.delete("twin")
    assert not pods.referenced("node-1", "configmaps", "default", "shared")
    assert pods.index.counts == {
        ("node-2", "configmaps", "default", "shared"): 1,
        ("node-2", "secrets", "default", "token"): 1,
    }
    assert list(index._sets) == [index.pods[b"/registry/pods/default/late"][1]]
    cache.state.clear()
    for listener in cache.listeners:
        listener(None)  # a relist replaced the state
    assert pods.index.counts == {}


def test_an_ephemeral_container_added_to_a_bound_pod_grants_what_it_references() -> None:
    # kube's graph populator re-adds a pod whose ephemeral containers changed (kubernetes#114984):
    # `kubectl debug --env-from` a secret nothing else on the node uses must be readable.
    cache = FakePodCache()
    pods = PodsFromCache(cache, b"/registry/pods/")  # type: ignore[arg-type]
    web = referencing_pod("web", "node-1", env_from=[("configMapRef", "web-config")])
    cache.put(web)
    assert not pods.referenced("node-1", "secrets", "default", "debug-token")
    debugged = pod_pb2.Pod()
    debugged.CopyFrom(web)
    debug = debugged.spec.ephemeralContainers.add(name="debug", image="busybox")
    debug.envFrom.add().secretRef.name = "debug-token"
    debug.env.add(name="K").valueFrom.configMapKeyRef.name = "debug-config"
    cache.put(debugged)  # the pods/ephemeralcontainers write
    assert pods.referenced("node-1", "secrets", "default", "debug-token")
    assert pods.referenced("node-1", "configmaps", "default", "debug-config")
    assert pods.referenced("node-1", "configmaps", "default", "web-config")
    assert (
        NodeAuthorizer(pods)
        .authorize(NODE1, a("get", "secrets", namespace="default", name="debug-token"))
        .allowed
    )
    cache.put(debugged)  # a status write: counted once still
    assert pods.index.counts[("node-1", "secrets", "default", "debug-token")] == 1
    cache.delete("web")
    assert pods.index.counts == {}
