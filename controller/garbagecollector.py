"""Garbage collector: deletes objects whose owners are gone (background cascading deletion).

A much smaller cousin of Kubernetes' graph-based garbage collector. Dependents are pods and
ReplicaSets (the kinds that carry ownerReferences here); owners are looked up by kind in the
informer caches and, before anything is deleted, confirmed absent with a live read, because a
cache may not have seen a just-created owner yet. An object all of whose owners are gone (absent,
or present with another uid) is deleted with a uid precondition; one that lost only some owners
has the dangling references removed. Owner kinds we cannot look up are treated as present.

Informer handlers enqueue "Kind:namespace/name" items; `sync` is level-triggered and the work
queue keeps one sync per item at a time.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from controller.api import ClientAPI, PodIndex, Queue, Store
from controller.util import is_terminating, key_of, split_key
from tinykube.errors import ConflictError, NotFoundError, PreconditionFailedError
from tinykube.protocols import ResourceAPI

log = logging.getLogger(__name__)


class GarbageCollector:
    name = "garbagecollector"

    def __init__(
        self,
        client: ClientAPI,
        stores: dict[str, Store[Any]],
        queue: Queue,
    ) -> None:
        """`stores` maps a kind ("Pod", "ReplicaSet", "Node") to its informer cache."""
        self.client = client
        self.stores = stores
        self.queue = queue
        self.dependent_kinds = ("Pod", "ReplicaSet")
        self.indexes = {
            kind: PodIndex(store) for kind, store in stores.items() if kind in self.dependent_kinds
        }

    def _api(self, kind: str) -> ResourceAPI[Any] | None:
        apis: dict[str, ResourceAPI[Any]] = {
            "Pod": self.client.pods,
            "ReplicaSet": self.client.replica_sets,
            "Node": self.client.nodes,
        }
        return apis.get(kind)

    # ---- handlers ----

    def on_dependent_change(self, kind: str, obj: Any) -> None:
        if obj.metadata.ownerReferences:
            self.queue.add(f"{kind}:{key_of(obj)}")

    def on_owner_delete(self, kind: str, owner: Any) -> None:
        uid = owner.metadata.uid
        for dep_kind, index in self.indexes.items():
            for obj in index.dependents_of(uid):
                self.queue.add(f"{dep_kind}:{key_of(obj)}")

    def handlers_for_dependent(self, kind: str) -> tuple[Any, Any, Any]:
        return (
            lambda obj: self.on_dependent_change(kind, obj),
            lambda old, new: self.on_dependent_change(kind, new),
            lambda obj: None,
        )

    def handlers_for_owner(self, kind: str) -> tuple[Any, Any, Any]:
        return (
            lambda obj: None,
            lambda old, new: None,
            lambda obj: self.on_owner_delete(kind, obj),
        )

    # ---- reconcile ----

    async def _owner_exists(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        api = self._api(kind)
        store = self.stores.get(kind)
        if api is None or store is None:
            return True  # a kind we do not know: never delete on its account
        ns = namespace if kind != "Node" else ""
        cached = store.get(f"{ns}/{name}" if ns else name)
        if cached is not None and cached.metadata.uid == uid:
            return True
        try:
            live = await api.get(name, ns)
        except NotFoundError:
            return False
        return bool(live.metadata.uid == uid)

    async def sync(self, item: str) -> None:
        kind, key = item.split(":", 1)
        store = self.stores.get(kind)
        api = self._api(kind)
        if store is None or api is None:
            return
        obj = store.get(key)
        if obj is None or is_terminating(obj) or not obj.metadata.ownerReferences:
            return
        namespace, name = split_key(key)
        dangling = []
        for ref in obj.metadata.ownerReferences:
            if not await self._owner_exists(ref.kind, namespace, ref.name, ref.uid):
                dangling.append(ref.uid)
        if not dangling:
            return
        if len(dangling) == len(obj.metadata.ownerReferences):
            log.info("deleting %s %s: its owner is gone", kind, key)
            # Already gone, or replaced by a new object of the same name: nothing to do.
            with contextlib.suppress(NotFoundError, PreconditionFailedError, ConflictError):
                await api.delete(name, namespace, uid=obj.metadata.uid)
            return
        updated = type(obj)()
        updated.CopyFrom(obj)
        keep = [r for r in updated.metadata.ownerReferences if r.uid not in dangling]
        del updated.metadata.ownerReferences[:]
        updated.metadata.ownerReferences.extend(keep)
        try:
            await api.update(updated)
        except (NotFoundError, ConflictError):
            self.queue.add(item)
