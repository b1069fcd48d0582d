"""Informer logic against a fake list/watch source: sync, handlers, indexes, resume, relist."""

from __future__ import annotations

import asyncio
import tokenize
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tinykube.clock import FakeClock
from tinykube.errors import ResourceExpiredError, UnavailableError
from tinykube.informer import (
    SMALL_BUCKET,
    Informer,
    InformerFactory,
    Store,
    meta_namespace_key,
    without_managed_fields,
)
from tinykube.v1 import meta_pb2, pod_pb2


def pod(name: str, node: str = "", namespace: str = "default", rv: int = 0) -> pod_pb2.Pod:
    p = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace))
    p.spec.nodeName = node
    p.metadata.resourceVersion = str(rv)
    return p


class FakeSource:
    """An in-memory apiserver for one kind: revisions, an event log, drops and compaction."""

    def __init__(self) -> None:
        self.rev = 100
        self.objects: dict[str, pod_pb2.Pod] = {}
        self.log: list[pod_pb2.PodWatchEvent] = []
        self.compacted = 0  # watches from a revision below this get OUT_OF_RANGE
        self.changed = asyncio.Event()
        self.drop_streams = 0  # bumped to fail every open stream with UNAVAILABLE
        self.open_streams = 0
        self.watch_from: list[str] = []
        self.fail_lists = 0

    def _emit(self, kind: str, obj: pod_pb2.Pod) -> None:
        self.log.append(pod_pb2.PodWatchEvent(type=kind, object=obj))
        self.changed.set()
        self.changed = asyncio.Event()

    def put(self, p: pod_pb2.Pod) -> pod_pb2.Pod:
        self.rev += 1
        p = pod_pb2.Pod(metadata=p.metadata, spec=p.spec)
        p.metadata.resourceVersion = str(self.rev)
        key = meta_namespace_key(p)
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = p
        self._emit(kind, p)
        return p

    def delete(self, key: str) -> None:
        self.rev += 1
        old = self.objects.pop(key)
        gone = pod_pb2.Pod()
        gone.CopyFrom(old)
        gone.metadata.resourceVersion = str(self.rev)
        self._emit("DELETED", gone)

    def bookmark(self) -> None:
        self.rev += 1
        mark = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(resourceVersion=str(self.rev)))
        self._emit("BOOKMARK", mark)

    def compact(self) -> None:
        self.compacted = self.rev

    def drop(self) -> None:
        self.drop_streams += 1
        self.changed.set()
        self.changed = asyncio.Event()

    async def list(self) -> pod_pb2.PodList:
        if self.fail_lists:
            self.fail_lists -= 1
            raise UnavailableError("apiserver is down")
        result = pod_pb2.PodList(items=list(self.objects.values()))
        result.metadata.resourceVersion = str(self.rev)
        return result

    async def watch(self, rv: str) -> AsyncIterator[pod_pb2.PodWatchEvent]:
        self.watch_from.append(rv)
        start = int(rv or 0)
        if start < self.compacted:
            raise ResourceExpiredError(f"too old resource version: {start} ({self.compacted})")
        generation = self.drop_streams
        self.open_streams += 1
        try:
            while True:
                for event in list(self.log):
                    if int(event.object.metadata.resourceVersion) > start:
                        start = int(event.object.metadata.resourceVersion)
                        yield event
                if self.drop_streams != generation:
                    raise UnavailableError("stream dropped")
                await self.changed.wait()
        finally:
            self.open_streams -= 1


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def add(self, p: pod_pb2.Pod) -> None:
        self.seen.append(("add", meta_namespace_key(p), p.metadata.resourceVersion))

    def update(self, old: pod_pb2.Pod, new: pod_pb2.Pod) -> None:
        self.seen.append(("update", meta_namespace_key(new), new.metadata.resourceVersion))

    def delete(self, p: pod_pb2.Pod) -> None:
        self.seen.append(("delete", meta_namespace_key(p), p.metadata.resourceVersion))


async def until(cond: Callable[[], bool], clock: FakeClock, steps: int = 400) -> None:
    for _ in range(steps):
        if cond():
            return
        await asyncio.sleep(0)
        clock.advance(0.05)
    raise AssertionError("condition not reached")


def make(source: FakeSource) -> tuple[Informer[pod_pb2.Pod], Recorder, FakeClock]:
    clock = FakeClock()
    informer: Informer[pod_pb2.Pod] = Informer(source.list, source.watch, clock=clock, name="pods")
    rec = Recorder()
    informer.add_handler(rec.add, rec.update, rec.delete)
    return informer, rec, clock


