"""LeaderElector logic with an in-memory Lease API (optimistic concurrency) and a FakeClock."""

from __future__ import annotations

import asyncio
import gc
from datetime import UTC, datetime

import pytest

from tinykube.clock import FakeClock
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError, UnavailableError
from tinykube.leaderelection import JITTER_FACTOR, LeaderElector, LeadershipLost
from tinykube.v1 import lease_pb2, meta_pb2

NS, NAME = "kube-system", "tinykube-scheduler"


class LeaseStore:
    """The apiserver's behaviour for Leases: resourceVersion checks on update."""

    def __init__(self) -> None:
        self.rev = 1
        self.leases: dict[str, lease_pb2.Lease] = {}
        self.writes = 0

    def _key(self, ns: str, name: str) -> str:
        return f"{ns}/{name}"

    def _stamp(self, lease: lease_pb2.Lease) -> lease_pb2.Lease:
        self.rev += 1
        self.writes += 1
        stored = lease_pb2.Lease()
        stored.CopyFrom(lease)
        stored.metadata.resourceVersion = str(self.rev)
        self.leases[self._key(lease.metadata.namespace, lease.metadata.name)] = stored
        out = lease_pb2.Lease()
        out.CopyFrom(stored)
        return out

    def current(self) -> lease_pb2.Lease:
        return self.leases[self._key(NS, NAME)]


