"""Container probes (liveness, readiness, startup) for the process runtime, as the kubelet's
pkg/kubelet/prober.

`ProbeManager.sync(pod, rec)` (called by the pod worker after each runtime sync) keeps one
`ContainerProbes` per running container instance that has probes; a new instance (a restart)
replaces the old one, so every instance starts from Kubernetes' initial results: readiness
Failure, liveness Success, startup not yet succeeded. Each probe kind of an instance runs on its
own asyncio task: the first probe `initialDelaySeconds` after the container started, then one every
`periodSeconds` (fixed rate), each bounded by `timeoutSeconds`. `ProbeState` is the pure state
machine of one probe: the result changes only after `successThreshold` consecutive successes or
`failureThreshold` consecutive failures; a liveness or startup failure puts it on hold until the
next instance. Until the startup probe succeeds the other two do not run; its success triggers
them at once.

The pod worker reads `verdicts(uid)` (started, ready per container) into the PodStatus and
`take_failures(uid)` (liveness or startup failures) to kill containers; the manager wakes the pod
worker only when a result changes, so a steady probe costs no status write. Every failed probe
records a Warning `Unhealthy` Event ("Readiness probe failed: ..."), deduplicated into counts by
the event recorder.

Handlers: exec runs the command (with $(VAR) references to the container's env expanded) as the
container's own processes run (its environment and working directory, its own session, killed
with its group at the timeout); httpGet is an aiohttp GET
(2xx and 3xx succeed); tcpSocket is a connect; grpc is grpc.health.v1 Check. Containers share
the node's network, so the default host is the pod's (the node's) IP.

Concurrency: one event loop. Probe tasks only compute results and call back; the pod worker
stays the only writer of the runtime record. Scheduling uses the injected clock; a probe's own
timeout is real time (it bounds real I/O).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kubelet.envvars import expand
from kubelet.runtime import RUNNING, ContainerRecord, PodRecord
from tinykube.clock import Clock
from tinykube.meta import int_or_string
from tinykube.v1 import pod_pb2

log = logging.getLogger(__name__)

LIVENESS, READINESS, STARTUP = "Liveness", "Readiness", "Startup"
ProbeField = Literal["livenessProbe", "readinessProbe", "startupProbe"]
FIELDS: dict[str, ProbeField] = {
    LIVENESS: "livenessProbe",
    READINESS: "readinessProbe",
    STARTUP: "startupProbe",
}
# As Kubernetes' exec prober and HTTP prober: at most this much output is kept.
MAX_OUTPUT = 10 * 1024
USER_AGENT = "kube-probe/1.37"


@dataclass(frozen=True)
class Outcome:
    """One probe run: ok True (success), False (failure) or None (the probe could not be run:
    an error, whose result is thrown away, as Kubernetes' worker does)."""

    ok: bool | None
    output: str = ""


class ProbeState:
    """The result of one probe of one container instance, from consecutive outcomes."""

    def __init__(self, kind: str, probe: pod_pb2.Probe) -> None:
        self.kind = kind
        self.success_threshold = max(1, probe.successThreshold)
        self.failure_threshold = max(1, probe.failureThreshold)
        # Kubernetes' initial values: not ready, alive, not started.
        self.result = kind == LIVENESS
        self._last: bool | None = None
        self._run = 0
        self.on_hold = False

    def record(self, ok: bool) -> bool:
        """Count an outcome; whether the result changed."""
        if self.on_hold:
            return False
        if ok == self._last:
            self._run += 1
        else:
            self._last, self._run = ok, 1
        threshold = self.success_threshold if ok else self.failure_threshold
        if self._run < threshold:
            return False
        changed = self.result != ok
        self.result = ok
        if not ok and self.kind in (LIVENESS, STARTUP):
            # The container will be killed: no more probes of this instance.
            self.on_hold = True
            self._run = 0
        return changed


class Emitter(Protocol):
    def emit(self, obj: Any, type: str, reason: str, message: str) -> None: ...


# (env, working directory) a container's processes run with.
ExecContext = Callable[[pod_pb2.Pod, pod_pb2.Container], tuple[dict[str, str], str]]


@dataclass
class ProbeTarget:
    """What a handler needs to know about the probed container."""

    pod: pod_pb2.Pod
    container: pod_pb2.Container
    pod_ip: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""


# ---- handlers -------------------------------------------------------------------------------


def resolve_port(value: Any, container: pod_pb2.Container) -> int:
    """A probe's IntOrString port: a number, or the containerPort of the named port (a name
    that is no port falls back to being read as a number, as the kubelet does)."""
    held = int_or_string(value)
    if isinstance(held, str):
        for port in container.ports:
            if port.name == held:
                return port.containerPort
        try:
            number = int(held)
        except ValueError:
            raise ValueError(f'strconv.Atoi: parsing "{held}": invalid syntax') from None
    else:
        number = held or 0
    if not 0 < number < 65536:
        raise ValueError(f"invalid port number: {number}")
    return number


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _dial_error(address: str, exc: OSError) -> str:
    """An OSError of a connect as Go's net.Dial words it."""
    if exc.errno == errno.ECONNREFUSED:
        return f"dial tcp {address}: connect: connection refused"
    if isinstance(exc, TimeoutError):
        return f"dial tcp {address}: i/o timeout"
    reason = exc.strerror or str(exc)
    return f"dial tcp {address}: connect: {reason.lower()}"


async def run_exec(target: ProbeTarget, probe: pod_pb2.Probe) -> Outcome:
    # kube's ExpandContainerCommandOnlyStatic: the spec's own values, valueFrom ones empty.
    static = {e.name: e.value for e in target.container.env}
    argv = [expand(arg, static) for arg in probe.exec.command]
    path = target.env.get("PATH", os.defpath)
    if "/" not in argv[0] and shutil.which(argv[0], path=path) is None:
        return Outcome(False, f'exec: "{argv[0]}": executable file not found in $PATH')
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=target.env,
            cwd=target.cwd or None,
            start_new_session=True,
        )
    except OSError as exc:
        return Outcome(False, f"exec: {exc}")
    try:
        async with asyncio.timeout(probe.timeoutSeconds or 1):
            out, _ = await proc.communicate()
    except TimeoutError:
        # The whole session: what the command started dies with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        # The words of the kubelet's CRI client (whose exec prober then drops them).
        return Outcome(False, f'command "{" ".join(argv)}" timed out')
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    text = out[:MAX_OUTPUT].decode(errors="replace")
    return Outcome(proc.returncode == 0, text)


