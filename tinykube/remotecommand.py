"""The channel protocols of exec, attach and port-forward over WebSockets (kube's
k8s.io/apimachinery/pkg/util/remotecommand and httpstream/wsstream), as pure functions.

Every WebSocket message is binary: one channel byte, then the channel's bytes.

- exec and attach (`v5.channel.k8s.io`, `v4.channel.k8s.io`): 0 stdin (client to server),
  1 stdout, 2 stderr, 3 the error channel, 4 terminal resizes (client to server, JSON
  `{"Width": 80, "Height": 24}`). The error channel carries one `metav1.Status` when the command
  ends: `Success`, or `Failure` with reason `NonZeroExitCode` and the exit code as the message
  of a cause of reason `ExitCode` (what kubectl turns into `command terminated with exit code
  3` and its own exit status), or another failure (reason `InternalError`). v5 adds channel 255:
  a message `[255, N]` half-closes stream N (the client's stdin: the process reads EOF).
- port-forward (`v4.channel.k8s.io` on .../portforward, the Python client's): the n-th port of
  `ports` has the data channel 2n and the error channel 2n+1; the server's first message on each
  channel is the port as 2 bytes little-endian, then the data. An error message on the error
  channel means the connection to the port failed.
"""

from __future__ import annotations

import json
from typing import Any

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
# What the server accepts for exec and attach, in its order of preference (the client's
# order decides among them, as gorilla/websocket's negotiation does).
EXEC_PROTOCOLS = (V5, V4)
PORT_FORWARD_PROTOCOLS = (V4,)

STDIN = 0
STDOUT = 1
STDERR = 2
ERROR = 3
RESIZE = 4
CLOSE = 255

# The largest message the server writes (the client's are as they come).
MAX_FRAME = 32 * 1024


def frame(channel: int, data: bytes = b"") -> bytes:
    """One message on `channel`."""
    return bytes((channel,)) + data


def parse(message: bytes) -> tuple[int, bytes]:
    """(channel, data) of a client message; ValueError for an empty one."""
    if not message:
        raise ValueError("empty message: every message starts with its channel byte")
    return message[0], message[1:]


def close_signal(message_data: bytes) -> int:
    """The stream a v5 close message (channel 255) closes; ValueError when it names none."""
    if len(message_data) != 1:
        raise ValueError("a close message carries exactly one byte, the stream to close")
    return message_data[0]


def parse_resize(data: bytes) -> tuple[int, int]:
    """(width, height) of a resize message, as kube's TerminalSize JSON (fields Width,
    Height, each 0..65535). ValueError naming what is wrong."""
    try:
        size = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"a resize message is JSON {{Width, Height}}: {exc}") from exc
    if not isinstance(size, dict):
        raise ValueError("a resize message is a JSON object {Width, Height}")
    out = []
    for key in ("Width", "Height"):
        value = size.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFF:
            raise ValueError(f"resize {key} must be a number from 0 to 65535, not {value!r}")
        out.append(value)
    return out[0], out[1]


def resize_message(width: int, height: int) -> bytes:
    return frame(RESIZE, json.dumps({"Width": width, "Height": height}).encode())


def success_status() -> bytes:
    return json.dumps({"metadata": {}, "status": "Success"}).encode()


def exit_status(code: int, command: list[str]) -> bytes:
    """The error channel's Status for a command that exited with `code` (not 0), as kube's
    kubelet writes it."""
    status: dict[str, Any] = {
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: command "
            f"'{' '.join(command)}' exited with {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }
    return json.dumps(status).encode()


def error_status(message: str) -> bytes:
    """The error channel's Status for a stream the runtime could not serve."""
    status = {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }
    return json.dumps(status).encode()


def exit_code_of(status: bytes) -> int | None:
    """The exit code a Status carries: 0 for Success, the ExitCode cause of a
    NonZeroExitCode, None for another failure (a client's reading, for tests and tools)."""
    obj = json.loads(status)
    if obj.get("status") == "Success":
        return 0
    if obj.get("reason") != "NonZeroExitCode":
        return None
    for cause in (obj.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message", ""))
    return None


def port_prefix(port: int) -> bytes:
    """The first bytes the server writes on each of a port's two channels."""
    return port.to_bytes(2, "little")


def port_channels(index: int) -> tuple[int, int]:
    """(data, error) channels of the index-th port of a port-forward."""
    return 2 * index, 2 * index + 1


def parse_ports(values: list[str]) -> list[int]:
    """The `ports` query parameter(s) of a port-forward (repeated, or comma-separated), each
    1..65535; ValueError in kube's words."""
    ports: list[int] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            try:
                port = int(part)
            except ValueError:
                raise ValueError(f'unable to parse "{part}" as a port: not a number') from None
            if not 0 < port <= 0xFFFF:
                raise ValueError(f"port {part} must be > 0 and <= 65535")
            ports.append(port)
    return ports
