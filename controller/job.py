"""The Job controller: runs a Job's pods to completion and counts each finished pod once.

Modelled on kube-controller-manager's pkg/controller/job. Informer handlers only enqueue Job
keys (pod events batched by `sync_batch_period`, as kube's 1 s) and record expectations;
`sync(key)` is level-triggered: it claims the Job's pods, decides whether the Job has failed
(podFailurePolicy FailJob, backoffLimit, activeDeadlineSeconds) or met its completions, creates
pods up to parallelism (after the exponential back-off of recent failures) or deletes extra ones,
and writes status.

Counting exactly once (kube's pod tracking): every pod is created with the
`batch.kubernetes.io/job-tracking` finalizer. A finished pod that still has it is first written
into status.uncountedTerminatedPods, then its finalizer is removed, then its uid moves from the
uncounted lists into the succeeded/failed counters. A pod without the finalizer is never counted
again, so a crash between any two steps (or a restart with fresh caches) repeats nothing: the next
sync counts the uncounted uids whose pods lost the finalizer (or are gone). Within one leader
term the caches may lag our own writes: finalizer removals not yet seen and the last status
written are remembered and trusted over an older cache.

With backoffLimitPerIndex (Indexed Jobs) failures are counted per index, as kube's
JobBackoffLimitPerIndex: each pod carries its index's failures so far in an annotation, taken
from the failed pod it replaces; that failed pod keeps its finalizer (uncounted) until the
replacement exists, so a restart loses no count. An index that failed more than
backoffLimitPerIndex times (or matched a FailIndex rule) goes into status.failedIndexes and is
not retried; replacements back off per index; the Job fails past maxFailedIndexes, or once
every index succeeded or failed.

The terminal conditions are two-step, as Kubernetes v1.36 sets them: FailureTarget (or
SuccessCriteriaMet) first, then Failed (or Complete) once no pod is left uncounted or
terminating. A second queue strips the tracking finalizer from pods whose Job is gone or
finished (orphans).

Concurrency: one asyncio event loop; the work queues never hand out one key twice at once.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from controller.api import NullRecorder, PodIndex, Queue, Recorder, Store
from controller.controllerref import ControllerRefManager, new_controller_ref
from controller.expectations import Expectations
from controller.replicaset import pods_to_delete, slow_start_batch
from controller.util import (
    controller_ref,
    datetime_to_ts,
    is_pod_active,
    is_pod_ready,
    is_terminating,
    key_of,
    pod_condition,
    resolve_controller_ref,
    selector_matches,
    ts_to_datetime,
)
from tinykube import jobs
from tinykube.clock import Clock
from tinykube.errors import ConflictError, NotFoundError
from tinykube.protocols import StatusResourceAPI
from tinykube.v1 import job_pb2, meta_pb2, pod_pb2

log = logging.getLogger(__name__)

KIND = "Job"
API_VERSION = "batch/v1"
# Kubernetes' DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff.
DEFAULT_BACKOFF = 10.0
MAX_BACKOFF = 600.0
SYNC_BATCH_PERIOD = 1.0
MAX_UNCOUNTED_PODS = 500
MAX_POD_CREATE_DELETE_PER_SYNC = 500
_WRITE_ATTEMPTS = 5

Job = job_pb2.Job
Pod = pod_pb2.Pod

MSG_BACKOFF_LIMIT = "Job has reached the specified backoff limit"
MSG_DEADLINE = "Job was active longer than specified deadline"
MSG_COMPLETIONS_REACHED = "Reached expected number of succeeded pods"
MSG_MAX_FAILED_INDEXES = "Job has exceeded the specified maximal number of failed indexes"
MSG_FAILED_INDEXES = "Job has failed indexes"

# backoffLimitPerIndex: each replacement pod carries the failures of its index so far (those
# an Ignore rule matched apart), so the count survives the failed pods and a restart.
INDEX_FAILURE_COUNT_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT_ANNOTATION = "batch.kubernetes.io/job-index-ignored-failure-count"


class JobClientAPI(Protocol):
    @property
    def pods(self) -> StatusResourceAPI[pod_pb2.Pod]: ...

    @property
    def jobs(self) -> StatusResourceAPI[job_pb2.Job]: ...


# ---- pure decisions (table-tested) ------------------------------------------------------------


def has_tracking_finalizer(pod: Pod) -> bool:
    return jobs.TRACKING_FINALIZER in pod.metadata.finalizers


def completion_index(pod: Pod) -> int | None:
    """The pod's batch.kubernetes.io/job-completion-index annotation; None if absent or bad."""
    text = pod.metadata.annotations.get(jobs.COMPLETION_INDEX_ANNOTATION)
    if text is None or not text.isdigit():
        return None
    return int(text)


def only_replace_failed_pods(job: Job) -> bool:
    """podReplacementPolicy Failed (always so with a podFailurePolicy)."""
    return job.spec.podReplacementPolicy == "Failed" or job.spec.HasField("podFailurePolicy")


def is_pod_failed(pod: Pod, job: Job) -> bool:
    """Failed, or (unless only failed pods are replaced) deleted before it succeeded: a pod
    deleted from under a Job never reaches a phase of its own."""
    if pod.status.phase == "Failed":
        return True
    if only_replace_failed_pods(job):
        return False
    return is_terminating(pod) and pod.status.phase != "Succeeded"


def is_terminating_pod(pod: Pod) -> bool:
    """controller.CountTerminatingPods: being deleted, not yet in a terminal phase."""
    return is_terminating(pod) and pod.status.phase not in ("Succeeded", "Failed")


def _exit_code_matches(code: int, req: job_pb2.PodFailurePolicyOnExitCodesRequirement) -> bool:
    if req.operator == "In":
        return code in req.values
    if req.operator == "NotIn":
        return code not in req.values
    return False


def _matching_container(
    statuses: Iterable[pod_pb2.ContainerStatus],
    req: job_pb2.PodFailurePolicyOnExitCodesRequirement,
) -> pod_pb2.ContainerStatus | None:
    for cs in statuses:
        if not cs.state.HasField("terminated"):
            continue  # still terminating: no exit code to match
        if req.HasField("containerName") and req.containerName != cs.name:
            continue
        code = cs.state.terminated.exitCode
        if code != 0 and _exit_code_matches(code, req):
            return cs
    return None


