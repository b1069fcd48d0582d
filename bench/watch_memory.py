"""Apiserver memory with watchers that never read: bounded by bytes, and given back (issue 28).

Starts etcd and an apiserver (tinykube.launcher.LocalCluster, plaintext, nothing else), creates
one pod with a 200 KiB annotation, opens N gRPC Pods/WatchBatch streams that never read (each on
its own channel, as N slow clients), then updates the pod 3,000 times with a new annotation
value each time. It reads the apiserver's VmRSS from /proc before, right after the updates, and
then cancels the watchers and reads it again `--settle` seconds later. Each case is a fresh
cluster; `--watchers 0` is the same writes with nobody watching.

Target (issue 28): with 50 slow watchers, under 350 MB after the updates and under it again
within 30 s of the watchers going away.

    python -m bench.watch_memory [--updates 3000] [--watchers 50] [--annotation-bytes 204800]
                                 [--settle 30] [--compare] [--json out.json]

`--compare` runs the case without watchers too. Takes minutes at full size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass

import grpc

from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.v1 import meta_pb2, pod_pb2, pod_pb2_grpc


def rss_mb(pid: int) -> float:
    """The process's resident set size in MB (VmRSS of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Result:
    watchers: int
    updates: int
    annotation_bytes: int
    rss_before_mb: float
    rss_after_mb: float
    rss_settled_mb: float
    settle_seconds: float
    seconds: float


async def _case(
    address: str, pid: int, watchers: int, count: int, size: int, settle: float
) -> Result:
    started = time.monotonic()
    before = rss_mb(pid)
    channels: list[grpc.aio.Channel] = []
    calls: list[grpc.aio.UnaryStreamCall[meta_pb2.WatchRequest, pod_pb2.PodWatchEventBatch]] = []
    async with Client(address, timeout=30.0) as client:
        pod = await client.pods.create(
            pod_pb2.Pod(
                metadata=meta_pb2.ObjectMeta(
                    name="big", namespace="default", annotations={"blob": "0" * size}
                ),
                spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="busybox")]),
            )
        )
        start = pod.metadata.resourceVersion
        for _ in range(watchers):
            channel = grpc.aio.insecure_channel(address)
            channels.append(channel)
            stub = pod_pb2_grpc.PodsStub(channel)
            # Started, never read: the client stops taking data once its window is full.
            calls.append(stub.WatchBatch(meta_pb2.WatchRequest(resourceVersion=start)))
        for i in range(count):
            # A different value each time, so no two versions share their bytes.
            pod.metadata.annotations["blob"] = f"{i:08d}" + "x" * (size - 8)
            pod = await client.pods.update(pod)
        after = rss_mb(pid)
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()
        await asyncio.sleep(settle)
        settled = rss_mb(pid)
    return Result(watchers, count, size, before, after, settled, settle, time.monotonic() - started)


def run_case(watchers: int, count: int, size: int, settle: float) -> Result:
    with tempfile.TemporaryDirectory(prefix="tinykube-bench-") as work_dir:
        cluster = LocalCluster(
            work_dir, insecure=True, scheduler=False, controller=False, kubelets=()
        )
        with cluster:
            pid = cluster.processes["apiserver"].pid
            return asyncio.run(_case(cluster.api_address, pid, watchers, count, size, settle))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--watchers", type=int, default=50)
    parser.add_argument("--annotation-bytes", type=int, default=200 * 1024)
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--compare", action="store_true", help="also run without watchers")
    parser.add_argument("--json", default="", help="write the results to this file")
    args = parser.parse_args(argv)
    cases = [args.watchers] + ([0] if args.compare and args.watchers else [])
    results = []
    for watchers in cases:
        r = run_case(watchers, args.updates, args.annotation_bytes, args.settle)
        results.append(r)
        print(
            f"{watchers} slow watchers, {r.updates} updates of {r.annotation_bytes // 1024} KiB: "
            f"apiserver VmRSS {r.rss_before_mb:.0f} MB before, {r.rss_after_mb:.0f} MB after, "
            f"{r.rss_settled_mb:.0f} MB {r.settle_seconds:g} s after the watchers went away "
            f"({r.seconds:.0f} s, nproc {os.cpu_count()})",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
