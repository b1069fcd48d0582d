"""The narrow view of the API the controllers use, as Protocols.

The real `tinykube.client.Client` and the informers' stores satisfy these structurally; unit
tests pass in-memory fakes (tests/unit/controller/fakes.py) instead, so every reconcile runs
without sockets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from tinykube.protocols import ResourceAPI, StatusResourceAPI
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2, replicaset_pb2

T = TypeVar("T")


class ClientAPI(Protocol):
    @property
    def pods(self) -> StatusResourceAPI[pod_pb2.Pod]: ...

    @property
    def nodes(self) -> StatusResourceAPI[node_pb2.Node]: ...

    @property
    def replica_sets(self) -> StatusResourceAPI[replicaset_pb2.ReplicaSet]: ...

    @property
    def leases(self) -> ResourceAPI[lease_pb2.Lease]: ...


class Store(Protocol[T]):
    """The read side of an informer's cache."""

    def get(self, key: str) -> T | None: ...

    def list(self) -> list[T]: ...


class Queue(Protocol):
    """The subset of tinykube.workqueue.WorkQueue a controller's handlers use."""

    def add(self, key: str) -> None: ...

    def add_after(self, key: str, seconds: float) -> None: ...


class Recorder(Protocol):
    async def record(self, obj: Any, type: str, reason: str, message: str) -> None: ...


class NullRecorder:
    """Records nothing: for tests and for when Events cannot be written."""

    async def record(self, obj: Any, type: str, reason: str, message: str) -> None:
        return None


Handler = Callable[..., None]


class IndexedStore(Store[T], Protocol[T]):
    """An informer store with secondary indexes (tinykube.informer.Store)."""

    def add_index(self, name: str, fn: Callable[[T], str | Iterable[str] | None]) -> None: ...

    def by_index(self, index_name: str, value: str) -> list[T]: ...


CONTROLLER_UID_INDEX = "controller-uid"
ORPHAN_NAMESPACE_INDEX = "orphan-namespace"
OWNER_UID_INDEX = "owner-uid"


def _controller_uid(obj: Any) -> str | None:
    for ref in obj.metadata.ownerReferences:
        if ref.controller:
            return str(ref.uid)
    return None


def _orphan_namespace(obj: Any) -> str | None:
    return None if _controller_uid(obj) is not None else str(obj.metadata.namespace)


def _owner_uids(obj: Any) -> list[str]:
    return [str(ref.uid) for ref in obj.metadata.ownerReferences]


class PodIndex:
    """Pods by controller uid, orphans by namespace, dependents by owner uid.

    With an indexed informer store the lookups cost O(result); a plain store (unit tests) is
    scanned. Syncing a ReplicaSet thus never walks every pod in the cluster.
    """

    def __init__(self, store: Store[Any]) -> None:
        self.store = store
        self.indexed = hasattr(store, "add_index") and hasattr(store, "by_index")
        if self.indexed:
            indexed: Any = store
            for name, fn in (
                (CONTROLLER_UID_INDEX, _controller_uid),
                (ORPHAN_NAMESPACE_INDEX, _orphan_namespace),
                (OWNER_UID_INDEX, _owner_uids),
            ):
                # Controllers sharing one informer share its indexes.
                with contextlib.suppress(ValueError):
                    indexed.add_index(name, fn)

    def _lookup(self, index: str, value: str, fn: Callable[[Any], Any]) -> list[Any]:
        if self.indexed:
            indexed: Any = self.store
            return list(indexed.by_index(index, value))
        out = []
        for obj in self.store.list():
            got = fn(obj)
            if got == value or (isinstance(got, list) and value in got):
                out.append(obj)
        return out

    def controlled_by(self, uid: str) -> list[Any]:
        return self._lookup(CONTROLLER_UID_INDEX, uid, _controller_uid)

    def orphans(self, namespace: str) -> list[Any]:
        return self._lookup(ORPHAN_NAMESPACE_INDEX, namespace, _orphan_namespace)

    def dependents_of(self, uid: str) -> list[Any]:
        return self._lookup(OWNER_UID_INDEX, uid, _owner_uids)

    def claim_candidates(self, owner: Any) -> list[Any]:
        """What a claim for `owner` looks at: what it controls plus the orphans in its
        namespace (never every object of the kind)."""
        namespace = owner.metadata.namespace
        return [
            obj
            for obj in self.controlled_by(owner.metadata.uid) + self.orphans(namespace)
            if obj.metadata.namespace == namespace
        ]
