"""What the kubelet sends on a streaming call (Exec, Attach, PortForward; kubelet/streaming.py),
as the apiserver's relays read it: the WebSocket channel relay (apiserver/podstream.py), the
SPDY/3.1 remotecommand relay (apiserver/spdyupgrade.py) and the port-forward tunnel
(apiserver/portforward.py).

A call's frames end with the call: at its end of stream, when it fails or is cancelled (the
client went away). Nothing is read ahead; the reader's pace is the call's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import grpc

from tinykube import remotecommand as rc
from tinykube.v1 import kubelet_pb2

Call = grpc.aio.StreamStreamCall[kubelet_pb2.StreamFrame, kubelet_pb2.StreamFrame]


async def messages(call: Call) -> AsyncGenerator[bytes, None]:
    """The data of each frame the kubelet sends, until the call ends."""
    while True:
        try:
            msg = await call.read()
        except grpc.RpcError:
            return
        if msg is grpc.aio.EOF or not isinstance(msg, kubelet_pb2.StreamFrame):
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
