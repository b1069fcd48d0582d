"""The ConfigMaps and Secrets the node's pods mount, kept by watches (kube's watch-based
ConfigMap and Secret managers, pkg/kubelet/util/manager/watch_based_manager.go).

`ObjectCache.register(pod)` (the volume manager calls it at each setup) starts, for each
ConfigMap and Secret the pod's configMap, secret and projected volumes name that nothing watches
yet, a single-object informer: a list and watch of `metadata.name=<name>` in the pod's namespace
(what the node authorizer lets a kubelet read of an object its pods reference). Every pod using
an object counts; `unregister(uid)` drops the pod's references, and an object no pod uses any
more stops being watched. `get` answers from the cache once its informer has synced (None:
it does not exist) and says so, else the caller GETs it as before. Each change of a watched
object calls `on_change` with the uids of the pods that use it, so the kubelet wakes their
workers and their volumes are rewritten at once, instead of the apiserver being polled.

Concurrency: one event loop; informers run as tasks of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tinykube.clock import Clock
from tinykube.informer import Informer
from tinykube.podrefs import Reference, volume_references
from tinykube.v1 import pod_pb2

log = logging.getLogger(__name__)


@dataclass
class _Watch:
    informer: Informer[Any]
    task: asyncio.Task[None]
    users: set[str] = field(default_factory=set)


class ObjectCache:
    def __init__(
        self,
        api: Any,
        *,
        on_change: Callable[[set[str]], object] = lambda uids: None,
        clock: Clock | None = None,
    ) -> None:
        self.api = api
        self.on_change = on_change
        self.clock = clock or Clock()
        self._watches: dict[Reference, _Watch] = {}
        self._pods: dict[str, set[Reference]] = {}

    def register(self, pod: pod_pb2.Pod) -> None:
        uid = pod.metadata.uid
        refs = volume_references(pod)
        old = self._pods.get(uid, set())
        if refs == old:
            return
        self._pods[uid] = refs
        for ref in refs - old:
            watch = self._watches.get(ref)
            if watch is None:
                watch = self._watches[ref] = self._start(ref)
            watch.users.add(uid)
        for ref in old - refs:
            self._release(ref, uid)

    def unregister(self, uid: str) -> None:
        for ref in self._pods.pop(uid, set()):
            self._release(ref, uid)

    def get(self, ref: Reference) -> tuple[bool, Any]:
        """(synced, object or None): not synced means ask the apiserver."""
        watch = self._watches.get(ref)
        if watch is None or not watch.informer.has_synced():
            return False, None
        return True, watch.informer.store.get_by_name(ref[2], ref[1])

    def watched(self) -> list[Reference]:
        return sorted(self._watches)

    async def close(self) -> None:
        watches = list(self._watches.values())
        self._watches.clear()
        self._pods.clear()
        for watch in watches:
            watch.task.cancel()
        for watch in watches:
            with contextlib.suppress(asyncio.CancelledError):
                await watch.task

    def _start(self, ref: Reference) -> _Watch:
        resource, namespace, name = ref
        client = self.api.config_maps if resource == "configmaps" else self.api.secrets
        informer: Informer[Any] = Informer.for_resource(
            client,
            namespace=namespace,
            field_selector=f"metadata.name={name}",
            clock=self.clock,
            name=f"{resource}/{namespace}/{name}",
        )

        def changed(*_objs: Any) -> None:
            watch = self._watches.get(ref)
            if watch is not None and watch.users:
                self.on_change(set(watch.users))

        informer.add_handler(changed, changed, changed)
        log.debug("watching %s %s/%s", resource, namespace, name)
        return _Watch(informer, informer.start())

    def _release(self, ref: Reference, uid: str) -> None:
        watch = self._watches.get(ref)
        if watch is None:
            return
        watch.users.discard(uid)
        if not watch.users:
            del self._watches[ref]
            watch.task.cancel()
            log.debug("no longer watching %s %s/%s", *ref)
