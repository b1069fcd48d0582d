"""RBAC privilege escalation prevention: Covers, the missing-permission message, and the guard's
decisions for roles and bindings (namespaces, resourceNames, URLs, escalate, bind, masters)."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth.authorizer import Chain, Identity
from apiserver.auth.bootstrap import rule, url_rule
from apiserver.auth.escalation import (
    EscalationGuard,
    compact_rules,
    compact_string,
    covers,
    no_escalation_problem,
)
from apiserver.auth.rbac import RbacAuthorizer, Rule
from tests.unit.auth.test_rbac import authorizer, binding, role, subject
from tinykube.errors import ForbiddenError, NotFoundError
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, ROLE, ROLE_BINDING
from tinykube.v1 import meta_pb2, rbac_pb2

AUTHENTICATED = "system:authenticated"
ALICE = Identity("alice", (AUTHENTICATED,))


def r(*args: Any) -> Rule:
    return Rule.of(rule(*args))


def u(verbs: tuple[str, ...], urls: tuple[str, ...]) -> Rule:
    return Rule.of(url_rule(verbs, urls))


COVERS_ROWS = [
    # (behaviour, owner rules, servant rules, the missing rules as kube prints them)
    ("the same rule", [r(("get",), ("",), ("pods",))], [r(("get",), ("",), ("pods",))], []),
    ("verb *", [r(("*",), ("",), ("pods",))], [r(("delete", "get"), ("",), ("pods",))], []),
    ("group *", [r(("get",), ("*",), ("pods",))], [r(("get",), ("apps",), ("pods",))], []),
    ("resource *", [r(("get",), ("",), ("*",))], [r(("get",), ("",), ("pods/log",))], []),
    (
        "*/status covers a resource's status",
        [r(("get",), ("",), ("*/status",))],
        [r(("get",), ("",), ("pods/status",))],
        [],
    ),
    (
        "a resource does not cover its subresources",
        [r(("get",), ("",), ("pods",))],
        [r(("get",), ("",), ("pods/status",))],
        ['{APIGroups:[""], Resources:["pods/status"], Verbs:["get"]}'],
    ),
    (
        "another group is not covered",
        [r(("get",), ("",), ("pods",))],
        [r(("get",), ("apps",), ("pods",))],
        ['{APIGroups:["apps"], Resources:["pods"], Verbs:["get"]}'],
    ),
    (
        "missing verbs of one resource are merged in order",
        [r(("get",), ("",), ("nodes",))],
        [r(("get", "list", "delete"), ("",), ("nodes",))],
        ['{APIGroups:[""], Resources:["nodes"], Verbs:["list" "delete"]}'],
    ),
    (
        "one line per group and resource, sorted",
        [],
        [r(("get",), ("apps", ""), ("replicasets", "nodes"))],
        [
            '{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}',
            '{APIGroups:[""], Resources:["replicasets"], Verbs:["get"]}',
            '{APIGroups:["apps"], Resources:["nodes"], Verbs:["get"]}',
            '{APIGroups:["apps"], Resources:["replicasets"], Verbs:["get"]}',
        ],
    ),
    (
        "a named rule covers only its names",
        [r(("get",), ("",), ("pods",), ("a",))],
        [r(("get",), ("",), ("pods",), ("a", "b"))],
        ['{APIGroups:[""], Resources:["pods"], ResourceNames:["b"], Verbs:["get"]}'],
    ),
    (
        "a named rule never covers an unnamed one",
        [r(("get",), ("",), ("pods",), ("a",))],
        [r(("get",), ("",), ("pods",))],
        ['{APIGroups:[""], Resources:["pods"], Verbs:["get"]}'],
    ),
    (
        "an unnamed rule covers named ones",
        [r(("get",), ("",), ("pods",))],
        [r(("get",), ("",), ("pods",), ("a",))],
        [],
    ),
    (
        "a URL prefix with * covers the paths under it",
        [u(("get",), ("/healthz/*",))],
        [u(("get",), ("/healthz/etcd", "/healthz/"))],
        [],
    ),
    (
        "a URL without * covers only itself",
        [u(("get",), ("/api",))],
        [u(("get", "post"), ("/api", "/apis"))],
        [
            '{NonResourceURLs:["/api"], Verbs:["post"]}',
            '{NonResourceURLs:["/apis"], Verbs:["get"]}',
            '{NonResourceURLs:["/apis"], Verbs:["post"]}',
        ],
    ),
    (
        "resource rules never cover URLs",
        [r(("*",), ("*",), ("*",))],
        [u(("get",), ("/metrics",))],
        ['{NonResourceURLs:["/metrics"], Verbs:["get"]}'],
    ),
]


@pytest.mark.parametrize(
    ("owner", "servant", "missing"),
    [row[1:] for row in COVERS_ROWS],
    ids=[row[0] for row in COVERS_ROWS],
)
def test_covers(owner: list[Rule], servant: list[Rule], missing: list[str]) -> None:
    ok, uncovered = covers(owner, servant)
    assert ok is (not missing)
    assert sorted({compact_string(x) for x in compact_rules(uncovered)}) == missing


def test_the_message_is_kubes() -> None:
    rbac = authorizer()
    identity = Identity("alice", ("system:authenticated", "devs"))
    text = no_escalation_problem(rbac, identity, "", [r(("delete",), ("",), ("nodes",))])
    assert text == (
        'user "alice" (groups=["system:authenticated" "devs"]) is attempting to grant RBAC '
        "permissions not currently held:\n"
        '{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}'
    )


def test_the_message_names_unresolvable_roles() -> None:
    rbac = authorizer(binding("b", "", "ClusterRole", "gone", subject("User", "alice")))
    text = no_escalation_problem(rbac, ALICE, "", [r(("get",), ("",), ("pods",))])
    assert text is not None
    assert text.endswith(
        '; resolution errors: [clusterroles.rbac.authorization.k8s.io "gone" not found]'
    )


# ---- the guard -----------------------------------------------------------------------------------

READ_PODS = rule(("get", "list", "watch"), ("",), ("pods",))
DELETE_NODES = rule(("delete",), ("",), ("nodes",))
POD_ADMIN = rbac_pb2.ClusterRole(
    metadata=meta_pb2.ObjectMeta(name="pod-admin"),
    rules=[
        rule(("*",), ("",), ("pods",)),
        # What kube's admin role has on RBAC: no escalate, no bind.
        rule(
            ("get", "list", "watch", "create", "update", "patch", "delete"),
            ("rbac.authorization.k8s.io",),
            ("roles", "rolebindings", "clusterroles", "clusterrolebindings"),
        ),
    ],
)
CLUSTER_ADMIN = rbac_pb2.ClusterRole(
    metadata=meta_pb2.ObjectMeta(name="cluster-admin"),
    rules=[rule(("*",), ("*",), ("*",)), url_rule(("*",), ("*",))],
)
ALICE_ADMIN_IN_DEV = binding("a", "dev", "ClusterRole", "pod-admin", subject("User", "alice"))


def cluster_role(name: str, *rules: rbac_pb2.PolicyRule, aggregate: bool = False) -> Any:
    out = rbac_pb2.ClusterRole(metadata=meta_pb2.ObjectMeta(name=name), rules=list(rules))
    if aggregate:
        out.aggregationRule.clusterRoleSelectors.add().matchLabels["x"] = "true"
    return out


def grant(
    name: str, verbs: tuple[str, ...], resources: tuple[str, ...], names: tuple[str, ...] = ()
) -> list[Any]:
    """A ClusterRole `name` with one RBAC rule, bound cluster-wide to alice."""
    return [
        cluster_role(name, rule(verbs, ("rbac.authorization.k8s.io",), resources, names)),
        binding(name, "", "ClusterRole", name, subject("User", "alice")),
    ]


def with_finalizer(obj: Any) -> Any:
    out = type(obj)()
    out.CopyFrom(obj)
    out.metadata.finalizers.append("example.com/hold")
    return out


GUARD_ROWS: list[tuple[str, list[Any], Identity | None, str, Any, Any, str | None]] = [
    # (behaviour, RBAC objects, identity, kind written, object, old object or None,
    #  None if admitted, else the refusal's message start or "NotFound")
    (
        "a Role with rules held in its namespace",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV],
        ALICE,
        ROLE.kind,
        role("r", "dev", READ_PODS),
        None,
        None,
    ),
    (
        "a Role with a rule not held",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV],
        ALICE,
        ROLE.kind,
        role("r", "dev", READ_PODS, DELETE_NODES),
        None,
        'roles.rbac.authorization.k8s.io "r" is forbidden: user "alice" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        'currently held:\n{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}',
    ),
    (
        "a Role in a namespace where the rules are not held",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV],
        ALICE,
        ROLE.kind,
        role("r", "prod", READ_PODS),
        None,
        'roles.rbac.authorization.k8s.io "r" is forbidden: user "alice"',
    ),
    (
        "a ClusterRole needs the rules cluster-wide",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV],
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("c", READ_PODS),
        None,
        'clusterroles.rbac.authorization.k8s.io "c" is forbidden: user "alice"',
    ),
    (
        "escalate on roles allows any rules",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV, *grant("esc", ("escalate",), ("roles",))],
        ALICE,
        ROLE.kind,
        role("r", "dev", DELETE_NODES),
        None,
        None,
    ),
    (
        "escalate on roles does not reach clusterroles",
        grant("esc", ("escalate",), ("roles",)),
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("c", DELETE_NODES),
        None,
        'clusterroles.rbac.authorization.k8s.io "c" is forbidden',
    ),
    (
        "escalate limited to a name allows updating that role",
        grant("esc", ("escalate",), ("clusterroles",), ("c",)),
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("c", DELETE_NODES),
        cluster_role("c"),
        None,
    ),
    (
        "escalate limited to a name is not asked on a create (no name)",
        grant("esc", ("escalate",), ("clusterroles",), ("c",)),
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("c", DELETE_NODES),
        None,
        'clusterroles.rbac.authorization.k8s.io "c" is forbidden',
    ),
    (
        "an update that only adds a finalizer is never refused",
        [],
        ALICE,
        CLUSTER_ROLE.kind,
        with_finalizer(cluster_role("c", DELETE_NODES)),
        cluster_role("c", DELETE_NODES),
        None,
    ),
    (
        "an update that adds a rule is checked",
        [],
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("c", DELETE_NODES, READ_PODS),
        cluster_role("c", DELETE_NODES),
        'clusterroles.rbac.authorization.k8s.io "c" is forbidden: user "alice" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        "currently held:\n"
        '{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["get" "list" "watch"]}',
    ),
    (
        "an aggregationRule needs full authority",
        [POD_ADMIN, binding("a", "", "ClusterRole", "pod-admin", subject("User", "alice"))],
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("agg", READ_PODS, aggregate=True),
        None,
        'clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin '
        "privileges to use the aggregationRule",
    ),
    (
        "removing an aggregationRule needs full authority too",
        [POD_ADMIN, binding("a", "", "ClusterRole", "pod-admin", subject("User", "alice"))],
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("agg", READ_PODS),
        cluster_role("agg", READ_PODS, aggregate=True),
        'clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin',
    ),
    (
        "a cluster admin may set an aggregationRule",
        [CLUSTER_ADMIN, binding("a", "", "ClusterRole", "cluster-admin", subject("User", "alice"))],
        ALICE,
        CLUSTER_ROLE.kind,
        cluster_role("agg", aggregate=True),
        None,
        None,
    ),
    (
        "system:masters bypasses the check",
        [],
        Identity("root", ("system:masters",)),
        CLUSTER_ROLE.kind,
        cluster_role("c", DELETE_NODES),
        None,
        None,
    ),
    (
        "the apiserver's own writes (no requester) are trusted",
        [],
        None,
        CLUSTER_ROLE.kind,
        cluster_role("c", DELETE_NODES),
        None,
        None,
    ),
    (
        "a RoleBinding to a role whose rules are held",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV, cluster_role("reader", READ_PODS)],
        ALICE,
        ROLE_BINDING.kind,
        binding("b", "dev", "ClusterRole", "reader", subject("User", "bob")),
        None,
        None,
    ),
    (
        "a RoleBinding to cluster-admin by a namespace admin",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV, CLUSTER_ADMIN],
        ALICE,
        ROLE_BINDING.kind,
        binding("b", "dev", "ClusterRole", "cluster-admin", subject("User", "bob")),
        None,
        'rolebindings.rbac.authorization.k8s.io "b" is forbidden: user "alice" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        'currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
        '{NonResourceURLs:["*"], Verbs:["*"]}',
    ),
    (
        "bind on that clusterrole allows the binding",
        [CLUSTER_ADMIN, *grant("binder", ("bind",), ("clusterroles",), ("cluster-admin",))],
        ALICE,
        ROLE_BINDING.kind,
        binding("b", "dev", "ClusterRole", "cluster-admin", subject("User", "bob")),
        None,
        None,
    ),
    (
        "bind on another name does not",
        [CLUSTER_ADMIN, *grant("binder", ("bind",), ("clusterroles",), ("view",))],
        ALICE,
        ROLE_BINDING.kind,
        binding("b", "dev", "ClusterRole", "cluster-admin", subject("User", "bob")),
        None,
        'rolebindings.rbac.authorization.k8s.io "b" is forbidden',
    ),
    (
        "bind is asked in the binding's namespace",
        [
            CLUSTER_ADMIN,
            cluster_role("binder", rule(("bind",), ("rbac.authorization.k8s.io",), ("roles",))),
            binding("x", "dev", "ClusterRole", "binder", subject("User", "alice")),
            role("secret", "dev", DELETE_NODES),
        ],
        ALICE,
        ROLE_BINDING.kind,
        binding("b", "dev", "Role", "secret", subject("User", "bob")),
        None,
        None,
    ),
    (
        "a binding to a role that does not exist",
        [],
        ALICE,
        ROLE_BINDING.kind,
        binding("b", "dev", "ClusterRole", "nothing", subject("User", "bob")),
        None,
        "NotFound",
    ),
    (
        "a ClusterRoleBinding needs the role's rules cluster-wide",
        [POD_ADMIN, ALICE_ADMIN_IN_DEV, cluster_role("reader", READ_PODS)],
        ALICE,
        CLUSTER_ROLE_BINDING.kind,
        binding("b", "", "ClusterRole", "reader", subject("User", "bob")),
        None,
        'clusterrolebindings.rbac.authorization.k8s.io "b" is forbidden: user "alice"',
    ),
    (
        "a group's binding counts",
        [POD_ADMIN, binding("g", "", "ClusterRole", "pod-admin", subject("Group", AUTHENTICATED))],
        ALICE,
        CLUSTER_ROLE_BINDING.kind,
        binding("b", "", "ClusterRole", "pod-admin", subject("User", "bob")),
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("objects", "identity", "kind", "obj", "old", "refusal"),
    [row[1:] for row in GUARD_ROWS],
    ids=[row[0] for row in GUARD_ROWS],
)
def test_guard(
    objects: list[Any],
    identity: Identity | None,
    kind: str,
    obj: Any,
    old: Any,
    refusal: str | None,
) -> None:
    rbac: RbacAuthorizer = authorizer(*objects)
    guard = EscalationGuard(Chain([rbac]), rbac)
    if refusal is None:
        guard.admit(kind, obj, old, identity)
    elif refusal == "NotFound":
        with pytest.raises(NotFoundError) as not_found:
            guard.admit(kind, obj, old, identity)
        assert str(not_found.value) == 'clusterroles.rbac.authorization.k8s.io "nothing" not found'
    else:
        with pytest.raises(ForbiddenError) as refused:
            guard.admit(kind, obj, old, identity)
        assert str(refused.value).startswith(refusal), str(refused.value)
        assert refused.value.details is not None
        assert refused.value.details["group"] == "rbac.authorization.k8s.io"
        assert refused.value.details["name"] == obj.metadata.name