def match_pod_failure_policy(
    policy: job_pb2.PodFailurePolicy | None, pod: Pod
) -> tuple[str | None, bool, str | None]:
    """matchPodFailurePolicy: (the Job's failure message if a FailJob rule matched, whether
    the failure counts towards backoffLimit and backoffLimitPerIndex, the action of the
    matched rule)."""
    if policy is None:
        return None, True, None
    ns, name = pod.metadata.namespace, pod.metadata.name
    for index, rule in enumerate(policy.rules):
        if rule.HasField("onExitCodes"):
            req = rule.onExitCodes
            cs = _matching_container(pod.status.containerStatuses, req) or _matching_container(
                pod.status.initContainerStatuses, req
            )
            if cs is None:
                continue
            what = (
                f"Container {cs.name} for pod {ns}/{name} failed with exit code "
                f"{cs.state.terminated.exitCode} matching {rule.action} rule at index {index}"
            )
        elif rule.onPodConditions:
            cond = next(
                (
                    c
                    for c in pod.status.conditions
                    for p in rule.onPodConditions
                    if c.type == p.type and c.status == p.status
                ),
                None,
            )
            if cond is None:
                continue
            what = (
                f"Pod {ns}/{name} has condition {cond.type} matching {rule.action} rule at "
                f"index {index}"
            )
        else:
            continue
        if rule.action == "Ignore":
            return None, False, "Ignore"
        if rule.action == "Count":
            return None, True, "Count"
        if rule.action == "FailJob":
            return what, True, "FailJob"
        if rule.action == "FailIndex":
            return None, True, "FailIndex"
        # An action this version does not know: keep looking, as kube does.
    return None, True, None


def _policy(job: Job) -> job_pb2.PodFailurePolicy | None:
    return job.spec.podFailurePolicy if job.spec.HasField("podFailurePolicy") else None


def finished_time(pod: Pod) -> datetime:
    """getFinishedTime: the last container's finish when all finished, else the Ready=False
    transition, else deletion time minus grace, else creation."""
    latest: datetime | None = None
    complete = bool(pod.status.containerStatuses)
    for cs in pod.status.containerStatuses:
        term = cs.state.terminated
        if not cs.state.HasField("terminated") or not term.HasField("finishedAt"):
            complete = False
            break
        at = ts_to_datetime(term.finishedAt)
        latest = at if latest is None or at > latest else latest
    if complete and latest is not None:
        return latest
    ready = pod_condition(pod, "Ready")
    if ready is not None and ready.status == "False" and ready.HasField("lastTransitionTime"):
        return ts_to_datetime(ready.lastTransitionTime)
    meta = pod.metadata
    if meta.HasField("deletionTimestamp"):
        grace = (
            meta.deletionGracePeriodSeconds if meta.HasField("deletionGracePeriodSeconds") else 0
        )
        return ts_to_datetime(meta.deletionTimestamp) - timedelta(seconds=grace)
    return ts_to_datetime(meta.creationTimestamp)


@dataclass(frozen=True)
class BackoffRecord:
    """Failures since the last success and when the last of them happened."""

    failures_after_last_success: int = 0
    last_failure_time: datetime | None = None


def next_backoff_record(
    old: BackoffRecord, new_succeeded: Sequence[Pod], new_failed: Sequence[Pod]
) -> BackoffRecord:
    """newBackoffRecord: newly failed pods add to the count; a new success resets it to the
    failures that finished after that success."""
    failed_times = sorted(finished_time(p) for p in new_failed)
    if not new_succeeded:
        if not failed_times:
            return old
        return BackoffRecord(old.failures_after_last_success + len(failed_times), failed_times[-1])
    last_success = max(finished_time(p) for p in new_succeeded)
    after = [t for t in failed_times if t > last_success]
    return BackoffRecord(len(after), after[-1] if after else None)


def backoff_remaining(
    record: BackoffRecord, now: datetime, base: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF
) -> float:
    """Seconds until a replacement pod may be created: base * 2^(failures-1), at most `cap`,
    counted from the last failure (getRemainingTimeForFailuresCount)."""
    if record.failures_after_last_success == 0 or record.last_failure_time is None:
        return 0.0
    delay = base
    for _ in range(1, record.failures_after_last_success):
        delay *= 2
        if delay >= cap:
            delay = cap
            break
    elapsed = (now - record.last_failure_time).total_seconds()
    return 0.0 if delay < elapsed else delay - elapsed


def past_backoff_limit_on_failure(job: Job, pods: Iterable[Pod]) -> bool:
    """restartPolicy OnFailure: the restarts of the pods still running count as failures."""
    if job.spec.template.spec.restartPolicy != "OnFailure":
        return False
    restarts = sum(
        cs.restartCount
        for p in pods
        if p.status.phase in ("Running", "Pending")
        for cs in (*p.status.initContainerStatuses, *p.status.containerStatuses)
    )
    if job.spec.backoffLimit == 0:
        return restarts > 0
    return restarts >= job.spec.backoffLimit


def want_active(job: Job, succeeded: int, active: int) -> int:
    """How many pods should be active: parallelism, never more than the completions left; a
    Job without completions keeps what runs once one pod succeeded."""
    parallelism = job.spec.parallelism
    if not job.spec.HasField("completions"):
        return active if succeeded > 0 else parallelism
    return max(0, min(job.spec.completions - succeeded, parallelism))


def parse_indexes(text: str, completions: int) -> set[int]:
    """A completedIndexes string ("1,3-5,7") as a set, dropping indexes >= completions."""
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            continue
        out.update(range(lo, min(hi, completions - 1) + 1))
    return out


def format_indexes(indexes: Iterable[int]) -> str:
    """Sorted indexes as Kubernetes writes completedIndexes: runs of 3+ as "a-b"... and of 2
    as "a-b" too ("1,3-5,7")."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def succeeded_indexes(job: Job, pods: Iterable[Pod]) -> tuple[set[int], set[int]]:
    """calculateSucceededIndexes: (the indexes the status already holds, those plus the
    indexes of succeeded pods still carrying the finalizer)."""
    completions = job.spec.completions
    prev = parse_indexes(job.status.completedIndexes, completions)
    now = set(prev)
    for p in pods:
        ix = completion_index(p)
        if (
            p.status.phase == "Succeeded"
            and ix is not None
            and ix < completions
            and has_tracking_finalizer(p)
        ):
            now.add(ix)
    return prev, now


def first_pending_indexes(
    active_pods: Iterable[Pod],
    succeeded: set[int],
    count: int,
    completions: int,
    not_pending: Iterable[int] = (),
) -> list[int]:
    """The lowest indexes that neither succeeded nor have an active pod nor are in
    `not_pending` (failed indexes, those still terminating), at most `count`."""
    busy = set(succeeded) | set(not_pending)
    for p in active_pods:
        ix = completion_index(p)
        if ix is not None:
            busy.add(ix)
    out: list[int] = []
    for ix in range(completions):
        if len(out) >= count:
            break
        if ix not in busy:
            out.append(ix)
    return out


def pod_indexes(pods: Iterable[Pod]) -> set[int]:
    return {ix for p in pods if (ix := completion_index(p)) is not None}


# ---- backoffLimitPerIndex ---------------------------------------------------------------------


def has_backoff_limit_per_index(job: Job) -> bool:
    return job.spec.HasField("backoffLimitPerIndex")


def _count_annotation(pod: Pod, name: str) -> int:
    """An index failure count annotation; 0 when missing, not a number, negative or past
    MaxInt32 (a user may have written it)."""
    text = pod.metadata.annotations.get(name)
    if text is None or re.fullmatch(r"[+-]?[0-9]+", text) is None:  # strconv.Atoi's syntax
        return 0
    value = int(text)
    return value if 0 <= value <= jobs.MAX_INT32 else 0


def index_failure_count(pod: Pod) -> int:
    """The counted failures of the pod's index before this pod."""
    return _count_annotation(pod, INDEX_FAILURE_COUNT_ANNOTATION)


