"""`kubectl get`'s tables for the tinykube CLI, and the small formatters `describe` shares.

The columns and cells are the apiserver's: kubectl asks the REST API for a meta.k8s.io/v1 Table,
but the CLI talks gRPC, which has no Table, so it runs the same printers (tinykube.tables) on
the objects it got. `columns(info, wide)` names the columns (priority-1 ones only with wide),
`row(info, obj, now, wide)` computes one row, `render(header, rows)` pads them the way kubectl's
tabwriter does (three spaces between columns). `pod_status` and `node_status` are kubectl's
STATUS of a pod and a node for `describe`: a pod's phase unless a container is waiting or
terminated with a reason or the pod is being deleted ("Terminating"); Ready/NotReady/Unknown
plus ",SchedulingDisabled" for a node.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from tinykube import kinds, tables
from tinykube.duration import human_duration
from tinykube.kinds import KindInfo
from tinykube.manifest import to_dict
from tinykube.meta import int_or_string

NONE = "<none>"


def is_set(ts: Timestamp) -> bool:
    return bool(ts.seconds or ts.nanos)


def age(ts: Timestamp, now: datetime) -> str:
    """AGE column: time since `ts`, or <unknown> when unset."""
    if not is_set(ts):
        return "<unknown>"
    then = ts.ToDatetime(tzinfo=UTC)
    return human_duration((now - then).total_seconds())


def render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by three spaces, as kubectl prints them."""
    table = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = []
    for r in table:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(r)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


# ---- pods -----------------------------------------------------------------------------------


def pod_status(pod: Any) -> str:
    """kubectl's STATUS for a pod (printPod): reason > container state > phase."""
    reason = pod.status.reason or pod.status.phase or "Pending"
    for cond in pod.status.conditions:
        if cond.type == "PodScheduled" and cond.reason == "SchedulingGated":
            reason = "SchedulingGated"
    initializing = False
    for i, cs in enumerate(pod.status.initContainerStatuses):
        state = cs.state
        if state.HasField("terminated") and state.terminated.exitCode == 0:
            continue
        if state.HasField("terminated"):
            reason = (
                f"Init:{state.terminated.reason}"
                if state.terminated.reason
                else f"Init:ExitCode:{state.terminated.exitCode}"
            )
        elif state.HasField("waiting") and state.waiting.reason not in ("", "PodInitializing"):
            reason = f"Init:{state.waiting.reason}"
        else:
            reason = f"Init:{i}/{len(pod.spec.initContainers)}"
        initializing = True
        break
    if not initializing:
        has_running = False
        for cs in reversed(pod.status.containerStatuses):
            state = cs.state
            if state.HasField("waiting") and state.waiting.reason:
                reason = state.waiting.reason
            elif state.HasField("terminated") and state.terminated.reason:
                reason = state.terminated.reason
            elif state.HasField("terminated"):
                if state.terminated.signal:
                    reason = f"Signal:{state.terminated.signal}"
                else:
                    reason = f"ExitCode:{state.terminated.exitCode}"
            elif state.HasField("running") and cs.ready:
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running"
    if is_set(pod.metadata.deletionTimestamp):
        reason = "Terminating"
    return str(reason)


# ---- nodes ----------------------------------------------------------------------------------

ROLE_PREFIX = "node-role.kubernetes.io/"


def node_status(node: Any) -> str:
    """Ready / NotReady / Unknown, plus ",SchedulingDisabled" when cordoned."""
    status = "Unknown"
    for cond in node.status.conditions:
        if cond.type == "Ready":
            status = "Ready" if cond.status == "True" else "NotReady"
    if node.spec.unschedulable:
        status += ",SchedulingDisabled"
    return status


def node_roles(node: Any) -> str:
    roles = sorted(
        key.removeprefix(ROLE_PREFIX)
        for key in node.metadata.labels
        if key.startswith(ROLE_PREFIX) and key != ROLE_PREFIX
    )
    if node.metadata.labels.get("kubernetes.io/role"):
        roles.append(node.metadata.labels["kubernetes.io/role"])
    return ",".join(roles) or NONE


# ---- replica sets ---------------------------------------------------------------------------


def format_label_selector(selector: Any) -> str:
    parts = [f"{k}={v}" for k, v in sorted(selector.matchLabels.items())]
    for req in selector.matchExpressions:
        values = ",".join(req.values)
        if req.operator == "In":
            parts.append(f"{req.key} in ({values})")
        elif req.operator == "NotIn":
            parts.append(f"{req.key} notin ({values})")
        elif req.operator == "Exists":
            parts.append(req.key)
        elif req.operator == "DoesNotExist":
            parts.append(f"!{req.key}")
    return ",".join(parts) or NONE


# ---- events ---------------------------------------------------------------------------------


def event_last_seen(event: Any) -> Timestamp:
    """When an Event was last seen: its series' last observation (events.k8s.io/v1 style),
    lastTimestamp, eventTime, firstTimestamp, else its creation."""
    series = event.series.lastObservedTime if event.HasField("series") else Timestamp()
    for ts in (
        series,
        event.lastTimestamp,
        event.eventTime,
        event.firstTimestamp,
        event.metadata.creationTimestamp,
    ):
        if is_set(ts):
            return ts
    return Timestamp()


# ---- int-or-string values -------------------------------------------------------------------


def int_or_string_text(value: Any) -> str:
    """A spec IntOrString (google.protobuf.Value) as kubectl prints it; "N/A" when unset."""
    held = int_or_string(value)
    return "N/A" if held is None else str(held)


def _shown(column: dict[str, Any], wide: bool) -> bool:
    # kubectl hides priority-1 columns unless -o wide.
    return wide or column["priority"] == 0


def columns(info: KindInfo, *, wide: bool = False, with_namespace: bool = False) -> list[str]:
    """The header `kubectl get` prints: the Table's column names, upper-cased."""
    header = [c["name"].upper() for c in tables.column_definitions(info) if _shown(c, wide)]
    if with_namespace and info.namespaced:
        header = ["NAMESPACE", *header]
    return header


def _cell(value: Any) -> str:
    """A Table cell as kubectl prints it (Go's %v: true/false, numbers as written)."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def row(
    info: KindInfo, obj: Any, now: datetime, *, wide: bool = False, with_namespace: bool = False
) -> list[str]:
    """One object's row: the cells of the apiserver's Table for it (tinykube.tables)."""
    cells = tables.rows(info, [to_dict(obj)], include_object="None", now=now)[0]["cells"]
    shown = tables.column_definitions(info)
    out = [_cell(v) for v, c in zip(cells, shown, strict=True) if _shown(c, wide)]
    if with_namespace and info.namespaced:
        out = [obj.metadata.namespace, *out]
    return out


def table(
    info: KindInfo,
    objs: Sequence[Any],
    now: datetime,
    *,
    wide: bool = False,
    with_namespace: bool = False,
) -> str:
    """A full `kubectl get` table for `objs` of kind `info`."""
    return render(
        columns(info, wide=wide, with_namespace=with_namespace),
        [row(info, o, now, wide=wide, with_namespace=with_namespace) for o in objs],
    )


def sort_for_display(info: KindInfo, objs: Sequence[Any]) -> list[Any]:
    """Events by when they were last seen (oldest first, as `kubectl events`); others by
    namespace and name."""
    if info is kinds.EVENT:
        return sorted(objs, key=lambda e: event_last_seen(e).ToNanoseconds())
    return sorted(objs, key=lambda o: (o.metadata.namespace, o.metadata.name))
