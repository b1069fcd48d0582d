"""DaemonSet and ControllerRevision defaults and validation: kube's SetDefaults_DaemonSet,
daemonSetStrategy and ValidateDaemonSet / ValidateControllerRevision wording."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.registry import strategy_for
from tinykube.kinds import CONTROLLER_REVISION, DAEMON_SET
from tinykube.manifest import to_dict
from tinykube.v1 import controllerrevision_pb2, daemonset_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PERCENT = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
    "'93%', regex used for validation is '[0-9]+%')"
)

SPEC: dict[str, Any] = {
    "selector": {"matchLabels": {"app": "agent"}},
    "template": {
        "metadata": {"labels": {"app": "agent"}},
        "spec": {"containers": [{"name": "c", "image": "agent:v1"}]},
    },
}


def make_ds(**changes: Any) -> daemonset_pb2.DaemonSet:
    spec = copy.deepcopy(SPEC)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = spec
        for p in parents:
            target = target.setdefault(p, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    ds = json_format.ParseDict(
        {"metadata": {"name": "agent", "namespace": "default"}, "spec": spec},
        daemonset_pb2.DaemonSet(),
    )
    strategy_for(DAEMON_SET).prepare_for_create(ds, NOW)
    return ds


def errors(ds: daemonset_pb2.DaemonSet) -> list[str]:
    return [str(e) for e in strategy_for(DAEMON_SET).validate_create(ds)]


def test_defaults_as_apps_v1() -> None:
    ds = make_ds()
    spec = to_dict(ds)["spec"]
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert spec["revisionHistoryLimit"] == 10
    assert spec["template"]["spec"]["restartPolicy"] == "Always"
    assert ds.metadata.annotations["deprecated.daemonset.template.generation"] == "1"
    assert errors(ds) == []


def test_on_delete_gets_no_rolling_update_defaults() -> None:
    ds = make_ds(updateStrategy={"type": "OnDelete"})
    assert not ds.spec.updateStrategy.HasField("rollingUpdate")
    assert errors(ds) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"selector": {"matchLabels": {"app": "other"}}},
            [
                'spec.template.metadata.labels: Invalid value: map[string]string{"app":"agent"}: '
                "`selector` does not match template `labels`"
            ],
        ),
        (
            {"selector": None},
            [
                'spec.template.metadata.labels: Invalid value: map[string]string{"app":"agent"}: '
                "`selector` does not match template `labels`"
            ],
        ),
        (
            {"selector": {}},
            [
                "spec.selector: Invalid value: &LabelSelector{MatchLabels:map[string]string{},"
                "MatchExpressions:[]LabelSelectorRequirement{},}: empty selector is invalid for "
                "daemonset"
            ],
        ),
        (
            {"template__spec__restartPolicy": "OnFailure"},
            [
                'spec.template.spec.restartPolicy: Unsupported value: "OnFailure": supported '
                'values: "Always"'
            ],
        ),
        (
            {"minReadySeconds": -1},
            ["spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0"],
        ),
        (
            {"revisionHistoryLimit": -1},
            ["spec.revisionHistoryLimit: Invalid value: -1: must be greater than or equal to 0"],
        ),
        ({"revisionHistoryLimit": 0}, []),
        (
            {"updateStrategy": {"type": "Recreate"}},
            [
                'spec.updateStrategy: Unsupported value: apps.DaemonSetUpdateStrategy{Type:"'
                'Recreate", RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}: supported '
                'values: "RollingUpdate", "OnDelete"'
            ],
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}},
            [
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set "
                "when maxUnavailable is non-zero"
            ],
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}},
            [
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 "
                "when maxSurge is 0"
            ],
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": "20%"}}},
            [],
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%", "maxSurge": 0}}},
            [
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 "
                "when maxSurge is 0"
            ],
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "110%"}}},
            [
                'spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "110%": must '
                "not be greater than 100%"
            ],
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "ten"}}},
            [
                "spec.updateStrategy.rollingUpdate.maxUnavailable: "
                f'Invalid value: "ten": {PERCENT}',
                # "ten" counts as 0, as kube's getIntOrPercentValue
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 "
                "when maxSurge is 0",
            ],
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": -1}}},
            [
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be "
                "greater than or equal to 0"
            ],
        ),
    ],
)
def test_validation(changes: dict[str, Any], expected: list[str]) -> None:
    assert errors(make_ds(**changes)) == expected


def _updated(old: daemonset_pb2.DaemonSet, fn: Any) -> daemonset_pb2.DaemonSet:
    new = daemonset_pb2.DaemonSet()
    new.CopyFrom(old)
    fn(new)
    strategy_for(DAEMON_SET).prepare_for_update(new, old)
    return new


def test_selector_is_immutable() -> None:
    old = make_ds()
    old.metadata.generation = 1

    def change(ds: daemonset_pb2.DaemonSet) -> None:
        ds.spec.selector.matchLabels["tier"] = "x"
        ds.spec.template.metadata.labels["tier"] = "x"

    new = _updated(old, change)
    assert [str(e) for e in strategy_for(DAEMON_SET).validate_update(new, old)] == [
        "spec.selector: Invalid value: &LabelSelector{MatchLabels:map[string]string{app: agent,"
        "tier: x,},MatchExpressions:[]LabelSelectorRequirement{},}: field is immutable"
    ]


def test_generation_and_template_generation_follow_the_spec() -> None:
    old = make_ds()
    old.metadata.generation = 1

    def image(ds: daemonset_pb2.DaemonSet) -> None:
        ds.spec.template.spec.containers[0].image = "agent:v2"

    def min_ready(ds: daemonset_pb2.DaemonSet) -> None:
        ds.spec.minReadySeconds = 5

    def label(ds: daemonset_pb2.DaemonSet) -> None:
        ds.metadata.labels["team"] = "a"
        ds.metadata.annotations["deprecated.daemonset.template.generation"] = "99"

    gen = "deprecated.daemonset.template.generation"
    new = _updated(old, image)
    assert (new.metadata.generation, new.metadata.annotations[gen]) == (2, "2")
    new = _updated(old, min_ready)
    assert (new.metadata.generation, new.metadata.annotations[gen]) == (2, "1")
    new = _updated(old, label)  # metadata only; a client cannot set the template generation
    assert (new.metadata.generation, new.metadata.annotations[gen]) == (1, "1")


def test_status_counts_and_collision_count() -> None:
    old = make_ds()
    old.status.collisionCount = 2
    new = daemonset_pb2.DaemonSet()
    new.CopyFrom(old)
    new.status.numberReady = -1
    new.status.collisionCount = 1
    merged = strategy_for(DAEMON_SET).prepare_for_status_update(new, old)
    assert [str(e) for e in strategy_for(DAEMON_SET).validate_status_update(merged, old)] == [
        "status.numberReady: Invalid value: -1: must be greater than or equal to 0",
        "status.collisionCount: Invalid value: 1: cannot be decremented",
    ]


def make_revision(data: dict[str, Any] | None, revision: int = 1) -> Any:
    cr = controllerrevision_pb2.ControllerRevision()
    cr.metadata.name = "agent-abc"
    cr.metadata.namespace = "default"
    if data is not None:
        cr.data.update(data)
    cr.revision = revision
    strategy_for(CONTROLLER_REVISION).prepare_for_create(cr, NOW)
    return cr


def test_controller_revision_validation() -> None:
    strategy = strategy_for(CONTROLLER_REVISION)
    assert [str(e) for e in strategy.validate_create(make_revision({"a": 1}))] == []
    assert [str(e) for e in strategy.validate_create(make_revision(None))] == [
        "data: Required value: data is mandatory"
    ]
    assert [str(e) for e in strategy.validate_create(make_revision({"a": 1}, -1))] == [
        "revision: Invalid value: -1: must be greater than or equal to 0"
    ]
    old = make_revision({"a": 1})
    new = make_revision({"a": 2})
    new.metadata.uid = old.metadata.uid
    assert [str(e) for e in strategy.validate_update(new, old)] == [
        'data: Invalid value: {"a": 2}: field is immutable'
    ]
    relabelled = make_revision({"a": 1}, 7)
    assert [str(e) for e in strategy.validate_update(relabelled, old)] == []


def test_revision_data_prints_whole_numbers_as_integers() -> None:
    cr = make_revision({"spec": {"template": {"spec": {"containers": [{"ports": [80]}]}}}})
    assert to_dict(cr)["data"] == {
        "spec": {"template": {"spec": {"containers": [{"ports": [80]}]}}}
    }
    assert isinstance(
        to_dict(cr)["data"]["spec"]["template"]["spec"]["containers"][0]["ports"][0], int
    )


def test_the_example_is_valid() -> None:
    from pathlib import Path

    from tinykube.manifest import load_manifests

    path = Path(__file__).resolve().parents[2] / "examples" / "daemonset.yaml"
    (item,) = load_manifests(path.read_text())
    strategy = strategy_for(item.info)
    strategy.prepare_for_create(item.obj, NOW)
    item.obj.metadata.namespace = "default"  # type: ignore[attr-defined]
    assert strategy.validate_create(item.obj) == []
