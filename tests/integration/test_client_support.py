"""Helpers for the client, informer and leader-election integration tests (no tests here).

`TcpProxy` sits between a client and the real apiserver so a test can cut every connection
(what a dropped link or a keepalive timeout does to a watch) and refuse new ones for a while,
without touching the apiserver. Builders make minimal valid objects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from tinykube.v1 import meta_pb2, node_pb2, pod_pb2


class TcpProxy:
    """A TCP forwarder on 127.0.0.1:<free port> to `target` ("host:port")."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.refusing = False
        self.blackhole = False  # accept connections but never forward a byte
        # Forward requests but hold the server's bytes until `release()`: an answer that is
        # computed (the request landed) but arrives after the client's deadline.
        self.holding_answers = False
        self._held: list[tuple[asyncio.StreamWriter, bytes]] = []
        self.connections = 0
        self.address = ""

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        if self.blackhole:
            self._writers.add(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self.connections += 1
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, answers: bool) -> None:
            try:
                while data := await src.read(65536):
                    if answers and self.holding_answers:
                        self._held.append((dst, data))
                        continue
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.close()
                self._writers.discard(dst)

        for coro in (pipe(reader, up_writer, False), pipe(up_reader, writer, True)):
            task = asyncio.ensure_future(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def release(self) -> None:
        """Stop holding the server's bytes and deliver those held, in order."""
        self.holding_answers = False
        held, self._held = self._held, []
        for dst, data in held:
            if not dst.is_closing():
                dst.write(data)

    def cut(self) -> None:
        """Close every open connection (both directions), as a broken link would."""
        for w in list(self._writers):
            transport = w.transport
            # abort: an RST, so the client sees the loss at once rather than a graceful close.
            transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def make_pod(name: str, namespace: str = "default", **labels: str) -> pod_pb2.Pod:
    p = pod_pb2.Pod(
        apiVersion="v1",
        kind="Pod",
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace, labels=labels),
    )
    p.spec.containers.add(name="main", image="busybox")
    return p


def make_node(name: str) -> node_pb2.Node:
    return node_pb2.Node(apiVersion="v1", kind="Node", metadata=meta_pb2.ObjectMeta(name=name))


async def eventually(
    cond: Callable[[], bool], within: float = 10.0, interval: float = 0.02, what: str = ""
) -> None:
    """Poll `cond` until true; fail with `what` after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(interval)
