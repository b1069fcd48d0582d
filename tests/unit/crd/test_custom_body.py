"""A custom kind's message from JSON and back (apiserver/crd/serving.py's from_dict and
tinykube/manifest.py's to_dict): integers beyond 2^53 exact, undeclared top-level fields kept
only under a preserving root, a property that happens to be named like the field keeping
them still an ordinary property."""

from __future__ import annotations

from apiserver.crd.serving import _message_types, from_dict
from tinykube.manifest import UNKNOWN_FIELDS, to_dict

BIG = 2**53 + 1


def test_a_preserving_root_keeps_undeclared_top_level_fields() -> None:
    message = _message_types("Keep", ["spec"], keep_unknown=True).message
    data = {"apiVersion": "x.io/v1", "kind": "Keep", "spec": {"n": BIG}, "top": {"m": -BIG}}
    assert to_dict(from_dict(message, data), zero_fields=False) == data


def test_without_it_they_are_dropped() -> None:
    message = _message_types("Drop", ["spec"]).message
    data = {"apiVersion": "x.io/v1", "kind": "Drop", "spec": {"n": 1}, "top": 2}
    assert to_dict(from_dict(message, data), zero_fields=False) == {
        "apiVersion": "x.io/v1",
        "kind": "Drop",
        "spec": {"n": 1},
    }


def test_a_property_named_like_the_keeping_field_is_a_property() -> None:
    message = _message_types("Named", [UNKNOWN_FIELDS, "spec"], keep_unknown=True).message
    data = {"apiVersion": "x.io/v1", "kind": "Named", UNKNOWN_FIELDS: {"a": 1}, "top": 2}
    assert to_dict(from_dict(message, data), zero_fields=False) == {
        "apiVersion": "x.io/v1",
        "kind": "Named",
        UNKNOWN_FIELDS: {"a": 1},
    }
