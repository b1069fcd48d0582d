"""Writes tinykube/zerofields.py: the fields Kubernetes always prints, per protobuf message.

Kubernetes' JSON carries some fields even when they hold their zero value, and clients rely on
it (the Python client refuses a ContainerStatus without `restartCount`): every field its
OpenAPI lists as required, and every field its Go type serializes without `omitempty` (or a
struct field, which `omitempty` never drops: `lastState: {}`, `lastProbeTime: null`). proto3
drops zero values, so `tinykube.manifest.to_dict` puts them back from the table this script
writes.

Sources: the required lists come from Kubernetes' JSON schemas as the `kubernetes-validate`
package ships them (a dev dependency); the Go facts, which no schema carries, are the table
`GO_ALWAYS` below. Each kind's message is walked beside its Kubernetes definition, field by
field, so a message reached from several kinds gets the union of what they require. Required
fields with no protobuf field are printed as a warning: they are not modelled and cannot be
printed.

    python -m tinykube.zerofields_gen          # rewrite tinykube/zerofields.py
    python -m tinykube.zerofields_gen --check  # exit 1 if it is stale
"""

from __future__ import annotations

import json
import pprint
import sys
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from tinykube.kinds import ALL_KINDS

# The Kubernetes release whose schemas are read (the newest kubernetes-validate ships).
SCHEMA_VERSION = "v1.37.0-local"
OUT = Path(__file__).with_name("zerofields.py")

# Fields Kubernetes' Go types serialize although they are not required in its OpenAPI: a
# field without `omitempty` (Go prints "" / 0 / false, or null for a nil slice, map or
# pointer), or a struct-typed field with it (Go's omitempty never drops a struct: {} or, for
# metav1.Time, null). Read off k8s.io/api's types.go; by definition name and JSON field.
# "zero": the field's own zero ("", 0, false, {} with its own always-printed fields, null for
# a Time); "null": a nil slice/map/pointer; "quantity": a zero resource.Quantity ("0").
# Nil slices are left out, not printed as null: tinykube cannot tell nil from empty, and an
# absent list reads the same to every client.
_CORE = "io.k8s.api.core.v1."
_APPS = "io.k8s.api.apps.v1."
GO_ALWAYS: dict[str, dict[str, str]] = {
    _CORE + "Pod": {"spec": "zero", "status": "zero"},
    _CORE + "PodTemplateSpec": {"spec": "zero"},
    _CORE + "Container": {"resources": "zero"},
    _CORE + "ResourceFieldSelector": {"divisor": "quantity"},
    _CORE + "ContainerStatus": {"state": "zero", "lastState": "zero"},
    _CORE + "ContainerStateRunning": {"startedAt": "zero"},
    _CORE + "ContainerStateTerminated": {"startedAt": "zero", "finishedAt": "zero"},
    _CORE + "PodCondition": {"lastProbeTime": "zero", "lastTransitionTime": "zero"},
    _CORE + "Service": {"spec": "zero", "status": "zero"},
    _CORE + "ServiceStatus": {"loadBalancer": "zero"},
    _CORE + "ServicePort": {"targetPort": "zero"},
    _CORE + "Node": {"spec": "zero", "status": "zero"},
    _CORE + "NodeStatus": {"daemonEndpoints": "zero", "nodeInfo": "zero"},
    _CORE + "NodeDaemonEndpoints": {"kubeletEndpoint": "zero"},
    _CORE + "NodeCondition": {"lastHeartbeatTime": "zero", "lastTransitionTime": "zero"},
    _CORE + "Namespace": {"spec": "zero", "status": "zero"},
    _CORE + "NamespaceCondition": {"lastTransitionTime": "zero"},
    _CORE + "Event": {
        "source": "zero",
        "firstTimestamp": "zero",
        "lastTimestamp": "zero",
        "eventTime": "zero",
        "reportingComponent": "zero",
        "reportingInstance": "zero",
    },
    _CORE + "EventSeries": {"lastObservedTime": "zero"},
    _APPS + "Deployment": {"status": "zero"},
    _APPS + "DeploymentSpec": {"strategy": "zero"},
    _APPS + "DeploymentCondition": {
        "type": "zero",
        "status": "zero",
        "lastUpdateTime": "zero",
        "lastTransitionTime": "zero",
    },
    _APPS + "DaemonSet": {"status": "zero"},
    _APPS + "DaemonSetSpec": {"updateStrategy": "zero"},
    _APPS + "DaemonSetCondition": {"type": "zero", "status": "zero", "lastTransitionTime": "zero"},
    _APPS + "ReplicaSet": {"status": "zero"},
    _APPS + "ReplicaSetSpec": {"template": "zero"},
    _APPS + "ReplicaSetCondition": {"type": "zero", "status": "zero", "lastTransitionTime": "zero"},
    _APPS + "ControllerRevision": {"revision": "zero"},
    "io.k8s.api.batch.v1.Job": {"spec": "zero", "status": "zero"},
    "io.k8s.api.batch.v1.JobCondition": {"lastProbeTime": "zero", "lastTransitionTime": "zero"},
    "io.k8s.api.batch.v1.JobTemplateSpec": {"spec": "zero"},
    "io.k8s.api.coordination.v1.Lease": {"spec": "zero"},
    "io.k8s.api.rbac.v1.RoleRef": {"apiGroup": "zero"},
    "io.k8s.api.policy.v1.PodDisruptionBudget": {"spec": "zero", "status": "zero"},
    "io.k8s.api.policy.v1.PodDisruptionBudgetStatus": {
        "disruptionsAllowed": "zero",
        "currentHealthy": "zero",
        "desiredHealthy": "zero",
        "expectedPods": "zero",
    },
    "io.k8s.api.scheduling.v1.PriorityClass": {"value": "zero"},
    "io.k8s.api.discovery.v1.Endpoint": {"conditions": "zero"},
    "io.k8s.api.events.v1.Event": {
        "regarding": "zero",
        "deprecatedSource": "zero",
        "deprecatedFirstTimestamp": "zero",
        "deprecatedLastTimestamp": "zero",
    },
}

