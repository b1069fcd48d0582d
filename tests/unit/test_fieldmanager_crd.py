"""Server-side apply and managedFields of custom objects follow their CRD's schema: lists with
`x-kubernetes-list-type: map` merge by their `x-kubernetes-list-map-keys`, `set` lists as
unions, other lists and `x-kubernetes-map-type: atomic` objects are owned whole, and a root
with x-kubernetes-preserve-unknown-fields owns its undeclared top-level fields too."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from apiserver import fieldmanager as fm
from apiserver.crd.serving import _message_types
from tinykube.errors import BadRequestError
from tinykube.manifest import UNKNOWN_FIELDS

NOW = "2026-01-01T00:00:00Z"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name", "protocol"],
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "protocol": {"type": "string"},
                            "port": {"type": "integer"},
                            "extra": {"type": "object", "x-kubernetes-map-type": "atomic"},
                        },
                    },
                },
                "tags": {
                    "type": "array",
                    "x-kubernetes-list-type": "set",
                    "items": {"type": "string"},
                },
                "args": {"type": "array", "items": {"type": "string"}},
                "labels": {
                    "type": "object",
                    "x-kubernetes-map-type": "atomic",
                    "additionalProperties": {"type": "string"},
                },
                "settings": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                },
            },
        }
    },
}


@pytest.fixture(scope="module")
def widget() -> Any:
    types = _message_types("Widget", ["spec"], keep_unknown=True)
    desc = types.message.DESCRIPTOR
    fm.register_custom_schema(desc, SCHEMA, keeps_unknown=True)
    return desc


def obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": spec,
    }


def apply(desc: Any, live: dict[str, Any], config: dict[str, Any], manager: str, **kw: Any) -> Any:
    return fm.apply(
        live, config, desc, manager=manager, api_version="example.com/v1", now=NOW, **kw
    )


def owned(applied: Any, manager: str) -> set[fm.Path]:
    entries = fm.decode_entries(applied.obj["metadata"]["managedFields"])
    return next(e.fields for e in entries if e.manager == manager)


def port(name: str, number: int, protocol: str = "TCP") -> dict[str, Any]:
    return {"name": name, "protocol": protocol, "port": number}


def test_two_appliers_own_different_items_of_a_map_list(widget: Any) -> None:
    a = apply(widget, {}, obj(ports=[port("a", 1)]), "alice")
    b = apply(widget, a.obj, obj(ports=[port("b", 2)]), "bob")
    assert b.obj["spec"]["ports"] == [port("a", 1), port("b", 2)]
    assert fm.set_to_fields(owned(b, "alice")) == {
        "f:spec": {
            "f:ports": {
                'k:{"name":"a","protocol":"TCP"}': {
                    ".": {},
                    "f:name": {},
                    "f:port": {},
                    "f:protocol": {},
                }
            }
        }
    }
    fields = fm.set_to_fields(owned(b, "bob"))
    assert fields == {
        "f:spec": {
            "f:ports": {
                'k:{"name":"b","protocol":"TCP"}': {
                    ".": {},
                    "f:name": {},
                    "f:port": {},
                    "f:protocol": {},
                }
            }
        }
    }
    # Bob changing Alice's item conflicts on that item's field only, in kube's words.
    with pytest.raises(fm.ApplyConflict) as conflict:
        apply(widget, b.obj, obj(ports=[port("b", 2), port("a", 9)]), "bob")
    assert str(conflict.value.message) == (
        'Apply failed with 1 conflict: conflict with "alice": '
        '.spec.ports[name="a",protocol="TCP"].port'
    )
    # The same key with another protocol is another item.
    c = apply(widget, b.obj, obj(ports=[port("b", 2), port("a", 9, "UDP")]), "bob")
    assert c.obj["spec"]["ports"] == [port("a", 1), port("b", 2), port("a", 9, "UDP")]
    # Alice no longer applying her item removes it, and only it.
    d = apply(widget, c.obj, obj(ports=[]), "alice")
    assert d.obj["spec"]["ports"] == [port("b", 2), port("a", 9, "UDP")]


def test_an_item_missing_a_key_is_refused(widget: Any) -> None:
    with pytest.raises(BadRequestError, match='omits key field "name"'):
        apply(widget, {}, obj(ports=[{"protocol": "TCP", "port": 1}]), "alice")


def test_set_lists_merge_as_unions_and_other_lists_are_atomic(widget: Any) -> None:
    a = apply(widget, {}, obj(tags=["x"], args=["1"], settings={"a": "1"}), "alice")
    b = apply(widget, a.obj, obj(tags=["y"], settings={"b": "2"}), "bob")
    assert b.obj["spec"]["tags"] == ["x", "y"]
    assert b.obj["spec"]["settings"] == {"a": "1", "b": "2"}  # granular: by key
    with pytest.raises(fm.ApplyConflict, match=r"\.spec\.args$"):
        apply(widget, b.obj, obj(args=["2"]), "bob")


def test_an_atomic_map_is_owned_whole(widget: Any) -> None:
    a = apply(widget, {}, obj(labels={"a": "1"}, ports=[{**port("a", 1), "extra": {"x": 1}}]), "al")
    assert ("f:spec", "f:labels") in owned(a, "al")
    assert ("f:spec", "f:labels", "f:a") not in owned(a, "al")
    with pytest.raises(fm.ApplyConflict, match=r"\.spec\.labels$"):
        apply(widget, a.obj, obj(labels={"b": "2"}), "bob")
    forced = apply(widget, a.obj, obj(labels={"b": "2"}), "bob", force=True)
    assert forced.obj["spec"]["labels"] == {"b": "2"}  # replaced, not merged


def test_undeclared_top_level_fields_of_a_preserving_root(widget: Any) -> None:
    a = apply(widget, {}, {**obj(), "data": {"k": "v"}, UNKNOWN_FIELDS: 1}, "alice")
    assert {("f:data", "f:k"), (f"f:{UNKNOWN_FIELDS}",)} <= owned(a, "alice")
    b = apply(widget, a.obj, {**obj(), "data": {"j": "w"}}, "bob")
    assert b.obj["data"] == {"k": "v", "j": "w"}


def test_an_update_records_items_of_a_map_list(widget: Any) -> None:
    live = obj(ports=[port("a", 1)])
    new = obj(ports=[port("a", 1), port("b", 2)])
    entries = fm.update(live, new, widget, manager="kubectl", api_version="v1", now=NOW)
    assert entries is not None
    fields = entries[0]["fieldsV1"]
    assert list(fields["f:spec"]["f:ports"]) == ['k:{"name":"b","protocol":"TCP"}']


def test_a_key_field_takes_its_default_from_the_crd_schema_only(widget: Any) -> None:
    # The built-in default of a port's protocol (TCP) is no default of a CRD's key field.
    with pytest.raises(BadRequestError, match='omits key field "protocol"'):
        apply(widget, {}, obj(ports=[{"name": "a", "port": 1}]), "alice")
    # A key field whose schema has a default takes it when an item omits it.
    schema = copy.deepcopy(SCHEMA)
    items = schema["properties"]["spec"]["properties"]["ports"]["items"]
    items["properties"]["protocol"]["default"] = "SCTP"
    types = _message_types("Gadget", ["spec"], keep_unknown=True)
    gadget = types.message.DESCRIPTOR
    fm.register_custom_schema(gadget, schema, keeps_unknown=True)
    a = apply(gadget, {}, obj(ports=[{"name": "a", "port": 1}]), "alice")
    assert list(fm.set_to_fields(owned(a, "alice"))["f:spec"]["f:ports"]) == [
        'k:{"name":"a","protocol":"SCTP"}'
    ]
