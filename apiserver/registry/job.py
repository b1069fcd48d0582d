"""Jobs (batch/v1) in the apiserver: defaults, the generated selector, validation.

As Kubernetes' pkg/apis/batch/v1 defaults (SetDefaults_Job), pkg/registry/batch/job strategy
(the generated selector and template labels) and pkg/apis/batch/validation (ValidateJob,
ValidateJobUpdate, ValidateJobStatusUpdate): the same checks in the same order, with the same
field paths and wording. UpdateStatus checks only the status and its transitions, as for
pods. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from google.protobuf import json_format
from google.protobuf.message import Message

from apiserver import validation as v
from apiserver.registry.base import META_FIELDS, Strategy
from apiserver.registry.podspec import default_pod_spec
from tinykube import jobs
from tinykube.errors import FieldError
from tinykube.selectors import SelectorError, from_proto, validate_label_key
from tinykube.v1 import job_pb2

MAX_PARALLELISM_INDEXED = 100_000
MAX_FAILED_INDEXES = 100_000
COMPLETIONS_SOFT_LIMIT = 100_000
PARALLELISM_LIMIT_HIGH_COMPLETIONS = 10_000
MAX_FAILED_INDEXES_HIGH_COMPLETIONS = 10_000
MAX_POD_FAILURE_POLICY_RULES = 20
MAX_ON_EXIT_CODES_VALUES = 255
MAX_ON_POD_CONDITIONS_PATTERNS = 20

POD_FAILURE_POLICY_ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")  # sorted, as sets.List
ON_EXIT_CODES_OPERATORS = ("In", "NotIn")
ON_POD_CONDITIONS_STATUSES = ("False", "True", "Unknown")
POD_REPLACEMENT_POLICIES = ("Failed", "TerminatingOrFailed")
JOB_RESTART_POLICIES = ("OnFailure", "Never")

_NON_NEGATIVE = "must be greater than or equal to 0"


# ---- defaults and the generated selector ------------------------------------------------------


def default_job(job: job_pb2.Job) -> None:
    """SetDefaults_Job: parallelism and completions 1 when neither is set, backoffLimit 6
    (MaxInt32 with backoffLimitPerIndex), NonIndexed, not suspended, not a manual selector,
    pod condition patterns True, the pod replacement policy; the Job's labels are the
    template's when it has none."""
    spec = job.spec
    if not spec.HasField("completions") and not spec.HasField("parallelism"):
        spec.completions = 1
        spec.parallelism = 1
    if not spec.HasField("parallelism"):
        spec.parallelism = 1
    if not spec.HasField("backoffLimit"):
        spec.backoffLimit = (
            jobs.MAX_INT32 if spec.HasField("backoffLimitPerIndex") else jobs.DEFAULT_BACKOFF_LIMIT
        )
    if not spec.HasField("completionMode"):
        spec.completionMode = jobs.NON_INDEXED
    if not spec.HasField("suspend"):
        spec.suspend = False
    if not spec.HasField("manualSelector"):
        spec.manualSelector = False
    for rule in spec.podFailurePolicy.rules:
        for pattern in rule.onPodConditions:
            if not pattern.status:
                pattern.status = "True"
    if not spec.HasField("podReplacementPolicy"):
        has_policy = spec.HasField("podFailurePolicy")
        spec.podReplacementPolicy = "Failed" if has_policy else "TerminatingOrFailed"
    template_labels = spec.template.metadata.labels
    if template_labels and not job.metadata.labels:
        job.metadata.labels.update(template_labels)


def generate_selector(job: job_pb2.Job) -> None:
    """The strategy's generateSelector: the job-name and controller-uid labels (prefixed and
    legacy) on the template unless already there, and a selector on the prefixed uid label.
    A user's conflicting value is kept, for validation to refuse."""
    labels = job.spec.template.metadata.labels
    for key in (jobs.LEGACY_JOB_NAME_LABEL, jobs.JOB_NAME_LABEL):
        labels.setdefault(key, job.metadata.name)
    for key in (jobs.LEGACY_CONTROLLER_UID_LABEL, jobs.CONTROLLER_UID_LABEL):
        labels.setdefault(key, job.metadata.uid)
    job.spec.selector.matchLabels.setdefault(jobs.CONTROLLER_UID_LABEL, job.metadata.uid)


