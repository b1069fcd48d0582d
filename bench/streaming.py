"""exec round trip and port-forward throughput through `tinykube up` (process runtime).

    python -m bench.streaming --kubectl-execs 200 --client-execs 1000 --megabytes 200

Starts `tinykube up --free-ports` in a temporary directory, runs a pod `box` (sleep) and a pod
`files` serving a file of `--megabytes` MiB with `python3 -m http.server`, then measures:

- `kubectl exec box -- true`, one after another: wall time of each kubectl process (its own
  start-up, discovery cache, the pod GET, the WebSocket upgrade, the kubelet's fork and exec);
- the Python client's `stream(connect_get_namespaced_pod_exec, command=["true"])`, one after
  another, in this process (one TLS connection per call, as the client makes);
- `kubectl port-forward pod/files L:P` and one download of the file through it: MB/s.

Prints p50/p99 and writes bench/results/streaming-<stamp>.json. Stops the cluster at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
READY = "Press Ctrl-C to stop."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 0.5) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "mean_ms": round(statistics.fmean(values) * 1000, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kubectl-execs", type=int, default=200)
    p.add_argument("--client-execs", type=int, default=1000)
    p.add_argument("--megabytes", type=int, default=200)
    args = p.parse_args()
    data = Path(tempfile.mkdtemp(prefix="tinykube-bench-streaming-"))
    up = subprocess.Popen(
        [str(BIN / "tinykube"), "up", "--free-ports", "--data-dir", str(data / "up")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert up.stdout is not None
        for line in up.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    while (line := lines.get(timeout=180)) != READY:
        if line is None:
            raise SystemExit("tinykube up exited")
    kubeconfig = data / "up" / "kubeconfig"
    kubectl = [str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig)]
    results: dict[str, Any] = {"nproc": os.cpu_count(), "args": vars(args)}
    try:
        blob = data / "blob.bin"
        with blob.open("wb") as f:
            for _ in range(args.megabytes):
                f.write(os.urandom(1024 * 1024))
        port = free_port()
        manifest = f"""
apiVersion: v1
kind: Pod
metadata: {{name: box}}
spec:
  containers:
  - {{name: main, image: busybox, command: [sleep, "86400"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: files}}
spec:
  containers:
  - name: main
    image: python:3
    command: [{sys.executable}, -m, http.server, "{port}", --directory, "{data}"]
    readinessProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1}}
"""
        subprocess.run([*kubectl, "apply", "-f", "-"], input=manifest, text=True, check=True)
        subprocess.run(
            [*kubectl, "wait", "--for=condition=Ready", "pod/box", "pod/files", "--timeout=90s"],
            check=True,
        )

        times: list[float] = []
        for _ in range(args.kubectl_execs):
            t0 = time.perf_counter()
            subprocess.run([*kubectl, "exec", "box", "--", "true"], check=True)
            times.append(time.perf_counter() - t0)
        results["kubectl_exec_true"] = summary(times)
        print("kubectl exec -- true:", results["kubectl_exec_true"], flush=True)

        from kubernetes import client, config
        from kubernetes.stream import stream

        api = client.CoreV1Api(
            config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        )
        times = []
        for _ in range(args.client_execs):
            t0 = time.perf_counter()
            stream(
                api.connect_get_namespaced_pod_exec,
                "box",
                "default",
                command=["true"],
                stdout=True,
                stderr=True,
                stdin=False,
                tty=False,
            )
            times.append(time.perf_counter() - t0)
        results["python_client_exec_true"] = summary(times)
        print("Python client exec true:", results["python_client_exec_true"], flush=True)

        local = free_port()
        pf = subprocess.Popen(
            [*kubectl, "port-forward", "pod/files", f"{local}:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert pf.stdout is not None
            assert pf.stdout.readline().startswith("Forwarding from")
            t0 = time.perf_counter()
            got = 0
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/blob.bin", timeout=120) as r:
                while chunk := r.read(1 << 20):
                    got += len(chunk)
            elapsed = time.perf_counter() - t0
        finally:
            pf.terminate()
            pf.wait(30)
        assert got == args.megabytes * 1024 * 1024, got
        results["port_forward"] = {
            "bytes": got,
            "seconds": round(elapsed, 2),
            "MB_per_s": round(got / 1e6 / elapsed, 1),
        }
        print("port-forward download:", results["port_forward"], flush=True)
    finally:
        up.send_signal(2)
        up.wait(90)
        subprocess.run(["rm", "-rf", str(data)], check=False)
    out = ROOT / "bench" / "results" / f"streaming-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
