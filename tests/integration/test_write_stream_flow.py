"""A burst of write-stream messages on one connection against a real apiserver with a tiny
in-flight limit (apiserver/flowcontrol.py `ConnectionSlots`; the apiserver's
`--max-stream-messages-per-connection`).

2,000 hollow nodes' Lease renewals arrive at once on 2,000 streams of one channel, as a process
of hollow kubelets sends them: at most the bound are handed to handlers at once, the rest wait
unread, and every renewal gets exactly one answer: OK, or a clean RESOURCE_EXHAUSTED (with its
retry hint, never applied) or DEADLINE_EXCEEDED; none lost, none INTERNAL. Meanwhile another
connection's unary renewals take their turns at the same seats. Everything is real: the flags,
the gRPC server and its interceptor, etcd.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from apiserver.__main__ import parse_args
from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import lease_pb2, lease_pb2_grpc, meta_pb2
from tinykube.writestream import MESSAGE_TIMEOUT_KEY

pytestmark = pytest.mark.integration

NODES = 2000
BOUND = 16
OK = grpc.StatusCode.OK.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
NAMESPACE = "kube-node-lease"


@pytest.fixture
async def tiny(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    flags, _ = parse_args(
        [
            "--insecure",
            "--max-requests-inflight",
            "2",
            "--max-mutating-requests-inflight",
            "2",
            "--max-stream-messages-per-connection",
            str(BOUND),
        ]
    )
    settings = make_settings(
        etcd_server.endpoint,
        max_requests_inflight=flags.max_requests_inflight,
        max_mutating_requests_inflight=flags.max_mutating_requests_inflight,
        max_stream_messages_per_connection=flags.max_stream_messages_per_connection,
    )
    running = await start_apiserver(settings)
    try:
        yield running
    finally:
        await running.server.stop()


def _lease(name: str) -> lease_pb2.Lease:
    lease = lease_pb2.Lease(apiVersion="coordination.k8s.io/v1", kind="Lease")
    lease.metadata.name, lease.metadata.namespace = name, NAMESPACE
    lease.spec.holderIdentity = name
    lease.spec.leaseDurationSeconds = 40
    return lease


async def _unary_until_admitted(call: Any, request: Any) -> tuple[Any, int]:
    """The call's answer, sent again after each in-flight refusal (as its retry hint says);
    and how many times it was refused."""
    refused = 0
    while True:
        try:
            return await call(request, timeout=10), refused
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            refused += 1
            await asyncio.sleep(0.05)


async def _create_leases(stub: Any, names: list[str]) -> dict[str, lease_pb2.Lease]:
    created: dict[str, lease_pb2.Lease] = {}

    async def create(chunk: list[str]) -> None:
        for name in chunk:
            lease, _ = await _unary_until_admitted(
                stub.Create, lease_pb2.CreateLeaseRequest(lease=_lease(name))
            )
            created[name] = lease

    await asyncio.gather(*(create(names[k::20]) for k in range(20)))
    return created


async def test_a_burst_of_renewals_on_one_connection_is_bounded_and_every_one_answered(
    tiny: RunningAPIServer,
) -> None:
    server = tiny.server
    names = [f"hollow-{k}" for k in range(NODES)]
    burst = grpc.aio.insecure_channel(tiny.address, options=list(CHANNEL_OPTIONS))
    other = grpc.aio.insecure_channel(tiny.address, options=list(CHANNEL_OPTIONS))
    try:
        created = await _create_leases(_leases_stub(burst), names)
        bystander = (await _create_leases(_leases_stub(other), ["bystander"]))["bystander"]
        streams = [
            burst.stream_stream(
                "/tinykube.v1.Leases/UpdateStream",
                request_serializer=lease_pb2.UpdateLeaseRequest.SerializeToString,
                response_deserializer=lease_pb2.LeaseWriteResult.FromString,
            )(metadata=((MESSAGE_TIMEOUT_KEY, "5000"),))
            for _ in names
        ]

        def renewal(name: str) -> lease_pb2.UpdateLeaseRequest:
            lease = lease_pb2.Lease()
            lease.CopyFrom(created[name])
            lease.spec.renewTime.GetCurrentTime()
            return lease_pb2.UpdateLeaseRequest(lease=lease)

        # Every renewal at once, one per stream, as a process of hollow nodes sends them...
        await asyncio.gather(*(s.write(renewal(n)) for s, n in zip(streams, names, strict=True)))
        # ...while another connection renews its own Lease with unary calls, one after another.
        unary_refusals = 0
        current = bystander

        async def bystander_renews() -> None:
            nonlocal unary_refusals, current
            for _ in range(10):
                lease = lease_pb2.Lease()
                lease.CopyFrom(current)
                lease.spec.renewTime.GetCurrentTime()
                current, refused = await _unary_until_admitted(
                    _leases_stub(other).Update, lease_pb2.UpdateLeaseRequest(lease=lease)
                )
                unary_refusals += refused

        read, _ = await asyncio.gather(
            asyncio.gather(*(s.read() for s in streams)), bystander_renews()
        )
        answers: list[Any] = list(read)
        codes = Counter(a.code for a in answers)
        assert sum(codes.values()) == NODES  # one answer each: none lost
        assert set(codes) <= {OK, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED}, codes
        assert codes[OK] > 0
        stored = {
            lease.metadata.name: lease
            for lease in (await _leases_stub(burst).List(_list_request())).items
        }
        for name, answer in zip(names, answers, strict=True):
            if answer.code == OK:
                assert answer.lease.spec.renewTime == stored[name].spec.renewTime
            elif answer.code == RESOURCE_EXHAUSTED:
                # refused before it ran, with the retry hint: never applied
                assert answer.retryAfterMilliseconds > 0
                assert stored[name].metadata.resourceVersion == (
                    created[name].metadata.resourceVersion
                )
            elif "waited for its turn" in answer.message:
                # expired waiting for its connection's slot: never ran
                assert stored[name].metadata.resourceVersion == (
                    created[name].metadata.resourceVersion
                )
        # The bystander's renewals all went through, each after at most a few refusals.
        assert current.spec.renewTime.seconds > 0
        # Nothing is held once the streams are done: seats, slots.
        for s in streams:
            await s.done_writing()
        assert [await s.code() for s in streams] == [grpc.StatusCode.OK] * NODES
        assert server.limiter.executing == [0, 0]
        assert server.message_gate.connections == {}
        metrics = generate_latest(server.metrics.registry).decode()
        assert 'code="INTERNAL"' not in metrics
        assert 'code="UNKNOWN"' not in metrics
        print(f"renewals: {dict(codes)}; the bystander's unary refusals: {unary_refusals}")
    finally:
        await burst.close()
        await other.close()


def _leases_stub(channel: grpc.aio.Channel) -> Any:
    return lease_pb2_grpc.LeasesStub(channel)


def _list_request() -> meta_pb2.ListRequest:
    return meta_pb2.ListRequest(namespace=NAMESPACE)
