"""The scheduling framework: typed statuses, one small protocol per extension point, a registry.

Modelled on kube-scheduler's framework, with one deliberate difference: Filter and Score
plugins see every node at once. `Filter` returns a `FilterResult` (a reason code per node slot,
0 = fits) and `Score` returns an array of scores, so a pod costs a few numpy operations per
plugin instead of a Python call per node. Expected outcomes (a node does not fit) are statuses,
never exceptions.

Plugins marked `node_static = True` read only the pod's signature and node-static columns; the
framework caches their results per (pod signature, node generation), which is how identical
pods share a cycle's work.

Queueing hints (kube's QueueingHintFn): a plugin may give, per cluster event it registered for,
a function that tells the queue whether that event (with the changed object before and after)
can make a pod the plugin rejected schedulable; see `EnqueueExtensions` and scheduler/queue.py.

Everything here is synchronous and pure except `BindPlugin.bind` (async, talks to the API).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from scheduler.cache import EventKind, NodeTable
from scheduler.podinfo import PodInfo

MAX_NODE_SCORE = 100


class Code(IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5


@dataclass(frozen=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def message(self) -> str:
        return ", ".join(self.reasons)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)

    @classmethod
    def error(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, reasons, plugin)


SUCCESS = Status()
SKIP = Status(Code.SKIP)


@dataclass(frozen=True)
class FilterResult:
    """A reason code per node slot: 0 fits.

    With `bitmask`, a code is an OR of bits and bit i means `reasons[i]` (a node can fail for
    several reasons, e.g. Insufficient cpu and memory); otherwise code c means `reasons[c-1]`.
    `code` is the status of every failing node, except the (non-bitmask) codes listed in
    `unresolvable_codes`, which are UnschedulableAndUnresolvable whatever `code` says (a plugin
    whose reasons differ in whether preemption can help, as PodTopologySpread's).
    """

    codes: npt.NDArray[np.int32]
    reasons: Sequence[str]
    bitmask: bool = False
    code: Code = Code.UNSCHEDULABLE
    unresolvable_codes: frozenset[int] = frozenset()

    def explain(self, code: int) -> tuple[str, ...]:
        if code == 0:
            return ()
        if self.bitmask:
            return tuple(r for i, r in enumerate(self.reasons) if code & (1 << i))
        return (self.reasons[code - 1],)


class QueueingHint(IntEnum):
    """kube's QueueingHint: whether an event may make a rejected pod schedulable."""

    QUEUE_SKIP = 0
    QUEUE = 1


QUEUE = QueueingHint.QUEUE
QUEUE_SKIP = QueueingHint.QUEUE_SKIP

# assigned-pod events: their objects are PodInfo and they happen in the pod's namespace
POD_EVENTS = frozenset({EventKind.POD_ADD, EventKind.POD_LABEL, EventKind.POD_DELETE})


@dataclass(frozen=True)
class NamespaceObject:
    """A namespace as events carry it: its name and labels."""

    name: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class ClusterEvent:
    """One change the queue hears of: its kind and the object before and after (None on an
    add, respectively a delete). Pods are PodInfo, nodes node_pb2.Node, namespaces
    NamespaceObject; both None when the caller could not tell (a hint then is not asked)."""

    kind: EventKind
    old: Any = None
    new: Any = None

    @property
    def namespace(self) -> str | None:
        """The namespace of a changed pod (None for cluster-scoped objects)."""
        if self.kind not in POD_EVENTS:
            return None
        obj = self.new if self.new is not None else self.old
        return obj.namespace if obj is not None else None


HintFn = Callable[[PodInfo, ClusterEvent], QueueingHint]


@dataclass(frozen=True)
class EventHint:
    """A QueueingHintFn and what lets the queue ask it of fewer pods (for pod events).

    `own_namespace(pod)`: True when only changes to pods in `pod`'s own namespace can make
    `fn` say Queue for it (None: changes anywhere can), so the queue keeps the pod in its
    namespace's bucket. `reaches(event)`: the namespaces of waiting pods, besides the changed
    pod's own, whose own-namespace buckets the event must be shown to (None: all of them); not
    given, only the changed pod's namespace. `never(pod)`: True when no event of this kind can
    make `fn` say Queue for `pod` (an anti-affinity pod and an assigned pod's add), so the queue
    does not even keep the pod in that event's bucket."""

    fn: HintFn
    own_namespace: Callable[[PodInfo], bool] | None = None
    reaches: Callable[[ClusterEvent], frozenset[str] | None] | None = None
    never: Callable[[PodInfo], bool] | None = None


@runtime_checkable
class EnqueueExtensions(Protocol):
    def queueing_hints(self) -> Mapping[EventKind, EventHint]:
        """kube's EventsToRegister with their QueueingHintFns: a hint per event in `events`
        (an event of `events` without one moves the plugin's rejected pods unconditionally)."""
        ...


class CycleState:
    """Per-attempt scratch space shared by a pod's plugins (PreFilter writes, Filter reads)."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()
        # kube's PreFilterResult: the only nodes worth filtering (None: all), and which
        # PreFilter plugins narrowed them
        self.node_names: frozenset[str] | None = None
        self.narrowed_by: list[str] = []

    def narrow(self, plugin: str, names: frozenset[str]) -> None:
        """A PreFilter plugin says only `names` can fit; several such sets intersect."""
        self.node_names = names if self.node_names is None else self.node_names & names
        self.narrowed_by.append(plugin)

    def write(self, key: str, val: Any) -> None:
        self._data[key] = val

    def read(self, key: str) -> Any:
        return self._data.get(key)


# ----- plugin protocols (one per extension point) ----------------------------------------
class Plugin(Protocol):
    name: ClassVar[str]
    # events that may make a pod this plugin rejected schedulable again
    events: ClassVar[frozenset[EventKind]]
    node_static: ClassVar[bool]


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Whether the pod may enter activeQ; a rejected pod waits, gated, for its own update."""
        ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status: ...


@runtime_checkable
class FilterPlugin(Protocol):
    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> FilterResult | None:
        """None means every node passes."""
        ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    def post_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeTable, resolvable: npt.NDArray[np.bool_]
    ) -> tuple[str | None, Status]:
        """Runs when no node fits; may nominate a node (preemption).

        `resolvable` marks the nodes whose first failing filter said Unschedulable (not
        UnschedulableAndUnresolvable): removing pods could make the pod fit there.
        """
        ...


