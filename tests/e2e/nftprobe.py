"""Run inside a fresh network namespace (`unshare -n python -m tests.e2e.nftprobe`): the
nftables proxier programs the namespace's kernel, TCP servers on loopback addresses stand for
pods, and connections to the cluster IP show where the kernel sends them. Prints one JSON object
of observations; the namespace (and every rule) goes away with the process."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
from typing import Any

from google.protobuf import json_format

from kubelet.proxy.metrics import Metrics
from kubelet.proxy.nftables import NftablesProxier
from tinykube.v1 import endpointslice_pb2, service_pb2

PODS = ["10.244.1.5", "10.244.1.6", "10.244.2.7"]
NODE_IP = "192.168.77.1"
TABLE = "tinykube-proxy-probe"
LB_IP = "10.112.0.1"


def service(name: str, spec: dict[str, Any]) -> service_pb2.Service:
    return json_format.ParseDict(
        {"metadata": {"name": name, "namespace": "default"}, "spec": spec}, service_pb2.Service()
    )


def slices(svc: str, ips: list[str]) -> list[endpointslice_pb2.EndpointSlice]:
    body = {
        "metadata": {
            "name": f"{svc}-x",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": svc},
        },
        "addressType": "IPv4",
        "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
    }
    return [json_format.ParseDict(body, endpointslice_pb2.EndpointSlice())]


def serve(ip: str) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip, 8080))
    srv.listen(64)
    while True:
        conn, _ = srv.accept()
        conn.sendall(ip.encode())
        conn.close()


def ask(host: str, port: int, n: int) -> dict[str, int]:
    seen: dict[str, int] = {}
    for _ in range(n):
        try:
            with socket.create_connection((host, port), timeout=5) as c:
                answer = c.recv(64).decode()
        except ConnectionRefusedError:
            answer = "refused"
        except OSError as exc:
            answer = f"error: {exc}"
        seen[answer] = seen.get(answer, 0) + 1
    return seen


def tables() -> str:
    return subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout


def nft_sets() -> str:
    return subprocess.run(["nft", "list", "sets", "ip"], capture_output=True, text=True).stdout


def setup() -> None:
    """Pods' and the node's addresses on the namespace's loopback, servers on the pods'."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for ip in [*PODS, NODE_IP]:
        subprocess.run(["ip", "addr", "add", f"{ip}/32", "dev", "lo"], check=True)
    subprocess.run(["ip", "route", "add", "10.96.0.0/12", "dev", "lo"], check=True)
    subprocess.run(["ip", "route", "add", "10.112.0.0/24", "dev", "lo"], check=True)
    for ip in PODS:
        threading.Thread(target=serve, args=(ip,), daemon=True).start()


async def main() -> dict[str, Any]:
    web = service(
        "web",
        {
            "type": "NodePort",
            "clusterIP": "10.96.0.20",
            "ports": [{"name": "", "port": 80, "protocol": "TCP", "nodePort": 30080}],
        },
    )
    sticky = service(
        "sticky",
        {
            "clusterIP": "10.96.0.30",
            "sessionAffinity": "ClientIP",
            "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
        },
    )
    lb = service(
        "lb",
        {
            "type": "LoadBalancer",
            "clusterIP": "10.96.0.40",
            "ports": [{"name": "", "port": 80, "protocol": "TCP", "nodePort": 30081}],
        },
    )
    lb.status.loadBalancer.ingress.add(ip=LB_IP, ipMode="VIP")
    proxier = NftablesProxier(Metrics(), table=TABLE, min_sync_period=0.0)
    out: dict[str, Any] = {}
    eps = {
        "default/web": slices("web", PODS),
        "default/sticky": slices("sticky", PODS),
        "default/lb": slices("lb", PODS),
    }
    await proxier.sync([web, sticky, lb], eps, NODE_IP)
    out["cluster_ip"] = ask("10.96.0.20", 80, 60)
    out["node_port"] = ask(NODE_IP, 30080, 30)
    out["sticky"] = ask("10.96.0.30", 80, 20)
    out["load_balancer"] = ask(LB_IP, 80, 30)
    # sessionAffinityConfig's timeout changed: the affinity sets are recreated in one partial
    # transaction (their users flushed first), and the client keeps being answered
    sticky.spec.sessionAffinityConfig.clientIP.timeoutSeconds = 30
    await proxier.sync([web, sticky, lb], eps, NODE_IP)
    out["retimed_full_rewrites"] = proxier.full_rewrites
    out["sticky_sets"] = nft_sets()
    out["sticky_after_retime"] = ask("10.96.0.30", 80, 10)
    await proxier.sync([web, sticky, lb], {"default/sticky": eps["default/sticky"]}, NODE_IP)
    out["scaled_to_0"] = ask("10.96.0.20", 80, 3)
    out["node_port_scaled_to_0"] = ask(NODE_IP, 30080, 3)
    out["load_balancer_scaled_to_0"] = ask(LB_IP, 80, 3)
    await proxier.sync([web, sticky, lb], eps, NODE_IP)
    out["back_to_3"] = ask("10.96.0.20", 80, 30)
    out["tables_running"] = tables()
    await proxier.close()
    out["tables_stopped"] = tables()
    return out


if __name__ == "__main__":
    setup()
    print(json.dumps(asyncio.run(main())))
