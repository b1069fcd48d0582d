"""`tinykube up --runtime containerd` with the real kubectl: two nodes, each with its own
containerd, pod CIDR and bridge; a Deployment from the local registry spreads over both, every
pod with its own IP, and a pod reaches a pod on the other node. Ctrl-C leaves the machine as
found (processes, mounts, bridges, CNI chains, cgroups, ip_forward).

Prerequisites as in test_cri_containerd (tests/e2e/crisupport.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.conftest import processes_in
from tests.e2e.crisupport import UpContainerd, cri_prerequisites
from tests.e2e.waiting import eventually
from tinykube.containerd import (
    DNS_LOCAL_IP,
    FORWARD,
    KUBE_DNS_IP,
    LB_POOL,
    PROXY_TABLE_PREFIX,
    SERVICE_CIDR,
    ContainerdPaths,
    iptables_chains,
    nft_all_tables,
    nft_tables,
)
from tinykube.cri.v1 import cri_pb2 as cri
from tinykube.cri.v1 import cri_pb2_grpc as cri_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode().strip())


def _lo_addresses() -> str:
    return subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True
    ).stdout


def _leftovers(
    data: Path,
    chains: set[tuple[str, str]],
    forward: str,
    tables: set[tuple[str, str]],
    had_dns_ip: bool,
) -> list[str]:
    """What `up` left on the machine."""
    left = [f"process {pid}" for pid in processes_in(data)]
    with open("/proc/self/mountinfo") as f:
        left += [f"mount {m.split()[4]}" for m in f if str(data) in m]
    # up's bridges are tkcni1..N (another test's tkcni-<name> is not ours)
    left += [f"bridge {p.name}" for p in Path("/sys/class/net").glob("tkcni[0-9]*")]
    left += [f"socket dir {p}" for p in Path("/tmp").glob("tkctd-*")]
    left += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/tinykube")]
    left += [f"chain {c}" for c in iptables_chains() - chains if c[1].startswith("CNI-")]
    left += [f"nft table {t}" for t in nft_tables() if t.startswith(PROXY_TABLE_PREFIX)]
    left += [f"nft table {f} {t}" for f, t in nft_all_tables() - tables]
    if DNS_LOCAL_IP in _lo_addresses() and not had_dns_ip:
        left.append(f"address {DNS_LOCAL_IP} on lo")
    if FORWARD.read_text().strip() != forward:
        left.append("net.ipv4.ip_forward changed")
    return left


async def test_up_runtime_containerd_two_nodes(tmp_path: Path) -> None:
    cri_prerequisites()
    forward = FORWARD.read_text().strip()
    chains = iptables_chains()
    tables = nft_all_tables()
    had_dns_ip = DNS_LOCAL_IP in _lo_addresses()
    data = tmp_path / "data"
    cluster = UpContainerd(data)
    kubectl, output = cluster.kubectl, cluster.output

    try:
        await eventually(cluster.ready, 240)
        registry = cluster.registry
        kubectl("create", "namespace", "web")
        serve = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"
        kubectl(
            "create", "deployment", "web", f"--image={registry}/busybox:1", "--replicas=4",
            "-n", "web", "--", "/bin/sh", "-c", serve,
        )  # fmt: skip

        async def spread() -> list[dict[str, Any]] | None:
            items = json.loads(await asyncio.to_thread(kubectl, "get", "pods", "-n", "web",
                                                       "-o", "json"))["items"]  # fmt: skip
            up = [p for p in items if p["status"].get("phase") == "Running"]
            nodes = {p["spec"]["nodeName"] for p in up}
            return up if len(up) == 4 and len(nodes) == 2 else None

        up = await eventually(spread, 180)
        ips = {p["status"]["podIP"] for p in up}
        assert len(ips) == 4
        nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
        cidrs = {n["metadata"]["name"]: ipaddress.IPv4Network(n["spec"]["podCIDR"]) for n in nodes}
        assert len(set(cidrs.values())) == 2
        for p in up:
            assert ipaddress.IPv4Address(p["status"]["podIP"]) in cidrs[p["spec"]["nodeName"]]
        for n in nodes:
            assert n["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")

        # A pod on node-1 reaches a pod on node-2.
        src = next(p for p in up if p["spec"]["nodeName"] == "node-1")
        dst = next(p for p in up if p["spec"]["nodeName"] == "node-2")
        container_id = src["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        sock = ContainerdPaths(data / "containerd" / "node-1").socket
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            out = cri_grpc.RuntimeServiceStub(channel).ExecSync(
                cri.ExecSyncRequest(
                    container_id=container_id,
                    cmd=["ping", "-c", "1", "-W", "5", dst["status"]["podIP"]],
                    timeout=30,
                ),
                timeout=60,
            )
        assert out.exit_code == 0, (out.stdout, out.stderr)

        # A Service in front of them answers through the proxies, from the pods' IPs.
        kubectl("expose", "deployment", "web", "--port", "8080", "-n", "web")
        ip = kubectl("get", "service", "web", "-n", "web", "-o", "jsonpath={.spec.clusterIP}")
        names = {p["metadata"]["name"] for p in up}

        async def answers() -> set[str] | None:
            seen: set[str] = set()
            for _ in range(40):
                try:
                    seen.add(await asyncio.to_thread(_get, f"http://{ip}:8080/"))
                except OSError:
                    return None
            return seen if len(seen) >= 2 else None

        seen = await eventually(answers, 120)
        assert seen <= names, (seen, names)

        async def all_serving() -> bool:
            # Ready is "running" here (no probe): a pod's httpd may not listen yet, and a
            # request DNATed to it is refused. The loop below asserts on every request.
            got = await answers()
            return got is not None and got == names

        assert await eventually(all_serving, 120)
        # From inside a pod's network namespace too: the proxies' nftables DNAT (the cluster
        # IP is in 10.96.0.0/12, not loopback).
        assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(SERVICE_CIDR)
        from_pod: set[str] = set()
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            for _ in range(30):
                got = cri_grpc.RuntimeServiceStub(channel).ExecSync(
                    cri.ExecSyncRequest(
                        container_id=container_id,
                        cmd=[
                            "wget",
                            "-qO-",
                            f"http://{ip}:8080/",
                        ],  # -T segfaults Debian 12 busybox
                        timeout=30,
                    ),
                    timeout=60,
                )
                assert got.exit_code == 0, (got.stdout, got.stderr)
                from_pod.add(got.stdout.decode().strip())
        assert len(from_pod) >= 2 and from_pod <= names, (from_pod, names)
        # By name: the pod's resolv.conf names kube-dns (10.96.0.10), the cluster DNS answers
        # with the Service's cluster IP, and the request reaches the pods.
        by_name: set[str] = set()
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            stub = cri_grpc.RuntimeServiceStub(channel)

            def run(*cmd: str) -> str:
                got = stub.ExecSync(
                    cri.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=30),
                    timeout=60,
                )
                assert got.exit_code == 0, (cmd, got.stdout, got.stderr)
                return got.stdout.decode()

            # the DNS listens on its link-local address only, reached through kube-dns
            assert any(f"cluster DNS {DNS_LOCAL_IP}:" in line for line in output), output
            conf = run("cat", "/etc/resolv.conf")
            assert "nameserver 10.96.0.10" in conf, conf
            assert "search web.svc.cluster.local svc.cluster.local cluster.local" in conf, conf
            assert "ndots:5" in conf, conf
            looked_up = run("nslookup", "web.web.svc.cluster.local")
            assert ip in looked_up, looked_up
            for _ in range(30):
                by_name.add(run("wget", "-qO-", "http://web:8080/").strip())
            assert len(by_name) >= 2 and by_name <= names, (by_name, names)
            # A pod's dnsConfig: dnsPolicy None writes it alone into resolv.conf, and its
            # search domain makes the short name resolve.
            manifest = tmp_path / "dnscfg.json"
            manifest.write_text(
                json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "dnscfg", "namespace": "web"},
                        "spec": {
                            "nodeName": "node-1",
                            "dnsPolicy": "None",
                            "dnsConfig": {
                                "nameservers": [KUBE_DNS_IP],
                                "searches": ["web.svc.cluster.local", "example.test"],
                                "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
                            },
                            "containers": [
                                {
                                    "name": "main",
                                    "image": f"{registry}/busybox:1",
                                    "command": ["sleep", "3600"],
                                }
                            ],
                        },
                    }
                )
            )
            kubectl("apply", "-f", str(manifest))

            def dnscfg_container() -> str | None:
                got = json.loads(kubectl("get", "pod", "dnscfg", "-n", "web", "-o", "json"))
                statuses = got["status"].get("containerStatuses", [])
                if not statuses or "running" not in statuses[0].get("state", {}):
                    return None
                return str(statuses[0]["containerID"].split("://", 1)[1])

            dnscfg = await eventually(lambda: asyncio.to_thread(dnscfg_container), 120)

            def run_in(cid: str, *cmd: str) -> str:
                got = stub.ExecSync(
                    cri.ExecSyncRequest(container_id=cid, cmd=list(cmd), timeout=30), timeout=60
                )
                assert got.exit_code == 0, (cmd, got.stdout, got.stderr)
                return got.stdout.decode()

            conf = run_in(dnscfg, "cat", "/etc/resolv.conf")
            assert f"nameserver {KUBE_DNS_IP}" in conf, conf
            assert "search web.svc.cluster.local example.test" in conf, conf
            assert "ndots:2" in conf and "edns0" in conf and "ndots:5" not in conf, conf

            def short_name() -> str | None:
                got = stub.ExecSync(
                    cri.ExecSyncRequest(
                        container_id=dnscfg, cmd=["wget", "-qO-", "http://web:8080/"], timeout=30
                    ),
                    timeout=60,
                )
                return got.stdout.decode().strip() if got.exit_code == 0 else None

            # (a new pod's first lookups have failed once: the answer is waited for)
            assert await eventually(lambda: asyncio.to_thread(short_name), 60) in names
            # A LoadBalancer Service gets an address from up's pool (10.112.0.0/24), which
            # answers from the host and from a pod through the proxies' DNAT.
            kubectl(
                "expose", "deployment", "web", "--name", "lb", "--port", "80",
                "--target-port", "8080", "--type", "LoadBalancer", "-n", "web",
            )  # fmt: skip

            def external_ip() -> str | None:
                got = json.loads(kubectl("get", "service", "lb", "-n", "web", "-o", "json"))
                ingress = got.get("status", {}).get("loadBalancer", {}).get("ingress", [])
                return ingress[0]["ip"] if ingress else None

            lb_ip = await eventually(lambda: asyncio.to_thread(external_ip), 60)
            assert ipaddress.IPv4Address(lb_ip) in ipaddress.IPv4Network(LB_POOL)
            row = kubectl("get", "service", "lb", "-n", "web").splitlines()[1].split()
            assert row[3] == lb_ip, row

            async def lb_answers() -> str | None:
                try:
                    return await asyncio.to_thread(_get, f"http://{lb_ip}/")
                except OSError:
                    return None

            assert await eventually(lb_answers, 60) in names
            assert run("wget", "-qO-", f"http://{lb_ip}/").strip() in names
            # A headless Service resolves to its ready pods' IPs.
            kubectl(
                "expose", "deployment", "web", "--name", "direct", "--port", "8080",
                "--cluster-ip", "None", "-n", "web",
            )  # fmt: skip

            def headless() -> set[str] | None:
                got = stub.ExecSync(
                    cri.ExecSyncRequest(
                        container_id=container_id,
                        cmd=["nslookup", "direct.web.svc.cluster.local"],
                        timeout=30,
                    ),
                    timeout=60,
                )
                if got.exit_code != 0:  # NXDOMAIN until the DNS's informers see it
                    return None
                out = got.stdout.decode()
                found = {ln.split()[-1] for ln in out.splitlines() if ln.startswith("Address")}
                return found if ips <= found else None

            found = await eventually(lambda: asyncio.to_thread(headless), 60)
            assert ip not in found
            # Scaled to 0: the Service refuses at once; back to 4 it answers again.
            kubectl("scale", "deployment", "web", "--replicas=0", "-n", "web")

            def refused() -> bool | None:
                # the pods are gone (the one above too): asked from the host, the nftables
                # table's reject answers with a reset at once
                try:
                    _get(f"http://{ip}:8080/")
                except ConnectionRefusedError:
                    return True
                except urllib.error.URLError as exc:
                    return True if isinstance(exc.reason, ConnectionRefusedError) else None
                except OSError:
                    return None
                return None

            assert await eventually(lambda: asyncio.to_thread(refused), 120)
            kubectl("scale", "deployment", "web", "--replicas=4", "-n", "web")
            assert await eventually(answers, 180)
    finally:
        cluster.stop()
    assert cluster.process.returncode == 0, "\n".join(output)
    assert output[-1] == "stopped.", "\n".join(output)
    assert _leftovers(data, chains, forward, tables, had_dns_ip) == []
