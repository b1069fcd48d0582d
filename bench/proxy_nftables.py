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


def request_latency(requests: int) -> dict[str, float]:
    """TCP connect + one request + reply + close, p50/p99 in ms: to a server on 10.244.0.1:8080
    directly, and through cluster IP 10.96.0.1:80 (one endpoint: that server), loopback in this
    namespace (the NAT's cost, not a network's)."""
    import socket
    import threading

    for cmd in (
        ["ip", "link", "set", "lo", "up"],
        ["ip", "addr", "add", "10.244.0.1/32", "dev", "lo"],
        ["ip", "route", "add", "10.96.0.0/12", "dev", "lo"],
    ):
        subprocess.run(cmd, check=True)
    srv = socket.socket()
    srv.bind(("10.244.0.1", 8080))
    srv.listen(128)

    def serve() -> None:
        while True:
            conn, _ = srv.accept()
            conn.recv(64)
            conn.sendall(b"ok")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()

    def timed(host: str, port: int) -> list[float]:
        out: list[float] = []
        for _ in range(requests):
            t0 = time.perf_counter()
            with socket.create_connection((host, port), timeout=5) as c:
                c.sendall(b"GET")
                c.recv(64)
            out.append((time.perf_counter() - t0) * 1000)
        out.sort()
        return out

    svc = service_pb2.Service()
    svc.metadata.name, svc.metadata.namespace = "lat", "bench"
    svc.spec.clusterIP = "10.96.0.1"
    svc.spec.ports.add(name="", port=80, protocol="TCP")
    eps = endpointslice_pb2.EndpointSlice(addressType="IPv4")
    eps.metadata.name, eps.metadata.namespace = "lat-x", "bench"
    eps.metadata.labels["kubernetes.io/service-name"] = "lat"
    eps.ports.add(name="", port=8080, protocol="TCP")
    eps.endpoints.add(addresses=["10.244.0.1"]).conditions.ready = True
    proxier = NftablesProxier(Metrics(), table="tinykube-proxy-latency", min_sync_period=0.0)
    asyncio.run(proxier.sync([svc], {"bench/lat": [eps]}, ""))
    direct = timed("10.244.0.1", 8080)
    via = timed("10.96.0.1", 80)
    asyncio.run(proxier.close())

    def pct(xs: list[float], q: float) -> float:
        return round(xs[min(len(xs) - 1, int(len(xs) * q))], 3)

    return {
        "direct_p50_ms": pct(direct, 0.5),
        "direct_p99_ms": pct(direct, 0.99),
        "cluster_ip_p50_ms": pct(via, 0.5),
        "cluster_ip_p99_ms": pct(via, 0.99),
    }


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
    p.add_argument("--requests", type=int, default=0, help="also time N requests (latency)")
    a = p.parse_args()
    if os.environ.get("TINYKUBE_BENCH_NETNS") != "1":
        env = {**os.environ, "TINYKUBE_BENCH_NETNS": "1"}
        sys.exit(subprocess.call(["unshare", "-n", sys.executable, "-m", "bench.proxy_nftables",
                                  *sys.argv[1:]], env=env))  # fmt: skip
    result = asyncio.run(run(a.services, a.endpoints, a.changes))
    if a.requests:
        result.update(request_latency(a.requests))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
