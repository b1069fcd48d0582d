"""Rule sync latency of the proxy's nftables mode: N Services with E endpoints each, the full
first sync, then one endpoint's readiness flipped per sync (the partial transaction kube-proxy
writes after an endpoint change), timed end to end: ruleset built, text rendered, `nft -f -`
applied. Runs in a throwaway network namespace (re-executes itself under `unshare -n`), so the
host's rules are never touched. Needs root and nft.

    .venv/bin/python -m bench.proxy_nftables --services 1000 --endpoints 10 --changes 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from kubelet.proxy.metrics import Metrics
from kubelet.proxy.nftables import NftablesProxier
from tinykube.v1 import endpointslice_pb2, service_pb2


def fixture(services: int, endpoints: int) -> tuple[list[Any], dict[str, list[Any]]]:
    svcs: list[Any] = []
    slices: dict[str, list[Any]] = {}
    for i in range(services):
        name = f"svc-{i}"
        svc = service_pb2.Service()
        svc.metadata.name, svc.metadata.namespace = name, "bench"
        svc.spec.clusterIP = f"10.96.{i // 250}.{i % 250 + 1}"
        svc.spec.type = "NodePort" if i % 10 == 0 else "ClusterIP"
        svc.spec.ports.add(name="http", port=80, protocol="TCP", nodePort=30000 + i)
        svcs.append(svc)
        eps = endpointslice_pb2.EndpointSlice()
        eps.metadata.name, eps.metadata.namespace = f"{name}-x", "bench"
        eps.metadata.labels["kubernetes.io/service-name"] = name
        eps.addressType = "IPv4"
        eps.ports.add(name="http", port=8080, protocol="TCP")
        for j in range(endpoints):
            n = i * endpoints + j
            e = eps.endpoints.add(addresses=[f"10.244.{n // 250}.{n % 250 + 1}"])
            e.conditions.ready = True
        slices[f"bench/{name}"] = [eps]
    return svcs, slices


async def run(services: int, endpoints: int, changes: int) -> dict[str, Any]:
    svcs, slices = fixture(services, endpoints)
    proxier = NftablesProxier(Metrics(), table="tinykube-proxy-bench", min_sync_period=0.0)
    t0 = time.perf_counter()
    await proxier.sync(svcs, slices, "192.168.77.1")
    full = time.perf_counter() - t0
    assert proxier.applied is not None, "the full sync failed"
    partial: list[float] = []
    for k in range(changes):
        eps = slices[f"bench/svc-{(k * 37) % services}"][0]
        c = eps.endpoints[k % endpoints].conditions
        c.ready = not c.ready
        t0 = time.perf_counter()
        await proxier.sync(svcs, slices, "192.168.77.1")
        partial.append(time.perf_counter() - t0)
        assert proxier.applied is not None, "a partial sync failed"
    await proxier.close()
    partial.sort()
    return {
        "services": services,
        "endpoints": services * endpoints,
        "chains": services * (endpoints + 1),
        "full_sync_s": round(full, 3),
        "partial_sync_p50_s": round(statistics.median(partial), 3),
        "partial_sync_p99_s": round(partial[min(len(partial) - 1, int(len(partial) * 0.99))], 3),
        "changes": changes,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--endpoints", type=int, default=10)
    p.add_argument("--changes", type=int, default=50)
    a = p.parse_args()
    if os.environ.get("TINYKUBE_BENCH_NETNS") != "1":
        env = {**os.environ, "TINYKUBE_BENCH_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-n", sys.executable, "-m", "bench.proxy_nftables",
                                  *sys.argv[1:]], env=env))  # fmt: skip
    print(json.dumps(asyncio.run(run(a.services, a.endpoints, a.changes))))


if __name__ == "__main__":
    main()
