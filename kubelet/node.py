"""The node side of a kubelet: register the Node, keep its status, renew its Lease.

`NodeAgent` owns one node. `register()` creates the Node (or, when it exists from an earlier
run, merges our labels into it and refreshes its status). `lease_loop()` renews
kube-node-lease/<node> (through the node's own Leases/UpdateStream unless --write-streams=false:
each renewal is one Update, at a fraction of a call's cost) every quarter of the lease duration,
retrying a failed renewal with backoff from 200 ms doubling to 7 s (as the kubelet does), but
never waiting longer than the renew interval: with kube's defaults (40 s lease, 10 s interval)
that is the kubelet's schedule; with a short lease, a kubelet that backed off through an
apiserver restart would otherwise stay silent past the node monitor grace period after the
apiserver was back. A renewal is an Update from the Lease last stored (kube's node lease
controller: no read while nothing else writes it); a conflict reads it again and writes from
that at once. A renewal whose answer was lost (a deadline, a lost stream) may have landed: it
is not re-sent with its now perhaps stale resourceVersion (which would come back ABORTED and
cost a read and a third write, on an apiserver that is likely overloaded already); the next
attempt reads the Lease, and a stored renewTime we sent means that renewal is done. Node status
writes do the same with the Ready heartbeat they carry. `status_loop()`
re-posts node status when it differs from what the node should say (Ready=True, capacity,
addresses, ...) or has not been reported for `report_frequency`; that is how Ready returns to
True after the node lifecycle controller marked it Unknown. The current Node is read from an
informer's store (a callable), so many fake nodes in one process share one watch.

Concurrency: the loops are tasks on the kubelet's event loop; they share nothing but the client.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import random
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from kubelet.api import KubeletAPI
from tinykube.clock import Clock
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError, TinykubeError
from tinykube.meta import timestamp
from tinykube.protocols import pipelined
from tinykube.retry import may_have_landed
from tinykube.v1 import lease_pb2, node_pb2

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
KUBELET_VERSION = "tinykube-v0.1.0"
LEASE_BACKOFF_INITIAL = 0.2
LEASE_BACKOFF_MAX = 7.0
# kube's node lease controller (maxUpdateRetries) and node status (nodeStatusUpdateRetry):
# Updates per renewal or status report, each conflict reading the object again.
MAX_UPDATE_ATTEMPTS = 5


def ts(when: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(when.replace(tzinfo=None) if when.tzinfo else when)
    return out


@dataclass
class NodeConfig:
    name: str
    node_ip: str
    kubelet_port: int
    capacity: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[tuple[str, str, str]] = field(default_factory=list)
    runtime: str = "process"
    # status.nodeInfo.containerRuntimeVersion: a CRI runtime's name://version from Version.
    runtime_version: str = ""
    lease_duration_seconds: int = 40
    status_update_frequency: float = 10.0
    status_report_frequency: float = 300.0
    # The first periodic report after registration comes after a random (1 - spread, 1] share
    # of status_report_frequency. 0 for a real kubelet; a process hosting many hollow nodes
    # registers them all within seconds, and without a spread their 5-minute reports would hit
    # the apiserver as one burst (2,000 Node status writes in 20 s at 2,000 nodes), where real
    # kubelets, started at different times, report at independent phases.
    first_report_spread: float = 0.0
    # Renewals as messages of the node's own Leases/UpdateStream (the kubelet's default;
    # --write-streams=false: calls).
    write_streams: bool = False


def desired_status(cfg: NodeConfig, hostname: str) -> node_pb2.NodeStatus:
    """Everything in NodeStatus the kubelet owns, except condition timestamps."""
    status = node_pb2.NodeStatus()
    status.capacity.update(cfg.capacity)
    status.allocatable.update(cfg.capacity)
    status.addresses.add(type="InternalIP", address=cfg.node_ip)
    status.addresses.add(type="Hostname", address=hostname)
    info = status.nodeInfo
    info.machineID = cfg.name
    info.systemUUID = system_uuid(cfg)
    info.bootID = boot_id()
    # kubeProxyVersion stays empty: deprecated, and kubelets since 1.31 no longer set it.
    info.kernelVersion = platform.release()
    info.osImage = platform.platform()
    info.operatingSystem = platform.system().lower()
    info.architecture = {"x86_64": "amd64", "aarch64": "arm64"}.get(
        platform.machine(), platform.machine()
    )
    info.kubeletVersion = KUBELET_VERSION
    info.containerRuntimeVersion = cfg.runtime_version or f"{cfg.runtime}://tinykube"
    status.daemonEndpoints.kubeletEndpoint.Port = cfg.kubelet_port
    return status


def _read_first_line(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.readline().strip()
    except OSError:
        return ""


def system_uuid(cfg: NodeConfig) -> str:
    """The node's nodeInfo.systemUUID: the SMBIOS product UUID, as the kubelet reads it (it
    is readable by root only), else the machine-id. The fake runtime's nodes share one
    machine, so each gets a UUID derived from its name, stable across restarts."""
    if cfg.runtime == "fake":
        return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{cfg.name}.nodes.tinykube"))
    value = _read_first_line("/sys/class/dmi/id/product_uuid")
    if not value:
        machine_id = _read_first_line("/etc/machine-id")
        value = str(uuid.UUID(machine_id)) if len(machine_id) == 32 else machine_id
    return value


def boot_id() -> str:
    """This boot's ID, as the kernel gives it (changes at every reboot)."""
    return _read_first_line("/proc/sys/kernel/random/boot_id")


