"""The `cri` runtime: pods are pod sandboxes and containers of a CRI runtime (containerd).

Selected by the kubelet's `--container-runtime-endpoint unix:///path/to/containerd.sock`, as
kube's. The pod lifecycle decisions are kubelet/kuberuntime.py's (`KubeRuntime.sync_pod`, kube's
computePodActions: sandbox, init containers in order, start/restart by restartPolicy, a changed
image restarts its container, crash-loop back-off, records persisted in state.json), shared
with the process runtime; this one supplies how a pod and its containers are created, started,
stopped and observed, over the CRI gRPC API (tinykube/cri/v1, package runtime.v1):

- the sandbox (`_prepare_pod`): RunPodSandbox with the pod's own network namespace (or the
  node's for `hostNetwork: true`), its hostPorts as port mappings, a cgroup parent per pod under
  the kubelet's cgroup root; the pod's IPs come from PodSandboxStatus. A sandbox found not ready
  (killed, or lost with its runtime) is recreated with attempt + 1 and its containers killed
  ("SandboxChanged"), as kube does.
- images (`_ensure_image`): imagePullPolicy Always / IfNotPresent / Never (kube's default: Always
  for `:latest` or no tag), PullImage, Events Pulling / Pulled / Failed worded as the kubelet's,
  ErrImagePull and then ImagePullBackOff with the crash-loop back-off's timings (10 s doubling to
  300 s); ErrImageNeverPull for a missing image with policy Never.
- containers: CreateContainer (command/args expanded, env, resources as
  LinuxContainerResources: cpu shares from the request, CFS quota from the limit, memory limit,
  oom_score_adj by QoS class) and StartContainer; logs at the path the process runtime uses
  (`<root>/pods/<uid>/logs/<container>/<instance>.log`, CRI format, written by the runtime), so
  `kubectl logs` reads them alike; ContainerStatus for exits, its reason kept (`OOMKilled`).
- stopping: StopContainer with the grace period, then StopPodSandbox and RemovePodSandbox.

Probes: exec ones run in the container through ExecSync, httpGet/tcpSocket/grpc ones reach
the pod's IP; so do lifecycle hooks (kubelet/lifecycle.py). securityContext becomes the CRI
LinuxContainerSecurityContext (kubelet/security.py); imagePullSecrets become PullImage's
AuthConfig (kubelet/pullsecrets.py); seccompProfile and appArmorProfile become the
SecurityProfiles of the sandbox and the containers (kube's getSeccompProfile,
getAppArmorProfile; Localhost seccomp profiles under <root-dir>/seccomp). A container that
asks for AppArmor on a host without it waits with CreateContainerConfigError (kube rejects
such a pod at admission). Not yet here: hostIPC/hostPID.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from kubelet.envvars import expand
from kubelet.kuberuntime import KubeRuntime
from kubelet.lifecycle import ExecHook, ExecResult
from kubelet.metrics import ContainerUsage
from kubelet.prober import MAX_OUTPUT, Outcome, ProbeTarget
from kubelet.pullsecrets import Credential, credentials, matching
from kubelet.runtime import (
    RUNNING,
    TERMINATED,
    WAITING,
    ContainerRecord,
    PodRecord,
    Termination,
    definition_changed_message,
    ephemeral_target,
    qos_class,
)
from kubelet.security import (
    APPARMOR_DISABLED,
    Profile,
    apparmor_enabled,
    apparmor_profile,
    apparmor_required,
    effective,
    seccomp_profile,
    verify_run_as_non_root,
)
from tinykube.clock import Clock
from tinykube.cri.v1 import cri_pb2 as cri
from tinykube.cri.v1 import cri_pb2_grpc as cri_grpc
from tinykube.errors import InternalError, NotFoundError, TinykubeError
from tinykube.quantity import milli_value, value
from tinykube.v1 import node_pb2, pod_pb2, secret_pb2

log = logging.getLogger(__name__)

# kube's pkg/kubelet/cm: cpu shares per CPU, the minimum shares, the CFS period and minimum quota.
SHARES_PER_CPU = 1024
MIN_SHARES = 2
QUOTA_PERIOD = 100_000
MIN_QUOTA = 1000
# kube's pkg/kubelet/qos: oom_score_adj by QoS class.
GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000
CALL_TIMEOUT = 120.0
# kube's QoS cgroups under the kubelet's cgroup root (Guaranteed pods sit at the root).
QOS_CGROUPS = {"Burstable": "/burstable", "BestEffort": "/besteffort"}
# kube's nodeStatusMaxImages.
NODE_STATUS_MAX_IMAGES = 50
# kube's PLEG relist period: how old the shared snapshot of sandbox and container states may be.
RELIST_SECONDS = 1.0


def default_pull_policy(image: str) -> str:
    """kube's defaulting of imagePullPolicy: Always for the `latest` tag or no tag (and no
    digest), else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def pull_policy(container: pod_pb2.Container) -> str:
    return container.imagePullPolicy or default_pull_policy(container.image)


def _quantity(resources: Any, name: str) -> str:
    return str(resources[name]) if name in resources else ""


