"""The scheduling algorithm of one pod: PreFilter, Filter, PostFilter, PreScore, Score,
NormalizeScore, weighted sum and selection, over the cache's node columns.

`Profile` instantiates the configured plugins and sorts them by extension point.
`Algorithm.schedule(pod)` returns a `ScheduleResult` (the chosen node, or a FitError-shaped
message such as `0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint
{dedicated: gpu}.`), following kube-scheduler:
- each node reports only its first failing filter, in plugin order; reasons are counted and
  sorted as strings;
- only numFeasibleNodesToFind feasible nodes are scored (adaptive percentageOfNodesToScore:
  all nodes below 100, else max(5, 50 - n/125) percent, at least 100), starting at an index
  that rotates from one pod to the next;
- a single feasible node is taken without scoring; ties go to the first feasible node in that
  rotated order.
An `Attempt` for each pod (the first `explain_nodes` nodes, every plugin's verdict and scores)
is kept in a bounded LRU for the Explain RPC.

Synchronous and CPU-only; runs on the event loop between awaits (the cycle is serial).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.cache import EventKind, NodeTable, SchedulerCache
from scheduler.config import ProfileConfig
from scheduler.framework import (
    BindPlugin,
    Code,
    CycleState,
    EnqueueExtensions,
    EventHint,
    FilterPlugin,
    FilterResult,
    Handle,
    NormalizeScorePlugin,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    Registry,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from scheduler.plugins import default_registry
from scheduler.podinfo import PodInfo

ERR_NO_NODES = "no nodes available to schedule pods"


class Profile:
    """The plugins of one profile, instantiated and grouped by extension point."""

    def __init__(
        self,
        cfg: ProfileConfig | None = None,
        handle: Handle | None = None,
        registry: Registry | None = None,
    ) -> None:
        cfg = cfg or ProfileConfig()
        registry = registry or default_registry()
        self.handle = handle or Handle()
        self.scheduler_name = cfg.scheduler_name
        self.plugins: list[Any] = []
        self.weights: dict[str, int] = {}
        for name, weight in cfg.plugins:
            self.plugins.append(registry.create(name, cfg.args.get(name, {}), self.handle))
            self.weights[name] = weight
        ps = self.plugins
        self.pre_enqueues: list[Any] = [p for p in ps if isinstance(p, PreEnqueuePlugin)]
        self.pre_filters: list[Any] = [p for p in ps if isinstance(p, PreFilterPlugin)]
        self.filters: list[Any] = [p for p in ps if isinstance(p, FilterPlugin)]
        self.post_filters: list[Any] = [p for p in ps if isinstance(p, PostFilterPlugin)]
        self.pre_scores: list[Any] = [p for p in ps if isinstance(p, PreScorePlugin)]
        self.scorers: list[Any] = [p for p in ps if isinstance(p, ScorePlugin)]
        self.normalizers: set[str] = {
            getattr(p, "name", "") for p in ps if isinstance(p, NormalizeScorePlugin)
        }
        self.reservers: list[Any] = [p for p in ps if isinstance(p, ReservePlugin)]
        self.permits: list[Any] = [p for p in ps if isinstance(p, PermitPlugin)]
        self.pre_binds: list[Any] = [p for p in ps if isinstance(p, PreBindPlugin)]
        self.binders: list[Any] = [p for p in ps if isinstance(p, BindPlugin)]
        self.post_binds: list[Any] = [p for p in ps if isinstance(p, PostBindPlugin)]
        self.filter_names = [p.name for p in self.filters]
        self.handle.filter_names = tuple(self.filter_names)
        # leading node-static filters are evaluated together and cached per pod signature
        self.static_prefix = 0
        while (
            self.static_prefix < len(self.filters) and self.filters[self.static_prefix].node_static
        ):
            self.static_prefix += 1

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """The first PreEnqueue plugin's rejection, or success: may the pod be queued?"""
        for p in self.pre_enqueues:
            status: Status = p.pre_enqueue(pod)
            if not status.ok:
                return status
        return Status()

    def plugins_for_events(self) -> dict[str, frozenset[Any]]:
        return {p.name: p.events for p in self.plugins}

    def plugins_for_hints(self) -> dict[str, Mapping[EventKind, EventHint]]:
        """The queueing hints of the plugins that give them (kube's QueueingHintFns)."""
        out: dict[str, Mapping[EventKind, EventHint]] = {}
        for p in self.plugins:
            if isinstance(p, EnqueueExtensions):
                out[getattr(p, "name", "")] = p.queueing_hints()
        return out


