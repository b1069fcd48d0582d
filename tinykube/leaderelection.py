"""Leader election on a Lease object, as client-go's leaderelection package does it.

Candidates race to write their identity into one Lease (namespace/name). The write is an
optimistic-concurrency Update carrying the resourceVersion that was read, so when two race the
apiserver answers ABORTED to all but one. A Lease held by someone else counts as expired only
when this process has seen its record unchanged for `lease_duration` on its *own* monotonic
clock: clocks of different machines are never compared (renewTime is informational).

The leader renews every `retry_period`; if a renewal round cannot succeed within
`renew_deadline` it stops leading (cancels the work) before anyone else may take over
(`renew_deadline` < `lease_duration`). On a graceful stop the leader clears holderIdentity so a
successor takes over at once instead of waiting for expiry.

With several apiservers (tinykube/client.py fails over between them) a renewal round survives
the loss of the one in use: a failed call is retried on the next. Each try of a round gets at
most half the renew deadline, so a try stuck on an apiserver that answers nothing (a partition:
no reset, only silence until keepalive gives up) leaves time for another; after such a timeout
the elector asks the client to fail over (`fail_over`, if the client has one). A candidate
waiting for someone else's Lease sleeps no longer than until that Lease would expire, so a
killed leader is replaced about `lease_duration` after the standby last saw it renew (client-go
polls on, up to one jittered retry period later).

Concurrency: `run()` owns two tasks while leading, the caller's work and the renew loop; they
share only the `_leading` flag and the last written Lease, on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from google.protobuf.timestamp_pb2 import Timestamp

from tinykube.clock import Clock
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError, TinykubeError
from tinykube.v1 import lease_pb2, meta_pb2

log = logging.getLogger(__name__)

# client-go jitters acquisition retries by up to 1.2x the retry period so candidates that
# started together do not keep colliding.
JITTER_FACTOR = 1.2


class LeaseAPI(Protocol):
    async def get(self, name: str, namespace: str = "") -> lease_pb2.Lease: ...
    async def create(self, obj: lease_pb2.Lease) -> lease_pb2.Lease: ...
    async def update(self, obj: lease_pb2.Lease) -> lease_pb2.Lease: ...


class HasLeases(Protocol):
    @property
    def leases(self) -> LeaseAPI: ...


def _failure(task: asyncio.Future[Any]) -> BaseException | None:
    """The error `task` ended with (None if it succeeded or was cancelled)."""
    if task.done() and not task.cancelled():
        return task.exception()
    return None


class LeadershipLost(Exception):
    """This process was leading and could not renew its Lease within the renew deadline."""


class LeaderElector:
    """Campaign for one Lease; run the caller's coroutine only while holding it."""

    def __init__(
        self,
        client: HasLeases,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        release_on_stop: bool = True,
    ) -> None:
        if not identity:
            raise ValueError("leader election identity must not be empty")
        # client-go's sanity rules: a leader must give up before anyone else may take over.
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not renew_deadline > retry_period * JITTER_FACTOR > 0:
            raise ValueError("renew_deadline must be greater than retry_period * 1.2")
        self._client = client
        self._leases = client.leases
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock or Clock()
        self.release_on_stop = release_on_stop
        self._leading = False
        # One renewal try's limit: two tries fit in a round (see the module docstring).
        self._try_timeout = max(retry_period, renew_deadline / 2)
        # What we last saw in the Lease, and when (local monotonic time) it last changed.
        self._observed: lease_pb2.Lease | None = None
        self._observed_spec: bytes = b""
        self._observed_at = 0.0

    # -- public -----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def leader_identity(self) -> str:
        """The holder as last observed ("" if none or not yet known)."""
        return self._observed.spec.holderIdentity if self._observed is not None else ""

    async def run(self, on_started_leading: Callable[[], Awaitable[None]]) -> None:
        """Acquire, run `on_started_leading()` while leading, then clean up.

        Raises LeadershipLost (after cancelling the work) if renewal fails. If the work returns
        or raises, the Lease is released and its result or exception passed on. If `run` is
        cancelled, the work is cancelled and the Lease released.
        """
        try:
            await self._acquire()
            log.info("%s: became leader of lease %s/%s", self.identity, self.namespace, self.name)
            work = asyncio.ensure_future(on_started_leading())
            renew = asyncio.ensure_future(self._renew_loop())
            try:
                await asyncio.wait({work, renew}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (work, renew):
                    task.cancel()
                for task in (work, renew):
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            failed = _failure(renew) or _failure(work)
            # The tasks hold their errors and the error's traceback holds this frame: drop the
            # names before raising (a reference cycle per lost leadership otherwise).
            del work, renew, task
            if failed is not None:
                try:
                    raise failed
                finally:
                    del failed
        finally:
            was_leading = self._leading
            self._leading = False
            if was_leading and self.release_on_stop:
                await self._release_shielded()

    # -- one attempt ------------------------------------------------------------------------

    def _now(self) -> Timestamp:
        ts = Timestamp()
        ts.FromDatetime(self.clock.now())
        return ts

    def _observe(self, lease: lease_pb2.Lease) -> None:
        spec = lease.spec.SerializeToString(deterministic=True)
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self.clock.monotonic()
        self._observed = lease

    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True if we hold the Lease afterwards."""
        now = self._now()
        duration = max(1, math.ceil(self.lease_duration))
        if self._leading and self._observed is not None:
            # Fast path for the leader: update what we last wrote, no read first.
            renewed = lease_pb2.Lease()
            renewed.CopyFrom(self._observed)
            renewed.spec.renewTime.CopyFrom(now)
            renewed.spec.leaseDurationSeconds = duration
            try:
                self._observe(await self._leases.update(renewed))
                return True
            except ConflictError:
                pass  # someone else wrote it: fall back to the full read-check-write
        try:
            current = await self._leases.get(self.name, self.namespace)
        except NotFoundError:
            fresh = lease_pb2.Lease(
                apiVersion="v1",
                kind="Lease",
                metadata=meta_pb2.ObjectMeta(name=self.name, namespace=self.namespace),
                spec=lease_pb2.LeaseSpec(
                    holderIdentity=self.identity,
                    leaseDurationSeconds=duration,
                    acquireTime=now,
                    renewTime=now,
                    leaseTransitions=0,
                ),
            )
            try:
                self._observe(await self._leases.create(fresh))
            except AlreadyExistsError:
                return False
            return True
        self._observe(current)
        holder = current.spec.holderIdentity
        held_by_us = holder == self.identity
        expired = self.clock.monotonic() >= self._observed_at + self.lease_duration
        if holder and not held_by_us and not expired:
            return False
        wanted = lease_pb2.Lease()
        wanted.CopyFrom(current)
        spec = wanted.spec
        if not held_by_us:
            spec.holderIdentity = self.identity
            spec.acquireTime.CopyFrom(now)
            spec.leaseTransitions = current.spec.leaseTransitions + 1
        spec.renewTime.CopyFrom(now)
        spec.leaseDurationSeconds = duration
        try:
            self._observe(await self._leases.update(wanted))
        except (ConflictError, NotFoundError):
            return False
        return True

    async def _attempt(self, budget: float) -> bool:
        """One try with its own deadline; every error counts as 'not acquired'."""
        try:
            async with asyncio.timeout(max(0.01, budget)):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            log.warning(
                "%s: lease %s/%s: attempt timed out", self.identity, self.namespace, self.name
            )
            # The apiserver in use answered nothing in time; let the client try another.
            fail_over = getattr(self._client, "fail_over", None)
            if callable(fail_over):
                fail_over("a lease renewal timed out")
        except TinykubeError as exc:
            log.warning(
                "%s: lease %s/%s: %s: %s",
                self.identity,
                self.namespace,
                self.name,
                type(exc).__name__,
                exc.message,
            )
        return False

    # -- loops ------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        while True:
            if await self._attempt(self.renew_deadline):
                self._leading = True
                return
            await self.clock.sleep(self._acquire_delay())

    def _acquire_delay(self) -> float:
        """client-go's jittered retry period, but no later than just after the moment the
        Lease we saw held by someone else expires (by our own clock)."""
        delay = self.retry_period * (1.0 + JITTER_FACTOR * random.random())
        holder = self.leader_identity
        if holder and holder != self.identity:
            until = self._observed_at + self.lease_duration - self.clock.monotonic()
            if until > 0:
                # A little jitter so that standbys waking together do not always collide.
                delay = min(delay, until + 0.05 * self.retry_period * random.random())
        return delay

    async def _renew_loop(self) -> None:
        """Renew every retry_period; raise LeadershipLost if a round misses renew_deadline."""
        while True:
            await self.clock.sleep(self.retry_period)
            deadline = self.clock.monotonic() + self.renew_deadline
            while not await self._attempt(
                min(deadline - self.clock.monotonic(), self._try_timeout)
            ):
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    self._leading = False
                    log.error(
                        "%s: failed to renew lease %s/%s within %gs; stopping leading",
                        self.identity,
                        self.namespace,
                        self.name,
                        self.renew_deadline,
                    )
                    raise LeadershipLost(f"{self.identity} lost lease {self.namespace}/{self.name}")
                await self.clock.sleep(min(self.retry_period, remaining))

    async def _release_shielded(self) -> None:
        # Shielded: if run() is cancelled again meanwhile, the release still completes.
        await asyncio.shield(asyncio.ensure_future(self._release()))

    async def _release(self) -> None:
        """Clear holderIdentity so a successor need not wait for the lease to expire."""
        if self._observed is None or self._observed.spec.holderIdentity != self.identity:
            return
        released = lease_pb2.Lease()
        released.CopyFrom(self._observed)
        now = self._now()
        released.spec.holderIdentity = ""
        released.spec.leaseDurationSeconds = 1
        released.spec.renewTime.CopyFrom(now)
        released.spec.acquireTime.CopyFrom(now)
        try:
            async with asyncio.timeout(self.renew_deadline):
                self._observe(await self._leases.update(released))
            log.info("%s: released lease %s/%s", self.identity, self.namespace, self.name)
        except (TimeoutError, TinykubeError) as exc:
            log.warning("%s: could not release lease: %s", self.identity, exc)
