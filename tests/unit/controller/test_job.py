"""The Job controller's decisions and reconcile, against a fake client and a fake clock.

The tables follow Kubernetes' pkg/controller/job tests (pod_failure_policy_test.go,
backoff_utils_test.go, the indexed-job interval helpers); the reconcile tests walk a Job
through creation, counting (exactly once across lagging caches and controller restarts),
back-off, failure, completion, Indexed mode, suspension and deadlines.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import json_format

from controller.job import (
    DEFAULT_BACKOFF,
    INDEX_FAILURE_COUNT_ANNOTATION,
    INDEX_IGNORED_FAILURE_COUNT_ANNOTATION,
    MAX_BACKOFF,
    BackoffRecord,
    JobController,
    backoff_remaining,
    failed_indexes,
    format_indexes,
    index_backoff_remaining,
    is_index_failed,
    match_pod_failure_policy,
    new_index_failure_counts,
    next_backoff_record,
    parse_indexes,
    past_backoff_limit_on_failure,
    pods_with_delayed_deletion,
    want_active,
)
from controller.ttlafterfinished import TTLAfterFinishedController
from controller.util import datetime_to_ts, key_of
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeRecorder, FakeStore
from tinykube import jobs
from tinykube.clock import FakeClock
from tinykube.v1 import job_pb2, pod_pb2

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# ---- podFailurePolicy -------------------------------------------------------------------------


def failed_pod(
    *codes: tuple[str, int], init: tuple[str, int] | None = None, conditions: Any = ()
) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace = "p", "ns"
    pod.status.phase = "Failed"
    for name, code in codes:
        cs = pod.status.containerStatuses.add(name=name)
        cs.state.terminated.exitCode = code
    if init is not None:
        cs = pod.status.initContainerStatuses.add(name=init[0])
        cs.state.terminated.exitCode = init[1]
    for type_, status in conditions:
        pod.status.conditions.add(type=type_, status=status)
    return pod


def policy(*rules: dict[str, Any]) -> job_pb2.PodFailurePolicy:
    p = job_pb2.PodFailurePolicy()
    for r in rules:
        rule = p.rules.add(action=r["action"])
        if "codes" in r:
            op, values = r["codes"]
            rule.onExitCodes.operator = op
            rule.onExitCodes.values.extend(values)
            if "container" in r:
                rule.onExitCodes.containerName = r["container"]
        for type_, status in r.get("conditions", ()):
            rule.onPodConditions.add(type=type_, status=status)
    return p


FAIL_42 = {"action": "FailJob", "codes": ("In", [42])}


@pytest.mark.parametrize(
    ("pfp", "pod", "expected"),
    [
        pytest.param(
            policy(FAIL_42),
            failed_pod(("main", 42)),
            (
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule "
                "at index 0",
                True,
                "FailJob",
            ),
            id="FailJob on an exit code",
        ),
        pytest.param(policy(FAIL_42), failed_pod(("main", 1)), (None, True, None), id="no match"),
        pytest.param(
            policy({"action": "Ignore", "codes": ("In", [1, 2])}, FAIL_42),
            failed_pod(("main", 2)),
            (None, False, "Ignore"),
            id="Ignore does not count",
        ),
        pytest.param(
            policy({"action": "Count", "codes": ("NotIn", [42])}, FAIL_42),
            failed_pod(("main", 42)),
            (
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule "
                "at index 1",
                True,
                "FailJob",
            ),
            id="rules in order: NotIn skips, the next one matches",
        ),
        pytest.param(
            policy({"action": "Count", "codes": ("NotIn", [42])}),
            failed_pod(("main", 3)),
            (None, True, "Count"),
            id="Count",
        ),
        pytest.param(
            policy({**FAIL_42, "container": "side"}),
            failed_pod(("main", 42), ("side", 0)),
            (None, True, None),
            id="containerName restricts the match",
        ),
        pytest.param(
            policy({"action": "FailJob", "codes": ("NotIn", [5])}),
            failed_pod(("main", 0)),
            (None, True, None),
            id="exit code 0 never matches",
        ),
        pytest.param(
            policy(FAIL_42),
            failed_pod(("main", 0), init=("setup", 42)),
            (
                "Container setup for pod ns/p failed with exit code 42 matching FailJob rule "
                "at index 0",
                True,
                "FailJob",
            ),
            id="init containers after containers",
        ),
        pytest.param(
            policy({"action": "FailJob", "conditions": [("DisruptionTarget", "True")]}),
            failed_pod(("main", 137), conditions=[("DisruptionTarget", "True")]),
            (
                "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0",
                True,
                "FailJob",
            ),
            id="onPodConditions",
        ),
        pytest.param(
            policy({"action": "Ignore", "conditions": [("DisruptionTarget", "True")]}),
            failed_pod(("main", 137), conditions=[("DisruptionTarget", "False")]),
            (None, True, None),
            id="a condition with another status does not match",
        ),
        pytest.param(
            policy({"action": "FailIndex", "codes": ("In", [3])}, FAIL_42),
            failed_pod(("main", 3)),
            (None, True, "FailIndex"),
            id="FailIndex counts and stops there",
        ),
    ],
)
def test_match_pod_failure_policy(
    pfp: job_pb2.PodFailurePolicy, pod: pod_pb2.Pod, expected: tuple[Any, ...]
) -> None:
    assert match_pod_failure_policy(pfp, pod) == expected


# ---- back-off ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "since_last", "expected"),
    [
        (0, 0, 0.0),
        (1, 0, 10.0),
        (1, 4, 6.0),
        (1, 11, 0.0),
        (2, 0, 20.0),
        (3, 0, 40.0),
        (6, 0, 320.0),
        (7, 0, 600.0),  # 640 s capped at MaxJobPodFailureBackOff
        (30, 100, 500.0),
    ],
)
def test_backoff_doubles_from_the_last_failure_up_to_the_cap(
    failures: int, since_last: float, expected: float
) -> None:
    record = BackoffRecord(failures, T0)
    now = T0 + timedelta(seconds=since_last)
    assert backoff_remaining(record, now, DEFAULT_BACKOFF, MAX_BACKOFF) == expected


def finished_pod(phase: str, finished_at: datetime) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.status.phase = phase
    cs = pod.status.containerStatuses.add(name="c")
    cs.state.terminated.exitCode = 0 if phase == "Succeeded" else 1
    cs.state.terminated.finishedAt.CopyFrom(datetime_to_ts(finished_at))
    return pod


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("old", "succeeded", "failed", "expected"),
    [
        (BackoffRecord(), [], [], BackoffRecord()),
        (BackoffRecord(), [], [at(5), at(3)], BackoffRecord(2, at(5))),
        (BackoffRecord(2, at(5)), [], [at(9)], BackoffRecord(3, at(9))),
        (BackoffRecord(2, at(5)), [at(10)], [], BackoffRecord()),
        # A success resets the count to the failures that came after it.
        (BackoffRecord(2, at(5)), [at(10)], [at(8), at(12), at(15)], BackoffRecord(2, at(15))),
    ],
)
def test_backoff_record(
    old: BackoffRecord,
    succeeded: list[datetime],
    failed: list[datetime],
    expected: BackoffRecord,
) -> None:
    new = next_backoff_record(
        old,
        [finished_pod("Succeeded", t) for t in succeeded],
        [finished_pod("Failed", t) for t in failed],
    )
    assert new == expected


# ---- counts and indexes -----------------------------------------------------------------------


def spec_job(completions: int | None, parallelism: int) -> job_pb2.Job:
    job = job_pb2.Job()
    if completions is not None:
        job.spec.completions = completions
    job.spec.parallelism = parallelism
    return job


@pytest.mark.parametrize(
    ("completions", "parallelism", "succeeded", "active", "expected"),
    [
        (5, 2, 0, 0, 2),
        (5, 2, 4, 1, 1),
        (5, 2, 5, 0, 0),
        (5, 2, 7, 0, 0),
        (None, 3, 0, 0, 3),
        (None, 3, 1, 2, 2),  # once one succeeded, what runs keeps running, nothing new
        (1, 0, 0, 0, 0),
    ],
)
def test_want_active(
    completions: int | None, parallelism: int, succeeded: int, active: int, expected: int
) -> None:
    assert want_active(spec_job(completions, parallelism), succeeded, active) == expected


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        (set(), ""),
        ({0}, "0"),
        ({0, 1}, "0-1"),
        ({1, 3, 4, 5, 7}, "1,3-5,7"),
        ({0, 1, 2, 9}, "0-2,9"),
    ],
)
def test_completed_indexes_round_trip(indexes: set[int], text: str) -> None:
    assert format_indexes(indexes) == text
    assert parse_indexes(text, 10) == indexes


def test_parse_indexes_drops_those_past_completions() -> None:
    assert parse_indexes("1,3-5,7", 5) == {1, 3, 4}


@pytest.mark.parametrize(
    ("restart_policy", "limit", "restarts", "phase", "expected"),
    [
        ("OnFailure", 2, [1, 1], "Running", True),
        ("OnFailure", 3, [1, 1], "Running", False),
        ("OnFailure", 0, [1], "Pending", True),
        ("OnFailure", 1, [5], "Failed", False),  # only pods still running count
        ("Never", 1, [5], "Running", False),
    ],
)
def test_past_backoff_limit_on_failure(
    restart_policy: str, limit: int, restarts: list[int], phase: str, expected: bool
) -> None:
    job = job_pb2.Job()
    job.spec.template.spec.restartPolicy = restart_policy
    job.spec.backoffLimit = limit
    pods = []
    for r in restarts:
        pod = pod_pb2.Pod()
        pod.status.phase = phase
        pod.status.containerStatuses.add(name="c", restartCount=r)
        pods.append(pod)
    assert past_backoff_limit_on_failure(job, pods) is expected


# ---- backoffLimitPerIndex ---------------------------------------------------------------------


def index_pod(
    ix: int,
    phase: str = "Failed",
    *,
    code: int = 1,
    count: str | None = None,
    ignored: str | None = None,
    finished: int = 0,
    uid: str = "",
    finalizer: bool = True,
) -> pod_pb2.Pod:
    pod = finished_pod(phase, at(finished))
    pod.status.containerStatuses[0].state.terminated.exitCode = code if phase == "Failed" else 0
    pod.metadata.uid = uid or f"u{ix}-{count}-{finished}"
    pod.metadata.annotations[jobs.COMPLETION_INDEX_ANNOTATION] = str(ix)
    if count is not None:
        pod.metadata.annotations[INDEX_FAILURE_COUNT_ANNOTATION] = count
    if ignored is not None:
        pod.metadata.annotations[INDEX_IGNORED_FAILURE_COUNT_ANNOTATION] = ignored
    if finalizer:
        pod.metadata.finalizers.append(jobs.TRACKING_FINALIZER)
    return pod


def per_index_spec(limit: int, *rules: dict[str, Any], completions: int = 4) -> job_pb2.Job:
    job = job_pb2.Job()
    job.spec.completions = completions
    job.spec.completionMode = jobs.INDEXED
    job.spec.backoffLimitPerIndex = limit
    if rules:
        job.spec.podFailurePolicy.CopyFrom(policy(*rules))
    return job


IGNORE_7 = {"action": "Ignore", "codes": ("In", [7])}
FAIL_INDEX_42 = {"action": "FailIndex", "codes": ("In", [42])}


@pytest.mark.parametrize(
    ("rules", "replaced", "expected"),
    [
        pytest.param((), None, (0, 0), id="a first pod"),
        pytest.param((), index_pod(0), (1, 0), id="no annotation counts from 0"),
        pytest.param((), index_pod(0, count="2", ignored="1"), (3, 1), id="counted"),
        pytest.param((IGNORE_7,), index_pod(0, code=7, count="2"), (2, 1), id="ignored"),
        pytest.param((), index_pod(0, count="x", ignored="-1"), (1, 0), id="bad annotations"),
        pytest.param((), index_pod(0, count=str(2**31)), (1, 0), id="past MaxInt32"),
        pytest.param((), index_pod(0, count="1_0", ignored=" 2"), (1, 0), id="not Atoi's syntax"),
        pytest.param((), index_pod(0, count="+4"), (5, 0), id="a sign is Atoi's syntax"),
    ],
)
def test_new_index_failure_counts(
    rules: tuple[dict[str, Any], ...], replaced: pod_pb2.Pod | None, expected: tuple[int, int]
) -> None:
    assert new_index_failure_counts(per_index_spec(1, *rules), replaced) == expected


@pytest.mark.parametrize(
    ("limit", "rules", "pod", "expected"),
    [
        pytest.param(1, (), index_pod(0, count="0"), False, id="retries left"),
        pytest.param(1, (), index_pod(0, count="1"), True, id="limit reached"),
        pytest.param(0, (), index_pod(0), True, id="limit 0: the first failure"),
        pytest.param(0, (IGNORE_7,), index_pod(0, code=7), False, id="Ignore never fails it"),
        pytest.param(5, (FAIL_INDEX_42,), index_pod(0, code=42), True, id="FailIndex at once"),
        pytest.param(0, (), index_pod(0, "Succeeded"), False, id="succeeded"),
    ],
)
def test_is_index_failed(
    limit: int, rules: tuple[dict[str, Any], ...], pod: pod_pb2.Pod, expected: bool
) -> None:
    assert is_index_failed(per_index_spec(limit, *rules), pod) is expected


def test_failed_indexes_adds_uncounted_failures_to_the_status() -> None:
    job = per_index_spec(0, completions=6)
    job.status.failedIndexes = "0,2-3"
    pods = [index_pod(5), index_pod(1, "Succeeded"), index_pod(4, finalizer=False)]
    assert failed_indexes(job, pods) == {0, 2, 3, 5}


def test_the_last_failed_pod_of_an_index_awaits_its_replacement() -> None:
    job = per_index_spec(3)
    first = index_pod(0, count="0", finished=1)
    second = index_pod(0, count="1", finished=20)
    running = index_pod(1, "Running")
    running.status.phase = "Running"
    pods = [second, first, index_pod(1, count="0"), running, index_pod(2), index_pod(3)]
    delayed = pods_with_delayed_deletion(job, pods, [running], {2}, {3}, set())
    # Index 1 runs its replacement, 2 succeeded and 3 failed: only 0 awaits one.
    assert delayed == {0: second}
    assert pods_with_delayed_deletion(job, pods, [running], {2}, {3}, {second.metadata.uid}) == {
        0: first
    }


@pytest.mark.parametrize(
    ("count", "ignored", "since", "expected"),
    [
        (None, None, 0, 10.0),
        ("0", None, 4, 6.0),
        ("1", None, 0, 20.0),
        ("2", "1", 0, 80.0),  # ignored failures back off too
        ("9", None, 0, 600.0),
        ("0", None, 11, 0.0),
    ],
)
def test_index_backoff_from_its_last_failed_pod(
    count: str | None, ignored: str | None, since: int, expected: float
) -> None:
    pod = index_pod(0, count=count, ignored=ignored, finished=0)
    assert index_backoff_remaining(pod, at(since)) == expected
    assert index_backoff_remaining(None, at(since)) == 0.0


# ---- the reconcile ----------------------------------------------------------------------------


def make_job(
    name: str = "pi",
    *,
    completions: int | None = 1,
    parallelism: int = 1,
    backoff_limit: int = 6,
    indexed: bool = False,
) -> job_pb2.Job:
    job = job_pb2.Job(apiVersion="batch/v1", kind="Job")
    job.metadata.name, job.metadata.namespace = name, "default"
    spec = job.spec
    if completions is not None:
        spec.completions = completions
    spec.parallelism = parallelism
    spec.backoffLimit = backoff_limit
    spec.completionMode = jobs.INDEXED if indexed else jobs.NON_INDEXED
    spec.suspend = False
    spec.manualSelector = True
    spec.podReplacementPolicy = "TerminatingOrFailed"
    spec.selector.matchLabels["job-name"] = name
    spec.template.metadata.labels["job-name"] = name
    spec.template.spec.restartPolicy = "Never"
    spec.template.spec.containers.add(name="main", image="busybox", command=["true"])
    return job


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock(T0)
        self.client = FakeClient(self.clock)
        self.job_store = FakeStore(self.client.jobs)
        self.pod_store = FakeStore(self.client.pods)
        self.queue = FakeQueue()
        self.orphans = FakeQueue()
        self.recorder = FakeRecorder()
        self.ctrl = self.new_controller()

    def new_controller(self) -> JobController:
        """A fresh controller (a restart, or a new leader): no in-memory state."""
        return JobController(
            self.client,
            self.job_store,
            self.pod_store,
            self.queue,
            self.orphans,
            clock=self.clock,
            recorder=self.recorder,
        )

    async def create(self, job: job_pb2.Job) -> str:
        created = await self.client.jobs.create(job)
        return key_of(created)

    async def sync(self, key: str) -> None:
        before = dict(self.client.pods.objects)
        await self.ctrl.sync(key)
        if self.pod_store.lagging:
            return  # no event before the cache has the change
        # The watch delivers what the sync changed.
        after = self.client.pods.objects
        for pod_key, pod in after.items():
            old = before.get(pod_key)
            if old is None:
                self.ctrl.on_pod_add(pod)
            elif old is not pod:
                self.ctrl.on_pod_update(old, pod)
        for pod_key, old in before.items():
            if pod_key not in after:
                self.ctrl.on_pod_delete(old)

    def now(self, pod: pod_pb2.Pod) -> pod_pb2.Pod:
        """The pod as stored now (writes replace the stored message)."""
        return self.client.pods.objects[key_of(pod)]

    def job(self, key: str) -> job_pb2.Job:
        return self.client.jobs.objects[key]

    def pods(self) -> list[pod_pb2.Pod]:
        return sorted(self.client.pods.objects.values(), key=lambda p: p.metadata.name)

    def finish(self, pod: pod_pb2.Pod, code: int, *, after: float = 1.0) -> None:
        """The kubelet reports the pod's container exited with `code`."""
        self.clock.advance(after)
        pod.status.phase = "Succeeded" if code == 0 else "Failed"
        cs = pod.status.containerStatuses.add(name="main")
        cs.state.terminated.exitCode = code
        cs.state.terminated.finishedAt.CopyFrom(datetime_to_ts(self.clock.now()))
        pod.metadata.resourceVersion = str(int(pod.metadata.resourceVersion) + 1000)

    def delays(self, key: str) -> list[float]:
        """The delays `key` was queued again after, to the millisecond."""
        return [round(seconds, 3) for k, seconds in self.queue.delayed if k == key]

    def conditions(self, key: str) -> list[tuple[str, str, str]]:
        return [(c.type, c.status, c.reason) for c in self.job(key).status.conditions]

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.recorder.events]