def linux_resources(
    pod: pod_pb2.Pod, container: pod_pb2.Container, machine_memory: int
) -> cri.LinuxContainerResources:
    """The container's requests and limits as kube's kuberuntime writes them for Linux."""
    res = cri.LinuxContainerResources()
    req, lim = container.resources.requests, container.resources.limits
    cpu_request = milli_value(_quantity(req, "cpu")) if "cpu" in req else 0
    if not cpu_request and "cpu" in lim:
        cpu_request = milli_value(_quantity(lim, "cpu"))
    res.cpu_shares = max(MIN_SHARES, cpu_request * SHARES_PER_CPU // 1000)
    if "cpu" in lim:
        res.cpu_period = QUOTA_PERIOD
        res.cpu_quota = max(MIN_QUOTA, milli_value(_quantity(lim, "cpu")) * QUOTA_PERIOD // 1000)
    if "memory" in lim:
        res.memory_limit_in_bytes = value(_quantity(lim, "memory"))
    qos = qos_class(pod)
    if qos == "Guaranteed":
        res.oom_score_adj = GUARANTEED_OOM_SCORE_ADJ
    elif qos == "BestEffort":
        res.oom_score_adj = BEST_EFFORT_OOM_SCORE_ADJ
    else:
        memory_request = value(_quantity(req, "memory")) if "memory" in req else 0
        adj = 1000 - (1000 * memory_request) // max(1, machine_memory)
        res.oom_score_adj = 999 if adj >= 1000 else max(2, adj)
    return res


def _labels(pod: pod_pb2.Pod) -> dict[str, str]:
    return {
        "io.kubernetes.pod.name": pod.metadata.name,
        "io.kubernetes.pod.namespace": pod.metadata.namespace,
        "io.kubernetes.pod.uid": pod.metadata.uid,
    }


@dataclass(frozen=True)
class PodDNS:
    """kube's kubelet DNS configurer: the resolv.conf (servers, searches, options) the runtime
    writes into a pod's sandbox. dnsPolicy ClusterFirst (the default): the cluster DNS server,
    searches `<ns>.svc.<domain> svc.<domain> <domain>` then the host's, `ndots:5`; a hostNetwork
    pod's ClusterFirst, and Default: the host's resolv.conf; ClusterFirstWithHostNet: cluster
    DNS even with hostNetwork; None: nothing. The pod's dnsConfig is added to that (all of it
    with None). Without a cluster DNS server ClusterFirst falls back to Default, as kube's
    kubelet does."""

    cluster_dns: str = ""
    domain: str = "cluster.local"
    resolv_conf: str = ""

    def host(self) -> tuple[list[str], list[str], list[str]]:
        servers: list[str] = []
        searches: list[str] = []
        options: list[str] = []
        if not self.resolv_conf:
            return servers, searches, options
        try:
            text = Path(self.resolv_conf).read_text()
        except OSError:
            return servers, searches, options
        for line in text.splitlines():
            parts = line.split("#", 1)[0].split()
            if not parts:
                continue
            if parts[0] == "nameserver" and len(parts) > 1:
                servers.append(parts[1])
            elif parts[0] in ("search", "domain"):
                searches = parts[1:]
            elif parts[0] == "options":
                options += parts[1:]
        return servers, searches, options

    def config(self, pod: pod_pb2.Pod) -> cri.DNSConfig:
        servers, searches, options = self._base(pod)
        if pod.spec.HasField("dnsConfig"):
            # kube's appendDNSConfig: nameservers and searches appended (duplicates dropped),
            # options merged by name, the pod's value winning
            extra = pod.spec.dnsConfig
            servers = list(dict.fromkeys([*servers, *extra.nameservers]))
            searches = list(dict.fromkeys([*searches, *extra.searches]))
            options = _merge_options(options, extra.options)
        # kube's limits (formDNSConfigFitsLimits): 3 nameservers, 32 search domains of 2048
        # characters with their spaces
        searches = searches[:MAX_DNS_SEARCH_PATHS]
        while searches and len(" ".join(searches)) > MAX_DNS_SEARCH_LIST_CHARS:
            searches.pop()
        return cri.DNSConfig(
            servers=servers[:MAX_DNS_NAMESERVERS], searches=searches, options=options
        )

    def _base(self, pod: pod_pb2.Pod) -> tuple[list[str], list[str], list[str]]:
        """What dnsPolicy gives, before the pod's dnsConfig."""
        policy = pod.spec.dnsPolicy or "ClusterFirst"
        if policy == "None":
            return [], [], []
        servers, searches, options = self.host()
        cluster = self.cluster_dns and (
            policy == "ClusterFirstWithHostNet"
            or (policy == "ClusterFirst" and not pod.spec.hostNetwork)
        )
        if not cluster:
            return servers, searches, options
        d = self.domain
        ns = pod.metadata.namespace or "default"
        own = [f"{ns}.svc.{d}", f"svc.{d}", d]
        return [self.cluster_dns], own + [s for s in searches if s not in own], ["ndots:5"]


MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048


def _merge_options(base: list[str], extra: Iterable[pod_pb2.PodDNSConfigOption]) -> list[str]:
    """resolv.conf options (`name` or `name:value`): the pod's replace the same name's."""
    merged: dict[str, str] = {}
    for text in base:
        name = text.split(":", 1)[0]
        merged[name] = text
    for option in extra:
        merged[option.name] = (
            f"{option.name}:{option.value}" if option.HasField("value") else option.name
        )
    return list(merged.values())


def sandbox_config(
    pod: pod_pb2.Pod,
    attempt: int,
    log_dir: Path,
    cgroup_parent: str,
    dns: PodDNS | None = None,
    *,
    seccomp_root: Path = Path("/var/lib/kubelet/seccomp"),
    seccomp_default: bool = False,
) -> cri.PodSandboxConfig:
    """kube's generatePodSandboxConfig, for what tinykube supports."""
    host_network = pod.spec.hostNetwork
    config = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(
            name=pod.metadata.name,
            uid=pod.metadata.uid,
            namespace=pod.metadata.namespace,
            attempt=attempt,
        ),
        hostname="" if host_network else (pod.spec.hostname or pod.metadata.name),
        log_directory=str(log_dir),
        labels=_labels(pod),
        annotations=dict(pod.metadata.annotations),
    )
    for container in pod.spec.containers:
        for port in container.ports:
            if not port.hostPort:
                continue
            config.port_mappings.add(
                protocol=cri.Protocol.Value(port.protocol or "TCP"),
                container_port=port.containerPort,
                host_port=port.hostPort,
                host_ip=port.hostIP,
            )
    if dns is not None:
        config.dns_config.CopyFrom(dns.config(pod))
    linux = config.linux
    linux.cgroup_parent = cgroup_parent
    ns = linux.security_context.namespace_options
    ns.network = cri.NODE if host_network else cri.POD
    ns.pid = cri.CONTAINER
    ns.ipc = cri.POD
    # kube's generatePodSandboxLinuxConfig: the pod's user, groups, and privileged when any
    # container is (containerd refuses a privileged container in an unprivileged sandbox).
    psc = pod.spec.securityContext
    sandbox_sc = linux.security_context
    if psc.HasField("runAsUser"):
        sandbox_sc.run_as_user.value = psc.runAsUser
    if psc.HasField("runAsGroup"):
        sandbox_sc.run_as_group.value = psc.runAsGroup
    groups = list(psc.supplementalGroups)
    if psc.HasField("fsGroup") and psc.fsGroup not in groups:
        groups.append(psc.fsGroup)
    sandbox_sc.supplemental_groups.extend(groups)
    sandbox_sc.privileged = any(
        c.securityContext.privileged for c in (*pod.spec.initContainers, *pod.spec.containers)
    )
    # kube: the sandbox gets the pod's seccomp profile.
    _set_profile(
        sandbox_sc.seccomp,
        seccomp_profile(pod, None, seccomp_root, default_runtime=seccomp_default),
    )
    return config


def _set_profile(target: cri.SecurityProfile, profile: Profile) -> None:
    kind, ref = profile
    target.profile_type = cri.SecurityProfile.ProfileType.Value(kind)
    target.localhost_ref = ref


def security_context(
    pod: pod_pb2.Pod,
    container: pod_pb2.Container,
    sc: cri.LinuxContainerSecurityContext,
    *,
    seccomp_root: Path = Path("/var/lib/kubelet/seccomp"),
    seccomp_default: bool = False,
) -> None:
    """kube's convertToRuntimeSecurityContext of the effective securityContext
    (kubelet/security.py): user, group, the pod's groups, privileged, a read-only root,
    no_new_privs for allowPrivilegeEscalation: false, capabilities as written; the seccomp
    profile always (Unconfined when none is set, as kube), the AppArmor one when set."""
    _set_profile(
        sc.seccomp,
        seccomp_profile(pod, container, seccomp_root, default_runtime=seccomp_default),
    )
    apparmor = apparmor_profile(pod, container)
    if apparmor is not None:
        _set_profile(sc.apparmor, apparmor)
    eff = effective(pod, container)
    if eff.run_as_user is not None:
        sc.run_as_user.value = eff.run_as_user
    if eff.run_as_group is not None:
        sc.run_as_group.value = eff.run_as_group
    sc.supplemental_groups.extend(eff.groups)
    sc.privileged = eff.privileged
    sc.readonly_rootfs = eff.read_only_root
    sc.no_new_privs = not eff.allow_privilege_escalation
    if eff.add_capabilities or eff.drop_capabilities:
        sc.capabilities.add_capabilities.extend(eff.add_capabilities)
        sc.capabilities.drop_capabilities.extend(eff.drop_capabilities)


def container_config(
    pod: pod_pb2.Pod,
    container: pod_pb2.Container,
    image_ref: str,
    attempt: int,
    env: dict[str, str],
    machine_memory: int,
    *,
    seccomp_root: Path = Path("/var/lib/kubelet/seccomp"),
    seccomp_default: bool = False,
) -> cri.ContainerConfig:
    """kube's generateContainerConfig, for what tinykube supports: $(VAR) in command and args
    expanded from the container's environment."""
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=container.name, attempt=attempt),
        image=cri.ImageSpec(image=image_ref, user_specified_image=container.image),
        command=[expand(a, env) for a in container.command],
        args=[expand(a, env) for a in container.args],
        working_dir=container.workingDir,
        envs=[cri.KeyValue(key=k, value=v) for k, v in env.items()],
        labels={**_labels(pod), "io.kubernetes.container.name": container.name},
        annotations={
            "io.kubernetes.container.restartCount": str(attempt),
            "io.kubernetes.container.image": container.image,
        },
        log_path=f"{container.name}/{attempt}.log",
        stdin=getattr(container, "stdin", False),
        stdin_once=getattr(container, "stdinOnce", False),
        tty=getattr(container, "tty", False),
    )
    config.linux.resources.CopyFrom(linux_resources(pod, container, machine_memory))
    sc = config.linux.security_context
    security_context(pod, container, sc, seccomp_root=seccomp_root, seccomp_default=seccomp_default)
    ns = sc.namespace_options
    ns.network = cri.NODE if pod.spec.hostNetwork else cri.POD
    ns.pid = cri.CONTAINER
    ns.ipc = cri.POD
    return config


