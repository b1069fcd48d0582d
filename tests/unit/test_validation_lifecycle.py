"""Container lifecycle hooks, termination messages and securityContext: Kubernetes' defaults
(SetDefaults_Container, SetDefaults_HTTPGetAction) and validation messages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format

from apiserver.registry import strategy_for
from tinykube.kinds import POD
from tinykube.v1 import pod_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pod_with(
    container: dict[str, Any], *, init: bool = False, spec: dict[str, Any] | None = None
) -> pod_pb2.Pod:
    base = {"name": "c", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}
    body: dict[str, Any] = {"containers": [{**base, **container}], **(spec or {})}
    if init:
        body["initContainers"] = [{"name": "init", "image": "busybox", **container}]
        body["containers"] = [base]
    pod = json_format.ParseDict(
        {"metadata": {"name": "web", "namespace": "default"}, "spec": body}, pod_pb2.Pod()
    )
    strategy_for(POD).prepare_for_create(pod, NOW)
    return pod


def errors_of(pod: pod_pb2.Pod) -> list[str]:
    return [str(e) for e in strategy_for(POD).validate_create(pod)]


def test_defaults_are_kubernetes() -> None:
    pod = pod_with({"lifecycle": {"preStop": {"httpGet": {"port": 8080}}}})
    c = json_format.MessageToDict(pod.spec.containers[0])
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "File"
    assert c["lifecycle"]["preStop"]["httpGet"] == {"path": "/", "port": 8080, "scheme": "HTTP"}
    assert errors_of(pod) == []


def test_valid_hooks_and_policy() -> None:
    pod = pod_with(
        {
            "lifecycle": {
                "postStart": {"exec": {"command": ["true"]}},
                "preStop": {"sleep": {"seconds": 5}},
            },
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": {"runAsUser": 1000, "capabilities": {"drop": ["ALL"]}},
        },
        spec={"securityContext": {"fsGroup": 2000, "supplementalGroups": [3000]}},
    )
    assert errors_of(pod) == []


def test_handler_errors() -> None:
    pod = pod_with(
        {
            "lifecycle": {
                "postStart": {},
                "preStop": {"exec": {"command": ["true"]}, "httpGet": {"port": 80}},
            }
        }
    )
    assert errors_of(pod) == [
        "spec.containers[0].lifecycle.postStart: Required value: must specify a handler type",
        "spec.containers[0].lifecycle.preStop.httpGet: Forbidden: may not specify more than 1 "
        "handler type",
    ]
    pod = pod_with({"lifecycle": {"preStop": {"exec": {}}}})
    assert errors_of(pod) == ["spec.containers[0].lifecycle.preStop.exec.command: Required value"]


def test_sleep_must_fit_the_grace_period() -> None:
    pod = pod_with(
        {"lifecycle": {"preStop": {"sleep": {"seconds": 40}}}},
        spec={"terminationGracePeriodSeconds": 30},
    )
    assert errors_of(pod) == [
        "spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: 40: must be "
        "non-negative and less than terminationGracePeriodSeconds (30)"
    ]


def test_lifecycle_forbidden_on_init_containers() -> None:
    pod = pod_with({"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}, init=True)
    assert errors_of(pod) == [
        "spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers "
        "without restartPolicy=Always"
    ]


def test_policy_and_security_context_errors() -> None:
    pod = pod_with(
        {
            "terminationMessagePolicy": "Always",
            "securityContext": {
                "runAsUser": -1,
                "privileged": True,
                "allowPrivilegeEscalation": False,
            },
        },
        spec={"securityContext": {"runAsGroup": -2}, "imagePullSecrets": [{}]},
    )
    assert errors_of(pod) == [
        "spec.securityContext.runAsGroup: Invalid value: -2: must be between 0 and 2147483647, "
        "inclusive",
        "spec.imagePullSecrets[0].name: Required value",
        'spec.containers[0].terminationMessagePolicy: Unsupported value: "Always": supported '
        'values: "File", "FallbackToLogsOnError"',
        "spec.containers[0].securityContext.runAsUser: Invalid value: -1: must be between 0 and "
        "2147483647, inclusive",
        'spec.containers[0].securityContext: Invalid value: "": cannot set '
        "`allowPrivilegeEscalation` to false and `privileged` to true",
    ]
