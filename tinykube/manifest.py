"""Kubernetes-shaped YAML/JSON manifests to and from tinykube's protobuf objects.

`load_manifests` reads a multi-document YAML (or JSON) text, one object per document (a
`kind: List` document contributes its items), and returns typed protobuf messages. Parsing is
strict, like `kubectl apply`'s strict decoding: an unknown field is an error naming the
document and the field's full path (`document 2: unknown field "spec.containrs"`). Quantities
may be written as YAML numbers (`cpu: 1`) as Kubernetes allows; everything else must have its
JSON type. `to_dict`, `to_yaml` and `to_json` print objects the way `kubectl get -o yaml|json`
does: empty fields omitted except those Kubernetes always prints (`restartCount: 0`), int64
fields as numbers, keys sorted (as kubectl prints them: Go marshals maps in key order), and
several objects as a `kind: List`.

Accepted apiVersions: each kind's Kubernetes apiVersion (`v1`, `apps/v1` for ReplicaSet,
`coordination.k8s.io/v1` for Lease), and `v1` for every kind, which manifests written for
tinykube before it had API groups use. Objects are stored with their Kubernetes apiVersion.
Pure functions, no I/O beyond the text given.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from tinykube.fieldfacts import QUANTITY_FIELDS, QUANTITY_MAPS
from tinykube.kinds import API_VERSION, BY_KIND, KindInfo
from tinykube.zerofields import ZERO_FIELDS

# Kubernetes IntOrString fields are google.protobuf.Values (a JSON number or string); protobuf
# prints a number as a float (8080.0), Kubernetes as an integer.
_VALUE = "google.protobuf.Value"
# A ControllerRevision's data is a Struct holding any JSON; its numbers are doubles in protobuf,
# and the whole ones were integers in the JSON it was made from (a container's port, a count).
# (managedFields' fieldsV1, the other Struct, holds no numbers: it is not walked.)
# A CustomResourceDefinition's schema is one too (`minimum: 1`, `maxLength: 63`).
_WHOLE_STRUCTS = frozenset(
    {
        ("tinykube.v1.ControllerRevision", "data"),
        ("tinykube.v1.CustomResourceValidation", "openAPIV3Schema"),
    }
)

# The messages apiserver/crd/serving.py builds for custom kinds: their top-level fields are
# google.protobuf.Values holding any JSON (not IntOrStrings); whole numbers print as integers.
CUSTOM_PREFIX = "tinykube.custom."

# Kubernetes' metav1.MicroTime fields print with exactly six fractional digits
# ("2026-12-01T10:00:00.000000Z", what client-go parses them with); every other time is a
# metav1.Time (whole seconds, as stored). protobuf prints 0, 3, 6 or 9 digits.
MICRO_TIME_FIELDS = frozenset(
    {
        ("tinykube.v1.LeaseSpec", "acquireTime"),
        ("tinykube.v1.LeaseSpec", "renewTime"),
        ("tinykube.v1.Event", "eventTime"),
        ("tinykube.v1.EventsV1Event", "eventTime"),
        ("tinykube.v1.EventSeries", "lastObservedTime"),
    }
)

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT64,
    }
)


class ManifestError(ValueError):
    """A manifest that cannot become an object; the message names the document and field."""


@dataclass(frozen=True)
class ManifestObject:
    """One object read from a manifest, with the kind it is and where it came from."""

    info: KindInfo
    obj: Message
    index: int  # 1-based document number in the source text

    @property
    def name(self) -> str:
        return str(self.obj.metadata.name)  # type: ignore[attr-defined]

    @property
    def namespace(self) -> str:
        return str(self.obj.metadata.namespace)  # type: ignore[attr-defined]


# Aliases may make a document this many times bigger than it is written, and at least this many
# nodes big: a few hundred bytes of nested aliases ("billion laughs") otherwise expand to
# gigabytes once the data is walked. go-yaml, which Kubernetes parses YAML with, refuses such
# documents the same way.
ALIAS_EXPANSION_FACTOR = 10
ALIAS_EXPANSION_FLOOR = 100_000


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a document that contains itself or that its aliases expand too far."""
    sizes: dict[int, int] = {}  # id(node) -> nodes it stands for, aliases expanded
    open_: set[int] = set()  # the current node's ancestors
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            continue
        if key in sizes:
            continue
        open_.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_:
                raise yaml.composer.ComposerError(
                    None, None, "anchor value contains itself", child.start_mark
                )
            if id(child) not in sizes:
                stack.append((child, False))
    if sizes[id(root)] > max(ALIAS_EXPANSION_FLOOR, ALIAS_EXPANSION_FACTOR * len(sizes)):
        raise yaml.composer.ComposerError(
            None, None, "document contains excessive aliasing", root.start_mark
        )


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings: protobuf parses RFC 3339 itself, and
    refuses an integer past Python's digit limit as a YAML error at its position (PyYAML's own
    constructor lets that ValueError escape), and a document whose aliases contain themselves
    or expand it too far (`_check_aliases`)."""

    _aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
        return super().compose_node(parent, index)

    def compose_document(self) -> yaml.Node | None:
        self._aliases = 0
        node: yaml.Node | None = super().compose_document()
        if node is not None and self._aliases:
            _check_aliases(node)
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, "integer too long", node.start_mark
            ) from None


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)

_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_document(text: str) -> Any:
    """One YAML (or JSON) document as plain data, timestamps kept as strings.

    Raises yaml.YAMLError (with the position in its problem_mark) if it is malformed."""
    return yaml.load(text, Loader=_Loader)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error as "line L, column C: problem (context)", without PyYAML's
    `in "<unicode string>"` (the caller names the source) and its source excerpt."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return str(exc)
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = exc.problem or exc.context or "invalid YAML"
    context = f" ({exc.context})" if exc.context and exc.problem else ""
    return f"{where}{problem}{context}"


def load_manifests(text: str, source: str = "") -> list[ManifestObject]:
    """Every object in a (multi-document) YAML or JSON text, in order."""
    where = f" of {source}" if source else ""
    try:
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        raise ManifestError(f"error parsing {source or 'manifest'}: {yaml_problem(exc)}") from exc
    objects: list[ManifestObject] = []
    for index, doc in enumerate(documents, start=1):
        if doc is None:  # an empty document, e.g. after a trailing "---"
            continue
        try:
            if isinstance(doc, dict) and doc.get("kind") == "List":
                for j, item in enumerate(doc.get("items") or []):
                    try:
                        objects.append(parse_object(item, index))
                    except ManifestError as exc:
                        raise ManifestError(f"items[{j}]: {exc}") from exc
            else:
                objects.append(parse_object(doc, index))
        except ManifestError as exc:
            raise ManifestError(f"error in document {index}{where}: {exc}") from exc
    return objects


def kind_of(doc: dict[str, Any]) -> KindInfo:
    """The kind a document declares, checking its apiVersion."""
    kind = doc.get("kind")
    api_version = doc.get("apiVersion")
    if not kind:
        raise ManifestError("Object 'Kind' is missing")
    if not api_version:
        raise ManifestError("Object 'apiVersion' is missing")
    info = BY_KIND.get(str(kind))
    if info is None:
        known = ", ".join(sorted(BY_KIND))
        raise ManifestError(f'no matches for kind "{kind}" (known kinds: {known})')
    accepted = tuple(dict.fromkeys((info.api_version, API_VERSION)))
    if api_version not in accepted:
        raise ManifestError(
            f'no matches for kind "{kind}" in version "{api_version}" '
            f"(accepted: {', '.join(accepted)})"
        )
    return info


def parse_object(doc: Any, index: int = 1) -> ManifestObject:
    """One document (a dict in Kubernetes JSON shape) as a typed object."""
    if not isinstance(doc, dict):
        raise ManifestError(f"expected an object, got {type(doc).__name__}")
    info = kind_of(doc)
    obj, _ = parse_as(info, doc)
    return ManifestObject(info, obj, index)


def parse_as(
    info: KindInfo, doc: dict[str, Any], *, drop_unknown: bool = False
) -> tuple[Message, list[str]]:
    """`doc` as an object of kind `info`, which the caller already knows (a REST path names
    it; apiVersion and kind in `doc` are not checked here). Returns the object and the paths
    of the unknown fields: with `drop_unknown` they are left out of the object (Kubernetes'
    fieldValidation Warn and Ignore), otherwise they are a ManifestError as in `parse_object`.
    Other errors (a wrong JSON type) are always a ManifestError.
    """
    body = copy.deepcopy(doc)
    body["apiVersion"] = info.api_version
    if info.message.DESCRIPTOR.full_name.startswith(CUSTOM_PREFIX):
        body = custom_body(info.message.DESCRIPTOR, body)
    errors: list[str] = []
    unknown: list[str] | None = [] if drop_unknown else None
    _check_fields(info.message.DESCRIPTOR, body, "", errors, unknown)
    if errors:
        raise ManifestError("; ".join(errors))
    obj = info.message()
    try:
        json_format.ParseDict(body, obj, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise ManifestError(_clean_parse_error(str(exc))) from exc
    except (OverflowError, ValueError, TypeError) as exc:
        # A number protobuf cannot hold where any JSON is allowed (a Struct: a 400-digit
        # integer is past a double).
        raise ManifestError(f"a value cannot be stored: {exc}") from exc
    return obj, unknown or []


# Descriptors are typed Any: protobuf 7 hands out upb descriptors its stubs do not describe.
def _field_map(desc: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in desc.fields:
        fields[f.name] = f
        fields[f.json_name] = f
    return fields


def _is_map(f: Any) -> bool:
    return (
        f.type == FieldDescriptor.TYPE_MESSAGE
        and f.message_type is not None
        and f.message_type.GetOptions().map_entry
    )


def _is_repeated(f: Any) -> bool:
    return bool(f.is_repeated)


def _is_plain_message(f: Any) -> bool:
    # Well-known types (Timestamp, ...) have their own JSON forms; ParseDict checks those.
    return (
        f.type == FieldDescriptor.TYPE_MESSAGE
        and f.message_type is not None
        and not f.message_type.full_name.startswith("google.protobuf.")
    )


def _check_fields(
    desc: Any,
    value: dict[str, Any],
    path: str,
    errors: list[str],
    unknown: list[str] | None = None,
) -> None:
    """Collect unknown fields with full paths; turn YAML numbers in quantity maps into strings.

    With an `unknown` list, unknown fields are removed from `value` and their paths go there
    instead of into `errors`.

    A field holding exactly the zero Kubernetes always prints for it (`resources: {}`,
    `restartCount: 0`, `divisor: "0"`) is dropped, so an object read back from what
    `to_dict` printed (kubectl edit, replace, a PATCH) is the object it was, not one with
    empty messages set where there were none."""
    zeros = ZERO_FIELDS.get(desc.full_name)
    if zeros:
        for key, zero in zeros.items():
            if key in value and value[key] == zero and type(value[key]) is type(zero):
                del value[key]
    fields = _field_map(desc)
    for key, item in list(value.items()):
        here = f"{path}.{key}" if path else str(key)
        f = fields.get(str(key))
        if f is None:
            if unknown is not None:
                unknown.append(here)
                del value[key]
            else:
                errors.append(f'unknown field "{here}"')
            continue
        if item is None:
            continue
        if _is_map(f):
            if not isinstance(item, dict):
                errors.append(f"{here}: expected an object, got {type(item).__name__}")
                continue
            value_field = f.message_type.fields_by_name["value"]
            for map_key, map_value in list(item.items()):
                if _is_plain_message(value_field) and isinstance(map_value, dict):
                    _check_fields(
                        value_field.message_type, map_value, f"{here}.{map_key}", errors, unknown
                    )
                elif (
                    f.name in QUANTITY_MAPS
                    and value_field.type == FieldDescriptor.TYPE_STRING
                    and isinstance(map_value, int | float)
                    and not isinstance(map_value, bool)
                ):
                    item[map_key] = str(map_value)
        elif _is_repeated(f):
            if not isinstance(item, list):
                errors.append(f"{here}: expected a list, got {type(item).__name__}")
                continue
            if _is_plain_message(f):
                for i, element in enumerate(item):
                    if isinstance(element, dict):
                        _check_fields(f.message_type, element, f"{here}[{i}]", errors, unknown)
                    else:
                        errors.append(f"{here}[{i}]: expected an object")
            elif f.type != FieldDescriptor.TYPE_MESSAGE:
                for i, element in enumerate(item):
                    _check_scalar(f, element, f"{here}[{i}]", errors)
        elif _is_plain_message(f):
            if not isinstance(item, dict):
                errors.append(f"{here}: expected an object, got {type(item).__name__}")
                continue
            _check_fields(f.message_type, item, here, errors, unknown)
        elif (
            (desc.full_name, f.name) in QUANTITY_FIELDS
            and isinstance(item, int | float)
            and not isinstance(item, bool)
        ):
            value[key] = str(item)
        elif f.type != FieldDescriptor.TYPE_MESSAGE:
            _check_scalar(f, item, here, errors)
        elif (
            f.message_type.full_name == _VALUE
            and not _is_repeated(f)
            and not desc.full_name.startswith(CUSTOM_PREFIX)
        ):
            _check_int_or_string(item, here, errors)


# The range of each integer type, for a value that fits none of them ("replicas: 1e10").
_INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: ("int32", -(2**31), 2**31 - 1),
    FieldDescriptor.CPPTYPE_UINT32: ("uint32", 0, 2**32 - 1),
    FieldDescriptor.CPPTYPE_INT64: ("int64", -(2**63), 2**63 - 1),
    FieldDescriptor.CPPTYPE_UINT64: ("uint64", 0, 2**64 - 1),
}
_SCALAR_JSON_TYPES = {
    FieldDescriptor.CPPTYPE_BOOL: ("boolean",),
    FieldDescriptor.CPPTYPE_DOUBLE: ("number", "integer"),
    FieldDescriptor.CPPTYPE_FLOAT: ("number", "integer"),
    FieldDescriptor.CPPTYPE_STRING: ("string",),
}
_DECIMAL = re.compile(r"-?[0-9]{1,30}")


def _json_type(value: Any) -> str:
    """The JSON type of a YAML/JSON value, as Kubernetes' validation names it."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _check_scalar(f: Any, value: Any, here: str, errors: list[str]) -> None:
    """A scalar field's value has its JSON type (and an integer fits the field), so protobuf's
    parser, whose messages are Python's own ("invalid literal for int()"), never sees one that
    does not."""
    if value is None:
        return
    got = _json_type(value)
    if f.cpp_type in _INT_RANGES:
        name, low, high = _INT_RANGES[f.cpp_type]
        integral = (
            got == "integer"
            or (got == "number" and value.is_integer())
            or (got == "string" and _DECIMAL.fullmatch(value) is not None)  # int64's JSON form
        )
        if not integral:
            errors.append(f"{here}: invalid type: got {got} {_short(value)}, expected integer")
        elif not low <= int(value) <= high:
            errors.append(f"{here}: value {_short(value)} is out of range for {name}")
        return
    expected = _SCALAR_JSON_TYPES.get(f.cpp_type)
    if f.cpp_type == FieldDescriptor.CPPTYPE_STRING and f.type != FieldDescriptor.TYPE_STRING:
        expected = None  # bytes: base64 text, which protobuf's parser checks
    if expected is not None and got not in expected:
        errors.append(f"{here}: invalid type: got {got} {_short(value)}, expected {expected[0]}")


