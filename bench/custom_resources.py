"""Custom objects against ConfigMaps: create throughput and latency, watch fan-out, CPU per create.

Starts a real etcd and `python -m apiserver` as separate processes (through
`tinykube.launcher.LocalCluster`, TLS on as by default; no scheduler, controller manager or
kubelets), applies one CustomResourceDefinition with a structural schema (nested objects, a
list-map, a pattern, an enum, defaults, one `x-kubernetes-validations` CEL rule, the status
subresource) and waits until it is Established and served. Then, from this process over the REST
API (JSON, aiohttp, the admin's client certificate), interleaved kind by kind in `--rounds`
rounds (the kind that goes first alternates):

- creates: `--objects` objects of each kind in all (split over the rounds), `--clients`
  concurrent clients each POSTing one object at a time; objects per second over the phase's
  wall time and each POST's latency (p50/p99). A ConfigMap's body is padded to the custom
  object's JSON size, so both carry the same bytes;
- apiserver CPU seconds (utime+stime from /proc) over each create phase, per created object
  (etcd's beside it);
- watch fan-out: `--watchers` REST watchers (`?watch=1` from a LIST's resourceVersion) on a
  fresh namespace, then `--writes` creates one after another; for each, the time from the
  POST being sent until the last watcher has read its ADDED line (p50/p99).

The client runs on the same machine and competes for its cores: on a shared machine read the
figures as a comparison of the two kinds, not as absolute capacity. Results are printed as a
table and written to bench/results/session9/custom_resources/custom_resources-*.json.
`nice -n 5 python bench/custom_resources.py` (under a minute on 2 cores), `--quick` for a
smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

# bench/ is a folder of scripts, not a package: its helpers import by path.
from api_latency import percentiles
from sysmetrics import load_average, proc_sample

from tinykube.launcher import LocalCluster

RESULTS_DIR = Path(__file__).resolve().parent / "results" / "session9" / "custom_resources"
GROUP = "bench.tinykube.io"
PLURAL = "widgets"
CRD_NAME = f"{PLURAL}.{GROUP}"
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
KINDS = ("configmap", "widget")


@dataclass(frozen=True)
class Config:
    objects: int = 4000  # per kind, over all rounds
    clients: int = 16
    watchers: int = 50
    writes: int = 200  # watched creates per kind, over all rounds
    rounds: int = 4


def crd() -> dict[str, Any]:
    """A namespaced `Widget` with a schema like a small operator's."""
    port = {
        "type": "object",
        "required": ["name", "port"],
        "properties": {
            "name": {"type": "string", "maxLength": 15},
            "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"], "default": "TCP"},
        },
    }
    spec = {
        "type": "object",
        "required": ["image"],
        "x-kubernetes-validations": [
            {
                "rule": "self.minReplicas <= self.replicas",
                "message": "replicas must be at least minReplicas",
            }
        ],
        "properties": {
            "image": {"type": "string", "pattern": "^[a-z0-9.-]+(/[a-z0-9._-]+)*:[a-zA-Z0-9._-]+$"},
            "replicas": {"type": "integer", "minimum": 0, "default": 1},
            "minReplicas": {"type": "integer", "minimum": 0, "default": 0},
            "ports": {
                "type": "array",
                "maxItems": 16,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": port,
            },
            "resources": {
                "type": "object",
                "properties": {
                    "cpu": {"type": "string"},
                    "memory": {"type": "string"},
                },
            },
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "paused": {"type": "boolean", "default": False},
        },
    }
    status = {
        "type": "object",
        "properties": {
            "readyReplicas": {"type": "integer"},
            "phase": {"type": "string"},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec, "status": status},
                        }
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def widget(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "backend"}},
        "spec": {
            "image": "registry.example.com/team/widget:v1.2.3",
            "replicas": 3,
            "ports": [
                {"name": "http", "port": 8080},
                {"name": "metrics", "port": 9090, "protocol": "TCP"},
                {"name": "dns", "port": 53, "protocol": "UDP"},
            ],
            "resources": {"cpu": "250m", "memory": "128Mi"},
            "env": {"LOG_LEVEL": "info", "REGION": "eu-west-1", "FEATURE_X": "true"},
        },
    }


