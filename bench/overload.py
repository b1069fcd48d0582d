"""Lease renewals while another client floods the apiserver with Creates at full speed.

Starts a real etcd and `python -m apiserver` as separate processes (tinykube.launcher's
LocalCluster, nothing else). A flooder process keeps `--flood` Creates in flight on one channel
with the raw gRPC stubs and sends the next one the moment an answer arrives, refused or not (a
hostile client: no back-off). Meanwhile this process renews `--leases` node Leases in
kube-node-lease, each every `--interval` seconds, as the kubelet does (an Update carrying the
resourceVersion, through tinykube's client), and times every renewal.

Each run measures the apiserver with its in-flight limit at the defaults (400/200) and with it
off (`--max-requests-inflight 0 --max-mutating-requests-inflight 0`, as before the limit). The
figures: renewal p50/p99/max, renewals that failed, and the flood's answers per second by code;
a CANCELLED answer would be a call gRPC core dropped without the handler seeing it. The median
of `--runs` runs is printed and, unless --quick or --no-save, written to
bench/results/overload-*.json.

    python -m bench.overload [--runs 3] [--duration 30] [--flood 1000] [--leases 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import grpc
from api_latency import RESULTS_DIR, make_pod, median_of, percentiles
from harness import git_commit

from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.launcher import LocalCluster
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import lease_pb2, meta_pb2, pod_pb2, pod_pb2_grpc

NODE_LEASES = "kube-node-lease"
MODES = {
    "limit_default": [],
    "limit_off": ["--max-requests-inflight", "0", "--max-mutating-requests-inflight", "0"],
}


@dataclass(frozen=True)
class Config:
    duration: float = 30.0  # seconds of flood per measurement
    flood: int = 1000  # Creates in flight
    leases: int = 50
    interval: float = 1.0  # seconds between renewals of one Lease
    runs: int = 3


def flood(address: str, concurrency: int, seconds: float, out: Any) -> None:
    """The flooder process: `concurrency` Creates in flight for `seconds`; puts the codes."""
    import uvloop

    async def main() -> dict[str, int]:
        codes: Counter[str] = Counter()
        channel = grpc.aio.insecure_channel(address, options=list(CHANNEL_OPTIONS))
        stub = pod_pb2_grpc.PodsStub(channel)
        stop = time.monotonic() + seconds
        serial = 0

        async def worker(k: int) -> None:
            nonlocal serial
            while time.monotonic() < stop:
                serial += 1
                request = pod_pb2.CreatePodRequest(pod=make_pod(f"f-{k}-{serial}", "flood"))
                try:
                    await stub.Create(request, timeout=30)
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as exc:
                    codes[exc.code().name] += 1

        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        await channel.close()
        return dict(codes)

    out.put(uvloop.run(main()))


async def renew_leases(address: str, cfg: Config, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    async with Client(address, timeout=10.0) as client:
        leases = []
        for k in range(cfg.leases):
            lease = lease_pb2.Lease(
                metadata=meta_pb2.ObjectMeta(name=f"node-{k}", namespace=NODE_LEASES)
            )
            lease.spec.holderIdentity = f"node-{k}"
            lease.spec.leaseDurationSeconds = 40
            try:
                leases.append(await client.leases.create(lease))
            except TinykubeError:
                leases.append(await client.leases.get(f"node-{k}", NODE_LEASES))
        stop = time.monotonic() + seconds

        async def renewer(k: int) -> None:
            lease = leases[k]
            # Spread the renewals over the interval, as kubelets' are.
            await asyncio.sleep(cfg.interval * k / cfg.leases)
            while time.monotonic() < stop:
                started = time.perf_counter()
                lease.spec.renewTime.GetCurrentTime()
                try:
                    lease = await client.leases.update(lease)
                    latencies.append(time.perf_counter() - started)
                except TinykubeError as exc:
                    failures[exc.code.name] += 1
                    lease = await client.leases.get(lease.metadata.name, NODE_LEASES)
                await asyncio.sleep(max(0.0, cfg.interval - (time.perf_counter() - started)))

        await asyncio.gather(*(renewer(k) for k in range(cfg.leases)))
    figures: dict[str, Any] = {"renewals": len(latencies), "failed": sum(failures.values())}
    if latencies:
        figures.update(percentiles(latencies))
        figures["max_ms"] = round(max(latencies) * 1000.0, 3)
    figures["failures"] = dict(failures)
    return figures


def measure(mode: str, cfg: Config) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tinykube-bench-") as work_dir:
        cluster = LocalCluster(
            work_dir,
            scheduler=False,
            controller=False,
            kubelets=(),
            extra_args={"apiserver": MODES[mode]},
        )
        with cluster:
            ctx = multiprocessing.get_context("spawn")
            out = ctx.Queue()
            flooder = ctx.Process(
                target=flood, args=(cluster.api_address, cfg.flood, cfg.duration + 2.0, out)
            )
            flooder.start()
            try:
                time.sleep(2.0)  # let the flood reach full speed first
                renewals = asyncio.run(renew_leases(cluster.api_address, cfg, cfg.duration))
                codes = out.get(timeout=cfg.duration + 120)
            finally:
                flooder.join(timeout=60)
                if flooder.is_alive():
                    flooder.kill()
    seconds = cfg.duration + 2.0
    return {
        "lease_renewal": renewals,
        "flood_answers_per_second": {c: round(n / seconds, 1) for c, n in sorted(codes.items())},
        "flood_cancelled": codes.get("CANCELLED", 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small numbers, one run (smoke)")
    parser.add_argument("--duration", type=float, default=Config.duration)
    parser.add_argument("--flood", type=int, default=Config.flood)
    parser.add_argument("--leases", type=int, default=Config.leases)
    parser.add_argument("--interval", type=float, default=Config.interval)
    parser.add_argument("--runs", type=int, default=Config.runs)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parser.parse_args(argv)
    cfg = Config(args.duration, args.flood, args.leases, args.interval, args.runs)
    if args.quick:
        cfg = Config(duration=5.0, flood=200, leases=10, interval=0.5, runs=1)
    modes = args.modes.split(",")
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for run in range(cfg.runs):
        for mode in modes:
            result = measure(mode, cfg)
            runs[mode].append(result)
            r = result["lease_renewal"]
            print(
                f"run {run + 1}/{cfg.runs} {mode}: renewal p50 {r.get('p50_ms')} ms, "
                f"p99 {r.get('p99_ms')} ms, max {r.get('max_ms')} ms, failed {r['failed']}; "
                f"flood/s {result['flood_answers_per_second']}",
                file=sys.stderr,
                flush=True,
            )
    result = {
        "benchmark": "overload",
        "commit": git_commit(),
        "config": asdict(cfg),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_1m_before": round(load_before, 2),
            "loadavg_1m_after": round(os.getloadavg()[0], 2),
        },
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "median": {m: median_of(rs) for m, rs in runs.items()},
        "runs": runs,
    }
    print(json.dumps(result["median"], indent=2))
    if not args.no_save and not args.quick:
        RESULTS_DIR.mkdir(exist_ok=True)
        path = RESULTS_DIR / f"overload-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
