"""The apiserver's in-flight request limit, shared by the gRPC and REST front ends.

kube-apiserver's `--max-requests-inflight` / `--max-mutating-requests-inflight` (defaults 400
and 200, 0 for no limit): at most that many read-only (get, list) and mutating (every other
verb) requests execute at once. One more waits for a seat, as API Priority and Fairness (on by
default in kube-apiserver) queues it, and is refused only if it cannot wait, with
`TOO_MANY_REQUESTS` (HTTP 429 with `Retry-After: 1`; gRPC RESOURCE_EXHAUSTED with the retry hint
in trailing metadata, `tinykube.errors.RETRY_PUSHBACK_KEY`), before it runs, so it is always
safe to send again. Long-running requests (watches, pod logs) are not counted, as
kube-apiserver's long-running check excludes them; neither are the health probes (API Priority
and Fairness' `probes` flow schema sends them to its `exempt` level) nor gRPC health and
reflection.

One limit for everyone would let a flood of Creates from one client crowd out the kubelets'
Lease renewals, after which the node lifecycle controller evicts the pods of healthy nodes. So,
as API Priority and Fairness' bootstrap configuration does, node heartbeats and leader election
get priority levels of their own, with seats beside the general ones:

- `node-high` (flow schema `system-node-high`): Leases in `kube-node-lease` and the nodes/status
  subresource, any verb; ceil(total x 40 / 245) seats (98 at the defaults), total being the sum
  of the two limits and 40 of 245 APF's nominal concurrency shares of `node-high`;
- `leader-election` (`system-leader-election`): get, create and update of Leases in any other
  namespace; ceil(total x 10 / 245) seats (25);
- everything else is `global-default`, limited per kind by the two flags.

A request of a reserved level that finds its level's seats taken borrows a seat of the general
pool of its kind (APF lends unused seats between levels); it is refused only if both are full.
Kubernetes classifies by the requesting user (group `system:nodes`, the controller manager and
scheduler users). tinykube has no authentication yet, so `classify` looks only at the resource,
namespace and verb; the limiter takes the classifier as a parameter so that an identity-based
rule can replace it.

Queuing, APF's shape scaled to tinykube. A request that finds no free seat (`admit` returns
None) waits in `acquire`, in its level's pool, in the FIFO of its flow; the flow is the client
connection (`flow_of_peer`: gRPC's context.peer(), the REST connection's peer address) until
issue 13 brings users, APF's usual distinguisher (the limiter takes the distinguisher as a
parameter). A seat freed by a finishing request is handed straight to a waiter (it never
becomes free while anyone waits, so `admit` needs no check for waiters), taking flows in
turn, round-robin (APF's fair queuing, with every request costing the same), so one client's
flood holds its own requests while the scheduler's Binds and other clients keep their turn.
A waiter is refused after its wait limit (`wait_limit`: a quarter of the caller's time left,
at most `MAX_REQUEST_WAIT`; kube: a quarter of the deadline, at most a minute; reason
`time-out`), and one whose queue is full is refused at once (`queue-full`): 300 per flow (what
one flow can hold in APF: its hand of 6 queues of queueLengthLimit 50) and `LEVEL_QUEUE_LIMIT`
per pool in all (APF: queues x queueLengthLimit). A
queued request of a reserved level waits for a seat of its own level, never behind
global-default's queue. `QueueLimits` holds the bounds; `NO_QUEUING` refuses at once, as
before (reason `concurrency-limit`). Metrics are kube's: apiserver_flowcontrol_current_
inqueue_requests, _request_wait_duration_seconds (only for requests that queued) and
_rejected_requests_total by reason (queue-full, time-out, cancelled, concurrency-limit).

Races: a waiter is decided once, by whichever comes first of a freed seat (`_dispatch`) and
its wait limit (`_expire`), both on the event loop, so a seat is never handed to a waiter that
timed out. A waiter whose task is cancelled (the client went away, its deadline passed) leaves
its queue; if it was handed a seat in the same turn, before its task ran, it passes the seat
on (`release`), and a cancelled future in a queue is skipped, never handed a seat.

Write-stream messages of one connection (`MessageGate`, `ConnectionSlots`). gRPC core holds a
unary call until the event loop accepts it, one at a time, so a burst of calls reaches the limit
as fast as the loop takes them; a write stream has a read outstanding, so a burst of messages on
many streams (a process of hollow kubelets renewing 2,500 Leases on a stream each) would reach
it all at once, fill its connection's queue and be refused, each refusal retried a second
later. So at most `MAX_STREAM_MESSAGES_PER_CONNECTION` messages of one connection are handed to
handlers at once (kube-apiserver's HTTP/2 MAX_CONCURRENT_STREAMS does the same for a
connection's requests); a stream whose message waits for its turn reads no further, and the
rest of the burst waits in HTTP/2 flow control. The messages that pass meet unary calls in the
same flow (their connection's) of the same limit: one queue per connection, taken in turn.

grpc.aio's own `maximum_concurrent_rpcs` stays unset (no limit, as before): it would count the
watch streams, which live for hours, and refuses with RESOURCE_EXHAUSTED and no retry hint.
Calls gRPC core holds before the event loop accepts them are bounded by tinykube.serving's
pending-request settings and the callers' deadlines (bench/overload.py counts any CANCELLED
answer, the way core drops a call silently).

Concurrency: the event loop is the only thread that touches a `Limiter`, no locks. `admit` and
`release` are a compare and a few integer increments when nobody waits; a waiter costs a
future, a timer handle and a deque slot. Metrics read the counters when scraped.
"""