def snapshot(informer: Informer[pod_pb2.Pod]) -> dict[str, str]:
    return {k: informer.store.get(k).metadata.resourceVersion for k in informer.store}  # type: ignore[union-attr]


def truth(source: FakeSource) -> dict[str, str]:
    return {k: p.metadata.resourceVersion for k, p in source.objects.items()}


@pytest.fixture
async def running() -> AsyncIterator[tuple[FakeSource, Informer[pod_pb2.Pod], Recorder, FakeClock]]:
    source = FakeSource()
    source.put(pod("a", "n1"))
    source.put(pod("b", "n2"))
    informer, rec, clock = make(source)
    informer.add_index("node", lambda p: p.spec.nodeName or None)
    task = informer.start()
    await until(informer.has_synced, clock)
    yield source, informer, rec, clock
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_initial_list_syncs_store_and_handlers(running: Any) -> None:
    source, informer, rec, clock = running
    assert informer.has_synced()
    await asyncio.wait_for(informer.wait_synced(), 1)
    assert sorted(rec.seen) == [("add", "default/a", "101"), ("add", "default/b", "102")]
    assert snapshot(informer) == truth(source)
    assert informer.last_resource_version == "102"
    assert [p.metadata.name for p in informer.store.by_index("node", "n1")] == ["a"]
    await until(lambda: source.open_streams == 1, clock)
    assert source.watch_from == ["102"]


async def test_watch_events_reach_store_index_and_handlers(running: Any) -> None:
    source, informer, rec, clock = running
    rec.seen.clear()
    source.put(pod("c"))  # unassigned: in no node bucket
    source.put(pod("a", "n2"))  # moves to n2
    source.delete("default/b")
    await until(lambda: len(rec.seen) == 3, clock)
    assert rec.seen == [
        ("add", "default/c", "103"),
        ("update", "default/a", "104"),
        ("delete", "default/b", "105"),
    ]
    assert snapshot(informer) == truth(source)
    assert informer.store.by_index("node", "n1") == []
    assert [p.metadata.name for p in informer.store.by_index("node", "n2")] == ["a"]
    assert informer.store.index_values("node") == ["n2"]
    assert informer.last_resource_version == "105"


async def test_dropped_stream_resumes_without_relist_or_lost_events(running: Any) -> None:
    source, informer, rec, clock = running
    await until(lambda: source.open_streams == 1, clock)
    rec.seen.clear()
    source.put(pod("c"))
    await until(lambda: len(rec.seen) == 1, clock)
    source.drop()
    # Changes made while no stream is open must arrive exactly once after the resume.
    await until(lambda: source.open_streams == 0, clock)
    source.put(pod("d"))
    source.put(pod("c", "n1"))
    source.delete("default/a")
    await until(lambda: len(rec.seen) == 4, clock)
    for _ in range(20):
        await asyncio.sleep(0)
    assert rec.seen == [
        ("add", "default/c", "103"),
        ("add", "default/d", "104"),
        ("update", "default/c", "105"),
        ("delete", "default/a", "106"),
    ]
    assert informer.lists == 1
    assert source.watch_from == ["102", "103"]
    assert snapshot(informer) == truth(source)


async def test_out_of_range_relists_and_emits_the_difference(running: Any) -> None:
    source, informer, rec, clock = running
    await until(lambda: source.open_streams == 1, clock)
    source.drop()
    await until(lambda: source.open_streams == 0, clock)
    rec.seen.clear()
    source.put(pod("c", "n1"))  # created meanwhile
    source.put(pod("a", "n3"))  # updated meanwhile
    source.delete("default/b")  # deleted meanwhile
    source.compact()
    await until(lambda: informer.lists == 2 and source.open_streams == 1, clock)
    assert sorted(rec.seen) == [
        ("add", "default/c", "103"),
        ("delete", "default/b", "102"),
        ("update", "default/a", "104"),
    ]
    assert snapshot(informer) == truth(source)
    assert [p.metadata.name for p in informer.store.by_index("node", "n3")] == ["a"]
    assert informer.store.by_index("node", "n2") == []
    assert source.watch_from[-1] == "105"
    source.put(pod("e"))
    await until(lambda: "default/e" in informer.store, clock)


