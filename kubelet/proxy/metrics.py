"""Prometheus metrics of a proxy process (own registry, no module globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.connections = Counter(
            "proxy_connections",
            "Client connections accepted, by service (namespace/name:port).",
            ["service"],
            registry=self.registry,
        )
        self.active = Gauge(
            "proxy_active_connections",
            "Connections being forwarded now, by service.",
            ["service"],
            registry=self.registry,
        )
        self.errors = Counter(
            "proxy_errors",
            "Failures by service and reason (endpoint_refused, no_endpoints, copy, bind).",
            ["service", "reason"],
            registry=self.registry,
        )
        self.bytes = Counter(
            "proxy_bytes",
            "Bytes forwarded by service and direction (in: client to pod, out: pod to client).",
            ["service", "direction"],
            registry=self.registry,
        )
        self.listeners = Gauge(
            "proxy_listeners", "Sockets listening for services.", registry=self.registry
        )

        self.mode = Gauge(
            "proxy_mode",
            "1 for the mode this proxy runs in (userspace or nftables).",
            ["mode"],
            registry=self.registry,
        )
        self.sync_seconds = Histogram(
            "proxy_sync_proxy_rules_duration_seconds",
            "Seconds one nftables transaction took to apply (nftables mode).",
            registry=self.registry,
        )

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        if port > 0:
            start_http_server(port, addr=host, registry=self.registry)
