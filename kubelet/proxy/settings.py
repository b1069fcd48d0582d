"""Settings of a proxy process, built once in __main__ from flags and passed in."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from tinykube.flags import add_apiserver_flag, apiserver_flag, listen_address
from tinykube.tls import Security, add_flags, security_from_args

DEFAULT_PORT = 10256


@dataclass(frozen=True)
class Settings:
    node_name: str = ""
    apiserver: str = "127.0.0.1:6443"
    # gRPC health and reflection (kube-proxy's healthz port).
    bind_address: str = f"127.0.0.1:{DEFAULT_PORT}"
    # Where this node's nodePorts listen; "" means the Node's InternalIP, read from the API.
    node_ip: str = ""
    metrics_port: int = 0
    # Seconds to wait for a backend to accept before trying the next endpoint.
    connect_timeout: float = 2.0
    # Full resync of listeners (retries a listener that failed to bind) at least this often.
    sync_period: float = 5.0
    # Bytes read per chunk when copying a connection.
    buffer_size: int = 64 * 1024
    # userspace, nftables, or auto: nftables when the pods have a network of their own
    # (--cluster-cidr given), this process is root and `nft` is installed; userspace otherwise.
    proxy_mode: str = "auto"
    # The nftables mode's table (ip family); several node proxies on one machine each own one.
    nft_table: str = "tinykube-proxy"
    # The pod network; cluster-IP traffic from outside it is masqueraded (kube's --cluster-cidr).
    cluster_cidr: str = ""
    # nftables transactions at least this many seconds apart (kube's minSyncPeriod).
    min_sync_period: float = 1.0
    # --kubeconfig, --insecure and the serving certificate (tinykube/tls.py)
    security: Security = field(default_factory=Security)

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None) -> Settings:
        p = argparse.ArgumentParser(
            prog="python -m kubelet.proxy",
            description="tinykube proxy: forwards Services' cluster IPs and nodePorts to pods",
        )
        p.add_argument(
            "--node-name",
            default=os.environ.get("TINYKUBE_NODE_NAME", ""),
            help="the node this proxy runs on (env TINYKUBE_NODE_NAME)",
        )
        add_apiserver_flag(p, "TINYKUBE_APISERVER")
        p.add_argument(
            "--bind-address",
            default=os.environ.get("TINYKUBE_BIND_ADDRESS", "127.0.0.1"),
            help="listen address of the gRPC health server (host, or host:port)",
        )
        p.add_argument("--port", type=int, default=DEFAULT_PORT, help="gRPC health port")
        p.add_argument(
            "--node-ip",
            default=os.environ.get("TINYKUBE_NODE_IP", ""),
            help="address nodePorts listen on (default: the Node's InternalIP)",
        )
        p.add_argument("--metrics-port", type=int, default=0, help="Prometheus port, 0: off")
        p.add_argument(
            "--connect-timeout",
            type=float,
            default=cls.connect_timeout,
            help="seconds a backend has to accept before the next endpoint is tried",
        )
        p.add_argument(
            "--proxy-mode",
            choices=("auto", "userspace", "nftables"),
            default=os.environ.get("TINYKUBE_PROXY_MODE", "auto"),
            help="auto: nftables with --cluster-cidr as root with nft installed, else userspace",
        )
        p.add_argument("--nft-table", default=cls.nft_table, help="the nftables mode's table")
        p.add_argument(
            "--cluster-cidr",
            default=os.environ.get("TINYKUBE_CLUSTER_CIDR", ""),
            help="the pods' network (traffic from outside it to cluster IPs is masqueraded)",
        )
        p.add_argument(
            "--min-sync-period",
            type=float,
            default=cls.min_sync_period,
            help="seconds between two nftables transactions at least",
        )
        add_flags(p)
        a = p.parse_args(argv)
        if not a.node_name:
            p.error("--node-name is required")
        security = security_from_args(a)
        return cls(
            node_name=a.node_name,
            apiserver=security.apiserver(apiserver_flag(a), cls.apiserver),
            security=security,
            bind_address=listen_address(a.bind_address, a.port),
            node_ip=a.node_ip,
            metrics_port=a.metrics_port,
            connect_timeout=a.connect_timeout,
            proxy_mode=a.proxy_mode,
            nft_table=a.nft_table,
            cluster_cidr=a.cluster_cidr,
            min_sync_period=a.min_sync_period,
        )
