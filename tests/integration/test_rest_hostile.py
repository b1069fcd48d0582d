"""Hostile and slow REST clients (issue 28) and quiet logs (issue 22): numbers JSON cannot carry
in IntOrString fields, a body that is not the gzip it claims, an oversized JSON patch, request
heads and bodies that never end, a watcher that stops reading, a client that leaves mid-watch,
and the access log. Each answer is what kube-apiserver gives; none is a 5xx, and nothing is
logged at ERROR or with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import grpc
import pytest

from tests.integration.conftest import (
    RunningAPIServer,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}


@dataclass
class Rest:
    running: RunningAPIServer
    session: aiohttp.ClientSession
    host: str
    port: int

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def call(
        self, method: str, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        hdrs = {**JSON, **(headers or {})}
        async with self.session.request(method, self.base + path, data=body, headers=hdrs) as r:
            raw = await r.read()
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw.decode(errors="replace")


class Errors(logging.Handler):
    """Records at ERROR and above, and any record carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)


@pytest.fixture
def errors() -> Iterator[Errors]:
    handler = Errors()
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)
    assert not handler.records, [handler.format(r) for r in handler.records]


@pytest.fixture(scope="module")
async def rest(etcd_server: EtcdServer) -> AsyncIterator[Rest]:
    settings = make_settings(
        etcd_server.endpoint,
        rest_port=0,
        read_header_timeout_seconds=1.0,
        request_timeout_seconds=1.0,
        write_timeout_seconds=2.0,
        access_log=True,
    )
    running = await start_apiserver(settings)
    # A connection per request: the 1 s header timeout closes idle pooled ones.
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
    host, _, port = running.server.rest_address.rpartition(":")
    try:
        yield Rest(running, session, host, int(port))
    finally:
        await session.close()
        await running.server.stop()


# ---- numbers JSON cannot carry ---------------------------------------------------------------

HUGE = "9" * 400
BAD_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", HUGE, "-" + HUGE, "2147483648", "1.5"]


def _service(target_port: str) -> bytes:
    return (
        '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": '
        '{"selector": {"app": "a"}, "ports": [{"port": 80, "targetPort": ' + target_port + "}]}}"
    ).encode()


def _deployment(max_unavailable: str) -> bytes:
    return (
        '{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": '
        '{"selector": {"matchLabels": {"app": "a"}}, "strategy": {"type": "RollingUpdate", '
        '"rollingUpdate": {"maxUnavailable": ' + max_unavailable + "}}, "
        '"template": {"metadata": {"labels": {"app": "a"}}, '
        '"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}'
    ).encode()


def _probed_pod(port: str) -> bytes:
    return (
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": '
        '[{"name": "c", "image": "busybox", "livenessProbe": {"httpGet": {"port": '
        + port
        + "}}}]}}"
    ).encode()


CREATES = [
    ("/api/v1/namespaces/default/services", _service),
    ("/apis/apps/v1/namespaces/default/deployments", _deployment),
    ("/api/v1/namespaces/default/pods", _probed_pod),
]


@pytest.mark.parametrize("number", BAD_NUMBERS)
async def test_numbers_json_cannot_carry_in_int_or_string_fields_are_400(
    rest: Rest, errors: Errors, number: str
) -> None:
    for path, make in CREATES:
        code, body = await rest.call("POST", path, make(number))
        assert code == 400, (path, number, body)
        assert body["kind"] == "Status" and body["reason"] == "BadRequest", body
    # and in a patch of an object that exists (merge patch, JSON patch, apply)
    code, body = await rest.call("POST", CREATES[0][0], _service("8080"))
    assert code in (201, 409), body
    service = CREATES[0][0] + "/s"
    patches = [
        ("application/merge-patch+json", '{"spec": {"ports": [{"port": 80, "targetPort": %s}]}}'),
        (
            "application/json-patch+json",
            '[{"op": "replace", "path": "/spec/ports/0/targetPort", "value": %s}]',
        ),
        (
            "application/strategic-merge-patch+json",
            '{"spec": {"ports": [{"port": 80, "targetPort": %s}]}}',
        ),
    ]
    for content_type, template in patches:
        code, body = await rest.call(
            "PATCH", service, (template % number).encode(), {"Content-Type": content_type}
        )
        assert code in (400, 422), (content_type, number, body)
    yaml_number = number.replace("NaN", ".nan").replace("Infinity", ".inf")
    code, body = await rest.call(
        "PATCH",
        service + "?fieldManager=t",
        f"spec:\n  ports:\n  - port: 80\n    targetPort: {yaml_number}\n".encode(),
        {"Content-Type": "application/apply-patch+yaml"},
    )
    assert code in (400, 422), (number, body)
    code, body = await rest.call("GET", service, b"")
    assert code == 200 and body["spec"]["ports"][0]["targetPort"] == 8080, body


