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


def test_dns_config_is_added_to_the_policy(tmp_path: Path) -> None:
    dns = PodDNS("10.96.0.10", "cluster.local", host_conf(tmp_path))
    p = pod()
    cfg = p.spec.dnsConfig
    cfg.nameservers.extend(["192.0.2.99", "10.96.0.10"])  # a duplicate is dropped
    cfg.searches.extend(["extra.example", "cluster.local"])
    cfg.options.add(name="ndots", value="2")  # replaces the policy's ndots:5
    cfg.options.add(name="edns0")
    got = dns.config(p)
    assert list(got.servers) == ["10.96.0.10", "192.0.2.99"]
    assert list(got.searches) == [
        "shop.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
        "corp.example",
        "extra.example",
    ]
    assert list(got.options) == ["ndots:2", "edns0"]


def test_dns_policy_none_is_the_dns_config_alone(tmp_path: Path) -> None:
    dns = PodDNS("10.96.0.10", "cluster.local", host_conf(tmp_path))
    p = pod("None")
    p.spec.dnsConfig.nameservers.extend(["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"])
    p.spec.dnsConfig.searches.extend([f"s{i}.example" for i in range(40)])
    p.spec.dnsConfig.options.add(name="timeout", value="1")
    got = dns.config(p)
    # the kubelet's limits: 3 nameservers, 32 search domains
    assert list(got.servers) == ["1.1.1.1", "1.0.0.1", "8.8.8.8"]
    assert list(got.searches) == [f"s{i}.example" for i in range(32)]
    assert list(got.options) == ["timeout:1"]
