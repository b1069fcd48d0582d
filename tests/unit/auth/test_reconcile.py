"""Bootstrap policy reconciliation: what is added back to an existing ClusterRole or binding, what
is left alone, and the writes `reconcile` makes against a store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.protobuf.message import Message

from apiserver.auth import bootstrap
from apiserver.auth.bootstrap import cluster_binding, cluster_role, group, rule, user
from apiserver.auth.reconcile import (
    AUTOUPDATE,
    CREATE,
    NONE,
    RECREATE,
    UPDATE,
    PolicyError,
    reconcile,
    reconcile_binding,
    reconcile_role,
)
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError, UnavailableError
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, KindInfo
from tinykube.v1 import rbac_pb2

READ_PODS = rule(("get", "list"), ("",), ("pods",))
READ_NODES = rule(("get",), ("",), ("nodes",))


def changed(obj: Any, **kw: Any) -> Any:
    """A copy of a bootstrap object with its rules, subjects, labels, annotations, roleRef name
    or aggregationRule (matchLabels; None: none) replaced."""
    out = type(obj)()
    out.CopyFrom(obj)
    for name, value in kw.items():
        if name in ("labels", "annotations"):
            field = getattr(out.metadata, name)
            field.clear()
            field.update(value)
        elif name == "ref":
            out.roleRef.name = value
        elif name == "aggregation":
            out.ClearField("aggregationRule")
            if value:
                out.aggregationRule.clusterRoleSelectors.add().matchLabels.update(value)
        else:
            del getattr(out, name)[:]
            getattr(out, name).extend(value)
    return out


EXPECTED_ROLE = cluster_role("r", [READ_PODS, READ_NODES])

ROLE_ROWS: list[tuple[str, Any, str, list[rbac_pb2.PolicyRule], bool]] = [
    # (behaviour, existing, operation, rules after, protected)
    ("missing: created", None, CREATE, [READ_PODS, READ_NODES], False),
    ("the same: nothing to do", EXPECTED_ROLE, NONE, [READ_PODS, READ_NODES], False),
    (
        "a missing rule is appended, broken down",
        changed(EXPECTED_ROLE, rules=[READ_NODES]),
        UPDATE,
        [READ_NODES, rule(("get",), ("",), ("pods",)), rule(("list",), ("",), ("pods",))],
        False,
    ),
    (
        "an administrator's extra rules stay",
        changed(EXPECTED_ROLE, rules=[READ_PODS, READ_NODES, rule(("*",), ("",), ("events",))]),
        NONE,
        [READ_PODS, READ_NODES, rule(("*",), ("",), ("events",))],
        False,
    ),
    (
        "rules covered by broader ones are not added",
        changed(EXPECTED_ROLE, rules=[rule(("*",), ("",), ("*",))]),
        NONE,
        [rule(("*",), ("",), ("*",))],
        False,
    ),
    (
        "autoupdate false: protected (what it lacks is reported, not written)",
        changed(EXPECTED_ROLE, rules=[], annotations={AUTOUPDATE: "false"}),
        UPDATE,
        [
            rule(("get",), ("",), ("pods",)),
            rule(("list",), ("",), ("pods",)),
            rule(("get",), ("",), ("nodes",)),
        ],
        True,
    ),
    (
        "a missing label is added back",
        changed(EXPECTED_ROLE, labels={}),
        UPDATE,
        [READ_PODS, READ_NODES],
        False,
    ),
]


@pytest.mark.parametrize(
    ("existing", "operation", "rules", "protected"),
    [row[1:] for row in ROLE_ROWS],
    ids=[row[0] for row in ROLE_ROWS],
)
def test_reconcile_role(
    existing: Any, operation: str, rules: list[rbac_pb2.PolicyRule], protected: bool
) -> None:
    result = reconcile_role(existing, EXPECTED_ROLE)
    assert (result.operation, result.protected) == (operation, protected)
    assert list(result.obj.rules) == rules
    assert result.obj.metadata.labels["kubernetes.io/bootstrapping"] == "rbac-defaults"


def test_reconcile_role_keeps_existing_annotation_values_and_selectors() -> None:
    expected = cluster_role("agg", [], aggregate_from="view")
    existing = changed(
        expected, annotations={AUTOUPDATE: "true", "mine": "1"}, aggregation={"other": "true"}
    )
    result = reconcile_role(existing, expected)
    assert result.operation == UPDATE
    assert dict(result.obj.metadata.annotations) == {AUTOUPDATE: "true", "mine": "1"}
    assert [dict(s.matchLabels) for s in result.obj.aggregationRule.clusterRoleSelectors] == [
        {"other": "true"},
        {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
    ]
    # An aggregationRule the bootstrap role no longer has is removed.
    dropped = reconcile_role(existing, changed(expected, aggregation=None))
    assert not dropped.obj.HasField("aggregationRule")


EXPECTED_BINDING = cluster_binding("b", [group("g"), user("u")])

BINDING_ROWS: list[tuple[str, Any, str, list[rbac_pb2.Subject], bool]] = [
    # (behaviour, existing, operation, subjects after, protected)
    ("missing: created", None, CREATE, [group("g"), user("u")], False),
    ("the same: nothing to do", EXPECTED_BINDING, NONE, [group("g"), user("u")], False),
    (
        "a missing subject is appended, extra ones stay",
        changed(EXPECTED_BINDING, subjects=[user("u"), user("extra")]),
        UPDATE,
        [user("u"), user("extra"), group("g")],
        False,
    ),
    (
        "another roleRef: recreated as bootstrap has it",
        changed(EXPECTED_BINDING, ref="other", subjects=[user("x")]),
        RECREATE,
        [group("g"), user("u")],
        False,
    ),
    (
        "autoupdate false: protected (what it lacks is reported, not written)",
        changed(EXPECTED_BINDING, subjects=[], annotations={AUTOUPDATE: "false"}),
        UPDATE,
        [group("g"), user("u")],
        True,
    ),
]


@pytest.mark.parametrize(
    ("existing", "operation", "subjects", "protected"),
    [row[1:] for row in BINDING_ROWS],
    ids=[row[0] for row in BINDING_ROWS],
)
def test_reconcile_binding(
    existing: Any, operation: str, subjects: list[rbac_pb2.Subject], protected: bool
) -> None:
    result = reconcile_binding(existing, EXPECTED_BINDING)
    assert (result.operation, result.protected) == (operation, protected)
    assert list(result.obj.subjects) == subjects


class FakeStore:
    """ClusterRoles and bindings by name; `races` makes the next writes lose a race."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Any] = {}
        self.writes: list[tuple[str, str]] = []
        self.races: list[type[Exception]] = []

    async def get(self, info: KindInfo, name: str) -> Any | None:
        found = self.objects.get((info.kind, name))
        return changed(found) if found is not None else None

    def _race(self) -> None:
        if self.races:
            raise self.races.pop(0)("raced")

    async def create(self, info: KindInfo, obj: Message) -> object:
        self._race()
        key = (info.kind, obj.metadata.name)  # type: ignore[attr-defined]
        if key in self.objects:
            raise AlreadyExistsError("exists")
        self.objects[key] = obj
        self.writes.append(("create", key[1]))
        return obj

    async def update(self, info: KindInfo, obj: Message) -> object:
        self._race()
        self.objects[(info.kind, obj.metadata.name)] = obj  # type: ignore[attr-defined]
        self.writes.append(("update", obj.metadata.name))  # type: ignore[attr-defined]
        return obj

    async def delete(self, info: KindInfo, name: str, uid: str) -> None:
        self.objects.pop((info.kind, name))
        self.writes.append(("delete", name))


