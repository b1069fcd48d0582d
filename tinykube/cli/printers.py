"""kubectl's table columns for each kind, and its human-readable ages.

Pure functions of (object, now): `columns(info, wide)` names the columns, `row(info, obj, now,
wide)` computes one row, `render(header, rows)` pads them the way kubectl's tabwriter does
(three spaces between columns). Values follow kubectl's printers: a pod's STATUS is its phase
unless a container is waiting or terminated with a reason or the pod is being deleted
("Terminating"); a node's STATUS is Ready/NotReady/Unknown plus ",SchedulingDisabled".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from tinykube import jobs, kinds
from tinykube.duration import human_duration
from tinykube.kinds import KindInfo
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


def _pod_row(pod: Any, now: datetime, wide: bool) -> list[str]:
    total = len(pod.spec.containers)
    ready = sum(1 for cs in pod.status.containerStatuses if cs.ready)
    restarts = sum(cs.restartCount for cs in pod.status.containerStatuses)
    row = [
        pod.metadata.name,
        f"{ready}/{total}",
        pod_status(pod),
        str(restarts),
        age(pod.metadata.creationTimestamp, now),
    ]
    if wide:
        row += [
            pod.status.podIP or NONE,
            pod.spec.nodeName or NONE,
            pod.status.nominatedNodeName or NONE,
        ]
    return row


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


def _address(node: Any, kind: str) -> str:
    for addr in node.status.addresses:
        if addr.type == kind:
            return str(addr.address)
    return NONE


def _node_row(node: Any, now: datetime, wide: bool) -> list[str]:
    row = [
        node.metadata.name,
        node_status(node),
        node_roles(node),
        age(node.metadata.creationTimestamp, now),
        node.status.nodeInfo.kubeletVersion or NONE,
    ]
    if wide:
        info = node.status.nodeInfo
        row += [
            _address(node, "InternalIP"),
            _address(node, "ExternalIP"),
            info.osImage or "<unknown>",
            info.kernelVersion or "<unknown>",
            info.containerRuntimeVersion or "<unknown>",
        ]
    return row


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


def _deployment_row(d: Any, now: datetime, wide: bool) -> list[str]:
    desired = d.spec.replicas if d.spec.HasField("replicas") else 1
    row = [
        d.metadata.name,
        f"{d.status.readyReplicas}/{desired}",
        str(d.status.updatedReplicas),
        str(d.status.availableReplicas),
        age(d.metadata.creationTimestamp, now),
    ]
    if wide:
        containers = d.spec.template.spec.containers
        row += [
            ",".join(c.name for c in containers),
            ",".join(c.image for c in containers),
            format_label_selector(d.spec.selector),
        ]
    return row


def _replicaset_row(rs: Any, now: datetime, wide: bool) -> list[str]:
    desired = rs.spec.replicas if rs.spec.HasField("replicas") else 1
    row = [
        rs.metadata.name,
        str(desired),
        str(rs.status.replicas),
        str(rs.status.readyReplicas),
        age(rs.metadata.creationTimestamp, now),
    ]
    if wide:
        containers = rs.spec.template.spec.containers
        row += [
            ",".join(c.name for c in containers) or NONE,
            ",".join(c.image for c in containers) or NONE,
            format_label_selector(rs.spec.selector),
        ]
    return row


def _job_row(job: Any, now: datetime, wide: bool) -> list[str]:
    status = job.status
    duration = ""
    if is_set(status.startTime):
        end = status.completionTime.ToDatetime(tzinfo=UTC) if is_set(status.completionTime) else now
        duration = human_duration((end - status.startTime.ToDatetime(tzinfo=UTC)).total_seconds())
    row = [
        job.metadata.name,
        jobs.printed_status(job),
        jobs.printed_completions(job),
        duration,
        age(job.metadata.creationTimestamp, now),
    ]
    if wide:
        containers = job.spec.template.spec.containers
        row += [
            ",".join(c.name for c in containers) or NONE,
            ",".join(c.image for c in containers) or NONE,
            format_label_selector(job.spec.selector),
        ]
    return row


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


def involved(event: Any) -> str:
    ref = event.involvedObject
    return f"{ref.kind.lower()}/{ref.name}"


def _event_row(event: Any, now: datetime, wide: bool) -> list[str]:
    row = [
        age(event_last_seen(event), now),
        event.type or "Normal",
        event.reason,
        involved(event),
    ]
    if wide:
        row += [
            event.source.component or event.reportingComponent or "",
            str(event.count or 1),
        ]
    return [*row, event.message.replace("\n", " ")]


# ---- leases ---------------------------------------------------------------------------------


def _lease_row(lease: Any, now: datetime, wide: bool) -> list[str]:
    return [
        lease.metadata.name,
        lease.spec.holderIdentity or NONE,
        age(lease.metadata.creationTimestamp, now),
    ]


# ---- services and endpoints ------------------------------------------------------------------


def service_ports(svc: Any) -> str:
    """kubectl's PORT(S): "80/TCP", "80:30080/TCP" for a nodePort."""
    parts = []
    for p in svc.spec.ports:
        node = f":{p.nodePort}" if p.nodePort else ""
        parts.append(f"{p.port}{node}/{p.protocol or 'TCP'}")
    return ",".join(parts) or NONE


