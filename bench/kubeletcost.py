"""Instructions a hollow kubelet executes per node-second and per pod, counted by callgrind.

    python bench/kubeletcost.py --nodes 100 --pods 300                       # this checkout
    python bench/kubeletcost.py --tree /tmp/old --tree . --nodes 100 --pods 300

CPU seconds per pod of the fake kubelets in SchedulingBasic move 2x with the load of a shared
2-core machine; the instructions they execute hardly move. This script runs etcd and one
apiserver (`--insecure`, uninstrumented) and one fake kubelet process hosting `--nodes` hollow
nodes under `valgrind --tool=callgrind` (from `--tree` through PYTHONPATH, so an older commit's
`git archive` runs with this venv), and counts two phases, zeroing and dumping callgrind's
counters around each (every thread of the kubelet, gRPC's included):

- `idle`: `--idle` seconds of nothing but what every node does on its own: a Lease renewal
  every 10 s, a node status check every 10 s; reported per node-second and per node per 10 s;
- `pods`: a second kubelet process on the same nodes, with Leases and status checks an hour
  apart (so none falls in the phase), and `--pods` harness pods (SchedulingBasic's default
  pod) created already bound to its nodes, round robin (no scheduler), until the apiserver
  shows every one Running; reported per pod (the pod's watch events, the pod worker's sync and
  status build, its UpdateStatus).

Under callgrind the kubelet runs 30-60x slower, so the pods' status writes batch more than at
full speed (the same for every tree measured alike). Prints one JSON line per tree; nothing is
asserted. Needs valgrind (Debian's `valgrind` package).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
PREFIX = "cost-"


def _summary(dump: Path) -> int:
    """The dump's total instruction count (callgrind's `summary:` line)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {dump}")


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def _dump(work: Path, name: str, pid: int) -> int:
    """Dump the counters of kubelet `name` (its own callgrind files) and return its total."""
    before = set(work.glob(f"{name}.callgrind*"))
    _control("--dump", str(pid))
    (dump,) = set(work.glob(f"{name}.callgrind*")) - before
    return _summary(dump)


async def _nodes_ready(address: str, count: int, seconds: float) -> None:
    from tinykube.client import Client

    deadline = time.monotonic() + seconds
    async with Client(address, timeout=60.0) as client:
        while True:
            nodes = (await client.nodes.list()).items
            ready = sum(
                1
                for n in nodes
                if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
            )
            if ready >= count:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"only {ready}/{count} nodes Ready")
            await asyncio.sleep(1.0)


async def _run_pods(address: str, nodes: int, count: int, seconds: float) -> None:
    """Create `count` bound pods (round robin over the nodes) and wait until all run."""
    from google.protobuf import json_format
    from harness import DEFAULT_POD

    from tinykube.client import Client
    from tinykube.v1 import pod_pb2

    async with Client(address, timeout=60.0) as client:
        template = json_format.ParseDict(DEFAULT_POD, pod_pb2.Pod())
        sem = asyncio.Semaphore(16)

        async def create(i: int) -> None:
            pod = pod_pb2.Pod()
            pod.CopyFrom(template)
            pod.metadata.name, pod.metadata.namespace = f"cost-{i:05d}", "default"
            pod.spec.nodeName = f"{PREFIX}{i % nodes}"
            async with sem:
                await client.pods.create(pod)

        await asyncio.gather(*(create(i) for i in range(count)))
        deadline = time.monotonic() + seconds
        while True:
            pods = (await client.pods.list("default")).items
            running = sum(1 for p in pods if p.status.phase == "Running")
            if running >= count:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"only {running}/{count} pods Running")
            await asyncio.sleep(1.0)


