"""In-memory fakes of the client and informer caches for controller unit tests.

`FakeClient` keeps objects per kind in dicts, assigns uid/resourceVersion/creationTimestamp,
checks resourceVersion on update and uid preconditions on delete like the apiserver, and
records every write (with `update_as_apiserver`, Update keeps the stored status and raises the
generation of a changed spec); Delete and Update honour finalizers as the apiserver does (an object
with finalizers is only marked; removing the last one from a marked object deletes it).
`FakeStore` reads the same dicts, so a test sees its writes at once (an
informer with an instant watch); `lag()` freezes a store to model a slow watch.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from controller.util import random_suffix
from tinykube.clock import FakeClock
from tinykube.errors import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
)
from tinykube.v1 import (
    deployment_pb2,
    job_pb2,
    lease_pb2,
    namespace_pb2,
    node_pb2,
    pod_pb2,
    replicaset_pb2,
    serviceaccount_pb2,
)

M = TypeVar("M", bound=Message)


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


class FakeResource(Generic[M]):
    def __init__(self, kind: str, cls: type[M], clock: FakeClock, rv: itertools.count[int]) -> None:
        self.kind = kind
        self.cls = cls
        self.clock = clock
        self._rv = rv
        self.objects: dict[str, M] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_creates: Exception | None = None
        # Creates that are applied and then fail with this error (their answer was lost).
        self.lose_create_answers: Exception | None = None
        # Updates (and UpdateStatus) applied and then failing with this error, likewise.
        self.lose_update_answers: Exception | None = None
        self.fail_updates: Exception | None = None  # Updates that fail unapplied
        self.reads = 0  # Gets served
        # UpdateStatus also stores the annotations (Kubernetes' deployment status strategy).
        self.status_keeps_annotations = False
        # Update keeps the stored status and raises metadata.generation when the spec changed,
        # as the apiserver's strategies do for a kind with a status subresource.
        self.update_as_apiserver = False

    def _copy(self, obj: M) -> M:
        out = self.cls()
        out.CopyFrom(obj)
        return out

    async def create(self, obj: M) -> M:
        if self.fail_creates is not None:
            raise self.fail_creates
        meta: Any = obj.metadata  # type: ignore[attr-defined]
        if not meta.name and meta.generateName:
            obj = self._copy(obj)
            meta = obj.metadata  # type: ignore[attr-defined]
            meta.name = meta.generateName + random_suffix()
        key = _key(meta.namespace, meta.name)
        if key in self.objects:
            raise AlreadyExistsError(f'{self.kind.lower()}s "{meta.name}" already exists')
        stored = self._copy(obj)
        smeta: Any = stored.metadata  # type: ignore[attr-defined]
        smeta.uid = str(uuid.uuid4())
        smeta.resourceVersion = str(next(self._rv))
        smeta.generation = 1
        smeta.creationTimestamp.FromDatetime(self.clock.now().replace(tzinfo=None))
        self.objects[key] = stored
        self.calls.append(("create", key))
        if self.lose_create_answers is not None:
            raise self.lose_create_answers
        return self._copy(stored)

    async def get(self, name: str, namespace: str = "") -> M:
        self.reads += 1
        key = _key(namespace, name)
        if key not in self.objects:
            raise NotFoundError(f'{self.kind.lower()}s "{name}" not found')
        return self._copy(self.objects[key])

    async def _write(self, obj: M, verb: str) -> M:
        if self.fail_updates is not None:
            raise self.fail_updates
        meta: Any = obj.metadata  # type: ignore[attr-defined]
        key = _key(meta.namespace, meta.name)
        cur = self.objects.get(key)
        if cur is None:
            raise NotFoundError(f'{self.kind.lower()}s "{meta.name}" not found')
        cmeta: Any = cur.metadata  # type: ignore[attr-defined]
        if meta.resourceVersion and meta.resourceVersion != cmeta.resourceVersion:
            raise ConflictError("the object has been modified")
        new = self._copy(obj)
        nmeta: Any = new.metadata  # type: ignore[attr-defined]
        if verb == "update_status":
            new_status = self._copy(obj).status  # type: ignore[attr-defined]
            new = self._copy(cur)
            new.status.CopyFrom(new_status)  # type: ignore[attr-defined]
            nmeta = new.metadata  # type: ignore[attr-defined]
            if self.status_keeps_annotations:
                nmeta.annotations.clear()
                nmeta.annotations.update(meta.annotations)
        elif self.update_as_apiserver:
            new.status.CopyFrom(cur.status)  # type: ignore[attr-defined]
            spec_changed = new.spec != cur.spec  # type: ignore[attr-defined]
            nmeta.generation = cmeta.generation + (1 if spec_changed else 0)
        if cmeta.HasField("deletionTimestamp"):
            # Deletion is driven by Delete, never by an Update (as the apiserver).
            nmeta.deletionTimestamp.CopyFrom(cmeta.deletionTimestamp)
            if not nmeta.finalizers:
                # The last finalizer is gone from an object being deleted: it goes.
                self.calls.append((verb, key))
                self.calls.append(("finalized", key))
                return self.objects.pop(key)
        nmeta.resourceVersion = str(next(self._rv))
        self.objects[key] = new
        self.calls.append((verb, key))
        if self.lose_update_answers is not None:
            raise self.lose_update_answers
        return self._copy(new)

    async def update(self, obj: M, *, resend_ambiguous: bool = True) -> M:
        return await self._write(obj, "update")

    async def update_status(self, obj: M, *, resend_ambiguous: bool = True) -> M:
        return await self._write(obj, "update_status")

    async def delete(
        self,
        name: str,
        namespace: str = "",
        *,
        grace_period_seconds: int | None = None,
        uid: str = "",
        resource_version: str = "",
        propagation_policy: str = "",
    ) -> M:
        """Deletes at once unless the object keeps (or `propagation_policy` gives it) a
        finalizer: then it is only marked, as the apiserver does (no graceful deletion)."""
        key = _key(namespace, name)
        cur = self.objects.get(key)
        if cur is None:
            raise NotFoundError(f'{self.kind.lower()}s "{name}" not found')
        meta: Any = cur.metadata  # type: ignore[attr-defined]
        if uid and meta.uid != uid:
            raise PreconditionFailedError("uid precondition failed")
        verb = "delete" if grace_period_seconds is None else f"delete/{grace_period_seconds}"
        if propagation_policy:
            verb += f"/{propagation_policy}"
        self.calls.append((verb, key))
        if propagation_policy:
            keep = [f for f in meta.finalizers if f not in ("orphan", "foregroundDeletion")]
            if propagation_policy == "Orphan":
                keep.append("orphan")
            elif propagation_policy == "Foreground":
                keep.append("foregroundDeletion")
            del meta.finalizers[:]
            meta.finalizers.extend(keep)
        if meta.finalizers:
            if not meta.HasField("deletionTimestamp"):
                meta.deletionTimestamp.FromDatetime(self.clock.now().replace(tzinfo=None))
                meta.deletionGracePeriodSeconds = 0
            meta.resourceVersion = str(next(self._rv))
            return self._copy(cur)
        return self.objects.pop(key)


class FakeClient:
    def __init__(self, clock: FakeClock) -> None:
        rv = itertools.count(1)
        self.pods = FakeResource("Pod", pod_pb2.Pod, clock, rv)
        self.nodes = FakeResource("Node", node_pb2.Node, clock, rv)
        self.replica_sets = FakeResource("ReplicaSet", replicaset_pb2.ReplicaSet, clock, rv)
        self.leases = FakeResource("Lease", lease_pb2.Lease, clock, rv)
        self.jobs = FakeResource("Job", job_pb2.Job, clock, rv)
        self.deployments = FakeResource("Deployment", deployment_pb2.Deployment, clock, rv)
        self.deployments.status_keeps_annotations = True
        self.namespaces = FakeResource("Namespace", namespace_pb2.Namespace, clock, rv)
        self.service_accounts = FakeResource(
            "ServiceAccount", serviceaccount_pb2.ServiceAccount, clock, rv
        )


class FakeStore(Generic[M]):
    """An informer cache over a FakeResource; `lag()` freezes it to a snapshot."""

    def __init__(self, resource: FakeResource[M]) -> None:
        self.resource = resource
        self._frozen: dict[str, M] | None = None

    def lag(self, snapshot: dict[str, M] | None = None) -> None:
        """Freeze to the objects as they are now, or to an earlier `snapshot` of them."""
        self._frozen = dict(self.resource.objects if snapshot is None else snapshot)

    def catch_up(self) -> None:
        self._frozen = None

    @property
    def lagging(self) -> bool:
        return self._frozen is not None

    def _objects(self) -> dict[str, M]:
        return self._frozen if self._frozen is not None else self.resource.objects

    def get(self, key: str) -> M | None:
        return self._objects().get(key)

    def list(self) -> list[M]:
        return list(self._objects().values())


class FakeQueue:
    def __init__(self) -> None:
        self.added: list[str] = []
        self.delayed: list[tuple[str, float]] = []

    def add(self, key: str) -> None:
        self.added.append(key)

    def add_after(self, key: str, seconds: float) -> None:
        self.delayed.append((key, seconds))


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def record(self, obj: Any, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason, message))
