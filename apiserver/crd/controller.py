"""The CRD controllers of the apiserver process (kube runs its apiextensions controllers in the
apiserver too): naming and establishing (apiserver/crd/names.py decides), on every apiserver.

`run(store)` watches the CustomResourceDefinitions' watch cache and, after each batch of
events, reconciles every CRD's status: acceptedNames, NamesAccepted and Established. Each
write is a status update through the store's one write pipeline (compare-and-swap, retried on
a conflict), so two apiservers of an HA pair reconciling the same CRD agree: the decision is a
function of the CRDs' current state, and the second write finds nothing to change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from google.protobuf.message import Message

from apiserver.crd import names
from apiserver.crd.serving import CustomResources
from apiserver.registry.customresourcedefinition import CLEANUP_FINALIZER, is_established
from apiserver.requestcontext import INTERNAL
from apiserver.resources import ResourceStore
from tinykube.errors import ConflictError, NotFoundError, TinykubeError
from tinykube.v1 import apiextensions_pb2, meta_pb2

log = logging.getLogger(__name__)

CRD = apiextensions_pb2.CustomResourceDefinition
# After an error (etcd away), the next try.
RETRY_SECONDS = 1.0


def _crds(store: ResourceStore) -> list[CRD]:
    crds = []
    for cached in store.cache.state.values():
        obj = cached.obj
        assert isinstance(obj, CRD)
        crds.append(obj)
    return sorted(
        crds, key=lambda c: (c.metadata.creationTimestamp.ToNanoseconds(), c.metadata.name)
    )


async def reconcile_all(store: ResourceStore) -> int:
    """One pass over every CRD, oldest first (an older CRD keeps a contested name); how many
    statuses were written."""
    written = 0
    for crd in _crds(store):

        async def transform(old: Message | None) -> Message:
            assert isinstance(old, CRD)
            new = names.reconcile(old, _crds(store), store.clock.now())
            return old if new is None else new

        if names.reconcile(crd, _crds(store), store.clock.now()) is None:
            continue
        try:
            await store.guaranteed_update(
                "", crd.metadata.name, transform, INTERNAL, subresource="status"
            )
            written += 1
        except (NotFoundError, ConflictError):
            continue  # deleted meanwhile; a conflict is retried by the next event
    return written


async def _set_finalizer(store: ResourceStore, name: str, present: bool) -> None:
    async def transform(old: Message | None) -> Message:
        assert isinstance(old, CRD)
        new = CRD()
        new.CopyFrom(old)
        finalizers = [f for f in new.metadata.finalizers if f != CLEANUP_FINALIZER]
        if present:
            finalizers.append(CLEANUP_FINALIZER)
        del new.metadata.finalizers[:]
        new.metadata.finalizers.extend(finalizers)
        return new

    await store.guaranteed_update("", name, transform, INTERNAL)


async def _set_terminating(store: ResourceStore, name: str) -> None:
    """kube's Terminating condition while the objects of a deleted CRD go."""

    async def transform(old: Message | None) -> Message:
        assert isinstance(old, CRD)
        new = CRD()
        new.CopyFrom(old)
        cond = names.Condition(
            type=names.TERMINATING,
            status="True",
            reason="InstanceDeletionInProgress",
            message="CustomResource deletion is in progress",
        )
        names.set_condition(new, cond, store.clock.now())
        return new

    await store.guaranteed_update("", name, transform, INTERNAL, subresource="status")


async def cleanup(store: ResourceStore, custom: CustomResources) -> bool:
    """kube's CRD finalizer: an Established CRD carries customresourcecleanup; a deleted one
    has every custom object deleted first, then the finalizer goes and the CRD with it.
    True while some deleted CRD still has objects (they may be held by their finalizers)."""
    pending = False
    for crd in _crds(store):
        name = crd.metadata.name
        has = CLEANUP_FINALIZER in crd.metadata.finalizers
        try:
            if not crd.metadata.HasField("deletionTimestamp"):
                if not has and is_established(crd):
                    await _set_finalizer(store, name, True)
                continue
            if not has:
                continue
            objects = custom.store_of(name)
            if objects is not None:
                objects.terminating = True
            if names.find_condition(crd, names.TERMINATING) is None:
                await _set_terminating(store, name)
            if objects is not None:
                if not objects.cache.synced.is_set():
                    pending = True
                    continue
                left = [c.obj for c in objects.cache.state.values()]
                for obj in left:
                    meta = obj.metadata  # type: ignore[attr-defined]
                    if meta.HasField("deletionTimestamp"):
                        continue
                    with contextlib.suppress(NotFoundError, ConflictError):
                        await objects.delete(
                            meta_pb2.DeleteRequest(namespace=meta.namespace, name=meta.name)
                        )
                if left:
                    pending = True
                    continue
            await _set_finalizer(store, name, False)
        except (NotFoundError, ConflictError):
            continue
    return pending


async def run(store: ResourceStore, custom: CustomResources | None = None) -> None:
    """Reconcile on every change of a CRD, until cancelled; `custom` is told the CRDs after
    each pass (it serves the Established ones' kinds)."""
    cache = store.cache
    while True:
        try:
            watcher, _ = await cache.watch(resource_version=None)
        except TinykubeError as exc:
            log.warning("the CRD controller cannot watch yet: %s", exc)
            await store.clock.sleep(RETRY_SECONDS)
            continue
        try:
            while True:
                await reconcile_all(store)
                if custom is not None:
                    custom.sync(_crds(store))
                    if await cleanup(store, custom):
                        # Objects are still going: look again soon even if no CRD changes.
                        with contextlib.suppress(TimeoutError):
                            if not await asyncio.wait_for(watcher.drain_events(), RETRY_SECONDS):
                                break
                        continue
                # The written statuses come back as events too: the next pass finds them right.
                if not await watcher.drain_events():
                    break
        except asyncio.CancelledError:
            raise
        except TinykubeError as exc:
            log.warning("the CRD controller's pass failed: %s", exc)
            await store.clock.sleep(RETRY_SECONDS)
        finally:
            cache.unregister(watcher)
