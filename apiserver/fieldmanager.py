"""Managed fields and server-side apply, as kube-apiserver's field manager does them.

Objects are Kubernetes JSON (dicts, as `tinykube.manifest.to_dict` prints them) walked with the
kind's protobuf descriptor as the schema. A field set is a Python set of paths; a path is a
tuple of fieldsV1 keys: `f:<field>` (a struct field or a map key), `k:{"name":"web"}` (an item
of a list merged by its keys), `v:"x"` (an item of a set list). `fields_to_set` and
`set_to_fields` convert to and from the fieldsV1 object Kubernetes stores, where `.` marks a
path that is itself a member and has members below it.

The rules are structured-merge-diff's (sigs.k8s.io/structured-merge-diff, merge.Updater):

- `apply` merges an applied configuration into the live object (maps per key, lists with keys
  per item, set lists as unions, every other list atomic), makes the configuration's field set
  the manager's Apply entry, removes what the manager applied last time and no longer applies
  (unless some manager still owns it), and refuses (`ApplyConflict`, 409) to change a field
  another manager owns to a different value, unless forced, which takes the field from them.
- `update` records a non-apply write: the manager's Update entry gains the fields the write
  added or changed, every other manager loses them, and removed fields leave every manager.

Which list is keyed by what, and which structs and maps are atomic, come from the field facts
(tinykube/fieldfacts.py): the strategic merge keys, widened where Kubernetes' list-map keys are
longer (ports by port and protocol).
A `google.protobuf.Value` field (a custom kind's top-level properties) holds free JSON, walked
by its CRD's schema when the kind registered one (`register_custom_schema`, as kube builds
structured-merge-diff's types from the schema): objects field by field (so two managers own
different fields of a custom object's spec) unless `x-kubernetes-map-type: atomic`, lists
with `x-kubernetes-list-type: map` item by item on their `x-kubernetes-list-map-keys`, `set`
lists as unions, other lists and scalars atomic.
Fields every write owns implicitly (apiVersion, kind, name, namespace, uid, resourceVersion,
generation, creationTimestamp, managedFields) are in no set, and the main resource's sets never
hold `status` (the status subresource's hold only `status`), as Kubernetes' reset fields.
Pure functions; the inputs are never modified.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from tinykube.errors import BadRequestError, ConflictError
from tinykube.fieldfacts import ATOMIC, list_map_keys, patch_meta
from tinykube.kinds import KindInfo
from tinykube.manifest import to_dict
from tinykube.zerofields import ZERO_FIELDS

Path = tuple[str, ...]
FieldSet = set[Path]

APPLY = "Apply"
UPDATE = "Update"
FIELDS_V1 = "FieldsV1"

# Key fields that have a default, used when an item omits them (as the schema's default).
_KEY_DEFAULTS: dict[str, Any] = {"protocol": "TCP"}
# Metadata every writer sets implicitly (Kubernetes' stripped fields).
_STRIPPED_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
    }
)
_STRIPPED_TOP = frozenset({"apiVersion", "kind"})

_LEAF, _STRUCT, _MAP, _ASSOC, _SET = "leaf", "struct", "map", "assoc", "set"
_JSON = "json"  # free JSON (google.protobuf.Value): objects by field, anything else atomic
_VALUE = "google.protobuf.Value"


@dataclass(frozen=True)
class _Type:
    """How one JSON field is merged and owned."""

    kind: str
    message: Descriptor | None = None  # a struct's fields; a map's or keyed list's elements
    keys: tuple[str, ...] = ()
    # Go stores it inline (a non-pointer struct): an object's zero value already holds it,
    # so creating the object does not add it as a member of its own.
    inline: bool = False
    # Free JSON (_JSON) under a CRD's schema: the schema node of an object's value (its fields'
    # types), or of a keyed list's items. None: no schema (objects by field, lists atomic).
    json: _Json | None = None
    # A CRD's keyed list: the defaults its items' schema gives key fields, which an item
    # that omits the key takes (structured-merge-diff reads them from the schema). None: a
    # built-in list, whose only defaulted key field is a port's protocol (_KEY_DEFAULTS).
    key_defaults: tuple[tuple[str, Any], ...] | None = None


_FREE = _Type(_JSON)


class _Json:
    """One node of a CRD's structural schema, as the field manager reads it (kube builds the
    same facts for structured-merge-diff from the schema): an object's properties and
    additionalProperties, an array's items, `x-kubernetes-list-type` (atomic, set, map) with
    `x-kubernetes-list-map-keys`, and `x-kubernetes-map-type` (granular, atomic)."""

    __slots__ = ("additional", "properties", "type")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.properties = {
            k: _Json(v) for k, v in (schema.get("properties") or {}).items() if isinstance(v, dict)
        }
        add = schema.get("additionalProperties")
        self.additional = _Json(add) if isinstance(add, dict) else None
        self.type = self._type(schema)

    def _type(self, schema: Mapping[str, Any]) -> _Type:
        kind = schema.get("type")
        if schema.get("x-kubernetes-int-or-string") or kind not in ("object", "array", None):
            return _Type(_LEAF)
        if kind == "array":
            items = schema.get("items")
            node = _Json(items) if isinstance(items, dict) else None
            list_type = schema.get("x-kubernetes-list-type")
            if list_type == "map":
                keys = tuple(str(k) for k in schema.get("x-kubernetes-list-map-keys") or ())
                props = (items.get("properties") if isinstance(items, dict) else None) or {}
                defaults = tuple(
                    (k, props[k]["default"])
                    for k in keys
                    if isinstance(props.get(k), dict) and "default" in props[k]
                )
                return _Type(_ASSOC, keys=keys, json=node, key_defaults=defaults)
            if list_type == "set":
                return _Type(_SET)
            return _Type(_LEAF)  # atomic, as a CRD's list without a list type
        if schema.get("x-kubernetes-map-type") == "atomic":
            return _Type(_LEAF)
        if kind is None and not self.properties and self.additional is None:
            return _FREE  # x-kubernetes-preserve-unknown-fields without a type: any JSON
        return _Type(_JSON, json=self)

    def child(self, key: str) -> _Type:
        node = self.properties.get(key) or self.additional
        return node.type if node is not None else _FREE


def _child(t: _Type, key: str) -> _Type:
    """The type of field `key` of an object of free JSON type `t`."""
    return t.json.child(key) if t.json is not None else t


def _item(t: _Type) -> _Type:
    """The type of an item of a keyed list `t` whose items are free JSON (a CRD's)."""
    return t.json.type if t.json is not None else _FREE


# Custom kinds' messages (by full name: a new one per build of a kind) and their top-level
# properties' schema nodes, registered by apiserver/crd/serving.py as it builds the kind,
# before any object of it is written. The built-in kinds' facts are tinykube.fieldfacts'.
_CUSTOM_SCHEMAS: dict[str, tuple[dict[str, _Json], bool]] = {}


def register_custom_schema(
    message: Any, schema: Mapping[str, Any], *, keeps_unknown: bool = False
) -> None:
    """Walk the google.protobuf.Value fields of custom kind `message` by its CRD `schema` (the
    version's openAPIV3Schema); `keeps_unknown`: its top-level fields the schema does not name
    are kept (root x-kubernetes-preserve-unknown-fields), and owned as free JSON."""
    props = {
        k: _Json(v) for k, v in (schema.get("properties") or {}).items() if isinstance(v, dict)
    }
    _CUSTOM_SCHEMAS[message.full_name] = (props, keeps_unknown)


def _undeclared(message: Descriptor) -> _Type | None:
    """The type of a field `message` does not declare: free JSON where a custom kind keeps
    such fields, else None (not in the schema)."""
    custom = _CUSTOM_SCHEMAS.get(message.full_name)
    return _FREE if custom is not None and custom[1] else None


def _is_message(f: FieldDescriptor) -> bool:
    return (
        f.type == FieldDescriptor.TYPE_MESSAGE
        and f.message_type is not None
        and not f.message_type.full_name.startswith("google.protobuf.")
    )


def _inline(message: Descriptor) -> bool:
    name = message.name
    return name in ("ObjectMeta", "PodTemplateSpec", "ResourceRequirements") or name.endswith(
        ("Spec", "Status")
    )


@lru_cache(maxsize=4096)
def _fields(message: Descriptor) -> dict[str, _Type]:
    out: dict[str, _Type] = {}
    for f in message.fields:
        name = f.json_name
        atomic = (message.full_name, name) in ATOMIC
        repeated = bool(getattr(f, "is_repeated", False)) or (
            getattr(f, "label", 0) == FieldDescriptor.LABEL_REPEATED
        )
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value = f.message_type.fields_by_name["value"]
            if atomic:
                out[name] = _Type(_LEAF)
            else:
                out[name] = _Type(_MAP, value.message_type if _is_message(value) else None)
        elif repeated:
            meta = patch_meta(message.full_name, name)
            if meta is None or meta[0] != "merge":
                out[name] = _Type(_LEAF)
            elif meta[1] and _is_message(f):
                keys = list_map_keys(message.full_name, name, meta[1])
                # Go serializes it even when empty (no omitempty, as tinykube.zerofields
                # records): the zero object already holds it.
                present = ZERO_FIELDS.get(message.full_name, {}).get(name) == []
                out[name] = _Type(_ASSOC, f.message_type, keys, inline=present)
            else:
                out[name] = _Type(_SET)
        elif f.message_type is not None and f.message_type.full_name == _VALUE and not atomic:
            custom = _CUSTOM_SCHEMAS.get(message.full_name)
            node = custom[0].get(name) if custom is not None else None
            out[name] = node.type if node is not None else _FREE
        elif _is_message(f) and not atomic and f.message_type is not None:
            out[name] = _Type(_STRUCT, f.message_type, inline=_inline(f.message_type))
        else:
            out[name] = _Type(_LEAF)
    return out


# ---- paths and fieldsV1 ---------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def path_string(path: Path) -> str:
    """A path as Kubernetes prints it in conflicts: `.spec.containers[name="web"].image`."""
    out = []
    for element in path:
        tag, body = element[:2], element[2:]
        if tag == "f:":
            out.append("." + body)
        elif tag == "k:":
            keys = json.loads(body)
            out.append("[" + ",".join(f"{k}={_compact(v)}" for k, v in keys.items()) + "]")
        else:
            out.append(f"[={_compact(json.loads(body))}]")
    return "".join(out)


def fields_to_set(fields: Mapping[str, Any]) -> FieldSet:
    """The paths of a fieldsV1 object. Raises BadRequestError for one that is malformed."""
    out: FieldSet = set()

    def walk(node: Mapping[str, Any], prefix: Path) -> None:
        for key, child in node.items():
            if key == ".":
                out.add(prefix)
                continue
            if not isinstance(child, Mapping) or key[:2] not in ("f:", "k:", "v:", "i:"):
                raise BadRequestError(f"invalid fieldsV1: {_compact(key)} at {path_string(prefix)}")
            here = (*prefix, key)
            if child:
                walk(child, here)
            else:
                out.add(here)

    walk(fields, ())
    return out


def set_to_fields(paths: Iterable[Path]) -> dict[str, Any]:
    """The fieldsV1 object of a field set: `.` first, then children sorted."""
    tree: dict[str, Any] = {}
    members: set[Path] = set()
    for path in paths:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        members.add(path)

    def render(node: dict[str, Any], prefix: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if node and prefix in members:
            out["."] = {}
        for key in sorted(node):
            out[key] = render(node[key], (*prefix, key))
        return out

    return render(tree, ())


def _prefixes(paths: Iterable[Path]) -> set[Path]:
    """Every path and every ancestor of one."""
    out: set[Path] = set()
    for path in paths:
        for i in range(1, len(path) + 1):
            out.add(path[:i])
    return out


# ---- the schema walk: field sets, comparison, merge, removal --------------------------------

_ABSENT: Any = object()


def _item_key(item: Any, t: _Type, where: Path) -> str:
    if not isinstance(item, dict):
        raise BadRequestError(f"{path_string(where)}: expected an object in a list with keys")
    defaults = _KEY_DEFAULTS if t.key_defaults is None else dict(t.key_defaults)
    values: dict[str, Any] = {}
    for k in t.keys:
        if k in item:
            values[k] = item[k]
        elif k in defaults:
            values[k] = defaults[k]
        else:
            raise BadRequestError(
                f"{path_string(where)}: associative list with keys has an element that omits "
                f'key field "{k}" (and doesn\'t have default value)'
            )
    return "k:" + _compact(values)


def _index(items: Any, t: _Type, where: Path, *, strict: bool) -> dict[str, Any]:
    """A list's items by path element (last one wins for duplicates, unless `strict`)."""
    out: dict[str, Any] = {}
    for item in items if isinstance(items, list) else []:
        element = _item_key(item, t, where) if t.kind == _ASSOC else "v:" + _compact(item)
        if strict and element in out:
            raise BadRequestError(
                f"{path_string(where)}: duplicate entries for key {path_string((element,))}"
            )
        out[element] = item
    return out


def _children(message: Descriptor | None, value: Any, where: Path) -> dict[str, _Type | None]:
    """The fields of a struct value (None for a map's entries, whose type is the element's)."""
    if not isinstance(value, dict):
        return {}
    if message is None:
        return {}
    known = _fields(message)
    out: dict[str, _Type | None] = {}
    for key in value:
        t = known.get(key) or _undeclared(message)
        if t is None:
            raise BadRequestError(
                f"{path_string((*where, 'f:' + key))}: field not declared in schema"
            )
        out[key] = t
    return out


def config_set(config: Mapping[str, Any], message: Descriptor) -> FieldSet:
    """The fields an applied configuration sets (structured-merge-diff's ToFieldSet).

    Raises BadRequestError naming the path of an undeclared field, a list item without its
    keys, or duplicate keys."""
    out: FieldSet = set()
    _set_of_struct(dict(config), message, (), out)
    return _without_implicit(out)


def _set_of_struct(value: Any, message: Descriptor, where: Path, out: FieldSet) -> None:
    for key, t in _children(message, value, where).items():
        assert t is not None
        child = value[key]
        here = (*where, "f:" + key)
        if child is None or child == {}:
            out.add(here)
        _set_of(child, t, here, out)


def _set_of(value: Any, t: _Type, where: Path, out: FieldSet) -> None:
    if value is None:
        out.add(where)
        return
    if t.kind == _LEAF or (t.kind == _JSON and (not isinstance(value, dict) or not value)):
        out.add(where)
    elif t.kind == _JSON:
        for key, child in value.items():
            _set_of(child, _child(t, key), (*where, "f:" + key), out)
    elif t.kind == _STRUCT:
        assert t.message is not None
        if not isinstance(value, dict):
            raise BadRequestError(f"{path_string(where)}: expected an object")
        _set_of_struct(value, t.message, where, out)
    elif t.kind == _MAP:
        if not isinstance(value, dict):
            raise BadRequestError(f"{path_string(where)}: expected an object")
        for key, child in value.items():
            here = (*where, "f:" + key)
            out.add(here)
            if t.message is not None and isinstance(child, dict):
                _set_of_struct(child, t.message, here, out)
    else:
        if not isinstance(value, list):
            raise BadRequestError(f"{path_string(where)}: expected a list")
        for element, item in _index(value, t, where, strict=True).items():
            here = (*where, element)
            out.add(here)
            if t.kind == _ASSOC and t.message is not None:
                _set_of_struct(item, t.message, here, out)
            elif t.kind == _ASSOC and isinstance(item, dict):
                item_type = _item(t)
                for key, child in item.items():
                    _set_of(child, _child(item_type, key), (*here, "f:" + key), out)


def drop_undeclared(config: Mapping[str, Any], message: Descriptor) -> dict[str, Any]:
    """`config` without fields the schema does not declare (fieldValidation Warn/Ignore)."""
    out: dict[str, Any] = _drop_struct(config, message)
    return out


def _drop_struct(value: Any, message: Descriptor) -> Any:
    if not isinstance(value, dict):
        return value
    known = _fields(message)
    out = {}
    for key, child in value.items():
        t = known.get(key) or _undeclared(message)
        if t is not None:
            out[key] = _drop(child, t)
    return out


def _drop(value: Any, t: _Type) -> Any:
    if t.message is None or value is None:
        return value
    if t.kind == _STRUCT:
        return _drop_struct(value, t.message)
    if t.kind == _MAP and isinstance(value, dict):
        return {k: _drop_struct(v, t.message) for k, v in value.items()}
    if t.kind == _ASSOC and isinstance(value, list):
        return [_drop_struct(v, t.message) for v in value]
    return value


@dataclass
class Comparison:
    """What changed between two versions of an object."""

    added: FieldSet = field(default_factory=set)
    modified: FieldSet = field(default_factory=set)
    removed: FieldSet = field(default_factory=set)

    def changed(self) -> FieldSet:
        return self.added | self.modified


def compare(old: Mapping[str, Any], new: Mapping[str, Any], message: Descriptor) -> Comparison:
    """The fields `new` adds, modifies and removes relative to `old` (implicit fields left out)."""
    c = Comparison()
    _compare_struct(dict(old), dict(new), message, (), c)
    c.added = _without_implicit(c.added)
    c.modified = _without_implicit(c.modified)
    c.removed = _without_implicit(c.removed)
    return c


def _empty(value: Any) -> bool:
    return value is _ABSENT or value is None or value == {} or value == []


def _compare_struct(old: Any, new: Any, message: Descriptor, where: Path, c: Comparison) -> None:
    known = _fields(message)
    olds = old if isinstance(old, dict) else {}
    news = new if isinstance(new, dict) else {}
    for key in {**olds, **news}:
        if key == "managedFields" and where == ("f:metadata",):
            continue
        t = known.get(key) or _undeclared(message) or _Type(_LEAF)
        lv = olds.get(key, _ABSENT)
        rv = news.get(key, _ABSENT)
        if lv is _ABSENT and t.inline and isinstance(old, dict):
            lv = [] if t.kind == _ASSOC else {}  # Go's zero value of the parent has it
        _compare(lv, rv, t, (*where, "f:" + key), c)


def _leaf(lv: Any, rv: Any, where: Path, c: Comparison) -> None:
    if lv is _ABSENT:
        c.added.add(where)
    elif rv is _ABSENT:
        c.removed.add(where)
    elif lv != rv:
        c.modified.add(where)


def _compare(lv: Any, rv: Any, t: _Type, where: Path, c: Comparison) -> None:
    if t.kind == _LEAF or (_empty(lv) and _empty(rv)):
        _leaf(lv, rv, where, c)
        return
    if t.kind == _JSON:
        if not all(v is _ABSENT or isinstance(v, dict) for v in (lv, rv)):
            _leaf(lv, rv, where, c)
            return
        lm = lv if isinstance(lv, dict) else {}
        rm = rv if isinstance(rv, dict) else {}
        for key in {**lm, **rm}:
            _compare(
                lm.get(key, _ABSENT), rm.get(key, _ABSENT), _child(t, key), (*where, "f:" + key), c
            )
    elif t.kind == _STRUCT:
        assert t.message is not None
        _compare_struct(lv if lv is not _ABSENT else None, rv, t.message, where, c)
    elif t.kind == _MAP:
        lm = lv if isinstance(lv, dict) else {}
        rm = rv if isinstance(rv, dict) else {}
        for key in {**lm, **rm}:
            here = (*where, "f:" + key)
            a, b = lm.get(key, _ABSENT), rm.get(key, _ABSENT)
            if t.message is not None:
                _compare(a, b, _Type(_STRUCT, t.message), here, c)
                _member(a, b, here, c)
            else:
                _leaf(a, b, here, c)
    else:
        li = _index(lv, t, where, strict=False) if lv is not _ABSENT else {}
        ri = _index(rv, t, where, strict=False) if rv is not _ABSENT else {}
        for element in {**li, **ri}:
            here = (*where, element)
            a, b = li.get(element, _ABSENT), ri.get(element, _ABSENT)
            if t.kind == _ASSOC and t.message is not None:
                _compare_struct(
                    a if a is not _ABSENT else None,
                    b if b is not _ABSENT else None,
                    t.message,
                    here,
                    c,
                )
                _member(a, b, here, c)
            elif t.kind == _ASSOC:
                _compare(a, b, _item(t), here, c)
            else:
                _leaf(a, b, here, c)
    _member(lv, rv, where, c)


def _member(lv: Any, rv: Any, where: Path, c: Comparison) -> None:
    """A container that appears or disappears is itself added or removed."""
    if lv is _ABSENT and rv is not _ABSENT:
        c.added.add(where)
    elif rv is _ABSENT and lv is not _ABSENT:
        c.removed.add(where)


def _without_implicit(paths: FieldSet) -> FieldSet:
    out = set()
    for p in paths:
        if not p:
            continue
        if len(p) == 1 and (p[0][2:] in _STRIPPED_TOP or p[0] == "f:metadata"):
            continue
        if p[0] == "f:metadata" and len(p) >= 2 and p[1][2:] in _STRIPPED_META:
            continue
        out.add(p)
    return out


def merge(
    live: Mapping[str, Any], config: Mapping[str, Any], message: Descriptor
) -> dict[str, Any]:
    """`config` merged into `live`: configured values win, maps and keyed lists merge."""
    out: dict[str, Any] = _merge_struct(copy.deepcopy(dict(live)), config, message, ())
    return out


def _merge_struct(live: Any, config: Mapping[str, Any], message: Descriptor, where: Path) -> Any:
    out = live if isinstance(live, dict) else {}
    known = _fields(message)
    for key, value in config.items():
        t = known.get(key) or _undeclared(message) or _Type(_LEAF)
        out[key] = _merge(out.get(key, _ABSENT), value, t, (*where, "f:" + key))
    return out


def _merge(live: Any, value: Any, t: _Type, where: Path) -> Any:
    if live is _ABSENT or live is None or value is None or t.kind == _LEAF:
        return copy.deepcopy(value)
    if t.kind == _JSON and isinstance(value, dict) and isinstance(live, dict):
        for key, child in value.items():
            live[key] = _merge(live.get(key, _ABSENT), child, _child(t, key), (*where, "f:" + key))
        return live
    if t.kind == _STRUCT and isinstance(value, dict):
        assert t.message is not None
        return _merge_struct(live, value, t.message, where)
    if t.kind == _MAP and isinstance(value, dict) and isinstance(live, dict):
        for key, child in value.items():
            if t.message is not None and isinstance(child, dict):
                live[key] = _merge_struct(live.get(key), child, t.message, (*where, "f:" + key))
            else:
                live[key] = copy.deepcopy(child)
        return live
    if t.kind in (_ASSOC, _SET) and isinstance(value, list) and isinstance(live, list):
        index = _index(live, t, where, strict=False)
        positions = {element: i for i, element in enumerate(index)}
        items = list(index.values())
        for element, item in _index(value, t, where, strict=True).items():
            if element in positions:
                at = positions[element]
                if t.kind == _ASSOC and t.message is not None:
                    items[at] = _merge_struct(items[at], item, t.message, (*where, element))
                elif t.kind == _ASSOC:
                    items[at] = _merge(items[at], item, _item(t), (*where, element))
            else:
                positions[element] = len(items)
                items.append(copy.deepcopy(item))
        return items
    return copy.deepcopy(value)


def remove(obj: Mapping[str, Any], paths: FieldSet, message: Descriptor) -> dict[str, Any]:
    """`obj` without the values at `paths` (a removed container takes its children along)."""
    out = copy.deepcopy(dict(obj))
    for path in sorted(paths, key=len):
        _remove_one(out, path, message)
    return out


def _remove_one(root: dict[str, Any], path: Path, message: Descriptor) -> None:
    node: Any = root
    t: _Type = _Type(_STRUCT, message)
    for depth, element in enumerate(path):
        last = depth == len(path) - 1
        if isinstance(node, dict) and element.startswith("f:"):
            key = element[2:]
            if key not in node:
                return
            if last:
                del node[key]
                return
            if t.kind == _STRUCT:
                assert t.message is not None
                t = _fields(t.message).get(key) or _undeclared(t.message) or _Type(_LEAF)
            elif t.kind == _JSON:
                t = _child(t, key)
            else:
                t = _Type(_STRUCT, t.message) if t.message is not None else _Type(_LEAF)
            node = node[key]
        elif isinstance(node, list) and t.kind in (_ASSOC, _SET):
            where = path[:depth]
            found = None
            for i, item in enumerate(node):
                try:
                    key_of = (
                        _item_key(item, t, where) if t.kind == _ASSOC else "v:" + _compact(item)
                    )
                except BadRequestError:
                    continue
                if key_of == element:
                    found = i
            if found is None:
                return
            if last:
                del node[found]
                return
            node = node[found]
            if t.message is not None:
                t = _Type(_STRUCT, t.message)
            else:
                t = _item(t) if t.kind == _ASSOC else _Type(_LEAF)
        else:
            return


# ---- managed fields entries -----------------------------------------------------------------


@dataclass
class Entry:
    """One metadata.managedFields entry with its field set decoded."""

    manager: str
    operation: str
    api_version: str
    time: str
    fields: FieldSet
    subresource: str = ""

    @property
    def identity(self) -> tuple[str, str, str, str]:
        # Appliers are one manager whatever the version they applied (Kubernetes' rule).
        version = "" if self.operation == APPLY else self.api_version
        return (self.manager, self.operation, version, self.subresource)

    def describe(self) -> str:
        """The manager as conflict messages name it."""
        text = _go_quote(self.manager)
        if self.subresource:
            text += f" with subresource {_go_quote(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def decode_entries(data: Any) -> list[Entry]:
    """metadata.managedFields (Kubernetes JSON) as entries; BadRequestError if malformed."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise BadRequestError("metadata.managedFields: expected a list")
    out = []
    for i, item in enumerate(data):
        where = f"metadata.managedFields[{i}]"
        if not isinstance(item, dict):
            raise BadRequestError(f"{where}: expected an object")
        operation = item.get("operation", "")
        if operation not in (APPLY, UPDATE):
            raise BadRequestError(f"{where}: operation must be `Apply` or `Update`")
        if not item.get("apiVersion"):
            raise BadRequestError(f"{where}: apiVersion must not be empty")
        if item.get("fieldsType", "") != FIELDS_V1:
            raise BadRequestError(f'{where}: invalid fieldsType "{item.get("fieldsType", "")}"')
        fields = item.get("fieldsV1") or {}
        if not isinstance(fields, dict):
            raise BadRequestError(f"{where}.fieldsV1: expected an object")
        out.append(
            Entry(
                manager=str(item.get("manager", "")),
                operation=operation,
                api_version=str(item["apiVersion"]),
                time=str(item.get("time", "")),
                fields=fields_to_set(fields),
                subresource=str(item.get("subresource", "")),
            )
        )
    return out


def encode_entries(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    """Entries as metadata.managedFields, in Kubernetes' order (Apply first, then by time,
    manager, apiVersion, subresource); empty entries are dropped."""
    kept = [e for e in entries if e.fields]
    kept.sort(key=lambda e: (e.operation, e.time, e.manager, e.api_version, e.subresource))
    out = []
    for e in kept:
        item: dict[str, Any] = {
            "manager": e.manager,
            "operation": e.operation,
            "apiVersion": e.api_version,
        }
        if e.time:
            item["time"] = e.time
        item["fieldsType"] = FIELDS_V1
        item["fieldsV1"] = set_to_fields(e.fields)
        if e.subresource:
            item["subresource"] = e.subresource
        out.append(item)
    return out


def _scope(paths: FieldSet, subresource: str, has_status: bool) -> FieldSet:
    """The paths a write through `subresource` may own (Kubernetes' reset fields)."""
    if not has_status:
        return paths
    if subresource == "status":
        return {p for p in paths if p[0] == "f:status"}
    return {p for p in paths if p[0] != "f:status"}


# ---- the operations -------------------------------------------------------------------------


class ApplyConflict(ConflictError):
    """An apply would change fields other managers own (409 Conflict, reason Conflict)."""

    def __init__(self, conflicts: list[tuple[Entry, Path]]) -> None:
        self.conflicts = conflicts
        self.causes = [
            {
                "reason": "FieldManagerConflict",
                "message": f"conflict with {entry.describe()}",
                "field": path_string(path),
            }
            for entry, path in conflicts
        ]
        super().__init__(_conflict_message(conflicts))


def _conflict_message(conflicts: list[tuple[Entry, Path]]) -> str:
    if len(conflicts) == 1:
        entry, path = conflicts[0]
        return (
            f"Apply failed with 1 conflict: conflict with {entry.describe()}: {path_string(path)}"
        )
    by_manager: dict[str, list[Path]] = {}
    for entry, path in conflicts:
        by_manager.setdefault(entry.describe(), []).append(path)
    lines = []
    for manager in sorted(by_manager):
        lines.append(f"conflicts with {manager}:")
        lines.extend(f"- {path_string(p)}" for p in by_manager[manager])
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def _is_key(path: Path) -> bool:
    """A key field of a list item: it goes only with its item."""
    if len(path) < 2 or not path[-2].startswith("k:") or not path[-1].startswith("f:"):
        return False
    return path[-1][2:] in json.loads(path[-2][2:])


def _sort_key(path: Path) -> tuple[str, ...]:
    return path


@dataclass
class Applied:
    """The result of an apply: the object to write and whether anything but its managed
    fields changed (when not, Kubernetes keeps the live object and its managers' times)."""

    obj: dict[str, Any]
    changed: bool


def apply(
    live: Mapping[str, Any],
    config: Mapping[str, Any],
    message: Descriptor,
    *,
    manager: str,
    api_version: str,
    now: str,
    force: bool = False,
    subresource: str = "",
    has_status: bool = False,
) -> Applied:
    """Server-side apply of `config` (the request's object) to `live` (`{}` when creating).

    Returns the merged object with its metadata.managedFields set. Raises ApplyConflict (409)
    when the configuration changes fields other managers own and `force` is false, and
    BadRequestError for a configuration that does not fit the schema or carries
    metadata.managedFields."""
    if (config.get("metadata") or {}).get("managedFields") is not None:
        raise BadRequestError("metadata.managedFields must be nil")
    entries = decode_entries((live.get("metadata") or {}).get("managedFields"))
    applied = _scope(config_set(config, message), subresource, has_status)
    ident = (manager, APPLY, "", subresource)
    previous = next((e for e in entries if e.identity == ident), None)
    last = previous.fields if previous is not None else set()
    others = [e for e in entries if e.identity != ident]

    merged = merge(live, config, message)
    # What this manager applied before and no one owns now goes (structured-merge-diff's
    # prune): nothing still owned, nor anything holding an owned field, is removed.
    owned = _prefixes(applied.union(*(e.fields for e in others)))
    merged = remove(merged, {p for p in last if p not in owned and not _is_key(p)}, message)

    diff = compare(live, merged, message)
    changed = diff.changed()
    conflicts = [
        (e, p)
        for e in sorted(others, key=lambda e: e.manager)
        for p in sorted(e.fields & changed, key=_sort_key)
    ]
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for e in others:
        e.fields -= changed | diff.removed
    entry = Entry(manager, APPLY, api_version, now, applied, subresource)
    if previous is not None and not (changed or diff.removed):
        entry.time = previous.time  # nothing changed: Kubernetes leaves the time alone
    merged.setdefault("metadata", {})["managedFields"] = encode_entries([*others, entry])
    return Applied(merged, bool(changed or diff.removed))


def update(
    live: Mapping[str, Any],
    new: Mapping[str, Any],
    message: Descriptor,
    *,
    manager: str,
    api_version: str,
    now: str,
    subresource: str = "",
    has_status: bool = False,
) -> list[dict[str, Any]] | None:
    """The metadata.managedFields after a non-apply write of `new` over `live` (`{}` for a
    create); None when they stay as they are.

    The base is `new`'s own managedFields when a main-resource write carries any (a client may
    edit them), otherwise `live`'s; malformed ones in the request fall back to `live`'s."""
    base: Any = None
    if not subresource:
        base = (new.get("metadata") or {}).get("managedFields")
    try:
        entries = decode_entries(base) if base else []
    except BadRequestError:
        entries = []
    if not entries:
        entries = decode_entries((live.get("metadata") or {}).get("managedFields"))
    diff = compare(live, new, message)
    taken = _scope(diff.changed(), subresource, has_status)
    removed = diff.removed
    live_entries = (live.get("metadata") or {}).get("managedFields")
    if not taken and not removed and (not base or base == live_entries):
        return None
    ident = (manager, UPDATE, api_version, subresource)
    current = next((e for e in entries if e.identity == ident), None)
    for e in entries:
        e.fields -= taken | removed
    if taken:
        if current is None:
            current = Entry(manager, UPDATE, api_version, now, set(), subresource)
            entries.append(current)
        current.fields |= taken
        current.time = now
    return encode_entries(entries)


def manager_from_user_agent(user_agent: str) -> str:
    """The field manager Kubernetes names a request by when it names none: the user agent up
    to its first "/", at most 128 characters (`kubectl/v1.37.0 (linux/amd64)` -> kubectl)."""
    return user_agent.split("/", 1)[0][:128]


# ---- messages (the resource layer's objects) ------------------------------------------------


def rfc3339(when: datetime) -> str:
    """A metav1.Time as Kubernetes prints it: UTC, whole seconds."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def set_entries(obj: Message, entries: Iterable[Mapping[str, Any]]) -> None:
    """Replace the object's metadata.managedFields with `entries` (Kubernetes JSON)."""
    meta = obj.metadata  # type: ignore[attr-defined]
    del meta.managedFields[:]
    for entry in entries:
        json_format.ParseDict(dict(entry), meta.managedFields.add())


def record_update(
    old: Message | None,
    new: Message,
    info: KindInfo,
    *,
    manager: str,
    now: datetime,
    subresource: str = "",
) -> None:
    """Record a non-apply write of `new` (over `old`, None for a create) in its managedFields.

    Costs two `to_dict`s and a walk of both objects: the REST front end records every write;
    the gRPC one only when the caller names a field manager."""
    live = to_dict(old, zero_fields=False) if old is not None else {}
    descriptor: Any = new.DESCRIPTOR
    entries = update(
        live,
        to_dict(new, zero_fields=False),
        descriptor,
        manager=manager,
        api_version=info.api_version,
        now=rfc3339(now),
        subresource=subresource,
        has_status=info.has_status,
    )
    if entries is not None:
        set_entries(new, entries)


def keep_managed_fields(new: Message, old: Message) -> None:
    """A write that carries no managedFields keeps the stored ones (Kubernetes: clients that
    do not know about them must not erase them)."""
    nm = new.metadata  # type: ignore[attr-defined]
    om = old.metadata  # type: ignore[attr-defined]
    if not nm.managedFields and om.managedFields:
        nm.managedFields.extend(om.managedFields)
