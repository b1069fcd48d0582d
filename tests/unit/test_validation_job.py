"""Job (batch/v1) defaults, the generated selector and validation, as Kubernetes words them.

Expectations come from Kubernetes' pkg/apis/batch/v1 SetDefaults_Job, the Job registry
strategy's generateSelector and pkg/apis/batch/validation (ValidateJob, ValidateJobSpecUpdate,
ValidateJobStatusUpdate), case by case.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from google.protobuf import json_format

from apiserver.registry import strategy_for
from tinykube import jobs
from tinykube.kinds import JOB
from tinykube.v1 import job_pb2

NOW = datetime(2026, 12, 1, tzinfo=UTC)
STRATEGY = strategy_for(JOB)


def job_from(spec: dict[str, object], name: str = "pi") -> job_pb2.Job:
    base: dict[str, object] = {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
            }
        }
    }
    job = job_pb2.Job()
    json_format.ParseDict({"metadata": {"name": name, "namespace": "default"}}, job)
    json_format.ParseDict({"spec": base}, job)
    json_format.ParseDict({"spec": spec}, job)
    return job


def created(spec: dict[str, object], name: str = "pi") -> job_pb2.Job:
    job = job_from(spec, name)
    STRATEGY.prepare_for_create(job, NOW)
    return job


def errors(job: job_pb2.Job) -> list[str]:
    return [str(e) for e in STRATEGY.validate_create(job)]


def test_defaults_and_the_generated_selector() -> None:
    job = created({})
    uid = job.metadata.uid
    spec = job.spec
    assert (spec.parallelism, spec.completions, spec.backoffLimit) == (1, 1, 6)
    assert (spec.completionMode, spec.suspend, spec.manualSelector) == ("NonIndexed", False, False)
    assert spec.podReplacementPolicy == "TerminatingOrFailed"
    assert dict(spec.selector.matchLabels) == {jobs.CONTROLLER_UID_LABEL: uid}
    generated = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "pi",
        "controller-uid": uid,
        "job-name": "pi",
    }
    assert dict(spec.template.metadata.labels) == generated
    assert dict(job.metadata.labels) == generated  # the template's, as the Job had none
    assert spec.template.spec.terminationGracePeriodSeconds == 30
    assert errors(job) == []


@pytest.mark.parametrize(
    ("spec", "check"),
    [
        # Only parallelism given: completions stays unset (a work queue Job).
        ({"parallelism": 3}, lambda s: not s.HasField("completions") and s.parallelism == 3),
        ({"completions": 4}, lambda s: s.parallelism == 1 and s.completions == 4),
        ({"backoffLimitPerIndex": 1, "completionMode": "Indexed", "completions": 2},
         lambda s: s.backoffLimit == 2**31 - 1),
        ({"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [
            {"type": "DisruptionTarget"}]}]}},
         lambda s: s.podFailurePolicy.rules[0].onPodConditions[0].status == "True"
         and s.podReplacementPolicy == "Failed"),
    ],
)  # fmt: skip
def test_defaults(spec: dict[str, object], check: Callable[[job_pb2.JobSpec], bool]) -> None:
    assert check(created(spec).spec)


def test_own_labels_are_kept() -> None:
    job = job_from({})
    job.metadata.labels["team"] = "a"
    STRATEGY.prepare_for_create(job, NOW)
    assert dict(job.metadata.labels) == {"team": "a"}


RULE_42 = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"template": {"spec": {"restartPolicy": "Always"}}},
         ['spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"']),
        ({"template": {"spec": {"restartPolicy": "OnFailure"}}, "podFailurePolicy": {
            "rules": [RULE_42]}},
         ['spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is '
          "supported when podFailurePolicy is specified"]),
        ({"parallelism": -1}, ["spec.parallelism: Invalid value: -1: must be greater than or "
                               "equal to 0"]),
        ({"completions": -2}, ["spec.completions: Invalid value: -2: must be greater than or "
                               "equal to 0"]),
        ({"backoffLimit": -1}, ["spec.backoffLimit: Invalid value: -1: must be greater than or "
                                "equal to 0"]),
        ({"activeDeadlineSeconds": -5}, ["spec.activeDeadlineSeconds: Invalid value: -5: must be "
                                         "greater than or equal to 0"]),
        ({"ttlSecondsAfterFinished": -1}, ["spec.ttlSecondsAfterFinished: Invalid value: -1: "
                                           "must be greater than or equal to 0"]),
        ({"completionMode": "Sometimes"},
         ['spec.completionMode: Unsupported value: "Sometimes": supported values: "NonIndexed", '
          '"Indexed"']),
        ({"completionMode": "Indexed", "parallelism": 2},
         ["spec.completions: Required value: when completion mode is Indexed"]),
        ({"backoffLimitPerIndex": 1},
         ["spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"]),
        ({"maxFailedIndexes": 1, "completionMode": "Indexed", "completions": 3},
         ["spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"]),
        ({"podReplacementPolicy": "Sometimes"},
         ['spec.podReplacementPolicy: Unsupported value: "Sometimes": supported values: '
          '"Failed", "TerminatingOrFailed"']),
        ({"podFailurePolicy": {"rules": [RULE_42]}, "podReplacementPolicy": "TerminatingOrFailed"},
         ['spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported '
          'values: "Failed"']),
        ({"podFailurePolicy": {"rules": [{"onExitCodes": {"operator": "In", "values": [1]}}]}},
         ['spec.podFailurePolicy.rules[0].action: Required value: valid values: ["Count" '
          '"FailIndex" "FailJob" "Ignore"]']),
        ({"podFailurePolicy": {"rules": [{"action": "Retry", "onExitCodes": {
            "operator": "In", "values": [1]}}]}},
         ['spec.podFailurePolicy.rules[0].action: Unsupported value: "Retry": supported values: '
          '"Count", "FailIndex", "FailJob", "Ignore"']),
        ({"podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {
            "operator": "In", "values": [1]}}]}},
         ['spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the '
          "backoffLimitPerIndex to be set"]),
        ({"podFailurePolicy": {"rules": [{"action": "Count", "onExitCodes": {
            "values": [1]}}]}},
         ['spec.podFailurePolicy.rules[0].onExitCodes.operator: Required value: valid values: '
          '["In" "NotIn"]']),
        ({"podFailurePolicy": {"rules": [{"action": "Count", "onExitCodes": {
            "operator": "In", "values": [0, 3, 2, 3]}}]}},
         ["spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be "
          "0 for the In operator",
          "spec.podFailurePolicy.rules[0].onExitCodes.values[3]: Duplicate value: 3",
          "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: "
          "[]int32{0, 3, 2, 3}: must be ordered"]),
        ({"podFailurePolicy": {"rules": [{"action": "Count", "onExitCodes": {
            "operator": "NotIn", "values": []}}]}},
         ["spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{}: at "
          "least one value is required"]),
        ({"podFailurePolicy": {"rules": [{"action": "Count", "onExitCodes": {
            "containerName": "sidecar", "operator": "In", "values": [1]}}]}},
         ['spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: "sidecar": '
          "must be one of the container or initContainer names in the pod template"]),
        ({"podFailurePolicy": {"rules": [{"action": "Ignore"}]}},
         ["spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and "
          "OnPodConditions is required"]),
        ({"podFailurePolicy": {"rules": [{**RULE_42, "onPodConditions": [
            {"type": "DisruptionTarget", "status": "True"}]}]}},
         ["spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and "
          "OnPodConditions is not supported"]),
        ({"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [
            {"type": "DisruptionTarget", "status": "Maybe"}]}]}},
         ['spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: '
          '"Maybe": supported values: "False", "True", "Unknown"']),
        ({"podFailurePolicy": {"rules": [RULE_42] * 21}},
         ["spec.podFailurePolicy.rules: Too many: 21: must have at most 20 items"]),
    ],
)  # fmt: skip
def test_validation_names_the_field(spec: dict[str, object], expected: list[str]) -> None:
    assert errors(created(spec)) == expected


def test_a_conflicting_generated_label_is_refused() -> None:
    job = job_from({"template": {"metadata": {"labels": {"controller-uid": "other"}}}})
    STRATEGY.prepare_for_create(job, NOW)
    uid = job.metadata.uid
    assert errors(job) == [
        f"spec.template.metadata.labels[controller-uid]: Invalid value: \"other\": must be '{uid}'"
    ]


def test_a_manual_selector_must_match_the_template() -> None:
    job = created(
        {
            "manualSelector": True,
            "selector": {"matchLabels": {"app": "batch"}},
            "template": {"metadata": {"labels": {"app": "web"}}},
        }
    )
    assert errors(job) == [
        'spec.template.metadata.labels: Invalid value: "app=web": `selector` does not match '
        "template `labels`"
    ]
    assert errors(created({"manualSelector": True})) == ["spec.selector: Required value"]


def test_an_indexed_job_whose_last_hostname_is_no_dns_label_is_refused() -> None:
    name = "j" * 62
    job = created({"completionMode": "Indexed", "completions": 10}, name=name)
    assert errors(job) == [
        f'metadata.name: Invalid value: "{name}": will not able to create pod with invalid DNS '
        f"label: {name}-9"
    ]
    assert errors(created({"completionMode": "Indexed", "completions": 10}, name="j" * 61)) == []


def updated(old: job_pb2.Job, change: Callable[[job_pb2.Job], None]) -> list[str]:
    new = job_pb2.Job()
    new.CopyFrom(old)
    change(new)
    STRATEGY.prepare_for_update(new, old)
    return [str(e) for e in STRATEGY.validate_update(new, old)]


def _set(path: str, value: object) -> Callable[[job_pb2.Job], None]:
    def change(job: job_pb2.Job) -> None:
        *parents, leaf = path.split(".")
        target: object = job
        for p in parents:
            target = getattr(target, p)
        setattr(target, leaf, value)

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_set("spec.parallelism", 3), []),
        (_set("spec.suspend", True), []),
        (_set("spec.activeDeadlineSeconds", 100), []),
        (_set("spec.completions", 4), ["spec.completions: Invalid value: 4: field is immutable"]),
        (_set("spec.completionMode", "Indexed"),
         ['spec.completionMode: Invalid value: "Indexed": field is immutable']),
        (lambda j: j.spec.template.spec.containers[0].command.append("x"),
         ["spec.template: Invalid value: field is immutable"]),
        (lambda j: j.spec.template.spec.nodeSelector.update({"zone": "a"}),
         ["spec.template: Invalid value: field is immutable"]),
    ],
)  # fmt: skip
def test_update_immutability(change: Callable[[job_pb2.Job], None], expected: list[str]) -> None:
    old = created({"completions": 2})
    assert updated(old, change) == expected


def test_the_selector_is_immutable() -> None:
    old = created({})
    messages = updated(old, lambda j: j.spec.selector.matchLabels.update({"x": "y"}))
    immutable = [m for m in messages if m.endswith(": field is immutable")]
    assert [m.split(":")[0] for m in immutable] == ["spec.selector"]


def test_a_suspended_job_that_never_started_may_change_its_scheduling_directives() -> None:
    old = created({"suspend": True})

    def schedule(job: job_pb2.Job) -> None:
        job.spec.template.spec.nodeSelector["zone"] = "a"
        job.spec.template.metadata.annotations["note"] = "moved"

    assert updated(old, schedule) == []
    old.status.startTime.FromDatetime(NOW)
    assert updated(old, schedule) == ["spec.template: Invalid value: field is immutable"]


def status_errors(old: job_pb2.Job, change: Callable[[job_pb2.Job], None]) -> list[str]:
    new = job_pb2.Job()
    new.CopyFrom(old)
    change(new)
    merged = STRATEGY.prepare_for_status_update(new, old)
    return [str(e) for e in STRATEGY.validate_status_update(merged, old)]


def _conditions(*types: str) -> Callable[[job_pb2.Job], None]:
    def change(job: job_pb2.Job) -> None:
        for t in types:
            job.status.conditions.add(type=t, status="True")

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_set("status.active", 2), []),
        (_set("status.failed", -1),
         ["status.failed: Invalid value: -1: must be greater than or equal to 0"]),
        (lambda j: (_set("status.active", 1)(j), _set("status.ready", 2)(j)),
         ["status.ready: Invalid value: 2: cannot set more ready pods than active"]),
        (_conditions("Complete", "Failed"),
         ["status.conditions: Invalid value: cannot set Complete=True and Failed=true conditions"]),
        (lambda j: j.status.uncountedTerminatedPods.succeeded.extend(["a", "a"]),
         ['status.uncountedTerminatedPods.succeeded[1]: Duplicate value: "a"']),
        (lambda j: j.status.completionTime.FromDatetime(NOW),
         ["status.completionTime: Invalid value: cannot set completionTime when there is no "
          "Complete=True condition"]),
    ],
)  # fmt: skip
def test_status_update(change: Callable[[job_pb2.Job], None], expected: list[str]) -> None:
    assert status_errors(created({}), change) == expected


def test_a_terminal_condition_cannot_be_taken_back() -> None:
    old = created({})
    old.status.conditions.add(type="FailureTarget", status="True")
    assert status_errors(old, lambda j: j.status.ClearField("conditions")) == [
        "status.conditions: Invalid value: cannot disable the terminal FailureTarget=True condition"
    ]
