"""Lease renewals while another client floods the apiserver with Creates at full speed.

Starts a real etcd and `python -m apiserver` as separate processes (tinykube.launcher's
LocalCluster, nothing else). A flooder process keeps `--flood` Creates in flight and sends the
next one the moment an answer arrives. Meanwhile this process renews `--leases` node Leases in
kube-node-lease, each every `--interval` seconds, as the kubelet does (an Update carrying the
resourceVersion, through tinykube's client), and times every renewal.

Flooders (`--flooders`, comma-separated):
- `hostile`: the raw gRPC stubs on one channel, re-sending at once whatever the answer (no
  back-off);
- `client`: tinykube's own Client on one channel, which waits out the retry hint of a refusal
  (tinykube/retry.py `retry_throttled`) within its 30 s deadline;
- `rest`: aiohttp POSTs over `--flood` HTTP/1.1 connections (one request at a time on each),
  re-sending at once on 429 as the hostile one does.

Each flooder is measured against the apiserver with its in-flight limit at the defaults
(400/200) and, with `--modes limit_default,limit_off`, with it off (`--max-requests-inflight 0
--max-mutating-requests-inflight 0`, as before the limit). The figures: renewal p50/p99/max
and renewals that failed as the client saw them, the server-side mean of a renewal (from the
apiserver's own histogram: what is not in it was spent before the handler ran, mostly in
gRPC's accept queue), and the flood's answers per second by code; a CANCELLED answer would be
a call gRPC core dropped without the handler seeing it. The median of `--runs` runs is
printed and, unless --quick or --no-save, written to bench/results/overload-*.json.

    python bench/overload.py [--runs 3] [--duration 30] [--flood 1000] [--leases 50]
        [--flooders hostile,client] [--modes limit_default]
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

import aiohttp
import grpc
from api_latency import RESULTS_DIR, make_pod, median_of, percentiles
from google.protobuf import json_format
from harness import git_commit
from namespaces import ensure_namespace
from prometheus_client.parser import text_string_to_metric_families

from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.launcher import LocalCluster
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import lease_pb2, meta_pb2, pod_pb2, pod_pb2_grpc

NODE_LEASES = "kube-node-lease"
FLOOD_NAMESPACE = "flood"
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


FLOODERS = ("hostile", "client", "rest")


def flood(
    kind: str, address: str, rest_url: str, concurrency: int, seconds: float, out: Any
) -> None:
    """The flooder process: `concurrency` Creates in flight for `seconds`; puts the codes."""
    import uvloop

    async def main() -> dict[str, int]:
        codes: Counter[str] = Counter()
        stop = time.monotonic() + seconds
        serial = 0

        def next_pod(k: int) -> pod_pb2.Pod:
            nonlocal serial
            serial += 1
            return make_pod(f"f-{k}-{serial}", FLOOD_NAMESPACE)

        if kind == "hostile":
            channel = grpc.aio.insecure_channel(address, options=list(CHANNEL_OPTIONS))
            stub = pod_pb2_grpc.PodsStub(channel)

            async def worker(k: int) -> None:
                while time.monotonic() < stop:
                    request = pod_pb2.CreatePodRequest(pod=next_pod(k))
                    try:
                        await stub.Create(request, timeout=30)
                        codes["OK"] += 1
                    except grpc.aio.AioRpcError as exc:
                        codes[exc.code().name] += 1

            await asyncio.gather(*(worker(k) for k in range(concurrency)))
            await channel.close()
        elif kind == "client":
            async with Client(address, timeout=30.0) as client:

                async def worker(k: int) -> None:
                    while time.monotonic() < stop:
                        try:
                            await client.pods.create(next_pod(k))
                            codes["OK"] += 1
                        except TinykubeError as exc:
                            codes[exc.code.name] += 1

                await asyncio.gather(*(worker(k) for k in range(concurrency)))
        else:
            url = f"{rest_url}/api/v1/namespaces/{FLOOD_NAMESPACE}/pods"
            connector = aiohttp.TCPConnector(limit=concurrency)
            # A connect lost to a full listen backlog is retried by the kernel for minutes.
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

                async def worker(k: int) -> None:
                    while time.monotonic() < stop:
                        body = json_format.MessageToDict(next_pod(k))
                        try:
                            async with session.post(url, json=body) as resp:
                                await resp.read()
                                codes[f"HTTP {resp.status}"] += 1
                        except (aiohttp.ClientError, TimeoutError) as exc:
                            codes[type(exc).__name__] += 1

                await asyncio.gather(*(worker(k) for k in range(concurrency)))
        return dict(codes)

    out.put(uvloop.run(main()))


async def server_side_renewal_ms(rest_url: str) -> float | None:
    """The mean of Leases/Update in the apiserver's own request histogram, in ms."""
    async with aiohttp.ClientSession() as session, session.get(f"{rest_url}/metrics") as resp:
        text = await resp.text()
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("method") != "Leases/Update":
                continue
            if sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    return round(total / count * 1000.0, 3) if count else None


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


