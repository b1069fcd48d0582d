"""Prometheus metrics of one apiserver, in its own registry.

Each `APIServer` owns a `Metrics` (several run in one test process, so nothing is registered in
the global default registry); `__main__` serves `metrics.registry` over HTTP.

The counters and histograms every request touches (about six updates per write) are
prometheus_client's with their values' mutexes taken out (`LoopCounter`, `LoopHistogram`):
prometheus_client takes a lock per value and walks the buckets in Python, about 2 µs an
increment and 4 µs an observation, several percent of a Pod Create's CPU. Only the event loop's
thread updates them; the metrics server's thread reads them, as it reads any Python float (a
scrape may see one request's updates half applied, as it may with prometheus_client's own
per-value locks). What they expose is prometheus_client's, sample for sample.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class _LoopValue:
    """A metric value without a mutex (prometheus_client's MutexValue's interface)."""

    __slots__ = ("value",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.value = 0.0

    def inc(self, amount: float) -> None:
        self.value += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        self.value = value

    def set_exemplar(self, exemplar: Any) -> None:
        pass

    def get(self) -> float:
        return self.value

    def get_exemplar(self) -> None:
        return None


class LoopCounter(Counter):
    """A Counter updated from the event loop's thread only (see the module docstring)."""

    def _metric_init(self) -> None:
        super()._metric_init()
        self._value: Any = _LoopValue()

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        if amount < 0 or exemplar:
            super().inc(amount, exemplar)  # refuses, or keeps the exemplar
            return
        try:
            self._value.value += amount
        except AttributeError:  # a labelled parent: prometheus_client's error
            super().inc(amount)
            raise


class LoopHistogram(Histogram):
    """A Histogram updated from the event loop's thread only (see the module docstring)."""

    def _metric_init(self) -> None:
        super()._metric_init()
        self._sum: Any = _LoopValue()
        self._buckets: Any = [_LoopValue() for _ in self._upper_bounds]
        self._bounds = tuple(self._upper_bounds)

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        if exemplar:
            super().observe(amount, exemplar)
            return
        try:
            # The first bound at or above the amount: its bucket (the last is +Inf).
            self._buckets[bisect_left(self._bounds, amount)].value += 1
            self._sum.value += amount
        except AttributeError:  # a labelled parent: prometheus_client's error
            super().observe(amount)
            raise


_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = LoopCounter(
            "apiserver_request_total",
            "gRPC requests by method and status code.",
            ["method", "code"],
            registry=r,
        )
        self.request_duration = LoopHistogram(
            "apiserver_request_duration_seconds",
            "gRPC request latency by method (for Watch: until the stream is set up).",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.watchers = Gauge(
            "apiserver_registered_watchers",
            "Client watch streams currently open, by kind.",
            ["kind"],
            registry=r,
        )
        self.watchers_terminated = Counter(
            "apiserver_terminated_watchers_total",
            "Client watch streams cut off by the server, by kind and reason.",
            ["kind", "reason"],
            registry=r,
        )
        self.etcd_requests = LoopCounter(
            "apiserver_etcd_requests_total",
            "Requests sent to etcd by operation and result.",
            ["operation", "result"],
            registry=r,
        )
        self.etcd_request_duration = LoopHistogram(
            "apiserver_etcd_request_duration_seconds",
            "etcd request latency by operation.",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.etcd_watches_opened = Counter(
            "apiserver_etcd_watches_opened_total",
            "etcd watch streams opened by the watch cache, by kind.",
            ["kind"],
            registry=r,
        )
        self.etcd_watches_open = Gauge(
            "apiserver_etcd_watches_open",
            "etcd watch streams open right now, by kind.",
            ["kind"],
            registry=r,
        )
        self.watch_cache_events = LoopCounter(
            "apiserver_watch_cache_events_total",
            "Events received from etcd by the watch cache, by kind.",
            ["kind"],
            registry=r,
        )
        self.watch_events_sent = LoopCounter(
            "apiserver_watch_events_sent_total",
            "Events written to client watch streams, by kind and method (Watch, WatchBatch).",
            ["kind", "method"],
            registry=r,
        )
        self.watch_messages_sent = LoopCounter(
            "apiserver_watch_messages_sent_total",
            "gRPC messages written to client watch streams, by kind and method; "
            "events / messages is WatchBatch's average batch size.",
            ["kind", "method"],
            registry=r,
        )
        # Admission webhooks, as kube-apiserver's (type "admit" for mutating, "validating").
        self.webhook_duration = Histogram(
            "apiserver_admission_webhook_admission_duration_seconds",
            "Admission webhook latency by webhook name, type, operation and whether it refused.",
            ["name", "type", "operation", "rejected"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.webhook_rejections = Counter(
            "apiserver_admission_webhook_rejection_count",
            "Admission webhook refusals and failures by webhook name, type, operation, "
            "error type (calling_webhook_error, no_error) and code.",
            ["name", "type", "operation", "error_type", "rejection_code"],
            registry=r,
        )
        self.etcd_txn_batch_size = LoopHistogram(
            "apiserver_etcd_txn_batch_size",
            "Writes per etcd Txn (concurrent single-key writes share one; see txnbatch.py).",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.compactions = Counter(
            "apiserver_etcd_compactions_total",
            "etcd compactions run by this apiserver, by result.",
            ["result"],
            registry=r,
        )
        # The in-flight limit (apiserver/flowcontrol.py), under kube-apiserver's names. kube's
        # gauge is the maximum over the last second; this one is the count when scraped.
        self.current_inflight = Gauge(
            "apiserver_current_inflight_requests",
            "Requests executing now (watches and other long-running requests not counted), "
            "by request kind (readOnly, mutating).",
            ["request_kind"],
            registry=r,
        )
        self.flowcontrol_executing = Gauge(
            "apiserver_flowcontrol_current_executing_requests",
            "Requests executing now, by priority level and flow schema.",
            ["priority_level", "flow_schema"],
            registry=r,
        )
        self.flowcontrol_inqueue = Gauge(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Requests waiting in the queues for a seat now, by priority level and flow schema.",
            ["priority_level", "flow_schema"],
            registry=r,
        )
        # kube's buckets. kube observes every request (0 for one that found a free seat); this
        # one only those that queued, so that the fast path stays a compare and an increment.
        self.flowcontrol_wait_duration = Histogram(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            "How long requests that queued waited for a seat, by priority level, flow schema "
            "and whether they then executed (true) or were refused (false).",
            ["priority_level", "flow_schema", "execute"],
            buckets=(0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30),
            registry=r,
        )
        self.flowcontrol_rejected = Counter(
            "apiserver_flowcontrol_rejected_requests_total",
            "Requests refused over the in-flight limit (HTTP 429, gRPC RESOURCE_EXHAUSTED), "
            "by priority level, flow schema and reason.",
            ["priority_level", "flow_schema", "reason"],
            registry=r,
        )
        # The bound on a connection's write-stream messages (flowcontrol.py ConnectionSlots,
        # --max-stream-messages-per-connection); tinykube's own, kube has no write streams.
        self.write_stream_waiting = Gauge(
            "apiserver_write_stream_messages_waiting",
            "Write-stream messages read and waiting for their connection's slot now (their "
            "streams read nothing more meanwhile).",
            registry=r,
        )
        self.write_stream_expired = Counter(
            "apiserver_write_stream_messages_expired_total",
            "Write-stream messages answered DEADLINE_EXCEEDED without running: their deadline "
            "passed while they waited for their connection's slot or unread behind one that "
            "did, by method.",
            ["method"],
            registry=r,
        )