@dataclass
class Attempt:
    """The last scheduling attempt of a pod, kept raw (references, no copies) for Explain.

    `names` is the slot -> node name snapshot of the attempt (shared between attempts while
    nodes do not change); `view` turns it into per-node verdicts and scores on demand.
    """

    pod_key: str
    timestamp: float
    names: tuple[str, ...]
    filter_names: list[str]
    results: list[FilterResult | None]
    ran: int  # filters [0, ran) ran; later ones were not needed (every node had failed)
    candidates: npt.NDArray[np.intp]
    scores: list[tuple[str, int, npt.NDArray[np.int64]]]
    totals: npt.NDArray[np.int64] | None
    feasible: int
    evaluated: int
    selected: str | None
    message: str

    def view(self, max_nodes: int) -> AttemptView:
        slots = [i for i, nm in enumerate(self.names) if nm][:max_nodes]
        filters: dict[str, list[str | None]] = {}
        for i, name in enumerate(self.filter_names):
            if i >= self.ran:
                filters[name] = [None] * len(slots)
                continue
            res = self.results[i]
            if res is None:
                filters[name] = [""] * len(slots)
            else:
                filters[name] = [", ".join(res.explain(int(res.codes[s]))) for s in slots]
        pos = {int(c): k for k, c in enumerate(self.candidates.tolist())}
        scores: dict[str, tuple[int, list[int | None]]] = {}
        for name, weight, arr in self.scores:
            scores[name] = (
                weight,
                [int(arr[pos[s]]) if s in pos else None for s in slots],
            )
        totals: list[int | None] = [
            int(self.totals[pos[s]]) if self.totals is not None and s in pos else None
            for s in slots
        ]
        return AttemptView(
            [self.names[s] for s in slots], filters, scores, totals, [s in pos for s in slots]
        )


@dataclass
class AttemptView:
    nodes: list[str]
    filters: dict[str, list[str | None]]  # plugin -> per node: "" passed, reasons, None not run
    scores: dict[str, tuple[int, list[int | None]]]  # plugin -> (weight, normalized per node)
    totals: list[int | None]
    candidate: list[bool]  # feasible and among the nodes scored


@dataclass
class ScheduleResult:
    node: str | None
    status: Status
    message: str = ""
    feasible: int = 0
    evaluated: int = 0
    unschedulable_plugins: frozenset[str] = frozenset()
    state: CycleState = field(default_factory=CycleState)
    nominated_node: str | None = None  # set by preemption: victims are in the state


