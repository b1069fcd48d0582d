"""Two electors on the real apiserver (2 s lease, 1.5 s deadline, 0.2 s retry)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from tests.integration.conftest import RunningAPIServer
from tests.integration.test_client_support import TcpProxy, eventually
from tinykube.client import Client
from tinykube.leaderelection import LeaderElector, LeadershipLost

pytestmark = pytest.mark.integration

NS, NAME = "kube-system", "test-election"
LEASE, DEADLINE, RETRY = 2.0, 1.5, 0.2


class Candidate:
    def __init__(self, identity: str, proxy: TcpProxy, client: Client) -> None:
        self.identity = identity
        self.proxy = proxy
        self.client = client
        self.elector = LeaderElector(
            client,
            namespace=NS,
            name=NAME,
            identity=identity,
            lease_duration=LEASE,
            renew_deadline=DEADLINE,
            retry_period=RETRY,
        )
        self.working = False
        self.task: asyncio.Task[None] | None = None

    async def work(self) -> None:
        self.working = True
        try:
            await asyncio.Event().wait()
        finally:
            self.working = False

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.elector.run(self.work))

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
                await self.task


@pytest.fixture
async def pair(apiserver: RunningAPIServer) -> AsyncIterator[tuple[Candidate, Candidate]]:
    cands: list[Candidate] = []
    for identity in ("alpha", "beta"):
        proxy = await TcpProxy(apiserver.address).start()
        client = Client(proxy.address, timeout=1.0, retries=3)
        cands.append(Candidate(identity, proxy, client))
    try:
        yield cands[0], cands[1]
    finally:
        for c in cands:
            await c.stop()
            await c.client.close()
            await c.proxy.close()


class OverlapWatch:
    """Samples both candidates every 10 ms; records any moment with two leaders."""

    def __init__(self, cands: tuple[Candidate, Candidate]) -> None:
        self.cands = cands
        self.overlaps = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            if all(c.working for c in self.cands):
                self.overlaps += 1
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_one_leads_and_the_other_takes_over_when_renewals_stop(
    pair: tuple[Candidate, Candidate], apiserver: RunningAPIServer
) -> None:
    a, b = pair
    watch = OverlapWatch(pair)
    a.start()
    await eventually(lambda: a.working, within=5, what="alpha to lead")
    b.start()
    await asyncio.sleep(1.0)  # several of beta's retry periods: it must not take over
    assert a.working and not b.working
    assert a.elector.is_leader and not b.elector.is_leader
    assert b.elector.leader_identity == "alpha"
    async with Client(apiserver.address) as observer:
        lease = await observer.leases.get(NAME, NS)
        assert lease.spec.holderIdentity == "alpha"
        assert lease.spec.leaseDurationSeconds == 2
        transitions = lease.spec.leaseTransitions

        # Cut alpha off from the apiserver: it can no longer renew.
        a.proxy.refusing = True
        a.proxy.cut()
        cut_at = time.monotonic()
        await eventually(lambda: not a.working, within=5, what="alpha to step down")
        stepped_down = time.monotonic() - cut_at
        assert a.task is not None
        await eventually(a.task.done, within=2)
        assert isinstance(a.task.exception(), LeadershipLost)
        await eventually(lambda: b.working, within=10, what="beta to take over")
        took_over = time.monotonic() - cut_at
        # alpha gives up within its renew deadline; beta waits for the lease to expire on its own
        # clock (lease duration after the last renewal it saw, plus a jittered retry).
        assert stepped_down <= DEADLINE + RETRY + 0.5
        assert LEASE - RETRY * 2.2 - 0.1 <= took_over <= LEASE + 2 * RETRY * 2.2 + 0.5
        lease = await observer.leases.get(NAME, NS)
        assert lease.spec.holderIdentity == "beta"
        assert lease.spec.leaseTransitions == transitions + 1
    await watch.close()
    assert watch.overlaps == 0


async def test_graceful_stop_releases_for_an_immediate_successor(
    pair: tuple[Candidate, Candidate], apiserver: RunningAPIServer
) -> None:
    a, b = pair
    watch = OverlapWatch(pair)
    a.start()
    await eventually(lambda: a.working, within=5, what="alpha to lead")
    b.start()
    await asyncio.sleep(0.5)
    assert not b.working
    stopped_at = time.monotonic()
    await a.stop()
    async with Client(apiserver.address) as observer:
        assert (await observer.leases.get(NAME, NS)).spec.holderIdentity in ("", "beta")
    await eventually(lambda: b.working, within=5, what="beta to take over")
    # Released: no wait for expiry, only beta's next (jittered) retry.
    assert time.monotonic() - stopped_at < RETRY * 2.2 + 0.5
    await watch.close()
    assert watch.overlaps == 0


async def test_simultaneous_start_elects_exactly_one(
    pair: tuple[Candidate, Candidate],
) -> None:
    a, b = pair
    watch = OverlapWatch(pair)
    a.start()
    b.start()
    await eventually(lambda: a.working or b.working, within=5, what="a leader")
    await asyncio.sleep(1.0)
    assert a.working != b.working
    await watch.close()
    assert watch.overlaps == 0
