"""The kubelet's streaming calls: Exec, Attach and PortForward.

The apiserver relays a client's upgraded WebSocket connection (pods/exec, pods/attach,
pods/portforward) to these bidirectional gRPC calls message for message: after the client's
first `StreamFrame` (the `StreamStart`: pod, container, command, which streams, the negotiated
channel protocol) every frame is one WebSocket message of tinykube/remotecommand.py's channel
protocols. The kubelet checks the call (the caller, the pod on this node, the container running)
and answers an empty frame to accept it, or ends the call with a status the apiserver turns into
the HTTP error kubectl prints after "unable to upgrade connection: ".

- The caller must be allowed `nodes/proxy` on this node, as kube's kubelet authorizer asks: the
  apiserver's kubelet-client certificate (CN kube-apiserver-kubelet-client) and cluster admins
  (groups system:masters, kubeadm:cluster-admins) are; another node's certificate is not.
- Exec runs the command in the container's working directory with its environment (the process
  runtime's `exec_context`), in its own session: with `tty` on a new pseudo-terminal (stderr is
  the terminal too; resizes set its size), else on pipes. The process ends (SIGKILL to its
  group) when the client goes away; its exit code goes on the error channel.
- Attach connects to the container's own process: its stdin (the runtime keeps a pipe for a
  container with `stdin: true`) and its output, read from the container's log as it is written.
- PortForward connects each port's channels to a TCP connection to the pod's address (the node's,
  for the process runtime) on that port.
- Under the CRI runtime all three go to the runtime's streaming server instead (the URL of CRI
  Exec, Attach, PortForward), relayed frame for frame by kubelet/cristream.py; attach takes the
  container's own `tty` and `stdin` as kube's kubelet does. Ephemeral containers are reached
  by name as any other.

Limits: at most `max_streams` calls at once per kubelet (more are RESOURCE_EXHAUSTED), and a
stream with no traffic either way for `idle_timeout` seconds is closed (kube's
--streaming-connection-idle-timeout, 4 h by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import shutil
import signal
import struct
import subprocess
import termios
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc

from kubelet import cristream
from kubelet.attach import terminal_argv
from kubelet.cri import CRIRuntime
from kubelet.crilog import LogFormatError, parse_record, writer_active
from kubelet.logs import KubeletService
from kubelet.process import ProcessRuntime
from kubelet.runtime import RUNNING, ContainerRecord, Runtime, as_container, ephemeral_record
from tinykube import remotecommand as rc
from tinykube.clock import Clock
from tinykube.errors import (
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    ResourceExhaustedError,
    TinykubeError,
    UnimplementedError,
    abort_with,
)
from tinykube.v1 import kubelet_pb2, pod_pb2

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT = 4 * 3600.0
DEFAULT_MAX_STREAMS = 256
READ_SIZE = rc.MAX_FRAME - 1
# How often an attach looks for new output in the container's log.
ATTACH_POLL = 0.05
# Identities allowed nodes/proxy on every kubelet (kube grants them through RBAC).
APISERVER_CLIENT = "kube-apiserver-kubelet-client"
ADMIN_GROUPS = frozenset({"system:masters", "kubeadm:cluster-admins"})

Context = grpc.aio.ServicerContext[kubelet_pb2.StreamFrame, kubelet_pb2.StreamFrame]


def peer_identity(context: Context) -> tuple[str, list[str]] | None:
    """(CN, O groups) of the caller's certificate; None on a plaintext port."""
    auth = context.auth_context()
    subjects = list(auth.get("x509_subject") or [])
    if not subjects:
        return None
    subject = bytes(subjects[0]).decode(errors="replace")
    cn = ""
    groups: list[str] = []
    for part in subject.split(","):
        key, _, value = part.strip().partition("=")
        if key == "CN":
            cn = value
        elif key == "O":
            groups.append(value)
    return cn, groups


