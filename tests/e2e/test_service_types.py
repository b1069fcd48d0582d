"""Headless and ExternalName Services and UDP ports through the real kubectl against `tinykube
up`, with kube-apiserver's validation messages."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok

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


def test_load_balancer_service_gets_node_ports_and_waits_for_an_address(
    tinykube_up: UpCluster,
) -> None:
    created = tinykube_up.kubectl("create", "service", "loadbalancer", "lb", "--tcp=80:8080")
    assert created.code == 0, created.err
    svc = json.loads(ok(tinykube_up.kubectl("get", "service", "lb", "-o", "json")))
    assert svc["spec"]["type"] == "LoadBalancer"
    assert 30000 <= svc["spec"]["ports"][0]["nodePort"] <= 32767
    assert svc["spec"]["externalTrafficPolicy"] == "Cluster"
    row = ok(tinykube_up.kubectl("get", "service", "lb")).splitlines()[1].split()
    # no load balancer controller assigns an address: kube shows <pending> then too
    assert row[1] == "LoadBalancer" and row[3] == "<pending>", row


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