async def test_relist_skips_unchanged_objects(running: Any) -> None:
    source, informer, rec, _ = running
    rec.seen.clear()
    informer.replace(list(source.objects.values()), str(source.rev))
    assert rec.seen == []


async def test_bookmark_only_advances_resource_version(running: Any) -> None:
    source, informer, rec, clock = running
    rec.seen.clear()
    before = snapshot(informer)
    source.bookmark()
    await until(lambda: informer.last_resource_version == "103", clock)
    assert rec.seen == []
    assert snapshot(informer) == before


async def test_handler_exception_is_logged_and_informer_continues(
    running: Any, caplog: pytest.LogCaptureFixture
) -> None:
    source, informer, rec, clock = running

    def boom(p: pod_pb2.Pod) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(on_add=boom)
    source.put(pod("c"))
    source.put(pod("d"))
    await until(lambda: ("add", "default/d", "104") in rec.seen, clock)
    # The other handler still ran; the store does not hold what a handler refused (a and b,
    # replayed to the late handler, were already shared with the first one: they stay).
    assert "default/d" not in informer.store and "default/a" in informer.store
    assert informer.handler_errors == 4
    assert "handler bug" in caplog.text and "default/d" in caplog.text
    source.put(pod("e"))  # and the informer goes on
    await until(lambda: ("add", "default/e", "105") in rec.seen, clock)


