"""Headless and ExternalName Services and UDP ports through the real kubectl against `tinykube
up`, with kube-apiserver's validation messages."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import sys
import urllib.request

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.e2e


def test_external_name_service(tinykube_up: UpCluster) -> None:
    created = tinykube_up.kubectl(
        "create", "service", "externalname", "mail", "--external-name", "smtp.example.org"
    )
    assert (created.code, created.out) == (0, "service/mail created\n"), created.err
    svc = json.loads(ok(tinykube_up.kubectl("get", "service", "mail", "-o", "json")))
    assert svc["spec"]["type"] == "ExternalName"
    assert svc["spec"]["externalName"] == "smtp.example.org"
    assert "clusterIP" not in svc["spec"] or svc["spec"]["clusterIP"] == ""
    table = ok(tinykube_up.kubectl("get", "service", "mail"))
    row = table.splitlines()[1].split()
    assert row[:4] == ["mail", "ExternalName", "<none>", "smtp.example.org"], table
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "bad"},
            "spec": {"type": "ExternalName", "externalName": "Not_A_Name"},
        }
    )
    bad = tinykube_up.kubectl("create", "-f", "-", stdin=manifest)  # kubectl create service
    # externalname checks the name itself; the apiserver does for manifests
    assert bad.code == 1 and 'spec.externalName: Invalid value: "Not_A_Name"' in bad.err, bad.err


def test_headless_service(tinykube_up: UpCluster) -> None:
    created = tinykube_up.kubectl(
        "create", "service", "clusterip", "direct", "--clusterip=None", "--tcp=80:8080"
    )
    assert created.code == 0, created.err
    svc = json.loads(ok(tinykube_up.kubectl("get", "service", "direct", "-o", "json")))
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["clusterIPs"] == ["None"]
    row = ok(tinykube_up.kubectl("get", "service", "direct")).splitlines()[1].split()
    assert row[:3] == ["direct", "ClusterIP", "None"]
    refused = tinykube_up.kubectl(
        "create", "service", "nodeport", "np", "--tcp=80:8080", "--node-port=0"
    )
    assert refused.code == 0, refused.err  # a NodePort Service as such is fine
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "np-headless"},
            "spec": {"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]},
        }
    )
    bad = tinykube_up.kubectl("create", "-f", "-", stdin=manifest)
    assert bad.code == 1, bad.out
    assert "may not be set to 'None' for NodePort services" in bad.err, bad.err


def test_udp_port(tinykube_up: UpCluster) -> None:
    created = tinykube_up.kubectl("create", "service", "clusterip", "dns", "--tcp=53:5353")
    assert created.code == 0, created.err
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "dns-udp"},
            "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]},
        }
    )
    made = tinykube_up.kubectl("create", "-f", "-", stdin=manifest)
    assert made.code == 0, made.err
    svc = json.loads(ok(tinykube_up.kubectl("get", "service", "dns-udp", "-o", "json")))
    assert svc["spec"]["ports"][0]["protocol"] == "UDP"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode().strip())


async def test_load_balancer_service_gets_an_external_ip_that_answers(
    tinykube_up: UpCluster,
) -> None:
    """kubectl makes a LoadBalancer Service in front of a Deployment; the controller manager's
    service-lb gives it an address from its pool (loopback under the process runtime), `kubectl
    get svc` shows it as EXTERNAL-IP, and HTTP to it reaches the pod through the proxies."""
    pod_port, port = _free_port(), _free_port()
    serve = (
        'echo "$HOSTNAME" > index.html; '
        f'exec {sys.executable} -m http.server {pod_port} --bind "$POD_IP"'
    )
    made = tinykube_up.kubectl(
        "create", "deployment", "lbweb", "--image=python", f"--port={pod_port}", "--",
        "sh", "-c", serve,
    )  # fmt: skip
    assert made.code == 0, made.err
    created = tinykube_up.kubectl(
        "create", "service", "loadbalancer", "lbweb", f"--tcp={port}:{pod_port}"
    )
    assert created.code == 0, created.err
    svc = json.loads(ok(tinykube_up.kubectl("get", "service", "lbweb", "-o", "json")))
    assert svc["spec"]["type"] == "LoadBalancer"
    assert 30000 <= svc["spec"]["ports"][0]["nodePort"] <= 32767
    assert svc["spec"]["externalTrafficPolicy"] == "Cluster"
    assert svc["spec"]["allocateLoadBalancerNodePorts"] is True

    async def external_ip() -> str | None:
        got = json.loads(ok(tinykube_up.kubectl("get", "service", "lbweb", "-o", "json")))
        ingress = got.get("status", {}).get("loadBalancer", {}).get("ingress", [])
        return ingress[0]["ip"] if ingress else None

    ip = await eventually(external_ip, 60, "an EXTERNAL-IP")
    got = json.loads(ok(tinykube_up.kubectl("get", "service", "lbweb", "-o", "json")))
    assert got["status"]["loadBalancer"]["ingress"] == [{"ip": ip, "ipMode": "VIP"}]
    assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network("127.101.0.0/24")
    row = ok(tinykube_up.kubectl("get", "service", "lbweb")).splitlines()[1].split()
    assert row[1] == "LoadBalancer" and row[3] == ip, row
    pods = json.loads(ok(tinykube_up.kubectl("get", "pods", "-l", "app=lbweb", "-o", "json")))

    async def answer() -> str | None:
        try:
            return await asyncio.to_thread(_http_get, f"http://{ip}:{port}/")
        except OSError:
            return None

    name = await eventually(answer, 120, f"an answer on {ip}:{port}")
    assert name in {p["metadata"]["name"] for p in pods["items"]}, name
    # Back to ClusterIP: the address leaves the status and returns to the pool.
    patch = json.dumps({"spec": {"type": "ClusterIP"}})
    patched = tinykube_up.kubectl("patch", "service", "lbweb", "-p", patch)
    assert patched.code == 0, patched.err

    async def released() -> bool:
        got = json.loads(ok(tinykube_up.kubectl("get", "service", "lbweb", "-o", "json")))
        return not got.get("status", {}).get("loadBalancer", {}).get("ingress")

    assert await eventually(released, 60, "the address released")
    after = json.loads(ok(tinykube_up.kubectl("get", "service", "lbweb", "-o", "json")))
    assert "allocateLoadBalancerNodePorts" not in after["spec"]
    # allocateLoadBalancerNodePorts false: no node ports; a class that is not ours: no address
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "lb-other"},
            "spec": {
                "type": "LoadBalancer",
                "allocateLoadBalancerNodePorts": False,
                "loadBalancerClass": "example.com/other",
                "ports": [{"port": 80}],
            },
        }
    )
    assert tinykube_up.kubectl("create", "-f", "-", stdin=manifest).code == 0
    other = json.loads(ok(tinykube_up.kubectl("get", "service", "lb-other", "-o", "json")))
    assert "nodePort" not in other["spec"]["ports"][0]
    row = ok(tinykube_up.kubectl("get", "service", "lb-other")).splitlines()[1].split()
    assert row[3] == "<pending>", row
    ok(tinykube_up.kubectl("delete", "deployment", "lbweb"))


async def test_load_balancer_ip_picks_the_pool_address(tinykube_up: UpCluster) -> None:
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "lb-fixed"},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerIP": "127.101.0.200",
                "ports": [{"port": 80}],
            },
        }
    )
    assert tinykube_up.kubectl("create", "-f", "-", stdin=manifest).code == 0

    async def external_ip() -> str | None:
        row = ok(tinykube_up.kubectl("get", "service", "lb-fixed")).splitlines()[1].split()
        return row[3] if row[3] != "<pending>" else None

    assert await eventually(external_ip, 60, "the asked-for EXTERNAL-IP") == "127.101.0.200"


def test_load_balancer_fields_are_validated(tinykube_up: UpCluster) -> None:
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "bad-lb"},
            "spec": {
                "loadBalancerClass": "example.com/other",
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 90000}},
                "ports": [{"port": 80}],
            },
        }
    )
    bad = tinykube_up.kubectl("create", "-f", "-", stdin=manifest)
    assert bad.code == 1, bad.out
    assert (
        "spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'"
        in bad.err
    ), bad.err
    assert (
        "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 90000: must be "
        "greater than 0 and less than 86400" in bad.err
    ), bad.err
    good = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "sticky"},
            "spec": {"sessionAffinity": "ClientIP", "ports": [{"port": 80}]},
        }
    )
    assert tinykube_up.kubectl("create", "-f", "-", stdin=good).code == 0
    svc = json.loads(ok(tinykube_up.kubectl("get", "service", "sticky", "-o", "json")))
    assert svc["spec"]["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}


def test_type_change_to_external_name_releases_the_cluster_ip(tinykube_up: UpCluster) -> None:
    ok(tinykube_up.kubectl("create", "service", "clusterip", "was-ip", "--tcp=80:8080"))
    before = json.loads(ok(tinykube_up.kubectl("get", "service", "was-ip", "-o", "json")))
    assert before["spec"]["clusterIP"]
    patch = json.dumps({"spec": {"type": "ExternalName", "externalName": "db.example.org"}})
    patched = tinykube_up.kubectl("patch", "service", "was-ip", "-p", patch)
    assert patched.code == 0, patched.err
    after = json.loads(ok(tinykube_up.kubectl("get", "service", "was-ip", "-o", "json")))
    assert after["spec"]["type"] == "ExternalName"
    assert not after["spec"].get("clusterIP") and not after["spec"].get("clusterIPs")
    # the address is free again: a new Service may ask for it
    manifest = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "reuse"},
            "spec": {"clusterIP": before["spec"]["clusterIP"], "ports": [{"port": 80}]},
        }
    )
    reused = tinykube_up.kubectl("create", "-f", "-", stdin=manifest)
    assert reused.code == 0, reused.err
    # and back: a ClusterIP Service again gets an address
    back = json.dumps({"spec": {"type": "ClusterIP", "externalName": None}})
    patched = tinykube_up.kubectl("patch", "service", "was-ip", "-p", back)
    assert patched.code == 0, patched.err
    again = json.loads(ok(tinykube_up.kubectl("get", "service", "was-ip", "-o", "json")))
    assert again["spec"]["clusterIP"] and again["spec"]["clusterIP"] != before["spec"]["clusterIP"]
