"""The watch-based ConfigMap/Secret cache of the kubelet's volumes (kubelet/objectcache.py):
one single-object watch per referenced object, shared by the pods using it, stopped with the
last one; changes wake those pods; the volume manager reads from it instead of GETs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelet.objectcache import ObjectCache
from kubelet.volumes import VolumeManager
from tinykube.v1 import configmap_pb2, meta_pb2, pod_pb2, secret_pb2


@dataclass
class Event:
    type: str
    object: Any


class FakeKind:
    """list/watch/get of one kind, recording the calls."""

    def __init__(self, cls: type[Any], list_cls: type[Any]) -> None:
        self.cls = cls
        self.list_cls = list_cls
        self.objects: dict[tuple[str, str], Any] = {}
        self.queues: list[tuple[str, asyncio.Queue[Event]]] = []
        self.rv = 0
        self.calls: list[str] = []

    def put(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.rv += 1
        obj = self.cls(metadata=meta_pb2.ObjectMeta(
            name=name, namespace=namespace, resourceVersion=str(self.rv)
        ))  # fmt: skip
        for k, v in data.items():
            obj.data[k] = v if self.cls is configmap_pb2.ConfigMap else v.encode()
        kind = "MODIFIED" if (namespace, name) in self.objects else "ADDED"
        self.objects[(namespace, name)] = obj
        for selector, queue in self.queues:
            if selector == f"metadata.name={name}":
                queue.put_nowait(Event(kind, obj))

    async def list(self, namespace: str = "", *, field_selector: str = "", **_: Any) -> Any:
        self.calls.append(f"list {namespace} {field_selector}")
        name = field_selector.removeprefix("metadata.name=")
        out = self.list_cls()
        out.metadata.resourceVersion = str(self.rv)
        if (namespace, name) in self.objects:
            out.items.append(self.objects[(namespace, name)])
        return out

    async def watch(
        self, namespace: str = "", *, field_selector: str = "", **_: Any
    ) -> AsyncIterator[Event]:
        self.calls.append(f"watch {namespace} {field_selector}")
        queue: asyncio.Queue[Event] = asyncio.Queue()
        entry = (field_selector, queue)
        self.queues.append(entry)
        try:
            while True:
                yield await queue.get()
        finally:
            self.queues.remove(entry)

    async def get(self, name: str, namespace: str = "") -> Any:
        self.calls.append(f"get {namespace}/{name}")
        return self.objects[(namespace, name)]


class FakeAPI:
    def __init__(self) -> None:
        self.config_maps = FakeKind(configmap_pb2.ConfigMap, configmap_pb2.ConfigMapList)
        self.secrets = FakeKind(secret_pb2.Secret, secret_pb2.SecretList)
        self.config_maps.info = self.secrets.info = type("Info", (), {"plural": "x"})()  # type: ignore[attr-defined]


def pod(uid: str, *, cm: str = "cfg", secret: str = "") -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.uid = uid
    p.metadata.name = uid
    p.metadata.namespace = "ns"
    p.spec.volumes.add(name="cfg").configMap.name = cm
    if secret:
        p.spec.volumes.add(name="sec").secret.secretName = secret
    return p


async def until(check: Any) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def test_one_watch_per_object_shared_and_released() -> None:
    api = FakeAPI()
    api.config_maps.put("ns", "cfg", {"k": "v1"})
    woken: list[set[str]] = []
    cache = ObjectCache(api, on_change=woken.append)
    cache.register(pod("a", secret="s"))
    cache.register(pod("b"))
    assert cache.watched() == [("configmaps", "ns", "cfg"), ("secrets", "ns", "s")]
    await until(lambda: cache.get(("configmaps", "ns", "cfg"))[0])
    synced, obj = cache.get(("configmaps", "ns", "cfg"))
    assert synced and obj.data["k"] == "v1"
    await until(lambda: cache.get(("secrets", "ns", "s"))[0])
    assert cache.get(("secrets", "ns", "s")) == (True, None)  # watched, does not exist
    woken.clear()
    api.config_maps.put("ns", "cfg", {"k": "v2"})
    await until(lambda: woken)
    assert woken == [{"a", "b"}]
    assert cache.get(("configmaps", "ns", "cfg"))[1].data["k"] == "v2"
    # One list and one watch per object, whatever the number of pods.
    assert [c for c in api.config_maps.calls if c.startswith("watch")] == [
        "watch ns metadata.name=cfg"
    ]
    cache.unregister("a")
    assert cache.watched() == [("configmaps", "ns", "cfg")]
    cache.unregister("b")
    assert cache.watched() == []
    await until(lambda: not api.config_maps.queues)
    await cache.close()


async def test_volumes_are_rewritten_from_the_cache_without_gets(tmp_path: Path) -> None:
    api = FakeAPI()
    api.config_maps.put("ns", "cfg", {"greeting": "hi"})
    volumes = VolumeManager(tmp_path, resync=3600.0)
    volumes.api = api  # type: ignore[assignment]
    volumes.cache = ObjectCache(api)
    p = pod("a")
    paths = await volumes.setup(p)  # not synced yet: a GET
    assert (paths["cfg"] / "greeting").read_text() == "hi"
    await until(
        lambda: volumes.cache is not None and volumes.cache.get(("configmaps", "ns", "cfg"))[0]
    )
    api.config_maps.put("ns", "cfg", {"greeting": "yo"})
    await until(
        lambda: (
            volumes.cache is not None
            and volumes.cache.get(("configmaps", "ns", "cfg"))[1].data["greeting"] == "yo"
        )
    )
    gets = [c for c in api.config_maps.calls if c.startswith("get")]
    # Well before the hour's resync: the cache changed, so the files are rewritten.
    await volumes.setup(p)
    assert (paths["cfg"] / "greeting").read_text() == "yo"
    assert [c for c in api.config_maps.calls if c.startswith("get")] == gets
    volumes.teardown("a")
    assert volumes.cache is not None and volumes.cache.watched() == []
    await volumes.cache.close()