from __future__ import annotations

import asyncio
import functools
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from apiserver.metrics import Metrics

# kube-apiserver's request kinds (the request_kind label of its inflight metrics).
READ_ONLY = "readOnly"
MUTATING = "mutating"

# Verbs that do not change anything (kube's nonMutatingRequestVerbs); every other verb, the
# subresources' included, is mutating.
NON_MUTATING_VERBS = frozenset({"get", "list", "watch"})

NODE_LEASE_NAMESPACE = "kube-node-lease"
_COORDINATION = "coordination.k8s.io"

# API Priority and Fairness' bootstrap nominal concurrency shares: node-high 40 and
# leader-election 10 of 245 over all levels (system 30, workload-high 40, workload-low 100,
# global-default 20, catch-all 5, exempt 0).
_TOTAL_SHARES = 245
_NODE_HIGH_SHARES = 40
_LEADER_ELECTION_SHARES = 10

UNLIMITED = sys.maxsize

# API Priority and Fairness' queuing, scaled to tinykube. APF's bootstrap levels have 16-128
# queues of up to 50 requests (queueLengthLimit) and deal each flow a hand of 4-6 of them
# (handSize), each request joining the shortest queue of its hand: a flow alone holds up to
# hand x 50 waiting requests. tinykube gives every flow one queue of that length (a hand of 6, as
# global-default and node-high; leader-election has 4), and bounds all the waiters of a level, where
# APF bounds them by its number of queues x 50. (50 per flow left 750 of bench/overload.py's hostile
# 1,000 Creates in flight spinning through refusals, in front of the renewals: p99 1.1 s.)
QUEUE_LENGTH = 50
HAND_SIZE = 6
QUEUE_LENGTH_LIMIT = HAND_SIZE * QUEUE_LENGTH
LEVEL_QUEUE_LIMIT = 1000
# kube lets a request wait a quarter of its deadline (60 s by default), at most a minute;
# tinykube's calls carry deadlines of 5-30 s, so the wait is a quarter of that, at most this.
MAX_REQUEST_WAIT = 3.0

# kube's reasons (the reason label of apiserver_flowcontrol_rejected_requests_total).
QUEUE_FULL = "queue-full"
TIME_OUT = "time-out"
CANCELLED = "cancelled"
CONCURRENCY_LIMIT = "concurrency-limit"  # refused at once: queuing is off
REJECT_REASONS = (QUEUE_FULL, TIME_OUT, CANCELLED, CONCURRENCY_LIMIT)


class RequestInfo(NamedTuple):
    """What the classifier sees of a request (kube's RequestInfo, the parts tinykube has)."""

    verb: str  # Kubernetes' verb: get list watch create update patch delete deletecollection
    api_group: str  # "" for the core group
    resource: str  # plural: "pods", "leases"
    subresource: str  # "status", "binding", "eviction", "log" or ""
    namespace: str  # "" for cluster-scoped kinds and all-namespace requests


class PriorityLevel(NamedTuple):
    """A priority level and the flow schema that sends requests to it (metric labels)."""

    name: str
    flow_schema: str


GLOBAL_DEFAULT = PriorityLevel("global-default", "global-default")
NODE_HIGH = PriorityLevel("node-high", "system-node-high")
LEADER_ELECTION = PriorityLevel("leader-election", "system-leader-election")
LEVELS = (NODE_HIGH, LEADER_ELECTION, GLOBAL_DEFAULT)

