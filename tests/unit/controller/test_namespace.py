"""The namespace controller: what a sync of a terminating namespace deletes, reports and
finalizes, with in-memory fakes (no sockets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.namespace import CONDITION_TYPES, NamespaceController
from tests.unit.controller.fakes import FakeQueue
from tinykube import kinds
from tinykube.clock import FakeClock
from tinykube.errors import NotFoundError, TinykubeError, UnavailableError
from tinykube.meta import timestamp
from tinykube.v1 import namespace_pb2, pod_pb2, replicaset_pb2

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@dataclass
class Listed:
    items: list[Any]


@dataclass
class FakeContent:
    """One kind's objects in the cluster; a delete of a `graceful` object only marks it (a
    pod whose kubelet has yet to stop it), of one with finalizers only marks it too."""

    objects: list[Any] = field(default_factory=list)
    graceful: bool = False
    fail: TinykubeError | None = None
    deletes: list[str] = field(default_factory=list)

    async def list(self, namespace: str = "") -> Listed:
        if self.fail is not None:
            raise self.fail
        return Listed([o for o in self.objects if o.metadata.namespace == namespace])

    async def delete(self, name: str, namespace: str = "") -> Any:
        self.deletes.append(f"{namespace}/{name}")
        for obj in self.objects:
            if (obj.metadata.namespace, obj.metadata.name) == (namespace, name):
                if self.graceful or obj.metadata.finalizers:
                    obj.metadata.deletionTimestamp.CopyFrom(timestamp(NOW))
                else:
                    self.objects.remove(obj)
                return obj
        raise NotFoundError(f'"{name}" not found')


class FakeNamespaces:
    def __init__(self, ns: namespace_pb2.Namespace | None) -> None:
        self.ns = ns
        self.status_writes = 0
        self.finalized: list[list[str]] = []

    def get(self, key: str) -> namespace_pb2.Namespace | None:  # the informer store
        return self.ns if self.ns is not None and self.ns.metadata.name == key else None

    def list(self) -> list[namespace_pb2.Namespace]:
        return [self.ns] if self.ns is not None else []

    async def update_status(self, obj: namespace_pb2.Namespace) -> namespace_pb2.Namespace:
        if self.ns is None:
            raise NotFoundError('namespaces "x" not found')
        self.status_writes += 1
        self.ns = namespace_pb2.Namespace()
        self.ns.CopyFrom(obj)
        return self.ns

    async def finalize(self, obj: namespace_pb2.Namespace) -> namespace_pb2.Namespace:
        self.finalized.append(list(obj.spec.finalizers))
        return obj


def namespace(
    name: str = "team", *, terminating: bool = True, finalizers: tuple[str, ...] = ("kubernetes",)
) -> namespace_pb2.Namespace:
    ns = namespace_pb2.Namespace()
    ns.metadata.name = name
    ns.spec.finalizers.extend(finalizers)
    ns.status.phase = "Terminating" if terminating else "Active"
    if terminating:
        ns.metadata.deletionTimestamp.CopyFrom(timestamp(NOW))
    return ns


def pod(name: str, ns: str = "team") -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name, p.metadata.namespace = name, ns
    return p


def rs(name: str, ns: str = "team", *finalizers: str, deleting: bool = False) -> Any:
    r = replicaset_pb2.ReplicaSet()
    r.metadata.name, r.metadata.namespace = name, ns
    r.metadata.finalizers.extend(finalizers)
    if deleting:
        r.metadata.deletionTimestamp.CopyFrom(timestamp(NOW))
    return r


def make(
    ns: namespace_pb2.Namespace | None, pods: FakeContent, rss: FakeContent
) -> tuple[NamespaceController, FakeNamespaces, FakeQueue]:
    namespaces = FakeNamespaces(ns)
    queue = FakeQueue()
    controller = NamespaceController(
        namespaces,
        namespaces,
        [(kinds.POD, pods), (kinds.REPLICA_SET, rss)],
        queue,
        clock=FakeClock(NOW),
    )
    return controller, namespaces, queue


def conditions(ns: namespace_pb2.Namespace | None) -> dict[str, tuple[str, str, str]]:
    assert ns is not None
    return {c.type: (c.status, c.reason, c.message) for c in ns.status.conditions}


OK = {
    "NamespaceDeletionDiscoveryFailure": (
        "False",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    "NamespaceDeletionGroupVersionParsingFailure": (
        "False",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    "NamespaceDeletionContentFailure": (
        "False",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    "NamespaceContentRemaining": ("False", "ContentRemoved", "All content successfully removed"),
    "NamespaceFinalizersRemaining": ("False", "ContentRemoved", "All content successfully removed"),
}


async def test_an_empty_namespace_is_finalized_with_every_condition_ok() -> None:
    controller, namespaces, queue = make(
        namespace(finalizers=("example.com/keep", "kubernetes")), FakeContent(), FakeContent()
    )
    await controller.sync("team")
    assert conditions(namespaces.ns) == OK
    assert [c.type for c in namespaces.ns.status.conditions] == list(CONDITION_TYPES)  # type: ignore[union-attr]
    # Only its own finalizer goes; another's stays for its owner.
    assert namespaces.finalized == [["example.com/keep"]]
    assert queue.delayed == []


async def test_content_is_deleted_and_what_remains_is_reported_until_it_is_gone() -> None:
    pods = FakeContent([pod("a"), pod("b"), pod("x", ns="other")], graceful=True)
    rss = FakeContent([rs("web")])
    controller, namespaces, queue = make(namespace(), pods, rss)
    await controller.sync("team")
    # Every object of the namespace, none of another namespace's.
    assert pods.deletes == ["team/a", "team/b"]
    assert rss.deletes == ["team/web"]
    assert conditions(namespaces.ns)["NamespaceContentRemaining"] == (
        "True",
        "SomeResourcesRemain",
        "Some resources are remaining: pods. has 2 resource instances",
    )
    assert namespaces.finalized == []
    assert queue.delayed == [("team", 2.0)]
    # The next sync does not delete the terminating pods again; once gone, it finalizes.
    await controller.sync("team")
    assert pods.deletes == ["team/a", "team/b"]
    pods.objects = [p for p in pods.objects if p.metadata.namespace != "team"]
    await controller.sync("team")
    assert conditions(namespaces.ns) == OK
    assert namespaces.finalized == [[]]


async def test_objects_held_by_finalizers_are_reported_by_finalizer() -> None:
    rss = FakeContent([rs("web", "team", "example.com/hold", deleting=True), rs("db")])
    controller, namespaces, _queue = make(namespace(), FakeContent(), rss)
    await controller.sync("team")
    assert rss.deletes == ["team/db"]  # web is already being deleted
    got = conditions(namespaces.ns)
    assert got["NamespaceContentRemaining"] == (
        "True",
        "SomeResourcesRemain",
        "Some resources are remaining: replicasets.apps has 1 resource instances",
    )
    assert got["NamespaceFinalizersRemaining"] == (
        "True",
        "SomeFinalizerRemain",
        "Some finalizers are remaining: example.com/hold in 1 resource instances",
    )
    assert namespaces.finalized == []


async def test_a_failed_list_is_a_content_failure_and_the_sync_fails() -> None:
    pods = FakeContent(fail=UnavailableError("connection refused"))
    controller, namespaces, _queue = make(namespace(), pods, FakeContent())
    with pytest.raises(TinykubeError):
        await controller.sync("team")
    assert conditions(namespaces.ns)["NamespaceDeletionContentFailure"] == (
        "True",
        "ContentDeletionFailed",
        "Failed to delete all resource types, 1 remaining: pods.: connection refused",
    )
    assert namespaces.finalized == []


@pytest.mark.parametrize(
    "ns",
    [
        pytest.param(namespace(terminating=False), id="active"),
        pytest.param(namespace(finalizers=("example.com/keep",)), id="already finalized"),
        pytest.param(None, id="gone"),
    ],
)
async def test_nothing_happens_to_a_namespace_that_is_not_ours_to_empty(
    ns: namespace_pb2.Namespace | None,
) -> None:
    pods = FakeContent([pod("a")])
    controller, namespaces, _queue = make(ns, pods, FakeContent())
    await controller.sync("team")
    assert pods.deletes == []
    assert namespaces.status_writes == 0
    assert namespaces.finalized == []


async def test_unchanged_conditions_are_not_written_again() -> None:
    pods = FakeContent([pod("a")], graceful=True)
    controller, namespaces, _queue = make(namespace(), pods, FakeContent())
    await controller.sync("team")
    first = [c.lastTransitionTime.seconds for c in namespaces.ns.status.conditions]  # type: ignore[union-attr]
    await controller.sync("team")
    assert namespaces.status_writes == 1
    assert [c.lastTransitionTime.seconds for c in namespaces.ns.status.conditions] == first  # type: ignore[union-attr]


def test_a_pod_going_away_enqueues_its_namespace_only_while_it_terminates() -> None:
    controller, namespaces, queue = make(namespace(), FakeContent(), FakeContent())
    controller.on_content_delete(pod("a"))
    controller.on_content_delete(pod("b", ns="elsewhere"))
    namespaces.ns = namespace(terminating=False)
    controller.on_content_delete(pod("c"))
    assert queue.added == ["team"]
    controller.on_namespace_update(namespace(terminating=False), namespace())
    assert queue.added == ["team", "team"]


async def test_the_kinds_to_empty_are_discovered_at_each_sync() -> None:
    pods, secrets = FakeContent([pod("a")]), FakeContent([pod("s")])
    served: list[tuple[kinds.KindInfo, Any]] = [(kinds.POD, pods)]

    async def discover() -> list[tuple[kinds.KindInfo, Any]]:
        return list(served)

    namespaces = FakeNamespaces(namespace())
    queue = FakeQueue()
    controller = NamespaceController(
        namespaces, namespaces, [], queue, clock=FakeClock(NOW), discover=discover
    )
    served.append((kinds.SECRET, secrets))  # a kind served since the controller started
    await controller.sync("team")
    assert (pods.deletes, secrets.deletes) == (["team/a"], ["team/s"])
    assert namespaces.finalized == [[]]


async def test_a_failed_discovery_is_a_condition_and_a_retry_never_a_finalize() -> None:
    async def discover() -> list[tuple[kinds.KindInfo, Any]]:
        raise UnavailableError("connection refused")

    namespaces = FakeNamespaces(namespace())
    controller = NamespaceController(
        namespaces, namespaces, [], FakeQueue(), clock=FakeClock(NOW), discover=discover
    )
    with pytest.raises(UnavailableError):
        await controller.sync("team")
    assert conditions(namespaces.ns)["NamespaceDeletionDiscoveryFailure"] == (
        "True",
        "DiscoveryFailed",
        "Discovery failed for some groups: connection refused",
    )
    assert namespaces.finalized == []
