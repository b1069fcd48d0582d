"""The RBAC authorizer: bindings by subject and scope, missing roles, the memo, and what the
bootstrap roles grant."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth import bootstrap
from apiserver.auth.authorizer import Attributes, Identity, Outcome, non_resource
from apiserver.auth.bootstrap import cluster_role, rule, url_rule
from apiserver.auth.rbac import RbacAuthorizer
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, RBAC_GROUP, ROLE, ROLE_BINDING
from tinykube.v1 import meta_pb2, rbac_pb2

AUTHENTICATED = "system:authenticated"


def subject(kind: str, name: str, namespace: str = "") -> rbac_pb2.Subject:
    group = RBAC_GROUP if kind in ("User", "Group") else ""
    return rbac_pb2.Subject(kind=kind, name=name, namespace=namespace, apiGroup=group)


def role(name: str, namespace: str, *rules: rbac_pb2.PolicyRule) -> rbac_pb2.Role:
    return rbac_pb2.Role(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace), rules=list(rules)
    )


def binding(
    name: str, namespace: str, ref_kind: str, ref_name: str, *subjects: rbac_pb2.Subject
) -> Any:
    cls = rbac_pb2.RoleBinding if namespace else rbac_pb2.ClusterRoleBinding
    return cls(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace),
        roleRef=rbac_pb2.RoleRef(apiGroup=RBAC_GROUP, kind=ref_kind, name=ref_name),
        subjects=list(subjects),
    )


def authorizer(*objects: Any) -> RbacAuthorizer:
    rbac = RbacAuthorizer()
    kinds = {
        rbac_pb2.Role: ROLE.kind,
        rbac_pb2.ClusterRole: CLUSTER_ROLE.kind,
        rbac_pb2.RoleBinding: ROLE_BINDING.kind,
        rbac_pb2.ClusterRoleBinding: CLUSTER_ROLE_BINDING.kind,
    }
    for obj in objects:
        rbac.apply(kinds[type(obj)], None, obj)
    return rbac


READ_PODS = rule(("get", "list", "watch"), ("",), ("pods",))
POD_READER = cluster_role("pod-reader", [READ_PODS])


def allows(rbac: RbacAuthorizer, identity: Identity, attrs: Attributes) -> bool:
    return rbac.authorize(identity, attrs).outcome is Outcome.ALLOW


SCOPE_ROWS = [
    # (behaviour, binding, identity, attributes, allowed)
    (
        "ClusterRoleBinding grants in every namespace",
        binding("b", "", "ClusterRole", "pod-reader", subject("User", "alice")),
        Identity("alice"),
        Attributes("list", "pods", namespace="other"),
        True,
    ),
    (
        "ClusterRoleBinding grants across namespaces",
        binding("b", "", "ClusterRole", "pod-reader", subject("User", "alice")),
        Identity("alice"),
        Attributes("list", "pods"),
        True,
    ),
    (
        "RoleBinding to a ClusterRole grants in its namespace",
        binding("b", "team", "ClusterRole", "pod-reader", subject("User", "alice")),
        Identity("alice"),
        Attributes("list", "pods", namespace="team"),
        True,
    ),
    (
        "RoleBinding to a ClusterRole grants nothing in another namespace",
        binding("b", "team", "ClusterRole", "pod-reader", subject("User", "alice")),
        Identity("alice"),
        Attributes("list", "pods", namespace="other"),
        False,
    ),
    (
        "RoleBinding grants nothing across namespaces",
        binding("b", "team", "ClusterRole", "pod-reader", subject("User", "alice")),
        Identity("alice"),
        Attributes("list", "pods"),
        False,
    ),
    (
        "RoleBinding to a Role in its namespace",
        binding("b", "team", "Role", "local-reader", subject("User", "alice")),
        Identity("alice"),
        Attributes("get", "pods", namespace="team", name="web"),
        True,
    ),
    (
        "RoleBinding names a Role of its own namespace only",
        binding("b", "other", "Role", "local-reader", subject("User", "alice")),
        Identity("alice"),
        Attributes("get", "pods", namespace="other", name="web"),
        False,
    ),
    (
        "Group subject matches any of the identity's groups",
        binding("b", "", "ClusterRole", "pod-reader", subject("Group", "devs")),
        Identity("bob", (AUTHENTICATED, "devs")),
        Attributes("list", "pods", namespace="x"),
        True,
    ),
    (
        "User subject does not match a group of that name",
        binding("b", "", "ClusterRole", "pod-reader", subject("User", "devs")),
        Identity("bob", ("devs",)),
        Attributes("list", "pods", namespace="x"),
        False,
    ),
    (
        "ServiceAccount subject is the user system:serviceaccount:<ns>:<name>",
        binding("b", "", "ClusterRole", "pod-reader", subject("ServiceAccount", "ci", "build")),
        Identity("system:serviceaccount:build:ci"),
        Attributes("list", "pods", namespace="x"),
        True,
    ),
    (
        "RoleBinding ServiceAccount without a namespace is in the binding's",
        binding("b", "team", "ClusterRole", "pod-reader", subject("ServiceAccount", "ci")),
        Identity("system:serviceaccount:team:ci"),
        Attributes("list", "pods", namespace="team"),
        True,
    ),
    (
        "a binding to a missing role grants nothing",
        binding("b", "", "ClusterRole", "missing", subject("User", "alice")),
        Identity("alice"),
        Attributes("list", "pods", namespace="x"),
        False,
    ),
]


@pytest.mark.parametrize(
    ("behaviour", "bound", "identity", "attrs", "allowed"),
    SCOPE_ROWS,
    ids=[r[0] for r in SCOPE_ROWS],
)
def test_binding_scope_and_subjects(
    behaviour: str, bound: Any, identity: Identity, attrs: Attributes, allowed: bool
) -> None:
    rbac = authorizer(POD_READER, role("local-reader", "team", READ_PODS), bound)
    assert allows(rbac, identity, attrs) is allowed
    # Without the binding nobody is allowed anything: RBAC never grants by default.
    assert not allows(authorizer(POD_READER), identity, attrs)


def test_missing_roles_are_the_reason_and_allowed_requests_name_their_binding() -> None:
    rbac = authorizer(
        POD_READER,
        binding("gone", "", "ClusterRole", "missing", subject("User", "alice")),
        binding("local", "team", "Role", "absent", subject("User", "alice")),
    )
    denied = rbac.authorize(Identity("alice"), Attributes("list", "pods", namespace="team"))
    assert denied.outcome is Outcome.NO_OPINION
    assert denied.reason == (
        'RBAC: [clusterrole.rbac.authorization.k8s.io "missing" not found, '
        'role.rbac.authorization.k8s.io "absent" not found]'
    )
    rbac.apply(
        CLUSTER_ROLE_BINDING.kind,
        None,
        binding("readers", "", "ClusterRole", "pod-reader", subject("Group", "devs")),
    )
    allowed = rbac.authorize(Identity("bob", ("devs",)), Attributes("get", "pods", name="x"))
    assert allowed.outcome is Outcome.ALLOW
    assert allowed.reason == (
        'RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "pod-reader" to Group "devs"'
    )


def test_resource_names_are_kept_per_name_in_the_memo() -> None:
    leader = cluster_role(
        "leader",
        [rule(("get", "update"), ("coordination.k8s.io",), ("leases",), ("mine",))],
    )
    rbac = authorizer(leader, binding("b", "", "ClusterRole", "leader", subject("User", "s")))
    s = Identity("s")

    def lease(verb: str, name: str) -> Attributes:
        return Attributes(verb, "leases", "coordination.k8s.io", namespace="kube-system", name=name)

    assert allows(rbac, s, lease("update", "mine"))
    assert not allows(rbac, s, lease("update", "theirs"))  # same memo entry, another name
    assert allows(rbac, s, lease("get", "mine"))
    assert not allows(rbac, s, lease("delete", "mine"))
    assert not allows(rbac, s, lease("list", ""))


def test_changes_apply_at_once() -> None:
    bound = binding("b", "", "ClusterRole", "pod-reader", subject("User", "alice"))
    rbac = authorizer(POD_READER)
    alice, attrs = Identity("alice"), Attributes("list", "pods", namespace="x")
    assert not allows(rbac, alice, attrs)
    rbac.apply(CLUSTER_ROLE_BINDING.kind, None, bound)
    assert allows(rbac, alice, attrs)  # the memoized refusal was dropped
    narrowed = cluster_role("pod-reader", [rule(("get",), ("",), ("pods",))])
    rbac.apply(CLUSTER_ROLE.kind, POD_READER, narrowed)
    assert not allows(rbac, alice, attrs)
    rbac.apply(CLUSTER_ROLE.kind, narrowed, POD_READER)
    moved = binding("b", "", "ClusterRole", "pod-reader", subject("User", "carol"))
    rbac.apply(CLUSTER_ROLE_BINDING.kind, bound, moved)
    assert not allows(rbac, alice, attrs)
    assert allows(rbac, Identity("carol"), attrs)
    rbac.apply(CLUSTER_ROLE_BINDING.kind, moved, None)
    assert not allows(rbac, Identity("carol"), attrs)
    rbac.reset(CLUSTER_ROLE_BINDING.kind, [bound])
    assert allows(rbac, alice, attrs)
    rbac.reset(CLUSTER_ROLE_BINDING.kind, [])
    assert not allows(rbac, alice, attrs)


def test_a_subject_named_twice_in_one_binding_survives_its_removal_once() -> None:
    twice = binding(
        "b", "", "ClusterRole", "pod-reader", subject("User", "alice"), subject("User", "alice")
    )
    rbac = authorizer(POD_READER, twice)
    attrs = Attributes("list", "pods", namespace="x")
    assert allows(rbac, Identity("alice"), attrs)
    rbac.apply(CLUSTER_ROLE_BINDING.kind, twice, None)
    assert not allows(rbac, Identity("alice"), attrs)


def test_non_resource_urls() -> None:
    rbac = authorizer(
        cluster_role("health", [url_rule(("get",), ("/healthz", "/apis/*"))]),
        binding("b", "", "ClusterRole", "health", subject("Group", AUTHENTICATED)),
    )
    who = Identity("x", (AUTHENTICATED,))
    assert allows(rbac, who, non_resource("get", "/healthz"))
    assert allows(rbac, who, non_resource("get", "/apis/apps/v1"))
    assert not allows(rbac, who, non_resource("get", "/metrics"))
    assert not allows(rbac, who, non_resource("post", "/healthz"))


# ---- the bootstrap policy ----------------------------------------------------------------------


def bootstrapped(*extra: Any) -> RbacAuthorizer:
    return authorizer(*bootstrap.cluster_roles(), *bootstrap.cluster_role_bindings(), *extra)


VIEWER = Identity("viewer", (AUTHENTICATED,))
EDITOR = Identity("editor", (AUTHENTICATED,))
NS_ADMIN = Identity("owner", (AUTHENTICATED,))
SCHEDULER = Identity("system:kube-scheduler", (AUTHENTICATED,))
CONTROLLERS = Identity("system:kube-controller-manager", (AUTHENTICATED,))
PROXY = Identity("system:kube-proxy", (AUTHENTICATED,))
NODE = Identity("system:node:n1", ("system:nodes", AUTHENTICATED))
NOBODY = Identity("mallory", (AUTHENTICATED,))
ANONYMOUS = Identity("system:anonymous", ("system:unauthenticated",))

LEASES = "coordination.k8s.io"
JOB_SA = Identity("system:serviceaccount:kube-system:job-controller", (AUTHENTICATED,))
TTL_SA = Identity("system:serviceaccount:kube-system:ttl-after-finished-controller", ())
SA_SA = Identity("system:serviceaccount:kube-system:service-account-controller", ())


def a(verb: str, resource: str, group: str = "", **kw: Any) -> Attributes:
    return Attributes(verb, resource, group, **kw)


GRANTS = [
    # (identity, attributes, allowed)
    (VIEWER, a("list", "pods", namespace="team"), True),
    (VIEWER, a("get", "pods", subresource="log", namespace="team", name="web"), True),
    (VIEWER, a("watch", "replicasets", "apps", namespace="team"), True),
    (VIEWER, a("create", "pods", namespace="team"), False),
    (VIEWER, a("list", "roles", RBAC_GROUP, namespace="team"), False),
    (VIEWER, a("list", "leases", LEASES, namespace="team"), False),  # view has no leases
    (VIEWER, a("list", "pods", namespace="other"), False),
    (VIEWER, a("list", "nodes"), False),
    (VIEWER, a("list", "jobs", "batch", namespace="team"), True),
    (VIEWER, a("get", "jobs", "batch", subresource="status", namespace="team", name="j"), True),
    (VIEWER, a("create", "jobs", "batch", namespace="team"), False),
    (EDITOR, a("create", "jobs", "batch", namespace="team"), True),
    (EDITOR, a("delete", "jobs", "batch", namespace="team", name="j"), True),
    (EDITOR, a("update", "jobs", "batch", subresource="status", namespace="team", name="j"), False),
    (JOB_SA, a("update", "jobs", "batch", subresource="status", namespace="x", name="j"), True),
    (JOB_SA, a("update", "pods", namespace="x", name="p"), True),  # the tracking finalizer
    (JOB_SA, a("create", "events", namespace="x"), True),
    (JOB_SA, a("update", "replicasets", "apps", namespace="x", name="r"), False),
    (TTL_SA, a("delete", "jobs", "batch", namespace="x", name="j"), True),
    (TTL_SA, a("create", "pods", namespace="x"), False),
    (EDITOR, a("create", "pods", namespace="team"), True),
    (EDITOR, a("delete", "replicasets", "apps", namespace="team", name="web"), True),
    (EDITOR, a("update", "leases", LEASES, namespace="team", name="x"), True),
    (EDITOR, a("create", "pods", subresource="eviction", namespace="team", name="web"), True),
    (EDITOR, a("create", "pods", namespace="other"), False),
    (EDITOR, a("update", "pods", subresource="status", namespace="team", name="web"), False),
    (EDITOR, a("create", "pods", subresource="binding", namespace="team", name="web"), False),
    (EDITOR, a("create", "rolebindings", RBAC_GROUP, namespace="team"), False),
    (EDITOR, a("create", "pods"), False),
    (NS_ADMIN, a("create", "rolebindings", RBAC_GROUP, namespace="team"), True),
    (NS_ADMIN, a("create", "pods", namespace="team"), True),
    (NS_ADMIN, a("create", "clusterrolebindings", RBAC_GROUP), False),
    (SCHEDULER, a("create", "pods", subresource="binding", namespace="x", name="p"), True),
    (SCHEDULER, a("update", "pods", subresource="status", namespace="x", name="p"), True),
    (SCHEDULER, a("watch", "nodes"), True),
    (SCHEDULER, a("delete", "pods", namespace="x", name="victim"), True),
    (
        SCHEDULER,
        a("update", "leases", LEASES, namespace="kube-system", name="tinykube-scheduler"),
        True,
    ),
    (
        SCHEDULER,
        a("update", "leases", LEASES, namespace="kube-system", name="tinykube-controller-manager"),
        False,
    ),
    (SCHEDULER, a("update", "nodes", subresource="status", name="n1"), False),
    (SCHEDULER, a("create", "pods", namespace="x"), False),
    (CONTROLLERS, a("create", "pods", namespace="x"), True),
    (CONTROLLERS, a("update", "pods", namespace="x", name="p"), True),  # ownerReferences
    (
        CONTROLLERS,
        a("update", "replicasets", "apps", subresource="status", namespace="x", name="r"),
        True,
    ),
    (CONTROLLERS, a("update", "nodes", subresource="status", name="n1"), True),
    (CONTROLLERS, a("create", "endpoints", namespace="x"), True),
    (CONTROLLERS, a("list", "leases", LEASES, namespace="kube-node-lease"), True),
    (
        CONTROLLERS,
        a("update", "leases", LEASES, namespace="kube-system", name="tinykube-controller-manager"),
        True,
    ),
    # As in kube, the garbage collector's role may update anything (so any Lease too).
    (
        CONTROLLERS,
        a("update", "leases", LEASES, namespace="kube-system", name="tinykube-scheduler"),
        True,
    ),
    (CONTROLLERS, a("create", "pods", subresource="binding", namespace="x", name="p"), False),
    (CONTROLLERS, a("update", "namespaces", subresource="finalize", namespace="x", name="x"), True),
    (CONTROLLERS, a("deletecollection", "pods", namespace="x"), True),
    (SCHEDULER, a("update", "namespaces", subresource="finalize", namespace="x", name="x"), False),
    (PROXY, a("watch", "services"), True),
    (PROXY, a("list", "endpoints"), True),
    (PROXY, a("get", "nodes", name="n1"), True),
    (PROXY, a("create", "events", namespace="default"), True),
    (PROXY, a("list", "pods"), False),
    # The system:node role is bound to no one: nodes get their rights from the Node authorizer.
    (NODE, a("list", "pods"), False),
    (NOBODY, a("create", "selfsubjectaccessreviews", "authorization.k8s.io"), True),
    (NOBODY, a("list", "pods", namespace="default"), False),
    (NOBODY, non_resource("get", "/apis/apps/v1"), True),
    (NOBODY, non_resource("get", "/metrics"), False),
    (ANONYMOUS, non_resource("get", "/healthz"), True),
    (ANONYMOUS, non_resource("get", "/api/v1"), False),
    (ANONYMOUS, a("create", "selfsubjectaccessreviews", "authorization.k8s.io"), False),
    (Identity("root", ("system:masters",)), a("delete", "nodes", name="n1"), True),
    (Identity("root", ("system:masters",)), non_resource("get", "/anything"), True),
    # DaemonSets and their revisions, as kube's bootstrap policy has them.
    (VIEWER, a("list", "daemonsets", "apps", namespace="team"), True),
    (VIEWER, a("get", "controllerrevisions", "apps", namespace="team", name="r"), True),
    (EDITOR, a("patch", "daemonsets", "apps", namespace="team", name="agent"), True),
    (EDITOR, a("create", "controllerrevisions", "apps", namespace="team"), False),
    (EDITOR, a("update", "daemonsets", "apps", subresource="status", namespace="team"), False),
    (CONTROLLERS, a("create", "controllerrevisions", "apps", namespace="x"), True),
    (
        CONTROLLERS,
        a("update", "daemonsets", "apps", subresource="status", namespace="x", name="d"),
        True,
    ),
    # ConfigMaps and Secrets, as kube's bootstrap policy: view reads configmaps only (a Secret
    # is an escalation), edit and admin read and write both.
    (VIEWER, a("list", "configmaps", namespace="team"), True),
    (VIEWER, a("get", "configmaps", namespace="team", name="c"), True),
    (VIEWER, a("create", "configmaps", namespace="team"), False),
    (VIEWER, a("get", "secrets", namespace="team", name="s"), False),
    (VIEWER, a("list", "secrets", namespace="team"), False),
    (VIEWER, a("watch", "secrets", namespace="team"), False),
    (EDITOR, a("list", "secrets", namespace="team"), True),
    (EDITOR, a("create", "secrets", namespace="team"), True),
    (EDITOR, a("patch", "configmaps", namespace="team", name="c"), True),
    (EDITOR, a("deletecollection", "secrets", namespace="team"), True),
    (EDITOR, a("get", "secrets", namespace="other", name="s"), False),
    (NS_ADMIN, a("update", "secrets", namespace="team", name="s"), True),
    (NS_ADMIN, a("watch", "configmaps", namespace="team"), True),
    (NOBODY, a("get", "configmaps", namespace="team", name="c"), False),
    (CONTROLLERS, a("deletecollection", "secrets", namespace="x"), True),  # namespace deletion
    # ServiceAccounts, as kube's bootstrap policy: view reads them, edit (and admin) writes and
    # may impersonate them; the serviceaccount controller creates them.
    (VIEWER, a("list", "serviceaccounts", namespace="team"), True),
    (VIEWER, a("get", "serviceaccounts", namespace="team", name="default"), True),
    (VIEWER, a("create", "serviceaccounts", namespace="team"), False),
    (VIEWER, a("impersonate", "serviceaccounts", namespace="team", name="robot"), False),
    (EDITOR, a("create", "serviceaccounts", namespace="team"), True),
    (EDITOR, a("delete", "serviceaccounts", namespace="team", name="robot"), True),
    (EDITOR, a("impersonate", "serviceaccounts", namespace="team", name="robot"), True),
    (EDITOR, a("create", "serviceaccounts", namespace="other"), False),
    (NS_ADMIN, a("patch", "serviceaccounts", namespace="team", name="robot"), True),
    (SA_SA, a("create", "serviceaccounts", namespace="x"), True),
    (SA_SA, a("create", "events", namespace="x"), True),
    (SA_SA, a("delete", "serviceaccounts", namespace="x", name="default"), False),
    (CONTROLLERS, a("create", "serviceaccounts", namespace="x"), True),
    (CONTROLLERS, a("get", "serviceaccounts", namespace="x", name="default"), True),
    (NOBODY, a("list", "serviceaccounts", namespace="team"), False),
]


@pytest.mark.parametrize(("identity", "attrs", "allowed"), GRANTS)
def test_bootstrap_grants(identity: Identity, attrs: Attributes, allowed: bool) -> None:
    rbac = bootstrapped(
        binding("viewers", "team", "ClusterRole", "view", subject("User", "viewer")),
        binding("editors", "team", "ClusterRole", "edit", subject("User", "editor")),
        binding("owners", "team", "ClusterRole", "admin", subject("User", "owner")),
    )
    assert allows(rbac, identity, attrs) is allowed


def test_bootstrap_objects_carry_kubes_label_and_annotation_and_names_are_unique() -> None:
    objects: list[Any] = [*bootstrap.cluster_roles(), *bootstrap.cluster_role_bindings()]
    for obj in objects:
        assert obj.metadata.labels["kubernetes.io/bootstrapping"] == "rbac-defaults"
        assert obj.metadata.annotations["rbac.authorization.kubernetes.io/autoupdate"] == "true"
    roles = [r.metadata.name for r in bootstrap.cluster_roles()]
    assert len(roles) == len(set(roles))
    bindings = bootstrap.cluster_role_bindings()
    assert len({b.metadata.name for b in bindings}) == len(bindings)
    # Every binding names a bootstrap role.
    assert {b.roleRef.name for b in bindings} <= set(roles)


def test_aggregated_roles_hold_the_rules_of_the_roles_they_select() -> None:
    roles = {r.metadata.name: r for r in bootstrap.cluster_roles()}
    for name in ("admin", "edit", "view"):
        selector = roles[name].aggregationRule.clusterRoleSelectors[0].matchLabels
        selected = [
            r
            for r in roles.values()
            if all(r.metadata.labels.get(k) == v for k, v in selector.items())
        ]
        assert selected
        for r in selected:
            for policy in r.rules:
                assert policy in roles[name].rules, (name, r.metadata.name)
