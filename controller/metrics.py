"""Prometheus metrics of the controller manager, named after kube-controller-manager's.

Held in one object with its own registry (no module globals), served by `serve`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.depth = Gauge(
            "workqueue_depth", "Keys waiting in a controller's work queue.", ["name"],
            registry=self.registry,
        )  # fmt: skip
        self.syncs = Counter(
            "controller_syncs",
            "Reconciles of one key, by controller and result (success, error).",
            ["controller", "result"],
            registry=self.registry,
        )
        self.sync_duration = Histogram(
            "controller_sync_duration_seconds",
            "Time to reconcile one key.",
            ["controller"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "1 while this process leads, else 0.",
            ["name"],
            registry=self.registry,
        )
        self.informer_handler_errors = Counter(
            "controller_informer_handler_errors",
            "Informer events a controller's handler refused (objects it cannot digest), by kind; "
            "the informer keeps its previous state for them.",
            ["kind"],
            registry=self.registry,
        )
        self.evictions = Counter(
            "node_collector_evictions",
            "Pods deleted by the node lifecycle controller (NoExecute taint, node gone).",
            registry=self.registry,
        )

        self.zone_size = Gauge(
            "node_collector_zone_size", "Nodes per zone.", ["zone"], registry=self.registry
        )
        self.zone_health = Gauge(
            "node_collector_zone_health",
            "Percentage of a zone's nodes that are Ready.",
            ["zone"],
            registry=self.registry,
        )
        self.unhealthy_nodes = Gauge(
            "node_collector_unhealthy_nodes_in_zone",
            "Nodes of a zone that are not Ready.",
            ["zone"],
            registry=self.registry,
        )

    def observe_zone(self, zone: str, size: int, unhealthy: int) -> None:
        self.zone_size.labels(zone=zone).set(size)
        self.zone_health.labels(zone=zone).set(100.0 * (size - unhealthy) / size if size else 100)
        self.unhealthy_nodes.labels(zone=zone).set(unhealthy)

    def observe_sync(self, controller: str, ok: bool, seconds: float) -> None:
        self.syncs.labels(controller=controller, result="success" if ok else "error").inc()
        self.sync_duration.labels(controller=controller).observe(seconds)

    def track_queue(self, name: str, length: Callable[[], int]) -> None:
        self.depth.labels(name=name).set_function(lambda: float(length()))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        if port > 0:
            start_http_server(port, addr=host, registry=self.registry)
