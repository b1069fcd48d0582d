"""RBAC objects' validation (Kubernetes' pkg/apis/rbac/validation) and defaults (rbac/v1)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from apiserver.registry import strategy_for
from tinykube.kinds import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    RBAC_GROUP,
    ROLE,
    ROLE_BINDING,
    KindInfo,
)
from tinykube.v1 import meta_pb2, rbac_pb2


def messages(info: KindInfo, obj: Any) -> list[str]:
    return [str(e) for e in strategy_for(info).validate_create(obj)]


def role(info: KindInfo = ROLE, **rule: Any) -> Any:
    cls = rbac_pb2.Role if info is ROLE else rbac_pb2.ClusterRole
    namespace = "team" if info is ROLE else ""
    base = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], **rule}
    return cls(
        metadata=meta_pb2.ObjectMeta(name="r", namespace=namespace),
        rules=[rbac_pb2.PolicyRule(**base)],
    )


ROLE_ROWS = [
    ("a valid rule", ROLE, {}, []),
    (
        "no verbs",
        ROLE,
        {"verbs": []},
        ["rules[0].verbs: Required value: verbs must contain at least one value"],
    ),
    (
        "no api groups",
        ROLE,
        {"apiGroups": []},
        ["rules[0].apiGroups: Required value: resource rules must supply at least one api group"],
    ),
    (
        "no resources",
        ROLE,
        {"resources": []},
        ["rules[0].resources: Required value: resource rules must supply at least one resource"],
    ),
    (
        "resource names with several resources",
        ROLE,
        {"resources": ["pods", "nodes"], "resourceNames": ["x"]},
        [
            "rules[0].resourceNames: Required value: resource names cannot apply to multiple "
            "resources"
        ],
    ),
    (
        "non-resource URLs in a Role",
        ROLE,
        {"apiGroups": [], "resources": [], "nonResourceURLs": ["/healthz"]},
        [
            'rules[0].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules '
            "cannot apply to non-resource URLs"
        ],
    ),
    (
        "non-resource URLs in a ClusterRole",
        CLUSTER_ROLE,
        {"apiGroups": [], "resources": [], "nonResourceURLs": ["/healthz"]},
        [],
    ),
    (
        "non-resource URLs beside resources",
        CLUSTER_ROLE,
        {"nonResourceURLs": ["/healthz", "/livez"]},
        [
            'rules[0].nonResourceURLs: Invalid value: []string{"/healthz", "/livez"}: rules cannot '
            "apply to both regular resources and non-resource URLs"
        ],
    ),
]


@pytest.mark.parametrize(
    ("case", "info", "rule", "expected"), ROLE_ROWS, ids=[r[0] for r in ROLE_ROWS]
)
def test_role_rules(case: str, info: KindInfo, rule: dict[str, Any], expected: list[str]) -> None:
    assert messages(info, role(info, **rule)) == expected


def test_rbac_names_are_path_segments() -> None:
    ok = role(CLUSTER_ROLE)
    ok.metadata.name = "system:controller:node-controller"
    assert messages(CLUSTER_ROLE, ok) == []
    for name, problem in (
        ("..", "may not be '..'"),
        ("a/b", "may not contain '/'"),
        ("a%b", "may not contain '%'"),
    ):
        bad = role(CLUSTER_ROLE)
        bad.metadata.name = name
        assert messages(CLUSTER_ROLE, bad) == [f'metadata.name: Invalid value: "{name}": {problem}']


def test_aggregation_rule() -> None:
    aggregated = role(CLUSTER_ROLE)
    aggregated.aggregationRule.SetInParent()
    assert messages(CLUSTER_ROLE, aggregated) == [
        "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector "
        "required if aggregationRule is non-nil"
    ]
    selector = aggregated.aggregationRule.clusterRoleSelectors.add()
    selector.matchLabels["rbac.authorization.k8s.io/aggregate-to-view"] = "true"
    assert messages(CLUSTER_ROLE, aggregated) == []
    selector.matchLabels["bad key!"] = "x"
    assert messages(CLUSTER_ROLE, aggregated)[0].startswith(
        "aggregationRule.clusterRoleSelectors[0].matchLabels"
    )


def binding(info: KindInfo = ROLE_BINDING, *subjects: rbac_pb2.Subject, **ref: str) -> Any:
    cls = rbac_pb2.RoleBinding if info is ROLE_BINDING else rbac_pb2.ClusterRoleBinding
    namespace = "team" if info is ROLE_BINDING else ""
    role_ref = {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "view", **ref}
    return cls(
        metadata=meta_pb2.ObjectMeta(name="b", namespace=namespace),
        roleRef=rbac_pb2.RoleRef(**role_ref),
        subjects=list(subjects),
    )


def user(name: str = "alice", group: str = RBAC_GROUP) -> rbac_pb2.Subject:
    return rbac_pb2.Subject(kind="User", name=name, apiGroup=group)


BINDING_ROWS = [
    ("valid", ROLE_BINDING, [user()], {}, []),
    ("a RoleBinding may name a Role", ROLE_BINDING, [], {"kind": "Role"}, []),
    (
        "a ClusterRoleBinding may not",
        CLUSTER_ROLE_BINDING,
        [],
        {"kind": "Role"},
        ['roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"'],
    ),
    (
        "another roleRef group",
        ROLE_BINDING,
        [],
        {"apiGroup": "example.com"},
        [
            'roleRef.apiGroup: Unsupported value: "example.com": supported values: '
            '"rbac.authorization.k8s.io"'
        ],
    ),
    ("no role name", ROLE_BINDING, [], {"name": ""}, ["roleRef.name: Required value"]),
    (
        "a user outside the RBAC group",
        ROLE_BINDING,
        [user(group="example.com")],
        {},
        [
            'subjects[0].apiGroup: Unsupported value: "example.com": supported values: '
            '"rbac.authorization.k8s.io"'
        ],
    ),
    (
        "an empty user name",
        ROLE_BINDING,
        [user(name="")],
        {},
        [
            "subjects[0].name: Required value",
            'subjects[0].name: Invalid value: "": user name cannot be empty',
        ],
    ),
    (
        "an unknown subject kind",
        ROLE_BINDING,
        [rbac_pb2.Subject(kind="Robot", name="r")],
        {},
        [
            'subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", '
            '"User", "Group"'
        ],
    ),
    (
        "a service account in a group",
        ROLE_BINDING,
        [rbac_pb2.Subject(kind="ServiceAccount", name="ci", apiGroup=RBAC_GROUP)],
        {},
        [
            'subjects[0].apiGroup: Unsupported value: "rbac.authorization.k8s.io": supported '
            'values: ""'
        ],
    ),
    (
        "a ClusterRoleBinding's service account needs its namespace",
        CLUSTER_ROLE_BINDING,
        [rbac_pb2.Subject(kind="ServiceAccount", name="ci")],
        {},
        ["subjects[0].namespace: Required value"],
    ),
    (
        "a RoleBinding's service account defaults to its namespace",
        ROLE_BINDING,
        [rbac_pb2.Subject(kind="ServiceAccount", name="ci")],
        {},
        [],
    ),
]


@pytest.mark.parametrize(
    ("case", "info", "subjects", "ref", "expected"), BINDING_ROWS, ids=[r[0] for r in BINDING_ROWS]
)
def test_bindings(
    case: str,
    info: KindInfo,
    subjects: list[rbac_pb2.Subject],
    ref: dict[str, str],
    expected: list[str],
) -> None:
    assert messages(info, binding(info, *subjects, **ref)) == expected


@pytest.mark.parametrize("info", [ROLE_BINDING, CLUSTER_ROLE_BINDING])
def test_role_ref_is_immutable(info: KindInfo) -> None:
    old = binding(info, user())
    same = binding(info, user("bob"))
    assert [str(e) for e in strategy_for(info).check_update(same, old)] == []
    moved = binding(info, user(), name="edit")
    assert [str(e) for e in strategy_for(info).check_update(moved, old)] == [
        'roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", '
        'Kind:"ClusterRole", Name:"edit"}: cannot change roleRef'
    ]


def test_defaults_put_users_groups_and_the_role_ref_in_the_rbac_group() -> None:
    obj = rbac_pb2.RoleBinding(
        metadata=meta_pb2.ObjectMeta(name="b", namespace="team"),
        roleRef=rbac_pb2.RoleRef(kind="ClusterRole", name="view"),
        subjects=[
            rbac_pb2.Subject(kind="User", name="alice"),
            rbac_pb2.Subject(kind="Group", name="devs"),
            rbac_pb2.Subject(kind="ServiceAccount", name="ci"),
        ],
    )
    apply: Callable[[Any, datetime], None] = strategy_for(ROLE_BINDING).prepare_for_create
    apply(obj, datetime(2026, 1, 1, tzinfo=UTC))
    assert obj.roleRef.apiGroup == RBAC_GROUP
    assert [s.apiGroup for s in obj.subjects] == [RBAC_GROUP, RBAC_GROUP, ""]
    assert (obj.apiVersion, obj.kind) == ("rbac.authorization.k8s.io/v1", "RoleBinding")
    assert messages(ROLE_BINDING, obj) == []
