"""Container probes: Kubernetes' defaults (SetDefaults_Probe) and validation messages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.registry import strategy_for
from tinykube.kinds import POD, REPLICA_SET
from tinykube.v1 import pod_pb2, replicaset_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pod_with(container: dict[str, Any], *, init: bool = False) -> pod_pb2.Pod:
    base = {"name": "c", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}
    spec: dict[str, Any] = {"containers": [{**base, **container}]}
    if init:
        spec = {
            "initContainers": [{"name": "init", "image": "busybox", **container}],
            "containers": [base],
        }
    pod = json_format.ParseDict(
        {"metadata": {"name": "web", "namespace": "default"}, "spec": spec}, pod_pb2.Pod()
    )
    strategy_for(POD).prepare_for_create(pod, NOW)
    return pod


def errors_of(pod: pod_pb2.Pod) -> list[str]:
    return [str(e) for e in strategy_for(POD).validate_create(pod)]


def test_probe_defaults_are_kubernetes() -> None:
    pod = pod_with(
        {
            "readinessProbe": {"httpGet": {"port": 8080}},
            "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 3},
            "startupProbe": {"tcpSocket": {"port": "http"}, "failureThreshold": 30},
        }
    )
    c = pod.spec.containers[0]
    r = c.readinessProbe
    assert (r.timeoutSeconds, r.periodSeconds, r.successThreshold, r.failureThreshold) == (
        1,
        10,
        1,
        3,
    )
    assert (r.httpGet.path, r.httpGet.scheme) == ("/", "HTTP")
    assert c.livenessProbe.periodSeconds == 3 and c.livenessProbe.initialDelaySeconds == 0
    assert c.startupProbe.failureThreshold == 30
    assert not c.startupProbe.HasField("terminationGracePeriodSeconds")
    assert errors_of(pod) == []


def test_replica_set_templates_get_probe_defaults() -> None:
    rs = json_format.ParseDict(
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "busybox",
                                "readinessProbe": {"tcpSocket": {"port": 80}},
                            }
                        ]
                    },
                },
            },
        },
        replicaset_pb2.ReplicaSet(),
    )
    strategy_for(REPLICA_SET).prepare_for_create(rs, NOW)
    assert rs.spec.template.spec.containers[0].readinessProbe.periodSeconds == 10
    assert strategy_for(REPLICA_SET).validate_create(rs) == []


P = "spec.containers[0]"


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (
            {"livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}},
            f"{P}.livenessProbe.successThreshold: Invalid value: 2: must be 1",
        ),
        (
            {"startupProbe": {"exec": {"command": ["true"]}, "successThreshold": 3}},
            f"{P}.startupProbe.successThreshold: Invalid value: 3: must be 1",
        ),
        (
            {"readinessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}},
            None,
        ),
        (
            {"readinessProbe": {"exec": {"command": ["true"]}, "httpGet": {"port": 80}}},
            f"{P}.readinessProbe.httpGet: Forbidden: may not specify more than 1 handler type",
        ),
        (
            {"livenessProbe": {"tcpSocket": {"port": 80}, "grpc": {"port": 9090}}},
            f"{P}.livenessProbe.grpc: Forbidden: may not specify more than 1 handler type",
        ),
        (
            {"readinessProbe": {"periodSeconds": 5}},
            f"{P}.readinessProbe: Required value: must specify a handler type",
        ),
        (
            {"readinessProbe": {"exec": {}}},
            f"{P}.readinessProbe.exec.command: Required value",
        ),
        (
            {"readinessProbe": {"exec": {"command": ["true"]}, "initialDelaySeconds": -1}},
            f"{P}.readinessProbe.initialDelaySeconds: Invalid value: -1: "
            "must be greater than or equal to 0",
        ),
        (
            {"livenessProbe": {"exec": {"command": ["true"]}, "failureThreshold": -2}},
            f"{P}.livenessProbe.failureThreshold: Invalid value: -2: "
            "must be greater than or equal to 0",
        ),
        (
            {"readinessProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": -5}},
            f"{P}.readinessProbe.timeoutSeconds: Invalid value: -5: "
            "must be greater than or equal to 0",
        ),
        (
            {
                "livenessProbe": {
                    "exec": {"command": ["true"]},
                    "terminationGracePeriodSeconds": 0,
                }
            },
            f"{P}.livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: "
            "must be greater than 0",
        ),
        (
            {
                "readinessProbe": {
                    "exec": {"command": ["true"]},
                    "terminationGracePeriodSeconds": 5,
                }
            },
            f"{P}.readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: "
            "must not be set for readinessProbes",
        ),
        (
            {"readinessProbe": {"httpGet": {"port": 70000}}},
            f"{P}.readinessProbe.httpGet.port: Invalid value: 70000: "
            "must be between 1 and 65535, inclusive",
        ),
        (
            {"readinessProbe": {"httpGet": {}}},
            f"{P}.readinessProbe.httpGet.port: Invalid value: 0: "
            "must be between 1 and 65535, inclusive",
        ),
        (
            {"readinessProbe": {"httpGet": {"port": "Web_Port"}}},
            f'{P}.readinessProbe.httpGet.port: Invalid value: "Web_Port": '
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
        ),
        (
            {"readinessProbe": {"tcpSocket": {"port": "a-very-long-port-name"}}},
            f'{P}.readinessProbe.tcpSocket.port: Invalid value: "a-very-long-port-name": '
            "must be no more than 15 characters",
        ),
        (
            {"readinessProbe": {"tcpSocket": {"port": "80"}}},
            f'{P}.readinessProbe.tcpSocket.port: Invalid value: "80": '
            "must contain at least one letter (a-z)",
        ),
        (
            {"readinessProbe": {"tcpSocket": {"port": 1.5}}},
            f"{P}.readinessProbe.tcpSocket.port: Invalid value: 1.5: "
            "must be an integer or a string",
        ),
        (
            {"readinessProbe": {"httpGet": {"port": 80, "scheme": "FTP"}}},
            f'{P}.readinessProbe.httpGet.scheme: Unsupported value: "FTP": '
            'supported values: "HTTP", "HTTPS"',
        ),
        (
            {
                "readinessProbe": {
                    "httpGet": {"port": 80, "httpHeaders": [{"name": "X Bad", "value": "1"}]}
                }
            },
            f'{P}.readinessProbe.httpGet.httpHeaders: Invalid value: "X Bad": '
            "a valid HTTP header must consist of alphanumeric characters or '-'",
        ),
        (
            {"readinessProbe": {"grpc": {"port": 0}}},
            f"{P}.readinessProbe.grpc.port: Invalid value: 0: "
            "must be between 1 and 65535, inclusive",
        ),
        # Valid shapes.
        ({"readinessProbe": {"httpGet": {"port": "http", "scheme": "HTTPS"}}}, None),
        (
            {
                "livenessProbe": {
                    "grpc": {"port": 9090, "service": "health"},
                    "terminationGracePeriodSeconds": 5,
                }
            },
            None,
        ),
        (
            {
                "readinessProbe": {
                    "httpGet": {
                        "path": "/healthz",
                        "port": 8080,
                        "host": "127.0.0.1",
                        "httpHeaders": [{"name": "X-Custom-Header", "value": "Awesome"}],
                    }
                }
            },
            None,
        ),
    ],
)
def test_probe_validation_messages(container: dict[str, Any], expected: str | None) -> None:
    errors = errors_of(pod_with(container))
    if expected is None:
        assert errors == []
    else:
        assert any(e.startswith(expected) for e in errors), errors


@pytest.mark.parametrize("kind", ["livenessProbe", "readinessProbe", "startupProbe"])
def test_init_containers_may_not_have_probes(kind: str) -> None:
    errors = errors_of(pod_with({kind: {"exec": {"command": ["true"]}}}, init=True))
    assert errors == [
        f"spec.initContainers[0].{kind}: Forbidden: "
        "may not be set for init containers without restartPolicy=Always"
    ]
