"""The apiserver's memory per open write stream, and where it goes.

    python bench/streammem.py [--streams 400] [--frames 12] [--out-dir DIR] [--label NAME]

Session 13 measured about 28 KiB of apiserver RSS per open write stream (two per hollow node:
its Lease stream and its pod status stream). This starts etcd and one apiserver (TLS,
Node,RBAC: `LocalCluster` without scheduler, controller manager or kubelets), creates
`--streams` Leases, and opens one Leases/UpdateStream per Lease from one client over one
connection (as a process of hollow nodes does: `leases.pipelined()` per node), each renewing
its Lease once, so every stream is open and idle, as a kubelet's is between renewals. Before
and after, the apiserver writes a memory report (tinykube/memreport.py: RSS, glibc's bytes in
use, Python's blocks, live objects by type, and tracemalloc's bytes by line, traced from just
before the streams opened). Output: the per-stream differences, the growth by line and by type,
as JSON in `--out-dir` and a summary on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.memreport import ENV, TRACE_ENV
from tinykube.v1 import lease_pb2

NAMESPACE = "kube-node-lease"


def lease(name: str) -> lease_pb2.Lease:
    out = lease_pb2.Lease(apiVersion="coordination.k8s.io/v1", kind="Lease")
    out.metadata.name, out.metadata.namespace = name, NAMESPACE
    out.spec.holderIdentity = name
    out.spec.leaseDurationSeconds = 40
    return out


def _read_when_written(path: str) -> dict[str, Any]:
    while not os.path.exists(path):  # (memreport renames it into place when complete)
        time.sleep(0.1)
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    return data


async def report(pid: int, base: str, n: int) -> dict[str, Any]:
    """Ask the apiserver for its `n`-th memory report (SIGUSR2) and read it."""
    os.kill(pid, signal.SIGUSR2)
    return await asyncio.to_thread(_read_when_written, f"{base}.{pid}.{n}.json")


async def renew_each(views: list[Any], leases: list[lease_pb2.Lease]) -> list[lease_pb2.Lease]:
    out = []
    for view, current in zip(views, leases, strict=True):
        current.spec.leaseTransitions += 1
        out.append(await view.update(current))
    return out


async def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    base = str(work / "mem")
    cl = LocalCluster(
        work / "cluster",
        scheduler=False,
        controller=False,
        kubelets=(),
        env={ENV: base, TRACE_ENV: str(args.frames)},
    )
    await asyncio.to_thread(cl.start)
    try:
        proc = cl.components["apiserver"].process
        assert proc is not None
        pid = proc.pid
        async with Client.from_kubeconfig(str(cl.kubeconfig)) as client:
            names = [f"s{i:05d}" for i in range(args.streams + 1)]
            leases = [await client.leases.create(lease(n)) for n in names]
            # One stream first: what the method's first stream allocates once is not per stream.
            warm = client.leases.pipelined()
            leases[0] = await warm.update(leases[0])
            if args.frames > 0:
                os.kill(pid, signal.SIGUSR1)  # tracemalloc from here on
            await asyncio.sleep(0.5)
            before = await report(pid, base, 1)
            views = [client.leases.pipelined() for _ in names[1:]]
            leases[1:] = await renew_each(views, leases[1:])
            await asyncio.sleep(1.0)
            after = await report(pid, base, 2)
            opened = sum(s.opened for s in client._write_streams)
    finally:
        await asyncio.to_thread(cl.stop)
    return summarize(before, after, args.streams, opened)


def summarize(before: dict[str, Any], after: dict[str, Any], n: int, opened: int) -> dict[str, Any]:
    def per(a: float, b: float) -> float:
        return round((b - a) / n, 1)

    types_before = dict(before["objects"])
    types = sorted(
        ((t, c - types_before.get(t, 0)) for t, c in after["objects"]),
        key=lambda tc: -tc[1],
    )
    traced = after.get("tracemalloc", {})
    return {
        "streams": n,
        "streams_opened_by_client": opened,
        "bytes_per_stream": {
            "rss": per(before["proc"]["VmRSS"], after["proc"]["VmRSS"]),
            "malloc_in_use": per(before["malloc"]["in_use"], after["malloc"]["in_use"]),
            "python_blocks": per(before["python_blocks"], after["python_blocks"]),
            "tracemalloc": round(traced.get("total", 0) / n, 1),
        },
        "objects_per_stream": [(t, round(c / n, 2)) for t, c in types if c >= n // 2][:25],
        "traced_by_line_per_stream": [
            (row["where"], round(row["bytes"] / n, 1), round(row["count"] / n, 2))
            for row in traced.get("by_line", [])[:30]
        ],
        "traced_by_file_per_stream": [
            (row["where"], round(row["bytes"] / n, 1)) for row in traced.get("by_file", [])[:15]
        ],
        "load_average_1m": os.getloadavg()[0],
        "nproc": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=400)
    p.add_argument(
        "--frames",
        type=int,
        default=12,
        help="tracemalloc frames per allocation (0: no tracing; its own bookkeeping, in glibc's "
        "heap, then stays out of the RSS and malloc figures)",
    )
    p.add_argument("--out-dir", default="bench/results")
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="streammem-"))
    try:
        result = asyncio.run(run(args, work))
    finally:
        for leftover in glob.glob(str(work / "mem.*")):
            os.remove(leftover)
        shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = out / f"streammem-{args.label + '-' if args.label else ''}{args.streams}-{stamp}.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("streams", "bytes_per_stream")}, indent=1))
    for where, size, count in result["traced_by_line_per_stream"][:15]:
        print(f"{size:9.1f} B {count:6.2f}x  {where}")
    for t, c in result["objects_per_stream"]:
        print(f"{c:6.2f} {t}")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
