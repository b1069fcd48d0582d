"""The nftables proxier's ruleset (pure): the full table as text against a golden file, partial
updates, and the mode chosen from the flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from kubelet.proxy.app import choose_mode
from kubelet.proxy.nftables import build_ruleset, render_full, render_update
from kubelet.proxy.settings import Settings
from tinykube.v1 import endpointslice_pb2, service_pb2

GOLDEN = Path(__file__).parent / "golden" / "proxy_nftables_full.nft"
TABLE = "tinykube-proxy"


def service(name: str, spec: dict[str, Any], namespace: str = "default") -> service_pb2.Service:
    return json_format.ParseDict(
        {"metadata": {"name": name, "namespace": namespace}, "spec": spec}, service_pb2.Service()
    )


def slice_of(
    svc: str, ports: list[dict[str, Any]], endpoints: list[tuple[str, bool]]
) -> endpointslice_pb2.EndpointSlice:
    return json_format.ParseDict(
        {
            "metadata": {
                "name": f"{svc}-abcde",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": svc},
            },
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": [
                {"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in endpoints
            ],
        },
        endpointslice_pb2.EndpointSlice(),
    )


def fixture() -> tuple[list[service_pb2.Service], dict[str, list[Any]]]:
    web = service(
        "web",
        {
            "type": "NodePort",
            "clusterIP": "10.96.0.20",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
        },
    )
    sticky = service(
        "sticky",
        {
            "clusterIP": "10.96.0.30",
            "sessionAffinity": "ClientIP",
            "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
        },
    )
    dns = service(
        "kube-dns",
        {
            "clusterIP": "10.96.0.10",
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            ],
        },
        namespace="kube-system",
    )
    empty = service(
        "empty", {"clusterIP": "10.96.0.40", "ports": [{"name": "", "port": 81, "protocol": "TCP"}]}
    )
    headless = service(
        "headless", {"clusterIP": "None", "ports": [{"name": "", "port": 80, "protocol": "TCP"}]}
    )
    slices = {
        "default/web": [
            slice_of(
                "web",
                [{"name": "http", "port": 8080, "protocol": "TCP"}],
                [("10.244.1.5", True), ("10.244.2.7", True), ("10.244.1.9", False)],
            )
        ],
        "default/sticky": [
            slice_of(
                "sticky", [{"name": "", "port": 9000, "protocol": "TCP"}], [("10.244.1.6", True)]
            )
        ],
        "kube-system/kube-dns": [
            slice_of(
                "kube-dns",
                [
                    {"name": "dns", "port": 5353, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 5353, "protocol": "TCP"},
                ],
                [("10.244.1.2", True)],
            )
        ],
    }
    return [web, sticky, dns, empty, headless], slices


def test_full_table_matches_golden() -> None:
    services, slices = fixture()
    text = render_full(TABLE, build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16"))
    assert text == GOLDEN.read_text()


def test_ruleset_shape() -> None:
    services, slices = fixture()
    rs = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    ips = rs.maps["service-ips"]
    # the not-ready endpoint 10.244.1.9 gets no chain; the headless Service nothing at all
    assert not [c for c in rs.chains if "10.244.1.9" in c]
    assert not [e for e in ips if "headless" in e]
    web_chain = next(c for c in rs.chains if c.startswith("service-") and "/web/" in c)
    assert rs.chains[web_chain][-1].startswith("numgen random mod 2 vmap {")
    assert "10.96.0.40 . tcp . 81 : goto reject-chain" in rs.maps["no-endpoint-services"]
    assert any(e.startswith("10.96.0.10 . udp . 53 : goto service-") for e in ips)
    assert any(e.startswith("tcp . 30080 : goto external-") for e in rs.maps["service-nodeports"])
    (sticky_set,) = rs.sets
    assert "/sticky/" in sticky_set and rs.sets[sticky_set] == 10800
    ep = next(c for c in rs.chains if c.startswith("endpoint-") and "10.244.1.5" in c)
    assert rs.chains[ep] == (
        "ip saddr 10.244.1.5 jump mark-for-masquerade",  # hairpin
        "meta l4proto tcp dnat to 10.244.1.5:8080",
    )


def test_update_touches_only_what_changed() -> None:
    services, slices = fixture()
    old = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    assert render_update(TABLE, old, old) == ""
    web = slices["default/web"][0]
    web.endpoints[1].conditions.ready = False  # 10.244.2.7 stops being ready
    new = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    lines = render_update(TABLE, old, new).splitlines()
    assert [ln for ln in lines if ln.startswith("delete chain")] == [
        f"delete chain ip {TABLE} {c}" for c in old.chains if "10.244.2.7" in c
    ]
    assert not [ln for ln in lines if "sticky" in ln or "kube-dns" in ln or " map " in ln]
    assert any("numgen random mod 1 vmap" in ln for ln in lines)
    # every endpoint gone: the Service rejects, its chains and the affinity set are deleted
    slices["default/sticky"] = []
    newer = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    lines = render_update(TABLE, new, newer).splitlines()
    assert f"delete set ip {TABLE} {next(iter(new.sets))}" in lines
    assert any("10.96.0.30 . tcp . 8080 : goto reject-chain" in ln for ln in lines)


def test_no_cluster_cidr_masquerades_all_cluster_ip_traffic() -> None:
    services, slices = fixture()
    rs = build_ruleset(services, slices, "", "")
    web_chain = next(c for c in rs.chains if c.startswith("service-") and "/web/" in c)
    assert rs.chains[web_chain][0] == "ip daddr 10.96.0.20 tcp dport 80 jump mark-for-masquerade"
    assert rs.maps["service-nodeports"] == ()  # no node IP: no node ports


@pytest.mark.parametrize(
    ("mode", "cidr", "expected"),
    [("userspace", "10.244.0.0/16", "userspace"), ("auto", "", "userspace")],
)
def test_mode_choice(mode: str, cidr: str, expected: str) -> None:
    got, why = choose_mode(Settings(node_name="n", proxy_mode=mode, cluster_cidr=cidr))
    assert got == expected and why


def test_traffic_policy_local_uses_this_nodes_endpoints_only() -> None:
    services, slices = fixture()
    web = services[0]
    web.spec.internalTrafficPolicy = "Local"
    web.spec.externalTrafficPolicy = "Local"
    eps = slices["default/web"][0]
    eps.endpoints[0].nodeName = "node-1"  # 10.244.1.5
    eps.endpoints[1].nodeName = "node-2"  # 10.244.2.7
    rs = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16", node_name="node-1")
    svc_chain = next(c for c in rs.chains if c.startswith("service-") and "/web/" in c)
    ext_chain = next(c for c in rs.chains if c.startswith("external-") and "/web/" in c)
    assert rs.chains[svc_chain][-1].startswith("numgen random mod 1 vmap")
    assert "10.244.1.5" in rs.chains[svc_chain][-1]
    # Local external traffic keeps the client's address: no masquerade
    assert len(rs.chains[ext_chain]) == 1 and "10.244.1.5" in rs.chains[ext_chain][0]
    # on a node with no local endpoint: dropped (not rejected, as kube)
    other = build_ruleset(services, slices, "192.168.1.11", "10.244.0.0/16", node_name="node-3")
    assert "10.96.0.20 . tcp . 80 : drop" in other.maps["no-endpoint-services"]
    assert "tcp . 30080 : drop" in other.maps["no-endpoint-nodeports"]
    assert not [c for c in other.chains if "/web/" in c]


def test_load_balancer_ingress_ips_go_to_the_external_chain() -> None:
    services, slices = fixture()
    web = services[0]
    web.spec.type = "LoadBalancer"
    web.status.loadBalancer.ingress.add(ip="172.18.255.1")
    rs = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    ext = next(c for c in rs.chains if c.startswith("external-") and "/web/" in c)
    assert f"172.18.255.1 . tcp . 80 : goto {ext}" in rs.maps["service-ips"]
    assert f"tcp . 30080 : goto {ext}" in rs.maps["service-nodeports"]
    slices["default/web"] = []
    rs = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    assert "172.18.255.1 . tcp . 80 : goto reject-chain" in rs.maps["no-endpoint-services"]


def test_affinity_timeout_and_ip_mode_proxy() -> None:
    services, slices = fixture()
    sticky = services[1]
    sticky.spec.sessionAffinityConfig.clientIP.timeoutSeconds = 600
    old = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    assert set(old.sets.values()) == {600}
    sticky.spec.sessionAffinityConfig.clientIP.timeoutSeconds = 30
    web = services[0]
    web.spec.type = "LoadBalancer"
    web.status.loadBalancer.ingress.add(ip="172.18.255.2", ipMode="Proxy")
    new = build_ruleset(services, slices, "192.168.1.10", "10.244.0.0/16")
    assert set(new.sets.values()) == {30}
    assert not any("172.18.255.2" in e for e in new.maps["service-ips"])
    script = render_update(TABLE, old, new).splitlines()
    # a set in use cannot be deleted: its rules are flushed first and written again after
    aff = next(iter(new.sets))
    users = [c for c, rules in old.chains.items() if any(f"@{aff}" in r for r in rules)]
    first_delete = script.index(f"delete set ip {TABLE} {aff}")
    for chain in users:
        assert script.index(f"flush chain ip {TABLE} {chain}") < first_delete
        assert any(line.startswith(f"add rule ip {TABLE} {chain} ") for line in script)
    assert (
        f"add set ip {TABLE} {aff} {{ type ipv4_addr; flags dynamic,timeout; timeout 30s; }}"
        in script
    )


def test_nft_exiting_before_reading_its_input_is_a_failed_sync_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nft that fails at start without reading stdin (its cache setup interrupted by another
    process's ruleset change) closes the pipe: uvloop raised RuntimeError out of communicate
    and the proxy loop restarted. Now it is a failed attempt, retried."""
    import asyncio

    import uvloop
    from prometheus_client import CollectorRegistry

    from kubelet.proxy.metrics import Metrics
    from kubelet.proxy.nftables import NftablesProxier, run_nft

    calls = tmp_path / "calls"
    nft = tmp_path / "nft"
    nft.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -lt 3 ]; then\n'
        '  echo "Error: cache initialization failed: Interrupted system call" >&2; exit 1\n'
        "fi\n"
        "cat > /dev/null\n"
    )
    nft.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    services, slices = fixture()

    async def main() -> tuple[int, str, bool]:
        rc, err = await run_nft("x" * 1_000_000)  # more than a pipe holds
        calls.unlink()
        proxier = NftablesProxier(Metrics(CollectorRegistry()), min_sync_period=0.0)
        await proxier.sync(services, slices, "192.168.1.10")
        return rc, err, proxier.applied is not None

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        rc, err, applied = runner.run(main())
    assert rc == 1 and "Interrupted system call" in err
    assert applied  # the third attempt went through
    assert len(calls.read_text().splitlines()) == 3
