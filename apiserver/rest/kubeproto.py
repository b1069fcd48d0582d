"""Kubernetes protobuf (application/vnd.kubernetes.protobuf), both ways, for every kind tinykube
serves, DeleteOptions, Eviction, Status and WatchEvent.

client-go sends and asks for built-in kinds as protobuf: the magic bytes "k8s\\0", then a
runtime.Unknown (typeMeta 1 {apiVersion 1, kind 2}, raw 2, contentEncoding 3, contentType 4)
whose raw bytes are the object in k8s.io/api's generated.proto numbering. One table per
message (kubeproto_tables.MESSAGES) serves both directions: `decode(body)` turns a body into
the Kubernetes JSON dict the JSON path reads (so it goes through the same validation and
fieldValidation), `encode(doc)` turns the JSON dict the JSON path prints into protobuf. A
WATCH answers `watch_frame`s (4-byte big-endian length, then a bare WatchEvent).
`self_subject_access_review(body)` reads the one authorization kind tinykube answers. Pure.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from apiserver.rest.kubeproto_tables import MESSAGES
from tinykube.errors import BadRequestError
from tinykube.protowire import delimited, field_key, varint_bytes

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
    """(field number, value) pairs: ints for varints (and fixed-width numbers), bytes for
    length-delimited fields."""
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
        elif wire in (1, 5):  # fixed64 / fixed32: no Kubernetes field has one
            width = 8 if wire == 1 else 4
            if i + width > len(data):
                raise BadRequestError("the protobuf body is truncated or malformed")
            yield number, int.from_bytes(data[i : i + width], "little")
            i += width
        else:
            raise BadRequestError(f"the protobuf body has an unsupported wire type {wire}")


# ---- every served kind, both ways, from kubeproto_tables ------------------------------------

# API group -> the tables' package prefix (all served versions are v1).
_PACKAGES = {
    "": "core",
    "admissionregistration.k8s.io": "admissionregistration",
    "apps": "apps",
    "batch": "batch",
    "policy": "policy",
    "rbac.authorization.k8s.io": "rbac",
    "coordination.k8s.io": "coordination",
    "scheduling.k8s.io": "scheduling",
    "autoscaling": "autoscaling",
    "discovery.k8s.io": "discovery",
    "events.k8s.io": "events",
    "authentication.k8s.io": "authentication",
    "authorization.k8s.io": "authorization",
    "meta.k8s.io": "meta",
}
# meta/v1 kinds Kubernetes registers in every group version (a Status says apiVersion "v1").
_META_KINDS = frozenset({"Status", "DeleteOptions", "WatchEvent"})


def message_of(api_version: str, kind: str) -> str | None:
    """The table name of a kind ("core.Pod", "apps.DeploymentList"), None if not protobuf."""
    group, _, version = api_version.rpartition("/")
    if kind in _META_KINDS:
        return f"meta.{kind}"
    package = _PACKAGES.get(group)
    if package is None or version != "v1":
        return None
    name = f"{package}.{kind}"
    return name if name in MESSAGES else None


def supports(api_version: str, kind: str) -> bool:
    return message_of(api_version, kind) is not None


def _bad(detail: str) -> BadRequestError:
    return BadRequestError(f"the protobuf request body cannot be decoded: {detail}")


def _text(value: int | bytes, where: str) -> str:
    if not isinstance(value, bytes):
        raise _bad(f"{where}: a string field holds a number")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(f"{where}: a string field is not UTF-8") from None


def _number(value: int | bytes, where: str) -> int:
    if not isinstance(value, int):
        raise _bad(f"{where}: a number field holds bytes")
    return _signed(value)


def _bytes(value: int | bytes, where: str) -> bytes:
    if not isinstance(value, bytes):
        raise _bad(f"{where}: a message or bytes field holds a number")
    return value


def _signed(value: int) -> int:
    """A varint as the int32/int64 it encodes (negative numbers are ten-byte varints)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _zero(value: Any) -> bool:
    return (
        value is None
        or (not isinstance(value, bool) and value in ("", 0, {}, []))
        or (value is False)
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _time_text(data: bytes, where: str, micro: bool) -> str | None:
    """metav1.Time (whole seconds: Go drops the nanos) or MicroTime as its JSON text; the zero
    time (an empty message) is None, as Go's JSON prints it null."""
    if not data:
        return None
    seconds = nanos = 0
    for number, value in fields(data):
        if number == 1:
            seconds = _number(value, where)
        elif number == 2:
            nanos = _number(value, where)
    try:
        moment = _EPOCH + timedelta(seconds=seconds)
    except OverflowError:
        raise _bad(f"{where}: the time is out of range") from None
    if not micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{max(nanos, 0) // 1000:06d}Z"


class _Decoder:
    """One body's decoding: the JSON dict, and the paths of fields no table names."""

    def __init__(self) -> None:
        self.unknown: list[str] = []

    def message(self, data: bytes, name: str, path: str) -> dict[str, Any]:
        table = MESSAGES[name]
        out: dict[str, Any] = {}
        for number, value in fields(data):
            field = table.get(number)
            if field is None:
                if value not in (0, b""):  # Go writes non-pointer fields even when zero
                    self.unknown.append(f"{path}{'' if not path else '.'}<field {number}>")
                continue
            json_name, type_, nested = field
            where = f"{path}.{json_name}" if path else json_name
            if type_ == "inline":
                out.update(self.message(_bytes(value, where), nested, path))
            elif type_.startswith("[]"):
                items = out.setdefault(json_name, [])
                if type_ == "[]string":
                    items.append(_text(value, where))
                elif type_ == "[]int":
                    if isinstance(value, bytes):  # packed
                        i = 0
                        while i < len(value):
                            item, i = _varint(value, i)
                            items.append(_signed(item))
                    else:
                        items.append(_signed(value))
                else:
                    item_where = f"{where}[{len(items)}]"
                    items.append(self.value(_bytes(value, where), nested, item_where))
            elif type_ == "map":
                key, item = self.entry(_bytes(value, where), nested, where)
                out.setdefault(json_name, {})[key] = item
            else:
                decoded = self.scalar(value, type_.lstrip("*"), nested, where)
                if type_.startswith("*"):
                    if decoded is not None:
                        out[json_name] = decoded
                elif not _zero(decoded) or (type_ == "message" and nested == "Quantity"):
                    out[json_name] = decoded
                else:
                    out.pop(json_name, None)
        return out

    def scalar(self, value: int | bytes, type_: str, nested: str, where: str) -> Any:
        if type_ == "string":
            return _text(value, where)
        if type_ == "int":
            return _number(value, where)
        if type_ == "bool":
            return bool(_number(value, where))
        if type_ == "bytes":
            return base64.b64encode(_bytes(value, where)).decode()
        return self.value(_bytes(value, where), nested, where)

    def entry(self, data: bytes, nested: str, where: str) -> tuple[str, Any]:
        key = ""
        item: Any = None
        for number, value in fields(data):
            if number == 1:
                key = _text(value, where)
            elif number == 2:
                item = value
        at = f"{where}[{key}]"
        if nested == "string":
            return key, "" if item is None else _text(item, at)
        if nested == "bytes":
            return key, base64.b64encode(b"" if item is None else _bytes(item, at)).decode()
        return key, self.value(b"" if item is None else _bytes(item, at), nested, at)

    def value(self, data: bytes, nested: str, where: str) -> Any:
        """A nested message: a well-known one as its JSON form, any other as a dict."""
        if nested in ("Time", "MicroTime"):
            return _time_text(data, where, nested == "MicroTime")
        if nested == "Quantity":
            parts = dict(fields(data))
            return _text(parts[1], where) if 1 in parts else "0"
        if nested == "IntOrString":
            parts = dict(fields(data))
            if _number(parts.get(1, 0), where) == 1:
                return _text(parts.get(3, b""), where)
            return _number(parts.get(2, 0), where)
        if nested == "Strings":
            return [_text(v, where) for n, v in fields(data) if n == 1]
        if nested in ("RawExtension", "FieldsV1"):
            raw = _bytes(dict(fields(data)).get(1, b""), where)
            if not raw:
                return None
            try:
                return json.loads(raw)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise _bad(f"{where}: the embedded object is not JSON") from None
        return self.message(data, nested, where)


def envelope_of(body: bytes) -> tuple[str, str, bytes]:
    """The apiVersion, kind and raw bytes of a Kubernetes protobuf body."""
    if not body.startswith(MAGIC):
        raise _bad("it does not start with the k8s protobuf prefix")
    type_meta, raw = b"", b""
    for number, value in fields(body[len(MAGIC) :]):
        if number == 1:
            type_meta = _bytes(value, "typeMeta")
        elif number == 2:
            raw = _bytes(value, "raw")
    api_version = kind = ""
    for number, value in fields(type_meta):
        if number == 1:
            api_version = _text(value, "apiVersion")
        elif number == 2:
            kind = _text(value, "kind")
    return api_version, kind, raw


def decode_message(raw: bytes, name: str) -> tuple[dict[str, Any], list[str]]:
    """Raw message bytes (no envelope) of table `name` as JSON, and the unknown fields' paths."""
    decoder = _Decoder()
    return decoder.message(raw, name, ""), decoder.unknown


def decode_unknown(body: bytes, *, default: str = "") -> tuple[dict[str, Any], list[str]]:
    """A Kubernetes protobuf body as the Kubernetes JSON dict it stands for, with the paths of
    fields no table knows (fieldValidation decides about those, as for unknown JSON fields).
    `default` is the table to read an envelope without a kind as (DeleteOptions)."""
    api_version, kind, raw = envelope_of(body)
    name = message_of(api_version, kind) if kind else default or None
    if name is None:
        raise _bad(f"{api_version or '<none>'} {kind or '<none>'} is not read from protobuf")
    doc, unknown = decode_message(raw, name)
    head = {"apiVersion": api_version, "kind": kind} if kind else {}
    return {**head, **doc}, unknown


def decode(body: bytes) -> dict[str, Any]:
    """A Kubernetes protobuf body as a Kubernetes JSON dict (unknown fields dropped)."""
    return decode_unknown(body)[0]


# ---- encoding --------------------------------------------------------------------------------


def _encode_time(value: Any, micro: bool) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"a time is not a string: {value!r}")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    seconds = delta.days * 86400 + delta.seconds
    out = field_key(1, 0) + varint_bytes(seconds)
    if micro and delta.microseconds:
        out += field_key(2, 0) + varint_bytes(delta.microseconds * 1000)
    return out


_ENCODE_ERRORS = (ValueError, TypeError, OverflowError, binascii.Error)


def _encode_value(value: Any, nested: str, strict: bool) -> bytes:
    """A nested message's bytes from its JSON value."""
    if nested in ("Time", "MicroTime"):
        return _encode_time(value, nested == "MicroTime")
    if nested == "Quantity":
        return delimited(1, _string(value).encode())
    if nested == "IntOrString":
        if isinstance(value, str):
            return field_key(1, 0) + b"\x01" + delimited(3, value.encode())
        return field_key(1, 0) + b"\x00" + field_key(2, 0) + varint_bytes(_integer(value))
    if nested == "Strings":
        if not isinstance(value, list):
            raise ValueError(f"not a list of strings: {value!r}")
        return b"".join(delimited(1, _string(item).encode()) for item in value)
    if nested in ("RawExtension", "FieldsV1"):
        return delimited(1, json.dumps(value, separators=(",", ":")).encode())
    if not isinstance(value, dict):
        raise ValueError(f"{nested} is not an object: {value!r}")
    return _encode_message(value, nested, strict)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    return value


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    if not -(1 << 63) <= value < 1 << 64:
        raise ValueError(f"out of range: {value}")
    return value


def _encode_scalar(number: int, type_: str, value: Any) -> bytes:
    if type_ == "string":
        return delimited(number, _string(value).encode())
    if type_ == "bytes":
        return delimited(number, base64.b64decode(_string(value), validate=True))
    if type_ == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"not a boolean: {value!r}")
        return field_key(number, 0) + (b"\x01" if value else b"\x00")
    return field_key(number, 0) + varint_bytes(_integer(value))


