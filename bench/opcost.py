"""Instructions per API request, counted by callgrind: a cost a busy machine does not move.

    python bench/opcost.py --count 200                          # this checkout
    python bench/opcost.py --tree /tmp/old --tree . --count 200   # against another commit

CPU seconds per request move by 10-30 % with the machine's load (a shared 2-core machine is
rarely quiet for long), so two commits compared by time need a quiet hour. The number of
instructions the apiserver executes per request hardly moves: this script runs one apiserver
(`--insecure`, from `--tree` through PYTHONPATH, so an older commit's `git archive` runs with
this venv) under `valgrind --tool=callgrind` beside a plain etcd, and a driver process (this
file with `--drive`, using the tree's own client) sends one kind of request at a time, one
after another (no concurrency: no batching, so the count is the same every run):

- `create`: Pod Create, the harness's pod (requests, a scheduler nobody serves);
- `bind`: Pod Bind to a node, one pod per call;
- `status`: Pod UpdateStatus to Running, as a kubelet reports a started pod;
- `lease`: Lease Update in kube-node-lease (renewTime), as a kubelet's heartbeat;
- `create-stream`, `status-stream`, `lease-stream`: the same requests as messages of one
  Pods/CreateStream, Pods/UpdateStatusStream and Leases/UpdateStream (`Client(pipeline=True)`),
  one at a time too (new pods, bound between the phases; skipped for a tree without them).

Before each phase the counters are zeroed (`callgrind_control --zero`), after it dumped
(`--dump`); a phase's instructions over its requests is the figure, for every thread of the
apiserver (gRPC's included). Under callgrind the apiserver runs 30-60x slower: 200 requests
a phase take a few minutes on a loaded machine. Prints one JSON line per tree; nothing is
asserted. Needs valgrind (Debian's `valgrind` package).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
PHASES = (
    "create",
    "bind",
    "status",
    "lease",
    "create-stream",
    "status-stream",
    "lease-stream",
)
LEASES = 50


# ---- the driver (runs with the tree under test on PYTHONPATH) ---------------------------------


async def drive(address: str, count: int) -> None:
    from google.protobuf import json_format

    from tinykube.client import Client
    from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

    def wait_for_go(phase: str) -> None:
        print(f"ready {phase}", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("the parent did not say go")

    def done(phase: str) -> None:
        print(f"done {phase}", flush=True)

    def new_pod(name: str) -> Any:
        pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
        pod.metadata.name, pod.metadata.namespace = name, "default"
        pod.metadata.labels["app"] = "cost"
        pod.spec.schedulerName = "nobody"
        c = pod.spec.containers.add(name="c", image="registry.k8s.io/pause:3.10")
        c.resources.requests["cpu"] = "100m"
        c.resources.requests["memory"] = "500Mi"
        return pod

    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    async with Client(address, timeout=600.0) as client:
        node = node_pb2.Node(apiVersion="v1", kind="Node")
        node.metadata.name = "node-0"
        for resources in (node.status.capacity, node.status.allocatable):
            resources.update({"cpu": "64", "memory": "256Gi", "pods": "110000"})
        await client.nodes.create(node)
        pods: list[Any] = []
        wait_for_go("create")
        for i in range(count):
            pods.append(await client.pods.create(new_pod(f"cost-{i:05d}")))
        done("create")

        wait_for_go("bind")
        for pod in pods:
            await client.bind("default", pod.metadata.name, "node-0", pod.metadata.uid)
        done("bind")

        current = [await client.pods.get(p.metadata.name, "default") for p in pods]
        wait_for_go("status")
        # As JSON, so fields an older tree's PodStatus lacks are left out.
        status = {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}],
            "startTime": stamp,
            "qosClass": "Burstable",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": stamp}
                for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "imageID": "registry.k8s.io/pause@sha256:" + "0" * 64,
                    "containerID": "fake://0",
                    "ready": True,
                    "started": True,
                    "state": {"running": {"startedAt": stamp}},
                }
            ],
        }
        for pod in current:
            json_format.ParseDict(status, pod.status, ignore_unknown_fields=True)
            await client.pods.update_status(pod)
        done("status")
        streams = hasattr(client.pods, "pipelined")

        leases = []
        for i in range(LEASES):
            lease = lease_pb2.Lease(apiVersion="coordination.k8s.io/v1", kind="Lease")
            lease.metadata.name, lease.metadata.namespace = f"node-{i}", "kube-node-lease"
            lease.spec.holderIdentity = f"node-{i}"
            lease.spec.leaseDurationSeconds = 40
            lease.spec.renewTime.FromDatetime(now)
            leases.append(await client.leases.create(lease))
        wait_for_go("lease")
        for i in range(count):
            lease = leases[i % LEASES]
            renewed = now + datetime.timedelta(seconds=10 * (i // LEASES + 1))
            lease.spec.renewTime.FromDatetime(renewed)
            leases[i % LEASES] = await client.leases.update(lease)
        done("lease")

        if not streams:
            for phase in ("create-stream", "status-stream", "lease-stream"):
                print(f"skip {phase}", flush=True)
            return
        pods_s, leases_s = client.pods.pipelined(), client.leases.pipelined()
        # Open both streams (and pass their first-answer wait) before the measured phases.
        warm = await pods_s.create(new_pod("cost-s-warm"))
        await client.bind("default", warm.metadata.name, "node-0", warm.metadata.uid)
        warm = await client.pods.get(warm.metadata.name, "default")
        json_format.ParseDict(status, warm.status, ignore_unknown_fields=True)
        await pods_s.update_status(warm)
        streamed = []
        wait_for_go("create-stream")
        for i in range(count):
            streamed.append(await pods_s.create(new_pod(f"cost-s-{i:05d}")))
        done("create-stream")
        for pod in streamed:
            await client.bind("default", pod.metadata.name, "node-0", pod.metadata.uid)
        current = [await client.pods.get(p.metadata.name, "default") for p in streamed]
        wait_for_go("status-stream")
        for pod in current:
            json_format.ParseDict(status, pod.status, ignore_unknown_fields=True)
            await pods_s.update_status(pod)
        done("status-stream")
        lease = leases[0]
        lease.spec.renewTime.FromDatetime(now)
        leases[0] = await leases_s.update(lease)
        wait_for_go("lease-stream")
        for i in range(count):
            lease = leases[i % LEASES]
            renewed = now + datetime.timedelta(seconds=10 * (i // LEASES + count + 1))
            lease.spec.renewTime.FromDatetime(renewed)
            leases[i % LEASES] = await leases_s.update(lease)
        done("lease-stream")


# ---- the parent ------------------------------------------------------------------------------


def _summary(dump: Path) -> int:
    """The dump's total instruction count (callgrind's `summary:` line)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {dump}")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def one_run(
    tree: Path, count: int, valgrind: bool = True, cprofile: Path | None = None
) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from tinykube.health import wait_healthy
    from tinykube.localetcd import EtcdServer, free_port
    from tinykube.tls import PLAINTEXT

    work = Path(tempfile.mkdtemp(prefix="tinykube-opcost-"))
    etcd = EtcdServer(str(work / "etcd"), die_with_parent=True)
    etcd.start()
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    port = free_port()
    out = work / "callgrind.out"
    # Uninstrumented (several times faster) until the first phase turns it on.
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-line=no"]
    cmd += ["--instr-atstart=no"]
    if not valgrind:
        cmd = []
    cmd += [sys.executable]
    if cprofile is not None:
        cprofile.mkdir(parents=True, exist_ok=True)
        cmd += ["-m", "cProfile", "-o", str(cprofile / f"{tree.name}.pstats")]
    cmd += ["-m", "apiserver", "--etcd-servers", etcd.endpoint]
    cmd += ["--bind-address", f"127.0.0.1:{port}", "--rest-port", "-1", "--insecure"]
    # No periodic work of its own during a phase: compaction off.
    cmd += ["--compaction-interval", "0"]
    with open(work / "apiserver.log", "wb") as log:
        api = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    driver: subprocess.Popen[str] | None = None
    result: dict[str, Any] = {"tree": str(tree), "count": count, "nproc": os.cpu_count()}
    try:
        address = f"127.0.0.1:{port}"
        wait_healthy(address, 900, alive=lambda: api.poll() is None, credentials=PLAINTEXT)
        driver = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--drive", address, str(count)],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert driver.stdin is not None and driver.stdout is not None
        if valgrind:
            _callgrind_control("--instr=on", str(api.pid))
        for phase in PHASES:
            line = driver.stdout.readline().strip()
            if line == f"skip {phase}":
                result[phase] = None
                continue
            if line != f"ready {phase}":
                raise SystemExit(f"driver: expected 'ready {phase}', got {line!r}")
            if valgrind:
                _callgrind_control("--zero", str(api.pid))
            began, cpu = time.monotonic(), _cpu_seconds(api.pid)
            driver.stdin.write("go\n")
            driver.stdin.flush()
            line = driver.stdout.readline().strip()
            if line != f"done {phase}":
                raise SystemExit(f"driver: expected 'done {phase}', got {line!r}")
            seconds = round(time.monotonic() - began, 1)
            if not valgrind:
                used = _cpu_seconds(api.pid) - cpu
                result[phase] = {
                    "cpu_us_per_request": round(used / count * 1e6),
                    "seconds": seconds,
                }
                continue
            before = set(work.glob("callgrind.out*"))
            _callgrind_control("--dump", str(api.pid))
            (dump,) = set(work.glob("callgrind.out*")) - before
            instructions = _summary(dump)
            result[phase] = {
                "instructions_per_request": round(instructions / count),
                "seconds_under_callgrind": seconds,
            }
            print(f"{tree.name} {phase}: {instructions / count / 1e6:.2f} M/request",
                  file=sys.stderr, flush=True)  # fmt: skip
        driver.wait(60)
        return result
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        api.terminate()
        try:
            api.wait(60)
        except subprocess.TimeoutExpired:
            api.kill()
            api.wait()
        etcd.stop()


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--drive":
        asyncio.run(drive(sys.argv[2], int(sys.argv[3])))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--tree", type=Path, action="append", default=[], help="checkouts to run")
    p.add_argument("--count", type=int, default=200, help="requests per phase")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument(
        "--no-valgrind",
        action="store_true",
        help="run the apiserver plainly and report CPU microseconds per request instead",
    )
    p.add_argument(
        "--cprofile",
        type=Path,
        help="run the apiserver under cProfile (no valgrind), writing DIR/<tree>.pstats: "
        "call counts per function are exact, so two trees' counts show what a request does more",
    )
    a = p.parse_args()
    trees = [t.resolve() for t in a.tree] or [HERE]
    for _ in range(a.runs):
        for tree in trees:
            valgrind = not (a.no_valgrind or a.cprofile)
            print(json.dumps(one_run(tree, a.count, valgrind, a.cprofile)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