# ---- bodies ------------------------------------------------------------------------------------


async def test_a_body_that_is_not_the_gzip_it_claims_is_400(rest: Rest, errors: Errors) -> None:
    code, body = await rest.call(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        b'{"metadata": {"name": "cm"}}',
        {"Content-Encoding": "gzip"},
    )
    assert code == 400 and body["reason"] == "BadRequest", body
    assert "Content-Encoding: gzip" in body["message"], body
    # a body that is gzip is read as the JSON inside it
    code, body = await rest.call(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        gzip.compress(b'{"metadata": {"name": "gz"}}'),
        {"Content-Encoding": "gzip"},
    )
    assert code == 201, body


async def test_a_json_patch_of_over_10000_operations_is_413(rest: Rest, errors: Errors) -> None:
    code, body = await rest.call(
        "POST", "/api/v1/namespaces/default/configmaps", b'{"metadata": {"name": "big"}}'
    )
    assert code == 201, body
    ops = [{"op": "test", "path": "/kind", "value": "ConfigMap"}] * 10_001
    code, body = await rest.call(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/big",
        json.dumps(ops).encode(),
        {"Content-Type": "application/json-patch+json"},
    )
    assert code == 413 and body["reason"] == "RequestEntityTooLarge", body
    assert body["message"] == "The allowed maximum operations in a JSON patch is 10000, got 10001"


# ---- requests that never end -------------------------------------------------------------------


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), 30)


async def test_a_request_head_that_never_ends_is_closed(rest: Rest, errors: Errors) -> None:
    reader, writer = await asyncio.open_connection(rest.host, rest.port)
    try:
        writer.write(b"GET /\r\n")  # HTTP/0.9: no version, no blank line
        await writer.drain()
        answer = await _read_all(reader)  # EOF within the header timeout (1 s here)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer
    finally:
        writer.close()


async def test_a_chunked_body_that_never_ends_is_400_and_closed(rest: Rest, errors: Errors) -> None:
    reader, writer = await asyncio.open_connection(rest.host, rest.port)
    try:
        writer.write(
            b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'5\r\n{"met\r\n'
        )
        await writer.drain()
        answer = await _read_all(reader)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), answer
        assert b"did not arrive within 1s" in body, answer
    finally:
        writer.close()


# ---- watchers --------------------------------------------------------------------------------


