"""Garbage collector: cascading deletion through ownerReferences, as Kubernetes does it.

A much smaller cousin of Kubernetes' graph-based garbage collector: the "graph" is the informer
caches plus an owner-uid index over every kind it is given (the controller manager gives it
every kind the API serves but Events, found by discovery and looked for again periodically,
controller/discovery.py; custom kinds of CRDs too, keyed "Kind.group" and read through the
generic CustomResources service, controller/customresources.py), each of which can be an owner
and a dependent; an ownerReference's kind is resolved with its apiVersion's group (`ref_kind`).
Three propagation modes, chosen by the apiserver at Delete time (apiserver/deletion.py) through
finalizers:

- Background (no finalizer): the owner is gone at once. A dependent all of whose owners are gone
  (absent, or present with another uid) is deleted with a uid precondition; one that lost only
  some owners has the dangling references removed. An owner missing from a cache is confirmed
  absent with a live read first, because a cache may not have seen a just-created owner yet.
  Owner kinds we cannot look up are treated as present.
- Orphan (finalizer `orphan` on an owner being deleted): the owner's uid is removed from every
  dependent's ownerReferences, then the finalizer; the apiserver then deletes the owner.
- Foreground (finalizer `foregroundDeletion` on an owner being deleted): the owner's dependents
  are deleted (a dependent that has dependents of its own is itself deleted in the foreground);
  the finalizer is removed once no dependent whose reference has blockOwnerDeletion is left.
  A dependent with another, live owner only loses its reference to the owner being deleted.

Informer handlers enqueue "Kind:namespace/name" items; `sync` is level-triggered: it re-reads
the cache and acts on the object as an owner being finalized (it carries deletionTimestamp and
one of the two finalizers) or as a dependent. The work queue keeps one sync per item at a time;
a sync that loses a write race raises, and the worker requeues the item with backoff.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.api import ClientAPI, PodIndex, Queue, Store
from controller.customresources import custom_kind_key
from controller.util import is_terminating, key_of, split_key
from tinykube import kinds
from tinykube.errors import (
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    UnavailableError,
)
from tinykube.protocols import ResourceAPI

log = logging.getLogger(__name__)

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN = "Orphan"
FOREGROUND = "Foreground"
BACKGROUND = "Background"

# How an owner reference resolves (Kubernetes' classifyReferences).
SOLID = "solid"  # the owner exists and is not deleting its dependents
DANGLING = "dangling"  # the owner is gone (or the name now belongs to another uid)
WAITING = "waiting"  # the owner is being deleted in the foreground: it waits for us

_WRITE_ATTEMPTS = 5


def deleting_dependents(obj: Any) -> bool:
    """Being deleted in the foreground: marked, and held by `foregroundDeletion`."""
    return is_terminating(obj) and FOREGROUND_FINALIZER in obj.metadata.finalizers


def _copy(obj: Any) -> Any:
    out = type(obj)()
    out.CopyFrom(obj)
    return out


class GarbageCollector:
    name = "garbagecollector"

    def __init__(
        self,
        client: ClientAPI,
        stores: dict[str, Store[Any]],
        queue: Queue,
        apis: Mapping[str, ResourceAPI[Any]] | None = None,
    ) -> None:
        """`stores` maps a kind ("Pod", "ReplicaSet", "Node") to its informer cache; `apis` adds
        the API of owner kinds beyond pods, ReplicaSets and nodes ("Deployment", "Job").
        `add_kind` adds more (the controller manager adds every kind the API serves)."""
        self.client = client
        self.apis: dict[str, ResourceAPI[Any]] = {
            "Pod": client.pods,
            "ReplicaSet": client.replica_sets,
            "Node": client.nodes,
            **(apis or {}),
        }
        self.stores: dict[str, Store[Any]] = {}
        self.queue = queue
        self.indexes: dict[str, PodIndex] = {}
        self.cluster_scoped: set[str] = set()
        # Custom kinds collected once and no longer served (their CRD was deleted).
        self.removed_kinds: set[str] = set()
        self._synced: dict[str, Callable[[], bool]] = {}
        for kind, store in stores.items():
            info = kinds.BY_KIND.get(kind)
            self.add_kind(kind, store, namespaced=info.namespaced if info else True)

    def knows(self, kind: str) -> bool:
        return kind in self.stores

    def kinds(self) -> list[str]:
        return list(self.stores)

    def remove_kind(self, kind: str) -> None:
        """Stop collecting `kind`: its CRD is gone, and its objects with it (a CRD's deletion
        deletes them first). References to it dangle from now on, and the dependents of the
        objects its cache still held are looked at again (their deletions may not have reached
        the cache before the kind went)."""
        store = self.stores.get(kind)
        if store is not None:
            for obj in store.list():
                for dep_kind, dep in self._dependents(obj.metadata.uid):
                    self.queue.add(f"{dep_kind}:{key_of(dep)}")
        self.removed_kinds.add(kind)
        self.stores.pop(kind, None)
        self.apis.pop(kind, None)
        self.indexes.pop(kind, None)
        self._synced.pop(kind, None)
        self.cluster_scoped.discard(kind)

    @staticmethod
    def ref_kind(ref: Any) -> str:
        """The kind an ownerReference names, as this collector keys kinds: a built-in kind by
        its Kind, a custom kind by "Kind.group" (two groups may both have a `Widget`; a custom
        `Deployment` is not apps' Deployment). Kubernetes resolves apiVersion and kind alike."""
        group = ref.apiVersion.rpartition("/")[0]
        info = kinds.BY_KIND.get(ref.kind)
        if not group or (info is not None and info.group == group):
            return str(ref.kind)
        return custom_kind_key(ref.kind, group)

    def add_kind(
        self,
        kind: str,
        store: Store[Any],
        api: ResourceAPI[Any] | None = None,
        *,
        namespaced: bool = True,
        has_synced: Callable[[], bool] | None = None,
    ) -> None:
        """Collect `kind` too: as an owner (looked up in `store`, confirmed through `api`) and
        as a dependent (its ownerReferences indexed). `has_synced`: whether `store` holds the
        whole kind yet (a kind found after the start has an informer still listing)."""
        self.stores[kind] = store
        self.removed_kinds.discard(kind)
        if has_synced is not None:
            self._synced[kind] = has_synced
        if api is not None:
            self.apis[kind] = api
        self.indexes[kind] = PodIndex(store)
        if not namespaced:
            self.cluster_scoped.add(kind)

    def _api(self, kind: str) -> ResourceAPI[Any] | None:
        return self.apis.get(kind)

    def _owner_key(self, kind: str, namespace: str, name: str) -> tuple[str, str]:
        """(namespace for the API, cache key) of an owner named by a dependent in `namespace`."""
        ns = "" if kind in self.cluster_scoped else namespace
        return ns, f"{ns}/{name}" if ns else name

    def _dependents(self, uid: str) -> Iterable[tuple[str, Any]]:
        for kind, index in self.indexes.items():
            for obj in index.dependents_of(uid):
                yield kind, obj

    # ---- handlers ----

    def on_change(self, kind: str, obj: Any) -> None:
        meta = obj.metadata
        if meta.ownerReferences or (
            is_terminating(obj)
            and (ORPHAN_FINALIZER in meta.finalizers or FOREGROUND_FINALIZER in meta.finalizers)
        ):
            self.queue.add(f"{kind}:{key_of(obj)}")

    def on_update(self, kind: str, old: Any, new: Any) -> None:
        self.on_change(kind, new)
        if list(old.metadata.ownerReferences) != list(new.metadata.ownerReferences):
            # A reference removed or unblocked may be what a foreground deletion waits for.
            self._notify_waiting_owners(old)

    def on_delete(self, kind: str, obj: Any) -> None:
        # As an owner: its dependents may now dangle.
        for dep_kind, dep in self._dependents(obj.metadata.uid):
            self.queue.add(f"{dep_kind}:{key_of(dep)}")
        # As a dependent: an owner deleting in the foreground may be waiting for it.
        self._notify_waiting_owners(obj)

    def _notify_waiting_owners(self, obj: Any) -> None:
        for ref in obj.metadata.ownerReferences:
            owner_kind = self.ref_kind(ref)
            store = self.stores.get(owner_kind)
            if store is None:
                continue
            _, key = self._owner_key(owner_kind, obj.metadata.namespace, ref.name)
            owner = store.get(key)
            if owner is not None and owner.metadata.uid == ref.uid and deleting_dependents(owner):
                self.queue.add(f"{owner_kind}:{key}")

    def handlers(self, kind: str) -> tuple[Callable[..., None], ...]:
        """(on_add, on_update, on_delete) for the informer of `kind`."""
        return (
            lambda obj: self.on_change(kind, obj),
            lambda old, new: self.on_update(kind, old, new),
            lambda obj: self.on_delete(kind, obj),
        )

    # ---- reconcile ----

    async def _owner_state(self, kind: str, namespace: str, name: str, uid: str) -> str:
        api = self._api(kind)
        store = self.stores.get(kind)
        if kind in self.removed_kinds:
            return DANGLING  # its CRD went, and every object of it before the CRD
        if api is None or store is None:
            return SOLID  # a kind we do not know: never delete on its account
        ns, key = self._owner_key(kind, namespace, name)
        owner = store.get(key)
        if owner is None or owner.metadata.uid != uid:
            try:
                owner = await api.get(name, ns)
            except NotFoundError:
                return DANGLING
            if owner.metadata.uid != uid:
                return DANGLING
        return WAITING if deleting_dependents(owner) else SOLID

    async def sync(self, item: str) -> None:
        kind, key = item.split(":", 1)
        store = self.stores.get(kind)
        api = self._api(kind)
        if store is None or api is None:
            return
        obj = store.get(key)
        if obj is None:
            return
        if is_terminating(obj):
            # Kubernetes' validation never lets an object hold both finalizers.
            if ORPHAN_FINALIZER in obj.metadata.finalizers:
                await self._orphan_dependents(kind, obj)
            elif FOREGROUND_FINALIZER in obj.metadata.finalizers:
                await self._delete_dependents(kind, obj)
            return
        if obj.metadata.ownerReferences:
            await self._collect(kind, key, obj)

    async def _collect(self, kind: str, key: str, obj: Any) -> None:
        """A dependent: delete it when no owner holds it, else drop references that dangle."""
        namespace, name = split_key(key)
        states: dict[str, list[str]] = {SOLID: [], DANGLING: [], WAITING: []}
        for ref in obj.metadata.ownerReferences:
            state = await self._owner_state(self.ref_kind(ref), namespace, ref.name, ref.uid)
            states[state].append(ref.uid)
        if states[SOLID]:
            stale = set(states[DANGLING]) | set(states[WAITING])
            if stale:
                await self._remove_references(kind, obj, stale)
            return
        fins = obj.metadata.finalizers
        if states[WAITING] and any(True for _ in self._dependents(obj.metadata.uid)):
            # An owner waits for us and we have dependents: it must wait for them too.
            policy = FOREGROUND
        elif ORPHAN_FINALIZER in fins:
            policy = ORPHAN
        elif FOREGROUND_FINALIZER in fins:
            policy = FOREGROUND
        else:
            policy = BACKGROUND
        api = self._api(kind)
        assert api is not None
        log.info("deleting %s %s (%s): its owners are gone or being deleted", kind, key, policy)
        # Already gone, or replaced by a new object of the same name: nothing to do.
        with contextlib.suppress(NotFoundError, PreconditionFailedError, ConflictError):
            await api.delete(name, namespace, uid=obj.metadata.uid, propagation_policy=policy)

    def _check_dependents_known(self, kind: str, owner: Any) -> None:
        """Refuse to finish an owner's orphan or foreground deletion while a kind's cache is
        still listing: a dependent it has not delivered yet would be missed (kube's collector
        waits for new monitors to sync). The worker requeues the owner with backoff."""
        listing = sorted(k for k, synced in self._synced.items() if not synced())
        if listing:
            raise UnavailableError(
                f"{kind} {key_of(owner)}: waiting for the caches of {', '.join(listing)} to sync"
            )

    async def _orphan_dependents(self, kind: str, owner: Any) -> None:
        self._check_dependents_known(kind, owner)
        uid = owner.metadata.uid
        for dep_kind, dep in list(self._dependents(uid)):
            await self._remove_references(dep_kind, dep, {uid})
        if await self._remove_finalizer(kind, owner, ORPHAN_FINALIZER):
            log.info("orphaned the dependents of %s %s", kind, key_of(owner))

    async def _delete_dependents(self, kind: str, owner: Any) -> None:
        self._check_dependents_known(kind, owner)
        uid = owner.metadata.uid
        blocking = 0
        for dep_kind, dep in self._dependents(uid):
            if any(r.uid == uid and r.blockOwnerDeletion for r in dep.metadata.ownerReferences):
                blocking += 1
            if not is_terminating(dep):
                self.queue.add(f"{dep_kind}:{key_of(dep)}")
        if blocking == 0 and await self._remove_finalizer(kind, owner, FOREGROUND_FINALIZER):
            log.info("dependents of %s %s are gone: it goes too", kind, key_of(owner))

    async def _rewrite(self, kind: str, obj: Any, change: Callable[[Any], bool]) -> bool:
        """Update `obj` by `change` (False: nothing to change) with compare-and-swap, re-reading
        it after a lost race. A vanished or recreated object needs nothing. True if written."""
        api = self._api(kind)
        assert api is not None
        meta = obj.metadata
        current = obj
        for _attempt in range(_WRITE_ATTEMPTS):
            updated = _copy(current)
            if not change(updated):
                return False
            try:
                await api.update(updated)
                return True
            except NotFoundError:
                return False
            except ConflictError:
                try:
                    current = await api.get(meta.name, meta.namespace)
                except NotFoundError:
                    return False
                if current.metadata.uid != meta.uid:
                    return False
        raise ConflictError(f"{kind} {key_of(obj)}: kept changing while the collector wrote it")

    async def _remove_references(self, kind: str, obj: Any, uids: set[str]) -> bool:
        def strip(o: Any) -> bool:
            refs = list(o.metadata.ownerReferences)
            keep = [r for r in refs if r.uid not in uids]
            if len(keep) == len(refs):
                return False
            del o.metadata.ownerReferences[:]
            o.metadata.ownerReferences.extend(keep)
            return True

        return await self._rewrite(kind, obj, strip)

    async def _remove_finalizer(self, kind: str, obj: Any, finalizer: str) -> bool:
        def drop(o: Any) -> bool:
            fins = list(o.metadata.finalizers)
            if finalizer not in fins:
                return False
            del o.metadata.finalizers[:]
            o.metadata.finalizers.extend(f for f in fins if f != finalizer)
            return True

        return await self._rewrite(kind, obj, drop)