_DEFS_PREFIX = "#/$defs/"


def _definitions() -> dict[str, Any]:
    import importlib.resources

    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    text = (root / SCHEMA_VERSION / "_definitions.json").read_text()
    defs: dict[str, Any] = json.loads(text)["$defs"]
    return defs


def _ref(prop: dict[str, Any]) -> str | None:
    ref = prop.get("$ref")
    if not isinstance(ref, str):
        return None
    return ref.rsplit("/", 1)[-1]


def _definition_of(defs: dict[str, Any], group: str, version: str, kind: str) -> str:
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if (gvk["group"], gvk["version"], gvk["kind"]) == (group, version, kind):
                return name
    raise SystemExit(f"no Kubernetes definition for {group}/{version} {kind}")


def _is_map(f: Any) -> bool:
    return bool(
        f.type == FieldDescriptor.TYPE_MESSAGE
        and f.message_type is not None
        and f.message_type.GetOptions().map_entry
    )


def _plain_message(f: Any) -> Any:
    if f.type != FieldDescriptor.TYPE_MESSAGE or f.message_type is None:
        return None
    if f.message_type.full_name.startswith("google.protobuf."):
        return None
    return f.message_type


class _Walk:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        # message full name -> JSON name -> how to make its zero ("zero" or "quantity")
        self.always: dict[str, dict[str, str]] = {}
        # message full name -> the JSON names Kubernetes' OpenAPI requires, in its order
        self.required: dict[str, list[str]] = {}
        self.unmodelled: set[str] = set()
        self.seen: set[tuple[str, str]] = set()

    def walk(self, desc: Any, definition: str, *, top: bool = False) -> None:
        if (desc.full_name, definition) in self.seen:
            return
        self.seen.add((desc.full_name, definition))
        schema = self.defs.get(definition, {})
        props: dict[str, Any] = schema.get("properties", {})
        fields = {f.json_name: f for f in desc.fields}
        wanted: dict[str, str] = {name: "zero" for name in schema.get("required", [])}
        for name, how in GO_ALWAYS.get(definition, {}).items():
            wanted.setdefault(name, how)
        for name, how in wanted.items():
            if top and name in ("apiVersion", "kind"):
                continue  # the codec writes an object's own
            if name not in fields:
                self.unmodelled.add(f"{definition}.{name} (in {desc.full_name})")
                continue
            self.always.setdefault(desc.full_name, {})[name] = how
        for name in schema.get("required", []):
            required = self.required.setdefault(desc.full_name, [])
            if name in fields and name not in required:
                required.append(name)
        for name, f in fields.items():
            prop = props.get(name)
            if prop is None:
                continue
            sub = _plain_message(f)
            if _is_map(f):
                value = f.message_type.fields_by_name["value"]
                target = _ref(prop.get("additionalProperties", {}) or {})
                if _plain_message(value) is not None and target:
                    self.walk(value.message_type, target)
            elif sub is not None:
                target = _ref(prop.get("items", {}) if f.is_repeated else prop)
                if target:
                    self.walk(sub, target)

    def zero(self, desc: Any, name: str, how: str, depth: int = 0) -> Any:
        f = {x.json_name: x for x in desc.fields}[name]
        if how == "quantity":
            return "0"
        if _is_map(f):
            return {}
        if f.is_repeated:
            return []
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            full = f.message_type.full_name
            if full == "google.protobuf.Timestamp":
                return None  # metav1.Time's zero prints as null
            if full == "google.protobuf.Value":
                return 0  # IntOrString's zero is the integer 0
            if full == "google.protobuf.Struct":
                return {}
            if depth > 20:
                raise SystemExit(f"always-printed fields recurse at {full}")
            return self.message_zero(f.message_type, depth + 1)
        if f.type == FieldDescriptor.TYPE_BOOL:
            return False
        if f.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            return ""
        if f.type == FieldDescriptor.TYPE_ENUM:
            return f.enum_type.values[0].name
        return 0

    def message_zero(self, desc: Any, depth: int = 0) -> dict[str, Any]:
        return {
            name: self.zero(desc, name, how, depth)
            for name, how in sorted(self.always.get(desc.full_name, {}).items())
        }


