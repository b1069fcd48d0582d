"""Pod startup latency with the containerd runtime against the process runtime, and where it goes.

    sudo .venv/bin/python -m bench.cri_startup --pods 100 --nodes 2 [--runs 3] [--out DIR]

Starts a local cluster (as `tinykube up`: with `--runtime containerd`, one containerd per node
and the node IPAM controller), creates N pods at once (busybox looping; the process runtime runs
the same shell loop on the host), and measures, per pod, the time from its Create call's return
to the watch event that shows it Running (client clocks: the API's timestamps have whole
seconds; until session 11 it polled List every 100 ms, which loaded the apiserver during the
run and rounded up to the poll), and the kubelets' CPU time (utime + stime from /proc) spent
meanwhile, per pod. Prints one JSON line per run (and with `--out` writes it there).

Where the time goes, per pod (each stage's p50/p90/max over the pods, in `stages`):
- from the API side (the same watch): create -> bound (spec.nodeName set);
- from the kubelet's own clocks (its "Observed pod startup duration" log line,
  kubelet/podstartup.py): create -> the kubelet sees the pod, its first sync, the volumes, the
  wait before RunPodSandbox, RunPodSandbox (with the CNI ADD), PodSandboxStatus, the image
  check, CreateContainer, StartContainer, the status write that reports Running, and from that
  write to the watch event that shows it. `in_flight` is the most RunPodSandbox /
  StartContainer calls a kubelet had outstanding at once.

Where the CPU goes (`cpu_s`, seconds over the run, from /proc; `cpu_ms_per_pod` the same per
pod): etcd, the apiserver, scheduler, controller manager and kubelets; containerd itself, and
what it ran and reaped (the CNI plugins, the shims' `start` launchers); the runc shims (one per
sandbox), and what they ran and reaped (every runc invocation); the containers' processes
(runc init before it became the container's process, plus the pause and workload processes).
Processes that exit without being reaped by one of these are not seen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kubelet.podstartup import parse_line
from tinykube.client import Client
from tinykube.containerd import BUSYBOX_IMAGE, NodeRuntimes, missing_prerequisites
from tinykube.launcher import LocalCluster
from tinykube.v1 import pod_pb2

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_split(pid: int) -> tuple[float, float, int]:
    """(own utime + stime, reaped children's cutime + cstime, parent pid); zeros if gone."""
    try:
        f = _stat(pid)
    except OSError:
        return 0.0, 0.0, 0
    return (int(f[11]) + int(f[12])) / TICKS, (int(f[13]) + int(f[14])) / TICKS, int(f[1])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def spread(values: Iterable[float]) -> dict[str, float]:
    vals = list(values)
    if not vals:
        return {}
    return {
        "p50": round(statistics.median(vals), 3),
        "p90": round(percentile(vals, 90), 3),
        "max": round(max(vals), 3),
    }


def runtime_processes(sockets: list[str]) -> dict[int, str]:
    """pid -> "shim" for the runc shims of these containerd sockets, "container" for their
    children (the sandboxes' pause processes and the containers')."""
    found: dict[int, str] = {}
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parents[pid] = int(_stat(pid)[1])
        except (OSError, IndexError, ValueError):
            continue
        if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2"):
            text = b" ".join(cmdline).decode(errors="replace")
            if any(s in text for s in sockets):
                found[pid] = "shim"
    shims = set(found)
    for pid, ppid in parents.items():
        if ppid in shims:
            found[pid] = "container"
    return found


class CpuMeter:
    """CPU seconds of the cluster's processes between `start` and `stop`, by kind."""

    def __init__(self, cl: LocalCluster, runtimes: NodeRuntimes | None) -> None:
        self.named: dict[int, str] = {}
        for name, comp in cl.components.items():
            if comp.process is not None:
                self.named[comp.process.pid] = name.split("-", 1)[0]  # kubelet-node-1: kubelet
        if cl.etcd is not None and cl.etcd.process is not None:
            self.named[cl.etcd.process.pid] = "etcd"
        ctds = list(runtimes.runtimes.values()) if runtimes is not None else []
        self.containerd = [c.proc.pid for c in ctds if c.proc is not None]
        self.sockets = [str(c.paths.socket) for c in ctds]
        self.before: dict[int, tuple[float, float]] = {}
        # How many runc shims there were at `stop` (one per pod sandbox expected).
        self.shims = 0

    def _sample(self) -> dict[int, tuple[float, float, str]]:
        out: dict[int, tuple[float, float, str]] = {}
        for pid, kind in self.named.items():
            own, _children, _ = cpu_split(pid)
            out[pid] = (own, 0.0, kind)
        for pid in self.containerd:
            own, children, _ = cpu_split(pid)
            out[pid] = (own, children, "containerd")
        if self.sockets:
            found = runtime_processes(self.sockets)
            self.shims = sum(1 for kind in found.values() if kind == "shim")
            for pid, kind in found.items():
                own, children, _ = cpu_split(pid)
                out[pid] = (own, children, kind)
        return out

    def start(self) -> None:
        self.before = {pid: (a, b) for pid, (a, b, _) in self._sample().items()}

    def stop(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for pid, (own, children, kind) in self._sample().items():
            own0, children0 = self.before.get(pid, (0.0, 0.0))
            totals[kind] = totals.get(kind, 0.0) + own - own0
            if kind in ("containerd", "shim", "container"):
                reaped = {"containerd": "containerd_reaped", "shim": "shim_reaped"}
                key = reaped.get(kind, "container")
                totals[key] = totals.get(key, 0.0) + children - children0
        return {k: round(v, 3) for k, v in sorted(totals.items())}


def kubelet_traces(logs: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """pod "ns/name" -> its startup trace from the kubelets' logs."""
    traces: dict[str, dict[str, Any]] = {}
    for path in logs:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            trace = parse_line(line)
            if trace is not None:
                traces[str(trace["pod"])] = trace
    return traces


def _span(trace: dict[str, Any], name: str) -> tuple[float, float] | None:
    for stage, a, b in trace["spans"]:
        if stage == name:
            return float(a), float(b)
    return None


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    at_once = top = 0
    for _, step in edges:
        at_once += step
        top = max(top, at_once)
    return top


def stage_table(
    created: dict[str, float],
    bound: dict[str, float],
    running: dict[str, float],
    traces: dict[str, dict[str, Any]],
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Each stage's spread over the pods (seconds), and the most sandboxes and container
    starts in flight at once on one kubelet."""
    rows: dict[str, list[float]] = {}

    def add(stage: str, seconds: float) -> None:
        rows.setdefault(stage, []).append(seconds)

    sandboxes: dict[str, list[tuple[float, float]]] = {}
    starts: dict[str, list[tuple[float, float]]] = {}
    for name, made in created.items():
        if name in bound:
            add("api: create -> bound", bound[name] - made)
        trace = traces.get(f"default/{name}")
        if trace is None or name not in running:
            continue
        seen, first_sync = float(trace["seen"]), float(trace["first_sync"])
        add("kubelet: create -> seen", seen - made)
        add("kubelet: seen -> first sync", first_sync - seen)
        volumes = _span(trace, "volumes")
        if volumes:
            add("kubelet: volumes (beside the sandbox)", volumes[1] - volumes[0])
        sandbox = _span(trace, "sandbox")
        last = first_sync
        if sandbox:
            add("kubelet: first sync -> RunPodSandbox", sandbox[0] - first_sync)
            add("cri: RunPodSandbox (with CNI ADD)", sandbox[1] - sandbox[0])
            node = trace.get("node", "")
            sandboxes.setdefault(str(node), []).append(sandbox)
            last = sandbox[1]
        for stage, label in (
            ("sandbox_status", "cri: PodSandboxStatus"),
            ("image:app", "cri: image (ImageStatus)"),
            ("create:app", "cri: CreateContainer"),
            ("start:app", "cri: StartContainer"),
        ):
            span = _span(trace, stage)
            if span:
                add(label, span[1] - span[0])
                last = span[1]
                if stage == "start:app":
                    starts.setdefault(str(trace.get("node", "")), []).append(span)
        sent, written = float(trace["status_sent"]), float(trace["status_written"])
        add("kubelet: runtime's last stage -> status sent", sent - last)
        add("api: status write (UpdateStatus)", written - sent)
        add("api: written -> watch shows Running", running[name] - written)
        add("total: create -> Running", running[name] - made)
    in_flight = {
        "run_podsandbox": max((most_at_once(s) for s in sandboxes.values()), default=0),
        "start_container": max((most_at_once(s) for s in starts.values()), default=0),
    }
    return {k: spread(v) for k, v in rows.items()}, in_flight


async def measure(
    cl: LocalCluster, pods: int, runtime: str, runtimes: NodeRuntimes | None = None
) -> dict[str, object]:
    kubelets = [c for n, c in cl.components.items() if n.startswith("kubelet")]
    meter = CpuMeter(cl, runtimes)
    async with Client(cl.api_address, credentials=cl.credentials) as client:
        load_before = os.getloadavg()[0]
        meter.start()
        cpu0 = sum(cpu_seconds(c.process.pid) for c in kubelets if c.process)
        # Wall clock: it lines up with the kubelets' log stamps.
        created: dict[str, float] = {}

        async def create(i: int) -> None:
            pod = pod_pb2.Pod()
            pod.metadata.name, pod.metadata.namespace = f"bench-{i}", "default"
            c = pod.spec.containers.add(name="app", image=BUSYBOX_IMAGE)
            c.command.extend(["/bin/sh", "-c", "while true; do sleep 1; done"])
            await client.pods.create(pod)
            created[pod.metadata.name] = time.time()

        running: dict[str, float] = {}
        bound: dict[str, float] = {}
        everyone = asyncio.Event()

        async def watch(rv: str) -> None:
            async for event in client.pods.watch("default", resource_version=rv):
                p, now = event.object, time.time()
                name = p.metadata.name
                if p.spec.nodeName and name not in bound:
                    bound[name] = now
                if p.status.phase == "Running" and name not in running:
                    running[name] = now
                    if len(running) == pods:
                        everyone.set()
                        return

        watcher = asyncio.create_task(
            watch((await client.pods.list("default")).metadata.resourceVersion)
        )
        started = time.time()
        await asyncio.gather(*(create(i) for i in range(pods)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(everyone.wait(), 300)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        cpu1 = sum(cpu_seconds(c.process.pid) for c in kubelets if c.process)
        cpu = meter.stop()
        elapsed = time.time() - started
    latencies = [running[n] - created[n] for n in running]
    traces: dict[str, dict[str, Any]] = {}
    # A kubelet logs a pod's trace when its status write is answered, which can come after
    # the watch event that showed the write to us.
    for _ in range(100):
        for name in cl.components:
            if name.startswith("kubelet-"):
                for pod, trace in kubelet_traces([cl.logs_dir / f"{name}.log"]).items():
                    traces[pod] = {**trace, "node": name[len("kubelet-") :]}
        if all(f"default/{n}" in traces for n in running):
            break
        await asyncio.sleep(0.1)
    stages, in_flight = stage_table(created, bound, running, traces)
    return {
        "runtime": runtime,
        "pods": pods,
        "nodes": len(kubelets),
        "running": len(running),
        # None when no pod ran (the runtime refused them all: see the kubelets' logs).
        "p50_s": round(statistics.median(latencies), 3) if latencies else None,
        "p99_s": round(percentile(latencies, 99), 3) if latencies else None,
        "max_s": round(max(latencies), 3) if latencies else None,
        "kubelet_cpu_ms_per_pod": round((cpu1 - cpu0) * 1000 / pods, 1),
        "load1_before": load_before,
        "load1_after": os.getloadavg()[0],
        "elapsed_s": round(elapsed, 3),
        "traced_pods": sum(1 for n in running if f"default/{n}" in traces),
        "stages": stages,
        "in_flight": in_flight,
        "cpu_s": cpu,
        "cpu_ms_per_pod": {k: round(v * 1000 / pods, 1) for k, v in cpu.items()},
        "shims": meter.shims,
        # Per pod: the bench's clocks (created, bound, running) and the kubelet's trace.
        "pods_traced": {
            name: {
                "created": round(made, 6),
                "bound": round(bound.get(name, 0.0), 6),
                "running": round(running.get(name, 0.0), 6),
                "kubelet": traces.get(f"default/{name}"),
            }
            for name, made in sorted(created.items())
        },
    }


def run(runtime: str, pods: int, nodes: int, oci_runtime: str = "") -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="tk-bench-") as tmp:
        names = [f"node-{i}" for i in range(1, nodes + 1)]
        runtimes = (
            NodeRuntimes(Path(tmp) / "containerd", names, oci_runtime=oci_runtime)
            if runtime == "containerd"
            else None
        )
        cl = LocalCluster(tmp, kubelets=names, extra_args={})
        try:
            if runtimes is not None:
                for name, flags in runtimes.start().items():
                    cl.extra_args.setdefault(name, []).extend(flags)
            cl.start()
            return asyncio.run(measure(cl, pods, runtime, runtimes))
        finally:
            cl.stop()
            if runtimes is not None:
                runtimes.stop()


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent,
    )
    return out.stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=30)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--runtime", choices=("containerd", "process", "both"), default="both")
    p.add_argument("--runs", type=int, default=1, help="runs of each runtime, one after another")
    p.add_argument("--out", type=Path, help="write each run's JSON into this directory")
    p.add_argument(
        "--oci-runtime",
        default="",
        help="the runc-compatible binary containerd's shims run (crun, say); default runc",
    )
    a = p.parse_args()
    wanted = ["process", "containerd"] if a.runtime == "both" else [a.runtime]
    if "containerd" in wanted and missing_prerequisites():
        raise SystemExit("; ".join(missing_prerequisites()))
    commit = _commit()
    for i in range(1, a.runs + 1):
        for runtime in wanted:
            result = {"commit": commit, **run(runtime, a.pods, a.nodes, a.oci_runtime)}
            if runtime == "containerd":
                result["oci_runtime"] = a.oci_runtime or "runc"
            line = json.dumps(result)
            print(line, flush=True)
            if a.out is not None:
                a.out.mkdir(parents=True, exist_ok=True)
                stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
                kind = f"{runtime}-{a.oci_runtime.rsplit('/', 1)[-1]}" if a.oci_runtime else runtime
                name = f"{kind}-{a.pods}pods-{commit}-{stamp}-run{i}.json"
                (a.out / name).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