def prepare_for_create(job: job_pb2.Job) -> None:
    """After the generic create preparation set the uid: status cleared, the selector
    generated unless manualSelector, then the version's defaults."""
    job.ClearField("status")
    if not job.spec.manualSelector:
        generate_selector(job)
    default_job(job)


def prepare_for_update(new: job_pb2.Job, old: job_pb2.Job) -> None:
    """An update is decoded with the same defaults a create gets."""
    default_job(new)


# ---- validation -------------------------------------------------------------------------------


def _go_ints(values: Iterable[int]) -> str:
    """A []int32 as Go's %#v prints it, as Kubernetes' messages show such a value."""
    return "[]int32{" + ", ".join(str(x) for x in values) + "}"


def _go_strings(values: Sequence[str]) -> str:
    """A []string as Go's %q prints it: ["a" "b"]."""
    return "[" + " ".join(v.go_quote(s) for s in values) + "]"


def _has(msg: Message, name: str) -> bool:
    return msg.HasField(name)


def _non_negative(path: str, value: int) -> list[FieldError]:
    return [v.invalid(path, value, _NON_NEGATIVE)] if value < 0 else []


def _too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError(path, f"Too many: {count}: must have at most {limit} items")


def _has_label(path: str, labels: dict[str, str], key: str, expected: str) -> list[FieldError]:
    """ValidateHasLabel."""
    where = f"{path}.labels[{key}]"
    if key not in labels:
        return [v.required(where, expected)]
    if labels[key] != expected:
        return [v.invalid(where, labels[key], f"must be '{expected}'")]
    return []


def _generated_selector(job: job_pb2.Job) -> list[FieldError]:
    """validateGeneratedSelector: with a generated selector, the template carries this Job's
    labels and the selector selects them."""
    spec = job.spec
    if spec.manualSelector or not spec.HasField("selector"):
        return []
    errs: list[FieldError] = []
    meta = job.metadata
    if not meta.uid:
        errs.append(v.required("metadata.uid"))
    labels = dict(spec.template.metadata.labels)
    path = "spec.template.metadata"
    errs.extend(_has_label(path, labels, jobs.LEGACY_CONTROLLER_UID_LABEL, meta.uid))
    errs.extend(_has_label(path, labels, jobs.LEGACY_JOB_NAME_LABEL, meta.name))
    errs.extend(_has_label(path, labels, jobs.CONTROLLER_UID_LABEL, meta.uid))
    errs.extend(_has_label(path, labels, jobs.JOB_NAME_LABEL, meta.name))
    expected = {
        jobs.CONTROLLER_UID_LABEL: meta.uid,
        jobs.JOB_NAME_LABEL: meta.name,
        jobs.LEGACY_CONTROLLER_UID_LABEL: meta.uid,
        jobs.LEGACY_JOB_NAME_LABEL: meta.name,
    }
    try:
        selector = from_proto(spec.selector)
    except SelectorError:
        return errs
    if not selector.matches(expected):
        errs.append(
            v.invalid("spec.selector", _selector_text(job), "`selector` not auto-generated")
        )
    return errs


def _selector_text(job: job_pb2.Job) -> str:
    return json_format.MessageToJson(job.spec.selector, indent=None, sort_keys=True)


