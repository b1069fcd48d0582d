"""Bytes per pod in each control-plane process (issue 26: apiserver RSS at 150,000 pods <= 4 GiB).

    python bench/memory_per_pod.py [--nodes 500] [--pods-per-node 30] [--steps 3]
                                   [--report] [--trace 0] [--out-dir DIR] [--label NAME]

The cluster and the pods are bench/load.py's (its createDeployments phase: the load test's
Deployments of CL2's sizes with a Service each, pods with requests, labels, a readiness probe,
env and the projected token volume, on hollow nodes whose kubelets watch their own pods; TLS
with Node,RBAC authorization). The pods are made in `--steps` equal parts; after the nodes are
Ready and after each part has converged (every pod Running) and `--settle` seconds have passed,
the RSS of every process is read from /proc (a checkpoint). The bytes per pod of a process are
the slope of its RSS over the pods between the first and the last pod checkpoint, so what does
not grow with the pods (the event windows once full, the code, the nodes) is left out; the
average from the node-only checkpoint is given too. At each checkpoint one unpaged LIST of every
pod is made and the apiserver's RSS sampled every 20 ms during it (a LIST's peak over the
steady state).

`--report` makes the apiserver, scheduler and controller manager write a memory report
(tinykube/memreport.py) at each checkpoint: glibc's and Python's bytes in use, live objects by
type, and the apiserver's watch caches counted representation by representation. `--trace N`
also traces Python allocations with N frames from the node-only checkpoint on (slower).

Output: `<out-dir>/memory-<label>-<nodes>Nodes-<stamp>.json`; the reports beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import harness
import load
import sysmetrics
from namespaces import ensure_namespace

from tinykube.client import Client

REPORTED = ("apiserver", "scheduler", "controller")


class MemoryRun(load.LoadRun):
    def __init__(self, args: argparse.Namespace, report_base: str) -> None:
        cases = harness.load_test_cases(Path(__file__).parent / "workloads" / "load.yaml")
        case = cases[0]
        workload = {
            "name": f"{args.nodes}Nodes",
            "params": {
                "nodes": args.nodes,
                "podsPerNode": args.pods_per_node,
                "nodesPerKubelet": args.nodes_per_kubelet,
                "qps": args.qps,
            },
        }
        opts = harness.Options(timeout=args.timeout, ceilings=False, out_dir=args.out_dir)
        super().__init__(case, workload, opts)
        self.args = args
        self.report_base = report_base
        self.checkpoints: list[dict[str, Any]] = []
        self.report_files: dict[str, list[str]] = {}

    def pid(self, name: str) -> int:
        return self.cluster.processes[name].pid

    async def write_reports(self, label: str) -> dict[str, str]:
        """SIGUSR2 to each reporting process; wait for its new report file."""
        out: dict[str, str] = {}
        for name in REPORTED:
            if name not in self.cluster.processes:
                continue
            pid = self.pid(name)
            before = set(glob.glob(f"{self.report_base}.{pid}.*.json"))
            os.kill(pid, signal.SIGUSR2)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                new = set(glob.glob(f"{self.report_base}.{pid}.*.json")) - before
                if new:
                    src = Path(new.pop())
                    dst = self.opts.out_dir / f"{self.stem()}-{label}-{name}.json"
                    shutil.copy(src, dst)
                    out[name] = dst.name
                    break
                await asyncio.sleep(0.2)
        return out

    async def list_peak(self, client: Client) -> dict[str, Any]:
        """One unpaged LIST of every pod, the apiserver's RSS sampled every 20 ms meanwhile."""
        pid = self.pid("apiserver")
        first = sysmetrics.proc_sample(pid)
        peak = first.rss_bytes if first else 0
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                s = await asyncio.to_thread(sysmetrics.proc_sample, pid)
                if s is not None:
                    peak = max(peak, s.rss_bytes)
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        began = time.monotonic()
        items, _ = await client.pods.list_all(page_size=0)
        seconds = time.monotonic() - began
        done.set()
        await sampler
        base = first.rss_bytes if first else 0
        return {
            "items": len(items),
            "seconds": round(seconds, 3),
            "rss_before_mib": round(base / 2**20, 1),
            "rss_peak_mib": round(peak / 2**20, 1),
            "rise_mib": round((peak - base) / 2**20, 1),
        }

    async def checkpoint(self, label: str, pods: int, client: Client) -> None:
        await asyncio.sleep(self.args.settle)
        procs: dict[str, Any] = {}
        for name, pid in self.sampler.pids.items():
            s = sysmetrics.proc_sample(pid)
            if s is not None:
                procs[name] = {"rss_bytes": s.rss_bytes, "cpu_seconds": round(s.cpu_seconds, 2)}
        point: dict[str, Any] = {
            "label": label,
            "pods": pods,
            "time": time.strftime("%H:%M:%S"),
            "load_average": sysmetrics.load_average(),
            "processes": procs,
        }
        if self.args.report:
            point["reports"] = await self.write_reports(label)
        if pods:
            point["list_all"] = await self.list_peak(client)
        self.checkpoints.append(point)
        # What is measured so far, in case the run ends early.
        partial = {**self.summary_of(0.0), "partial": True}
        self.out_file().write_text(json.dumps(partial, indent=1))
        rss = {n: round(p["rss_bytes"] / 2**20) for n, p in procs.items() if "kubelet" not in n}
        self.log(f"checkpoint {label}: {pods} pods, RSS MiB {rss}, load {point['load_average']}")

    async def execute(self) -> dict[str, Any]:
        began = time.monotonic()
        self.load_start = sysmetrics.load_average()
        tasks: list[asyncio.Task[Any]] = []
        try:
            await asyncio.to_thread(self.cluster.start)
            tasks.append(asyncio.create_task(self.sampler.run()))
            self.sampler.pids.update({n: p.pid for n, p in self.cluster.processes.items()})
            async with Client(
                self.cluster.api_address, timeout=120.0, credentials=self.cluster.credentials
            ) as client:
                rec = load.LoadRecorder(client)
                ready = asyncio.Event()
                tasks.append(asyncio.create_task(rec.run(ready)))
                await asyncio.wait_for(ready.wait(), 60)
                nodes_op = next(op for op in self.ops if op["opcode"] == "createNodes")
                await self.create_nodes(nodes_op, client)
                self.plan = load.deployment_plan(self.args.nodes, self.params)
                for ns in sorted({ns for ns, _, _ in self.plan}):
                    await ensure_namespace(client, ns)
                if self.args.trace:
                    for name in REPORTED:
                        os.kill(self.pid(name), signal.SIGUSR1)
                await self.checkpoint("nodes", 0, client)
                total = sum(r for _, _, r in self.plan)
                steps = max(1, self.args.steps)
                made = 0
                plan = list(self.plan)
                for step in range(steps):
                    want = round(total * (step + 1) / steps)
                    part: list[tuple[str, str, int]] = []
                    while plan and made + sum(r for _, _, r in part) < want:
                        part.append(plan.pop(0))
                    self.plan = part
                    self.log(f"step {step + 1}: {len(part)} Deployments")
                    try:
                        await self.phase_create({"qps": self.args.qps}, client, rec)
                    except TimeoutError as exc:
                        # Measured as it stands (the pods that run), and no further step.
                        self.log(f"  {exc}; checkpoint with the pods running now")
                        made = sum(rec.good_in.values())
                        await self.checkpoint(f"step{step + 1}-incomplete", made, client)
                        break
                    made += sum(r for _, _, r in part)
                    await self.checkpoint(f"step{step + 1}", made, client)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.to_thread(self.cluster.stop)
            shutil.rmtree(self.work, ignore_errors=True)
        return self.summary_of(time.monotonic() - began)

    def summary_of(self, seconds: float) -> dict[str, Any]:
        points = [c for c in self.checkpoints if c["pods"]]
        first, last = (points[0], points[-1]) if points else (None, None)
        base = self.checkpoints[0] if self.checkpoints else None
        per_pod: dict[str, Any] = {}
        for name in sorted(self.sampler.pids):
            row: dict[str, Any] = {}
            if first and last and last["pods"] > first["pods"] and name in last["processes"]:
                d = last["processes"][name]["rss_bytes"] - first["processes"][name]["rss_bytes"]
                row["slope_bytes"] = round(d / (last["pods"] - first["pods"]))
                c = last["processes"][name]["cpu_seconds"] - first["processes"][name]["cpu_seconds"]
                row["cpu_ms_slope"] = round(1000 * c / (last["pods"] - first["pods"]), 3)
            if base and last and name in base["processes"] and name in last["processes"]:
                d = last["processes"][name]["rss_bytes"] - base["processes"][name]["rss_bytes"]
                row["average_bytes"] = round(d / last["pods"])
                row["rss_mib"] = round(last["processes"][name]["rss_bytes"] / 2**20, 1)
            per_pod[name] = row
        return {
            "benchmark": "memory_per_pod",
            "label": self.args.label,
            "nodes": self.args.nodes,
            "pods": last["pods"] if last else 0,
            "per_pod": per_pod,
            "checkpoints": self.checkpoints,
            "seconds": round(seconds, 1),
            "machine": {"nproc": os.cpu_count(), "load_average_at_start": self.load_start},
            "commit": harness.git_commit(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def out_file(self) -> Path:
        return self.opts.out_dir / f"{self.stem()}.json"

    def stem(self) -> str:
        return f"memory-{self.args.label}-{self.args.nodes}Nodes-{harness.STAMP}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--pods-per-node", type=int, default=30)
    p.add_argument("--nodes-per-kubelet", type=int, default=500)
    p.add_argument("--qps", type=float, default=150.0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--settle", type=float, default=20.0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per step's wait")
    p.add_argument("--report", action="store_true", help="memory reports at each checkpoint")
    p.add_argument("--trace", type=int, default=0, help="tracemalloc frames (0: off)")
    p.add_argument("--label", default="run")
    p.add_argument("--out-dir", type=Path, default=harness.RESULTS_DIR / "session11" / "memory")
    args = p.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    reports = Path(os.environ.get("TMPDIR", "/tmp")) / f"tinykube-memreport-{os.getpid()}"
    reports.mkdir(exist_ok=True)
    base = str(reports / "report")
    if args.report or args.trace:
        os.environ["TINYKUBE_MEMORY_REPORT"] = base
    if args.trace:
        os.environ["TINYKUBE_MEMORY_TRACE"] = str(args.trace)
    run = MemoryRun(args, base)
    try:
        result = asyncio.run(run.execute())
    finally:
        shutil.rmtree(reports, ignore_errors=True)
    out = run.out_file()
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    for name, row in result["per_pod"].items():
        if row:
            print(f"  {name:28} {json.dumps(row)}")
    with contextlib.suppress(KeyError):
        for c in result["checkpoints"]:
            if "list_all" in c:
                print(f"  LIST all at {c['pods']} pods: {json.dumps(c['list_all'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
