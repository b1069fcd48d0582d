"""CPU per request of the apiserver and etcd, with the apiserver on etcd's TCP port or its socket.

    .venv/bin/python bench/etcdlink.py --runs 6 --count 1000              # TLS, as tinykube up
    .venv/bin/python bench/etcdlink.py --runs 6 --count 1000 --insecure   # plaintext everywhere
    .venv/bin/python bench/etcdlink.py --links tcp,socket,socket-plaintext ...

Each run starts one etcd (serving its TCP client port and a unix socket, tinykube.localetcd)
and one apiserver whose --etcd-servers is, by link:

- `tcp`: `https://127.0.0.1:PORT` (`http://` with --insecure), as before session 14;
- `socket`: `unixs:///.../localhost:PORT` (`unix://` with --insecure), TLS and etcd's
  client-certificate check as on TCP (what `tinykube up` uses now);
- `socket-plaintext`: `unix://` while everything else runs with TLS (not a mode tinykube
  offers: what TLS on the etcd link costs over the socket).

The requests are bench/opcost.py's (its driver, `--drive`): one at a time, each from the
identity that sends it in a cluster (Pod create, bind, status update, Lease renewal, and the
same over the write streams), `--count` per phase. Around each phase this process reads the
apiserver's and etcd's utime and stime from /proc/<pid>/stat (every thread; 10 ms ticks, so
`--count` should make a phase last a second or more), after letting the apiserver settle
(under 15 % of a CPU for 3 s). Links are interleaved (run 1: tcp, socket, ...; run 2: the
same), so a change of the machine's load falls on every link alike; the summary is the median
over runs of CPU microseconds per request, per process and phase, user and system apart. The
idle CPU of both processes (their background: bookmarks, etcd's progress notifications, the
apiserver's Lease) is measured for `--idle-seconds` before the first phase and reported, not
subtracted. Nothing is asserted; JSON lines (one per run, then the summary) on stdout, and
`--out FILE` writes them all.

`--rpc-only` leaves the apiserver out: this process sends etcd `--count` Range calls of one
1.2 KB value (`--inflight` at a time) on the apiserver's channel options and credentials, and
reports its own CPU (getrusage) and etcd's per call: what the link itself costs each side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "bench"))

import opcost  # noqa: E402 - the driver and the certificates are its

LINKS = ("tcp", "socket", "socket-plaintext")
TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid: int) -> tuple[float, float]:
    """utime and stime, seconds, of every thread of `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def one_run(link: str, count: int, *, insecure: bool, idle_seconds: float) -> dict[str, Any]:
    from tinykube.health import wait_healthy
    from tinykube.localetcd import EtcdServer, free_port
    from tinykube.tls import PLAINTEXT

    work = Path(tempfile.mkdtemp(prefix="tinykube-etcdlink-"))
    identities: dict[str, Any]
    if insecure:
        etcd_tls, security, identities, parent = None, ["--insecure"], {}, PLAINTEXT
    else:
        etcd_tls, security, identities, parent = opcost._security(work)
    (work / "identities.json").write_text(json.dumps(identities))
    plaintext_socket = link == "socket-plaintext"
    etcd = EtcdServer(str(work / "etcd"), die_with_parent=True, tls=etcd_tls, socket=True)
    if plaintext_socket:
        # TLS on etcd's TCP port, plaintext on its socket: etcd takes both schemes at once.
        tls_command = etcd.command

        def command() -> list[str]:
            cmd = tls_command()
            at = cmd.index("--listen-client-urls") + 1
            cmd[at] = cmd[at].replace("unixs://", "unix://")
            return cmd

        etcd.command = command  # type: ignore[method-assign]
    etcd.start()
    if link == "tcp":
        servers = etcd.url
    elif plaintext_socket:
        servers = f"unix://{etcd.socket_path}"
        # no TLS on the link: the apiserver gets no --etcd-* certificate flags
        security = list(security)
        for flag in ("--etcd-cafile", "--etcd-certfile", "--etcd-keyfile"):
            at = security.index(flag)
            del security[at : at + 2]
    else:
        servers = etcd.socket_url
    env = {**os.environ, "PYTHONPATH": str(HERE), "PYTHONUNBUFFERED": "1"}
    port = free_port()
    cmd = [sys.executable, "-m", "apiserver", "--etcd-servers", servers]
    cmd += ["--bind-address", f"127.0.0.1:{port}", "--rest-port", "-1", *security]
    cmd += ["--compaction-interval", "0"]
    with open(work / "apiserver.log", "wb") as log:
        api = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    assert etcd.process is not None
    etcd_pid = etcd.process.pid
    driver: subprocess.Popen[str] | None = None
    result: dict[str, Any] = {
        "link": link,
        "etcd_servers": servers.replace(str(work), "WORK"),
        "security": "insecure" if insecure else "tls+Node,RBAC",
        "count": count,
        "nproc": os.cpu_count(),
        "load1_at_start": loadavg(),
    }
    try:
        address = f"127.0.0.1:{port}"
        wait_healthy(address, 300, alive=lambda: api.poll() is None, credentials=parent)
        drive = [str(HERE / "bench" / "opcost.py"), "--drive", address, str(count)]
        driver = subprocess.Popen(
            [sys.executable, *drive, str(work / "identities.json")],
            cwd=HERE,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert driver.stdin is not None and driver.stdout is not None
        for phase in opcost.PHASES:
            line = driver.stdout.readline().strip()
            if line == f"skip {phase}":
                continue
            if line != f"ready {phase}":
                raise SystemExit(f"driver: expected 'ready {phase}', got {line!r}")
            opcost._settle(api.pid, limit=60)
            if phase == opcost.PHASES[0] and idle_seconds > 0:
                a0, e0 = cpu(api.pid), cpu(etcd_pid)
                time.sleep(idle_seconds)
                a1, e1 = cpu(api.pid), cpu(etcd_pid)
                result["idle_cpu_share"] = {
                    "apiserver": round((sum(a1) - sum(a0)) / idle_seconds, 4),
                    "etcd": round((sum(e1) - sum(e0)) / idle_seconds, 4),
                }
            began, a0, e0 = time.monotonic(), cpu(api.pid), cpu(etcd_pid)
            driver.stdin.write("go\n")
            driver.stdin.flush()
            line = driver.stdout.readline().strip()
            if line != f"done {phase}":
                raise SystemExit(f"driver: expected 'done {phase}', got {line!r}")
            seconds = time.monotonic() - began
            a1, e1 = cpu(api.pid), cpu(etcd_pid)

            def per_request(before: tuple[float, float], after: tuple[float, float]) -> Any:
                user, system = after[0] - before[0], after[1] - before[1]
                return {
                    "user": round(user / count * 1e6, 1),
                    "system": round(system / count * 1e6, 1),
                    "total": round((user + system) / count * 1e6, 1),
                }

            result[phase] = {
                "seconds": round(seconds, 2),
                "apiserver_us": per_request(a0, a1),
                "etcd_us": per_request(e0, e1),
            }
            print(
                f"{link} {phase}: apiserver {result[phase]['apiserver_us']['total']} us, "
                f"etcd {result[phase]['etcd_us']['total']} us per request ({seconds:.1f}s)",
                file=sys.stderr,
                flush=True,
            )
        driver.wait(60)
        result["load1_at_end"] = loadavg()
        return result
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()
        api.terminate()
        try:
            api.wait(60)
        except subprocess.TimeoutExpired:
            api.kill()
            api.wait()
        etcd.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per link, phase and process: the median over runs of CPU us per request."""
    out: dict[str, Any] = {}
    for link in dict.fromkeys(r["link"] for r in runs):
        mine = [r for r in runs if r["link"] == link]
        phases: dict[str, Any] = {}
        for phase in opcost.PHASES:
            have = [r[phase] for r in mine if phase in r]
            if not have:
                continue
            phases[phase] = {
                proc: {
                    part: statistics.median(h[proc][part] for h in have)
                    for part in ("user", "system", "total")
                }
                for proc in ("apiserver_us", "etcd_us")
            }
            phases[phase]["both_total_us"] = statistics.median(
                h["apiserver_us"]["total"] + h["etcd_us"]["total"] for h in have
            )
        out[link] = {"runs": len(mine), "phases": phases}
    return {"summary": out, "load1": [r["load1_at_start"] for r in runs]}


def rpc_run(link: str, count: int, inflight: int, *, insecure: bool) -> dict[str, Any]:
    """`--rpc-only`: etcd alone, `count` Range calls of one 1.2 KB value from this process (on
    the apiserver's channel options and credentials), `inflight` at a time: the link's own
    cost per call, without the apiserver's work around it. This process's CPU comes from
    getrusage (microseconds), etcd's from /proc."""
    import asyncio
    import resource

    from aetcd import rpc

    from apiserver.settings import etcd_target
    from apiserver.storage import _CHANNEL_OPTIONS, socket_server_name
    from tinykube.localetcd import EtcdServer
    from tinykube.tls import PLAINTEXT, Credentials

    work = Path(tempfile.mkdtemp(prefix="tinykube-etcdlink-"))
    etcd_tls = None
    credentials = PLAINTEXT
    if not insecure:
        etcd_tls, _, _, _ = opcost._security(work)
    etcd = EtcdServer(str(work / "etcd"), die_with_parent=True, tls=etcd_tls, socket=True)
    etcd.start()
    target = etcd_target(etcd.url if link == "tcp" else etcd.socket_url)
    if etcd_tls is not None:
        from tinykube.pki import PKI

        client = PKI(work / "pki").paths("apiserver-etcd-client")
        credentials = Credentials.from_files(
            ca_file=etcd_tls.trusted_ca_file,
            cert_file=str(client.cert),
            key_file=str(client.key),
            server_name=socket_server_name(target) if target.startswith("unix:") else None,
        )
    assert etcd.process is not None
    etcd_pid = etcd.process.pid

    async def calls() -> dict[str, Any]:
        async with credentials.channel(target, _CHANNEL_OPTIONS) as channel:
            kv = rpc.KVStub(channel)
            await kv.Put(rpc.PutRequest(key=b"/bench/k", value=os.urandom(1200)))
            request = rpc.RangeRequest(key=b"/bench/k")

            async def send(n: int) -> None:
                left = iter(range(n))  # shared by the workers: n calls in all

                async def worker() -> None:
                    for _ in left:
                        await kv.Range(request, timeout=30)

                await asyncio.gather(*(worker() for _ in range(inflight)))

            await send(min(count, 500))  # warm-up
            mine0 = resource.getrusage(resource.RUSAGE_SELF)
            e0, began = cpu(etcd_pid), time.monotonic()
            await send(count)
            seconds = time.monotonic() - began
            mine1 = resource.getrusage(resource.RUSAGE_SELF)
            e1 = cpu(etcd_pid)
        return {
            "seconds": round(seconds, 2),
            "client_us": {
                "user": round((mine1.ru_utime - mine0.ru_utime) / count * 1e6, 1),
                "system": round((mine1.ru_stime - mine0.ru_stime) / count * 1e6, 1),
            },
            "etcd_us": {
                "user": round((e1[0] - e0[0]) / count * 1e6, 1),
                "system": round((e1[1] - e0[1]) / count * 1e6, 1),
            },
        }

    try:
        result = asyncio.run(calls())
    finally:
        etcd.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    for part in ("client_us", "etcd_us"):
        result[part]["total"] = round(result[part]["user"] + result[part]["system"], 1)
    print(
        f"{link} range x{inflight}: client {result['client_us']['total']} us, "
        f"etcd {result['etcd_us']['total']} us per call ({result['seconds']}s)",
        file=sys.stderr,
        flush=True,
    )
    return {
        "link": link,
        "mode": "rpc-only",
        "security": "insecure" if insecure else "tls",
        "count": count,
        "inflight": inflight,
        "nproc": os.cpu_count(),
        "load1_at_start": loadavg(),
        **result,
    }


def rpc_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for link in dict.fromkeys(r["link"] for r in runs):
        mine = [r for r in runs if r["link"] == link]
        out[link] = {
            "runs": len(mine),
            **{
                proc: {
                    part: statistics.median(r[proc][part] for r in mine)
                    for part in ("user", "system", "total")
                }
                for proc in ("client_us", "etcd_us")
            },
        }
    return {"summary": out, "load1": [r["load1_at_start"] for r in runs]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--links", default="tcp,socket", help=f"comma-separated, of {','.join(LINKS)}")
    p.add_argument("--runs", type=int, default=5, help="runs per link, interleaved")
    p.add_argument("--count", type=int, default=1000, help="requests per phase")
    p.add_argument("--insecure", action="store_true", help="plaintext everywhere, no authz")
    p.add_argument("--idle-seconds", type=float, default=5.0)
    p.add_argument("--out", type=Path, help="also write the JSON lines here")
    p.add_argument(
        "--rpc-only",
        action="store_true",
        help="no apiserver: this process sends --count etcd Range calls (see rpc_run)",
    )
    p.add_argument("--inflight", type=int, default=1, help="--rpc-only: calls in flight")
    a = p.parse_args()
    links = [x for x in a.links.split(",") if x]
    for link in links:
        if link not in LINKS:
            p.error(f"unknown link {link!r}; one of {', '.join(LINKS)}")
        if link == "socket-plaintext" and a.insecure:
            p.error("socket-plaintext compares with TLS: drop --insecure")
        if link == "socket-plaintext" and a.rpc_only:
            p.error("--rpc-only measures tcp and socket")
    runs: list[dict[str, Any]] = []
    lines: list[str] = []
    for _ in range(a.runs):
        for link in links:
            if a.rpc_only:
                runs.append(rpc_run(link, a.count, a.inflight, insecure=a.insecure))
            else:
                runs.append(
                    one_run(link, a.count, insecure=a.insecure, idle_seconds=a.idle_seconds)
                )
            lines.append(json.dumps(runs[-1]))
            print(lines[-1], flush=True)
            if a.out is not None:
                a.out.write_text("\n".join(lines) + "\n")
    lines.append(json.dumps(rpc_summary(runs) if a.rpc_only else summary(runs)))
    print(lines[-1], flush=True)
    if a.out is not None:
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
