"""The apiserver's lock-free request metrics (apiserver/metrics.py) expose what
prometheus_client's Counter and Histogram expose, sample for sample, and refuse the same misuse;
`protowire.each` loops over a repeated field's own elements."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from apiserver.metrics import LoopCounter, LoopHistogram
from tinykube.protowire import each
from tinykube.v1 import pod_pb2


def exposition(counter: type[Counter], histogram: type[Histogram]) -> str:
    registry = CollectorRegistry()
    c = counter("requests_total", "help", ["method"], registry=registry)
    h = histogram(
        "latency_seconds", "help", ["method"], buckets=(0.001, 0.01, 1.0), registry=registry
    )
    plain = histogram("batch_size", "help", buckets=(1, 2, 4), registry=registry)
    for v in (0.0005, 0.001, 0.002, 0.01, 0.5, 3.0):  # on the bounds too (le is inclusive)
        h.labels("Create").observe(v)
    h.labels("Bind").observe(0.02)
    for v in (1, 1, 2, 3, 5, 100):
        plain.observe(v)
    c.labels("Create").inc()
    c.labels("Create").inc(2.5)
    c.labels("Bind").inc()
    text = generate_latest(registry).decode()
    # Creation times differ between the two runs.
    return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1", text)


def test_loop_metrics_expose_what_prometheus_client_does() -> None:
    assert exposition(LoopCounter, LoopHistogram) == exposition(Counter, Histogram)


@pytest.mark.parametrize("kind", [LoopCounter, LoopHistogram])
def test_loop_metrics_refuse_what_prometheus_client_refuses(kind: type) -> None:
    registry = CollectorRegistry()
    metric = kind("m", "help", ["method"], registry=registry)
    with pytest.raises(ValueError, match="missing label values"):
        metric.observe(1.0) if kind is LoopHistogram else metric.inc()
    if kind is LoopCounter:
        with pytest.raises(ValueError, match="non-negative"):
            metric.labels("x").inc(-1)


def test_each_loops_over_the_fields_own_elements() -> None:
    pod = pod_pb2.Pod()
    assert each(pod.spec.containers) == ()
    pod.spec.containers.add(name="a")
    pod.spec.containers.add(name="b")
    for c in each(pod.spec.containers):
        c.image = "img"  # the stored elements, not copies
    assert [(c.name, c.image) for c in pod.spec.containers] == [("a", "img"), ("b", "img")]
    assert list(each(pod.spec.containers[0].args)) == []
    pod.spec.containers[0].args.extend(["x", "y"])
    assert list(each(pod.spec.containers[0].args)) == ["x", "y"]
