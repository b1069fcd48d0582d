"""CRI log records (the shim's writing, the kubelet's reading and options) and the Kubelet.Logs
servicer, called directly (no sockets) over temporary log files."""

from __future__ import annotations

import asyncio
import fcntl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubelet.crilog import (
    LogFormatError,
    LogOptions,
    LogWriter,
    Record,
    format_time,
    parse_record,
    parse_time,
    tail_start,
    writer_active,
)
from kubelet.fake import FakeRuntime
from kubelet.logs import KubeletService, log_options
from kubelet.logshim import LineSplitter, record, rfc3339nano
from kubelet.streaming import StreamingService
from tinykube.clock import Clock, FakeClock
from tinykube.v1 import kubelet_pb2, pod_pb2

T0 = 1_796_119_200 * 1_000_000_000  # 2026-12-01T10:00:00Z
S = 1_000_000_000


# ---- the shim's side ----


def test_rfc3339nano_trims_trailing_zeros_as_go() -> None:
    cases = [
        (T0, "2026-12-01T10:00:00Z"),
        (T0 + 123_000_000, "2026-12-01T10:00:00.123Z"),
        (T0 + 1, "2026-12-01T10:00:00.000000001Z"),
        (T0 + 120_456_789, "2026-12-01T10:00:00.120456789Z"),
    ]
    for ns, want in cases:
        assert rfc3339nano(ns) == want


def test_line_splitter() -> None:
    cases: list[tuple[list[bytes], list[tuple[bytes, bytes]]]] = [
        ([b"a\nb\n"], [(b"F", b"a"), (b"F", b"b")]),
        ([b"ab", b"c\nd"], [(b"F", b"abc"), (b"P", b"d")]),  # the rest at close is partial
        ([b"dos\r\n", b"\n"], [(b"F", b"dos"), (b"F", b"")]),
        ([b"0123456789\n"], [(b"P", b"0123"), (b"P", b"4567"), (b"F", b"89")]),
        ([b"012345"], [(b"P", b"0123"), (b"P", b"45")]),
        ([b"0123", b"\n"], [(b"F", b"0123")]),  # exactly max_line is one full line
        ([b""], []),
    ]
    for chunks, want in cases:
        splitter = LineSplitter(max_line=4)
        got = [piece for chunk in chunks for piece in splitter.feed(chunk)] + splitter.close()
        assert got == want, chunks


def test_shim_records_parse_back() -> None:
    line = record(T0 + 5, b"stderr", b"F", b"hello world")
    assert line == b"2026-12-01T10:00:00.000000005Z stderr F hello world\n"
    assert parse_record(line) == Record(T0 + 5, "stderr", False, b"hello world\n")


# ---- the kubelet's side ----


def test_parse_time() -> None:
    cases = [
        (b"2026-12-01T10:00:00Z", T0),
        (b"2026-12-01T10:00:00.5Z", T0 + 500_000_000),
        (b"2026-12-01T10:00:00.123456789Z", T0 + 123_456_789),
        (b"2026-12-01T11:30:00.1+01:30", T0 + 100_000_000),
        (b"2026-12-01T08:00:00-02:00", T0),
    ]
    for text, want in cases:
        assert parse_time(text) == want, text
    for bad in (b"2026-12-01 10:00:00Z", b"2026-12-01T10:00:00", b"yesterday"):
        with pytest.raises(LogFormatError, match="not RFC 3339"):
            parse_time(bad)


def test_format_time_has_nine_digits() -> None:
    assert format_time(T0) == "2026-12-01T10:00:00.000000000Z"
    assert format_time(T0 + 120_000_000) == "2026-12-01T10:00:00.120000000Z"