@runtime_checkable
class PreScorePlugin(Protocol):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> Status: ...


@runtime_checkable
class ScorePlugin(Protocol):
    def score(
        self, state: CycleState, pod: PodInfo, nodes: NodeTable, idx: npt.NDArray[np.intp] | None
    ) -> npt.NDArray[np.int64]:
        """Scores for slots `idx` (None: all slots, for node-static plugins)."""
        ...


@runtime_checkable
class NormalizeScorePlugin(Protocol):
    def normalize(
        self, state: CycleState, pod: PodInfo, scores: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]: ...


@runtime_checkable
class ReservePlugin(Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    def permit(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class PreBindPlugin(Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class BindPlugin(Protocol):
    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status: ...


@runtime_checkable
class PostBindPlugin(Protocol):
    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None: ...


def default_normalize(scores: npt.NDArray[np.int64], reverse: bool) -> npt.NDArray[np.int64]:
    """kube-scheduler's DefaultNormalizeScore: scale to 0..100 by the max, optionally reversed."""
    if len(scores) == 0:
        return scores
    top = int(scores.max())
    if top == 0:
        if reverse:
            return np.full(len(scores), MAX_NODE_SCORE, np.int64)
        return scores
    out = scores * MAX_NODE_SCORE // top
    if reverse:
        out = MAX_NODE_SCORE - out
    return out


# ----- registry -------------------------------------------------------------------------
@dataclass
class Handle:
    """What plugins may use from the outside world (the binder's API call)."""

    bind: Callable[[PodInfo, str], Awaitable[None]] | None = None
    # the scheduler cache (pods on nodes), for PostFilter plugins such as preemption
    cache: Any = None
    # the Services and ReplicaSets that select pods (scheduler/workloads.py), for
    # PodTopologySpread's default constraints
    workloads: Any = None
    # the PodDisruptionBudgets (an informer store: `.list()`), for preemption; None: none
    pdbs: Any = None
    # the profile's Filter plugins by name, in order (set by the Profile)
    filter_names: tuple[str, ...] = ()
    # PreFilter and Filter of a pod on one node slot as the cache stands, the cycle's own code
    # (set by the Algorithm): kube's RunFilterPluginsWithNominatedPods, for preemption
    filter_node: Callable[[PodInfo, int], Status] | None = None


PluginFactory = Callable[[Mapping[str, Any], Handle], Any]


@dataclass
class Registry:
    factories: dict[str, PluginFactory] = field(default_factory=dict)

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self.factories:
            raise ValueError(f"plugin {name!r} registered twice")
        self.factories[name] = factory

    def __contains__(self, name: object) -> bool:
        return name in self.factories

    def create(self, name: str, args: Mapping[str, Any], handle: Handle) -> Any:
        return self.factories[name](args, handle)
