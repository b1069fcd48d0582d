"""The apiserver over a three-member etcd cluster whose members are killed (SIGKILL) in turn.

A stream of pod creates and binds runs through the apiserver while each member in turn (the
leader first) is killed and started again from its data dir. Every write the apiserver
acknowledged must be in the final List; a watch opened before the load must see each
acknowledged write exactly once, in resourceVersion order; the apiserver's own etcd watch must
have resumed on another member. How long acknowledgements stalled after each kill is printed
(`-s` shows it; the soak with a figure is bench/etcd_failover.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import grpc
import pytest
from aetcd import rpc

from apiserver.app import APIServer
from apiserver.metrics import Metrics
from apiserver.storage import Storage
from tests.integration.conftest import (
    RunningAPIServer,
    bind_request,
    make_node,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.errors import UnavailableError
from tinykube.localetcd import EtcdCluster, EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2, service_pb2, service_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

WRITERS = 6
# Acknowledged writes to wait for after each kill and each restart before the next step.
WRITES_PER_STEP = 40


@pytest.fixture
def cluster() -> Iterator[EtcdCluster]:
    etcd = EtcdCluster(3)
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.cleanup()


@pytest.fixture
async def ha_apiserver(cluster: EtcdCluster) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(cluster.endpoint))
    try:
        yield running
    finally:
        await running.server.stop()


@dataclass
class Load:
    """Acknowledged writes: pod name -> resourceVersion of its create and of its bind."""

    created: dict[str, int] = field(default_factory=dict)
    bound: dict[str, int] = field(default_factory=dict)
    acks: list[float] = field(default_factory=list)  # monotonic time of each acknowledgement
    errors: list[str] = field(default_factory=list)
    stop: bool = False
    acked: asyncio.Event = field(default_factory=asyncio.Event)

    def ack(self) -> None:
        self.acks.append(time.monotonic())
        self.acked.set()

    async def wait_acks(self, count: int) -> None:
        want = len(self.acks) + count
        try:
            async with asyncio.timeout(60):
                while len(self.acks) < want:
                    self.acked.clear()
                    await self.acked.wait()
        except TimeoutError:
            raise AssertionError(f"writes stalled; errors: {self.errors[-5:]}") from None

    def stall_after(self, t: float) -> float:
        """The longest wait for an acknowledgement from `t` over the next few seconds."""
        after = [a for a in self.acks if a >= t]
        if not after:
            return float("inf")
        gaps = [after[0] - t] + [b - a for a, b in itertools.pairwise(after)]
        return max(gaps[:WRITES_PER_STEP])


async def writer(stubs: object, load: Load, index: int) -> None:
    n = 0
    while not load.stop:
        name = f"w{index}-{n}"
        n += 1
        try:
            pod = await stubs.pods.Create(  # type: ignore[attr-defined]
                pod_pb2.CreatePodRequest(pod=make_pod(name)), timeout=30
            )
            load.created[name] = int(pod.metadata.resourceVersion)
            load.ack()
            resp = await stubs.pods.Bind(  # type: ignore[attr-defined]
                bind_request(name, f"n{n % 3}"), timeout=30
            )
            load.bound[name] = int(resp.resourceVersion)
            load.ack()
        except grpc.aio.AioRpcError as exc:
            load.errors.append(f"{name}: {exc.code().name}: {exc.details()}")


async def collect(call: object, seen: list[tuple[str, str, int]], grew: asyncio.Event) -> None:
    try:
        async for ev in call:  # type: ignore[attr-defined]
            if ev.type != "BOOKMARK":
                seen.append(
                    (ev.type, ev.object.metadata.name, int(ev.object.metadata.resourceVersion))
                )
                grew.set()
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.CANCELLED:
            raise


async def test_members_killed_in_turn_lose_no_acknowledged_write_nor_watch_event(
    cluster: EtcdCluster, ha_apiserver: RunningAPIServer
) -> None:
    ch = grpc.aio.insecure_channel(ha_apiserver.address, options=list(CHANNEL_OPTIONS))
    stubs = make_stubs(ch)
    for i in range(3):
        await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node(f"n{i}")))
    listed = await stubs.pods.List(meta_pb2.ListRequest(namespace="default"))
    call = stubs.pods.Watch(
        meta_pb2.WatchRequest(namespace="default", resourceVersion=listed.metadata.resourceVersion)
    )
    seen: list[tuple[str, str, int]] = []
    grew = asyncio.Event()
    collector = asyncio.create_task(collect(call, seen, grew))
    load = Load()
    writers = [asyncio.create_task(writer(stubs, load, i)) for i in range(WRITERS)]
    cache = ha_apiserver.server.caches["Pod"]
    opened = cache.etcd_watches_opened
    stalls: list[tuple[str, float]] = []
    try:
        await load.wait_acks(WRITES_PER_STEP)
        # The leader first, then each of the others: the pods watch was on one of them.
        order = [cluster.leader()]
        order += [m for m in cluster.members if m is not order[0]]
        for member in order:
            was_leader = member.is_leader()
            t = time.monotonic()
            await asyncio.to_thread(member.kill)
            await load.wait_acks(WRITES_PER_STEP)
            stalls.append((f"kill {member.name}{' (leader)' if was_leader else ''}", t))
            t = time.monotonic()
            await asyncio.to_thread(member.start)
            await load.wait_acks(WRITES_PER_STEP)
            stalls.append((f"restart {member.name}", t))
    finally:
        load.stop = True
        await asyncio.gather(*writers)
    for what, t in stalls:
        print(f"{what}: acknowledgements stalled {load.stall_after(t) * 1000:.0f} ms")
    storage = ha_apiserver.server.storage
    assert isinstance(storage, Storage)
    print(f"etcd retries by operation: {storage.retries}; client errors: {len(load.errors)}")

    # A member going away costs retries inside the apiserver, not errors for its clients.
    assert load.errors == [], load.errors
    final = await stubs.pods.List(meta_pb2.ListRequest(namespace="default"))
    stored = {p.metadata.name: p for p in final.items}
    for name, rv in load.created.items():
        assert name in stored, f"acknowledged create of {name} (rv {rv}) lost"
    for name, rv in load.bound.items():
        pod = stored[name]
        assert pod.spec.nodeName, f"acknowledged bind of {name} (rv {rv}) lost"
        assert int(pod.metadata.resourceVersion) >= rv

    # The watch: every acknowledged write once, in order, nothing else.
    final_rv = int(final.metadata.resourceVersion)
    want = len(load.created) + len(load.bound)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(30):
            while len(seen) < want:
                grew.clear()
                await grew.wait()
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await collector
    revisions = [rv for _, _, rv in seen]
    assert revisions == sorted(revisions), "watch events out of resourceVersion order"
    assert len(set(seen)) == len(seen), "a watch event was delivered twice"
    expected = {("ADDED", n, rv) for n, rv in load.created.items()}
    expected |= {("MODIFIED", n, rv) for n, rv in load.bound.items()}
    assert {e for e in seen if e[2] <= final_rv} == expected
    # Each member died once, so the cache's etcd watch broke and resumed elsewhere.
    assert cache.etcd_watches_opened > opened
    await ch.close()


def service(name: str) -> service_pb2.Service:
    svc = service_pb2.Service()
    svc.metadata.name = name
    svc.metadata.namespace = "default"
    svc.spec.type = "NodePort"
    svc.spec.selector["app"] = name
    svc.spec.ports.add(port=80)
    return svc


async def test_two_apiservers_over_the_cluster_agree_through_a_leader_kill(
    cluster: EtcdCluster,
) -> None:
    settings = make_settings(
        cluster.endpoint,
        service_cluster_ip_range="127.100.9.0/26",  # 62 addresses
        service_node_port_range="30000-30099",
    )
    one = await start_apiserver(settings)
    two = await start_apiserver(replace(settings, bind_address="127.0.0.1:0"))
    ch1 = grpc.aio.insecure_channel(one.address, options=list(CHANNEL_OPTIONS))
    ch2 = grpc.aio.insecure_channel(two.address, options=list(CHANNEL_OPTIONS))
    try:
        s1, s2 = make_stubs(ch1), make_stubs(ch2)
        services1 = service_pb2_grpc.ServicesStub(ch1)
        services2 = service_pb2_grpc.ServicesStub(ch2)
        # A write through one is an event in the other's watch.
        listed = await s2.pods.List(meta_pb2.ListRequest(namespace="default"))
        call = s2.pods.Watch(
            meta_pb2.WatchRequest(
                namespace="default", resourceVersion=listed.metadata.resourceVersion
            )
        )
        created = await s1.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("seen")), timeout=10)
        async with asyncio.timeout(10):
            ev: pod_pb2.PodWatchEvent = await call.read()  # type: ignore[assignment]
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "seen")
        assert ev.object.metadata.resourceVersion == created.metadata.resourceVersion
        call.cancel()

        # Services through both at once, the etcd leader killed half-way: each gets its own
        # cluster IP and nodePort, none is lost, none is refused.
        async def make(i: int) -> service_pb2.Service:
            stub = services1 if i % 2 else services2
            req = service_pb2.CreateServiceRequest(service=service(f"s{i}"))
            svc: service_pb2.Service = await stub.Create(req, timeout=30)
            return svc

        first = await asyncio.gather(*(make(i) for i in range(20)))
        leader = cluster.leader()
        kill = asyncio.create_task(asyncio.to_thread(leader.kill))
        rest = await asyncio.gather(*(make(i) for i in range(20, 50)))
        await kill
        made = [*first, *rest]
        assert len({s.spec.clusterIP for s in made}) == 50
        assert len({s.spec.ports[0].nodePort for s in made}) == 50
        # Both apiservers list the same 50, with the values they were given.
        want = {s.metadata.name: (s.spec.clusterIP, s.spec.ports[0].nodePort) for s in made}
        for stub in (services1, services2):
            listed_svcs = await stub.List(meta_pb2.ListRequest(namespace="default"), timeout=30)
            got = {
                s.metadata.name: (s.spec.clusterIP, s.spec.ports[0].nodePort)
                for s in listed_svcs.items
            }
            assert {k: v for k, v in got.items() if k in want} == want
        await asyncio.to_thread(leader.start)
    finally:
        await ch1.close()
        await ch2.close()
        await one.server.stop()
        await two.server.stop()


class LandThenLose(Storage):
    """A Storage whose first txn writing `target` is applied, then followed by someone else's
    change of that key (`meddle`), and then lost (UNAVAILABLE), as when the etcd member the
    apiserver sent it to dies after committing it and the scheduler binds the new pod before
    the apiserver's resend arrives."""

    def __init__(self, endpoint: str) -> None:
        super().__init__([endpoint], timeout=5.0, metrics=Metrics())
        self.victim = b""
        self.meddle: Callable[[bytes], bytes] = lambda value: value
        self.lost = 0

    def _send_txn(self, req: Any, operation: str) -> Awaitable[Any]:
        sent = super()._send_txn(req, operation)
        writes = {op.request_put.key: op.request_put.value for op in req.success}
        if not self.victim or self.victim not in writes:
            return sent

        async def land_then_lose() -> Any:
            resp = await sent
            if not resp.succeeded:
                return resp
            key, self.victim = self.victim, b""
            cur = await self.get(key)
            assert cur is not None
            # Someone else's write: straight to etcd, not through this apiserver's batcher
            # (which holds this very txn in flight).
            meddled = rpc.TxnRequest(
                compare=[
                    rpc.Compare(
                        key=key,
                        result=rpc.Compare.CompareResult.EQUAL,
                        target=rpc.Compare.CompareTarget.MOD,
                        mod_revision=cur.mod_revision,
                    )
                ],
                success=[
                    rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=self.meddle(cur.value)))
                ],
            )
            assert (await self._kv.Txn(meddled)).succeeded
            self.lost += 1
            raise UnavailableError("etcd is unavailable: UNAVAILABLE: Stream removed (test)")

        return land_then_lose()