class Picky:
    """A handler that refuses pods labelled bad=yes (as the scheduler refuses a node it cannot
    account), on add, update and delete."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def check(self, p: pod_pb2.Pod) -> None:
        if p.metadata.labels.get("bad") == "yes":
            raise ValueError(f"cannot digest {p.metadata.name}")

    def update(self, old: pod_pb2.Pod, new: pod_pb2.Pod) -> None:
        self.check(new)

    def report(self, p: pod_pb2.Pod, exc: Exception) -> None:
        self.errors.append((meta_namespace_key(p), str(exc)))


def _labelled(name: str, rv: int, **labels: str) -> pod_pb2.Pod:
    p = pod(name, rv=rv)
    p.metadata.labels.update(labels)
    return p


def _event(kind: str, p: pod_pb2.Pod) -> pod_pb2.PodWatchEvent:
    return pod_pb2.PodWatchEvent(type=kind, object=p)


@pytest.mark.parametrize(
    ("events", "stored", "errors"),
    [
        # a refused add leaves no trace in the store
        ([("ADDED", _labelled("x", 1, bad="yes"))], {}, 1),
        # a refused update keeps the previous object
        ([("ADDED", _labelled("x", 1)), ("MODIFIED", _labelled("x", 2, bad="yes"))], {"x": "1"}, 1),
        # a refused delete keeps the object (a relist offers the delete again)
        (
            [("ADDED", _labelled("x", 1, bad="no")), ("DELETED", _labelled("x", 2, bad="yes"))],
            {"x": "1"},
            1,
        ),
        # the next event for a refused object is offered as an add again, and taken
        ([("ADDED", _labelled("x", 1, bad="yes")), ("MODIFIED", _labelled("x", 2))], {"x": "2"}, 1),
        ([("ADDED", _labelled("x", 1)), ("ADDED", _labelled("y", 2))], {"x": "1", "y": "2"}, 0),
    ],
)
def test_a_refused_event_leaves_the_store_as_it_was(
    events: list[tuple[str, pod_pb2.Pod]], stored: dict[str, str], errors: int
) -> None:
    picky, rec = Picky(), Recorder()
    informer: Informer[pod_pb2.Pod] = Informer(
        FakeSource().list, FakeSource().watch, clock=FakeClock(), on_handler_error=picky.report
    )
    informer.add_handler(picky.check, picky.update, picky.check)
    informer.add_handler(rec.add, rec.update, rec.delete)
    for kind, obj in events:
        informer.apply(_event(kind, obj))
    assert {k.split("/")[1]: v for k, v in snapshot(informer).items()} == stored
    assert informer.handler_errors == len(picky.errors) == errors
    assert len(rec.seen) == len(events)  # every other handler saw every event
    assert all(key == "default/x" and "cannot digest x" in msg for key, msg in picky.errors)
    assert informer.last_resource_version == events[-1][1].metadata.resourceVersion


def test_relist_offers_a_refused_object_again_and_keeps_it_out_until_taken() -> None:
    picky = Picky()
    informer: Informer[pod_pb2.Pod] = Informer(
        FakeSource().list, FakeSource().watch, clock=FakeClock(), on_handler_error=picky.report
    )
    informer.add_handler(picky.check, picky.update, picky.check)
    informer.replace([_labelled("x", 1, bad="yes"), _labelled("y", 2)], "2")
    assert sorted(informer.store.keys()) == ["default/y"]
    informer.replace([_labelled("x", 1, bad="yes"), _labelled("y", 2)], "2")
    assert sorted(informer.store.keys()) == ["default/y"] and len(picky.errors) == 2
    informer.replace([_labelled("x", 3), _labelled("y", 4, bad="yes")], "4")
    assert snapshot(informer) == {"default/x": "3", "default/y": "2"}


async def test_handler_added_after_sync_gets_existing_objects(running: Any) -> None:
    _, informer, _, _ = running
    late = Recorder()
    informer.add_handler(late.add)
    assert sorted(k for _, k, _ in late.seen) == ["default/a", "default/b"]


async def test_list_failure_backs_off_then_syncs() -> None:
    source = FakeSource()
    source.put(pod("a"))
    source.fail_lists = 2
    informer, rec, clock = make(source)
    task = informer.start()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not informer.has_synced()
    await until(informer.has_synced, clock)
    assert rec.seen == [("add", "default/a", "101")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_store_indexes_accept_str_iterable_or_none() -> None:
    store: Store[pod_pb2.Pod] = Store()
    store._put("default/a", pod("a", "n1"))
    store.add_index("node", lambda p: p.spec.nodeName)
    store.add_index("both", lambda p: [p.spec.nodeName, p.metadata.namespace])
    store.add_index("none", lambda p: None)
    assert [p.metadata.name for p in store.by_index("node", "n1")] == ["a"]
    assert store.by_index("node", "n") == []  # a str is one value, not its letters
    assert [p.metadata.name for p in store.by_index("both", "default")] == ["a"]
    assert store.index_values("none") == []
    store._put("default/a", pod("a", "n2"))
    assert store.index_keys("node", "n2") == ["default/a"]
    assert store.index_keys("both", "n1") == []
    store._remove("default/a")
    assert store.index_values("both") == []
    with pytest.raises(ValueError):
        store.add_index("node", lambda p: None)
    assert store.get_by_name("a", "default") is None
    assert meta_namespace_key(pod("x", namespace="")) == "x"


# ---- the shared informer factory --------------------------------------------------------------


class FactoryResource:
    """A ResourceClient stand-in: lists what it holds, then a watch that waits forever."""

    def __init__(self, plural: str, items: list[pod_pb2.Pod]) -> None:
        self.info = type("Info", (), {"plural": plural})()
        self.items = items
        self.lists: list[tuple[str, str, str]] = []
        self.release = asyncio.Event()

    async def list(
        self, namespace: str = "", *, label_selector: str = "", field_selector: str = ""
    ) -> Any:
        self.lists.append((namespace, label_selector, field_selector))
        await self.release.wait()
        listed = pod_pb2.PodList(items=self.items)
        listed.metadata.resourceVersion = "7"
        return listed

    async def watch(self, namespace: str = "", **kwargs: Any) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield  # pragma: no cover


class FactoryClient:
    def __init__(self) -> None:
        self.by_kind = {
            "Pod": FactoryResource("pods", [pod("a"), pod("b")]),
            "Node": FactoryResource("nodes", []),
        }

    def resource(self, kind: Any) -> Any:
        return self.by_kind[kind]


async def test_the_factory_makes_one_informer_per_kind_and_selectors() -> None:
    client = FactoryClient()
    factory = InformerFactory(client, clock=FakeClock())
    pods = factory.for_kind("Pod")
    assert factory.for_kind("Pod") is pods
    narrowed = factory.for_kind("Pod", namespace="default", field_selector="spec.nodeName=n1")
    assert narrowed is not pods
    assert (pods.name, narrowed.name) == ("pods", "pods/default/spec.nodeName=n1")
    assert factory.informers == [pods, narrowed]


async def test_the_factory_starts_each_informer_once_and_waits_for_the_started_ones() -> None:
    client = FactoryClient()
    refused: list[str] = []
    factory = InformerFactory(
        client, clock=FakeClock(), on_handler_error=lambda obj, exc: refused.append(str(exc))
    )
    pods = factory.for_kind("Pod")
    seen: list[str] = []

    def on_add(p: pod_pb2.Pod) -> None:
        if p.metadata.name == "b":
            raise ValueError("cannot take b")
        seen.append(p.metadata.name)

    pods.add_handler(on_add)
    factory.start()
    factory.start()
    syncing = asyncio.ensure_future(factory.wait_for_cache_sync())
    await asyncio.sleep(0)
    assert not syncing.done()  # the list has not answered yet
    client.by_kind["Pod"].release.set()
    await asyncio.wait_for(syncing, 5)
    assert client.by_kind["Pod"].lists == [("", "", "")]  # one list: started once
    assert (seen, refused) == (["a"], ["cannot take b"])  # the factory's error hook is used
    # Asked for after start: runs at the next start(), and only then is waited for.
    nodes = factory.for_kind("Node")
    await factory.wait_for_cache_sync()
    assert not nodes.has_synced()
    client.by_kind["Node"].release.set()
    factory.start()
    await asyncio.wait_for(factory.wait_for_cache_sync(), 5)
    assert nodes.has_synced()
    await factory.shutdown()
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("informer-")]


# ---- transforms (client-go's SetTransform) --------------------------------------------------


def managed_pod(name: str, rv: int) -> pod_pb2.Pod:
    """A pod as a REST client's writes leave it: labels, a spec, a status, managedFields."""
    p = pod(name, "n1", rv=rv)
    p.metadata.uid = f"uid-{name}"
    p.metadata.labels["app"] = "web"
    p.metadata.ownerReferences.add(kind="ReplicaSet", name="web-1", uid="rs-uid", controller=True)
    p.spec.containers.add(name="app", image="nginx").resources.requests["cpu"] = "10m"
    p.status.phase = "Running"
    p.status.conditions.add(type="Ready", status="True")
    for manager, subresource in (("kubectl", ""), ("kubelet", "status")):
        entry = p.metadata.managedFields.add(
            manager=manager, operation="Update", apiVersion="v1", subresource=subresource
        )
        entry.fieldsType = "FieldsV1"
    return p