def configmap(name: str, size: int) -> dict[str, Any]:
    """A ConfigMap whose JSON is `size` bytes long (padded with one data value)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "backend"}},
        "data": {"LOG_LEVEL": "info", "REGION": "eu-west-1", "padding": ""},
    }
    short = size - len(json.dumps(body))
    body["data"]["padding"] = "x" * max(short, 0)
    return body


def paths(namespace: str) -> dict[str, str]:
    return {
        "configmap": f"/api/v1/namespaces/{namespace}/configmaps",
        "widget": f"/apis/{GROUP}/v1/namespaces/{namespace}/{PLURAL}",
    }


def body_of(kind: str, name: str) -> bytes:
    size = len(json.dumps(widget(name)))
    obj = widget(name) if kind == "widget" else configmap(name, size)
    return json.dumps(obj).encode()


async def post(http: aiohttp.ClientSession, url: str, body: bytes) -> None:
    async with http.post(url, data=body, headers=JSON_HEADERS) as response:
        text = await response.read()
        if response.status != 201:
            raise RuntimeError(f"POST {url} answered {response.status}: {text[:300]!r}")


async def setup(http: aiohttp.ClientSession, base: str, namespaces: list[str]) -> None:
    for ns in namespaces:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        await post(http, f"{base}/api/v1/namespaces", json.dumps(body).encode())
    await post(
        http,
        f"{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json.dumps(crd()).encode(),
    )
    # Established, then served: the condition first, then one object created (and removed).
    deadline = time.monotonic() + 60
    url = f"{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    while True:
        async with http.get(url, headers=JSON_HEADERS) as response:
            status = (await response.json()).get("status", {})
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        if conditions.get("Established") == "True":
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD not Established after 60 s: {status}")
        await asyncio.sleep(0.1)
    probe = base + paths(namespaces[0])["widget"]
    while True:
        async with http.post(probe, data=body_of("widget", "probe"), headers=JSON_HEADERS) as r:
            if r.status == 201:
                break
            text = await r.read()
        if time.monotonic() > deadline:
            raise RuntimeError(f"widgets not served after 60 s: {r.status} {text[:300]!r}")
        await asyncio.sleep(0.1)
    # The CEL rule and the pattern are enforced (a refusal, not a 500): else the figure lies.
    bad = widget("bad")
    bad["spec"]["minReplicas"] = 5
    async with http.post(probe, data=json.dumps(bad), headers=JSON_HEADERS) as r:
        if r.status != 422:
            raise RuntimeError(f"the CEL rule did not refuse: {r.status} {await r.text()}")


async def measure_creates(
    http: aiohttp.ClientSession,
    base: str,
    kind: str,
    prefix: str,
    count: int,
    cfg: Config,
    pids: dict[str, int],
) -> dict[str, Any]:
    url = base + paths("bench")[kind]
    bodies = [body_of(kind, f"{prefix}-{i:05d}") for i in range(count)]
    queue = iter(bodies)
    latencies: list[float] = []

    async def worker() -> None:
        for body in queue:
            start = time.perf_counter()
            await post(http, url, body)
            latencies.append(time.perf_counter() - start)

    cpu_before = cpu(pids)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(cfg.clients)))
    wall = time.perf_counter() - started
    cpu_after = cpu(pids)
    return {
        "objects": count,
        "body_bytes": len(bodies[0]),
        "seconds": round(wall, 3),
        "objects_per_second": round(count / wall, 1),
        **percentiles(latencies),
        "cpu_ms_per_object": {
            name: round((cpu_after[name] - cpu_before[name]) / count * 1000, 3) for name in pids
        },
    }


async def measure_fanout(
    http: aiohttp.ClientSession,
    base: str,
    kind: str,
    namespace: str,
    writes: int,
    cfg: Config,
    pids: dict[str, int],
) -> dict[str, Any]:
    url = base + paths(namespace)[kind]
    async with http.get(url, headers=JSON_HEADERS) as response:
        rv = (await response.json())["metadata"]["resourceVersion"]
    watch_url = f"{url}?watch=1&resourceVersion={rv}"
    opened = 0
    all_open = asyncio.Event()
    # delivered[k]: watchers that have read write k's event; done[k] set when all have.
    delivered = [0] * writes
    last_seen = [0.0] * writes
    done = [asyncio.Event() for _ in range(writes)]

    async def watcher() -> None:
        nonlocal opened
        seen = 0
        timeout = aiohttp.ClientTimeout(total=None)
        async with http.get(watch_url, headers=JSON_HEADERS, timeout=timeout) as response:
            if response.status != 200:
                raise RuntimeError(f"watch answered {response.status}")
            opened += 1
            if opened == cfg.watchers:
                all_open.set()
            async for line in response.content:
                if b'"ADDED"' not in line:
                    continue
                now = time.perf_counter()
                delivered[seen] += 1
                if delivered[seen] == cfg.watchers:
                    last_seen[seen] = now
                    done[seen].set()
                seen += 1
                if seen == writes:
                    return

    tasks = [asyncio.create_task(watcher()) for _ in range(cfg.watchers)]
    await asyncio.wait_for(all_open.wait(), timeout=60)
    latencies: list[float] = []
    cpu_before = cpu(pids)
    for k in range(writes):
        body = body_of(kind, f"w-{k:05d}")
        sent = time.perf_counter()
        await post(http, url, body)
        await asyncio.wait_for(done[k].wait(), timeout=60)
        latencies.append(last_seen[k] - sent)
    cpu_after = cpu(pids)
    await asyncio.gather(*tasks)
    return {
        "watchers": cfg.watchers,
        "writes": writes,
        **percentiles(latencies),
        "apiserver_cpu_ms_per_write": round(
            (cpu_after["apiserver"] - cpu_before["apiserver"]) / writes * 1000, 3
        ),
    }


def cpu(pids: dict[str, int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, pid in pids.items():
        sample = proc_sample(pid)
        if sample is None:
            raise RuntimeError(f"{name} (pid {pid}) is gone")
        out[name] = sample.cpu_seconds
    return out


def tls_context(cluster: LocalCluster) -> ssl.SSLContext | None:
    if cluster.insecure:
        return None
    context = ssl.create_default_context(cafile=str(cluster.pki.ca_cert_path))
    admin = cluster.pki.paths("admin")
    context.load_cert_chain(admin.cert, admin.key)
    return context


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Creates pooled over the rounds (objects/s from the summed time, latency medians of the
    rounds' percentiles, CPU from the summed objects)."""

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    out: dict[str, Any] = {}
    for kind in KINDS:
        creates = [r["creates"] for r in runs if r["kind"] == kind]
        fanouts = [r["fanout"] for r in runs if r["kind"] == kind]
        objects = sum(c["objects"] for c in creates)
        seconds = sum(c["seconds"] for c in creates)
        out[kind] = {
            "objects": objects,
            "body_bytes": creates[0]["body_bytes"],
            "objects_per_second": round(objects / seconds, 1),
            "create_p50_ms": med([c["p50_ms"] for c in creates]),
            "create_p99_ms": med([c["p99_ms"] for c in creates]),
            "cpu_ms_per_object": {
                name: round(
                    sum(c["cpu_ms_per_object"][name] * c["objects"] for c in creates) / objects,
                    3,
                )
                for name in creates[0]["cpu_ms_per_object"]
            },
            "watch_p50_ms": med([f["p50_ms"] for f in fanouts]),
            "watch_p99_ms": med([f["p99_ms"] for f in fanouts]),
            "watch_apiserver_cpu_ms_per_write": med(
                [f["apiserver_cpu_ms_per_write"] for f in fanouts]
            ),
        }
    return out


