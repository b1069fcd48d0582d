"""The in-flight limit against a real apiserver on a real etcd, over gRPC and REST.

The apiserver runs with tiny limits, its settings parsed from the real flags. Requests are
held in flight by a gate in front of etcd (objects named `held-*` wait for it), so "the limit
is full" is a fact, not a race; everything else is real: the gRPC server and its interceptor,
aiohttp and its middleware, etcd. A request over the limit waits in its connection's queue
(up to `MAX_WAIT` here, to keep the tests short), then runs if a seat frees or is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import grpc
import pytest
from prometheus_client import generate_latest

from apiserver.__main__ import parse_args
from apiserver.flowcontrol import TOO_MANY_REQUESTS, QueueLimits
from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    make_node,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube import errors
from tinykube.client import Client
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import lease_pb2, meta_pb2, node_pb2, pod_pb2
from tinykube.writestream import MESSAGE_TIMEOUT_KEY

pytestmark = pytest.mark.integration

READ_ONLY_LIMIT = 2
MUTATING_LIMIT = 2
MAX_WAIT = 0.5


@dataclass
class Overload:
    running: RunningAPIServer
    stubs: Stubs
    gate: asyncio.Event
    rest: str

    @property
    def limiter(self) -> Any:
        return self.running.server.limiter

    def metric(self, line: str) -> bool:
        return line in generate_latest(self.running.server.metrics.registry).decode()


@pytest.fixture
async def overload(etcd_server: EtcdServer) -> AsyncIterator[Overload]:
    # the real flags, as an operator gives them (--insecure: the in-process fixtures are
    # plaintext; the flags parser requires certificates otherwise)
    flags, _ = parse_args(
        [
            "--insecure",
            "--max-requests-inflight",
            str(READ_ONLY_LIMIT),
            "--max-mutating-requests-inflight",
            str(MUTATING_LIMIT),
        ]
    )
    settings = make_settings(
        etcd_server.endpoint,
        rest_port=0,
        max_requests_inflight=flags.max_requests_inflight,
        max_mutating_requests_inflight=flags.max_mutating_requests_inflight,
    )
    running = await start_apiserver(settings)
    running.server.limiter.queues = QueueLimits(per_flow=50, per_level=1000, max_wait=MAX_WAIT)
    gate = asyncio.Event()
    storage: Any = running.server.storage
    for name in ("create", "get"):
        setattr(storage, name, _gated(getattr(storage, name), gate))
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        yield Overload(running, make_stubs(channel), gate, f"http://{running.server.rest_address}")
    finally:
        gate.set()
        await channel.close()
        await running.server.stop()


def _gated(call: Callable[..., Awaitable[Any]], gate: asyncio.Event) -> Callable[..., Any]:
    async def gated(key: bytes, *args: Any, **kwargs: Any) -> Any:
        if b"/held-" in key:
            await gate.wait()
        return await call(key, *args, **kwargs)

    return gated


async def wait_for(predicate: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {limit}s: {what}")
        await asyncio.sleep(0.01)


async def hold(o: Overload, kind: str, count: int) -> list[asyncio.Task[Any]]:
    """`count` requests of `kind` ("mutating": Creates, "readOnly": Gets) stuck in flight."""
    before = list(o.limiter.executing)
    index = 0 if kind == "readOnly" else 1
    tasks = []
    for k in range(count):
        name = f"held-{kind}-{k}"
        call: Any
        if kind == "mutating":
            call = o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(name)), timeout=30)
        else:
            call = o.stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name=name), timeout=30)
        tasks.append(asyncio.ensure_future(call))
    await wait_for(lambda: o.limiter.executing[index] == before[index] + count, f"{kind} held")
    return tasks


async def release(o: Overload, tasks: list[asyncio.Task[Any]]) -> None:
    o.gate.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    o.gate.clear()


def _trailing(exc: grpc.aio.AioRpcError) -> dict[str, str]:
    return {k: str(v) for k, v in exc.trailing_metadata() or ()}


@pytest.mark.parametrize("kind", ["mutating", "readOnly"])
async def test_grpc_over_the_limit_is_resource_exhausted_with_a_retry_hint(
    overload: Overload, kind: str
) -> None:
    o = overload
    held = await hold(o, kind, MUTATING_LIMIT if kind == "mutating" else READ_ONLY_LIMIT)
    refused: Any
    if kind == "mutating":
        refused = o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("extra")), timeout=5)
    else:
        refused = o.stubs.pods.List(meta_pb2.ListRequest(namespace="default"), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await refused
    exc = raised.value
    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert exc.details() == TOO_MANY_REQUESTS
    assert _trailing(exc)[errors.RETRY_PUSHBACK_KEY] == "1000"
    assert isinstance(errors.from_rpc_error(exc), errors.TooManyRequestsError)
    # The other kind has its own limit.
    if kind == "mutating":
        listed = await o.stubs.pods.List(meta_pb2.ListRequest(namespace="default"), timeout=5)
        assert not [p for p in listed.items if p.metadata.name == "extra"]  # it never ran
    else:
        await o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("other")), timeout=5)
    assert o.metric(f'apiserver_current_inflight_requests{{request_kind="{kind}"}} 2.0')
    # It waited its limit in the queue first (a quarter of its 5 s, at most MAX_WAIT).
    assert o.metric(
        'apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",'
        'priority_level="global-default",reason="time-out"} 1.0'
    )
    assert o.metric(
        'apiserver_flowcontrol_request_wait_duration_seconds_count{execute="false",'
        'flow_schema="global-default",priority_level="global-default"} 1.0'
    )
    method = "Pods/Create" if kind == "mutating" else "Pods/List"
    assert o.metric(f'apiserver_request_total{{code="RESOURCE_EXHAUSTED",method="{method}"}} 1.0')
    await release(o, held)
    # Seats are given back: the limit admits again.
    await o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("after")), timeout=5)
    assert o.limiter.executing == [0, 0]


async def test_grpc_stream_messages_are_held_to_the_limit_one_by_one(overload: Overload) -> None:
    o = overload
    channel = grpc.aio.insecure_channel(o.running.address, options=list(CHANNEL_OPTIONS))
    try:
        stream: Any = channel.stream_stream(
            "/tinykube.v1.Pods/CreateStream",
            request_serializer=pod_pb2.CreatePodRequest.SerializeToString,
            response_deserializer=pod_pb2.PodWriteResult.FromString,
        )()
        # Two messages of one stream take the two mutating seats, as two calls would...
        for k in range(MUTATING_LIMIT):
            await stream.write(pod_pb2.CreatePodRequest(pod=make_pod(f"held-stream-{k}")))
        await wait_for(lambda: o.limiter.executing[1] == MUTATING_LIMIT, "stream holds seats")
        # ...so a unary Create is refused,
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("unary")), timeout=5)
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # and so is a third message, answered with the unary call's code, message and hint.
        await stream.write(pod_pb2.CreatePodRequest(pod=make_pod("extra")))
        await wait_for(
            lambda: o.metric(
                'apiserver_request_total{code="RESOURCE_EXHAUSTED",method="Pods/CreateStream"} 1.0'
            ),
            "the third message refused after waiting its limit in the queue",
        )
        o.gate.set()  # the held ones finish; answers go in order, the refusal last
        answers = [await stream.read() for _ in range(MUTATING_LIMIT + 1)]
        assert [a.code for a in answers] == [0, 0, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]]
        assert answers[2].message == TOO_MANY_REQUESTS
        assert answers[2].retryAfterMilliseconds == 1000
        # The stream goes on, and every seat was given back.
        await stream.write(pod_pb2.CreatePodRequest(pod=make_pod("after")))
        assert (await stream.read()).pod.metadata.name == "after"
        await stream.done_writing()
        assert await stream.code() == grpc.StatusCode.OK
        assert o.limiter.executing == [0, 0]
    finally:
        await channel.close()


async def test_grpc_stream_messages_have_the_clients_deadline(overload: Overload) -> None:
    """A write stream names how long its client waits for each answer; a request still running
    past that ends DEADLINE_EXCEEDED (as a unary call past its deadline), the stream goes on."""
    o = overload
    channel = grpc.aio.insecure_channel(o.running.address, options=list(CHANNEL_OPTIONS))
    try:
        stream: Any = channel.stream_stream(
            "/tinykube.v1.Pods/CreateStream",
            request_serializer=pod_pb2.CreatePodRequest.SerializeToString,
            response_deserializer=pod_pb2.PodWriteResult.FromString,
        )(metadata=((MESSAGE_TIMEOUT_KEY, "300"),))
        await stream.write(pod_pb2.CreatePodRequest(pod=make_pod("held-forever")))  # gated
        await stream.write(pod_pb2.CreatePodRequest(pod=make_pod("quick")))
        late, quick = await stream.read(), await stream.read()
        assert late.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
        assert late.message == "the request's deadline (0.3s) passed"
        assert quick.code == 0 and quick.pod.metadata.name == "quick"
        await stream.done_writing()
        assert await stream.code() == grpc.StatusCode.OK
        assert o.limiter.executing == [0, 0]  # the late one gave its seat back
    finally:
        await channel.close()


def _inqueue(o: Overload, count: int) -> bool:
    return o.metric(
        'apiserver_flowcontrol_current_inqueue_requests{flow_schema="global-default",'
        f'priority_level="global-default"}} {float(count)}'
    )


async def test_grpc_over_the_limit_waits_and_runs_when_a_seat_frees(overload: Overload) -> None:
    o = overload
    o.running.server.limiter.queues = QueueLimits(per_flow=50, per_level=1000, max_wait=10.0)
    held = await hold(o, "mutating", MUTATING_LIMIT)
    waiting = [
        asyncio.ensure_future(
            o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(f"queued-{k}")), timeout=30)
        )
        for k in range(3)
    ]
    await wait_for(lambda: _inqueue(o, 3), "three Creates queued")
    assert not any(t.done() for t in waiting)
    # The held Creates finish; their seats pass to the queued ones, which run and answer OK.
    await release(o, held)
    created = await asyncio.gather(*waiting)
    assert [p.metadata.name for p in created] == ["queued-0", "queued-1", "queued-2"]
    assert _inqueue(o, 0)
    assert o.metric(
        'apiserver_flowcontrol_request_wait_duration_seconds_count{execute="true",'
        'flow_schema="global-default",priority_level="global-default"} 3.0'
    )
    assert o.limiter.executing == [0, 0]


async def test_grpc_a_full_queue_is_refused_at_once(overload: Overload) -> None:
    o = overload
    o.running.server.limiter.queues = QueueLimits(per_flow=1, per_level=1000, max_wait=10.0)
    held = await hold(o, "mutating", MUTATING_LIMIT)
    first = asyncio.ensure_future(
        o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("first")), timeout=30)
    )
    await wait_for(lambda: _inqueue(o, 1), "one Create queued")
    # Same connection, so same flow: its queue is full, and the answer comes at once.
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("second")), timeout=30)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _trailing(raised.value)[errors.RETRY_PUSHBACK_KEY] == "1000"
    assert o.metric(
        'apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",'
        'priority_level="global-default",reason="queue-full"} 1.0'
    )
    # Another connection is another flow, with a queue of its own. (Channels of one process
    # share connections unless told not to.)
    options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    channel = grpc.aio.insecure_channel(o.running.address, options=options)
    try:
        other = asyncio.ensure_future(
            make_stubs(channel).pods.Create(
                pod_pb2.CreatePodRequest(pod=make_pod("other")), timeout=30
            )
        )
        await wait_for(lambda: _inqueue(o, 2), "a second flow queued")
        await release(o, held)
        assert (await first).metadata.name == "first"
        assert (await other).metadata.name == "other"
    finally:
        await channel.close()


async def test_grpc_a_caller_that_gives_up_leaves_the_queue(overload: Overload) -> None:
    o = overload
    o.running.server.limiter.queues = QueueLimits(per_flow=50, per_level=1000, max_wait=10.0)
    held = await hold(o, "mutating", MUTATING_LIMIT)
    call = o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("quitter")), timeout=30)
    await wait_for(lambda: _inqueue(o, 1), "queued")
    call.cancel()
    await wait_for(lambda: _inqueue(o, 0), "left the queue")
    assert o.metric(
        'apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",'
        'priority_level="global-default",reason="cancelled"} 1.0'
    )
    await release(o, held)
    assert o.limiter.executing == [0, 0]
    listed = await o.stubs.pods.List(meta_pb2.ListRequest(namespace="default"), timeout=5)
    assert not [p for p in listed.items if p.metadata.name == "quitter"]  # it never ran


async def test_rest_over_the_limit_is_kube_apiservers_429(overload: Overload) -> None:
    o = overload
    # Held over gRPC: the limit is the apiserver's, shared by both front ends.
    held = await hold(o, "mutating", MUTATING_LIMIT)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rest"}}
    body["spec"] = {"containers": [{"name": "c", "image": "busybox"}]}
    async with aiohttp.ClientSession() as session:
        url = f"{o.rest}/api/v1/namespaces/default/pods"
        async with session.post(url, json=body) as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "1"
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert await resp.text() == TOO_MANY_REQUESTS + "\n"
        # Reads are a separate kind; probes are never refused.
        async with session.get(url) as resp:
            assert resp.status == 200
        await hold(o, "readOnly", READ_ONLY_LIMIT)
        async with session.get(url) as resp:
            assert resp.status == 429
        for probe in ("/readyz", "/livez", "/healthz"):
            async with session.get(o.rest + probe) as resp:
                assert resp.status == 200, probe
    await release(o, held)


async def test_rest_over_the_limit_waits_and_runs_when_a_seat_frees(overload: Overload) -> None:
    o = overload
    o.running.server.limiter.queues = QueueLimits(per_flow=50, per_level=1000, max_wait=10.0)
    held = await hold(o, "mutating", MUTATING_LIMIT)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rest-queued"}}
    body["spec"] = {"containers": [{"name": "c", "image": "busybox"}]}
    async with aiohttp.ClientSession() as session:
        url = f"{o.rest}/api/v1/namespaces/default/pods"
        post = asyncio.ensure_future(session.post(url, json=body))
        await wait_for(lambda: _inqueue(o, 1), "the POST queued")
        await release(o, held)
        async with await post as resp:
            assert resp.status == 201
    assert o.limiter.executing == [0, 0]


async def test_a_rest_flood_over_many_connections_is_held_up_to_the_level_bound(
    overload: Overload,
) -> None:
    """HTTP/1.1 carries one request at a time per connection, so each connection is a flow of
    one: a flood over many connections queues up to the level's bound, the rest are refused at
    once, and the queued ones run once seats free."""
    o = overload
    o.running.server.limiter.queues = QueueLimits(per_flow=50, per_level=3, max_wait=10.0)
    held = await hold(o, "mutating", MUTATING_LIMIT)
    url = f"{o.rest}/api/v1/namespaces/default/pods"

    async def post(session: aiohttp.ClientSession, k: int) -> int:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"rest-flood-{k}"}}
        body["spec"] = {"containers": [{"name": "c", "image": "busybox"}]}
        async with session.post(url, json=body) as resp:
            await resp.read()
            return resp.status

    connector = aiohttp.TCPConnector(limit=0, force_close=True)  # a connection per request
    async with aiohttp.ClientSession(connector=connector) as session:
        queued = [asyncio.ensure_future(post(session, k)) for k in range(3)]
        await wait_for(lambda: _inqueue(o, 3), "three POSTs queued, one per connection")
        # The level is full: more connections are refused at once, not after the wait limit.
        refused = await asyncio.gather(*(post(session, k) for k in range(3, 6)))
        assert refused == [429, 429, 429]
        assert o.metric(
            'apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",'
            'priority_level="global-default",reason="queue-full"} 3.0'
        )
        await release(o, held)
        assert await asyncio.gather(*queued) == [201, 201, 201]
    assert o.limiter.executing == [0, 0]
    assert _inqueue(o, 0)


async def test_watches_are_not_counted(overload: Overload) -> None:
    o = overload
    streams = []
    rest_watches = []
    async with aiohttp.ClientSession() as session:
        # Three times the read-only limit of watches, over both front ends and both methods.
        for k in range(READ_ONLY_LIMIT * 3):
            request = meta_pb2.WatchRequest(namespace="default")
            watch = o.stubs.pods.WatchBatch if k % 2 else o.stubs.pods.Watch
            streams.append(watch(request))
            url = f"{o.rest}/api/v1/namespaces/default/pods?watch=true"
            rest_watches.append(await session.get(url))
        assert all(r.status == 200 for r in rest_watches)
        # Not one of them holds a seat: a read still finds its limit empty ...
        assert o.limiter.executing == [0, 0]
        await o.stubs.pods.List(meta_pb2.ListRequest(namespace="default"), timeout=5)
        # ... and every watch is live: it sees the next event.
        await o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("seen")), timeout=5)
        for stream in streams:
            async with asyncio.timeout(10):
                async for message in stream:
                    events = getattr(message, "events", None) or [message]
                    if any(e.object.metadata.name == "seen" for e in events):
                        break
            stream.cancel()
        for resp in rest_watches:
            async with asyncio.timeout(10):
                line = await resp.content.readline()
            assert b'"seen"' in line
            resp.close()
        # A full limit does not stop a new watch either.
        held = await hold(o, "readOnly", READ_ONLY_LIMIT)
        stream = o.stubs.pods.Watch(meta_pb2.WatchRequest(namespace="default"))
        await o.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("later")), timeout=5)
        async with asyncio.timeout(10):
            async for event in stream:
                if event.object.metadata.name == "later":
                    break
        stream.cancel()
        await release(o, held)


def _lease(name: str, namespace: str) -> lease_pb2.Lease:
    lease = lease_pb2.Lease(metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace))
    lease.spec.holderIdentity = name
    lease.spec.leaseDurationSeconds = 40
    return lease


async def test_a_flood_of_creates_does_not_starve_lease_renewals(overload: Overload) -> None:
    o = overload
    leases = o.stubs.leases
    node_lease = await leases.Create(
        lease_pb2.CreateLeaseRequest(lease=_lease("n1", "kube-node-lease")), timeout=5
    )
    leader = await leases.Create(
        lease_pb2.CreateLeaseRequest(lease=_lease("controller", "kube-system")), timeout=5
    )
    node = await o.stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")), timeout=5)
    held = await hold(o, "mutating", MUTATING_LIMIT)

    async def create(k: int) -> grpc.StatusCode:
        try:
            request = pod_pb2.CreatePodRequest(pod=make_pod(f"flood-{k}"))
            await o.stubs.pods.Create(request, timeout=10)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    async def renew(rounds: int) -> None:
        nonlocal node_lease, leader, node
        for _ in range(rounds):
            node_lease = await leases.Update(
                lease_pb2.UpdateLeaseRequest(lease=node_lease), timeout=5
            )
            leader = await leases.Update(lease_pb2.UpdateLeaseRequest(lease=leader), timeout=5)
            node = await o.stubs.nodes.UpdateStatus(
                node_pb2.UpdateNodeRequest(node=node), timeout=5
            )

    flood = [asyncio.ensure_future(create(k)) for k in range(300)]
    # Every renewal lands (any refusal would raise here) while the flood is refused.
    await asyncio.gather(renew(20), *(renew(5) for _ in range(4)))
    codes = await asyncio.gather(*flood)
    assert set(codes) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    await release(o, held)


async def test_the_client_backs_off_and_gets_through(overload: Overload) -> None:
    o = overload
    held = await hold(o, "mutating", MUTATING_LIMIT)
    async with Client(o.running.address, timeout=10.0) as client:
        call = asyncio.ensure_future(client.pods.create(make_pod("patient")))
        # Refused at least once (a metric counts it), then the seats come back.
        await wait_for(
            lambda: o.metric(
                'apiserver_request_total{code="RESOURCE_EXHAUSTED",method="Pods/Create"} 1.0'
            ),
            "a refusal",
        )
        await release(o, held)
        created = await call
        assert created.metadata.uid
        # A caller whose deadline is shorter than the hint gets the refusal.
        held = await hold(o, "mutating", MUTATING_LIMIT)
        async with Client(o.running.address, timeout=0.5) as hasty:
            with pytest.raises(errors.TooManyRequestsError):
                await hasty.pods.create(make_pod("hasty"))
        await release(o, held)


async def test_limits_of_zero_turn_the_limit_off(etcd_server: EtcdServer) -> None:
    settings = replace(
        make_settings(etcd_server.endpoint),
        max_requests_inflight=0,
        max_mutating_requests_inflight=0,
    )
    running = await start_apiserver(settings)
    try:
        async with Client(running.address) as client:
            await asyncio.gather(*(client.pods.create(make_pod(f"p{k}")) for k in range(50)))
        assert not running.server.limiter.enabled
    finally:
        with contextlib.suppress(Exception):
            await running.server.stop()