def _check_int_or_string(value: Any, here: str, errors: list[str]) -> None:
    """An IntOrString (every google.protobuf.Value field): a string, or a JSON integer that fits
    Kubernetes' int32 (its IntVal), as intstr.IntOrString's UnmarshalJSON reads it. NaN,
    infinities, fractions and numbers past int32 are refused here, before protobuf turns them
    into doubles that JSON cannot print again. (A whole number written as 80.0 is taken as 80:
    protobuf's own JSON of an IntOrString prints it so.)"""
    if isinstance(value, str):
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        errors.append(
            f"{here}: invalid type: got {_json_type(value)} {_short(value)}, expected an "
            "integer or a string (IntOrString)"
        )
        return
    whole = not isinstance(value, float) or value.is_integer()  # NaN and infinities are not
    if not whole or not _INT32_LOW <= int(value) <= _INT32_HIGH:
        errors.append(
            f"{here}: json: cannot unmarshal number {_short(value)} into Go value of type int32"
        )


_INT32_LOW, _INT32_HIGH = -(2**31), 2**31 - 1


def _short(value: Any) -> str:
    """A value as JSON, cut short: a message must not echo a 5,000-digit number in full."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_PARSE_PREFIX = re.compile(r"Failed to parse (\w+) field: ")


def _clean_parse_error(message: str) -> str:
    """protobuf's nested "Failed to parse spec field: Failed to parse x field: why" as
    "spec.x: why"."""
    path: list[str] = []
    rest = message
    while True:
        match = _PARSE_PREFIX.match(rest)
        if not match:
            break
        path.append(match.group(1))
        rest = rest[match.end() :]
    rest = rest.split("\n", 1)[0].rstrip(".") or "invalid value"
    return f"{'.'.join(path)}: {rest}" if path else rest


# ---- output -------------------------------------------------------------------------------


def to_dict(obj: Message, *, zero_fields: bool = True) -> dict[str, Any]:
    """The object as Kubernetes JSON: lowerCamel names, empty fields omitted, int64 as numbers,
    map keys sorted.

    With `zero_fields` (what every printed object wants) the fields Kubernetes prints even
    when they hold their zero value are there too (`restartCount: 0`, `ready: false`,
    `imageID: ""`, `lastState: {}`, `lastProbeTime: null`): each field its OpenAPI requires and
    each its Go types serialize without omitempty, from the generated `tinykube.zerofields`
    table. Code that compares or hashes objects (apply's merge, managedFields, template
    hashes) asks for the bare form, which stays what proto3 holds."""
    data: dict[str, Any] = json_format.MessageToDict(obj)
    _normalise_output(obj.DESCRIPTOR, data, zero_fields)
    return data


# What `_normalise_output` does to a field's JSON value (fields needing nothing are not listed).
_MAP, _MESSAGE, _MICRO, _INT64, _VALUE_INT, _WHOLE, _SPREAD = range(7)


@dataclass(frozen=True)
class _Shape:
    """What `_normalise_output` needs of one message type, computed once per type."""

    # JSON name -> (action, the message type of the value or map value, repeated)
    fields: dict[str, tuple[int, Any, bool]]
    # (JSON name, zero value, whether the value must be copied: a dict or list)
    zeros: tuple[tuple[str, Any, bool], ...]


_SHAPES: dict[str, _Shape] = {}


def _shape(desc: Any) -> _Shape:
    shape = _SHAPES.get(desc.full_name)
    if shape is None:
        fields: dict[str, tuple[int, Any, bool]] = {}
        for f in desc.fields:
            repeated = _is_repeated(f)
            if _is_map(f):
                value_field = f.message_type.fields_by_name["value"]
                sub = value_field.message_type if _is_plain_message(value_field) else None
                fields[f.json_name] = (_MAP, sub, False)
            elif _is_plain_message(f):
                fields[f.json_name] = (_MESSAGE, f.message_type, repeated)
            elif (desc.full_name, f.name) in MICRO_TIME_FIELDS:
                fields[f.json_name] = (_MICRO, None, repeated)
            elif f.cpp_type in _INT64_TYPES:
                fields[f.json_name] = (_INT64, None, repeated)
            elif desc.full_name.startswith(CUSTOM_PREFIX) and _holds_unknown(f):
                fields[f.json_name] = (_SPREAD, None, False)
            elif desc.full_name.startswith(CUSTOM_PREFIX) and f.message_type is not None:
                fields[f.json_name] = (_WHOLE, None, repeated)
            elif f.message_type is not None and f.message_type.full_name == _VALUE:
                fields[f.json_name] = (_VALUE_INT, None, repeated)
            elif (desc.full_name, f.name) in _WHOLE_STRUCTS:
                fields[f.json_name] = (_WHOLE, None, repeated)
        zeros = ZERO_FIELDS.get(desc.full_name, {})
        shape = _Shape(fields, tuple((k, v, isinstance(v, dict | list)) for k, v in zeros.items()))
        _SHAPES[desc.full_name] = shape
    return shape


def _normalise_output(desc: Any, data: dict[str, Any], zero_fields: bool = False) -> None:
    shape = _shape(desc)
    fields = shape.fields
    spread: dict[str, Any] | None = None
    for key, value in data.items():
        entry = fields.get(key)
        if entry is None:
            continue
        action, sub, repeated = entry
        if action == _SPREAD:
            spread = value
        elif action == _MESSAGE:
            for element in value if repeated else [value]:
                _normalise_output(sub, element, zero_fields)
        elif action == _MAP:
            # Maps come out of protobuf in hash order; kubectl prints keys sorted.
            data[key] = value = dict(sorted(value.items()))
            if sub is not None:
                for v in value.values():
                    _normalise_output(sub, v, zero_fields)
        elif action == _INT64:
            # proto3 JSON writes int64 as strings (for JavaScript); kubectl users expect numbers.
            data[key] = [int(v) for v in value] if repeated else int(value)
        elif action == _MICRO:
            if isinstance(value, str):
                data[key] = micro_time(value)
        elif action == _VALUE_INT:
            # IntOrString: protobuf prints a number as a float (8080.0), Kubernetes as an int.
            if isinstance(value, float) and value.is_integer():
                data[key] = int(value)
        else:
            data[key] = whole_numbers(value)
    if spread is not None:
        # A custom object's top-level fields its schema does not name, kept under a root
        # x-kubernetes-preserve-unknown-fields: back where they were written.
        del data[UNKNOWN_FIELDS]
        for key, value in spread.items():
            data.setdefault(key, whole_numbers(value))
    if zero_fields:
        # proto3 dropped these zero values; the table's (a handful per message) are complete,
        # nested zeros included, so what is added here needs no walk of its own.
        for key, value, mutable in shape.zeros:
            if key not in data:
                data[key] = _copy_json(value) if mutable else value


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


# A custom object's JSON is held in google.protobuf.Values, whose numbers are doubles: exact
# to 2^53. Kubernetes keeps a custom object's integers as int64, so one beyond 2^53 (within
# int64) rides in its Value as this one-key object (`hold_big_ints`), and `to_dict` gives the
# integer back. (A NUL starts no key a person writes; past int64, kube too has a float64.)
BIG_INT_KEY = "\u0000int64"
_EXACT_IN_DOUBLE = 2**53
_INT64_LOW, _INT64_HIGH = -(2**63), 2**63 - 1


# The field of a custom kind's message holding the top-level fields its schema does not name,
# kept when the schema's root has x-kubernetes-preserve-unknown-fields (apiserver/crd/serving.py
# adds it); `custom_body` fills it and `to_dict` spreads it back over the top level.
UNKNOWN_FIELDS = "x__unknown_fields"
_HEAD_FIELDS = ("apiVersion", "kind", "metadata")
_KNOWN: dict[str, tuple[frozenset[str], bool]] = {}


def custom_body(desc: Any, data: dict[str, Any]) -> dict[str, Any]:
    """A custom object's JSON shaped for its message `desc`: integers beyond 2^53 held
    (hold_big_ints), and, if the message keeps unknown top-level fields, those moved into its
    UNKNOWN_FIELDS field. Fields it neither names nor keeps stay as they are (unknown)."""
    known = _KNOWN.get(desc.full_name)
    if known is None:
        keeps = any(_holds_unknown(f) for f in desc.fields)
        names = frozenset(f.json_name for f in desc.fields if not _holds_unknown(f))
        known = _KNOWN[desc.full_name] = (names, keeps)
    names, keeps = known
    out: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key in _HEAD_FIELDS:
            out[key] = value
        elif key in names or not keeps:
            out[key] = hold_big_ints(value)
        else:
            extra[key] = hold_big_ints(value)
    if extra:
        out[UNKNOWN_FIELDS] = extra
    return out


def _holds_unknown(f: Any) -> bool:
    """The UNKNOWN_FIELDS Struct of a custom kind's message (not a property so named)."""
    return bool(
        f.name == UNKNOWN_FIELDS
        and f.message_type is not None
        and f.message_type.full_name == "google.protobuf.Struct"
    )


