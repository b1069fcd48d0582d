"""Settings of the cluster DNS process, built once in __main__ from flags and passed in."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field

from tinykube.flags import add_apiserver_flag, apiserver_flag, listen_address
from tinykube.tls import Security, add_flags, security_from_args

DEFAULT_PORT = 10260


@dataclass(frozen=True)
class Settings:
    apiserver: str = "127.0.0.1:6443"
    bind_address: str = f"127.0.0.1:{DEFAULT_PORT}"  # gRPC health
    dns_address: str = "127.0.0.1:53"  # host:port DNS listens on (UDP and TCP)
    domain: str = "cluster.local"
    upstreams: tuple[str, ...] = ()  # empty: the nameservers of resolv_conf
    resolv_conf: str = "/etc/resolv.conf"
    min_rebuild: float = 0.2
    security: Security = field(default_factory=Security)

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None) -> Settings:
        p = argparse.ArgumentParser(
            prog="python -m kubelet.dns",
            description="tinykube cluster DNS: Services and pods by name, the rest forwarded",
        )
        add_apiserver_flag(p, "TINYKUBE_APISERVER")
        p.add_argument("--bind-address", default="127.0.0.1", help="gRPC health listen host")
        p.add_argument("--port", type=int, default=DEFAULT_PORT, help="gRPC health port")
        p.add_argument("--dns-address", default=cls.dns_address, help="host:port of the DNS server")
        p.add_argument("--cluster-domain", default=cls.domain, help="the cluster's DNS zone")
        p.add_argument(
            "--upstream",
            action="append",
            default=[],
            help="upstream server host[:port] (repeatable; default: --resolv-conf's)",
        )
        p.add_argument("--resolv-conf", default=cls.resolv_conf, help="upstreams' source")
        add_flags(p)
        a = p.parse_args(argv)
        security = security_from_args(a)
        if ":" not in a.dns_address:
            p.error("--dns-address wants host:port")
        return cls(
            apiserver=security.apiserver(apiserver_flag(a), cls.apiserver),
            security=security,
            bind_address=listen_address(a.bind_address, a.port),
            dns_address=a.dns_address,
            domain=a.cluster_domain.strip("."),
            upstreams=tuple(a.upstream),
            resolv_conf=a.resolv_conf,
        )