async def test_creates_parallelism_pods_owned_by_the_job_with_the_tracking_finalizer() -> None:
    env = Env()
    key = await env.create(make_job(completions=5, parallelism=2))
    await env.sync(key)
    pods = env.pods()
    assert len(pods) == 2
    job = env.job(key)
    for pod in pods:
        assert pod.metadata.generateName == "pi-"
        assert list(pod.metadata.finalizers) == [jobs.TRACKING_FINALIZER]
        (ref,) = pod.metadata.ownerReferences
        assert (ref.apiVersion, ref.kind, ref.uid) == ("batch/v1", "Job", job.metadata.uid)
        assert ref.controller and ref.blockOwnerDeletion
        assert pod.metadata.labels["job-name"] == "pi"
    assert job.status.active == 2
    assert job.status.HasField("startTime")
    assert env.reasons() == ["SuccessfulCreate", "SuccessfulCreate"]


async def test_completions_5_parallelism_2_with_one_failure_counts_each_pod_once() -> None:
    env = Env()
    key = await env.create(make_job(completions=5, parallelism=2))
    await env.sync(key)
    first, second = env.pods()
    env.finish(second, 0)
    env.finish(first, 1)  # after the success: it counts for the back-off
    await env.sync(key)
    job = env.job(key)
    assert (job.status.succeeded, job.status.failed) == (1, 1)
    assert not job.status.uncountedTerminatedPods.succeeded
    assert not job.status.uncountedTerminatedPods.failed
    assert not env.now(first).metadata.finalizers and not env.now(second).metadata.finalizers
    # The failure holds back its replacement: 10 s from the failure.
    assert job.status.active == 0
    assert 10.0 in env.delays(key)
    for _ in range(3):  # syncing again (and again) counts nothing twice
        await env.sync(key)
    assert (env.job(key).status.succeeded, env.job(key).status.failed) == (1, 1)
    assert len(env.pods()) == 2
    env.clock.advance(10)
    while env.job(key).status.succeeded < 5:
        await env.sync(key)
        for pod in env.pods():
            if pod.status.phase not in ("Succeeded", "Failed"):
                env.finish(pod, 0)
        await env.sync(key)
        assert env.job(key).status.active <= 2
    job = env.job(key)
    assert (job.status.succeeded, job.status.failed) == (5, 1)
    assert env.conditions(key) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert job.status.completionTime == job.status.conditions[1].lastTransitionTime
    assert job.status.conditions[1].message == "Reached expected number of succeeded pods"
    assert env.reasons().count("Completed") == 1
    assert len(env.pods()) == 6
    await env.sync(key)  # finished: nothing more
    assert len(env.pods()) == 6


