"""Pod startup latency with the containerd runtime against the process runtime.

    sudo .venv/bin/python -m bench.cri_startup --pods 30 --nodes 2

Starts a local cluster (as `tinykube up`: with `--runtime containerd`, one containerd per node
and the node IPAM controller), creates N pods at once (busybox looping; the process runtime runs
the same shell loop on the host), and measures, per pod, the time from its Create call's return
to the first List that shows it Running (client clocks, polling every 100 ms: the API's
timestamps have whole seconds), and the kubelets' CPU time (utime + stime from /proc) spent
meanwhile, per pod. Prints one JSON line per runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from tinykube.client import Client
from tinykube.containerd import BUSYBOX_IMAGE, NodeRuntimes, missing_prerequisites
from tinykube.launcher import LocalCluster
from tinykube.v1 import pod_pb2

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def measure(cl: LocalCluster, pods: int, runtime: str) -> dict[str, object]:
    kubelets = [c for n, c in cl.components.items() if n.startswith("kubelet")]
    async with Client(cl.api_address, credentials=cl.credentials) as client:
        cpu0 = sum(cpu_seconds(c.process.pid) for c in kubelets if c.process)
        created: dict[str, float] = {}

        async def create(i: int) -> None:
            pod = pod_pb2.Pod()
            pod.metadata.name, pod.metadata.namespace = f"bench-{i}", "default"
            c = pod.spec.containers.add(name="app", image=BUSYBOX_IMAGE)
            c.command.extend(["/bin/sh", "-c", "while true; do sleep 1; done"])
            await client.pods.create(pod)
            created[pod.metadata.name] = time.monotonic()

        await asyncio.gather(*(create(i) for i in range(pods)))
        running: dict[str, float] = {}
        deadline = time.monotonic() + 300
        while len(running) < pods and time.monotonic() < deadline:
            for p in (await client.pods.list("default")).items:
                if p.status.phase == "Running" and p.metadata.name not in running:
                    running[p.metadata.name] = time.monotonic()
            await asyncio.sleep(0.1)
        cpu1 = sum(cpu_seconds(c.process.pid) for c in kubelets if c.process)
        latencies = [running[n] - created[n] for n in running]
        return {
            "runtime": runtime,
            "pods": pods,
            "nodes": len(kubelets),
            "running": len(running),
            "p50_s": round(statistics.median(latencies), 3),
            "p99_s": round(percentile(latencies, 99), 3),
            "max_s": round(max(latencies), 3),
            "kubelet_cpu_ms_per_pod": round((cpu1 - cpu0) * 1000 / pods, 1),
            "load1_after": os.getloadavg()[0],
        }


def run(runtime: str, pods: int, nodes: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="tk-bench-") as tmp:
        names = [f"node-{i}" for i in range(1, nodes + 1)]
        runtimes = (
            NodeRuntimes(Path(tmp) / "containerd", names) if runtime == "containerd" else None
        )
        cl = LocalCluster(tmp, kubelets=names, extra_args={})
        try:
            if runtimes is not None:
                for name, flags in runtimes.start().items():
                    cl.extra_args.setdefault(name, []).extend(flags)
            cl.start()
            return asyncio.run(measure(cl, pods, runtime))
        finally:
            cl.stop()
            if runtimes is not None:
                runtimes.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=30)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--runtime", choices=("containerd", "process", "both"), default="both")
    a = p.parse_args()
    wanted = ["process", "containerd"] if a.runtime == "both" else [a.runtime]
    if "containerd" in wanted and missing_prerequisites():
        raise SystemExit("; ".join(missing_prerequisites()))
    for runtime in wanted:
        print(json.dumps(run(runtime, a.pods, a.nodes)), flush=True)


if __name__ == "__main__":
    main()