def operation_type(method: str) -> str:
    """kube's operation_type label of a CRI method: `/runtime.v1.RuntimeService/RunPodSandbox`
    is `run_podsandbox`, `.../ImageStatus` is `image_status`."""
    name = method.rsplit("/", 1)[-1]
    snake = "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name).lstrip("_")
    return snake.replace("pod_sandbox", "podsandbox")


class TimedStub:
    """A CRI service stub whose calls give `observe` their operation type and seconds, failed
    calls included (kube's kubelet_runtime_operations_duration_seconds). A coroutine around
    each call: a grpc.aio client interceptor, tried first, adds a task and a second call object
    per call, and its frames were 2.5-5 % of a kubelet's py-spy samples in a 100-pod start."""

    def __init__(self, stub: Any, observe: Callable[[str, float], None]) -> None:
        self._stub = stub
        self._observe = observe

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)
        kind = operation_type(name)
        observe = self._observe

        async def call(request: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return await method(request, **kwargs)
            finally:
                observe(kind, time.monotonic() - started)

        setattr(self, name, call)  # made once per method
        return call


def _seconds(nanos: int) -> float:
    return nanos / 1e9 if nanos else 0.0


def _error(exc: grpc.aio.AioRpcError) -> str:
    return exc.details() or str(exc.code())


class CRIRuntime(KubeRuntime):
    container_id_prefix = "containerd://"

    def __init__(
        self,
        root_dir: Path,
        endpoint: str,
        *,
        clock: Clock | None = None,
        backoff_initial: float = 10.0,
        backoff_max: float = 300.0,
        poll_interval: float = 1.0,
        node_ip: str = "127.0.0.1",
        cgroup_root: str = "/tinykube",
        machine_memory: int = 4 << 30,
        dns: PodDNS | None = None,
        seccomp_default: bool = False,
        on_operation: Callable[[str, float], None] | None = None,
    ) -> None:
        self.dns = dns or PodDNS()
        # Each CRI call's operation type and seconds (the kubelet's metrics).
        self.on_operation = on_operation
        # kube's seccompProfileRoot (<root-dir>/seccomp) and --seccomp-default.
        self.seccomp_root = Path(root_dir).absolute() / "seccomp"
        self.seccomp_default = seccomp_default
        self.apparmor = apparmor_enabled()
        super().__init__(
            root_dir,
            clock=clock,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            poll_interval=poll_interval,
            node_ip=node_ip,
        )
        self.endpoint = endpoint
        self.cgroup_root = cgroup_root.rstrip("/") or ""
        self.machine_memory = machine_memory
        self._channel: grpc.aio.Channel | None = None
        self._runtime: cri_grpc.RuntimeServiceAsyncStub | None = None
        self._images: cri_grpc.ImageServiceAsyncStub | None = None
        # (uid, container) -> ids of exited instances still in the runtime, oldest first: the
        # last one is kept (as kube keeps one dead container per container), older ones removed.
        self._dead: dict[tuple[str, str], list[str]] = {}
        # uid -> wall time before which a failed sandbox creation is not tried again.
        self._sandbox_retry: dict[str, float] = {}
        # uid -> the config its sandbox was created with (CreateContainer passes it again) and
        # the next attempt number.
        self._sandbox_configs: dict[str, cri.PodSandboxConfig] = {}
        self._attempts: dict[str, int] = {}
        # Pods told (one Event each) that they wait for the pod network.
        self._network_waiting: set[str] = set()
        self._network_ready_until = 0.0
        # The runtime Status call out now, which every pod that asks meanwhile waits for.
        self._network_check: asyncio.Future[str] | None = None
        # image id -> the imageID its containers report (`_remember_ref`).
        self._image_refs: dict[str, str] = {}
        # kube's PLEG relist: (taken at, sandbox id -> state, container id -> state), shared
        # by the pod workers, so a steady pod costs no RPC of its own per poll.
        self._relist: tuple[float, dict[str, int], dict[str, int]] | None = None
        self._relisting: asyncio.Future[tuple[dict[str, int], dict[str, int]]] | None = None

    # ---- the connection ----

    def _stubs(self) -> tuple[cri_grpc.RuntimeServiceAsyncStub, cri_grpc.ImageServiceAsyncStub]:
        if self._runtime is None or self._images is None:
            target = self.endpoint
            if target.startswith("unix:///"):
                target = "unix:" + target[len("unix://") :]
            self._channel = grpc.aio.insecure_channel(target)
            runtime: Any = cri_grpc.RuntimeServiceStub(self._channel)
            images: Any = cri_grpc.ImageServiceStub(self._channel)
            if self.on_operation is not None:
                runtime = TimedStub(runtime, self.on_operation)
                images = TimedStub(images, self.on_operation)
            self._runtime, self._images = runtime, images
        return self._runtime, self._images

    @property
    def rt(self) -> cri_grpc.RuntimeServiceAsyncStub:
        return self._stubs()[0]

    @property
    def images(self) -> cri_grpc.ImageServiceAsyncStub:
        return self._stubs()[1]

    async def version(self) -> cri.VersionResponse:
        resp: cri.VersionResponse = await self.rt.Version(
            cri.VersionRequest(version="v1"), timeout=CALL_TIMEOUT
        )
        if resp.runtime_name:
            self.container_id_prefix = f"{resp.runtime_name}://"
        return resp

    async def list_images(self) -> list[cri.Image]:
        resp = await self.images.ListImages(cri.ListImagesRequest(), timeout=CALL_TIMEOUT)
        return list(resp.images)

    async def container_stats(self) -> list[ContainerUsage]:
        """Every container's cumulative CPU time and memory working set (ListContainerStats),
        with its pod's namespace and name."""
        resp = await self.rt.ListContainerStats(
            cri.ListContainerStatsRequest(), timeout=CALL_TIMEOUT
        )
        out = []
        for st in resp.stats:
            labels = st.attributes.labels
            out.append(
                ContainerUsage(
                    namespace=labels.get("io.kubernetes.pod.namespace", ""),
                    pod=labels.get("io.kubernetes.pod.name", ""),
                    container=st.attributes.metadata.name,
                    cpu_seconds=st.cpu.usage_core_nano_seconds.value / 1e9,
                    memory_working_set_bytes=st.memory.working_set_bytes.value,
                    timestamp=max(st.cpu.timestamp, st.memory.timestamp) / 1e9,
                    uid=labels.get("io.kubernetes.pod.uid", ""),
                )
            )
        return out

    async def node_images(self) -> list[node_pb2.ContainerImage]:
        """status.images as the kubelet reports them: every image's digests and tags, largest
        first, at most NODE_STATUS_MAX_IMAGES."""
        images = sorted(await self.list_images(), key=lambda i: i.size, reverse=True)
        out = []
        for image in images[:NODE_STATUS_MAX_IMAGES]:
            names = [*image.repo_digests, *image.repo_tags]
            if names:
                out.append(node_pb2.ContainerImage(names=names, sizeBytes=image.size))
        return out

    async def exec_probe(self, target: ProbeTarget, probe: pod_pb2.Probe) -> Outcome:
        """An exec probe, run in the container by the runtime (ExecSync), with the probe's
        timeout; the command's output is the message."""
        static = {e.name: e.value for e in target.container.env}
        argv = [expand(arg, static) for arg in probe.exec.command]
        rec = self._pods.get(target.pod.metadata.uid)
        crec = rec.containers.get(target.container.name) if rec is not None else None
        if crec is None or not crec.container_id:
            return Outcome(None, "container is not running")
        timeout = probe.timeoutSeconds or 1
        try:
            resp = await self.rt.ExecSync(
                cri.ExecSyncRequest(container_id=crec.container_id, cmd=argv, timeout=timeout),
                timeout=timeout + CALL_TIMEOUT,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Outcome(False, f'command "{" ".join(argv)}" timed out')
            return Outcome(False, _error(exc))
        text = (resp.stdout + resp.stderr)[:MAX_OUTPUT].decode(errors="replace")
        return Outcome(resp.exit_code == 0, text)

    def _exec_hook(
        self, pod: pod_pb2.Pod, container: pod_pb2.Container, crec: ContainerRecord
    ) -> ExecHook:
        """An exec hook runs in the container through ExecSync, with no timeout of its own
        (kube's RunInContainer with timeout 0); the caller bounds a preStop hook."""
        container_id = crec.container_id

        async def run(argv: list[str]) -> ExecResult:
            try:
                resp = await self.rt.ExecSync(
                    cri.ExecSyncRequest(container_id=container_id, cmd=argv, timeout=0)
                )
            except grpc.aio.AioRpcError as exc:
                return ExecResult(-1, "", "", _error(exc))
            return ExecResult(
                resp.exit_code,
                resp.stdout[:MAX_OUTPUT].decode(errors="replace"),
                resp.stderr[:MAX_OUTPUT].decode(errors="replace"),
            )

        return run

    def pod_ip(self, pod: pod_pb2.Pod) -> str:
        """Where probes reach the pod: its sandbox's IP, or the node's (hostNetwork)."""
        rec = self._pods.get(pod.metadata.uid)
        return rec.pod_ips[0] if rec is not None and rec.pod_ips else self.node_ip

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._runtime = self._images = None

    def _adopted(self, crec: ContainerRecord) -> bool:
        """Whether the runtime still runs a container recorded as running before this kubelet
        started (asked once per container at start, blocking: the pod workers are not running
        yet). One that is gone (the runtime's pods were removed, the node rebooted) starts
        again at once, as after a reboot; one that exited meanwhile is observed as an exit."""
        if not crec.container_id:
            return False
        target = self.endpoint
        if target.startswith("unix:///"):
            target = "unix:" + target[len("unix://") :]
        try:
            with grpc.insecure_channel(target) as channel:
                cri_grpc.RuntimeServiceStub(channel).ContainerStatus(
                    cri.ContainerStatusRequest(container_id=crec.container_id), timeout=30
                )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            if code == grpc.StatusCode.NOT_FOUND:
                return False
            log.warning("container %s: %s", crec.container_id[:12], exc)
        return True

    def _pod_cgroup(self, uid: str, qos: str) -> str:
        """The pod's cgroup, by QoS class as kube lays them out under its cgroup root:
        Guaranteed pods directly, Burstable and BestEffort ones under their class's cgroup."""
        return f"{self.cgroup_root}{QOS_CGROUPS.get(qos, '')}/pod{uid}"

    # ---- the sandbox ----

    async def _prepare_pod(self, pod: pod_pb2.Pod, rec: PodRecord) -> bool:
        uid = rec.uid
        if rec.sandbox_id:
            try:
                sandbox_states = (await self._states())[0]
            except grpc.aio.AioRpcError:
                sandbox_states = {}
            if sandbox_states.get(rec.sandbox_id) == cri.SANDBOX_READY:
                return True  # ready at the last relist: its IPs are the ones recorded
            try:
                status = (
                    await self.rt.PodSandboxStatus(
                        cri.PodSandboxStatusRequest(pod_sandbox_id=rec.sandbox_id),
                        timeout=CALL_TIMEOUT,
                    )
                ).status
                ready = status.state == cri.SANDBOX_READY
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                ready = False
            if ready:
                if not pod.spec.hostNetwork and status.network.ip:
                    ips = [status.network.ip, *(a.ip for a in status.network.additional_ips)]
                    if ips != rec.pod_ips:
                        rec.pod_ips = ips
                        self._save(rec)
                return True
            # kube: the sandbox changed; kill what runs in it and create it again.
            rec.events.append(
                (
                    "Normal",
                    "SandboxChanged",
                    "Pod sandbox changed, it will be killed and re-created.",
                )
            )
            await self._stop_containers(rec, 0)
            for crec in (*rec.containers.values(), *rec.init_containers.values()):
                self._lost(crec)
            await self._remove_sandbox(rec.sandbox_id)
            rec.sandbox_id = ""
        now = self._now()
        if now < self._sandbox_retry.get(uid, 0.0):
            return False
        if not pod.spec.hostNetwork:
            why = await self._network_not_ready()
            if why:
                # kube: pods needing the pod network wait for the runtime's NetworkReady.
                if uid not in self._network_waiting:
                    self._network_waiting.add(uid)
                    rec.events.append(
                        ("Warning", "NetworkNotReady", f"network is not ready: {why}")
                    )
                self._sandbox_retry[uid] = now + 1.0
                return False
            self._network_waiting.discard(uid)
        attempt = self._attempts.get(uid, 0)
        config = sandbox_config(
            pod,
            attempt,
            self._log_dir(uid),
            self._pod_cgroup(uid, qos_class(pod)),
            self.dns,
            seccomp_root=self.seccomp_root,
            seccomp_default=self.seccomp_default,
        )
        self._log_dir(uid).mkdir(parents=True, exist_ok=True)
        started = self._now()
        try:
            resp = await self.rt.RunPodSandbox(
                cri.RunPodSandboxRequest(config=config), timeout=CALL_TIMEOUT
            )
        except grpc.aio.AioRpcError as exc:
            rec.timings.append(("sandbox", started, self._now()))
            message = f"Failed to create pod sandbox: {_error(exc)}"
            log.warning("pod %s/%s: %s", rec.namespace, rec.name, message)
            rec.events.append(("Warning", "FailedCreatePodSandBox", message))
            self._sandbox_retry[uid] = now + self.backoff_initial
            # The runtime may keep the failed sandbox (and its name): remove what is not
            # ready, and try the next attempt number, as kube does.
            self._attempts[uid] = attempt + 1
            await self._remove_not_ready(uid)
            return False
        created = self._now()
        rec.timings.append(("sandbox", started, created))
        self._sandbox_retry.pop(uid, None)
        rec.sandbox_id = resp.pod_sandbox_id
        self._attempts[uid] = attempt + 1
        self._sandbox_configs[uid] = config
        status = (
            await self.rt.PodSandboxStatus(
                cri.PodSandboxStatusRequest(pod_sandbox_id=rec.sandbox_id), timeout=CALL_TIMEOUT
            )
        ).status
        rec.timings.append(("sandbox_status", created, self._now()))
        if pod.spec.hostNetwork or not status.network.ip:
            rec.pod_ips = []
        else:
            rec.pod_ips = [status.network.ip, *(a.ip for a in status.network.additional_ips)]
        self._save(rec)
        log.info(
            "pod %s/%s: sandbox %s, IPs %s",
            rec.namespace,
            rec.name,
            rec.sandbox_id[:12],
            rec.pod_ips or "the node's",
        )
        return True

    async def _states(self) -> tuple[dict[str, int], dict[str, int]]:
        """Every sandbox's and container's state, from one ListPodSandbox and one
        ListContainers at most every RELIST_SECONDS (kube's PLEG relist), shared by all pod
        workers: per-pod status calls every second would load the runtime in proportion to
        the pods, slowing the starts of the others. What was created after the snapshot is
        not in it: callers then ask the runtime about that one."""
        if self._relist is not None and time.monotonic() - self._relist[0] < RELIST_SECONDS:
            return self._relist[1], self._relist[2]
        if self._relisting is None or self._relisting.done():
            self._relisting = asyncio.ensure_future(self._list_states())
        return await asyncio.shield(self._relisting)

    async def _list_states(self) -> tuple[dict[str, int], dict[str, int]]:
        taken = time.monotonic()
        sandboxes = await self.rt.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=CALL_TIMEOUT)
        containers = await self.rt.ListContainers(cri.ListContainersRequest(), timeout=CALL_TIMEOUT)
        states = (
            {s.id: int(s.state) for s in sandboxes.items},
            {c.id: int(c.state) for c in containers.containers},
        )
        self._relist = (taken, *states)
        return states

    async def _network_not_ready(self) -> str:
        """Why the runtime's pod network is not ready (its NetworkReady condition), or "".
        A ready network is believed for RELIST_SECONDS (kube's kubelet reads the runtime's
        status periodically, not per pod), and the pods that ask while a Status call is out
        share its answer, so a burst of new pods asks once (it asked once per pod: 50 pods
        landing together made 50 Status calls, queued in the runtime with their sandboxes)."""
        if time.monotonic() < self._network_ready_until:
            return ""
        if self._network_check is None or self._network_check.done():
            self._network_check = asyncio.ensure_future(self._check_network())
        return await asyncio.shield(self._network_check)

    async def _check_network(self) -> str:
        resp = await self.rt.Status(cri.StatusRequest(), timeout=CALL_TIMEOUT)
        for cond in resp.status.conditions:
            if cond.type == "NetworkReady" and not cond.status:
                return (
                    "container runtime network not ready: NetworkReady=false "
                    f"reason:{cond.reason} message:{cond.message}"
                )
        self._network_ready_until = time.monotonic() + RELIST_SECONDS
        return ""

    async def _remove_not_ready(self, uid: str) -> None:
        req = cri.ListPodSandboxRequest(
            filter=cri.PodSandboxFilter(
                label_selector={"io.kubernetes.pod.uid": uid},
                state=cri.PodSandboxStateValue(state=cri.SANDBOX_NOTREADY),
            )
        )
        try:
            items = (await self.rt.ListPodSandbox(req, timeout=CALL_TIMEOUT)).items
        except grpc.aio.AioRpcError as exc:
            log.warning("pod %s: listing its sandboxes: %s", uid, _error(exc))
            return
        for sandbox in items:
            await self._remove_sandbox(sandbox.id)

    def _log_dir(self, uid: str) -> Path:
        return self._pod_dir(uid) / "logs"

    def _lost(self, crec: ContainerRecord) -> None:
        """A running container whose sandbox went away: it exited, to start again."""
        if crec.state == RUNNING:
            crec.state = TERMINATED
            crec.terminated = Termination(
                exit_code=137,
                reason="Error",
                started_at=crec.started_at,
                finished_at=self._now(),
                container_id=self.container_id_prefix + crec.container_id,
            )

    async def _remove_sandbox(self, sandbox_id: str) -> None:
        try:
            await self.rt.StopPodSandbox(
                cri.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=CALL_TIMEOUT
            )
            await self.rt.RemovePodSandbox(
                cri.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=CALL_TIMEOUT
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                log.warning("sandbox %s: %s", sandbox_id[:12], _error(exc))

    # ---- images ----

    async def _image_present(self, image: str) -> cri.Image | None:
        resp = await self.images.ImageStatus(
            cri.ImageStatusRequest(image=cri.ImageSpec(image=image)), timeout=CALL_TIMEOUT
        )
        return resp.image if resp.HasField("image") and resp.image.id else None

    async def _ensure_image(
        self, pod: pod_pb2.Pod, rec: PodRecord, container: pod_pb2.Container, crec: ContainerRecord
    ) -> str | None:
        """The image id to create the container from, pulling as imagePullPolicy says; None
        if the image cannot be had (the container then waits, with the kubelet's reason)."""
        image = container.image
        policy = pull_policy(container)
        present = None if policy == "Always" else await self._image_present(image)
        if present is not None:
            rec.events.append(
                ("Normal", "Pulled", f'Container image "{image}" already present on machine')
            )
            self._remember_ref(present)
            return present.id
        if policy == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            self._image_error(rec, crec, "ErrImageNeverPull", message, backoff=False)
            return None
        rec.events.append(("Normal", "Pulling", f'Pulling image "{image}"'))
        started = time.monotonic()
        # kube's puller: each matching credential of the pod's pull secrets in turn (the most
        # specific registry key first) until one pulls; none matching: no credentials.
        auths: list[cri.AuthConfig | None] = [
            cri.AuthConfig(
                username=c.username,
                password=c.password,
                # containerd reads it as a URL and compares its host with the image's.
                server_address="https://" + c.registry.split("/")[0],
            )
            for c in matching(await self._pull_credentials(pod, rec), image)
        ] or [None]
        for auth in auths:
            try:
                resp = await self.images.PullImage(
                    cri.PullImageRequest(image=cri.ImageSpec(image=image), auth=auth),
                    timeout=CALL_TIMEOUT,
                )
                break
            except grpc.aio.AioRpcError as exc:
                error = exc
        else:
            message = f'Failed to pull image "{image}": {_error(error)}'
            rec.events.append(("Warning", "Failed", message))
            self._image_error(rec, crec, "ErrImagePull", message, backoff=True)
            return None
        took = time.monotonic() - started
        pulled = await self._image_present(resp.image_ref or image)
        if pulled is not None:
            self._remember_ref(pulled)
        size = f" Image size: {pulled.size} bytes." if pulled is not None else ""
        rec.events.append(
            (
                "Normal",
                "Pulled",
                f'Successfully pulled image "{image}" in {took:.3f}s '
                f"({took:.3f}s including waiting).{size}",
            )
        )
        return resp.image_ref or image

    async def _pull_credentials(self, pod: pod_pb2.Pod, rec: PodRecord) -> list[Credential]:
        """The registry credentials of the pod's imagePullSecrets (kubelet/pullsecrets.py);
        a Secret that cannot be read is an Event, as kube's getPullSecretsForPod words it,
        and the pull is tried without it."""
        api = self.env_sources.api
        if not pod.spec.imagePullSecrets or api is None:
            return []
        found: list[secret_pb2.Secret] = []
        failed: list[str] = []
        for ref in pod.spec.imagePullSecrets:
            try:
                found.append(await api.secrets.get(ref.name, pod.metadata.namespace))
            except TinykubeError as exc:
                log.info("pod %s/%s: pull secret %s: %s", rec.namespace, rec.name, ref.name, exc)
                failed.append(ref.name)
        if failed:
            rec.events.append(
                (
                    "Warning",
                    "FailedToRetrieveImagePullSecret",
                    f"Unable to retrieve some image pull secrets ({', '.join(failed)}); "
                    "attempting to pull the image may not succeed.",
                )
            )
        return credentials(found)

    def _remember_ref(self, image: cri.Image) -> None:
        """The imageID a container of this image reports, as containerd's ContainerStatus
        gives it (the first repository digest, else the image id), known without asking."""
        self._image_refs[image.id] = image.repo_digests[0] if image.repo_digests else image.id

    def _image_error(
        self, rec: PodRecord, crec: ContainerRecord, reason: str, message: str, *, backoff: bool
    ) -> None:
        crec.state = WAITING
        crec.waiting_reason = reason
        crec.waiting_message = message
        delay = self._backoff(crec) if backoff else self.backoff_initial
        crec.next_start = self._now() + delay
        rec.events.append(("Warning", "Failed", f"Error: {reason}"))
        log.warning("pod %s/%s container %s: %s", rec.namespace, rec.name, crec.name, message)

    # ---- containers ----

    async def _launch(
        self,
        pod: pod_pb2.Pod,
        rec: PodRecord,
        container: pod_pb2.Container,
        crec: ContainerRecord,
        resolved: dict[str, str],
    ) -> None:
        started = self._now()
        image_ref = await self._ensure_image(pod, rec, container, crec)
        rec.timings.append((f"image:{container.name}", started, self._now()))
        if image_ref is None:
            return
        if effective(pod, container).run_as_non_root:
            # kube's getImageUser: the image's numeric user, else its user name, else root.
            image = await self._image_present(image_ref)
            uid: int | None = 0
            name = ""
            if image is not None and image.HasField("uid"):
                uid = image.uid.value
            elif image is not None and image.username:
                uid, name = None, image.username
            refused = verify_run_as_non_root(pod, container, uid, name)
            if refused:
                self._config_error(rec, crec, refused)
                return
        if not self.apparmor and apparmor_required(pod, container):
            self._config_error(rec, crec, APPARMOR_DISABLED)
            return
        instance = crec.restart_count + (1 if crec.last is not None else 0)
        env = {"HOSTNAME": pod.spec.hostname or pod.metadata.name, **resolved}
        config = container_config(
            pod,
            container,
            image_ref,
            instance,
            env,
            self.machine_memory,
            seccomp_root=self.seccomp_root,
            seccomp_default=self.seccomp_default,
        )
        # An ephemeral container with a target joins the target's PID namespace (kube's
        # NamespaceMode TARGET), so `kubectl debug --target` sees its processes.
        target = rec.containers.get(ephemeral_target(pod, container.name))
        if target is not None and target.container_id:
            ns = config.linux.security_context.namespace_options
            ns.pid, ns.target_id = cri.TARGET, target.container_id
        # The pod's volumes (kubelet/volumes.py), bind-mounted by the runtime (kube's
        # makeMounts: CRI Mount entries, in the container's order).
        for m in self._mounts.get(rec.uid, {}).get(container.name, []):
            config.mounts.add(
                container_path=m.container_path, host_path=str(m.host_path), readonly=m.read_only
            )
        sandbox = self._sandbox_configs.get(rec.uid) or sandbox_config(
            pod,
            0,
            self._log_dir(rec.uid),
            self._pod_cgroup(rec.uid, qos_class(pod)),
            self.dns,
            seccomp_root=self.seccomp_root,
            seccomp_default=self.seccomp_default,
        )
        # The log file of this instance is the runtime's to create.
        log_file = self.instance_log(rec.uid, container.name, instance)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.unlink(missing_ok=True)
        container_id = ""
        stage, started = f"create:{container.name}", self._now()
        try:
            created = await self.rt.CreateContainer(
                cri.CreateContainerRequest(
                    pod_sandbox_id=rec.sandbox_id, config=config, sandbox_config=sandbox
                ),
                timeout=CALL_TIMEOUT,
            )
            container_id = created.container_id
            rec.timings.append((stage, started, self._now()))
            stage, started = f"start:{container.name}", self._now()
            await self.rt.StartContainer(
                cri.StartContainerRequest(container_id=container_id), timeout=CALL_TIMEOUT
            )
            rec.timings.append((stage, started, self._now()))
        except grpc.aio.AioRpcError as exc:
            rec.timings.append((stage, started, self._now()))
            reason = "RunContainerError" if container_id else "CreateContainerError"
            error = _error(exc)
            if container_id:
                await self._remove_container(container_id)
            delay = self._backoff(crec)
            crec.state = WAITING
            crec.waiting_reason, crec.waiting_message = reason, error
            crec.next_start = self._now() + delay
            rec.events.append(("Warning", "Failed", f"Error: {error}"))
            log.warning("pod %s/%s container %s: %s", rec.namespace, rec.name, crec.name, error)
            return
        if crec.container_id:
            await self._retire(rec.uid, crec.name, crec.container_id)
        if crec.last is not None:
            crec.restart_count += 1
        crec.container_id = container_id
        crec.pid = 0
        crec.started_at = self._now()
        crec.state = RUNNING
        crec.waiting_reason = crec.waiting_message = ""
        crec.terminated = None
        crec.image = container.image
        # imageID as kube reports it: the runtime's image_ref of the container (a repository
        # digest for a pulled image, else the image id).
        known = self._image_refs.get(image_ref)
        if known:
            crec.image_ref = known
        else:
            st = await self._container_status(container_id)
            crec.image_ref = st.image_ref if st is not None and st.image_ref else image_ref
        rec.events.append(("Normal", "Created", f"Created container: {container.name}"))
        rec.events.append(("Normal", "Started", f"Started container {container.name}"))
        log.info(
            "pod %s/%s container %s started: %s",
            rec.namespace,
            rec.name,
            crec.name,
            container_id[:12],
        )

    async def _retire(self, uid: str, name: str, container_id: str) -> None:
        """Keep the last exited instance of a container, remove older ones."""
        dead = self._dead.setdefault((uid, name), [])
        if container_id not in dead:
            dead.append(container_id)
        while len(dead) > 1:
            await self._remove_container(dead.pop(0))

    async def _remove_container(self, container_id: str) -> None:
        try:
            await self.rt.RemoveContainer(
                cri.RemoveContainerRequest(container_id=container_id), timeout=CALL_TIMEOUT
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                log.warning("container %s: %s", container_id[:12], _error(exc))

    async def _container_status(self, container_id: str) -> cri.ContainerStatus | None:
        try:
            resp = await self.rt.ContainerStatus(
                cri.ContainerStatusRequest(container_id=container_id), timeout=CALL_TIMEOUT
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        status: cri.ContainerStatus = resp.status
        return status

    def _termination(self, crec: ContainerRecord, st: cri.ContainerStatus | None) -> Termination:
        cid = self.container_id_prefix + crec.container_id
        if st is None:
            return Termination(
                exit_code=137,
                reason="ContainerStatusUnknown",
                message="The container could not be located when the pod was terminated",
                started_at=crec.started_at,
                finished_at=self._now(),
                container_id=cid,
            )
        code = st.exit_code
        reason = st.reason or ("Completed" if code == 0 else "Error")
        return Termination(
            exit_code=code,
            reason=reason,
            message=st.message,
            started_at=_seconds(st.started_at) or crec.started_at,
            finished_at=_seconds(st.finished_at) or self._now(),
            container_id=cid,
        )

    async def _exit_status(self, uid: str, crec: ContainerRecord) -> Termination | None:
        if not crec.container_id:
            return None
        try:
            container_states = (await self._states())[1]
        except grpc.aio.AioRpcError:
            container_states = {}
        if container_states.get(crec.container_id) == cri.CONTAINER_RUNNING:
            return None  # running at the last relist
        st = await self._container_status(crec.container_id)
        if st is not None and st.state in (cri.CONTAINER_RUNNING, cri.CONTAINER_CREATED):
            return None
        return self._termination(crec, st)

    async def _stop(self, crec: ContainerRecord, grace_seconds: float) -> None:
        try:
            await self.rt.StopContainer(
                cri.StopContainerRequest(
                    container_id=crec.container_id, timeout=int(max(0.0, grace_seconds))
                ),
                timeout=CALL_TIMEOUT + grace_seconds,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise

    async def _stop_containers(self, rec: PodRecord, grace_seconds: float) -> None:
        running = [
            c
            for c in (*rec.init_containers.values(), *rec.containers.values())
            if c.state == RUNNING and c.container_id
        ]
        for crec in running:
            rec.events.append(("Normal", "Killing", f"Stopping container {crec.name}"))

        async def stop(crec: ContainerRecord) -> None:
            # kube's killContainer: the preStop hook, then StopContainer with what is left.
            await self._stop(crec, await self._pre_stop(rec.uid, crec, grace_seconds))

        await asyncio.gather(*(stop(c) for c in running))
        for crec in running:
            crec.state = TERMINATED
            crec.terminated = self._with_message(
                rec.uid,
                crec,
                self._termination(crec, await self._container_status(crec.container_id)),
            )

    async def kill_pod(self, uid: str, grace_seconds: float) -> None:
        rec = self._pods.get(uid)
        if rec is None:
            return
        await self._stop_containers(rec, grace_seconds)
        if rec.sandbox_id:
            await self._remove_sandbox(rec.sandbox_id)
            rec.sandbox_id = ""
        await self._remove_not_ready(uid)  # left by failed creations
        self._network_waiting.discard(uid)
        for key in [k for k in self._dead if k[0] == uid]:
            del self._dead[key]
        self._remove_pod_cgroups(uid)
        self._sandbox_configs.pop(uid, None)
        self._save(rec)

    def _remove_pod_cgroups(self, uid: str) -> None:
        """The pod's cgroup under each v1 controller (runc removes its containers' own)."""
        base = Path("/sys/fs/cgroup")
        if not base.is_dir():
            return
        for qos in ("Guaranteed", "Burstable", "BestEffort"):
            relative = self._pod_cgroup(uid, qos).lstrip("/")
            for controller in base.iterdir():
                path = controller / relative
                if path.is_dir():
                    try:
                        os.rmdir(path)
                    except OSError as exc:
                        log.debug("cgroup %s: %s", path, exc)

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        rec = self._pods.get(uid)
        crec = rec.containers.get(name) if rec is not None else None
        if rec is None or crec is None or crec.state != RUNNING or not crec.container_id:
            return
        rec.events.append(("Normal", "Killing", why))
        await self._stop(crec, await self._pre_stop(uid, crec, grace_seconds))

    async def _kill_changed(self, pod: pod_pb2.Pod, rec: PodRecord, crec: ContainerRecord) -> None:
        why = definition_changed_message(crec.name)
        rec.events.append(("Normal", "Killing", why))
        spec = pod.spec
        grace = (
            spec.terminationGracePeriodSeconds
            if spec.HasField("terminationGracePeriodSeconds")
            else 30
        )
        await self._stop(crec, await self._pre_stop(rec.uid, crec, float(grace)))
        crec.last = self._with_message(
            rec.uid, crec, self._termination(crec, await self._container_status(crec.container_id))
        )
        crec.terminated = None
        crec.state = WAITING
        crec.waiting_reason, crec.waiting_message = "ContainerCreating", ""
        crec.next_start = 0.0

    # ---- streaming: URLs on the runtime's streaming server (kubelet/cristream.py) ----

    async def _stream_url(self, call: Any, request: Any) -> str:
        try:
            resp = await call(request, timeout=CALL_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise NotFoundError(_error(exc)) from exc
            raise InternalError(_error(exc)) from exc
        url: str = resp.url
        return url

    async def exec_url(
        self,
        container_id: str,
        cmd: list[str],
        *,
        stdin: bool,
        stdout: bool,
        stderr: bool,
        tty: bool,
    ) -> str:
        req = cri.ExecRequest(
            container_id=container_id, cmd=cmd, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty
        )
        return await self._stream_url(self.rt.Exec, req)

    async def attach_url(
        self, container_id: str, *, stdin: bool, stdout: bool, stderr: bool, tty: bool
    ) -> str:
        req = cri.AttachRequest(
            container_id=container_id, stdin=stdin, stdout=stdout, stderr=stderr, tty=tty
        )
        return await self._stream_url(self.rt.Attach, req)

    async def port_forward_url(self, sandbox_id: str, ports: list[int]) -> str:
        req = cri.PortForwardRequest(pod_sandbox_id=sandbox_id, port=ports)
        return await self._stream_url(self.rt.PortForward, req)