async def test_a_lagging_pod_cache_does_not_count_a_pod_twice() -> None:
    env = Env()
    key = await env.create(make_job(completions=2, parallelism=1))
    await env.sync(key)
    (pod,) = env.pods()
    env.finish(pod, 0)
    env.pod_store.lag()  # the cache keeps showing the pod with its finalizer
    await env.sync(key)
    assert env.job(key).status.succeeded == 1
    assert env.pod_store.get(key_of(pod)).metadata.finalizers == [jobs.TRACKING_FINALIZER]  # type: ignore[union-attr]
    await env.sync(key)
    assert env.job(key).status.succeeded == 1


@pytest.mark.parametrize("finalizer_removed", [False, True])
async def test_a_restart_between_the_steps_counts_the_pod_once(finalizer_removed: bool) -> None:
    """The controller died after writing the uid into uncountedTerminatedPods, before (or
    after) removing the pod's finalizer; a new one finishes the count."""
    env = Env()
    key = await env.create(make_job(completions=2, parallelism=1))
    await env.sync(key)
    (pod,) = env.pods()
    env.finish(pod, 0)
    job = env.job(key)
    job.status.uncountedTerminatedPods.succeeded.append(pod.metadata.uid)
    if finalizer_removed:
        del pod.metadata.finalizers[:]
    env.ctrl = env.new_controller()
    await env.sync(key)
    job = env.job(key)
    assert job.status.succeeded == 1
    assert not job.status.uncountedTerminatedPods.succeeded
    assert not env.now(pod).metadata.finalizers
    await env.sync(key)
    assert env.job(key).status.succeeded == 1