async def bench(cluster: LocalCluster, cfg: Config) -> dict[str, Any]:
    base = cluster.rest_url
    procs = cluster.processes
    pids = {"apiserver": procs["apiserver"].pid}
    etcd = cluster.etcd.process if cluster.etcd is not None else None
    if etcd is not None:
        pids["etcd"] = etcd.pid
    connector = aiohttp.TCPConnector(limit=0, ssl=tls_context(cluster) or False)
    fan_namespaces = [f"fan-{kind}-{r}" for r in range(cfg.rounds) for kind in KINDS]
    runs: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(connector=connector) as http:
        await setup(http, base, ["bench", *fan_namespaces])
        # Warm both paths (connections, the CRD's compiled schema, caches) before measuring.
        for kind in KINDS:
            await measure_creates(http, base, kind, "warm", 4 * cfg.clients, cfg, pids)
        per_round = cfg.objects // cfg.rounds
        writes = cfg.writes // cfg.rounds
        for r in range(cfg.rounds):
            order = KINDS if r % 2 == 0 else KINDS[::-1]
            for kind in order:
                creates = await measure_creates(http, base, kind, f"r{r}", per_round, cfg, pids)
                fanout = await measure_fanout(
                    http, base, kind, f"fan-{kind}-{r}", writes, cfg, pids
                )
                runs.append({"round": r, "kind": kind, "creates": creates, "fanout": fanout})
                print(
                    f"round {r + 1}/{cfg.rounds} {kind}: {creates['objects_per_second']} objects/s",
                    file=sys.stderr,
                    flush=True,
                )
        # What the server returns (and stores): the widget's defaults are filled in.
        returned = {}
        for kind in KINDS:
            async with http.get(f"{base}{paths('bench')[kind]}/r0-00000") as response:
                returned[kind] = len(await response.read())
    summary = summarize(runs)
    for kind in KINDS:
        summary[kind]["returned_bytes"] = returned[kind]
    return {"summary": summary, "runs": runs}