def test_parse_record() -> None:
    stamp = b"2026-12-01T10:00:00Z"
    cases = [
        (stamp + b" stdout F text\n", Record(T0, "stdout", False, b"text\n")),
        (stamp + b" stderr P part\n", Record(T0, "stderr", True, b"part")),
        (stamp + b" stdout F \n", Record(T0, "stdout", False, b"\n")),
        (stamp + b" stdout F two  spaces \n", Record(T0, "stdout", False, b"two  spaces \n")),
        (stamp + b" stdout F:x later tags\n", Record(T0, "stdout", False, b"later tags\n")),
    ]
    for line, want in cases:
        assert parse_record(line) == want, line
    errors = [
        (b"plain text\n", "not a CRI log record"),
        (stamp + b" stdin F x\n", "unexpected stream type 'stdin'"),
        (b"10:00 stdout F x\n", "not RFC 3339"),
    ]
    for line, message in errors:
        with pytest.raises(LogFormatError, match=message):
            parse_record(line)


def test_tail_start() -> None:
    data = b"a\nb\nc\n"
    cases = [(0, 6), (1, 4), (2, 2), (3, 0), (9, 0)]
    for lines, want in cases:
        assert tail_start(data, lines) == want, lines
    assert tail_start(b"a\nb\nhalf", 1) == 2, "a record being written is not counted"


def cri(*lines: tuple[float, str, str, str]) -> bytes:
    """CRI records of (seconds after T0, stream, tag, text)."""
    return b"".join(
        record(T0 + int(sec * S), stream.encode(), tag.encode(), text.encode())
        for sec, stream, tag, text in lines
    )


LOG = cri(
    (0, "stdout", "F", "one"),
    (1, "stderr", "F", "two"),
    (2, "stdout", "P", "thr"),
    (2.5, "stdout", "F", "ee"),
    (3, "stdout", "F", "four"),
)


def render(data: bytes, options: LogOptions) -> bytes:
    start = tail_start(data, options.tail_lines) if options.tail_lines is not None else 0
    out, _ = LogWriter(options).lines(data[start:])
    return out


def test_writer_options_as_the_kubelet() -> None:
    stamp = "2026-12-01T10:00:0{}.{}Z "
    ts = [stamp.format(0, "0" * 9), stamp.format(1, "0" * 9), stamp.format(2, "0" * 9)]
    cases: list[tuple[LogOptions, str]] = [
        (LogOptions(), "one\ntwo\nthree\nfour\n"),
        (
            LogOptions(timestamps=True),
            # The second piece of a split line gets no prefix of its own.
            f"{ts[0]}one\n{ts[1]}two\n{ts[2]}three\n2026-12-01T10:00:03.000000000Z four\n",
        ),
        (LogOptions(since_ns=T0 + S), "two\nthree\nfour\n"),  # a record at `since` is kept
        (LogOptions(since_ns=T0 + 2 * S + 1), "ee\nfour\n"),
        (LogOptions(tail_lines=2), "ee\nfour\n"),  # records, not logical lines
        (LogOptions(tail_lines=0), ""),
        # tail first, then since: of the last three records, those not before since.
        (LogOptions(tail_lines=3, since_ns=T0 + 2 * S + 1), "ee\nfour\n"),
        (LogOptions(tail_lines=1, since_ns=T0), "four\n"),
        (LogOptions(limit_bytes=6), "one\ntw"),
        (LogOptions(limit_bytes=39, timestamps=True), f"{ts[0]}one\n2026"),
        (LogOptions(tail_lines=2, limit_bytes=2), "ee"),
    ]
    for options, want in cases:
        assert render(LOG, options).decode() == want, options


def test_writer_skips_lines_that_are_not_records_and_keeps_incomplete_ones() -> None:
    writer = LogWriter(LogOptions())
    data = b"garbage\n" + cri((0, "stdout", "F", "ok")) + b"2026-12-01T10:00:00Z stdout F ha"
    out, used = writer.lines(data)
    assert (out, used) == (b"ok\n", len(data) - len(b"2026-12-01T10:00:00Z stdout F ha"))


def test_log_options_since() -> None:
    now = T0 + 100 * S
    req = kubelet_pb2.LogsRequest(sinceSeconds=10, tailLines=3, limitBytes=7, timestamps=True)
    assert log_options(req, now) == LogOptions(
        tail_lines=3, limit_bytes=7, timestamps=True, since_ns=now - 10 * S
    )
    req = kubelet_pb2.LogsRequest()
    req.sinceTime.seconds = T0 // S + 5
    assert log_options(req, now).since_ns == T0 + 5 * S
    assert log_options(kubelet_pb2.LogsRequest(), now) == LogOptions()


