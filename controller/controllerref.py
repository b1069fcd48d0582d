"""One ControllerRef claim helper for every controller that owns what its selector matches.

Kubernetes' pkg/controller/controller_ref_manager.go, as the ReplicaSet, Deployment, DaemonSet
and Job controllers use it: before a sync acts, it claims its dependents. An object the owner
controls (an ownerReference with controller=true and the owner's uid) stays claimed while the
selector matches it and is released (that reference removed) once it does not, unless the owner
is being deleted. An orphan (no controller reference) whose labels match is adopted (the
reference added) unless the owner or the orphan is being deleted; before the first adoption
the owner is read fresh from the API and adoption is refused if it is gone, has another uid
(deleted and recreated under the same name) or is being deleted (kube's
RecheckDeletionTimestamp), so a stale cache never hands objects to a dead owner. Objects
controlled by someone else are left alone.

A write that loses a race (Conflict) or finds the object gone (NotFound) claims nothing: the
informer's event for that change enqueues the owner again and the next sync sees the truth.

Concurrency: a manager lives for one sync; the work queue runs one sync per owner at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from google.protobuf.message import Message

from controller.util import HasMeta, controller_ref, is_terminating
from tinykube.errors import ConflictError, NotFoundError
from tinykube.v1 import meta_pb2

D = TypeVar("D", bound=Message)


class OwnerReader(Protocol):
    """Where a fresh copy of the owner is read (a ResourceClient)."""

    async def get(self, name: str, namespace: str = "") -> Any: ...


class DependentWriter(Protocol[D]):
    """Where adopted and released dependents are written (a ResourceClient)."""

    async def update(self, obj: D) -> D: ...


def new_controller_ref(owner: HasMeta, api_version: str, kind: str) -> meta_pb2.OwnerReference:
    """The reference a controller puts on what it creates or adopts (kube's NewControllerRef):
    controller and blockOwnerDeletion set, so foreground deletion waits for the dependent."""
    return meta_pb2.OwnerReference(
        apiVersion=api_version,
        kind=kind,
        name=owner.metadata.name,
        uid=owner.metadata.uid,
        controller=True,
        blockOwnerDeletion=True,
    )


def _copy(obj: D) -> D:
    out = type(obj)()
    out.CopyFrom(obj)
    return out


class ControllerRefManager:
    """Claims dependents for one owner: kube's BaseControllerRefManager and its typed Pod,
    ReplicaSet and ControllerRevision managers in one class (the dependent's kind only
    changes where it is written)."""

    def __init__(self, owner: HasMeta, api_version: str, kind: str, owners: OwnerReader) -> None:
        self.owner = owner
        self.ref = new_controller_ref(owner, api_version, kind)
        self._owners = owners
        self._can_adopt: bool | None = None  # read once per manager, as kube's sync.Once

    async def can_adopt(self) -> bool:
        """Whether the owner, read fresh, is still this incarnation and not being deleted."""
        if self._can_adopt is None:
            meta = self.owner.metadata
            try:
                fresh = await self._owners.get(meta.name, meta.namespace)
            except NotFoundError:
                self._can_adopt = False
            else:
                self._can_adopt = fresh.metadata.uid == meta.uid and not is_terminating(fresh)
        return self._can_adopt

    async def claim(
        self,
        candidates: Iterable[D],
        matches: Callable[[D], bool],
        dependents: DependentWriter[D],
        *,
        on_adopt: Callable[[D], None] | None = None,
        on_release: Callable[[D], None] | None = None,
    ) -> list[D]:
        """The candidates the owner controls after adoption and release (adopted ones as the
        API answered them). `on_adopt` / `on_release` make further changes in the same write
        (the Job controller's tracking finalizer)."""
        owner_meta = self.owner.metadata
        owner_deleting = is_terminating(self.owner)
        claimed: list[D] = []
        for obj in candidates:
            meta: Any = obj.metadata  # type: ignore[attr-defined]
            if owner_meta.namespace and meta.namespace != owner_meta.namespace:
                continue
            ref = controller_ref(meta)
            if ref is not None:
                if ref.uid != owner_meta.uid:
                    continue  # someone else's
                if matches(obj):
                    claimed.append(obj)  # ours: keeping it takes no write, even while deleting
                elif not owner_deleting:
                    await self._release(obj, dependents, on_release)
                continue
            if owner_deleting or not matches(obj) or meta.HasField("deletionTimestamp"):
                continue
            if not await self.can_adopt():
                continue
            adopted = await self._adopt(obj, dependents, on_adopt)
            if adopted is not None:
                claimed.append(adopted)
        return claimed

    async def _adopt(
        self, obj: D, dependents: DependentWriter[D], change: Callable[[D], None] | None
    ) -> D | None:
        updated = _copy(obj)
        updated.metadata.ownerReferences.append(self.ref)  # type: ignore[attr-defined]
        if change is not None:
            change(updated)
        try:
            return await dependents.update(updated)
        except (ConflictError, NotFoundError):
            return None  # changed or gone under us; its event brings the owner back

    async def _release(
        self, obj: D, dependents: DependentWriter[D], change: Callable[[D], None] | None
    ) -> None:
        updated = _copy(obj)
        refs: Any = updated.metadata.ownerReferences  # type: ignore[attr-defined]
        keep = [r for r in refs if r.uid != self.owner.metadata.uid]
        del refs[:]
        refs.extend(keep)
        if change is not None:
            change(updated)
        with contextlib.suppress(ConflictError, NotFoundError):
            await dependents.update(updated)
