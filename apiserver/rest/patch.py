"""PATCH for the REST API: JSON patch, JSON merge patch and strategic merge patch.

`apply_patch` takes the stored object as Kubernetes JSON and a request body and returns the
patched document, which the caller then decodes strictly and validates like a PUT. The three
patch types behave as kube-apiserver's:

- JSON patch (RFC 6902, `application/json-patch+json`), applied with the `jsonpatch` library
  under kube-apiserver's limits: at most 10,000 operations (413) and 3 MiB copied by `copy`
  operations. A patch that is not a list of objects is 400; an operation that cannot be
  applied (a failed `test`, a missing path, an unknown op) is 422 with Kubernetes' generic
  text, the library's reason chained as the cause.
- JSON merge patch (RFC 7386, `application/merge-patch+json`) as evanphx/json-patch v4 merges
  it (nulls are also dropped inside replaced values and arrays).
- Strategic merge patch (`application/strategic-merge-patch+json`) as apimachinery's
  strategicpatch package applies it on the server: lists of objects with a merge key are merged
  by key, primitive lists with the merge strategy are unions, other lists are replaced, maps
  merge, `null` deletes, and the directives `$patch` (replace, delete; merge is refused, as
  there), `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>` and `$retainKeys`.
  Element order follows apimachinery exactly, including its use of Go's stable sort.

The merge strategy and key of each list field come from `PATCH_META`, the one table mirroring
the `patchStrategy`/`patchMergeKey` struct tags of Kubernetes' types for the fields tinykube
has; the OpenAPI documents read it through `patch_meta`. Kubernetes answers some malformed
strategic patches with a 500 (its error is untyped there); tinykube answers 400 with the same
text, since bad input is never a server error. Pure functions, no I/O; the original is not
modified.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonpatch
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from tinykube.errors import BadRequestError, InvalidError, RequestEntityTooLargeError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_CONTENT_TYPES: frozenset[str] = frozenset({JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH})

# kube-apiserver's limits on one JSON patch (handlers/patch.go, --json-patch-max-copy-bytes).
MAX_JSON_PATCH_OPERATIONS = 10_000
MAX_JSON_PATCH_COPY_BYTES = 3 * 1024 * 1024

# kube-apiserver's texts.
INVALID_JSON = "invalid JSON patch"  # any patch body that is not JSON at all
INVALID_MERGE_PATCH = "Invalid JSON Patch"  # evanphx's ErrBadJSONPatch: a null or scalar body
REJECTED = "the server rejected our request due to an error in our request"  # a bare 422
UNSUPPORTED_MEDIA_TYPE = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, "
    "application/strategic-merge-patch+json"
)

# (message full name, JSON field) -> (patchStrategy, patchMergeKey), from the struct tags of
# k8s.io/api and k8s.io/apimachinery. Every other repeated field tinykube has is atomic there
# (no patchStrategy: a strategic patch replaces it whole), including NodeSpec.taints,
# PodSpec.tolerations, PodStatus.containerStatuses and Endpoints.subsets;
# tests/unit/rest/test_patch.py lists them and fails when a new repeated field is in neither.
PATCH_META: dict[tuple[str, str], tuple[str, str]] = {
    ("tinykube.v1.ObjectMeta", "ownerReferences"): ("merge", "uid"),
    ("tinykube.v1.ObjectMeta", "finalizers"): ("merge", ""),
    ("tinykube.v1.PodSpec", "initContainers"): ("merge", "name"),
    ("tinykube.v1.PodSpec", "topologySpreadConstraints"): ("merge", "topologyKey"),
    ("tinykube.v1.PodSpec", "schedulingGates"): ("merge", "name"),
    ("tinykube.v1.PodSpec", "containers"): ("merge", "name"),
    ("tinykube.v1.Container", "ports"): ("merge", "containerPort"),
    ("tinykube.v1.Container", "env"): ("merge", "name"),
    # kube's is "merge,retainKeys": the retained keys matter only for a volume's source.
    ("tinykube.v1.PodSpec", "volumes"): ("merge", "name"),
    ("tinykube.v1.Container", "volumeMounts"): ("merge", "mountPath"),
    ("tinykube.v1.PodSpec", "imagePullSecrets"): ("merge", "name"),
    ("tinykube.v1.PodStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.PodStatus", "podIPs"): ("merge", "ip"),
    ("tinykube.v1.PodStatus", "hostIPs"): ("merge", "ip"),
    ("tinykube.v1.NodeStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.NodeStatus", "addresses"): ("merge", "type"),
    ("tinykube.v1.ReplicaSetStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.DeploymentStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.ServiceSpec", "ports"): ("merge", "port"),
    ("tinykube.v1.PodDisruptionBudgetStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.DaemonSetStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.NamespaceStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.JobStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.ServiceAccount", "secrets"): ("merge", "name"),
}

# tinykube message names that are not Kubernetes' Go type names (errors name the Go type).
_GO_NAMES = {"ServiceEndpoints": "Endpoints", "EndpointSlicePort": "EndpointPort"}


def patch_meta(message_full_name: str, json_field: str) -> tuple[str, str] | None:
    """The (patchStrategy, patchMergeKey) of a field, or None where Kubernetes has none.

    A primitive list with the merge strategy has an empty merge key: ("merge", "")."""
    return PATCH_META.get((message_full_name, json_field))


def apply_patch(
    content_type: str, original: dict[str, Any], patch: bytes, descriptor: Any
) -> dict[str, Any]:
    """Apply a PATCH body of `content_type` to `original` (a kind's Kubernetes JSON).

    `descriptor` is the kind's protobuf message descriptor. Raises BadRequestError (400) for a
    body that is not JSON or not the shape its type needs, InvalidError (422) for a patch that
    cannot be applied, RequestEntityTooLargeError (413) for a JSON patch over the operation limit.
    """
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type not in PATCH_CONTENT_TYPES:
        raise BadRequestError(UNSUPPORTED_MEDIA_TYPE)
    document = _parse(patch)
    if media_type == JSON_PATCH:
        result = _apply_json_patch(original, document)
    elif media_type == MERGE_PATCH:
        result = _apply_merge_patch(original, document)
    else:
        result = _apply_strategic_patch(original, document, descriptor)
    if not isinstance(result, dict):
        # kube-apiserver fails decoding the result into the kind's struct.
        raise InvalidError(
            f'{_go_name(descriptor)} is invalid: patch: Invalid value: "{_compact(result)}": '
            f"json: cannot unmarshal {_json_kind(result)} into an object"
        )
    return result


def _parse(body: bytes) -> Any:
    def reject_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(body.decode("utf-8", errors="replace"), parse_constant=reject_constant)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the limit
        raise BadRequestError(INVALID_JSON) from exc


# --- JSON patch ---------------------------------------------------------------------------


def _apply_json_patch(original: dict[str, Any], operations: Any) -> Any:
    if operations is None:  # Go decodes null as an empty patch
        return copy.deepcopy(original)
    if not isinstance(operations, list):
        raise BadRequestError(
            f"json: cannot unmarshal {_json_kind(operations)} into Go value of type jsonpatch.Patch"
        )
    for operation in operations:
        if operation is not None and not isinstance(operation, dict):
            raise BadRequestError(
                f"json: cannot unmarshal {_json_kind(operation)} "
                "into Go value of type jsonpatch.Operation"
            )
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        raise RequestEntityTooLargeError(
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
            f"got {len(operations)}"
        )
    document: Any = copy.deepcopy(original)
    copied = 0
    for operation in operations:
        try:
            if operation is None:
                raise ValueError("Unexpected kind: unknown")
            if operation.get("op") == "copy":
                source = jsonpatch.JsonPointer(operation.get("from")).resolve(document)
                copied += len(_compact(source))
                if copied > MAX_JSON_PATCH_COPY_BYTES:
                    raise ValueError(
                        "Unable to complete the copy, the accumulated size increase of copy is "
                        f"{copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
                    )
            document = jsonpatch.JsonPatch([operation]).apply(document, in_place=True)
        except (
            jsonpatch.JsonPatchException,
            jsonpatch.JsonPointerException,
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
        ) as exc:
            # kube-apiserver answers 422 with its generic text, the library's reason dropped;
            # the reason stays in the cause chain for logs.
            raise InvalidError(REJECTED) from exc
    return document


# --- JSON merge patch ---------------------------------------------------------------------


def _apply_merge_patch(original: dict[str, Any], patch: Any) -> Any:
    if isinstance(patch, list):
        return _prune_nulls(patch)  # the result is the array (and so not an object)
    if not isinstance(patch, dict):
        raise BadRequestError(INVALID_MERGE_PATCH)
    document = copy.deepcopy(original)
    _merge_documents(document, patch)
    return document


def _merge_documents(document: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            document.pop(key, None)
            continue
        current = document.get(key)
        if current is None:
            document[key] = _prune_nulls(value)
        elif isinstance(current, dict) and isinstance(value, dict):
            _merge_documents(current, value)
        elif isinstance(current, dict):
            document[key] = value  # evanphx returns a non-object patch value unpruned here
        else:
            document[key] = _prune_nulls(value)


def _prune_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value if v is not None]
    return value


# --- strategic merge patch: schema ----------------------------------------------------------

_PATCH = "$patch"
_DELETE = "delete"
_REPLACE = "replace"
_MERGE = "merge"
_RETAIN_KEYS = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList"
_SET_ELEMENT_ORDER = "$setElementOrder"

_SCALAR_KINDS = {
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_SINT32: "int32",
    FieldDescriptor.TYPE_SFIXED32: "int32",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_SINT64: "int64",
    FieldDescriptor.TYPE_SFIXED64: "int64",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_FIXED32: "uint32",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_FIXED64: "uint64",
    FieldDescriptor.TYPE_DOUBLE: "float64",
    FieldDescriptor.TYPE_FLOAT: "float32",
    FieldDescriptor.TYPE_ENUM: "string",
    FieldDescriptor.TYPE_BYTES: "slice",
}


class _PatchError(Exception):
    """A strategic patch apimachinery refuses; `unprocessable` where it answers 422."""

    def __init__(self, message: str, *, unprocessable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.unprocessable = unprocessable


@dataclass(frozen=True)
class _Type:
    """The Go type a JSON value decodes into, as strategicpatch's struct lookup sees it:
    its reflect kind ("struct", "map", "slice", "string", ...), the message of a struct and
    the element type of a slice."""

    kind: str
    message: Descriptor | None = None
    elem: _Type | None = None

    @staticmethod
    def of_field(field: FieldDescriptor) -> _Type:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            return _Type("map")
        single = (
            _Type("struct", field.message_type)
            if field.message_type is not None
            else _Type(_SCALAR_KINDS.get(field.type, "string"))
        )
        if getattr(field, "is_repeated", False):
            return _Type("slice", elem=single)
        return single

    def lookup_struct(self, key: str) -> tuple[_Type, list[str], str]:
        """The field's type, patch strategies and merge key."""
        if self.kind != "struct" or self.message is None:
            raise _PatchError(
                f"merging an object in json but data type is not struct, instead is: {self.kind}"
            )
        field = _find_field(self.message, key)
        if field is None:
            raise _PatchError(
                f"unable to find api field in struct {_go_name(self.message)} "
                f'for the json field "{key}"'
            )
        strategy, merge_key = PATCH_META.get((self.message.full_name, field.json_name), ("", ""))
        return _Type.of_field(field), strategy.split(","), merge_key

    def lookup_slice(self, key: str) -> tuple[_Type, list[str], str]:
        """The element type of the list field, its patch strategies and merge key."""
        field_type, strategies, merge_key = self.lookup_struct(key)
        if field_type.kind != "slice" or field_type.elem is None:
            raise _PatchError(f"expected slice or array type, but got: {self.kind}")
        if field_type.elem.kind == "slice":
            raise _PatchError("unexpected slice of slice")
        return field_type.elem, strategies, merge_key


def _find_field(message: Descriptor, key: str) -> FieldDescriptor | None:
    folded = None
    for field in message.fields:
        if field.json_name == key:
            return field
        if folded is None and field.json_name.casefold() == key.casefold():
            folded = field  # encoding/json matches field names case-insensitively too
    return folded


def _go_name(message: Any) -> str:
    name = str(getattr(message, "name", "object"))
    return _GO_NAMES.get(name, name)


def _retain_keys_and_strategy(strategies: list[str]) -> str:
    """The list/map strategy apart from retainKeys (which applies through the directive)."""
    if len(strategies) == 1:
        return "" if strategies[0] == "retainKeys" else strategies[0]
    if len(strategies) == 2:
        if strategies[0] == "retainKeys":
            return strategies[1]
        if strategies[1] == "retainKeys":
            return strategies[0]
    if not strategies:
        return ""
    raise _PatchError(f"unexpected patch strategy: {_gofmt(strategies)}")


# --- strategic merge patch: Go's value semantics --------------------------------------------


def _go_type(value: Any) -> str:
    """reflect.TypeOf(value) of a decoded JSON value, as Go prints it."""
    if value is None:
        return "<nil>"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "string"


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "null"


def _gofmt(value: Any) -> str:
    """fmt's %v of a decoded JSON value: map[a:1 b:[x y]]."""
    if value is None:
        return "<nil>"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_gofmt(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_gofmt(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    return str(value)


def _go_equal(left: Any, right: Any) -> bool:
    """Go's == on two interface{} values: same dynamic type and equal (1 and 1.0 differ)."""
    if _go_type(left) != _go_type(right):
        return False
    if isinstance(left, dict | list):
        raise _PatchError(f"runtime error: comparing uncomparable type {_go_type(left)}")
    return bool(left == right)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _bad_arg_type(expected: str, actual: Any) -> _PatchError:
    return _PatchError(f"expected a {expected}, but received a {_go_type(actual)}")


def _no_merge_key(item: dict[str, Any], merge_key: str) -> _PatchError:
    return _PatchError(f"map: {_gofmt(item)} does not contain declared merge key: {merge_key}")


def _go_stable_sort(items: list[Any], less: Callable[[Any, Any], bool]) -> None:
    """Go's sort.SliceStable (insertion sort of blocks of 20, then SymMerge), in place.

    apimachinery sorts with a comparator that is not a strict order (an item missing from the
    order list is "less" than anything), so only Go's exact algorithm gives Go's order."""

    def lt(i: int, j: int) -> bool:
        return less(items[i], items[j])

    def swap(i: int, j: int) -> None:
        items[i], items[j] = items[j], items[i]

    def insertion_sort(a: int, b: int) -> None:
        for i in range(a + 1, b):
            j = i
            while j > a and lt(j, j - 1):
                swap(j, j - 1)
                j -= 1

    def swap_range(a: int, b: int, n: int) -> None:
        for i in range(n):
            swap(a + i, b + i)

    def rotate(a: int, m: int, b: int) -> None:
        i, j = m - a, b - m
        while i != j:
            if i > j:
                swap_range(m - i, m, j)
                i -= j
            else:
                swap_range(m - i, m + j - i, i)
                j -= i
        swap_range(m - i, m, i)

    def sym_merge(a: int, m: int, b: int) -> None:
        if m - a == 1:
            i, j = m, b
            while i < j:
                h = (i + j) >> 1
                if lt(h, a):
                    i = h + 1
                else:
                    j = h
            for k in range(a, i - 1):
                swap(k, k + 1)
            return
        if b - m == 1:
            i, j = a, m
            while i < j:
                h = (i + j) >> 1
                if not lt(m, h):
                    i = h + 1
                else:
                    j = h
            for k in range(m, i, -1):
                swap(k, k - 1)
            return
        mid = (a + b) >> 1
        n = mid + m
        if m > mid:
            start, r = n - b, mid
        else:
            start, r = a, m
        p = n - 1
        while start < r:
            c = (start + r) >> 1
            if not lt(p - c, c):
                start = c + 1
            else:
                r = c
        end = n - start
        if start < m < end:
            rotate(start, m, end)
        if a < start < mid:
            sym_merge(a, start, mid)
        if mid < end < b:
            sym_merge(mid, end, b)

    n = len(items)
    block = 20
    a, b = 0, block
    while b <= n:
        insertion_sort(a, b)
        a, b = b, b + block
    insertion_sort(a, n)
    while block < n:
        a, b = 0, 2 * block
        while b <= n:
            sym_merge(a, a + block, b)
            a, b = b, b + 2 * block
        if a + block < n:
            sym_merge(a, a + block, n)
        block *= 2


# --- strategic merge patch: lists -----------------------------------------------------------


def _element_kind(*lists: list[Any]) -> str:
    """ "map" or "scalar" for the elements of all `lists`, which must share one type."""
    first: str | None = None
    for values in lists:
        for value in values:
            current = _go_type(value)
            if first is None:
                first = current
                if isinstance(value, list):
                    raise _PatchError("lists of lists are not supported", unprocessable=True)
            elif current != first:
                shown = "[" + " ".join(_gofmt(v) for v in lists) + "]"
                raise _PatchError(f"list element types are not identical: {shown}")
    if first is None:
        raise _PatchError("no elements in any of the given slices")
    return "map" if first == "map[string]interface {}" else "scalar"


def _key_of(item: Any, merge_key: str, kind: str) -> Any:
    if kind == "map":
        return item.get(merge_key) if isinstance(item, dict) else None
    return item


def _index(values: list[Any], wanted: Any, merge_key: str, kind: str) -> int:
    key = _key_of(wanted, merge_key, kind)
    for i, value in enumerate(values):
        if _go_equal(key, _key_of(value, merge_key, kind)):
            return i
    return -1


def _check_merge_keys(merge_key: str, *lists: list[Any]) -> None:
    for values in lists:
        for item in values:
            if not isinstance(item, dict):
                raise _bad_arg_type("map[string]interface {}", item)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)


def _split_deletions(values: list[Any]) -> tuple[list[Any], list[Any]]:
    kept: list[Any] = []
    deleted: list[Any] = []
    for item in values:
        if not isinstance(item, dict):
            raise _bad_arg_type("map[string]interface {}", item)
        (deleted if item.get(_PATCH) == _DELETE else kept).append(item)
    return kept, deleted


def _sort_by_order(values: list[Any], order: list[Any], merge_key: str, kind: str) -> list[Any]:
    deleted: list[Any] = []
    if kind == "map":
        _check_merge_keys(merge_key, values, order)
        values, deleted = _split_deletions(values)
    values = list(values)

    def less(left: Any, right: Any) -> bool:
        i = _index(order, left, merge_key, kind)
        if i >= 0:
            j = _index(order, right, merge_key, kind)
            if j >= 0:
                return i < j
        return True

    _go_stable_sort(values, less)
    return values + deleted


def _merge_sorted(
    left: list[Any], right: list[Any], server_order: list[Any], merge_key: str, kind: str
) -> list[Any]:
    """Interleave server-only items (`left`) into patch items (`right`), keeping both orders;
    a server-only item goes first only when the live list has it before the patch item."""
    merged: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            merged.append(right[j])
            j += 1
        elif j >= len(right):
            merged.append(left[i])
            i += 1
        else:
            li = _index(server_order, left[i], merge_key, kind)
            ri = _index(server_order, right[j], merge_key, kind)
            if li >= 0 and ri >= 0 and li < ri:
                merged.append(left[i])
                i += 1
            else:
                merged.append(right[j])
                j += 1
    return merged


def _normalize_order(
    patch_items: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    merge_key: str,
    kind: str,
) -> list[Any]:
    patch_items = _sort_by_order(patch_items, patch_order, merge_key, kind)
    server_only = _sort_by_order(server_only, server_order, merge_key, kind)
    return _merge_sorted(server_only, patch_items, server_order, merge_key, kind)


def _contains(values: list[Any], item: Any) -> bool:
    if isinstance(item, dict | list):
        raise _PatchError(f"runtime error: hash of unhashable type {_go_type(item)}")
    return any(_go_equal(item, v) for v in values if not isinstance(v, dict | list))


def _partition_primitives(values: list[Any], by: list[Any]) -> tuple[list[Any], list[Any]]:
    present: list[Any] = []
    absent: list[Any] = []
    for value in values:
        (present if _contains(by, value) else absent).append(value)
    return present, absent


def _find_by_key(values: list[Any], merge_key: str, key: Any) -> int:
    for i, value in enumerate(values):
        if not isinstance(value, dict):
            raise _PatchError(f"value for key {i} is not a map")
        if merge_key in value and _go_equal(value[merge_key], key):
            return i
    return -1


def _partition_maps(
    values: list[Any], by: list[Any], merge_key: str
) -> tuple[list[Any], list[Any]]:
    present: list[Any] = []
    absent: list[Any] = []
    for value in values:
        if not isinstance(value, dict):
            raise _bad_arg_type("map[string]interface {}", value)
        if merge_key not in value:
            raise _no_merge_key(value, merge_key)
        found = _find_by_key(by, merge_key, value[merge_key]) >= 0
        (present if found else absent).append(value)
    return present, absent


def _partition(values: list[Any], by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    if merge_key:
        return _partition_maps(values, by, merge_key)
    return _partition_primitives(values, by)


def _dedup_scalars(values: list[Any]) -> list[Any]:
    """apimachinery's in-place deduplication, which moves the last item into each hole."""
    values = list(values)
    last = len(values) - 1
    i = 0
    while i < last:
        j = i + 1
        while j <= last:
            if _go_equal(values[i], values[j]):
                values[j] = values[last]
                values = values[:last]
                last -= 1
                j -= 1
            j += 1
        i += 1
    return values


def _merge_list(
    original: list[Any],
    patch: list[Any],
    schema: _Type,
    merge_key: str,
    deletion_list: bool,
) -> list[Any]:
    """Merge `patch` into `original`, writing through to `original` where Go would.

    apimachinery deletes items in place (Go's append(s[:k], s[k+1:]...)) and appends into the
    freed slots of the same array, so the live list a `$setElementOrder` later orders against
    sees those writes; the stored object's lists have no spare capacity (they come from
    ToUnstructured), so writes past its length go to a new array that the live list does not
    see. `original` is mutated exactly that way; the merged list is returned."""
    if not original and not patch:
        return original
    kind = _element_kind(original, patch)
    if kind != "map":
        if deletion_list:
            return [v for v in original if not _contains(patch, v)]
        merged = _dedup_scalars(original + patch)
        patch_items, server_only = _partition(merged, patch, merge_key)
        return _normalize_order(patch_items, server_only, patch, original, merge_key, kind)
    if not merge_key:
        raise _PatchError(f"cannot merge lists without merge key for {schema.kind}")
    length, plain, replace = _apply_list_directives(original, patch, merge_key)
    if replace:
        base, patch, live = plain, [], False
    else:
        base, patch, live = original[:length], plain, True
    server_order = list(base)
    merged = _merge_by_key(base, patch, merge_key, schema, original if live else None)
    patch_items, server_only = _partition(merged, patch, merge_key)
    return _normalize_order(patch_items, server_only, patch, server_order, merge_key, kind)


def _apply_list_directives(
    original: list[Any], patch: list[Any], merge_key: str
) -> tuple[int, list[Any], bool]:
    """Apply the `{"$patch": ...}` items of `patch`, deleting in place from `original`.

    Returns the live length of `original`, the patch without directive items, and whether one
    of them was `replace` (the list becomes those patch items)."""
    plain: list[Any] = []
    replace = False
    length = len(original)
    for item in patch:
        if _PATCH not in item:
            plain.append(item)
            continue
        directive = item[_PATCH]
        if directive == _DELETE:
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
            while (at := _find_by_key(original[:length], merge_key, item[merge_key])) >= 0:
                original[at : length - 1] = original[at + 1 : length]
                length -= 1
        elif directive == _REPLACE:
            replace = True
        elif directive == _MERGE:
            raise _PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise _PatchError(f"unknown patch type: {_gofmt(directive)} in map: {_gofmt(item)}")
    return length, plain, replace


def _merge_by_key(
    base: list[Any],
    patch: list[Any],
    merge_key: str,
    schema: _Type,
    backing: list[Any] | None,
) -> list[Any]:
    """Merge patch items into `base` by key, appending new ones; writes also land in
    `backing` (the array `base` is a prefix of) until an append outgrows it."""
    items = list(base)
    for item in patch:
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        at = _find_by_key(items, merge_key, item[merge_key])
        if at >= 0:
            items[at] = _merge_map(items[at], item, schema)
        else:
            at = len(items)
            items.append(item)  # as sent: apimachinery strips neither directives nor nulls
        if backing is not None:
            if len(items) > len(backing):
                backing = None  # Go reallocated: the live list no longer sees the writes
            else:
                backing[at] = items[at]
    return items


def _merge_list_field(
    original: Any,
    patch: Any,
    schema: _Type,
    strategy: str,
    merge_key: str,
    deletion_list: bool,
) -> list[Any]:
    if not isinstance(original, list):
        raise _bad_arg_type("[]interface {}", original)
    if not isinstance(patch, list):
        raise _bad_arg_type("[]interface {}", patch)
    if strategy == _MERGE or deletion_list:
        return _merge_list(original, patch, schema, merge_key, deletion_list)
    return patch


# --- strategic merge patch: maps ------------------------------------------------------------


def _strip_directives(value: Any) -> tuple[Any, bool]:
    """The value without `$patch` maps, and whether to keep it at all."""
    if isinstance(value, dict):
        if _PATCH in value:
            return None, False
        for key in list(value):
            stripped, keep = _strip_directives(value[key])
            if keep:
                value[key] = stripped
            else:
                del value[key]
        return value, True
    if isinstance(value, list):
        kept = []
        for item in value:
            stripped, keep = _strip_directives(item)
            if keep:
                kept.append(stripped)
        return kept, True
    return value, True


def _discard_nulls(value: Any) -> None:
    if isinstance(value, dict):
        for key in list(value):
            if value[key] is None:
                del value[key]
            else:
                _discard_nulls(value[key])
    elif isinstance(value, list):
        for item in value:
            _discard_nulls(item)


def _directive_key(key: str, prefix: str, error: str) -> str:
    head, sep, rest = key.partition("/")
    if not sep or head != prefix:
        raise _PatchError(error)
    return rest


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retain = patch.pop(_RETAIN_KEYS)
    if not isinstance(retain, list):
        raise _PatchError("invalid patch format of retainKeys")
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER)):
            continue
        if not _contains(retain, key):
            raise _PatchError("invalid patch format of retainKeys")
    for key in list(original):
        if not _contains(retain, key):
            del original[key]


def _check_against_set_order(patch_list: Any, order: Any, merge_key: str) -> None:
    """Every patch item must appear in the $setElementOrder list, in the same order."""
    if not isinstance(order, list) or not isinstance(patch_list, list):
        raise _PatchError("invalid patch format of setElementOrder list")
    if not order or not patch_list:
        return
    items = _split_deletions(patch_list)[0] if merge_key else patch_list
    p = s = 0
    while p < len(items) and s < len(order):
        if isinstance(items[p], dict) and _PATCH in items[p]:
            p += 1
            continue
        if _same_key(items[p], order[s], merge_key):
            p += 1
        s += 1
    if p < len(items) and s >= len(order):
        raise _PatchError(
            f"The order in patch list:\n{_gofmt(patch_list)}\n doesn't match "
            f"{_SET_ELEMENT_ORDER} list:\n{_gofmt(order)}\n"
        )


def _same_key(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return _go_equal(left, right)
    for item in (left, right):
        if not isinstance(item, dict):
            raise _bad_arg_type("map[string]interface {}", item)
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
    return _go_equal(left[merge_key], right[merge_key])


def _apply_set_element_orders(
    original: dict[str, Any], patch: dict[str, Any], schema: _Type
) -> None:
    """Merge each list named by a `$setElementOrder/<field>` and put it in that order; the
    directive and its list leave the patch."""
    for key in [k for k in patch if k.startswith(_SET_ELEMENT_ORDER)]:
        order = patch.pop(key)
        if not isinstance(order, list):
            raise _bad_arg_type("[]interface {}", order)
        field = _directive_key(
            key, _SET_ELEMENT_ORDER, "invalid patch format of setElementOrder list"
        )
        in_original, in_patch = field in original, field in patch
        original_list: list[Any] = []
        patch_list: list[Any] = []
        if in_original:
            if not isinstance(original[field], list):
                raise _bad_arg_type("[]interface {}", original[field])
            original_list = original[field]
        if in_patch:
            if not isinstance(patch[field], list):
                raise _bad_arg_type("[]interface {}", patch[field])
            patch_list = patch[field]
        element, strategies, merge_key = schema.lookup_slice(field)
        strategy = _retain_keys_and_strategy(strategies)
        _check_against_set_order(patch_list, order, merge_key)
        if in_original and not in_patch:
            merged = original_list
        elif in_patch and not in_original:
            merged = _strip_directives(patch_list)[0]
        elif in_original and in_patch:
            merged = _merge_list_field(
                original_list, patch_list, element, strategy, merge_key, False
            )
        else:
            continue
        patch_items, server_only = _partition(merged, order, merge_key)
        kind = _element_kind(original_list, patch_list)
        original[field] = _normalize_order(
            patch_items, server_only, order, original_list, merge_key, kind
        )
        patch.pop(field, None)


def _merge_map(current_map: Any, patch: dict[str, Any], schema: _Type) -> dict[str, Any]:
    if _PATCH in patch:
        directive = patch[_PATCH]
        if directive == _REPLACE:
            del patch[_PATCH]
            return patch
        if directive == _DELETE:
            return {}
        raise _PatchError(f"unknown patch type: {_gofmt(directive)} in map: {_gofmt(patch)}")
    original: dict[str, Any] = current_map if isinstance(current_map, dict) else {}
    _apply_retain_keys(original, patch)
    _apply_set_element_orders(original, patch, schema)
    for key, value in list(patch.items()):
        deletion_list = key.startswith(_DELETE_FROM_PRIMITIVE_LIST)
        if deletion_list:
            key = _directive_key(
                key, _DELETE_FROM_PRIMITIVE_LIST, "invalid patch format of primitive list"
            )
        if value is None:
            original.pop(key, None)
            continue
        current = original.get(key, _MISSING)
        if current is _MISSING or _go_type(current) != _go_type(value):
            if not deletion_list:
                _discard_nulls(value)
                stripped, keep = _strip_directives(value)
                if keep:
                    original[key] = stripped
                else:
                    original.pop(key, None)
            continue
        if isinstance(current, dict):
            field_type, strategies, _ = schema.lookup_struct(key)
            if _retain_keys_and_strategy(strategies) == _REPLACE:
                original[key] = value
            else:
                original[key] = _merge_map(current, value, field_type)
        elif isinstance(current, list):
            element, strategies, merge_key = schema.lookup_slice(key)
            original[key] = _merge_list_field(
                current,
                value,
                element,
                _retain_keys_and_strategy(strategies),
                merge_key,
                deletion_list,
            )
        else:
            original[key] = value
    return original


_MISSING = object()


def _apply_strategic_patch(original: dict[str, Any], patch: Any, descriptor: Any) -> Any:
    if patch is None:  # Go decodes null into an empty map
        patch = {}
    if not isinstance(patch, dict):
        raise BadRequestError(
            f"json: cannot unmarshal {_json_kind(patch)} "
            "into Go value of type map[string]interface {}"
        )
    try:
        return _merge_map(copy.deepcopy(original), patch, _Type("struct", descriptor))
    except _PatchError as exc:
        if exc.unprocessable:
            raise InvalidError(REJECTED) from exc
        raise BadRequestError(exc.message) from exc
