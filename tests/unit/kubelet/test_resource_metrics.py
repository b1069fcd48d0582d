"""The kubelet's resource metrics from a CRI runtime's container stats (kubelet/metrics.py)."""

from __future__ import annotations

from prometheus_client import generate_latest

from kubelet.metrics import ContainerUsage, Metrics


def test_container_and_pod_series() -> None:
    m = Metrics()
    m.resources.snapshot = [
        ContainerUsage("ns", "web", "app", 1.5, 1000, 1_700_000_000.0),
        ContainerUsage("ns", "web", "side", 0.5, 24, 1_700_000_001.0),
    ]
    text = generate_latest(m.registry).decode()
    assert 'container_cpu_usage_seconds_total{container="app",namespace="ns",pod="web"} 1.5' in text
    assert (
        'container_memory_working_set_bytes{container="side",namespace="ns",pod="web"} 24.0' in text
    )
    assert 'pod_cpu_usage_seconds_total{namespace="ns",pod="web"} 2.0' in text
    assert 'pod_memory_working_set_bytes{namespace="ns",pod="web"} 1024.0' in text


def test_no_snapshot_no_series() -> None:
    text = generate_latest(Metrics().registry).decode()
    assert "container_cpu_usage_seconds_total{" not in text
