"""The scheduling queue: activeQ, backoffQ and the unschedulable set, as kube-scheduler's.

- activeQ: a heap by priority (higher first), then creation time (older first).
- backoffQ: pods whose last attempt failed wait 1 s, doubling per attempt up to 10 s.
- unschedulable: pods rejected by filters wait until a cluster event that one of the
  rejecting plugins registered for (node added, node allocatable/labels/taints changed, an
  assigned pod added, relabelled or deleted) moves them, or until they have waited 5 minutes.
  A pod that hit such an event while it was being scheduled goes to backoffQ instead, so the
  event is not lost; an event none of its rejecting plugins registered for does not count (as
  kube-scheduler with queueing hints: a bind confirmation, an AssignedPodAdd, does not send a
  pod rejected for lack of cpu to backoffQ). Unschedulable pods are also kept in one bucket per
  event they wait for, so an event costs the pods it moves, not the whole set.
- queueing hints (kube's isPodWorthRequeuing): when every rejecting plugin that registered for
  an event gave a hint for it, the pod waits in a hinted bucket and the event (with the changed
  object before and after) moves it only if one of those hints says Queue (a hint that raises
  counts as Queue); an event without its objects moves it as if unhinted. Hinted buckets are
  split by namespace where the hints allow (`EventHint.own_namespace`): an assigned pod's change
  in namespace A asks the pods of A (and of the namespaces the hints say it reaches) and those
  whose terms look beyond their own namespace, never the rest; a pod no event of a kind can
  help (`EventHint.never`: an anti-affinity pod and a bind) is not in that kind's bucket at
  all. A pod that was in flight when
  one of its events arrived goes to backoffQ without asking the hints (the cycle does not yield
  between pop and its verdict, so only tests and a failed bind see this).
- a pod deleted while queued (or while in flight) leaves the queue and is never returned.
- gated: pods a PreEnqueue plugin refused (SchedulingGates: the pod still has gates) are held
  apart, as kube's unschedulablePods entries marked gated: no cluster event, flush or timeout
  moves them, only an update of the pod itself after which PreEnqueue lets it in (to activeQ:
  a gated pod has made no attempt, so it owes no backoff).

Pure and single-threaded (the scheduler's event loop); time comes from an injectable clock.
`pop` awaits an asyncio.Event; `flush` (called periodically by the owner, or by tests with a
FakeClock) moves pods whose backoff has completed or whose unschedulable wait is over.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.cache import EventKind
from scheduler.framework import QUEUE, ClusterEvent, EventHint, Status
from scheduler.podinfo import PodInfo
from tinykube.clock import Clock

log = logging.getLogger(__name__)

UNSCHEDULABLE_MAX_WAIT = 300.0
ANY_NAMESPACE = "*"  # the hinted bucket of pods that changes in any namespace may help

# per event whose every registered rejecting plugin gave a hint: those (plugin, hint) pairs
HintPlan = Mapping[EventKind, tuple[tuple[str, EventHint], ...]]


@dataclass
class QueuedPod:
    info: PodInfo
    added: float  # monotonic time of the last (re)queue
    initial: float  # monotonic time the pod first entered the queue (e2e latency)
    attempts: int = 0
    unschedulable_plugins: frozenset[str] = frozenset()
    # the events that move it out of the unschedulable set (None: any event)
    waits_for: frozenset[EventKind] | None = None
    # the events that move it only if a hint says so, with the hints to ask
    hinted: HintPlan = field(default_factory=dict)
    # per hinted event, the bucket it waits in: its namespace or ANY_NAMESPACE
    scopes: dict[EventKind, str] = field(default_factory=dict)
    cycle: int = 0  # scheduling cycle in which the pod was last popped
    version: int = field(default=0)


class ShutDown(Exception):
    pass


class SchedulingQueue:
    def __init__(
        self,
        clock: Clock | None = None,
        *,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        plugin_events: Mapping[str, frozenset[EventKind]] | None = None,
        plugin_hints: Mapping[str, Mapping[EventKind, EventHint]] | None = None,
        unschedulable_max_wait: float = UNSCHEDULABLE_MAX_WAIT,
        pre_enqueue: Callable[[PodInfo], Status] | None = None,
    ) -> None:
        self.clock = clock or Clock()
        self.pre_enqueue = pre_enqueue
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.plugin_events = dict(plugin_events or {})
        self.plugin_hints = {name: dict(h) for name, h in (plugin_hints or {}).items()}
        # per event, the `reaches` of every plugin's hint for it (pod events' extra buckets)
        self._reaches: dict[EventKind, list[Callable[[ClusterEvent], frozenset[str] | None]]] = {}
        for hints in self.plugin_hints.values():
            for ev, hint in hints.items():
                if hint.reaches is not None:
                    self._reaches.setdefault(ev, []).append(hint.reaches)
        self._plans: dict[frozenset[str], tuple[frozenset[EventKind] | None, HintPlan]] = {}
        self.unschedulable_max_wait = unschedulable_max_wait
        self._seq = itertools.count()
        self._active: list[tuple[int, float, int, str, int]] = []
        self._backoff: list[tuple[float, int, str, int]] = []
        # key -> (queue name, QueuedPod); queue name is "active", "backoff", "unschedulable"
        # or "gated"
        self._where: dict[str, tuple[str, QueuedPod]] = {}
        self._unschedulable: dict[str, QueuedPod] = {}  # subset of _where, for event moves
        # event -> the unschedulable pods waiting for it; _any_event: those waiting for any
        self._waiting: dict[EventKind, dict[str, QueuedPod]] = {}
        self._any_event: dict[str, QueuedPod] = {}
        # event -> bucket (namespace or ANY_NAMESPACE) -> the pods its hints decide for
        self._hinted: dict[EventKind, dict[str, dict[str, QueuedPod]]] = {}
        # the scheduling cycle in which each event kind was last seen (pods in flight then)
        self._event_cycle: dict[EventKind, int] = {}
        self._in_flight: dict[str, QueuedPod] = {}
        self._deleted_in_flight: set[str] = set()
        self.scheduling_cycle = 0
        self.move_request_cycle = -1  # cycle of the last event of any kind
        self._wakeup = asyncio.Event()
        self._closed = False
        self._last_leftover_scan = float("-inf")

    # ----- sizes ------------------------------------------------------------------------
    def lengths(self) -> dict[str, int]:
        out = {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
        for q, _ in self._where.values():
            out[q] += 1
        return out

    def __contains__(self, key: object) -> bool:
        return key in self._where or key in self._in_flight

    def where(self, key: str) -> str | None:
        if key in self._in_flight:
            return "in-flight"
        w = self._where.get(key)
        return w[0] if w else None

    # ----- internal moves ---------------------------------------------------------------
    def _set(self, qname: str, qp: QueuedPod) -> None:
        qp.version += 1
        key = qp.info.key
        self._where[key] = (qname, qp)
        if qname == "unschedulable":
            self._unschedulable[key] = qp
            if qp.waits_for is None:
                self._any_event[key] = qp
            else:
                for ev in qp.waits_for:
                    self._waiting.setdefault(ev, {})[key] = qp
            for ev, scope in qp.scopes.items():
                self._hinted.setdefault(ev, {}).setdefault(scope, {})[key] = qp
        else:
            self._forget_unschedulable(key)

    def _forget_unschedulable(self, key: str) -> None:
        qp = self._unschedulable.pop(key, None)
        if qp is None:
            return
        for ev, scope in qp.scopes.items():
            buckets = self._hinted.get(ev)
            if buckets is None:
                continue
            bucket = buckets.get(scope)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del buckets[scope]
        if qp.waits_for is None:
            self._any_event.pop(key, None)
            return
        for ev in qp.waits_for:
            bucket = self._waiting.get(ev)
            if bucket is not None:
                bucket.pop(key, None)

    def _drop(self, key: str) -> None:
        self._where.pop(key, None)
        self._forget_unschedulable(key)

    def _plan(self, plugins: frozenset[str]) -> tuple[frozenset[EventKind] | None, HintPlan]:
        """What may help a pod these plugins rejected: the events that move it whatever they
        carry (None: anything, when no plugin is named), and those only hints may move it on,
        with the hints (an event some registered plugin gave no hint for is unconditional,
        as kube's isPodWorthRequeuing queues when a registered plugin has no QueueingHintFn).
        Memoised: pods are rejected by few distinct plugin sets."""
        plan = self._plans.get(plugins)
        if plan is not None:
            return plan
        if not plugins:
            plan = (None, {})
        else:
            unconditional: set[EventKind] = set()
            hinted: dict[EventKind, list[tuple[str, EventHint]]] = {}
            for p in sorted(plugins):
                hints = self.plugin_hints.get(p, {})
                for ev in self.plugin_events.get(p, frozenset()):
                    hint = hints.get(ev)
                    if hint is None:
                        unconditional.add(ev)
                    else:
                        hinted.setdefault(ev, []).append((p, hint))
            plan = (
                frozenset(unconditional),
                {ev: tuple(hs) for ev, hs in hinted.items() if ev not in unconditional},
            )
        if len(self._plans) > 256:
            self._plans.clear()
        self._plans[plugins] = plan
        return plan

    @staticmethod
    def _scopes(info: PodInfo, hinted: HintPlan) -> dict[EventKind, str]:
        """The bucket the pod waits in for each hinted event: its own namespace when every
        hint says only changes there can help it, else ANY_NAMESPACE; none for an event every
        hint says can never help it."""
        out: dict[EventKind, str] = {}
        for ev, hints in hinted.items():
            if all(h.never is not None and h.never(info) for _, h in hints):
                continue
            own = all(h.own_namespace is not None and h.own_namespace(info) for _, h in hints)
            out[ev] = info.namespace if own else ANY_NAMESPACE
        return out

    def _push_active(self, qp: QueuedPod) -> None:
        self._set("active", qp)
        heapq.heappush(
            self._active,
            (-qp.info.priority, qp.info.created, next(self._seq), qp.info.key, qp.version),
        )
        self._wakeup.set()

    def backoff_duration(self, attempts: int) -> float:
        d = self.initial_backoff
        for _ in range(1, attempts):
            d *= 2
            if d >= self.max_backoff:
                return self.max_backoff
        return min(d, self.max_backoff)

    def _backoff_expiry(self, qp: QueuedPod) -> float:
        return qp.added + self.backoff_duration(max(qp.attempts, 1))

    def _push_backoff(self, qp: QueuedPod) -> None:
        self._set("backoff", qp)
        heapq.heappush(
            self._backoff, (self._backoff_expiry(qp), next(self._seq), qp.info.key, qp.version)
        )

    def _push_unschedulable(self, qp: QueuedPod) -> None:
        self._set("unschedulable", qp)

    def _is_backing_off(self, qp: QueuedPod) -> bool:
        return qp.attempts > 0 and self._backoff_expiry(qp) > self.clock.monotonic()

    def _move_from_unschedulable(self, qp: QueuedPod) -> None:
        if self._is_backing_off(qp):
            self._push_backoff(qp)
        else:
            self._push_active(qp)

    def gated_status(self, info: PodInfo) -> Status | None:
        """The PreEnqueue rejection that keeps the pod out of activeQ, or None."""
        if self.pre_enqueue is None:
            return None
        status = self.pre_enqueue(info)
        return None if status.ok else status

    def gated_message(self, key: str) -> str | None:
        """Why a gated pod waits (its PreEnqueue rejection), or None if it is not gated."""
        cur = self._where.get(key)
        if cur is None or cur[0] != "gated":
            return None
        status = self.gated_status(cur[1].info)
        return status.message() if status is not None else None

    # ----- informer-facing --------------------------------------------------------------
    def add(self, info: PodInfo) -> None:
        """A new pending pod (or one seen again after a relist)."""
        key = info.key
        if key in self._in_flight:
            self._in_flight[key].info = info
            return
        cur = self._where.get(key)
        if cur is not None:
            self.update(info)
            return
        now = self.clock.monotonic()
        qp = QueuedPod(info, now, now)
        if self.gated_status(info) is not None:
            self._set("gated", qp)
        else:
            self._push_active(qp)

    def update(self, info: PodInfo) -> None:
        key = info.key
        if key in self._in_flight:
            self._in_flight[key].info = info
            return
        cur = self._where.get(key)
        if cur is None:
            self.add(info)
            return
        qname, qp = cur
        changed = qp.info.pod.spec != info.pod.spec or (
            qp.info.pod.metadata.labels != info.pod.metadata.labels
        )
        qp.info = info
        if qname == "gated" or changed:
            gated = self.gated_status(info) is not None
            if qname == "gated":
                if not gated:
                    # Its latency counts from now: the wait for its gates is not scheduling.
                    qp.added = qp.initial = self.clock.monotonic()
                    self._push_active(qp)
                return
            if gated:
                self._set("gated", qp)  # heap entries go stale
                return
        if qname == "unschedulable" and changed:
            self._move_from_unschedulable(qp)
        elif qname == "active":
            self._push_active(qp)  # priority may have changed; old heap entry goes stale
        elif qname == "backoff":
            self._push_backoff(qp)

    def delete(self, key: str) -> None:
        if key in self._in_flight:
            self._deleted_in_flight.add(key)
        self._drop(key)  # heap entries become stale and are skipped

    # ----- scheduler-facing -------------------------------------------------------------
    def pop_nowait(self) -> QueuedPod | None:
        while self._active:
            _, _, _, key, version = heapq.heappop(self._active)
            cur = self._where.get(key)
            if cur is None or cur[0] != "active" or cur[1].version != version:
                continue
            qp = cur[1]
            self._drop(key)
            self.scheduling_cycle += 1
            qp.cycle = self.scheduling_cycle
            qp.attempts += 1
            self._in_flight[key] = qp
            return qp
        return None

    async def pop(self) -> QueuedPod:
        while True:
            if self._closed:
                raise ShutDown()
            qp = self.pop_nowait()
            if qp is not None:
                return qp
            self._wakeup.clear()
            await self._wakeup.wait()

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()

    def done(self, key: str) -> None:
        """The pod's cycle ended and it was bound or dropped (not requeued)."""
        self._in_flight.pop(key, None)
        self._deleted_in_flight.discard(key)

    def _finish(self, qp: QueuedPod) -> bool:
        key = qp.info.key
        self._in_flight.pop(key, None)
        if key in self._deleted_in_flight:
            self._deleted_in_flight.discard(key)
            return False
        return key not in self._where

    def add_unschedulable(self, qp: QueuedPod, plugins: frozenset[str]) -> None:
        """The pod failed its cycle because no node fits."""
        if not self._finish(qp):
            return
        qp.unschedulable_plugins = plugins
        qp.waits_for, qp.hinted = self._plan(plugins)
        qp.scopes = self._scopes(qp.info, qp.hinted) if qp.hinted else {}
        qp.added = self.clock.monotonic()
        if qp.waits_for is None:
            missed = self.move_request_cycle >= qp.cycle
        else:
            missed = any(
                self._event_cycle.get(ev, -1) >= qp.cycle
                for ev in itertools.chain(qp.waits_for, qp.hinted)
            )
        if missed:
            self._push_backoff(qp)  # a helpful event arrived during its cycle: retry soon
        else:
            self._push_unschedulable(qp)

    def add_backoff(self, qp: QueuedPod) -> None:
        """The pod's cycle or bind failed with an error: retry after its backoff."""
        if not self._finish(qp):
            return
        qp.added = self.clock.monotonic()
        self._push_backoff(qp)

    def move_on_event(self, event: EventKind, old: Any = None, new: Any = None) -> int:
        """Move unschedulable pods that one of their rejecting plugins would reconsider after
        this event (`old` / `new`: the changed object before and after, for the hints);
        returns how many moved."""
        self.move_request_cycle = self.scheduling_cycle
        self._event_cycle[event] = self.scheduling_cycle
        movers = [*self._waiting.get(event, {}).values(), *self._any_event.values()]
        for qp in movers:
            self._move_from_unschedulable(qp)
        moved = len(movers)
        buckets = self._hinted.get(event)
        if buckets:
            ce = ClusterEvent(event, old, new)
            for qp in list(self._hinted_candidates(ce, buckets)):
                if self._unschedulable.get(qp.info.key) is qp and self._worth_requeuing(qp, ce):
                    self._move_from_unschedulable(qp)
                    moved += 1
        return moved

    def _hinted_candidates(
        self, ce: ClusterEvent, buckets: dict[str, dict[str, QueuedPod]]
    ) -> Iterable[QueuedPod]:
        """The hinted pods an event must be shown to: for an assigned pod's change, those of
        its namespace, of the namespaces the hints say it reaches, and ANY_NAMESPACE's; for
        anything else (nodes, namespaces), all."""
        ns = ce.namespace
        if ns is None:
            return [qp for bucket in buckets.values() for qp in bucket.values()]
        names = {ns, ANY_NAMESPACE}
        for reaches in self._reaches.get(ce.kind, ()):
            try:
                extra = reaches(ce)
            except Exception:
                log.exception("queueing hint scope for %s failed", ce.kind)
                extra = None
            if extra is None:
                return [qp for bucket in buckets.values() for qp in bucket.values()]
            names |= extra
        return [qp for name in names for qp in buckets.get(name, {}).values()]

    def _worth_requeuing(self, qp: QueuedPod, ce: ClusterEvent) -> bool:
        """kube's isPodWorthRequeuing over the hints of the plugins that rejected the pod:
        Queue if any says so; a hint that fails, or an event without its objects, queues."""
        if ce.old is None and ce.new is None:
            return True
        for plugin, hint in qp.hinted.get(ce.kind, ()):
            try:
                if hint.fn(qp.info, ce) == QUEUE:
                    return True
            except Exception:
                log.exception("queueing hint of %s for %s failed", plugin, qp.info.key)
                return True
        return False

    def flush(self) -> None:
        """Backoff-completed pods to activeQ; unschedulable pods waiting too long move on."""
        now = self.clock.monotonic()
        while self._backoff and self._backoff[0][0] <= now:
            _, _, key, version = heapq.heappop(self._backoff)
            cur = self._where.get(key)
            if cur is None or cur[0] != "backoff" or cur[1].version != version:
                continue
            self._push_active(cur[1])
        # the leftover scan is O(queue); once a second is plenty for a 5-minute limit
        if now - self._last_leftover_scan >= 1.0:
            self._last_leftover_scan = now
            for qp in list(self._unschedulable.values()):
                if now - qp.added >= self.unschedulable_max_wait:
                    self._move_from_unschedulable(qp)

    def next_backoff_expiry(self) -> float | None:
        return self._backoff[0][0] if self._backoff else None

    async def run_flusher(self, interval: float = 0.2) -> None:
        """Flush periodically until cancelled (kube-scheduler flushes backoffQ every second)."""
        while not self._closed:
            self.flush()
            await self.clock.sleep(interval)