def _encode_field(value: Any, number: int, type_: str, nested: str, strict: bool) -> bytes:
    if type_.startswith("[]"):
        if not isinstance(value, list):
            raise ValueError(f"not a list: {value!r}")
        if type_ == "[]message":
            return b"".join(delimited(number, _encode_value(v, nested, strict)) for v in value)
        return b"".join(_encode_scalar(number, type_[2:], v) for v in value)
    if type_ == "map":
        if not isinstance(value, dict):
            raise ValueError(f"not an object: {value!r}")
        out = bytearray()
        for key in sorted(value):
            item = value[key]
            if nested in ("string", "bytes"):
                encoded = _encode_scalar(2, nested, item)
            else:
                encoded = delimited(2, _encode_value(item, nested, strict))
            out += delimited(number, delimited(1, key.encode()) + encoded)
        return bytes(out)
    if type_.lstrip("*") == "message":
        return delimited(number, _encode_value(value, nested, strict))
    return _encode_scalar(number, type_.lstrip("*"), value)


def _encode_message(doc: dict[str, Any], name: str, strict: bool) -> bytes:
    """A message from its JSON dict. A value whose JSON shape does not fit Kubernetes' field
    is left out (it would not decode in a Go client either), or, `strict`, a ValueError."""
    out = bytearray()
    for number, (json_name, type_, nested) in MESSAGES[name].items():
        if type_ == "inline":
            out += delimited(number, _encode_message(doc, nested, strict))
            continue
        value = doc.get(json_name)
        if value is None:
            continue
        try:
            out += _encode_field(value, number, type_, nested, strict)
        except _ENCODE_ERRORS:
            if strict:
                raise
    return bytes(out)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """The magic bytes and the runtime.Unknown around a message (contentEncoding and
    contentType empty, as kube-apiserver writes them)."""
    type_meta = delimited(1, api_version.encode()) + delimited(2, kind.encode())
    return MAGIC + delimited(1, type_meta) + delimited(2, raw) + b"\x1a\x00\x22\x00"