def _on_exit_codes(
    path: str, req: job_pb2.PodFailurePolicyOnExitCodesRequirement, names: set[str]
) -> list[FieldError]:
    errs: list[FieldError] = []
    if not req.operator:
        errs.append(
            v.required(f"{path}.operator", f"valid values: {_go_strings(ON_EXIT_CODES_OPERATORS)}")
        )
    elif req.operator not in ON_EXIT_CODES_OPERATORS:
        errs.append(v.unsupported(f"{path}.operator", req.operator, ON_EXIT_CODES_OPERATORS))
    if req.HasField("containerName") and req.containerName not in names:
        errs.append(
            v.invalid(
                f"{path}.containerName",
                req.containerName,
                "must be one of the container or initContainer names in the pod template",
            )
        )
    values_path = f"{path}.values"
    values = list(req.values)
    if not values:
        errs.append(
            FieldError(
                values_path, f"Invalid value: {_go_ints(values)}: at least one value is required"
            )
        )
    elif len(values) > MAX_ON_EXIT_CODES_VALUES:
        errs.append(_too_many(values_path, len(values), MAX_ON_EXIT_CODES_VALUES))
    seen: set[int] = set()
    ordered = True
    for j, value in enumerate(values):
        vp = f"{values_path}[{j}]"
        if req.operator == "In" and value == 0:
            errs.append(v.invalid(vp, value, "must not be 0 for the In operator"))
        if value in seen:
            errs.append(FieldError(vp, f"Duplicate value: {value}"))
        seen.add(value)
        if j > 0 and values[j - 1] > value:
            ordered = False
    if not ordered:
        errs.append(FieldError(values_path, f"Invalid value: {_go_ints(values)}: must be ordered"))
    return errs


def _pod_failure_policy(spec: job_pb2.JobSpec) -> list[FieldError]:
    errs: list[FieldError] = []
    rules_path = "spec.podFailurePolicy.rules"
    rules = spec.podFailurePolicy.rules
    if len(rules) > MAX_POD_FAILURE_POLICY_RULES:
        errs.append(_too_many(rules_path, len(rules), MAX_POD_FAILURE_POLICY_RULES))
    tmpl = spec.template.spec
    names = {c.name for c in tmpl.containers} | {c.name for c in tmpl.initContainers}
    for i, rule in enumerate(rules):
        rp = f"{rules_path}[{i}]"
        if not rule.action:
            errs.append(
                v.required(
                    f"{rp}.action", f"valid values: {_go_strings(POD_FAILURE_POLICY_ACTIONS)}"
                )
            )
        elif rule.action == "FailIndex":
            if not spec.HasField("backoffLimitPerIndex"):
                errs.append(
                    v.invalid(
                        f"{rp}.action", rule.action, "requires the backoffLimitPerIndex to be set"
                    )
                )
        elif rule.action not in POD_FAILURE_POLICY_ACTIONS:
            errs.append(v.unsupported(f"{rp}.action", rule.action, POD_FAILURE_POLICY_ACTIONS))
        has_codes = rule.HasField("onExitCodes")
        if has_codes:
            errs.extend(_on_exit_codes(f"{rp}.onExitCodes", rule.onExitCodes, names))
        if rule.onPodConditions:
            cp = f"{rp}.onPodConditions"
            patterns = rule.onPodConditions
            if len(patterns) > MAX_ON_POD_CONDITIONS_PATTERNS:
                errs.append(_too_many(cp, len(patterns), MAX_ON_POD_CONDITIONS_PATTERNS))
            for j, pattern in enumerate(patterns):
                pp = f"{cp}[{j}]"
                for problem in validate_label_key(pattern.type):
                    errs.append(v.invalid(f"{pp}.type", pattern.type, problem))
                if not pattern.status:
                    errs.append(
                        v.required(
                            f"{pp}.status",
                            f"valid values: {_go_strings(ON_POD_CONDITIONS_STATUSES)}",
                        )
                    )
                elif pattern.status not in ON_POD_CONDITIONS_STATUSES:
                    errs.append(
                        v.unsupported(f"{pp}.status", pattern.status, ON_POD_CONDITIONS_STATUSES)
                    )
        if has_codes and rule.onPodConditions:
            errs.append(
                FieldError(
                    rp,
                    "Invalid value: specifying both OnExitCodes and OnPodConditions is not "
                    "supported",
                )
            )
        if not has_codes and not rule.onPodConditions:
            errs.append(
                FieldError(
                    rp,
                    "Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
                )
            )
    return errs


