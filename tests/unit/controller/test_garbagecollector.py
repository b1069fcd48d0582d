"""Garbage collector: background, orphan and foreground propagation over the fake client.

`Env.settle` plays the informers: after each sync it diffs the fake objects and calls the
collector's handlers, so a deletion cascades as it would in the controller manager, and it
records the order in which objects vanish.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from controller.garbagecollector import GarbageCollector
from controller.replicaset import new_controller_ref
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeResource, FakeStore
from tinykube.clock import FakeClock
from tinykube.errors import UnavailableError
from tinykube.v1 import configmap_pb2, meta_pb2, namespace_pb2, pod_pb2, replicaset_pb2


def _copy(obj: Any) -> Any:
    out = type(obj)()
    out.CopyFrom(obj)
    return out


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.client = FakeClient(self.clock)
        self.rs_store = FakeStore(self.client.replica_sets)
        self.pod_store = FakeStore(self.client.pods)
        self.queue = FakeQueue()
        self.gc = GarbageCollector(
            self.client,
            {
                "Pod": self.pod_store,
                "ReplicaSet": self.rs_store,
                "Node": FakeStore(self.client.nodes),
            },
            self.queue,
        )
        self.resources: dict[str, FakeResource[Any]] = {
            "Pod": self.client.pods,
            "ReplicaSet": self.client.replica_sets,
        }
        self.gone: list[str] = []  # "Kind:key" in the order objects vanished
        self._seen = self._snapshot()

    def _snapshot(self) -> dict[str, dict[str, Any]]:
        return {
            kind: {k: _copy(o) for k, o in res.objects.items()}
            for kind, res in self.resources.items()
        }

    def observe(self) -> None:
        """Deliver what changed since the last call to the collector, as informers would."""
        now = self._snapshot()
        for kind, objects in now.items():
            before = self._seen[kind]
            on_add, on_update, on_delete = self.gc.handlers(kind)
            for key, obj in objects.items():
                if key not in before:
                    on_add(obj)
                elif obj != before[key]:
                    on_update(before[key], obj)
            for key, obj in before.items():
                if key not in objects:
                    self.gone.append(f"{kind}:{key}")
                    on_delete(obj)
        self._seen = now

    async def settle(self, limit: int = 200) -> None:
        self.observe()
        for _step in range(limit):
            if not self.queue.added:
                return
            await self.gc.sync(self.queue.added.pop(0))
            self.observe()
        raise AssertionError(f"the collector did not settle: {self.queue.added}")

    async def rs(self, name: str, *owners: replicaset_pb2.ReplicaSet) -> replicaset_pb2.ReplicaSet:
        rs = replicaset_pb2.ReplicaSet()
        rs.metadata.name = name
        rs.metadata.namespace = "default"
        for o in owners:
            rs.metadata.ownerReferences.append(new_controller_ref(o))
        return await self.client.replica_sets.create(rs)

    async def pod(
        self, name: str, *owners: replicaset_pb2.ReplicaSet, block: bool = True
    ) -> pod_pb2.Pod:
        pod = pod_pb2.Pod()
        pod.metadata.name = name
        pod.metadata.namespace = "default"
        for o in owners:
            ref = new_controller_ref(o)
            ref.blockOwnerDeletion = block
            pod.metadata.ownerReferences.append(ref)
        return await self.client.pods.create(pod)

    def pod_owners(self, name: str) -> list[str]:
        pod = self.client.pods.objects[f"default/{name}"]
        return [r.name for r in pod.metadata.ownerReferences]


# ---- background (no finalizer: the owner goes first) ---------------------------------------


async def test_owner_deletion_enqueues_and_deletes_dependents() -> None:
    env = Env()
    rs = await env.rs("web")
    await env.pod("a", rs)
    await env.pod("b", rs)
    await env.pod("free")
    del env.client.replica_sets.objects["default/web"]
    env.gc.on_delete("ReplicaSet", rs)
    assert sorted(env.queue.added) == ["Pod:default/a", "Pod:default/b"]
    for item in list(env.queue.added):
        await env.gc.sync(item)
    assert list(env.client.pods.objects) == ["default/free"]


@pytest.mark.parametrize("policy", ["", "Background"])
async def test_background_deletes_the_owner_then_its_dependents(policy: str) -> None:
    env = Env()
    rs = await env.rs("web")
    await env.pod("a", rs)
    await env.settle()
    await env.client.replica_sets.delete("web", "default", propagation_policy=policy)
    await env.settle()
    assert env.gone == ["ReplicaSet:default/web", "Pod:default/a"]
    # The collector deletes the dependent in the background too, with a uid precondition.
    assert ("delete/Background", "default/a") in env.client.pods.calls


async def test_live_owner_is_confirmed_even_when_the_cache_lags() -> None:
    env = Env()
    env.rs_store.lag()  # the informer has not seen the new ReplicaSet yet
    rs = await env.rs("web")
    await env.pod("a", rs)
    await env.gc.sync("Pod:default/a")
    assert "default/a" in env.client.pods.objects


async def test_owner_recreated_with_another_uid_counts_as_gone() -> None:
    env = Env()
    rs = await env.rs("web")
    await env.pod("a", rs)
    del env.client.replica_sets.objects["default/web"]
    await env.rs("web")  # same name, new uid
    await env.gc.sync("Pod:default/a")
    assert not env.client.pods.objects


async def test_only_dangling_references_are_removed_when_another_owner_lives() -> None:
    env = Env()
    gone = await env.rs("gone")
    alive = await env.rs("alive")
    pod = pod_pb2.Pod()
    pod.metadata.name = "a"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.append(new_controller_ref(gone))
    pod.metadata.ownerReferences.append(
        meta_pb2.OwnerReference(kind="ReplicaSet", name="alive", uid=alive.metadata.uid)
    )
    await env.client.pods.create(pod)
    del env.client.replica_sets.objects["default/gone"]
    await env.gc.sync("Pod:default/a")
    assert env.pod_owners("a") == ["alive"]


async def test_unknown_owner_kinds_never_cause_deletion() -> None:
    env = Env()
    pod = pod_pb2.Pod()
    pod.metadata.name = "a"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.add(kind="Deployment", name="d", uid="u")
    await env.client.pods.create(pod)
    await env.gc.sync("Pod:default/a")
    assert "default/a" in env.client.pods.objects


# ---- orphan ----------------------------------------------------------------------------------


async def test_orphan_strips_the_owner_from_dependents_then_lets_the_owner_go() -> None:
    env = Env()
    web = await env.rs("web")
    other = await env.rs("other")
    await env.pod("a", web)
    await env.pod("b", web)
    await env.pod("c", other)
    await env.settle()
    marked = await env.client.replica_sets.delete("web", "default", propagation_policy="Orphan")
    assert list(marked.metadata.finalizers) == ["orphan"]
    assert marked.metadata.HasField("deletionTimestamp")
    await env.settle()
    assert env.gone == ["ReplicaSet:default/web"]
    assert sorted(env.client.pods.objects) == ["default/a", "default/b", "default/c"]
    assert env.pod_owners("a") == [] and env.pod_owners("b") == []
    assert env.pod_owners("c") == ["other"]


async def test_orphan_keeps_a_dependents_other_owners() -> None:
    env = Env()
    web = await env.rs("web")
    keep = await env.rs("keep")
    await env.pod("a", web, keep)
    await env.settle()
    await env.client.replica_sets.delete("web", "default", propagation_policy="Orphan")
    await env.settle()
    assert env.pod_owners("a") == ["keep"]
    assert "default/web" not in env.client.replica_sets.objects


async def test_orphaning_rereads_a_dependent_that_changed_under_it() -> None:
    env = Env()
    web = await env.rs("web")
    await env.pod("a", web)
    await env.settle()
    await env.client.replica_sets.delete("web", "default", propagation_policy="Orphan")
    env.pod_store.lag()  # the cache keeps the pod as it was
    # Someone else writes the pod: the collector's first update conflicts, it re-reads.
    changed = _copy(env.client.pods.objects["default/a"])
    changed.metadata.labels["x"] = "y"
    changed.metadata.resourceVersion = "999"
    env.client.pods.objects["default/a"] = changed
    await env.gc.sync("ReplicaSet:default/web")
    assert env.client.pods.objects["default/a"].metadata.labels["x"] == "y"
    assert env.pod_owners("a") == []
    assert "default/web" not in env.client.replica_sets.objects


# ---- foreground ------------------------------------------------------------------------------


async def test_foreground_deletes_dependents_before_the_owner() -> None:
    env = Env()
    web = await env.rs("web")
    await env.pod("a", web)
    await env.pod("b", web)
    await env.pod("free")
    await env.settle()
    marked = await env.client.replica_sets.delete("web", "default", propagation_policy="Foreground")
    assert list(marked.metadata.finalizers) == ["foregroundDeletion"]
    await env.settle()
    assert sorted(env.gone[:2]) == ["Pod:default/a", "Pod:default/b"]
    assert env.gone[2:] == ["ReplicaSet:default/web"]
    assert list(env.client.pods.objects) == ["default/free"]


@pytest.mark.parametrize(
    ("block", "owner_kept"),
    [
        (True, True),  # a blocking dependent that is still there holds the owner
        (False, False),  # a non-blocking one does not
    ],
)
async def test_foreground_waits_only_for_blocking_dependents(block: bool, owner_kept: bool) -> None:
    env = Env()
    web = await env.rs("web")
    await env.pod("a", web, block=block)
    await env.settle()
    await env.client.replica_sets.delete("web", "default", propagation_policy="Foreground")
    env.observe()
    env.queue.added.clear()
    await env.gc.sync("ReplicaSet:default/web")  # the owner's turn only: the pod is not gone
    assert ("default/web" in env.client.replica_sets.objects) is owner_kept
    assert "Pod:default/a" in env.queue.added  # either way the dependent is up for deletion


async def test_foreground_spares_a_dependent_with_another_live_owner() -> None:
    env = Env()
    web = await env.rs("web")
    keep = await env.rs("keep")
    await env.pod("a", web, keep)
    await env.settle()
    await env.client.replica_sets.delete("web", "default", propagation_policy="Foreground")
    await env.settle()
    assert env.pod_owners("a") == ["keep"]
    assert "default/web" not in env.client.replica_sets.objects


async def test_foreground_cascades_through_a_dependent_with_dependents() -> None:
    env = Env()
    top = await env.rs("top")
    mid = await env.rs("mid", top)
    await env.pod("a", mid)
    await env.settle()
    await env.client.replica_sets.delete("top", "default", propagation_policy="Foreground")
    await env.settle()
    # The middle ReplicaSet is itself deleted in the foreground: the pod goes first.
    assert ("delete/Foreground", "default/mid") in env.client.replica_sets.calls
    assert env.gone == ["Pod:default/a", "ReplicaSet:default/mid", "ReplicaSet:default/top"]


async def test_dependents_honour_their_own_propagation_finalizer() -> None:
    env = Env()
    web = await env.rs("web")
    pod = pod_pb2.Pod()
    pod.metadata.name = "a"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.append(new_controller_ref(web))
    pod.metadata.finalizers.append("orphan")
    await env.client.pods.create(pod)
    del env.client.replica_sets.objects["default/web"]
    await env.gc.sync("Pod:default/a")
    assert ("delete/Orphan", "default/a") in env.client.pods.calls


# ---- kinds added at run time (the controller manager adds every kind the API serves) --------


async def test_any_kind_added_is_collected_with_cluster_scoped_owners_looked_up_unnamespaced() -> (
    None
):
    env = Env()
    config_maps = FakeResource("ConfigMap", configmap_pb2.ConfigMap, env.clock, itertools.count(1))
    assert not env.gc.knows("ConfigMap")
    env.gc.add_kind("ConfigMap", FakeStore(config_maps), config_maps)
    namespaces = env.client.namespaces
    env.gc.add_kind("Namespace", FakeStore(namespaces), namespaces, namespaced=False)
    env.resources["ConfigMap"] = config_maps
    env.resources["Namespace"] = env.client.namespaces
    env._seen = env._snapshot()
    owner = namespace_pb2.Namespace()
    owner.metadata.name = "team"
    owner = await env.client.namespaces.create(owner)
    cm = configmap_pb2.ConfigMap()
    cm.metadata.name, cm.metadata.namespace = "settings", "default"
    cm.metadata.ownerReferences.add(
        apiVersion="v1", kind="Namespace", name="team", uid=owner.metadata.uid
    )
    await config_maps.create(cm)
    await env.settle()
    assert list(config_maps.objects) == ["default/settings"]  # its owner lives (as "team")
    await env.client.namespaces.delete("team")
    await env.settle()
    assert config_maps.objects == {}
    assert env.gone == ["Namespace:team", "ConfigMap:default/settings"]


async def test_an_owner_waits_while_a_dependent_kinds_cache_is_still_listing() -> None:
    env = Env()
    listed = False
    config_maps = FakeResource("ConfigMap", configmap_pb2.ConfigMap, env.clock, itertools.count(1))
    env.gc.add_kind("ConfigMap", FakeStore(config_maps), config_maps, has_synced=lambda: listed)
    await env.rs("web")
    await env.client.replica_sets.delete("web", "default", propagation_policy="Foreground")
    with pytest.raises(UnavailableError, match="waiting for the caches of ConfigMap to sync"):
        await env.gc.sync("ReplicaSet:default/web")
    assert "default/web" in env.client.replica_sets.objects  # the finalizer stays
    listed = True
    await env.gc.sync("ReplicaSet:default/web")
    assert "default/web" not in env.client.replica_sets.objects


# ---- custom kinds (CRDs): keyed "Kind.group", dropped when their CRD goes -------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "key"),
    [
        ("v1", "ConfigMap", "ConfigMap"),
        ("apps/v1", "ReplicaSet", "ReplicaSet"),
        ("stable.example.com/v1", "CronTab", "CronTab.stable.example.com"),
        # A custom kind named like a built-in one is not the built-in one.
        ("example.com/v1", "Deployment", "Deployment.example.com"),
        ("", "Pod", "Pod"),
    ],
)
def test_ref_kind(api_version: str, kind: str, key: str) -> None:
    ref = meta_pb2.OwnerReference(apiVersion=api_version, kind=kind, name="x", uid="u")
    assert GarbageCollector.ref_kind(ref) == key


def _widget_ref(owner: Any, *, block: bool = False) -> meta_pb2.OwnerReference:
    return meta_pb2.OwnerReference(
        apiVersion="example.com/v1",
        kind="Widget",
        name=owner.metadata.name,
        uid=owner.metadata.uid,
        blockOwnerDeletion=block,
    )


def _widget_env() -> tuple[Env, FakeResource[Any]]:
    """An Env whose "Widget.example.com" kind is played by a fake resource of ReplicaSets."""
    env = Env()
    widgets: FakeResource[Any] = FakeResource(
        "Widget", replicaset_pb2.ReplicaSet, env.clock, itertools.count(1000)
    )
    env.gc.add_kind("Widget.example.com", FakeStore(widgets), widgets)
    env.resources["Widget.example.com"] = widgets
    env._seen = env._snapshot()
    return env, widgets


async def _widget(widgets: FakeResource[Any], name: str, *owners: Any) -> Any:
    w = replicaset_pb2.ReplicaSet()
    w.metadata.name = name
    w.metadata.namespace = "default"
    for o in owners:
        w.metadata.ownerReferences.append(
            _widget_ref(o) if o.metadata.name.startswith("w") else new_controller_ref(o)
        )
    return await widgets.create(w)


async def test_custom_owner_and_custom_dependent() -> None:
    env, widgets = _widget_env()
    rs = await env.rs("rs")
    parent = await _widget(widgets, "w-parent", rs)  # a custom object owned by a built-in one
    child = await _widget(widgets, "w-child", parent)  # custom owned by custom
    pod = pod_pb2.Pod()
    pod.metadata.name = "p"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.append(_widget_ref(child))  # built-in owned by custom
    await env.client.pods.create(pod)
    await env.settle()
    assert sorted(widgets.objects) == ["default/w-child", "default/w-parent"]
    await env.client.replica_sets.delete("rs", "default")
    await env.settle()
    assert env.gone == [
        "ReplicaSet:default/rs",
        "Widget.example.com:default/w-parent",
        "Widget.example.com:default/w-child",
        "Pod:default/p",
    ]


async def test_custom_foreground_owner_waits_for_blocking_dependents() -> None:
    env, widgets = _widget_env()
    owner = await _widget(widgets, "w-owner")
    pod = pod_pb2.Pod()
    pod.metadata.name = "p"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.append(_widget_ref(owner, block=True))
    await env.client.pods.create(pod)
    await widgets.delete("w-owner", "default", propagation_policy="Foreground")
    await env.settle()
    assert env.gone == ["Pod:default/p", "Widget.example.com:default/w-owner"]


async def test_a_removed_custom_kind_leaves_dangling_references() -> None:
    env, widgets = _widget_env()
    owner = await _widget(widgets, "w-owner")
    pod = pod_pb2.Pod()
    pod.metadata.name = "p"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.append(_widget_ref(owner))
    await env.client.pods.create(pod)
    await env.settle()
    # The CRD went with its objects, and the collector dropped the kind before its cache
    # delivered the deletion: the pod's owner dangles all the same.
    env.gc.remove_kind("Widget.example.com")
    del env.resources["Widget.example.com"]
    env._seen = env._snapshot()
    assert env.queue.added == ["Pod:default/p"]
    await env.settle()
    assert "default/p" not in env.client.pods.objects
    assert not env.gc.knows("Widget.example.com")
