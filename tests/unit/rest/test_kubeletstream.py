"""apiserver/kubeletstream.py: a kubelet streaming call's frames as the apiserver's relays read
them, over a faked call."""

from __future__ import annotations

from typing import Any, cast

import grpc
import pytest

from apiserver import kubeletstream
from tinykube import remotecommand as rc
from tinykube.v1 import kubelet_pb2


class FakeCall:
    """A call's async iteration (what the relays read, never `read`) from a script: a frame,
    grpc.aio.EOF for its end, or an exception to raise."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.reads = 0

    def __aiter__(self) -> FakeCall:
        return self

    async def __anext__(self) -> Any:
        self.reads += 1
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        if item is grpc.aio.EOF:
            raise StopAsyncIteration
        return item

    async def read(self) -> Any:
        raise AssertionError("read() answers EOF once a failed write has marked the call done")


def frame(data: bytes) -> kubelet_pb2.StreamFrame:
    return kubelet_pb2.StreamFrame(data=data)


async def collect(it: Any) -> list[Any]:
    return [x async for x in it]


async def test_messages_are_each_frames_data_until_the_end_of_stream() -> None:
    call = FakeCall(frame(b"\x01out"), frame(b""), frame(b"\x03status"), grpc.aio.EOF)
    got = await collect(kubeletstream.messages(cast(kubeletstream.Call, call)))
    assert got == [b"\x01out", b"", b"\x03status"]
    assert call.reads == 4


async def test_a_failed_or_cancelled_call_ends_the_frames() -> None:
    failed = FakeCall(
        frame(b"\x01a"),
        grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, grpc.aio.Metadata(), grpc.aio.Metadata()),
    )
    assert await collect(kubeletstream.messages(cast(kubeletstream.Call, failed))) == [b"\x01a"]
    # Anything but a StreamFrame ends it too.
    odd = FakeCall(frame(b"\x01a"), None, frame(b"\x01never"))
    assert await collect(kubeletstream.channels(cast(kubeletstream.Call, odd))) == [
        (rc.STDOUT, b"a")
    ]


async def test_channels_split_the_channel_byte_and_pass_over_empty_frames() -> None:
    call = FakeCall(
        frame(rc.frame(rc.STDOUT, b"hi")),
        frame(b""),
        frame(rc.frame(rc.STDERR)),
        frame(rc.frame(rc.ERROR, rc.success_status())),
        grpc.aio.EOF,
    )
    got = await collect(kubeletstream.channels(cast(kubeletstream.Call, call)))
    assert got == [(rc.STDOUT, b"hi"), (rc.STDERR, b""), (rc.ERROR, rc.success_status())]


async def test_other_errors_reach_the_reader() -> None:
    call = FakeCall(frame(b"\x01a"), ConnectionResetError("gone"))
    with pytest.raises(ConnectionResetError):
        await collect(kubeletstream.channels(cast(kubeletstream.Call, call)))
