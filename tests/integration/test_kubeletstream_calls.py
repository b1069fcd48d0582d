"""apiserver/kubeletstream.py over a real gRPC call: a kubelet that ends its streaming call (its
last frame, then OK) while the apiserver is still writing the client's bytes to it, as the
kubelet's port-forward to a closed port does at once. The write fails; the frames sent before
the end must still be read. (grpc.aio's `call.read()` answers the failed write's INTERNAL at
once and loses them, grpc/grpc#36066: kubectl port-forward then printed no dial error.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import grpc
import pytest

from apiserver import kubeletstream
from tinykube import remotecommand as rc
from tinykube.v1 import kubelet_pb2, kubelet_pb2_grpc

pytestmark = pytest.mark.integration

ERROR = b"error forwarding port 9 to pod box: connection refused"


class EndsAtOnce(kubelet_pb2_grpc.KubeletServicer):
    """PortForward as the kubelet's to a closed port: accepted, the port's prefixes, the dial
    error, the end. (The other calls are the base class's UNIMPLEMENTED.)"""

    def __init__(self) -> None:
        self.ended = asyncio.Event()

    async def PortForward(
        self,
        request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
        context: grpc.aio.ServicerContext[kubelet_pb2.StreamFrame, kubelet_pb2.StreamFrame],
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        await anext(request_iterator)
        yield kubelet_pb2.StreamFrame()
        yield kubelet_pb2.StreamFrame(data=rc.frame(0, rc.port_prefix(9)))
        yield kubelet_pb2.StreamFrame(data=rc.frame(1, rc.port_prefix(9)))
        yield kubelet_pb2.StreamFrame(data=rc.frame(1, ERROR))
        self.ended.set()


@pytest.fixture
async def kubelet() -> AsyncIterator[tuple[EndsAtOnce, kubelet_pb2_grpc.KubeletStub]]:
    servicer = EndsAtOnce()  # type: ignore[abstract]
    server = grpc.aio.server()
    kubelet_pb2_grpc.add_KubeletServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield servicer, kubelet_pb2_grpc.KubeletStub(channel)
    finally:
        await server.stop(None)


async def test_a_write_after_the_kubelet_ended_the_call_loses_none_of_its_frames(
    kubelet: tuple[EndsAtOnce, kubelet_pb2_grpc.KubeletStub],
) -> None:
    servicer, stub = kubelet
    call = cast(kubeletstream.Call, stub.PortForward())  # type: ignore[call-arg]
    await call.write(kubelet_pb2.StreamFrame(start=kubelet_pb2.StreamStart(name="box", ports=[9])))
    assert await kubeletstream.next_frame(call) == kubelet_pb2.StreamFrame()  # accepted
    await asyncio.wait_for(servicer.ended.wait(), 10)
    # The client's request goes on being written until a write fails: the call's end has
    # reached this side.
    with pytest.raises((grpc.RpcError, asyncio.InvalidStateError)):
        async with asyncio.timeout(10):
            while True:
                await call.write(kubelet_pb2.StreamFrame(data=rc.frame(0, b"GET / HTTP/1.1\r\n")))
    got = [frame async for frame in kubeletstream.channels(call)]
    assert got == [(0, rc.port_prefix(9)), (1, rc.port_prefix(9)), (1, ERROR)]
