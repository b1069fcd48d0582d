"""Plain SPDY/3.1 upgrades of pods/exec, pods/attach and pods/portforward: what kubectl falls
back to when its WebSocket attempt fails, and what client-go's SPDY executor (kubectl before
1.29, and the many Go tools built on it) always speaks.

The client sends `Connection: Upgrade`, `Upgrade: SPDY/3.1` and the protocols it speaks as
`X-Stream-Protocol-Version` headers (remotecommand `v4.channel.k8s.io`, ..., or
`portforward.k8s.io`); the server picks one (kube's httpstream.Handshake: the client's first
one the server speaks; none offered is a 400, none in common a 403 naming both lists), answers
101 with it, and the connection is SPDY from then on.

aiohttp serves only WebSocket upgrades, but its request handler lets a response take the
connection over: `RequestHandler.set_parser` (what `WebSocketResponse` itself uses) routes every
byte that arrives after the request to a parser object's `feed_data`, and the transport is the
request's. `RawConnection` is that parser: it is installed before the 101 answer goes out (the
client sends nothing before it reads the 101, so no byte reaches aiohttp's HTTP parser), and
writes go to the transport directly. The response object stays a prepared, body-less 101 that
closes the connection when the handler returns.

The remotecommand side (`RemoteCommand`, kube's v4 over SPDY, server role): the client opens
one stream per standard stream (header `streamType`: error, stdin, stdout, stderr, resize); once
all that the options call for are there, each client stream's data becomes the kubelet call's
channel frames (stdin 0, its FIN the v5 close signal, resize JSON objects 4), the call's stdout,
stderr and error frames become data on the client's streams, and the call's end closes every
stream and the connection. Port-forward's streams are apiserver/portforward.py's tunnel, over
this connection instead of a WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable

import grpc
from aiohttp import web

from apiserver.kubeletstream import Call, channels
from tinykube import remotecommand as rc
from tinykube import spdy
from tinykube.errors import BadRequestError, ForbiddenError
from tinykube.v1 import kubelet_pb2

log = logging.getLogger(__name__)

UPGRADE = "SPDY/3.1"
PROTOCOL_HEADER = "X-Stream-Protocol-Version"
REMOTECOMMAND_PROTOCOLS = (rc.V4,)
PORT_FORWARD_PROTOCOLS = ("portforward.k8s.io",)
# kube's streamCreationTimeout: how long the client may take to open its streams.
STREAM_CREATION_TIMEOUT = 30.0
# Writes wait while the transport holds more than this.
WRITE_HIGH_WATER = 1 << 20


def is_spdy_upgrade(request: web.Request) -> bool:
    connection = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    return "upgrade" in connection and request.headers.get("Upgrade", "").lower() == "spdy/3.1"


def negotiate(request: web.Request, supported: Iterable[str]) -> str:
    """The protocol to speak: the client's first offered one the server supports."""
    offered = [
        p.strip()
        for value in request.headers.getall(PROTOCOL_HEADER, [])
        for p in value.split(",")
        if p.strip()
    ]
    if not offered:
        raise BadRequestError(f"unable to upgrade: {PROTOCOL_HEADER} is required")
    served = list(supported)
    for p in offered:
        if p in served:
            return p
    raise ForbiddenError(
        "unable to upgrade: unable to negotiate protocol: client supports "
        f"[{' '.join(offered)}], server accepts [{' '.join(served)}]"
    )


class RawConnection:
    """The connection under an upgraded request: bytes in through `read`, out through
    `write`. Also the `feed_data`/`feed_eof` parser aiohttp's request handler feeds."""

    def __init__(self, request: web.Request) -> None:
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("the client has gone")
        self.transport = transport
        self.incoming: asyncio.Queue[bytes | None] = asyncio.Queue()
        request.protocol.set_parser(self)  # type: ignore[arg-type]

    # aiohttp's payload parser interface.
    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.incoming.put_nowait(bytes(data))
        return False, b""

    def feed_eof(self) -> None:
        self.incoming.put_nowait(None)

    async def read(self) -> bytes | None:
        """The next bytes from the client; None once it has closed the connection."""
        return await self.incoming.get()

    async def write(self, data: bytes) -> None:
        if self.transport.is_closing():
            raise ConnectionResetError("the client has gone")
        self.transport.write(data)
        while self.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
            if self.transport.is_closing():
                raise ConnectionResetError("the client has gone")
            await asyncio.sleep(0.01)

    def close(self) -> None:
        self.transport.close()


async def upgrade(request: web.Request, protocol: str) -> tuple[web.StreamResponse, RawConnection]:
    """Answer 101 with `protocol` and take the connection over."""
    resp = web.StreamResponse(
        status=101,
        headers={"Connection": "Upgrade", "Upgrade": UPGRADE, PROTOCOL_HEADER: protocol},
    )
    resp.force_close()
    conn = RawConnection(request)
    await resp.prepare(request)
    return resp, conn