Classifier = Callable[[RequestInfo], PriorityLevel]


def classify(info: RequestInfo) -> PriorityLevel:
    """The priority level of a request, by resource, namespace and verb (no identities yet)."""
    if info.api_group == _COORDINATION and info.resource == "leases":
        if info.namespace == NODE_LEASE_NAMESPACE:
            return NODE_HIGH
        if info.verb in ("get", "create", "update"):
            return LEADER_ELECTION
        return GLOBAL_DEFAULT
    if info.resource == "nodes" and info.subresource == "status" and not info.api_group:
        return NODE_HIGH
    return GLOBAL_DEFAULT


def is_mutating(verb: str) -> bool:
    return verb not in NON_MUTATING_VERBS


class Waiter:
    """A request waiting in its flow's queue for a seat (APF's queued request)."""

    __slots__ = ("by_level", "flow", "future", "mutating", "queued", "since", "timer")

    def __init__(
        self,
        future: asyncio.Future[Seat | None],
        flow: str,
        mutating: bool,
        by_level: list[int],
        since: float,
    ) -> None:
        self.future = future
        self.flow = flow
        self.mutating = mutating
        self.by_level = by_level
        self.since = since
        self.queued = True
        self.timer: Timer | None = None


class Pool:
    """Seats of one priority level (the global default has one pool per request kind), and the
    requests waiting for them: one FIFO per flow in `flows`, whose order is the round-robin
    order (a flow served moves to the back)."""

    __slots__ = ("flows", "inflight", "level", "limit", "name", "waiting")

    def __init__(self, name: str, limit: int, level: PriorityLevel) -> None:
        self.name = name
        self.limit = limit
        self.level = level
        self.inflight = 0
        self.flows: dict[str, deque[Waiter]] = {}
        self.waiting = 0


def reserved_seats(total: int, shares: int) -> int:
    """APF's nominal concurrency limit of a level: ceil(total x shares / all shares)."""
    return math.ceil(total * shares / _TOTAL_SHARES)


class Timer(Protocol):
    def cancel(self) -> None: ...


# `call_later(delay, callback)`: the event loop's by default; tests pass a fake.
CallLater = Callable[[float, Callable[[], None]], Timer]


def _loop_call_later(delay: float, callback: Callable[[], None]) -> Timer:
    return asyncio.get_running_loop().call_later(delay, callback)


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


class QueueLimits(NamedTuple):
    """How long and how many requests may wait (APF's queuing configuration, scaled)."""

    per_flow: int = QUEUE_LENGTH_LIMIT
    per_level: int = LEVEL_QUEUE_LIMIT
    max_wait: float = MAX_REQUEST_WAIT


DEFAULT_QUEUES = QueueLimits()
NO_QUEUING = QueueLimits(0, 0, 0.0)


def wait_limit(max_wait: float, deadline_left: float | None) -> float:
    """How long a request may wait: a quarter of its time left, at most `max_wait` (kube: a
    quarter of the request's deadline, 15 s without one, at most a minute)."""
    if deadline_left is None:
        return max_wait
    return min(max_wait, deadline_left / 4.0)


def flow_of_peer(info: RequestInfo, peer: str) -> str:
    """The flow a request belongs to: its connection, until there are users to tell apart
    (APF's flow schemas distinguish by user or namespace)."""
    return peer


FlowDistinguisher = Callable[[RequestInfo, str], str]


