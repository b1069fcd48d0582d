"""Prometheus metrics of a kubelet process, named after the kubelet's where one exists.

Held in one object with its own registry (no module globals), served by `serve`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.running_pods = Gauge(
            "kubelet_running_pods", "Pods with a pod worker on this kubelet.",
            registry=self.registry,
        )  # fmt: skip
        self.informer_handler_errors = Counter(
            "kubelet_informer_handler_errors",
            "Informer events the kubelet's handlers refused (objects it cannot digest), by kind; "
            "the informer keeps its previous state for them.",
            ["kind"],
            registry=self.registry,
        )
        self.container_events = Counter(
            "kubelet_container_events",
            "Container lifecycle events by reason (Started, BackOff, Failed, Killing).",
            ["reason"],
            registry=self.registry,
        )
        self.lease_renewals = Counter(
            "kubelet_node_lease_renewals",
            "Node Lease renewals by result (success, error).",
            ["result"],
            registry=self.registry,
        )

    def track_pods(self, count: Callable[[], int]) -> None:
        self.running_pods.set_function(lambda: float(count()))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        if port > 0:
            start_http_server(port, addr=host, registry=self.registry)