def authorize(identity: tuple[str, list[str]] | None, node: str) -> None:
    """kube's kubelet authorizer for a streaming path: `create` on nodes/proxy."""
    if identity is None:
        return  # the development mode without TLS: no identities at all
    cn, groups = identity
    if cn == APISERVER_CLIENT or ADMIN_GROUPS.intersection(groups):
        return
    raise ForbiddenError(
        f"Forbidden (user={cn}, verb=create, resource=nodes, subresource(s)=[proxy]) on node {node}"
    )


class _FdReader:
    """Non-blocking reads of one fd into a queue on the event loop (None at EOF)."""

    def __init__(self, fd: int, queue: asyncio.Queue[tuple[int, bytes | None]], channel: int):
        self.fd = fd
        self.queue = queue
        self.channel = channel
        self.loop = asyncio.get_running_loop()
        os.set_blocking(fd, False)
        self.loop.add_reader(fd, self._ready)
        self.open = True

    def _ready(self) -> None:
        try:
            data = os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EIO:  # a pty's master reads EIO once the terminal is gone
                log.debug("read from fd %d: %s", self.fd, exc)
            data = b""
        if data:
            self.queue.put_nowait((self.channel, data))
            return
        self.stop()
        self.queue.put_nowait((self.channel, None))

    def drain(self) -> None:
        """Queue what the fd holds right now (the writer may never close it)."""
        while self.open:
            try:
                data = os.read(self.fd, READ_SIZE)
            except OSError:
                return
            if not data:
                return
            self.queue.put_nowait((self.channel, data))

    def stop(self) -> None:
        if self.open:
            self.open = False
            self.loop.remove_reader(self.fd)


