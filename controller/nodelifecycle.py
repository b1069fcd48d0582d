"""Node lifecycle: notices dead kubelets, taints their nodes and evicts their pods.

As kube-controller-manager's node lifecycle controller plus its NoExecute taint manager and the
pod GC's "terminating pods on unreachable nodes" rule. Every `monitor_period` seconds `monitor()`:

1. For each node, notes when its Lease in kube-node-lease was last renewed (or its Ready
   heartbeat moved), timed on this process's own monotonic clock so clock skew between machines
   does not matter. Silent for longer than `grace_period`: every condition becomes Unknown
   (Ready: reason NodeStatusUnknown, "Kubelet stopped posting node status.").
2. Keeps the NoExecute taints in step with Ready: Unknown -> node.kubernetes.io/unreachable,
   False -> node.kubernetes.io/not-ready, True -> neither. The kubelet sets Ready=True again
   once it is back, and the taint goes. A cordoned node (spec.unschedulable) carries
   node.kubernetes.io/unschedulable:NoSchedule, as Kubernetes' TaintNodesByCondition adds.
3. Evicts pods from NoExecute-tainted nodes once their toleration runs out (tolerationSeconds
   of a matching toleration; pods with no toleration for the unreachable / not-ready taints get
   the default, as Kubernetes' DefaultTolerationSeconds admission plugin would have added).
   Pods on an unreachable node are force-deleted (grace 0): their kubelet cannot confirm.
   Pods bound to a node that no longer exists are force-deleted too.

One task runs the loop; it only reads informer caches and writes through the client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

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
# The taints this controller owns; users' taints are left alone.
MANAGED_TAINTS = frozenset(
    {
        (TAINT_UNREACHABLE, NO_EXECUTE),
        (TAINT_NOT_READY, NO_EXECUTE),
        (TAINT_UNSCHEDULABLE, NO_SCHEDULE),
    }
)

Node = node_pb2.Node
Pod = pod_pb2.Pod
Lease = lease_pb2.Lease


@dataclass
class _Health:
    renew_seen: str  # serialized lease renewTime last seen
    heartbeat_seen: str  # serialized Ready lastHeartbeatTime last seen
    probe: float  # our monotonic time when either last changed


def _ts_str(msg: object) -> str:
    return str(msg)


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
        on_eviction: Callable[[], object] = lambda: None,
    ) -> None:
        self.on_eviction = on_eviction
        self.client = client
        self.node_store = node_store
        self.lease_store = lease_store
        self.pod_store = pod_store
        self.clock = clock or Clock()
        self.recorder = recorder or NullRecorder()
        self.grace_period = grace_period
        self.default_tolerations = {
            TAINT_UNREACHABLE: default_unreachable_toleration,
            TAINT_NOT_READY: default_not_ready_toleration,
        }
        self._health: dict[str, _Health] = {}
        self._force_deleted: set[str] = set()

    async def monitor(self) -> None:
        """One pass over every node and every pod on a tainted node."""
        nodes = self.node_store.list()
        names = {n.metadata.name for n in nodes}
        for gone in set(self._health) - names:
            del self._health[gone]
        for node in nodes:
            try:
                node = await self._check_health(node)
                node = await self._sync_taints(node)
            except (ConflictError, NotFoundError):
                continue  # the node changed under us: the next pass sees the new version
            except TinykubeError as exc:
                log.warning("node %s: %s", node.metadata.name, exc)
        await self._evict(names)

    def _ready(self, node: Node) -> node_pb2.NodeCondition | None:
        return next((c for c in node.status.conditions if c.type == "Ready"), None)

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
            return node
        if now - health.probe <= self.grace_period:
            return node
        if ready is not None and ready.status == "Unknown":
            return node
        return await self._mark_unknown(node)

    async def _mark_unknown(self, node: Node) -> Node:
        now_ts = datetime_to_ts(self.clock.now())
        updated = Node()
        updated.CopyFrom(node)
        ready_seen = False
        for cond in updated.status.conditions:
            ready_seen = ready_seen or cond.type == "Ready"
            cond.reason = "NodeStatusUnknown"
            cond.message = "Kubelet stopped posting node status."
            if cond.status != "Unknown":
                cond.status = "Unknown"
                cond.lastTransitionTime.CopyFrom(now_ts)
        if not ready_seen:
            updated.status.conditions.append(
                node_pb2.NodeCondition(
                    type="Ready",
                    status="Unknown",
                    reason="NodeStatusNeverUpdated",
                    message="Kubelet never posted node status.",
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

    async def _sync_taints(self, node: Node) -> Node:
        ready = self._ready(node)
        status = ready.status if ready is not None else "Unknown"
        want: list[tuple[str, str]] = []
        condition_taint = {"Unknown": TAINT_UNREACHABLE, "False": TAINT_NOT_READY}.get(status)
        if condition_taint is not None:
            want.append((condition_taint, NO_EXECUTE))
        if node.spec.unschedulable:
            # As Kubernetes' TaintNodesByCondition: a cordoned node carries the taint too.
            want.append((TAINT_UNSCHEDULABLE, NO_SCHEDULE))
        have = [(t.key, t.effect) for t in node.spec.taints if (t.key, t.effect) in MANAGED_TAINTS]
        if sorted(have) == sorted(want):
            return node
        updated = Node()
        updated.CopyFrom(node)
        keep = [t for t in updated.spec.taints if (t.key, t.effect) not in MANAGED_TAINTS]
        kept = {(t.key, t.effect): t for t in updated.spec.taints if (t.key, t.effect) in want}
        del updated.spec.taints[:]
        updated.spec.taints.extend(keep)
        for key, effect in want:
            if (key, effect) in kept:
                updated.spec.taints.append(kept[(key, effect)])
            elif effect == NO_EXECUTE:
                updated.spec.taints.append(
                    node_pb2.Taint(
                        key=key, effect=effect, timeAdded=datetime_to_ts(self.clock.now())
                    )
                )
            else:
                updated.spec.taints.append(node_pb2.Taint(key=key, effect=effect))
        log.info(
            "node %s: managed taints now %s",
            node.metadata.name,
            ", ".join(f"{k}:{e}" for k, e in want) or "none",
        )
        return await self.client.nodes.update(updated)

    async def _evict(self, node_names: set[str]) -> None:
        now: datetime = self.clock.now()
        nodes = {
            n.metadata.name: n for n in self.node_store.list() if n.metadata.name in node_names
        }
        pods = self.pod_store.list()
        self._force_deleted &= {key_of(p) for p in pods}
        for pod in pods:
            node_name = pod.spec.nodeName
            if not node_name:
                continue
            pod_key = key_of(pod)
            node = nodes.get(node_name)
            if node is None:
                if pod_key not in self._force_deleted and await self._node_gone(node_name):
                    await self._force_delete(pod, "its node no longer exists")
                continue
            taints = [t for t in node.spec.taints if t.effect == NO_EXECUTE]
            if not taints:
                continue
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
