"""`tinykube get jobs` and `tinykube describe job`: kubectl's columns and describer lines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tinykube import kinds
from tinykube.cli import printers
from tinykube.cli.describe import describe_job
from tinykube.v1 import job_pb2

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def job(**status: object) -> job_pb2.Job:
    j = job_pb2.Job()
    j.metadata.name, j.metadata.namespace = "pi", "default"
    j.metadata.creationTimestamp.FromDatetime(NOW - timedelta(minutes=5))
    j.spec.completions, j.spec.parallelism, j.spec.backoffLimit = 3, 2, 6
    j.spec.completionMode, j.spec.suspend = "NonIndexed", False
    j.spec.selector.matchLabels["batch.kubernetes.io/controller-uid"] = "u1"
    j.spec.template.spec.containers.add(name="pi", image="perl:5.34")
    for key, value in status.items():
        setattr(j.status, key, value)
    return j


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], "Running"),
        ([("Suspended", "True")], "Suspended"),
        ([("FailureTarget", "True")], "FailureTarget"),
        ([("FailureTarget", "True"), ("Failed", "True")], "Failed"),
        ([("SuccessCriteriaMet", "True"), ("Complete", "True")], "Complete"),
    ],
)
def test_status_column(conditions: list[tuple[str, str]], expected: str) -> None:
    j = job(succeeded=1)
    for type_, status in conditions:
        j.status.conditions.add(type=type_, status=status)
    assert printers.row(kinds.JOB, j, NOW)[:3] == ["pi", expected, "1/3"]


def test_wide_row_and_duration() -> None:
    j = job(succeeded=3)
    j.status.startTime.FromDatetime(NOW - timedelta(minutes=4))
    j.status.completionTime.FromDatetime(NOW - timedelta(minutes=3, seconds=30))
    assert printers.columns(kinds.JOB, wide=True) == [
        "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "CONTAINERS", "IMAGES", "SELECTOR",
    ]  # fmt: skip
    assert printers.row(kinds.JOB, j, NOW, wide=True) == [
        "pi", "Running", "3/3", "30s", "5m", "pi", "perl:5.34",
        "batch.kubernetes.io/controller-uid=u1",
    ]  # fmt: skip


def test_describe_job() -> None:
    j = job(active=1, ready=1, succeeded=2, failed=1)
    j.status.startTime.FromDatetime(NOW - timedelta(minutes=4))
    text = describe_job(j, [], NOW)
    for line in (
        "Name:             pi",
        "Selector:         batch.kubernetes.io/controller-uid=u1",
        "Parallelism:      2",
        "Completions:      3",
        "Completion Mode:  NonIndexed",
        "Suspend:          false",
        "Backoff Limit:    6",
        "Start Time:       Tue, 01 Dec 2026 09:56:00 +0000",
        "Pods Statuses:    1 Active (1 Ready) / 2 Succeeded / 1 Failed",
    ):
        assert line in text.splitlines(), text
    assert "Completed Indexes" not in text
    j.spec.completionMode = "Indexed"
    j.status.completedIndexes = "0-1"
    assert "Completed Indexes:  0-1" in describe_job(j, [], NOW)