async def test_a_watcher_leaving_mid_stream_is_not_an_error(rest: Rest, errors: Errors) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    for _ in range(3):
        reader, writer = await asyncio.open_connection(rest.host, rest.port)
        writer.write(f"GET {path}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
        writer.transport.abort()  # a reset, as a client killed with Ctrl-C
        big = {"metadata": {"name": f"leave-{_}"}, "data": {"k": "x" * 100_000}}
        code, body = await rest.call("POST", path, json.dumps(big).encode())
        assert code == 201, body
    # the apiserver is still serving
    code, _ = await rest.call("GET", path, b"")
    assert code == 200


async def test_a_watcher_that_stops_reading_is_closed_after_the_write_deadline(
    rest: Rest, errors: Errors
) -> None:
    path = "/api/v1/namespaces/default/secrets"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (rest.host, rest.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
    writer.write(f"GET {path}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
    cast(asyncio.Transport, writer.transport).pause_reading()  # a client that stops reading
    # More than the kernel's socket buffers hold, so the server's writes block.
    blob = "x" * 500_000
    for i in range(16):
        secret = {"metadata": {"name": f"s{i}"}, "stringData": {"k": blob}}
        code, body = await rest.call("POST", path, json.dumps(secret).encode())
        assert code == 201, body
    # The server gives up on it within the write deadline (2 s here) and closes the
    # connection: reading on ends at EOF before all of it arrived.
    await asyncio.sleep(0)
    got = 0
    async with asyncio.timeout(60):
        while not writer.transport.is_closing():
            await asyncio.sleep(0.5)
            if rest.running.server.caches["Secret"].watcher_count() == 0:
                break
        cast(asyncio.Transport, writer.transport).resume_reading()
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(1 << 20):
                got += len(chunk)
    assert got < 16 * 500_000
    writer.close()


async def test_a_big_answer_nobody_reads_is_dropped_at_the_write_deadline(
    rest: Rest, errors: Errors
) -> None:
    path = "/api/v1/namespaces/default/configmaps"
    blob = "y" * 900_000
    for i in range(12):
        cm = {"metadata": {"name": f"big{i}", "labels": {"set": "big"}}, "data": {"k": blob}}
        code, body = await rest.call("POST", path, json.dumps(cm).encode())
        assert code == 201, body
    runner = rest.running.server.rest._runner  # type: ignore[union-attr]
    assert runner is not None and runner.server is not None
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (rest.host, rest.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
    writer.write(f"GET {path}?labelSelector=set%3Dbig HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert head.startswith(b"HTTP/1.1 200"), head
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    assert length > 10_000_000
    cast(asyncio.Transport, writer.transport).pause_reading()  # and never read the 10 MB

    def open_connections() -> int:
        return len(runner.server.connections)  # type: ignore[union-attr]

    async with asyncio.timeout(60):  # the server lets go within its write deadline (2 s)
        while open_connections() > 0:  # noqa: ASYNC110 (the server's state, no event to wait on)
            await asyncio.sleep(0.1)
    cast(asyncio.Transport, writer.transport).resume_reading()
    got = 0
    with contextlib.suppress(ConnectionError):
        while chunk := await asyncio.wait_for(reader.read(1 << 20), 30):
            got += len(chunk)
    assert got < length
    writer.close()


async def test_a_rest_watcher_too_slow_gets_its_error_event_and_the_stream_closes(
    etcd_server: EtcdServer,
) -> None:
    running = await start_apiserver(
        make_settings(
            etcd_server.endpoint,
            rest_port=0,
            watcher_queue_bytes=300_000,
            write_timeout_seconds=0,  # only the queue bound acts here
        )
    )
    host, _, port = running.server.rest_address.rpartition(":")
    path = "/api/v1/namespaces/default/configmaps"
    cache = running.server.caches["ConfigMap"]
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 22)
        writer.write(f"GET {path}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
        cast(asyncio.Transport, writer.transport).pause_reading()
        async with aiohttp.ClientSession() as session:
            for i in range(40):  # 8 MB: past the socket buffers, then past the queue's bound
                cm = {"metadata": {"name": f"slow{i}"}, "data": {"k": "z" * 200_000}}
                url = f"http://{host}:{port}{path}"
                async with session.post(url, json=cm) as resp:
                    assert resp.status == 201, await resp.text()
        (watcher,) = cache.watchers()
        async with asyncio.timeout(30):
            while not watcher.closed:  # noqa: ASYNC110 (the server's state, no event)
                await asyncio.sleep(0.05)
        assert not watcher._queue  # dropped with the watcher
        cast(asyncio.Transport, writer.transport).resume_reading()
        lines = []
        async with asyncio.timeout(60):
            while line := await reader.readline():
                lines.append(line)
        # the stream ends (chunked terminator, then the server closes) after the ERROR event
        events = [json.loads(x) for x in lines if x.startswith(b'{"type"')]
        assert events[-1]["type"] == "ERROR", events[-1]
        assert events[-1]["object"]["code"] == 429
        assert "too slow" in events[-1]["object"]["message"]
        writer.close()
    finally:
        await running.server.stop()


def test_the_access_log_has_a_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    from apiserver.accesslog import go_duration

    assert go_duration(0.0021) == "2.1ms" and go_duration(1.5) == "1.5s"


async def test_access_log_lines_name_verb_uri_status_agent_and_source(
    rest: Rest, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="apiserver.access"):
        code, _ = await rest.call(
            "GET", "/api/v1/namespaces/default/pods?limit=5", b"", {"User-Agent": "probe/1.0"}
        )
        assert code == 200
        code, _ = await rest.call("GET", "/api/v1/namespaces/default/pods/nope", b"")
        assert code == 404
    lines = [r.getMessage() for r in caplog.records if r.name == "apiserver.access"]
    assert any(
        line.startswith('HTTP verb="LIST" URI="/api/v1/namespaces/default/pods?limit=5" latency=')
        and 'userAgent="probe/1.0"' in line
        and 'srcIP="127.0.0.1:' in line
        and line.endswith("resp=200")
        for line in lines
    ), lines
    assert any('verb="GET"' in line and line.endswith("resp=404") for line in lines), lines


async def test_access_log_lines_for_grpc_calls(
    rest: Rest, caplog: pytest.LogCaptureFixture
) -> None:
    channel = grpc.aio.insecure_channel(
        rest.running.address, options=[*CHANNEL_OPTIONS, ("grpc.primary_user_agent", "probe/2")]
    )
    try:
        stubs = make_stubs(channel)
        with caplog.at_level(logging.INFO, logger="apiserver.access"):
            await stubs.nodes.List(meta_pb2.ListRequest())
            with pytest.raises(grpc.aio.AioRpcError):
                await stubs.nodes.Get(meta_pb2.GetRequest(name="nope"))
    finally:
        await channel.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "apiserver.access"]
    assert any(
        line.startswith('GRPC method="/tinykube.v1.Nodes/List" latency=')
        and "probe/2" in line
        and 'peer="ipv4:127.0.0.1:' in line
        and line.endswith("code=OK")
        for line in lines
    ), lines
    assert any("Nodes/Get" in line and line.endswith("code=NOT_FOUND") for line in lines), lines