class FakeLeases:
    """One process's view of the store; `down` makes every call fail with UNAVAILABLE."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise UnavailableError("connection refused")

    async def get(self, name: str, namespace: str = "") -> lease_pb2.Lease:
        self._check()
        await asyncio.sleep(0)
        lease = self.store.leases.get(f"{namespace}/{name}")
        if lease is None:
            raise NotFoundError(f'leases "{name}" not found')
        out = lease_pb2.Lease()
        out.CopyFrom(lease)
        return out

    async def create(self, obj: lease_pb2.Lease) -> lease_pb2.Lease:
        self._check()
        await asyncio.sleep(0)
        if f"{obj.metadata.namespace}/{obj.metadata.name}" in self.store.leases:
            raise AlreadyExistsError("exists")
        return self.store._stamp(obj)

    async def update(self, obj: lease_pb2.Lease) -> lease_pb2.Lease:
        self._check()
        await asyncio.sleep(0)
        key = f"{obj.metadata.namespace}/{obj.metadata.name}"
        stored = self.store.leases.get(key)
        if stored is None:
            raise NotFoundError("gone")
        if stored.metadata.resourceVersion != obj.metadata.resourceVersion:
            raise ConflictError("the object has been modified")
        return self.store._stamp(obj)


class FakeClient:
    def __init__(self, store: LeaseStore) -> None:
        self.leases = FakeLeases(store)


class Candidate:
    """An elector plus a task running it, recording whether its work is running."""

    def __init__(self, store: LeaseStore, clock: FakeClock, identity: str) -> None:
        self.client = FakeClient(store)
        self.elector = LeaderElector(
            self.client,
            namespace=NS,
            name=NAME,
            identity=identity,
            lease_duration=15.0,
            renew_deadline=10.0,
            retry_period=2.0,
            clock=clock,
        )
        self.working = False
        self.started = 0
        self.task: asyncio.Task[None] | None = None

    async def work(self) -> None:
        self.started += 1
        self.working = True
        try:
            await asyncio.Event().wait()
        finally:
            self.working = False

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.elector.run(self.work))


async def advance(clock: FakeClock, seconds: float, watch: list[Candidate] | None = None) -> None:
    """Move time in small steps, letting tasks run; check at most one leader at every step."""
    steps = round(seconds / 0.1)
    for _ in range(steps):
        clock.advance(0.1)
        for _ in range(8):
            await asyncio.sleep(0)
        if watch:
            assert sum(c.working for c in watch) <= 1, "two leaders at once"


async def stop(c: Candidate) -> None:
    assert c.task is not None
    c.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await c.task


async def test_acquires_free_lease_renews_and_releases_on_stop() -> None:
    store, clock = LeaseStore(), FakeClock()
    a = Candidate(store, clock, "a")
    a.start()
    await advance(clock, 0.5)
    assert a.elector.is_leader and a.working
    lease = store.current()
    assert lease.spec.holderIdentity == "a"
    assert lease.spec.leaseDurationSeconds == 15
    assert lease.spec.leaseTransitions == 0
    first_renew = lease.spec.renewTime.ToDatetime()
    writes = store.writes
    await advance(clock, 6.1)
    assert store.writes - writes == 3  # a renewal every retry_period
    assert store.current().spec.renewTime.ToDatetime() > first_renew
    assert store.current().spec.acquireTime == lease.spec.acquireTime
    await stop(a)
    assert not a.working and not a.elector.is_leader
    assert store.current().spec.holderIdentity == ""


async def test_second_candidate_waits_while_leader_renews() -> None:
    store, clock = LeaseStore(), FakeClock()
    a, b = Candidate(store, clock, "a"), Candidate(store, clock, "b")
    a.start()
    await advance(clock, 0.5)
    b.start()
    await advance(clock, 60, [a, b])
    assert a.working and not b.working
    assert b.elector.leader_identity == "a"
    await stop(a)
    await stop(b)


async def test_takeover_after_leader_stops_renewing() -> None:
    store, clock = LeaseStore(), FakeClock()
    a, b = Candidate(store, clock, "a"), Candidate(store, clock, "b")
    a.start()
    await advance(clock, 0.5)
    b.start()
    await advance(clock, 5, [a, b])
    a.client.leases.down = True  # a is cut off from the apiserver
    cut_at = clock.monotonic()
    await advance(clock, 12.5, [a, b])
    # a gives up within renew_deadline (+ one retry period) of its last renewal ...
    assert a.task is not None and a.task.done()
    assert isinstance(a.task.exception(), LeadershipLost)
    assert not a.working and not a.elector.is_leader
    assert not b.working  # ... while b still waits for the lease to expire.
    for _ in range(120):
        await advance(clock, 0.1, [a, b])
        if b.working:
            break
    took = clock.monotonic() - cut_at
    assert b.working
    # Expiry is judged from b's own observation of the last renewal: b sees that renewal at its
    # next jittered poll (up to retry_period * (1 + JITTER_FACTOR) = 4.4 s after the cut), the
    # lease expires lease_duration after that observation, and b acquires at its next jittered
    # poll (up to 4.4 s more). The bound used to leave out the first lag and failed now and then.
    jittered = 2.0 * (1 + JITTER_FACTOR)
    assert 13.0 <= took <= 15.0 + 2 * jittered + 0.2
    lease = store.current()
    assert lease.spec.holderIdentity == "b"
    assert lease.spec.leaseTransitions == 1
    await stop(b)


async def test_release_lets_successor_take_over_at_once() -> None:
    store, clock = LeaseStore(), FakeClock()
    a, b = Candidate(store, clock, "a"), Candidate(store, clock, "b")
    a.start()
    await advance(clock, 0.5)
    b.start()
    await advance(clock, 3, [a, b])
    await stop(a)
    await advance(clock, 2 * 2.2 + 0.2, [a, b])  # one jittered retry period, not 15 s
    assert b.working
    await stop(b)


async def test_expiry_ignores_remote_timestamps() -> None:
    """A lease last renewed 'an hour ago' by another machine's clock is not taken at once."""
    store, clock = LeaseStore(), FakeClock()
    old = lease_pb2.Lease(
        metadata=meta_pb2.ObjectMeta(name=NAME, namespace=NS),
        spec=lease_pb2.LeaseSpec(holderIdentity="elsewhere", leaseDurationSeconds=15),
    )
    old.spec.renewTime.FromDatetime(datetime(2020, 1, 1, tzinfo=UTC))
    store._stamp(old)
    b = Candidate(store, clock, "b")
    b.start()
    await advance(clock, 14.0)
    assert not b.working
    await advance(clock, 1.0 + 2 * 2.2 + 0.2)
    assert b.working
    assert store.current().spec.leaseTransitions == 1
    await stop(b)


