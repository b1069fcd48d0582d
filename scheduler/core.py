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

import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.cache import SchedulerCache
from scheduler.config import ProfileConfig
from scheduler.framework import (
    BindPlugin,
    Code,
    CycleState,
    FilterPlugin,
    FilterResult,
    Handle,
    NormalizeScorePlugin,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
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

    def plugins_for_events(self) -> dict[str, frozenset[Any]]:
        return {p.name: p.events for p in self.plugins}


@dataclass
class Attempt:
    """The last scheduling attempt of a pod, for Explain (the first N nodes only)."""

    pod_key: str
    timestamp: float
    node_names: list[str]
    filters: list[tuple[str, FilterResult | None]]  # codes restricted to node_names' slots
    scores: list[tuple[str, int, dict[str, int]]]  # plugin, weight, node -> normalized score
    totals: dict[str, int]
    feasible: int
    evaluated: int
    selected: str | None
    message: str


@dataclass
class ScheduleResult:
    node: str | None
    status: Status
    message: str = ""
    feasible: int = 0
    evaluated: int = 0
    unschedulable_plugins: frozenset[str] = frozenset()
    state: CycleState = field(default_factory=CycleState)


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
        explain_pods: int = 1000,
    ) -> None:
        self.cache = cache
        self.profile = profile
        self.percentage = percentage_of_nodes_to_score
        self.next_start = 0
        self.explain_nodes = explain_nodes
        self.explain_pods = explain_pods
        self.attempts: OrderedDict[str, Attempt] = OrderedDict()
        self._static: dict[tuple[str, bytes], tuple[int, Any]] = {}

    # ----- node-static result reuse ------------------------------------------------------
    def _static_result(self, kind: str, plugin: Any, pod: PodInfo, compute: Any) -> Any:
        key = (kind + plugin.name, pod.signature)
        gen = self.cache.nodes.node_generation
        hit = self._static.get(key)
        if hit is not None and hit[0] == gen:
            return hit[1]
        if len(self._static) > 4096:
            self._static.clear()
        out = compute()
        self._static[key] = (gen, out)
        return out

    # ----- the cycle ---------------------------------------------------------------------
    def schedule(self, pod: PodInfo, *, record: bool = True) -> ScheduleResult:
        nodes = self.cache.nodes
        prof = self.profile
        state = CycleState()
        total_nodes = nodes.count
        if total_nodes == 0:
            return ScheduleResult(
                None, Status.unschedulable(ERR_NO_NODES), ERR_NO_NODES, state=state
            )
        for p in prof.pre_filters:
            st = p.pre_filter(state, pod, nodes)
            if st.code == Code.SKIP:
                state.skip_filter.add(p.name)
            elif st.rejected:
                msg = f"0/{total_nodes} nodes are available: {total_nodes} {st.message()}."
                return ScheduleResult(
                    None, st, msg, unschedulable_plugins=frozenset({p.name}), state=state
                )
            elif not st.ok:
                return ScheduleResult(None, st, st.message(), state=state)

        n = nodes.n
        alive = nodes.valid[:n].copy()
        fail_plugin = np.full(n, -1, np.int64)
        fail_code = np.zeros(n, np.int64)
        results: list[FilterResult | None] = []
        for i, p in enumerate(prof.filters):
            if p.name in state.skip_filter:
                results.append(None)
                continue
            if p.node_static:
                res = self._static_result("f", p, pod, lambda p=p: p.filter(state, pod, nodes))
            else:
                res = p.filter(state, pod, nodes)
            results.append(res)
            if res is None:
                continue
            bad = alive & (res.codes != 0)
            if bad.any():
                fail_plugin[bad] = i
                fail_code[bad] = res.codes[bad]
                alive &= ~bad
                if not alive.any():
                    break

        feasible_slots = np.flatnonzero(alive)
        n_feasible = len(feasible_slots)
        to_find = num_feasible_nodes_to_find(total_nodes, self.percentage)
        start = self.next_start if self.next_start < n else 0
        if start:
            cut = int(np.searchsorted(feasible_slots, start))
            rotated = np.concatenate((feasible_slots[cut:], feasible_slots[:cut]))
        else:
            rotated = feasible_slots
        if n_feasible > to_find:
            candidates = rotated[:to_find]
            self.next_start = (int(candidates[-1]) + 1) % n
        else:
            candidates = rotated

        result: ScheduleResult
        totals: npt.NDArray[np.int64] | None = None
        score_parts: list[tuple[str, int, npt.NDArray[np.int64]]] = []
        if len(candidates) == 0:
            msg, plugins = self._fit_error(total_nodes, fail_plugin, fail_code, results)
            for pf in prof.post_filters:
                pf.post_filter(state, pod, nodes, {})
            result = ScheduleResult(
                None,
                Status.unschedulable(msg),
                msg,
                0,
                total_nodes,
                frozenset(plugins),
                state,
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
                if record:
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
            self._record(pod, results, candidates, totals, score_parts, result)
        return result

    def _fit_error(
        self,
        total: int,
        fail_plugin: npt.NDArray[np.int64],
        fail_code: npt.NDArray[np.int64],
        results: list[FilterResult | None],
    ) -> tuple[str, set[str]]:
        failed = fail_plugin >= 0
        keys = (fail_plugin[failed] << 32) | fail_code[failed]
        uniq, counts = np.unique(keys, return_counts=True)
        reasons: Counter[str] = Counter()
        plugins: set[str] = set()
        for u, c in zip(uniq.tolist(), counts.tolist(), strict=True):
            i, code = u >> 32, u & 0xFFFFFFFF
            res = results[i]
            assert res is not None
            plugins.add(self.profile.filters[i].name)
            for r in res.explain(code):
                reasons[r] += c
        parts = sorted(f"{c} {r}" for r, c in reasons.items())
        return f"0/{total} nodes are available: {', '.join(parts)}.", plugins

    def _record(
        self,
        pod: PodInfo,
        results: list[FilterResult | None],
        candidates: npt.NDArray[np.intp],
        totals: npt.NDArray[np.int64] | None,
        score_parts: list[tuple[str, int, npt.NDArray[np.int64]]],
        result: ScheduleResult,
    ) -> None:
        nodes = self.cache.nodes
        slots = np.flatnonzero(nodes.valid[: nodes.n])[: self.explain_nodes]
        names = [nodes.names[s] for s in slots.tolist()]
        filters: list[tuple[str, FilterResult | None]] = []
        for i, p in enumerate(self.profile.filters):
            if i >= len(results):
                filters.append((p.name, None))  # not run: every node had failed already
                continue
            res = results[i]
            if res is None:
                filters.append((p.name, FilterResult(np.zeros(len(slots), np.int32), ())))
            else:
                filters.append(
                    (
                        p.name,
                        FilterResult(res.codes[slots], list(res.reasons), res.bitmask, res.code),
                    )
                )
        scores: list[tuple[str, int, dict[str, int]]] = []
        tot: dict[str, int] = {}
        if score_parts or totals is not None:
            sel = np.isin(candidates, slots)
            cand_names = [nodes.names[s] for s in candidates[sel].tolist()]
            for name, w, s in score_parts:
                scores.append((name, w, dict(zip(cand_names, s[sel].tolist(), strict=True))))
            if totals is not None:
                tot = dict(zip(cand_names, totals[sel].tolist(), strict=True))
        att = Attempt(
            pod.key,
            time.time(),
            names,
            filters,
            scores,
            tot,
            result.feasible,
            result.evaluated,
            result.node,
            result.message,
        )
        self.attempts[pod.key] = att
        self.attempts.move_to_end(pod.key)
        while len(self.attempts) > self.explain_pods:
            self.attempts.popitem(last=False)

    def forget_attempt(self, key: str) -> None:
        self.attempts.pop(key, None)


def verdicts(att: Attempt) -> Mapping[str, list[str]]:
    """Per filter plugin, a verdict string per node of the attempt ("" = passed)."""
    out: dict[str, list[str]] = {}
    for name, res in att.filters:
        if res is None:
            out[name] = ["not run"] * len(att.node_names)
        else:
            out[name] = [", ".join(res.explain(int(c))) for c in res.codes.tolist()]
    return out
