"""Deployment defaults, validation and generation: Kubernetes' apps/v1 defaults and the wording
of ValidateDeploymentSpec, ValidateDeploymentStrategy and ValidateRollingUpdateDeployment."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.registry import strategy_for
from tinykube.kinds import DEPLOYMENT
from tinykube.manifest import to_dict
from tinykube.v1 import deployment_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STRATEGY = strategy_for(DEPLOYMENT)
PERCENT = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
    "'93%', regex used for validation is '[0-9]+%')"
)
SPEC: dict[str, Any] = {
    "selector": {"matchLabels": {"app": "web"}},
    "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    },
}


def make(spec: dict[str, Any]) -> deployment_pb2.Deployment:
    d = json_format.ParseDict(
        {"metadata": {"name": "web", "namespace": "default"}, "spec": spec},
        deployment_pb2.Deployment(),
    )
    STRATEGY.prepare_for_create(d, NOW)
    return d


def with_(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec.update(changes)
    return spec


def test_defaults() -> None:
    spec = to_dict(make(SPEC))["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    assert spec["template"]["spec"]["restartPolicy"] == "Always"
    # Recreate gets no rollingUpdate; a partial rollingUpdate keeps what it has.
    assert (
        "rollingUpdate"
        not in to_dict(make(with_(strategy={"type": "Recreate"})))["spec"]["strategy"]
    )
    partial = make(with_(strategy={"rollingUpdate": {"maxSurge": 0}}))
    assert to_dict(partial)["spec"]["strategy"]["rollingUpdate"] == {
        "maxUnavailable": "25%",
        "maxSurge": 0,
    }


RU = "spec.strategy.rollingUpdate"
NONNEG = "must be greater than or equal to 0"
GT_MIN_READY = "must be greater than minReadySeconds"
POD_SPEC = SPEC["template"]["spec"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (SPEC, []),
        (with_(replicas=-1), [f"spec.replicas: Invalid value: -1: {NONNEG}"]),
        (
            with_(selector={"matchLabels": {"app": "other"}}),
            [
                'spec.template.metadata.labels: Invalid value: map[string]string{"app":"web"}: '
                "`selector` does not match template `labels`"
            ],
        ),
        (
            {"template": SPEC["template"]},
            ["spec.selector: Required value"],
        ),
        (
            with_(strategy={"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}),
            [f"{RU}.maxUnavailable: Invalid value: 0%: may not be 0 when `maxSurge` is 0"],
        ),
        (
            with_(strategy={"rollingUpdate": {"maxSurge": "200%", "maxUnavailable": "101%"}}),
            [f"{RU}.maxUnavailable: Invalid value: 101%: must not be greater than 100%"],
        ),
        (
            with_(strategy={"rollingUpdate": {"maxSurge": "x", "maxUnavailable": -1}}),
            [
                f"{RU}.maxUnavailable: Invalid value: -1: must be greater than or equal to 0",
                f"{RU}.maxSurge: Invalid value: x: {PERCENT}",
            ],
        ),
        (
            with_(strategy={"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}),
            [
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy "
                "`type` is 'Recreate'"
            ],
        ),
        (
            with_(strategy={"type": "BlueGreen"}),
            [
                'spec.strategy: Unsupported value: "BlueGreen": supported values: "Recreate", '
                '"RollingUpdate"'
            ],
        ),
        (
            with_(minReadySeconds=10, progressDeadlineSeconds=10),
            [f"spec.progressDeadlineSeconds: Invalid value: 10: {GT_MIN_READY}"],
        ),
        (
            with_(revisionHistoryLimit=-2),
            ["spec.revisionHistoryLimit: Invalid value: -2: must be greater than or equal to 0"],
        ),
        (
            with_(template={**SPEC["template"], "spec": {**POD_SPEC, "restartPolicy": "Never"}}),
            [
                'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: '
                '"Always"'
            ],
        ),
    ],
)  # fmt: skip
def test_validation(spec: dict[str, Any], expected: list[str]) -> None:
    assert [str(e) for e in STRATEGY.validate_create(make(spec))] == expected


def test_selector_is_immutable_and_changes_bump_the_generation() -> None:
    old = make(SPEC)
    new = deployment_pb2.Deployment()
    new.CopyFrom(old)
    new.spec.replicas = 3
    STRATEGY.prepare_for_update(new, old)
    assert new.metadata.generation == 2 and STRATEGY.validate_update(new, old) == []
    annotated = deployment_pb2.Deployment()
    annotated.CopyFrom(old)
    annotated.metadata.annotations["note"] = "x"  # copied to the ReplicaSets: a new generation
    STRATEGY.prepare_for_update(annotated, old)
    assert annotated.metadata.generation == 2
    same = deployment_pb2.Deployment()
    same.CopyFrom(old)
    same.status.replicas = 5  # Update keeps the stored status
    STRATEGY.prepare_for_update(same, old)
    assert same.metadata.generation == 1 and same.status.replicas == 0
    moved = deployment_pb2.Deployment()
    moved.CopyFrom(old)
    moved.spec.selector.matchLabels["tier"] = "front"
    moved.spec.template.metadata.labels["tier"] = "front"
    STRATEGY.prepare_for_update(moved, old)
    assert [str(e) for e in STRATEGY.validate_update(moved, old)] == [
        'spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web", '
        '"tier":"front"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable'
    ]


def test_status_update_carries_the_annotations_not_the_spec() -> None:
    old = make(SPEC)
    new = deployment_pb2.Deployment()
    new.CopyFrom(old)
    new.metadata.annotations["deployment.kubernetes.io/revision"] = "2"
    new.spec.replicas = 9
    new.status.replicas = 1
    merged: Any = STRATEGY.prepare_for_status_update(new, old)
    assert dict(merged.metadata.annotations) == {"deployment.kubernetes.io/revision": "2"}
    assert merged.spec.replicas == 1 and merged.status.replicas == 1
    merged.status.availableReplicas = 2
    assert [str(e) for e in STRATEGY.validate_status_update(merged, old)] == [
        "status.availableReplicas: Invalid value: 2: cannot be greater than status.replicas",
        "status.availableReplicas: Invalid value: 2: cannot be greater than readyReplicas",
    ]
