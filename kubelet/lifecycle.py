"""Container lifecycle hooks and termination messages, as kube's kubelet runs and reads them.

Hooks (kube's pkg/kubelet/lifecycle handlerRunner): `run_hook` runs one LifecycleHandler and
returns "" on success or kube's failure message:

- exec: the command in the container (a runtime-supplied `ExecHook`: CRI ExecSync, or a
  process with the container's environment for the process runtime), without a timeout of its
  own; a non-zero exit fails ("Exec lifecycle hook ([cmd]) for Container "c" in Pod
  "name_ns(uid)" failed - error: command 'cmd' exited with N: <stderr>, message: "<output>"").
- httpGet: a GET of `scheme://host:port/path` (host: the pod's IP), with the User-Agent
  `kube-lifecycle/<version>`; as in kube only a failed request fails the hook, whatever the
  status code.
- sleep: waits that many seconds.
- tcpSocket: accepted by the API and never run (kube: "Cannot run handler").

The callers (kubelet/kuberuntime.py) decide what a result means: a failed postStart kills the
container (Event FailedPostStartHook "PostStartHook failed", then Killing "FailedPostStartHook")
and the container waits with reason PostStartHookError; a preStop hook runs inside the grace
period, whose rest (at least `MIN_GRACE_SECONDS`, kube's minimumGracePeriodInSeconds) is what
StopContainer gets; a failed one is a FailedPreStopHook Event "PreStopHook failed" (kube keeps the
hook's output out of Events: it may hold secrets).

Termination messages (kube's getTerminationMessage / readLastStringFromContainerLogs):
`termination_message` reads the last `MAX_MESSAGE_BYTES` of the file the container could write
at its terminationMessagePath; with policy FallbackToLogsOnError and a failed container that
wrote nothing, the last `LOG_TAIL_LINES` lines of its log, at most `LOG_TAIL_BYTES` (the end).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from kubelet.crilog import LogFormatError, parse_record, tail_start
from kubelet.prober import _dial_error, _host_port, resolve_port
from tinykube.v1 import pod_pb2

log = logging.getLogger(__name__)

# kube's kubecontainer.MaxContainerTerminationMessageLength, ...LogLines and ...LogLength.
MAX_MESSAGE_BYTES = 4096
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
# kube's minimumGracePeriodInSeconds: the least time a container gets after its preStop hook.
MIN_GRACE_SECONDS = 2
# A pod's terminationGracePeriodSeconds when its spec has none (kube's default).
DEFAULT_GRACE_SECONDS = 30
DEFAULT_MESSAGE_PATH = "/dev/termination-log"
USER_AGENT = "kube-lifecycle/1.37"


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    # Why the command could not be run at all ("" when it ran).
    error: str = ""


# Runs a command in the container: (argv) -> its result.
ExecHook = Callable[[list[str]], Awaitable[ExecResult]]


def pod_ref(pod: pod_pb2.Pod) -> str:
    """kube's format.Pod: name_namespace(uid)."""
    return f"{pod.metadata.name}_{pod.metadata.namespace}({pod.metadata.uid})"


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(items) + "]"


async def run_hook(
    handler: pod_pb2.LifecycleHandler,
    pod: pod_pb2.Pod,
    container: pod_pb2.Container,
    *,
    exec_hook: ExecHook,
    pod_ip: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> str:
    """Run one hook; "" if it succeeded, else kube's message of its failure."""
    who = f'for Container "{container.name}" in Pod "{pod_ref(pod)}"'
    if handler.HasField("exec"):
        argv = list(handler.exec.command)
        result = await exec_hook(argv)
        if result.error:
            error = result.error
        elif result.exit_code != 0:
            error = f"command '{' '.join(argv)}' exited with {result.exit_code}: {result.stderr}"
        else:
            return ""
        output = json.dumps(result.stdout + result.stderr, ensure_ascii=False)
        hook = f"Exec lifecycle hook ({_go_list(argv)}) {who}"
        return f"{hook} failed - error: {error}, message: {output}"
    if handler.HasField("httpGet"):
        action = handler.httpGet
        error = await _http_get(action, container, pod_ip)
        if not error:
            return ""
        return f"HTTP lifecycle hook ({action.path}) {who} failed - error: {error}"
    if handler.HasField("sleep"):
        await sleep(float(handler.sleep.seconds))
        return ""
    which = "tcpSocket" if handler.HasField("tcpSocket") else "none"
    return f"Cannot run handler: invalid handler: {which}"


async def _http_get(
    action: pod_pb2.HTTPGetAction, container: pod_pb2.Container, pod_ip: str
) -> str:
    """The GET of an httpGet hook; "" when a response came back (any status), else why not."""
    try:
        port = resolve_port(action.port, container)
    except ValueError as exc:
        return str(exc)
    host = action.host or pod_ip
    scheme = (action.scheme or "HTTP").lower()
    path = action.path or "/"
    url = f"{scheme}://{_host_port(host, port)}{path if path.startswith('/') else '/' + path}"
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    for header in action.httpHeaders:
        headers[header.name] = header.value
    try:
        connector = aiohttp.TCPConnector(force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(url, headers=headers, ssl=False) as response,
        ):
            await response.read()
    except aiohttp.ClientConnectorError as exc:
        return f'Get "{url}": {_dial_error(_host_port(host, port), exc.os_error)}'
    except (aiohttp.ClientError, OSError) as exc:
        return f'Get "{url}": {exc}'
    return ""


def _read_tail(path: Path, limit: int) -> bytes:
    with path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - limit))
        return f.read()


def log_tail(log_file: Path) -> str:
    """The last LOG_TAIL_LINES lines of a CRI log file's text, at most LOG_TAIL_BYTES (the
    end), as kube's readLastStringFromContainerLogs."""
    try:
        data = _read_tail(log_file, 1 << 20)
    except OSError as exc:
        return f"Error on reading termination message from logs: {exc}"
    data = data[tail_start(data, LOG_TAIL_LINES) :]
    out = []
    for line in data.splitlines(keepends=True):
        try:
            out.append(parse_record(line).text)
        except LogFormatError:
            continue
    return b"".join(out)[-LOG_TAIL_BYTES:].decode(errors="replace")


def termination_message(
    message_file: str, policy: str, exit_code: int, reason: str, log_file: Path
) -> str:
    """What a finished container leaves in state.terminated.message (kube's
    getTerminationMessage, then its log fallback)."""
    fallback = (
        policy == "FallbackToLogsOnError" and exit_code != 0 and reason != "ContainerCannotRun"
    )
    if message_file:
        path = Path(message_file)
        try:
            data = _read_tail(path, MAX_MESSAGE_BYTES)
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            return f"Error on reading termination log {path}: {exc}"
        if data:
            return data.decode(errors="replace")
    return log_tail(log_file) if fallback else ""
