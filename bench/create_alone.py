"""What one pod Create costs the apiserver and etcd: etcd, one apiserver and the pod creator.

    python bench/create_alone.py --count 10000 --concurrency 32 --runs 3
    python bench/create_alone.py --tree /tmp/old-checkout   # another commit's apiserver

No scheduler, controller manager or kubelet runs, and the pods name a scheduler nobody serves,
so nothing but the Creates reaches the apiserver (the harness's "api Create alone" ceiling
without the cluster around it; a run takes about 15 s). Each run starts a fresh etcd
(tinykube.localetcd) and `python -m apiserver --insecure` from `--tree` (default: this
checkout, through PYTHONPATH, so an older commit's `git archive` compares with the same venv),
then `bench/podcreator.py` of that tree. Figures: Creates per second, and the CPU seconds the
apiserver and etcd spent during the creator's run (from /proc), also per Create. Interleave
trees (`--tree A --tree B`, runs alternate) to compare: figures move by ±10 % from one minute to
the next on a shared 2-core machine.

Prints one JSON line per run and a median line per tree; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tinykube.health import wait_healthy
from tinykube.localetcd import EtcdServer, free_port
from tinykube.tls import PLAINTEXT

sys.path.insert(0, str(Path(__file__).resolve().parent))
# bench/ is a folder of scripts, not a package: its helpers import by path.
import sysmetrics

HERE = Path(__file__).resolve().parent.parent
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "template"},
    "spec": {
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
            }
        ]
    },
}


def cpu_seconds(pid: int) -> float:
    sample = sysmetrics.proc_sample(pid)
    if sample is None:
        raise SystemExit(f"process {pid} exited during the run")
    return sample.cpu_seconds


def one_run(tree: Path, count: int, concurrency: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="tinykube-create-alone-"))
    etcd = EtcdServer(str(work / "etcd"), die_with_parent=True)
    etcd.start()
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    port = free_port()
    cmd = [sys.executable, "-m", "apiserver", "--etcd-servers", etcd.endpoint]
    cmd += ["--bind-address", f"127.0.0.1:{port}", "--rest-port", "-1", "--insecure"]
    with open(work / "apiserver.log", "wb") as log:
        api = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # SERVING: bootstrap objects written, watch caches synced.
        address = f"127.0.0.1:{port}"
        wait_healthy(address, 60, alive=lambda: api.poll() is None, credentials=PLAINTEXT)
        template = work / "pod.json"
        template.write_text(json.dumps(POD))
        assert etcd.process is not None
        api0, etcd0 = cpu_seconds(api.pid), cpu_seconds(etcd.process.pid)
        creator = [sys.executable, str(tree / "bench" / "podcreator.py")]
        creator += ["--apiserver", address, "--template", str(template)]
        creator += ["--namespace", "default", "--count", str(count)]
        creator += ["--concurrency", str(concurrency), "--scheduler-name", "nobody"]
        out = subprocess.run(creator, cwd=tree, env=env, capture_output=True, text=True)
        api1, etcd1 = cpu_seconds(api.pid), cpu_seconds(etcd.process.pid)
        lines = out.stdout.strip().splitlines()
        made: dict[str, object] = json.loads(lines[-1]) if lines else {"error": out.stderr}
        return {
            "tree": str(tree),
            "creates_per_second": made.get("per_second"),
            "errors": made.get("errors"),
            "apiserver_cpu_seconds": round(api1 - api0, 2),
            "apiserver_cpu_us_per_create": round((api1 - api0) / count * 1e6),
            "etcd_cpu_seconds": round(etcd1 - etcd0, 2),
            "creator_cpu_seconds": made.get("cpu_seconds"),
            "nproc": os.cpu_count(),
            "load_average": sysmetrics.load_average(),
        }
    finally:
        api.terminate()
        api.wait(15)
        etcd.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--tree", type=Path, action="append", default=[], help="checkouts to run")
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    trees = [t.resolve() for t in a.tree] or [HERE]
    results: dict[Path, list[dict[str, object]]] = {t: [] for t in trees}
    for _ in range(a.runs):
        for tree in trees:
            r = one_run(tree, a.count, a.concurrency)
            results[tree].append(r)
            print(json.dumps(r), flush=True)
    for tree, runs in results.items():
        median = {
            key: statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]
            for key in ("creates_per_second", "apiserver_cpu_us_per_create", "etcd_cpu_seconds")
        }
        print(json.dumps({"tree": str(tree), "runs": len(runs), "median": median}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