async def run_http(
    target: ProbeTarget, probe: pod_pb2.Probe, session: aiohttp.ClientSession
) -> Outcome:
    action = probe.httpGet
    port = resolve_port(action.port, target.container)
    host = action.host or target.pod_ip
    scheme = (action.scheme or "HTTP").lower()
    path = action.path or "/"
    url = f"{scheme}://{_host_port(host, port)}{path if path.startswith('/') else '/' + path}"
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    for header in action.httpHeaders:
        headers[header.name] = header.value
    timeout = probe.timeoutSeconds or 1
    try:
        async with asyncio.timeout(timeout):
            async with session.get(url, headers=headers, ssl=False) as response:
                body = await response.content.read(MAX_OUTPUT)
                status = response.status
    except TimeoutError:
        return Outcome(
            False,
            f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting '
            "headers)",
        )
    except aiohttp.ClientConnectorError as exc:
        return Outcome(False, f'Get "{url}": {_dial_error(_host_port(host, port), exc.os_error)}')
    except (aiohttp.ClientError, OSError) as exc:
        return Outcome(False, f'Get "{url}": {exc}')
    if 200 <= status < 400:
        return Outcome(True, body.decode(errors="replace"))
    return Outcome(False, f"HTTP probe failed with statuscode: {status}")


async def run_tcp(target: ProbeTarget, probe: pod_pb2.Probe) -> Outcome:
    action = probe.tcpSocket
    port = resolve_port(action.port, target.container)
    host = action.host or target.pod_ip
    address = _host_port(host, port)
    try:
        async with asyncio.timeout(probe.timeoutSeconds or 1):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return Outcome(False, f"dial tcp {address}: i/o timeout")
    except OSError as exc:
        return Outcome(False, _dial_error(address, exc))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Outcome(True)


