"""Measure the REST API: LIST of many pods (JSON and Table) and watch fan-out to many watchers.

Starts a real etcd and `python -m apiserver` as separate processes (through
`tinykube.launcher.LocalCluster`, nothing else), creates `--pods` pods over gRPC, then from this
process with aiohttp:

- REST LIST of every pod in the namespace, one request at a time: p50/p99 of the time until the
  whole body has arrived, as JSON (`application/json`) and as a Table (kubectl's Accept
  header), beside the gRPC List of the same pods for comparison;
- watch fan-out: W REST watchers (`?watch=1` from the list's resourceVersion) on one namespace,
  then M pod creations; events delivered per second (W x M over the time from the first write
  until the last watcher has read the last event line).

Bodies are read, not parsed (the figure is the server's); watch lines are split and counted.
Each measurement runs `--runs` times (fresh namespaces for the watches, same cluster); the
figure is the median of the runs. Results are printed, written to
bench/results/rest_api-*.json, and the rest_api section of bench/RESULTS.md is replaced.
`python bench/rest_api.py` (or `--quick` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

# bench/ is a folder of scripts, not a package: its helpers import by path.
from api_latency import make_pod, median_of, percentiles
from namespaces import ensure_namespace

from tinykube.client import Client
from tinykube.launcher import LocalCluster

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
BEGIN = "<!-- rest_api:begin -->"
END = "<!-- rest_api:end -->"


@dataclass(frozen=True)
class Config:
    pods: int = 10_000
    lists: int = 20  # LIST requests per run and encoding
    watchers: int = 100
    watch_events: int = 200
    runs: int = 3


async def create_pods(client: Client, namespace: str, count: int) -> None:
    await ensure_namespace(client, namespace)
    names = iter(range(count))

    async def worker() -> None:
        for i in names:
            await client.pods.create(make_pod(f"p-{i:05d}", namespace))

    await asyncio.gather(*(worker() for _ in range(64)))


async def measure_lists(
    http: aiohttp.ClientSession, client: Client, base: str, cfg: Config
) -> dict[str, Any]:
    url = f"{base}/api/v1/namespaces/bench/pods"
    out: dict[str, Any] = {}
    for name, accept in (("json", "application/json"), ("table", TABLE_ACCEPT)):
        samples: list[float] = []
        size = 0
        for _ in range(cfg.lists + 1):
            start = time.perf_counter()
            async with http.get(url, headers={"Accept": accept}) as response:
                body = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"LIST answered {response.status}: {body[:200]!r}")
            samples.append(time.perf_counter() - start)
            size = len(body)
        out[name] = {**percentiles(samples[1:]), "bytes": size}  # the first one warms up
    samples = []
    for _ in range(cfg.lists + 1):
        start = time.perf_counter()
        listed = await client.pods.list("bench")
        samples.append(time.perf_counter() - start)
    out["grpc"] = {**percentiles(samples[1:]), "items": len(listed.items)}
    return out


async def measure_fanout(
    http: aiohttp.ClientSession, client: Client, base: str, run: int, cfg: Config
) -> dict[str, Any]:
    ns = f"fanout-{run}"
    await ensure_namespace(client, ns)
    listed = await client.pods.list(ns)
    rv = listed.metadata.resourceVersion
    url = f"{base}/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}"
    opened = 0
    all_open = asyncio.Event()
    remaining = cfg.watchers
    all_done = asyncio.Event()

    async def watcher() -> None:
        nonlocal opened, remaining
        seen = 0
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as response:
            opened += 1
            if opened == cfg.watchers:
                all_open.set()
            async for line in response.content:
                if b'"ADDED"' in line:
                    seen += 1
                    if seen == cfg.watch_events:
                        remaining -= 1
                        if remaining == 0:
                            all_done.set()
                        return

    tasks = [asyncio.create_task(watcher()) for _ in range(cfg.watchers)]
    await asyncio.wait_for(all_open.wait(), timeout=60)
    started = time.perf_counter()
    for i in range(cfg.watch_events):
        await client.pods.create(make_pod(f"w-{i:05d}", ns))
    await asyncio.wait_for(all_done.wait(), timeout=300)
    finished = time.perf_counter()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    delivered = cfg.watchers * cfg.watch_events
    return {
        "watchers": cfg.watchers,
        "events": cfg.watch_events,
        "seconds": round(finished - started, 3),
        "events_per_second": round(delivered / (finished - started), 1),
    }


async def bench(cluster: LocalCluster, cfg: Config) -> dict[str, Any]:
    base = cluster.rest_url
    list_runs: list[dict[str, Any]] = []
    fanout_runs: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        Client(cluster.api_address, timeout=60.0) as client,
        aiohttp.ClientSession(connector=connector) as http,
    ):
        await client.wait_ready(30)
        await create_pods(client, "bench", cfg.pods)
        for run in range(cfg.runs):
            list_runs.append(await measure_lists(http, client, base, cfg))
            fanout_runs.append(await measure_fanout(http, client, base, run, cfg))
            print(f"run {run + 1}/{cfg.runs} done", file=sys.stderr, flush=True)
    return {
        "list": median_of(list_runs),
        "watch_fanout": median_of(fanout_runs),
        "runs": {"list": list_runs, "watch_fanout": fanout_runs},
    }


def report(result: dict[str, Any], cfg: Config) -> str:
    lst = result["list"]
    fan = result["watch_fanout"]
    lines = [
        f"LIST of {cfg.pods} pods      p50 ms   p99 ms   bytes",
        *(
            f"  {name:<22}{lst[name]['p50_ms']:>8}{lst[name]['p99_ms']:>9}"
            f"{lst[name].get('bytes', ''):>10}"
            for name in ("json", "table", "grpc")
        ),
        f"watch fan-out: {fan['watchers']} REST watchers x {fan['events']} events: "
        f"{fan['events_per_second']} events/s",
    ]
    return "\n".join(lines)


def results_section(result: dict[str, Any], cfg: Config, json_name: str) -> str:
    lst = result["list"]
    fan = result["watch_fanout"]
    env = result["environment"]
    rows = "\n".join(
        f"| {label} | {lst[key]['p50_ms']} | {lst[key]['p99_ms']} |"
        for key, label in (
            ("json", "REST, JSON"),
            ("table", "REST, Table (kubectl get)"),
            ("grpc", "gRPC List (protobuf)"),
        )
    )
    return f"""{BEGIN}
