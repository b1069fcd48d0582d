"""Garbage collection of a Deployment's ReplicaSets and their pods, by propagation policy."""

from __future__ import annotations

from typing import Any

import pytest

from controller.deployment import new_controller_ref as deployment_ref
from controller.garbagecollector import GarbageCollector
from controller.replicaset import new_controller_ref as rs_ref
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeResource, FakeStore
from tests.unit.controller.test_garbagecollector import _copy
from tinykube.clock import FakeClock
from tinykube.v1 import deployment_pb2, pod_pb2, replicaset_pb2


class Env:
    """The collector with Deployments as owners, informers played by `observe`."""

    def __init__(self) -> None:
        self.client = FakeClient(FakeClock())
        self.queue = FakeQueue()
        self.resources: dict[str, FakeResource[Any]] = {
            "Deployment": self.client.deployments,
            "ReplicaSet": self.client.replica_sets,
            "Pod": self.client.pods,
        }
        self.gc = GarbageCollector(
            self.client,
            {kind: FakeStore(res) for kind, res in self.resources.items()},
            self.queue,
            apis={"Deployment": self.client.deployments},
        )
        self.gone: list[str] = []
        self._seen = self._snapshot()

    def _snapshot(self) -> dict[str, dict[str, Any]]:
        return {k: {n: _copy(o) for n, o in r.objects.items()} for k, r in self.resources.items()}

    def observe(self) -> None:
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

    async def settle(self) -> None:
        self.observe()
        for _ in range(200):
            if not self.queue.added:
                return
            await self.gc.sync(self.queue.added.pop(0))
            self.observe()
        raise AssertionError(f"the collector did not settle: {self.queue.added}")

    async def chain(self) -> None:
        d = deployment_pb2.Deployment()
        d.metadata.name, d.metadata.namespace = "web", "default"
        d = await self.client.deployments.create(d)
        rs = replicaset_pb2.ReplicaSet()
        rs.metadata.name, rs.metadata.namespace = "web-abc", "default"
        rs.metadata.ownerReferences.append(deployment_ref(d))
        rs = await self.client.replica_sets.create(rs)
        pod = pod_pb2.Pod()
        pod.metadata.name, pod.metadata.namespace = "web-abc-x", "default"
        pod.metadata.ownerReferences.append(rs_ref(rs))
        await self.client.pods.create(pod)
        await self.settle()


@pytest.mark.parametrize(
    ("policy", "gone", "left"),
    [
        # Background: the Deployment first, then what it owned, top down.
        (
            "Background",
            ["Deployment:default/web", "ReplicaSet:default/web-abc", "Pod:default/web-abc-x"],
            [],
        ),
        # Foreground: the pods, then the ReplicaSet, then the Deployment.
        (
            "Foreground",
            ["Pod:default/web-abc-x", "ReplicaSet:default/web-abc", "Deployment:default/web"],
            [],
        ),
        # Orphan: only the Deployment; its ReplicaSet loses the reference and keeps its pods.
        (
            "Orphan",
            ["Deployment:default/web"],
            ["ReplicaSet:default/web-abc", "Pod:default/web-abc-x"],
        ),
    ],
)
async def test_deployment_deletion_by_policy(policy: str, gone: list[str], left: list[str]) -> None:
    env = Env()
    await env.chain()
    await env.client.deployments.delete("web", "default", propagation_policy=policy)
    await env.settle()
    assert env.gone == gone
    remaining = [f"{k}:{n}" for k, r in env.resources.items() for n in r.objects]
    assert sorted(remaining) == sorted(left)
    if policy == "Orphan":
        assert not env.client.replica_sets.objects["default/web-abc"].metadata.ownerReferences
