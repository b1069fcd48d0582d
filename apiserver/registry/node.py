"""Nodes (core/v1): taints and status validation.

A kubelet registers its Node with its status (capacity, allocatable, conditions), so a create
keeps the status; UpdateStatus, written by every kubelet, checks only the status. Pure
functions.
"""

from __future__ import annotations

from apiserver.registry.base import META_FIELDS, Strategy
from apiserver.validation import (
    TAINT_EFFECTS,
    duplicate,
    invalid,
    printable,
    quantity_map,
    required,
    unsupported,
    validate_conditions,
)
from tinykube.errors import FieldError
from tinykube.selectors import (
    validate_label_key,
    validate_label_value,
)
from tinykube.v1 import node_pb2


def validate_node(node: node_pb2.Node) -> list[FieldError]:
    return validate_node_spec(node) + validate_node_status(node)


def validate_node_spec(node: node_pb2.Node) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(node.spec.taints):
        tp = f"spec.taints[{i}]"
        if not t.key:
            errs.append(required(f"{tp}.key"))
        else:
            for p in validate_label_key(t.key):
                errs.append(invalid(f"{tp}.key", t.key, p))
        for p in validate_label_value(t.value):
            errs.append(invalid(f"{tp}.value", t.value, p))
        if t.effect not in TAINT_EFFECTS:
            errs.append(unsupported(f"{tp}.effect", t.effect, TAINT_EFFECTS))
        if (t.key, t.effect) in seen:
            errs.append(duplicate(f"{tp}", f"{t.key}:{t.effect}"))
        seen.add((t.key, t.effect))
    return errs


def validate_node_status(node: node_pb2.Node) -> list[FieldError]:
    errs: list[FieldError] = []
    for field_name, resources in (
        ("capacity", node.status.capacity),
        ("allocatable", node.status.allocatable),
    ):
        qerrs, _ = quantity_map(f"status.{field_name}", resources)
        errs.extend(qerrs)
    errs.extend(validate_conditions("status.conditions", node.status.conditions))
    return errs


class NodeStrategy(Strategy[node_pb2.Node]):
    selectable_fields = (*META_FIELDS, "spec.unschedulable")
    # Every kubelet watches its own Node (metadata.name=<node>).
    index_field = "metadata.name"

    def check(self, obj: node_pb2.Node) -> list[FieldError]:
        return validate_node(obj)

    def check_status(self, new: node_pb2.Node, old: node_pb2.Node) -> list[FieldError]:
        return validate_node_status(new) + printable("status", new.status)

    def fields(self, obj: node_pb2.Node) -> dict[str, str]:
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": "",
            "spec.unschedulable": "true" if obj.spec.unschedulable else "false",
        }
