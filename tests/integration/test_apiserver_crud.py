"""Apiserver CRUD, Bind, deletion and List semantics against a real etcd, through raw stubs.

Every status code the API promises, with Kubernetes' exact messages; races between writers and
between binders; graceful pod deletion; finalizers; paging; selectors; validation.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    bind_request,
    create_namespaces,
    expect_error,
    make_node,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.kinds import ALL_KINDS
from tinykube.localetcd import EtcdServer
from tinykube.meta import get_continue, list_request
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2, replicaset_pb2

pytestmark = pytest.mark.integration

CONFLICT = (
    'Operation cannot be fulfilled on pods "web": the object has been modified; please apply '
    "your changes to the latest version and try again"
)


async def create_pod(stubs: Stubs, name: str = "web", **labels: str) -> pod_pb2.Pod:
    return await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(name, **labels)))


async def get_pod(stubs: Stubs, name: str = "web") -> pod_pb2.Pod:
    return await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name=name))


async def test_create_fills_defaults_and_get_returns_it(stubs: Stubs) -> None:
    created = await create_pod(stubs)
    meta = created.metadata
    assert meta.uid and meta.resourceVersion and meta.generation == 1
    assert meta.namespace == "default"
    assert meta.HasField("creationTimestamp")
    assert (created.apiVersion, created.kind) == ("v1", "Pod")
    assert created.spec.schedulerName == "tinykube"
    assert created.spec.restartPolicy == "Always"
    assert created.spec.terminationGracePeriodSeconds == 30
    assert created.status.phase == "Pending"
    assert await get_pod(stubs) == created


async def test_create_defaults_env_field_selectors(stubs: Stubs) -> None:
    pod = make_pod("env")
    env = pod.spec.containers[0].env
    env.add(name="NAME").valueFrom.fieldRef.fieldPath = "metadata.name"
    env.add(name="CPU").valueFrom.resourceFieldRef.resource = "limits.cpu"
    mem = env.add(name="MEM").valueFrom.resourceFieldRef
    mem.resource, mem.divisor = "limits.memory", "1Mi"
    created = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod))
    name, cpu, mem_env = created.spec.containers[0].env
    # kube's SetDefaults_ObjectFieldSelector; an unset divisor is the zero Quantity, "0".
    assert name.valueFrom.fieldRef.apiVersion == "v1"
    assert cpu.valueFrom.resourceFieldRef.divisor == "0"
    assert mem_env.valueFrom.resourceFieldRef.divisor == "1Mi"


async def test_generate_name(stubs: Stubs) -> None:
    pod = make_pod("")
    pod.metadata.generateName = "web-"
    a = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod))
    b = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod))
    assert a.metadata.name.startswith("web-") and len(a.metadata.name) == 9
    assert a.metadata.name != b.metadata.name


async def test_status_codes_and_messages(stubs: Stubs) -> None:
    await create_pod(stubs)
    await expect_error(
        stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web"))),
        grpc.StatusCode.ALREADY_EXISTS,
        'pods "web" already exists',
    )
    await expect_error(
        stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="nope")),
        grpc.StatusCode.NOT_FOUND,
        'pods "nope" not found',
    )
    await expect_error(
        stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=make_pod("nope"))),
        grpc.StatusCode.NOT_FOUND,
        'pods "nope" not found',
    )
    await expect_error(
        stubs.pods.Delete(meta_pb2.DeleteRequest(namespace="default", name="nope")),
        grpc.StatusCode.NOT_FOUND,
        'pods "nope" not found',
    )
    await expect_error(
        stubs.nodes.Get(meta_pb2.GetRequest(name="n9")),
        grpc.StatusCode.NOT_FOUND,
        'nodes "n9" not found',
    )
    await expect_error(
        stubs.pods.List(meta_pb2.ListRequest(labelSelector="app in (")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    details = await expect_error(
        stubs.pods.List(meta_pb2.ListRequest(fieldSelector="spec.foo=bar")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert '"spec.foo" is not a known field selector' in details


async def test_stale_update_is_aborted_and_empty_rv_is_unconditional(stubs: Stubs) -> None:
    created = await create_pod(stubs)
    first = pod_pb2.Pod()
    first.CopyFrom(created)
    first.metadata.labels["v"] = "1"
    updated = await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=first))
    assert int(updated.metadata.resourceVersion) > int(created.metadata.resourceVersion)
    stale = pod_pb2.Pod()
    stale.CopyFrom(created)
    stale.metadata.labels["v"] = "2"
    await expect_error(
        stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=stale)), grpc.StatusCode.ABORTED, CONFLICT
    )
    stale.metadata.resourceVersion = ""
    forced = await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=stale))
    assert forced.metadata.labels["v"] == "2"
    assert forced.metadata.uid == created.metadata.uid


async def test_two_writers_racing_exactly_one_wins(stubs: Stubs) -> None:
    created = await create_pod(stubs)

    async def write(value: str) -> pod_pb2.Pod | grpc.aio.AioRpcError:
        pod = pod_pb2.Pod()
        pod.CopyFrom(created)
        pod.metadata.labels["writer"] = value
        try:
            return await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=pod))
        except grpc.aio.AioRpcError as exc:
            return exc

    for _round in range(5):
        created = await get_pod(stubs)
        results = await asyncio.gather(*(write(f"r{_round}w{i}") for i in range(4)))
        wins = [r for r in results if isinstance(r, pod_pb2.Pod)]
        losses = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(wins) == 1
        assert all(e.code() == grpc.StatusCode.ABORTED for e in losses)
        assert (await get_pod(stubs)).metadata.labels["writer"] == wins[0].metadata.labels["writer"]


async def test_update_ignores_status_and_update_status_ignores_spec(stubs: Stubs) -> None:
    created = await create_pod(stubs)
    pod = pod_pb2.Pod()
    pod.CopyFrom(created)
    pod.status.phase = "Running"
    pod.metadata.labels["tier"] = "web"
    updated = await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=pod))
    assert updated.status.phase == "Pending"
    assert updated.metadata.labels["tier"] == "web"
    assert updated.metadata.generation == 1  # labels are not spec
    pod.CopyFrom(updated)
    pod.status.phase = "Running"
    pod.metadata.labels["tier"] = "db"
    pod.spec.nodeName = "n1"
    status_updated = await stubs.pods.UpdateStatus(pod_pb2.UpdatePodRequest(pod=pod))
    assert status_updated.status.phase == "Running"
    assert status_updated.metadata.labels["tier"] == "web"
    assert status_updated.spec.nodeName == ""
    assert await get_pod(stubs) == status_updated


async def test_update_status_validates_the_status_and_writes_nothing_when_invalid(
    stubs: Stubs,
) -> None:
    created = await create_pod(stubs)
    pod = pod_pb2.Pod()
    pod.CopyFrom(created)
    pod.status.phase = "Sleeping"
    pod.status.conditions.add(type="Ready", status="Maybe")
    details = await expect_error(
        stubs.pods.UpdateStatus(pod_pb2.UpdatePodRequest(pod=pod)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert 'status.phase: Unsupported value: "Sleeping"' in details
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in details
    assert await get_pod(stubs) == created
    # The node's status is checked too (its quantities are parsed strictly).
    node = await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n-status")))
    node.status.allocatable["cpu"] = "four"
    details = await expect_error(
        stubs.nodes.UpdateStatus(node_pb2.UpdateNodeRequest(node=node)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "status.allocatable[cpu]" in details


async def test_noop_update_keeps_resource_version(stubs: Stubs) -> None:
    created = await create_pod(stubs)
    again = await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=created))
    assert again.metadata.resourceVersion == created.metadata.resourceVersion


async def test_generation_bumps_on_spec_change(stubs: Stubs) -> None:
    node = await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    node.spec.unschedulable = True
    updated = await stubs.nodes.Update(node_pb2.UpdateNodeRequest(node=node))
    assert updated.metadata.generation == 2


async def test_immutable_pod_fields(stubs: Stubs) -> None:
    created = await create_pod(stubs)
    pod = pod_pb2.Pod()
    pod.CopyFrom(created)
    pod.spec.nodeName = "n1"
    details = await expect_error(
        stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=pod)), grpc.StatusCode.INVALID_ARGUMENT
    )
    # kube's ValidatePodUpdate: nodeName is set only by Bind, and any other change is the one
    # Forbidden message with the spec's diff.
    assert details.startswith(
        'Pod "web" is invalid: spec: Forbidden: pod updates may not change fields other than '
    )
    assert '- \tNodeName: "",' in details
    assert '+ \tNodeName: "n1",' in details


async def test_validation_message(stubs: Stubs) -> None:
    bad = pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name="Web_1"),
        spec=pod_pb2.PodSpec(
            restartPolicy="Sometimes",
            containers=[
                pod_pb2.Container(
                    name="c",
                    image="x",
                    resources=pod_pb2.ResourceRequirements(requests={"cpu": "1x"}),
                )
            ],
        ),
    )
    details = await expect_error(
        stubs.pods.Create(pod_pb2.CreatePodRequest(pod=bad)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert details.startswith(
        'Pod "Web_1" is invalid: metadata.name: Invalid value: "Web_1": a lowercase RFC 1123 '
        "subdomain must consist of lower case alphanumeric characters"
    )
    assert 'spec.containers[0].resources.requests[cpu]: Invalid value: "1x": ' in details
    assert (
        'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
        '"OnFailure", "Never"' in details
    )
    # Bad input never reached etcd.
    await expect_error(
        stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="Web_1")),
        grpc.StatusCode.NOT_FOUND,
    )


@pytest.mark.parametrize(
    ("overrides", "too_large"),
    [
        # The apiserver's own object limit answers first, naming the size.
        ({"max_object_bytes": 8192}, "is 10"),
        # Past it (the limit raised above etcd's), etcd's own 1.5 MiB refusal is still a 4xx.
        ({"max_object_bytes": 64 * 1024 * 1024}, "etcdserver: request is too large"),
    ],
)
async def test_stored_object_size_limit(
    etcd_server: EtcdServer, overrides: dict[str, int], too_large: str
) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, **overrides))
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    limit = overrides["max_object_bytes"]
    # Over whichever limit applies, inside the 256 KiB annotation limit and the 3 MiB request.
    big_args = ["x" * 100_000] * (1 if limit == 8192 else 17)
    try:
        stubs = make_stubs(ch)
        pod = make_pod("big")
        pod.spec.containers[0].args.extend(big_args)
        details = await expect_error(
            stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod)), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert details.startswith("Request entity too large: ") and too_large in details, details
        if limit == 8192:
            assert details.endswith(
                "bytes as stored, the limit is 8192 bytes (max_object_bytes)"
            ), details
        # A status update that grows a stored object past the limit is refused the same way.
        small = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("small")))
        small.status.message = "".join(big_args)
        details = await expect_error(
            stubs.pods.UpdateStatus(pod_pb2.UpdatePodRequest(pod=small)),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert details.startswith("Request entity too large: ") and too_large in details, details
        await expect_error(
            stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="big")),
            grpc.StatusCode.NOT_FOUND,
        )
    finally:
        await ch.close()
        await running.server.stop()


async def test_request_size_limit(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, max_request_bytes=4096))
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        stubs = make_stubs(ch)
        pod = make_pod("big")
        pod.metadata.annotations["blob"] = "x" * 5000
        details = await expect_error(
            stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod)), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert "request is too large" in details and "limit is 4096 bytes" in details
        await expect_error(
            stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="big")),
            grpc.StatusCode.NOT_FOUND,
        )
    finally:
        await ch.close()
        await running.server.stop()


# ---- Bind -----------------------------------------------------------------------------------


async def test_bind_sets_node_and_condition_in_one_write(stubs: Stubs) -> None:
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    created = await create_pod(stubs)
    resp = await stubs.pods.Bind(bind_request("web", "n1", uid=created.metadata.uid))
    pod = await get_pod(stubs)
    assert pod.metadata.resourceVersion == resp.resourceVersion
    assert int(resp.resourceVersion) == int(created.metadata.resourceVersion) + 1
    assert pod.spec.nodeName == "n1"
    cond = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert len(cond) == 1 and cond[0].status == "True"
    assert cond[0].HasField("lastTransitionTime")


async def test_bind_errors(stubs: Stubs) -> None:
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    await create_pod(stubs)
    await expect_error(
        stubs.pods.Bind(bind_request("nope", "n1")),
        grpc.StatusCode.NOT_FOUND,
        'pods "nope" not found',
    )
    await expect_error(
        stubs.pods.Bind(bind_request("web", "n9")),
        grpc.StatusCode.NOT_FOUND,
        'nodes "n9" not found',
    )
    assert (await get_pod(stubs)).spec.nodeName == ""
    await expect_error(
        stubs.pods.Bind(bind_request("web", "n1", uid="not-the-uid")),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    await stubs.pods.Bind(bind_request("web", "n1"))
    await expect_error(
        stubs.pods.Bind(bind_request("web", "n1")),
        grpc.StatusCode.ALREADY_EXISTS,
        "pod default/web is already assigned to node n1",
    )
    # A pod being deleted cannot be bound.
    await create_pod(stubs, "doomed")
    doomed = await get_pod(stubs, "doomed")
    doomed.metadata.finalizers.append("example.com/hold")
    await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=doomed))
    await stubs.pods.Delete(meta_pb2.DeleteRequest(namespace="default", name="doomed"))
    details = await expect_error(
        stubs.pods.Bind(bind_request("doomed", "n1")), grpc.StatusCode.FAILED_PRECONDITION
    )
    assert "being deleted" in details


async def test_bind_race_exactly_one_wins(apiserver: RunningAPIServer) -> None:
    channels = [
        grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS))
        for _ in range(2)
    ]
    try:
        a, b = (make_stubs(ch) for ch in channels)
        for n in ("n1", "n2"):
            await a.nodes.Create(node_pb2.CreateNodeRequest(node=make_node(n)))
        for i in range(10):
            await create_pod(a, f"p{i}")

        async def bind(stubs: Stubs, name: str, node: str) -> str:
            try:
                await stubs.pods.Bind(bind_request(name, node))
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.ALREADY_EXISTS, exc.details()
                return "lost"
            return node

        for i in range(10):
            results = await asyncio.gather(bind(a, f"p{i}", "n1"), bind(b, f"p{i}", "n2"))
            winners = [r for r in results if r != "lost"]
            assert len(winners) == 1
            assert (await get_pod(a, f"p{i}")).spec.nodeName == winners[0]
    finally:
        for ch in channels:
            await ch.close()


async def test_bind_retries_when_pod_changes_concurrently(stubs: Stubs) -> None:
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    await create_pod(stubs)

    async def churn() -> None:
        for i in range(10):
            pod = await get_pod(stubs)
            pod.status.message = f"churn {i}"
            pod.metadata.resourceVersion = ""
            await stubs.pods.UpdateStatus(pod_pb2.UpdatePodRequest(pod=pod))

    await asyncio.gather(churn(), stubs.pods.Bind(bind_request("web", "n1")))
    assert (await get_pod(stubs)).spec.nodeName == "n1"


# ---- deletion -------------------------------------------------------------------------------


async def test_unbound_pod_is_deleted_at_once(stubs: Stubs) -> None:
    await create_pod(stubs)
    deleted = await stubs.pods.Delete(meta_pb2.DeleteRequest(namespace="default", name="web"))
    assert deleted.metadata.name == "web"
    await expect_error(get_pod(stubs), grpc.StatusCode.NOT_FOUND)


async def test_bound_pod_is_deleted_gracefully(stubs: Stubs) -> None:
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    await create_pod(stubs)
    await stubs.pods.Bind(bind_request("web", "n1"))
    marked = await stubs.pods.Delete(meta_pb2.DeleteRequest(namespace="default", name="web"))
    assert marked.metadata.HasField("deletionTimestamp")
    assert marked.metadata.deletionGracePeriodSeconds == 30
    still = await get_pod(stubs)
    assert still.metadata.deletionTimestamp == marked.metadata.deletionTimestamp
    # A second delete with a longer grace does not extend it; a shorter one shortens it.
    again = await stubs.pods.Delete(
        meta_pb2.DeleteRequest(namespace="default", name="web", gracePeriodSeconds=60)
    )
    assert again.metadata.deletionGracePeriodSeconds == 30
    shorter = await stubs.pods.Delete(
        meta_pb2.DeleteRequest(namespace="default", name="web", gracePeriodSeconds=5)
    )
    assert shorter.metadata.deletionGracePeriodSeconds == 5
    # The kubelet confirms with grace 0: the pod is gone.
    await stubs.pods.Delete(
        meta_pb2.DeleteRequest(namespace="default", name="web", gracePeriodSeconds=0)
    )
    await expect_error(get_pod(stubs), grpc.StatusCode.NOT_FOUND)


async def test_delete_preconditions(stubs: Stubs) -> None:
    created = await create_pod(stubs)
    details = await expect_error(
        stubs.pods.Delete(
            meta_pb2.DeleteRequest(
                namespace="default",
                name="web",
                preconditions=meta_pb2.Preconditions(uid="other"),
            )
        ),
        grpc.StatusCode.ABORTED,
    )
    assert details == (
        'Operation cannot be fulfilled on pods "web": Precondition failed: UID in '
        f"precondition: other, UID in object meta: {created.metadata.uid}"
    )
    await expect_error(
        stubs.pods.Delete(
            meta_pb2.DeleteRequest(
                namespace="default",
                name="web",
                preconditions=meta_pb2.Preconditions(resourceVersion="1"),
            )
        ),
        grpc.StatusCode.ABORTED,
    )
    await stubs.pods.Delete(
        meta_pb2.DeleteRequest(
            namespace="default",
            name="web",
            preconditions=meta_pb2.Preconditions(
                uid=created.metadata.uid, resourceVersion=created.metadata.resourceVersion
            ),
        )
    )
    await expect_error(get_pod(stubs), grpc.StatusCode.NOT_FOUND)


async def test_finalizers_block_removal_until_emptied(stubs: Stubs) -> None:
    rs = replicaset_pb2.ReplicaSet(
        metadata=meta_pb2.ObjectMeta(
            name="web", namespace="default", finalizers=["example.com/cleanup"]
        ),
        spec=replicaset_pb2.ReplicaSetSpec(
            replicas=1,
            selector=meta_pb2.LabelSelector(matchLabels={"app": "web"}),
            template=replicaset_pb2.PodTemplateSpec(
                metadata=meta_pb2.ObjectMeta(labels={"app": "web"}),
                spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="x")]),
            ),
        ),
    )
    await stubs.replica_sets.Create(replicaset_pb2.CreateReplicaSetRequest(replicaSet=rs))
    get = meta_pb2.GetRequest(namespace="default", name="web")
    marked = await stubs.replica_sets.Delete(
        meta_pb2.DeleteRequest(namespace="default", name="web")
    )
    assert marked.metadata.HasField("deletionTimestamp")
    current = await stubs.replica_sets.Get(get)
    assert list(current.metadata.finalizers) == ["example.com/cleanup"]
    # Another update keeps the object (and its deletionTimestamp) while a finalizer remains.
    current.metadata.labels["x"] = "y"
    current = await stubs.replica_sets.Update(
        replicaset_pb2.UpdateReplicaSetRequest(replicaSet=current)
    )
    assert current.metadata.deletionTimestamp == marked.metadata.deletionTimestamp
    del current.metadata.finalizers[:]
    await stubs.replica_sets.Update(replicaset_pb2.UpdateReplicaSetRequest(replicaSet=current))
    await expect_error(stubs.replica_sets.Get(get), grpc.StatusCode.NOT_FOUND)


# ---- List -----------------------------------------------------------------------------------


async def test_list_is_consistent_right_after_writes(stubs: Stubs) -> None:
    for i in range(5):
        await create_pod(stubs, f"p{i}")
        listed = await stubs.pods.List(meta_pb2.ListRequest(namespace="default"))
        assert [p.metadata.name for p in listed.items] == [f"p{j}" for j in range(i + 1)]
        # A kind with no recent events is still current (etcd progress notifications).
        nodes = await stubs.nodes.List(meta_pb2.ListRequest())
        assert int(nodes.metadata.resourceVersion) >= int(listed.metadata.resourceVersion)


async def test_paging_with_pinned_revision(stubs: Stubs) -> None:
    for i in range(7):
        await create_pod(stubs, f"p{i}", app="web" if i % 2 == 0 else "db")
    page = await stubs.pods.List(meta_pb2.ListRequest(namespace="default", limit=3))
    names = [p.metadata.name for p in page.items]
    assert names == ["p0", "p1", "p2"]
    assert get_continue(page.metadata)
    assert page.metadata.remainingItemCount == 4
    rv = page.metadata.resourceVersion
    await create_pod(stubs, "p00")  # sorts inside the first page's range, after the pin
    await create_pod(stubs, "p9")  # after the pin: must not show up
    while get_continue(page.metadata):
        page = await stubs.pods.List(
            list_request(namespace="default", limit=3, continue_token=get_continue(page.metadata))
        )
        assert page.metadata.resourceVersion == rv
        # Counted at the pinned revision: the pods made since are not in it.
        left = 7 - len(names) - len(page.items)
        assert page.metadata.HasField("remainingItemCount") == bool(get_continue(page.metadata))
        if get_continue(page.metadata):
            assert page.metadata.remainingItemCount == left
        names.extend(p.metadata.name for p in page.items)
    assert names == [f"p{i}" for i in range(7)]
    # Paging with a label selector fills pages with matching items only (and cannot count).
    page = await stubs.pods.List(meta_pb2.ListRequest(labelSelector="app=web", limit=2))
    assert not page.metadata.HasField("remainingItemCount")
    got = [p.metadata.name for p in page.items]
    while get_continue(page.metadata):
        page = await stubs.pods.List(
            list_request(
                label_selector="app=web", limit=2, continue_token=get_continue(page.metadata)
            )
        )
        got.extend(p.metadata.name for p in page.items)
    assert got == ["p0", "p2", "p4", "p6"]
    await expect_error(
        stubs.pods.List(list_request(limit=2, continue_token="garbage!")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


def _token(payload: object) -> str:
    raw = payload if isinstance(payload, str) else json.dumps(payload)
    return base64.urlsafe_b64encode(raw.encode()).decode()


_BAD_CONTINUE = "invalid continue token: continue key is not valid: "
_BAD_RV = _BAD_CONTINUE + "incorrect encoded start resourceVersion"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("garbage!", None),
        (_token('{"v": 1, "rv": 1e400, "start": "x"}'), _BAD_RV),  # was OverflowError: INTERNAL
        (_token({"v": 1, "rv": 10**30, "start": "x"}), _BAD_RV),  # was etcd's int64: INTERNAL
        (_token({"v": 1, "rv": 2**63, "start": "x"}), _BAD_RV),
        (_token({"v": 1, "rv": -5, "start": "x"}), _BAD_RV),
        (_token({"v": 1, "rv": 0, "start": "x"}), _BAD_RV),
        (_token({"v": 1, "rv": True, "start": "x"}), _BAD_RV),
        (_token({"v": 1, "rv": "12", "start": "x"}), _BAD_RV),
        (_token({"v": 1, "rv": 5, "start": 7}), None),
        (_token({"v": 2, "rv": 5, "start": "x"}), None),
        (_token([1, 2]), None),
        (_token("9" * 5000), None),  # Python's int-string digit limit
        (_token("[" * 100_000), None),  # nesting past the JSON decoder's recursion limit
        (_token("\xff\xfe"), None),
    ],
)
async def test_forged_continue_token_is_invalid_argument(
    stubs: Stubs, token: str, message: str | None
) -> None:
    details = await expect_error(
        stubs.pods.List(list_request(limit=2, continue_token=token)),
        grpc.StatusCode.INVALID_ARGUMENT,
        message,
    )
    assert details.startswith(_BAD_CONTINUE)


async def test_expired_continue_token_is_out_of_range(
    apiserver: RunningAPIServer, stubs: Stubs
) -> None:
    for i in range(3):
        await create_pod(stubs, f"p{i}")
    page = await stubs.pods.List(meta_pb2.ListRequest(namespace="default", limit=1))
    token = get_continue(page.metadata)
    await create_pod(stubs, "p3")
    await apiserver.server.compact()
    await expect_error(
        stubs.pods.List(list_request(namespace="default", limit=1, continue_token=token)),
        grpc.StatusCode.OUT_OF_RANGE,
        "The provided continue parameter is too old to display a consistent list result. You "
        "can start a new list without the continue parameter.",
    )


@pytest.mark.parametrize("body", [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x0a\x80"])
async def test_undecodable_request_body_is_invalid_argument_and_logged_once(
    channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    unary = [
        ("Pods", "Create", "CreatePodRequest"),
        ("Pods", "Get", "GetRequest"),
        ("Pods", "List", "ListRequest"),
        ("Pods", "Update", "UpdatePodRequest"),
        ("Pods", "UpdateStatus", "UpdatePodRequest"),
        ("Pods", "Delete", "DeleteRequest"),
        ("Pods", "Bind", "BindRequest"),
        ("Pods", "BindBatch", "BindBatchRequest"),
        ("Pods", "Evict", "EvictRequest"),
        ("Nodes", "Create", "CreateNodeRequest"),
        ("Leases", "Update", "UpdateLeaseRequest"),
    ]
    with caplog.at_level("INFO"):
        for service, method, message in unary * 3:
            raw: Any = channel.unary_unary(f"/tinykube.v1.{service}/{method}")
            call = raw(body)
            details = await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT)
            assert details.startswith(f"request body is not a valid tinykube.v1.{message}: ")
        for method in ("Watch", "WatchBatch"):
            raw = channel.unary_stream(f"/tinykube.v1.Pods/{method}")
            stream = raw(body)
            details = await expect_error(stream.read(), grpc.StatusCode.INVALID_ARGUMENT)
            assert details.startswith("request body is not a valid tinykube.v1.WatchRequest: ")
    # gRPC's own handler logged "Unexpected [DecodeError]" with a traceback for every call.
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    logged = [r for r in caplog.records if "not a valid" in r.getMessage()]
    assert len(logged) <= 1, caplog.text


async def test_list_with_label_and_field_selectors(stubs: Stubs) -> None:
    await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    for i in range(4):
        await create_pod(stubs, f"p{i}", app="web" if i < 2 else "db")
    await stubs.pods.Bind(bind_request("p0", "n1"))
    await stubs.pods.Bind(bind_request("p2", "n1"))
    await create_namespaces(stubs, "other")
    other = make_pod("q0", namespace="other", app="web")
    await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=other))

    async def names(**kw: object) -> list[str]:
        resp = await stubs.pods.List(meta_pb2.ListRequest(**kw))  # type: ignore[arg-type]
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in resp.items]

    assert await names(labelSelector="app=web") == ["default/p0", "default/p1", "other/q0"]
    assert await names(namespace="default", labelSelector="app=web") == [
        "default/p0",
        "default/p1",
    ]
    assert await names(fieldSelector="spec.nodeName=n1") == ["default/p0", "default/p2"]
    assert await names(fieldSelector="spec.nodeName=") == [
        "default/p1",
        "default/p3",
        "other/q0",
    ]
    assert await names(fieldSelector="spec.nodeName=n1", labelSelector="app!=web") == ["default/p2"]
    assert await names(fieldSelector="status.phase=Pending,metadata.namespace=other") == [
        "other/q0"
    ]
    assert await names(labelSelector="app notin (web,db)") == []


async def test_list_resource_version_semantics(stubs: Stubs) -> None:
    created = await create_pod(stubs)
    any_rv = await stubs.pods.List(meta_pb2.ListRequest(resourceVersion="0"))
    assert int(any_rv.metadata.resourceVersion) > 0
    at_least = await stubs.pods.List(
        meta_pb2.ListRequest(resourceVersion=created.metadata.resourceVersion)
    )
    assert [p.metadata.name for p in at_least.items] == ["web"]
    await expect_error(
        stubs.pods.List(meta_pb2.ListRequest(resourceVersion="abc")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )


async def test_cluster_scoped_kinds_ignore_namespace(stubs: Stubs) -> None:
    node = make_node("n1")
    node.metadata.namespace = "ignored"
    created = await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=node))
    assert created.metadata.namespace == ""
    got = await stubs.nodes.Get(meta_pb2.GetRequest(namespace="whatever", name="n1"))
    assert got == created
    # Namespaced kinds default to "default" and keep namespaces apart.
    await create_namespaces(stubs, "a", "b")
    await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web", namespace="a")))
    await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("web", namespace="b")))
    await expect_error(get_pod(stubs), grpc.StatusCode.NOT_FOUND)
    listed = await stubs.pods.List(meta_pb2.ListRequest(namespace="a"))
    assert [p.metadata.namespace for p in listed.items] == ["a"]


async def test_health_is_serving(apiserver: RunningAPIServer, channel: grpc.aio.Channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    resp = await stub.Check(health_pb2.HealthCheckRequest(service=""))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    assert apiserver.address.startswith("127.0.0.1:")
    assert apiserver.server.etcd_watch_count() == len(ALL_KINDS)


async def test_metrics_count_requests_by_method_and_code(
    apiserver: RunningAPIServer, stubs: Stubs
) -> None:
    from prometheus_client import generate_latest

    await create_pod(stubs)
    await expect_error(create_pod(stubs), grpc.StatusCode.ALREADY_EXISTS)
    text = generate_latest(apiserver.server.metrics.registry).decode()
    assert 'apiserver_request_total{code="OK",method="Pods/Create"} 1.0' in text
    assert 'apiserver_request_total{code="ALREADY_EXISTS",method="Pods/Create"} 1.0' in text
    assert 'apiserver_request_duration_seconds_count{method="Pods/Create"} 2.0' in text
    assert 'apiserver_etcd_requests_total{operation="create",result="ok"}' in text
    assert 'apiserver_etcd_watches_open{kind="Pod"} 1.0' in text


async def test_periodic_compaction_keeps_one_interval(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(
        make_settings(etcd_server.endpoint, compaction_interval_seconds=0.5)
    )
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        stubs = make_stubs(ch)
        old = await create_pod(stubs, "old")
        deadline = asyncio.get_running_loop().time() + 15
        # Two intervals later the revision of "old" has been compacted away.
        while True:
            call = stubs.pods.Watch(
                meta_pb2.WatchRequest(resourceVersion=old.metadata.resourceVersion)
            )
            try:
                await asyncio.wait_for(call.read(), 0.3)
            except TimeoutError:
                pass
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.OUT_OF_RANGE
                break
            call.cancel()
            assert asyncio.get_running_loop().time() < deadline, "never compacted"
            await create_pod(stubs, f"p{int(asyncio.get_running_loop().time() * 1000)}")
        # The latest revision is always kept.
        latest = await stubs.pods.List(meta_pb2.ListRequest())
        call = stubs.pods.Watch(
            meta_pb2.WatchRequest(resourceVersion=latest.metadata.resourceVersion)
        )
        await create_pod(stubs, "new")
        msg = await asyncio.wait_for(call.read(), 10)
        assert isinstance(msg, pod_pb2.PodWatchEvent)
        assert msg.object.metadata.name == "new"
        call.cancel()
    finally:
        await ch.close()
        await running.server.stop()


async def test_update_of_a_recreated_object_is_rejected(stubs: Stubs) -> None:
    old = await create_pod(stubs)
    await stubs.pods.Delete(meta_pb2.DeleteRequest(namespace="default", name="web"))
    new = await create_pod(stubs)
    old.metadata.resourceVersion = ""
    old.metadata.labels["stale"] = "1"
    details = await expect_error(
        stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=old)), grpc.StatusCode.ABORTED
    )
    assert details == (
        'Operation cannot be fulfilled on pods "web": Precondition failed: UID in precondition: '
        f"{old.metadata.uid}, UID in object meta: {new.metadata.uid}"
    )