async def test_backoff_limit_exceeded_fails_the_job_in_two_steps() -> None:
    env = Env()
    key = await env.create(make_job(completions=1, parallelism=1, backoff_limit=0))
    await env.sync(key)
    (pod,) = env.pods()
    env.finish(pod, 3)
    await env.sync(key)
    job = env.job(key)
    assert job.status.failed == 1
    assert env.conditions(key) == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert job.status.conditions[1].message == "Job has reached the specified backoff limit"
    assert not job.status.HasField("completionTime")
    assert ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit") in (
        env.recorder.events
    )
    await env.sync(key)
    assert len(env.pods()) == 1


async def test_pod_failure_policy_fail_job_deletes_the_other_pods_and_fails_the_job() -> None:
    env = Env()
    job = make_job(completions=3, parallelism=2)
    job.spec.podFailurePolicy.CopyFrom(policy(FAIL_42))
    job.spec.podReplacementPolicy = "Failed"
    key = await env.create(job)
    await env.sync(key)
    first, second = env.pods()
    env.finish(first, 42)
    await env.sync(key)
    # The running pod was deleted keeping its finalizer, then counted as failed and let go
    # (the fake has no kubelet: it goes at once). Failed waits for a sync that sees no pod
    # terminating.
    assert ("delete", key_of(second)) in env.client.pods.calls
    assert key_of(second) not in env.client.pods.objects
    assert env.conditions(key) == [("FailureTarget", "True", "PodFailurePolicy")]
    assert env.job(key).status.terminating == 1
    await env.sync(key)
    job = env.job(key)
    message = (
        f"Container main for pod default/{first.metadata.name} failed with exit code 42 "
        "matching FailJob rule at index 0"
    )
    assert env.conditions(key) == [
        ("FailureTarget", "True", "PodFailurePolicy"),
        ("Failed", "True", "PodFailurePolicy"),
    ]
    assert job.status.conditions[1].message == message
    assert (job.status.active, job.status.terminating) == (0, 0)
    assert ("Warning", "PodFailurePolicy", message) in env.recorder.events


