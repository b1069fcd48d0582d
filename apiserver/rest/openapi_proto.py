"""The OpenAPI v2 document in protobuf, as client-go's discovery asks for it.

client-go fetches /openapi/v2 only with Accept
`application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and parses the body as gnostic's
`openapi.v2.Document`. This module writes that wire format directly from the JSON-shaped document
openapi.py builds: the field numbers are gnostic's public schema (openapiv2/OpenAPIv2.proto), the
encoding is protobuf's (varints, length-delimited fields). Only the parts of OpenAPI 2.0 the
document uses are supported; anything else raises ValueError naming where it is, so the two
encodings cannot silently drift apart. Vendor extensions and enum values travel as gnostic does,
as YAML text (JSON is YAML, so they are written as JSON).

Pure functions, no state: called once when the documents are built.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from typing import Any

from tinykube.protowire import delimited as _len
from tinykube.protowire import field_key as _key
from tinykube.protowire import varint_bytes as _varint

JSON = dict[str, Any]


def encode_document(doc: JSON) -> bytes:
    """The gnostic openapi.v2.Document of a Swagger 2.0 document in JSON form."""
    return _fields(
        doc,
        "document",
        {
            "swagger": (1, _string),
            "info": (2, _info),
            "host": (3, _string),
            "basePath": (4, _string),
            "schemes": (5, _strings),
            "consumes": (6, _strings),
            "produces": (7, _strings),
            "paths": (8, _paths),
            "definitions": (9, _definitions),
            "security": (12, _security),
            "securityDefinitions": (13, _security_definitions),
        },
        vendor=16,
    )


# -- wire format (varints and length-delimited fields: tinykube/protowire.py) -----------------


# An encoder takes (field number, JSON value, where) and returns the field's bytes.
Encoder = Callable[[int, Any, str], bytes]


def _string(number: int, value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {value!r}")
    return _len(number, value.encode()) if value else b""


def _strings(number: int, value: Any, where: str) -> bytes:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of strings, got {value!r}")
    return b"".join(_len(number, _check_str(v, where).encode()) for v in value)


def _check_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {value!r}")
    return value


def _bool(number: int, value: Any, where: str) -> bytes:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected a boolean, got {value!r}")
    return _key(number, 0) + b"\x01" if value else b""


def _int(number: int, value: Any, where: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    return _key(number, 0) + _varint(value) if value else b""


def _double(number: int, value: Any, where: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    return _key(number, 1) + struct.pack("<d", float(value)) if value else b""


def _any(number: int, value: Any, where: str) -> bytes:
    # gnostic's Any: field 2 is the value as YAML text.
    return _len(number, _len(2, json.dumps(value, sort_keys=True).encode()))


def _anys(number: int, value: Any, where: str) -> bytes:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {value!r}")
    return b"".join(_any(number, v, f"{where}[{i}]") for i, v in enumerate(value))


def _fields(
    obj: Any, where: str, table: dict[str, tuple[int, Encoder]], vendor: int | None = None
) -> bytes:
    """Encode a JSON object field by field; x- keys become NamedAny vendor extensions."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, got {obj!r}")
    out = bytearray()
    for key in sorted(obj):
        value = obj[key]
        if key.startswith("x-") and vendor is not None:
            out += _len(vendor, _named(key, _any(2, value, f"{where}.{key}")))
            continue
        entry = table.get(key)
        if entry is None:
            raise ValueError(f"{where}: {key!r} has no protobuf encoding")
        number, encode = entry
        out += encode(number, value, f"{where}.{key}")
    return bytes(out)


def _message(table: dict[str, tuple[int, Encoder]], vendor: int | None = None) -> Encoder:
    def encode(number: int, value: Any, where: str) -> bytes:
        return _len(number, _fields(value, where, table, vendor))

    return encode


def _named(name: str, value_field: bytes) -> bytes:
    """A gnostic Named* message: name is field 1, the value field 2 (already encoded)."""
    return _len(1, name.encode()) + value_field


def _named_map(number: int, obj: Any, where: str, value: Encoder) -> bytes:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, got {obj!r}")
    return b"".join(_len(number, _named(k, value(2, obj[k], f"{where}.{k}"))) for k in sorted(obj))


def _each(value: Any, where: str) -> Iterable[tuple[int, Any]]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {value!r}")
    return enumerate(value)


# -- OpenAPI 2.0 objects -----------------------------------------------------------------------

_info = _message({"title": (1, _string), "version": (2, _string), "description": (3, _string)}, 7)


def _schema(number: int, value: Any, where: str) -> bytes:
    return _len(number, _fields(value, where, _SCHEMA, vendor=31))


def _schema_type(number: int, value: Any, where: str) -> bytes:
    # TypeItem: repeated string value = 1.
    values = value if isinstance(value, list) else [value]
    return _len(number, _strings(1, values, where))


def _schema_items(number: int, value: Any, where: str) -> bytes:
    # ItemsItem: repeated Schema schema = 1.
    items = value if isinstance(value, list) else [value]
    return _len(number, b"".join(_schema(1, v, f"{where}[{i}]") for i, v in _each(items, where)))


def _additional_properties(number: int, value: Any, where: str) -> bytes:
    # AdditionalPropertiesItem: oneof { Schema schema = 1; bool boolean = 2; }.
    if isinstance(value, bool):
        return _len(number, _key(2, 0) + (b"\x01" if value else b"\x00"))
    return _len(number, _schema(1, value, where))


def _properties(number: int, value: Any, where: str) -> bytes:
    # Properties: repeated NamedSchema additional_properties = 1.
    return _len(number, _named_map(1, value, where, _schema))


def _all_of(number: int, value: Any, where: str) -> bytes:
    return b"".join(_schema(number, v, f"{where}[{i}]") for i, v in _each(value, where))


