"""Ask a tinykube process whether it is ready, through the standard `grpc.health.v1` service.

Every component serves `grpc.health.v1.Health` (see `tinykube.serving`); the empty service name
reports the whole process. `check` is one probe with a deadline; `wait_healthy` polls until the
process answers SERVING or the timeout passes. `wait_healthy` is blocking (it uses a synchronous
channel) because the launcher and `tinykube health` call it from plain, non-async code, possibly
while an event loop is running in the same thread (pytest-asyncio); `wait_healthy_async` is its
async twin. A process that is not listening yet, or is starting, is simply "not healthy yet".
`credentials` (tinykube/tls.py) are what the probe dials with; by default $KUBECONFIG's, else
plaintext (as `Client`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tinykube.serving import CHANNEL_OPTIONS
from tinykube.tls import Credentials, ambient_credentials

# Polling interval while waiting: short enough that tests do not wait on it, long enough that a
# few dozen waits do not burn a shared CPU.
_POLL_INTERVAL = 0.05


async def check(
    address: str,
    service: str = "",
    timeout: float = 2.0,  # noqa: ASYNC109
    *,
    credentials: Credentials | None = None,
) -> bool:
    """True if `address` ("host:port") answers SERVING for `service` within `timeout` seconds."""
    creds = credentials or ambient_credentials()
    async with creds.channel(address, CHANNEL_OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


def check_sync(
    address: str,
    service: str = "",
    timeout: float = 2.0,
    *,
    credentials: Credentials | None = None,
) -> bool:
    """Blocking `check`, usable where an event loop is already running or none exists."""
    creds = credentials or ambient_credentials()
    with creds.sync_channel(address, CHANNEL_OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


def status_name(
    address: str,
    service: str = "",
    timeout: float = 2.0,
    *,
    credentials: Credentials | None = None,
) -> str:
    """The serving status as grpc.health.v1 spells it (SERVING, NOT_SERVING, ...), or the RPC
    error code name (UNAVAILABLE, DEADLINE_EXCEEDED, ...) when the probe itself failed."""
    creds = credentials or ambient_credentials()
    with creds.sync_channel(address, CHANNEL_OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))


def wait_healthy(
    address: str,
    timeout: float = 30.0,
    *,
    service: str = "",
    alive: Callable[[], bool] | None = None,
    credentials: Credentials | None = None,
) -> None:
    """Block until `address` reports SERVING; TimeoutError after `timeout` seconds.

    `alive`, when given, is asked between probes; returning False (the process exited) stops
    the wait at once with RuntimeError instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    # One channel for the whole wait: it reconnects by itself with a short backoff.
    options = [*CHANNEL_OPTIONS, ("grpc.initial_reconnect_backoff_ms", 50)]
    creds = credentials or ambient_credentials()
    with creds.sync_channel(address, options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if alive is not None and not alive():
                raise RuntimeError(f"process serving {address} exited before it became healthy")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{address} not SERVING after {timeout:g}s")
            try:
                response = stub.Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=min(1.0, remaining)
                )
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(min(_POLL_INTERVAL, max(0.0, deadline - time.monotonic())))


async def wait_healthy_async(
    address: str,
    timeout: float = 30.0,  # noqa: ASYNC109 - the deadline is part of the contract
    *,
    service: str = "",
    credentials: Credentials | None = None,
) -> None:
    """Async `wait_healthy`: poll `check` until SERVING; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{address} not SERVING after {timeout:g}s")
        if await check(address, service, timeout=min(1.0, remaining), credentials=credentials):
            return
        await asyncio.sleep(_POLL_INTERVAL)
