"""apiserver/deletion.py: the finalizers each propagationPolicy leaves, and its validation."""

from __future__ import annotations

import pytest

from apiserver.deletion import (
    check_policy,
    default_policy,
    delete_options_errors,
    gc_finalizers,
    policy_of,
)
from tinykube.errors import InvalidError


@pytest.mark.parametrize(
    ("kind", "finalizers", "policy", "expected"),
    [
        ("ReplicaSet", [], "", []),  # apps/v1 default: Background
        ("ReplicaSet", [], "Background", []),
        ("ReplicaSet", [], "Orphan", ["orphan"]),
        ("ReplicaSet", [], "Foreground", ["foregroundDeletion"]),
        ("Pod", [], "Orphan", ["orphan"]),
        ("Node", ["x.io/a"], "Foreground", ["x.io/a", "foregroundDeletion"]),
        # No policy: a propagation finalizer already there decides.
        ("ReplicaSet", ["orphan"], "", ["orphan"]),
        ("ReplicaSet", ["foregroundDeletion", "x.io/a"], "", ["foregroundDeletion", "x.io/a"]),
        # A policy replaces the other propagation finalizer, keeping everything else.
        ("ReplicaSet", ["orphan", "x.io/a"], "Foreground", ["x.io/a", "foregroundDeletion"]),
        ("ReplicaSet", ["x.io/a", "foregroundDeletion"], "Background", ["x.io/a"]),
        ("ReplicaSet", ["foregroundDeletion"], "Orphan", ["orphan"]),
        # Unchanged sets keep their order.
        ("ReplicaSet", ["orphan", "x.io/a"], "Orphan", ["orphan", "x.io/a"]),
        # Events are never collected: propagation finalizers are neither added nor kept.
        ("Event", [], "Orphan", []),
        ("Event", ["orphan", "x.io/a"], "", ["x.io/a"]),
        # batch/v1 Jobs orphan their pods unless told otherwise (kubectl says Background).
        ("Job", [], "", ["orphan"]),
        ("Job", [], "Background", []),
        ("Job", ["foregroundDeletion"], "", ["foregroundDeletion"]),
    ],
)
def test_gc_finalizers(kind: str, finalizers: list[str], policy: str, expected: list[str]) -> None:
    assert gc_finalizers(kind, finalizers, policy) == expected


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("ReplicaSet", "Background"),
        ("Pod", "Background"),
        ("Event", "Unsupported"),
        ("Job", "Orphan"),
    ],
)
def test_default_policy(kind: str, expected: str) -> None:
    assert default_policy(kind) == expected


@pytest.mark.parametrize(
    ("policy", "orphan", "expected"),
    [
        (None, None, ""),
        ("Foreground", None, "Foreground"),
        (None, True, "Orphan"),
        (None, False, "Background"),
    ],
)
def test_policy_of(policy: str | None, orphan: bool | None, expected: str) -> None:
    assert policy_of(policy, orphan) == expected


@pytest.mark.parametrize(
    ("policy", "orphan", "messages"),
    [
        ("Orphan", None, []),
        (None, True, []),
        (
            "Sideways",
            None,
            [
                'Unsupported value: "Sideways": supported values: "Foreground", "Background", '
                '"Orphan", "nil"'
            ],
        ),
        (
            "Orphan",
            False,
            [
                'Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be '
                "both set"
            ],
        ),
    ],
)
def test_delete_options_errors(
    policy: str | None, orphan: bool | None, messages: list[str]
) -> None:
    errors = delete_options_errors(policy, orphan)
    assert [e.message for e in errors] == messages
    assert all(e.field == "propagationPolicy" for e in errors)


def test_check_policy_raises_kubernetes_message() -> None:
    check_policy("")
    check_policy("Background")
    with pytest.raises(InvalidError) as info:
        check_policy("orphan")  # policies are case-sensitive
    assert info.value.message == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
        '"orphan": supported values: "Foreground", "Background", "Orphan", "nil"'
    )
    assert [c.field for c in info.value.causes] == ["propagationPolicy"]