def index_absolute_failure_count(pod: Pod) -> int:
    """All failures of the pod's index before this pod, the ignored ones too."""
    return index_failure_count(pod) + _count_annotation(pod, INDEX_IGNORED_FAILURE_COUNT_ANNOTATION)


def new_index_failure_counts(job: Job, replaced: Pod | None) -> tuple[int, int]:
    """getNewIndexFailureCounts: (failures, ignored failures) for the pod replacing
    `replaced`, the failed pod of its index (none: a first pod, (0, 0))."""
    if replaced is None:
        return 0, 0
    counted = index_failure_count(replaced)
    ignored = _count_annotation(replaced, INDEX_IGNORED_FAILURE_COUNT_ANNOTATION)
    if match_pod_failure_policy(_policy(job), replaced)[1]:
        counted += 1
    else:
        ignored += 1
    return counted, ignored


def is_index_failed(job: Job, pod: Pod) -> bool:
    """isIndexFailed: the pod failed and matched a FailIndex rule, or its failure counts and
    its index had failed backoffLimitPerIndex times before it."""
    if not is_pod_failed(pod, job):
        return False
    _, counts, action = match_pod_failure_policy(_policy(job), pod)
    if action == "FailIndex":
        return True
    return counts and index_failure_count(pod) >= job.spec.backoffLimitPerIndex


def failed_indexes(job: Job, pods: Iterable[Pod]) -> set[int]:
    """calculateFailedIndexes: status.failedIndexes plus the indexes of failed pods, not yet
    counted (they keep the finalizer), that fail their index."""
    completions = job.spec.completions
    out = parse_indexes(job.status.failedIndexes, completions)
    for p in pods:
        ix = completion_index(p)
        if ix is None or ix >= completions or not has_tracking_finalizer(p):
            continue
        if is_index_failed(job, p):
            out.add(ix)
    return out


def pods_with_delayed_deletion(
    job: Job,
    pods: Iterable[Pod],
    active_pods: Iterable[Pod],
    succeeded: set[int],
    failed: set[int],
    expected_rm: set[str],
) -> dict[int, Pod]:
    """getPodsWithDelayedDeletionPerIndex: per index still to be retried, its last failed pod
    (most failures before it, then latest finish). That pod keeps its finalizer, so it is
    neither counted nor gone, until its replacement exists and carries the index's count."""
    busy = succeeded | failed | pod_indexes(active_pods)
    out: dict[int, Pod] = {}
    for p in pods:
        if not has_tracking_finalizer(p) or p.metadata.uid in expected_rm:
            continue
        ix = completion_index(p)
        if ix is None or ix >= job.spec.completions or ix in busy or not is_pod_failed(p, job):
            continue
        last = out.get(ix)
        if last is None or (
            index_absolute_failure_count(last) <= index_absolute_failure_count(p)
            and finished_time(p) >= finished_time(last)
        ):
            out[ix] = p
    return out


def index_backoff_remaining(
    last_failed: Pod | None, now: datetime, base: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF
) -> float:
    """getRemainingTimePerIndex: the back-off of an index, from its failures so far (the last
    failed pod's count, plus that pod) and that pod's finish."""
    if last_failed is None:
        return 0.0
    record = BackoffRecord(
        index_absolute_failure_count(last_failed) + 1, finished_time(last_failed)
    )
    return backoff_remaining(record, now, base, cap)


def active_pods_for_removal(job: Job, active_pods: list[Pod], at_least: int) -> list[Pod]:
    """activePodsForRemoval: an Indexed Job's pods with a bad or repeated index first, then
    the pods the ReplicaSet controller would delete first."""
    remove: list[Pod] = []
    left = active_pods
    if jobs.is_indexed(job):
        left = []
        seen: set[int] = set()
        ordered = sorted(active_pods, key=lambda p: (completion_index(p) or 0, not is_pod_ready(p)))
        for p in ordered:
            ix = completion_index(p)
            if ix is None or ix >= job.spec.completions or ix in seen:
                remove.append(p)
            else:
                seen.add(ix)
                left.append(p)
    if len(remove) < at_least:
        remove.extend(pods_to_delete(left, left, at_least - len(remove)))
    return remove


def new_condition(type_: str, reason: str, message: str, now: datetime) -> job_pb2.JobCondition:
    cond = job_pb2.JobCondition(type=type_, status="True", reason=reason, message=message)
    cond.lastProbeTime.CopyFrom(datetime_to_ts(now))
    cond.lastTransitionTime.CopyFrom(datetime_to_ts(now))
    return cond


def ensure_condition(
    job: Job, type_: str, status: str, reason: str, message: str, now: datetime
) -> bool:
    """ensureJobConditionStatus: set or update a condition; a missing one is not added as
    False. True when the list changed."""
    for cond in job.status.conditions:
        if cond.type == type_:
            if (cond.status, cond.reason, cond.message) == (status, reason, message):
                return False
            fresh = new_condition(type_, reason, message, now)
            fresh.status = status
            cond.CopyFrom(fresh)
            return True
    if status == "False":
        return False
    fresh = new_condition(type_, reason, message, now)
    fresh.status = status
    job.status.conditions.append(fresh)
    return True


def new_job_controller_ref(job: Job) -> meta_pb2.OwnerReference:
    return new_controller_ref(job, API_VERSION, KIND)


def _add_tracking_finalizer(pod: Pod) -> None:
    if jobs.TRACKING_FINALIZER not in pod.metadata.finalizers:
        pod.metadata.finalizers.append(jobs.TRACKING_FINALIZER)


def _remove_tracking_finalizer(pod: Pod) -> None:
    fins = [f for f in pod.metadata.finalizers if f != jobs.TRACKING_FINALIZER]
    del pod.metadata.finalizers[:]
    pod.metadata.finalizers.extend(fins)


