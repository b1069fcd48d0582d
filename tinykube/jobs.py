"""What the apiserver, the Job controller and the CLI share about Jobs (batch/v1).

The well-known label, annotation and finalizer names Kubernetes puts on Jobs and their pods,
and small pure helpers over the generated messages (the Job's conditions, whether it finished).
No I/O.
"""

from __future__ import annotations

from tinykube.v1 import job_pb2

# The pod finalizer that keeps a finished pod until the Job controller has counted it.
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
# The labels the apiserver's strategy puts on the template (both spellings, as Kubernetes does
# since 1.27); the generated selector matches CONTROLLER_UID_LABEL only.
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
# An Indexed Job's pods carry their index in this annotation and label, and in the env var.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"

NON_INDEXED = "NonIndexed"
INDEXED = "Indexed"
COMPLETION_MODES = (NON_INDEXED, INDEXED)

# Condition types and the reasons the Job controller gives them.
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
FAILURE_TARGET = "FailureTarget"
SUCCESS_CRITERIA_MET = "SuccessCriteriaMet"
REASON_BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"
REASON_POD_FAILURE_POLICY = "PodFailurePolicy"
REASON_COMPLETIONS_REACHED = "CompletionsReached"
REASON_FAILED_INDEXES = "FailedIndexes"
REASON_MAX_FAILED_INDEXES_EXCEEDED = "MaxFailedIndexesExceeded"

DEFAULT_BACKOFF_LIMIT = 6
MAX_INT32 = 2**31 - 1


def condition(job: job_pb2.Job, type_: str) -> job_pb2.JobCondition | None:
    for c in job.status.conditions:
        if c.type == type_:
            return c
    return None


def condition_true(job: job_pb2.Job, type_: str) -> bool:
    c = condition(job, type_)
    return c is not None and c.status == "True"


def is_finished(job: job_pb2.Job) -> bool:
    """Kubernetes' IsJobFinished: Complete=True or Failed=True."""
    return condition_true(job, COMPLETE) or condition_true(job, FAILED)


def is_indexed(job: job_pb2.Job) -> bool:
    return job.spec.completionMode == INDEXED


def printed_status(job: job_pb2.Job) -> str:
    """kubectl's STATUS column (printJob): Complete, Failed, Terminating, Suspended,
    FailureTarget, else Running."""
    if condition_true(job, COMPLETE):
        return COMPLETE
    if condition_true(job, FAILED):
        return FAILED
    if job.metadata.HasField("deletionTimestamp"):
        return "Terminating"
    if condition_true(job, SUSPENDED):
        return SUSPENDED
    if condition_true(job, FAILURE_TARGET):
        return FAILURE_TARGET
    return "Running"


def printed_completions(job: job_pb2.Job) -> str:
    """kubectl's COMPLETIONS column: "2/5"; without completions "1/1", or "0/1 of 3"."""
    succeeded = job.status.succeeded
    if job.spec.HasField("completions"):
        return f"{succeeded}/{job.spec.completions}"
    if job.spec.parallelism > 1:
        return f"{succeeded}/1 of {job.spec.parallelism}"
    return f"{succeeded}/1"
