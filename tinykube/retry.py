"""Retry policy shared by every client call, and a small backoff helper for long-running loops.

`call_with_retries` runs one unary RPC attempt function under tenacity: only failures that
`tinykube.errors.is_retryable` accepts (UNAVAILABLE, DEADLINE_EXCEEDED) are retried, with
jittered exponential backoff, so a conflict or a validation error reaches the caller at once.
`Backoff` is the same shape of delay for loops that never give up (informer watches, leases);
it sleeps on an injected clock so tests drive it by hand. Everything runs on the caller's task.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from tinykube.clock import Clock
from tinykube.errors import is_retryable

R = TypeVar("R")

log = logging.getLogger(__name__)

# First retry after ~100 ms, doubling, capped at 2 s: an apiserver restart (a second or two)
# is ridden out by the default 5 retries without hammering a server that is down.
INITIAL_BACKOFF = 0.1
MAX_BACKOFF = 2.0


async def call_with_retries(
    attempt: Callable[[], Awaitable[R]],
    *,
    retries: int,
    initial: float = INITIAL_BACKOFF,
    maximum: float = MAX_BACKOFF,
    what: str = "",
) -> R:
    """Run `attempt` until it succeeds, fails with a non-retryable error, or retries run out.

    The last error is re-raised as is (not wrapped in tenacity's RetryError).
    """
    # The first attempt runs outside tenacity: nearly every call succeeds at once, and building
    # an AsyncRetrying per call cost more CPU than the RPC's own Python-side work. A retryable
    # failure then enters the same policy (same delays, same attempt count) as before.
    try:
        return await attempt()
    except Exception as exc:
        if retries <= 0 or not is_retryable(exc):
            raise
        delay = min(maximum, initial + random.uniform(0, initial))
        log.info("%s attempt 1 failed (%s); retrying in %.2fs", what or "call", exc, delay)
    await asyncio.sleep(delay)

    def note(state: RetryCallState) -> None:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.info(
            "%s attempt %d failed (%s); retrying in %.2fs",
            what or "call",
            state.attempt_number + 1,
            error,
            delay,
        )

    retrying = AsyncRetrying(
        retry=retry_if_exception(is_retryable),
        stop=stop_after_attempt(retries),
        # Tenacity counts from its own first attempt, which is our second: start one doubling on.
        wait=wait_exponential_jitter(multiplier=initial * 2, max=maximum, jitter=initial),
        before_sleep=note,
        reraise=True,
    )
    return await retrying(attempt)


class Backoff:
    """Jittered exponential delays for retry loops: `await backoff.wait()`, `backoff.reset()`."""

    def __init__(
        self,
        clock: Clock,
        *,
        initial: float = 0.2,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.2,
    ) -> None:
        self._clock = clock
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.failures = 0

    def next_delay(self) -> float:
        """The delay for the next failure (advances the failure count)."""
        base = min(self.maximum, self.initial * self.factor**self.failures)
        self.failures += 1
        # Jitter spreads reconnects of many clients after a shared outage.
        return base * (1.0 + self.jitter * random.random())

    async def wait(self) -> None:
        await self._clock.sleep(self.next_delay())

    def reset(self) -> None:
        self.failures = 0
