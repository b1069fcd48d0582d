"""Every kind's JSON, as the REST API prints it, against two oracles of Kubernetes' JSON.

Each kind is printed twice: bare (a name and nothing else: what proto3 drops must come back
from tinykube/zerofields.py) and with every field it models set (depth-limited, first member of
each oneof): every field must be one Kubernetes has, with Kubernetes' JSON type. The oracles are
Kubernetes' 1.37 JSON schemas, strict (kubernetes-validate), and the Python client's pydantic
models, which refuse an object without a required field. The e2e twin,
tests/e2e/test_client_oracles.py, reads a live cluster's objects the same way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from apiserver.rest.codec import KindCodec
from tinykube.kinds import ALL_KINDS, KindInfo

kubernetes_validate = pytest.importorskip("kubernetes_validate")
k8s = pytest.importorskip("kubernetes.client")

KUBE_VERSION = "1.37.0"
DEPTH = 6


def _scalar(f: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_STRING:
        return "x"
    if f.type == FieldDescriptor.TYPE_BYTES:
        return b"x"
    if f.type == FieldDescriptor.TYPE_BOOL:
        return True
    if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 1.0
    return 1


def fill(msg: Message, depth: int = 0) -> None:
    """Set every field of `msg`, recursively, to a value of its type."""
    for f in msg.DESCRIPTOR.fields:
        oneof = f.containing_oneof
        if oneof is not None and oneof.fields[0] is not f:
            continue
        value: Any = getattr(msg, f.name)
        t = f.message_type
        if t is not None and t.GetOptions().map_entry:
            value_field = t.fields_by_name["value"]
            if value_field.message_type is None:
                value["k"] = _scalar(value_field)
            elif depth < DEPTH:
                fill(value["k"], depth + 1)
            continue
        if t is None:
            if f.is_repeated:
                value.append(_scalar(f))
            else:
                setattr(msg, f.name, _scalar(f))
            continue
        target = value.add() if f.is_repeated else value
        if t.full_name == "google.protobuf.Timestamp":
            target.FromSeconds(1_700_000_000)
        elif t.full_name == "google.protobuf.Value":
            target.number_value = 1
        elif t.full_name == "google.protobuf.Struct":
            # A CRD's schema is a JSONSchemaProps, any other Struct any JSON object.
            target.update({"type": "object"} if f.name == "openAPIV3Schema" else {"a": "b"})
        elif not t.full_name.startswith("google.protobuf.") and depth < DEPTH:
            fill(target, depth + 1)


def model(info: KindInfo) -> str:
    """The Python client's model: V1Pod; Events are CoreV1Event and EventsV1Event."""
    name = info.version.capitalize() + info.kind
    if info.kind == "Event":
        group = info.group.split(".")[0] or "core"
        name = group.capitalize() + name
    return name


@pytest.mark.parametrize("filled", [False, True], ids=["bare", "filled"])
@pytest.mark.parametrize("info", ALL_KINDS, ids=lambda info: info.kind)
def test_printed_objects_are_kubernetes_objects(info: KindInfo, filled: bool) -> None:
    obj = info.message()
    if filled:
        fill(obj)
    obj.metadata.name = "n"  # type: ignore[attr-defined]
    data = KindCodec(info).object_dict(obj)
    kubernetes_validate.validate(data, KUBE_VERSION, strict=True)
    k8s.ApiClient().deserialize(json.dumps(data), model(info), "application/json")
