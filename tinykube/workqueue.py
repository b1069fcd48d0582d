"""A work queue of keys for level-triggered controllers, modelled on client-go's workqueue.

Semantics (client-go's): a key waiting in the queue is stored once however often it is added
(the dirty set); a key handed out by `get` is in the processing set until `done`, and is never
handed out again meanwhile; a key re-added while processing is delivered after `done`. Keys come
out in the order they were first added.

Rate limiting follows client-go's default controller rate limiter: the larger of a per-key
exponential backoff (base_delay * 2**failures, capped at max_delay; `forget` resets it) and an
overall token bucket (10 adds/s, burst 100) so a storm of failures cannot spin the controller.
`add_after` delays run on the injected clock, one small task per waiting key (a key already
waiting keeps its earliest time).

Concurrency: single event loop, no threads; any number of producers and `get`ters. After
`shutdown`, adds are ignored and every `get` (waiting or future) raises `ShutDown`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Hashable
from typing import Generic

from typing_extensions import TypeVar

from tinykube.clock import Clock

# Keys are "namespace/name" strings unless a caller says otherwise: `WorkQueue()` is WorkQueue[str].
K = TypeVar("K", bound=Hashable, default=str)


class ShutDown(Exception):
    """The queue was shut down; workers should return."""


class ItemExponentialRateLimiter(Generic[K]):
    """Per-key delay base * 2**failures, capped: the retry back-off for one object."""

    def __init__(self, base_delay: float, max_delay: float) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures > 60:  # 2**60 overflows any sane cap; avoid huge floats
            return self.max_delay
        return min(self.max_delay, self.base_delay * float(2**failures))

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)


class BucketRateLimiter:
    """A token bucket over all keys: `when` reserves a token and returns the wait for it."""

    def __init__(self, clock: Clock, qps: float, burst: int) -> None:
        self._clock = clock
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = clock.monotonic()

    def when(self) -> float:
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        # A negative balance is a reservation: the caller waits until it would be repaid.
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps


class WorkQueue(Generic[K]):
    """Keys to reconcile; see the module docstring for the guarantees."""

    def __init__(
        self,
        clock: Clock | None = None,
        base_delay: float = 0.005,
        max_delay: float = 1000.0,
        *,
        qps: float = 10.0,
        burst: int = 100,
        name: str = "",
    ) -> None:
        self.clock = clock or Clock()
        self.name = name
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        self._item_limiter: ItemExponentialRateLimiter[K] = ItemExponentialRateLimiter(
            base_delay, max_delay
        )
        self._bucket = BucketRateLimiter(self.clock, qps, burst)
        self._waiting: dict[K, tuple[float, asyncio.Task[None]]] = {}

    # -- the basic queue --------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Mark `key` as needing work. No-op if already queued or after shutdown."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # `done` will queue it
        self._queue.append(key)
        self._wake_one()

    async def get(self) -> K:
        """The next key to work on; the caller must call `done(key)` when finished."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown(self.name)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # We may have been chosen to take a key just before being cancelled: pass the
                # wake-up on so the key does not sit in the queue with a getter asleep.
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()
                else:
                    with contextlib.suppress(ValueError):
                        self._getters.remove(waiter)
                raise
        if self._shutting_down:
            raise ShutDown(self.name)
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        """Finish processing `key`; if it was re-added meanwhile it is queued again now."""
        self._processing.discard(key)
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._wake_one()

    def shutdown(self) -> None:
        """Stop the queue: pending delayed adds are dropped and every getter gets ShutDown."""
        self._shutting_down = True
        for _, task in self._waiting.values():
            task.cancel()
        self._waiting.clear()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        """Keys waiting to be handed out (not those being processed or delayed)."""
        return len(self._queue)

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    # -- delays -----------------------------------------------------------------------------

    def add_after(self, key: K, seconds: float) -> None:
        """Add `key` after `seconds` on the queue's clock (at once if `seconds` <= 0)."""
        if self._shutting_down:
            return
        if seconds <= 0:
            self.add(key)
            return
        ready_at = self.clock.monotonic() + seconds
        existing = self._waiting.get(key)
        if existing is not None:
            if existing[0] <= ready_at:
                return
            existing[1].cancel()
        task = asyncio.get_running_loop().create_task(self._add_later(key, ready_at))
        self._waiting[key] = (ready_at, task)

    async def _add_later(self, key: K, ready_at: float) -> None:
        await self.clock.sleep(ready_at - self.clock.monotonic())
        entry = self._waiting.get(key)
        if entry is not None and entry[0] == ready_at:
            del self._waiting[key]
        self.add(key)

    def num_waiting(self) -> int:
        """Keys waiting for an `add_after` delay to pass."""
        return len(self._waiting)

    # -- rate limiting ----------------------------------------------------------------------

    def when(self, key: K) -> float:
        """The delay `add_rate_limited` would use now (and counts as one more failure)."""
        return max(self._item_limiter.when(key), self._bucket.when())

    def add_rate_limited(self, key: K) -> None:
        """Re-add after this key's back-off (call after a failed reconcile)."""
        self.add_after(key, self.when(key))

    def forget(self, key: K) -> None:
        """Reset this key's back-off (call after a successful reconcile)."""
        self._item_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self._item_limiter.num_requeues(key)