async def _create_namespace(address: str, name: str) -> None:
    async with Client(address, timeout=10.0) as client:
        await ensure_namespace(client, name)


def measure(flooder: str, mode: str, cfg: Config) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tinykube-bench-") as work_dir:
        # plaintext, as before TLS: this measures the API itself (bench/harness.py
        # compares TLS with --insecure)
        cluster = LocalCluster(
            work_dir,
            insecure=True,
            scheduler=False,
            controller=False,
            kubelets=(),
            extra_args={"apiserver": MODES[mode]},
        )
        with cluster:
            asyncio.run(_create_namespace(cluster.api_address, FLOOD_NAMESPACE))
            ctx = multiprocessing.get_context("spawn")
            out = ctx.Queue()
            args = (flooder, cluster.api_address, cluster.rest_url, cfg.flood)
            process = ctx.Process(target=flood, args=(*args, cfg.duration + 2.0, out))
            process.start()
            try:
                time.sleep(2.0)  # let the flood reach full speed first
                renewals = asyncio.run(renew_leases(cluster.api_address, cfg, cfg.duration))
                renewals["server_side_mean_ms"] = asyncio.run(
                    server_side_renewal_ms(cluster.rest_url)
                )
                codes = out.get(timeout=cfg.duration + 120)
            finally:
                process.join(timeout=60)
                if process.is_alive():
                    process.kill()
    seconds = cfg.duration + 2.0
    return {
        "lease_renewal": renewals,
        "flood_answers_per_second": {c: round(n / seconds, 1) for c, n in sorted(codes.items())},
        "flood_cancelled": codes.get("CANCELLED", 0),
    }


def _same_codes(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs with every answer code in each (0 where a run had none), for median_of."""
    codes = {c for r in runs for c in r["flood_answers_per_second"]}
    for r in runs:
        answers = r["flood_answers_per_second"]
        r["flood_answers_per_second"] = {c: answers.get(c, 0.0) for c in sorted(codes)}
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small numbers, one run (smoke)")
    parser.add_argument("--duration", type=float, default=Config.duration)
    parser.add_argument("--flood", type=int, default=Config.flood)
    parser.add_argument("--leases", type=int, default=Config.leases)
    parser.add_argument("--interval", type=float, default=Config.interval)
    parser.add_argument("--runs", type=int, default=Config.runs)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    parser.add_argument("--flooders", default="hostile,client", help="comma-separated")
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parser.parse_args(argv)
    cfg = Config(args.duration, args.flood, args.leases, args.interval, args.runs)
    if args.quick:
        cfg = Config(duration=5.0, flood=200, leases=10, interval=0.5, runs=1)
    modes = args.modes.split(",")
    flooders = args.flooders.split(",")
    for name in flooders:
        if name not in FLOODERS:
            parser.error(f"--flooders: unknown flooder {name!r} (one of {', '.join(FLOODERS)})")
    load_before = os.getloadavg()[0]
    cases = [f"{f}/{m}" for f in flooders for m in modes]
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    for run in range(cfg.runs):
        for case in cases:
            flooder, mode = case.split("/")
            result = measure(flooder, mode, cfg)
            runs[case].append(result)
            r = result["lease_renewal"]
            print(
                f"run {run + 1}/{cfg.runs} {case}: renewal p50 {r.get('p50_ms')} ms, "
                f"p99 {r.get('p99_ms')} ms, max {r.get('max_ms')} ms, failed {r['failed']}, "
                f"server-side mean {r['server_side_mean_ms']} ms; "
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
        "median": {c: median_of(_same_codes(rs)) for c, rs in runs.items()},
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
