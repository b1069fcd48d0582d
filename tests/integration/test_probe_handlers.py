"""The kubelet's httpGet, tcpSocket and grpc probe handlers against real local servers (no etcd):
success and failure as Kubernetes decides them, and the failure messages in Go's wording."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from aiohttp import web
from google.protobuf import json_format
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from kubelet.prober import Handlers, Outcome, ProbeTarget
from tinykube.v1 import pod_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def target() -> ProbeTarget:
    container = pod_pb2.Container(name="c", image="x")
    container.ports.add(name="web", containerPort=0)
    return ProbeTarget(pod_pb2.Pod(), container, "127.0.0.1")


def probe(**fields: Any) -> pod_pb2.Probe:
    return json_format.ParseDict({"timeoutSeconds": 1, **fields}, pod_pb2.Probe())


@pytest.fixture
async def http_server() -> AsyncIterator[int]:
    seen: dict[str, str] = {}

    async def status(request: web.Request) -> web.Response:
        seen.update(request.headers)
        code = int(request.match_info["code"])
        if code in (301, 302):
            raise web.HTTPFound("/status/200")
        return web.Response(status=code, text=f"answered {code}")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def headers(request: web.Request) -> web.Response:
        ok = request.headers.get("X-Probe") == "yes" and request.headers["User-Agent"].startswith(
            "kube-probe/"
        )
        return web.Response(status=200 if ok else 400)

    app = web.Application()
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/slow", slow)
    app.router.add_get("/headers", headers)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield port
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("path", "ok", "output"),
    [
        ("/status/200", True, "answered 200"),
        ("/status/204", True, ""),
        ("/status/302", True, "answered 200"),  # followed to the same host
        ("/status/399", True, "answered 399"),
        ("/status/404", False, "HTTP probe failed with statuscode: 404"),
        ("/status/503", False, "HTTP probe failed with statuscode: 503"),
    ],
)
async def test_http_get_status_codes(http_server: int, path: str, ok: bool, output: str) -> None:
    handlers = Handlers()
    try:
        outcome = await handlers.run(target(), probe(httpGet={"path": path, "port": http_server}))
    finally:
        await handlers.close()
    assert outcome == Outcome(ok, output)


async def test_http_get_headers_named_port_and_timeout(http_server: int) -> None:
    handlers = Handlers()
    t = target()
    t.container.ports[0].containerPort = http_server
    try:
        sent = await handlers.run(
            t,
            probe(
                httpGet={
                    "path": "/headers",
                    "port": "web",
                    "httpHeaders": [{"name": "X-Probe", "value": "yes"}],
                }
            ),
        )
        assert sent.ok is True
        began = time.monotonic()
        late = await handlers.run(t, probe(httpGet={"path": "/slow", "port": "web"}))
        assert time.monotonic() - began < 3
        url = f"http://127.0.0.1:{http_server}/slow"
        assert late == Outcome(
            False,
            f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting '
            "headers)",
        )
    finally:
        await handlers.close()


async def test_refused_connections_are_failures_in_gos_words() -> None:
    port = free_port()  # nothing listens there
    handlers = Handlers()
    try:
        http = await handlers.run(target(), probe(httpGet={"path": "/", "port": port}))
        tcp = await handlers.run(target(), probe(tcpSocket={"port": port}))
    finally:
        await handlers.close()
    refused = f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    assert http == Outcome(False, f'Get "http://127.0.0.1:{port}/": {refused}')
    assert tcp == Outcome(False, refused)


async def test_tcp_socket_connects() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    handlers = Handlers()
    try:
        assert await handlers.run(target(), probe(tcpSocket={"port": port})) == Outcome(True)
    finally:
        server.close()
        await handlers.close()


async def test_grpc_health_check() -> None:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    handlers = Handlers()
    try:
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        await servicer.set("db", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert await handlers.run(target(), probe(grpc={"port": port})) == Outcome(True)
        assert await handlers.run(target(), probe(grpc={"port": port, "service": "db"})) == (
            Outcome(False, 'service unhealthy (responded with "NOT_SERVING")')
        )
        unknown = await handlers.run(target(), probe(grpc={"port": port, "service": "nope"}))
        assert unknown.ok is False and unknown.output.startswith("error: health rpc probe failed")
    finally:
        await handlers.close()
        await server.stop(0)
