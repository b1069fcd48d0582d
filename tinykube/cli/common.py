"""What every CLI subcommand shares: the context built from the global flags, and error output.

`Context` is created once per invocation by `main` and handed to the subcommand; it holds the
resolved global flags, the output streams and the clock (so tests can pin "now"), and opens a
`tinykube.client.Client` on demand. `describe_error` turns an exception into the line kubectl
would print.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from tinykube import errors
from tinykube.client import Client
from tinykube.kinds import KindInfo

DEFAULT_SERVER = "127.0.0.1:6443"
SERVER_ENV = "TINYKUBE_SERVER"


def default_server() -> str:
    return os.environ.get(SERVER_ENV) or DEFAULT_SERVER


@dataclass
class Context:
    """The resolved global flags and the process's I/O, passed to every subcommand."""

    server: str
    namespace: str = "default"
    namespace_explicit: bool = False  # -n was given (apply checks manifests against it)
    all_namespaces: bool = False
    request_timeout: float = 10.0
    out: TextIO | None = None
    err: TextIO | None = None
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def client(self) -> Client:
        """A client for the apiserver; use as `async with ctx.client() as client:`.

        Few retries: a person at a terminal wants "cannot connect" quickly, not after 30 s.
        """
        return Client(self.server, timeout=self.request_timeout, retries=2)

    def namespace_for(self, info: KindInfo) -> str:
        """The namespace a request for `info` goes to ("" for cluster-scoped kinds or -A)."""
        if not info.namespaced or self.all_namespaces:
            return ""
        return self.namespace

    def print(self, *parts: object, end: str = "\n") -> None:
        print(*parts, end=end, file=self.out, flush=True)

    def eprint(self, *parts: object) -> None:
        print(*parts, file=self.err, flush=True)


class CLIError(Exception):
    """A usage or input error found by the CLI itself; printed as `error: <message>`."""


# kubectl's StatusReason for each error class (what it prints in parentheses).
_REASONS: dict[type[errors.TinykubeError], str] = {
    errors.InvalidError: "Invalid",
    errors.NotFoundError: "NotFound",
    errors.AlreadyExistsError: "AlreadyExists",
    errors.ConflictError: "Conflict",
    errors.PreconditionFailedError: "Conflict",
    errors.ResourceExpiredError: "Expired",
    errors.UnavailableError: "ServiceUnavailable",
    errors.DeadlineExceededError: "Timeout",
    errors.ResourceExhaustedError: "RequestEntityTooLarge",
    errors.UnimplementedError: "MethodNotAllowed",
    errors.CancelledError: "Cancelled",
    errors.InternalError: "InternalError",
}

_CONNECT_FAILURES = ("failed to connect", "connection refused", "dns resolution failed")


def describe_error(exc: BaseException, server: str) -> str:
    """The one line kubectl would print for `exc`."""
    if isinstance(exc, errors.TinykubeError):
        if isinstance(exc, errors.UnavailableError) and any(
            marker in exc.message.lower() for marker in _CONNECT_FAILURES
        ):
            return (
                f"The connection to the server {server} was refused - "
                "did you specify the right host or port?"
            )
        reason = _REASONS.get(type(exc), "Unknown")
        return f"Error from server ({reason}): {exc.message}"
    return f"error: {exc}"