def build() -> tuple[dict[str, dict[str, Any]], list[str]]:
    table, _, unmodelled = build_all()
    return table, unmodelled


def build_all() -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, ...]], list[str]]:
    """The zero table, the required fields per message, and the unmodelled fields."""
    defs = _definitions()
    walk = _Walk(defs)
    for info in ALL_KINDS:
        definition = _definition_of(defs, info.group, info.version, info.kind)
        walk.walk(info.message.DESCRIPTOR, definition, top=True)
    table: dict[str, dict[str, Any]] = {}
    for full_name in sorted(walk.always):
        table[full_name] = walk.message_zero(_find(full_name))
    required = {name: tuple(fields) for name, fields in sorted(walk.required.items()) if fields}
    return table, required, sorted(walk.unmodelled)


def _find(full_name: str) -> Any:
    from google.protobuf import descriptor_pool

    return descriptor_pool.Default().FindMessageTypeByName(full_name)


HEADER = '''"""The fields Kubernetes always prints, with their zero values, per protobuf message.

Generated by `python -m tinykube.zerofields_gen` from Kubernetes' JSON schemas ({version},
as the kubernetes-validate package ships them) and the Go serialization facts in that script.
Do not edit: regenerate. `tinykube.manifest.to_dict` sets each missing one (a copy of the
value) on every message of that type it prints; REQUIRED_FIELDS (the ones Kubernetes' OpenAPI
requires) is what tinykube's OpenAPI documents publish.
"""

from typing import Any

'''


def _render_dict(name: str, annotation: str, table: dict[str, Any]) -> list[str]:
    lines = [f"{name}: {annotation} = {{"]
    for key, value in table.items():
        prefix = f"    {key!r}: "
        body = pprint.pformat(value, width=99 - len(prefix), sort_dicts=True).splitlines()
        lines.append(prefix + body[0])
        lines.extend(" " * len(prefix) + line for line in body[1:])
        lines[-1] += ","
    lines.append("}")
    return lines


def render(table: dict[str, dict[str, Any]], required: dict[str, tuple[str, ...]]) -> str:
    lines = _render_dict("ZERO_FIELDS", "dict[str, dict[str, Any]]", table)
    lines += ["", ""]
    lines += _render_dict("REQUIRED_FIELDS", "dict[str, tuple[str, ...]]", required)
    return HEADER.format(version=SCHEMA_VERSION) + "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    table, required, unmodelled = build_all()
    text = render(table, required)
    for line in unmodelled:
        print(f"not modelled (cannot be printed): {line}", file=sys.stderr)
    if "--check" in argv:
        if OUT.read_text() != text:
            print(f"{OUT} is stale: run python -m tinykube.zerofields_gen", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