async def test_pod_failure_policy_ignore_does_not_count_the_failure() -> None:
    env = Env()
    job = make_job(completions=1, parallelism=1, backoff_limit=0)
    job.spec.podFailurePolicy.CopyFrom(policy({"action": "Ignore", "codes": ("In", [7])}))
    job.spec.podReplacementPolicy = "Failed"
    key = await env.create(job)
    await env.sync(key)
    (pod,) = env.pods()
    env.finish(pod, 7)
    await env.sync(key)
    job = env.job(key)
    assert (job.status.failed, job.status.active) == (0, 0)
    assert not env.conditions(key)
    assert not env.now(pod).metadata.finalizers
    # As Kubernetes' newBackoffRecord: an ignored failure still delays the replacement.
    env.clock.advance(10)
    await env.sync(key)
    assert len(env.pods()) == 2
    assert env.job(key).status.failed == 0


async def test_indexed_job_gives_each_pod_its_index() -> None:
    env = Env()
    key = await env.create(make_job("work", completions=3, parallelism=3, indexed=True))
    await env.sync(key)
    pods = env.pods()
    indexes = sorted(p.metadata.annotations[jobs.COMPLETION_INDEX_ANNOTATION] for p in pods)
    assert indexes == ["0", "1", "2"]
    for pod in pods:
        ix = pod.metadata.annotations[jobs.COMPLETION_INDEX_ANNOTATION]
        assert pod.metadata.labels[jobs.COMPLETION_INDEX_ANNOTATION] == ix
        assert pod.metadata.generateName == f"work-{ix}-"
        assert pod.spec.hostname == f"work-{ix}"
        (var,) = pod.spec.containers[0].env
        assert var.name == "JOB_COMPLETION_INDEX" and not var.value
        assert json_format.MessageToDict(var.valueFrom) == {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        }
    by_index = {p.metadata.annotations[jobs.COMPLETION_INDEX_ANNOTATION]: p for p in pods}
    env.finish(by_index["0"], 0)
    env.finish(by_index["2"], 0)
    env.finish(by_index["1"], 1)
    await env.sync(key)
    job = env.job(key)
    assert (job.status.completedIndexes, job.status.succeeded, job.status.failed) == ("0,2", 2, 1)
    env.clock.advance(11)
    await env.sync(key)
    (retry,) = [p for p in env.pods() if p.status.phase == ""]
    assert retry.metadata.annotations[jobs.COMPLETION_INDEX_ANNOTATION] == "1"
    env.finish(retry, 0)
    await env.sync(key)
    job = env.job(key)
    assert (job.status.completedIndexes, job.status.succeeded) == ("0-2", 3)
    assert ("Complete", "True", "CompletionsReached") in env.conditions(key)


