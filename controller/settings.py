"""Settings of the controller manager, built once in __main__ from flags and passed in."""

from __future__ import annotations

import argparse
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from controller.controllers import CONTROLLERS, check_selection
from controller.nodeipam import CIDRSet
from controller.servicelb import DEFAULT_CLASS as DEFAULT_LB_CLASS
from controller.servicelb import DEFAULT_POOL as DEFAULT_LB_POOL
from controller.servicelb import AddressPool
from tinykube.flags import add_apiserver_flag, apiserver_flag, listen_address, parse_duration
from tinykube.jwt import KeyFileError, PrivateKey, load_private_key
from tinykube.tls import Security, add_flags, security_from_args


@dataclass(frozen=True)
class Settings:
    apiserver: str = "127.0.0.1:6443"
    bind_address: str = "127.0.0.1:10257"
    metrics_port: int = 0
    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    lease_namespace: str = "kube-system"
    lease_name: str = "tinykube-controller-manager"
    identity: str = ""
    node_monitor_grace_period: float = 40.0
    node_monitor_period: float = 5.0
    default_unreachable_toleration_seconds: float = 300.0
    default_not_ready_toleration_seconds: float = 300.0
    # NoExecute tainting per zone (kube's --node-eviction-rate and its disruption settings)
    node_eviction_rate: float = 0.1
    secondary_node_eviction_rate: float = 0.01
    large_cluster_size_threshold: int = 50
    unhealthy_zone_threshold: float = 0.55
    concurrent_replicaset_syncs: int = 5
    concurrent_deployment_syncs: int = 5
    concurrent_gc_syncs: int = 20
    concurrent_endpoint_syncs: int = 5
    concurrent_disruption_syncs: int = 2
    concurrent_namespace_syncs: int = 10
    concurrent_job_syncs: int = 5
    concurrent_ttl_after_finished_syncs: int = 5
    # The Job controller's back-off before replacing failed pods: base doubling per failure,
    # capped (kube's DefaultJobPodFailureBackOff 10 s and MaxJobPodFailureBackOff 10 min).
    job_backoff_base: float = 10.0
    job_backoff_max: float = 600.0
    concurrent_daemonset_syncs: int = 2
    # EndpointSlices (kube's --max-endpoints-per-slice and --concurrent-service-endpoint-syncs)
    max_endpoints_per_slice: int = 100
    concurrent_service_endpoint_syncs: int = 5
    # --kubeconfig, --insecure and the serving certificate (tinykube/tls.py)
    security: Security = field(default_factory=Security)
    # kube's --controllers: "*" (every controller on by default), "name", "-name"; names or
    # aliases from controller/controllers.py (the first entry naming a controller decides).
    controllers: tuple[str, ...] = ("*",)
    # How often the garbage collector asks which kinds the API serves (kube's 30 s).
    gc_resync_period: float = 30.0
    # The node IPAM controller (runs only with allocate_node_cidrs): Nodes' spec.podCIDR from
    # cluster_cidr, subnets of node_cidr_mask_size bits.
    allocate_node_cidrs: bool = False
    cluster_cidr: str = ""
    node_cidr_mask_size: int = 24
    # The service-lb controller: LoadBalancer Services' addresses from this pool (CIDRs or
    # first-last ranges), for Services without a loadBalancerClass or with this one.
    service_lb_pool: str = DEFAULT_LB_POOL
    service_lb_class: str = DEFAULT_LB_CLASS
    # kube-controller-manager's --service-account-private-key-file (the token controller signs
    # token Secrets with it; without it that controller is off) and --root-ca-file (their
    # ca.crt), read at start.
    service_account_key: PrivateKey | None = None
    root_ca: bytes = b""

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None) -> Settings:
        p = argparse.ArgumentParser(
            prog="python -m controller",
            description="tinykube controller manager: ReplicaSet, node lifecycle, GC, endpoints, "
            "disruption, namespace, clusterrole aggregation, serviceaccount",
        )
        add_apiserver_flag(p, "TINYKUBE_APISERVER")
        p.add_argument(
            "--bind-address",
            default="127.0.0.1",
            help="listen address of the health server (host, or host:port)",
        )
        p.add_argument("--port", type=int, default=10257, help="health port (default 10257)")
        p.add_argument(
            "--metrics-port",
            type=int,
            default=0,
            help="serve Prometheus metrics on this port (0: off)",
        )
        p.add_argument(
            "--leader-elect",
            default="true",
            choices=("true", "false"),
            help="run leader election on a Lease (default true)",
        )
        p.add_argument(
            "--leader-elect-lease-duration", type=parse_duration, default=15.0, help="default 15s"
        )
        p.add_argument(
            "--leader-elect-renew-deadline", type=parse_duration, default=10.0, help="default 10s"
        )
        p.add_argument(
            "--leader-elect-retry-period", type=parse_duration, default=2.0, help="default 2s"
        )
        p.add_argument("--leader-elect-resource-namespace", default=cls.lease_namespace)
        p.add_argument("--leader-elect-resource-name", default=cls.lease_name)
        p.add_argument(
            "--identity", default="", help="leader election identity (default: hostname_uuid)"
        )
        p.add_argument(
            "--node-monitor-grace-period",
            type=parse_duration,
            default=40.0,
            help="a node whose Lease is not renewed this long becomes Ready=Unknown (default 40s)",
        )
        p.add_argument(
            "--node-monitor-period",
            type=parse_duration,
            default=5.0,
            help="how often nodes are checked (default 5s)",
        )
        p.add_argument(
            "--default-unreachable-toleration-seconds",
            type=float,
            default=300.0,
            help="seconds pods without a toleration stay on an unreachable node (default 300)",
        )
        p.add_argument(
            "--default-not-ready-toleration-seconds",
            type=float,
            default=300.0,
            help="the same for a NotReady node (default 300)",
        )
        p.add_argument(
            "--node-eviction-rate",
            type=float,
            default=0.1,
            help="nodes a second that get a NoExecute taint in a healthy zone (default 0.1)",
        )
        p.add_argument(
            "--secondary-node-eviction-rate",
            type=float,
            default=0.01,
            help="the same in a partly disrupted zone larger than --large-cluster-size-threshold "
            "(smaller zones: none) (default 0.01)",
        )
        p.add_argument(
            "--large-cluster-size-threshold",
            type=int,
            default=50,
            help="nodes a zone needs for the secondary rate to apply (default 50)",
        )
        p.add_argument(
            "--unhealthy-zone-threshold",
            type=float,
            default=0.55,
            help="share of not-Ready nodes (at least 3) that makes a zone partly disrupted "
            "(default 0.55)",
        )
        p.add_argument(
            "--concurrent-replicaset-syncs",
            type=int,
            default=5,
            help="ReplicaSets reconciled at once (default 5)",
        )
        p.add_argument(
            "--concurrent-deployment-syncs",
            type=int,
            default=5,
            help="Deployments reconciled at once (default 5)",
        )
        p.add_argument(
            "--concurrent-gc-syncs",
            type=int,
            default=20,
            help="garbage collector workers (default 20)",
        )
        p.add_argument(
            "--controllers",
            default="*",
            help="a list of controllers to enable: '*' enables all on-by-default controllers, "
            "'foo' the controller named 'foo', '-foo' disables it (default '*'). All "
            "controllers: " + ", ".join(d.name for d in CONTROLLERS),
        )
        p.add_argument(
            "--allocate-node-cidrs",
            nargs="?",
            const="true",
            default="false",
            choices=("true", "false"),
            help="give each Node a pod CIDR (spec.podCIDR) from --cluster-cidr",
        )
        p.add_argument("--cluster-cidr", default="", help="the pods' CIDR, e.g. 10.244.0.0/16")
        p.add_argument(
            "--node-cidr-mask-size",
            type=int,
            default=24,
            help="prefix length of each Node's pod CIDR (default 24)",
        )
        p.add_argument(
            "--service-lb-pool",
            default=cls.service_lb_pool,
            help="LoadBalancer Services' addresses: CIDRs or first-last ranges, comma separated "
            f"(default {cls.service_lb_pool}: loopback, for the userspace proxy)",
        )
        p.add_argument(
            "--service-lb-class",
            default=cls.service_lb_class,
            help="the loadBalancerClass the service-lb controller serves besides none",
        )
        p.add_argument(
            "--concurrent-daemonset-syncs",
            type=int,
            default=2,
            help="DaemonSets reconciled at once (default 2, as kube's)",
        )
        p.add_argument(
            "--concurrent-namespace-syncs",
            type=int,
            default=10,
            help="namespaces emptied at once (default 10)",
        )
        p.add_argument(
            "--concurrent-job-syncs",
            type=int,
            default=5,
            help="Jobs reconciled at once (default 5)",
        )
        p.add_argument(
            "--concurrent-ttl-after-finished-syncs",
            type=int,
            default=5,
            help="finished Jobs checked for their TTL at once (default 5)",
        )
        p.add_argument(
            "--job-backoff-base",
            type=parse_duration,
            default=10.0,
            help="back-off before a failed Job pod is replaced, doubled per further failure "
            "(default 10s)",
        )
        p.add_argument(
            "--job-backoff-max",
            type=parse_duration,
            default=600.0,
            help="the longest such back-off (default 10m, as Kubernetes)",
        )
        p.add_argument(
            "--max-endpoints-per-slice",
            type=int,
            default=100,
            help="the most endpoints the endpointslice controller puts in one slice (1-1000, "
            "default 100)",
        )
        p.add_argument(
            "--concurrent-service-endpoint-syncs",
            type=int,
            default=5,
            help="Services whose EndpointSlices are reconciled at once (default 5)",
        )
        p.add_argument(
            "--service-account-private-key-file",
            default="",
            help="PEM private key token Secrets are signed with (the apiserver's "
            "--service-account-key-file must verify it); none: no token Secrets",
        )
        p.add_argument(
            "--root-ca-file",
            default="",
            help="CA bundle written as ca.crt into token Secrets",
        )
        add_flags(p)
        a = p.parse_args(argv)
        if not 1 <= a.max_endpoints_per_slice <= 1000:
            p.error(f"--max-endpoints-per-slice must be 1 to 1000, not {a.max_endpoints_per_slice}")
        sa_key: PrivateKey | None = None
        root_ca = b""
        try:
            if a.service_account_private_key_file:
                sa_key = load_private_key(
                    a.service_account_private_key_file, "--service-account-private-key-file"
                )
            if a.root_ca_file:
                with open(a.root_ca_file, "rb") as f:
                    root_ca = f.read()
        except KeyFileError as exc:
            p.error(str(exc))
        except OSError as exc:
            p.error(f"--root-ca-file {a.root_ca_file!r}: {exc.strerror or exc}")
        wanted = tuple(c.strip() for c in a.controllers.split(",") if c.strip())
        try:
            check_selection(wanted)
        except ValueError as exc:
            p.error(f"--controllers: {exc}")
        for flag in ("node_eviction_rate", "secondary_node_eviction_rate"):
            if not getattr(a, flag) >= 0:
                p.error(f"--{flag.replace('_', '-')} must be 0 or more, not {getattr(a, flag)}")
        if a.large_cluster_size_threshold < 0:
            p.error(
                "--large-cluster-size-threshold must be 0 or more, "
                f"not {a.large_cluster_size_threshold}"
            )
        if not 0 < a.unhealthy_zone_threshold <= 1:
            p.error(
                "--unhealthy-zone-threshold must be above 0 and at most 1, "
                f"not {a.unhealthy_zone_threshold}"
            )
        allocate = a.allocate_node_cidrs == "true"
        if allocate:
            if not a.cluster_cidr:
                p.error("--allocate-node-cidrs needs --cluster-cidr")
            try:
                CIDRSet(a.cluster_cidr, a.node_cidr_mask_size)
            except ValueError as exc:
                p.error(f"--cluster-cidr {a.cluster_cidr!r}: {exc}")
        try:
            AddressPool(a.service_lb_pool)
        except ValueError as exc:
            p.error(str(exc))
        identity = a.identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        security = security_from_args(a)
        return cls(
            apiserver=security.apiserver(apiserver_flag(a), cls.apiserver),
            security=security,
            bind_address=listen_address(a.bind_address, a.port),
            metrics_port=a.metrics_port,
            leader_elect=a.leader_elect == "true",
            lease_duration=a.leader_elect_lease_duration,
            renew_deadline=a.leader_elect_renew_deadline,
            retry_period=a.leader_elect_retry_period,
            lease_namespace=a.leader_elect_resource_namespace,
            lease_name=a.leader_elect_resource_name,
            identity=identity,
            node_monitor_grace_period=a.node_monitor_grace_period,
            node_monitor_period=a.node_monitor_period,
            default_unreachable_toleration_seconds=a.default_unreachable_toleration_seconds,
            default_not_ready_toleration_seconds=a.default_not_ready_toleration_seconds,
            node_eviction_rate=a.node_eviction_rate,
            secondary_node_eviction_rate=a.secondary_node_eviction_rate,
            large_cluster_size_threshold=a.large_cluster_size_threshold,
            unhealthy_zone_threshold=a.unhealthy_zone_threshold,
            concurrent_replicaset_syncs=a.concurrent_replicaset_syncs,
            concurrent_deployment_syncs=a.concurrent_deployment_syncs,
            concurrent_gc_syncs=a.concurrent_gc_syncs,
            concurrent_namespace_syncs=a.concurrent_namespace_syncs,
            concurrent_job_syncs=a.concurrent_job_syncs,
            concurrent_ttl_after_finished_syncs=a.concurrent_ttl_after_finished_syncs,
            job_backoff_base=a.job_backoff_base,
            job_backoff_max=a.job_backoff_max,
            concurrent_daemonset_syncs=a.concurrent_daemonset_syncs,
            max_endpoints_per_slice=a.max_endpoints_per_slice,
            concurrent_service_endpoint_syncs=a.concurrent_service_endpoint_syncs,
            controllers=wanted,
            allocate_node_cidrs=allocate,
            cluster_cidr=a.cluster_cidr,
            node_cidr_mask_size=a.node_cidr_mask_size,
            service_lb_pool=a.service_lb_pool,
            service_lb_class=a.service_lb_class,
            service_account_key=sa_key,
            root_ca=root_ca,
        )
