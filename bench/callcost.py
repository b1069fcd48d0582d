"""CPU per request of a grpc.aio call, unary against messages pipelined on one bidi stream.

Two processes, as in the cluster: a grpc.aio server with the apiserver's server options
(tinykube/serving.py SERVER_OPTIONS, uvloop through tinykube.aio, an interceptor that caches
its wrapped handler as the apiserver's MetricsInterceptor does) and a client process with the
components' channel options. With TLS the server requires a client certificate signed by a CA
made in a temporary directory (the apiserver's setup); without it both ends are plaintext.

Modes, each sending `--requests` requests of `--size` bytes (a pod's protobuf is 1-1.5 KB),
each answered by `--size` bytes, with `--inflight` outstanding:

- `unary`: unary-unary calls, `--inflight` client coroutines each awaiting its call.
- `stream`: one stream-stream call; the client writes requests as long as fewer than
  `--inflight` are unanswered and a reader takes the answers; the server reads a message and
  writes its answer (no handler work, nothing concurrent).
- `stream-tasks`: the same stream, but the server runs each message in its own task and a
  writer sends the answers in request order: what a stream carrying real writes (which wait on
  etcd) must do, so its extra cost is part of the price.

Bodies are opaque bytes on both ends (no protobuf), so only the call or message is measured.
The server's CPU is read from /proc/<pid>/stat (all threads, 10 ms ticks) around the measured
phase, the client's with time.process_time; `--perf` also counts user-space instructions of
each process with `perf stat -e instructions:u` where the machine has hardware counters, and
`--callgrind` runs both under valgrind's callgrind (counters zeroed after the warm-up, dumped
after the phase): instructions per request, a figure the machine's load does not move.
A warm-up of `--warmup` requests runs first. Microseconds per request on stdout as JSON:

    .venv/bin/python bench/callcost.py [--tls both|on|off] [--modes unary,stream,stream-tasks]
        [--requests 20000] [--inflight 32] [--size 1200] [--perf | --callgrind] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

SERVICE = "bench.Echo"
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


# ---- server ---------------------------------------------------------------------------------


class CachingInterceptor(grpc.aio.ServerInterceptor):
    """What the apiserver's MetricsInterceptor costs a call when no metric is kept: one
    intercept_service coroutine, the wrapped handler looked up in a dict."""

    def __init__(self) -> None:
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = self._wrapped.get(details.method)
        if handler is None:
            handler = self._wrapped[details.method] = await continuation(details)
        return handler


async def _serve(tls_dir: str, size: int) -> None:
    from tinykube.serving import SERVER_OPTIONS
    from tinykube.tls import ServingTLS

    answer = os.urandom(size)

    async def unary(request: bytes, context: Any) -> bytes:
        return answer

    async def stream(request_iterator: Any, context: Any) -> None:
        # context.read()/write() rather than an async generator: the apiserver's streams write
        # with context.write, which costs no extra task per message.
        read, write = context.read, context.write
        while True:
            request = await read()
            if request is grpc.aio.EOF:
                return
            await write(answer)

    async def stream_tasks(request_iterator: Any, context: Any) -> None:
        loop = asyncio.get_running_loop()
        pending: collections.deque[asyncio.Task[bytes]] = collections.deque()
        ready = asyncio.Event()
        done = False

        async def handle(request: bytes) -> bytes:
            return answer

        async def writer() -> None:
            while True:
                while pending:
                    await context.write(await pending.popleft())
                if done:
                    return
                ready.clear()
                await ready.wait()

        write_task = loop.create_task(writer())
        read = context.read
        while True:
            request = await read()
            if request is grpc.aio.EOF:
                break
            pending.append(loop.create_task(handle(request)))
            ready.set()
        done = True
        ready.set()
        await write_task

    server = grpc.aio.server(options=list(SERVER_OPTIONS), interceptors=[CachingInterceptor()])
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Unary": grpc.unary_unary_rpc_method_handler(unary),
                    "Stream": grpc.stream_stream_rpc_method_handler(stream),
                    "StreamTasks": grpc.stream_stream_rpc_method_handler(stream_tasks),
                },
            ),
        )
    )
    if tls_dir:
        tls = ServingTLS(
            f"{tls_dir}/apiserver.crt", f"{tls_dir}/apiserver.key", f"{tls_dir}/ca.crt"
        )
        port = server.add_secure_port("127.0.0.1:0", tls.grpc_credentials())
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


# ---- client ---------------------------------------------------------------------------------


def _channel(port: int, tls_dir: str) -> grpc.aio.Channel:
    from tinykube.serving import CHANNEL_OPTIONS
    from tinykube.tls import Credentials

    if not tls_dir:
        return grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=list(CHANNEL_OPTIONS))
    creds = Credentials(
        ca=Path(tls_dir, "ca.crt").read_bytes(),
        cert=Path(tls_dir, "kubelet-node-1.crt").read_bytes(),
        key=Path(tls_dir, "kubelet-node-1.key").read_bytes(),
    )
    return creds.channel(f"127.0.0.1:{port}", CHANNEL_OPTIONS)


async def _unary_phase(channel: grpc.aio.Channel, body: bytes, n: int, inflight: int) -> None:
    call: Any = channel.unary_unary(f"/{SERVICE}/Unary")
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call(body, timeout=30)

    await asyncio.gather(*(worker() for _ in range(inflight)))


async def _stream_phase(
    channel: grpc.aio.Channel, method: str, body: bytes, n: int, inflight: int
) -> None:
    call: Any = channel.stream_stream(f"/{SERVICE}/{method}")()
    room = asyncio.Semaphore(inflight)

    async def writer() -> None:
        for _ in range(n):
            await room.acquire()
            await call.write(body)
        await call.done_writing()

    async def reader() -> None:
        for _ in range(n):
            answer = await call.read()
            if answer is grpc.aio.EOF:
                raise RuntimeError("stream ended early")
            room.release()

    await asyncio.gather(writer(), reader())
    if await call.read() is not grpc.aio.EOF:
        raise RuntimeError("more answers than requests")


async def _client(port: int, tls_dir: str, mode: str, args: argparse.Namespace) -> None:
    body = os.urandom(args.size)
    method = {"stream": "Stream", "stream-tasks": "StreamTasks"}.get(mode, "")
    async with _channel(port, tls_dir) as channel:

        async def phase(n: int) -> None:
            if mode == "unary":
                await _unary_phase(channel, body, n, args.inflight)
            else:
                await _stream_phase(channel, method, body, n, args.inflight)

        await phase(args.warmup)
        print("ready", flush=True)
        sys.stdin.readline()  # the parent has sampled the server and started perf
        cpu, wall = time.process_time(), time.perf_counter()
        await phase(args.requests)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(json.dumps({"cpu": cpu, "wall": wall}), flush=True)
        sys.stdin.readline()  # perf has stopped


# ---- parent ---------------------------------------------------------------------------------


def _perf(pid: int, out: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["perf", "stat", "-x,", "-e", "instructions:u", "-p", str(pid), "-o", out],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _perf_count(proc: subprocess.Popen[bytes], out: str) -> float | None:
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    for line in Path(out).read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2].startswith("instructions") and parts[0].isdigit():
            return float(parts[0])
    return None


def _callgrind_prefix(out: str) -> list[str]:
    # Uninstrumented (several times faster) until the measured phase turns it on.
    return [
        "valgrind",
        "-q",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        "--dump-line=no",
        "--instr-atstart=no",
    ]


def _callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def _dumped_instructions(pid: int, out: str) -> int:
    """Dump `pid`'s counters (zeroed before the phase) and read the dump's total."""
    before = set(Path(out).parent.glob(Path(out).name + "*"))
    _callgrind_control("--dump", str(pid))
    (dump,) = set(Path(out).parent.glob(Path(out).name + "*")) - before
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def _measure(tls_dir: str, mode: str, args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    me = [sys.executable, __file__, "--size", str(args.size)]
    tag = f"{mode}-{'tls' if tls_dir else 'plain'}-{time.monotonic_ns()}"
    grind = {
        side: _callgrind_prefix(f"{tmp}/{side}-{tag}.out") if args.callgrind else []
        for side in ("server", "client")
    }
    server = subprocess.Popen(
        [*grind["server"], *me, "--serve", "--tls-dir", tls_dir], stdout=subprocess.PIPE, text=True
    )
    client: subprocess.Popen[str] | None = None
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        client = subprocess.Popen(
            [
                *grind["client"],
                *me,
                "--client",
                mode,
                "--port",
                str(port),
                "--tls-dir",
                tls_dir,
                "--requests",
                str(args.requests),
                "--warmup",
                str(args.warmup),
                "--inflight",
                str(args.inflight),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdin is not None and client.stdout is not None
        if client.stdout.readline().strip() != "ready":
            raise RuntimeError("client failed")
        perfs = []
        if args.perf:
            perfs = [
                (_perf(server.pid, f"{tmp}/server.perf"), f"{tmp}/server.perf"),
                (_perf(client.pid, f"{tmp}/client.perf"), f"{tmp}/client.perf"),
            ]
            time.sleep(0.5)  # perf attaches
        if args.callgrind:
            for pid in (server.pid, client.pid):
                _callgrind_control("--instr=on", str(pid))
                _callgrind_control("--zero", str(pid))
        server_cpu = _cpu_seconds(server.pid)
        client.stdin.write("go\n")
        client.stdin.flush()
        measured = json.loads(client.stdout.readline())
        server_cpu = _cpu_seconds(server.pid) - server_cpu
        counts: list[float | None] = [_perf_count(p, out) for p, out in perfs]
        if args.callgrind:
            counts = [
                _dumped_instructions(server.pid, f"{tmp}/server-{tag}.out"),
                _dumped_instructions(client.pid, f"{tmp}/client-{tag}.out"),
            ]
        client.stdin.write("end\n")
        client.stdin.flush()
        client.wait(300)  # (under callgrind on a loaded machine it takes its time)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        server.kill()
        server.wait()
    n = args.requests
    result: dict[str, Any] = {
        "tls": bool(tls_dir),
        "mode": mode,
        "requests": n,
        "wall_s": round(measured["wall"], 3),
        "requests_per_s": round(n / measured["wall"]),
        "server_cpu_us": round(server_cpu / n * 1e6, 1),
        "client_cpu_us": round(measured["cpu"] / n * 1e6, 1),
    }
    if counts:
        # (perf also counts the idle half second before the phase: a few M instructions)
        result["server_instructions"] = round(counts[0] / n) if counts[0] else None
        result["client_instructions"] = round(counts[1] / n) if counts[1] else None
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--tls", choices=("both", "on", "off"), default="both")
    p.add_argument("--modes", default="unary,stream,stream-tasks")
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--warmup", type=int, default=2_000)
    p.add_argument("--inflight", type=int, default=32)
    p.add_argument("--size", type=int, default=1200)
    p.add_argument("--rounds", type=int, default=1, help="repeat every case, interleaved")
    p.add_argument("--perf", action="store_true", help="count instructions with perf stat")
    p.add_argument(
        "--callgrind",
        action="store_true",
        help="run both processes under valgrind's callgrind and count their instructions "
        "in the measured phase (30-60x slower: use a few thousand requests)",
    )
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--client", default="", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--tls-dir", default="", help=argparse.SUPPRESS)
    args = p.parse_args()

    from tinykube.aio import run

    if args.serve:
        run(_serve(args.tls_dir, args.size))
        return
    if args.client:
        run(_client(args.port, args.tls_dir, args.client, args))
        return

    from tinykube.pki import PKI, CertSpec

    modes = [m for m in args.modes.split(",") if m]
    results = []
    with tempfile.TemporaryDirectory(prefix="callcost-") as tmp:
        pki = PKI(Path(tmp))
        pki.ensure_all(
            [
                CertSpec("apiserver", "kube-apiserver", ip_addresses=("127.0.0.1",), server=True),
                CertSpec("kubelet-node-1", "system:node:node-1", ("system:nodes",), client=True),
            ]
        )
        tls_dirs = {"both": ["", tmp], "on": [tmp], "off": [""]}[args.tls]
        for _ in range(args.rounds):
            for tls_dir in tls_dirs:
                for mode in modes:
                    result = _measure(tls_dir, mode, args, tmp)
                    result["loadavg"] = os.getloadavg()[0]
                    print(json.dumps(result), file=sys.stderr, flush=True)
                    results.append(result)
    json.dump({"nproc": os.cpu_count(), "args": vars(args), "results": results}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
