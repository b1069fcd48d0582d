"""apiserver/spdyupgrade.py: kube's protocol handshake, and remotecommand v4 over SPDY served
between a client's frames and a kubelet call (both faked)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import grpc
import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from apiserver import kubeletstream, spdyupgrade
from tinykube import remotecommand as rc
from tinykube import spdy
from tinykube.errors import BadRequestError, ForbiddenError
from tinykube.v1 import kubelet_pb2


def request(*protocols: str) -> Any:
    headers = CIMultiDict([("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")])
    for p in protocols:
        headers.add("X-Stream-Protocol-Version", p)
    return make_mocked_request("POST", "/api/v1/namespaces/d/pods/p/exec", headers=headers)


def test_the_clients_first_served_protocol_is_chosen() -> None:
    req = request("v4.channel.k8s.io", "v3.channel.k8s.io")
    assert spdyupgrade.is_spdy_upgrade(req)
    assert spdyupgrade.negotiate(req, ["v4.channel.k8s.io"]) == "v4.channel.k8s.io"
    assert spdyupgrade.negotiate(request("v9, v4.channel.k8s.io"), ["v4.channel.k8s.io"]) == (
        "v4.channel.k8s.io"
    )


def test_no_protocol_is_a_400_and_none_in_common_a_403() -> None:
    with pytest.raises(BadRequestError, match="X-Stream-Protocol-Version is required"):
        spdyupgrade.negotiate(request(), ["v4.channel.k8s.io"])
    with pytest.raises(ForbiddenError) as err:
        spdyupgrade.negotiate(request("v2.channel.k8s.io"), ["v4.channel.k8s.io"])
    assert str(err.value) == (
        "unable to upgrade: unable to negotiate protocol: client supports "
        "[v2.channel.k8s.io], server accepts [v4.channel.k8s.io]"
    )


class FakeConn:
    def __init__(self) -> None:
        self.incoming: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.out = bytearray()
        self.closed = False

    async def read(self) -> bytes | None:
        return await self.incoming.get()

    async def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True
        self.incoming.put_nowait(None)


class FakeCall:
    """A kubelet Exec call: records what is written, answers stdout for each stdin chunk and
    the exit status once stdin has ended."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.cancelled = False
        self.ended = False
        self.failed = asyncio.Event()

    async def write(self, frame: kubelet_pb2.StreamFrame) -> None:
        if self.ended:
            # grpc.aio's failed write once the kubelet has ended the call.
            self.failed.set()
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata()
            )
        self.written.append(frame.data)
        channel, data = rc.parse(frame.data)
        if channel == rc.STDIN:
            self.replies.put_nowait(kubelet_pb2.StreamFrame(data=rc.frame(rc.STDOUT, data)))
        elif channel == rc.CLOSE:
            status = rc.success_status()
            self.replies.put_nowait(kubelet_pb2.StreamFrame(data=rc.frame(rc.ERROR, status)))
            self.replies.put_nowait(grpc.aio.EOF)

    def __aiter__(self) -> FakeCall:
        return self

    async def __anext__(self) -> Any:
        reply = await self.replies.get()
        if reply is grpc.aio.EOF:
            raise StopAsyncIteration
        return reply

    def cancel(self) -> bool:
        self.cancelled = True
        return True


async def test_streams_relay_to_the_kubelet_call_and_back() -> None:
    conn, call = FakeConn(), FakeCall()
    codec = spdy.HeaderCodec()
    command = spdyupgrade.RemoteCommand(
        cast(spdyupgrade.RawConnection, conn), stdin=True, stdout=True, stderr=False, tty=True
    )
    for sid, kind in ((1, "error"), (3, "stdin"), (5, "stdout"), (7, "resize")):
        conn.incoming.put_nowait(spdy.syn_stream(sid, codec.encode({"streamType": kind})))
    resize = json.dumps({"Width": 90, "Height": 30}).encode() + b"\n"
    conn.incoming.put_nowait(spdy.data(7, resize[:10]))  # a JSON object in two pieces
    conn.incoming.put_nowait(spdy.data(7, resize[10:]))
    conn.incoming.put_nowait(spdy.data(3, b"hi"))
    conn.incoming.put_nowait(spdy.data(3, b"", fin=True))
    await asyncio.wait_for(command.run(cast(kubeletstream.Call, call)), 10)
    assert call.written == [
        rc.resize_message(90, 30),
        rc.frame(rc.STDIN, b"hi"),
        rc.frame(rc.CLOSE, bytes([rc.STDIN])),
    ]
    frames = spdy.FrameReader().feed(bytes(conn.out))
    replies = [spdy.stream_id_of(f) for f in frames if f.control and f.type == spdy.SYN_REPLY]
    assert replies == [1, 3, 5, 7]
    data = [(f.stream_id, f.payload, f.fin) for f in frames if not f.control]
    assert (5, b"hi", False) in data
    assert (1, rc.success_status(), False) in data
    assert (5, b"", True) in data and (1, b"", True) in data
    assert frames[-1].control and frames[-1].type == spdy.GOAWAY
    assert conn.closed


async def test_a_failed_write_neither_cancels_the_call_nor_loses_its_status() -> None:
    """The command exited (its status sent, the call ended) while the client still sends
    stdin: the failed write leaves the call to be read to its end."""
    conn, call = FakeConn(), FakeCall()
    codec = spdy.HeaderCodec()
    command = spdyupgrade.RemoteCommand(
        cast(spdyupgrade.RawConnection, conn), stdin=True, stdout=True, stderr=False, tty=False
    )
    for sid, kind in ((1, "error"), (3, "stdin"), (5, "stdout")):
        conn.incoming.put_nowait(spdy.syn_stream(sid, codec.encode({"streamType": kind})))
    status = rc.exit_status(3, ["sh"])
    call.ended = True
    conn.incoming.put_nowait(spdy.data(3, b"more input"))
    relay = asyncio.ensure_future(command.run(cast(kubeletstream.Call, call)))
    await asyncio.wait_for(call.failed.wait(), 10)
    assert not call.cancelled
    call.replies.put_nowait(kubelet_pb2.StreamFrame(data=rc.frame(rc.ERROR, status)))
    call.replies.put_nowait(grpc.aio.EOF)
    await asyncio.wait_for(relay, 10)
    frames = spdy.FrameReader().feed(bytes(conn.out))
    data = [(f.stream_id, f.payload, f.fin) for f in frames if not f.control]
    assert (1, status, False) in data and (1, b"", True) in data
