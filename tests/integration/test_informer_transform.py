"""The scheduler's and the controller manager's informers drop metadata.managedFields
(`tinykube.informer.without_managed_fields`, as kube-scheduler's and kube-controller-manager's
do). Their writes of cached objects must lose nothing: against a real apiserver and etcd, a
stripped pod written back as those processes write them (Update of a changed copy: the
ReplicaSet controller's adoption, the garbage collector's owner references; UpdateStatus: the
scheduler's conditions, the node lifecycle controller's) keeps every stored managedFields entry.
"""

from __future__ import annotations

import asyncio

import pytest

from apiserver.requestcontext import RequestContext
from tests.integration.conftest import RunningAPIServer, make_pod
from tinykube.client import Client
from tinykube.informer import Informer, without_managed_fields
from tinykube.kinds import POD
from tinykube.v1 import pod_pb2

pytestmark = pytest.mark.integration


def managers(p: pod_pb2.Pod) -> list[tuple[str, str]]:
    return [(m.manager, m.subresource) for m in p.metadata.managedFields]


async def cached_at(informer: Informer[pod_pb2.Pod], key: str, rv: str) -> pod_pb2.Pod:
    for _ in range(500):
        got = informer.store.get(key)
        if got is not None and got.metadata.resourceVersion == rv:
            return got
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} never reached resourceVersion {rv} in the informer")


async def test_stripped_cached_pods_written_back_keep_their_managed_fields(
    apiserver: RunningAPIServer,
) -> None:
    store = apiserver.server.services[POD.kind]
    # A pod as kubectl leaves it: the apiserver records its manager's fields.
    created: pod_pb2.Pod = await store.create(  # type: ignore[assignment]
        pod_pb2.CreatePodRequest(pod=make_pod("web", app="web")),
        RequestContext(field_manager="kubectl"),
    )
    assert managers(created) == [("kubectl", "")]
    recorded = list(created.metadata.managedFields)
    async with Client(apiserver.address) as client:
        informer: Informer[pod_pb2.Pod] = Informer.for_resource(
            client.pods, transform=without_managed_fields
        )
        task = informer.start()
        try:
            await informer.wait_synced()
            cached = await cached_at(informer, "default/web", created.metadata.resourceVersion)
            # Everything but managedFields is served.
            expected = pod_pb2.Pod()
            expected.CopyFrom(created)
            del expected.metadata.managedFields[:]
            assert cached == expected

            # Update of a changed copy, as the controllers write.
            updated = pod_pb2.Pod()
            updated.CopyFrom(cached)
            updated.metadata.labels["adopted"] = "yes"
            written = await client.pods.update(updated)
            assert written.metadata.labels["adopted"] == "yes"
            assert list(written.metadata.managedFields) == recorded

            # UpdateStatus of the next cached version, as the scheduler writes.
            cached = await cached_at(informer, "default/web", written.metadata.resourceVersion)
            assert not cached.metadata.managedFields
            status = pod_pb2.Pod()
            status.CopyFrom(cached)
            status.status.conditions.add(
                type="PodScheduled", status="False", reason="Unschedulable"
            )
            written = await client.pods.update_status(status)
            assert [c.type for c in written.status.conditions] == ["PodScheduled"]
            assert list(written.metadata.managedFields) == recorded

            stored = await client.pods.get("web", "default")
            assert list(stored.metadata.managedFields) == recorded
            assert stored.metadata.labels["adopted"] == "yes"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