class NodeAgent:
    def __init__(
        self,
        client: KubeletAPI,
        cfg: NodeConfig,
        get_node: Callable[[], node_pb2.Node | None],
        *,
        clock: Clock | None = None,
        on_renewal: Callable[[bool], object] = lambda ok: None,
        images: Callable[[], Awaitable[list[node_pb2.ContainerImage]]] | None = None,
    ) -> None:
        self.on_renewal = on_renewal
        # A CRI runtime's images (status.images, ImageLocality's input); None: no images.
        self.images = images
        self.client = client
        # The node's own Leases client: with write streams renewals go as messages of a
        # Leases/UpdateStream no other node shares (one stream per node, as a real kubelet has
        # its own connection).
        self.leases = pipelined(client.leases) if cfg.write_streams else client.leases
        self.cfg = cfg
        self.get_node = get_node
        self.clock = clock or Clock()
        self.hostname = socket.gethostname() if cfg.runtime == "process" else cfg.name
        self._last_report = -1e18
        self._lease: lease_pb2.Lease | None = None
        # Renewals (renewTime as (seconds, nanos)) and Node status writes (the Ready heartbeat)
        # whose answers were lost, with the monotonic time each was sent: the next attempt
        # reads first and, finding one of them stored, takes it as done instead of writing.
        self._unconfirmed: dict[tuple[int, int], float] = {}
        self._unconfirmed_status: dict[tuple[int, int], float] = {}
        self.registered = asyncio.Event()
        # Computed once: platform probes are slow and a fake kubelet may host thousands of nodes.
        self.desired = desired_status(cfg, self.hostname)
        # The last Node found Ready, with no condition Unknown, and its status (but for
        # conditions) equal to `desired`.
        self._matched: node_pb2.Node | None = None

    def _ready_condition(self, previous: node_pb2.NodeCondition | None) -> node_pb2.NodeCondition:
        now = timestamp(self.clock.now())
        cond = node_pb2.NodeCondition(
            type="Ready",
            status="True",
            reason="KubeletReady",
            message="kubelet is posting ready status",
            lastHeartbeatTime=now,
        )
        if previous is not None and previous.status == "True":
            cond.lastTransitionTime.CopyFrom(previous.lastTransitionTime)
        else:
            cond.lastTransitionTime.CopyFrom(now)
        return cond

    def _with_status(self, node: node_pb2.Node) -> node_pb2.Node:
        updated = node_pb2.Node()
        updated.CopyFrom(node)
        want = self.desired
        previous = next((c for c in node.status.conditions if c.type == "Ready"), None)
        updated.status.CopyFrom(want)
        # Ready is the only condition this kubelet reports (no pressure detection).
        updated.status.conditions.append(self._ready_condition(previous))
        return updated

    def needs_update(self, node: node_pb2.Node) -> bool:
        if node is not self._matched:
            # The informer's objects are never changed in place, so a Node found to say what
            # it should (Ready, our status) says so still: only a new one is read and compared
            # (5,000 hollow nodes ask every 10 s; their Node changes about every 5 minutes).
            ready = next((c for c in node.status.conditions if c.type == "Ready"), None)
            if ready is None or ready.status != "True":
                return True
            if any(c.status == "Unknown" for c in node.status.conditions):
                return True
            have = node_pb2.NodeStatus()
            have.CopyFrom(node.status)
            del have.conditions[:]
            if have != self.desired:
                return True
            self._matched = node
        return self.clock.monotonic() - self._last_report >= self.cfg.status_report_frequency

    async def register(self) -> None:
        """Create or adopt our Node object; retries until the apiserver answers."""
        delay = LEASE_BACKOFF_INITIAL
        while True:
            try:
                await self._register_once()
                self.registered.set()
                return
            except TinykubeError as exc:
                log.warning("node %s: registration failed: %s", self.cfg.name, exc)
                await self.clock.sleep(delay)
                delay = min(delay * 2, LEASE_BACKOFF_MAX)

    async def _register_once(self) -> None:
        node = node_pb2.Node(apiVersion="v1", kind="Node")
        node.metadata.name = self.cfg.name
        node.metadata.labels.update(
            {
                "kubernetes.io/hostname": self.cfg.name,
                "kubernetes.io/os": platform.system().lower(),
                **self.cfg.labels,
            }
        )
        for key, value, effect in self.cfg.taints:
            node.spec.taints.add(key=key, value=value, effect=effect)
        try:
            created = await self.client.nodes.create(node)
            log.info("node %s: registered", self.cfg.name)
        except AlreadyExistsError:
            created = await self.client.nodes.get(self.cfg.name)
            wanted = dict(node.metadata.labels)
            if any(created.metadata.labels.get(k) != v for k, v in wanted.items()):
                created.metadata.labels.update(wanted)
                created = await self.client.nodes.update(created)
            log.info("node %s: already registered; refreshing its status", self.cfg.name)
        await self._post_status(created)
        if self.cfg.first_report_spread > 0:
            early = random.uniform(0.0, self.cfg.first_report_spread)
            self._last_report -= early * self.cfg.status_report_frequency

    async def _refresh_images(self) -> None:
        if self.images is None:
            return
        try:
            images = await self.images()
        except Exception as exc:
            log.warning("node %s: listing images failed: %s", self.cfg.name, exc)
            return
        if list(self.desired.images) != images:
            del self.desired.images[:]
            self.desired.images.extend(images)
            self._matched = None

    async def _post_status(self, node: node_pb2.Node) -> None:
        await self._refresh_images()
        for _ in range(MAX_UPDATE_ATTEMPTS):
            updated = self._with_status(node)
            sent = self.clock.monotonic()
            try:
                await self.client.nodes.update_status(updated, resend_ambiguous=False)
            except ConflictError:
                node = await self.client.nodes.get(self.cfg.name)
                if self._status_landed(node):
                    return
                continue
            except TinykubeError as exc:
                if may_have_landed(exc):
                    _remember(self._unconfirmed_status, _ready_heartbeat(updated), sent)
                raise
            self._last_report = sent
            self._unconfirmed_status.clear()
            return

    def _status_landed(self, node: node_pb2.Node) -> bool:
        """Whether `node` holds a status write of ours whose answer was lost (its Ready
        heartbeat is one we sent): then that write is the last report, and nothing is sent."""
        sent = self._unconfirmed_status.get(_ready_heartbeat(node))
        if sent is None:
            return False
        self._last_report = max(self._last_report, sent)
        self._unconfirmed_status.clear()
        return True

    async def sync_status(self) -> None:
        node = self.get_node()
        if node is None:
            # Deleted under us (or not in the cache yet): register again, as the kubelet does.
            try:
                node = await self.client.nodes.get(self.cfg.name)
            except NotFoundError:
                await self._register_once()
                return
        await self._refresh_images()
        if self._unconfirmed_status:
            self._status_landed(node)
        if self.needs_update(node):
            await self._post_status(node)

    async def status_loop(self) -> None:
        await self.registered.wait()
        while True:
            await self.clock.sleep(self.cfg.status_update_frequency * random.uniform(0.9, 1.1))
            try:
                await self.sync_status()
            except TinykubeError as exc:
                log.warning("node %s: status update failed: %s", self.cfg.name, exc)

    async def renew_lease(self) -> float:
        """Renew our Lease (create it if missing), as kube's node lease controller: an Update
        from the Lease we last stored; after a conflict the Lease is read again and the Update
        made from it, at most MAX_UPDATE_ATTEMPTS Updates in all. An Update whose answer was
        lost (may_have_landed) is not re-sent: the next attempt reads the Lease first, and if
        it holds that renewal (its renewTime is one we sent) the renewal is done.

        Returns how many seconds ago the renewal now stored was sent: 0 when answered now,
        more when it is a lost-answer renewal found to have landed."""
        for _ in range(MAX_UPDATE_ATTEMPTS):
            if self._lease is None:
                lease, created = await self._read_lease()
                self._lease = lease
                sent = self._unconfirmed.get(_renew_key(lease, self.cfg.name))
                if created or sent is not None:
                    self._unconfirmed.clear()
                    return 0.0 if sent is None else max(0.0, self.clock.monotonic() - sent)
            lease = lease_pb2.Lease()
            lease.CopyFrom(self._lease)
            lease.spec.holderIdentity = self.cfg.name
            lease.spec.leaseDurationSeconds = self.cfg.lease_duration_seconds
            lease.spec.renewTime.CopyFrom(timestamp(self.clock.now()))
            sent = self.clock.monotonic()
            try:
                self._lease = await self.leases.update(lease, resend_ambiguous=False)
            except ConflictError:
                self._lease = None  # kube: read the Lease again at once and write from it
                continue
            except NotFoundError:
                self._lease = None  # re-create on the next attempt
                raise
            except TinykubeError as exc:
                if may_have_landed(exc):
                    # Read before writing again: it may be stored, and our version stale.
                    _remember(self._unconfirmed, _renew_key(lease, self.cfg.name), sent)
                    self._lease = None
                raise
            self._unconfirmed.clear()
            return 0.0
        raise ConflictError(
            f"node {self.cfg.name}: lease renewal lost {MAX_UPDATE_ATTEMPTS} conflicts in a row"
        )

    async def _read_lease(self) -> tuple[lease_pb2.Lease, bool]:
        """Our Lease as stored, created if missing; and whether this call created it."""
        try:
            return await self.client.leases.get(self.cfg.name, NODE_LEASE_NAMESPACE), False
        except NotFoundError:
            pass
        lease = lease_pb2.Lease(apiVersion="v1", kind="Lease")
        lease.metadata.name = self.cfg.name
        lease.metadata.namespace = NODE_LEASE_NAMESPACE
        lease.spec.holderIdentity = self.cfg.name
        lease.spec.leaseDurationSeconds = self.cfg.lease_duration_seconds
        lease.spec.renewTime.CopyFrom(timestamp(self.clock.now()))
        try:
            return await self.client.leases.create(lease), True  # once: a call
        except AlreadyExistsError:
            return await self.client.leases.get(self.cfg.name, NODE_LEASE_NAMESPACE), False

    async def lease_loop(self) -> None:
        interval = self.cfg.lease_duration_seconds / 4.0
        longest = min(LEASE_BACKOFF_MAX, interval)
        delay = LEASE_BACKOFF_INITIAL
        # Nodes hosted by one process start together; spreading their renewals keeps them
        # from hitting the apiserver as one burst every interval.
        spread = random.uniform(0.5, 1.0)
        while True:
            try:
                age = await self.renew_lease()
                self.on_renewal(True)
                delay = LEASE_BACKOFF_INITIAL
                # A renewal that landed while its answer was lost is `age` old already.
                await self.clock.sleep(max(0.0, interval * spread - age))
                spread = random.uniform(0.96, 1.04)
            except TinykubeError as exc:
                self.on_renewal(False)
                log.warning("node %s: lease renewal failed: %s", self.cfg.name, exc)
                await self.clock.sleep(min(delay, longest))
                delay = min(delay * 2, longest)


# Heartbeats sent whose answers were lost, remembered to recognise them if they landed: a few
# (each failed heartbeat adds one until one is answered or found).
UNCONFIRMED_KEPT = 4


def _remember(unconfirmed: dict[tuple[int, int], float], key: tuple[int, int], sent: float) -> None:
    unconfirmed[key] = sent
    while len(unconfirmed) > UNCONFIRMED_KEPT:
        del unconfirmed[next(iter(unconfirmed))]


def _renew_key(lease: lease_pb2.Lease, holder: str) -> tuple[int, int]:
    """A Lease's renewal as (seconds, nanos) of its renewTime, or (-1, -1) if another holds it."""
    if lease.spec.holderIdentity != holder:
        return (-1, -1)
    return (lease.spec.renewTime.seconds, lease.spec.renewTime.nanos)


def _ready_heartbeat(node: node_pb2.Node) -> tuple[int, int]:
    """The Ready condition's lastHeartbeatTime as (seconds, nanos); (-1, -1) without one."""
    for cond in node.status.conditions:
        if cond.type == "Ready":
            return (cond.lastHeartbeatTime.seconds, cond.lastHeartbeatTime.nanos)
    return (-1, -1)
