"""ReplicaSets (apps/v1): defaults, validation and the immutable selector.

As kube's pkg/registry/apps/replicaset strategy: the status is the controller's, replicas
defaults to 1, the template's pod spec gets the pod defaults, and the selector never changes.
Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from apiserver.registry.base import META_FIELDS, Strategy
from apiserver.registry.podspec import default_pod_spec
from apiserver.validation import (
    invalid,
    no_template_deadline,
    required,
    validate_labels,
    validate_pod_spec,
)
from tinykube.errors import FieldError
from tinykube.selectors import (
    SelectorError,
    from_proto,
    label_selector_problems,
)
from tinykube.v1 import replicaset_pb2


def validate_replica_set(rs: replicaset_pb2.ReplicaSet) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = rs.spec
    if spec.replicas < 0:
        errs.append(invalid("spec.replicas", spec.replicas, "must be greater than or equal to 0"))
    if spec.minReadySeconds < 0:
        errs.append(
            invalid(
                "spec.minReadySeconds", spec.minReadySeconds, "must be greater than or equal to 0"
            )
        )
    sel = spec.selector
    if not sel.matchLabels and not sel.matchExpressions:
        errs.append(required("spec.selector"))
    else:
        for f, m in label_selector_problems(sel, "spec.selector"):
            errs.append(FieldError(f, m))
    errs.extend(validate_labels("spec.template.metadata.labels", spec.template.metadata.labels))
    if sel.matchLabels or sel.matchExpressions:
        try:
            selector = from_proto(sel)
        except SelectorError:
            selector = None
        if selector is not None and not selector.matches(spec.template.metadata.labels):
            errs.append(
                invalid(
                    "spec.template.metadata.labels",
                    ",".join(f"{k}={v}" for k, v in sorted(spec.template.metadata.labels.items())),
                    "`selector` does not match template `labels`",
                )
            )
    errs.extend(validate_pod_spec("spec.template.spec", spec.template.spec))
    errs.extend(no_template_deadline(spec.template.spec, "ReplicaSet"))
    for name, value in (
        ("replicas", rs.status.replicas),
        ("readyReplicas", rs.status.readyReplicas),
        ("availableReplicas", rs.status.availableReplicas),
        ("fullyLabeledReplicas", rs.status.fullyLabeledReplicas),
    ):
        if value < 0:
            errs.append(invalid(f"status.{name}", value, "must be greater than or equal to 0"))
    return errs


class ReplicaSetStrategy(Strategy[replicaset_pb2.ReplicaSet]):
    selectable_fields = (*META_FIELDS, "status.replicas")
    reset_status_on_create = True

    def decode_defaults(self, obj: replicaset_pb2.ReplicaSet) -> None:
        self._defaults(obj)

    def default(self, obj: replicaset_pb2.ReplicaSet, now: datetime) -> None:
        self._defaults(obj)

    def default_created(self, obj: replicaset_pb2.ReplicaSet, now: datetime) -> None:
        """Nothing: `default` is the decode-time defaults again."""

    def on_update(self, new: replicaset_pb2.ReplicaSet, old: replicaset_pb2.ReplicaSet) -> None:
        self._defaults(new)

    def _defaults(self, obj: replicaset_pb2.ReplicaSet) -> None:
        if not obj.spec.HasField("replicas"):
            obj.spec.replicas = 1
        default_pod_spec(obj.spec.template.spec, self.default_grace_seconds)

    def check(self, obj: replicaset_pb2.ReplicaSet) -> list[FieldError]:
        return validate_replica_set(obj)

    def check_update(
        self, new: replicaset_pb2.ReplicaSet, old: replicaset_pb2.ReplicaSet
    ) -> list[FieldError]:
        if new.spec.selector != old.spec.selector:
            return [invalid("spec.selector", "", "field is immutable")]
        return []

    def fields(self, obj: replicaset_pb2.ReplicaSet) -> dict[str, str]:
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": obj.metadata.namespace,
            "status.replicas": str(obj.status.replicas),
        }