async def test_racing_candidates_exactly_one_wins() -> None:
    store, clock = LeaseStore(), FakeClock()
    cands = [Candidate(store, clock, f"c{i}") for i in range(5)]
    for c in cands:
        c.start()
    await advance(clock, 30, cands)
    assert sum(c.working for c in cands) == 1
    assert sum(c.started for c in cands) == 1
    for c in cands:
        await stop(c)


async def test_work_failure_propagates_and_releases() -> None:
    store, clock = LeaseStore(), FakeClock()
    elector = LeaderElector(FakeClient(store), namespace=NS, name=NAME, identity="a", clock=clock)

    async def failing() -> None:
        raise RuntimeError("controller crashed")

    with pytest.raises(RuntimeError, match="controller crashed"):
        await asyncio.wait_for(elector.run(failing), 1)
    assert store.current().spec.holderIdentity == ""
    assert not elector.is_leader


def test_invalid_timings_rejected() -> None:
    store = LeaseStore()
    with pytest.raises(ValueError):
        LeaderElector(
            FakeClient(store),
            namespace=NS,
            name=NAME,
            identity="a",
            lease_duration=5,
            renew_deadline=5,
        )
    with pytest.raises(ValueError):
        LeaderElector(
            FakeClient(store),
            namespace=NS,
            name=NAME,
            identity="a",
            renew_deadline=2,
            retry_period=2,
        )
    with pytest.raises(ValueError):
        LeaderElector(FakeClient(store), namespace=NS, name=NAME, identity="")


@pytest.mark.parametrize("jitter", [0.0, 1.0])
async def test_a_standby_wakes_when_the_lease_it_saw_expires(
    jitter: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every jittered retry period at its shortest (2 s) or its longest (4.4 s).
    fixed = type("Fixed", (), {"random": staticmethod(lambda: jitter)})
    monkeypatch.setattr("tinykube.leaderelection.random", fixed)
    store, clock = LeaseStore(), FakeClock()
    a, b = Candidate(store, clock, "a"), Candidate(store, clock, "b")
    a.start()
    await advance(clock, 0.5)
    b.start()
    await advance(clock, 5, [a, b])
    a.client.leases.down = True
    await advance(clock, 5, [a, b])  # b has seen a's last renewal by now
    expires = b.elector._observed_at + 15.0
    while not b.working:
        await advance(clock, 0.1, [a, b])
    # At the moment of expiry (to the 0.1 s steps and the 0.1 s of jitter), not at b's next
    # jittered poll after it (up to 4.4 s later).
    assert expires <= clock.monotonic() <= expires + 0.1 * jitter + 0.2
    assert a.task is not None and isinstance(a.task.exception(), LeadershipLost)
    await stop(b)


@pytest.mark.usefixtures("saved_garbage")
async def test_lost_leadership_leaves_no_exception_in_a_cycle() -> None:
    """`run` raising LeadershipLost (and the work's own error) leaves nothing for the cyclic GC:
    each lost leadership left the error in a cycle through run's frame and the renew task."""
    store, clock = LeaseStore(), FakeClock()
    a = Candidate(store, clock, "a")
    a.start()
    await advance(clock, 0.5)
    assert a.working
    a.client.leases.down = True
    gc.collect()
    del gc.garbage[:]
    await advance(clock, 12.5)
    assert a.task is not None and a.task.done()
    with pytest.raises(LeadershipLost):
        await a.task
    a.task = None
    gc.collect()
    assert [type(o).__name__ for o in gc.garbage if isinstance(o, BaseException)] == []

    elector = LeaderElector(
        FakeClient(LeaseStore()), namespace=NS, name=NAME, identity="b", clock=clock
    )

    async def failing() -> None:
        raise RuntimeError("controller crashed")

    with pytest.raises(RuntimeError, match="controller crashed"):
        await elector.run(failing)  # (not under wait_for, whose frame keeps its task's error)
    gc.collect()
    assert [type(o).__name__ for o in gc.garbage if isinstance(o, BaseException)] == []
