"""The ControllerRef claim helper (kube's controller_ref_manager): adopt, release, skip."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.controllerref import ControllerRefManager, new_controller_ref
from controller.util import selector_matches
from tinykube.errors import ConflictError, NotFoundError
from tinykube.v1 import pod_pb2, replicaset_pb2

Pod = pod_pb2.Pod
ReplicaSet = replicaset_pb2.ReplicaSet


def rs(uid: str = "rs-uid", *, deleting: bool = False) -> ReplicaSet:
    out = ReplicaSet()
    out.metadata.name, out.metadata.namespace, out.metadata.uid = "web", "default", uid
    out.spec.selector.matchLabels["app"] = "web"
    if deleting:
        out.metadata.deletionTimestamp.seconds = 1
    return out


def pod(name: str, app: str = "web", *, owner: str = "", deleting: bool = False) -> Pod:
    out = Pod()
    out.metadata.name, out.metadata.namespace = name, "default"
    out.metadata.labels["app"] = app
    if owner:
        ref = out.metadata.ownerReferences.add(kind="ReplicaSet", name="x", uid=owner)
        ref.controller = True
    if deleting:
        out.metadata.deletionTimestamp.seconds = 1
    return out


class Owners:
    """The owner's live copy (None: gone)."""

    def __init__(self, live: ReplicaSet | None) -> None:
        self.live = live
        self.reads = 0

    async def get(self, name: str, namespace: str = "") -> ReplicaSet:
        self.reads += 1
        if self.live is None:
            raise NotFoundError(f'replicasets.apps "{name}" not found')
        return self.live


class Pods:
    def __init__(self, fail: Exception | None = None) -> None:
        self.written: list[Pod] = []
        self.fail = fail

    async def update(self, obj: Pod) -> Pod:
        if self.fail is not None:
            raise self.fail
        self.written.append(obj)
        answered = Pod()
        answered.CopyFrom(obj)
        answered.metadata.resourceVersion = "2"
        return answered


def matcher(owner: ReplicaSet) -> Callable[[Pod], bool]:
    return lambda p: selector_matches(owner.spec.selector, p.metadata.labels)


async def claim(
    owner: ReplicaSet, pods: list[Pod], live: ReplicaSet | None, writer: Pods | None = None
) -> tuple[list[Pod], Pods, Owners]:
    owners, writer = Owners(live), writer or Pods()
    manager = ControllerRefManager(owner, "apps/v1", "ReplicaSet", owners)
    return await manager.claim(pods, matcher(owner), writer), writer, owners


async def test_a_matching_orphan_is_adopted_with_a_controller_reference() -> None:
    owner = rs()
    claimed, writer, owners = await claim(owner, [pod("a"), pod("b")], rs())
    assert [p.metadata.name for p in claimed] == ["a", "b"]
    assert [p.metadata.resourceVersion for p in claimed] == ["2", "2"]  # as the API answered
    for written in writer.written:
        assert list(written.metadata.ownerReferences) == [
            new_controller_ref(owner, "apps/v1", "ReplicaSet")
        ]
        ref = written.metadata.ownerReferences[0]
        assert ref.controller and ref.blockOwnerDeletion and ref.uid == "rs-uid"
    assert owners.reads == 1  # the owner is rechecked once per claim, not per orphan


async def test_owned_objects_that_match_are_kept_without_a_write_or_a_read() -> None:
    claimed, writer, owners = await claim(rs(), [pod("a", owner="rs-uid")], None)
    assert [p.metadata.name for p in claimed] == ["a"]
    assert (writer.written, owners.reads) == ([], 0)


async def test_owned_objects_that_no_longer_match_are_released() -> None:
    mine = pod("a", "db", owner="rs-uid")
    mine.metadata.ownerReferences.add(kind="Other", name="o", uid="other-uid")
    claimed, writer, _ = await claim(rs(), [mine], rs())
    assert claimed == []
    [released] = writer.written
    assert [r.uid for r in released.metadata.ownerReferences] == ["other-uid"]


@pytest.mark.parametrize(
    "candidate",
    [
        pod("theirs", owner="other-uid"),  # controlled by someone else
        pod("nomatch", "db"),  # orphan the selector does not match
        pod("going", deleting=True),  # orphan being deleted
    ],
    ids=["someone-elses", "not-matching", "orphan-deleting"],
)
async def test_what_is_never_adopted(candidate: Pod) -> None:
    claimed, writer, _ = await claim(rs(), [candidate], rs())
    assert (claimed, writer.written) == ([], [])


async def test_a_deleting_owner_neither_adopts_nor_releases_but_keeps_its_own() -> None:
    owner = rs(deleting=True)
    pods = [pod("orphan"), pod("mine", owner="rs-uid"), pod("stale", "db", owner="rs-uid")]
    claimed, writer, owners = await claim(owner, pods, owner)
    assert [p.metadata.name for p in claimed] == ["mine"]
    assert (writer.written, owners.reads) == ([], 0)


@pytest.mark.parametrize(
    "live",
    [None, rs(uid="new-uid"), rs(deleting=True)],
    ids=["owner-gone", "owner-recreated-with-another-uid", "owner-deleted-since-cached"],
)
async def test_the_fresh_read_of_the_owner_refuses_adoption(live: ReplicaSet | None) -> None:
    # The cache still shows a live owner; the API knows better (RecheckDeletionTimestamp).
    claimed, writer, owners = await claim(rs(), [pod("a"), pod("b")], live)
    assert (claimed, writer.written, owners.reads) == ([], [], 1)


@pytest.mark.parametrize("error", [ConflictError("changed"), NotFoundError("gone")])
async def test_a_lost_write_claims_nothing_and_raises_nothing(error: Exception) -> None:
    claimed, _, _ = await claim(rs(), [pod("a"), pod("b", "db", owner="rs-uid")], rs(), Pods(error))
    assert claimed == []


async def test_objects_of_another_namespace_are_ignored() -> None:
    elsewhere = pod("a")
    elsewhere.metadata.namespace = "other"
    claimed, writer, _ = await claim(rs(), [elsewhere], rs())
    assert (claimed, writer.written) == ([], [])


async def test_adopt_and_release_hooks_change_the_same_write() -> None:
    def add(p: Pod) -> None:
        p.metadata.finalizers.append("batch.kubernetes.io/job-tracking")

    def drop(p: Pod) -> None:
        del p.metadata.finalizers[:]

    stale = pod("stale", "db", owner="rs-uid")
    stale.metadata.finalizers.append("batch.kubernetes.io/job-tracking")
    owner, writer = rs(), Pods()
    manager = ControllerRefManager(owner, "apps/v1", "ReplicaSet", Owners(owner))
    claimed = await manager.claim(
        [pod("orphan"), stale], matcher(owner), writer, on_adopt=add, on_release=drop
    )
    assert [p.metadata.name for p in claimed] == ["orphan"]
    adopted, released = writer.written
    assert list(adopted.metadata.finalizers) == ["batch.kubernetes.io/job-tracking"]
    assert (list(released.metadata.finalizers), len(released.metadata.ownerReferences)) == ([], 0)
