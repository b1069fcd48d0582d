"""Settings of a kubelet process, built once in __main__ from flags and passed in."""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tinykube.flags import add_apiserver_flag, apiserver_flag, listen_address, parse_duration
from tinykube.quantity import QuantityError, parse_quantity
from tinykube.tls import Security, add_flags, security_from_args

_TAINT = re.compile(
    r"^(?P<key>[^=:]+)(=(?P<value>[^:]*))?:(?P<effect>NoSchedule|PreferNoSchedule|NoExecute)$"
)


def parse_labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` as kubelet's --node-labels."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise argparse.ArgumentTypeError(f"invalid label {part!r}: want key=value")
        k, v = part.split("=", 1)
        out[k] = v
    return out


def parse_taints(text: str) -> list[tuple[str, str, str]]:
    """`k=v:NoSchedule,k2:NoExecute` as kubelet's --register-with-taints."""
    out: list[tuple[str, str, str]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _TAINT.match(part)
        if match is None:
            raise argparse.ArgumentTypeError(
                f"invalid taint {part!r}: want key[=value]:NoSchedule|PreferNoSchedule|NoExecute"
            )
        out.append((match["key"], match["value"] or "", match["effect"]))
    return out


def parse_resources(text: str) -> dict[str, str]:
    """`cpu=4,memory=8Gi,pods=110` with every amount a valid quantity."""
    out = parse_labels(text)
    for name, amount in out.items():
        try:
            parse_quantity(amount)
        except QuantityError as exc:
            raise argparse.ArgumentTypeError(f"invalid quantity for {name}: {exc}") from exc
    return out


def machine_memory_kib() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 4 * 1024 * 1024


@dataclass(frozen=True)
class Settings:
    node_name: str
    apiserver: str = "127.0.0.1:6443"
    bind_address: str = "127.0.0.1:10250"
    # The address other processes use to reach this kubelet (Node InternalIP / pod hostIP).
    node_ip: str = "127.0.0.1"
    metrics_port: int = 0
    runtime: str = "process"
    root_dir: Path = Path("kubelet-data")
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[tuple[str, str, str]] = field(default_factory=list)
    capacity: dict[str, str] = field(default_factory=dict)
    node_lease_duration_seconds: int = 40
    node_status_update_frequency: float = 10.0
    node_status_report_frequency: float = 300.0
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    poll_interval: float = 0.5
    fake_nodes: int = 0
    # fake runtime: one pod watch per hosted node (spec.nodeName=<node>, as each real kubelet
    # has) instead of one for all of them
    fake_pod_watch_per_node: bool = False
    # Lease renewals and pod status writes as messages of each node's own write streams
    # (Leases/UpdateStream, Pods/UpdateStatusStream; docs/api.md#write-streams) instead of calls;
    # --write-streams=false: unary calls.
    write_streams: bool = True
    # exec, attach and port-forward streams with no traffic for this long are closed.
    streaming_connection_idle_timeout: float = 4 * 3600.0
    node_name_prefix: str = "hollow-"
    # The CRI runtime (runtime "cri"): its endpoint, the node's pod CIDR (else the Node's
    # spec.podCIDR), the CNI config directory the kubelet writes its network to, the bridge,
    # and the cgroup under which pods' cgroups go.
    container_runtime_endpoint: str = ""
    pod_cidr: str = ""
    cni_conf_dir: Path | None = None
    cni_bridge: str = "tkcni0"
    cgroup_root: str = "/tinykube"
    # kube's --seccomp-default: RuntimeDefault for containers that set no seccompProfile.
    seccomp_default: bool = False
    # Pods' DNS (CRI runtime; kube's --cluster-dns / --cluster-domain / --resolv-conf): the
    # nameserver of dnsPolicy ClusterFirst pods, their search domains' suffix, and the host's
    # resolv.conf that dnsPolicy Default copies ("" for none).
    cluster_dns: str = ""
    cluster_domain: str = "cluster.local"
    resolv_conf: str = "/etc/resolv.conf"
    # --kubeconfig, --insecure and the serving certificate (tinykube/tls.py)
    security: Security = field(default_factory=Security)

    @property
    def lease_renew_interval(self) -> float:
        """As the kubelet: a quarter of the lease duration (10 s for the default 40 s)."""
        return self.node_lease_duration_seconds / 4.0

    @property
    def node_names(self) -> list[str]:
        if self.fake_nodes > 0:
            return [f"{self.node_name_prefix}{i}" for i in range(self.fake_nodes)]
        return [self.node_name]

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None) -> Settings:
        p = argparse.ArgumentParser(prog="python -m kubelet", description="tinykube node agent")
        p.add_argument(
            "--node-name",
            default=os.environ.get("NODE_NAME", socket.gethostname()),
            help="the Node this kubelet registers (default: $NODE_NAME or the hostname)",
        )
        add_apiserver_flag(p, "TINYKUBE_APISERVER")
        p.add_argument(
            "--bind-address",
            default="",
            help="listen address of the gRPC server (host, or host:port; default: --node-ip)",
        )
        p.add_argument(
            "--port",
            type=int,
            default=10250,
            help="gRPC port (Kubelet.Logs, health); 0 picks a free one",
        )
        p.add_argument(
            "--node-ip",
            default="127.0.0.1",
            help="the node's InternalIP, also the pods' hostIP (how others reach it)",
        )
        p.add_argument(
            "--metrics-port",
            type=int,
            default=0,
            help="serve Prometheus metrics on this port (0: off)",
        )
        p.add_argument(
            "--runtime",
            choices=("process", "fake"),
            default="process",
            help="process: containers are local processes; fake: pods Running at once",
        )
        p.add_argument(
            "--root-dir", default="", help="state and logs (default ./kubelet-data/NODE)"
        )
        p.add_argument(
            "--node-labels",
            type=parse_labels,
            default={},
            help="labels to register the node with: k=v,k2=v2",
        )
        p.add_argument(
            "--register-with-taints",
            type=parse_taints,
            default=[],
            help="taints to register the node with: k=v:NoSchedule,...",
        )
        p.add_argument(
            "--capacity",
            type=parse_resources,
            default={},
            help="cpu=4,memory=8Gi,pods=110 (default: this machine's cores and memory, 110 pods)",
        )
        p.add_argument(
            "--node-lease-duration-seconds",
            type=int,
            default=40,
            help="Lease duration; renewed every quarter of it (default 40)",
        )
        p.add_argument(
            "--node-status-update-frequency",
            type=parse_duration,
            default=10.0,
            help="how often node status is checked and posted if changed (default 10s)",
        )
        p.add_argument(
            "--node-status-report-frequency",
            type=parse_duration,
            default=300.0,
            help="post node status at least this often even if unchanged (default 5m)",
        )
        p.add_argument(
            "--crash-loop-backoff",
            type=parse_duration,
            default=10.0,
            help="first restart back-off of a crashed container, doubling (default 10s)",
        )
        p.add_argument(
            "--crash-loop-backoff-max",
            type=parse_duration,
            default=300.0,
            help="longest restart back-off (default 300s)",
        )
        p.add_argument(
            "--poll-interval",
            type=parse_duration,
            default=0.5,
            help="how often running containers are checked for exits (default 500ms)",
        )
        p.add_argument(
            "--streaming-connection-idle-timeout",
            type=parse_duration,
            default=4 * 3600.0,
            help="close exec, attach and port-forward streams idle this long (default 4h)",
        )
        p.add_argument("--fake-nodes", type=int, default=0, help="fake runtime: host N nodes")
        p.add_argument(
            "--write-streams",
            nargs="?",
            const="true",
            default="true",
            choices=("true", "false"),
            help="renew each node's Lease and write its pods' status through write streams of "
            "the node's own (one request per message); false: a unary call each (default true)",
        )
        p.add_argument(
            "--fake-pod-watch-per-node",
            action="store_true",
            help="fake runtime: a pod watch per hosted node, as real kubelets (default: one)",
        )
        p.add_argument(
            "--node-name-prefix",
            default="hollow-",
            help="fake runtime: names of the hosted nodes are PREFIX0, PREFIX1, ...",
        )
        p.add_argument(
            "--container-runtime-endpoint",
            default="",
            help="a CRI runtime's socket (unix:///path/containerd.sock): pods run as its "
            "containers (default: the process runtime)",
        )
        p.add_argument(
            "--pod-cidr",
            default="",
            help="CRI runtime: this node's pod CIDR (default: the Node's spec.podCIDR)",
        )
        p.add_argument(
            "--cni-conf-dir",
            default="",
            help="CRI runtime: where the kubelet writes the node's CNI network config "
            "(the runtime's CNI conf_dir)",
        )
        p.add_argument(
            "--cni-bridge", default="tkcni0", help="CRI runtime: the pod network's bridge"
        )
        p.add_argument(
            "--cgroup-root",
            default="/tinykube",
            help="CRI runtime: the cgroup (cgroupfs) under which pods' cgroups are made",
        )
        p.add_argument(
            "--seccomp-default",
            action="store_true",
            help="CRI runtime: the runtime's default seccomp profile for containers that set "
            "none (kube's --seccomp-default; profiles of type Localhost live in ROOT_DIR/seccomp)",
        )
        p.add_argument(
            "--cluster-dns", default="", help="CRI runtime: ClusterFirst pods' nameserver IP"
        )
        p.add_argument("--cluster-domain", default="cluster.local", help="the cluster's DNS domain")
        p.add_argument(
            "--resolv-conf",
            default="/etc/resolv.conf",
            help="the resolver config dnsPolicy Default pods get ('' for none)",
        )
        add_flags(p)
        a = p.parse_args(argv)
        if a.fake_nodes and a.runtime != "fake":
            p.error("--fake-nodes needs --runtime fake")
        runtime = a.runtime
        if a.container_runtime_endpoint:
            if not a.container_runtime_endpoint.startswith("unix:///"):
                p.error(
                    "--container-runtime-endpoint: must be unix:///<absolute path to the socket>"
                )
            if a.fake_nodes:
                p.error("--container-runtime-endpoint cannot be used with --fake-nodes")
            runtime = "cri"
        if len(a.cni_bridge) > 15:
            p.error("--cni-bridge: a Linux interface name has at most 15 characters")
        capacity = {
            "cpu": str(os.cpu_count() or 1),
            "memory": f"{machine_memory_kib()}Ki",
            "pods": "110",
            **a.capacity,
        }
        root = Path(a.root_dir) if a.root_dir else Path("kubelet-data") / a.node_name
        security = security_from_args(a)
        return cls(
            node_name=a.node_name,
            apiserver=security.apiserver(apiserver_flag(a), cls.apiserver),
            security=security,
            bind_address=listen_address(a.bind_address or a.node_ip, a.port),
            node_ip=a.node_ip,
            metrics_port=a.metrics_port,
            runtime=runtime,
            root_dir=root.absolute(),
            labels=a.node_labels,
            taints=a.register_with_taints,
            capacity=capacity,
            node_lease_duration_seconds=a.node_lease_duration_seconds,
            node_status_update_frequency=a.node_status_update_frequency,
            node_status_report_frequency=a.node_status_report_frequency,
            backoff_initial=a.crash_loop_backoff,
            backoff_max=a.crash_loop_backoff_max,
            poll_interval=a.poll_interval,
            fake_nodes=a.fake_nodes,
            fake_pod_watch_per_node=a.fake_pod_watch_per_node,
            write_streams=a.write_streams == "true",
            streaming_connection_idle_timeout=a.streaming_connection_idle_timeout,
            node_name_prefix=a.node_name_prefix,
            container_runtime_endpoint=a.container_runtime_endpoint,
            pod_cidr=a.pod_cidr,
            cni_conf_dir=Path(a.cni_conf_dir).absolute() if a.cni_conf_dir else None,
            cni_bridge=a.cni_bridge,
            cgroup_root=a.cgroup_root,
            seccomp_default=a.seccomp_default,
            cluster_dns=a.cluster_dns,
            cluster_domain=a.cluster_domain.strip("."),
            resolv_conf=a.resolv_conf,
        )