def per_index_job(
    completions: int, parallelism: int, limit: int, *, max_failed: int | None = None
) -> job_pb2.Job:
    job = make_job(
        "work",
        completions=completions,
        parallelism=parallelism,
        backoff_limit=jobs.MAX_INT32,  # the apiserver's default with backoffLimitPerIndex
        indexed=True,
    )
    job.spec.backoffLimitPerIndex = limit
    if max_failed is not None:
        job.spec.maxFailedIndexes = max_failed
    return job


def pending(env: Env, ix: int) -> pod_pb2.Pod:
    """The one unfinished pod of index `ix`."""
    (pod,) = [
        p
        for p in env.pods()
        if p.metadata.annotations[jobs.COMPLETION_INDEX_ANNOTATION] == str(ix)
        and p.status.phase not in ("Succeeded", "Failed")
    ]
    return pod


def of_index(env: Env, ix: int) -> list[pod_pb2.Pod]:
    return [
        p for p in env.pods() if p.metadata.annotations[jobs.COMPLETION_INDEX_ANNOTATION] == str(ix)
    ]


def failure_counts(pod: pod_pb2.Pod) -> tuple[str | None, str | None]:
    ann = pod.metadata.annotations
    return ann.get(INDEX_FAILURE_COUNT_ANNOTATION), ann.get(INDEX_IGNORED_FAILURE_COUNT_ANNOTATION)


