"""Per-node counts of the pods that match a label selector, kept up to date incrementally.

InterPodAffinity and PodTopologySpread need, for every pod they schedule, the number of pods
matching a selector (in some namespaces) on each node; kube-scheduler finds them by walking every
pod on every node in each cycle. Here the NodeTable tells the index whenever a pod starts or stops
using a node slot (`placed(slot, info, sign)`: assigned, assumed, or a nominated pod reserved for
one cycle) and when a node's slot is cleared, and the index updates one count array per
registered selector. A cycle then reads a ready per-slot array and turns it into per-domain
counts with one np.bincount over a label column.

A selector is registered by its first `counts` call (one scan of the pods on nodes) and dropped,
least recently used first, beyond `max_selectors`; each pod event costs one match per registered
selector, and nothing when none is (SchedulingBasic registers none). Plugins that keep state of
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

from tinykube.selectors import LabelSelector

if TYPE_CHECKING:
    from scheduler.podinfo import PodInfo

I64 = npt.NDArray[np.int64]
# (namespaces, or None for every namespace; the selector; whether terminating pods count)
SelectorKey = tuple[frozenset[str] | None, LabelSelector, bool]


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
        if sign > 0:
            old = on.get(info.key)
            if old is not None:
                self.placed(slot, old, -1)  # placed twice without removal: count it once
            on[info.key] = info
        elif on.pop(info.key, None) is None:
            return  # never counted here: nothing to undo
        for key, arr in self._counts.items():
            if matches(key, info):
                arr[slot] += sign
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
        return any(matches(key, info) for key in self._counts)

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
        for slot, on in enumerate(self.slots):
            if on:
                arr[slot] = sum(1 for info in on.values() if matches(key, info))
        self._counts[key] = arr
        while len(self._counts) > self.max_selectors:
            self._counts.popitem(last=False)
        return arr

    @property
    def selectors(self) -> int:
        return len(self._counts)
