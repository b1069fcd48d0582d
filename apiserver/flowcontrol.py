"""The apiserver's in-flight request limit, shared by the gRPC and REST front ends.

kube-apiserver's `--max-requests-inflight` / `--max-mutating-requests-inflight` (defaults 400
and 200, 0 for no limit): at most that many read-only (get, list) and mutating (every other
verb) requests execute at once; one more is refused at once, before it runs, with
`TOO_MANY_REQUESTS` (HTTP 429 with `Retry-After: 1`; gRPC RESOURCE_EXHAUSTED with the retry hint
in trailing metadata, `tinykube.errors.RETRY_PUSHBACK_KEY`), so it is always safe to send again.
Long-running requests (watches, pod logs) are not counted, as kube-apiserver's long-running
check excludes them; neither are the health probes (API Priority and Fairness' `probes` flow
schema sends them to its `exempt` level) nor gRPC health and reflection.

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

grpc.aio's own `maximum_concurrent_rpcs` stays unset (no limit, as before): it would count the
watch streams, which live for hours, and refuses with RESOURCE_EXHAUSTED and no retry hint.
Calls gRPC core holds before the event loop accepts them are bounded by tinykube.serving's
pending-request settings and the callers' deadlines; refusing here is cheap, so under a flood
that queue drains instead of growing (bench/overload.py counts any CANCELLED answer, the way
core drops a call silently).

Concurrency: the event loop is the only thread that touches a `Limiter`; `admit` and `release`
are a compare and an integer increment each, no locks. Metrics read the counters when scraped.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

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


class Pool:
    """Seats of one priority level (the global default has one pool per request kind)."""

    __slots__ = ("inflight", "limit", "name")

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.inflight = 0


def reserved_seats(total: int, shares: int) -> int:
    """APF's nominal concurrency limit of a level: ceil(total x shares / all shares)."""
    return math.ceil(total * shares / _TOTAL_SHARES)


class Limiter:
    """Counts executing requests per pool; `admit` refuses one over the limit.

    `max_read_only` and `max_mutating` are the two flags (0: that kind is not limited). With
    both 0 the limiter is off (`enabled` False): kube-apiserver then installs no filter.
    """

    def __init__(
        self,
        max_read_only: int,
        max_mutating: int,
        *,
        classifier: Classifier = classify,
        metrics: Metrics | None = None,
    ) -> None:
        self.enabled = max_read_only > 0 or max_mutating > 0
        self.classify = classifier
        total = max(0, max_read_only) + max(0, max_mutating)
        self.general = (
            Pool(READ_ONLY, max_read_only if max_read_only > 0 else UNLIMITED),
            Pool(MUTATING, max_mutating if max_mutating > 0 else UNLIMITED),
        )
        self.reserved = {
            NODE_HIGH: Pool(NODE_HIGH.name, reserved_seats(total, _NODE_HIGH_SHARES)),
            LEADER_ELECTION: Pool(
                LEADER_ELECTION.name, reserved_seats(total, _LEADER_ELECTION_SHARES)
            ),
        }
        # Executing requests per kind over every level: [read-only, mutating].
        self.executing = [0, 0]
        self._executing_by_level: dict[PriorityLevel, list[int]] = {level: [0] for level in LEVELS}
        self._rejected: dict[PriorityLevel, Any] = {}
        self._metrics = metrics
        if metrics is not None:
            self._register(metrics)

    def _register(self, metrics: Metrics) -> None:
        executing = self.executing
        metrics.current_inflight.labels(READ_ONLY).set_function(lambda: executing[0])
        metrics.current_inflight.labels(MUTATING).set_function(lambda: executing[1])
        for level, count in self._executing_by_level.items():
            metrics.flowcontrol_executing.labels(level.name, level.flow_schema).set_function(
                _reader(count)
            )
            self._rejected[level] = metrics.flowcontrol_rejected.labels(
                level.name, level.flow_schema, "concurrency-limit"
            )

    def admit(self, info: RequestInfo) -> Seat | None:
        """A seat for the request, or None to refuse it (over the limit). Release the seat with
        `release` when the request is done, whatever its outcome."""
        mutating = info.verb not in NON_MUTATING_VERBS
        level = self.classify(info)
        general = self.general[mutating]
        pool = self.reserved.get(level, general)
        if pool.inflight >= pool.limit:
            if pool is general or general.inflight >= general.limit:
                rejected = self._rejected.get(level)
                if rejected is not None:
                    rejected.inc()
                return None
            pool = general  # borrow a general seat of the request's kind
        pool.inflight += 1
        self.executing[mutating] += 1
        by_level = self._executing_by_level[level]
        by_level[0] += 1
        return Seat(pool, mutating, by_level)

    def release(self, seat: Seat) -> None:
        seat.pool.inflight -= 1
        self.executing[seat.mutating] -= 1
        seat.by_level[0] -= 1


def _reader(cell: list[int]) -> Callable[[], float]:
    return lambda: cell[0]


class Seat(NamedTuple):
    pool: Pool
    mutating: bool
    by_level: list[int]


# What kube-apiserver answers a request over the limit: its body and Retry-After, in seconds.
TOO_MANY_REQUESTS = "Too many requests, please try again later."
RETRY_AFTER_SECONDS = 1
