"""The tinykube CLI prints the apiserver's Table (tinykube.tables) for every kind: the same
columns kubectl shows against tinykube, and cells as kubectl prints them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tinykube import kinds, tables
from tinykube.cli import printers
from tinykube.v1 import event_pb2, meta_pb2, priorityclass_pb2

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def meta(name: str, namespace: str = "") -> meta_pb2.ObjectMeta:
    m = meta_pb2.ObjectMeta(name=name, namespace=namespace)
    m.creationTimestamp.FromDatetime(datetime(2026, 12, 1, 9, 55, 0))
    return m


@pytest.mark.parametrize("info", kinds.ALL_KINDS, ids=[k.kind for k in kinds.ALL_KINDS])
def test_every_kind_prints_the_tables_columns(info: kinds.KindInfo) -> None:
    defs = tables.column_definitions(info)
    assert printers.columns(info, wide=True) == [c["name"].upper() for c in defs]
    assert printers.columns(info) == [c["name"].upper() for c in defs if c["priority"] == 0]
    with_ns = printers.columns(info, with_namespace=True)
    assert with_ns[0] == "NAMESPACE" if info.namespaced else with_ns == printers.columns(info)
    # An empty object of the kind prints a full row.
    obj: Any = info.message()
    obj.metadata.CopyFrom(meta("x", "ns" if info.namespaced else ""))
    assert len(printers.row(info, obj, NOW, wide=True)) == len(defs)


def test_booleans_print_as_go_does() -> None:
    pc = priorityclass_pb2.PriorityClass(
        metadata=meta("high"),
        value=1000,
        globalDefault=True,
        preemptionPolicy="PreemptLowerPriority",
    )
    assert printers.row(kinds.PRIORITY_CLASS, pc, NOW) == [
        "high",
        "1000",
        "true",
        "5m",
        "PreemptLowerPriority",
    ]


def test_events_wide_columns_are_kubectls() -> None:
    assert printers.columns(kinds.EVENT, wide=True) == [
        "LAST SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "SUBOBJECT",
        "SOURCE",
        "MESSAGE",
        "FIRST SEEN",
        "COUNT",
        "NAME",
    ]
    ev = event_pb2.Event(metadata=meta("web.1", "default"), type="Normal", reason="Pulled")
    ev.involvedObject.kind = "Pod"
    ev.involvedObject.name = "web"
    ev.message = "pulled"
    row = printers.row(kinds.EVENT, ev, NOW)
    assert row[1:] == ["Normal", "Pulled", "pod/web", "pulled"]