def hold_big_ints(value: Any) -> Any:
    """`value` (JSON) with every integer a double cannot hold exactly, and int64 can, wrapped
    for a google.protobuf.Value (see BIG_INT_KEY)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > _EXACT_IN_DOUBLE and _INT64_LOW <= value <= _INT64_HIGH:
            return {BIG_INT_KEY: str(value)}
        return value
    if isinstance(value, dict):
        return {k: hold_big_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hold_big_ints(v) for v in value]
    return value


def whole_numbers(value: Any) -> Any:
    """JSON as it was written: protobuf's Struct and Value hold every number as a double, so
    whole ones (80.0) go back to integers (80), inside objects and lists too, and an integer
    held for being beyond a double (BIG_INT_KEY) is given back."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        if len(value) == 1 and BIG_INT_KEY in value:
            return int(value[BIG_INT_KEY])
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def micro_time(text: str) -> str:
    """An RFC 3339 UTC time from protobuf's JSON as a metav1.MicroTime: six digits."""
    if not text.endswith("Z"):
        return text
    whole, _, fraction = text[:-1].partition(".")
    return f"{whole}.{(fraction + '000000')[:6]}Z"


def _list_dict(objs: Sequence[Message], resource_version: str = "") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "items": [to_dict(o) for o in objs],
        "kind": "List",
        "metadata": {"resourceVersion": resource_version},
    }


def to_yaml(objs: Message | Iterable[Message], *, resource_version: str = "") -> str:
    """One object as a YAML document, several as a `kind: List` (as `kubectl get -o yaml`)."""
    data = to_dict(objs) if isinstance(objs, Message) else _list_dict(list(objs), resource_version)
    return str(yaml.safe_dump(data, sort_keys=True, default_flow_style=False))


def to_json(objs: Message | Iterable[Message], *, resource_version: str = "") -> str:
    """One object, or several as a `kind: List`, as indented JSON (as `kubectl get -o json`)."""
    data = to_dict(objs) if isinstance(objs, Message) else _list_dict(list(objs), resource_version)
    return json.dumps(data, indent=4, sort_keys=True) + "\n"