class RemoteCommand:
    """kube's remotecommand v4 over SPDY, served: the client's streams relayed to an accepted
    kubelet call (exec or attach)."""

    def __init__(self, conn: RawConnection, *, stdin: bool, stdout: bool, stderr: bool, tty: bool):
        self.conn = conn
        self.frames = spdy.FrameReader()
        self.headers = spdy.HeaderCodec()
        # The streams the client must open: kube's expectedStreams.
        self.expected = {"error"}
        if stdin:
            self.expected.add("stdin")
        if stdout:
            self.expected.add("stdout")
        if stderr and not tty:
            self.expected.add("stderr")
        if tty:
            self.expected.add("resize")
        self.streams: dict[str, int] = {}
        self.kinds: dict[int, str] = {}
        self.ready = asyncio.Event()
        self.lock = asyncio.Lock()
        self.last_stream = 0

    async def send(self, frame: bytes) -> None:
        async with self.lock:
            await self.conn.write(frame)

    async def run(self, call: Call) -> None:
        reader = asyncio.ensure_future(self._read(call))
        try:
            try:
                await asyncio.wait_for(self.ready.wait(), STREAM_CREATION_TIMEOUT)
            except TimeoutError:
                log.info("remotecommand over SPDY: the client opened no streams in time")
                return
            await self._relay(call)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            call.cancel()
            with contextlib.suppress(Exception):
                await self.send(spdy.goaway(self.last_stream))
            self.conn.close()

    async def _read(self, call: Call) -> None:
        """The client's frames: stream openings until all are there, then their data."""
        resize = b""
        try:
            while (data := await self.conn.read()) is not None:
                for frame in self.frames.feed(data):
                    if not frame.control:
                        kind = self.kinds.get(frame.stream_id, "")
                        if kind == "stdin":
                            if frame.payload:
                                await call.write(_frame(rc.STDIN, frame.payload))
                            if frame.fin:
                                await call.write(_frame(rc.CLOSE, bytes((rc.STDIN,))))
                        elif kind == "resize" and frame.payload:
                            resize += frame.payload
                            resize = await self._resizes(call, resize)
                        continue
                    if frame.type == spdy.SYN_STREAM:
                        await self._syn_stream(frame)
                    elif frame.type == spdy.HEADERS:
                        self.headers.decode(frame.payload[4:])
                    elif frame.type == spdy.PING:
                        await self.send(spdy.control(spdy.PING, frame.payload))
                    elif frame.type == spdy.GOAWAY:
                        break
                    # RST_STREAM, SETTINGS, WINDOW_UPDATE: nothing to do.
        except spdy.ProtocolError as exc:
            log.info("remotecommand over SPDY: %s", exc)
            await self.send(spdy.goaway(self.last_stream, spdy.PROTOCOL_ERROR))
        except (grpc.RpcError, asyncio.InvalidStateError):
            # A failed write: the kubelet has ended the call, whose last frames (the exit
            # status) are still to be read (apiserver/kubeletstream.py); no cancel.
            return
        except ConnectionError:
            pass
        # The client is gone (or has closed its side): the kubelet call ends with it.
        call.cancel()

    async def _resizes(self, call: Call, buffer: bytes) -> bytes:
        """Each complete JSON TerminalSize in `buffer` to the call; the rest is kept."""
        text = buffer.decode(errors="replace")
        decoder = json.JSONDecoder()
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                return b""
            try:
                size, end = decoder.raw_decode(text, pos)
            except ValueError:
                return text[pos:].encode()
            pos = end
            if isinstance(size, dict):
                msg = json.dumps({"Width": size.get("Width", 0), "Height": size.get("Height", 0)})
                await call.write(_frame(rc.RESIZE, msg.encode()))

    async def _syn_stream(self, frame: spdy.Frame) -> None:
        sid = spdy.stream_id_of(frame)
        headers = self.headers.decode(spdy.syn_stream_block(frame))
        self.last_stream = max(self.last_stream, sid)
        kind = headers.get("streamtype", "")
        await self.send(spdy.syn_reply(sid, self.headers.encode({})))
        if kind not in self.expected or kind in self.streams:
            log.info("remotecommand over SPDY: unexpected stream type %r", kind)
            await self.send(spdy.rst_stream(sid, spdy.REFUSED_STREAM))
            return
        self.streams[kind] = sid
        self.kinds[sid] = kind
        if set(self.streams) == self.expected:
            self.ready.set()

    async def _relay(self, call: Call) -> None:
        """The kubelet call's frames onto the client's streams, then every stream closed."""
        out = {rc.STDOUT: "stdout", rc.STDERR: "stderr", rc.ERROR: "error"}
        async with contextlib.aclosing(channels(call)) as frames:
            async for channel, payload in frames:
                sid = self.streams.get(out.get(channel, ""), 0)
                if sid and payload:
                    for start in range(0, len(payload), spdy.MAX_DATA):
                        await self.send(spdy.data(sid, payload[start : start + spdy.MAX_DATA]))
        for kind in ("stdout", "stderr", "error"):
            sid = self.streams.get(kind, 0)
            if sid:
                await self.send(spdy.data(sid, b"", fin=True))


def _frame(channel: int, data: bytes) -> kubelet_pb2.StreamFrame:
    return kubelet_pb2.StreamFrame(data=rc.frame(channel, data))
