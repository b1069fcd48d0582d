"""PodIndex over a real informer store: lookups by controller, orphan namespace and owner."""

from __future__ import annotations

from typing import Any

from controller.api import PodIndex
from tinykube.informer import Informer
from tinykube.v1 import pod_pb2


def pod(name: str, namespace: str, *owners: tuple[str, bool]) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = name
    p.metadata.namespace = namespace
    for uid, controller in owners:
        p.metadata.ownerReferences.add(kind="ReplicaSet", name="rs", uid=uid, controller=controller)
    return p


async def _never() -> Any:
    raise AssertionError("no I/O in this test")


def test_indexed_lookups_and_sharing_between_controllers() -> None:
    informer: Informer[pod_pb2.Pod] = Informer(_never, lambda rv: _never())  # type: ignore[arg-type, return-value]
    first = PodIndex(informer.store)
    second = PodIndex(informer.store)  # a second controller on the same informer
    informer.replace(
        [
            pod("a", "default", ("u1", True)),
            pod("b", "default", ("u1", True), ("u9", False)),
            pod("c", "default"),
            pod("d", "other"),
            pod("e", "default", ("u2", True)),
        ],
        "7",
    )
    assert first.indexed and second.indexed
    assert sorted(p.metadata.name for p in first.controlled_by("u1")) == ["a", "b"]
    assert sorted(p.metadata.name for p in second.orphans("default")) == ["c"]
    assert [p.metadata.name for p in first.dependents_of("u9")] == ["b"]
    assert first.controlled_by("nobody") == []
