"""What a container runtime is to the kubelet, and how runtime state becomes PodStatus.

A runtime keeps a `PodRecord` per pod uid: one `ContainerRecord` per container with its
process, state (waiting/running/terminated), restart count and last termination. The pod
workers (kubelet/pods.py) call `sync_pod` to move a pod towards its spec and turn the record
into a Kubernetes PodStatus with `build_pod_status`, a pure function. Times in records are wall
seconds (epoch) so they survive a kubelet restart through the process runtime's state file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubelet.envvars import EnvSources
from tinykube.quantity import QuantityError, parse_quantity
from tinykube.v1 import pod_pb2

WAITING, RUNNING, TERMINATED = "waiting", "running", "terminated"


@dataclass
class Termination:
    exit_code: int
    reason: str
    started_at: float
    finished_at: float
    signal: int = 0
    message: str = ""
    container_id: str = ""


@dataclass
class ContainerRecord:
    name: str
    state: str = WAITING
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    pid: int = 0
    # /proc/<pid>/stat start time: tells our process from a later one that reused its pid.
    proc_start: str = ""
    started_at: float = 0.0
    restart_count: int = 0
    # Set while state == TERMINATED (not restarting); `last` is the previous termination.
    terminated: Termination | None = None
    last: Termination | None = None
    # No (re)start before this wall time: crash-loop back-off.
    next_start: float = 0.0
    backoff_exp: int = 0
    # The image its current (or last) instance was started from: status.containerStatuses[].image,
    # and what `definition_changed` compares with the spec's.
    image: str = ""
    # CRI runtimes: the runtime's id of the current (or last) instance (containerID without
    # its scheme) and the image id it reports (status.containerStatuses[].imageID).
    container_id: str = ""
    image_ref: str = ""
    # The node's file behind the current instance's terminationMessagePath ("" if none), and
    # its terminationMessagePolicy (kubelet/lifecycle.py reads them when it ends).
    message_file: str = ""
    message_policy: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ContainerRecord:
        data = dict(data)
        for k in ("terminated", "last"):
            if data.get(k) is not None:
                data[k] = Termination(**data[k])
        return cls(**data)


@dataclass
class PodRecord:
    uid: str
    namespace: str
    name: str
    start_time: float
    containers: dict[str, ContainerRecord] = field(default_factory=dict)
    init_containers: dict[str, ContainerRecord] = field(default_factory=dict)
    # Succeeded or Failed: the kubelet starts nothing for it any more.
    final_phase: str = ""
    # status.reason and status.message of a pod the kubelet failed (DeadlineExceeded).
    final_reason: str = ""
    final_message: str = ""
    # (type, reason, message) of Events to record; drained by the pod worker, never persisted.
    events: list[tuple[str, str, str]] = field(default_factory=list)
    # (stage, start, end) wall times of what the runtime did for the pod (the sandbox with its
    # CNI ADD, each container's image, create, start); drained by the pod worker into its
    # startup trace (kubelet/podstartup.py), never persisted.
    timings: list[tuple[str, float, float]] = field(default_factory=list)
    # Wall time the runtime wants another sync at (a container waits for its ConfigMap or
    # Secret); 0: none. For runtimes that are not polled.
    retry_at: float = 0.0
    # CRI runtimes: the pod sandbox's id and IPs (status.podIP, podIPs); empty: the node's.
    sandbox_id: str = ""
    pod_ips: list[str] = field(default_factory=list)
    # spec.ephemeralContainers (`kubectl debug`): each started once, never restarted.
    ephemeral_containers: dict[str, ContainerRecord] = field(default_factory=dict)


class Runtime(Protocol):
    """A container runtime. Single event loop; methods are not called concurrently per pod."""

    # Seconds between polls of a running pod (process exits), or None: nothing to poll.
    poll_interval: float | None
    # Where containers' env valueFrom and envFrom are read from (the kubelet sets the API).
    env_sources: EnvSources

    def load(self) -> list[str]:
        """Restore state from disk after a restart; the uids of pods it knows."""
        ...

    def known_pods(self) -> list[str]: ...

    async def sync_pod(self, pod: pod_pb2.Pod) -> PodRecord:
        """Start or restart containers as the spec and restartPolicy say; return the record."""
        ...

    async def kill_pod(self, uid: str, grace_seconds: float) -> None:
        """SIGTERM every container, SIGKILL what is left after the grace period."""
        ...

    def orphan_grace(self, uid: str) -> float:
        """The grace period to kill a pod with whose object is gone (force-deleted while no
        kubelet ran): its spec's terminationGracePeriodSeconds as this runtime recorded it
        when it started the pod (kube restores it from the container's labels), else 0."""
        ...

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        """Stop one running container (a failed liveness probe), recording a Killing Event
        with `why`; its exit is then handled as any exit, restartPolicy deciding a restart."""
        ...

    def forget(self, uid: str) -> None:
        """Drop a killed pod's record and files."""
        ...

    def log_path(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        """The CRI-format log file of the container's current (or previous) instance.

        None if this runtime keeps no logs, or there is no previous instance.
        """
        ...

    def record(self, uid: str) -> PodRecord | None: ...


def definition_changed(container: pod_pb2.Container, crec: ContainerRecord) -> bool:
    """Kubernetes' containerChanged for a running container: the kubelet's container hash
    covers the name and the image only (HashContainer), and the name is the record's key, so a
    changed hash is a changed image. Such a container is killed ("Container web definition
    changed, will be restarted") and started again from the new spec whatever the
    restartPolicy, without back-off (kube's back-off key includes the hash)."""
    return crec.state == RUNNING and bool(crec.image) and crec.image != container.image


def definition_changed_message(name: str) -> str:
    return f"Container {name} definition changed, will be restarted"


def start_events(container: pod_pb2.Container) -> list[tuple[str, str, str]]:
    """The Events of a container start, worded as the kubelet's: runtimes without images
    report the image as present, as the kubelet does for an image it need not pull."""
    return [
        ("Normal", "Pulled", f'Container image "{container.image}" already present on machine'),
        ("Normal", "Created", f"Created container: {container.name}"),
        ("Normal", "Started", f"Started container {container.name}"),
    ]


def _succeeded(rec: ContainerRecord | None) -> bool:
    return (
        rec is not None
        and rec.state == TERMINATED
        and rec.terminated is not None
        and rec.terminated.exit_code == 0
    )


def initialized(pod: pod_pb2.Pod, rec: PodRecord) -> bool:
    """Every init container has run to success."""
    return all(_succeeded(rec.init_containers.get(c.name)) for c in pod.spec.initContainers)


def pod_phase(pod: pod_pb2.Pod, rec: PodRecord) -> str:
    """Kubernetes' getPhase: Pending until initialized and every container has started."""
    if rec.final_phase:
        return rec.final_phase
    if not initialized(pod, rec):
        for c in pod.spec.initContainers:
            crec = rec.init_containers.get(c.name)
            if crec is not None and crec.state == TERMINATED and not _succeeded(crec):
                return "Failed"  # failed with restartPolicy Never
        return "Pending"
    records = [rec.containers.get(c.name) for c in pod.spec.containers]
    if not records or any(r is None for r in records):
        return "Pending"
    recs = [r for r in records if r is not None]
    if any(r.state == WAITING and r.last is None and r.restart_count == 0 for r in recs):
        return "Pending"  # something has never run yet
    if all(r.state == TERMINATED for r in recs):
        failed = any(r.terminated is not None and r.terminated.exit_code != 0 for r in recs)
        return "Failed" if failed else "Succeeded"
    return "Running"


def _fill_state(state: pod_pb2.ContainerState, rec: ContainerRecord) -> None:
    if rec.state == RUNNING:
        state.running.startedAt.seconds = math.floor(rec.started_at)
    elif rec.state == TERMINATED and rec.terminated is not None:
        _fill_terminated(state, rec.terminated)
    else:
        state.waiting.reason = rec.waiting_reason
        state.waiting.message = rec.waiting_message


def _fill_terminated(state: pod_pb2.ContainerState, t: Termination) -> None:
    term = state.terminated
    term.exitCode = t.exit_code
    term.signal = t.signal
    term.reason = t.reason
    term.message = t.message
    if t.started_at:
        term.startedAt.seconds = math.floor(t.started_at)
    term.finishedAt.seconds = math.floor(t.finished_at)


OWN_CONDITIONS = ("Initialized", "ContainersReady", "Ready")


def with_others_conditions(
    status: pod_pb2.PodStatus, stored: pod_pb2.PodStatus
) -> pod_pb2.PodStatus:
    """`status` with the conditions the kubelet does not own (PodScheduled, DisruptionTarget,
    ...) taken from `stored`, the apiserver's copy: as the kubelet's mergePodStatus, so a
    condition another component set after our last report is not dropped by the next."""
    merged = pod_pb2.PodStatus()
    merged.CopyFrom(status)
    del merged.conditions[:]
    merged.conditions.extend(c for c in stored.conditions if c.type not in OWN_CONDITIONS)
    merged.conditions.extend(c for c in status.conditions if c.type in OWN_CONDITIONS)
    return merged


def image_id(container: pod_pb2.Container, image: str = "") -> str:
    """The imageID a container reports: what the process and fake runtimes run is the
    container's image name, command and args, so the digest of those stands for the image's
    content digest (`sha256:<hex>`, the form containerd reports for an image without a
    repository digest). Stable across kubelet restarts and nodes. `image` is the running
    instance's image where it differs from the spec's (a changed image before its restart)."""
    return _digest(image or container.image, tuple(container.command), tuple(container.args))


@functools.lru_cache(maxsize=4096)
def _digest(image: str, command: tuple[str, ...], args: tuple[str, ...]) -> str:
    # Cached: every status a pod worker builds asks again, and a fake kubelet has thousands.
    what = json.dumps([image, command, args])
    return "sha256:" + hashlib.sha256(what.encode()).hexdigest()


def _amount(text: str) -> object:
    try:
        return parse_quantity(text)
    except QuantityError:
        return text


def qos_class(pod: pod_pb2.Pod) -> str:
    """kube's GetPodQOS: Guaranteed when every container limits cpu and memory with requests
    equal to the limits, BestEffort when none requests or limits either, else Burstable."""
    if pod.status.qosClass:
        return pod.status.qosClass
    any_set = False
    guaranteed = True
    for c in (*pod.spec.initContainers, *pod.spec.containers):
        req, lim = c.resources.requests, c.resources.limits
        for name in ("cpu", "memory"):
            if name in req or name in lim:
                any_set = True
            if name not in lim:
                guaranteed = False
            elif name in req:
                # Equal strings are equal amounts: parse ("1" against "1000m") only if not.
                want, limit = req[name], lim[name]
                if want != limit and _amount(want) != _amount(limit):
                    guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def as_container(pod: pod_pb2.Pod, ec: pod_pb2.EphemeralContainer) -> pod_pb2.Container:
    """An ephemeral container as the Container the runtimes start (the messages share their
    field numbers). With `targetContainerName` it also gets that container's environment
    first (the process runtime's stand-in for sharing its namespaces)."""
    container = pod_pb2.Container()
    container.MergeFromString(ec.SerializeToString())
    target = next((c for c in pod.spec.containers if c.name == ec.targetContainerName), None)
    if target is not None:
        env = [*target.env, *container.env]
        env_from = [*target.envFrom, *container.envFrom]
        del container.env[:], container.envFrom[:]
        container.env.extend(env)
        container.envFrom.extend(env_from)
    return container


def ephemeral_target(pod: pod_pb2.Pod, name: str) -> str:
    """The targetContainerName of the pod's ephemeral container `name` ("" if none)."""
    for ec in pod.spec.ephemeralContainers:
        if ec.name == name:
            return ec.targetContainerName
    return ""


def ephemeral_record(pod: pod_pb2.Pod, rec: PodRecord, name: str) -> ContainerRecord | None:
    """The record of ephemeral container `name`, if the pod has one by that name."""
    if not any(ec.name == name for ec in pod.spec.ephemeralContainers):
        return None
    return rec.ephemeral_containers.get(name)


def _created(crec: ContainerRecord) -> bool:
    """Whether the container exists in the runtime (Kubernetes reports an imageID only then)."""
    return crec.state != WAITING or crec.last is not None or bool(crec.pid or crec.container_id)


def _fill_status(
    cs: pod_pb2.ContainerStatus, container: pod_pb2.Container, crec: ContainerRecord, prefix: str
) -> None:
    cs.name = container.name
    cs.image = crec.image or container.image
    if _created(crec):
        cs.imageID = crec.image_ref or image_id(container, cs.image)
    cs.restartCount = crec.restart_count
    cs.ready = _succeeded(crec)
    cs.started = crec.state == RUNNING
    if crec.container_id:
        cs.containerID = f"{prefix}{crec.container_id}"
    elif crec.pid:
        cs.containerID = f"{prefix}{crec.pid}"
    _fill_state(cs.state, crec)
    if crec.last is not None:
        _fill_terminated(cs.lastState, crec.last)


# kube's MaxPodTerminationMessageLogLength: all of a pod's termination messages together.
MAX_POD_MESSAGE_BYTES = 12 * 1024


def _cap_messages(pod: pod_pb2.Pod, status: pod_pb2.PodStatus) -> None:
    """kube's status manager (normalizeStatus): each terminated message keeps at most its share
    of MAX_POD_MESSAGE_BYTES, its first bytes."""
    containers = len(pod.spec.containers) + len(pod.spec.initContainers)
    share = MAX_POD_MESSAGE_BYTES // max(1, containers)
    for cs in (*status.initContainerStatuses, *status.containerStatuses):
        for state in (cs.state, cs.lastState):
            data = state.terminated.message.encode()
            if len(data) > share:
                state.terminated.message = data[:share].decode(errors="ignore")


def build_pod_status(
    pod: pod_pb2.Pod,
    rec: PodRecord,
    host_ip: str,
    previous: pod_pb2.PodStatus,
    now: float,
    container_id_prefix: str = "process://",
    probes: Mapping[str, tuple[bool, bool]] | None = None,
) -> pod_pb2.PodStatus:
    """The PodStatus the kubelet reports for `pod`, given its runtime record.

    `probes` holds (started, ready) from the probers for the running containers that have
    probes; any other running container is started and ready, as in Kubernetes.
    Conditions the kubelet does not own (PodScheduled) are kept from `previous`; transition
    times of ours are kept while their status does not change.

    Every status write of a hollow kubelet builds one of these, so each message field is
    written once in place and read back never (a protobuf access costs as much as a few
    lines of Python).
    """
    spec = pod.spec
    status = pod_pb2.PodStatus()
    status.phase = phase = pod_phase(pod, rec)
    if rec.final_reason:
        status.reason = rec.final_reason
    if rec.final_message:
        status.message = rec.final_message
    status.hostIP = host_ip
    # The process runtime (and a hostNetwork pod) shares the node's network; a CRI sandbox
    # has its own IPs.
    pod_ips = rec.pod_ips or ([host_ip] if host_ip else [])
    if pod_ips:
        status.podIP = pod_ips[0]
    if host_ip:
        status.hostIPs.add(ip=host_ip)
    for ip in pod_ips:
        status.podIPs.add(ip=ip)
    status.startTime.seconds = math.floor(rec.start_time)
    # As kube's kubelet (generateAPIPodStatus): the pod's QoS class from its resources.
    status.qosClass = previous.qosClass or qos_class(pod)
    is_initialized = initialized(pod, rec)
    incomplete: list[str] = []
    for container in spec.initContainers:
        crec = rec.init_containers.get(container.name) or ContainerRecord(container.name)
        _fill_status(status.initContainerStatuses.add(), container, crec, container_id_prefix)
        if not _succeeded(crec):
            incomplete.append(container.name)
    not_ready: list[str] = []
    statuses = status.containerStatuses
    for container in spec.containers:
        name = container.name
        crec = rec.containers.get(name) or ContainerRecord(
            name,
            waiting_reason="ContainerCreating" if is_initialized else "PodInitializing",
        )
        cs = statuses.add()
        cs.name = name
        image = crec.image or container.image  # until a changed image's restart: the old one
        cs.image = image
        if _created(crec):
            cs.imageID = crec.image_ref or image_id(container, image)
        if crec.restart_count:
            cs.restartCount = crec.restart_count
        running = crec.state == RUNNING
        started, ready = probes.get(name, (running, running)) if probes else (running, running)
        container_ready = running and started and ready
        cs.started = running and started
        cs.ready = container_ready
        if crec.container_id:
            cs.containerID = f"{container_id_prefix}{crec.container_id}"
        elif crec.pid:
            cs.containerID = f"{container_id_prefix}{crec.pid}"
        _fill_state(cs.state, crec)
        if crec.last is not None:
            _fill_terminated(cs.lastState, crec.last)
        if not container_ready:
            not_ready.append(name)
    for ec in spec.ephemeralContainers:
        crec = rec.ephemeral_containers.get(ec.name) or ContainerRecord(ec.name)
        cs = status.ephemeralContainerStatuses.add()
        _fill_status(cs, as_container(pod, ec), crec, container_id_prefix)
        cs.ready = False  # never ready: an ephemeral container serves nothing
    if _has_messages(rec):
        _cap_messages(pod, status)
    conditions = status.conditions
    before: dict[str, pod_pb2.PodCondition] = {}
    for cond in previous.conditions:
        if cond.type in OWN_CONDITIONS:
            before.setdefault(cond.type, cond)
        else:
            conditions.append(cond)
    terminal = phase in ("Succeeded", "Failed")
    if terminal:
        reason, message = "PodCompleted", ""
    else:
        reason = "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(not_ready)}]"
    ready = not not_ready and not terminal
    now_seconds = math.floor(now)
    _add_condition(
        conditions,
        "Initialized",
        is_initialized,
        before,
        now_seconds,
        "ContainersNotInitialized",
        f"containers with incomplete status: [{' '.join(incomplete)}]",
    )
    _add_condition(conditions, "ContainersReady", ready, before, now_seconds, reason, message)
    _add_condition(conditions, "Ready", ready, before, now_seconds, reason, message)
    return status


def _has_messages(rec: PodRecord) -> bool:
    """Whether any container's (last) termination has a message to cap."""
    for records in (rec.init_containers, rec.containers):
        for crec in records.values():
            for t in (crec.terminated, crec.last):
                if t is not None and t.message:
                    return True
    return False


def _add_condition(
    conditions: Any,
    type_: str,
    ok: bool,
    before: Mapping[str, pod_pb2.PodCondition],
    now_seconds: int,
    reason: str,
    message: str,
) -> None:
    """Append our condition `type_` (True if `ok`, else False with `reason` and `message`), its
    lastTransitionTime kept from `before`'s condition of that type while its status does not
    change, else now."""
    value = "True" if ok else "False"
    cond = conditions.add(type=type_, status=value)
    if not ok:
        cond.reason, cond.message = reason, message
    old = before.get(type_)
    if old is not None and old.status == value and old.HasField("lastTransitionTime"):
        cond.lastTransitionTime.CopyFrom(old.lastTransitionTime)
    else:
        cond.lastTransitionTime.seconds = now_seconds
