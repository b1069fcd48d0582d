"""REST watchers on the watch cache: JSON lines with the protobuf path's filter transitions,
each event encoded once and shared (pure: hand-made etcd events, no sockets)."""

from __future__ import annotations

import json

import pytest

from apiserver.metrics import Metrics
from apiserver.registry import INDEX_FIELD, fields_of
from apiserver.rest.codec import KindCodec
from apiserver.storage import EVENT_DELETE, EVENT_PUT, WatchEvent
from apiserver.watchcache import Codec, WatchCache
from tinykube.kinds import POD
from tinykube.selectors import parse_label_selector
from tinykube.v1 import meta_pb2, pod_pb2

PREFIX = b"/registry/pods/"


def make_cache() -> WatchCache:
    cache = WatchCache(
        kind="Pod",
        prefix=PREFIX,
        codec=Codec(pod_pb2.Pod, True, fields_of("Pod"), json=KindCodec(POD)),
        storage=None,  # type: ignore[arg-type]  # nothing here talks to etcd
        metrics=Metrics(),
        window_size=100,
        watcher_queue_size=100,
        bookmark_interval=60,
        wait_timeout=0.1,
        index_field=INDEX_FIELD["Pod"],
    )
    cache.synced.set()
    return cache


def put(name: str, revision: int, **labels: str) -> WatchEvent:
    pod = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=name, namespace="default", labels=labels))
    return WatchEvent(
        EVENT_PUT, PREFIX + f"default/{name}".encode(), pod.SerializeToString(), revision
    )


def delete(name: str, revision: int) -> WatchEvent:
    return WatchEvent(EVENT_DELETE, PREFIX + f"default/{name}".encode(), b"", revision)


def lines(events: list[tuple[bytes, int]]) -> list[tuple[str, str, str]]:
    out = []
    for line, _ in events:
        assert line.endswith(b"\n")
        event = json.loads(line)
        meta = event["object"]["metadata"]
        out.append((event["type"], meta["name"], meta["resourceVersion"]))
    return out


async def test_json_watch_filter_transitions() -> None:
    cache = make_cache()
    w, initial = await cache.watch(
        labels=parse_label_selector("app=web"), resource_version=None, json=True
    )
    assert initial == []
    cache._apply([put("a", 10, app="web"), put("a", 11, app="db"), put("a", 12, app="web")])
    cache._apply([delete("a", 13)])
    assert lines(w.take_events()) == [
        ("ADDED", "a", "10"),
        ("DELETED", "a", "11"),  # left the filter
        ("ADDED", "a", "12"),  # came back
        ("DELETED", "a", "13"),
    ]


async def test_json_replay_and_initial_state() -> None:
    cache = make_cache()
    cache._apply([put("a", 10), put("b", 11), put("a", 12)])
    _, replay = await cache.watch(resource_version=10, json=True)
    assert lines(replay) == [("ADDED", "b", "11"), ("MODIFIED", "a", "12")]
    _, initial = await cache.watch(resource_version=None, json=True)
    assert lines(initial) == [("ADDED", "a", "12"), ("ADDED", "b", "11")]


async def test_one_encoding_shared_by_every_json_watcher() -> None:
    cache = make_cache()
    w1, _ = await cache.watch(resource_version=None, json=True)
    w2, _ = await cache.watch(resource_version=None, json=True)
    proto, _ = await cache.watch(resource_version=None)
    cache._apply([put("a", 10)])
    (line1, _), (line2, _) = w1.take_events()[0], w2.take_events()[0]
    assert line1 is line2
    (raw, _) = proto.take_events()[0]
    assert pod_pb2.PodWatchEvent.FromString(raw).type == "ADDED"  # protobuf watchers unchanged
    cached = cache.state[PREFIX + b"default/a"]
    assert line1.endswith(cache.codec.object_json(cached) + b"}\n")
    # The line is kept by the window's event (bounded by the window's bytes), not by the
    # object: a cached object holds no JSON copy of itself.
    assert cache.window[-1]._main_json is line1
    assert not hasattr(cached, "_json")


async def test_json_watch_needs_an_encoder() -> None:
    cache = make_cache()
    cache.codec.json = None
    with pytest.raises(TypeError):
        await cache.watch(resource_version=None, json=True)
