"""PriorityClasses (scheduling.k8s.io/v1): defaults, validation and the immutable value.

As kube's pkg/registry/scheduling/priorityclass: preemptionPolicy defaults to
PreemptLowerPriority, "system-" names are the built-in classes only, and value and
preemptionPolicy never change. The built-in classes are created by the apiserver at start
(apiserver/admission.py). Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from apiserver.registry.base import Strategy
from apiserver.validation import (
    PREEMPTION_POLICIES,
    forbidden,
    invalid,
    required,
    unsupported,
)
from tinykube.errors import FieldError
from tinykube.v1 import priorityclass_pb2


def _preemption_policy(path: str, value: str) -> list[FieldError]:
    if not value:
        return [required(path)]
    if value not in PREEMPTION_POLICIES:
        return [unsupported(path, value, PREEMPTION_POLICIES)]
    return []


# Kubernetes' system priority classes: no other class may have a name starting "system-".
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"

SYSTEM_CRITICAL_PRIORITY = 2 * 1000000000

SYSTEM_PRIORITY_CLASSES: dict[str, tuple[int, str]] = {
    "system-node-critical": (
        SYSTEM_CRITICAL_PRIORITY + 1000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    "system-cluster-critical": (
        SYSTEM_CRITICAL_PRIORITY,
        "Used for system critical pods that must run in the cluster, but can be moved to "
        "another node if necessary.",
    ),
}

HIGHEST_USER_DEFINABLE_PRIORITY = 1000000000


def validate_priority_class(pc: priorityclass_pb2.PriorityClass) -> list[FieldError]:
    """Kubernetes' ValidatePriorityClass: "system-" names are the built-in classes only (with
    their value, not global defaults), other classes have a value of at most 1000000000."""
    errs: list[FieldError] = []
    name = pc.metadata.name
    if name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        known = SYSTEM_PRIORITY_CLASSES.get(name)
        if known is None:
            problem = f"{name} is not a known system priority class"
        elif pc.value != known[0]:
            problem = f"value of {name} PriorityClass must be {known[0]}"
        elif pc.globalDefault:
            problem = f"globalDefault of {name} PriorityClass must be false"
        else:
            problem = ""
        if problem:
            errs.append(
                forbidden(
                    "metadata.name",
                    f"priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are "
                    f"reserved for system use only. error: {problem}",
                )
            )
    elif pc.value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errs.append(
            forbidden(
                "value",
                "maximum allowed value of a user defined priority is "
                f"{HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        )
    if pc.HasField("preemptionPolicy"):
        errs.extend(_preemption_policy("preemptionPolicy", pc.preemptionPolicy))
    return errs


def validate_priority_class_update(
    new: priorityclass_pb2.PriorityClass, old: priorityclass_pb2.PriorityClass
) -> list[FieldError]:
    """Kubernetes' ValidatePriorityClassUpdate: value and preemptionPolicy are immutable."""
    errs: list[FieldError] = []
    if new.value != old.value:
        errs.append(forbidden("value", "may not be changed in an update."))
    if new.preemptionPolicy != old.preemptionPolicy:
        errs.append(invalid("preemptionPolicy", new.preemptionPolicy, "field is immutable"))
    return errs


class PriorityClassStrategy(Strategy[priorityclass_pb2.PriorityClass]):
    def decode_defaults(self, obj: priorityclass_pb2.PriorityClass) -> None:
        self._defaults(obj)

    def default(self, obj: priorityclass_pb2.PriorityClass, now: datetime) -> None:
        self._defaults(obj)

    def on_update(
        self, new: priorityclass_pb2.PriorityClass, old: priorityclass_pb2.PriorityClass
    ) -> None:
        self._defaults(new)

    @staticmethod
    def _defaults(obj: priorityclass_pb2.PriorityClass) -> None:
        if not obj.HasField("preemptionPolicy"):
            obj.preemptionPolicy = "PreemptLowerPriority"

    def check(self, obj: priorityclass_pb2.PriorityClass) -> list[FieldError]:
        return validate_priority_class(obj)

    def check_update(
        self, new: priorityclass_pb2.PriorityClass, old: priorityclass_pb2.PriorityClass
    ) -> list[FieldError]:
        return validate_priority_class_update(new, old)
