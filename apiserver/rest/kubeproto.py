"""The few Kubernetes protobuf bodies tinykube must read: a SelfSubjectAccessReview.

kubectl's typed clients (`kubectl auth can-i`) post built-in kinds as
application/vnd.kubernetes.protobuf: the magic bytes "k8s\\0", then a runtime.Unknown
(typeMeta 1, raw 2) whose raw bytes are the object in k8s.io/api's generated.proto numbering.
`self_subject_access_review(body)` turns one into the JSON dict the review code reads. Only the
fields the review uses are read; unknown fields are skipped, as protobuf readers do. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tinykube.errors import BadRequestError

MAGIC = b"k8s\x00"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise BadRequestError("the protobuf body is truncated or malformed")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield number, value
        elif wire == 2:
            length, i = _varint(data, i)
            if i + length > len(data):
                raise BadRequestError("the protobuf body is truncated or malformed")
            yield number, data[i : i + length]
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise BadRequestError(f"the protobuf body has an unsupported wire type {wire}")


def _strings(data: bytes, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in fields(data):
        if number in names and isinstance(value, bytes):
            out[names[number]] = value.decode("utf-8", "replace")
    return out


_RESOURCE_ATTRIBUTES = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}


def self_subject_access_review(body: bytes) -> dict[str, Any]:
    """A protobuf SelfSubjectAccessReview as its JSON form (spec only)."""
    if not body.startswith(MAGIC):
        raise BadRequestError("the protobuf body does not start with the Kubernetes magic bytes")
    raw = b""
    for number, value in fields(body[len(MAGIC) :]):
        if number == 2 and isinstance(value, bytes):
            raw = value
    spec: dict[str, Any] = {}
    for number, value in fields(raw):
        if number != 2 or not isinstance(value, bytes):
            continue
        for part, attrs in fields(value):
            if not isinstance(attrs, bytes):
                continue
            if part == 1:
                resource = _strings(attrs, _RESOURCE_ATTRIBUTES)
                for sub, selector in fields(attrs):
                    if sub == 8 and isinstance(selector, bytes):
                        resource["fieldSelector"] = _strings(selector, {1: "rawSelector"})
                spec["resourceAttributes"] = resource
            elif part == 2:
                spec["nonResourceAttributes"] = _strings(attrs, {1: "path", 2: "verb"})
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": spec,
    }
