"""kubelet/cristream.py against a fake CRI streaming server speaking SPDY/3.1 (tinykube/spdy.py)
on a local socket: the upgrade, the streams a remotecommand opens, stdin and its end, the output
and the error channel's Status relayed as the kubelet call's frames; a refused URL."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from kubelet import cristream
from tinykube import remotecommand as rc
from tinykube import spdy
from tinykube.errors import InternalError
from tinykube.v1 import kubelet_pb2

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/exec/token"


async def upper_cat(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A remotecommand server: stdout is stdin upper-cased; stdin's end ends the command with
    exit code 3."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"Upgrade: SPDY/3.1" in head and b"X-Stream-Protocol-Version: v4" in head
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
    )
    frames, codec = spdy.FrameReader(), spdy.HeaderCodec()
    streams: dict[str, int] = {}
    kinds: dict[int, str] = {}
    while data := await reader.read(65536):
        for frame in frames.feed(data):
            if frame.control and frame.type == spdy.SYN_STREAM:
                sid = spdy.stream_id_of(frame)
                kind = codec.decode(spdy.syn_stream_block(frame))["streamtype"]
                streams[kind], kinds[sid] = sid, kind
                writer.write(spdy.syn_reply(sid, codec.encode({})))
            elif not frame.control and kinds.get(frame.stream_id) == "stdin":
                if frame.payload:
                    writer.write(spdy.data(streams["stdout"], frame.payload.upper()))
                if frame.fin:
                    writer.write(spdy.data(streams["stdout"], b"", fin=True))
                    status = rc.exit_status(3, ["cat"])
                    writer.write(spdy.data(streams["error"], status, fin=True))
                    await writer.drain()
                    writer.close()
                    return


async def frames(*messages: bytes) -> AsyncIterator[kubelet_pb2.StreamFrame]:
    for m in messages:
        yield kubelet_pb2.StreamFrame(data=m)


async def test_exec_relays_stdin_its_end_output_and_the_exit_status() -> None:
    server, url = await serve(upper_cat)
    async with server:
        stream = cristream.remotecommand(
            url,
            stdin=True,
            stdout=True,
            stderr=False,
            tty=False,
            protocol=rc.V5,
            request_iterator=frames(
                rc.frame(rc.STDIN, b"hello "), rc.frame(rc.STDIN, b"world"), bytes([255, 0])
            ),
            idle_timeout=60,
        )
        out = [f.data async for f in stream]
    assert out[0] == b""  # the accepting frame
    stdout = b"".join(m[1:] for m in out if m[:1] == bytes([rc.STDOUT]))
    assert stdout == b"HELLO WORLD"
    status = [m[1:] for m in out if m[:1] == bytes([rc.ERROR])]
    assert len(status) == 1 and rc.exit_code_of(status[0]) == 3


async def test_a_refused_url_is_an_error_before_any_frame() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 16\r\n\r\ninvalid token x\n")
        await writer.drain()
        writer.close()

    server, url = await serve(refuse)
    async with server:
        stream = cristream.remotecommand(
            url,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            protocol=rc.V5,
            request_iterator=frames(),
            idle_timeout=60,
        )
        with pytest.raises(InternalError, match="invalid token x"):
            await anext(stream)


async def test_resizes_go_to_the_resize_stream_as_terminal_sizes() -> None:
    got: list[dict[str, int]] = []
    done = asyncio.Event()

    async def resize_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
        frames_, codec = spdy.FrameReader(), spdy.HeaderCodec()
        kinds: dict[int, str] = {}
        while data := await reader.read(65536):
            for frame in frames_.feed(data):
                if frame.control and frame.type == spdy.SYN_STREAM:
                    sid = spdy.stream_id_of(frame)
                    kinds[sid] = codec.decode(spdy.syn_stream_block(frame))["streamtype"]
                elif not frame.control and kinds.get(frame.stream_id) == "resize":
                    got.append(json.loads(frame.payload))
                    done.set()
        writer.close()

    server, url = await serve(resize_server)
    async with server:

        async def client() -> AsyncIterator[kubelet_pb2.StreamFrame]:
            yield kubelet_pb2.StreamFrame(data=rc.resize_message(120, 40))
            await done.wait()

        stream = cristream.remotecommand(
            url,
            stdin=True,
            stdout=True,
            stderr=False,
            tty=True,
            protocol=rc.V5,
            request_iterator=client(),
            idle_timeout=60,
        )
        relay = asyncio.ensure_future(_drain(stream))
        await asyncio.wait_for(done.wait(), 10)
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay
    assert got == [{"Width": 120, "Height": 40}]


async def _drain(stream: AsyncIterator[kubelet_pb2.StreamFrame]) -> None:
    async for _ in stream:
        pass
