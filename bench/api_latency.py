"""Measure the apiserver: Create/Get latency (sequential and concurrent) and watch fan-out.

Starts a real etcd and `python -m apiserver` as separate processes (through
`tinykube.launcher.LocalCluster`, with nothing else), then from this process, with the typed
client:

- Create and Get latency, p50/p99, one request at a time and with 16 requests in flight;
- watch fan-out: W watchers on one namespace, then M pod creations; the figure is events
  delivered per second (W x M events over the time from the first write until the last watcher
  has seen the last event), plus the time for one event to reach every watcher.

Each measurement runs `--runs` times (fresh namespaces, same cluster); the reported figure is
the median of the runs. Results are printed, written to bench/results/api_latency-*.json (and
a .png plot), and the api_latency section of bench/RESULTS.md is replaced with them.
Run `python bench/api_latency.py` (or `--quick` for a smoke run). The watchers share this
process and one HTTP/2 channel, so the fan-out figure includes the client's own decoding cost.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

# bench/ is a folder of scripts, not a package: its helpers import by path.
from namespaces import ensure_namespace

from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.v1 import pod_pb2

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Config:
    requests: int = 1000  # per latency measurement
    concurrency: int = 16
    watchers: tuple[int, ...] = (100, 1000)
    watch_events: int = 200
    runs: int = 3


def make_pod(name: str, namespace: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = name
    pod.metadata.namespace = namespace
    pod.metadata.labels["app"] = "bench"
    container = pod.spec.containers.add(name="c", image="busybox")
    container.command.extend(["sleep", "3600"])
    container.resources.requests["cpu"] = "100m"
    container.resources.requests["memory"] = "64Mi"
    pod.spec.schedulerName = "bench"  # no scheduler runs; keep it honest anyway
    return pod


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p99/mean in milliseconds."""
    ms = np.array(samples) * 1000.0
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "mean_ms": round(float(ms.mean()), 3),
    }


async def timed_calls(
    calls: Sequence[Callable[[], Awaitable[Any]]], concurrency: int
) -> tuple[list[float], float]:
    """Run the calls with `concurrency` in flight; (latency of each, wall time of all)."""
    latencies: list[float] = []
    queue = iter(calls)

    async def worker() -> None:
        for call in queue:
            start = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - start)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