def without_managed(p: pod_pb2.Pod) -> pod_pb2.Pod:
    out = pod_pb2.Pod()
    out.CopyFrom(p)
    del out.metadata.managedFields[:]
    return out


def event_batch(*events: tuple[str, pod_pb2.Pod]) -> pod_pb2.PodWatchEventBatch:
    """A WatchBatch message decoded as the client gets it: its events share its arena."""
    batch = pod_pb2.PodWatchEventBatch()
    for kind, obj in events:
        batch.events.add(type=kind, object=obj)
    return pod_pb2.PodWatchEventBatch.FromString(batch.SerializeToString())


def test_the_store_keeps_a_copy_of_its_own_not_the_decoded_message() -> None:
    # A pod taken by reference from a WatchBatch kept the whole message (every other event in
    # it) alive; the default transform copies it out. Handlers see the stored copy.
    informer: Informer[pod_pb2.Pod] = Informer(FakeSource().list, FakeSource().watch)
    seen: list[pod_pb2.Pod] = []
    informer.add_handler(seen.append, lambda old, new: seen.append(new))
    batch = event_batch(("ADDED", pod("a", rv=1)), ("ADDED", pod("b", rv=2)))
    for event in batch.events:
        informer.apply(event)
    stored = informer.store.get("default/a")
    assert stored is not None and stored is not batch.events[0].object
    assert stored == batch.events[0].object
    assert [p.metadata.name for p in seen] == ["a", "b"]
    assert seen[0] is stored
    listed = pod_pb2.PodList(items=[pod("a", rv=1), pod("c", rv=3)])
    informer.replace(listed.items, "3")
    kept = informer.store.get("default/c")
    assert kept is not None and kept is not listed.items[1] and kept == listed.items[1]
    # Unchanged objects are not copied again on a relist.
    assert informer.store.get("default/a") is stored