def _job_spec(spec: job_pb2.JobSpec) -> list[FieldError]:
    """validateJobSpec."""
    errs: list[FieldError] = []
    for name in (
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
    ):
        if spec.HasField(name):
            errs.extend(_non_negative(f"spec.{name}", getattr(spec, name)))
    if spec.HasField("maxFailedIndexes"):
        errs.extend(_non_negative("spec.maxFailedIndexes", spec.maxFailedIndexes))
        if not spec.HasField("backoffLimitPerIndex"):
            errs.append(
                v.required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified")
            )
    indexed = spec.completionMode == jobs.INDEXED
    if spec.HasField("completionMode"):
        if spec.completionMode not in jobs.COMPLETION_MODES:
            errs.append(
                v.unsupported("spec.completionMode", spec.completionMode, jobs.COMPLETION_MODES)
            )
        if indexed:
            errs.extend(_indexed_limits(spec))
    if not indexed:
        for name in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if _has(spec, name):
                errs.append(
                    v.invalid(
                        f"spec.{name}", getattr(spec, name), "requires indexed completion mode"
                    )
                )
    if spec.HasField("podFailurePolicy"):
        errs.extend(_pod_failure_policy(spec))
    if spec.HasField("podReplacementPolicy"):
        policy = spec.podReplacementPolicy
        if spec.HasField("podFailurePolicy"):
            if policy != "Failed":
                errs.append(v.unsupported("spec.podReplacementPolicy", policy, ("Failed",)))
        elif policy not in POD_REPLACEMENT_POLICIES:
            errs.append(
                v.unsupported("spec.podReplacementPolicy", policy, POD_REPLACEMENT_POLICIES)
            )
    tmpl = spec.template
    errs.extend(v.validate_labels("spec.template.metadata.labels", tmpl.metadata.labels))
    errs.extend(v.validate_pod_spec("spec.template.spec", tmpl.spec))
    restart = tmpl.spec.restartPolicy
    rp = "spec.template.spec.restartPolicy"
    if restart in ("Always", ""):
        errs.append(
            v.required(rp, f"valid values: {v.go_quote('OnFailure')}, {v.go_quote('Never')}")
        )
    elif restart not in JOB_RESTART_POLICIES:
        errs.append(v.unsupported(rp, restart, JOB_RESTART_POLICIES))
    elif spec.HasField("podFailurePolicy") and restart != "Never":
        errs.append(
            v.invalid(rp, restart, 'only "Never" is supported when podFailurePolicy is specified')
        )
    return errs


def _indexed_limits(spec: job_pb2.JobSpec) -> list[FieldError]:
    errs: list[FieldError] = []
    if not spec.HasField("completions"):
        errs.append(v.required("spec.completions", "when completion mode is Indexed"))
    if spec.HasField("parallelism") and spec.parallelism > MAX_PARALLELISM_INDEXED:
        errs.append(
            v.invalid(
                "spec.parallelism",
                spec.parallelism,
                f"must be less than or equal to {MAX_PARALLELISM_INDEXED} when completion mode "
                "is Indexed",
            )
        )
    has_max = spec.HasField("maxFailedIndexes")
    if spec.HasField("completions") and has_max and spec.maxFailedIndexes > spec.completions:
        errs.append(
            v.invalid(
                "spec.maxFailedIndexes",
                spec.maxFailedIndexes,
                "must be less than or equal to completions",
            )
        )
    if has_max and spec.maxFailedIndexes > MAX_FAILED_INDEXES:
        errs.append(
            v.invalid(
                "spec.maxFailedIndexes",
                spec.maxFailedIndexes,
                f"must be less than or equal to {MAX_FAILED_INDEXES}",
            )
        )
    if (
        spec.HasField("completions")
        and spec.completions > COMPLETIONS_SOFT_LIMIT
        and spec.HasField("backoffLimitPerIndex")
    ):
        tail = (
            f"when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit "
            "per index"
        )
        if not has_max:
            errs.append(
                v.required(
                    "spec.maxFailedIndexes",
                    f"must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}",
                )
            )
        if spec.HasField("parallelism") and spec.parallelism > PARALLELISM_LIMIT_HIGH_COMPLETIONS:
            errs.append(
                v.invalid(
                    "spec.parallelism",
                    spec.parallelism,
                    f"must be less than or equal to {PARALLELISM_LIMIT_HIGH_COMPLETIONS} {tail}",
                )
            )
        if has_max and spec.maxFailedIndexes > MAX_FAILED_INDEXES_HIGH_COMPLETIONS:
            errs.append(
                v.invalid(
                    "spec.maxFailedIndexes",
                    spec.maxFailedIndexes,
                    f"must be less than or equal to {MAX_FAILED_INDEXES_HIGH_COMPLETIONS} {tail}",
                )
            )
    return errs