## REST API: LIST and watch fan-out (`bench/rest_api.py`)

apiserver and etcd as processes, the client (aiohttp) in the benchmark process; {env["cores"]}
cores, {env["date"]}; medians of {cfg.runs} runs.

LIST of {cfg.pods:,} pods from the watch cache, one request at a time ({cfg.lists} per run),
until the whole body has arrived:

| encoding | p50 ms | p99 ms |
|---|---:|---:|
{rows}

Watch fan-out: {fan["watchers"]} REST watchers, {fan["events"]} pod creations:
**{fan["events_per_second"]:,} events/s** delivered (each event's JSON encoded once and
shared by every watcher).

Raw data: `bench/results/{json_name}`.
{END}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--runs", type=int, default=Config.runs)
    parser.add_argument("--no-results-md", action="store_true")
    args = parser.parse_args(argv)
    cfg = Config(runs=args.runs)
    if args.quick:
        cfg = Config(pods=300, lists=5, watchers=10, watch_events=20, runs=1)
    with (
        tempfile.TemporaryDirectory(prefix="tinykube-rest-bench-") as tmp,
        # plaintext, as before TLS: this measures the API itself (bench/harness.py
        # compares TLS with --insecure)
        LocalCluster(tmp, insecure=True, scheduler=False, controller=False, kubelets=()) as cluster,
    ):
        result = asyncio.run(bench(cluster, cfg))
    result["config"] = asdict(cfg)
    result["environment"] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(report(result, cfg))
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    name = f"rest_api-{stamp}.json"
    if not args.quick:
        RESULTS_DIR.mkdir(exist_ok=True)
        (RESULTS_DIR / name).write_text(json.dumps(result, indent=2) + "\n")
        if not args.no_results_md:
            path = Path(__file__).resolve().parent / "RESULTS.md"
            text = path.read_text()
            section = results_section(result, cfg, name)
            if BEGIN in text and END in text:
                head, rest = text.split(BEGIN, 1)
                text = head + section + rest.split(END, 1)[1]
            else:
                text = text.rstrip("\n") + "\n\n" + section + "\n"
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
