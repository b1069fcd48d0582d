"""The clusterrole-aggregation controller: the union its selectors gather (order, deduplication,
the role itself skipped), the writes it makes, and that the bootstrap admin/edit/view roles are
already what it computes (so aggregation loses no permission they grant)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from apiserver.auth import bootstrap
from controller.clusterroleaggregation import ClusterRoleAggregationController, aggregated_rules
from tests.unit.controller.fakes import FakeQueue, FakeResource, FakeStore
from tinykube.clock import FakeClock
from tinykube.v1 import meta_pb2, rbac_pb2

VIEW = "rbac.authorization.k8s.io/aggregate-to-view"


def rule(verb: str, resource: str) -> rbac_pb2.PolicyRule:
    return rbac_pb2.PolicyRule(verbs=[verb], apiGroups=[""], resources=[resource])


def role(
    name: str,
    *rules: rbac_pb2.PolicyRule,
    labels: dict[str, str] | None = None,
    selectors: list[dict[str, str]] | None = None,
    expressions: list[tuple[str, str, list[str]]] | None = None,
) -> rbac_pb2.ClusterRole:
    out = rbac_pb2.ClusterRole(metadata=meta_pb2.ObjectMeta(name=name), rules=list(rules))
    out.metadata.labels.update(labels or {})
    for match in selectors or []:
        out.aggregationRule.clusterRoleSelectors.add().matchLabels.update(match)
    for key, op, values in expressions or []:
        sel = out.aggregationRule.clusterRoleSelectors.add()
        sel.matchExpressions.add(key=key, operator=op, values=values)
    return out


AGG = role("agg", selectors=[{VIEW: "true"}])

UNION_ROWS: list[tuple[str, rbac_pb2.ClusterRole, list[rbac_pb2.ClusterRole], list[str]]] = [
    # (behaviour, aggregated role, other roles, "verb resource" of the rules gathered)
    ("nothing selected: no rules", AGG, [role("x", rule("get", "pods"))], []),
    (
        "selected roles in name order",
        AGG,
        [
            role("b", rule("get", "pods"), labels={VIEW: "true"}),
            role("a", rule("list", "pods"), labels={VIEW: "true"}),
            role("c", rule("delete", "pods")),
        ],
        ["list pods", "get pods"],
    ),
    (
        "an equal rule is gathered once",
        AGG,
        [
            role("a", rule("get", "pods"), rule("get", "nodes"), labels={VIEW: "true"}),
            role("b", rule("get", "pods"), labels={VIEW: "true"}),
        ],
        ["get pods", "get nodes"],
    ),
    (
        "the role itself is skipped even if its labels match",
        role("agg", rule("stale", "x"), labels={VIEW: "true"}, selectors=[{VIEW: "true"}]),
        [role("a", rule("get", "pods"), labels={VIEW: "true"})],
        ["get pods"],
    ),
    (
        "selectors are walked in order",
        role("agg", selectors=[{"second": "true"}, {"first": "true"}]),
        [
            role("a", rule("get", "a"), labels={"first": "true"}),
            role("b", rule("get", "b"), labels={"second": "true"}),
        ],
        ["get b", "get a"],
    ),
    (
        "matchExpressions select too",
        role("agg", expressions=[("tier", "In", ["x", "y"])]),
        [
            role("a", rule("get", "a"), labels={"tier": "y"}),
            role("b", rule("get", "b"), labels={"tier": "z"}),
        ],
        ["get a"],
    ),
]


def shown(rules: list[rbac_pb2.PolicyRule]) -> list[str]:
    return [f"{r.verbs[0]} {r.resources[0]}" for r in rules]


@pytest.mark.parametrize(
    ("aggregated", "others", "expected"),
    [row[1:] for row in UNION_ROWS],
    ids=[row[0] for row in UNION_ROWS],
)
def test_aggregated_rules(
    aggregated: rbac_pb2.ClusterRole, others: list[rbac_pb2.ClusterRole], expected: list[str]
) -> None:
    assert shown(aggregated_rules(aggregated, [aggregated, *others])) == expected


def test_the_bootstrap_roles_are_a_fixed_point() -> None:
    """admin, edit and view are created with what the controller would write: it changes
    nothing, and each grants at least what the roles it aggregates grant."""
    roles = bootstrap.cluster_roles()
    for role_ in roles:
        if role_.HasField("aggregationRule"):
            assert aggregated_rules(role_, roles) == list(role_.rules), role_.metadata.name
    by_name = {r.metadata.name: r for r in roles}
    for name in ("admin", "edit", "view"):
        assert by_name[name].aggregationRule.clusterRoleSelectors[0].matchLabels == {
            f"rbac.authorization.k8s.io/aggregate-to-{name}": "true"
        }
        source = by_name[f"system:aggregate-to-{name}"]
        assert all(r in by_name[name].rules for r in source.rules)


def controller(*roles: rbac_pb2.ClusterRole) -> tuple[Any, FakeResource[Any], FakeQueue]:
    resource: FakeResource[Any] = FakeResource(
        "ClusterRole", rbac_pb2.ClusterRole, FakeClock(), itertools.count(1)
    )
    for r in roles:
        asyncio.run(resource.create(r))
    queue = FakeQueue()
    return (
        ClusterRoleAggregationController(resource, FakeStore(resource), queue),
        resource,
        queue,
    )


def test_any_event_enqueues_every_aggregated_role() -> None:
    crac, _, queue = controller(AGG, role("plain"), role("agg2", selectors=[{"x": "y"}]))
    crac.on_add(role("new"))
    assert sorted(queue.added) == ["agg", "agg2"]


def test_sync_writes_the_union_once_and_leaves_plain_roles_alone() -> None:
    crac, resource, _ = controller(
        AGG, role("a", rule("get", "pods"), labels={VIEW: "true"}), role("plain")
    )

    async def run() -> None:
        await crac.sync("agg")
        assert shown(list(resource.objects["agg"].rules)) == ["get pods"]
        writes = len(resource.calls)
        await crac.sync("agg")  # nothing changed: no write
        await crac.sync("plain")
        await crac.sync("gone")
        assert len(resource.calls) == writes
        # A selected role's rule removed: the union shrinks.
        del resource.objects["a"].rules[:]
        await crac.sync("agg")
        assert list(resource.objects["agg"].rules) == []

    asyncio.run(run())