def test_reconcile_writes_what_is_missing_and_nothing_on_a_second_run() -> None:
    async def run() -> None:
        store = FakeStore()
        roles, bindings = bootstrap.cluster_roles(), bootstrap.cluster_role_bindings()
        counts = await reconcile(store, roles, bindings)
        assert counts[CREATE] == len(roles) + len(bindings)
        store.writes.clear()
        assert (await reconcile(store, roles, bindings))[CREATE] == 0
        assert store.writes == []
        # A deleted role comes back; a trimmed one gets its rules back; a protected one stays.
        del store.objects[(CLUSTER_ROLE.kind, "view")]
        edit = store.objects[(CLUSTER_ROLE.kind, "edit")]
        del edit.rules[:]
        admin = store.objects[(CLUSTER_ROLE.kind, "admin")]
        del admin.rules[:]
        admin.metadata.annotations[AUTOUPDATE] = "false"
        store.races = [ConflictError]  # the first write loses a race and is redone
        counts = await reconcile(store, roles, bindings)
        assert (counts[CREATE], counts[UPDATE], counts["protected"]) == (1, 1, 1)
        assert ("create", "view") in store.writes
        assert store.objects[(CLUSTER_ROLE.kind, "edit")].rules
        assert not store.objects[(CLUSTER_ROLE.kind, "admin")].rules

    asyncio.run(run())


def test_reconcile_gives_up_on_endless_races() -> None:
    async def run() -> None:
        store = FakeStore()
        store.races = [NotFoundError] * 10
        with pytest.raises(PolicyError, match="exceeded maximum attempts") as info:
            await reconcile(store, [EXPECTED_ROLE], [])
        assert isinstance(info.value.__cause__, ConflictError)

    asyncio.run(run())


def test_an_object_that_cannot_be_written_does_not_hold_back_the_rest() -> None:
    """kube's post-start hook: a failing object is reported and the others are still
    reconciled; the error then makes the caller try again (readiness waits for a clean pass)."""

    class RefusingStore(FakeStore):
        async def create(self, info: KindInfo, obj: Message) -> object:
            if obj.metadata.name == "view":  # type: ignore[attr-defined]
                raise UnavailableError("etcd did not answer")
            return await super().create(info, obj)

    async def run() -> None:
        store = RefusingStore()
        roles, bindings = bootstrap.cluster_roles(), bootstrap.cluster_role_bindings()
        with pytest.raises(PolicyError) as info:
            await reconcile(store, roles, bindings)
        # kube's words for the object, and its error.
        assert str(info.value) == (
            "unable to reconcile clusterrole.rbac.authorization.k8s.io/view: etcd did not answer"
        )
        assert isinstance(info.value.__cause__, UnavailableError)
        created = {name for _, name in store.writes}
        assert created == {r.metadata.name for r in [*roles, *bindings]} - {"view"}  # type: ignore[attr-defined]
        assert (CLUSTER_ROLE_BINDING.kind, "system:kube-controller-manager") in store.objects

    asyncio.run(run())