def encode(doc: dict[str, Any], *, strict: bool = False) -> bytes | None:
    """The Kubernetes protobuf form of a JSON object with kind and apiVersion (an object, a
    list, a Status), or None if that kind has no protobuf form here (or, `strict`, a value
    does not fit its field)."""
    api_version, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
    name = message_of(api_version, kind)
    if name is None:
        return None
    try:
        raw = _encode_message(doc, name, strict)
    except _ENCODE_ERRORS:
        return None
    return envelope(api_version, kind, raw)


def watch_frame(event_type: str, obj: bytes) -> bytes:
    """One protobuf watch event as client-go's stream decoder reads it: a 4-byte big-endian
    length, then a bare metav1.WatchEvent (type 1, object 2 = a RawExtension whose raw is the
    object's own envelope). Streamed frames carry no magic and no runtime.Unknown: kube's
    protobuf stream serializer is the raw one."""
    event = delimited(1, event_type.encode()) + delimited(2, delimited(1, obj))
    return len(event).to_bytes(4, "big") + event


def delete_options(body: bytes) -> dict[str, Any]:
    """A protobuf DeleteOptions body (client-go's DELETE and deletecollection) as its JSON
    form; an envelope without a kind is read as DeleteOptions, as kube-apiserver defaults it."""
    doc, _ = decode_unknown(body, default="meta.DeleteOptions")
    if doc.get("kind", "DeleteOptions") != "DeleteOptions":
        raise _bad(f"the body is a {doc['kind']}, not DeleteOptions")
    doc.pop("kind", None)
    doc.pop("apiVersion", None)
    return doc


def self_subject_rules_review(body: bytes) -> dict[str, Any]:
    """A protobuf SelfSubjectRulesReview (`kubectl auth can-i --list`) as its JSON form."""
    doc, _ = decode_unknown(body, default="authorization.SelfSubjectRulesReview")
    if doc.get("kind", "SelfSubjectRulesReview") != "SelfSubjectRulesReview":
        raise _bad(f"the body is a {doc['kind']}, not a SelfSubjectRulesReview")
    return {
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": doc.get("spec", {}),
    }


def self_subject_access_review(body: bytes) -> dict[str, Any]:
    """A protobuf SelfSubjectAccessReview (`kubectl auth can-i`) as its JSON form (spec only)."""
    doc, _ = decode_unknown(body, default="authorization.SelfSubjectAccessReview")
    if doc.get("kind", "SelfSubjectAccessReview") != "SelfSubjectAccessReview":
        raise _bad(f"the body is a {doc['kind']}, not a SelfSubjectAccessReview")
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": doc.get("spec", {}),
    }
