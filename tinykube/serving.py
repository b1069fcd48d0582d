"""What every tinykube process serves besides its own API: gRPC health, reflection, metrics.

`GrpcServer` wraps a grpc.aio server with the keepalive settings every component shares, the
`grpc.health.v1.Health` service (SERVING once `start` returns, NOT_SERVING while draining) and
server reflection so grpcurl needs no .proto files. With `tls` (tinykube/tls.py `ServingTLS`)
the port speaks TLS with the serving certificate and, when a client CA is set, requires and
verifies a client certificate signed by it; without it the port is plaintext (--insecure).
Prometheus metrics are served over HTTP on a separate port because a grpc.aio port cannot also
speak HTTP/1. `run_until_signalled` turns SIGINT/SIGTERM into a graceful stop.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tinykube.tls import ServingTLS

# Cut links fail a stream within seconds instead of hanging (DESIGN.md, house style).
SERVER_OPTIONS: Sequence[tuple[str, Any]] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
    # grpc.aio accepts calls one at a time per method, each needing a turn of the event loop;
    # while the loop is busy, arrived calls wait unaccepted in gRPC core. Core drops such calls
    # silently with status CANCELLED (the handler never runs, no interceptor sees them) when
    # more than `max_pending_requests` wait (random early drop up to the hard limit, defaults
    # 1000/3000) or one waited `server_max_unrequested_time_in_server` (default 30 s). Under
    # load that lost 1-3 % of Creates, Binds and Lease renewals: clients do not retry CANCELLED,
    # which means "the caller gave up". Every tinykube unary call carries a deadline, so let
    # the deadline bound the wait instead: it ends as DEADLINE_EXCEEDED, which is retried.
    ("grpc.server.max_pending_requests", 50_000),
    ("grpc.server.max_pending_requests_hard_limit", 100_000),
    ("grpc.server_max_unrequested_time_in_server", 24 * 3600),
)

CHANNEL_OPTIONS: Sequence[tuple[str, Any]] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
)


class ListenError(OSError):
    """A component cannot listen where its flag says (the port is taken, the address is not
    this host's). `aio.run` ends the process with this one line instead of a traceback."""

    def __init__(self, flag: str, address: str, reason: str = "") -> None:
        host, _, port = address.rpartition(":")
        why = reason or _bind_problem(host.strip("[]") or "0.0.0.0", port)
        super().__init__(f"cannot listen on {address} ({flag}): {why}")


def _bind_problem(host: str, port: str) -> str:
    """Why host:port cannot be bound, as the OS says it (gRPC only says that it could not)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, int(port)))
    except (OSError, ValueError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    return "the address cannot be listened on"


class GrpcServer:
    """A grpc.aio server with health and reflection, bound to one address."""

    def __init__(
        self,
        address: str,
        service_names: Iterable[str],
        *,
        options: Sequence[tuple[str, Any]] = SERVER_OPTIONS,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        tls: ServingTLS | None = None,
    ) -> None:
        self.address = address
        self.tls = tls
        self.server = grpc.aio.server(options=list(options), interceptors=list(interceptors))
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._service_names = [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME]
        reflection.enable_server_reflection(self._service_names, self.server)
        self.port = 0

    def add(self, register: Callable[[grpc.aio.Server], None]) -> None:
        """Register servicers: `server.add(lambda s: add_FooServicer_to_server(impl, s))`."""
        register(self.server)

    async def start(self) -> int:
        """Bind, start and mark every service SERVING; returns the bound port."""
        try:
            if self.tls is None:
                self.port = self.server.add_insecure_port(self.address)
            else:
                self.port = self.server.add_secure_port(self.address, self.tls.grpc_credentials())
        except RuntimeError:  # grpc's "Failed to bind to address"
            self.port = 0
        if self.port == 0:
            raise ListenError("--bind-address/--port", self.address)
        await self.server.start()
        await self.set_serving(True)
        return self.port

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self._service_names):
            result = self.health.set(name, status)
            if asyncio.iscoroutine(result):
                await result

    async def stop(self, grace: float = 5.0) -> None:
        """Report NOT_SERVING, let in-flight RPCs finish for `grace` seconds, then stop."""
        await self.set_serving(False)
        await self.server.stop(grace)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str | int = "INFO") -> None:
    """The log format every tinykube process writes to stderr."""
    logging.basicConfig(
        level=level.upper() if isinstance(level, str) else level,
        format=LOG_FORMAT,
        stream=sys.stderr,
    )


def start_metrics_server(port: int, host: str = "127.0.0.1") -> None:
    """Serve the default Prometheus registry on http://host:port/metrics (port 0: disabled)."""
    if port <= 0:
        return
    from prometheus_client import start_http_server

    start_http_server(port, addr=host)


async def run_until_signalled(
    stop: Callable[[], Any], *, failed: asyncio.Event | None = None
) -> None:
    """Wait for SIGINT or SIGTERM (or `failed` to be set: the component cannot go on), then
    await `stop()` once."""
    loop = asyncio.get_running_loop()
    done = failed if failed is not None else asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, done.set)
    try:
        await done.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    result = stop()
    if asyncio.iscoroutine(result):
        await result