async def run_grpc(target: ProbeTarget, probe: pod_pb2.Probe) -> Outcome:
    action = probe.grpc
    address = _host_port(target.pod_ip, action.port)
    timeout = probe.timeoutSeconds or 1
    service = action.service if action.HasField("service") else ""
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            async with asyncio.timeout(timeout):
                await channel.channel_ready()
        except TimeoutError:
            return Outcome(
                False, f"timeout: failed to connect service {address!r} within {timeout}s"
            )
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return Outcome(
                    False,
                    "this server does not implement the grpc health protocol "
                    f"(grpc.health.v1.Health): {exc.details()}",
                )
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Outcome(False, f"timeout: health rpc did not complete within {timeout}s")
            return Outcome(False, f"error: health rpc probe failed: {exc.details()}")
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status == health_pb2.HealthCheckResponse.SERVING:
        return Outcome(True)
    return Outcome(False, f'service unhealthy (responded with "{status}")')


ProbeRunner = Callable[[ProbeTarget, pod_pb2.Probe], Awaitable[Outcome]]


class Handlers:
    """Runs a probe's handler; one shared HTTP client (no keep-alive, as the kubelet's)."""

    def __init__(self, exec_runner: ProbeRunner | None = None) -> None:
        self._session: aiohttp.ClientSession | None = None
        # How exec probes run: on the host (the process runtime), or in the container through
        # the runtime (CRI ExecSync).
        self._exec: ProbeRunner = exec_runner or run_exec

    async def run(self, target: ProbeTarget, probe: pod_pb2.Probe) -> Outcome:
        try:
            if probe.HasField("exec"):
                return await self._exec(target, probe)
            if probe.HasField("httpGet"):
                if self._session is None:
                    self._session = aiohttp.ClientSession(
                        connector=aiohttp.TCPConnector(force_close=True)
                    )
                return await run_http(target, probe, self._session)
            if probe.HasField("tcpSocket"):
                return await run_tcp(target, probe)
            if probe.HasField("grpc"):
                return await run_grpc(target, probe)
        except ValueError as exc:  # a port that cannot be resolved
            return Outcome(None, str(exc))
        return Outcome(None, "missing probe handler")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# ---- workers --------------------------------------------------------------------------------


class ContainerProbes:
    """The probes of one container instance, each on its own task."""

    def __init__(
        self,
        manager: ProbeManager,
        target: ProbeTarget,
        instance: tuple[int, int],
        started_at: float,
    ) -> None:
        self.manager = manager
        self.target = target
        self.instance = instance
        self.started_at = started_at
        c = target.container
        self.states = {
            kind: ProbeState(kind, getattr(c, name))
            for kind, name in FIELDS.items()
            if c.HasField(name)
        }
        self._triggers = {kind: asyncio.Event() for kind in self.states}
        self.tasks: list[asyncio.Task[None]] = []
        # Its liveness or startup failure was handed to the pod worker, which kills it.
        self.killed = False

    @property
    def started(self) -> bool:
        state = self.states.get(STARTUP)
        return state is None or state.result

    @property
    def ready(self) -> bool:
        state = self.states.get(READINESS)
        return self.started and (state is None or state.result)

    def failure(self) -> str:
        """ "startup" or "liveness" once that probe has failed: the container must be killed."""
        for kind in (STARTUP, LIVENESS):
            state = self.states.get(kind)
            if state is not None and state.on_hold:
                return kind.lower()
        return ""

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        name = f"{self.target.pod.metadata.namespace}/{self.target.pod.metadata.name}"
        for kind in self.states:
            task = loop.create_task(
                self._run(kind), name=f"probe-{kind.lower()}-{name}/{self.target.container.name}"
            )
            self.tasks.append(task)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()

    async def _pause(self, kind: str, seconds: float) -> None:
        """Sleep on the clock until `seconds` pass or the probe is triggered."""
        trigger = self._triggers[kind]
        if trigger.is_set():
            trigger.clear()
            return
        sleeper = asyncio.ensure_future(self.manager.clock.sleep(seconds))
        waiter = asyncio.ensure_future(trigger.wait())
        try:
            await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waiter.cancel()
        trigger.clear()

    async def _run(self, kind: str) -> None:
        clock = self.manager.clock
        probe: pod_pb2.Probe = getattr(self.target.container, FIELDS[kind])
        state = self.states[kind]
        period = float(probe.periodSeconds or 10)
        delay = self.started_at + probe.initialDelaySeconds - clock.now().timestamp()
        if delay > 0:
            await self._pause(kind, delay)
        while True:
            began = clock.monotonic()
            if state.on_hold or (kind == STARTUP and state.result):
                return  # killed soon, or started: this instance needs no more of this probe
            if kind == STARTUP or self.started:
                await self._probe_once(kind, probe, state)
            await self._pause(kind, max(0.0, began + period - clock.monotonic()))

    async def _probe_once(self, kind: str, probe: pod_pb2.Probe, state: ProbeState) -> None:
        m = self.manager
        try:
            outcome = await m.runner(self.target, probe)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug must not end the probe
            log.exception("%s probe of %s failed to run", kind, self.target.container.name)
            outcome = Outcome(None, str(exc))
        if outcome.ok is None:
            m.event(
                self.target.pod,
                f"{kind} probe errored and resulted in unknown state: {outcome.output}",
            )
            return
        if not outcome.ok:
            m.event(self.target.pod, f"{kind} probe failed: {outcome.output}")
        if state.record(outcome.ok):
            if kind == STARTUP and state.result:
                for other in (READINESS, LIVENESS):
                    if other in self._triggers:
                        self._triggers[other].set()
            m.changed(self.target.pod.metadata.uid)