def report(result: dict[str, Any], cfg: Config) -> str:
    s = result["summary"]
    env = result["environment"]
    head = (
        f"{'kind':<10}{'bytes':>6}{'got':>6}{'obj/s':>8}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'api CPU ms/obj':>16}{'etcd ms/obj':>13}{'watch p50':>11}{'watch p99':>11}"
    )
    rows = [
        f"{kind:<10}{s[kind]['body_bytes']:>6}{s[kind]['returned_bytes']:>6}{s[kind]['objects_per_second']:>8}"
        f"{s[kind]['create_p50_ms']:>8}{s[kind]['create_p99_ms']:>8}"
        f"{s[kind]['cpu_ms_per_object']['apiserver']:>16}"
        f"{s[kind]['cpu_ms_per_object'].get('etcd', '-'):>13}"
        f"{s[kind]['watch_p50_ms']:>11}{s[kind]['watch_p99_ms']:>11}"
        for kind in KINDS
    ]
    return "\n".join(
        [
            f"{cfg.objects} creates per kind, {cfg.clients} clients, REST JSON, TLS="
            f"{env['tls']}; watch: {cfg.watchers} watchers x {cfg.writes} writes per kind; "
            f"{cfg.rounds} rounds; nproc {env['cores']}, load {env['load_before']} -> "
            f"{env['load_after']}",
            head,
            *rows,
        ]
    )


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run, nothing written")
    parser.add_argument("--objects", type=int, default=Config.objects, help="creates per kind")
    parser.add_argument("--clients", type=int, default=Config.clients)
    parser.add_argument("--watchers", type=int, default=Config.watchers)
    parser.add_argument("--writes", type=int, default=Config.writes, help="watched per kind")
    parser.add_argument("--rounds", type=int, default=Config.rounds)
    parser.add_argument("--insecure", action="store_true", help="plaintext instead of TLS")
    args = parser.parse_args(argv)
    cfg = Config(args.objects, args.clients, args.watchers, args.writes, args.rounds)
    if args.quick:
        cfg = Config(objects=100, clients=4, watchers=5, writes=10, rounds=2)
    load_before = load_average()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with (
        tempfile.TemporaryDirectory(prefix="tinykube-crd-bench-") as tmp,
        LocalCluster(
            tmp, insecure=args.insecure, scheduler=False, controller=False, kubelets=()
        ) as cluster,
    ):
        result = asyncio.run(bench(cluster, cfg))
    result["config"] = asdict(cfg)
    result["environment"] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "started": started,
        "commit": commit(),
        "tls": not args.insecure,
        "niceness": os.nice(0),
        "load_before": load_before,
        "load_after": load_average(),
    }
    print(report(result, cfg))
    if not args.quick:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = RESULTS_DIR / f"custom_resources-{stamp}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