async def test_backoff_limit_per_index_retries_an_index_then_fails_it() -> None:
    env = Env()
    key = await env.create(per_index_job(3, 3, limit=1))
    await env.sync(key)
    assert [failure_counts(p) for p in env.pods()] == [("0", None)] * 3
    job = env.job(key)
    assert job.status.HasField("failedIndexes") and job.status.failedIndexes == ""
    env.finish(pending(env, 0), 0)
    failing = pending(env, 1)
    env.finish(failing, 1)
    await env.sync(key)
    job = env.job(key)
    # The failed pod keeps its finalizer, uncounted, until its replacement exists.
    assert env.now(failing).metadata.finalizers == [jobs.TRACKING_FINALIZER]
    assert (job.status.failed, job.status.completedIndexes, job.status.failedIndexes) == (
        0,
        "0",
        "",
    )
    assert 10.0 in env.delays(key)
    assert len(env.pods()) == 3
    env.clock.advance(9)
    await env.sync(key)
    assert len(env.pods()) == 3  # 1 s of the index's back-off left
    assert env.delays(key)[-1] == 1.0
    env.clock.advance(1)
    await env.sync(key)
    retry = pending(env, 1)
    assert failure_counts(retry) == ("1", None)
    assert env.now(failing).metadata.finalizers == [jobs.TRACKING_FINALIZER]
    await env.sync(key)  # the replacement exists: the failed pod is counted and let go
    assert (
        key_of(failing) not in env.client.pods.objects or not env.now(failing).metadata.finalizers
    )
    assert env.job(key).status.failed == 1
    env.finish(retry, 1)  # its second failure: past backoffLimitPerIndex
    await env.sync(key)
    job = env.job(key)
    assert (job.status.failed, job.status.failedIndexes) == (2, "1")
    assert not env.conditions(key)  # index 2 still runs
    env.clock.advance(600)
    await env.sync(key)
    assert len(of_index(env, 1)) == 2  # a failed index is not retried
    env.finish(pending(env, 2), 0)
    await env.sync(key)
    job = env.job(key)
    assert (job.status.completedIndexes, job.status.succeeded) == ("0,2", 2)
    assert (job.status.failedIndexes, job.status.failed) == ("1", 2)
    assert env.conditions(key) == [
        ("FailureTarget", "True", "FailedIndexes"),
        ("Failed", "True", "FailedIndexes"),
    ]
    assert job.status.conditions[1].message == "Job has failed indexes"
    assert ("Warning", "FailedIndexes", "Job has failed indexes") in env.recorder.events
    assert all(not p.metadata.finalizers for p in env.pods())


async def test_max_failed_indexes_exceeded_terminates_the_active_pods() -> None:
    env = Env()
    key = await env.create(per_index_job(4, 4, limit=0, max_failed=1))
    await env.sync(key)
    env.finish(pending(env, 0), 1)
    await env.sync(key)
    job = env.job(key)
    assert (job.status.failedIndexes, job.status.failed) == ("0", 1)
    assert not env.conditions(key)
    assert len(env.pods()) == 4  # limit 0: index 0 is not retried
    env.finish(pending(env, 3), 1)
    await env.sync(key)
    assert env.conditions(key) == [("FailureTarget", "True", "MaxFailedIndexesExceeded")]
    assert [c for c, k in env.client.pods.calls if c == "delete"] == ["delete", "delete"]
    await env.sync(key)
    job = env.job(key)
    assert env.conditions(key) == [
        ("FailureTarget", "True", "MaxFailedIndexesExceeded"),
        ("Failed", "True", "MaxFailedIndexesExceeded"),
    ]
    message = "Job has exceeded the specified maximal number of failed indexes"
    assert job.status.conditions[1].message == message
    assert ("Warning", "MaxFailedIndexesExceeded", message) in env.recorder.events
    # The two terminated pods count as failed; their indexes are not failed indexes.
    assert (job.status.failedIndexes, job.status.failed, job.status.active) == ("0,3", 4, 0)


async def test_fail_index_rule_fails_the_index_at_once() -> None:
    env = Env()
    job = per_index_job(2, 2, limit=3)
    job.spec.podFailurePolicy.CopyFrom(policy(FAIL_INDEX_42))
    job.spec.podReplacementPolicy = "Failed"
    key = await env.create(job)
    await env.sync(key)
    env.finish(pending(env, 0), 42)
    await env.sync(key)
    job = env.job(key)
    assert (job.status.failedIndexes, job.status.failed) == ("0", 1)
    env.clock.advance(600)
    await env.sync(key)
    assert len(of_index(env, 0)) == 1
    env.finish(pending(env, 1), 0)
    await env.sync(key)
    assert env.conditions(key) == [
        ("FailureTarget", "True", "FailedIndexes"),
        ("Failed", "True", "FailedIndexes"),
    ]


async def test_an_ignored_failure_is_counted_apart_and_still_backs_off() -> None:
    env = Env()
    job = per_index_job(1, 1, limit=0)
    job.spec.podFailurePolicy.CopyFrom(policy(IGNORE_7))
    job.spec.podReplacementPolicy = "Failed"
    key = await env.create(job)
    await env.sync(key)
    first = pending(env, 0)
    env.finish(first, 7)
    await env.sync(key)
    assert env.delays(key)[-1] == 10.0
    env.clock.advance(10)
    await env.sync(key)
    retry = pending(env, 0)
    assert failure_counts(retry) == ("0", "1")
    await env.sync(key)
    job = env.job(key)
    assert (job.status.failed, job.status.failedIndexes) == (0, "")
    assert key_of(first) not in env.client.pods.objects or not env.now(first).metadata.finalizers
    env.finish(retry, 1)
    await env.sync(key)
    job = env.job(key)
    assert (job.status.failed, job.status.failedIndexes) == (1, "0")
    assert ("Failed", "True", "FailedIndexes") in env.conditions(key)