def one_run(tree: Path, nodes: int, pods: int, idle: float) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE / "bench"))
    from tinykube.health import wait_healthy
    from tinykube.localetcd import EtcdServer, free_port
    from tinykube.tls import PLAINTEXT

    work = Path(tempfile.mkdtemp(prefix="tinykube-kubeletcost-"))
    etcd = EtcdServer(str(work / "etcd"), die_with_parent=True)
    etcd.start()
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    port = free_port()
    address = f"127.0.0.1:{port}"
    api_cmd = [sys.executable, "-m", "apiserver", "--etcd-servers", etcd.endpoint]
    api_cmd += ["--bind-address", address, "--rest-port", "-1", "--insecure"]
    api_cmd += ["--compaction-interval", "0"]
    kubelet_cmd = ["--dump-line=no", "--instr-atstart=no", sys.executable, "-m", "kubelet"]
    kubelet_cmd += ["--runtime", "fake", "--fake-nodes", str(nodes), "--node-name-prefix", PREFIX]
    kubelet_cmd += ["--apiserver", address, "--insecure", "--port", "0", "--metrics-port", "0"]
    kubelet_cmd += ["--bind-address", "127.0.0.1", "--root-dir", str(work / "kubelet")]
    kubelet_cmd += ["--capacity", "cpu=4,memory=32Gi,pods=110"]
    procs: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any] = {"tree": str(tree), "nodes": nodes, "pods": pods}

    def start_kubelet(name: str, extra: list[str]) -> subprocess.Popen[bytes]:
        with open(work / f"{name}.log", "wb") as log:
            # Each kubelet its own callgrind files: the dumps are numbered per output file.
            out = f"--callgrind-out-file={work / name}.callgrind"
            cmd = ["valgrind", "--tool=callgrind", out, *kubelet_cmd, *extra]
            proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=log)
        procs.append(proc)
        asyncio.run(_nodes_ready(address, nodes, 900.0))
        # The nodes may be Ready from an earlier kubelet: wait for this one's own start.
        deadline = time.monotonic() + 900.0
        while b"registered node(s)" not in (work / f"{name}.log").read_bytes():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"{name} did not start; see {work / name}.log")
            time.sleep(1.0)
        # Every node has renewed its Lease once (and, by default, settled into its rhythm).
        time.sleep(15.0)
        _control("--instr=on", str(proc.pid))
        _control("--zero", str(proc.pid))
        return proc

    def stop(proc: subprocess.Popen[bytes]) -> None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    try:
        with open(work / "apiserver.log", "wb") as log:
            api = subprocess.Popen(api_cmd, cwd=tree, env=env, stdout=log, stderr=log)
        procs.append(api)
        wait_healthy(address, 300, alive=lambda: api.poll() is None, credentials=PLAINTEXT)
        kubelet = start_kubelet("kubelet-idle", [])
        began = time.monotonic()
        time.sleep(idle)
        idle_seconds = time.monotonic() - began
        rate = _dump(work, "kubelet-idle", kubelet.pid) / idle_seconds
        result["idle"] = {
            "seconds": round(idle_seconds, 1),
            "instructions_per_node_second": round(rate / nodes),
            # Each node renews its Lease and checks its status every 10 s.
            "instructions_per_node_period": round(rate / nodes * 10.0),
        }
        stop(kubelet)
        # The pods phase: the same nodes, their Leases and status checks an hour apart (each
        # renewed once as the kubelet starts, before counting), so nothing is subtracted.
        kubelet = start_kubelet(
            "kubelet-pods",
            ["--node-lease-duration-seconds", "14400", "--node-status-update-frequency", "3600"],
        )
        began = time.monotonic()
        asyncio.run(_run_pods(address, nodes, pods, 1800.0))
        seconds = time.monotonic() - began
        instructions = _dump(work, "kubelet-pods", kubelet.pid)
        result["pods_phase"] = {
            "seconds": round(seconds, 1),
            "instructions": instructions,
            "instructions_per_pod": round(instructions / pods),
        }
        print(json.dumps(result), flush=True)
        return result
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        etcd.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, action="append", default=[])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--pods", type=int, default=300)
    p.add_argument("--idle", type=float, default=30.0, help="seconds of the idle phase")
    a = p.parse_args()
    for tree in a.tree or [HERE]:
        one_run(tree.resolve(), a.nodes, a.pods, a.idle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