def _service_row(svc: Any, now: datetime, wide: bool) -> list[str]:
    row = [
        svc.metadata.name,
        svc.spec.type or "ClusterIP",
        svc.spec.clusterIP or NONE,
        NONE,
        service_ports(svc),
        age(svc.metadata.creationTimestamp, now),
    ]
    if wide:
        selector = ",".join(f"{k}={v}" for k, v in sorted(svc.spec.selector.items()))
        row.append(selector or NONE)
    return row


def endpoint_addresses(ep: Any, limit: int = 3) -> str:
    """kubectl's ENDPOINTS: ready ip:port pairs, the first three then "+ N more..."."""
    pairs = [
        f"{a.ip}:{p.port}" for subset in ep.subsets for p in subset.ports for a in subset.addresses
    ]
    if not pairs:
        return NONE
    shown = ",".join(pairs[:limit])
    return shown + (f" + {len(pairs) - limit} more..." if len(pairs) > limit else "")


def _endpoints_row(ep: Any, now: datetime, wide: bool) -> list[str]:
    return [ep.metadata.name, endpoint_addresses(ep), age(ep.metadata.creationTimestamp, now)]


def int_or_string_text(value: Any) -> str:
    """A spec IntOrString (google.protobuf.Value) as kubectl prints it; "N/A" when unset."""
    held = int_or_string(value)
    return "N/A" if held is None else str(held)


def _pdb_row(pdb: Any, now: datetime, wide: bool) -> list[str]:
    spec = pdb.spec
    return [
        pdb.metadata.name,
        int_or_string_text(spec.minAvailable) if spec.HasField("minAvailable") else "N/A",
        int_or_string_text(spec.maxUnavailable) if spec.HasField("maxUnavailable") else "N/A",
        str(pdb.status.disruptionsAllowed),
        age(pdb.metadata.creationTimestamp, now),
    ]


# ---- RBAC -------------------------------------------------------------------------------------


def _role_row(role: Any, now: datetime, wide: bool) -> list[str]:
    created = role.metadata.creationTimestamp.ToDatetime().strftime("%Y-%m-%dT%H:%M:%SZ")
    return [role.metadata.name, created]


def _role_binding_row(binding: Any, now: datetime, wide: bool) -> list[str]:
    row = [
        binding.metadata.name,
        f"{binding.roleRef.kind}/{binding.roleRef.name}",
        age(binding.metadata.creationTimestamp, now),
    ]
    if wide:
        subjects = binding.subjects
        row += [
            ", ".join(s.name for s in subjects if s.kind == "User"),
            ", ".join(s.name for s in subjects if s.kind == "Group"),
            ", ".join(f"{s.namespace}/{s.name}" for s in subjects if s.kind == "ServiceAccount"),
        ]
    return row


_BINDING_COLUMNS = (["NAME", "ROLE", "AGE"], ["USERS", "GROUPS", "SERVICEACCOUNTS"])


# ---- namespaces and priority classes ---------------------------------------------------------


def _namespace_row(ns: Any, now: datetime, wide: bool) -> list[str]:
    return [ns.metadata.name, ns.status.phase, age(ns.metadata.creationTimestamp, now)]


def _priority_class_row(pc: Any, now: datetime, wide: bool) -> list[str]:
    return [
        pc.metadata.name,
        str(pc.value),
        "true" if pc.globalDefault else "false",
        age(pc.metadata.creationTimestamp, now),
        pc.preemptionPolicy,
    ]


