"""DaemonSets (apps/v1) in the registry: defaults, validation and the template generation.

Kubernetes' SetDefaults_DaemonSet (updateStrategy RollingUpdate with maxUnavailable 1 and maxSurge
0, revisionHistoryLimit 10), its daemonSetStrategy (the template generation kept in the
`deprecated.daemonset.template.generation` annotation, as apps/v1 carries it: 1 at creation, one
more on every template change, never written by clients) and ValidateDaemonSet /
ValidateDaemonSetUpdate / ValidateDaemonSetStatusUpdate, message for message. The generic
metadata checks and the pod template's spec checks are `apiserver.validation`'s; this module
adds what is particular to the kind (ControllerRevisions are apiserver/registry/
controllerrevision.py's).

Pure functions over protobuf messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from google.protobuf.struct_pb2 import Value

from apiserver import validation
from apiserver.registry.base import Strategy
from apiserver.registry.podspec import default_pod_spec
from apiserver.validation import invalid, required, unsupported
from tinykube.errors import FieldError
from tinykube.meta import annotation_int, int_or_string, set_int_or_string
from tinykube.selectors import SelectorError, from_proto
from tinykube.v1 import daemonset_pb2, meta_pb2

ROLLING_UPDATE = "RollingUpdate"
ON_DELETE = "OnDelete"
UPDATE_STRATEGIES = (ROLLING_UPDATE, ON_DELETE)
DEFAULT_REVISION_HISTORY_LIMIT = 10
# apps/v1's home for the internal spec.templateGeneration (kube's DeprecatedTemplateGeneration).
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"

_NONNEGATIVE = "must be greater than or equal to 0"


# ---- defaults ------------------------------------------------------------------------------


def _unset(value: Value) -> bool:
    return value.WhichOneof("kind") in (None, "null_value")


def default_daemon_set(ds: daemonset_pb2.DaemonSet) -> None:
    """apps/v1's SetDefaults_DaemonSet (the template's pod spec is defaulted by the caller)."""
    strategy = ds.spec.updateStrategy
    if not strategy.type:
        strategy.type = ROLLING_UPDATE
    if strategy.type == ROLLING_UPDATE:
        rolling = strategy.rollingUpdate  # touching it sets it, as the Go default allocates one
        if _unset(rolling.maxUnavailable):
            set_int_or_string(rolling.maxUnavailable, 1)
        if _unset(rolling.maxSurge):
            set_int_or_string(rolling.maxSurge, 0)
    if not ds.spec.HasField("revisionHistoryLimit"):
        ds.spec.revisionHistoryLimit = DEFAULT_REVISION_HISTORY_LIMIT


def template_generation(ds: daemonset_pb2.DaemonSet) -> int | None:
    """The template generation the annotation holds, None when absent or not a number."""
    return annotation_int(ds.metadata.annotations, TEMPLATE_GENERATION_ANNOTATION)


def prepare_for_create(ds: daemonset_pb2.DaemonSet) -> None:
    """daemonSetStrategy.PrepareForCreate: no status; template generation at least 1."""
    ds.ClearField("status")
    default_daemon_set(ds)
    generation = template_generation(ds)
    if generation is None or generation < 1:
        ds.metadata.annotations[TEMPLATE_GENERATION_ANNOTATION] = "1"


def prepare_for_update(new: daemonset_pb2.DaemonSet, old: daemonset_pb2.DaemonSet) -> None:
    """daemonSetStrategy.PrepareForUpdate: the template generation is the server's, one more
    than the old one when the template changed (metadata.generation is bumped by the caller on
    any spec change)."""
    default_daemon_set(new)
    annotations = new.metadata.annotations
    old_generation = template_generation(old)
    if old_generation is None:
        annotations.pop(TEMPLATE_GENERATION_ANNOTATION, None)
    else:
        changed = new.spec.template != old.spec.template
        annotations[TEMPLATE_GENERATION_ANNOTATION] = str(old_generation + int(changed))


# ---- validation ----------------------------------------------------------------------------


def go_map(labels: Mapping[str, str]) -> str:
    """A map[string]string as Go's %#v prints it (field.Invalid's fallback for a map)."""
    items = ", ".join(
        f"{validation.go_quote(k)}:{validation.go_quote(v)}" for k, v in sorted(labels.items())
    )
    return f"map[string]string{{{items}}}"


def selector_text(sel: meta_pb2.LabelSelector) -> str:
    """A *metav1.LabelSelector as its generated String() prints it (a field.Invalid value)."""
    labels = "".join(f"{k}: {v}," for k, v in sorted(sel.matchLabels.items()))
    exprs = "".join(
        f"LabelSelectorRequirement{{Key:{e.key},Operator:{e.operator},"
        f"Values:[{' '.join(e.values)}],}},"
        for e in sel.matchExpressions
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )


def _strategy_text(strategy: daemonset_pb2.DaemonSetUpdateStrategy) -> str:
    rolling = (
        "(*apps.RollingUpdateDaemonSet)(...)"
        if strategy.HasField("rollingUpdate")
        else "(*apps.RollingUpdateDaemonSet)(nil)"
    )
    kind = validation.go_quote(strategy.type)
    return f"apps.DaemonSetUpdateStrategy{{Type:{kind}, RollingUpdate:{rolling}}}"


def validate_update_strategy(
    path: str, strategy: daemonset_pb2.DaemonSetUpdateStrategy
) -> list[FieldError]:
    """ValidateDaemonSetUpdateStrategy and ValidateRollingUpdateDaemonSet."""
    if strategy.type == ON_DELETE:
        return []
    if strategy.type != ROLLING_UPDATE:
        allowed = ", ".join(validation.go_quote(s) for s in UPDATE_STRATEGIES)
        return [
            FieldError(
                path,
                f"Unsupported value: {_strategy_text(strategy)}: supported values: {allowed}",
            )
        ]
    if not strategy.HasField("rollingUpdate"):
        return [required(f"{path}.rollingUpdate")]
    rp = f"{path}.rollingUpdate"
    rolling = strategy.rollingUpdate
    errs: list[FieldError] = []
    for name, value in (("maxUnavailable", rolling.maxUnavailable), ("maxSurge", rolling.maxSurge)):
        errs.extend(validation.int_or_percent(f"{rp}.{name}", value))
    has_unavailable = validation.int_or_percent_value(rolling.maxUnavailable) != 0
    has_surge = validation.int_or_percent_value(rolling.maxSurge) != 0
    if has_unavailable and has_surge:
        surge = int_or_string(rolling.maxSurge)
        errs.append(
            invalid(f"{rp}.maxSurge", surge, "may not be set when maxUnavailable is non-zero")
        )
    elif not has_unavailable and not has_surge:
        errs.append(required(f"{rp}.maxUnavailable", "cannot be 0 when maxSurge is 0"))
    return errs


def validate_daemon_set_spec(spec: daemonset_pb2.DaemonSetSpec) -> list[FieldError]:
    """ValidateDaemonSetSpec."""
    errs: list[FieldError] = []
    labels = spec.template.metadata.labels
    mismatch = True  # a nil selector selects nothing
    if spec.HasField("selector"):
        errs.extend(validation.validate_label_selector("spec.selector", spec.selector))
        try:
            mismatch = not from_proto(spec.selector).matches(labels)
        except SelectorError:
            mismatch = False  # reported above; kube compares only a selector that parses
    if mismatch:
        errs.append(
            FieldError(
                "spec.template.metadata.labels",
                f"Invalid value: {go_map(labels)}: `selector` does not match template `labels`",
            )
        )
    sel = spec.selector
    if spec.HasField("selector") and not sel.matchLabels and not sel.matchExpressions:
        errs.append(
            FieldError(
                "spec.selector",
                f"Invalid value: {selector_text(sel)}: empty selector is invalid for daemonset",
            )
        )
    errs.extend(validation.validate_labels("spec.template.metadata.labels", labels))
    errs.extend(validation.validate_pod_spec("spec.template.spec", spec.template.spec))
    if spec.template.spec.restartPolicy != "Always":
        errs.append(
            unsupported(
                "spec.template.spec.restartPolicy", spec.template.spec.restartPolicy, ("Always",)
            )
        )
    errs.extend(validation.no_template_deadline(spec.template.spec, "DaemonSet"))
    if spec.minReadySeconds < 0:
        errs.append(invalid("spec.minReadySeconds", spec.minReadySeconds, _NONNEGATIVE))
    errs.extend(validate_update_strategy("spec.updateStrategy", spec.updateStrategy))
    if spec.HasField("revisionHistoryLimit") and spec.revisionHistoryLimit < 0:
        errs.append(invalid("spec.revisionHistoryLimit", spec.revisionHistoryLimit, _NONNEGATIVE))
    return errs


_STATUS_COUNTS = (
    "currentNumberScheduled",
    "numberMisscheduled",
    "desiredNumberScheduled",
    "numberReady",
    "observedGeneration",
    "updatedNumberScheduled",
    "numberAvailable",
    "numberUnavailable",
)


def validate_daemon_set_status(status: daemonset_pb2.DaemonSetStatus) -> list[FieldError]:
    """validateDaemonSetStatus: no count is negative."""
    errs = [
        invalid(f"status.{name}", getattr(status, name), _NONNEGATIVE)
        for name in _STATUS_COUNTS
        if getattr(status, name) < 0
    ]
    if status.HasField("collisionCount") and status.collisionCount < 0:
        errs.append(invalid("status.collisionCount", status.collisionCount, _NONNEGATIVE))
    return errs


def validate_status_update(
    new: daemonset_pb2.DaemonSet, old: daemonset_pb2.DaemonSet
) -> list[FieldError]:
    """ValidateDaemonSetStatusUpdate: the counts, and a collisionCount never goes down."""
    errs = validate_daemon_set_status(new.status)
    if old.status.HasField("collisionCount") and (
        new.status.collisionCount < old.status.collisionCount
    ):
        errs.append(
            invalid("status.collisionCount", new.status.collisionCount, "cannot be decremented")
        )
    return errs


DS = daemonset_pb2.DaemonSet


class DaemonSetStrategy(Strategy[DS]):
    def decode_defaults(self, obj: DS) -> None:
        default_daemon_set(obj)
        default_pod_spec(obj.spec.template.spec, self.default_grace_seconds)

    def default(self, obj: DS, now: datetime) -> None:
        prepare_for_create(obj)
        default_pod_spec(obj.spec.template.spec, self.default_grace_seconds)

    def on_update(self, new: DS, old: DS) -> None:
        default_pod_spec(new.spec.template.spec, self.default_grace_seconds)
        prepare_for_update(new, old)

    def check(self, obj: DS) -> list[FieldError]:
        return validate_daemon_set_spec(obj.spec) + validate_daemon_set_status(obj.status)

    def check_update(self, new: DS, old: DS) -> list[FieldError]:
        """apps/v1's selector never changes."""
        ns, os_ = new.spec, old.spec
        if ns.selector != os_.selector or ns.HasField("selector") != os_.HasField("selector"):
            shown = selector_text(ns.selector) if ns.HasField("selector") else "null"
            return [FieldError("spec.selector", f"Invalid value: {shown}: field is immutable")]
        return []

    def check_status(self, new: DS, old: DS) -> list[FieldError]:
        return self.validate_generic(new) + validate_status_update(new, old)
