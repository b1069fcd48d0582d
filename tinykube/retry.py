"""Retry policy shared by every client call, and a small backoff helper for long-running loops.

`call_with_retries` runs one unary RPC attempt function under tenacity: only failures that
`tinykube.errors.is_retryable` accepts (UNAVAILABLE, DEADLINE_EXCEEDED) are retried, with
jittered exponential backoff, so a conflict or a validation error reaches the caller at once.
`Backoff` is the same shape of delay for loops that never give up (informer watches, leases);
it sleeps on an injected clock so tests drive it by hand. Everything runs on the caller's task.

Which calls may be repeated is the caller's choice (`retry_if`): a read, or a write guarded by a
resourceVersion/uid precondition, is safe to send twice, so it retries on `is_retryable`; a write
that would take effect twice (a Create with generateName, an unconditional Update) retries only on
`is_unsent`, the failures that prove the request never reached the server. A DEADLINE_EXCEEDED,
or an UNAVAILABLE after the request went out (the stream was reset), leaves it unknown whether
the server applied it; `Attempts.ambiguous` records that, so a caller whose retry then fails with
ALREADY_EXISTS can look for its own earlier success (see tinykube/client.py).

`retry_throttled` is the other retry, for any call: the apiserver's in-flight limit refuses a
request before running it (`TooManyRequestsError`: RESOURCE_EXHAUSTED carrying a retry hint),
so it is sent again after the hint, jittered up by to half of it so refused clients do not come
back together, for as long as the caller's deadline allows. RESOURCE_EXHAUSTED without the hint
(an eviction refused by a disruption budget) ran, and is the caller's answer.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from tinykube.clock import Clock
from tinykube.errors import TinykubeError, TooManyRequestsError, is_retryable

R = TypeVar("R")

log = logging.getLogger(__name__)

# First retry after ~100 ms, doubling, capped at 2 s: an apiserver restart (a second or two)
# is ridden out by the default 5 retries without hammering a server that is down.
INITIAL_BACKOFF = 0.1
MAX_BACKOFF = 2.0

# What grpc-core says when the call found no connection to send it on: the channel could not
# connect (refused, unreachable, handshake failed) or could not resolve the name. In both the
# load-balancing pick failed, so no byte of the request left the process. A call that was sent
# and lost its stream says "Stream removed (Socket closed)", "Cancelling all calls" (GOAWAY) or
# "Connection reset by peer" instead; those stay ambiguous.
_UNSENT_MARKERS = ("failed to connect to all addresses", "DNS resolution failed")


def is_unsent(exc: BaseException) -> bool:
    """True if `exc` proves the request never reached the server, so any call may be re-sent.

    Only UNAVAILABLE before a connection existed qualifies (checked on grpc.aio against a
    stopped and a SIGKILLed server). DEADLINE_EXCEEDED never does: without wait_for_ready a call
    with no connection fails at once as UNAVAILABLE, so a deadline means the call was sent.
    """
    if not is_retryable(exc):
        return False
    if isinstance(exc, TinykubeError):
        if exc.code != grpc.StatusCode.UNAVAILABLE:
            return False
        details = exc.message
    elif isinstance(exc, grpc.RpcError) and hasattr(exc, "details"):
        if exc.code() != grpc.StatusCode.UNAVAILABLE:
            return False
        details = exc.details() or ""
    else:
        return False
    return any(marker in details for marker in _UNSENT_MARKERS)


def may_have_landed(exc: BaseException) -> bool:
    """True if `exc` leaves it unknown whether the server applied the request: a deadline, a
    call the server cancelled (it stopped, or gave up on the call, after its handler may have
    written), or a lost stream (UNAVAILABLE after the request left): client-go's view of a write
    that failed in transport (rest.Request never re-sends one, "as they are not idempotent").
    Another answer is the server's (the request ran, or was refused before it ran); an unsent
    one never left. A TinykubeError or a raw grpc.RpcError; anything else (the caller's own
    error) False. `Attempts.failed` records the same."""
    if isinstance(exc, TinykubeError):
        code = exc.code
    elif isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code = exc.code()
    else:
        return False
    if code == grpc.StatusCode.CANCELLED:
        return True
    return is_retryable(exc) and not is_unsent(exc)


# A throttled call waits its hint times 1 to 1 + this.
THROTTLE_JITTER = 0.5


def throttle_delay(hint: float) -> float:
    """How long to wait after a refusal with retry hint `hint` seconds (never less)."""
    return max(0.0, hint) * (1.0 + THROTTLE_JITTER * random.random())


async def retry_throttled(
    attempt: Callable[[float], Awaitable[R]],
    *,
    budget: float,
    what: str = "",
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> R:
    """`attempt(seconds_left)` until it is not refused by the in-flight limit, or the next try
    would start after `budget` seconds from now: then the last `TooManyRequestsError` is
    raised. Each attempt is given the time left as its own deadline."""
    deadline = monotonic() + budget
    left = budget
    while True:
        try:
            return await attempt(left)
        except TooManyRequestsError as exc:
            delay = throttle_delay(exc.retry_after)
            if monotonic() + delay >= deadline:
                raise
            log.debug("%s throttled by the apiserver; retrying in %.2fs", what or "call", delay)
            await sleep(delay)
            left = deadline - monotonic()


class Attempts:
    """What the attempts of one call have seen; `ambiguous` once a failure left it unknown
    whether the server applied the request (the request may have landed)."""

    __slots__ = ("ambiguous",)

    def __init__(self) -> None:
        self.ambiguous = False

    def failed(self, exc: BaseException) -> None:
        if may_have_landed(exc):
            self.ambiguous = True


async def call_with_retries(
    attempt: Callable[[], Awaitable[R]],
    *,
    retries: int,
    initial: float = INITIAL_BACKOFF,
    maximum: float = MAX_BACKOFF,
    what: str = "",
    retry_if: Callable[[BaseException], bool] = is_retryable,
) -> R:
    """Run `attempt` until it succeeds, fails with an error `retry_if` rejects, or retries run
    out. `retry_if` is `is_retryable` for calls safe to repeat, `is_unsent` for the others.

    The last error is re-raised as is (not wrapped in tenacity's RetryError), with the
    finished frames of its traceback cleared (`traceback.clear_frames`): tenacity's retry
    state holds every failure, and those frames hold the retry state, so each call that failed
    after a retry left its exceptions, their tracebacks and the gRPC calls in a reference cycle
    for the cyclic GC. The traceback's lines stay; only the dead frames' locals go.
    """
    # The first attempt runs outside tenacity: nearly every call succeeds at once, and building
    # an AsyncRetrying per call cost more CPU than the RPC's own Python-side work. A retryable
    # failure then enters the same policy (same delays, same attempt count) as before.
    try:
        return await attempt()
    except Exception as exc:
        if retries <= 0 or not retry_if(exc):
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
        retry=retry_if_exception(retry_if),
        stop=stop_after_attempt(retries),
        # Tenacity counts from its own first attempt, which is our second: start one doubling on.
        wait=wait_exponential_jitter(multiplier=initial * 2, max=maximum, jitter=initial),
        before_sleep=note,
        reraise=True,
    )
    try:
        return await retrying(attempt)
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)
        raise


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