def pod_for_job(job: Job, index: int | None, replaced: Pod | None = None) -> Pod:
    """A new pod from the template: owned by the Job, with the tracking finalizer; an
    Indexed Job's pod carries its index (annotation, label, JOB_COMPLETION_INDEX, hostname
    `<job>-<index>`) and is named `<job>-<index>-<random>`; with backoffLimitPerIndex it
    carries its index's failures so far, counted from `replaced` (its failed predecessor)."""
    tmpl = job.spec.template
    pod = Pod(apiVersion="v1", kind="Pod")
    meta = pod.metadata
    meta.namespace = job.metadata.namespace
    meta.labels.update(tmpl.metadata.labels)
    meta.annotations.update(tmpl.metadata.annotations)
    meta.finalizers.extend(tmpl.metadata.finalizers)
    if jobs.TRACKING_FINALIZER not in meta.finalizers:
        meta.finalizers.append(jobs.TRACKING_FINALIZER)
    meta.ownerReferences.append(new_job_controller_ref(job))
    pod.spec.CopyFrom(tmpl.spec)
    if index is None:
        meta.generateName = f"{job.metadata.name}-"
        return pod
    meta.generateName = f"{job.metadata.name}-{index}-"
    meta.annotations[jobs.COMPLETION_INDEX_ANNOTATION] = str(index)
    meta.labels[jobs.COMPLETION_INDEX_ANNOTATION] = str(index)
    if has_backoff_limit_per_index(job):
        counted, ignored = new_index_failure_counts(job, replaced)
        meta.annotations[INDEX_FAILURE_COUNT_ANNOTATION] = str(counted)
        if ignored > 0:
            meta.annotations[INDEX_IGNORED_FAILURE_COUNT_ANNOTATION] = str(ignored)
    pod.spec.hostname = f"{job.metadata.name}-{index}"
    # kube's addCompletionIndexEnvVariable: the variable reads the annotation (the apiserver
    # defaults the fieldRef's apiVersion), unless the template sets one of that name.
    path = f"metadata.annotations['{jobs.COMPLETION_INDEX_ANNOTATION}']"
    for c in (*pod.spec.initContainers, *pod.spec.containers):
        if not any(e.name == jobs.COMPLETION_INDEX_ENV for e in c.env):
            var = c.env.add(name=jobs.COMPLETION_INDEX_ENV)
            var.valueFrom.fieldRef.fieldPath = path
    return pod


# ---- the controller ---------------------------------------------------------------------------


@dataclass
class _SyncCtx:
    job: Job
    pods: list[Pod]
    active_pods: list[Pod]
    uncounted_succeeded: set[str]
    uncounted_failed: set[str]
    expected_rm: set[str]
    succeeded: int = 0
    failed: int = 0
    ready: int = 0
    terminating: int = 0
    finished: job_pb2.JobCondition | None = None
    prev_succeeded_indexes: set[int] = field(default_factory=set)
    succeeded_index_set: set[int] = field(default_factory=set)
    new_backoff: BackoffRecord = field(default_factory=BackoffRecord)
    # backoffLimitPerIndex only: the failed indexes, and per index to retry its failed pod
    # whose finalizer stays until the replacement is created.
    failed_index_set: set[int] | None = None
    delayed: dict[int, Pod] = field(default_factory=dict)


