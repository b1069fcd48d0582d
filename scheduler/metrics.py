"""Prometheus metrics of the scheduler, named after kube-scheduler's.

Held in one object with its own registry (no module globals), served by `serve`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Scheduling attempts by result (scheduled, unschedulable, error).",
            ["result"],
            registry=self.registry,
        )
        self.informer_handler_errors = Counter(
            "scheduler_informer_handler_errors",
            "Informer events the scheduler's cache refused (objects it cannot digest), by kind; "
            "the cache keeps its previous state for them.",
            ["kind"],
            registry=self.registry,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency (the algorithm plus, for scheduled pods, the bind).",
            ["result"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            "scheduler_pod_scheduling_duration_seconds",
            "End-to-end scheduling latency: first queued to bound.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.pending = Gauge(
            "scheduler_pending_pods",
            "Pods in the scheduling queue by queue (active, backoff, unschedulable).",
            ["queue"],
            registry=self.registry,
        )

        self._attempt_children: dict[str, tuple[Counter, Histogram]] = {}
        self.bind_batch = Histogram(
            "scheduler_bind_batch_size",
            "Bindings per Pods/BindBatch RPC (binds ready at the same moment share one).",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        )

    def observe_bind_batch(self, size: int) -> None:
        self.bind_batch.observe(size)

    def track_events(self, dropped: Callable[[], int]) -> None:
        """Export the event recorder's drop count (events beyond its bounded backlog)."""
        self.registry.register(_EventsDropped(dropped))

    def observe_attempt(self, result: str, seconds: float) -> None:
        # Once per pod: `labels()` takes a lock and builds its key on every call, so each
        # result's two children are looked up once and kept.
        children = self._attempt_children.get(result)
        if children is None:
            children = self._attempt_children[result] = (
                self.attempts.labels(result=result),
                self.attempt_duration.labels(result=result),
            )
        children[0].inc()
        children[1].observe(seconds)

    def observe_e2e(self, seconds: float) -> None:
        self.e2e.observe(seconds)

    def track_queue(self, lengths: Callable[[], dict[str, int]]) -> None:
        def reader(q: str) -> Callable[[], float]:
            return lambda: float(lengths().get(q, 0))

        for q in ("active", "backoff", "unschedulable", "gated"):
            self.pending.labels(queue=q).set_function(reader(q))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        if port > 0:
            start_http_server(port, addr=host, registry=self.registry)


class _EventsDropped(Collector):
    def __init__(self, dropped: Callable[[], int]) -> None:
        self._dropped = dropped

    def collect(self) -> list[CounterMetricFamily]:
        return [
            CounterMetricFamily(
                "scheduler_events_dropped",
                "Events not written because the recorder's backlog was full (scheduling never "
                "waits for an Event).",
                value=self._dropped(),
            )
        ]