class Limiter:
    """Counts executing requests per pool; `admit` takes a free seat or refuses, `acquire`
    waits for one in the request's flow queue.

    `max_read_only` and `max_mutating` are the two flags (0: that kind is not limited). With
    both 0 the limiter is off (`enabled` False): kube-apiserver then installs no filter.
    `queues` bounds the waiting (`NO_QUEUING`: refuse at once, as before).
    """

    def __init__(
        self,
        max_read_only: int,
        max_mutating: int,
        *,
        classifier: Classifier = classify,
        distinguisher: FlowDistinguisher = flow_of_peer,
        queues: QueueLimits = DEFAULT_QUEUES,
        metrics: Metrics | None = None,
        call_later: CallLater = _loop_call_later,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = max_read_only > 0 or max_mutating > 0
        self.classify = classifier
        self.distinguish = distinguisher
        self.queues = queues
        self._call_later = call_later
        self._monotonic = monotonic
        total = max(0, max_read_only) + max(0, max_mutating)
        self.general = (
            Pool(READ_ONLY, max_read_only if max_read_only > 0 else UNLIMITED, GLOBAL_DEFAULT),
            Pool(MUTATING, max_mutating if max_mutating > 0 else UNLIMITED, GLOBAL_DEFAULT),
        )
        self.reserved = {
            NODE_HIGH: Pool(NODE_HIGH.name, reserved_seats(total, _NODE_HIGH_SHARES), NODE_HIGH),
            LEADER_ELECTION: Pool(
                LEADER_ELECTION.name,
                reserved_seats(total, _LEADER_ELECTION_SHARES),
                LEADER_ELECTION,
            ),
        }
        # Executing requests per kind over every level: [read-only, mutating].
        self.executing = [0, 0]
        self._executing_by_level: dict[PriorityLevel, list[int]] = {level: [0] for level in LEVELS}
        self._rejected: dict[tuple[PriorityLevel, str], Any] = {}
        self._waited: dict[tuple[PriorityLevel, bool], Any] = {}
        if metrics is not None:
            self._register(metrics)

    def _register(self, metrics: Metrics) -> None:
        executing = self.executing
        metrics.current_inflight.labels(READ_ONLY).set_function(lambda: executing[0])
        metrics.current_inflight.labels(MUTATING).set_function(lambda: executing[1])
        for level, count in self._executing_by_level.items():
            labels = (level.name, level.flow_schema)
            metrics.flowcontrol_executing.labels(*labels).set_function(_reader(count))
            pools = [p for p in (*self.general, *self.reserved.values()) if p.level == level]
            metrics.flowcontrol_inqueue.labels(*labels).set_function(_waiting(pools))
            for reason in REJECT_REASONS:
                self._rejected[(level, reason)] = metrics.flowcontrol_rejected.labels(
                    *labels, reason
                )
            for execute in (True, False):
                self._waited[(level, execute)] = metrics.flowcontrol_wait_duration.labels(
                    *labels, "true" if execute else "false"
                )

    def _reject(self, level: PriorityLevel, reason: str) -> None:
        counter = self._rejected.get((level, reason))
        if counter is not None:
            counter.inc()

    def admit(self, info: RequestInfo) -> Seat | None:
        """A free seat for the request, or None if there is none now (then `acquire` queues
        it). Release the seat with `release` when the request is done, whatever its outcome.
        This is the fast path: a compare and three increments."""
        mutating = info.verb not in NON_MUTATING_VERBS
        level = self.classify(info)
        general = self.general[mutating]
        pool = self.reserved.get(level, general)
        if pool.inflight >= pool.limit:
            if pool is general or general.inflight >= general.limit:
                return None
            pool = general  # borrow a general seat of the request's kind
        pool.inflight += 1
        self.executing[mutating] += 1
        by_level = self._executing_by_level[level]
        by_level[0] += 1
        return Seat(pool, mutating, by_level)

    async def acquire(
        self, info: RequestInfo, peer: str, deadline_left: float | None
    ) -> Seat | None:
        """A seat for the request, waiting for one in its flow's queue if need be; None to
        refuse it (its queue is full, or it waited its limit: `wait_limit`). Call `admit`
        first: this is the slow path. `peer` names the connection; `deadline_left` is the
        caller's time left in seconds (None: no deadline)."""
        seat = self.admit(info)
        if seat is not None:
            return seat
        mutating = info.verb not in NON_MUTATING_VERBS
        level = self.classify(info)
        pool = self.reserved.get(level, self.general[mutating])
        limits = self.queues
        limit = wait_limit(limits.max_wait, deadline_left)
        if limits.per_flow <= 0 or limits.per_level <= 0 or limits.max_wait <= 0:
            self._reject(level, CONCURRENCY_LIMIT)
            return None
        if limit <= 0:  # the caller has no time left to wait
            self._reject(level, TIME_OUT)
            return None
        flow = self.distinguish(info, peer)
        queue = pool.flows.get(flow)
        if (queue is not None and len(queue) >= limits.per_flow) or (
            pool.waiting >= limits.per_level
        ):
            self._reject(level, QUEUE_FULL)
            return None
        waiter = Waiter(
            asyncio.get_running_loop().create_future(),
            flow,
            mutating,
            self._executing_by_level[level],
            self._monotonic(),
        )
        if queue is None:
            queue = pool.flows[flow] = deque()
        queue.append(waiter)
        pool.waiting += 1
        waiter.timer = self._call_later(limit, functools.partial(self._expire, pool, waiter))
        try:
            seat = await waiter.future
        except asyncio.CancelledError:
            waiter.timer.cancel()
            future = waiter.future
            if waiter.queued:
                self._unqueue(pool, waiter)
                self._reject(level, CANCELLED)
            elif future.done() and not future.cancelled():
                handed = future.result()
                if handed is not None:
                    # Handed a seat in the same turn as the caller left: pass it on.
                    self.release(handed)
            raise
        waited = self._waited.get((level, seat is not None))
        if waited is not None:
            waited.observe(self._monotonic() - waiter.since)
        return seat

    def _unqueue(self, pool: Pool, waiter: Waiter) -> None:
        waiter.queued = False
        pool.waiting -= 1
        queue = pool.flows[waiter.flow]
        queue.remove(waiter)
        if not queue:
            del pool.flows[waiter.flow]

    def _expire(self, pool: Pool, waiter: Waiter) -> None:
        """The waiter's wait limit passed: out of its queue, refused (APF's time-out)."""
        if not waiter.queued:
            return
        self._unqueue(pool, waiter)
        if waiter.future.done():  # cancelled, its task not run yet
            self._reject(pool.level, CANCELLED)
        else:
            self._reject(pool.level, TIME_OUT)
            waiter.future.set_result(None)

    def release(self, seat: Seat) -> None:
        pool = seat.pool
        pool.inflight -= 1
        self.executing[seat.mutating] -= 1
        seat.by_level[0] -= 1
        if pool.flows:
            self._dispatch(pool)

    def _dispatch(self, pool: Pool) -> None:
        """Hand free seats to waiters, one flow at a time in turn, each flow's oldest first."""
        flows = pool.flows
        while flows and pool.inflight < pool.limit:
            flow = next(iter(flows))
            queue = flows.pop(flow)
            waiter = queue.popleft()
            if queue:
                flows[flow] = queue  # to the back of the round
            waiter.queued = False
            pool.waiting -= 1
            if waiter.timer is not None:
                waiter.timer.cancel()
            if waiter.future.done():
                # Cancelled while queued; its task has not run yet and finds it unqueued.
                self._reject(pool.level, CANCELLED)
                continue
            pool.inflight += 1
            self.executing[waiter.mutating] += 1
            waiter.by_level[0] += 1
            waiter.future.set_result(Seat(pool, waiter.mutating, waiter.by_level))


def _reader(cell: list[int]) -> Callable[[], float]:
    return lambda: cell[0]


def _waiting(pools: list[Pool]) -> Callable[[], float]:
    return lambda: sum(p.waiting for p in pools)


class Seat(NamedTuple):
    pool: Pool
    mutating: bool
    by_level: list[int]


# ---- write-stream messages per connection -----------------------------------------------------

# Write-stream messages of one connection handed to handlers at once, over all its streams.
# kube-apiserver admits at most 100 requests of one HTTP/2 connection at once (its
# MAX_CONCURRENT_STREAMS, Go's client default; more wait in the client's transport), and a
# flow of API Priority and Fairness may queue 300 (`QUEUE_LENGTH_LIMIT`): so a connection's burst
# never fills its own queue (queue-full refusals, each retried a second later), and holds at most
# a tenth of a level's `LEVEL_QUEUE_LIMIT`. bench/RESULTS.md, session 13 (streamflow), measured.
MAX_STREAM_MESSAGES_PER_CONNECTION = 100


class _Slot:
    """A message waiting for its connection's slot: `future` is True once handed one, False
    when its deadline passed first (decided once: the timer and `release` both check)."""

    __slots__ = ("future", "timer")

    def __init__(self, future: asyncio.Future[bool]) -> None:
        self.future = future
        self.timer: Timer | None = None


class ConnectionSlots:
    """The write-stream messages of one connection (peer) that run at once, at most `limit`.

    A stream takes a slot for each message it reads (`take`, else `wait`) before handing the
    message to its handler, and the slot is given back when the handler has the answer
    (`release`). A stream waiting for a slot reads nothing more, so the rest of a burst waits
    in HTTP/2 flow control (gRPC core stops widening a stream's window while nobody reads it),
    as a unary call waits unaccepted in core, instead of in the in-flight limit's queues. The
    waiting messages are served first come first served, whatever their stream: as a stream
    has at most one message waiting, the connection's streams take turns. A freed slot is
    handed straight to the oldest waiter, so `take` succeeds only when nobody waits.

    Why not asyncio.Semaphore under asyncio.timeout: CPython 3.11.7's Semaphore hands a freed
    slot to the oldest waiter without letting a newcomer jump it, and passes on a slot whose
    waiter was cancelled, as this does; but its deadline would be the event loop's (the
    tests' fake timers could not drive it: they would wait in real time), `take` would be a
    coroutine per message where it is a call, the waiting count is private there, and a
    waiter handed a slot in the same turn as its deadline passes is refused (the slot passed
    on), where here whichever comes first decides once.
    """

    __slots__ = (
        "_call_later",
        "limit",
        "monotonic",
        "peer",
        "running",
        "streams",
        "waiters",
        "waiting",
    )

    def __init__(
        self,
        peer: str,
        limit: int,
        call_later: CallLater,
        monotonic: Callable[[], float] = _loop_time,
    ) -> None:
        self.peer = peer
        self.limit = limit
        self.running = 0
        self.waiting = 0  # live waiters; `waiters` may also hold ones already decided
        self.waiters: deque[_Slot] = deque()
        self.streams = 0
        self._call_later = call_later
        # The clock of the streams' message deadlines (the event loop's: handlers run under
        # asyncio.timeout_at of them), `call_later`'s.
        self.monotonic = monotonic

    def take(self) -> bool:
        """A slot if one is free (nobody waits then)."""
        if self.running < self.limit:
            self.running += 1
            return True
        return False

    async def wait(self, left: float | None) -> bool:
        """Wait for a slot, at most `left` seconds (None: no deadline); False if the time
        passed first (the message is then answered DEADLINE_EXCEEDED, never run)."""
        if left is not None and left <= 0:
            return False
        slot = _Slot(asyncio.get_running_loop().create_future())
        self.waiters.append(slot)
        self.waiting += 1
        if left is not None:
            slot.timer = self._call_later(left, functools.partial(self._expire, slot))
        try:
            return await slot.future
        except asyncio.CancelledError:
            # The stream ended. Handed a slot in the same turn: give it back.
            if slot.timer is not None:
                slot.timer.cancel()
            future = slot.future
            if future.done() and not future.cancelled():
                if future.result():
                    self.release()
            else:  # still queued: `release` skips a cancelled future
                future.cancel()
                self.waiting -= 1
            raise

    def _expire(self, slot: _Slot) -> None:
        if not slot.future.done():
            self.waiting -= 1
            slot.future.set_result(False)  # left in `waiters`: `release` skips it

    def release(self) -> None:
        """Give a slot back: to the oldest live waiter, else free."""
        waiters = self.waiters
        while waiters:
            slot = waiters.popleft()
            if slot.future.done():  # expired or cancelled: decided already
                continue
            self.waiting -= 1
            if slot.timer is not None:
                slot.timer.cancel()
            slot.future.set_result(True)  # the slot passes on: `running` stays
            return
        self.running -= 1


class MessageGate:
    """`ConnectionSlots` by peer (`context.peer()`, the in-flight limit's flow): a stream gets
    its connection's with `open` and gives it up with `close`; the last stream of a
    connection to close forgets it. `limit` 0: no bound (`enabled` False).

    Concurrency: the event loop only, as `Limiter`."""

    def __init__(
        self,
        limit: int = MAX_STREAM_MESSAGES_PER_CONNECTION,
        *,
        call_later: CallLater = _loop_call_later,
        monotonic: Callable[[], float] = _loop_time,
    ) -> None:
        self.limit = limit
        self.enabled = limit > 0
        self._call_later = call_later
        self._monotonic = monotonic
        self.connections: dict[str, ConnectionSlots] = {}

    def open(self, peer: str) -> ConnectionSlots:
        slots = self.connections.get(peer)
        if slots is None:
            slots = self.connections[peer] = ConnectionSlots(
                peer, self.limit, self._call_later, self._monotonic
            )
        slots.streams += 1
        return slots

    def waiting(self) -> int:
        """Messages waiting for their connection's slot now, over every connection (the
        gauge apiserver_write_stream_messages_waiting)."""
        return sum(slots.waiting for slots in self.connections.values())

    def close(self, slots: ConnectionSlots) -> None:
        slots.streams -= 1
        if slots.streams <= 0 and self.connections.get(slots.peer) is slots:
            del self.connections[slots.peer]


# What kube-apiserver answers a request over the limit: its body and Retry-After, in seconds.
TOO_MANY_REQUESTS = "Too many requests, please try again later."
RETRY_AFTER_SECONDS = 1