def _set_winsize(fd: int, width: int, height: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


async def _exited(proc: subprocess.Popen[bytes]) -> int:
    """The process's exit status, awaited on the event loop (a pidfd turns readable when it
    exits), not in a thread: the default executor's few threads would let only that many
    streams wait at once."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        fd = -1
    if fd < 0:  # no pidfd (old kernel): poll
        for _ in itertools.count():
            if proc.poll() is not None:
                return proc.returncode
            await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)
    try:
        if proc.poll() is None:
            await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return proc.wait()


def _spawn(
    argv: list[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    cwd: str,
    env: dict[str, str],
    tty: bool,
) -> subprocess.Popen[bytes]:
    """Start an exec'd process in its own session (quick: fork and exec)."""
    if tty:
        argv = terminal_argv(argv)
    return subprocess.Popen(
        argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
    )


class StreamingService(KubeletService):
    """The Kubelet gRPC service: Logs (kubelet/logs.py) and the streaming calls."""

    def __init__(
        self,
        get_pod: Callable[[str, str], pod_pb2.Pod | None],
        runtime: Runtime,
        *,
        clock: Clock | None = None,
        node_names: frozenset[str] = frozenset(),
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        super().__init__(get_pod, runtime, clock=clock)
        self.node_names = node_names
        self.idle_timeout = idle_timeout
        self.max_streams = max_streams
        self.active = 0

    # ---- checks ---------------------------------------------------------------------------

    def _check(
        self, context: Context, start: kubelet_pb2.StreamStart, *, container_needed: bool
    ) -> tuple[pod_pb2.Pod, pod_pb2.Container | None]:
        node = ",".join(sorted(self.node_names)) or "this node"
        authorize(peer_identity(context), node)
        if not isinstance(self.runtime, ProcessRuntime | CRIRuntime):
            raise UnimplementedError(
                "this kubelet's runtime does not stream (exec, attach, port-forward)"
            )
        pod = self.get_pod(start.namespace or "default", start.name)
        if pod is None:
            raise NotFoundError(f'pod "{start.name}" not found on this node')
        if pod.status.phase in ("Succeeded", "Failed"):
            if not container_needed:
                raise BadRequestError(
                    "unable to forward port because pod is not running. Current status="
                    f"{pod.status.phase}"
                )
            raise BadRequestError(
                f"cannot exec into a container in a completed pod; current phase is "
                f"{pod.status.phase}"
            )
        if not container_needed:
            return pod, None
        spec = next((c for c in pod.spec.containers if c.name == start.container), None)
        if spec is None:
            spec = next(
                (
                    as_container(pod, ec)
                    for ec in pod.spec.ephemeralContainers
                    if ec.name == start.container
                ),
                None,
            )
        crec = self._running(pod, start.container)
        if spec is None or crec is None:
            raise NotFoundError(f'container not found ("{start.container}")')
        return pod, spec

    def _running(self, pod: pod_pb2.Pod, name: str) -> ContainerRecord | None:
        """The runtime's record of the pod's container `name` while it runs."""
        rec = self.runtime.record(pod.metadata.uid)
        crec = None
        if rec is not None:
            crec = rec.containers.get(name) or ephemeral_record(pod, rec, name)
        if crec is None or crec.state != RUNNING:
            return None
        if isinstance(self.runtime, CRIRuntime) and not crec.container_id:
            return None
        return crec

    def _admit(self) -> None:
        if self.active >= self.max_streams:
            raise ResourceExhaustedError(
                f"too many streams on this kubelet (at most {self.max_streams} at once)"
            )

    # ---- the calls --------------------------------------------------------------------------

    async def Exec(
        self, request_iterator: AsyncIterator[kubelet_pb2.StreamFrame], context: Context
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        start = await self._first(request_iterator, context)
        try:
            if not start.command:
                raise BadRequestError("you must specify at least 1 command")
            pod, container = self._check(context, start, container_needed=True)
            self._admit()
        except TinykubeError as exc:
            await abort_with(context, exc)  # type: ignore[arg-type]
        assert container is not None
        with self._counting():
            if isinstance(self.runtime, CRIRuntime):
                stream = self._cri_exec(pod, container, start, request_iterator)
            else:
                stream = self._exec(pod, container, start, request_iterator)
            async for out in _accepted(stream, context):
                yield out

    async def Attach(
        self, request_iterator: AsyncIterator[kubelet_pb2.StreamFrame], context: Context
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        start = await self._first(request_iterator, context)
        try:
            pod, container = self._check(context, start, container_needed=True)
            self._admit()
        except TinykubeError as exc:
            await abort_with(context, exc)  # type: ignore[arg-type]
        assert container is not None
        with self._counting():
            if isinstance(self.runtime, CRIRuntime):
                stream = self._cri_attach(pod, container, start, request_iterator)
            else:
                stream = self._attach(pod, container, start, request_iterator)
            async for out in _accepted(stream, context):
                yield out

    async def PortForward(
        self, request_iterator: AsyncIterator[kubelet_pb2.StreamFrame], context: Context
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        start = await self._first(request_iterator, context)
        try:
            if not start.ports:
                raise BadRequestError("at least one port must be given")
            pod, _ = self._check(context, start, container_needed=False)
            self._admit()
        except TinykubeError as exc:
            await abort_with(context, exc)  # type: ignore[arg-type]
        with self._counting():
            if isinstance(self.runtime, CRIRuntime):
                stream = self._cri_port_forward(pod, list(start.ports), request_iterator)
            else:
                stream = self._port_forward(list(start.ports), request_iterator)
            async for out in _accepted(stream, context):
                yield out

    # ---- the CRI runtime: its streaming server, relayed (kubelet/cristream.py) -------------

    async def _cri_exec(
        self,
        pod: pod_pb2.Pod,
        container: pod_pb2.Container,
        start: kubelet_pb2.StreamStart,
        request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        assert isinstance(self.runtime, CRIRuntime)
        crec = self._running(pod, container.name)
        if crec is None:
            raise NotFoundError(f'container not found ("{container.name}")')
        stderr = start.stderr and not start.tty
        url = await self.runtime.exec_url(
            crec.container_id,
            list(start.command),
            stdin=start.stdin,
            stdout=start.stdout,
            stderr=stderr,
            tty=start.tty,
        )
        async for out in cristream.remotecommand(
            url,
            stdin=start.stdin,
            stdout=start.stdout,
            stderr=stderr,
            tty=start.tty,
            protocol=start.protocol,
            request_iterator=request_iterator,
            idle_timeout=self.idle_timeout,
            command=list(start.command),
        ):
            yield out

    async def _cri_attach(
        self,
        pod: pod_pb2.Pod,
        container: pod_pb2.Container,
        start: kubelet_pb2.StreamStart,
        request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        """As kube's kubelet: the terminal is the container's (its `tty`), whatever the
        client asked; stdin only when the container keeps one open."""
        assert isinstance(self.runtime, CRIRuntime)
        crec = self._running(pod, container.name)
        if crec is None:
            raise NotFoundError(f'container not found ("{container.name}")')
        tty = container.tty
        stdin = start.stdin and container.stdin
        stderr = start.stderr and not tty
        url = await self.runtime.attach_url(
            crec.container_id, stdin=stdin, stdout=start.stdout, stderr=stderr, tty=tty
        )
        async for out in cristream.remotecommand(
            url,
            stdin=stdin,
            stdout=start.stdout,
            stderr=stderr,
            tty=tty,
            protocol=start.protocol,
            request_iterator=request_iterator,
            idle_timeout=self.idle_timeout,
        ):
            yield out

    async def _cri_port_forward(
        self,
        pod: pod_pb2.Pod,
        ports: list[int],
        request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        assert isinstance(self.runtime, CRIRuntime)
        rec = self.runtime.record(pod.metadata.uid)
        if rec is None or not rec.sandbox_id:
            raise BadRequestError(
                "unable to forward port because pod is not running. Current status="
                f"{pod.status.phase or 'Pending'}"
            )
        url = await self.runtime.port_forward_url(rec.sandbox_id, ports)
        async for out in cristream.port_forward(url, ports, request_iterator, self.idle_timeout):
            yield out

    @contextlib.contextmanager
    def _counting(self) -> Iterator[None]:
        """An admitted stream, counted in `active` (what `_admit` bounds) while it is open."""
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1

    async def _first(
        self, request_iterator: AsyncIterator[kubelet_pb2.StreamFrame], context: Context
    ) -> kubelet_pb2.StreamStart:
        first = await anext(request_iterator, None)
        if first is None or not first.HasField("start"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "the first message must carry `start`"
            )
        assert first is not None
        return first.start

    # ---- exec -------------------------------------------------------------------------------

    async def _exec(
        self,
        pod: pod_pb2.Pod,
        container: pod_pb2.Container,
        start: kubelet_pb2.StreamStart,
        request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        assert isinstance(self.runtime, ProcessRuntime)
        env, cwd = self.runtime.exec_context(pod, container)
        argv = list(start.command)
        yield kubelet_pb2.StreamFrame()  # accepted
        if "/" not in argv[0] and shutil.which(argv[0], path=env.get("PATH")) is None:
            yield _frame(
                rc.ERROR,
                rc.error_status(
                    "error executing command in container: "
                    f'exec: "{argv[0]}": executable file not found in $PATH'
                ),
            )
            return
        queue: asyncio.Queue[tuple[int, bytes | None]] = asyncio.Queue()
        to_close: list[int] = []
        readers: list[_FdReader] = []
        stdin_fd = -1
        master = -1
        try:
            if start.tty:
                master, slave = os.openpty()
                to_close.append(master)
                try:
                    proc = _spawn(
                        argv,
                        stdin=slave,
                        stdout=slave,
                        stderr=slave,
                        cwd=cwd,
                        env={**env, "TERM": env.get("TERM", "xterm")},
                        tty=True,
                    )
                finally:
                    os.close(slave)
                stdin_fd = master if start.stdin else -1
                readers.append(_FdReader(master, queue, rc.STDOUT))
            else:
                proc = _spawn(
                    argv,
                    stdin=subprocess.PIPE if start.stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE if start.stderr else subprocess.DEVNULL,
                    cwd=cwd,
                    env=env,
                    tty=False,
                )
                if proc.stdin is not None:
                    # The stream owns the pipe's fd from here on.
                    stdin_fd = os.dup(proc.stdin.fileno())
                    proc.stdin.close()
                    os.set_blocking(stdin_fd, False)
                assert proc.stdout is not None
                readers.append(_FdReader(proc.stdout.fileno(), queue, rc.STDOUT))
                if proc.stderr is not None:
                    readers.append(_FdReader(proc.stderr.fileno(), queue, rc.STDERR))
        except (OSError, ValueError) as exc:
            for fd in to_close:
                os.close(fd)
            yield _frame(rc.ERROR, rc.error_status(f"error executing command in container: {exc}"))
            return
        log.info(
            "exec in %s/%s: pid %d %s", pod.metadata.namespace, pod.metadata.name, proc.pid, argv
        )
        stdin = _Stdin(stdin_fd, master_tty=start.tty)
        pump = asyncio.ensure_future(
            self._client_frames(
                request_iterator, stdin, master if start.tty else -1, start.protocol
            )
        )
        waiter = asyncio.ensure_future(_exited(proc))
        open_readers = len(readers)
        getter: asyncio.Future[tuple[int, bytes | None]] | None = None
        try:
            while open_readers:
                if getter is None:
                    getter = asyncio.ensure_future(queue.get())
                # An ended command answers at once: its queued output is taken first.
                waits: set[asyncio.Future[Any]] = {getter, waiter}
                done, _ = await asyncio.wait(
                    waits, timeout=self._idle(stdin), return_when=asyncio.FIRST_COMPLETED
                )
                if getter in done:
                    channel, data = getter.result()
                    getter = None
                    if data is None:
                        open_readers -= 1
                        if start.tty:
                            break  # the terminal is gone once the process has ended
                        continue
                    stdin.touch()
                    if channel == rc.STDOUT and not start.stdout:
                        continue
                    yield _frame(channel, data)
                    continue
                if waiter.done():
                    # The command has ended; its output may still be held open by processes
                    # it left running in the background: what is there now is sent, then the
                    # stream ends, as a container runtime's exec does.
                    # Everything is collected before the first yield (other tasks run there).
                    last: list[tuple[int, bytes | None]] = []
                    if getter.done() and not getter.cancelled():
                        last.append(getter.result())
                    getter.cancel()
                    getter = None
                    for r in readers:
                        r.drain()
                    while not queue.empty():
                        last.append(queue.get_nowait())
                    for channel, data in last:
                        if data and (channel != rc.STDOUT or start.stdout):
                            yield _frame(channel, data)
                    break
                if stdin.idle_since() >= self.idle_timeout:
                    log.info("exec pid %d: idle for %.0fs, closing", proc.pid, self.idle_timeout)
                    return
            if getter is not None:
                getter.cancel()
            code = await waiter
            if code == 0:
                yield _frame(rc.ERROR, rc.success_status())
            else:
                yield _frame(rc.ERROR, rc.exit_status(code if code > 0 else 128 - code, argv))
        finally:
            for r in readers:
                r.stop()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await waiter
            stdin.close()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            for fd in to_close:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # ---- attach -----------------------------------------------------------------------------

    async def _attach(
        self,
        pod: pod_pb2.Pod,
        container: pod_pb2.Container,
        start: kubelet_pb2.StreamStart,
        request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        """The container's output from now on (its log, followed) and, with `stdin`, its
        stdin pipe; ends when the container's output does or the client goes away."""
        assert isinstance(self.runtime, ProcessRuntime)
        uid = pod.metadata.uid
        path = self.runtime.log_path(uid, container.name)
        pipes = self.runtime.stdin_pipes
        fd = pipes.writer(uid, container.name) if start.stdin and container.stdin else -1
        yield kubelet_pb2.StreamFrame()  # accepted
        stdin = _Stdin(fd, master_tty=False)
        once = container.stdinOnce
        # A tty container's terminal master, for resizes (its input is `fd` too).
        terminal = pipes.writer(uid, container.name) if container.tty else -1

        async def client() -> None:
            async for msg in request_iterator:
                stdin.touch()
                try:
                    channel, data = rc.parse(msg.data)
                except ValueError:
                    continue
                if channel == rc.STDIN:
                    await stdin.write(data)
                elif channel == rc.RESIZE and terminal >= 0:
                    with contextlib.suppress(ValueError, OSError):
                        _set_winsize(terminal, *rc.parse_resize(data))
                elif channel == rc.CLOSE and start.protocol == rc.V5:
                    with contextlib.suppress(ValueError):
                        if rc.close_signal(data) == rc.STDIN:
                            stdin.close()
                            if once:
                                pipes.close(uid, container.name)

        pump = asyncio.ensure_future(client())
        offset = path.stat().st_size if path is not None and path.exists() else 0
        pending = b""
        try:
            while path is not None:
                active = writer_active(path)
                try:
                    with path.open("rb") as f:
                        f.seek(offset)
                        more = f.read(READ_SIZE)
                except FileNotFoundError:
                    more = b""
                offset += len(more)
                pending += more
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    try:
                        record = parse_record(line)
                    except LogFormatError:
                        continue
                    channel = (
                        rc.STDERR if record.stream == "stderr" and not start.tty else rc.STDOUT
                    )
                    if (channel == rc.STDOUT and start.stdout) or (
                        channel == rc.STDERR and start.stderr
                    ):
                        yield _frame(channel, record.text)
                if more:
                    continue
                if not active:
                    break  # the container has ended and its output is all sent
                if pump.done():
                    return  # the client went away
                if stdin.idle_since() >= self.idle_timeout:
                    return
                await asyncio.sleep(ATTACH_POLL)
            yield _frame(rc.ERROR, rc.success_status())
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            stdin.close()
            if terminal >= 0:
                os.close(terminal)
            if once:
                pipes.close(uid, container.name)

    def _idle(self, stdin: _Stdin) -> float:
        return max(1.0, min(60.0, self.idle_timeout - stdin.idle_since()))

    async def _client_frames(
        self,
        request_iterator: AsyncIterator[kubelet_pb2.StreamFrame],
        stdin: _Stdin,
        tty_fd: int,
        protocol: str,
    ) -> None:
        """The client's messages: stdin data, resizes, v5 close signals."""
        async for msg in request_iterator:
            stdin.touch()
            try:
                channel, data = rc.parse(msg.data)
            except ValueError:
                continue
            if channel == rc.STDIN:
                await stdin.write(data)
            elif channel == rc.RESIZE and tty_fd >= 0:
                try:
                    width, height = rc.parse_resize(data)
                except ValueError as exc:
                    log.debug("resize refused: %s", exc)
                    continue
                with contextlib.suppress(OSError):
                    _set_winsize(tty_fd, width, height)
            elif channel == rc.CLOSE and protocol == rc.V5:
                with contextlib.suppress(ValueError):
                    if rc.close_signal(data) == rc.STDIN:
                        await stdin.close_input()
        # The client went away (or ended its side): stdin ends with it.
        await stdin.close_input()

    # ---- port-forward ---------------------------------------------------------------------

    async def _port_forward(
        self, ports: list[int], request_iterator: AsyncIterator[kubelet_pb2.StreamFrame]
    ) -> AsyncIterator[kubelet_pb2.StreamFrame]:
        assert isinstance(self.runtime, ProcessRuntime)
        host = self.runtime.node_ip or "127.0.0.1"
        yield kubelet_pb2.StreamFrame()  # accepted
        out: asyncio.Queue[bytes | None] = asyncio.Queue()
        writers: dict[int, asyncio.StreamWriter] = {}
        tasks: list[asyncio.Task[Any]] = []
        for i, port in enumerate(ports):
            data_ch, err_ch = rc.port_channels(i)
            out.put_nowait(rc.frame(data_ch, rc.port_prefix(port)))
            out.put_nowait(rc.frame(err_ch, rc.port_prefix(port)))
        pending: dict[int, list[bytes]] = {}

        remaining = len(ports)

        async def connect(i: int, port: int) -> None:
            nonlocal remaining
            try:
                await forward(i, port)
            finally:
                remaining -= 1
                if remaining == 0:
                    out.put_nowait(None)  # every connection has ended: so does the stream

        async def forward(i: int, port: int) -> None:
            data_ch, err_ch = rc.port_channels(i)
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError as exc:
                out.put_nowait(
                    rc.frame(
                        err_ch,
                        f"error forwarding port {port} to pod: dial tcp {host}:{port}: "
                        f"{exc.strerror or exc}".encode(),
                    )
                )
                return
            writers[i] = writer
            for chunk in pending.pop(i, []):
                writer.write(chunk)
            try:
                while data := await reader.read(READ_SIZE):
                    out.put_nowait(rc.frame(data_ch, data))
            except OSError:
                pass
            writer.close()

        async def client() -> None:
            try:
                async for msg in request_iterator:
                    try:
                        channel, data = rc.parse(msg.data)
                    except ValueError:
                        continue
                    i = channel // 2
                    if channel % 2 or i >= len(ports):
                        continue
                    if not tasks[i].done() and i not in writers:
                        # The first bytes of a port open its connection (kube dials per
                        # stream); they wait for it.
                        pending.setdefault(i, []).append(data)
                        continue
                    w = writers.get(i)
                    if w is not None and not w.is_closing():
                        w.write(data)
                        with contextlib.suppress(OSError):
                            await w.drain()
            finally:
                out.put_nowait(None)

        for i, port in enumerate(ports):
            tasks.append(asyncio.ensure_future(connect(i, port)))
        reader_task = asyncio.ensure_future(client())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(out.get(), self.idle_timeout)
                except TimeoutError:
                    return
                if item is None:
                    return
                yield kubelet_pb2.StreamFrame(data=item)
        finally:
            for t in (*tasks, reader_task):
                t.cancel()
            for w in writers.values():
                w.close()
            for t in (*tasks, reader_task):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t


class _Stdin:
    """The process's input side, written without blocking the event loop."""

    def __init__(self, fd: int, *, master_tty: bool) -> None:
        self.fd = fd
        self.master_tty = master_tty
        self.closed = fd < 0
        self.last = asyncio.get_running_loop().time()

    def touch(self) -> None:
        self.last = asyncio.get_running_loop().time()

    def idle_since(self) -> float:
        return asyncio.get_running_loop().time() - self.last

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.closed:
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                await asyncio.sleep(0.005)
                continue
            except OSError:
                self.closed = True
                return
            view = view[n:]

    async def close_input(self) -> None:
        if self.closed:
            return
        if self.master_tty:
            await self.write(b"\x04")  # end of file, as a terminal's Ctrl-D
            return
        self.close()

    def close(self) -> None:
        if not self.closed and not self.master_tty:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.closed = True


async def _accepted(
    stream: AsyncIterator[kubelet_pb2.StreamFrame], context: Context
) -> AsyncIterator[kubelet_pb2.StreamFrame]:
    """`stream`'s frames; an error before its first frame (the accepting one) ends the call
    with its status, as the checks' errors do."""
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        return
    except TinykubeError as exc:
        await abort_with(context, exc)  # type: ignore[arg-type]
        return
    yield first
    async for out in stream:
        yield out


def _frame(channel: int, data: bytes) -> kubelet_pb2.StreamFrame:
    return kubelet_pb2.StreamFrame(data=rc.frame(channel, data))
