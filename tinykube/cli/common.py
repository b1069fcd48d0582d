"""What every CLI subcommand shares: the context built from the global flags, and error output.

`Context` is created once per invocation by `main` and handed to the subcommand; it holds the
resolved global flags, the output streams and the clock (so tests can pin "now"), and opens a
`tinykube.client.Client` on demand. `describe_error` turns an exception into the line kubectl
would print.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TextIO

from tinykube import errors, kinds
from tinykube.client import Client
from tinykube.flags import split_addresses
from tinykube.kinds import KindInfo
from tinykube.tls import PLAINTEXT, Credentials, TLSConfigError, TransportSecurityError

DEFAULT_SERVER = "127.0.0.1:6443"

# For --help: every resource the CLI knows, from the kinds table so the list cannot go stale.
RESOURCES = ", ".join(k.plural for k in kinds.ALL_KINDS)
SHORT_NAMES = ", ".join(k.short_names[0] for k in kinds.ALL_KINDS if k.short_names)
SERVER_ENV = "TINYKUBE_SERVER"
# Where `tinykube up` (default --data-dir) writes the admin kubeconfig: used when neither
# --kubeconfig nor $KUBECONFIG names one, as kubectl falls back to ~/.kube/config.
UP_KUBECONFIG = ".tinykube/kubeconfig"


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
    # How to dial: from the kubeconfig (None: plaintext); a kubeconfig that could not be read
    # is reported when a command dials.
    credentials: Credentials | None = None
    config_error: str = ""

    def client(self) -> Client:
        """A client for the apiserver; use as `async with ctx.client() as client:`.

        Few retries: a person at a terminal wants "cannot connect" quickly, not after 30 s.
        """
        if self.config_error:
            raise CLIError(self.config_error)
        check_server(self.server)
        return Client(
            self.server,
            timeout=self.request_timeout,
            retries=2,
            credentials=self.credentials or PLAINTEXT,
        )

    def dial_credentials(self, server_name: str | None = None) -> Credentials:
        """The kubeconfig's credentials, for dialling a component other than the apiserver."""
        if self.config_error:
            raise CLIError(self.config_error)
        creds = self.credentials or PLAINTEXT
        if server_name and not creds.insecure:
            creds = replace(creds, server_name=server_name)
        return creds

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
    errors.ForbiddenError: "Forbidden",
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

_CONNECT_FAILURES = ("failed to connect", "connection refused")
# gRPC's resolver errors ("errors resolving h:1: [field:hostname lookup error:...]"): the host
# does not exist, which kubectl reports as "lookup h: no such host", not as a refusal.
_LOOKUP_FAILURES = ("errors resolving", "dns resolution failed", "hostname lookup")


def check_server(server: str) -> None:
    """Refuse an apiserver address that cannot be host:port before dialling it, so the user
    reads what is wrong with it rather than the resolver's complaint. gRPC target URIs
    ("dns:///h:1", "unix:/path") are passed on as they are. Several apiservers are separated
    by commas ("h1:6443,h2:6443"); each is checked."""
    if "://" in server or server.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return
    addresses = split_addresses(server)
    if not addresses:
        raise CLIError(f'invalid server address "{server}": expected host:port or [ipv6]:port')
    for address in addresses:
        _check_address(address)


def _check_address(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or (":" in host and not (host.startswith("[") and host.endswith("]"))):
        # no port, or an IPv6 address without its brackets
        raise CLIError(f'invalid server address "{address}": expected host:port or [ipv6]:port')
    if not host or any(c.isspace() for c in host):
        raise CLIError(f'invalid server address "{address}": the host is empty or has spaces')
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise CLIError(f'invalid server address "{address}": port "{port}" is not 1-65535')


def _host(server: str) -> str:
    host = server.rpartition(":")[0] or server
    return host.strip("[]")


def describe_error(exc: BaseException, server: str) -> str:
    """The one line kubectl would print for `exc`."""
    if isinstance(exc, TransportSecurityError):
        return f"Unable to connect to the server: {exc.message}"
    if isinstance(exc, TLSConfigError):
        return f"error: {exc}"
    if isinstance(exc, errors.UnauthenticatedError):
        # kubectl's words for a 401, whatever the server's message
        return "error: You must be logged in to the server (Unauthorized)"
    if isinstance(exc, errors.TinykubeError):
        message = exc.message.lower()
        if isinstance(exc, errors.UnavailableError) and any(
            marker in message for marker in _LOOKUP_FAILURES
        ):
            return f"Unable to connect to the server: lookup {_host(server)}: no such host"
        if isinstance(exc, errors.UnavailableError) and any(
            marker in message for marker in _CONNECT_FAILURES
        ):
            return (
                f"The connection to the server {server} was refused - "
                "did you specify the right host or port?"
            )
        reason = _REASONS.get(type(exc), "Unknown")
        return f"Error from server ({reason}): {exc.message}"
    return f"error: {exc}"