class JobController:
    name = "job"

    def __init__(
        self,
        client: JobClientAPI,
        job_store: Store[Job],
        pod_store: Store[Pod],
        queue: Queue,
        orphan_queue: Queue,
        *,
        clock: Clock | None = None,
        recorder: Recorder | None = None,
        backoff_base: float = DEFAULT_BACKOFF,
        backoff_max: float = MAX_BACKOFF,
        sync_batch_period: float = SYNC_BATCH_PERIOD,
    ) -> None:
        self.client = client
        self.job_store = job_store
        self.pod_store = pod_store
        self.queue = queue
        self.orphan_queue = orphan_queue
        self.clock = clock or Clock()
        self.recorder = recorder or NullRecorder()
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.sync_batch_period = sync_batch_period
        self.expectations = Expectations(self.clock)
        self.pod_index = PodIndex(pod_store)
        # Pod uids whose finalizer removal the cache has not shown yet, per Job key.
        self.expected_rm: dict[str, set[str]] = {}
        self.backoffs: dict[str, BackoffRecord] = {}
        # The last status we wrote per Job key: newer than a lagging cache.
        self._written: dict[str, Job] = {}

    # ---- informer handlers: cheap, synchronous, only enqueue and count ----

    def _enqueue_batched(self, key: str) -> None:
        self.queue.add_after(key, self.sync_batch_period)

    def on_job_add(self, job: Job) -> None:
        self.queue.add(key_of(job))

    def on_job_update(self, old: Job, new: Job) -> None:
        key = key_of(new)
        if old.metadata.generation == new.metadata.generation:
            self._enqueue_batched(key)
        else:
            self.queue.add(key)
        if jobs.is_finished(new):
            self._cleanup_pod_finalizers(new)
        ads = new.spec.activeDeadlineSeconds
        if (
            new.status.HasField("startTime")
            and new.spec.HasField("activeDeadlineSeconds")
            and (
                not old.spec.HasField("activeDeadlineSeconds")
                or old.spec.activeDeadlineSeconds != ads
            )
        ):
            passed = (self.clock.now() - ts_to_datetime(new.status.startTime)).total_seconds()
            self.queue.add_after(key, ads - passed)

    def on_job_delete(self, job: Job) -> None:
        self.queue.add(key_of(job))
        self._cleanup_pod_finalizers(job)

    def _cleanup_pod_finalizers(self, job: Job) -> None:
        for pod in self.pod_index.controlled_by(job.metadata.uid):
            if has_tracking_finalizer(pod):
                self.orphan_queue.add(key_of(pod))

    def _resolve(self, pod: Pod, ref: meta_pb2.OwnerReference | None) -> Job | None:
        return resolve_controller_ref(pod.metadata.namespace, ref, KIND, self.job_store)

    def _matching_jobs(self, pod: Pod) -> list[Job]:
        return [
            j
            for j in self.job_store.list()
            if j.metadata.namespace == pod.metadata.namespace
            and (j.spec.selector.matchLabels or j.spec.selector.matchExpressions)
            and selector_matches(j.spec.selector, pod.metadata.labels)
        ]

    def _observe_finalizer_removed(self, key: str, pod: Pod) -> None:
        expected = self.expected_rm.get(key)
        if expected is not None:
            expected.discard(pod.metadata.uid)

    def on_pod_add(self, pod: Pod) -> None:
        if is_terminating(pod):
            self._pod_deleted(pod, final=False)
            return
        ref = controller_ref(pod.metadata)
        if ref is not None:
            job = self._resolve(pod, ref)
            if job is not None:
                key = key_of(job)
                self.expectations.creation_observed(key)
                self._enqueue_batched(key)
            return
        if has_tracking_finalizer(pod):
            self.orphan_queue.add(key_of(pod))
        for job in self._matching_jobs(pod):
            self._enqueue_batched(key_of(job))

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        if old.metadata.resourceVersion == new.metadata.resourceVersion:
            return
        if is_terminating(new):
            self._pod_deleted(new, final=False)
            return
        removed = not has_tracking_finalizer(new)
        old_ref, new_ref = controller_ref(old.metadata), controller_ref(new.metadata)
        changed = (old_ref is None) != (new_ref is None) or (
            old_ref is not None and new_ref is not None and old_ref.uid != new_ref.uid
        )
        if changed and old_ref is not None:
            old_job = self._resolve(old, old_ref)
            if old_job is not None:
                if removed:
                    self._observe_finalizer_removed(key_of(old_job), new)
                self._enqueue_batched(key_of(old_job))
        if new_ref is not None:
            job = self._resolve(new, new_ref)
            if job is not None:
                if removed:
                    self._observe_finalizer_removed(key_of(job), new)
                self._enqueue_batched(key_of(job))
            return
        if has_tracking_finalizer(new):
            self.orphan_queue.add(key_of(new))
        if changed or dict(old.metadata.labels) != dict(new.metadata.labels):
            for job in self._matching_jobs(new):
                self._enqueue_batched(key_of(job))

    def on_pod_delete(self, pod: Pod) -> None:
        self._pod_deleted(pod, final=True)

    def _pod_deleted(self, pod: Pod, *, final: bool) -> None:
        ref = controller_ref(pod.metadata)
        has_fin = has_tracking_finalizer(pod)
        if ref is None:
            if has_fin and not final:
                self.orphan_queue.add(key_of(pod))
            return
        job = self._resolve(pod, ref)
        if job is None or jobs.is_finished(job):
            if has_fin and not final:
                self.orphan_queue.add(key_of(pod))
            return
        key = key_of(job)
        self.expectations.deletion_observed(key, key_of(pod))
        if final or not has_fin:
            self._observe_finalizer_removed(key, pod)
        self._enqueue_batched(key)

    # ---- orphan pods ----

    async def sync_orphan_pod(self, key: str) -> None:
        """Strip the tracking finalizer from a pod no unfinished Job of ours controls."""
        pod = self.pod_store.get(key)
        if pod is None or not has_tracking_finalizer(pod):
            return
        ref = controller_ref(pod.metadata)
        if ref is not None:
            if ref.kind != KIND or ref.apiVersion != API_VERSION:
                return  # not a batch/v1 Job's: its finalizer is not ours to remove
            job = self._resolve(pod, ref)
            if job is not None and not jobs.is_finished(job):
                return  # adopted, or still counting it
        await self._remove_finalizer(pod)

    async def _remove_finalizer(self, pod: Pod) -> None:
        current = pod
        for _ in range(_WRITE_ATTEMPTS):
            if not has_tracking_finalizer(current):
                return
            updated = Pod()
            updated.CopyFrom(current)
            keep = [f for f in updated.metadata.finalizers if f != jobs.TRACKING_FINALIZER]
            del updated.metadata.finalizers[:]
            updated.metadata.finalizers.extend(keep)
            try:
                await self.client.pods.update(updated)
                return
            except NotFoundError:
                return
            except ConflictError:
                try:
                    current = await self.client.pods.get(pod.metadata.name, pod.metadata.namespace)
                except NotFoundError:
                    return
                if current.metadata.uid != pod.metadata.uid:
                    return
        raise ConflictError(f"pod {key_of(pod)}: kept changing while its finalizer was removed")

    # ---- the reconcile ----

    def _current(self, key: str) -> Job | None:
        cached = self.job_store.get(key)
        written = self._written.get(key)
        if cached is None:
            self._written.pop(key, None)
            return None
        if (
            written is not None
            and written.metadata.uid == cached.metadata.uid
            and _rv(written) > _rv(cached)
        ):
            # The cache has not caught up with our own status write; but take the spec and
            # metadata from the cache only once it has (they may change meanwhile only
            # through the spec, which bumps the resourceVersion past ours).
            return written
        return cached

    async def sync(self, key: str) -> None:
        shared = self._current(key)
        if shared is None:
            self.expectations.delete(key)
            self.expected_rm.pop(key, None)
            self.backoffs.pop(key, None)
            return
        if jobs.is_finished(shared):
            self.backoffs.pop(key, None)
            return
        job = Job()
        job.CopyFrom(shared)
        now = self.clock.now()
        satisfied = self.expectations.satisfied(key)
        pods = await self._pods_for_job(job)
        active_pods = [p for p in pods if is_pod_active(p)]
        uncounted = job.status.uncountedTerminatedPods
        ctx = _SyncCtx(
            job=job,
            pods=pods,
            active_pods=active_pods,
            uncounted_succeeded=set(uncounted.succeeded),
            uncounted_failed=set(uncounted.failed),
            expected_rm=set(self.expected_rm.get(key, ())),
            ready=sum(1 for p in active_pods if is_pod_ready(p)),
            terminating=sum(1 for p in pods if is_terminating_pod(p)),
        )
        active = len(active_pods)
        new_succeeded, new_failed = self._new_finished_pods(ctx)
        policy = _policy(job)
        counted_failed = [p for p in new_failed if match_pod_failure_policy(policy, p)[1]]
        ctx.succeeded = job.status.succeeded + len(new_succeeded) + len(ctx.uncounted_succeeded)
        ctx.failed = job.status.failed + len(counted_failed) + len(ctx.uncounted_failed)
        suspended = job.spec.suspend
        if not job.status.HasField("startTime") and not suspended:
            job.status.startTime.CopyFrom(datetime_to_ts(now))
        ctx.new_backoff = next_backoff_record(
            self.backoffs.get(key, BackoffRecord()), new_succeeded, new_failed
        )

        ctx.finished = self._success_criteria_met(job)
        if ctx.finished is None:
            target = jobs.condition(job, jobs.FAILURE_TARGET)
            if target is not None and target.status == "True":
                ctx.finished = new_condition(jobs.FAILED, target.reason, target.message, now)
            elif (message := self._fail_job_message(job, pods)) is not None:
                ctx.finished = new_condition(
                    jobs.FAILURE_TARGET, jobs.REASON_POD_FAILURE_POLICY, message, now
                )
        if ctx.finished is None:
            if ctx.failed > job.spec.backoffLimit or past_backoff_limit_on_failure(job, pods):
                ctx.finished = new_condition(
                    jobs.FAILURE_TARGET, jobs.REASON_BACKOFF_LIMIT_EXCEEDED, MSG_BACKOFF_LIMIT, now
                )
            elif self._past_active_deadline(job, now):
                ctx.finished = new_condition(
                    jobs.FAILURE_TARGET, jobs.REASON_DEADLINE_EXCEEDED, MSG_DEADLINE, now
                )
            elif job.spec.HasField("activeDeadlineSeconds") and not suspended:
                started = ts_to_datetime(job.status.startTime)
                left = job.spec.activeDeadlineSeconds - (now - started).total_seconds()
                self.queue.add_after(key, left)

        if jobs.is_indexed(job):
            ctx.prev_succeeded_indexes, ctx.succeeded_index_set = succeeded_indexes(job, pods)
            ctx.succeeded = len(ctx.succeeded_index_set)
            if has_backoff_limit_per_index(job):
                self._check_failed_indexes(ctx, now)

        suspend_changed = False
        manage_error: BaseException | None = None
        if ctx.finished is not None:
            deleted_ready, deleted, manage_error = await self._delete_active_pods(job, active_pods)
            if deleted != active or not satisfied:
                # Pods left, or not yet in the cache: not finished before they are counted.
                ctx.finished = None
            active -= deleted
            ctx.terminating += deleted
            ctx.ready -= deleted_ready
        else:
            managed = False
            if satisfied and not is_terminating(job):
                active, manage_error = await self._manage_job(key, ctx, now)
                managed = True
            if job.spec.HasField("completions"):
                complete = ctx.succeeded >= job.spec.completions and active == 0
            else:
                complete = ctx.succeeded > 0 and active == 0
            if complete:
                ctx.finished = new_condition(
                    jobs.SUCCESS_CRITERIA_MET,
                    jobs.REASON_COMPLETIONS_REACHED,
                    MSG_COMPLETIONS_REACHED,
                    now,
                )
            elif managed:
                suspend_changed = await self._suspend_condition(job, now)

        needs_flush = (
            suspend_changed
            or active != job.status.active
            or not job.status.HasField("ready")
            or job.status.ready != ctx.ready
            or not job.status.HasField("terminating")
            or job.status.terminating != ctx.terminating
        )
        job.status.active = active
        job.status.ready = ctx.ready
        job.status.terminating = ctx.terminating
        await self._track_status(key, ctx, needs_flush, now)
        if manage_error is not None:
            # Its traceback holds this frame: a name for it here would make a cycle.
            try:
                raise manage_error
            finally:
                del manage_error

    def _check_failed_indexes(self, ctx: _SyncCtx, now: datetime) -> None:
        """The failed indexes; the Job fails when there are more than maxFailedIndexes, or
        when every index succeeded or failed and one failed."""
        job = ctx.job
        failed = failed_indexes(job, ctx.pods)
        ctx.failed_index_set = failed
        if ctx.finished is None:
            if job.spec.HasField("maxFailedIndexes") and len(failed) > job.spec.maxFailedIndexes:
                ctx.finished = new_condition(
                    jobs.FAILURE_TARGET,
                    jobs.REASON_MAX_FAILED_INDEXES_EXCEEDED,
                    MSG_MAX_FAILED_INDEXES,
                    now,
                )
            elif failed and len(failed) + len(ctx.succeeded_index_set) >= job.spec.completions:
                ctx.finished = new_condition(
                    jobs.FAILURE_TARGET, jobs.REASON_FAILED_INDEXES, MSG_FAILED_INDEXES, now
                )
        ctx.delayed = pods_with_delayed_deletion(
            job, ctx.pods, ctx.active_pods, ctx.succeeded_index_set, failed, ctx.expected_rm
        )

    def _success_criteria_met(self, job: Job) -> job_pb2.JobCondition | None:
        cond = jobs.condition(job, jobs.SUCCESS_CRITERIA_MET)
        return cond if cond is not None and cond.status == "True" else None

    def _fail_job_message(self, job: Job, pods: Iterable[Pod]) -> str | None:
        policy = _policy(job)
        if policy is None:
            return None
        for p in pods:
            if is_pod_failed(p, job):
                message = match_pod_failure_policy(policy, p)[0]
                if message is not None:
                    return message
        return None

    def _past_active_deadline(self, job: Job, now: datetime) -> bool:
        spec = job.spec
        if not spec.HasField("activeDeadlineSeconds") or not job.status.HasField("startTime"):
            return False
        if spec.suspend:
            return False
        elapsed = (now - ts_to_datetime(job.status.startTime)).total_seconds()
        return elapsed >= spec.activeDeadlineSeconds

    def _new_finished_pods(self, ctx: _SyncCtx) -> tuple[list[Pod], list[Pod]]:
        """getNewFinishedPods: finished pods that still have the finalizer and are not in the
        uncounted lists (an Indexed Job's only with a valid index)."""
        job = ctx.job

        def valid(p: Pod, uncounted: set[str]) -> bool:
            uid = p.metadata.uid
            if not has_tracking_finalizer(p) or uid in uncounted or uid in ctx.expected_rm:
                return False
            if jobs.is_indexed(job):
                ix = completion_index(p)
                return ix is not None and ix < job.spec.completions
            return True

        succeeded = [
            p
            for p in ctx.pods
            if valid(p, ctx.uncounted_succeeded) and p.status.phase == "Succeeded"
        ]
        failed = [p for p in ctx.pods if valid(p, ctx.uncounted_failed) and is_pod_failed(p, job)]
        return succeeded, failed

    async def _suspend_condition(self, job: Job, now: datetime) -> bool:
        if job.spec.suspend:
            changed = ensure_condition(
                job, jobs.SUSPENDED, "True", "JobSuspended", "Job suspended", now
            )
            if changed:
                await self._event(job, "Normal", "Suspended", "Job suspended")
            return changed
        changed = ensure_condition(job, jobs.SUSPENDED, "False", "JobResumed", "Job resumed", now)
        if changed:
            await self._event(job, "Normal", "Resumed", "Job resumed")
            # The deadline counts from the resume, as a Job created suspended.
            job.status.startTime.CopyFrom(datetime_to_ts(now))
        return changed

    async def _pods_for_job(self, job: Job) -> list[Pod]:
        """getPodsForJob: ours, plus matching orphans adopted (with the tracking finalizer);
        ours that no longer match are released (and lose it)."""
        manager = ControllerRefManager(job, API_VERSION, KIND, self.client.jobs)
        return await manager.claim(
            self.pod_index.claim_candidates(job),
            lambda pod: selector_matches(job.spec.selector, pod.metadata.labels),
            self.client.pods,
            on_adopt=_add_tracking_finalizer,
            on_release=_remove_tracking_finalizer,
        )

    async def _delete_active_pods(
        self, job: Job, pods: Sequence[Pod]
    ) -> tuple[int, int, BaseException | None]:
        """deleteActivePods: delete, keeping the finalizers (counted once the pods are
        gone). Returns (ready ones deleted, deleted, first error)."""
        results = await asyncio.gather(
            *(self._delete_pod(job, p, strip_finalizer=False) for p in pods),
            return_exceptions=True,
        )
        return self._deletions(pods, results)

    def _deletions(
        self, pods: Sequence[Pod], results: Sequence[BaseException | None]
    ) -> tuple[int, int, BaseException | None]:
        deleted = ready = 0
        error: BaseException | None = None
        for pod, result in zip(pods, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, NotFoundError):
                error = error or result
                continue
            deleted += 1
            if is_pod_ready(pod):
                ready += 1
        return ready, deleted, error

    async def _delete_pod(self, job: Job, pod: Pod, *, strip_finalizer: bool) -> None:
        meta = pod.metadata
        if strip_finalizer:
            await self._remove_finalizer(pod)
        await self.client.pods.delete(meta.name, meta.namespace, uid=meta.uid)
        await self._event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta.name}")

    async def _delete_job_pods(
        self, key: str, job: Job, pods: Sequence[Pod]
    ) -> tuple[int, int, BaseException | None]:
        """deleteJobPods: the finalizer first (the pod is not counted), then the pod."""
        self.expectations.expect_deletions(key, [key_of(p) for p in pods])
        results = await asyncio.gather(
            *(self._delete_pod(job, p, strip_finalizer=True) for p in pods),
            return_exceptions=True,
        )
        for pod, result in zip(pods, results, strict=True):
            if isinstance(result, BaseException):
                self.expectations.deletion_observed(key, key_of(pod))
        return self._deletions(pods, results)

    async def _manage_job(
        self, key: str, ctx: _SyncCtx, now: datetime
    ) -> tuple[int, BaseException | None]:
        """manageJob: the pods to delete (suspended, too many, bad indexes) or to create."""
        job = ctx.job
        active = len(ctx.active_pods)
        if job.spec.suspend:
            victims = active_pods_for_removal(job, ctx.active_pods, active)
            ready, removed, error = await self._delete_job_pods(key, job, victims)
            ctx.terminating += removed
            ctx.ready -= ready
            return active - removed, error
        want = want_active(job, ctx.succeeded, active)
        victims = active_pods_for_removal(job, ctx.active_pods, max(0, active - want))
        victims = victims[:MAX_POD_CREATE_DELETE_PER_SYNC]
        if victims:
            ready, removed, error = await self._delete_job_pods(key, job, victims)
            ctx.terminating += removed
            ctx.ready -= ready
            return active - removed, error
        terminating = ctx.terminating if only_replace_failed_pods(job) else 0
        diff = want - terminating - active
        if diff <= 0:
            return active, None
        # While pods wait out a back-off kube's manageJob reports 0 active; tinykube keeps
        # reporting the pods that run.
        per_index = has_backoff_limit_per_index(job)
        if not per_index:
            remaining = backoff_remaining(ctx.new_backoff, now, self.backoff_base, self.backoff_max)
            if remaining > 0:
                self.queue.add_after(key, max(remaining, self.sync_batch_period))
                return active, None
        diff = min(diff, MAX_POD_CREATE_DELETE_PER_SYNC)
        indexes: list[int | None] = [None] * diff
        if jobs.is_indexed(job):
            not_pending = set(ctx.failed_index_set or ())
            if only_replace_failed_pods(job):
                # A terminating pod's index is replaced only once that pod is gone.
                not_pending |= pod_indexes(p for p in ctx.pods if is_terminating_pod(p))
            pending = first_pending_indexes(
                ctx.active_pods, ctx.succeeded_index_set, diff, job.spec.completions, not_pending
            )
            if per_index:
                pending, wait = self._indexes_past_backoff(ctx, pending, now)
                if wait > 0:
                    self.queue.add_after(key, max(wait, self.sync_batch_period))
                    return active, None
            indexes = list(pending)
            diff = len(indexes)
            if diff == 0:
                return active, None
        self.expectations.expect_creations(key, diff)
        todo = list(indexes)

        async def create_one() -> None:
            index = todo.pop(0)
            replaced = ctx.delayed.get(index) if index is not None else None
            await self._create_pod(job, index, replaced)

        successes, error = await slow_start_batch(diff, 1, create_one)
        for _ in range(diff - successes):
            self.expectations.creation_observed(key)
        if error is not None:
            await self._event(job, "Warning", "FailedCreate", f"Error creating: {error}")
        return active + successes, error

    def _indexes_past_backoff(
        self, ctx: _SyncCtx, pending: list[int], now: datetime
    ) -> tuple[list[int], float]:
        """getPodCreationInfoForIndependentIndexes: the pending indexes whose back-off is over;
        when there are none, the shortest back-off left (the others wait for a later sync,
        as in kube: the new pods' events bring one)."""
        ready: list[int] = []
        wait: float | None = None
        for ix in pending:
            left = index_backoff_remaining(
                ctx.delayed.get(ix), now, self.backoff_base, self.backoff_max
            )
            if left == 0:
                ready.append(ix)
            elif wait is None or left < wait:
                wait = left
        if ready or wait is None:
            return ready, 0.0
        return [], wait

    async def _create_pod(self, job: Job, index: int | None, replaced: Pod | None = None) -> None:
        created = await self.client.pods.create(pod_for_job(job, index, replaced))
        await self._event(
            job, "Normal", "SuccessfulCreate", f"Created pod: {created.metadata.name}"
        )

    # ---- status: count, remove finalizers, finish ----

    async def _track_status(
        self, key: str, ctx: _SyncCtx, needs_flush: bool, now: datetime
    ) -> None:
        """trackJobStatusAndRemoveFinalizers."""
        job = ctx.job
        indexed = jobs.is_indexed(job)
        pods = sorted(ctx.pods, key=lambda p: completion_index(p) or 0) if indexed else ctx.pods
        with_finalizer = {
            p.metadata.uid
            for p in pods
            if has_tracking_finalizer(p) and p.metadata.uid not in ctx.expected_rm
        }
        if _count_uncounted_without_finalizer(job.status, with_finalizer):
            needs_flush = True
        to_remove: list[Pod] = []
        new_indexes: list[int] = []
        reached_max = False
        uncounted = job.status.uncountedTerminatedPods
        policy = _policy(job)
        failing = ctx.finished is not None and ctx.finished.type != jobs.SUCCESS_CRITERIA_MET
        for pod in pods:
            uid = pod.metadata.uid
            if not has_tracking_finalizer(pod) or uid in ctx.expected_rm:
                continue  # counted in an earlier sync
            considered_failed = is_pod_failed(pod, job)
            removable = (
                is_terminating(job)
                or ctx.finished is not None
                or pod.status.phase == "Succeeded"
                or (considered_failed and not _awaits_replacement(ctx, pod))
            )
            if not removable:
                continue
            to_remove.append(pod)
            ix = completion_index(pod)
            if pod.status.phase == "Succeeded" and uid not in ctx.uncounted_failed:
                if indexed:
                    if (
                        ix is not None
                        and ix < job.spec.completions
                        and ix not in ctx.prev_succeeded_indexes
                    ):
                        new_indexes.append(ix)
                        needs_flush = True
                elif uid not in ctx.uncounted_succeeded:
                    uncounted.succeeded.append(uid)
                    needs_flush = True
            elif considered_failed or failing:
                # Once the Job is failing, every pod not terminated is counted as failed.
                valid_index = not indexed or (ix is not None and ix < job.spec.completions)
                if (
                    uid not in ctx.uncounted_failed
                    and valid_index
                    and match_pod_failure_policy(policy, pod)[1]
                ):
                    uncounted.failed.append(uid)
                    needs_flush = True
            if len(new_indexes) + len(uncounted.succeeded) + len(uncounted.failed) >= (
                MAX_UNCOUNTED_PODS
            ):
                reached_max = True
                break
        if indexed:
            ctx.succeeded_index_set |= set(new_indexes)
            text = format_indexes(ctx.succeeded_index_set)
            if text != job.status.completedIndexes:
                needs_flush = True
            job.status.succeeded = len(ctx.succeeded_index_set)
            job.status.completedIndexes = text
            if ctx.failed_index_set is not None:
                failed_text = format_indexes(ctx.failed_index_set)
                if (
                    not job.status.HasField("failedIndexes")
                    or job.status.failedIndexes != failed_text
                ):
                    job.status.failedIndexes = failed_text
                    needs_flush = True
            elif job.status.HasField("failedIndexes"):
                job.status.ClearField("failedIndexes")
                needs_flush = True
        finished = ctx.finished
        if finished is not None and finished.type == jobs.FAILURE_TARGET:
            job.status.conditions.append(finished)
            needs_flush = True
            finished = new_condition(jobs.FAILED, finished.reason, finished.message, now)
        if finished is not None and finished.type == jobs.SUCCESS_CRITERIA_MET:
            if self._success_criteria_met(job) is None:
                job.status.conditions.append(finished)
                needs_flush = True
            finished = new_condition(jobs.COMPLETE, finished.reason, finished.message, now)
        ctx.finished = finished

        if needs_flush:
            job = await self._write_status(key, job)
            ctx.job = job
            self.backoffs[key] = ctx.new_backoff
            needs_flush = False
        rm_error: BaseException | None = None
        if to_remove:
            self.expected_rm.setdefault(key, set()).update(p.metadata.uid for p in to_remove)
            results = await asyncio.gather(
                *(self._remove_finalizer(p) for p in to_remove), return_exceptions=True
            )
            for pod, result in zip(to_remove, results, strict=True):
                if isinstance(result, BaseException):
                    self._observe_finalizer_removed(key, pod)
                    rm_error = rm_error or result
                else:
                    with_finalizer.discard(pod.metadata.uid)
        if _count_uncounted_without_finalizer(job.status, with_finalizer):
            needs_flush = True
        if rm_error is not None:
            del results, result  # (they name the error, whose traceback will hold this frame)
            if needs_flush:
                await self._write_status(key, job)
            # Its traceback holds this frame: a name for it here would make a cycle.
            try:
                raise rm_error
            finally:
                del rm_error
        job_finished = not reached_max and self._enact_finished(ctx, job)
        if job_finished or needs_flush:
            job = await self._write_status(key, job)
            if job_finished and ctx.finished is not None:
                await self._record_finished(job, ctx.finished)

    def _enact_finished(self, ctx: _SyncCtx, job: Job) -> bool:
        """enactJobFinished: the final condition, once nothing is uncounted or terminating."""
        finished = ctx.finished
        if finished is None:
            return False
        uncounted = job.status.uncountedTerminatedPods
        if uncounted.succeeded or uncounted.failed:
            return False
        if ctx.terminating > 0:
            return False
        ensure_condition(
            job, finished.type, finished.status, finished.reason, finished.message, self.clock.now()
        )
        if finished.type == jobs.COMPLETE:
            cond = jobs.condition(job, jobs.COMPLETE)
            if cond is not None:
                job.status.completionTime.CopyFrom(cond.lastTransitionTime)
        return True

    async def _record_finished(self, job: Job, finished: job_pb2.JobCondition) -> None:
        if finished.type == jobs.COMPLETE:
            spec = job.spec
            if spec.HasField("completions") and job.status.succeeded > spec.completions:
                await self._event(
                    job,
                    "Warning",
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached",
                )
            await self._event(job, "Normal", "Completed", "Job completed")
        else:
            await self._event(job, "Warning", finished.reason, finished.message)

    async def _write_status(self, key: str, job: Job) -> Job:
        try:
            written = await self.client.jobs.update_status(job)
        except NotFoundError:
            return job
        self._written[key] = written
        out = Job()
        out.CopyFrom(written)
        return out

    async def _event(self, job: Job, type_: str, reason: str, message: str) -> None:
        try:
            await self.recorder.record(job, type_, reason, message)
        except Exception:  # events are best effort: never fail a sync over one
            log.debug("could not record event %s for %s", reason, key_of(job), exc_info=True)


