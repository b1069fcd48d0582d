"""Apiserver memory under updates of a big object: the watch cache's window must stay bounded.

Starts etcd and an apiserver (tinykube.launcher.LocalCluster, nothing else), creates one pod with
a 200 KiB annotation (under Kubernetes' 256 KiB annotation limit) and updates it 3,000 times,
each time with a new annotation value, reading the apiserver's VmRSS from /proc before and
after. Each run is a fresh cluster; the figure reported is the median of the runs.

    python -m bench.watchcache_memory [--updates 3000] [--runs 3] [--annotation-bytes 204800]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile

from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.v1 import meta_pb2, pod_pb2


def rss_mb(pid: int) -> float:
    """The process's resident set size in MB (VmRSS of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def updates(address: str, count: int, size: int) -> None:
    async with Client(address, timeout=30.0) as client:
        pod = await client.pods.create(
            pod_pb2.Pod(
                metadata=meta_pb2.ObjectMeta(
                    name="big", namespace="default", annotations={"blob": "0" * size}
                ),
                spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="busybox")]),
            )
        )
        for i in range(count):
            # A different value each time, so no two versions share their bytes.
            pod.metadata.annotations["blob"] = f"{i:08d}" + "x" * (size - 8)
            pod = await client.pods.update(pod)


def run_once(count: int, size: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="tinykube-bench-") as work_dir:
        # plaintext, as before TLS: this measures the API itself (bench/harness.py
        # compares TLS with --insecure)
        cluster = LocalCluster(
            work_dir, insecure=True, scheduler=False, controller=False, kubelets=()
        )
        with cluster:
            pid = cluster.processes["apiserver"].pid
            before = rss_mb(pid)
            asyncio.run(updates(cluster.api_address, count, size))
            return before, rss_mb(pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--annotation-bytes", type=int, default=200 * 1024)
    args = parser.parse_args(argv)
    results = []
    for run in range(args.runs):
        before, after = run_once(args.updates, args.annotation_bytes)
        results.append((before, after))
        print(f"run {run + 1}: apiserver VmRSS {before:.0f} MB before, {after:.0f} MB after")
    print(
        f"median of {args.runs} (nproc {os.cpu_count()}): "
        f"{statistics.median(b for b, _ in results):.0f} MB before, "
        f"{statistics.median(a for _, a in results):.0f} MB after {args.updates} updates of a "
        f"{args.annotation_bytes // 1024} KiB annotation"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
