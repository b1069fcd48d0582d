"""apiserver/crd/schema.py: CRD schema checks, and validation, pruning and defaulting of custom
objects, with kube's messages (apiextensions-apiserver and kube-openapi)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver.crd.schema import (
    compile_schema,
    default,
    field_path_problem,
    go_float,
    go_json,
    prune,
    schema_problems,
    validate,
)

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def obj_schema(**spec_props: Any) -> dict[str, Any]:
    """A CRD root schema whose spec has the given properties."""
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": dict(spec_props)}},
    }


def cr(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": spec,
    }


def messages(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    return [str(e) for e in validate(value, schema, path)]


# ---------------------------------------------------------------------------------------------
# validate: one field, one check


VALUE_CASES: list[tuple[str, dict[str, Any], Any, list[str]]] = [
    ("integer ok", {"type": "integer"}, 3, []),
    (
        "string for integer",
        {"type": "integer"},
        "string",
        ['spec.x: Invalid value: "string": spec.x in body must be of type integer: "string"'],
    ),
    ("integral float for integer", {"type": "integer"}, 3.0, []),
    (
        "fraction for integer",
        {"type": "integer"},
        1.5,
        [
            'spec.x: Invalid value: "number": spec.x in body must be of type integer: "number"',
            '<nil>: Invalid value: "": Checked value must be of type integer (default format) '
            "in spec.x",
        ],
    ),
    ("integer for number", {"type": "number"}, 3, []),
    (
        "bool is no integer",
        {"type": "integer"},
        True,
        ['spec.x: Invalid value: "boolean": spec.x in body must be of type integer: "boolean"'],
    ),
    (
        "null when not nullable",
        {"type": "string"},
        None,
        ['spec.x: Invalid value: "null": spec.x in body must be of type string: "null"'],
    ),
    ("null when nullable", {"type": "string", "nullable": True}, None, []),
    (
        "object for array",
        {"type": "array", "items": {"type": "string"}},
        {},
        ['spec.x: Invalid value: "object": spec.x in body must be of type array: "object"'],
    ),
    ("int-or-string int", {"x-kubernetes-int-or-string": True}, 3, []),
    ("int-or-string string", {"x-kubernetes-int-or-string": True}, "50%", []),
    (
        "int-or-string bool",
        {"x-kubernetes-int-or-string": True},
        True,
        [
            'spec.x: Invalid value: "boolean": spec.x in body must be of type integer,string: '
            '"boolean"'
        ],
    ),
    (
        "enum",
        {"type": "string", "enum": ["a", "b"]},
        "x",
        ['spec.x: Unsupported value: "x": supported values: "a", "b"'],
    ),
    (
        "enum of numbers",
        {"type": "integer", "enum": [1, 2]},
        3,
        ['spec.x: Unsupported value: 3: supported values: "1", "2"'],
    ),
    ("enum int matches float", {"type": "number", "enum": [1, 2.5]}, 1.0, []),
    (
        "enum bool is no number",
        {"type": "integer", "enum": [1]},
        True,
        [
            'spec.x: Invalid value: "boolean": spec.x in body must be of type integer: "boolean"',
            'spec.x: Unsupported value: true: supported values: "1"',
        ],
    ),
    (
        "minimum",
        {"type": "integer", "minimum": 1},
        0,
        ["spec.x: Invalid value: 0: spec.x in body should be greater than or equal to 1"],
    ),
    (
        "exclusive minimum",
        {"type": "integer", "minimum": 1, "exclusiveMinimum": True},
        1,
        ["spec.x: Invalid value: 1: spec.x in body should be greater than 1"],
    ),
    (
        "maximum",
        {"type": "number", "maximum": 2.5},
        3.5,
        ["spec.x: Invalid value: 3.5: spec.x in body should be less than or equal to 2.5"],
    ),
    (
        "exclusive maximum",
        {"type": "integer", "maximum": 10, "exclusiveMaximum": True},
        10,
        ["spec.x: Invalid value: 10: spec.x in body should be less than 10"],
    ),
    (
        "multipleOf",
        {"type": "integer", "multipleOf": 5},
        7,
        ["spec.x: Invalid value: 7: spec.x in body should be a multiple of 5"],
    ),
    ("multipleOf float ok", {"type": "number", "multipleOf": 0.5}, 2.5, []),
    (
        "multipleOf float",
        {"type": "number", "multipleOf": 0.5},
        2.3,
        ["spec.x: Invalid value: 2.3: spec.x in body should be a multiple of 0.5"],
    ),
    (
        "int32 range",
        {"type": "integer", "format": "int32"},
        2**31,
        [
            '<nil>: Invalid value: "": Checked value must be of type integer with format int32 '
            "in spec.x"
        ],
    ),
    ("int64 format is unchecked within int64", {"type": "integer", "format": "int64"}, 2**40, []),
    (
        "maxLength counts characters",
        {"type": "string", "maxLength": 3},
        "äöü",
        [],
    ),
    (
        "maxLength",
        {"type": "string", "maxLength": 3},
        "abcd",
        ["spec.x: Too long: may not be more than 3 bytes"],
    ),
    (
        "maxLength 1",
        {"type": "string", "maxLength": 1},
        "ab",
        ["spec.x: Too long: may not be more than 1 byte"],
    ),
    (
        "minLength",
        {"type": "string", "minLength": 3},
        "ab",
        ['spec.x: Invalid value: "ab": spec.x in body should be at least 3 chars long'],
    ),
    (
        "string checks stop at the first failure",
        {"type": "string", "maxLength": 2, "pattern": "^[a-z]+$"},
        "ABC",
        ["spec.x: Too long: may not be more than 2 bytes"],
    ),
    (
        "pattern",
        {"type": "string", "pattern": "^[a-z]+$"},
        "Abc",
        ["spec.x: Invalid value: \"Abc\": spec.x in body should match '^[a-z]+$'"],
    ),
    ("pattern is unanchored", {"type": "string", "pattern": "[0-9]"}, "ab1", []),
    (
        "pattern $ is the end of text (RE2), not before a trailing newline",
        {"type": "string", "pattern": "^[a-z]+$"},
        "abc\n",
        ["spec.x: Invalid value: \"abc\\n\": spec.x in body should match '^[a-z]+$'"],
    ),
    (
        "pattern \\d is ASCII (RE2)",
        {"type": "string", "pattern": "^\\d+$"},
        "١٢",
        ["spec.x: Invalid value: \"١٢\": spec.x in body should match '^\\d+$'"],
    ),
    (
        "date",
        {"type": "string", "format": "date"},
        "2026-02-30",
        ['spec.x: Invalid value: "2026-02-30": spec.x in body must be of type date: "2026-02-30"'],
    ),
    ("date ok", {"type": "string", "format": "date"}, "2026-02-28", []),
    ("date-time ok", {"type": "string", "format": "date-time"}, "2026-12-05T19:30:00Z", []),
    (
        "date-time",
        {"type": "string", "format": "date-time"},
        "yesterday",
        [
            'spec.x: Invalid value: "yesterday": spec.x in body must be of type date-time: '
            '"yesterday"'
        ],
    ),
    ("uuid ok", {"type": "string", "format": "uuid"}, "0A2E8E2C-1C5B-4B2C-9A4E-7E6F3E5E2B11", []),
    (
        "uuid",
        {"type": "string", "format": "uuid"},
        "nope",
        ['spec.x: Invalid value: "nope": spec.x in body must be of type uuid: "nope"'],
    ),
    ("byte ok", {"type": "string", "format": "byte"}, "aGVsbG8=", []),
    (
        "byte",
        {"type": "string", "format": "byte"},
        "not base64!",
        [
            'spec.x: Invalid value: "not base64!": spec.x in body must be of type byte: '
            '"not base64!"'
        ],
    ),
    ("ipv4 ok", {"type": "string", "format": "ipv4"}, "10.0.0.1", []),
    (
        "ipv4",
        {"type": "string", "format": "ipv4"},
        "10.0.0",
        ['spec.x: Invalid value: "10.0.0": spec.x in body must be of type ipv4: "10.0.0"'],
    ),
    ("cidr ok", {"type": "string", "format": "cidr"}, "10.0.0.0/8", []),
    ("unknown format is ignored", {"type": "string", "format": "color-of-sky"}, "blue", []),
    ("password accepts anything", {"type": "string", "format": "password"}, "", []),
    ("k8s-short-name", {"type": "string", "format": "k8s-short-name"}, "web-1", []),
    (
        "k8s-short-name bad",
        {"type": "string", "format": "k8s-short-name"},
        "Web",
        ['spec.x: Invalid value: "Web": spec.x in body must be of type k8s-short-name: "Web"'],
    ),
    (
        "minItems",
        {"type": "array", "items": {"type": "string"}, "minItems": 2},
        ["a"],
        ["spec.x: Invalid value: 1: spec.x in body should have at least 2 items"],
    ),
    (
        "maxItems",
        {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        ["a", "b", "c", "d"],
        ["spec.x: Too many: 4: must have at most 3 items"],
    ),
    (
        "items are checked with their index",
        {"type": "array", "items": {"type": "integer"}},
        [1, "b"],
        ['spec.x[1]: Invalid value: "string": spec.x[1] in body must be of type integer: "string"'],
    ),
    (
        "uniqueItems",
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        ["a", "a"],
        ['spec.x: Invalid value: "": spec.x in body shouldn\'t contain duplicates'],
    ),
    (
        "minProperties",
        {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 2},
        {"a": "1"},
        ["spec.x: Invalid value: 1: spec.x in body should have at least 2 properties"],
    ),
    (
        "maxProperties",
        {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1},
        {"a": "1", "b": "2"},
        ["spec.x: Too many: 2: must have at most 1 item"],
    ),
    (
        "additionalProperties schema",
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"a": 1, "b": "2"},
        ['spec.x.b: Invalid value: "string": spec.x.b in body must be of type integer: "string"'],
    ),
    (
        "additionalProperties false",
        {"type": "object", "additionalProperties": False},
        {"a": 1},
        ['spec.x: Invalid value: "a": spec.x.a in body is a forbidden property'],
    ),
    (
        "required",
        {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}}},
        {},
        ["spec.x.a: Required value", "spec.x.b: Required value"],
    ),
    (
        "anyOf",
        {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 2}]},
        5,
        [
            '<nil>: Invalid value: "": "spec.x" must validate at least one schema (anyOf)',
            "spec.x: Invalid value: 5: spec.x in body should be greater than or equal to 10",
        ],
    ),
    ("anyOf ok", {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 2}]}, 1, []),
    (
        "oneOf none",
        {"type": "integer", "oneOf": [{"minimum": 10}, {"maximum": 2}]},
        5,
        [
            '<nil>: Invalid value: "": "spec.x" must validate one and only one schema (oneOf). '
            "Found none valid",
            "spec.x: Invalid value: 5: spec.x in body should be greater than or equal to 10",
        ],
    ),
    (
        "oneOf two",
        {"type": "integer", "oneOf": [{"minimum": 1}, {"maximum": 20}]},
        5,
        [
            '<nil>: Invalid value: "": "spec.x" must validate one and only one schema (oneOf). '
            "Found 2 valid alternatives"
        ],
    ),
    (
        "allOf",
        {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 3}]},
        5,
        [
            "spec.x: Invalid value: 5: spec.x in body should be less than or equal to 3",
            '<nil>: Invalid value: "": "spec.x" must validate all the schemas (allOf)',
        ],
    ),
    (
        "not",
        {"type": "string", "not": {"enum": ["forbidden"]}},
        "forbidden",
        ['<nil>: Invalid value: "": "spec.x" must not validate the schema (not)'],
    ),
    (
        "bool for int32: kube-openapi names the format",
        {"type": "integer", "format": "int32"},
        True,
        ['spec.x: Invalid value: "": spec.x in body must be of type int32: ""'],
    ),
    (
        "fraction for int32",
        {"type": "integer", "format": "int32"},
        1.5,
        [
            'spec.x: Invalid value: "float64": spec.x in body must be of type int32: "float64"',
            '<nil>: Invalid value: "": Checked value must be of type integer with format int32 '
            "in spec.x",
        ],
    ),
    (
        "x-kubernetes-preserve-unknown-fields accepts anything",
        {"x-kubernetes-preserve-unknown-fields": True},
        {"a": [1, {"b": None}]},
        [],
    ),
]


@pytest.mark.parametrize(
    ("schema", "value", "want"),
    [pytest.param(s, v, w, id=name) for name, s, v, w in VALUE_CASES],
)
def test_validate_field(schema: dict[str, Any], value: Any, want: list[str]) -> None:
    assert messages(cr(x=value), obj_schema(x=schema)) == want


def test_validate_path_prefix_for_status() -> None:
    status = {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}}
    assert messages({"replicas": -1}, status, "status") == [
        "status.replicas: Invalid value: -1: replicas in body should be greater than or equal to 0"
    ]


def test_validate_root_metadata_is_left_to_the_apiserver() -> None:
    schema = obj_schema(x={"type": "string"})
    obj = cr(x="a")
    obj["metadata"] = {"name": "UPPER", "labels": {"a": "b"}}
    assert validate(obj, schema) == []


# ---------------------------------------------------------------------------------------------
# list types and embedded resources


def test_list_type_set_duplicates() -> None:
    schema = obj_schema(
        x={"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
    )
    assert messages(cr(x=["a", "b", "a", "a"]), schema) == ['spec.x[2]: Duplicate value: "a"']


def test_list_type_set_keeps_1_and_true_apart() -> None:
    schema = obj_schema(x={"type": "array", "x-kubernetes-list-type": "set", "items": {}})
    assert messages(cr(x=[1, True, 1.5]), schema) == []


def test_list_type_map_duplicates() -> None:
    item = {
        "type": "object",
        "required": ["name", "proto"],
        "properties": {"name": {"type": "string"}, "proto": {"type": "string"}},
    }
    schema = obj_schema(
        ports={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name", "proto"],
            "items": item,
        }
    )
    ports = [
        {"name": "a", "proto": "TCP"},
        {"name": "a", "proto": "UDP"},
        {"name": "a", "proto": "TCP"},
    ]
    assert messages(cr(ports=ports), schema) == [
        'spec.ports[2]: Duplicate value: {"name":"a","proto":"TCP"}'
    ]


def test_list_type_map_items_must_be_objects() -> None:
    schema = obj_schema(
        ports={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"x-kubernetes-preserve-unknown-fields": True},
        }
    )
    assert messages(cr(ports=[{"name": "a"}, 3]), schema) == [
        "spec.ports[1]: Invalid value: 3: must be an object for an array of list-type map"
    ]


EMBEDDED = {
    "type": "object",
    "x-kubernetes-embedded-resource": True,
    "x-kubernetes-preserve-unknown-fields": True,
}


def test_embedded_resource_needs_apiversion_and_kind() -> None:
    assert messages(cr(t={"metadata": {"name": "x"}}), obj_schema(t=EMBEDDED)) == [
        "spec.t.apiVersion: Required value",
        "spec.t.kind: Required value",
    ]


def test_embedded_resource_checks_types_and_metadata() -> None:
    value = {"apiVersion": 1, "kind": "not a kind", "metadata": {"labels": {"a": 1}}}
    assert messages(cr(t=value), obj_schema(t=EMBEDDED)) == [
        "spec.t.apiVersion: Invalid value: 1: must be a string",
        'spec.t.kind: Invalid value: "not a kind": may have mixed case, but should otherwise '
        "match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
        "start with an alphabetic character, and end with an alphanumeric character (e.g. "
        "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
        'spec.t.metadata: Invalid value: {"labels":{"a":1}}: json: cannot unmarshal number into '
        "Go struct field ObjectMeta.labels of type string",
    ]


def test_embedded_resource_metadata_name() -> None:
    value = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a/b", "labels": {"-": "x"}}}
    got = messages(cr(t=value), obj_schema(t=EMBEDDED))
    assert got[0] == "spec.t.metadata.name: Invalid value: \"a/b\": may not contain '/'"
    assert got[1].startswith('spec.t.metadata.labels: Invalid value: "-": name part must')


# ---------------------------------------------------------------------------------------------
# prune


def test_prune_drops_unknown_fields_and_reports_them() -> None:
    schema = obj_schema(a={"type": "string"}, b={"type": "object", "properties": {}})
    obj = cr(a="x", b={"c": 1}, z=[1])
    obj["extra"] = True
    obj["metadata"]["bogus"] = "x"
    assert prune(obj, schema) == ["metadata.bogus", "extra", "spec.b.c", "spec.z"]
    assert obj == cr(a="x", b={})


def test_prune_keeps_preserved_fields_but_prunes_inside_known_properties() -> None:
    schema = obj_schema(
        p={
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"known": {"type": "object", "properties": {"k": {"type": "string"}}}},
        }
    )
    obj = cr(p={"free": {"x": 1}, "known": {"k": "v", "drop": 1}})
    assert prune(obj, schema) == ["spec.p.known.drop"]
    assert obj["spec"]["p"] == {"free": {"x": 1}, "known": {"k": "v"}}


def test_prune_additional_properties_and_items() -> None:
    schema = obj_schema(
        m={
            "type": "object",
            "additionalProperties": {"type": "object", "properties": {"a": {"type": "string"}}},
        },
        l={"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
    )
    obj = cr(m={"k": {"a": "1", "b": 2}}, l=[{"a": "1", "c": 3}])
    assert prune(obj, schema) == ["spec.l[0].c", "spec.m.k.b"]
    assert obj["spec"] == {"m": {"k": {"a": "1"}}, "l": [{"a": "1"}]}


def test_prune_embedded_resource_metadata_keeps_object_meta() -> None:
    schema = obj_schema(t=EMBEDDED)
    obj = cr(
        t={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "n", "labels": {}, "junk": 1},
            "spec": {"anything": True},
        }
    )
    assert prune(obj, schema) == ["spec.t.metadata.junk"]
    assert obj["spec"]["t"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "n"},
        "spec": {"anything": True},
    }


def test_prune_drops_non_nullable_nulls_without_defaults() -> None:
    schema = obj_schema(
        a={"type": "string"},
        b={"type": "string", "nullable": True},
        c={"type": "string", "default": "d"},
    )
    obj = cr(a=None, b=None, c=None)
    assert prune(obj, schema) == []
    assert obj["spec"] == {"b": None, "c": None}
    default(obj, schema)
    assert obj["spec"] == {"b": None, "c": "d"}


# ---------------------------------------------------------------------------------------------
# default


def test_default_fills_missing_fields_recursively() -> None:
    schema = obj_schema(
        replicas={"type": "integer", "default": 1},
        tpl={
            "type": "object",
            "default": {},
            "properties": {"image": {"type": "string", "default": "nginx"}},
        },
        ports={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"protocol": {"type": "string", "default": "TCP"}},
            },
        },
        env={
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"value": {"type": "string", "default": "v"}},
            },
        },
    )
    obj = cr(ports=[{}, {"protocol": "UDP"}], env={"A": {}})
    default(obj, schema)
    assert obj["spec"] == {
        "replicas": 1,
        "tpl": {"image": "nginx"},
        "ports": [{"protocol": "TCP"}, {"protocol": "UDP"}],
        "env": {"A": {"value": "v"}},
    }


def test_default_copies_the_default() -> None:
    schema = obj_schema(tags={"type": "array", "items": {"type": "string"}, "default": ["a"]})
    one, two = cr(), cr()
    default(one, schema)
    default(two, schema)
    one["spec"]["tags"].append("b")
    assert two["spec"]["tags"] == ["a"]


def test_default_of_null_items_and_map_values() -> None:
    schema = obj_schema(
        l={"type": "array", "items": {"type": "string", "default": "x"}},
        m={"type": "object", "additionalProperties": {"type": "string", "default": "y"}},
        n={"type": "string", "nullable": True, "default": "z"},
    )
    obj = cr(l=["a", None], m={"k": None}, n=None)
    default(obj, schema)
    assert obj["spec"] == {"l": ["a", "x"], "m": {"k": "y"}, "n": None}


# ---------------------------------------------------------------------------------------------
# schema_problems


def problems(schema: dict[str, Any]) -> list[str]:
    return [str(e) for e in schema_problems(schema, ROOT)]


GOOD_SCHEMA = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}},
        "spec": {
            "type": "object",
            "required": ["replicas"],
            "properties": {
                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                "port": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    },
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                "either": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                },
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def test_good_schema_has_no_problems() -> None:
    assert problems(GOOD_SCHEMA) == []


SCHEMA_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "type missing in a field",
        {"type": "object", "properties": {"spec": {"properties": {}}}},
        [
            f"{ROOT}.properties[spec].type: Required value: must not be empty for specified "
            "object fields"
        ],
    ),
    (
        "type missing at the root",
        {"properties": {"spec": {"type": "object"}}},
        [f"{ROOT}.type: Required value: must not be empty at the root"],
    ),
    (
        "type missing in items",
        {"type": "object", "properties": {"l": {"type": "array", "items": {}}}},
        [
            f"{ROOT}.properties[l].items.type: Required value: must not be empty for specified "
            "array items"
        ],
    ),
    (
        "array without items",
        {"type": "object", "properties": {"l": {"type": "array"}}},
        [f"{ROOT}.properties[l].items: Required value: must be specified"],
    ),
    (
        "root not an object",
        {"type": "string"},
        [f'{ROOT}.type: Invalid value: "string": must be object at the root'],
    ),
    (
        "unknown type",
        {"type": "object", "properties": {"a": {"type": "int"}}},
        [
            f'{ROOT}.properties[a].type: Unsupported value: "int": supported values: "array", '
            '"boolean", "integer", "number", "object", "string"'
        ],
    ),
    (
        "nullable root",
        {"type": "object", "nullable": True},
        [f"{ROOT}.nullable: Forbidden: nullable cannot be true at the root"],
    ),
    (
        "additionalProperties at the root",
        {"type": "object", "additionalProperties": {"type": "string"}},
        [f"{ROOT}.additionalProperties: Forbidden: must not be used at the root"],
    ),
    (
        "properties and additionalProperties",
        {
            "type": "object",
            "properties": {
                "m": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "additionalProperties": {"type": "string"},
                }
            },
        },
        [
            f"{ROOT}.properties[m].additionalProperties: Forbidden: additionalProperties and "
            "properties are mutual exclusive"
        ],
    ),
    (
        "metadata beyond name",
        {
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}
            },
        },
        [
            f"{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name "
            "and generateName, but metadata is implicitly specified"
        ],
    ),
    (
        "default in metadata",
        {
            "type": "object",
            "properties": {
                "metadata": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "default": "x"}},
                }
            },
        },
        [
            f"{ROOT}.properties[metadata].properties[name].default: Forbidden: must not be set "
            "in top-level metadata"
        ],
    ),
    (
        "kind must be a string",
        {"type": "object", "properties": {"kind": {"type": "integer"}}},
        [f'{ROOT}.properties[kind].type: Invalid value: "integer": must be string'],
    ),
    (
        "type in anyOf",
        {"type": "object", "properties": {"a": {"type": "string", "anyOf": [{"type": "string"}]}}},
        [f"{ROOT}.properties[a].anyOf[0].type: Forbidden: must be empty to be structural"],
    ),
    (
        "property only in allOf",
        {"type": "object", "allOf": [{"properties": {"b": {"minLength": 1}}}]},
        [
            f"{ROOT}.properties[b]: Required value: because it is defined in "
            f"{ROOT}.allOf[0].properties[b]"
        ],
    ),
    (
        "metadata in a nested context",
        {
            "type": "object",
            "properties": {"a": {"type": "object", "anyOf": [{"properties": {"metadata": {}}}]}},
        },
        [
            f"{ROOT}.properties[a].anyOf[0].properties[metadata]: Forbidden: must not be "
            "specified in a nested context",
            f"{ROOT}.properties[a].properties[metadata]: Required value: because it is defined "
            f"in {ROOT}.properties[a].anyOf[0].properties[metadata]",
        ][:1],
    ),
    (
        "preserve-unknown-fields false",
        {"type": "object", "x-kubernetes-preserve-unknown-fields": False},
        [
            f"{ROOT}.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true "
            "or undefined"
        ],
    ),
    (
        "int-or-string with preserve-unknown-fields",
        {
            "type": "object",
            "properties": {
                "a": {
                    "x-kubernetes-int-or-string": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                }
            },
        },
        [
            f"{ROOT}.properties[a].x-kubernetes-preserve-unknown-fields: Invalid value: true: "
            "must be false if x-kubernetes-int-or-string is true"
        ],
    ),
    (
        "embedded resource not an object",
        {
            "type": "object",
            "properties": {"e": {"type": "string", "x-kubernetes-embedded-resource": True}},
        },
        [
            f"{ROOT}.properties[e].properties: Required value: must not be empty if "
            "x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            f'{ROOT}.properties[e].type: Invalid value: "string": must be object if '
            "x-kubernetes-embedded-resource is true",
        ],
    ),
    (
        "embedded resource without properties",
        {
            "type": "object",
            "properties": {"e": {"type": "object", "x-kubernetes-embedded-resource": True}},
        },
        [
            f"{ROOT}.properties[e].properties: Required value: must not be empty if "
            "x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
        ],
    ),
    (
        "bad pattern",
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(abc"}}},
        [
            f'{ROOT}.properties[a].pattern: Invalid value: "(abc": must be a valid regular '
            "expression, but isn't: error parsing regexp: missing closing ): `(abc`"
        ],
    ),
    (
        "lookbehind is not RE2",
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b"}}},
        [
            f'{ROOT}.properties[a].pattern: Invalid value: "(?<=a)b": must be a valid regular '
            "expression, but isn't: error parsing regexp: invalid or unsupported Perl syntax: "
            "`(?<=`"
        ],
    ),
    (
        "uniqueItems",
        {
            "type": "object",
            "properties": {
                "l": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
            },
        },
        [
            f"{ROOT}.properties[l].uniqueItems: Forbidden: uniqueItems cannot be set to true "
            "since the runtime complexity becomes quadratic"
        ],
    ),
    (
        "unsupported keywords",
        {"type": "object", "properties": {"a": {"type": "string", "$ref": "#/x"}}},
        [f"{ROOT}.properties[a].$ref: Forbidden: $ref is not supported"],
    ),
    (
        "list-map-keys without list-type map",
        {
            "type": "object",
            "properties": {
                "l": {
                    "type": "array",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                }
            },
        },
        [
            f"{ROOT}.properties[l].x-kubernetes-list-type: Required value: must be map if "
            "x-kubernetes-list-map-keys is non-empty"
        ],
    ),
    (
        "list-type map without keys",
        {
            "type": "object",
            "properties": {
                "l": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}
            },
        },
        [
            f"{ROOT}.properties[l].x-kubernetes-list-map-keys: Required value: must not be empty "
            "if x-kubernetes-list-type is map"
        ],
    ),
    (
        "list map key not a property, not required",
        {
            "type": "object",
            "properties": {
                "l": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name", "nope"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                }
            },
        },
        [
            f'{ROOT}.properties[l].x-kubernetes-list-map-keys: Invalid value: ["name","nope"]: '
            "entries must all be names of item properties",
            f"{ROOT}.properties[l].items.properties[name].default: Required value: this property "
            "is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
        ],
    ),
    (
        "list map key not scalar",
        {
            "type": "object",
            "properties": {
                "l": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["o"],
                    "items": {
                        "type": "object",
                        "required": ["o"],
                        "properties": {"o": {"type": "object"}},
                    },
                }
            },
        },
        [
            f'{ROOT}.properties[l].items.properties[o].type: Invalid value: "object": must be a '
            "scalar type if parent array's x-kubernetes-list-type is map"
        ],
    ),
    (
        "list-type on an object",
        {
            "type": "object",
            "properties": {"o": {"type": "object", "x-kubernetes-list-type": "set"}},
        },
        [
            f'{ROOT}.properties[o].type: Invalid value: "object": must be array if '
            "x-kubernetes-list-type is specified"
        ],
    ),
    (
        "unknown list-type",
        {
            "type": "object",
            "properties": {
                "l": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"}
            },
        },
        [
            f'{ROOT}.properties[l].x-kubernetes-list-type: Unsupported value: "bag": supported '
            'values: "atomic", "set", "map"'
        ],
    ),
    (
        "invalid default",
        {"type": "object", "properties": {"r": {"type": "integer", "minimum": 1, "default": 0}}},
        [
            f"{ROOT}.properties[r].default: Invalid value: 0:  in body should be greater than or "
            "equal to 1"
        ],
    ),
    (
        "default with unknown fields",
        {
            "type": "object",
            "properties": {"o": {"type": "object", "properties": {}, "default": {"x": 1}}},
        },
        [f'{ROOT}.properties[o].default: Invalid value: {{"x":1}}: must not have unknown fields'],
    ),
    (
        "wrong JSON type in the schema",
        {"type": "object", "properties": {"a": {"type": "string", "maxLength": "3"}}},
        [f'{ROOT}.properties[a].maxLength: Invalid value: "3": must be an integer'],
    ),
    (
        "set of non-atomic objects",
        {
            "type": "object",
            "properties": {
                "l": {
                    "type": "array",
                    "x-kubernetes-list-type": "set",
                    "items": {"type": "object", "properties": {"a": {"type": "string"}}},
                }
            },
        },
        [
            f"{ROOT}.properties[l].items.x-kubernetes-map-type: Invalid value: null: must be "
            "atomic as item of a list with x-kubernetes-list-type=set"
        ],
    ),
    (
        "default in an embedded resource's metadata is allowed",
        {
            "type": "object",
            "properties": {
                "t": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {
                        "metadata": {
                            "type": "object",
                            "properties": {"name": {"type": "string", "default": "n"}},
                        },
                        "kind": {"type": "string"},
                        "apiVersion": {"type": "string"},
                    },
                }
            },
        },
        [],
    ),
    (
        "nullable list-map key",
        {
            "type": "object",
            "properties": {
                "l": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["k"],
                    "items": {
                        "type": "object",
                        "required": ["k"],
                        "properties": {"k": {"type": "string", "nullable": True}},
                    },
                }
            },
        },
        [
            f"{ROOT}.properties[l].items.properties[k].nullable: Forbidden: this property is in "
            "x-kubernetes-list-map-keys, so it cannot be nullable"
        ],
    ),
    (
        "rule fieldPath must name a field",
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "true", "fieldPath": ".a"},
                {"rule": "true", "fieldPath": ".b"},
            ],
        },
        [
            f'{ROOT}.x-kubernetes-validations[1].fieldPath: Invalid value: ".b": '
            "must be a valid path"
        ],
    ),
    (
        "rule without text",
        {"type": "object", "x-kubernetes-validations": [{"rule": " "}]},
        [f"{ROOT}.x-kubernetes-validations[0].rule: Required value: rule is not specified"],
    ),
]


@pytest.mark.parametrize(
    ("schema", "want"), [pytest.param(s, w, id=name) for name, s, w in SCHEMA_CASES]
)
def test_schema_problems(schema: dict[str, Any], want: list[str]) -> None:
    assert problems(schema) == want


# ---------------------------------------------------------------------------------------------
# Go formatting and the compiled cache


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (1.0, "1"),
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (1.5, "1.5"),
        (1e-5, "1e-05"),
        (-2.5, "-2.5"),
    ],
)
def test_go_float(value: float, want: str) -> None:
    assert go_float(value) == want


def test_go_json_sorts_keys_and_escapes_html() -> None:
    assert go_json({"b": 1, "a": ["<x>", 1.5, None, True]}) == (
        '{"a":["\\u003cx\\u003e",1.5,null,true],"b":1}'
    )


def test_compile_is_cached_per_schema_object_and_text() -> None:
    schema = obj_schema(x={"type": "string"})
    assert compile_schema(schema) is compile_schema(schema)
    assert compile_schema(copy.deepcopy(schema)) is compile_schema(schema)
    assert compile_schema(obj_schema(x={"type": "integer"})) is not compile_schema(schema)


def test_prune_keeps_unknown_fields_of_list_items_under_preserve() -> None:
    # kube's skipPrune: a list under x-kubernetes-preserve-unknown-fields keeps its items'
    # unknown fields, though its items' known properties are pruned.
    schema = obj_schema(
        p={
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "l": {
                    "type": "array",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "items": {
                        "type": "object",
                        "properties": {"o": {"type": "object", "properties": {}}},
                    },
                }
            },
        }
    )
    obj = cr(p={"l": [{"free": 1, "o": {"drop": 2}}]})
    assert prune(obj, schema) == ["spec.p.l[0].o.drop"]
    assert obj["spec"]["p"] == {"l": [{"free": 1, "o": {}}]}


def test_prune_preserving_root_keeps_metadata() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {"metadata": {"type": "object"}},
    }
    obj = cr(anything={"x": 1})
    obj["metadata"]["labels"] = {"a": "b"}
    want = copy.deepcopy(obj)
    assert prune(obj, schema) == []
    assert obj == want


# ---------------------------------------------------------------------------------------------
# Properties (hypothesis): values made from a schema validate; prune and default settle at once

SCALARS = st.sampled_from(["string", "integer", "number", "boolean"])


@st.composite
def schemas(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    kinds = ["scalar", "object", "array", "map"] if depth < 3 else ["scalar"]
    kind = draw(st.sampled_from(kinds))
    s: dict[str, Any]
    if kind == "scalar":
        t = draw(SCALARS)
        s = {"type": t}
        if t == "string" and draw(st.booleans()):
            s["maxLength"] = draw(st.integers(1, 8))
        if t == "string" and draw(st.booleans()):
            s["enum"] = draw(st.lists(st.text(max_size=4), min_size=1, max_size=3, unique=True))
            s.pop("maxLength", None)
        if t == "integer" and draw(st.booleans()):
            s["minimum"] = draw(st.integers(-5, 5))
            s["maximum"] = s["minimum"] + draw(st.integers(0, 10))
        if draw(st.booleans()):
            s["nullable"] = True
    elif kind == "object":
        names = draw(st.lists(st.sampled_from("abcdefg"), max_size=4, unique=True))
        s = {"type": "object", "properties": {n: draw(schemas(depth + 1)) for n in names}}
        with_required: bool = draw(st.booleans())
        if names and with_required:
            s["required"] = names[:1]
    elif kind == "array":
        s = {"type": "array", "items": draw(schemas(depth + 1))}
        if draw(st.booleans()):
            s["maxItems"] = draw(st.integers(0, 3))
    else:
        s = {"type": "object", "additionalProperties": draw(schemas(depth + 1))}
    if kind == "scalar" and draw(st.booleans()):
        s["default"] = draw(value_of(s))
        if s["default"] is None:
            del s["default"]
    return s


@st.composite
def value_of(draw: st.DrawFn, s: dict[str, Any]) -> Any:
    # kube-openapi checks an enum on null too: null is only valid when the enum lists it.
    if s.get("nullable") and "enum" not in s and draw(st.integers(0, 5)) == 0:
        return None
    t = s["type"]
    if "enum" in s:
        return draw(st.sampled_from(s["enum"]))
    if t == "string":
        return draw(st.text(max_size=s.get("maxLength", 10)))
    if t == "integer":
        return draw(st.integers(s.get("minimum", -(2**40)), s.get("maximum", 2**40)))
    if t == "number":
        return draw(st.floats(allow_nan=False, allow_infinity=False, width=64))
    if t == "boolean":
        return draw(st.booleans())
    if t == "array":
        size = draw(st.integers(0, s.get("maxItems", 3)))
        return [draw(value_of(s["items"])) for _ in range(size)]
    if "additionalProperties" in s:
        keys = draw(st.lists(st.sampled_from("xyz"), max_size=3, unique=True))
        return {k: draw(value_of(s["additionalProperties"])) for k in keys}
    props = s["properties"]
    out = {}
    for name, sub in props.items():
        if name in s.get("required", ()) or draw(st.booleans()):
            out[name] = draw(value_of(sub))
    return out


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abxyz"), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_values_made_from_the_schema_validate(data: st.DataObject) -> None:
    spec = data.draw(schemas())
    schema = {"type": "object", "properties": {"spec": spec}}
    obj = cr()
    obj["spec"] = data.draw(value_of(spec))
    assert schema_problems(schema, ROOT) == []
    assert validate(obj, schema) == []


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_prune_and_default_settle_in_one_pass(data: st.DataObject) -> None:
    spec = data.draw(schemas())
    schema = {"type": "object", "properties": {"spec": spec}}
    obj = cr()
    # Anything at all: known fields, unknown fields, wrong types, nulls.
    obj["spec"] = data.draw(st.one_of(value_of(spec), JSON_VALUES))
    prune(obj, schema)
    default(obj, schema)
    once = copy.deepcopy(obj)
    assert prune(obj, schema) == []
    default(obj, schema)
    assert obj == once


# ---------------------------------------------------------------------------------------------
# A schema as controller-gen writes it (descriptions everywhere, metav1.Condition in status)

CONDITION = {
    "description": "Condition contains details for one aspect of the current state.",
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": {"type": "string", "maxLength": 32768},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "reason": {
            "type": "string",
            "maxLength": 1024,
            "minLength": 1,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "type": {
            "type": "string",
            "maxLength": 316,
            "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        },
    },
}
CONTROLLER_GEN: dict[str, Any] = {
    "description": "Widget is the Schema for the widgets API.",
    "type": "object",
    "properties": {
        "apiVersion": {"description": "APIVersion defines the versioned schema.", "type": "string"},
        "kind": {"description": "Kind is a string value.", "type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "description": "WidgetSpec defines the desired state.",
            "type": "object",
            "properties": {
                "replicas": {"type": "integer", "format": "int32", "default": 1, "minimum": 0},
                "selector": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "resources": {
                    "type": "object",
                    "additionalProperties": {
                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                        "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|"
                        "[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
                        "x-kubernetes-int-or-string": True,
                    },
                },
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "conditions": {
                    "type": "array",
                    "items": CONDITION,
                    "x-kubernetes-list-map-keys": ["type"],
                    "x-kubernetes-list-type": "map",
                }
            },
        },
    },
}


def test_controller_gen_schema() -> None:
    assert problems(CONTROLLER_GEN) == []
    assert problems_with_status(CONTROLLER_GEN) == []
    obj = cr(selector={"matchLabels": {"app": "w"}}, resources={"cpu": "500m", "pods": 3})
    obj["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AsExpected",
                "message": "",
                "lastTransitionTime": "2026-12-05T19:30:00Z",
            },
            {
                "type": "Ready",
                "status": "Maybe",
                "reason": "no spaces allowed",
                "message": "",
                "lastTransitionTime": "2026-12-05T19:30:00Z",
            },
        ]
    }
    assert prune(obj, CONTROLLER_GEN) == []
    default(obj, CONTROLLER_GEN)
    assert obj["spec"]["replicas"] == 1
    assert messages(obj, CONTROLLER_GEN) == [
        'status.conditions[1].status: Unsupported value: "Maybe": supported values: '
        '"True", "False", "Unknown"',
        'status.conditions[1].reason: Invalid value: "no spaces allowed": '
        "status.conditions[1].reason in body should match "
        "'^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'",
        'status.conditions[1]: Duplicate value: {"type":"Ready"}',
    ]
    obj["spec"]["resources"]["cpu"] = "lots"
    assert messages(obj["spec"], CONTROLLER_GEN["properties"]["spec"], "spec")[0] == (
        'spec.resources.cpu: Invalid value: "lots": resources.cpu in body should match \''
        + CONTROLLER_GEN["properties"]["spec"]["properties"]["resources"]["additionalProperties"][
            "pattern"
        ]
        + "'"
    )


def problems_with_status(schema: dict[str, Any]) -> list[str]:
    return [str(e) for e in schema_problems(schema, ROOT, status_subresource=True)]


def test_status_subresource_restricts_the_root() -> None:
    schema = {"type": "object", "properties": {}, "minProperties": 1}
    assert problems(schema) == []
    [only] = problems_with_status(schema)
    assert only.startswith(f'{ROOT}: Invalid value: {{"minProperties":1,')
    assert only.endswith(
        "only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum "
        "MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items "
        "Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are "
        "allowed at the root of the schema if the status subresource is enabled"
    )


def test_embedded_resource_group_version() -> None:
    value = {"apiVersion": "a/b/c", "kind": "Pod"}
    assert messages(cr(t=value), obj_schema(t=EMBEDDED)) == [
        'spec.t.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c'
    ]


def test_list_duplicates_are_ratcheted_on_update() -> None:
    schema = obj_schema(
        x={"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
    )
    dup = ['spec.x[1]: Duplicate value: "a"']
    assert messages(cr(x=["a", "a"]), schema) == dup
    assert [str(e) for e in validate(cr(x=["a", "a"]), schema, old=cr(x=["b"]))] == dup
    assert validate(cr(x=["a", "a", "b"]), schema, old=cr(x=["a", "a"])) == []


def test_defaults_in_embedded_metadata_must_make_valid_metadata() -> None:
    schema = {
        "type": "object",
        "properties": {
            "t": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "default": "a/b"},
                            "labels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                },
            }
        },
    }
    assert problems(schema) == [
        f"{ROOT}.properties[t].properties[metadata].properties[name].default: Invalid value: "
        '"a/b": must result in valid metadata: metadata.name: Invalid value: "a/b": may not '
        "contain '/'"
    ]


def test_root_metadata_name_constraints_apply() -> None:
    schema = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 5}},
            }
        },
    }
    assert problems(schema) == []
    obj = cr()
    obj["metadata"]["name"] = "much-too-long"
    assert messages(obj, schema) == ["metadata.name: Too long: may not be more than 5 bytes"]


def test_prune_root_metadata_as_object_meta_round_trips() -> None:
    schema = obj_schema(x={"type": "string"})
    obj = cr(x="a")
    obj["metadata"] = {
        "name": "w",
        "namespace": "",
        "labels": {},
        "generation": 0,
        "creationTimestamp": None,
        "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "u", "x": 1}],
        "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}, "y": 2}],
        "selfish": True,
    }
    assert prune(obj, schema) == [
        "metadata.ownerReferences[0].x",
        "metadata.managedFields[0].y",
        "metadata.selfish",
    ]
    assert obj["metadata"] == {
        "name": "w",
        "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "u"}],
        "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
    }


@pytest.mark.parametrize(
    ("path", "want"),
    [
        (".a", None),
        (".a['b.c']", None),
        (".m.anything.x", None),
        (".a.b", "does not refer to a valid field"),
        ("a", "expected [ or . but got: a"),
        (".a[0]", "expected single quoted string but got 0"),
        (".a[", "unexpected end of JSON path"),
    ],
)
def test_field_path_problem(path: str, want: str | None) -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {
                "type": "object",
                "additionalProperties": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        },
    }
    assert field_path_problem(path, schema) == want


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("hostname", "example.com", "-bad"),
        ("email", "Ann <ann@example.com>", "nope"),
        ("mac", "01:23:45:67:89:ab", "01:23"),
        ("duration", "1h30m", "soon"),
        ("uri", "https://example.com/a", "not a uri"),
        ("ipv6", "::1", "1.2.3.4"),
        ("cidr", "fd00::/8", "10.0.0.0/33"),
        ("bsonobjectid", "507f1f77bcf86cd799439011", "x"),
        ("isbn", "978-0321751041", "123"),
        ("hexcolor", "#fff", "#ggg"),
        ("rgbcolor", "rgb(1,2,3)", "rgb(300,1,1)"),
        ("ssn", "123-45-6789", "12-3"),
        ("uuid4", "0a2e8e2c-1c5b-4b2c-9a4e-7e6f3e5e2b11", "0a2e8e2c-1c5b-3b2c-9a4e-7e6f3e5e2b11"),
        ("k8s-long-name", "a.b-c", "a_b"),
    ],
)
def test_string_formats(fmt: str, good: str, bad: str) -> None:
    schema = obj_schema(x={"type": "string", "format": fmt})
    assert validate(cr(x=good), schema) == []
    assert messages(cr(x=bad), schema) == [
        f"spec.x: Invalid value: {go_json(bad)}: spec.x in body must be of type {fmt}: "
        f"{go_json(bad)}"
    ]


SCHEMA_KEYS = st.sampled_from(
    [
        "type",
        "properties",
        "items",
        "additionalProperties",
        "required",
        "enum",
        "default",
        "nullable",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "pattern",
        "format",
        "minimum",
        "maxLength",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-validations",
        "metadata",
    ]
)
ODD_VALUES = st.one_of(
    JSON_VALUES,
    st.sampled_from(["object", "array", "string", "integer", "map", "set", "(", "date"]),
    st.floats(allow_nan=False),
)
GARBAGE_SCHEMAS = st.recursive(
    st.dictionaries(SCHEMA_KEYS, ODD_VALUES, max_size=4),
    lambda inner: st.dictionaries(
        SCHEMA_KEYS, st.one_of(inner, st.lists(inner, max_size=2), ODD_VALUES), max_size=4
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(GARBAGE_SCHEMAS, st.one_of(JSON_VALUES, st.floats(), st.integers()))
def test_nothing_raises_on_odd_schemas_and_values(schema: dict[str, Any], value: Any) -> None:
    """Bad input gets field errors, never an exception (the apiserver would answer 500)."""
    schema_problems(schema, ROOT)
    schema_problems(schema, ROOT, status_subresource=True)
    obj = cr()
    obj["spec"] = value
    validate(obj, schema)
    prune(obj, schema)
    default(obj, schema)
    validate(value, schema, "status")
