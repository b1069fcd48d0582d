"""What the kubelet sends on a streaming call (Exec, Attach, PortForward; kubelet/streaming.py),
as the apiserver's relays read it: the WebSocket channel relay (apiserver/podstream.py), the
SPDY/3.1 remotecommand relay (apiserver/spdyupgrade.py) and the port-forward tunnel
(apiserver/portforward.py).

A call's frames end with the call: at its end of stream, when it fails or is cancelled (the
client went away). Nothing is read ahead; the reader's pace is the call's.

Frames are read through the call's async iterator, never `call.read()`. The kubelet ends a call
(its last frame, then its status) while the relay may still be writing the client's bytes to it;
such a write fails, and grpc.aio then marks the call finished with INTERNAL ("Internal error from
Core", grpc/grpc#36066), after which `read()` answers that status at once and the frames the
kubelet sent before its end, received and held by gRPC's core, are never read: the exit status
of an exec, the dial error of a port-forward. The iterator reads from the core until its end of
stream, so those frames still arrive. A relay's failed write therefore only stops its writing:
it neither cancels the call nor ends the reading.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

import grpc

from tinykube import remotecommand as rc
from tinykube.v1 import kubelet_pb2

log = logging.getLogger(__name__)

Call = grpc.aio.StreamStreamCall[kubelet_pb2.StreamFrame, kubelet_pb2.StreamFrame]


async def next_frame(call: Call) -> kubelet_pb2.StreamFrame | None:
    """The call's next frame; None once it has ended with OK. A failed call raises its
    grpc.RpcError (a locally cancelled one asyncio.CancelledError, as grpc.aio does)."""
    try:
        return await anext(aiter(call))
    except StopAsyncIteration:
        return None


async def messages(call: Call) -> AsyncGenerator[bytes, None]:
    """The data of each frame the kubelet sends, until the call ends."""
    while True:
        try:
            msg = await next_frame(call)
        except grpc.RpcError as exc:
            log.debug("kubelet stream ended: %s", exc)
            return
        if not isinstance(msg, kubelet_pb2.StreamFrame):
            return
        yield msg.data


async def channels(call: Call) -> AsyncGenerator[tuple[int, bytes], None]:
    """(channel, payload) of each frame the kubelet sends, until the call ends; a frame without
    its channel byte carries nothing and is passed over."""
    async for data in messages(call):
        try:
            channel, payload = rc.parse(data)
        except ValueError:
            continue
        yield channel, payload
