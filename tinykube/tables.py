"""Server-side printing: the meta.k8s.io/v1 Table kube-apiserver answers for
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. The apiserver serves it
(apiserver/rest/handlers.py); the tinykube CLI, which talks gRPC where there is no Table, prints
the same columns and cells (tinykube/cli/printers.py), so a kind's printer columns are declared
once, here.

kubectl asks for a Table on every `get` and prints its cells as they come, hiding priority-1
columns unless `-o wide`; so the columns, their order and every cell's text here are the ones
kube-apiserver's printers produce, and `kubectl get` prints against tinykube what it prints against
Kubernetes. Like kube-apiserver, rows always carry the wide cells (the client drops them).

Objects come in as Kubernetes JSON dicts (what `tinykube.manifest.to_dict` returns: lowerCamel
keys, empty fields omitted), so a missing key reads as Go's zero value, and where kube-apiserver
would have applied a default before printing (a Service's type, a port's protocol, a
ReplicaSet's replicas) the default is printed. Kinds without a printer get Kubernetes' default
table: Name and Created At.

Pure functions over their arguments; the current time is passed in. Cost is per row and only
what the cells need: objects are read, never copied (the row's `object` is the caller's dict or,
for includeObject=Metadata, a small wrapper around the caller's `metadata` dict), so callers must
not mutate the objects while the Table is in use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from tinykube.duration import human_duration
from tinykube.errors import BadRequestError, InternalError
from tinykube.kinds import KindInfo, PrinterColumn

TABLE_API_VERSION: Final = "meta.k8s.io/v1"
INCLUDE_OBJECT_VALUES: Final = ("Metadata", "None", "Object")

_NONE = "<none>"
_UNKNOWN = "<unknown>"

# --- column definitions ---------------------------------------------------------------------
#
# Kubernetes takes most descriptions from its API field documentation; these say the same in
# a line. The ones Kubernetes' printers spell out themselves are given as Kubernetes gives them.

_D_NAME = "Name of the object: unique among objects of its kind in its namespace (or cluster)."
_D_AGE = "Time since the object was created (metadata.creationTimestamp, RFC 3339, UTC)."
_D_CREATED = "When the object was created (metadata.creationTimestamp, RFC 3339, UTC)."
_D_TEMPLATE_CONTAINERS = "Names of each container in the template."
_D_TEMPLATE_IMAGES = "Images referenced by each container in the template."


def _col(
    name: str, type_: str, description: str, *, priority: int = 0, format_: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "format": format_,
        "description": description,
        "priority": priority,
    }


_NAME_COLUMN = _col("Name", "string", _D_NAME, format_="name")
_AGE_COLUMN = _col("Age", "string", _D_AGE)

_COLUMNS: Final[dict[str, tuple[dict[str, Any], ...]]] = {
    "Job": (
        _NAME_COLUMN,
        _col("Status", "string", "Status of the job."),
        _col(
            "Completions",
            "string",
            "The number of pods which reached phase Succeeded (status.succeeded), of the "
            "completions wanted.",
        ),
        _col("Duration", "string", "Time required to complete the job."),
        _AGE_COLUMN,
        _col("Containers", "string", _D_TEMPLATE_CONTAINERS, priority=1),
        _col("Images", "string", _D_TEMPLATE_IMAGES, priority=1),
        _col("Selector", "string", "The label selector of its pods (spec.selector).", priority=1),
    ),
    "Pod": (
        _NAME_COLUMN,
        _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
        _col("Status", "string", "The aggregate status of the containers in this pod."),
        _col(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted and when the "
            "last container in this pod has restarted.",
        ),
        _AGE_COLUMN,
        _col("IP", "string", "The pod's IP address (status.podIP).", priority=1),
        _col("Node", "string", "The node the pod is bound to (spec.nodeName).", priority=1),
        _col(
            "Nominated Node",
            "string",
            "The node preemption made room on, before the pod is bound (status.nominatedNodeName).",
            priority=1,
        ),
        _col(
            "Readiness Gates",
            "string",
            "How many of the pod's readiness gates (spec.readinessGates) are True.",
            priority=1,
        ),
    ),
    "Node": (
        _NAME_COLUMN,
        _col("Status", "string", "The status of the node"),
        _col("Roles", "string", "The roles of the node"),
        _AGE_COLUMN,
        _col("Version", "string", "The kubelet's version (status.nodeInfo.kubeletVersion)."),
        _col("Internal-IP", "string", "The node's first InternalIP address.", priority=1),
        _col("External-IP", "string", "The node's first ExternalIP address.", priority=1),
        _col("OS-Image", "string", "The node's OS image (status.nodeInfo.osImage).", priority=1),
        _col(
            "Kernel-Version",
            "string",
            "The node's kernel version (status.nodeInfo.kernelVersion).",
            priority=1,
        ),
        _col(
            "Container-Runtime",
            "string",
            "The node's container runtime and its version (status.nodeInfo"
            ".containerRuntimeVersion).",
            priority=1,
        ),
    ),
    "ReplicaSet": (
        _NAME_COLUMN,
        _col("Desired", "integer", "The number of pods the ReplicaSet wants (spec.replicas)."),
        _col("Current", "integer", "The number of pods the ReplicaSet has (status.replicas)."),
        _col("Ready", "integer", "The number of its pods that are ready (status.readyReplicas)."),
        _AGE_COLUMN,
        _col("Containers", "string", _D_TEMPLATE_CONTAINERS, priority=1),
        _col("Images", "string", _D_TEMPLATE_IMAGES, priority=1),
        _col("Selector", "string", "The label selector of its pods (spec.selector).", priority=1),
    ),
    "Deployment": (
        _NAME_COLUMN,
        _col("Ready", "string", "Number of the pod with ready state"),
        _col(
            "Up-to-date",
            "string",
            "Total number of non-terminated pods targeted by this deployment that have the "
            "desired template spec.",
        ),
        _col(
            "Available",
            "string",
            "Total number of available pods (ready for at least minReadySeconds) targeted by "
            "this deployment.",
        ),
        _AGE_COLUMN,
        _col("Containers", "string", _D_TEMPLATE_CONTAINERS, priority=1),
        _col("Images", "string", _D_TEMPLATE_IMAGES, priority=1),
        _col("Selector", "string", "Label query over pods (spec.selector).", priority=1),
    ),
    "Event": (
        _col("Last Seen", "string", "Time since the event was last seen (lastTimestamp)."),
        _col("Type", "string", "Normal or Warning."),
        _col("Reason", "string", "Why the event happened, in one machine-readable word."),
        _col("Object", "string", "The object the event is about (involvedObject), as kind/name."),
        _col(
            "Subobject",
            "string",
            "The part of the object the event is about (involvedObject.fieldPath).",
            priority=1,
        ),
        _col("Source", "string", "The component (and host) that reported the event.", priority=1),
        _col("Message", "string", "What happened, for people to read."),
        _col(
            "First Seen",
            "string",
            "Time since the event was first seen (firstTimestamp).",
            priority=1,
        ),
        _col("Count", "string", "How many times the event has occurred.", priority=1),
        _col("Name", "string", _D_NAME, priority=1, format_="name"),
    ),
    "Lease": (
        _NAME_COLUMN,
        _col("Holder", "string", "Who holds the lease (spec.holderIdentity)."),
        _AGE_COLUMN,
    ),
    "Service": (
        _NAME_COLUMN,
        _col("Type", "string", "How the service is exposed: ClusterIP, NodePort, ..."),
        _col("Cluster-IP", "string", "The service's virtual IP address (spec.clusterIP)."),
        _col("External-IP", "string", "Addresses outside the cluster that reach the service."),
        _col("Port(s)", "string", "The ports the service exposes (spec.ports)."),
        _AGE_COLUMN,
        _col(
            "Selector",
            "string",
            "The labels of the pods behind the service (spec.selector).",
            priority=1,
        ),
    ),
    "Endpoints": (
        _NAME_COLUMN,
        _col("Endpoints", "string", "The addresses and ports of the service's ready pods."),
        _AGE_COLUMN,
    ),
    "PodDisruptionBudget": (
        _NAME_COLUMN,
        _col("Min Available", "string", "The minimum number of pods that must be available."),
        _col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
        _col(
            "Allowed Disruptions",
            "integer",
            "Calculated number of pods that may be disrupted at this time.",
        ),
        _AGE_COLUMN,
    ),
    "Namespace": (
        _NAME_COLUMN,
        _col("Status", "string", "The status of the namespace"),
        _AGE_COLUMN,
    ),
    "PriorityClass": (
        _NAME_COLUMN,
        _col("Value", "integer", "The priority pods of this class get (value)."),
        _col(
            "Global-Default",
            "boolean",
            "Whether pods without a priorityClassName get this class (globalDefault).",
        ),
        _AGE_COLUMN,
        _col(
            "PreemptionPolicy",
            "string",
            "Whether pods of this class may preempt lower-priority pods (preemptionPolicy).",
        ),
    ),
}

_DEFAULT_COLUMNS: Final = (
    _NAME_COLUMN,
    _col("Created At", "date", _D_CREATED),
)

# kube's printers give roles the default columns and bindings these.
_ROLE_BINDING_COLUMNS: Final = (
    _NAME_COLUMN,
    _col(
        "Role", "string", "RoleRef can reference a Role in the current namespace or a ClusterRole."
    ),
    _AGE_COLUMN,
    _col("Users", "string", "Users in the roleBinding", priority=1),
    _col("Groups", "string", "Groups in the roleBinding", priority=1),
    _col("ServiceAccounts", "string", "ServiceAccounts in the roleBinding", priority=1),
)
_COLUMNS_RBAC: Final = {
    "Role": _DEFAULT_COLUMNS,
    "ClusterRole": _DEFAULT_COLUMNS,
    "RoleBinding": _ROLE_BINDING_COLUMNS,
    "ClusterRoleBinding": _ROLE_BINDING_COLUMNS,
}


# A custom kind without additionalPrinterColumns: Name and Age (kube's default for CRDs).
_CUSTOM_AGE = PrinterColumn(
    "Age",
    "date",
    ".metadata.creationTimestamp",
    description="CreationTimestamp is a timestamp representing the server time when this "
    "object was created.",
)


def _custom_columns(info: KindInfo) -> tuple[PrinterColumn, ...]:
    return info.printer_columns or (_CUSTOM_AGE,)


def column_definitions(info: KindInfo) -> list[dict[str, Any]]:
    """The Table's columnDefinitions for `info`'s kind, in Kubernetes' order, each with name,
    type, format, description and priority (1: shown only by `kubectl get -o wide`)."""
    if info.custom:
        return [
            dict(_NAME_COLUMN),
            *(
                _col(c.name, c.type, c.description, priority=c.priority, format_=c.format)
                for c in _custom_columns(info)
            ),
        ]
    columns = _COLUMNS.get(info.kind) or _COLUMNS_RBAC.get(info.kind, _DEFAULT_COLUMNS)
    return [dict(c) for c in columns]


# --- time -----------------------------------------------------------------------------------


class _Clock:
    """`now` as epoch seconds, and timestamps parsed with the object and field named on error."""

    __slots__ = ("kind", "now")

    def __init__(self, now: datetime, kind: str) -> None:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware (UTC)")
        self.now = now.timestamp()
        self.kind = kind

    def epoch(self, value: Any, obj: Mapping[str, Any], path: str) -> float | None:
        """Seconds since the epoch of an RFC 3339 timestamp; None for an unset one."""
        if not value:
            return None
        try:
            return datetime.fromisoformat(value).timestamp()
        except (TypeError, ValueError) as exc:
            name = (obj.get("metadata") or {}).get("name", "")
            raise InternalError(
                f'{self.kind} "{name}": {path}: {value!r} is not an RFC 3339 timestamp'
            ) from exc

    def since(self, value: Any, obj: Mapping[str, Any], path: str) -> str:
        """Kubernetes' translateTimestampSince: the age of a timestamp, "<unknown>" if unset."""
        at = self.epoch(value, obj, path)
        return _UNKNOWN if at is None else human_duration(self.now - at)