async def test_a_write_that_landed_and_changed_before_its_resend_still_succeeds(
    etcd_server: EtcdServer,
) -> None:
    storage = LandThenLose(etcd_server.endpoint)
    server = APIServer(make_settings(etcd_server.endpoint), storage=storage)
    await server.start()
    ch = grpc.aio.insecure_channel(server.address, options=list(CHANNEL_OPTIONS))
    try:
        stubs = make_stubs(ch)
        await stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
        prefix = settings_prefix(server)

        def labelled(value: bytes) -> bytes:
            pod = pod_pb2.Pod.FromString(value)
            pod.metadata.labels["meddled"] = "yes"
            return pod.SerializeToString()

        # Create: the pod lands, is changed, and the resend finds it changed. Before
        # WriteResult.maybe_applied this was ALREADY_EXISTS for the pod's own create.
        storage.victim = prefix + b"/pods/default/p1"
        storage.meddle = labelled
        created = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("p1")))
        assert storage.lost == 1
        got = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="p1"))
        assert got.metadata.uid == created.metadata.uid
        assert got.metadata.labels["meddled"] == "yes"
        # Its resourceVersion is the create's: the revision of the pod's ADDED event.
        assert int(created.metadata.resourceVersion) < int(got.metadata.resourceVersion)

        # Bind: the binding lands, the pod changes, the resend finds it bound to our node.
        storage.victim = prefix + b"/pods/default/p1"
        rv = await stubs.pods.Bind(bind_request("p1", "n1"))
        assert storage.lost == 2
        bound = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name="p1"))
        assert bound.spec.nodeName == "n1" and rv.resourceVersion
    finally:
        await ch.close()
        await server.stop()


def settings_prefix(server: APIServer) -> bytes:
    return server.settings.prefix.encode()
