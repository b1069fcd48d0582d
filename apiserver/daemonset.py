"""DaemonSets and ControllerRevisions (apps/v1) in the registry: defaults and validation.

Kubernetes' SetDefaults_DaemonSet (updateStrategy RollingUpdate with maxUnavailable 1 and maxSurge
0, revisionHistoryLimit 10), its daemonSetStrategy (the template generation kept in the
`deprecated.daemonset.template.generation` annotation, as apps/v1 carries it: 1 at creation, one
more on every template change, never written by clients) and ValidateDaemonSet /
ValidateDaemonSetUpdate / ValidateDaemonSetStatusUpdate / ValidateControllerRevision, message for
message. The generic metadata checks and the pod template's spec checks are
`apiserver.validation`'s; this module adds what is particular to the two kinds.

Pure functions over protobuf messages, called by `apiserver.registry.Strategy`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.struct_pb2 import Value

from apiserver import validation
from apiserver.validation import invalid, required, unsupported
from tinykube.errors import FieldError
from tinykube.kinds import CONTROLLER_REVISION, DAEMON_SET
from tinykube.meta import annotation_int, int_or_string, set_int_or_string
from tinykube.selectors import SelectorError, from_proto
from tinykube.v1 import controllerrevision_pb2, daemonset_pb2, meta_pb2

KINDS = frozenset({DAEMON_SET.kind, CONTROLLER_REVISION.kind})

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
    items = ", ".join(f"{validation._q(k)}:{validation._q(v)}" for k, v in sorted(labels.items()))
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
    kind = validation._q(strategy.type)
    return f"apps.DaemonSetUpdateStrategy{{Type:{kind}, RollingUpdate:{rolling}}}"


def validate_update_strategy(
    path: str, strategy: daemonset_pb2.DaemonSetUpdateStrategy
) -> list[FieldError]:
    """ValidateDaemonSetUpdateStrategy and ValidateRollingUpdateDaemonSet."""
    if strategy.type == ON_DELETE:
        return []
    if strategy.type != ROLLING_UPDATE:
        allowed = ", ".join(validation._q(s) for s in UPDATE_STRATEGIES)
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
        errs.extend(validation._int_or_percent(f"{rp}.{name}", value))
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
        errs.extend(validation._kube_label_selector("spec.selector", spec.selector))
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
    errs.extend(validation._labels("spec.template.metadata.labels", labels))
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


def validate_controller_revision(cr: controllerrevision_pb2.ControllerRevision) -> list[FieldError]:
    """ValidateControllerRevision (the metadata is checked by the caller)."""
    errs: list[FieldError] = []
    if not cr.HasField("data"):
        errs.append(required("data", "data is mandatory"))
    if cr.revision < 0:
        errs.append(invalid("revision", cr.revision, _NONNEGATIVE))
    return errs


def validate(kind: str, obj: object) -> list[FieldError]:
    """What is wrong with a DaemonSet or ControllerRevision as it would be stored, beyond the
    generic metadata checks."""
    if kind == DAEMON_SET.kind:
        ds: daemonset_pb2.DaemonSet = obj  # type: ignore[assignment]
        return validate_daemon_set_spec(ds.spec) + validate_daemon_set_status(ds.status)
    if kind == CONTROLLER_REVISION.kind:
        return validate_controller_revision(obj)  # type: ignore[arg-type]
    return []


def _whole(value: Any) -> Any:
    """JSON numbers as they were written: a Struct holds 80 as 80.0."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def validate_update(kind: str, new: object, old: object) -> list[FieldError]:
    """What may not change: a DaemonSet's selector (apps/v1), a ControllerRevision's data."""
    if kind == DAEMON_SET.kind:
        nd: daemonset_pb2.DaemonSet = new  # type: ignore[assignment]
        od: daemonset_pb2.DaemonSet = old  # type: ignore[assignment]
        if nd.spec.selector != od.spec.selector or (
            nd.spec.HasField("selector") != od.spec.HasField("selector")
        ):
            shown = selector_text(nd.spec.selector) if nd.spec.HasField("selector") else "null"
            return [FieldError("spec.selector", f"Invalid value: {shown}: field is immutable")]
    if kind == CONTROLLER_REVISION.kind:
        nc: controllerrevision_pb2.ControllerRevision = new  # type: ignore[assignment]
        oc: controllerrevision_pb2.ControllerRevision = old  # type: ignore[assignment]
        if nc.data != oc.data:
            shown = json.dumps(_whole(json_format.MessageToDict(nc.data)), sort_keys=True)
            return [FieldError("data", f"Invalid value: {shown}: field is immutable")]
    return []


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


__all__ = [
    "KINDS",
    "ON_DELETE",
    "ROLLING_UPDATE",
    "TEMPLATE_GENERATION_ANNOTATION",
    "default_daemon_set",
    "prepare_for_create",
    "prepare_for_update",
    "template_generation",
    "validate",
    "validate_status_update",
    "validate_update",
]