# --- shared formatting ----------------------------------------------------------------------


def _format_labels(labels: Mapping[str, str] | None) -> str:
    """labels.FormatLabels: "k=v,k2=v2" sorted by key, "<none>" when empty."""
    if not labels:
        return _NONE
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


_SELECTOR_OPERATORS: Final = {"In": " in ", "NotIn": " notin ", "Exists": "", "DoesNotExist": ""}


def _format_label_selector(selector: Mapping[str, Any] | None) -> str:
    """metav1.FormatLabelSelector: requirements sorted by key, set values sorted; "<none>" for a
    missing or empty selector, "<error>" for one Kubernetes could not parse."""
    if not selector:
        return _NONE
    reqs: list[tuple[str, str]] = [
        (k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        word = _SELECTOR_OPERATORS.get(op)
        if word is None or (bool(values) != (op in ("In", "NotIn"))):
            return "<error>"
        if op == "Exists":
            reqs.append((key, key))
        elif op == "DoesNotExist":
            reqs.append((key, "!" + key))
        else:
            reqs.append((key, f"{key}{word}({','.join(sorted(values))})"))
    if not reqs:
        return _NONE
    reqs.sort(key=lambda r: r[0])
    return ",".join(r[1] for r in reqs)


def _layout_containers(containers: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    return (
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
    )


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --- per-kind cells -------------------------------------------------------------------------

_Cells = list[Any]
_Printer = Callable[[Mapping[str, Any], _Clock], _Cells]


def _last_finished(
    cs: Mapping[str, Any], pod: Mapping[str, Any], clock: _Clock, field: str, index: int
) -> float | None:
    last = (cs.get("lastState") or {}).get("terminated")
    if last is None:
        return None
    path = f"status.{field}[{index}].lastState.terminated.finishedAt"
    return clock.epoch(last.get("finishedAt"), pod, path)


def _later(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None or b > a else a


def _terminated_reason(terminated: Mapping[str, Any]) -> str:
    reason: str = terminated.get("reason", "")
    if reason:
        return reason
    signal = terminated.get("signal", 0)
    return f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"


def _pod_cells(pod: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    conditions = status.get("conditions") or ()

    phase: str = status.get("phase", "")
    reason: str = status.get("reason") or phase
    for cond in conditions:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    init_specs = spec.get("initContainers") or ()
    total = len(spec.get("containers") or ())
    # Sidecars (init containers with restartPolicy Always) run beside the app containers, so
    # they count towards READY and their restarts stay in RESTARTS once the pod is initialized.
    sidecar: dict[str, bool] = {}
    for c in init_specs:
        is_sidecar = c.get("restartPolicy") == "Always"
        sidecar[c.get("name", "")] = is_sidecar
        total += is_sidecar

    ready = 0
    restarts = sidecar_restarts = 0
    last_restart: float | None = None
    last_sidecar_restart: float | None = None
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or ()):
        count = cs.get("restartCount", 0)
        finished = _last_finished(cs, pod, clock, "initContainerStatuses", i)
        restarts += count
        last_restart = _later(last_restart, finished)
        is_sidecar = sidecar.get(cs.get("name", ""), False)
        if is_sidecar:
            sidecar_restarts += count
            last_sidecar_restart = _later(last_sidecar_restart, finished)
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        if terminated is not None and terminated.get("exitCode", 0) == 0:
            continue
        if is_sidecar and cs.get("started") is True:
            ready += bool(cs.get("ready"))
            continue
        if terminated is not None:
            reason = "Init:" + _terminated_reason(terminated)
        elif waiting is not None and waiting.get("reason", "") not in ("", "PodInitializing"):
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _initialized(conditions):
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        has_running = False
        # Backwards, so the first container with something to say sets the reason.
        statuses = status.get("containerStatuses") or ()
        for i in range(len(statuses) - 1, -1, -1):
            cs = statuses[i]
            restarts += cs.get("restartCount", 0)
            finished = _last_finished(cs, pod, clock, "containerStatuses", i)
            last_restart = _later(last_restart, finished)
            state = cs.get("state") or {}
            terminated = state.get("terminated")
            waiting = state.get("waiting")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None:
                reason = _terminated_reason(terminated)
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_true = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
            )
            reason = "Running" if ready_true else "NotReady"

    if meta.get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_cell = str(restarts)
    if restarts and last_restart is not None:
        restarts_cell = f"{restarts} ({human_duration(clock.now - last_restart)} ago)"

    pod_ips = status.get("podIPs")
    pod_ip = (pod_ips[0].get("ip", "") if pod_ips else "") or status.get("podIP", "")
    gates = spec.get("readinessGates") or ()
    gates_cell = _NONE
    if gates:
        true_gates = 0
        for gate in gates:
            wanted = gate.get("conditionType")
            for cond in conditions:
                if cond.get("type") == wanted:
                    true_gates += cond.get("status") == "True"
                    break
        gates_cell = f"{true_gates}/{len(gates)}"

    return [
        meta.get("name", ""),
        f"{ready}/{total}",
        reason,
        restarts_cell,
        clock.since(meta.get("creationTimestamp"), pod, "metadata.creationTimestamp"),
        pod_ip or _NONE,
        spec.get("nodeName") or _NONE,
        status.get("nominatedNodeName") or _NONE,
        gates_cell,
    ]


def _initialized(conditions: Sequence[Mapping[str, Any]]) -> bool:
    for cond in conditions:
        if cond.get("type") == "Initialized":
            return bool(cond.get("status") == "True")
    return False


_POD_SUCCEEDED: Final = (
    {
        "type": "Completed",
        "status": "True",
        "reason": "Succeeded",
        "message": "The pod has completed successfully.",
    },
)
_POD_FAILED: Final = (
    {"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."},
)

_ROLE_PREFIX: Final = "node-role.kubernetes.io/"


def _node_cells(node: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}

    ready: str | None = None
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready":  # the last Ready condition wins, as in Kubernetes
            ready = cond.get("status", "")
    states = ["Unknown" if ready is None else "Ready" if ready == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")

    roles: set[str] = set()
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith(_ROLE_PREFIX):
            if role := key[len(_ROLE_PREFIX) :]:
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(value)

    internal_ip = external_ip = _NONE
    for address in reversed(status.get("addresses") or ()):  # backwards: the first one wins
        if address.get("type") == "InternalIP":
            internal_ip = address.get("address", "")
        elif address.get("type") == "ExternalIP":
            external_ip = address.get("address", "")

    return [
        meta.get("name", ""),
        ",".join(states),
        ",".join(sorted(roles)) or _NONE,
        clock.since(meta.get("creationTimestamp"), node, "metadata.creationTimestamp"),
        info.get("kubeletVersion", ""),
        internal_ip,
        external_ip,
        info.get("osImage") or _UNKNOWN,
        info.get("kernelVersion") or _UNKNOWN,
        info.get("containerRuntimeVersion") or _UNKNOWN,
    ]


def _replica_set_cells(rs: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = rs.get("metadata") or {}
    spec = rs.get("spec") or {}
    status = rs.get("status") or {}
    template_spec = (spec.get("template") or {}).get("spec") or {}
    names, images = _layout_containers(template_spec.get("containers") or ())
    return [
        meta.get("name", ""),
        spec.get("replicas", 1),  # unset defaults to 1, as Kubernetes defaults it
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        clock.since(meta.get("creationTimestamp"), rs, "metadata.creationTimestamp"),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]


def _job_condition_true(job: Mapping[str, Any], type_: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def _job_cells(job: Mapping[str, Any], clock: _Clock) -> _Cells:
    """printJob: STATUS from the conditions (Complete, Failed, Terminating, Suspended,
    FailureTarget, else Running), COMPLETIONS as succeeded/completions (a Job without
    completions: "n/1", or "n/1 of P" when parallel), DURATION start to completion (or to now)."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    succeeded = status.get("succeeded", 0)
    if "completions" in spec:
        completions = f"{succeeded}/{spec['completions']}"
    elif spec.get("parallelism", 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    started = clock.epoch(status.get("startTime"), job, "status.startTime")
    finished = clock.epoch(status.get("completionTime"), job, "status.completionTime")
    duration = ""
    if started is not None:
        duration = human_duration((clock.now if finished is None else finished) - started)
    if _job_condition_true(job, "Complete"):
        state = "Complete"
    elif _job_condition_true(job, "Failed"):
        state = "Failed"
    elif meta.get("deletionTimestamp"):
        state = "Terminating"
    elif _job_condition_true(job, "Suspended"):
        state = "Suspended"
    elif _job_condition_true(job, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    template_spec = (spec.get("template") or {}).get("spec") or {}
    names, images = _layout_containers(template_spec.get("containers") or ())
    return [
        meta.get("name", ""),
        state,
        completions,
        duration,
        clock.since(meta.get("creationTimestamp"), job, "metadata.creationTimestamp"),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]


def _deployment_cells(d: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = d.get("metadata") or {}
    spec = d.get("spec") or {}
    status = d.get("status") or {}
    template_spec = (spec.get("template") or {}).get("spec") or {}
    names, images = _layout_containers(template_spec.get("containers") or ())
    return [
        meta.get("name", ""),
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        clock.since(meta.get("creationTimestamp"), d, "metadata.creationTimestamp"),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]


def _event_cells(event: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = event.get("metadata") or {}
    first_ts = event.get("firstTimestamp")
    if first_ts:
        first = clock.since(first_ts, event, "firstTimestamp")
    else:
        first = clock.since(event.get("eventTime"), event, "eventTime")
    last_ts = event.get("lastTimestamp")
    last = clock.since(last_ts, event, "lastTimestamp") if last_ts else first

    count = event.get("count", 0)
    series = event.get("series")
    if series is not None:
        last = clock.since(series.get("lastObservedTime"), event, "series.lastObservedTime")
        count = series.get("count", 0)
    elif count == 0:
        count = 1  # events.k8s.io singletons carry no count

    involved = event.get("involvedObject") or {}
    kind = involved.get("kind", "").lower()
    name = involved.get("name", "")
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent", "")
    host = source.get("host") or event.get("reportingInstance", "")
    return [
        last,
        event.get("type", ""),
        event.get("reason", ""),
        f"{kind}/{name}" if name else kind,
        involved.get("fieldPath", ""),
        f"{component}, {host}" if host else component,
        event.get("message", "").strip(),
        first,
        count,
        meta.get("name", ""),
    ]


def _lease_cells(lease: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = lease.get("metadata") or {}
    return [
        meta.get("name", ""),
        (lease.get("spec") or {}).get("holderIdentity", ""),
        clock.since(meta.get("creationTimestamp"), lease, "metadata.creationTimestamp"),
    ]


def _service_external_ip(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    svc_type = spec.get("type") or "ClusterIP"
    external_ips: list[str] = spec.get("externalIPs") or []
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external_ips) or _NONE
    if svc_type == "LoadBalancer":
        found: set[str] = set()
        for ingress in (status.get("loadBalancer") or {}).get("ingress") or ():
            # tinykube's ingress entries are bare addresses; Kubernetes' are {ip, hostname}.
            address = (
                ingress
                if isinstance(ingress, str)
                else (ingress.get("ip") or ingress.get("hostname"))
            )
            if address:
                found.add(address)
        addresses = [*sorted(found), *external_ips]
        return ",".join(addresses) or "<pending>"
    if svc_type == "ExternalName":
        return str(spec.get("externalName", ""))
    return _UNKNOWN


def _service_cells(svc: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = svc.get("metadata") or {}
    spec = svc.get("spec") or {}
    cluster_ips = spec.get("clusterIPs")
    cluster_ip = (cluster_ips[0] if cluster_ips else "") or spec.get("clusterIP", "")
    ports = []
    for port in spec.get("ports") or ():
        protocol = port.get("protocol") or "TCP"
        node_port = port.get("nodePort", 0)
        number = port.get("port", 0)
        ports.append(
            f"{number}:{node_port}/{protocol}" if node_port > 0 else f"{number}/{protocol}"
        )
    return [
        meta.get("name", ""),
        spec.get("type") or "ClusterIP",
        cluster_ip or _NONE,
        _service_external_ip(spec, svc.get("status") or {}),
        ",".join(ports) or _NONE,
        clock.since(meta.get("creationTimestamp"), svc, "metadata.creationTimestamp"),
        _format_labels(spec.get("selector")),
    ]


_MAX_ENDPOINTS: Final = 3


def _format_endpoints(subsets: Sequence[Mapping[str, Any]]) -> str:
    if not subsets:
        return _NONE
    shown: list[str] = []
    more = False
    count = 0
    for subset in subsets:
        addresses = subset.get("addresses") or ()
        ports = subset.get("ports") or ()
        if not ports:  # a headless service without ports: bare addresses
            count += len(addresses)
            for address in addresses:
                if len(shown) == _MAX_ENDPOINTS:
                    more = True
                    break
                shown.append(address.get("ip", ""))
            continue
        for port in ports:
            count += len(addresses)
            number = port.get("port", 0)
            for address in addresses:
                if len(shown) == _MAX_ENDPOINTS:
                    more = True
                    break
                shown.append(_join_host_port(address.get("ip", ""), number))
    joined = ",".join(shown)
    return f"{joined} + {count - _MAX_ENDPOINTS} more..." if more else joined


def _endpoints_cells(ep: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = ep.get("metadata") or {}
    return [
        meta.get("name", ""),
        _format_endpoints(ep.get("subsets") or ()),
        clock.since(meta.get("creationTimestamp"), ep, "metadata.creationTimestamp"),
    ]


def _int_or_string_cell(value: Any) -> str:
    """An IntOrString as Kubernetes' printer shows it; "N/A" when unset."""
    if value is None:
        return "N/A"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _pdb_cells(pdb: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = pdb.get("metadata") or {}
    spec = pdb.get("spec") or {}
    status = pdb.get("status") or {}
    return [
        meta.get("name", ""),
        _int_or_string_cell(spec.get("minAvailable")),
        _int_or_string_cell(spec.get("maxUnavailable")),
        status.get("disruptionsAllowed", 0),
        clock.since(meta.get("creationTimestamp"), pdb, "metadata.creationTimestamp"),
    ]


def _namespace_cells(ns: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = ns.get("metadata") or {}
    return [
        meta.get("name", ""),
        (ns.get("status") or {}).get("phase", ""),
        clock.since(meta.get("creationTimestamp"), ns, "metadata.creationTimestamp"),
    ]


def _priority_class_cells(pc: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = pc.get("metadata") or {}
    return [
        meta.get("name", ""),
        pc.get("value", 0),
        bool(pc.get("globalDefault", False)),
        clock.since(meta.get("creationTimestamp"), pc, "metadata.creationTimestamp"),
        pc.get("preemptionPolicy", ""),
    ]


def _default_cells(obj: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = obj.get("metadata") or {}
    at = clock.epoch(meta.get("creationTimestamp"), obj, "metadata.creationTimestamp")
    # Go formats the zero time too: an unset timestamp prints as the year 1.
    created = (
        "0001-01-01T00:00:00Z"
        if at is None
        else datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    return [meta.get("name", ""), created]


def _role_binding_cells(binding: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = binding.get("metadata") or {}
    ref = binding.get("roleRef") or {}
    users: list[str] = []
    groups: list[str] = []
    accounts: list[str] = []
    for subject in binding.get("subjects") or ():
        kind, name = subject.get("kind", ""), subject.get("name", "")
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            accounts.append(f"{subject.get('namespace', '')}/{name}")
    return [
        meta.get("name", ""),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        clock.since(meta.get("creationTimestamp"), binding, "metadata.creationTimestamp"),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(accounts),
    ]


_PRINTERS: Final[dict[str, _Printer]] = {
    "RoleBinding": _role_binding_cells,
    "ClusterRoleBinding": _role_binding_cells,
    "Pod": _pod_cells,
    "Node": _node_cells,
    "ReplicaSet": _replica_set_cells,
    "Deployment": _deployment_cells,
    "Event": _event_cells,
    "Lease": _lease_cells,
    "Service": _service_cells,
    "Endpoints": _endpoints_cells,
    "PodDisruptionBudget": _pdb_cells,
    "Job": _job_cells,
    "Namespace": _namespace_cells,
    "PriorityClass": _priority_class_cells,
}


# --- rows and the Table ---------------------------------------------------------------------

# apps/v1 DaemonSets and ControllerRevisions (kube's printDaemonSet, printControllerRevision).
_COLUMNS["DaemonSet"] = (
    _NAME_COLUMN,
    _col("Desired", "integer", "The number of nodes that should run the daemon pod."),
    _col("Current", "integer", "The number of nodes running at least one daemon pod."),
    _col("Ready", "integer", "The number of nodes whose daemon pod is ready."),
    _col("Up-to-date", "integer", "The number of nodes running the current template's pod."),
    _col("Available", "integer", "The number of nodes whose daemon pod is available."),
    _col("Node Selector", "string", "The labels a node must have to run the pod."),
    _AGE_COLUMN,
    _col("Containers", "string", _D_TEMPLATE_CONTAINERS, priority=1),
    _col("Images", "string", _D_TEMPLATE_IMAGES, priority=1),
    _col("Selector", "string", "The label selector of its pods (spec.selector).", priority=1),
)
_COLUMNS["ControllerRevision"] = (
    _NAME_COLUMN,
    _col("Controller", "string", "Controller of the object"),
    _col("Revision", "string", "The revision of the state the data represents."),
    _AGE_COLUMN,
)


def _daemon_set_cells(ds: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = ds.get("metadata") or {}
    spec = ds.get("spec") or {}
    status = ds.get("status") or {}
    template_spec = (spec.get("template") or {}).get("spec") or {}
    names, images = _layout_containers(template_spec.get("containers") or ())
    return [
        meta.get("name", ""),
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        _format_labels(template_spec.get("nodeSelector")),
        clock.since(meta.get("creationTimestamp"), ds, "metadata.creationTimestamp"),
        names,
        images,
        _format_label_selector(spec.get("selector")),
    ]


def _controller_revision_cells(cr: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = cr.get("metadata") or {}
    controller = _NONE
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            group = ref.get("apiVersion", "").rpartition("/")[0]
            kind = f"{ref.get('kind', '')}.{group}" if group else ref.get("kind", "")
            controller = f"{kind.lower()}/{ref.get('name', '')}"
            break
    return [
        meta.get("name", ""),
        controller,
        cr.get("revision", 0),
        clock.since(meta.get("creationTimestamp"), cr, "metadata.creationTimestamp"),
    ]


_PRINTERS["DaemonSet"] = _daemon_set_cells
_PRINTERS["ControllerRevision"] = _controller_revision_cells

# admissionregistration.k8s.io/v1 webhook configurations (kube's printMutatingWebhook,
# printValidatingWebhook): how many webhooks each holds.
for _webhook_kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
    _COLUMNS[_webhook_kind] = (
        _NAME_COLUMN,
        _col("Webhooks", "integer", "Webhooks indicates the number of webhooks in the object."),
        _AGE_COLUMN,
    )


def _webhook_configuration_cells(config: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = config.get("metadata") or {}
    return [
        meta.get("name", ""),
        len(config.get("webhooks") or ()),
        clock.since(meta.get("creationTimestamp"), config, "metadata.creationTimestamp"),
    ]


_PRINTERS["MutatingWebhookConfiguration"] = _webhook_configuration_cells
_PRINTERS["ValidatingWebhookConfiguration"] = _webhook_configuration_cells

# ValidatingAdmissionPolicy and its binding (kube's printValidatingAdmissionPolicy,
# printValidatingAdmissionPolicyBinding).
_COLUMNS["ValidatingAdmissionPolicy"] = (
    _NAME_COLUMN,
    _col(
        "Validations",
        "integer",
        "Validations indicates the number of validation rules defined in this configuration",
    ),
    _col(
        "ParamKind",
        "string",
        "ParamKind specifies the kind of resources used to parameterize this policy",
    ),
    _AGE_COLUMN,
)
_COLUMNS["ValidatingAdmissionPolicyBinding"] = (
    _NAME_COLUMN,
    _col(
        "PolicyName",
        "string",
        "PolicyName indicates the policy definition which the policy binding binded to",
    ),
    _col(
        "ParamRef",
        "string",
        "ParamRef indicates the param resource which sets the configration param",
    ),
    _AGE_COLUMN,
)


def _admission_policy_cells(policy: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = policy.get("metadata") or {}
    spec = policy.get("spec") or {}
    kind = spec.get("paramKind")
    param_kind = f"{kind.get('apiVersion', '')}/{kind.get('kind', '')}" if kind else "<unset>"
    return [
        meta.get("name", ""),
        len(spec.get("validations") or ()),
        param_kind,
        clock.since(meta.get("creationTimestamp"), policy, "metadata.creationTimestamp"),
    ]


def _admission_policy_binding_cells(binding: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = binding.get("metadata") or {}
    spec = binding.get("spec") or {}
    ref = spec.get("paramRef")
    param = "<unset>"
    if ref:
        if ref.get("name"):
            # kube cannot tell a cluster-scoped param from here: no namespace prints as "*".
            param = f"{ref.get('namespace') or '*'}/{ref['name']}"
        elif "selector" in ref:
            param = _format_label_selector(ref.get("selector"))
    return [
        meta.get("name", ""),
        spec.get("policyName", ""),
        param,
        clock.since(meta.get("creationTimestamp"), binding, "metadata.creationTimestamp"),
    ]


_PRINTERS["ValidatingAdmissionPolicy"] = _admission_policy_cells
_PRINTERS["ValidatingAdmissionPolicyBinding"] = _admission_policy_binding_cells

# core/v1 ConfigMaps and Secrets (kube's printConfigMap, printSecret): counts of keys, never
# values. Kube declares the Data columns "string" although their cells are integers.
_COLUMNS["ConfigMap"] = (
    _NAME_COLUMN,
    _col("Data", "string", "Data contains the configuration data."),
    _AGE_COLUMN,
)
_COLUMNS["Secret"] = (
    _NAME_COLUMN,
    _col("Type", "string", "Used to facilitate programmatic handling of secret data."),
    _col("Data", "string", "Data contains the secret data."),
    _AGE_COLUMN,
)


def _config_map_cells(cm: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = cm.get("metadata") or {}
    return [
        meta.get("name", ""),
        len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
        clock.since(meta.get("creationTimestamp"), cm, "metadata.creationTimestamp"),
    ]


def _secret_cells(secret: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = secret.get("metadata") or {}
    return [
        meta.get("name", ""),
        secret.get("type", ""),
        len(secret.get("data") or {}),
        clock.since(meta.get("creationTimestamp"), secret, "metadata.creationTimestamp"),
    ]


_PRINTERS["ConfigMap"] = _config_map_cells
_PRINTERS["Secret"] = _secret_cells

# core/v1 ServiceAccounts (kube's printServiceAccount): how many Secrets it lists. As with
# ConfigMaps' Data, kube declares the column "string" and fills it with an integer.
_COLUMNS["ServiceAccount"] = (
    _NAME_COLUMN,
    _col(
        "Secrets",
        "string",
        "Secrets is a list of the secrets in the same namespace that pods running using this "
        "ServiceAccount are allowed to use. Pods are only limited to this list if this service "
        'account has a "kubernetes.io/enforce-mountable-secrets" annotation set to "true". The '
        '"kubernetes.io/enforce-mountable-secrets" annotation is deprecated since v1.32. Prefer '
        "separate namespaces to isolate access to mounted secrets. This field should not be "
        "used to find auto-generated service account token secrets for use outside of pods. "
        "Instead, tokens can be requested directly using the TokenRequest API, or service "
        "account token secrets can be manually created. More info: "
        "https://kubernetes.io/docs/concepts/configuration/secret",
    ),
    _AGE_COLUMN,
)


def _service_account_cells(sa: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = sa.get("metadata") or {}
    return [
        meta.get("name", ""),
        len(sa.get("secrets") or []),
        clock.since(meta.get("creationTimestamp"), sa, "metadata.creationTimestamp"),
    ]


_PRINTERS["ServiceAccount"] = _service_account_cells

# discovery.k8s.io/v1 EndpointSlices (kube's printEndpointSlice): at most three ports and three
# addresses each, then "+ N more..."; "<unset>" for none.
_COLUMNS["EndpointSlice"] = (
    _NAME_COLUMN,
    _col(
        "AddressType",
        "string",
        "addressType specifies the type of address carried by this EndpointSlice. All addresses "
        "in this slice must be the same type. This field is immutable after creation. The "
        "following address types are currently supported: * IPv4: Represents an IPv4 Address. "
        "* IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name. "
        "(Deprecated) The EndpointSlice controller only generates, and kube-proxy only "
        'processes, slices of addressType "IPv4" and "IPv6". No semantics are defined for '
        'the "FQDN" type.',
    ),
    _col(
        "Ports",
        "string",
        "ports specifies the list of network ports exposed by each endpoint in this slice. Each "
        "port must have a unique name. Each slice may include a maximum of 100 ports. Services "
        "always have at least 1 port, so EndpointSlices generated by the EndpointSlice "
        "controller will likewise always have at least 1 port. EndpointSlices used for other "
        "purposes may have an empty ports list.",
    ),
    _col(
        "Endpoints",
        "string",
        "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum "
        "of 1000 endpoints.",
    ),
    _AGE_COLUMN,
)


def _more(shown: list[str], count: int) -> str:
    if count > _MAX_ENDPOINTS:
        return f"{','.join(shown)} + {count - _MAX_ENDPOINTS} more..."
    return ",".join(shown) or "<unset>"


def _endpoint_slice_cells(eps: Mapping[str, Any], clock: _Clock) -> _Cells:
    meta = eps.get("metadata") or {}
    ports = [
        str(p["port"]) if "port" in p else str(p["name"]) if "name" in p else "*"
        for p in eps.get("ports") or ()
    ]
    addresses = [a for e in eps.get("endpoints") or () for a in e.get("addresses") or ()]
    return [
        meta.get("name", ""),
        eps.get("addressType", ""),
        _more(ports[:_MAX_ENDPOINTS], len(ports)),
        _more(addresses[:_MAX_ENDPOINTS], len(addresses)),
        clock.since(meta.get("creationTimestamp"), eps, "metadata.creationTimestamp"),
    ]


_PRINTERS["EndpointSlice"] = _endpoint_slice_cells


def _check_include_object(include_object: str) -> str:
    if include_object == "":
        return "Metadata"  # Kubernetes' default
    if include_object not in INCLUDE_OBJECT_VALUES:
        supported = ", ".join(f'"{v}"' for v in INCLUDE_OBJECT_VALUES)
        raise BadRequestError(
            "Unable to convert to Table as requested: includeObject: Unsupported value: "
            f'"{include_object}": supported values: {supported}'
        )
    return include_object


_JSON_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def json_path_value(obj: Any, path: str) -> Any:
    """The value at a simple JSON path (".spec.replicas", ".status.conditions[0].type",
    ".metadata.labels['app']"); None where the path leads nowhere."""
    value = obj
    pos = 0
    while pos < len(path):
        m = _JSON_PATH_STEP.match(path, pos)
        if m is None:
            return None
        pos = m.end()
        key, index = m.group(1) or m.group(3) or m.group(4), m.group(2)
        if index is not None:
            if not isinstance(value, list) or int(index) >= len(value):
                return None
            value = value[int(index)]
        elif isinstance(value, dict):
            value = value.get(key or "")
        else:
            return None
    return value


def _custom_cell(column: PrinterColumn, value: Any, clock: _Clock, obj: Mapping[str, Any]) -> Any:
    """kube's cellForJSONValue: the column's type decides the cell; missing is null."""
    if value is None:
        return None
    kind = column.type
    if kind == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "date" and isinstance(value, str):
        try:
            return clock.since(value, obj, column.json_path)
        except InternalError:
            return "<invalid>"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return value if kind == "string" else None


def _custom_printer(info: KindInfo) -> Callable[[Mapping[str, Any], _Clock], _Cells]:
    columns = _custom_columns(info)

    def cells(obj: Mapping[str, Any], clock: _Clock) -> _Cells:
        name = (obj.get("metadata") or {}).get("name", "")
        return [
            name,
            *(_custom_cell(c, json_path_value(obj, c.json_path), clock, obj) for c in columns),
        ]

    return cells


def rows(
    info: KindInfo,
    objects: Sequence[dict[str, Any]],
    *,
    include_object: str = "Metadata",
    now: datetime,
) -> list[dict[str, Any]]:
    """One Table row per object, in order: `cells` (wide cells included, as kube-apiserver sends
    them), `conditions` for finished pods, and `object` as includeObject asks: "None" (null),
    "Metadata" (a meta.k8s.io/v1 PartialObjectMetadata; also for "") or "Object" (the object).

    Raises BadRequestError for another includeObject (Kubernetes' 400 message) and
    InternalError naming the object and field for a timestamp that is not RFC 3339.
    """
    mode = _check_include_object(include_object)
    printer = _custom_printer(info) if info.custom else _PRINTERS.get(info.kind, _default_cells)
    clock = _Clock(now, info.kind)
    is_pod = info.kind == "Pod"
    out: list[dict[str, Any]] = []
    append = out.append
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, clock)}
        if is_pod:
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Succeeded":
                row["conditions"] = list(_POD_SUCCEEDED)
            elif phase == "Failed":
                row["conditions"] = list(_POD_FAILED)
        if mode == "Metadata":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": TABLE_API_VERSION,
                "metadata": obj.get("metadata") or {},
            }
        elif mode == "Object":
            if obj.get("apiVersion") and obj.get("kind"):
                row["object"] = obj
            else:  # a shallow copy: only the two keys are new
                row["object"] = {"apiVersion": info.api_version, "kind": info.kind, **obj}
        else:
            row["object"] = None
        append(row)
    return out


def table(
    info: KindInfo,
    objects: Sequence[dict[str, Any]],
    *,
    resource_version: str,
    continue_token: str = "",
    remaining_item_count: int | None = None,
    include_object: str = "Metadata",
    now: datetime,
) -> dict[str, Any]:
    """The whole meta.k8s.io/v1 Table for a GET or LIST of `info`'s kind: metadata
    (resourceVersion, continue, remainingItemCount when given), columnDefinitions and rows.
    Raises as `rows` does."""
    metadata: dict[str, Any] = {}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if continue_token:
        metadata["continue"] = continue_token
    if remaining_item_count is not None:
        metadata["remainingItemCount"] = remaining_item_count
    return {
        "kind": "Table",
        "apiVersion": TABLE_API_VERSION,
        "metadata": metadata,
        "columnDefinitions": column_definitions(info),
        "rows": rows(info, objects, include_object=include_object, now=now),
    }