async def test_indexes_back_off_independently() -> None:
    env = Env()
    key = await env.create(per_index_job(2, 2, limit=2))
    await env.sync(key)
    env.finish(pending(env, 0), 1)  # at 1 s
    env.finish(pending(env, 1), 1, after=5)  # at 6 s
    await env.sync(key)
    assert env.delays(key)[-1] == 5.0  # the soonest index: 0
    env.clock.advance(5)
    await env.sync(key)
    assert failure_counts(pending(env, 0)) == ("1", None)
    assert len(of_index(env, 1)) == 1
    seen = len(env.delays(key))
    await env.sync(key)
    assert 5.0 in env.delays(key)[seen:]  # index 1's own back-off
    env.clock.advance(5)
    await env.sync(key)
    assert failure_counts(pending(env, 1)) == ("1", None)


@pytest.mark.parametrize("replaced", [False, True])
async def test_a_restart_keeps_the_index_failure_count(replaced: bool) -> None:
    """A new controller (no memory) finds the failed pod still holding its finalizer, before
    or after its replacement was created: the count comes from the pods, once."""
    env = Env()
    key = await env.create(per_index_job(1, 1, limit=2))
    await env.sync(key)
    failing = pending(env, 0)
    env.finish(failing, 1)
    await env.sync(key)
    env.clock.advance(10)
    if replaced:
        await env.sync(key)
    env.ctrl = env.new_controller()
    await env.sync(key)
    await env.sync(key)
    await env.sync(key)
    assert failure_counts(pending(env, 0)) == ("1", None)
    assert len(env.pods()) == 2 - (key_of(failing) not in env.client.pods.objects)
    assert env.job(key).status.failed == 1


async def test_an_index_whose_pod_terminates_waits_for_it_with_replacement_policy_failed() -> None:
    env = Env()
    job = make_job("work", completions=3, parallelism=1, indexed=True)
    job.spec.podReplacementPolicy = "Failed"
    key = await env.create(job)
    await env.sync(key)
    first = pending(env, 0)
    await env.client.pods.delete(
        first.metadata.name, first.metadata.namespace
    )  # keeps its finalizer
    env.job(key).spec.parallelism = 3
    await env.sync(key)
    assert len(of_index(env, 0)) == 1  # not replaced while it terminates
    assert len(of_index(env, 1)) == 1 and len(of_index(env, 2)) == 1


async def test_suspend_deletes_the_active_pods_and_resume_starts_again() -> None:
    env = Env()
    key = await env.create(make_job(completions=2, parallelism=2))
    await env.sync(key)
    assert len(env.pods()) == 2
    env.job(key).spec.suspend = True
    await env.sync(key)
    assert env.pods() == []  # their finalizers went first: they are not counted as failures
    job = env.job(key)
    assert (job.status.active, job.status.failed) == (0, 0)
    assert env.conditions(key) == [("Suspended", "True", "JobSuspended")]
    env.clock.advance(30)
    env.job(key).spec.suspend = False
    await env.sync(key)
    assert len(env.pods()) == 2
    assert env.conditions(key) == [("Suspended", "False", "JobResumed")]
    assert env.job(key).status.startTime == datetime_to_ts(env.clock.now())
    reasons = env.reasons()
    assert reasons.index("Suspended") < reasons.index("Resumed")
    assert reasons.count("SuccessfulDelete") == 2


async def test_active_deadline_fails_the_job() -> None:
    env = Env()
    job = make_job(completions=1, parallelism=1)
    job.spec.activeDeadlineSeconds = 30
    key = await env.create(job)
    await env.sync(key)
    assert 30.0 in env.delays(key)
    env.clock.advance(31)
    await env.sync(key)
    await env.sync(key)
    assert env.conditions(key) == [
        ("FailureTarget", "True", "DeadlineExceeded"),
        ("Failed", "True", "DeadlineExceeded"),
    ]
    assert env.job(key).status.conditions[1].message == (
        "Job was active longer than specified deadline"
    )
    assert env.job(key).status.failed == 1  # the pod it killed


async def test_orphaned_pods_lose_the_tracking_finalizer() -> None:
    env = Env()
    key = await env.create(make_job(completions=1, parallelism=1))
    await env.sync(key)
    (pod,) = env.pods()
    del env.client.jobs.objects[key]  # the Job went (orphaning its pod)
    env.ctrl.on_job_delete(env.job_store.get(key) or make_job())
    await env.ctrl.sync_orphan_pod(key_of(pod))
    assert not env.now(pod).metadata.finalizers


# ---- TTL after finished -----------------------------------------------------------------------


async def test_ttl_after_finished_deletes_the_job_in_the_foreground() -> None:
    env = Env()
    job = make_job()
    job.spec.ttlSecondsAfterFinished = 60
    cond = job.status.conditions.add(type="Complete", status="True")
    cond.lastTransitionTime.CopyFrom(datetime_to_ts(env.clock.now()))
    key = await env.create(job)
    ttl = TTLAfterFinishedController(env.client, env.job_store, env.queue, clock=env.clock)
    await ttl.sync(key)
    assert 60.0 in env.delays(key)
    assert key in env.client.jobs.objects
    env.clock.advance(60)
    await ttl.sync(key)
    assert ("delete/Foreground", key) in env.client.jobs.calls
