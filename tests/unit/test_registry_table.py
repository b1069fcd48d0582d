"""The registry table (apiserver/registry/__init__.py): every kind has exactly one strategy, the
lookup names a missing one, and each strategy's selectable fields are what it computes."""

from __future__ import annotations

import dataclasses

import pytest

from apiserver.registry import (
    INDEX_FIELD,
    SELECTABLE_FIELDS,
    STRATEGIES,
    DuplicateKindError,
    build_table,
    fields_of,
    strategy_for,
)
from apiserver.registry.base import Strategy
from apiserver.registry.pod import PodStrategy
from apiserver.registry.rbac import RoleStrategy
from tinykube.kinds import ALL_KINDS, CLUSTER_ROLE, POD, ROLE, KindInfo
from tinykube.v1 import node_pb2


def test_every_kind_has_a_strategy_and_nothing_else_does() -> None:
    assert set(STRATEGIES) == {info.kind for info in ALL_KINDS}
    for info in ALL_KINDS:
        strategy = strategy_for(info)
        assert isinstance(strategy, Strategy)
        assert strategy.info is info


def test_a_kind_listed_twice_is_refused_naming_both_classes() -> None:
    with pytest.raises(DuplicateKindError, match="kind Pod has two strategies: PodStrategy and"):
        build_table(((POD, PodStrategy), (ROLE, RoleStrategy), (POD, RoleStrategy)))
    # One class may serve several kinds (Role and ClusterRole).
    table = build_table(((ROLE, RoleStrategy), (CLUSTER_ROLE, RoleStrategy)))
    assert table == {"Role": RoleStrategy, "ClusterRole": RoleStrategy}


def test_a_kind_without_a_strategy_is_a_clear_error() -> None:
    unknown = dataclasses.replace(POD, kind="Widget", plural="widgets")
    with pytest.raises(LookupError, match="kind Widget has no strategy"):
        strategy_for(unknown)


@pytest.mark.parametrize("info", ALL_KINDS, ids=lambda info: info.kind)
def test_selectable_fields_are_the_keys_the_strategy_computes(info: KindInfo) -> None:
    values = fields_of(info.kind)(info.message())
    assert set(values) == set(SELECTABLE_FIELDS[info.kind])
    assert values["metadata.name"] == ""


def test_the_watch_cache_indexes_pods_by_node_and_nodes_by_name() -> None:
    assert INDEX_FIELD == {"Pod": "spec.nodeName", "Node": "metadata.name"}


def test_a_strategy_refuses_another_kinds_message() -> None:
    with pytest.raises(TypeError, match="Pod strategy given a Node"):
        strategy_for(POD).validate_create(node_pb2.Node())


def test_the_base_strategy_is_abstract_so_no_kind_gets_it_by_mistake() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Strategy(POD)  # type: ignore[abstract]