def num_feasible_nodes_to_find(num_all: int, percentage: int) -> int:
    """kube-scheduler's adaptive percentageOfNodesToScore."""
    if num_all < 100 or percentage >= 100:
        return num_all
    adaptive = percentage
    if adaptive <= 0:
        adaptive = max(5, 50 - num_all // 125)
    return max(100, num_all * adaptive // 100)


class Algorithm:
    def __init__(
        self,
        cache: SchedulerCache,
        profile: Profile,
        *,
        percentage_of_nodes_to_score: int = 0,
        explain_nodes: int = 100,
        explain_pods: int = 500,
    ) -> None:
        self.cache = cache
        self.profile = profile
        profile.handle.filter_node = self.filter_node  # preemption's dry run
        self.percentage = percentage_of_nodes_to_score
        self.next_start = 0
        self.explain_nodes = explain_nodes
        self.explain_pods = explain_pods
        self.attempts: OrderedDict[str, Attempt] = OrderedDict()
        self._static: dict[tuple[str, bytes], tuple[int, Any]] = {}
        self._names: tuple[int, tuple[str, ...]] = (-1, ())

    # ----- node-static result reuse ------------------------------------------------------
    def _static_result(self, kind: str, plugin: Any, pod: PodInfo, compute: Any) -> Any:
        key = (kind + plugin.name, pod.signature)
        gen = self.cache.nodes.node_generation
        hit = self._static.get(key)
        if hit is not None and hit[0] == gen:
            return hit[1]
        if len(self._static) > 256:
            self._static.clear()
        out = compute()
        self._static[key] = (gen, out)
        return out

    # ----- the cycle ---------------------------------------------------------------------
    def schedule(self, pod: PodInfo, *, record: bool = True) -> ScheduleResult:
        reserved = self.cache.reserve_nominated(pod)
        try:
            return self._schedule(pod, record)
        finally:
            self.cache.release_nominated(reserved)

    def _schedule(self, pod: PodInfo, record: bool) -> ScheduleResult:
        nodes = self.cache.nodes
        prof = self.profile
        state = CycleState()
        total_nodes = nodes.count
        if total_nodes == 0:
            return ScheduleResult(
                None, Status.unschedulable(ERR_NO_NODES), ERR_NO_NODES, state=state
            )
        failed = self._run_pre_filters(state, pod)
        if failed is not None:
            p, st = failed
            if st.rejected:
                msg = f"0/{total_nodes} nodes are available: {total_nodes} {st.message()}."
                # As kube-scheduler, PostFilter runs after a PreFilter rejection too: every
                # node has the PreFilter's status, resolvable only if it said Unschedulable.
                resolvable = nodes.valid[: nodes.n] & (st.code == Code.UNSCHEDULABLE)
                nominated, tail = self._post_filter(state, pod, nodes, resolvable)
                return ScheduleResult(
                    None,
                    st,
                    msg + tail,
                    unschedulable_plugins=frozenset({p.name}),
                    state=state,
                    nominated_node=nominated,
                )
            return ScheduleResult(None, st, st.message(), state=state)

        n = nodes.n
        narrowed: FilterResult | None = None
        num_nodes = total_nodes
        if state.node_names is not None:
            narrowed, rejected = self._narrowed(state)
            if rejected is not None:
                msg = f"0/{total_nodes} nodes are available: {total_nodes} {rejected.message()}."
                return ScheduleResult(
                    None,
                    rejected,
                    msg,
                    unschedulable_plugins=frozenset(state.narrowed_by),
                    state=state,
                )
            num_nodes = int(np.count_nonzero(narrowed.codes == 0))
        results: list[FilterResult | None] = [None] * len(prof.filters)
        alive = self._static_prefix(state, pod, results)
        if narrowed is not None:
            alive = alive & (narrowed.codes == 0)
        alive, ran = self._run_filters(state, pod, alive, results)

        feasible_slots = np.flatnonzero(alive)
        n_feasible = len(feasible_slots)
        # kube sizes the search by the nodes PreFilter left, not by the whole cluster
        to_find = num_feasible_nodes_to_find(num_nodes, self.percentage)
        start = self.next_start if self.next_start < n else 0
        cut = int(np.searchsorted(feasible_slots, start)) if start else 0
        if n_feasible > to_find:
            # the first to_find feasible nodes from the rotating start, wrapping around
            candidates = feasible_slots[cut : cut + to_find]
            if len(candidates) < to_find:
                rest = feasible_slots[: to_find - len(candidates)]
                candidates = np.concatenate((candidates, rest))
            self.next_start = (int(candidates[-1]) + 1) % n
        elif cut:
            candidates = np.concatenate((feasible_slots[cut:], feasible_slots[:cut]))
        else:
            candidates = feasible_slots

        result: ScheduleResult
        totals: npt.NDArray[np.int64] | None = None
        score_parts: list[tuple[str, int, npt.NDArray[np.int64]]] = []
        if len(candidates) == 0:
            msg, plugins, resolvable = self._fit_error(total_nodes, results, narrowed, state)
            nominated, tail = self._post_filter(state, pod, nodes, resolvable)
            msg += tail
            result = ScheduleResult(
                None,
                Status.unschedulable(msg),
                msg,
                0,
                total_nodes,
                frozenset(plugins),
                state,
                nominated_node=nominated,
            )
        elif len(candidates) == 1:
            result = ScheduleResult(
                nodes.names[int(candidates[0])], Status(), "", 1, total_nodes, state=state
            )
        else:
            totals = np.zeros(len(candidates), np.int64)
            for p in prof.pre_scores:
                if p.pre_score(state, pod, nodes).code == Code.SKIP:
                    state.skip_score.add(p.name)
            for p in prof.scorers:
                if p.name in state.skip_score:
                    continue
                if p.node_static:
                    full = self._static_result(
                        "s", p, pod, lambda p=p: p.score(state, pod, nodes, None)
                    )
                    s = full[candidates]
                else:
                    s = p.score(state, pod, nodes, candidates)
                if p.name in prof.normalizers:
                    s = p.normalize(state, pod, s)
                w = prof.weights.get(p.name, 1)
                totals += s * w
                score_parts.append((p.name, w, s))
            best = int(np.argmax(totals))
            result = ScheduleResult(
                nodes.names[int(candidates[best])],
                Status(),
                "",
                n_feasible,
                total_nodes,
                state=state,
            )
        if record:
            names = prof.filter_names
            if narrowed is not None:
                # the PreFilter narrowing shows as a verdict of its own, ahead of the filters
                names = ["PreFilter", *names]
                results = [narrowed, *results]
                ran += 1
            self._record(pod, names, results, ran, candidates, totals, score_parts, result)
        return result

    def _run_pre_filters(self, state: CycleState, pod: PodInfo) -> tuple[Any, Status] | None:
        """The PreFilter plugins in order (a SKIP skips that plugin's Filter); the first that
        does not succeed, with its status, or None."""
        for p in self.profile.pre_filters:
            st: Status = p.pre_filter(state, pod, self.cache.nodes)
            if st.code == Code.SKIP:
                state.skip_filter.add(p.name)
            elif not st.ok:
                return p, st
        return None

    def _run_filters(
        self,
        state: CycleState,
        pod: PodInfo,
        alive: npt.NDArray[np.bool_],
        results: list[FilterResult | None],
    ) -> tuple[npt.NDArray[np.bool_], int]:
        """The filters after the node-static prefix, over the slots still `alive`, until none
        is; fills `results`, returns the slots that passed and how many filters ran."""
        prof = self.profile
        nodes = self.cache.nodes
        filters = prof.filters
        for i in range(prof.static_prefix, len(filters)):
            p = filters[i]
            if p.name in state.skip_filter:
                continue
            if p.node_static:
                res = self._static_result("f", p, pod, lambda p=p: p.filter(state, pod, nodes))
            else:
                res = p.filter(state, pod, nodes)
            results[i] = res
            if res is not None:
                alive = alive & (res.codes == 0)
                if not alive.any():
                    return alive, i + 1
        return alive, len(filters)

    def filter_node(self, pod: PodInfo, slot: int) -> Status:
        """kube's RunFilterPluginsWithNominatedPods for one node, as the cache stands now (the
        preemption dry run changes it): PreFilter and every Filter, through the cycle's own
        code, with the pods nominated for this cycle counted. Success, or the status of the
        node's first failing filter (PreFilter's when it rejects), naming the plugin."""
        nodes = self.cache.nodes
        state = CycleState()
        failed = self._run_pre_filters(state, pod)
        if failed is not None:
            p, st = failed
            return Status(st.code, st.reasons, st.plugin or p.name)
        narrowed: FilterResult | None = None
        if state.node_names is not None:
            narrowed, rejected = self._narrowed(state)
            if rejected is not None:
                return rejected
            if narrowed.codes[slot]:
                return Status(narrowed.code, narrowed.explain(1), "+".join(state.narrowed_by))
        results: list[FilterResult | None] = [None] * len(self.profile.filters)
        alive = self._static_prefix(state, pod, results)
        if alive[slot]:
            only = np.zeros(nodes.n, bool)
            only[slot] = True
            alive, _ = self._run_filters(state, pod, only, results)
            if alive[slot]:
                return Status()
        for plugin, res in zip(self.profile.filters, results, strict=True):
            if res is not None and res.codes[slot]:
                code = int(res.codes[slot])
                status = res.code
                if not res.bitmask and code in res.unresolvable_codes:
                    status = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                return Status(status, res.explain(code), plugin.name)
        return Status()  # not reached: a slot that is not alive failed some filter

    def _narrowed(self, state: CycleState) -> tuple[FilterResult, Status | None]:
        """kube's PreFilterResult: nodes outside the plugins' set are "node(s) didn't satisfy
        plugin(s) [...]" (UnschedulableAndUnresolvable); an empty intersection of several sets
        rejects the pod before Filter, as RunPreFilterPlugins does."""
        nodes = self.cache.nodes
        names = state.node_names or frozenset()
        plugins = sorted(set(state.narrowed_by))
        if not names:
            reason = (
                f"node(s) didn't satisfy plugin {plugins[0]}"
                if len(plugins) == 1
                else f"node(s) didn't satisfy plugin(s) [{' '.join(plugins)}] simultaneously"
            )
            return FilterResult(np.ones(nodes.n, np.int32), (reason,)), Status.unschedulable(reason)
        codes = np.ones(nodes.n, np.int32)
        for name in names:
            slot = nodes.index.get(name)
            if slot is not None:
                codes[slot] = 0
        reason = f"node(s) didn't satisfy plugin(s) [{' '.join(plugins)}]"
        return FilterResult(codes, (reason,), code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE), None

    def _static_prefix(
        self, state: CycleState, pod: PodInfo, results: list[FilterResult | None]
    ) -> npt.NDArray[np.bool_]:
        """The leading node-static filters, run once per pod signature and node generation;
        returns the nodes they let through and fills their results."""
        prof = self.profile
        nodes = self.cache.nodes
        k = prof.static_prefix
        skipped = tuple(p.name for p in prof.filters[:k] if p.name in state.skip_filter)
        key = ("prefix" + "|".join(skipped), pod.signature)
        gen = nodes.node_generation
        hit = self._static.get(key)
        if hit is not None and hit[0] == gen:
            alive, prefix = hit[1]
            results[:k] = prefix
            return alive  # type: ignore[no-any-return]
        alive = nodes.valid[: nodes.n].copy()
        prefix_results: list[FilterResult | None] = []
        for p in prof.filters[:k]:
            res = None if p.name in skipped else p.filter(state, pod, nodes)
            prefix_results.append(res)
            if res is not None:
                alive &= res.codes == 0
        if len(self._static) > 256:
            self._static.clear()
        self._static[key] = (gen, (alive, prefix_results))
        results[:k] = prefix_results
        return alive

    def _post_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeTable, resolvable: npt.NDArray[np.bool_]
    ) -> tuple[str | None, str]:
        """RunPostFilterPlugins: the node a plugin nominated (preemption), else the failed
        plugins' reasons as the tail kube-scheduler appends to the FitError message
        (" preemption: 0/3 nodes are available: ..."); no tail when one succeeded."""
        reasons: list[str] = []
        for pf in self.profile.post_filters:
            nominated, st = pf.post_filter(state, pod, nodes, resolvable)
            if nominated is not None or st.ok:
                return nominated, ""
            reasons.extend(st.reasons)
            if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                break
        return None, (" " + ", ".join(reasons)) if reasons else ""

    def _fit_error(
        self,
        total: int,
        results: list[FilterResult | None],
        narrowed: FilterResult | None = None,
        state: CycleState | None = None,
    ) -> tuple[str, set[str], npt.NDArray[np.bool_]]:
        """kube-scheduler's FitError message: each node's first failing filter's reasons,
        counted and sorted as strings; also which nodes failed only resolvably. Nodes a
        PreFilter plugin ruled out were never filtered: they count under its reason."""
        nodes = self.cache.nodes
        remaining = nodes.valid[: nodes.n].copy()
        resolvable = np.zeros(nodes.n, bool)
        reasons: Counter[str] = Counter()
        plugins: set[str] = set()
        names = [p.name for p in self.profile.filters]
        if narrowed is not None and state is not None:
            results = [narrowed, *results]
            names = ["+".join(state.narrowed_by), *names]
        for i, res in enumerate(results):
            if res is None:
                continue
            bad = remaining & (res.codes != 0)
            if not bad.any():
                continue
            remaining &= ~bad
            if res.code == Code.UNSCHEDULABLE:
                if res.unresolvable_codes:
                    hard = np.isin(res.codes, np.array(sorted(res.unresolvable_codes)))
                    resolvable |= bad & ~hard
                else:
                    resolvable |= bad
            if narrowed is not None and i == 0 and state is not None:
                plugins.update(state.narrowed_by)
            else:
                plugins.add(names[i])
            codes, counts = np.unique(res.codes[bad], return_counts=True)
            for code, c in zip(codes.tolist(), counts.tolist(), strict=True):
                for r in res.explain(code):
                    reasons[r] += c
        parts = sorted(f"{c} {r}" for r, c in reasons.items())
        return f"0/{total} nodes are available: {', '.join(parts)}.", plugins, resolvable

    def _names_snapshot(self) -> tuple[str, ...]:
        nodes = self.cache.nodes
        if self._names[0] != nodes.node_generation:
            self._names = (nodes.node_generation, tuple(nodes.names))
        return self._names[1]

    def _record(
        self,
        pod: PodInfo,
        filter_names: list[str],
        results: list[FilterResult | None],
        ran: int,
        candidates: npt.NDArray[np.intp],
        totals: npt.NDArray[np.int64] | None,
        score_parts: list[tuple[str, int, npt.NDArray[np.int64]]],
        result: ScheduleResult,
    ) -> None:
        att = Attempt(
            pod.key,
            self.cache.clock.now().timestamp(),
            self._names_snapshot(),
            filter_names,
            results,
            ran,
            candidates,
            score_parts,
            totals,
            result.feasible,
            result.evaluated,
            result.node,
            result.message,
        )
        attempts = self.attempts
        attempts[pod.key] = att
        attempts.move_to_end(pod.key)
        if len(attempts) > self.explain_pods:
            attempts.popitem(last=False)

    def forget_attempt(self, key: str) -> None:
        self.attempts.pop(key, None)
