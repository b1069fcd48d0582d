"""Node lifecycle: notices dead kubelets, taints their nodes and evicts their pods.

As kube-controller-manager's node lifecycle controller plus its NoExecute taint manager and the
pod GC's "terminating pods on unreachable nodes" rule. Every `monitor_period` seconds `monitor()`:

1. For each node, notes when its Lease in kube-node-lease was last renewed (or its Ready
   heartbeat moved), timed on this process's own monotonic clock so clock skew between machines
   does not matter. Silent for longer than `grace_period`: every condition becomes Unknown
   (Ready: reason NodeStatusUnknown, "Kubelet stopped posting node status.").
2. NoSchedule taints follow the conditions at once, as kube's TaintNodesByCondition: Ready
   False -> node.kubernetes.io/not-ready, Unknown -> node.kubernetes.io/unreachable,
   MemoryPressure / DiskPressure / PIDPressure / NetworkUnavailable True -> memory-pressure,
   disk-pressure, pid-pressure, network-unavailable; a cordoned node (spec.unschedulable)
   carries node.kubernetes.io/unschedulable. The kubelet sets Ready=True again once it is back,
   and the taints go.
3. NoExecute taints (not-ready, unreachable) go on through a rate-limited queue per zone (the
   zone is the node's topology.kubernetes.io/region and /zone labels), `eviction_rate` nodes a
   second with a burst of one, as kube's zoneNoExecuteTainter. A zone where no node is Ready is
   in FullDisruption; one where at least `unhealthy_zone_threshold` of its nodes (and more than
   2) are not Ready is in PartialDisruption, and taints there at `secondary_eviction_rate` when it
   has more than `large_cluster_threshold` nodes, else not at all. When every zone is in
   FullDisruption the fault is most likely ours (the control plane lost sight of the nodes, not
   the nodes died): "master disruption mode" removes every NoExecute taint this controller set
   and adds none until some node is Ready again; then each node gets a fresh grace period.
   Nodes labelled node.kubernetes.io/exclude-disruption are left out of the zone counts.
4. Evicts pods from NoExecute-tainted nodes once their toleration runs out (tolerationSeconds
   of a matching toleration; pods with no toleration for the unreachable / not-ready taints get
   the default, as Kubernetes' DefaultTolerationSeconds admission plugin would have added).
   Pods on an unreachable node are force-deleted (grace 0): their kubelet cannot confirm.
   Pods bound to a node that no longer exists are force-deleted too.

When this controller turns a Ready node Unknown, the pods bound to it get Ready=False (Event
NodeNotReady "Node is not ready"), as kube's MarkPodsNotReady, so Services stop sending them
traffic within the grace period rather than at eviction; a kubelet that comes back puts its own
view back (kubelet/pods.py reconciles a status someone else changed). A failed write is retried
on the next pass while the node stays not Ready.

One task runs the loop; it only reads informer caches and writes through the client. A pass
costs O(nodes), not O(pods): pods are looked up by node through an index on the shared pod
informer (spec.nodeName), so only the pods of NoExecute-tainted, vanished or newly silent nodes
are read (at 150,000 pods a scan of every pod every 5 s was a core's worth of work).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from controller.api import ClientAPI, NullRecorder, Recorder, Store
from controller.util import datetime_to_ts, is_terminating, key_of, ts_to_datetime
from tinykube.clock import Clock
from tinykube.errors import ConflictError, NotFoundError, TinykubeError
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

log = logging.getLogger(__name__)

TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NODE_LEASE_NAMESPACE = "kube-node-lease"
NO_EXECUTE = "NoExecute"
NO_SCHEDULE = "NoSchedule"
LABEL_EXCLUDE_DISRUPTION = "node.kubernetes.io/exclude-disruption"
# (condition type, status) -> the NoSchedule taint it means (kube's TaintNodesByCondition).
CONDITION_TAINTS: dict[tuple[str, str], str] = {
    ("Ready", "False"): TAINT_NOT_READY,
    ("Ready", "Unknown"): TAINT_UNREACHABLE,
    ("MemoryPressure", "True"): "node.kubernetes.io/memory-pressure",
    ("DiskPressure", "True"): "node.kubernetes.io/disk-pressure",
    ("NetworkUnavailable", "True"): "node.kubernetes.io/network-unavailable",
    ("PIDPressure", "True"): "node.kubernetes.io/pid-pressure",
}
NO_EXECUTE_TAINTS = frozenset({TAINT_UNREACHABLE, TAINT_NOT_READY})
NO_SCHEDULE_TAINTS = frozenset({*CONDITION_TAINTS.values(), TAINT_UNSCHEDULABLE})
# The taints this controller owns; users' taints are left alone.
MANAGED_TAINTS = frozenset(
    {(k, NO_EXECUTE) for k in NO_EXECUTE_TAINTS} | {(k, NO_SCHEDULE) for k in NO_SCHEDULE_TAINTS}
)
# Conditions a silent node's kubelet can no longer vouch for (NetworkUnavailable is not the
# kubelet's to report, so it is kept as kube keeps it).
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
ZONE_LABELS = (
    ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region"),
    ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"),
)

NODE_NAME_INDEX = "spec.nodeName"

INITIAL, NORMAL = "Initial", "Normal"
PARTIAL_DISRUPTION, FULL_DISRUPTION = "PartialDisruption", "FullDisruption"

Node = node_pb2.Node
Pod = pod_pb2.Pod
Lease = lease_pb2.Lease


def _node_name(pod: Pod) -> str | None:
    return pod.spec.nodeName or None


class PodsByNode:
    """The pods bound to each node, from the pod informer's spec.nodeName index when the store
    keeps indexes (tinykube.informer.Store), else by scanning it (unit tests' fakes)."""

    def __init__(self, store: Store[Pod]) -> None:
        self.store = store
        self.indexed = all(hasattr(store, a) for a in ("add_index", "by_index", "index_values"))
        if self.indexed:
            indexed: Any = store
            with contextlib.suppress(ValueError):  # another controller made it already
                indexed.add_index(NODE_NAME_INDEX, _node_name)

    def on(self, node_name: str) -> list[Pod]:
        if self.indexed:
            indexed: Any = self.store
            return list(indexed.by_index(NODE_NAME_INDEX, node_name))
        return [p for p in self.store.list() if p.spec.nodeName == node_name]

    def nodes(self) -> list[str]:
        """Every node name some pod is bound to."""
        if self.indexed:
            indexed: Any = self.store
            return list(indexed.index_values(NODE_NAME_INDEX))
        return sorted({p.spec.nodeName for p in self.store.list() if p.spec.nodeName})


@dataclass
class _Health:
    renew_seen: str  # serialized lease renewTime last seen
    heartbeat_seen: str  # serialized Ready lastHeartbeatTime last seen
    probe: float  # our monotonic time when either last changed


def _ts_str(msg: object) -> str:
    return str(msg)


def zone_key(node: Node) -> str:
    """kube's GetZoneKey: region and zone labels (GA, else beta), "" when the node has neither."""
    labels = node.metadata.labels
    region, zone = (labels.get(ga) or labels.get(beta, "") for ga, beta in ZONE_LABELS)
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


def zone_state(ready: list[bool], unhealthy_threshold: float) -> tuple[int, str]:
    """kube's ComputeZoneState: (not-Ready count, state) of one zone's nodes."""
    not_ready = sum(1 for r in ready if not r)
    if not_ready and not_ready == len(ready):
        return not_ready, FULL_DISRUPTION
    if not_ready > 2 and not_ready / len(ready) >= unhealthy_threshold:
        return not_ready, PARTIAL_DISRUPTION
    return not_ready, NORMAL


@dataclass
class _Tainter:
    """One zone's queue of nodes waiting for a NoExecute taint, behind a token bucket (burst 1).

    As kube's RateLimitedTimedQueue with a TokenBucketRateLimiter; qps 0 takes nothing.
    """

    qps: float
    tokens: float = 1.0
    refilled: float = 0.0
    queue: dict[str, None] = field(default_factory=dict)  # insertion-ordered node names

    def _refill(self, now: float) -> None:
        if self.qps > 0:
            self.tokens = min(1.0, self.tokens + (now - self.refilled) * self.qps)
        self.refilled = now

    def try_accept(self, now: float) -> bool:
        self._refill(now)
        if self.qps <= 0 or self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def swap(self, qps: float, now: float) -> None:
        """A new rate: its bucket starts full only if the old one had a token (kube's SwapLimiter,
        which drains the new limiter when the old one would have made the caller wait)."""
        if qps == self.qps:
            return
        self._refill(now)
        had_token = self.qps > 0 and self.tokens >= 1.0
        self.qps, self.tokens = qps, 1.0 if had_token else 0.0

    def add(self, name: str) -> None:
        self.queue.setdefault(name, None)

    def remove(self, name: str) -> None:
        self.queue.pop(name, None)


def toleration_matches(tol: pod_pb2.Toleration, taint: node_pb2.Taint) -> bool:
    """Kubernetes' Toleration.ToleratesTaint."""
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    if tol.operator == "Exists":
        return True  # an empty key with Exists tolerates every taint
    if tol.operator in ("", "Equal"):
        return tol.key == taint.key and tol.value == taint.value
    return False


def toleration_seconds(pod: Pod, taint: node_pb2.Taint, defaults: dict[str, float]) -> float | None:
    """How long `pod` may stay on a node with `taint`; None means forever, 0 means evict now."""
    matching = [t for t in pod.spec.tolerations if toleration_matches(t, taint)]
    if not matching:
        return defaults.get(taint.key, 0.0)
    limits = [float(t.tolerationSeconds) for t in matching if t.HasField("tolerationSeconds")]
    if len(limits) < len(matching):
        return None  # one toleration without a limit tolerates forever
    return max(0.0, min(limits))


class NodeLifecycleController:
    name = "nodelifecycle"

    def __init__(
        self,
        client: ClientAPI,
        node_store: Store[Node],
        lease_store: Store[Lease],
        pod_store: Store[Pod],
        *,
        clock: Clock | None = None,
        recorder: Recorder | None = None,
        grace_period: float = 40.0,
        default_unreachable_toleration: float = 300.0,
        default_not_ready_toleration: float = 300.0,
        eviction_rate: float = 0.1,
        secondary_eviction_rate: float = 0.01,
        large_cluster_threshold: int = 50,
        unhealthy_zone_threshold: float = 0.55,
        on_eviction: Callable[[], object] = lambda: None,
        on_zone: Callable[[str, int, int], object] = lambda zone, size, unhealthy: None,
    ) -> None:
        self.on_eviction = on_eviction
        self.on_zone = on_zone
        self.client = client
        self.node_store = node_store
        self.lease_store = lease_store
        self.pod_store = pod_store
        self.pods_by_node = PodsByNode(pod_store)
        self.clock = clock or Clock()
        self.recorder = recorder or NullRecorder()
        self.grace_period = grace_period
        self.default_tolerations = {
            TAINT_UNREACHABLE: default_unreachable_toleration,
            TAINT_NOT_READY: default_not_ready_toleration,
        }
        self.eviction_rate = eviction_rate
        self.secondary_eviction_rate = secondary_eviction_rate
        self.large_cluster_threshold = large_cluster_threshold
        self.unhealthy_zone_threshold = unhealthy_zone_threshold
        self._health: dict[str, _Health] = {}
        self._force_deleted: set[str] = set()
        self._mark_pods: set[str] = set()  # nodes whose pods still need Ready=False
        self.zone_states: dict[str, str] = {}
        self._tainters: dict[str, _Tainter] = {}

    @property
    def master_disruption(self) -> bool:
        """Every zone is fully disrupted: NoExecute tainting is off."""
        return bool(self.zone_states) and all(
            s == FULL_DISRUPTION for s in self.zone_states.values()
        )

    async def monitor(self) -> None:
        """One pass over every node, the zones, the taint queues and pods on tainted nodes."""
        nodes = self.node_store.list()
        names = {n.metadata.name for n in nodes}
        for gone in set(self._health) - names:
            del self._health[gone]
        self._mark_pods &= names
        for tainter in self._tainters.values():
            for gone in set(tainter.queue) - names:
                tainter.remove(gone)
        zones: dict[str, list[bool]] = {}
        current: dict[str, Node] = {}
        for node in nodes:
            try:
                node = await self._check_health(node)
            except (ConflictError, NotFoundError):
                continue  # the node changed under us: the next pass sees the new version
            except TinykubeError as exc:
                # As kube: a node whose health could not be written takes no part in this pass.
                log.warning("node %s: %s", node.metadata.name, exc)
                continue
            zone = zone_key(node)
            self._tainter(zone)
            if LABEL_EXCLUDE_DISRUPTION not in node.metadata.labels:
                ready = self._ready(node)
                zones.setdefault(zone, []).append(ready is not None and ready.status == "True")
            try:
                node = await self._sync_taints(node)
            except (ConflictError, NotFoundError):
                continue
            except TinykubeError as exc:
                log.warning("node %s: %s", node.metadata.name, exc)
            current[node.metadata.name] = node
        await self._handle_disruption(zones, current)
        await self._tainting_pass(current)
        await self._evict(names)

    def _ready(self, node: Node) -> node_pb2.NodeCondition | None:
        return next((c for c in node.status.conditions if c.type == "Ready"), None)

    def _tainter(self, zone: str) -> _Tainter:
        tainter = self._tainters.get(zone)
        if tainter is None:
            tainter = self._tainters[zone] = _Tainter(self.eviction_rate)
            tainter.refilled = self.clock.monotonic()
            self.zone_states.setdefault(zone, INITIAL)
        return tainter

    async def _check_health(self, node: Node) -> Node:
        name = node.metadata.name
        now = self.clock.monotonic()
        lease = self.lease_store.get(f"{NODE_LEASE_NAMESPACE}/{name}")
        renew = _ts_str(lease.spec.renewTime) if lease is not None else ""
        ready = self._ready(node)
        heartbeat = _ts_str(ready.lastHeartbeatTime) if ready is not None else ""
        health = self._health.get(name)
        if health is None:
            # First sight (or our own restart): give the node a full grace period.
            self._health[name] = _Health(renew, heartbeat, now)
            return node
        if renew != health.renew_seen or heartbeat != health.heartbeat_seen:
            health.renew_seen, health.heartbeat_seen, health.probe = renew, heartbeat, now
            return await self._retry_marking(node)
        if now - health.probe <= self.grace_period:
            return await self._retry_marking(node)
        if ready is not None and ready.status == "Unknown":
            return await self._retry_marking(node)
        updated = await self._mark_unknown(node)
        if ready is not None and ready.status == "True":
            self._mark_pods.add(name)
            await self._mark_pods_not_ready(name)
        return updated

    async def _retry_marking(self, node: Node) -> Node:
        name = node.metadata.name
        if name in self._mark_pods:
            ready = self._ready(node)
            if ready is not None and ready.status == "True":
                self._mark_pods.discard(name)  # back before we got to them
            else:
                await self._mark_pods_not_ready(name)
        return node

    async def _mark_pods_not_ready(self, node_name: str) -> None:
        """kube's MarkPodsNotReady: Ready=False on every pod bound to the node."""
        failed = False
        for pod in self.pods_by_node.on(node_name):
            ready = next((c for c in pod.status.conditions if c.type == "Ready"), None)
            if ready is None or ready.status == "False":
                continue
            updated = Pod()
            updated.CopyFrom(pod)
            for cond in updated.status.conditions:
                if cond.type == "Ready":
                    cond.status = "False"
                    cond.lastTransitionTime.CopyFrom(datetime_to_ts(self.clock.now()))
            try:
                await self.client.pods.update_status(updated)
            except NotFoundError:
                continue
            except TinykubeError as exc:
                log.warning("marking pod %s not ready: %s", key_of(pod), exc)
                failed = True
                continue
            await self._event(pod, "Warning", "NodeNotReady", "Node is not ready")
        if not failed:
            self._mark_pods.discard(node_name)

    async def _mark_unknown(self, node: Node) -> Node:
        now_ts = datetime_to_ts(self.clock.now())
        updated = Node()
        updated.CopyFrom(node)
        seen = set()
        for cond in updated.status.conditions:
            if cond.type not in KUBELET_CONDITIONS:
                continue
            seen.add(cond.type)
            cond.reason = "NodeStatusUnknown"
            cond.message = "Kubelet stopped posting node status."
            if cond.status != "Unknown":
                cond.status = "Unknown"
                cond.lastTransitionTime.CopyFrom(now_ts)
        for kind in KUBELET_CONDITIONS:
            if kind not in seen:
                updated.status.conditions.append(
                    node_pb2.NodeCondition(
                        type=kind,
                        status="Unknown",
                        reason="NodeStatusNeverUpdated",
                        message="Kubelet never posted node status.",
                        lastHeartbeatTime=node.metadata.creationTimestamp,
                        lastTransitionTime=now_ts,
                    )
                )
        log.info(
            "node %s: no heartbeat for %.0fs, Ready=Unknown", node.metadata.name, self.grace_period
        )
        result = await self.client.nodes.update_status(updated)
        await self._event(
            node, "Normal", "NodeNotReady", f"Node {node.metadata.name} status is now: NodeNotReady"
        )
        return result

    def _no_execute_wanted(self, node: Node, have: set[str]) -> set[str]:
        """The NoExecute taints `node` keeps now; queues it for one it should get later.

        As kube's processTaintBaseEviction: Ready=True drops both at once; a node already
        carrying the opposite taint swaps at once; otherwise the taint waits for its zone's
        rate limiter.
        """
        ready = self._ready(node)
        status = ready.status if ready is not None else "Unknown"
        name = node.metadata.name
        tainter = self._tainter(zone_key(node))
        if status == "True":
            tainter.remove(name)
            return set()
        taint, opposite = (
            (TAINT_NOT_READY, TAINT_UNREACHABLE)
            if status == "False"
            else (TAINT_UNREACHABLE, TAINT_NOT_READY)
        )
        if opposite in have:
            return (have - {opposite}) | {taint}
        if taint not in have:
            tainter.add(name)
        return have

    async def _sync_taints(self, node: Node, no_execute: set[str] | None = None) -> Node:
        """Write the managed taints: NoSchedule from the conditions, NoExecute as decided."""
        have_ne = {t.key for t in node.spec.taints if t.effect == NO_EXECUTE} & NO_EXECUTE_TAINTS
        if no_execute is None:
            no_execute = self._no_execute_wanted(node, have_ne)
        want = {(k, NO_EXECUTE) for k in no_execute}
        for cond in node.status.conditions:
            key = CONDITION_TAINTS.get((cond.type, cond.status))
            if key is not None:
                want.add((key, NO_SCHEDULE))
        if node.spec.unschedulable:
            want.add((TAINT_UNSCHEDULABLE, NO_SCHEDULE))
        have = {(t.key, t.effect) for t in node.spec.taints if (t.key, t.effect) in MANAGED_TAINTS}
        if have == want:
            return node
        updated = Node()
        updated.CopyFrom(node)
        keep = [t for t in updated.spec.taints if (t.key, t.effect) not in MANAGED_TAINTS]
        kept = {(t.key, t.effect): t for t in updated.spec.taints if (t.key, t.effect) in want}
        del updated.spec.taints[:]
        updated.spec.taints.extend(keep)
        for key, effect in sorted(want):
            if (key, effect) in kept:
                updated.spec.taints.append(kept[(key, effect)])
            else:
                # Kubernetes stamps timeAdded on NoExecute taints only.
                updated.spec.taints.append(
                    node_pb2.Taint(
                        key=key, effect=effect, timeAdded=datetime_to_ts(self.clock.now())
                    )
                    if effect == NO_EXECUTE
                    else node_pb2.Taint(key=key, effect=effect)
                )
        log.info(
            "node %s: managed taints now %s",
            node.metadata.name,
            ", ".join(f"{k}:{e}" for k, e in sorted(want)) or "none",
        )
        return await self.client.nodes.update(updated)

    async def _handle_disruption(
        self, zones: dict[str, list[bool]], nodes: dict[str, Node]
    ) -> None:
        """kube's handleDisruption: zone states, tainting rates, master disruption mode."""
        now = self.clock.monotonic()
        new_states: dict[str, str] = {}
        for zone, ready in zones.items():
            unhealthy, new_states[zone] = zone_state(ready, self.unhealthy_zone_threshold)
            self.on_zone(zone, len(ready), unhealthy)
            self.zone_states.setdefault(zone, INITIAL)
        all_now = all(s == FULL_DISRUPTION for s in new_states.values())
        for zone in set(self.zone_states) - set(zones):
            del self.zone_states[zone]  # no node of it took part in this pass
        all_were = all(s == FULL_DISRUPTION for s in self.zone_states.values())
        if all_now and all_were:
            return
        if all_now:
            log.warning(
                "no node is Ready: entering master disruption mode; NoExecute taints removed, "
                "none added until a node is Ready again"
            )
            for name, node in nodes.items():
                self._tainter(zone_key(node)).remove(name)
                try:
                    nodes[name] = await self._sync_taints(node, no_execute=set())
                except TinykubeError as exc:
                    log.warning("node %s: %s", name, exc)
            for zone in self.zone_states:
                self._tainters[zone].swap(0.0, now)
                self.zone_states[zone] = FULL_DISRUPTION
            return
        if all_were:
            log.info("some node is Ready again: leaving master disruption mode")
            for name in nodes:
                health = self._health.get(name)
                if health is not None:
                    health.probe = now  # a fresh grace period for every node
            for zone in self.zone_states:
                self._set_rate(zone, len(zones[zone]), new_states[zone], now)
                self.zone_states[zone] = new_states[zone]
            return
        for zone, state in self.zone_states.items():
            if state != new_states[zone]:
                log.info("zone %r is now %s", zone, new_states[zone])
                self._set_rate(zone, len(zones[zone]), new_states[zone], now)
                self.zone_states[zone] = new_states[zone]

    def _set_rate(self, zone: str, size: int, state: str, now: float) -> None:
        if state == PARTIAL_DISRUPTION:
            qps = self.secondary_eviction_rate if size > self.large_cluster_threshold else 0.0
        else:
            qps = self.eviction_rate
        self._tainter(zone).swap(qps, now)

    async def _tainting_pass(self, nodes: dict[str, Node]) -> None:
        """kube's doNoExecuteTaintingPass: taint queued nodes as their zone's rate allows."""
        now = self.clock.monotonic()
        for tainter in self._tainters.values():
            while tainter.queue and tainter.try_accept(now):
                name = next(iter(tainter.queue))
                tainter.remove(name)
                node = nodes.get(name)
                if node is None:
                    continue
                ready = self._ready(node)
                status = ready.status if ready is not None else "Unknown"
                if status == "True":
                    continue  # Ready again before its turn came
                taint = TAINT_NOT_READY if status == "False" else TAINT_UNREACHABLE
                try:
                    nodes[name] = await self._sync_taints(node, no_execute={taint})
                except TinykubeError as exc:
                    log.warning("node %s: %s", name, exc)
                    tainter.add(name)  # back of the queue; the next pass tries again

    async def _evict(self, node_names: set[str]) -> None:
        now: datetime = self.clock.now()
        nodes = {
            n.metadata.name: n for n in self.node_store.list() if n.metadata.name in node_names
        }
        self._force_deleted = {k for k in self._force_deleted if self.pod_store.get(k) is not None}
        # Only the pods of nodes that are gone or NoExecute-tainted can be evicted: look those
        # nodes' pods up, never every pod.
        candidates: list[tuple[Pod, Node | None]] = []
        for node_name in self.pods_by_node.nodes():
            node = nodes.get(node_name)
            if node is None or any(t.effect == NO_EXECUTE for t in node.spec.taints):
                candidates += [(p, node) for p in self.pods_by_node.on(node_name)]
        for pod, node in candidates:
            node_name = pod.spec.nodeName
            pod_key = key_of(pod)
            if node is None:
                if pod_key not in self._force_deleted and await self._node_gone(node_name):
                    await self._force_delete(pod, "its node no longer exists")
                continue
            taints = [t for t in node.spec.taints if t.effect == NO_EXECUTE]
            unreachable = any(t.key == TAINT_UNREACHABLE for t in taints)
            if is_terminating(pod):
                if unreachable and pod_key not in self._force_deleted:
                    await self._force_delete(pod, "its node is unreachable")
                continue
            deadline: datetime | None = None
            for taint in taints:
                secs = toleration_seconds(pod, taint, self.default_tolerations)
                if secs is None:
                    continue
                added = ts_to_datetime(taint.timeAdded) if taint.HasField("timeAdded") else now
                taint_deadline = added + timedelta(seconds=secs)
                if deadline is None or taint_deadline < deadline:
                    deadline = taint_deadline
            if deadline is None or now < deadline:
                continue
            await self._event(
                pod, "Normal", "TaintManagerEviction", f"Marking for deletion Pod {pod_key}"
            )
            if unreachable:
                await self._force_delete(pod, "its node is unreachable")
            else:
                try:
                    await self.client.pods.delete(
                        pod.metadata.name, pod.metadata.namespace, uid=pod.metadata.uid
                    )
                    self.on_eviction()
                except NotFoundError:
                    pass
                except TinykubeError as exc:
                    log.warning("evicting %s: %s", pod_key, exc)

    async def _node_gone(self, name: str) -> bool:
        """Confirm with a live read before acting on a cache that may lag."""
        try:
            await self.client.nodes.get(name)
        except NotFoundError:
            return True
        except TinykubeError:
            return False
        return False

    async def _force_delete(self, pod: Pod, why: str) -> None:
        log.info("force-deleting pod %s: %s", key_of(pod), why)
        try:
            await self.client.pods.delete(
                pod.metadata.name,
                pod.metadata.namespace,
                grace_period_seconds=0,
                uid=pod.metadata.uid,
            )
            self._force_deleted.add(key_of(pod))
            self.on_eviction()
        except NotFoundError:
            pass
        except TinykubeError as exc:
            log.warning("force-deleting %s: %s", key_of(pod), exc)

    async def _event(self, obj: object, type_: str, reason: str, message: str) -> None:
        try:
            await self.recorder.record(obj, type_, reason, message)
        except Exception:
            log.debug("could not record event %s", reason, exc_info=True)
