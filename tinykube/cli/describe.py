"""`tinykube describe pod|node|rs|ns|pc [NAME...]`: an object's fields, conditions and its Events.

Pods print like `kubectl describe pod` (containers with state, restarts and resources,
conditions, node selectors, tolerations, events); nodes like `kubectl describe node` (taints,
conditions, addresses, capacity, the pods on it with their requests and limits, the requests
and limits allocated in total, each as a share of the node's allocatable, events); ReplicaSets
with their pods' phases and template; Deployments like `kubectl describe deployment` (replicas,
strategy, template, conditions, old and new ReplicaSets); PodDisruptionBudgets like `kubectl
describe pdb` (the bound, the selector, the status counts); namespaces and priority classes as
kubectl does. Without NAME, every object of the kind (or those `-l` selects). Other kinds print
their YAML, then their events. Events are listed in the object's namespace and matched on
involvedObject here, because the apiserver's field selectors cover only a few pod fields.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from tinykube import kinds
from tinykube.cli import printers
from tinykube.cli.common import CLIError, Context
from tinykube.cli.get import split_type_name
from tinykube.client import Client
from tinykube.duration import human_duration
from tinykube.errors import TinykubeError
from tinykube.kinds import KindInfo
from tinykube.manifest import to_yaml
from tinykube.meta import int_or_string
from tinykube.quantity import (
    DECIMAL_SI,
    QuantityError,
    format_quantity,
    parse_quantity,
    quantity_format,
)

KEY_WIDTH = 18


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "describe",
        help="show details of an object and its events",
        description="Show an object's details, conditions and recent events.",
    )
    parser.add_argument("resource", help="pod|node|replicaset|pdb|namespace|priorityclass|...")
    parser.add_argument("names", nargs="*", metavar="NAME", help="default: every object")
    parser.add_argument("-l", "--selector", default="", help="label selector (without NAME)")
    parser.set_defaults(func=run)


class Writer:
    """Indented `Key:  value` lines, as kubectl's describe prefix writer makes them."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, level: int, key: str, value: object = "", width: int = KEY_WIDTH) -> None:
        indent = "  " * level
        text = "" if value is None else str(value)
        if text:
            # Values line up within a section; a long key still gets two spaces.
            self.lines.append(f"{indent}{(key + ':').ljust(max(width, len(key) + 3))}{text}")
        else:
            self.lines.append(f"{indent}{key}:")

    def raw(self, level: int, text: str) -> None:
        self.lines.append("  " * level + text)

    def table(self, level: int, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        dashes = ["-" * len(h) for h in header]
        for text in printers.render(header, [dashes, *rows]).splitlines():
            self.raw(level, text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def fmt_time(ts: Timestamp) -> str:
    if not printers.is_set(ts):
        return "<unset>"
    return ts.ToDatetime(tzinfo=UTC).strftime("%a, %d %b %Y %H:%M:%S %z")


def fmt_map(values: Iterable[tuple[str, str]], sep: str = "=") -> list[str]:
    return [f"{k}{sep}{v}" for k, v in sorted(values)] or [printers.NONE]


def multi(w: Writer, level: int, key: str, values: list[str], width: int = KEY_WIDTH) -> None:
    """First value on the key's line, the rest aligned under it."""
    w.line(level, key, values[0], width)
    for value in values[1:]:
        w.raw(0, " " * width + value)


def toleration_text(t: Any) -> str:
    """kubectl's form: `key[=value][:effect] [op=Exists] [for Ns]`."""
    text = t.key
    if t.value:
        text += f"={t.value}"
    if t.effect:
        text += f":{t.effect}"
    if t.operator == "Exists":
        text = f"{text} op=Exists" if text else "op=Exists"
    if t.HasField("tolerationSeconds"):
        text += f" for {t.tolerationSeconds}s"
    return str(text)


def _topology_key(constraint: Any) -> str:
    return str(constraint.topologyKey)


def selector_text(selector: Any) -> str:
    """metav1.FormatLabelSelector: requirements sorted by key, `<none>` for an empty one."""
    reqs = [f"{k}={v}" for k, v in selector.matchLabels.items()]
    keys = list(selector.matchLabels)
    for e in selector.matchExpressions:
        values = ",".join(sorted(e.values))
        keys.append(e.key)
        reqs.append(
            {
                "In": f"{e.key} in ({values})",
                "NotIn": f"{e.key} notin ({values})",
                "Exists": e.key,
                "DoesNotExist": f"!{e.key}",
            }.get(e.operator, f"{e.key} {e.operator} ({values})")
        )
    order = sorted(range(len(reqs)), key=lambda i: keys[i])
    return ",".join(reqs[i] for i in order) or printers.NONE


def spread_text(c: Any) -> str:
    """kubectl's line for a topology spread constraint."""
    text = f"{c.topologyKey}:{c.whenUnsatisfiable} when max skew {c.maxSkew} is exceeded"
    if c.HasField("labelSelector"):
        text += f" for selector {selector_text(c.labelSelector)}"
    return text


def container_state(w: Writer, level: int, key: str, state: Any) -> None:
    if state.HasField("running"):
        w.line(level, key, "Running")
        w.line(level + 1, "Started", fmt_time(state.running.startedAt))
    elif state.HasField("terminated"):
        term = state.terminated
        w.line(level, key, "Terminated")
        w.line(level + 1, "Reason", term.reason or printers.NONE)
        w.line(level + 1, "Exit Code", str(term.exitCode))
        if term.signal:
            w.line(level + 1, "Signal", str(term.signal))
        w.line(level + 1, "Started", fmt_time(term.startedAt))
        w.line(level + 1, "Finished", fmt_time(term.finishedAt))
    elif state.HasField("waiting"):
        w.line(level, key, "Waiting")
        w.line(level + 1, "Reason", state.waiting.reason or printers.NONE)
        if state.waiting.message:
            w.line(level + 1, "Message", state.waiting.message)


def describe_probe(probe: Any) -> str:
    """A probe as kubectl v1.37 describe prints it."""
    attrs = (
        f"delay={probe.initialDelaySeconds}s timeout={probe.timeoutSeconds}s "
        f"period={probe.periodSeconds}s successThreshold={probe.successThreshold} "
        f"failureThreshold={probe.failureThreshold}"
    )
    if probe.HasField("exec"):
        return f"exec [{' '.join(probe.exec.command)}] {attrs}"
    if probe.HasField("httpGet"):
        h = probe.httpGet
        port = int_or_string(h.port)
        host = h.host if port is None else join_host_port(h.host, str(port))
        return f"http-get {(h.scheme or 'HTTP').lower()}://{host}{h.path} {attrs}"
    if probe.HasField("tcpSocket"):
        port = int_or_string(probe.tcpSocket.port)
        return f"tcp-socket {probe.tcpSocket.host}:{'' if port is None else port} {attrs}"
    if probe.HasField("grpc"):
        return f"grpc <pod>:{probe.grpc.port} {probe.grpc.service} {attrs}"
    return f"unknown {attrs}"


def join_host_port(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def describe_containers(w: Writer, title: str, containers: Any, statuses: Any) -> None:
    if not containers:
        return
    w.line(0, title)
    by_name = {cs.name: cs for cs in statuses}
    for c in containers:
        w.line(1, c.name)
        cs = by_name.get(c.name)
        if cs is not None:
            w.line(2, "Container ID", cs.containerID)
        w.line(2, "Image", c.image or printers.NONE)
        if cs is not None:
            w.line(2, "Image ID", cs.imageID)
        for key, values in (("Command", c.command), ("Args", c.args)):
            if values:
                w.line(2, key)
                for v in values:
                    w.raw(3, v)
        for port in c.ports:
            w.line(2, "Port", f"{port.containerPort}/{port.protocol or 'TCP'}")
            if port.hostPort:
                w.line(2, "Host Port", f"{port.hostPort}/{port.protocol or 'TCP'}")
        cs = by_name.get(c.name)
        if cs is not None:
            container_state(w, 2, "State", cs.state)
            if cs.lastState.ListFields():
                container_state(w, 2, "Last State", cs.lastState)
            w.line(2, "Ready", str(cs.ready))
            w.line(2, "Restart Count", str(cs.restartCount))
        for key, values in (("Limits", c.resources.limits), ("Requests", c.resources.requests)):
            if values:
                w.line(2, key)
                for name, qty in sorted(values.items()):
                    w.line(3, name, qty, width=10)
        for key, field in (
            ("Liveness", "livenessProbe"),
            ("Readiness", "readinessProbe"),
            ("Startup", "startupProbe"),
        ):
            if c.HasField(field):
                w.line(2, key, describe_probe(getattr(c, field)))
        if c.env:
            w.line(2, "Environment")
            for env in c.env:
                w.line(3, env.name, env.value or '""', width=10)
        else:
            w.line(2, "Environment", printers.NONE)


def describe_pod(pod: Any, events: list[Any], now: datetime) -> str:
    w = Writer()
    meta, spec, status = pod.metadata, pod.spec, pod.status
    w.line(0, "Name", meta.name)
    w.line(0, "Namespace", meta.namespace)
    w.line(0, "Priority", str(spec.priority) if spec.HasField("priority") else "0")
    if spec.serviceAccountName:  # kubectl's line, shown only when set
        w.line(0, "Service Account", spec.serviceAccountName)
    w.line(0, "Scheduler", spec.schedulerName or printers.NONE)
    node = spec.nodeName
    if node and status.hostIP:
        node = f"{node}/{status.hostIP}"
    w.line(0, "Node", node or printers.NONE)
    w.line(0, "Start Time", fmt_time(status.startTime))
    multi(w, 0, "Labels", fmt_map(meta.labels.items()))
    multi(w, 0, "Annotations", fmt_map(meta.annotations.items(), ": "))
    w.line(0, "Status", printers.pod_status(pod))
    if printers.is_set(meta.deletionTimestamp):
        grace = meta.deletionGracePeriodSeconds
        w.line(0, "Termination Grace Period", f"{grace}s", width=len("Termination Grace Period:"))
    if status.reason:
        w.line(0, "Reason", status.reason)
    if status.message:
        w.line(0, "Message", status.message)
    w.line(0, "IP", status.podIP or "")
    for ref in meta.ownerReferences:
        if ref.controller:
            w.line(0, "Controlled By", f"{ref.kind}/{ref.name}")
    if status.nominatedNodeName:
        w.line(0, "NominatedNodeName", status.nominatedNodeName)
    describe_containers(w, "Init Containers", spec.initContainers, status.initContainerStatuses)
    describe_containers(w, "Containers", spec.containers, status.containerStatuses)
    if status.conditions:
        w.line(0, "Conditions")
        w.table(1, ["Type", "Status"], [[c.type, c.status] for c in status.conditions])
        unhappy = [c for c in status.conditions if c.status != "True" and c.message]
        for c in unhappy:
            w.raw(1, f"{c.type}: {c.reason}: {c.message}" if c.reason else f"{c.type}: {c.message}")
    spread = [spread_text(c) for c in sorted(spec.topologySpreadConstraints, key=_topology_key)]
    # kubectl's tabwriter aligns this block to its longest key.
    width = len("Topology Spread Constraints:  " if spread else "Node-Selectors:  ")
    multi(w, 0, "Node-Selectors", fmt_map(spec.nodeSelector.items()), width)
    tolerations = [toleration_text(t) for t in spec.tolerations] or [printers.NONE]
    multi(w, 0, "Tolerations", tolerations, width)
    if spread:
        multi(w, 0, "Topology Spread Constraints", spread, width)
    describe_events(w, events, now)
    return w.text()


def describe_node(node: Any, pods: list[Any], events: list[Any], now: datetime) -> str:
    w = Writer()
    meta, spec, status = node.metadata, node.spec, node.status
    w.line(0, "Name", meta.name)
    w.line(0, "Roles", printers.node_roles(node))
    multi(w, 0, "Labels", fmt_map(meta.labels.items()))
    multi(w, 0, "Annotations", fmt_map(meta.annotations.items(), ": "))
    w.line(0, "CreationTimestamp", fmt_time(meta.creationTimestamp))
    taints = [
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in spec.taints
    ] or [printers.NONE]
    multi(w, 0, "Taints", taints)
    w.line(0, "Unschedulable", str(spec.unschedulable).lower())
    if status.conditions:
        w.line(0, "Conditions")
        w.table(
            1,
            ["Type", "Status", "LastHeartbeatTime", "Reason", "Message"],
            [
                [c.type, c.status, fmt_time(c.lastHeartbeatTime), c.reason, c.message]
                for c in status.conditions
            ],
        )
    if status.addresses:
        w.line(0, "Addresses")
        for addr in status.addresses:
            w.line(1, addr.type, addr.address)
    for key, values in (("Capacity", status.capacity), ("Allocatable", status.allocatable)):
        if values:
            w.line(0, key)
            for name, qty in sorted(values.items()):
                w.line(1, name, qty)
    info = status.nodeInfo
    if info.ListFields():
        w.line(0, "System Info")
        for key, value in (
            ("Machine ID", info.machineID),
            ("System UUID", info.systemUUID),
            ("Boot ID", info.bootID),
            ("Kernel Version", info.kernelVersion),
            ("OS Image", info.osImage),
            ("Operating System", info.operatingSystem),
            ("Architecture", info.architecture),
            ("Container Runtime Version", info.containerRuntimeVersion),
            ("Kubelet Version", info.kubeletVersion),
        ):
            w.line(1, key, value or "", width=28)
    live = [p for p in pods if p.status.phase not in ("Succeeded", "Failed")]
    allocatable = status.allocatable or status.capacity
    w.line(0, "Non-terminated Pods", f"({len(live)} in total)", width=len("Non-terminated Pods:  "))
    rows = []
    total_requests: dict[str, Total] = {}
    total_limits: dict[str, Total] = {}
    for p in live:
        requests, limits = pod_requests_and_limits(p)
        rows.append(
            [
                p.metadata.namespace,
                p.metadata.name,
                *(
                    share(totals.get(resource), resource, allocatable)
                    for resource in ("cpu", "memory")
                    for totals in (requests, limits)
                ),
                printers.age(p.metadata.creationTimestamp, now),
            ]
        )
        add_all(total_requests, requests)
        add_all(total_limits, limits)
    header = ["Namespace", "Name", "CPU Requests", "CPU Limits"]
    header += ["Memory Requests", "Memory Limits", "Age"]
    w.table(1, header, rows)
    w.line(0, "Allocated resources")
    w.raw(1, "(Total limits may be over 100 percent, i.e., overcommitted.)")
    # As kubectl: cpu, memory and ephemeral-storage always, then the node's hugepages (with a
    # share), then its extended resources (without one); pods are not listed.
    shown = ["cpu", "memory", "ephemeral-storage"]
    hugepages = sorted(r for r in allocatable if r.startswith("hugepages-"))
    extended = sorted(r for r in allocatable if r not in (*shown, "pods", *hugepages))
    allocated = [
        [
            r,
            share(total_requests.get(r), r, allocatable),
            share(total_limits.get(r), r, allocatable),
        ]
        for r in (*shown, *hugepages)
    ]
    allocated += [
        [r, str(total_requests.get(r, Total())), str(total_limits.get(r, Total()))]
        for r in extended
    ]
    w.table(1, ["Resource", "Requests", "Limits"], allocated)
    describe_events(w, events, now)
    return w.text()


@dataclass
class Total:
    """A sum of quantities, printed as Kubernetes prints one: in the format of the first
    non-zero quantity added (Quantity.Add keeps it), canonically ("64Mi" + "100M" is
    "167108864", "1Gi" + "512M" is "1548576Ki")."""

    amount: Fraction = Fraction(0)
    fmt: str = DECIMAL_SI

    @staticmethod
    def of(text: str) -> Total | None:
        """The quantity `text`; None when it is not one (a stored object is printed anyway)."""
        try:
            return Total(parse_quantity(text), quantity_format(text))
        except QuantityError:
            return None

    def add(self, other: Total) -> None:
        if self.amount == 0:
            self.fmt = other.fmt
        self.amount += other.amount

    def __str__(self) -> str:
        return format_quantity(self.amount, self.fmt)


def add_all(into: dict[str, Total], values: dict[str, Total]) -> None:
    for resource, amount in values.items():
        into.setdefault(resource, Total()).add(amount)


def pod_requests_and_limits(pod: Any) -> tuple[dict[str, Total], dict[str, Total]]:
    """What a pod requests and is limited to, as the scheduler and kubectl count it: the sum
    over its containers, or the largest init container's where that is more (init containers
    run one at a time, before the others)."""
    sums: list[dict[str, Total]] = [{}, {}]
    for c in pod.spec.containers:
        for into, values in zip(sums, (c.resources.requests, c.resources.limits), strict=True):
            for resource, text in values.items():
                amount = Total.of(text)
                if amount is not None:
                    into.setdefault(resource, Total()).add(amount)
    for c in pod.spec.initContainers:
        for into, values in zip(sums, (c.resources.requests, c.resources.limits), strict=True):
            for resource, text in values.items():
                amount = Total.of(text)
                if amount is not None and amount.amount > into.get(resource, Total()).amount:
                    into[resource] = amount
    return sums[0], sums[1]


def share(total: Total | None, resource: str, allocatable: Any) -> str:
    """ "350m (17%)": the amount and its whole percent of the node's allocatable (0% when the
    node has none), truncated as kubectl does; cpu is compared in millicores, the rest in
    units."""
    amount = total or Total()
    capacity = Total.of(allocatable.get(resource, "0")) or Total()
    scale = 1000 if resource == "cpu" else 1
    have = math.ceil(capacity.amount * scale)
    percent = int(math.ceil(amount.amount * scale) * 100 / have) if have > 0 else 0
    return f"{amount} ({percent}%)"


def owned_by(pod: Any, owner: Any) -> bool:
    return any(ref.uid == owner.metadata.uid for ref in pod.metadata.ownerReferences)


def describe_replicaset(rs: Any, pods: list[Any], events: list[Any], now: datetime) -> str:
    """As `kubectl describe rs`: selector, replicas, pods by phase, the template, events."""
    w = Writer()
    meta, spec, status = rs.metadata, rs.spec, rs.status
    w.line(0, "Name", meta.name)
    w.line(0, "Namespace", meta.namespace)
    w.line(0, "Selector", printers.format_label_selector(spec.selector))
    multi(w, 0, "Labels", fmt_map(meta.labels.items()))
    multi(w, 0, "Annotations", fmt_map(meta.annotations.items(), ": "))
    desired = spec.replicas if spec.HasField("replicas") else 1
    w.line(0, "Replicas", f"{status.replicas} current / {desired} desired")
    mine = [p for p in pods if owned_by(p, rs)]
    phases = [p.status.phase or "Pending" for p in mine]
    running, waiting = phases.count("Running"), phases.count("Pending")
    done, failed = phases.count("Succeeded"), phases.count("Failed")
    w.line(
        0,
        "Pods Status",
        f"{running} Running / {waiting} Waiting / {done} Succeeded / {failed} Failed",
    )
    w.line(0, "Pod Template")
    multi(w, 1, "Labels", fmt_map(spec.template.metadata.labels.items()))
    describe_containers(w, "  Containers", spec.template.spec.containers, [])
    describe_events(w, events, now)
    return w.text()


def describe_job(job: Any, events: list[Any], now: datetime) -> str:
    """As `kubectl describe job`: selector, parallelism, completions, mode, times, the pods'
    counts (and completed indexes of an Indexed Job), the template, events."""
    w = Writer()
    meta, spec, status = job.metadata, job.spec, job.status
    w.line(0, "Name", meta.name)
    w.line(0, "Namespace", meta.namespace)
    w.line(0, "Selector", printers.format_label_selector(spec.selector))
    multi(w, 0, "Labels", fmt_map(meta.labels.items()))
    multi(w, 0, "Annotations", fmt_map(meta.annotations.items(), ": "))
    if spec.HasField("parallelism"):
        w.line(0, "Parallelism", str(spec.parallelism))
    w.line(0, "Completions", str(spec.completions) if spec.HasField("completions") else "<unset>")
    if spec.HasField("completionMode"):
        w.line(0, "Completion Mode", spec.completionMode)
    if spec.HasField("suspend"):
        w.line(0, "Suspend", "true" if spec.suspend else "false")
    if spec.HasField("backoffLimit"):
        w.line(0, "Backoff Limit", str(spec.backoffLimit))
    if spec.HasField("ttlSecondsAfterFinished"):
        w.line(0, "TTL Seconds After Finished", str(spec.ttlSecondsAfterFinished))
    if printers.is_set(status.startTime):
        w.line(0, "Start Time", fmt_time(status.startTime))
    if printers.is_set(status.completionTime):
        w.line(0, "Completed At", fmt_time(status.completionTime))
    if printers.is_set(status.startTime) and printers.is_set(status.completionTime):
        took = status.completionTime.ToDatetime() - status.startTime.ToDatetime()
        w.line(0, "Duration", human_duration(took.total_seconds()))
    if spec.HasField("activeDeadlineSeconds"):
        w.line(0, "Active Deadline Seconds", f"{spec.activeDeadlineSeconds}s")
    counts = f"{status.succeeded} Succeeded / {status.failed} Failed"
    if status.HasField("ready"):
        pods = f"{status.active} Active ({status.ready} Ready) / {counts}"
    else:
        pods = f"{status.active} Active / {counts}"
    w.line(0, "Pods Statuses", pods)
    if spec.completionMode == "Indexed":
        w.line(0, "Completed Indexes", _cap_indexes(status.completedIndexes, 50))
    w.line(0, "Pod Template")
    multi(w, 1, "Labels", fmt_map(spec.template.metadata.labels.items()))
    describe_containers(w, "  Containers", spec.template.spec.containers, [])
    describe_events(w, events, now)
    return w.text()


def describe_deployment(d: Any, rss: list[Any], events: list[Any], now: datetime) -> str:
    """As `kubectl describe deployment`: replicas, strategy, template, conditions, the old and
    new ReplicaSets (those the Deployment controls), events."""
    w = Writer()
    width = len("RollingUpdateStrategy:  ")
    meta, spec, status = d.metadata, d.spec, d.status
    w.line(0, "Name", meta.name, width)
    w.line(0, "Namespace", meta.namespace, width)
    w.line(0, "CreationTimestamp", fmt_time(meta.creationTimestamp), width)
    multi(w, 0, "Labels", fmt_map(meta.labels.items()), width)
    multi(w, 0, "Annotations", fmt_map(meta.annotations.items(), ": "), width)
    w.line(0, "Selector", printers.format_label_selector(spec.selector), width)
    desired = spec.replicas if spec.HasField("replicas") else 1
    w.line(
        0,
        "Replicas",
        f"{desired} desired | {status.updatedReplicas} updated | {status.replicas} total | "
        f"{status.availableReplicas} available | {status.unavailableReplicas} unavailable",
        width,
    )
    w.line(0, "StrategyType", spec.strategy.type, width)
    w.line(0, "MinReadySeconds", str(spec.minReadySeconds), width)
    if spec.strategy.HasField("rollingUpdate"):
        ru = spec.strategy.rollingUpdate
        w.line(
            0,
            "RollingUpdateStrategy",
            f"{printers.int_or_string_text(ru.maxUnavailable)} max unavailable, "
            f"{printers.int_or_string_text(ru.maxSurge)} max surge",
            width,
        )
    w.line(0, "Pod Template")
    multi(w, 1, "Labels", fmt_map(spec.template.metadata.labels.items()))
    describe_containers(w, "  Containers", spec.template.spec.containers, [])
    if status.conditions:
        # kubectl writes each type with a trailing space into its tabwriter (padding 2).
        rows = [("Type", "Status", "Reason"), ("----", "------", "------")]
        rows += [(f"{c.type} ", c.status, c.reason) for c in status.conditions]
        type_width = max(len(r[0]) for r in rows) + 3
        status_width = max(len(r[1]) for r in rows) + 2
        w.raw(0, "Conditions:")
        for t, st, reason in rows:
            w.raw(1, f"{t.ljust(type_width)}{st.ljust(status_width)}{reason}")
    mine = [
        rs
        for rs in rss
        if any(r.uid == meta.uid and r.controller for r in rs.metadata.ownerReferences)
    ]
    template = type(spec.template)()
    template.CopyFrom(spec.template)
    new = None
    for rs in sorted(mine, key=lambda r: (r.metadata.creationTimestamp.seconds, r.metadata.name)):
        candidate = type(spec.template)()
        candidate.CopyFrom(rs.spec.template)
        candidate.metadata.labels.pop("pod-template-hash", None)
        if candidate == template:
            new = rs
            break

    def created(rs: Any) -> str:
        want = rs.spec.replicas if rs.spec.HasField("replicas") else 1
        return f"{rs.metadata.name} ({rs.status.replicas}/{want} replicas created)"

    olds = [
        created(rs)
        for rs in mine
        if rs is not new and (rs.spec.replicas if rs.spec.HasField("replicas") else 1) > 0
    ]
    w.line(0, "OldReplicaSets", ", ".join(olds) or printers.NONE, len("OldReplicaSets:  "))
    w.line(0, "NewReplicaSet", created(new) if new else printers.NONE, len("OldReplicaSets:  "))
    describe_events(w, events, now)
    return w.text()


def _cap_indexes(indexes: str, soft_limit: int) -> str:
    """capIndexesListOrNone: the list up to the first comma past `soft_limit`, then "..."."""
    if not indexes:
        return printers.NONE
    cut = indexes.find(",", soft_limit)
    return indexes if cut < 0 else indexes[: cut + 1] + "..."


def describe_daemonset(ds: Any, pods: list[Any], events: list[Any], now: datetime) -> str:
    """As `kubectl describe ds`: selector, node selector, the scheduling counts, pods by
    phase, the template, events."""
    w = Writer()
    width = len("Node-Selector:  ")
    meta, spec, status = ds.metadata, ds.spec, ds.status
    w.line(0, "Name", meta.name, width)
    w.line(0, "Namespace", meta.namespace, width)
    w.line(0, "Selector", printers.format_label_selector(spec.selector), width)
    w.line(0, "Node-Selector", ",".join(fmt_map(spec.template.spec.nodeSelector.items())), width)
    multi(w, 0, "Labels", fmt_map(meta.labels.items()), width)
    multi(w, 0, "Annotations", fmt_map(meta.annotations.items(), ": "), width)
    for key, value in (
        ("Desired Number of Nodes Scheduled", status.desiredNumberScheduled),
        ("Current Number of Nodes Scheduled", status.currentNumberScheduled),
        ("Number of Nodes Scheduled with Up-to-date Pods", status.updatedNumberScheduled),
        ("Number of Nodes Scheduled with Available Pods", status.numberAvailable),
        ("Number of Nodes Misscheduled", status.numberMisscheduled),
    ):
        w.raw(0, f"{key}: {value}")
    mine = [p for p in pods if owned_by(p, ds)]
    phases = [p.status.phase or "Pending" for p in mine]
    w.raw(
        0,
        f"Pods Status:  {phases.count('Running')} Running / {phases.count('Pending')} Waiting / "
        f"{phases.count('Succeeded')} Succeeded / {phases.count('Failed')} Failed",
    )
    w.line(0, "Pod Template")
    multi(w, 1, "Labels", fmt_map(spec.template.metadata.labels.items()))
    if spec.template.metadata.annotations:
        multi(w, 1, "Annotations", fmt_map(spec.template.metadata.annotations.items(), ": "))
    describe_containers(w, "  Containers", spec.template.spec.containers, [])
    describe_events(w, events, now)
    return w.text()


def describe_pdb(pdb: Any, events: list[Any], now: datetime) -> str:
    """As `kubectl describe pdb`: the bound that is set, the selector and the status counts."""
    w = Writer()
    meta, spec, status = pdb.metadata, pdb.spec, pdb.status
    w.line(0, "Name", meta.name)
    w.line(0, "Namespace", meta.namespace)
    if spec.HasField("minAvailable"):
        w.line(0, "Min available", printers.int_or_string_text(spec.minAvailable))
    elif spec.HasField("maxUnavailable"):
        w.line(0, "Max unavailable", printers.int_or_string_text(spec.maxUnavailable))
    if spec.HasField("selector"):
        w.line(0, "Selector", printers.format_label_selector(spec.selector))
    else:
        w.line(0, "Selector", "<unset>")
    w.line(0, "Status")
    w.line(2, "Allowed disruptions", str(status.disruptionsAllowed), width=KEY_WIDTH + 4)
    w.line(2, "Current", str(status.currentHealthy), width=KEY_WIDTH + 4)
    w.line(2, "Desired", str(status.desiredHealthy), width=KEY_WIDTH + 4)
    w.line(2, "Total", str(status.expectedPods), width=KEY_WIDTH + 4)
    describe_events(w, events, now)
    return w.text()


def describe_namespace(ns: Any, events: list[Any], now: datetime) -> str:
    """As `kubectl describe namespace`: labels, status, the deletion conditions, and kubectl's
    lines for the quotas and limit ranges tinykube does not have."""
    w = Writer()
    width = len("Annotations:  ")
    w.line(0, "Name", ns.metadata.name, width)
    multi(w, 0, "Labels", fmt_map(ns.metadata.labels.items()), width)
    multi(w, 0, "Annotations", fmt_map(ns.metadata.annotations.items(), ": "), width)
    w.line(0, "Status", ns.status.phase, width)
    if ns.status.conditions:
        w.raw(0, "Conditions:")
        rows = [
            [c.type, c.status, fmt_time(c.lastTransitionTime), c.reason, c.message]
            for c in ns.status.conditions
        ]
        w.table(1, ["Type", "Status", "LastTransitionTime", "Reason", "Message"], rows)
    w.raw(0, "")
    w.raw(0, "No resource quota.")
    w.raw(0, "")
    w.raw(0, "No LimitRange resource.")
    return w.text()


def describe_priority_class(pc: Any, events: list[Any], now: datetime) -> str:
    """As `kubectl describe priorityclass`."""
    w = Writer()
    width = len("PreemptionPolicy:  ")
    w.line(0, "Name", pc.metadata.name, width)
    w.line(0, "Value", str(pc.value), width)
    w.line(0, "GlobalDefault", "true" if pc.globalDefault else "false", width)
    w.line(0, "PreemptionPolicy", pc.preemptionPolicy, width)
    w.line(0, "Description", pc.description, width)
    multi(w, 0, "Annotations", fmt_map(pc.metadata.annotations.items(), ": "), width)
    describe_events(w, events, now)
    return w.text()


def _describe_object_meta(w: Writer, obj: Any) -> None:
    width = len("Annotations:  ")
    w.line(0, "Name", obj.metadata.name, width)
    w.line(0, "Namespace", obj.metadata.namespace, width)
    multi(w, 0, "Labels", fmt_map(obj.metadata.labels.items()), width)
    multi(w, 0, "Annotations", fmt_map(obj.metadata.annotations.items(), ": "), width)


def describe_config_map(cm: Any, events: list[Any], now: datetime) -> str:
    """As `kubectl describe configmap`: each data value in full, binaryData as sizes."""
    w = Writer()
    _describe_object_meta(w, cm)
    w.raw(0, "")
    w.raw(0, "Data")
    w.raw(0, "====")
    for key in sorted(cm.data):
        w.raw(0, f"{key}:")
        w.raw(0, "----")
        w.lines.extend(f"{cm.data[key]}\n".split("\n"))
    w.raw(0, "")
    w.raw(0, "BinaryData")
    w.raw(0, "====")
    for key in sorted(cm.binaryData):
        w.raw(0, f"{key}: {len(cm.binaryData[key])} bytes")
    w.raw(0, "")
    if events:
        describe_events(w, events, now)
    else:  # a tab block of its own in kubectl's output, after the blank line
        w.line(0, "Events", printers.NONE, len("Events:  "))
    return w.text()


def describe_secret(secret: Any, events: list[Any], now: datetime) -> str:
    """As `kubectl describe secret`: the size of each value, never the value (but a service
    account token's `token`, which kubectl shows)."""
    w = Writer()
    _describe_object_meta(w, secret)
    w.raw(0, "")
    w.line(0, "Type", secret.type, len("Type:  "))
    w.raw(0, "")
    w.raw(0, "Data")
    w.raw(0, "====")
    width = max((len(k) + 3 for k in secret.data), default=0)
    for key in sorted(secret.data):
        value = secret.data[key]
        if key == "token" and secret.type == "kubernetes.io/service-account-token":
            w.line(0, key, value.decode("utf-8", "replace"), width)
        else:
            w.line(0, key, f"{len(value)} bytes", width)
    return w.text()


SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"


def describe_service_account(
    sa: Any, secrets: list[Any] | None, events: list[Any], now: datetime
) -> str:
    """As `kubectl describe serviceaccount`: its image pull secrets, and its mountable secrets
    and token Secrets when it has some (each one the namespace lacks marked "(not found)");
    `secrets` are the namespace's (None: they could not be listed, so nothing is marked)."""
    width = len("Image pull secrets:") + 2  # one tab block: every key padded alike
    w = Writer()
    w.line(0, "Name", sa.metadata.name, width)
    w.line(0, "Namespace", sa.metadata.namespace, width)
    multi(w, 0, "Labels", fmt_map(sa.metadata.labels.items()), width)
    multi(w, 0, "Annotations", fmt_map(sa.metadata.annotations.items(), ": "), width)
    tokens: list[str] = []
    missing: set[str] = set()
    if secrets is not None:
        existing = {s.metadata.name for s in secrets}
        for s in secrets:
            owner = s.metadata.annotations
            if (
                s.type == SERVICE_ACCOUNT_TOKEN
                and owner.get("kubernetes.io/service-account.name") == sa.metadata.name
                and owner.get("kubernetes.io/service-account.uid") == sa.metadata.uid
            ):
                tokens.append(s.metadata.name)
        wanted = [r.name for r in sa.secrets] + [r.name for r in sa.imagePullSecrets]
        missing = {name for name in wanted if name not in existing}
    for header, names in (
        ("Image pull secrets", [r.name for r in sa.imagePullSecrets]),
        ("Mountable secrets", [r.name for r in sa.secrets]),
        ("Tokens", tokens),
    ):
        if not names:
            # kubectl v1.37 shows the legacy Mountable secrets and Tokens only when there are
            # some (what it printed against tinykube in tests/e2e/test_serviceaccounts.py).
            if header == "Image pull secrets":
                w.line(0, header, printers.NONE, width)
            continue
        for i, name in enumerate(names):
            shown = f"{name} (not found)" if name in missing else name
            if i == 0:
                w.line(0, header, shown, width)
            else:
                w.raw(0, " " * width + shown)
    if events:
        describe_events(w, events, now)
    else:
        w.line(0, "Events", printers.NONE, width)
    return w.text()


def format_endpoint_slices(slices: Sequence[Any], port_name: str | None, limit: int = 3) -> str:
    """kubectl's formatEndpointSlices: the ready addresses (ready unset counts as ready) with
    the slice port named `port_name` (every port when None), at most `limit`, then "+ N more...";
    "<none>" without slices."""
    if not slices:
        return printers.NONE
    shown: list[str] = []
    count = 0
    for eps in slices:
        ready = [
            e for e in eps.endpoints if not e.conditions.HasField("ready") or e.conditions.ready
        ]
        if not eps.ports:  # a headless Service without ports: bare addresses
            for e in ready:
                if len(shown) < limit:
                    shown.append(e.addresses[0])
                count += 1
            continue
        for port in eps.ports:
            if port_name is not None and port.name != port_name:
                continue
            for e in ready:
                if len(shown) < limit:
                    shown.append(join_host_port(e.addresses[0], str(port.port)))
                count += 1
    joined = ",".join(shown)
    return f"{joined} + {count - limit} more..." if count > limit else joined


def describe_service(svc: Any, slices: Sequence[Any], events: list[Any], now: datetime) -> str:
    """As `kubectl describe service` (v1.37): each port with its target and node port, and the
    ready endpoints of the Service's EndpointSlices that serve it."""
    width = len("Internal Traffic Policy:") + 2  # one tab block: every key padded alike
    spec = svc.spec
    w = Writer()
    w.line(0, "Name", svc.metadata.name, width)
    w.line(0, "Namespace", svc.metadata.namespace, width)
    multi(w, 0, "Labels", fmt_map(svc.metadata.labels.items()), width)
    multi(w, 0, "Annotations", shown_annotations(svc.metadata), width)
    w.line(0, "Selector", ",".join(fmt_map(spec.selector.items())), width)
    w.line(0, "Type", spec.type, width)
    if spec.HasField("ipFamilyPolicy"):
        w.line(0, "IP Family Policy", spec.ipFamilyPolicy, width)
    w.line(0, "IP Families", ",".join(spec.ipFamilies) or printers.NONE, width)
    w.line(0, "IP", spec.clusterIP, width)
    if spec.clusterIPs:
        w.line(0, "IPs", ",".join(spec.clusterIPs), width)
    for port in spec.ports:
        name = port.name or "<unset>"
        protocol = port.protocol or "TCP"
        w.line(0, "Port", f"{name}  {port.port}/{protocol}", width)
        target = int_or_string(port.targetPort)
        w.line(
            0,
            "TargetPort",
            f"{target if target not in (None, '') else port.port}/{protocol}",
            width,
        )
        if port.nodePort:
            w.line(0, "NodePort", f"{name}  {port.nodePort}/{protocol}", width)
        endpoints = format_endpoint_slices(slices, port.name)
        if endpoints:
            w.line(0, "Endpoints", endpoints, width)
        else:  # kubectl's tabwriter pads the key of an empty value too
            w.raw(0, "Endpoints:".ljust(width))
    w.line(0, "Session Affinity", spec.sessionAffinity, width)
    if spec.externalTrafficPolicy:
        w.line(0, "External Traffic Policy", spec.externalTrafficPolicy, width)
    if spec.HasField("internalTrafficPolicy"):
        w.line(0, "Internal Traffic Policy", spec.internalTrafficPolicy, width)
    if events:
        describe_events(w, events, now)
    else:
        w.line(0, "Events", printers.NONE, width)
    return w.text()


def tabwrite(lines: Sequence[str], padding: int = 2) -> list[str]:
    """Lines of tab-terminated cells aligned as Go's text/tabwriter (kubectl's describe output:
    minwidth 0, padding 2) aligns them: a column's width is set per block of consecutive lines
    that have that column, and a line's last cell is never padded."""
    rows = [line.split("\t") for line in lines]
    widths: list[list[int]] = [[0] * (len(r) - 1) for r in rows]

    def fmt(first: int, end: int, col: int) -> None:
        i = first
        while i < end:
            if len(rows[i]) - 1 <= col:
                i += 1
                continue
            j, width = i, 0
            while j < end and len(rows[j]) - 1 > col:
                width = max(width, len(rows[j][col]) + padding)
                j += 1
            for k in range(i, j):
                widths[k][col] = width
            fmt(i, j, col + 1)
            i = j

    fmt(0, len(rows), 0)
    return [
        "".join(c.ljust(w) for c, w in zip(r[:-1], wr, strict=True)) + r[-1]
        for r, wr in zip(rows, widths, strict=True)
    ]


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def shown_annotations(meta: Any) -> list[str]:
    """Annotations as kubectl's describe lists them: without kubectl's last-applied one."""
    return fmt_map(((k, v) for k, v in meta.annotations.items() if k != LAST_APPLIED), ": ")


def _multiline(title: str, values: list[str]) -> list[str]:
    return [f"{title}:\t{values[0]}", *(f"\t{v}" for v in values[1:])]


def describe_endpoint_slice(eps: Any, events: list[Any], now: datetime) -> str:
    """As `kubectl describe endpointslice` (v1.37): ports as a table, each endpoint's first
    address, ready condition, hostname, target, node and zone ("<unset>" when not set)."""
    unset = "<unset>"
    lines = [
        f"Name:\t{eps.metadata.name}",
        f"Namespace:\t{eps.metadata.namespace}",
        *_multiline("Labels", fmt_map(eps.metadata.labels.items())),
        *_multiline("Annotations", shown_annotations(eps.metadata)),
        f"AddressType:\t{eps.addressType}",
    ]
    if not eps.ports:
        lines.append("Ports: <unset>")
    else:
        lines += ["Ports:", "  Name\tPort\tProtocol", "  ----\t----\t--------"]
        for port in eps.ports:
            number = str(port.port) if port.HasField("port") else unset
            lines.append(f"  {port.name or unset}\t{number}\t{port.protocol}")
    if not eps.endpoints:
        lines.append("Endpoints: <none>")
    else:
        lines.append("Endpoints:")
        for e in eps.endpoints:
            c = e.conditions
            lines += [
                f"  - Addresses:\t{', '.join(e.addresses) or printers.NONE}",
                "    Conditions:",
                f"      Ready:\t{str(c.ready).lower() if c.HasField('ready') else unset}",
                f"    Hostname:\t{e.hostname if e.HasField('hostname') else unset}",
            ]
            if e.HasField("targetRef"):
                lines.append(f"    TargetRef:\t{e.targetRef.kind}/{e.targetRef.name}")
            lines += [
                f"    NodeName:\t{e.nodeName if e.HasField('nodeName') else unset}",
                f"    Zone:\t{e.zone if e.HasField('zone') else unset}",
            ]
    if not events:
        lines.append(f"Events:\t{printers.NONE}")
        return "\n".join(tabwrite(lines)) + "\n"
    w = Writer()
    w.lines = tabwrite(lines)
    describe_events(w, events, now)
    return w.text()


def describe_events(w: Writer, events: list[Any], now: datetime) -> None:
    if not events:
        w.line(0, "Events", printers.NONE)
        return
    w.line(0, "Events")
    rows = []
    for e in events:
        seen = printers.age(printers.event_last_seen(e), now)
        if e.count > 1:
            first = printers.age(e.firstTimestamp, now)
            seen = f"{seen} (x{e.count} over {first})"
        source = e.source.component or e.reportingComponent or ""
        rows.append([e.type or "Normal", e.reason, seen, source, e.message.replace("\n", " ")])
    w.table(1, ["Type", "Reason", "Age", "From", "Message"], rows)


async def events_for(client: Client, info: KindInfo, obj: Any) -> list[Any]:
    """Events whose involvedObject is `obj` (by kind and name, and uid when both have one)."""
    listed = await client.events.list(obj.metadata.namespace if info.namespaced else "")
    found = []
    for e in listed.items:
        ref = e.involvedObject
        if ref.kind != info.kind or ref.name != obj.metadata.name:
            continue
        if info.namespaced and ref.namespace and ref.namespace != obj.metadata.namespace:
            continue
        if ref.uid and obj.metadata.uid and ref.uid != obj.metadata.uid:
            continue
        found.append(e)
    return printers.sort_for_display(kinds.EVENT, found)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    info, args.names = split_type_name(args.resource, args.names, "describe")
    if ctx.all_namespaces and info.namespaced:
        raise CLIError("describe needs a namespace, not --all-namespaces")
    namespace = ctx.namespace_for(info)
    async with ctx.client() as client:
        resource = client.resource(info)
        if args.names:
            objs = [await resource.get(name, namespace) for name in args.names]
        else:
            listed = await resource.list(namespace, label_selector=args.selector)
            objs = printers.sort_for_display(info, listed.items)
        outputs = []
        for obj in objs:
            events = await events_for(client, info, obj)
            if info.kind == "Pod":
                outputs.append(describe_pod(obj, events, ctx.now()))
            elif info.kind == "Node":
                on_node = f"spec.nodeName={obj.metadata.name}"
                pods = await client.pods.list(field_selector=on_node)
                outputs.append(describe_node(obj, list(pods.items), events, ctx.now()))
            elif info.kind == "ReplicaSet":
                pods = await client.pods.list(obj.metadata.namespace)
                outputs.append(describe_replicaset(obj, list(pods.items), events, ctx.now()))
            elif info.kind == "Deployment":
                rss = await client.replica_sets.list(obj.metadata.namespace)
                outputs.append(describe_deployment(obj, list(rss.items), events, ctx.now()))
            elif info.kind == "PodDisruptionBudget":
                outputs.append(describe_pdb(obj, events, ctx.now()))
            elif info.kind == "Job":
                outputs.append(describe_job(obj, events, ctx.now()))
            elif info.kind == "Namespace":
                outputs.append(describe_namespace(obj, events, ctx.now()))
            elif info.kind == "DaemonSet":
                pods = await client.pods.list(obj.metadata.namespace)
                outputs.append(describe_daemonset(obj, list(pods.items), events, ctx.now()))
            elif info.kind == "PriorityClass":
                outputs.append(describe_priority_class(obj, events, ctx.now()))
            elif info.kind == "ConfigMap":
                outputs.append(describe_config_map(obj, events, ctx.now()))
            elif info.kind == "Secret":
                # Never the generic YAML below: it would print the values.
                outputs.append(describe_secret(obj, events, ctx.now()))
            elif info.kind == "Service":
                # kubectl v1.37 reads the Service's EndpointSlices (by the service-name label).
                label = f"kubernetes.io/service-name={obj.metadata.name}"
                slices = await client.endpoint_slices.list(
                    obj.metadata.namespace, label_selector=label
                )
                found_slices = sorted(slices.items, key=lambda s: s.metadata.name)
                outputs.append(describe_service(obj, found_slices, events, ctx.now()))
            elif info.kind == "EndpointSlice":
                outputs.append(describe_endpoint_slice(obj, events, ctx.now()))
            elif info.kind == "ServiceAccount":
                found: list[Any] | None
                try:
                    found = list((await client.secrets.list(obj.metadata.namespace)).items)
                except TinykubeError:
                    found = None  # kubectl describes the account all the same
                outputs.append(describe_service_account(obj, found, events, ctx.now()))
            else:
                w = Writer()
                describe_events(w, events, ctx.now())
                outputs.append(to_yaml(obj) + w.text())
        if outputs:
            ctx.print("\n\n".join(o.rstrip("\n") for o in outputs))
    return 0
