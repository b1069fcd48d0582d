"""The resolv.conf the CRI kubelet asks for each pod's sandbox (kube's dnsPolicy rules)."""

from __future__ import annotations

from pathlib import Path

from kubelet.cri import PodDNS, sandbox_config
from tinykube.v1 import pod_pb2


def pod(policy: str = "", host_network: bool = False) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name, p.metadata.namespace, p.metadata.uid = "web", "shop", "u1"
    p.spec.dnsPolicy = policy
    p.spec.hostNetwork = host_network
    return p


def host_conf(tmp_path: Path) -> str:
    f = tmp_path / "resolv.conf"
    f.write_text("# host\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n")
    return str(f)


def test_cluster_first(tmp_path: Path) -> None:
    dns = PodDNS("10.96.0.10", "cluster.local", host_conf(tmp_path))
    got = dns.config(pod())
    assert list(got.servers) == ["10.96.0.10"]
    assert list(got.searches) == [
        "shop.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
        "corp.example",
    ]
    assert list(got.options) == ["ndots:5"]
    sandbox = sandbox_config(pod("ClusterFirst"), 0, tmp_path, "/x", dns)
    assert sandbox.dns_config == got


def test_default_host_network_and_none(tmp_path: Path) -> None:
    dns = PodDNS("10.96.0.10", "cluster.local", host_conf(tmp_path))
    for p in (pod("Default"), pod("ClusterFirst", host_network=True)):
        got = dns.config(p)
        assert list(got.servers) == ["192.0.2.53"] and list(got.searches) == ["corp.example"]
        assert list(got.options) == ["edns0"]
    with_host_net = dns.config(pod("ClusterFirstWithHostNet", host_network=True))
    assert list(with_host_net.servers) == ["10.96.0.10"]
    none = dns.config(pod("None"))
    assert not none.servers and not none.searches and not none.options
    # no cluster DNS configured: ClusterFirst falls back to the host's
    assert list(PodDNS("", "cluster.local", host_conf(tmp_path)).config(pod()).servers) == [
        "192.0.2.53"
    ]
