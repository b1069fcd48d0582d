"""The tinykube CLI's columns for RBAC kinds: kubectl's (NAME, CREATED AT; NAME, ROLE, AGE and
-o wide's USERS, GROUPS, SERVICEACCOUNTS)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tinykube import kinds
from tinykube.cli import printers
from tinykube.v1 import meta_pb2, rbac_pb2

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def meta(name: str, namespace: str = "") -> meta_pb2.ObjectMeta:
    m = meta_pb2.ObjectMeta(name=name, namespace=namespace)
    m.creationTimestamp.FromDatetime(datetime(2026, 11, 28, 10, 0, 0))
    return m


@pytest.mark.parametrize("info", [kinds.ROLE, kinds.CLUSTER_ROLE])
def test_roles(info: kinds.KindInfo) -> None:
    assert printers.columns(info) == ["NAME", "CREATED AT"]
    role = rbac_pb2.ClusterRole(metadata=meta("view"))
    assert printers.row(info, role, NOW) == ["view", "2026-11-28T10:00:00Z"]


def test_role_bindings_namespace_and_wide() -> None:
    info = kinds.ROLE_BINDING
    binding = rbac_pb2.RoleBinding(
        metadata=meta("b", "team"),
        roleRef=rbac_pb2.RoleRef(kind="Role", name="reader"),
        subjects=[
            rbac_pb2.Subject(kind="User", name="alice"),
            rbac_pb2.Subject(kind="Group", name="devs"),
            rbac_pb2.Subject(kind="ServiceAccount", name="ci", namespace="build"),
        ],
    )
    assert printers.columns(info, with_namespace=True) == ["NAMESPACE", "NAME", "ROLE", "AGE"]
    assert printers.row(info, binding, NOW, with_namespace=True) == [
        "team",
        "b",
        "Role/reader",
        "3d",
    ]
    assert printers.columns(kinds.CLUSTER_ROLE_BINDING, wide=True) == [
        "NAME",
        "ROLE",
        "AGE",
        "USERS",
        "GROUPS",
        "SERVICEACCOUNTS",
    ]
    assert printers.row(info, binding, NOW, wide=True)[3:] == ["alice", "devs", "build/ci"]