def validate_job(job: job_pb2.Job) -> list[FieldError]:
    """ValidateJob, after the generic metadata checks (apiserver/validation.py)."""
    errs = _generated_selector(job)
    spec = job.spec
    errs.extend(_job_spec(spec))
    sel = spec.selector
    if not spec.HasField("selector"):
        errs.append(v.required("spec.selector"))
    else:
        errs.extend(v.validate_label_selector("spec.selector", sel))
    try:
        selector = from_proto(sel) if spec.HasField("selector") else None
    except SelectorError:
        selector = None
    labels = spec.template.metadata.labels
    if selector is not None and not selector.matches(labels):
        errs.append(
            v.invalid(
                "spec.template.metadata.labels",
                ",".join(f"{k}={val}" for k, val in sorted(labels.items())),
                "`selector` does not match template `labels`",
            )
        )
    if (
        spec.completionMode == jobs.INDEXED
        and spec.HasField("completions")
        and spec.completions > 0
    ):
        hostname = f"{job.metadata.name}-{spec.completions - 1}"
        if v.dns1123_label("", hostname):
            errs.append(
                v.invalid(
                    "metadata.name",
                    job.metadata.name,
                    f"will not able to create pod with invalid DNS label: {hostname}",
                )
            )
    errs.extend(_status_counts(job.status))
    return errs


_IMMUTABLE = "field is immutable"


def validate_job_update(new: job_pb2.Job, old: job_pb2.Job) -> list[FieldError]:
    """ValidateJobSpecUpdate's immutability rules (the new spec is validated whole beside)."""
    errs: list[FieldError] = []
    ns, os_ = new.spec, old.spec
    if (
        ns.HasField("completions") != os_.HasField("completions")
        or ns.completions != os_.completions
    ):
        # Elastic Indexed Jobs: completions may change together with parallelism.
        elastic = ns.completionMode == jobs.INDEXED and ns.HasField("completions")
        if not elastic:
            errs.append(v.invalid("spec.completions", ns.completions, _IMMUTABLE))
        elif ns.completions != ns.parallelism:
            errs.append(
                v.invalid(
                    "spec.completions",
                    ns.completions,
                    "can only be modified in tandem with spec.parallelism",
                )
            )
    if ns.selector != os_.selector:
        errs.append(v.invalid("spec.selector", _selector_text(new), _IMMUTABLE))
    if not _template_update_allowed(new, old):
        errs.append(FieldError("spec.template", f"Invalid value: {_IMMUTABLE}"))
    for name in ("completionMode", "backoffLimitPerIndex"):
        if getattr(ns, name) != getattr(os_, name) or ns.HasField(name) != os_.HasField(name):
            errs.append(v.invalid(f"spec.{name}", getattr(ns, name), _IMMUTABLE))
    if ns.podFailurePolicy != os_.podFailurePolicy:
        errs.append(FieldError("spec.podFailurePolicy", f"Invalid value: {_IMMUTABLE}"))
    return errs


def _template_update_allowed(new: job_pb2.Job, old: job_pb2.Job) -> bool:
    """The template is immutable, but for a suspended Job that never started: its scheduling
    directives (node affinity, node selector, tolerations, scheduling gates), labels and
    annotations may change then (AllowMutableSchedulingDirectives)."""
    nt, ot = new.spec.template, old.spec.template
    if nt == ot:
        return True
    if not (old.spec.suspend and not old.status.HasField("startTime")):
        return False
    a, b = type(nt)(), type(ot)()
    a.CopyFrom(nt)
    b.CopyFrom(ot)
    for t in (a, b):
        t.metadata.ClearField("labels")
        t.metadata.ClearField("annotations")
        t.spec.ClearField("nodeSelector")
        t.spec.ClearField("tolerations")
        t.spec.ClearField("schedulingGates")
        t.spec.affinity.ClearField("nodeAffinity")
        if t.spec.affinity == type(t.spec.affinity)():
            t.spec.ClearField("affinity")
    return a == b


