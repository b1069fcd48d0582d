"""Integration fixtures: an in-process apiserver on a free port against the session etcd.

`apiserver` (function scope) and `module_apiserver` (module scope) each start an `APIServer`
with a unique etcd key prefix, so tests never see each other's objects. They yield a
`RunningAPIServer` with `.address` ("127.0.0.1:port"), `.settings` and `.server` (the APIServer).
`channel` is a grpc.aio channel to `apiserver`; `stubs` holds the raw generated stubs per kind.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import aiohttp
import grpc
import pytest

from apiserver.app import APIServer
from apiserver.settings import Settings
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import (
    event_pb2_grpc,
    lease_pb2_grpc,
    meta_pb2,
    namespace_pb2,
    namespace_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    pod_pb2,
    pod_pb2_grpc,
    priorityclass_pb2_grpc,
    replicaset_pb2_grpc,
    serviceaccount_pb2,
    serviceaccount_pb2_grpc,
)

if TYPE_CHECKING:
    from kubelet.app import Kubelet

_counter = itertools.count()


@dataclass
class RunningAPIServer:
    address: str
    settings: Settings
    server: APIServer


async def stop_kubelet(kubelet: Kubelet) -> None:
    """Stop an in-process kubelet and the containers it runs. A kubelet alone leaves them
    running on purpose (a restarted one adopts them); a test must leave no process behind."""
    await kubelet.stop()
    for uid in kubelet.runtime.known_pods():
        await kubelet.runtime.kill_pod(uid, 0)


def make_settings(etcd_endpoint: str, **overrides: object) -> Settings:
    """Settings for a test apiserver: free port, unique prefix, no metrics, fast bookmarks."""
    prefix = f"/tinykube-test-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:8]}"
    base = Settings(
        etcd_endpoints=etcd_endpoint,
        etcd_prefix=prefix,
        bind_address="127.0.0.1:0",
        metrics_port=0,
        compaction_interval_seconds=0,
        bookmark_interval_seconds=1.0,
        bookmark_frequency_seconds=1.0,
        shutdown_grace_seconds=0.5,
        # No REST API unless a test asks (rest_port=0: a free port); 8080 would collide.
        rest_port=-1,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


async def start_apiserver(settings: Settings) -> RunningAPIServer:
    server = APIServer(settings)
    await server.start()
    return RunningAPIServer(address=server.address, settings=settings, server=server)


@dataclass
class Rest:
    """A JSON client of an in-process apiserver's REST API (`rest_apiserver`)."""

    running: RunningAPIServer
    session: aiohttp.ClientSession
    base: str

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        """`body` sent as is if bytes or a string, else as JSON; the status, the answer (its
        JSON decoded, else its text) and the response."""
        data = body if isinstance(body, bytes | str) or body is None else json.dumps(body)
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as r:
            raw = await r.read()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode()
            return r.status, parsed, r


@asynccontextmanager
async def rest_apiserver(etcd_server: EtcdServer) -> AsyncIterator[Rest]:
    """An apiserver serving its REST API (plain HTTP, a free port) and a session to call it."""
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    session = aiohttp.ClientSession()
    try:
        yield Rest(running, session, f"http://{running.server.rest_address}")
    finally:
        await session.close()
        await running.server.stop()


async def until(condition: Callable[[], bool], within: float = 30) -> None:
    """Wait until `condition()` holds (the apiserver's caches: there is no event to wait on)."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


@pytest.fixture
async def apiserver(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(etcd_server.endpoint))
    try:
        yield running
    finally:
        await running.server.stop()


@pytest.fixture(scope="module")
async def module_apiserver(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(etcd_server.endpoint))
    try:
        yield running
    finally:
        await running.server.stop()


@dataclass
class Stubs:
    """The generated stubs on an aio channel (typed as their *AsyncStub twins)."""

    pods: pod_pb2_grpc.PodsAsyncStub
    nodes: node_pb2_grpc.NodesAsyncStub
    replica_sets: replicaset_pb2_grpc.ReplicaSetsAsyncStub
    events: event_pb2_grpc.EventsAsyncStub
    leases: lease_pb2_grpc.LeasesAsyncStub
    namespaces: namespace_pb2_grpc.NamespacesAsyncStub
    priority_classes: priorityclass_pb2_grpc.PriorityClassesAsyncStub
    service_accounts: serviceaccount_pb2_grpc.ServiceAccountsAsyncStub


def make_stubs(channel: grpc.aio.Channel) -> Stubs:
    # The *AsyncStub classes exist only in the .pyi files; at run time the plain stubs on an
    # aio channel are the async ones.
    return Stubs(
        pods=pod_pb2_grpc.PodsStub(channel),
        nodes=node_pb2_grpc.NodesStub(channel),
        replica_sets=replicaset_pb2_grpc.ReplicaSetsStub(channel),
        events=event_pb2_grpc.EventsStub(channel),
        leases=lease_pb2_grpc.LeasesStub(channel),
        namespaces=namespace_pb2_grpc.NamespacesStub(channel),
        priority_classes=priorityclass_pb2_grpc.PriorityClassesStub(channel),
        service_accounts=serviceaccount_pb2_grpc.ServiceAccountsStub(channel),
    )


@pytest.fixture
async def channel(apiserver: RunningAPIServer) -> AsyncIterator[grpc.aio.Channel]:
    ch = grpc.aio.insecure_channel(apiserver.address, options=list(CHANNEL_OPTIONS))
    try:
        yield ch
    finally:
        await ch.close()


@pytest.fixture
def stubs(channel: grpc.aio.Channel) -> Stubs:
    return make_stubs(channel)


# ---- builders and assertions shared by the apiserver tests ---------------------------------


def make_pod(name: str, namespace: str = "default", **labels: str) -> pod_pb2.Pod:
    return pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="busybox")]),
    )


async def create_namespaces(stubs: Stubs, *names: str) -> None:
    """Create namespaces (as on Kubernetes, only default and the kube-* ones exist at first),
    each with its default ServiceAccount, as the controller manager (not running here) would
    make it: the ServiceAccount admission refuses pods until it exists."""
    for name in names:
        ns = namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name=name))
        await stubs.namespaces.Create(namespace_pb2.CreateNamespaceRequest(namespace=ns))
        sa = serviceaccount_pb2.ServiceAccount(
            metadata=meta_pb2.ObjectMeta(name="default", namespace=name)
        )
        await stubs.service_accounts.Create(
            serviceaccount_pb2.CreateServiceAccountRequest(serviceAccount=sa)
        )


def make_node(name: str, **labels: str) -> node_pb2.Node:
    return node_pb2.Node(
        metadata=meta_pb2.ObjectMeta(name=name, labels=labels),
        status=node_pb2.NodeStatus(allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"}),
    )


def bind_request(name: str, node: str, namespace: str = "default", uid: str = "") -> Any:
    return pod_pb2.BindRequest(
        binding=pod_pb2.Binding(
            metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=meta_pb2.ObjectReference(kind="Node", name=node),
        )
    )


async def expect_error(
    call: Awaitable[object], code: grpc.StatusCode, message: str | None = None
) -> str:
    """Await `call`, assert it fails with `code` (and exactly `message`); return the details."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, f"{info.value.code()}: {info.value.details()}"
    details = info.value.details() or ""
    if message is not None:
        assert details == message
    return details
