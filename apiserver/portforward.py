"""kubectl port-forward's tunnel: SPDY/3.1 inside a WebSocket (`SPDY/3.1+portforward.k8s.io`,
what kubectl 1.30+ tries first), served by the apiserver.

kubectl opens, for every local connection, a pair of SPDY streams with headers `streamType`
(`error` or `data`), `port` and `requestID`; it closes its side of the error stream at once and
reads from it any error. The apiserver answers each SYN_STREAM with a SYN_REPLY and, once a
pair is complete, opens one kubelet PortForward call for that port (kubelet/streaming.py, its
v4 channel framing: channel 0 data, channel 1 errors, each starting with the port's 2 bytes).
Bytes of the data stream go to the call and back; the call's end closes both streams (FIN). A
dial failure at the kubelet arrives as text on the error stream, which kubectl prints
("error forwarding port ..."). RST_STREAM from kubectl cancels the pair's call; PING is
echoed; GOAWAY or the WebSocket's close ends everything.

Concurrency: one task reads the tunnel, one task per pair relays its call; writes to the
WebSocket are serialized by a lock so frames never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import grpc
from aiohttp import WSMsgType, web

from apiserver.kubeletstream import Call, channels
from tinykube import remotecommand as rc
from tinykube import spdy
from tinykube.errors import TinykubeError
from tinykube.v1 import kubelet_pb2

log = logging.getLogger(__name__)

TUNNEL_PROTOCOL = "SPDY/3.1+portforward.k8s.io"

OpenCall = Callable[[int], Awaitable[Call]]  # a port's accepted kubelet call; TinykubeError


@dataclass
class _Pair:
    request_id: str
    port: int = 0
    error_sid: int = 0
    data_sid: int = 0
    inbound: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


class Pipe(Protocol):
    """The bytes of the client's SPDY connection: a WebSocket's binary messages (`WsPipe`) or
    the raw connection of a plain SPDY/3.1 upgrade (apiserver/spdyupgrade.py)."""

    async def read(self) -> bytes | None: ...

    async def write(self, data: bytes) -> None: ...


class WsPipe:
    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws

    async def read(self) -> bytes | None:
        while True:
            msg = await self.ws.receive()
            if msg.type == WSMsgType.BINARY:
                data: bytes = msg.data
                return data
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return None

    async def write(self, data: bytes) -> None:
        if not self.ws.closed:
            await self.ws.send_bytes(data)


class SpdyTunnel:
    def __init__(self, pipe: Pipe, open_call: OpenCall) -> None:
        self.pipe = pipe
        self.open_call = open_call
        self.reader = spdy.FrameReader()
        self.headers = spdy.HeaderCodec()
        self.lock = asyncio.Lock()
        self.pairs: dict[str, _Pair] = {}
        self.by_stream: dict[int, _Pair] = {}
        self.last_stream = 0

    async def send(self, frame: bytes) -> None:
        async with self.lock:
            await self.pipe.write(frame)

    async def run(self) -> None:
        try:
            while (data := await self.pipe.read()) is not None:
                try:
                    frames = self.reader.feed(data)
                    for frame in frames:
                        if not await self._handle(frame):
                            return
                except spdy.ProtocolError as exc:
                    log.info("port-forward tunnel: %s", exc)
                    await self.send(spdy.goaway(self.last_stream, spdy.PROTOCOL_ERROR))
                    return
        finally:
            tasks = [p.task for p in self.pairs.values() if p.task is not None]
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _handle(self, frame: spdy.Frame) -> bool:
        if not frame.control:
            pair = self.by_stream.get(frame.stream_id)
            if pair is not None and frame.stream_id == pair.data_sid and frame.payload:
                pair.inbound.put_nowait(frame.payload)
            return True
        if frame.type == spdy.SYN_STREAM:
            await self._syn_stream(frame)
        elif frame.type == spdy.HEADERS:
            self.headers.decode(frame.payload[4:])  # keeps the decompressor in step
        elif frame.type == spdy.RST_STREAM:
            pair = self.by_stream.get(spdy.stream_id_of(frame))
            if pair is not None:
                pair.inbound.put_nowait(None)
                if pair.task is not None:
                    pair.task.cancel()
        elif frame.type == spdy.PING:
            await self.send(spdy.control(spdy.PING, frame.payload))
        elif frame.type == spdy.GOAWAY:
            return False
        # SETTINGS and WINDOW_UPDATE: nothing to do (spdystream keeps no flow control).
        return True

    async def _syn_stream(self, frame: spdy.Frame) -> None:
        sid = spdy.stream_id_of(frame)
        headers = self.headers.decode(spdy.syn_stream_block(frame))
        self.last_stream = max(self.last_stream, sid)
        kind = headers.get("streamtype", "")
        request_id = headers.get("requestid", "")
        port_text = headers.get("port", "")
        await self.send(spdy.syn_reply(sid, self.headers.encode({})))
        if kind not in ("error", "data") or not port_text.isdigit():
            await self.send(spdy.rst_stream(sid, spdy.PROTOCOL_ERROR))
            return
        pair = self.pairs.setdefault(request_id, _Pair(request_id))
        pair.port = int(port_text)
        if kind == "error":
            pair.error_sid = sid
        else:
            pair.data_sid = sid
        self.by_stream[sid] = pair
        if pair.error_sid and pair.data_sid and pair.task is None:
            pair.task = asyncio.ensure_future(self._relay(pair))

    async def _relay(self, pair: _Pair) -> None:
        try:
            try:
                call = await self.open_call(pair.port)
            except TinykubeError as exc:
                await self._error(pair, f"error forwarding port {pair.port} to pod: {exc}")
                return
            writer = asyncio.ensure_future(self._upstream(pair, call))
            skip = {0: 2, 1: 2}  # the port prefix on each channel
            try:
                async with contextlib.aclosing(channels(call)) as frames:
                    async for channel, payload in frames:
                        if skip.get(channel):
                            cut = min(skip[channel], len(payload))
                            skip[channel] -= cut
                            payload = payload[cut:]
                        if not payload:
                            continue
                        if channel == 0:
                            for start in range(0, len(payload), spdy.MAX_DATA):
                                chunk = payload[start : start + spdy.MAX_DATA]
                                await self.send(spdy.data(pair.data_sid, chunk))
                        elif channel == 1:
                            await self.send(spdy.data(pair.error_sid, payload))
            finally:
                writer.cancel()
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await writer
            await self.send(spdy.data(pair.data_sid, b"", fin=True))
            await self.send(spdy.data(pair.error_sid, b"", fin=True))
        except (ConnectionError, RuntimeError) as exc:
            log.debug("port-forward pair %s: %s", pair.request_id, exc)
        finally:
            self.by_stream.pop(pair.data_sid, None)
            self.by_stream.pop(pair.error_sid, None)
            self.pairs.pop(pair.request_id, None)

    async def _upstream(self, pair: _Pair, call: Call) -> None:
        while True:
            chunk = await pair.inbound.get()
            if chunk is None:
                call.cancel()
                return
            try:
                await call.write(kubelet_pb2.StreamFrame(data=rc.frame(0, chunk)))
            except (grpc.RpcError, asyncio.InvalidStateError):
                # The kubelet has ended the call (a dial error ends it at once): its last
                # frames, the error among them, are still to be read (apiserver/kubeletstream.py).
                return

    async def _error(self, pair: _Pair, message: str) -> None:
        await self.send(spdy.data(pair.error_sid, message.encode()))
        await self.send(spdy.data(pair.error_sid, b"", fin=True))
        await self.send(spdy.data(pair.data_sid, b"", fin=True))