_COLUMNS: dict[str, tuple[list[str], list[str]]] = {
    "Role": (["NAME", "CREATED AT"], []),
    "ClusterRole": (["NAME", "CREATED AT"], []),
    "RoleBinding": _BINDING_COLUMNS,
    "ClusterRoleBinding": _BINDING_COLUMNS,
    "Pod": (
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        ["IP", "NODE", "NOMINATED NODE"],
    ),
    "Node": (
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"],
    ),
    "ReplicaSet": (
        ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        ["CONTAINERS", "IMAGES", "SELECTOR"],
    ),
    "Deployment": (
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        ["CONTAINERS", "IMAGES", "SELECTOR"],
    ),
    "Event": (["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], ["SOURCE", "COUNT"]),
    "Lease": (["NAME", "HOLDER", "AGE"], []),
    "Service": (["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"], ["SELECTOR"]),
    "Endpoints": (["NAME", "ENDPOINTS", "AGE"], []),
    "PodDisruptionBudget": (
        ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"],
        [],
    ),
    "Namespace": (["NAME", "STATUS", "AGE"], []),
    "Job": (
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        ["CONTAINERS", "IMAGES", "SELECTOR"],
    ),
    "PriorityClass": (["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"], []),
}

_ROWS = {
    "Role": _role_row,
    "ClusterRole": _role_row,
    "RoleBinding": _role_binding_row,
    "ClusterRoleBinding": _role_binding_row,
    "Pod": _pod_row,
    "Node": _node_row,
    "ReplicaSet": _replicaset_row,
    "Deployment": _deployment_row,
    "Event": _event_row,
    "Lease": _lease_row,
    "Service": _service_row,
    "Endpoints": _endpoints_row,
    "PodDisruptionBudget": _pdb_row,
    "Namespace": _namespace_row,
    "PriorityClass": _priority_class_row,
    "Job": _job_row,
}


def _daemonset_row(ds: Any, now: datetime, wide: bool) -> list[str]:
    st = ds.status
    template = ds.spec.template.spec
    row = [
        ds.metadata.name,
        *(
            str(n)
            for n in (
                st.desiredNumberScheduled,
                st.currentNumberScheduled,
                st.numberReady,
                st.updatedNumberScheduled,
                st.numberAvailable,
            )
        ),
        ",".join(f"{k}={v}" for k, v in sorted(template.nodeSelector.items())) or NONE,
        age(ds.metadata.creationTimestamp, now),
    ]
    if wide:
        row += [
            ",".join(c.name for c in template.containers) or NONE,
            ",".join(c.image for c in template.containers) or NONE,
            format_label_selector(ds.spec.selector),
        ]
    return row


def _controller_revision_row(cr: Any, now: datetime, wide: bool) -> list[str]:
    controller = next(
        (
            f"{ref.kind.lower()}.{ref.apiVersion.rpartition('/')[0]}/{ref.name}".replace("./", "/")
            for ref in cr.metadata.ownerReferences
            if ref.controller
        ),
        NONE,
    )
    return [cr.metadata.name, controller, str(cr.revision), age(cr.metadata.creationTimestamp, now)]


# apps/v1 DaemonSets and ControllerRevisions, as kubectl prints them.
_COLUMNS["DaemonSet"] = (
    ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE"],
    ["CONTAINERS", "IMAGES", "SELECTOR"],
)
_COLUMNS["ControllerRevision"] = (["NAME", "CONTROLLER", "REVISION", "AGE"], [])
_ROWS["DaemonSet"] = _daemonset_row
_ROWS["ControllerRevision"] = _controller_revision_row


def _config_map_row(cm: Any, now: datetime, wide: bool) -> list[str]:
    keys = len(cm.data) + len(cm.binaryData)
    return [cm.metadata.name, str(keys), age(cm.metadata.creationTimestamp, now)]


def _secret_row(secret: Any, now: datetime, wide: bool) -> list[str]:
    data = str(len(secret.data))
    return [secret.metadata.name, secret.type, data, age(secret.metadata.creationTimestamp, now)]


# core/v1 ConfigMaps and Secrets, as kubectl prints them (counts of keys, never values).
_COLUMNS["ConfigMap"] = (["NAME", "DATA", "AGE"], [])
_COLUMNS["Secret"] = (["NAME", "TYPE", "DATA", "AGE"], [])
_ROWS["ConfigMap"] = _config_map_row
_ROWS["Secret"] = _secret_row


def _service_account_row(sa: Any, now: datetime, wide: bool) -> list[str]:
    return [sa.metadata.name, str(len(sa.secrets)), age(sa.metadata.creationTimestamp, now)]


# core/v1 ServiceAccounts, as kubectl prints them: how many Secrets each lists.
_COLUMNS["ServiceAccount"] = (["NAME", "SECRETS", "AGE"], [])
_ROWS["ServiceAccount"] = _service_account_row


def _more(shown: list[str], limit: int = 3) -> str:
    if len(shown) > limit:
        return f"{','.join(shown[:limit])} + {len(shown) - limit} more..."
    return ",".join(shown) or "<unset>"


def _endpoint_slice_row(eps: Any, now: datetime, wide: bool) -> list[str]:
    ports = [
        str(p.port) if p.HasField("port") else p.name if p.HasField("name") else "*"
        for p in eps.ports
    ]
    addresses = [a for e in eps.endpoints for a in e.addresses]
    return [
        eps.metadata.name,
        eps.addressType,
        _more(ports),
        _more(addresses),
        age(eps.metadata.creationTimestamp, now),
    ]


# discovery.k8s.io/v1 EndpointSlices, as kubectl prints them.
_COLUMNS["EndpointSlice"] = (["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"], [])
_ROWS["EndpointSlice"] = _endpoint_slice_row


def columns(info: KindInfo, *, wide: bool = False, with_namespace: bool = False) -> list[str]:
    base, extra = _COLUMNS[info.kind]
    header = [*base, *extra] if wide else list(base)
    if info.kind == "Event" and wide:
        # kubectl keeps MESSAGE last.
        header = [*base[:-1], *extra, base[-1]]
    if with_namespace and info.namespaced:
        header = ["NAMESPACE", *header]
    return header


def row(
    info: KindInfo, obj: Any, now: datetime, *, wide: bool = False, with_namespace: bool = False
) -> list[str]:
    cells = _ROWS[info.kind](obj, now, wide)
    if with_namespace and info.namespaced:
        cells = [obj.metadata.namespace, *cells]
    return cells


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
