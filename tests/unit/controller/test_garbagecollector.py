"""Garbage collector: dependents of a vanished owner are deleted, live owners protect."""

from __future__ import annotations

from controller.garbagecollector import GarbageCollector
from controller.replicaset import new_controller_ref
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeStore
from tinykube.clock import FakeClock
from tinykube.v1 import meta_pb2, pod_pb2, replicaset_pb2


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

    async def rs(self, name: str) -> replicaset_pb2.ReplicaSet:
        rs = replicaset_pb2.ReplicaSet()
        rs.metadata.name = name
        rs.metadata.namespace = "default"
        return await self.client.replica_sets.create(rs)

    async def pod(self, name: str, *owners: replicaset_pb2.ReplicaSet) -> pod_pb2.Pod:
        pod = pod_pb2.Pod()
        pod.metadata.name = name
        pod.metadata.namespace = "default"
        for o in owners:
            pod.metadata.ownerReferences.append(new_controller_ref(o))
        return await self.client.pods.create(pod)


async def test_owner_deletion_enqueues_and_deletes_dependents() -> None:
    env = Env()
    rs = await env.rs("web")
    await env.pod("a", rs)
    await env.pod("b", rs)
    await env.pod("free")
    del env.client.replica_sets.objects["default/web"]
    env.gc.on_owner_delete("ReplicaSet", rs)
    assert sorted(env.queue.added) == ["Pod:default/a", "Pod:default/b"]
    for item in env.queue.added:
        await env.gc.sync(item)
    assert list(env.client.pods.objects) == ["default/free"]


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
    refs = env.client.pods.objects["default/a"].metadata.ownerReferences
    assert [r.name for r in refs] == ["alive"]


async def test_unknown_owner_kinds_never_cause_deletion() -> None:
    env = Env()
    pod = pod_pb2.Pod()
    pod.metadata.name = "a"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.add(kind="Deployment", name="d", uid="u")
    await env.client.pods.create(pod)
    await env.gc.sync("Pod:default/a")
    assert "default/a" in env.client.pods.objects
