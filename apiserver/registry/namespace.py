"""Namespaces (core/v1): the lifecycle's phase and finalizers, the name label.

As kube's pkg/registry/core/namespace strategy: a new namespace is Active with the
"kubernetes" finalizer, carries the kubernetes.io/metadata.name label equal to its name, its
spec.finalizers change only through Finalize, and its phase follows deletion. Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from google.protobuf.message import Message

from apiserver.registry.base import META_FIELDS, Strategy
from apiserver.validation import dns1123_label, invalid
from tinykube.errors import FieldError
from tinykube.selectors import validate_label_key
from tinykube.v1 import namespace_pb2

# The finalizer every namespace gets at creation; the namespace controller removes it.
NAMESPACE_FINALIZER = "kubernetes"


def validate_namespace(ns: namespace_pb2.Namespace, *, indexed: bool = False) -> list[FieldError]:
    """Kubernetes' ValidateNamespace: every spec.finalizers entry is a qualified name, and
    one without a "/" is a standard finalizer name ("kubernetes" is the only one). Errors
    name `spec.finalizers`, or `spec.finalizers[i]` when `indexed` (a Finalize, as Kubernetes'
    ValidateNamespaceFinalizeUpdate)."""
    errs: list[FieldError] = []
    for i, fin in enumerate(ns.spec.finalizers):
        at = f"spec.finalizers[{i}]" if indexed else "spec.finalizers"
        for p in validate_label_key(fin):
            errs.append(invalid(at, fin, p))
        if "/" not in fin and fin != NAMESPACE_FINALIZER:
            errs.append(
                invalid(
                    at, fin, "name is neither a standard finalizer name nor is it fully qualified"
                )
            )
    return errs


def validate_namespace_status(ns: namespace_pb2.Namespace) -> list[FieldError]:
    """The phase follows deletion: Active until deletionTimestamp is set, then Terminating
    (Kubernetes names the field status.Phase)."""
    if not ns.metadata.HasField("deletionTimestamp"):
        if ns.status.phase != "Active":
            return [
                invalid(
                    "status.Phase",
                    ns.status.phase,
                    "may only be 'Active' if `deletionTimestamp` is empty",
                )
            ]
    elif ns.status.phase != "Terminating":
        return [
            invalid(
                "status.Phase",
                ns.status.phase,
                "may only be 'Terminating' if `deletionTimestamp` is not empty",
            )
        ]
    return []


# The label Kubernetes keeps on every namespace, equal to its name (namespaceSelector uses it).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


class NamespaceStrategy(Strategy[namespace_pb2.Namespace]):
    selectable_fields = (*META_FIELDS, "status.phase")
    reset_status_on_create = True

    def name_problems(self, path: str, name: str) -> list[FieldError]:
        return dns1123_label(path, name)

    def default(self, obj: namespace_pb2.Namespace, now: datetime) -> None:
        obj.status.phase = "Active"
        if NAMESPACE_FINALIZER not in obj.spec.finalizers:
            obj.spec.finalizers.append(NAMESPACE_FINALIZER)
        self.canonicalize(obj)

    def canonicalize(self, obj: Message) -> None:
        meta = self.typed(obj).metadata
        if meta.name:
            meta.labels[NAMESPACE_NAME_LABEL] = meta.name

    def on_update(self, new: namespace_pb2.Namespace, old: namespace_pb2.Namespace) -> None:
        # Only Finalize changes spec.finalizers (Kubernetes' namespace strategy).
        new.spec.finalizers[:] = old.spec.finalizers
        self.canonicalize(new)

    def check(self, obj: namespace_pb2.Namespace) -> list[FieldError]:
        return validate_namespace(obj)

    def check_status(
        self, new: namespace_pb2.Namespace, old: namespace_pb2.Namespace
    ) -> list[FieldError]:
        return self.validate_object(new) + validate_namespace_status(new)

    def prepare_for_finalize(self, new: Message, old: Message) -> Message:
        """Finalize: the stored namespace with only spec.finalizers replaced."""
        merged = namespace_pb2.Namespace()
        merged.CopyFrom(self.typed(old))
        merged.spec.finalizers[:] = self.typed(new).spec.finalizers
        return merged

    def validate_finalize(self, new: Message, old: Message) -> list[FieldError]:
        return validate_namespace(self.typed(new), indexed=True)

    def fields(self, obj: namespace_pb2.Namespace) -> dict[str, str]:
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": "",
            "status.phase": obj.status.phase,
        }
