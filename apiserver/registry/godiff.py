"""go-cmp's Diff of two messages, as Kubernetes appends it to a refused pod update.

kube's ValidatePodUpdate ends its Forbidden `spec` error with `cmp.Diff` of the stored and the
requested PodSpec; this prints the same text from the protobuf messages: Go's field names and
order (core.PodSpec, core.Container), changed fields as -/+ lines, changed messages and
equal-length lists opened up, unchanged runs beyond the context elided. Pure functions.
"""

from __future__ import annotations

from typing import cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from apiserver.validation import go_quote
from tinykube.v1 import pod_pb2

# Go's field names where they are not the JSON name with its first letter raised.
_GO_NAMES = {
    "dnsPolicy": "DNSPolicy",
    "serviceAccount": "DeprecatedServiceAccount",
    "tty": "TTY",
    "hostIP": "HostIP",
}

# go-cmp's reporter shows this many unchanged fields either side of a change.
_DIFF_CONTEXT = 2

# The order of Go's core.PodSpec and core.Container fields, which the diff follows (fields not
# named here come after, in the .proto's order).
_GO_ORDER = {
    "PodSpec": [
        "volumes",
        "initContainers",
        "containers",
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "activeDeadlineSeconds",
        "dnsPolicy",
        "nodeSelector",
        "serviceAccountName",
        "serviceAccount",
        "automountServiceAccountToken",
        "nodeName",
        "hostNetwork",
        "securityContext",
        "imagePullSecrets",
        "hostname",
        "affinity",
        "schedulerName",
        "tolerations",
        "priorityClassName",
        "priority",
        "dnsConfig",
        "preemptionPolicy",
        "enableServiceLinks",
        "topologySpreadConstraints",
        "schedulingGates",
    ],
    "Container": [
        "name",
        "image",
        "command",
        "args",
        "workingDir",
        "ports",
        "envFrom",
        "env",
        "resources",
        "volumeMounts",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "imagePullPolicy",
        "securityContext",
        "stdin",
        "stdinOnce",
        "tty",
    ],
}


def _go_name(field: FieldDescriptor) -> str:
    return _GO_NAMES.get(field.json_name, field.json_name[:1].upper() + field.json_name[1:])


def _go_scalar(field: FieldDescriptor, value: object) -> str:
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Message):
        return _go_message(value)
    return str(value)


def _go_message(msg: Message) -> str:
    parts = [f"{_go_name(f)}: {_go_field(msg, f)}" for f, _ in msg.ListFields()]
    return "{" + ", ".join(parts) + "}"


def _go_field(msg: Message, field: FieldDescriptor) -> str:
    """One field's value in Go's %+v-like notation, as go-cmp prints values."""
    value = getattr(msg, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        if not value:
            return "nil"
        vf = field.message_type.fields_by_name["value"]
        return (
            "{"
            + ", ".join(f"{go_quote(k)}: {_go_scalar(vf, value[k])}" for k in sorted(value))
            + "}"
        )
    if field.is_repeated:
        if not value:
            return "nil"
        return "{" + ", ".join(_go_scalar(field, v) for v in value) + "}"
    if field.has_presence and not msg.HasField(field.name):
        return "nil"
    shown = _go_scalar(field, value)
    # Optional scalars and nested structs are pointers in Go's PodSpec.
    return "&" + shown if field.has_presence else shown


def _go_diff(old: Message, new: Message, depth: int) -> list[str]:
    """go-cmp's Diff of two messages of one type, the lines between its braces: a changed
    field as `-`/`+` lines, changed messages and equal-length lists of messages opened up,
    runs of unchanged fields beyond the context shown as `... // N identical fields`."""
    pad = "\t" * depth
    rows: list[tuple[bool, list[str]]] = []
    descriptor = cast(Descriptor, old.DESCRIPTOR)
    order = _GO_ORDER.get(descriptor.name, [])
    for field in sorted(
        descriptor.fields,
        key=lambda f: order.index(f.json_name) if f.json_name in order else len(order),
    ):
        name = _go_name(field)
        ov, nv = getattr(old, field.name), getattr(new, field.name)
        if ov == nv and (
            not field.has_presence or old.HasField(field.name) == new.HasField(field.name)
        ):
            rows.append((True, [f"  {pad}{name}: {_go_field(old, field)},"]))
            continue
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if field.message_type is not None and not is_map:
            type_name = f"core.{field.message_type.name}"
            if not field.is_repeated:
                if old.HasField(field.name) and new.HasField(field.name):
                    rows.append(
                        (
                            False,
                            [
                                f"  {pad}{name}: &{type_name}{{",
                                *_go_diff(ov, nv, depth + 1),
                                f"  {pad}}},",
                            ],
                        )
                    )
                    continue
            elif len(ov) == len(nv):
                lines = [f"  {pad}{name}: []{type_name}{{"]
                for o, n in zip(ov, nv, strict=True):
                    if o == n:
                        lines.append(f"  {pad}\t{_go_message(o)},")
                    else:
                        lines += [f"  {pad}\t{{", *_go_diff(o, n, depth + 2), f"  {pad}\t}},"]
                rows.append((False, [*lines, f"  {pad}}},"]))
                continue
        rows.append(
            (
                False,
                [
                    f"- {pad}{name}: {_go_field(old, field)},",
                    f"+ {pad}{name}: {_go_field(new, field)},",
                ],
            )
        )
    changed = [i for i, (same, _) in enumerate(rows) if not same]
    shown = {j for i in changed for j in range(i - _DIFF_CONTEXT, i + _DIFF_CONTEXT + 1)}
    out: list[str] = []
    skipped = 0
    for i, (_, lines) in enumerate(rows):
        if i in shown:
            if skipped:
                out.append(f"  {pad}... // {skipped} identical fields")
                skipped = 0
            out.extend(lines)
        else:
            skipped += 1
    if skipped:
        out.append(f"  {pad}... // {skipped} identical fields")
    return out


def pod_spec_diff(old: pod_pb2.PodSpec, new: pod_pb2.PodSpec) -> str:
    """What Kubernetes appends to its Forbidden pod update message: go-cmp's Diff of the
    stored spec and the requested one (less the fields that may change)."""
    return "\n".join(["  core.PodSpec{", *_go_diff(old, new, 1), "  }"])
