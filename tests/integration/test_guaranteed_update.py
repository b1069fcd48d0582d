"""`ResourceStore.guaranteed_update`, the one path of every update (kube's GuaranteedUpdate),
over a real etcd: a transform that loses a race is run again on the current object (so
unconditional updates and patches keep both writers' changes), one that names a resourceVersion
is a Conflict once the object moved, a dry run answers without writing, and `create_missing`
creates (server-side apply's create) and then updates.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import Message

from apiserver.requestcontext import RequestContext
from apiserver.resources import ResourceStore
from tests.integration.conftest import RunningAPIServer
from tinykube.errors import ConflictError, NotFoundError
from tinykube.kinds import CONFIG_MAP
from tinykube.v1 import configmap_pb2, meta_pb2

pytestmark = pytest.mark.integration


def _store(apiserver: RunningAPIServer) -> ResourceStore:
    return apiserver.server.services[CONFIG_MAP.kind]


async def _create(store: ResourceStore, name: str, **data: str) -> Any:
    cm = configmap_pb2.ConfigMap(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="default"), data=data
    )
    return await store.create(configmap_pb2.CreateConfigMapRequest(configMap=cm))


async def _stored(store: ResourceStore, name: str) -> Any:
    return await store.get(meta_pb2.GetRequest(namespace="default", name=name))


def _with(old: Message | None, **data: str) -> configmap_pb2.ConfigMap:
    new = configmap_pb2.ConfigMap()
    if old is not None:
        new.CopyFrom(old)  # type: ignore[arg-type]
    new.data.update(data)
    return new


async def test_a_transform_that_lost_a_race_runs_again_on_the_current_object(
    apiserver: RunningAPIServer,
) -> None:
    store = _store(apiserver)
    await _create(store, "raced", first="1")
    seen: list[dict[str, str]] = []

    async def transform(old: Message | None) -> Message:
        assert old is not None
        seen.append(dict(old.data))  # type: ignore[attr-defined]
        if len(seen) == 1:
            # Another writer gets in between this read and its compare-and-swap.
            theirs = _with(await _stored(store, "raced"), other="2")
            await store.update(configmap_pb2.UpdateConfigMapRequest(configMap=theirs))
        new = _with(old, mine="3")
        new.metadata.resourceVersion = ""  # unconditional, as a patch that names none
        return new

    new, created = await store.guaranteed_update("default", "raced", transform)
    assert not created
    assert len(seen) == 2 and seen[1] == {"first": "1", "other": "2"}
    stored = await _stored(store, "raced")
    assert dict(stored.data) == {"first": "1", "other": "2", "mine": "3"}
    assert new.metadata.resourceVersion == stored.metadata.resourceVersion  # type: ignore[attr-defined]


async def test_a_transform_naming_a_stale_resource_version_is_a_conflict(
    apiserver: RunningAPIServer,
) -> None:
    store = _store(apiserver)
    first = await _create(store, "pinned", a="1")
    moved: Any = await store.update(
        configmap_pb2.UpdateConfigMapRequest(configMap=_with(first, b="2"))
    )

    async def transform(old: Message | None) -> Message:
        new = _with(old, c="3")
        new.metadata.resourceVersion = first.metadata.resourceVersion
        return new

    with pytest.raises(ConflictError, match="the object has been modified"):
        await store.guaranteed_update("default", "pinned", transform)
    stored = await _stored(store, "pinned")
    assert stored.metadata.resourceVersion == moved.metadata.resourceVersion


async def test_a_dry_run_update_answers_the_new_object_and_writes_nothing(
    apiserver: RunningAPIServer,
) -> None:
    store = _store(apiserver)
    created = await _create(store, "dry", a="1")

    async def transform(old: Message | None) -> Message:
        return _with(old, b="2")

    ctx = RequestContext(dry_run=True, field_manager="tester")
    new, _ = await store.guaranteed_update("default", "dry", transform, ctx)
    assert dict(new.data) == {"a": "1", "b": "2"}  # type: ignore[attr-defined]
    assert new.metadata.resourceVersion == created.metadata.resourceVersion  # type: ignore[attr-defined]
    assert [m.manager for m in new.metadata.managedFields] == ["tester"]  # type: ignore[attr-defined]
    stored = await _stored(store, "dry")
    assert dict(stored.data) == {"a": "1"}
    assert stored.metadata.resourceVersion == created.metadata.resourceVersion


async def test_create_missing_creates_then_updates(apiserver: RunningAPIServer) -> None:
    store = _store(apiserver)

    async def transform(old: Message | None) -> Message:
        new = _with(old, n=str(len(old.data) if old is not None else 0))  # type: ignore[attr-defined]
        new.metadata.name, new.metadata.namespace = "applied", "default"
        return new

    with pytest.raises(NotFoundError):
        await store.guaranteed_update("default", "applied", transform)
    obj, created = await store.guaranteed_update(
        "default", "applied", transform, create_missing=True
    )
    assert created and dict(obj.data) == {"n": "0"}  # type: ignore[attr-defined]
    obj, created = await store.guaranteed_update(
        "default", "applied", transform, create_missing=True
    )
    assert not created and dict(obj.data) == {"n": "1"}  # type: ignore[attr-defined]