_SCHEMA: dict[str, tuple[int, Encoder]] = {
    "$ref": (1, _string),
    "format": (2, _string),
    "title": (3, _string),
    "description": (4, _string),
    "default": (5, _any),
    "maximum": (7, _double),
    "minimum": (9, _double),
    "maxLength": (11, _int),
    "minLength": (12, _int),
    "pattern": (13, _string),
    "maxItems": (14, _int),
    "minItems": (15, _int),
    "uniqueItems": (16, _bool),
    "required": (19, _strings),
    "enum": (20, _anys),
    "additionalProperties": (21, _additional_properties),
    "type": (22, _schema_type),
    "items": (23, _schema_items),
    "allOf": (24, _all_of),
    "properties": (25, _properties),
    "readOnly": (27, _bool),
}


def _definitions(number: int, value: Any, where: str) -> bytes:
    # Definitions: repeated NamedSchema additional_properties = 1.
    return _len(number, _named_map(1, value, where, _schema))


# Query and path parameters have their own messages with different field numbers.
_QUERY: dict[str, tuple[int, Encoder]] = {
    "required": (1, _bool),
    "in": (2, _string),
    "description": (3, _string),
    "name": (4, _string),
    "type": (6, _string),
    "format": (7, _string),
    "default": (10, _any),
    "uniqueItems": (20, _bool),
    "enum": (21, _anys),
}
_PATH: dict[str, tuple[int, Encoder]] = {
    "required": (1, _bool),
    "in": (2, _string),
    "description": (3, _string),
    "name": (4, _string),
    "type": (5, _string),
    "format": (6, _string),
    "default": (9, _any),
    "uniqueItems": (19, _bool),
    "enum": (20, _anys),
}
_BODY: dict[str, tuple[int, Encoder]] = {
    "description": (1, _string),
    "name": (2, _string),
    "in": (3, _string),
    "required": (4, _bool),
    "schema": (5, _schema),
}


_JSON_REFERENCE: dict[str, tuple[int, Encoder]] = {
    "$ref": (1, _string),
    "description": (2, _string),
}


def _parameter_item(value: Any, where: str) -> bytes:
    """A ParametersItem: a Parameter (field 1) or a JsonReference (field 2)."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {value!r}")
    if "$ref" in value:
        return _len(2, _fields(value, where, _JSON_REFERENCE))
    location = value.get("in")
    if location == "body":
        parameter = _len(1, _fields(value, where, _BODY, vendor=6))
    elif location == "query":
        parameter = _len(2, _len(3, _fields(value, where, _QUERY, vendor=23)))
    elif location == "path":
        parameter = _len(2, _len(4, _fields(value, where, _PATH, vendor=22)))
    else:
        raise ValueError(f"{where}: parameters in {location!r} have no protobuf encoding")
    return _len(1, parameter)


def _parameters(number: int, value: Any, where: str) -> bytes:
    return b"".join(
        _len(number, _parameter_item(v, f"{where}[{i}]")) for i, v in _each(value, where)
    )


def _response(number: int, value: Any, where: str) -> bytes:
    # ResponseValue { Response response = 1; }; Response { description 1; SchemaItem schema 2 }
    # and SchemaItem { Schema schema = 1; }.
    def schema_item(n: int, v: Any, w: str) -> bytes:
        return _len(n, _schema(1, v, w))

    response = _fields(value, where, {"description": (1, _string), "schema": (2, schema_item)}, 5)
    return _len(number, _len(1, response))


def _responses(number: int, value: Any, where: str) -> bytes:
    # Responses: repeated NamedResponseValue response_code = 1.
    return _len(number, _named_map(1, value, where, _response))


_operation = _message(
    {
        "tags": (1, _strings),
        "summary": (2, _string),
        "description": (3, _string),
        "operationId": (5, _string),
        "produces": (6, _strings),
        "consumes": (7, _strings),
        "parameters": (8, _parameters),
        "responses": (9, _responses),
        "schemes": (10, _strings),
        "deprecated": (11, _bool),
    },
    vendor=13,
)

_path_item = _message(
    {
        "$ref": (1, _string),
        "get": (2, _operation),
        "put": (3, _operation),
        "post": (4, _operation),
        "delete": (5, _operation),
        "options": (6, _operation),
        "head": (7, _operation),
        "patch": (8, _operation),
        "parameters": (9, _parameters),
    },
    vendor=10,
)


def _paths(number: int, value: Any, where: str) -> bytes:
    # Paths: repeated NamedPathItem path = 2.
    return _len(number, _named_map(2, value, where, _path_item))


def _security(number: int, value: Any, where: str) -> bytes:
    # SecurityRequirement { repeated NamedStringArray additional_properties = 1; } with
    # StringArray { repeated string value = 1; }.
    def string_array(n: int, v: Any, w: str) -> bytes:
        return _len(n, _strings(1, v, w))

    return b"".join(
        _len(number, _named_map(1, v, f"{where}[{i}]", string_array))
        for i, v in _each(value, where)
    )


_api_key = _message(
    {"type": (1, _string), "name": (2, _string), "in": (3, _string), "description": (4, _string)},
    vendor=5,
)


def _security_definitions(number: int, value: Any, where: str) -> bytes:
    # SecurityDefinitions { repeated NamedSecurityDefinitionsItem additional_properties = 1; };
    # the item is a oneof whose api_key_security is field 2.
    def item(n: int, v: Any, w: str) -> bytes:
        if not isinstance(v, dict) or v.get("type") != "apiKey":
            raise ValueError(f"{w}: only apiKey security definitions have an encoding")
        return _len(n, _api_key(2, v, w))

    return _len(number, _named_map(1, value, where, item))