def _status_counts(status: job_pb2.JobStatus) -> list[FieldError]:
    errs: list[FieldError] = []
    for name in ("active", "succeeded", "failed"):
        errs.extend(_non_negative(f"status.{name}", getattr(status, name)))
    for name in ("ready", "terminating"):
        if _has(status, name):
            errs.extend(_non_negative(f"status.{name}", getattr(status, name)))
    seen: set[str] = set()
    uncounted = status.uncountedTerminatedPods
    for kind, uids in (("succeeded", uncounted.succeeded), ("failed", uncounted.failed)):
        for i, uid in enumerate(uids):
            p = f"status.uncountedTerminatedPods.{kind}[{i}]"
            if not uid:
                errs.append(v.invalid(p, uid, "must not be empty"))
            elif uid in seen:
                errs.append(v.duplicate(p, uid))
            seen.add(uid)
    return errs


def validate_job_status_update(new: job_pb2.Job, old: job_pb2.Job) -> list[FieldError]:
    """ValidateJobStatusUpdate: the counts, and the transitions a Job's status never makes
    (a terminal condition taken back, Complete together with Failed, more ready than active)."""
    status = new.status
    errs = _status_counts(status)
    complete = jobs.condition_true(new, jobs.COMPLETE)
    failed = jobs.condition_true(new, jobs.FAILED)
    if complete and failed:
        errs.append(
            FieldError(
                "status.conditions",
                "Invalid value: cannot set Complete=True and Failed=true conditions",
            )
        )
    for ctype in (jobs.FAILED, jobs.COMPLETE, jobs.FAILURE_TARGET):
        if jobs.condition_true(old, ctype) and not jobs.condition_true(new, ctype):
            errs.append(
                FieldError(
                    "status.conditions",
                    f"Invalid value: cannot disable the terminal {ctype}=True condition",
                )
            )
    if status.HasField("ready") and status.ready > status.active:
        errs.append(
            v.invalid("status.ready", status.ready, "cannot set more ready pods than active")
        )
    if (complete or failed) and status.active > 0:
        errs.append(
            v.invalid("status.active", status.active, "active>0 is invalid for finished job")
        )
    uncounted = status.uncountedTerminatedPods
    if (complete or failed) and (uncounted.succeeded or uncounted.failed):
        errs.append(
            FieldError(
                "status.uncountedTerminatedPods",
                "Invalid value: uncountedTerminatedPods needs to be empty for finished job",
            )
        )
    if status.HasField("completionTime") and not complete:
        errs.append(
            FieldError(
                "status.completionTime",
                "Invalid value: cannot set completionTime when there is no Complete=True condition",
            )
        )
    return errs


class JobStrategy(Strategy[job_pb2.Job]):
    selectable_fields = (*META_FIELDS, "status.successful")

    def decode_defaults(self, obj: job_pb2.Job) -> None:
        default_job(obj)
        default_pod_spec(obj.spec.template.spec, self.default_grace_seconds)

    def default(self, obj: job_pb2.Job, now: datetime) -> None:
        prepare_for_create(obj)
        default_pod_spec(obj.spec.template.spec, self.default_grace_seconds)

    def on_update(self, new: job_pb2.Job, old: job_pb2.Job) -> None:
        prepare_for_update(new, old)
        default_pod_spec(new.spec.template.spec, self.default_grace_seconds)

    def check(self, obj: job_pb2.Job) -> list[FieldError]:
        return validate_job(obj)

    def check_update(self, new: job_pb2.Job, old: job_pb2.Job) -> list[FieldError]:
        return validate_job_update(new, old)

    def check_status(self, new: job_pb2.Job, old: job_pb2.Job) -> list[FieldError]:
        # Like pods': the spec is as stored; only the status and its transitions.
        return validate_job_status_update(new, old) + v.printable("status", new.status)

    def fields(self, obj: job_pb2.Job) -> dict[str, str]:
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": obj.metadata.namespace,
            # kube's name for the count of succeeded pods.
            "status.successful": str(obj.status.succeeded),
        }
