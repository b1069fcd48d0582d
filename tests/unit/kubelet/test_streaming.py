"""The kubelet's Exec/Attach/PortForward calls (kubelet/streaming.py) driven in-process with
real processes: the channel protocol in and out, a pty and its resizes, the v5 stdin close,
the stream limit, the idle timeout, and the process ended with its stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubelet.process import ProcessRuntime
from kubelet.streaming import StreamingService, authorize
from tinykube import remotecommand as rc
from tinykube.errors import ForbiddenError
from tinykube.v1 import kubelet_pb2, pod_pb2


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


class FakeContext:
    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    async def abort(self, code: grpc.StatusCode, details: str, **_: Any) -> None:
        raise Aborted(code, details)

    def time_remaining(self) -> float | None:
        return None  # no deadline


def ctx() -> Any:
    return FakeContext()


def _pod(tmp_path: Path) -> tuple[pod_pb2.Pod, pod_pb2.Container]:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace, pod.metadata.uid = "p", "default", "uid-1"
    c = pod.spec.containers.add(name="main", image="busybox", workingDir=str(tmp_path))
    c.env.add(name="GREETING", value="hi")
    return pod, c


def _service(tmp_path: Path, **kw: Any) -> StreamingService:
    runtime = ProcessRuntime(tmp_path / "root")
    pod, container = _pod(tmp_path)
    service = StreamingService(lambda ns, name: pod, runtime, **kw)
    service._check = lambda context, start, container_needed: (pod, container)  # type: ignore[method-assign,misc]
    return service


class Client:
    """The apiserver's side of one call: a queue of frames in, the call's frames out."""

    def __init__(self, start: kubelet_pb2.StreamStart) -> None:
        self.queue: asyncio.Queue[kubelet_pb2.StreamFrame | None] = asyncio.Queue()
        self.queue.put_nowait(kubelet_pb2.StreamFrame(start=start))

    def send(self, channel: int, data: bytes) -> None:
        self.queue.put_nowait(kubelet_pb2.StreamFrame(data=rc.frame(channel, data)))

    def end(self) -> None:
        self.queue.put_nowait(None)

    async def frames(self) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        while (item := await self.queue.get()) is not None:
            yield item


async def _collect(call: AsyncIterator[kubelet_pb2.StreamFrame]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    first = True
    async for frame in call:
        if first:
            assert frame.data == b""  # accepted
            first = False
            continue
        channel, data = rc.parse(frame.data)
        out[channel] = out.get(channel, b"") + data
    return out


def _start(*command: str, **kw: Any) -> kubelet_pb2.StreamStart:
    kw.setdefault("protocol", rc.V5)
    return kubelet_pb2.StreamStart(
        namespace="default", name="p", container="main", command=list(command), **kw
    )


async def test_exec_in_the_containers_directory_and_environment(tmp_path: Path) -> None:
    service = _service(tmp_path)
    client = Client(
        _start(
            "sh", "-c", 'echo "$GREETING $(pwd)"; echo oops >&2; exit 3', stdout=True, stderr=True
        )
    )
    out = await asyncio.wait_for(
        _collect(service.Exec(client.frames(), ctx())),
        60,
    )
    assert out[rc.STDOUT] == f"hi {tmp_path}\n".encode()
    assert out[rc.STDERR] == b"oops\n"
    assert rc.exit_code_of(out[rc.ERROR]) == 3


async def test_stdin_and_the_v5_close(tmp_path: Path) -> None:
    service = _service(tmp_path)
    client = Client(_start("cat", stdin=True, stdout=True))
    client.send(rc.STDIN, b"abc\n")
    client.send(rc.CLOSE, bytes([rc.STDIN]))
    out = await asyncio.wait_for(
        _collect(service.Exec(client.frames(), ctx())),
        60,
    )
    assert out[rc.STDOUT] == b"abc\n"
    assert json.loads(out[rc.ERROR])["status"] == "Success"


async def test_tty_with_resize(tmp_path: Path) -> None:
    service = _service(tmp_path)
    client = Client(_start("sh", "-c", "read x; stty size", stdin=True, stdout=True, tty=True))
    client.send(rc.RESIZE, b'{"Width": 91, "Height": 33}')
    client.send(rc.STDIN, b"go\n")
    out = await asyncio.wait_for(
        _collect(service.Exec(client.frames(), ctx())),
        60,
    )
    assert b"33 91" in out[rc.STDOUT]
    assert rc.STDERR not in out


async def test_missing_program_is_an_internal_error_status(tmp_path: Path) -> None:
    service = _service(tmp_path)
    client = Client(_start("no-such-program-anywhere", stdout=True))
    out = await _collect(service.Exec(client.frames(), ctx()))
    status = json.loads(out[rc.ERROR])
    assert status["reason"] == "InternalError"
    assert (
        'exec: "no-such-program-anywhere": executable file not found in $PATH'
        in (status["message"])
    )


async def test_streams_are_bounded(tmp_path: Path) -> None:
    service = _service(tmp_path, max_streams=1)
    service.active = 1
    client = Client(_start("true", stdout=True))
    with pytest.raises(Aborted) as err:
        await _collect(service.Exec(client.frames(), ctx()))
    assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 1" in str(err.value)


async def test_an_idle_stream_is_closed_and_its_process_ended(tmp_path: Path) -> None:
    service = _service(tmp_path, idle_timeout=0.3)
    pidfile = tmp_path / "pid"
    client = Client(_start("sh", "-c", f"echo $$ > {pidfile}; exec sleep 600", stdout=True))
    out = await asyncio.wait_for(
        _collect(service.Exec(client.frames(), ctx())),
        60,
    )
    assert rc.ERROR not in out  # closed, not finished
    pid = int(pidfile.read_text())
    for _ in range(600):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the idle stream's process is still running")


async def test_a_client_gone_ends_the_process(tmp_path: Path) -> None:
    service = _service(tmp_path)
    pidfile = tmp_path / "pid"
    client = Client(_start("sh", "-c", f"echo $$ > {pidfile}; exec sleep 600", stdout=True))
    call = service.Exec(client.frames(), ctx())
    assert (await anext(call)).data == b""
    task = asyncio.ensure_future(anext(call))
    for _ in range(600):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    pid = int(pidfile.read_text())
    task.cancel()  # what grpc does when the apiserver cancels the call
    with pytest.raises(asyncio.CancelledError):
        await task
    await call.aclose()  # type: ignore[attr-defined]
    with pytest.raises(ProcessLookupError):
        for _ in range(600):
            os.kill(pid, 0)
            await asyncio.sleep(0.05)


async def test_port_forward_to_a_closed_port_says_so(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    service = _service(tmp_path)
    client = Client(kubelet_pb2.StreamStart(name="p", ports=[port], protocol=rc.V4))
    out = await asyncio.wait_for(
        _collect(service.PortForward(client.frames(), ctx())),
        60,
    )
    assert out[0] == rc.port_prefix(port)
    assert out[1].startswith(rc.port_prefix(port) + f"error forwarding port {port}".encode())


def test_kubelet_authorizer() -> None:
    authorize(None, "n1")  # plaintext development mode
    authorize(("kube-apiserver-kubelet-client", ["kubeadm:cluster-admins"]), "n1")
    authorize(("someone", ["system:masters"]), "n1")
    with pytest.raises(ForbiddenError, match=r"user=system:node:n2, verb=create, resource=nodes"):
        authorize(("system:node:n2", ["system:nodes"]), "n1")


async def test_exec_ends_with_its_command_even_if_a_background_child_holds_stdout(
    tmp_path: Path,
) -> None:
    service = _service(tmp_path)
    pidfile = tmp_path / "bg"
    script = f"echo started; sleep 600 & echo $! > {pidfile}; exit 2"
    client = Client(_start("sh", "-c", script, stdout=True, stderr=True))
    try:
        out = await asyncio.wait_for(_collect(service.Exec(client.frames(), ctx())), 60)
        assert out[rc.STDOUT] == b"started\n"
        assert rc.exit_code_of(out[rc.ERROR]) == 2
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), 9)


async def test_many_streams_wait_at_once(tmp_path: Path) -> None:
    """Twelve execs blocked on their stdin do not keep a thirteenth from finishing (exits are
    awaited on the event loop, not in a small thread pool)."""
    service = _service(tmp_path)
    blocked = [Client(_start("cat", stdin=True, stdout=True)) for _ in range(12)]
    calls = [asyncio.ensure_future(_collect(service.Exec(c.frames(), ctx()))) for c in blocked]
    for _ in range(600):
        if service.active == len(blocked):
            break
        await asyncio.sleep(0.01)
    quick = Client(_start("echo", "hi", stdout=True))
    out = await asyncio.wait_for(_collect(service.Exec(quick.frames(), ctx())), 60)
    assert out[rc.STDOUT] == b"hi\n"
    for c in blocked:
        c.send(rc.CLOSE, bytes([rc.STDIN]))
    for result in await asyncio.wait_for(asyncio.gather(*calls), 60):
        assert rc.exit_code_of(result[rc.ERROR]) == 0
