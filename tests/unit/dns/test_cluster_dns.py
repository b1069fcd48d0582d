"""Cluster DNS answers from fake stores (CoreDNS's kubernetes plugin as the reference), and the
server over UDP and TCP with forwarding to a small upstream the test starts."""

from __future__ import annotations

import asyncio
from typing import Any

import dns.asyncquery
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.reversename
import pytest
from google.protobuf import json_format

from kubelet.dns.records import ClusterRecords
from kubelet.dns.server import DnsServer
from tinykube.v1 import endpointslice_pb2, service_pb2


def service(name: str, ns: str, spec: dict[str, Any]) -> service_pb2.Service:
    return json_format.ParseDict(
        {"metadata": {"name": name, "namespace": ns}, "spec": spec}, service_pb2.Service()
    )


def eps(svc: str, ns: str, endpoints: list[dict[str, Any]]) -> endpointslice_pb2.EndpointSlice:
    return json_format.ParseDict(
        {
            "metadata": {
                "name": f"{svc}-x",
                "namespace": ns,
                "labels": {"kubernetes.io/service-name": svc},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints,
        },
        endpointslice_pb2.EndpointSlice(),
    )


def records() -> ClusterRecords:
    web = service(
        "web",
        "shop",
        {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    )
    db = service(
        "db",
        "shop",
        {"clusterIP": "None", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
    )
    slices = {
        "shop/db": [
            eps(
                "db",
                "shop",
                [
                    {"addresses": ["10.244.1.5"], "conditions": {"ready": True}},
                    {
                        "addresses": ["10.244.2.7"],
                        "conditions": {"ready": True},
                        "hostname": "db-0",
                    },
                    {"addresses": ["10.244.2.9"], "conditions": {"ready": False}},
                ],
            )
        ]
    }
    return ClusterRecords.build([web, db], slices)


def ask(rec: ClusterRecords, name: str, rtype: str = "A") -> dns.message.Message:
    reply = rec.answer(dns.message.make_query(name, rtype))
    assert reply is not None
    return reply


def texts(reply: dns.message.Message) -> list[str]:
    return sorted(r.to_text() for rrset in reply.answer for r in rrset)


def test_service_a_record_is_its_cluster_ip() -> None:
    reply = ask(records(), "web.shop.svc.cluster.local.")
    assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA
    assert texts(reply) == ["10.96.0.20"]
    assert reply.answer[0].ttl == 5


def test_headless_service_answers_ready_pod_ips() -> None:
    rec = records()
    assert texts(ask(rec, "db.shop.svc.cluster.local.")) == ["10.244.1.5", "10.244.2.7"]
    assert texts(ask(rec, "db-0.db.shop.svc.cluster.local.")) == ["10.244.2.7"]
    assert texts(ask(rec, "10-244-1-5.db.shop.svc.cluster.local.")) == ["10.244.1.5"]


def test_srv_for_named_ports() -> None:
    rec = records()
    assert texts(ask(rec, "_http._tcp.web.shop.svc.cluster.local.", "SRV")) == [
        "0 100 80 web.shop.svc.cluster.local."
    ]
    reply = ask(rec, "_http._tcp.db.shop.svc.cluster.local.", "SRV")
    assert texts(reply) == [
        "0 50 8080 10-244-1-5.db.shop.svc.cluster.local.",
        "0 50 8080 db-0.db.shop.svc.cluster.local.",
    ]
    assert {rrset.name.to_text() for rrset in reply.additional} == {
        "10-244-1-5.db.shop.svc.cluster.local.",
        "db-0.db.shop.svc.cluster.local.",
    }


def test_pod_records_and_ptr() -> None:
    rec = records()
    assert texts(ask(rec, "10-244-3-4.shop.pod.cluster.local.")) == ["10.244.3.4"]
    assert texts(ask(rec, "20.0.96.10.in-addr.arpa.", "PTR")) == ["web.shop.svc.cluster.local."]


def test_nxdomain_and_nodata_as_coredns() -> None:
    rec = records()
    for name in (
        "nope.shop.svc.cluster.local.",
        "web.other.svc.cluster.local.",
        "x.y.z.cluster.local.",
        "bad-ip.shop.pod.cluster.local.",
    ):
        reply = ask(rec, name)
        assert reply.rcode() == dns.rcode.NXDOMAIN, name
        assert reply.authority[0].rdtype == dns.rdatatype.SOA
    nodata = ask(rec, "web.shop.svc.cluster.local.", "AAAA")
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer
    assert nodata.authority[0].rdtype == dns.rdatatype.SOA
    assert ask(rec, "shop.svc.cluster.local.").rcode() == dns.rcode.NOERROR  # a namespace


def test_outside_the_zone_is_forwarded() -> None:
    assert records().answer(dns.message.make_query("example.org.", "A")) is None
    assert records().answer(dns.message.make_query("1.1.168.192.in-addr.arpa.", "PTR")) is None


@pytest.mark.asyncio
async def test_server_udp_tcp_and_forwarding() -> None:
    upstream_records = ClusterRecords(domain="example.org")
    upstream_records.add("www.example.org", "A", "192.0.2.7")
    upstream = DnsServer(lambda: upstream_records, [])
    up_port = await upstream.start("127.0.0.1", 0)
    rec = records()
    server = DnsServer(lambda: rec, [f"127.0.0.1:{up_port}"], timeout=5)
    port = await server.start("127.0.0.1", 0)
    try:
        q = dns.message.make_query("web.shop.svc.cluster.local.", "A")
        udp = await dns.asyncquery.udp(q, "127.0.0.1", port=port, timeout=5)
        tcp = await dns.asyncquery.tcp(q, "127.0.0.1", port=port, timeout=5)
        assert texts(udp) == texts(tcp) == ["10.96.0.20"]
        fwd = dns.message.make_query("www.example.org.", "A")
        got = await dns.asyncquery.udp(fwd, "127.0.0.1", port=port, timeout=5)
        assert texts(got) == ["192.0.2.7"] and upstream.queries == 1
        gone = await dns.asyncquery.udp(
            dns.message.make_query("nope.example.org.", "A"), "127.0.0.1", port=port, timeout=5
        )
        assert gone.rcode() == dns.rcode.NXDOMAIN
    finally:
        await server.stop()
        await upstream.stop()
    # no upstream answering: SERVFAIL
    dead = DnsServer(lambda: rec, [f"127.0.0.1:{up_port}"], timeout=0.5)
    port = await dead.start("127.0.0.1", 0)
    try:
        got = await dns.asyncquery.tcp(fwd, "127.0.0.1", port=port, timeout=5)
        assert got.rcode() == dns.rcode.SERVFAIL
    finally:
        await dead.stop()
    await asyncio.sleep(0)


def test_external_name_is_a_cname_and_not_ready_published() -> None:
    ext = service("mail", "shop", {"type": "ExternalName", "externalName": "smtp.example.org"})
    db = service(
        "db",
        "shop",
        {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        },
    )
    not_ready = [{"addresses": ["10.244.2.9"], "conditions": {"ready": False}}]
    rec = ClusterRecords.build([ext, db], {"shop/db": [eps("db", "shop", not_ready)]})
    reply = ask(rec, "mail.shop.svc.cluster.local.")
    assert reply.answer[0].rdtype == dns.rdatatype.CNAME
    assert texts(reply) == ["smtp.example.org."]
    assert texts(ask(rec, "db.shop.svc.cluster.local.")) == ["10.244.2.9"]


def test_aaaa_records_from_ipv6_endpoint_slices_and_pod_names() -> None:
    db = service(
        "db",
        "shop",
        {"clusterIP": "None", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
    )
    v4 = eps("db", "shop", [{"addresses": ["10.244.1.5"], "conditions": {"ready": True}}])
    v6 = eps(
        "db",
        "shop",
        [
            {"addresses": ["fd00:10:244::5"], "conditions": {"ready": True}},
            {"addresses": ["fd00:10:244::7"], "conditions": {"ready": True}, "hostname": "db-0"},
        ],
    )
    v6.addressType = "IPv6"
    v6.metadata.name = "db-y"
    rec = ClusterRecords.build([db], {"shop/db": [v4, v6]})
    assert texts(ask(rec, "db.shop.svc.cluster.local.")) == ["10.244.1.5"]
    assert texts(ask(rec, "db.shop.svc.cluster.local.", "AAAA")) == [
        "fd00:10:244::5",
        "fd00:10:244::7",
    ]
    assert texts(ask(rec, "db-0.db.shop.svc.cluster.local.", "AAAA")) == ["fd00:10:244::7"]
    assert texts(ask(rec, "fd00-10-244--5.db.shop.svc.cluster.local.", "AAAA")) == [
        "fd00:10:244::5"
    ]
    # an IPv6-only name has no A: NODATA, not NXDOMAIN
    nodata = ask(rec, "db-0.db.shop.svc.cluster.local.", "A")
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer
    assert nodata.authority[0].rdtype == dns.rdatatype.SOA
    srv = ask(rec, "_http._tcp.db.shop.svc.cluster.local.", "SRV")
    assert {(r.name.to_text(), dns.rdatatype.to_text(r.rdtype)) for r in srv.additional} == {
        ("10-244-1-5.db.shop.svc.cluster.local.", "A"),
        ("fd00-10-244--5.db.shop.svc.cluster.local.", "AAAA"),
        ("db-0.db.shop.svc.cluster.local.", "AAAA"),
    }
    ptr = dns.reversename.from_address("fd00:10:244::7").to_text()
    assert texts(ask(rec, ptr, "PTR")) == ["db-0.db.shop.svc.cluster.local."]
    # pods: a dash for each colon
    assert texts(ask(rec, "fd00-10-244--9.shop.pod.cluster.local.", "AAAA")) == ["fd00:10:244::9"]
    pod_nodata = ask(rec, "fd00-10-244--9.shop.pod.cluster.local.", "A")
    assert pod_nodata.rcode() == dns.rcode.NOERROR and not pod_nodata.answer
    v4_pod = ask(rec, "10-244-3-4.shop.pod.cluster.local.", "AAAA")
    assert v4_pod.rcode() == dns.rcode.NOERROR and not v4_pod.answer
