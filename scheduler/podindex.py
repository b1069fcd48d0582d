"""Per-node counts of the pods that match a label selector, kept up to date incrementally.

InterPodAffinity and PodTopologySpread need, for every pod they schedule, the number of pods
matching a selector (in some namespaces) on each node; kube-scheduler finds them by walking every
pod on every node in each cycle. Here the NodeTable tells the index whenever a pod starts or stops
using a node slot (`placed(slot, info, sign)`: assigned, assumed, or a nominated pod reserved for
one cycle) and when a node's slot is cleared, and the index updates one count array per
registered selector. A cycle then reads a ready per-slot array and turns it into per-domain
counts with one np.bincount over a label column.

A selector is registered by its first `counts` call and dropped, least recently used first,
beyond `max_selectors`. A selector that pins a label to one value (`app=web`, `name in (x)`) is
filed under that pair, the one of its pairs the fewest placed pods carry: registering it scans
only the pods carrying the pair (the index keeps placed pods by label pair), and a pod event
matches only the selectors filed under one of its own pairs, plus the few that pin nothing
(those cost a match per event and a scan of every placed pod to register). So with thousands of
Deployments and Services, each a default-spreading selector, a pod costs what its own labels
select, not a match per selector in the cluster. Plugins that keep state of
their own per pod (e.g. the pods carrying required anti-affinity terms) add a listener, called
as `listener(slot, info, sign)` after the counts are updated; listeners track only pods that
carry inter-pod (anti-)affinity terms, which `visible` relies on.

Single-threaded: called only from the scheduler's event loop, like the rest of the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tinykube.selectors import EQUALS, IN, LabelSelector

if TYPE_CHECKING:
    from scheduler.podinfo import PodInfo

I64 = npt.NDArray[np.int64]
# (namespaces, or None for every namespace; the selector; whether terminating pods count)
SelectorKey = tuple[frozenset[str] | None, LabelSelector, bool]


Pair = tuple[str, str]


def pinned_pairs(selector: LabelSelector) -> list[Pair]:
    """The (key, value) pairs a pod must carry to match `selector` (its `=` and one-value
    `in` requirements)."""
    return [
        (r.key, next(iter(r.values)))
        for r in selector.requirements
        if r.operator in (EQUALS, IN) and len(r.values) == 1
    ]


def matches(key: SelectorKey, info: PodInfo) -> bool:
    namespaces, selector, include_terminating = key
    meta = info.pod.metadata
    if namespaces is not None and meta.namespace not in namespaces:
        return False
    if info.terminating and not include_terminating:
        return False
    return selector.matches(meta.labels)


class PodIndex:
    """The pods on each node slot, and per-slot counts of those matching registered selectors."""

    def __init__(self, capacity: int, max_selectors: int = 256) -> None:
        self.capacity = capacity
        self.max_selectors = max_selectors
        # slot -> pod key -> the PodInfo placed there (a dict, so removal is O(1))
        self.slots: list[dict[str, PodInfo]] = [{} for _ in range(capacity)]
        self._counts: OrderedDict[SelectorKey, I64] = OrderedDict()
        self.listeners: list[Callable[[int, PodInfo, int], None]] = []
        # placed pods by label pair: pair -> {(slot, pod key)}
        self._pods_by_pair: dict[Pair, set[tuple[int, str]]] = {}
        # registered selectors by the pair they are filed under, and those pinning none
        self._filed: dict[Pair, dict[SelectorKey, None]] = {}
        self._unpinned: dict[SelectorKey, None] = {}
        self._filed_under: dict[SelectorKey, Pair | None] = {}

    # ----- fed by the NodeTable ---------------------------------------------------------
    def grow(self, capacity: int) -> None:
        if capacity <= self.capacity:
            return
        self.slots.extend({} for _ in range(capacity - self.capacity))
        for key, arr in self._counts.items():
            bigger = np.zeros(capacity, np.int64)
            bigger[: self.capacity] = arr
            self._counts[key] = bigger
        self.capacity = capacity

    def placed(self, slot: int, info: PodInfo, sign: int) -> None:
        on = self.slots[slot]
        pairs = info.pod.metadata.labels.items()
        entry = (slot, info.key)
        if sign > 0:
            old = on.get(info.key)
            if old is not None:
                self.placed(slot, old, -1)  # placed twice without removal: count it once
            on[info.key] = info
            for pair in pairs:
                self._pods_by_pair.setdefault(pair, set()).add(entry)
        else:
            stored = on.pop(info.key, None)
            if stored is None:
                return  # never counted here: nothing to undo
            info = stored  # uncount what was counted
            pairs = info.pod.metadata.labels.items()
            for pair in pairs:
                holders = self._pods_by_pair.get(pair)
                if holders is not None:
                    holders.discard(entry)
                    if not holders:
                        del self._pods_by_pair[pair]
        counts = self._counts
        for key in self._candidates(info):
            if matches(key, info):
                counts[key][slot] += sign
        for listener in self.listeners:
            listener(slot, info, sign)

    def cleared(self, slot: int) -> None:
        """The node of `slot` went away; its pods wait in the cache until it comes back."""
        on = self.slots[slot]
        for info in list(on.values()):
            self.placed(slot, info, -1)

    def visible(self, info: PodInfo) -> bool:
        """Would placing or removing `info` change what plugins read here: a registered
        selector's counts or a listener's view? (Preemption's dry run skips re-running the
        filters for a pod that changes neither.)"""
        if self.listeners and info.affinity is not None:
            return True
        return any(matches(key, info) for key in self._candidates(info))

    def _candidates(self, info: PodInfo) -> list[SelectorKey]:
        """The registered selectors that may match `info`: those filed under one of its label
        pairs, and those that pin none."""
        found = list(self._unpinned)
        filed = self._filed
        if filed:
            for pair in info.pod.metadata.labels.items():
                keys = filed.get(pair)
                if keys:
                    found.extend(keys)
        return found

    # ----- read by plugins --------------------------------------------------------------
    def pods_on_slot(self, slot: int) -> Iterable[PodInfo]:
        return self.slots[slot].values()

    def counts(
        self,
        namespaces: frozenset[str] | None,
        selector: LabelSelector,
        include_terminating: bool = False,
    ) -> I64:
        """Matching pods per node slot (length >= the node table's slots; read it, never write)."""
        key: SelectorKey = (namespaces, selector, include_terminating)
        arr = self._counts.get(key)
        if arr is not None:
            self._counts.move_to_end(key)
            return arr
        arr = np.zeros(self.capacity, np.int64)
        pairs = pinned_pairs(selector)
        if pairs:
            # File it under its rarest pair; only the pods carrying that pair can match.
            pair = min(pairs, key=lambda p: len(self._pods_by_pair.get(p, ())))
            for slot, pod_key in self._pods_by_pair.get(pair, ()):
                if matches(key, self.slots[slot][pod_key]):
                    arr[slot] += 1
            self._filed.setdefault(pair, {})[key] = None
            self._filed_under[key] = pair
        else:
            for slot, on in enumerate(self.slots):
                if on:
                    arr[slot] = sum(1 for info in on.values() if matches(key, info))
            self._unpinned[key] = None
            self._filed_under[key] = None
        self._counts[key] = arr
        while len(self._counts) > self.max_selectors:
            dropped, _ = self._counts.popitem(last=False)
            self._forget(dropped)
        return arr

    def _forget(self, key: SelectorKey) -> None:
        pair = self._filed_under.pop(key, None)
        if pair is None:
            self._unpinned.pop(key, None)
            return
        filed = self._filed.get(pair)
        if filed is not None:
            filed.pop(key, None)
            if not filed:
                del self._filed[pair]

    @property
    def selectors(self) -> int:
        return len(self._counts)