def test_without_managed_fields_drops_only_managed_fields_everywhere() -> None:
    # kube-scheduler's and kube-controller-manager's transform: the store, the indexes and
    # every handler see the object without metadata.managedFields and otherwise unchanged.
    informer: Informer[pod_pb2.Pod] = Informer(
        FakeSource().list, FakeSource().watch, transform=without_managed_fields
    )
    informer.add_index("app", lambda p: p.metadata.labels.get("app"))
    seen: list[tuple[str, pod_pb2.Pod]] = []
    informer.add_handler(
        lambda p: seen.append(("add", p)),
        lambda old, new: seen.extend([("old", old), ("new", new)]),
        lambda p: seen.append(("delete", p)),
    )
    listed = pod_pb2.PodList(items=[managed_pod("a", 1)])
    informer.replace(listed.items, "1")
    informer.apply(pod_pb2.PodWatchEvent(type="MODIFIED", object=managed_pod("a", 2)))
    informer.apply(pod_pb2.PodWatchEvent(type="ADDED", object=managed_pod("b", 3)))
    informer.apply(pod_pb2.PodWatchEvent(type="DELETED", object=managed_pod("b", 4)))
    assert [what for what, _ in seen] == ["add", "old", "new", "add", "delete"]
    for _, p in seen:
        assert not p.metadata.managedFields
    assert informer.store.get("default/a") == without_managed(managed_pod("a", 2))
    assert [p.metadata.name for p in informer.store.by_index("app", "web")] == ["a"]


def test_no_transform_keeps_the_objects_given() -> None:
    informer: Informer[pod_pb2.Pod] = Informer(
        FakeSource().list, FakeSource().watch, transform=None
    )
    given = managed_pod("a", 1)
    informer.apply(pod_pb2.PodWatchEvent(type="ADDED", object=given))
    assert informer.store.get("default/a") == given


def test_the_factory_gives_every_informer_its_transform() -> None:
    class Resources:
        def resource(self, kind: Any) -> Any:
            return type("R", (), {"info": kind})()

    class Kind:
        plural = "pods"

    factory = InformerFactory(Resources(), transform=without_managed_fields)
    informer = factory.for_kind(Kind())
    informer.apply(pod_pb2.PodWatchEvent(type="ADDED", object=managed_pod("a", 1)))
    stored = informer.store.get("default/a")
    assert stored is not None and not stored.metadata.managedFields


def test_nothing_in_the_processes_that_strip_managed_fields_reads_them() -> None:
    # The scheduler's and the controller manager's informers drop managedFields: code of theirs
    # that read them (an attribute, or the field named in a string: HasField, ClearField,
    # getattr) would silently see none. Comments and docstrings may name them.
    root = Path(__file__).resolve().parents[2]
    readers = []
    for package in ("scheduler", "controller"):
        for path in sorted((root / package).rglob("*.py")):
            with tokenize.open(path) as f:
                for tok in tokenize.generate_tokens(f.readline):
                    named = tok.type == tokenize.NAME and tok.string == "managedFields"
                    quoted = tok.type == tokenize.STRING and tok.string.strip("\"'") == (
                        "managedFields"
                    )
                    if named or quoted:
                        readers.append(f"{path.relative_to(root)}:{tok.start[0]}")
    assert readers == []


def test_index_buckets_small_and_large_hold_each_key_once() -> None:
    # Buckets are lists up to SMALL_BUCKET keys and sets beyond: both answer the same.
    informer: Informer[pod_pb2.Pod] = Informer(FakeSource().list, FakeSource().watch)
    informer.add_index("node", lambda p: p.spec.nodeName or None)
    names = [f"p{i}" for i in range(SMALL_BUCKET + 8)]
    for rv, name in enumerate(names, 1):
        informer.apply(pod_pb2.PodWatchEvent(type="ADDED", object=pod(name, "big", rv=rv)))
        # an update that keeps the value must not add the key twice
        informer.apply(pod_pb2.PodWatchEvent(type="MODIFIED", object=pod(name, "big", rv=rv)))
    informer.apply(pod_pb2.PodWatchEvent(type="ADDED", object=pod("lone", "small", rv=99)))
    assert sorted(informer.store.index_keys("node", "big")) == sorted(f"default/{n}" for n in names)
    for name in names[:-1]:
        informer.apply(pod_pb2.PodWatchEvent(type="MODIFIED", object=pod(name, "small", rv=100)))
    assert informer.store.index_keys("node", "big") == [f"default/{names[-1]}"]
    assert len(informer.store.by_index("node", "small")) == len(names)
    informer.apply(pod_pb2.PodWatchEvent(type="DELETED", object=pod(names[-1], "big", rv=101)))
    informer.apply(pod_pb2.PodWatchEvent(type="MODIFIED", object=pod("lone", rv=102)))
    assert sorted(informer.store.index_values("node")) == ["small"]
    assert informer.store.by_index("node", "big") == []