def test_writer_active_follows_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    assert not writer_active(path)
    path.write_bytes(b"")
    assert not writer_active(path)
    with path.open("ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assert writer_active(path)
    assert not writer_active(path)


# ---- the servicer ----


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted(details)

    def time_remaining(self) -> float | None:
        return None  # no deadline


class FilesRuntime(FakeRuntime):
    """A runtime whose instances' logs are given files: `current` and `previous`."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.current = root / "1.log"
        self.previous: Path | None = root / "0.log"

    def log_path(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        return self.previous if previous else self.current


def make_pod(*containers: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = "web"
    pod.metadata.namespace = "default"
    pod.metadata.uid = "u1"
    pod.status.phase = "Running"
    for c in containers:
        pod.spec.containers.add(name=c, image="x")
        pod.status.containerStatuses.add(name=c).state.running.SetInParent()
    return pod


async def collect(service: KubeletService, request: kubelet_pb2.LogsRequest) -> tuple[bytes, Any]:
    ctx = FakeContext()
    out = b""
    try:
        async for chunk in service.Logs(request, ctx):  # type: ignore[arg-type]
            out += chunk.data
    except Aborted:
        pass
    return out, ctx


def request(**fields: Any) -> kubelet_pb2.LogsRequest:
    return kubelet_pb2.LogsRequest(**{"namespace": "default", "name": "web", **fields})


async def test_instances_timestamps_since_and_errors(tmp_path: Path) -> None:
    runtime = FilesRuntime(tmp_path)
    runtime.current.write_bytes(LOG)
    assert runtime.previous is not None
    runtime.previous.write_bytes(cri((0, "stdout", "F", "before the crash")))
    pods = {("default", "web"): make_pod("main")}
    restarted = make_pod("main")
    restarted.status.containerStatuses[0].lastState.terminated.exitCode = 1
    clock = FakeClock(datetime.fromtimestamp(T0 // S + 60, tz=UTC))
    service = StreamingService(lambda ns, n: pods.get((ns, n)), runtime, clock=clock)
    since = kubelet_pb2.LogsRequest(namespace="default", name="web")
    since.sinceTime.seconds = T0 // S + 3
    cases: list[tuple[pod_pb2.Pod, kubelet_pb2.LogsRequest, bytes]] = [
        (make_pod("main"), request(), b"one\ntwo\nthree\nfour\n"),
        (make_pod("main"), request(tailLines=1), b"four\n"),
        (make_pod("main"), request(limitBytes=5), b"one\nt"),
        (restarted, request(previous=True), b"before the crash\n"),
        (
            restarted,
            request(previous=True, timestamps=True),
            b"2026-12-01T10:00:00.000000000Z before the crash\n",
        ),
        (make_pod("main"), request(sinceSeconds=58), b"three\nfour\n"),  # now: T0 + 60 s
        (make_pod("main"), request(sinceSeconds=30), b""),
        (make_pod("main"), since, b"four\n"),
    ]
    for pod, req, want in cases:
        pods[("default", "web")] = pod
        out, ctx = await collect(service, req)
        assert (out, ctx.code) == (want, None), req

    pods[("default", "web")] = make_pod("main")
    _, ctx = await collect(service, request(name="nope"))
    assert ctx.code == grpc.StatusCode.NOT_FOUND
    _, ctx = await collect(service, request(container="side"))
    assert (ctx.code, ctx.details) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "container side is not valid for pod web",
    )
    # The status says there was a previous instance, the runtime has none.
    pods[("default", "web")] = restarted
    runtime.previous = None
    _, ctx = await collect(service, request(previous=True))
    assert ctx.details == 'previous terminated container "main" in pod "web" not found'
    pods[("default", "web")] = make_pod("a", "b")
    _, ctx = await collect(service, request())
    assert ctx.details == "a container name must be specified for pod web, choose one of: [a b]"


async def test_follow_streams_until_the_shim_lets_go(tmp_path: Path) -> None:
    runtime = FilesRuntime(tmp_path)
    pods = {("default", "web"): make_pod("main")}
    service = StreamingService(lambda ns, n: pods.get((ns, n)), runtime, clock=Clock())
    with runtime.current.open("ab") as shim:
        fcntl.flock(shim, fcntl.LOCK_EX)  # as the log shim holds it while it may write
        shim.write(cri((0, "stdout", "F", "first")) + b"2026-12-01T10:00:01Z stdout F sec")
        shim.flush()
        task = asyncio.create_task(collect(service, request(follow=True, timestamps=True)))
        await asyncio.sleep(0.3)
        shim.write(b"ond\n")
        shim.flush()
        await asyncio.sleep(0.5)
        assert not task.done(), "follow ended while the shim could still write"
    out, _ = await asyncio.wait_for(task, 5)
    assert out == (b"2026-12-01T10:00:00.000000000Z first\n2026-12-01T10:00:01.000000000Z second\n")


async def test_follow_ends_when_the_pod_is_gone(tmp_path: Path) -> None:
    runtime = FilesRuntime(tmp_path)
    pods = {("default", "web"): make_pod("main")}
    service = StreamingService(lambda ns, n: pods.get((ns, n)), runtime, clock=Clock())
    with runtime.current.open("ab") as shim:
        fcntl.flock(shim, fcntl.LOCK_EX)
        task = asyncio.create_task(collect(service, request(follow=True)))
        await asyncio.sleep(0.3)
        assert not task.done()
        del pods[("default", "web")]
        assert await asyncio.wait_for(task, 5) is not None


async def test_follow_stops_at_the_byte_limit(tmp_path: Path) -> None:
    runtime = FilesRuntime(tmp_path)
    runtime.current.write_bytes(LOG)
    service = StreamingService(lambda ns, n: make_pod("main"), runtime, clock=Clock())
    with runtime.current.open("ab") as shim:
        fcntl.flock(shim, fcntl.LOCK_EX)
        out, _ = await asyncio.wait_for(collect(service, request(follow=True, limitBytes=3)), 5)
    assert out == b"one"


async def test_fake_runtime_has_no_logs() -> None:
    service = StreamingService(lambda ns, n: make_pod("main"), FakeRuntime())
    _, ctx = await collect(service, request())
    assert ctx.code == grpc.StatusCode.UNIMPLEMENTED


def _waiting(reason: str) -> pod_pb2.Pod:
    pod = make_pod("main")
    pod.status.containerStatuses[0].state.Clear()
    if reason:
        pod.status.containerStatuses[0].state.waiting.reason = reason
    return pod


def _no_status() -> pod_pb2.Pod:
    pod = make_pod("main")
    del pod.status.containerStatuses[:]
    return pod


def _crash_looping() -> pod_pb2.Pod:
    pod = _waiting("CrashLoopBackOff")
    pod.status.containerStatuses[0].lastState.terminated.exitCode = 1
    return pod


async def test_log_status_refusals(tmp_path: Path) -> None:
    runtime = FilesRuntime(tmp_path)
    runtime.current.write_bytes(cri((0, "stdout", "F", "now")))
    assert runtime.previous is not None
    runtime.previous.write_bytes(cri((0, "stdout", "F", "then")))
    where = 'container "main" in pod "web"'
    cases: list[tuple[pod_pb2.Pod, dict[str, Any], bytes, str]] = [
        (_waiting("ContainerCreating"), {}, b"", f"{where} is waiting to start: ContainerCreating"),
        (_no_status(), {}, b"", f"{where} is waiting to start - no logs yet"),
        (make_pod("main"), {"previous": True}, b"", f"previous terminated {where} not found"),
        (_crash_looping(), {}, b"now\n", ""),
        (_crash_looping(), {"previous": True}, b"then\n", ""),
    ]
    for pod, fields, want, error in cases:
        service = StreamingService(lambda ns, n, p=pod: p, runtime)  # type: ignore[misc]
        out, ctx = await collect(service, request(**fields))
        assert (out, ctx.details) == (want, error), fields
        if error:
            assert ctx.code == grpc.StatusCode.INVALID_ARGUMENT