def _awaits_replacement(ctx: _SyncCtx, pod: Pod) -> bool:
    """canRemoveFinalizer's exception: the failed pod whose index's replacement is not yet
    created keeps its finalizer (the replacement's failure count is taken from it)."""
    ix = completion_index(pod)
    if ix is None:
        return False
    delayed = ctx.delayed.get(ix)
    return delayed is not None and delayed.metadata.uid == pod.metadata.uid


def _count_uncounted_without_finalizer(status: job_pb2.JobStatus, with_finalizer: set[str]) -> bool:
    """cleanUncountedPodsWithoutFinalizers: uids whose pods lost the finalizer (or are gone)
    leave the uncounted lists for the counters. True when anything moved."""
    uncounted = status.uncountedTerminatedPods
    changed = False
    for kind in ("succeeded", "failed"):
        uids = list(getattr(uncounted, kind))
        keep = [u for u in uids if u in with_finalizer]
        if len(keep) != len(uids):
            changed = True
            setattr(status, kind, getattr(status, kind) + len(uids) - len(keep))
            del getattr(uncounted, kind)[:]
            getattr(uncounted, kind).extend(keep)
    return changed


def _rv(obj: Any) -> int:
    try:
        return int(obj.metadata.resourceVersion)
    except ValueError:
        return 0
