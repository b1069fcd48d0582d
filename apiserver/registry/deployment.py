"""Deployments (apps/v1): defaults, validation, the immutable selector, generations.

As kube's pkg/registry/apps/deployment strategy and apps/v1 defaults: the status is the
controller's, the spec gets apps/v1's defaults and the template the pod defaults, a change of
annotations is a new generation (they are copied to the ReplicaSets), and UpdateStatus also
takes the annotations (the controller records the revision with the status). Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from google.protobuf.struct_pb2 import Value

from apiserver.registry.base import Strategy
from apiserver.registry.podspec import default_pod_spec
from apiserver.validation import (
    CONDITION_STATUSES,
    PERCENT_MSG,
    PERCENT_RE,
    GoValue,
    forbidden,
    go_label_selector,
    go_string_map,
    int_or_percent_value,
    invalid,
    is_set,
    no_template_deadline,
    required,
    unsupported,
    validate_labels,
    validate_pod_spec,
    value_text,
)
from tinykube.errors import FieldError
from tinykube.meta import int_or_string, int_or_string_problem, set_int_or_string
from tinykube.selectors import (
    SelectorError,
    from_proto,
    label_selector_problems,
)
from tinykube.v1 import deployment_pb2

DEPLOYMENT_STRATEGIES = ("Recreate", "RollingUpdate")


def _int_or_string_shown(value: Value) -> GoValue:
    """An IntOrString as its String method prints it (Kubernetes' messages use it)."""
    held = int_or_string(value)
    return GoValue(str(held) if held is not None else str(value_text(value)))


def _positive_int_or_percent(path: str, value: Value) -> list[FieldError]:
    """Kubernetes' apps ValidatePositiveIntOrPercent (no upper bound)."""
    if int_or_string_problem(value) or not is_set(value):
        return [invalid(path, value_text(value), "must be an integer or percentage (e.g '5%')")]
    held = int_or_string(value)
    if isinstance(held, int):
        if held < 0:
            return [invalid(path, held, "must be greater than or equal to 0")]
        return []
    if held is not None and not PERCENT_RE.match(held):
        return [invalid(path, GoValue(held), PERCENT_MSG)]
    return []


def validate_deployment_strategy(strategy: deployment_pb2.DeploymentStrategy) -> list[FieldError]:
    """Kubernetes' ValidateDeploymentStrategy and ValidateRollingUpdateDeployment."""
    path = "spec.strategy"
    if strategy.type == "Recreate":
        if strategy.HasField("rollingUpdate"):
            return [
                forbidden(
                    f"{path}.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                )
            ]
        return []
    if strategy.type != "RollingUpdate":
        return [unsupported(path, strategy.type, DEPLOYMENT_STRATEGIES)]
    ru = strategy.rollingUpdate
    rp = f"{path}.rollingUpdate"
    errs = _positive_int_or_percent(f"{rp}.maxUnavailable", ru.maxUnavailable)
    errs += _positive_int_or_percent(f"{rp}.maxSurge", ru.maxSurge)
    if int_or_percent_value(ru.maxUnavailable) == 0 and int_or_percent_value(ru.maxSurge) == 0:
        errs.append(
            invalid(
                f"{rp}.maxUnavailable",
                _int_or_string_shown(ru.maxUnavailable),
                "may not be 0 when `maxSurge` is 0",
            )
        )
    held = int_or_string(ru.maxUnavailable)
    if isinstance(held, str) and PERCENT_RE.match(held) and int(held[:-1]) > 100:
        errs.append(invalid(f"{rp}.maxUnavailable", GoValue(held), "must not be greater than 100%"))
    return errs


def validate_deployment(d: deployment_pb2.Deployment) -> list[FieldError]:
    """Kubernetes' ValidateDeploymentSpec (after the apps/v1 defaults) and its status checks."""
    errs: list[FieldError] = []
    spec = d.spec
    nonneg = "must be greater than or equal to 0"
    if spec.replicas < 0:
        errs.append(invalid("spec.replicas", spec.replicas, nonneg))
    sel = spec.selector
    if not spec.HasField("selector"):
        errs.append(required("spec.selector"))
    else:
        for f, m in label_selector_problems(sel, "spec.selector"):
            errs.append(FieldError(f, m))
        if not sel.matchLabels and not sel.matchExpressions:
            errs.append(
                invalid(
                    "spec.selector",
                    go_label_selector(sel),
                    "empty selector is invalid for deployment",
                )
            )
    tmpl = spec.template
    errs.extend(validate_labels("spec.template.metadata.labels", tmpl.metadata.labels))
    if sel.matchLabels or sel.matchExpressions:
        try:
            selector = from_proto(sel)
        except SelectorError:
            selector = None
        if selector is not None and not selector.matches(tmpl.metadata.labels):
            errs.append(
                invalid(
                    "spec.template.metadata.labels",
                    go_string_map(tmpl.metadata.labels),
                    "`selector` does not match template `labels`",
                )
            )
    errs.extend(validate_pod_spec("spec.template.spec", tmpl.spec))
    if tmpl.spec.restartPolicy != "Always":
        errs.append(
            unsupported("spec.template.spec.restartPolicy", tmpl.spec.restartPolicy, ("Always",))
        )
    errs.extend(no_template_deadline(tmpl.spec, "ReplicaSet"))
    errs.extend(validate_deployment_strategy(spec.strategy))
    if spec.minReadySeconds < 0:
        errs.append(invalid("spec.minReadySeconds", spec.minReadySeconds, nonneg))
    if spec.HasField("revisionHistoryLimit") and spec.revisionHistoryLimit < 0:
        errs.append(invalid("spec.revisionHistoryLimit", spec.revisionHistoryLimit, nonneg))
    if spec.HasField("progressDeadlineSeconds"):
        pds = spec.progressDeadlineSeconds
        if pds < 0:
            errs.append(invalid("spec.progressDeadlineSeconds", pds, nonneg))
        if pds <= spec.minReadySeconds:
            errs.append(
                invalid("spec.progressDeadlineSeconds", pds, "must be greater than minReadySeconds")
            )
    errs.extend(validate_deployment_status(d))
    return errs


def validate_deployment_status(d: deployment_pb2.Deployment) -> list[FieldError]:
    """Kubernetes' ValidateDeploymentStatus: no count is negative, and none exceeds replicas."""
    errs: list[FieldError] = []
    st = d.status
    nonneg = "must be greater than or equal to 0"
    for name, value in (
        ("observedGeneration", st.observedGeneration),
        ("replicas", st.replicas),
        ("updatedReplicas", st.updatedReplicas),
        ("readyReplicas", st.readyReplicas),
        ("availableReplicas", st.availableReplicas),
        ("unavailableReplicas", st.unavailableReplicas),
    ):
        if value < 0:
            errs.append(invalid(f"status.{name}", value, nonneg))
    if st.HasField("terminatingReplicas") and st.terminatingReplicas < 0:
        errs.append(invalid("status.terminatingReplicas", st.terminatingReplicas, nonneg))
    if st.HasField("collisionCount") and st.collisionCount < 0:
        errs.append(invalid("status.collisionCount", st.collisionCount, nonneg))
    msg = "cannot be greater than status.replicas"
    if st.updatedReplicas > st.replicas:
        errs.append(invalid("status.updatedReplicas", st.updatedReplicas, msg))
    if st.readyReplicas > st.replicas:
        errs.append(invalid("status.readyReplicas", st.readyReplicas, msg))
    if st.availableReplicas > st.replicas:
        errs.append(invalid("status.availableReplicas", st.availableReplicas, msg))
    if st.availableReplicas > st.readyReplicas:
        errs.append(
            invalid(
                "status.availableReplicas",
                st.availableReplicas,
                "cannot be greater than readyReplicas",
            )
        )
    for i, cond in enumerate(st.conditions):
        cp = f"status.conditions[{i}]"
        if not cond.type:
            errs.append(required(f"{cp}.type"))
        if cond.status not in CONDITION_STATUSES:
            errs.append(unsupported(f"{cp}.status", cond.status, CONDITION_STATUSES))
    return errs


DEFAULT_MAX_SURGE = "25%"
DEFAULT_MAX_UNAVAILABLE = "25%"


def default_deployment_spec(spec: deployment_pb2.DeploymentSpec) -> None:
    """Kubernetes' apps/v1 Deployment defaults: 1 replica, RollingUpdate with 25% surge and 25%
    unavailable, 10 old ReplicaSets kept, a 600 s progress deadline."""
    if not spec.HasField("replicas"):
        spec.replicas = 1
    strategy = spec.strategy
    if not strategy.type:
        strategy.type = "RollingUpdate"
    if strategy.type == "RollingUpdate":
        ru = strategy.rollingUpdate
        ru.SetInParent()  # present even when both bounds are defaulted, as Kubernetes'
        if ru.maxUnavailable.WhichOneof("kind") in (None, "null_value"):
            set_int_or_string(ru.maxUnavailable, DEFAULT_MAX_UNAVAILABLE)
        if ru.maxSurge.WhichOneof("kind") in (None, "null_value"):
            set_int_or_string(ru.maxSurge, DEFAULT_MAX_SURGE)
    if not spec.HasField("revisionHistoryLimit"):
        spec.revisionHistoryLimit = 10
    if not spec.HasField("progressDeadlineSeconds"):
        spec.progressDeadlineSeconds = 600


class DeploymentStrategy(Strategy[deployment_pb2.Deployment]):
    reset_status_on_create = True

    def decode_defaults(self, obj: deployment_pb2.Deployment) -> None:
        default_deployment_spec(obj.spec)
        default_pod_spec(obj.spec.template.spec, self.default_grace_seconds)

    def default(self, obj: deployment_pb2.Deployment, now: datetime) -> None:
        default_deployment_spec(obj.spec)
        default_pod_spec(obj.spec.template.spec, self.default_grace_seconds)

    def default_created(self, obj: deployment_pb2.Deployment, now: datetime) -> None:
        """Nothing: `default` is the decode-time defaults again."""

    def on_update(self, new: deployment_pb2.Deployment, old: deployment_pb2.Deployment) -> None:
        default_deployment_spec(new.spec)
        default_pod_spec(new.spec.template.spec, self.default_grace_seconds)
        # As Kubernetes' deployment strategy: annotations are copied to the ReplicaSets, so
        # a change to them is a new generation too.
        if new.metadata.annotations != old.metadata.annotations:
            new.metadata.generation = old.metadata.generation + 1

    def on_status_update(
        self, merged: deployment_pb2.Deployment, new: deployment_pb2.Deployment
    ) -> None:
        # Kubernetes' deployment status strategy keeps only spec and labels: the controller
        # records the current revision annotation with the status.
        annotations = merged.metadata.annotations
        annotations.clear()
        annotations.update(new.metadata.annotations)

    def check(self, obj: deployment_pb2.Deployment) -> list[FieldError]:
        return validate_deployment(obj)

    def check_update(
        self, new: deployment_pb2.Deployment, old: deployment_pb2.Deployment
    ) -> list[FieldError]:
        if new.spec.selector != old.spec.selector:
            shown = go_label_selector(new.spec.selector)
            return [invalid("spec.selector", shown, "field is immutable")]
        return []
