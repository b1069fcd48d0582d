"""Write streams (`<Method>Stream`) against a real etcd: every message is its unary call.

Raw streams: each answer carries the code and message the same unary call ends with (created,
ALREADY_EXISTS, INVALID_ARGUMENT, ABORTED, an undecodable body), in order, a refused message
does not end the stream, a half-close ends it OK after the last answer, as the apiserver's
graceful stop does, and a cancel ends it with nothing left running on the server. The client
(`Client(pipeline=True)`, `ResourceClient.pipelined()`) raises the unary call's error classes,
keeps one stream per method, and falls back to unary calls where the server answers
UNIMPLEMENTED; a process of hollow nodes renews each node's Lease and writes its pods' status
through streams of that node's own. Authorization per message (a node writing another node's
Lease through its own stream) is in tests/integration/test_enforcement.py's matrix, which runs
every write of the matrix through streams too (`grpc-stream`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from kubelet.app import Kubelet
from kubelet.settings import Settings as KubeletSettings
from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    expect_error,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
    stop_kubelet,
)
from tinykube.client import Client
from tinykube.errors import (
    AlreadyExistsError,
    ConflictError,
    DeadlineExceededError,
    InvalidError,
    NotFoundError,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import lease_pb2, meta_pb2, pod_pb2
from tinykube.writestream import WriteStream

pytestmark = pytest.mark.integration

OK = grpc.StatusCode.OK.value[0]
ALREADY_EXISTS = grpc.StatusCode.ALREADY_EXISTS.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
ABORTED = grpc.StatusCode.ABORTED.value[0]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]


def _stream(channel: grpc.aio.Channel, path: str, result: Any) -> Any:
    return channel.stream_stream(
        path,
        request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
        response_deserializer=result.FromString,
    )()


def _lease(name: str) -> lease_pb2.Lease:
    lease = lease_pb2.Lease(apiVersion="coordination.k8s.io/v1", kind="Lease")
    lease.metadata.name, lease.metadata.namespace = name, "kube-node-lease"
    lease.spec.holderIdentity = name
    lease.spec.leaseDurationSeconds = 40
    return lease


async def test_create_stream_answers_each_request_as_create(
    channel: grpc.aio.Channel, stubs: Stubs
) -> None:
    invalid = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name="invalid", namespace="default"))
    unary_invalid = await expect_error(
        stubs.pods.Create(pod_pb2.CreatePodRequest(pod=invalid)), grpc.StatusCode.INVALID_ARGUMENT
    )
    call = _stream(channel, "/tinykube.v1.Pods/CreateStream", pod_pb2.PodWriteResult)
    requests: list[Any] = [
        pod_pb2.CreatePodRequest(pod=make_pod("a")),
        pod_pb2.CreatePodRequest(pod=make_pod("a")),  # a second time
        pod_pb2.CreatePodRequest(pod=invalid),
        b"\xff\xff\xff",  # not a CreatePodRequest
        pod_pb2.CreatePodRequest(pod=make_pod("b")),
    ]
    for request in requests:  # all in flight at once
        await call.write(request)
    await call.done_writing()
    answers = [answer async for answer in call]
    assert await call.code() == grpc.StatusCode.OK
    assert [a.code for a in answers] == [OK, ALREADY_EXISTS, INVALID_ARGUMENT, INVALID_ARGUMENT, OK]
    assert answers[1].message == 'pods "a" already exists'
    assert answers[2].message == unary_invalid
    assert answers[3].message.startswith("request body is not a valid tinykube.v1.CreatePodRequest")
    for answer, name in ((answers[0], "a"), (answers[4], "b")):
        stored = await stubs.pods.Get(meta_pb2.GetRequest(namespace="default", name=name))
        assert answer.pod == stored  # the object, as Create returns it
    assert all(not a.HasField("pod") for a in answers[1:4])


async def test_update_stream_conflict_and_not_found_go_on(
    channel: grpc.aio.Channel, stubs: Stubs
) -> None:
    created = await stubs.leases.Create(lease_pb2.CreateLeaseRequest(lease=_lease("n1")))
    call = _stream(channel, "/tinykube.v1.Leases/UpdateStream", lease_pb2.LeaseWriteResult)
    renewed = lease_pb2.Lease()
    renewed.CopyFrom(created)
    renewed.spec.leaseTransitions = 1
    await call.write(lease_pb2.UpdateLeaseRequest(lease=renewed))
    first = await call.read()
    assert first.code == OK
    assert first.lease.metadata.resourceVersion != created.metadata.resourceVersion
    # the same resourceVersion again: stale
    await call.write(lease_pb2.UpdateLeaseRequest(lease=renewed))
    stale = await call.read()
    assert stale.code == ABORTED
    assert stale.message == await expect_error(
        stubs.leases.Update(lease_pb2.UpdateLeaseRequest(lease=renewed)), grpc.StatusCode.ABORTED
    )
    assert "the object has been modified" in stale.message
    missing = _lease("n2")
    missing.metadata.resourceVersion = "1"
    await call.write(lease_pb2.UpdateLeaseRequest(lease=missing))
    assert (await call.read()).code == NOT_FOUND
    # the stream is still good
    again = lease_pb2.Lease()
    again.CopyFrom(first.lease)
    again.spec.leaseTransitions = 2
    await call.write(lease_pb2.UpdateLeaseRequest(lease=again))
    assert (await call.read()).lease.spec.leaseTransitions == 2
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_a_graceful_stop_ends_each_write_stream_after_its_answers(
    etcd_server: EtcdServer,
) -> None:
    """A stream lives as long as its client keeps it open (a kubelet's Lease stream, for ever):
    the apiserver's graceful stop ends it OK once what it read is answered, as it ends the
    watches, so its client reconnects at once and the drain does not wait out its grace (a
    minute here) to cancel it."""
    running = await start_apiserver(
        make_settings(etcd_server.endpoint, shutdown_grace_seconds=60.0)
    )
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    stopping: asyncio.Task[None] | None = None
    try:
        stubs = make_stubs(channel)
        created = await stubs.leases.Create(lease_pb2.CreateLeaseRequest(lease=_lease("g1")))
        call = _stream(channel, "/tinykube.v1.Leases/UpdateStream", lease_pb2.LeaseWriteResult)
        renewed = lease_pb2.Lease()
        renewed.CopyFrom(created)
        renewed.spec.leaseTransitions = 1
        await call.write(lease_pb2.UpdateLeaseRequest(lease=renewed))
        assert (await call.read()).code == OK
        stopping = asyncio.create_task(running.server.stop())
        assert await call.read() is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK  # ended, not cancelled by the grace
        await stopping
    finally:
        await channel.close()
        if stopping is None:
            await running.server.stop()


def _stream_tasks(apiserver: RunningAPIServer) -> list[asyncio.Task[Any]]:
    """The (in-process) apiserver's tasks serving write streams: each open stream's, which waits
    in its read between messages (`OpenWriteStreams.reading`), and the writers of answers."""
    writers = [
        t
        for t in asyncio.all_tasks()
        if "serve_write_stream" in getattr(t.get_coro(), "__qualname__", "")
    ]
    return [*apiserver.server.write_streams.reading, *writers]


async def test_cancel_ends_the_stream_on_the_server(
    apiserver: RunningAPIServer, channel: grpc.aio.Channel
) -> None:
    call = _stream(channel, "/tinykube.v1.Pods/CreateStream", pod_pb2.PodWriteResult)
    await call.write(pod_pb2.CreatePodRequest(pod=make_pod("c1")))
    assert (await call.read()).code == OK
    assert _stream_tasks(apiserver)  # its task waits for the next message
    call.cancel()
    assert await call.code() == grpc.StatusCode.CANCELLED
    async with asyncio.timeout(10):
        while _stream_tasks(apiserver):  # noqa: ASYNC110 (the server's side has no event)
            await asyncio.sleep(0.02)
    # and the method still serves a new stream
    again = _stream(channel, "/tinykube.v1.Pods/CreateStream", pod_pb2.PodWriteResult)
    await again.write(pod_pb2.CreatePodRequest(pod=make_pod("c2")))
    assert (await again.read()).code == OK
    await again.done_writing()
    assert await again.code() == grpc.StatusCode.OK


async def test_client_pipeline_raises_the_unary_errors(apiserver: RunningAPIServer) -> None:
    async with Client(apiserver.address, pipeline=True) as client:
        pods = await asyncio.gather(*(client.pods.create(make_pod(f"p{i}")) for i in range(20)))
        assert [p.metadata.name for p in pods] == [f"p{i}" for i in range(20)]
        with pytest.raises(AlreadyExistsError, match='pods "p0" already exists'):
            await client.pods.create(make_pod("p0"))
        with pytest.raises(InvalidError):
            await client.pods.create(pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name="x")))
        running = pod_pb2.Pod()
        running.CopyFrom(pods[0])
        running.status.phase = "Running"
        stored = await client.pods.update_status(running)
        assert stored.status.phase == "Running"
        with pytest.raises(ConflictError):
            await client.pods.update_status(running)  # its resourceVersion is stale now
        lease = await client.leases.create(_lease("n1"))
        lease.spec.leaseTransitions = 3
        assert (await client.leases.update(lease)).spec.leaseTransitions == 3
        gone = _lease("gone")
        gone.metadata.resourceVersion = "5"
        with pytest.raises(NotFoundError):
            await client.leases.update(gone)
        # one stream per method, each opened once: refused requests did not end them
        opened = {s.what: s.opened for s in client._write_streams}
        assert opened == {
            "tinykube.v1.Pods/CreateStream": 1,
            "tinykube.v1.Pods/UpdateStatusStream": 1,
            "tinykube.v1.Leases/CreateStream": 1,
            "tinykube.v1.Leases/UpdateStream": 1,
        }
        assert all(s.supported for s in client._write_streams)


async def test_pipelined_views_have_streams_of_their_own(apiserver: RunningAPIServer) -> None:
    async with Client(apiserver.address) as client:
        leases = [await client.leases.create(_lease(f"n{i}")) for i in range(3)]
        views = [client.leases.pipelined() for _ in leases]
        assert not client._write_streams  # the client itself still makes unary calls
        for view, lease in zip(views, leases, strict=True):
            lease.spec.leaseTransitions = 1
            await view.update(lease)
        assert len(client._write_streams) == 3
        assert all(s.opened == 1 for s in client._write_streams)


class _UnaryLeases:
    """An apiserver from before the write streams: Leases/Update only, unary."""

    def __init__(self) -> None:
        self.updates = 0

    async def update(self, request: Any, context: Any) -> lease_pb2.Lease:
        self.updates += 1
        answer = lease_pb2.Lease()
        answer.CopyFrom(request.lease)
        answer.metadata.resourceVersion = str(self.updates)
        return answer

    def handler(self) -> grpc.GenericRpcHandler:
        update = grpc.unary_unary_rpc_method_handler(
            self.update,
            request_deserializer=lease_pb2.UpdateLeaseRequest.FromString,
            response_serializer=lease_pb2.Lease.SerializeToString,
        )
        return grpc.method_handlers_generic_handler("tinykube.v1.Leases", {"Update": update})


async def test_client_falls_back_to_unary_on_unimplemented() -> None:
    server = grpc.aio.server()
    servicer = _UnaryLeases()
    server.add_generic_rpc_handlers((servicer.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with Client(f"127.0.0.1:{port}", pipeline=True, retries=0) as client:
            lease = _lease("n1")
            results = await asyncio.gather(*(client.leases.update(lease) for _ in range(5)))
            assert servicer.updates == 5  # every one sent as a unary call, once
            assert sorted(r.metadata.resourceVersion for r in results) == list("12345")
            (stream,) = client._write_streams
            assert not stream.supported
            await client.leases.update(lease)
            assert servicer.updates == 6
            assert stream.opened == 1  # never tried again
    finally:
        await server.stop(0)


def _requests(running: RunningAPIServer, method: str) -> float:
    """apiserver_request_total{code="OK",method=`method`}, 0 if never counted."""
    text = generate_latest(running.server.metrics.registry).decode()
    line = f'apiserver_request_total{{code="OK",method="{method}"}} '
    for row in text.splitlines():
        if row.startswith(line):
            return float(row[len(line) :])
    return 0.0


async def test_hollow_nodes_renew_and_report_through_streams_of_their_own(
    apiserver: RunningAPIServer, tmp_path: Path
) -> None:
    kubelet = Kubelet(
        KubeletSettings(
            node_name="hollow",
            apiserver=apiserver.address,
            bind_address="127.0.0.1:0",
            root_dir=tmp_path,
            runtime="fake",
            fake_nodes=3,
            node_lease_duration_seconds=2,  # renewed every 0.5 s
            write_streams=True,
        )
    )
    await kubelet.start()
    try:
        async with Client(apiserver.address) as client:
            pod = make_pod("on-hollow-1")
            pod.spec.nodeName = "hollow-1"
            await client.pods.create(pod)
            async with asyncio.timeout(30):
                while (await client.pods.get("on-hollow-1", "default")).status.phase != "Running":  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                # every node renewed its Lease a few times
                while _requests(apiserver, "Leases/UpdateStream") < 9:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            leases = await client.leases.list("kube-node-lease")
            assert sorted(lease.metadata.name for lease in leases.items) == [
                "hollow-0",
                "hollow-1",
                "hollow-2",
            ]
        assert _requests(apiserver, "Pods/UpdateStatusStream") >= 1
        assert _requests(apiserver, "Leases/Update") == 0  # no renewal went as a call
        # One stream per node for its Lease, one for the pod's node's status writes; none
        # shared between the nodes of the process.
        assert len(apiserver.server.write_streams.reading) == 3 + 1
    finally:
        await stop_kubelet(kubelet)


class _StalledLeases:
    """Leases/UpdateStream that answers its first request and then reads nothing more, as the
    apiserver's stream does while its connection's slots are taken: HTTP/2 flow control soon
    holds the client's writes."""

    async def update_stream(self, requests: Any, context: Any) -> None:
        first = await context.read()
        await context.write(lease_pb2.LeaseWriteResult(code=OK, lease=first.lease))
        await asyncio.Event().wait()

    def handler(self) -> grpc.GenericRpcHandler:
        stream = grpc.stream_stream_rpc_method_handler(
            self.update_stream,
            request_deserializer=lease_pb2.UpdateLeaseRequest.FromString,
            response_serializer=lease_pb2.LeaseWriteResult.SerializeToString,
        )
        return grpc.method_handlers_generic_handler("tinykube.v1.Leases", {"UpdateStream": stream})


async def test_a_write_held_by_flow_control_ends_at_the_request_deadline() -> None:
    """WriteStream.send's timeout covers the write too: a write the apiserver does not take
    (flow control) ends DEADLINE_EXCEEDED, where it waited without a deadline, and the stream
    is given up (whether the message left is unknown)."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_StalledLeases().handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    open_call = channel.stream_stream(
        "/tinykube.v1.Leases/UpdateStream",
        request_serializer=lease_pb2.UpdateLeaseRequest.SerializeToString,
        response_deserializer=lease_pb2.LeaseWriteResult.FromString,
    )
    stream = WriteStream(open_call, lease_pb2.LeaseWriteResult, "lease", "Leases/UpdateStream")
    try:
        lease = _lease("n1")
        assert (await stream.send(lease_pb2.UpdateLeaseRequest(lease=lease), 5.0)) == lease
        # Far more than the stream's HTTP/2 window: the write cannot complete.
        big = _lease("n1")
        big.metadata.annotations["padding"] = "x" * (8 << 20)
        async with asyncio.timeout(30):  # (a hang fails the test; no time is asserted)
            with pytest.raises(DeadlineExceededError, match="may have been applied"):
                await stream.send(lease_pb2.UpdateLeaseRequest(lease=big), 0.5)
            # The stream whose write was cut is given up; the next request opens another and
            # is answered there (the old stream's reader, ending late, fails only its own).
            assert (await stream.send(lease_pb2.UpdateLeaseRequest(lease=lease), 5.0)) == lease
        assert stream.opened == 2
    finally:
        await stream.close()
        await channel.close()
        await server.stop(0)
