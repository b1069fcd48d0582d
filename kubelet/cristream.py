"""The CRI runtime's streams: the kubelet's Exec, Attach and PortForward calls relayed to the
container runtime's streaming server.

CRI's `Exec`, `Attach` and `PortForward` answer a URL on the runtime's streaming server
(containerd's `stream_server_address`/`stream_server_port`: plain HTTP on 127.0.0.1, one
single-use token per URL). That server is kube's own streaming library inside the runtime and
speaks kube's protocols after an HTTP upgrade: SPDY/3.1 with `X-Stream-Protocol-Version`
`v4.channel.k8s.io` (remotecommand) or `portforward.k8s.io`. It also takes WebSockets, but only
the v1-v4 channel protocols, which cannot half-close stdin (`kubectl exec -i ... cat` would never
see EOF), so the kubelet speaks SPDY, as kubectl did before WebSockets.

- remotecommand: the client opens one SPDY stream per standard stream, each named by its
  `streamType` header: `error` first, then `stdin`, `stdout`, `stderr` (not with a tty) and
  `resize` (with a tty), exactly those the CRI request asked for (the server waits for that many).
  stdin's bytes go as data on its stream, its end as FIN (the v5 close signal); resizes as the
  JSON `TerminalSize` objects on the resize stream; the server's stdout and stderr come back as
  data, the error stream carries one JSON `metav1.Status` (Success, NonZeroExitCode with the code)
  before the server closes the connection. Each maps 1:1 to the kubelet call's channel frames
  (tinykube/remotecommand.py), so the Status goes to the client unchanged.
- portforward: per port a pair of streams with headers `streamType` (`error`, `data`), `port`
  and `requestID`; the error stream is closed at once from our side (we never write to it); the
  runtime dials the port inside the pod's network namespace when the pair is complete. The
  pair's data is the call's channel 2i, a message on the error stream its channel 2i+1.

The connection to the runtime ends when the kubelet call does (the client went away): the
runtime then sees its streams reset. Unlike the process runtime's, an exec'd process whose
client went away is not killed by the kubelet: CRI has no call for it, containerd ends it when
it next writes to the closed stream or reads EOF from stdin.

Concurrency: one task reads the connection (`SpdyClient._read`) into an event queue the relay
loop consumes; one task relays the kubelet call's client frames to the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from tinykube import remotecommand as rc
from tinykube import spdy
from tinykube.errors import InternalError
from tinykube.v1 import kubelet_pb2

log = logging.getLogger(__name__)

REMOTECOMMAND_PROTOCOL = "v4.channel.k8s.io"
PORT_FORWARD_PROTOCOL = "portforward.k8s.io"
CONNECT_TIMEOUT = 30.0
MAX_RESPONSE_HEAD = 64 * 1024
READ_SIZE = 64 * 1024
CHUNK = rc.MAX_FRAME - 1


@dataclass(frozen=True)
class Event:
    """What the runtime sent: `data` on `stream` (empty with `fin`), or the end of the whole
    connection (`stream` 0)."""

    stream: int
    data: bytes = b""
    fin: bool = False


class SpdyClient:
    """A client's SPDY/3.1 connection over an upgraded HTTP/1.1 connection (moby/spdystream's
    peer): streams opened with SYN_STREAM (odd ids), data written with or without FIN, what the
    server sends delivered as `Event`s on `events`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames = spdy.FrameReader()
        self.headers = spdy.HeaderCodec()
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.next_id = 1
        self.closed = False
        self._task = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url: str, protocol: str) -> SpdyClient:
        """Upgrade a POST to `url` to SPDY/3.1 speaking `protocol`; a refusal is an error with
        the server's answer (the runtime's: an expired token is a 404)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise InternalError(f"the runtime's streaming URL {url!r} is not plain http://host")
        port = parts.port or 80
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(parts.hostname, port), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            raise InternalError(
                f"error connecting to the runtime's streaming server at {parts.netloc}: {exc}"
            ) from exc
        try:
            writer.write(
                (
                    f"POST {target or '/'} HTTP/1.1\r\n"
                    f"Host: {parts.netloc}\r\n"
                    "Connection: Upgrade\r\n"
                    "Upgrade: SPDY/3.1\r\n"
                    f"X-Stream-Protocol-Version: {protocol}\r\n"
                    "Content-Length: 0\r\n\r\n"
                ).encode()
            )
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CONNECT_TIMEOUT)
        except (
            OSError,
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ) as exc:
            writer.close()
            raise InternalError(
                f"error upgrading the connection to the runtime's streaming server: {exc}"
            ) from exc
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        fields = status_line.split(" ", 2)
        code = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
        if code != 101:
            body = b""
            with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
                body = await asyncio.wait_for(reader.read(4096), 5.0)
            writer.close()
            detail = body.decode(errors="replace").strip() or status_line
            raise InternalError(f"the runtime's streaming server refused the stream: {detail}")
        answered = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(":") for line in header_lines if line)
        }
        if answered.get("x-stream-protocol-version", protocol) != protocol:
            writer.close()
            raise InternalError(
                f"the runtime's streaming server chose protocol "
                f"{answered['x-stream-protocol-version']!r}, not {protocol!r}"
            )
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(READ_SIZE)
                if not data:
                    break
                for frame in self.frames.feed(data):
                    if not frame.control:
                        self.events.put_nowait(Event(frame.stream_id, frame.payload, frame.fin))
                    elif frame.type == spdy.SYN_REPLY:
                        self.headers.decode(frame.payload[4:])  # keeps the decompressor in step
                        if frame.fin:
                            self.events.put_nowait(Event(spdy.stream_id_of(frame), fin=True))
                    elif frame.type == spdy.HEADERS:
                        self.headers.decode(frame.payload[4:])
                    elif frame.type == spdy.RST_STREAM:
                        self.events.put_nowait(Event(spdy.stream_id_of(frame), fin=True))
                    elif frame.type == spdy.PING:
                        self._send(spdy.control(spdy.PING, frame.payload))
                    elif frame.type == spdy.GOAWAY:
                        break
                    elif frame.type == spdy.SYN_STREAM:  # the server opens none of its own
                        self._send(spdy.rst_stream(spdy.stream_id_of(frame), spdy.REFUSED_STREAM))
                    # SETTINGS, WINDOW_UPDATE: spdystream keeps no flow control.
        except (OSError, spdy.ProtocolError) as exc:
            log.debug("runtime stream connection: %s", exc)
        finally:
            self.events.put_nowait(Event(0))

    def _send(self, frame: bytes) -> None:
        if not self.closed and not self.writer.is_closing():
            self.writer.write(frame)

    def open_stream(self, headers: dict[str, str], *, fin: bool = False) -> int:
        sid = self.next_id
        self.next_id += 2
        self._send(spdy.syn_stream(sid, self.headers.encode(headers), fin=fin))
        return sid

    async def write(self, sid: int, data: bytes, *, fin: bool = False) -> None:
        view = memoryview(data)
        while len(view) > spdy.MAX_DATA:
            self._send(spdy.data(sid, bytes(view[: spdy.MAX_DATA])))
            view = view[spdy.MAX_DATA :]
        self._send(spdy.data(sid, bytes(view), fin=fin))
        with contextlib.suppress(OSError):
            await self.writer.drain()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


def _frames(channel: int, data: bytes) -> list[kubelet_pb2.StreamFrame]:
    return [
        kubelet_pb2.StreamFrame(data=rc.frame(channel, data[i : i + CHUNK]))
        for i in range(0, len(data), CHUNK)
    ]


async def remotecommand(
    url: str,
    *,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    protocol: str,
    request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    idle_timeout: float,
    command: list[str] | None = None,
) -> AsyncIterator[kubelet_pb2.StreamFrame]:
    """An exec or attach: connects (errors raise before anything is yielded), yields the
    empty frame that accepts the call, then the output channels and the error channel's Status.
    `stdin`, `stdout`, `stderr`, `tty` must be those of the CRI request behind `url`."""
    conn = await SpdyClient.connect(url, REMOTECOMMAND_PROTOCOL)
    try:
        error_sid = conn.open_stream({"streamType": "error"})
        stdin_sid = conn.open_stream({"streamType": "stdin"}) if stdin else 0
        names: dict[int, int] = {}
        if stdout:
            names[conn.open_stream({"streamType": "stdout"})] = rc.STDOUT
        if stderr and not tty:
            names[conn.open_stream({"streamType": "stderr"})] = rc.STDERR
        resize_sid = conn.open_stream({"streamType": "resize"}) if tty else 0
        yield kubelet_pb2.StreamFrame()  # accepted
        pump = asyncio.ensure_future(
            _client_frames(conn, request_iterator, stdin_sid, resize_sid, protocol)
        )
        status = b""
        got_status = False
        loop = asyncio.get_running_loop()
        last = loop.time()
        try:
            while True:
                timeout = max(1.0, idle_timeout - (loop.time() - last))
                try:
                    event = await asyncio.wait_for(conn.events.get(), timeout)
                except TimeoutError:
                    if loop.time() - last >= idle_timeout:
                        log.info("runtime stream idle for %.0fs, closing", idle_timeout)
                        return
                    continue
                last = loop.time()
                if event.stream == 0:
                    break  # the runtime closed the connection: the command has ended
                if event.stream == error_sid:
                    status += event.data
                    if event.fin:
                        got_status = True
                        if status:
                            yield kubelet_pb2.StreamFrame(data=rc.frame(rc.ERROR, status))
                    continue
                channel = names.get(event.stream)
                if channel is not None and event.data:
                    for out in _frames(channel, event.data):
                        yield out
            if not got_status:
                if status:
                    yield kubelet_pb2.StreamFrame(data=rc.frame(rc.ERROR, status))
                else:
                    what = " ".join(command) if command else "the stream"
                    yield kubelet_pb2.StreamFrame(
                        data=rc.frame(
                            rc.ERROR,
                            rc.error_status(
                                f"the container runtime ended {what} without an exit status"
                            ),
                        )
                    )
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
    finally:
        await conn.close()


async def _client_frames(
    conn: SpdyClient,
    request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    stdin_sid: int,
    resize_sid: int,
    protocol: str,
) -> None:
    """The kubelet call's client frames onto the runtime's streams."""
    stdin_open = stdin_sid != 0
    async for msg in request_iterator:
        try:
            channel, data = rc.parse(msg.data)
        except ValueError:
            continue
        if channel == rc.STDIN and stdin_open and data:
            await conn.write(stdin_sid, data)
        elif channel == rc.RESIZE and resize_sid:
            try:
                width, height = rc.parse_resize(data)
            except ValueError as exc:
                log.debug("resize refused: %s", exc)
                continue
            size = json.dumps({"Width": width, "Height": height}).encode()
            await conn.write(resize_sid, size)
        elif channel == rc.CLOSE and protocol == rc.V5 and stdin_open:
            with contextlib.suppress(ValueError):
                if rc.close_signal(data) == rc.STDIN:
                    stdin_open = False
                    await conn.write(stdin_sid, b"", fin=True)
    # The client ended its side: stdin ends with it.
    if stdin_open:
        await conn.write(stdin_sid, b"", fin=True)


async def port_forward(
    url: str,
    ports: list[int],
    request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    idle_timeout: float,
) -> AsyncIterator[kubelet_pb2.StreamFrame]:
    """A port-forward of `ports` (one connection each) in the kubelet call's channel framing:
    the port's 2 bytes first on each of its channels, then its data; ends when every port's
    connection has."""
    conn = await SpdyClient.connect(url, PORT_FORWARD_PROTOCOL)
    try:
        data_sids: dict[int, int] = {}  # stream -> port index
        error_sids: dict[int, int] = {}
        for i, port in enumerate(ports):
            headers = {"port": str(port), "requestID": str(i)}
            # kubectl's order: the error stream, closed at once (nothing is written to it),
            # then the data stream.
            error_sid = conn.open_stream({"streamType": "error", **headers})
            await conn.write(error_sid, b"", fin=True)
            error_sids[error_sid] = i
            data_sids[conn.open_stream({"streamType": "data", **headers})] = i
        by_index = {i: sid for sid, i in data_sids.items()}
        yield kubelet_pb2.StreamFrame()  # accepted
        for i, port in enumerate(ports):
            data_ch, err_ch = rc.port_channels(i)
            yield kubelet_pb2.StreamFrame(data=rc.frame(data_ch, rc.port_prefix(port)))
            yield kubelet_pb2.StreamFrame(data=rc.frame(err_ch, rc.port_prefix(port)))

        async def client() -> None:
            async for msg in request_iterator:
                try:
                    channel, data = rc.parse(msg.data)
                except ValueError:
                    continue
                sid = by_index.get(channel // 2)
                if channel % 2 == 0 and sid is not None and sid in open_data and data:
                    await conn.write(sid, data)
            for sid in list(open_data):
                await conn.write(sid, b"", fin=True)

        open_data = set(data_sids)
        # A port's connection has ended once the runtime has closed both its streams: it
        # closes the data stream first when the dial fails, then writes the error.
        open_streams = set(data_sids) | set(error_sids)
        pump = asyncio.ensure_future(client())
        try:
            while open_streams:
                try:
                    event = await asyncio.wait_for(conn.events.get(), idle_timeout)
                except TimeoutError:
                    return
                if event.stream == 0:
                    return
                if event.fin:
                    open_streams.discard(event.stream)
                if event.stream in data_sids:
                    i = data_sids[event.stream]
                    if event.data:
                        for out in _frames(rc.port_channels(i)[0], event.data):
                            yield out
                    if event.fin:
                        open_data.discard(event.stream)
                elif event.stream in error_sids and event.data:
                    i = error_sids[event.stream]
                    yield kubelet_pb2.StreamFrame(data=rc.frame(rc.port_channels(i)[1], event.data))
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
    finally:
        await conn.close()