async def measure_latency(client: Client, run: int, cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, concurrency in (
        ("sequential", 1),
        (f"concurrency_{cfg.concurrency}", cfg.concurrency),
    ):
        ns = f"bench-{run}-{concurrency}"
        await ensure_namespace(client, ns)
        pods = [make_pod(f"p-{i:05d}", ns) for i in range(cfg.requests)]
        # Warm the connection and the server's code paths outside the measurement.
        await client.pods.create(make_pod("warm-up", ns))
        await client.pods.get("warm-up", ns)
        creates = [functools.partial(client.pods.create, p) for p in pods]
        latencies, wall = await timed_calls(creates, concurrency)
        out[f"create_{mode}"] = {**percentiles(latencies), "per_second": round(len(pods) / wall, 1)}
        gets = [functools.partial(client.pods.get, p.metadata.name, ns) for p in pods]
        latencies, wall = await timed_calls(gets, concurrency)
        out[f"get_{mode}"] = {**percentiles(latencies), "per_second": round(len(pods) / wall, 1)}
    return out


async def measure_fanout(client: Client, run: int, watchers: int, cfg: Config) -> dict[str, Any]:
    ns = f"fanout-{run}-{watchers}"
    await ensure_namespace(client, ns)
    listed = await client.pods.list(ns)
    rv = listed.metadata.resourceVersion
    received = [0] * watchers
    first_seen: list[list[float]] = [[] for _ in range(watchers)]
    all_done = asyncio.Event()
    remaining = watchers

    async def watcher(i: int) -> None:
        nonlocal remaining
        async for event in client.pods.watch(ns, resource_version=rv):
            if event.type != "ADDED":
                continue
            received[i] += 1
            if received[i] == 1:
                first_seen[i].append(time.perf_counter())
            if received[i] == cfg.watch_events:
                remaining -= 1
                if remaining == 0:
                    all_done.set()
                return

    tasks = [asyncio.create_task(watcher(i)) for i in range(watchers)]
    # Let every watch stream open before writing (they start from `rv`, so nothing is lost
    # either way; this keeps stream set-up out of the delivery figure).
    await asyncio.sleep(1.0)
    started = time.perf_counter()
    for i in range(cfg.watch_events):
        await client.pods.create(make_pod(f"w-{i:05d}", ns))
    writes_done = time.perf_counter()
    await asyncio.wait_for(all_done.wait(), timeout=300)
    finished = time.perf_counter()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    delivered = watchers * cfg.watch_events
    first_event_spread = max(t[0] for t in first_seen) - started
    return {
        "watchers": watchers,
        "events": cfg.watch_events,
        "delivered": delivered,
        "seconds": round(finished - started, 3),
        "writes_seconds": round(writes_done - started, 3),
        "events_per_second": round(delivered / (finished - started), 1),
        "first_event_to_all_watchers_ms": round(first_event_spread * 1000.0, 1),
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-key median over runs (numbers), recursing into nested dicts."""
    merged: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            merged[key] = median_of([r[key] for r in runs])
        elif all(r[key] == value for r in runs):
            merged[key] = value  # a setting, not a measurement
        elif isinstance(value, int | float):
            merged[key] = round(statistics.median(r[key] for r in runs), 3)
        else:
            merged[key] = value
    return merged


async def bench(address: str, cfg: Config) -> dict[str, Any]:
    latency_runs = []
    fanout_runs = []
    async with Client(address, timeout=30.0) as client:
        await client.wait_ready(30)
        for run in range(cfg.runs):
            latency_runs.append(await measure_latency(client, run, cfg))
            fanout_runs.append(
                {f"watchers_{n}": await measure_fanout(client, run, n, cfg) for n in cfg.watchers}
            )
            print(f"run {run + 1}/{cfg.runs} done", file=sys.stderr, flush=True)
    return {
        "latency": median_of(latency_runs),
        "watch_fanout": median_of(fanout_runs),
        "runs": {"latency": latency_runs, "watch_fanout": fanout_runs},
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"{'operation':<28}{'p50 ms':>10}{'p99 ms':>10}{'ops/s':>10}",
    ]
    for name, figures in result["latency"].items():
        lines.append(
            f"{name:<28}{figures['p50_ms']:>10.2f}{figures['p99_ms']:>10.2f}"
            f"{figures['per_second']:>10.0f}"
        )
    for fan in result["watch_fanout"].values():
        lines.append(
            f"watch fan-out: {fan['watchers']} watchers x {fan['events']} events: "
            f"{fan['events_per_second']:.0f} events delivered/s "
            f"(first event at all watchers after {fan['first_event_to_all_watchers_ms']:.0f} ms)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small numbers, one run (smoke)")
    parser.add_argument("--requests", type=int, default=Config.requests)
    parser.add_argument("--concurrency", type=int, default=Config.concurrency)
    parser.add_argument(
        "--watchers",
        default=",".join(map(str, Config.watchers)),
        help="watcher counts to measure fan-out with, comma-separated (default 100,1000)",
    )
    parser.add_argument("--watch-events", type=int, default=Config.watch_events)
    parser.add_argument("--runs", type=int, default=Config.runs)
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("RESULTS.md")),
        help="markdown file whose api_latency section is replaced",
    )
    args = parser.parse_args(argv)
    watchers = tuple(int(n) for n in args.watchers.split(","))
    cfg = Config(args.requests, args.concurrency, watchers, args.watch_events, args.runs)
    if args.quick:
        cfg = Config(
            requests=50, concurrency=cfg.concurrency, watchers=(10,), watch_events=20, runs=1
        )

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tinykube-bench-") as work_dir:
        # plaintext, as before TLS: this measures the API itself (bench/harness.py
        # compares TLS with --insecure)
        cluster = LocalCluster(
            work_dir, insecure=True, scheduler=False, controller=False, kubelets=()
        )
        with cluster:
            result = asyncio.run(bench(cluster.api_address, cfg))
    result = {
        "benchmark": "api_latency",
        "config": asdict(cfg),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            # The 1-minute load average before and after: other work on the machine shows here.
            "loadavg_1m_before": round(load_before, 2),
            "loadavg_1m_after": round(os.getloadavg()[0], 2),
        },
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **result,
    }
    print(report(result))
    if not args.no_save and not args.quick:
        RESULTS_DIR.mkdir(exist_ok=True)
        stem = RESULTS_DIR / f"api_latency-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        plot(result, stem.with_suffix(".png"))
        update_results_md(Path(args.results), result, stem.with_suffix(".json").name)
        print(f"wrote {stem}.json, {stem}.png and the api_latency section of {args.results}")
    return 0


def plot(result: dict[str, Any], path: Path) -> None:
    """Latency bars (p50 and p99 per operation) and the fan-out rate, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["latency"])
    p50 = [result["latency"][n]["p50_ms"] for n in names]
    p99 = [result["latency"][n]["p99_ms"] for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=[3, 1])
    x = np.arange(len(names))
    left.bar(x - 0.2, p50, 0.4, label="p50")
    left.bar(x + 0.2, p99, 0.4, label="p99")
    left.set_xticks(x, [n.replace("_", "\n", 1) for n in names], fontsize=8)
    left.set_ylabel("latency (ms)")
    left.set_title("apiserver request latency (median of runs)")
    left.legend()
    fans = list(result["watch_fanout"].values())
    right.bar(range(len(fans)), [f["events_per_second"] for f in fans], 0.5, color="tab:green")
    right.set_xticks(
        range(len(fans)),
        [f"{f['watchers']} watchers\n{f['events']} events" for f in fans],
        fontsize=8,
    )
    right.set_ylabel("events delivered / s")
    right.set_title("watch fan-out")
    fig.suptitle(f"tinykube api_latency, nproc={result['machine']['nproc']}, {result['time']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


BEGIN = "<!-- api_latency:begin -->"
END = "<!-- api_latency:end -->"


def results_section(result: dict[str, Any], json_name: str) -> str:
    cfg, machine = result["config"], result["machine"]
    rows = [
        "| operation | p50 ms | p99 ms | requests/s |",
        "|---|---:|---:|---:|",
    ]
    for name, f in result["latency"].items():
        rows.append(f"| {name} | {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | {f['per_second']:.0f} |")
    fan_rows = [
        "| watchers | events written | events delivered/s | delivery time s | "
        "first event at all watchers ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for f in result["watch_fanout"].values():
        fan_rows.append(
            f"| {f['watchers']} | {f['events']} | **{f['events_per_second']:.0f}** | "
            f"{f['seconds']:.2f} | {f['first_event_to_all_watchers_ms']:.0f} |"
        )
    return "\n".join(
        [
            BEGIN,
            "## apiserver: request latency and watch fan-out (`bench/api_latency.py`)",
            "",
            f"Measured {result['time']} on a machine with nproc={machine['nproc']} "
            f"(Python {machine['python']}), shared with other work (1-minute load average "
            f"{machine['loadavg_1m_before']} before, {machine['loadavg_1m_after']} after); "
            "median of "
            f"{cfg['runs']} runs. etcd and the apiserver are separate processes; the client "
            f"is tinykube's typed async client. {cfg['requests']} requests per figure; "
            f"concurrency {cfg['concurrency']} means that many requests in flight on one channel. "
            f"Raw data: `bench/results/{json_name}` (and a PNG next to it).",
            "",
            *rows,
            "",
            "Watch fan-out: W watchers on one namespace (one etcd watch in the apiserver, fanned "
            "out by its watch cache), then pod creations written one after another; events "
            "delivered per second = W x events / time from the first write until the last "
            "watcher saw the last event. The watchers run in the benchmark process on one "
            "channel, so the figure includes the client's own decoding.",
            "",
            *fan_rows,
            END,
        ]
    )


def update_results_md(path: Path, result: dict[str, Any], json_name: str) -> None:
    """Replace this benchmark's section of RESULTS.md (between markers), keeping the rest."""
    section = results_section(result, json_name)
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
