"""Prometheus metrics of a kubelet process, named after the kubelet's where one exists.

Held in one object with its own registry (no module globals), served by `serve`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class ContainerUsage:
    """One container's resource usage, as a CRI runtime's ContainerStats reports it."""

    namespace: str
    pod: str
    container: str
    cpu_seconds: float
    memory_working_set_bytes: int
    timestamp: float
    uid: str = ""


class ResourceCollector(Collector):
    """The kubelet's resource metrics (its /metrics/resource series, on the metrics port):
    container_ and pod_cpu_usage_seconds_total, container_ and pod_memory_working_set_bytes,
    from the last stats snapshot (refreshed by the kubelet every 10 s, kube's housekeeping
    interval); none without a snapshot."""

    def __init__(self) -> None:
        self.snapshot: list[ContainerUsage] = []

    def collect(self) -> Iterator[Metric]:
        labels = ["container", "namespace", "pod"]
        cpu = CounterMetricFamily(
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the container in core-seconds",
            labels=labels,
        )
        mem = GaugeMetricFamily(
            "container_memory_working_set_bytes",
            "Current working set of the container in bytes",
            labels=labels,
        )
        pod_cpu = CounterMetricFamily(
            "pod_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the pod in core-seconds",
            labels=["namespace", "pod"],
        )
        pod_mem = GaugeMetricFamily(
            "pod_memory_working_set_bytes",
            "Current working set of the pod in bytes",
            labels=["namespace", "pod"],
        )
        pods: dict[tuple[str, str], tuple[float, float, float]] = {}
        for u in self.snapshot:
            values = [u.container, u.namespace, u.pod]
            cpu.add_metric(values, u.cpu_seconds, timestamp=u.timestamp)
            mem.add_metric(values, u.memory_working_set_bytes, timestamp=u.timestamp)
            c, m, t = pods.get((u.namespace, u.pod), (0.0, 0.0, 0.0))
            pods[(u.namespace, u.pod)] = (
                c + u.cpu_seconds,
                m + u.memory_working_set_bytes,
                max(t, u.timestamp),
            )
        for (ns, pod), (c, m, t) in sorted(pods.items()):
            pod_cpu.add_metric([ns, pod], c, timestamp=t)
            pod_mem.add_metric([ns, pod], m, timestamp=t)
        yield from (cpu, mem, pod_cpu, pod_mem)


# kube's: ExponentialBuckets(.005, 2.5, 14) for runtime operations; the pod start SLI's buckets.
RUNTIME_OPERATION_BUCKETS = tuple(0.005 * 2.5**i for i in range(14))
POD_START_BUCKETS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 600)


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
        self.runtime_operations = Histogram(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type.",
            ["operation_type"],
            buckets=RUNTIME_OPERATION_BUCKETS,
            registry=self.registry,
        )
        self.pod_start = Histogram(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod "
            "starting to run",
            buckets=POD_START_BUCKETS,
            registry=self.registry,
        )

        self.resources = ResourceCollector()
        self.registry.register(self.resources)

    def track_pods(self, count: Callable[[], int]) -> None:
        self.running_pods.set_function(lambda: float(count()))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        if port > 0:
            start_http_server(port, addr=host, registry=self.registry)
