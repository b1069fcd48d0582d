"""Scheduling-cycle time per pod, in-process, with the real plugins on synthetic nodes.

For each cluster size, builds a cache of nodes (4 zones, 10% tainted, 5% with a GPU), then
schedules pods one at a time (Algorithm.schedule + cache.assume: the serial part of
kube-scheduler's cycle; the bind runs concurrently and is not included) and reports p50/p99.
Two workloads: "basic" (identical pods, so node-static plugin results are reused) and
"affinity" (each pod a different required node affinity + toleration, no reuse).

    .venv/bin/python bench/scheduler_cycle.py [--sizes 100,1000,5000] [--pods 2000]
        [--results bench/RESULTS.md]

Writes/replaces the "Scheduler cycle" section of RESULTS.md (between markers).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import time
from pathlib import Path

from scheduler.cache import SchedulerCache
from scheduler.core import Algorithm, Profile
from scheduler.podinfo import PodInfo
from tinykube.v1 import node_pb2, pod_pb2

BEGIN = "<!-- scheduler_cycle:begin -->"
END = "<!-- scheduler_cycle:end -->"


def make_node(i: int) -> node_pb2.Node:
    n = node_pb2.Node()
    n.metadata.name = f"node-{i:05d}"
    n.metadata.labels.update(
        {
            "kubernetes.io/hostname": n.metadata.name,
            "topology.kubernetes.io/zone": f"zone-{i % 4}",
            "node.kubernetes.io/instance-type": ("large" if i % 3 == 0 else "small"),
        }
    )
    n.status.allocatable.update({"cpu": "32", "memory": "128Gi", "pods": "110"})
    if i % 20 == 0:
        n.status.allocatable["example.com/gpu"] = "4"
    if i % 10 == 0:
        t = n.spec.taints.add()
        t.key, t.value, t.effect = "dedicated", "infra", "NoSchedule"
    return n


def make_pod(i: int, workload: str) -> PodInfo:
    p = pod_pb2.Pod()
    p.metadata.name = f"pod-{i}"
    p.metadata.namespace = "default"
    p.metadata.uid = f"uid-{i}"
    c = p.spec.containers.add()
    c.name = "app"
    c.image = "registry.example/app:1"
    c.resources.requests.update({"cpu": "100m", "memory": "128Mi"})
    if workload == "affinity":
        term = p.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        expr = term.nodeSelectorTerms.add().matchExpressions.add()
        expr.key, expr.operator = "topology.kubernetes.io/zone", "In"
        expr.values.extend([f"zone-{i % 4}", f"zone-{(i + 1) % 4}"])
        pref = p.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.add()
        pref.weight = 1 + i % 100
        e2 = pref.preference.matchExpressions.add()
        e2.key, e2.operator, e2.values[:] = "node.kubernetes.io/instance-type", "In", ["large"]
        tol = p.spec.tolerations.add()
        tol.key, tol.operator, tol.value = "dedicated", "Equal", f"v{i}"
    return PodInfo.from_pod(p)


def run(nodes: int, pods: int, workload: str) -> dict[str, float]:
    cache = SchedulerCache()
    for i in range(nodes):
        cache.add_node(make_node(i))
    algo = Algorithm(cache, Profile())
    infos = [make_pod(i, workload) for i in range(pods)]
    # warm-up: numpy and code paths
    for info in infos[:50]:
        algo.schedule(info)
    times = []
    cpu = []
    for info in infos:
        t0 = time.perf_counter()
        c0 = time.thread_time()
        res = algo.schedule(info)
        if res.node is not None:
            cache.assume(info, res.node)
        cpu.append(time.thread_time() - c0)
        times.append(time.perf_counter() - t0)
        assert res.node is not None, res.message
    times.sort()
    cpu.sort()
    return {
        "p50_us": statistics.median(times) * 1e6,
        "p99_us": times[int(len(times) * 0.99) - 1] * 1e6,
        "cpu_p50_us": statistics.median(cpu) * 1e6,
        "cpu_p99_us": cpu[int(len(cpu) * 0.99) - 1] * 1e6,
        "mean_us": statistics.fmean(times) * 1e6,
        "pods_per_s": len(times) / sum(times),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--results", default=str(Path(__file__).with_name("RESULTS.md")))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for workload in ("basic", "affinity"):
            r = run(size, args.pods, workload)
            rows.append((size, workload, r))
            print(
                f"{size:>6} nodes {workload:>8}: p50 {r['p50_us']:7.1f} us  "
                f"p99 {r['p99_us']:7.1f} us  (cpu p50 {r['cpu_p50_us']:.1f} p99 "
                f"{r['cpu_p99_us']:.1f} us; {r['pods_per_s']:,.0f} cycles/s)",
                flush=True,
            )
    if args.no_write:
        return
    load = os.getloadavg()[0]
    lines = [
        BEGIN,
        "## Scheduler cycle (in-process, `bench/scheduler_cycle.py`)",
        "",
        f"Machine: {os.cpu_count()} cores (`nproc` = {len(os.sched_getaffinity(0))}), "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d', time.gmtime())}. "
        f"{args.pods} pods per run; time per pod = Filter+Score+select+assume "
        "(the bind is concurrent and excluded). Wall time suffers from other processes on "
        f"the shared machine (load average {load:.1f} at the end of the run); the thread CPU "
        "time columns do not.",
        "",
        "| nodes | workload | wall p50 (µs) | wall p99 (µs) | CPU p50 (µs) | CPU p99 (µs) "
        "| cycles/s |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for size, workload, r in rows:
        lines.append(
            f"| {size:,} | {workload} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | "
            f"{r['cpu_p50_us']:.0f} | {r['cpu_p99_us']:.0f} | {r['pods_per_s']:,.0f} |"
        )
    lines += [
        "",
        "basic: identical pods (node-static plugin results reused); affinity: every pod has its "
        "own required/preferred node affinity and toleration (no reuse).",
        END,
    ]
    section = "\n".join(lines) + "\n"
    path = Path(args.results)
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if BEGIN in text and END in text:
        text = re.sub(
            re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", section, text, flags=re.S
        )
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