class ProbeManager:
    """Every probe of the pods of a runtime that probes (the process runtime)."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        events: Emitter | None = None,
        on_change: Callable[[str], object] = lambda uid: None,
        exec_context: ExecContext | None = None,
        pod_ip: Callable[[pod_pb2.Pod], str] = lambda pod: "127.0.0.1",
        runner: ProbeRunner | None = None,
        exec_runner: ProbeRunner | None = None,
    ) -> None:
        self.clock = clock or Clock()
        self._events = events
        self._on_change = on_change
        self._exec_context = exec_context
        self._pod_ip = pod_ip
        self._handlers = Handlers(exec_runner)
        self.runner: ProbeRunner = runner or self._handlers.run
        self._pods: dict[str, dict[str, ContainerProbes]] = {}

    def event(self, pod: pod_pb2.Pod, message: str) -> None:
        if self._events is not None:
            self._events.emit(pod, "Warning", "Unhealthy", message)

    def changed(self, uid: str) -> None:
        self._on_change(uid)

    def sync(self, pod: pod_pb2.Pod, rec: PodRecord) -> None:
        """Probe the running instances of the pod's containers (and only those)."""
        uid = pod.metadata.uid
        probed = self._pods.get(uid, {})
        keep: dict[str, ContainerProbes] = {}
        for container in pod.spec.containers:
            if not any(container.HasField(name) for name in FIELDS.values()):
                continue
            crec = rec.containers.get(container.name)
            current = probed.get(container.name)
            if crec is None or crec.state != RUNNING or pod.metadata.HasField("deletionTimestamp"):
                continue
            instance = (crec.restart_count, crec.pid)
            if current is not None and current.instance == instance:
                keep[container.name] = current
                continue
            keep[container.name] = self._start(pod, container, crec, instance)
        for name, old in probed.items():
            if keep.get(name) is not old:
                old.stop()
        if keep:
            self._pods[uid] = keep
        else:
            self._pods.pop(uid, None)

    def _start(
        self,
        pod: pod_pb2.Pod,
        container: pod_pb2.Container,
        crec: ContainerRecord,
        instance: tuple[int, int],
    ) -> ContainerProbes:
        env, cwd = self._exec_context(pod, container) if self._exec_context else ({}, "")
        target = ProbeTarget(pod, container, self._pod_ip(pod), env, cwd)
        probes = ContainerProbes(self, target, instance, crec.started_at)
        probes.start()
        return probes

    def verdicts(self, uid: str) -> dict[str, tuple[bool, bool]]:
        """(started, ready) of each probed running container of the pod."""
        return {name: (p.started, p.ready) for name, p in self._pods.get(uid, {}).items()}

    def take_failures(self, uid: str) -> dict[str, str]:
        """Containers whose liveness or startup probe failed, name -> "liveness"/"startup", each
        instance reported once (its kill may take a while to be seen as an exit)."""
        out = {}
        for name, p in self._pods.get(uid, {}).items():
            why = p.failure()
            if why and not p.killed:
                p.killed = True
                out[name] = why
        return out

    def forget(self, uid: str) -> None:
        for probes in self._pods.pop(uid, {}).values():
            probes.stop()

    async def close(self) -> None:
        for uid in list(self._pods):
            self.forget(uid)
        await self._handlers.close()
