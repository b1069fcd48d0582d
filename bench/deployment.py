"""Benchmark of a Deployment's rollout on hollow nodes: time to all available, then a full
rolling update.

    python bench/deployment.py --replicas 1000 --nodes 100 --runs 3

Each run starts a fresh cluster of real OS processes through `tinykube.launcher.LocalCluster`
(etcd, apiserver, scheduler, controller manager) and one fake kubelet process hosting `--nodes`
hollow nodes (pods turn Running and Ready at once, as KWOK's). It creates a Deployment of
`--replicas` pods (RollingUpdate, 25% surge, 25% unavailable) and measures the time from its
Create until status.availableReplicas == replicas with one ReplicaSet; then it changes the pod
template (an annotation and the image, as `kubectl set image` does) and measures until the
rollout is complete: updatedReplicas == availableReplicas == replicas, the old ReplicaSet at 0,
observedGeneration current, Progressing=NewReplicaSetAvailable. It samples, every 0.2 s of
the rollout, the pods of the Deployment (total and available, from the ReplicaSets' status) and
reports the extremes against the bounds replicas - maxUnavailable and replicas + maxSurge.

Output: one JSON line per run and, with --runs > 1, the medians; with --out, a JSON file.
Concurrency model: one asyncio loop polls the Deployment and its ReplicaSets through the typed
gRPC client; blocking launcher calls run in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinykube.client import Client
from tinykube.launcher import LocalCluster
from tinykube.meta import int_or_string_value
from tinykube.v1 import deployment_pb2

CAPACITY = "cpu=64,memory=256Gi,pods=250"
POLL = 0.2


def deployment(replicas: int) -> deployment_pb2.Deployment:
    d = deployment_pb2.Deployment(apiVersion="apps/v1", kind="Deployment")
    d.metadata.name = "bench"
    d.metadata.namespace = "default"
    d.spec.replicas = replicas
    d.spec.selector.matchLabels["app"] = "bench"
    d.spec.template.metadata.labels["app"] = "bench"
    c = d.spec.template.spec.containers.add(name="app", image="bench:1")
    c.resources.requests["cpu"] = "10m"
    ru = d.spec.strategy.rollingUpdate
    d.spec.strategy.type = "RollingUpdate"
    ru.maxSurge.CopyFrom(int_or_string_value("25%"))
    ru.maxUnavailable.CopyFrom(int_or_string_value("25%"))
    return d


class Probe:
    """Polls the Deployment and its ReplicaSets; keeps the extremes seen during a rollout."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.max_pods = 0
        self.min_available = math.inf
        self.samples = 0

    async def state(self) -> tuple[deployment_pb2.Deployment, list[Any]]:
        d = await self.client.deployments.get("bench", "default")
        rss = [
            rs
            for rs in (await self.client.replica_sets.list("default")).items
            if any(r.uid == d.metadata.uid for r in rs.metadata.ownerReferences)
        ]
        return d, rss

    async def until(self, done: Any, limit: float, track: bool) -> float:
        began = time.monotonic()
        while True:
            d, rss = await self.state()
            if track:
                self.samples += 1
                self.max_pods = max(self.max_pods, sum(rs.status.replicas for rs in rss))
                available = sum(rs.status.availableReplicas for rs in rss)
                self.min_available = min(self.min_available, available)
            if done(d, rss):
                return time.monotonic() - began
            if time.monotonic() - began > limit:
                raise TimeoutError(f"not done after {limit:g}s: {d.status}")
            await asyncio.sleep(POLL)


def _progressing_reason(d: deployment_pb2.Deployment) -> str:
    return next((c.reason for c in d.status.conditions if c.type == "Progressing"), "")


async def one_run(replicas: int, nodes: int, limit: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tinykube-bench-deploy-"))
    cluster = LocalCluster(
        work,
        kubelets=(),
        kubelet_runtime="fake",
        extra_args={
            "scheduler": ["--leader-elect", "false"],
            "controller": ["--leader-elect", "false"],
        },
        start_timeout=120.0,
    )
    await asyncio.to_thread(cluster.start)
    try:
        args = ["--fake-nodes", str(nodes), "--node-name-prefix", "hollow-", "--capacity", CAPACITY]
        await asyncio.to_thread(cluster.start_component, "kubelet-hollow-0", args)
        async with Client(cluster.api_address, timeout=60.0, credentials=cluster.credentials) as c:

            async def ready_nodes() -> int:
                items = (await c.nodes.list()).items
                return sum(
                    1
                    for n in items
                    if any(x.type == "Ready" and x.status == "True" for x in n.status.conditions)
                )

            began = time.monotonic()
            while await ready_nodes() < nodes:
                if time.monotonic() - began > limit:
                    raise TimeoutError("nodes not Ready")
                await asyncio.sleep(0.5)

            probe = Probe(c)
            created = time.monotonic()
            await c.deployments.create(deployment(replicas))

            def available(d: deployment_pb2.Deployment, rss: list[Any]) -> bool:
                return d.status.availableReplicas == replicas and len(rss) == 1

            await probe.until(available, limit, track=False)
            to_available = time.monotonic() - created

            d = await c.deployments.get("bench", "default")
            d.spec.template.spec.containers[0].image = "bench:2"
            d.spec.template.metadata.annotations["bench/rollout"] = "2"
            updated = await c.deployments.update(d)
            generation = updated.metadata.generation
            began = time.monotonic()

            def complete(d: deployment_pb2.Deployment, rss: list[Any]) -> bool:
                st = d.status
                return (
                    st.observedGeneration >= generation
                    and st.updatedReplicas == st.availableReplicas == st.replicas == replicas
                    and len(rss) == 2
                    and sum(rs.spec.replicas for rs in rss) == replicas
                    and _progressing_reason(d) == "NewReplicaSetAvailable"
                )

            await probe.until(complete, limit, track=True)
            rollout = time.monotonic() - began
    finally:
        await asyncio.to_thread(cluster.stop)
    surge = math.ceil(replicas * 25 / 100)
    unavailable = replicas * 25 // 100
    return {
        "replicas": replicas,
        "nodes": nodes,
        "seconds_to_available": round(to_available, 2),
        "seconds_rolling_update": round(rollout, 2),
        "max_pods_seen": probe.max_pods,
        "pod_ceiling": replicas + surge,
        "min_available_seen": probe.min_available,
        "available_floor": replicas - unavailable,
        "samples": probe.samples,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=900.0, help="per phase, seconds")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    a = p.parse_args(argv)
    results = []
    for _ in range(a.runs):
        result = asyncio.run(one_run(a.replicas, a.nodes, a.timeout))
        print(json.dumps(result), flush=True)
        results.append(result)
    summary: dict[str, Any] = {"runs": results}
    if a.runs > 1:
        summary["median"] = {
            k: statistics.median(r[k] for r in results)
            for k in ("seconds_to_available", "seconds_rolling_update")
        }
        print(json.dumps(summary["median"]))
    if a.out:
        a.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
