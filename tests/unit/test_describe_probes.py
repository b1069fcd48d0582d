"""`tinykube describe pod` prints probes as kubectl v1.37 does (checked against it in
tests/e2e/test_probes.py)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format

from tinykube.cli.describe import describe_probe
from tinykube.v1 import pod_pb2

TIMES = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
ATTRS = "delay=0s timeout=1s period=10s successThreshold=1 failureThreshold=3"


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        ({"exec": {"command": ["cat", "/tmp/healthy"]}}, f"exec [cat /tmp/healthy] {ATTRS}"),
        (
            {"httpGet": {"path": "/", "port": 8080, "scheme": "HTTP"}},
            f"http-get http://:8080/ {ATTRS}",
        ),
        (
            {"httpGet": {"path": "/healthz", "port": "http", "host": "10.0.0.1",
                         "scheme": "HTTPS"}},
            f"http-get https://10.0.0.1:http/healthz {ATTRS}",
        ),
        ({"tcpSocket": {"port": 5432}}, f"tcp-socket :5432 {ATTRS}"),
        ({"grpc": {"port": 9090, "service": "health"}}, f"grpc <pod>:9090 health {ATTRS}"),
        (
            {"exec": {"command": ["true"]}, "initialDelaySeconds": 5, "periodSeconds": 2,
             "failureThreshold": 30},
            "exec [true] delay=5s timeout=1s period=2s successThreshold=1 failureThreshold=30",
        ),
    ],
)  # fmt: skip
def test_describe_probe(probe: dict[str, Any], expected: str) -> None:
    assert describe_probe(json_format.ParseDict({**TIMES, **probe}, pod_pb2.Probe())) == expected
