"""The in-flight limit's queues (apiserver/flowcontrol.py `Limiter.acquire`): requests over the
limit wait in their flow's FIFO, freed seats go round-robin over flows, a waiter is refused
after its wait limit or at once when its queue is full, and cancellation never leaks a seat.

Time is fake: the limiter's timers are collected here and fired by hand, and its clock is a
counter; the waiters are real tasks on the test's event loop, run by yielding to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client import generate_latest

from apiserver.flowcontrol import (
    NODE_HIGH,
    Limiter,
    QueueLimits,
    RequestInfo,
    Seat,
    wait_limit,
)
from apiserver.metrics import Metrics

COORD = "coordination.k8s.io"
CREATE = RequestInfo("create", "", "pods", "", "default")
GET = RequestInfo("get", "", "pods", "", "default")
RENEW = RequestInfo("update", COORD, "leases", "", "kube-node-lease")
ELECT = RequestInfo("update", COORD, "leases", "", "kube-system")


class FakeTimer:
    def __init__(self, at: float, callback: Callable[[], None]) -> None:
        self.at = at
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTime:
    """The limiter's clock and timers: `advance` moves time and fires the timers due."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[FakeTimer] = []

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in list(self.timers):
            if timer.at <= self.now and not timer.cancelled:
                self.timers.remove(timer)
                timer.callback()

    def pending(self) -> int:
        return sum(not t.cancelled for t in self.timers)


async def settle() -> None:
    """Let every runnable task run until it blocks again."""
    for _ in range(5):
        await asyncio.sleep(0)


class Harness:
    def __init__(
        self, read_only: int = 1, mutating: int = 1, queues: QueueLimits | None = None
    ) -> None:
        self.time = FakeTime()
        self.metrics = Metrics()
        self.limiter = Limiter(
            read_only,
            mutating,
            queues=queues or QueueLimits(per_flow=50, per_level=1000, max_wait=3.0),
            metrics=self.metrics,
            call_later=self.time.call_later,
            monotonic=self.time.monotonic,
        )
        self.order: list[str] = []
        self.seats: dict[str, Seat] = {}

    def fill(self, info: RequestInfo, count: int = 1) -> list[Seat]:
        seats = [self.limiter.admit(info) for _ in range(count)]
        assert all(s is not None for s in seats)
        return [s for s in seats if s is not None]

    def wait(
        self, name: str, flow: str, info: RequestInfo = CREATE, left: float | None = None
    ) -> asyncio.Task[Seat | None]:
        async def run() -> Seat | None:
            seat = await self.limiter.acquire(info, flow, left)
            if seat is not None:
                self.order.append(name)
                self.seats[name] = seat
            return seat

        return asyncio.ensure_future(run())

    def release(self, name: str) -> None:
        self.limiter.release(self.seats.pop(name))

    def metric(self, line: str) -> bool:
        return line in generate_latest(self.metrics.registry).decode()

    def assert_empty(self) -> None:
        """Nothing waits and no seat is taken: the books balance."""
        for pool in (*self.limiter.general, *self.limiter.reserved.values()):
            assert pool.inflight == 0, pool.name
            assert pool.waiting == 0, pool.name
            assert not pool.flows, pool.name
        assert self.limiter.executing == [0, 0]


def _rejected(reason: str, value: float, level: str = "global-default") -> str:
    schema = "system-node-high" if level == "node-high" else level
    return (
        f'apiserver_flowcontrol_rejected_requests_total{{flow_schema="{schema}",'
        f'priority_level="{level}",reason="{reason}"}} {value}'
    )


async def test_a_flow_is_served_first_in_first_out() -> None:
    h = Harness()
    (held,) = h.fill(CREATE)
    tasks = [h.wait(f"a{k}", "a") for k in range(4)]
    await settle()
    assert h.order == []
    h.limiter.release(held)
    await settle()
    for k in range(1, 4):
        h.release(f"a{k - 1}")
        await settle()
    assert h.order == ["a0", "a1", "a2", "a3"]
    h.release("a3")
    await asyncio.gather(*tasks)
    h.assert_empty()
    assert h.time.pending() == 0  # every wait timer was cancelled


async def test_freed_seats_go_round_robin_over_flows() -> None:
    h = Harness()
    (held,) = h.fill(CREATE)
    # A flood from one connection queued first, then two other clients.
    tasks = [h.wait(f"flood{k}", "flooder") for k in range(4)]
    tasks += [h.wait("bind0", "scheduler"), h.wait("bind1", "scheduler"), h.wait("rs0", "cm")]
    await settle()
    h.limiter.release(held)
    await settle()
    while len(h.order) < 7:
        h.release(h.order[-1])
        await settle()
    assert h.order == ["flood0", "bind0", "rs0", "flood1", "bind1", "flood2", "flood3"]
    h.release(h.order[-1])
    await asyncio.gather(*tasks)
    h.assert_empty()


async def test_a_waiter_is_refused_after_its_wait_limit() -> None:
    h = Harness()
    (held,) = h.fill(CREATE)
    patient = h.wait("patient", "a")  # no deadline: max_wait, 3 s
    hasty = h.wait("hasty", "b", left=2.0)  # a quarter of its 2 s left
    await settle()
    h.time.advance(0.49)
    await settle()
    assert not hasty.done()
    h.time.advance(0.01)
    await settle()
    assert hasty.done() and hasty.result() is None
    assert not patient.done()
    h.time.advance(2.5)
    await settle()
    assert patient.result() is None
    assert h.metric(_rejected("time-out", 2.0))
    assert h.metric(
        'apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="false",'
        'flow_schema="global-default",le="1.0",priority_level="global-default"} 1.0'
    )
    h.limiter.release(held)
    h.assert_empty()
    # A timed-out waiter's seat was never taken: the next request finds it free.
    assert h.limiter.admit(CREATE) is not None


@pytest.mark.parametrize(
    ("per_flow", "per_level", "flows", "refused"),
    [
        # Each flow holds at most per_flow waiters; the others keep their place.
        (2, 100, ["a", "a", "a", "b", "b", "a"], [2, 5]),
        # The level as a whole holds at most per_level.
        (50, 3, ["a", "b", "c", "d", "a"], [3, 4]),
    ],
)
async def test_a_full_queue_is_refused_at_once(
    per_flow: int, per_level: int, flows: list[str], refused: list[int]
) -> None:
    h = Harness(queues=QueueLimits(per_flow, per_level, 3.0))
    (held,) = h.fill(CREATE)
    tasks = [h.wait(f"{flow}{k}", flow) for k, flow in enumerate(flows)]
    await settle()
    assert [k for k, t in enumerate(tasks) if t.done()] == refused
    assert all(tasks[k].result() is None for k in refused)
    assert h.metric(_rejected("queue-full", float(len(refused))))
    assert h.limiter.general[1].waiting == len(flows) - len(refused)
    assert h.metric(
        'apiserver_flowcontrol_current_inqueue_requests{flow_schema="global-default",'
        f'priority_level="global-default"}} {float(len(flows) - len(refused))}'
    )
    h.limiter.release(held)
    for _ in flows:
        await settle()
        if h.seats:
            h.release(h.order[-1])
    await asyncio.gather(*tasks)
    h.assert_empty()


async def test_a_waiter_cancelled_leaves_its_queue_and_the_seat_goes_on() -> None:
    h = Harness()
    (held,) = h.fill(CREATE)
    gone = h.wait("gone", "a")
    stays = h.wait("stays", "a")
    await settle()
    gone.cancel()
    await settle()
    assert gone.cancelled()
    assert h.limiter.general[1].waiting == 1
    assert h.metric(_rejected("cancelled", 1.0))
    h.limiter.release(held)
    await settle()
    assert h.order == ["stays"]
    h.release("stays")
    await stays
    h.assert_empty()
    assert h.time.pending() == 0


@pytest.mark.parametrize("first", ["release", "cancel"])
async def test_a_waiter_cancelled_in_the_turn_it_is_handed_a_seat_leaks_nothing(
    first: str,
) -> None:
    """The handoff race: the seat is handed over (the future resolved) and the waiting task is
    cancelled before it runs again, in either order. The seat must end with the next waiter or
    free, never with a task that is gone."""
    h = Harness()
    (held,) = h.fill(CREATE)
    racer = h.wait("racer", "a")
    next_one = h.wait("next", "b")
    await settle()
    if first == "release":
        h.limiter.release(held)  # resolves racer's future with a seat ...
        racer.cancel()  # ... and its task is cancelled before it sees it
    else:
        racer.cancel()  # the future is cancelled first ...
        h.limiter.release(held)  # ... so the seat skips it
    await settle()
    assert racer.cancelled()
    assert h.order == ["next"]  # the seat went on to the next waiter
    assert h.limiter.general[1].inflight == 1
    h.release("next")
    await next_one
    h.assert_empty()
    assert h.metric(_rejected("cancelled", 1.0 if first == "cancel" else 0.0))


async def test_a_timer_firing_after_the_handoff_changes_nothing() -> None:
    h = Harness()
    (held,) = h.fill(CREATE)
    waiter = h.wait("w", "a")
    await settle()
    (timer,) = h.time.timers
    h.limiter.release(held)
    timer.callback()  # as if it had fired in the same turn
    await settle()
    seat = waiter.result()
    assert seat is not None
    assert h.limiter.general[1].inflight == 1
    assert h.metric(_rejected("time-out", 0.0))
    h.limiter.release(seat)
    h.assert_empty()


async def test_reserved_levels_never_wait_behind_global_default() -> None:
    # 2 + 2 seats: node-high and leader-election get 1 each.
    h = Harness(read_only=2, mutating=2)
    general = h.fill(CREATE, 2)
    flood = [h.wait(f"flood{k}", "flooder") for k in range(20)]
    await settle()
    # Renewals and leader election find their own seats while the flood waits ...
    renew = h.limiter.admit(RENEW)
    elect = h.limiter.admit(ELECT)
    assert renew is not None and elect is not None
    # ... and once those are taken too, a renewal waits in node-high's own queue, served by
    # the next node-high seat, ahead of the twenty Creates queued before it.
    late = h.wait("late-renewal", "kubelet", RENEW)
    await settle()
    assert not late.done()
    assert h.metric(
        'apiserver_flowcontrol_current_inqueue_requests{flow_schema="system-node-high",'
        'priority_level="node-high"} 1.0'
    )
    h.limiter.release(renew)
    await settle()
    assert h.order == ["late-renewal"]
    assert h.seats["late-renewal"].pool is h.limiter.reserved[NODE_HIGH]
    # A general seat freed goes to the flood, not elsewhere.
    h.limiter.release(general[0])
    await settle()
    assert h.order == ["late-renewal", "flood0"]
    for seat in (elect, general[1]):
        h.limiter.release(seat)
    h.release("late-renewal")
    while not all(t.done() for t in flood):
        await settle()
        for name in [n for n in list(h.seats) if n.startswith("flood")]:
            h.release(name)
    h.assert_empty()


async def test_a_queued_request_that_runs_observes_its_wait() -> None:
    h = Harness()
    (held,) = h.fill(CREATE)
    waiter = h.wait("w", "a")
    await settle()
    h.time.advance(0.25)
    h.limiter.release(held)
    seat = await waiter
    assert seat is not None
    assert h.metric(
        'apiserver_flowcontrol_request_wait_duration_seconds_sum{execute="true",'
        'flow_schema="global-default",priority_level="global-default"} 0.25'
    )
    h.limiter.release(seat)


@pytest.mark.parametrize(
    ("max_wait", "left", "limit"),
    [(3.0, None, 3.0), (3.0, 20.0, 3.0), (3.0, 4.0, 1.0), (3.0, 0.0, 0.0), (3.0, -1.0, -0.25)],
)
def test_wait_limit_is_a_quarter_of_the_time_left_at_most_max_wait(
    max_wait: float, left: float | None, limit: float
) -> None:
    assert wait_limit(max_wait, left) == limit


async def test_a_caller_out_of_time_is_refused_without_queuing() -> None:
    h = Harness()
    (held,) = h.fill(CREATE)
    assert await h.limiter.acquire(CREATE, "a", 0.0) is None
    assert h.limiter.general[1].waiting == 0
    assert h.time.pending() == 0
    assert h.metric(_rejected("time-out", 1.0))
    h.limiter.release(held)


async def test_acquire_takes_a_free_seat_without_queuing() -> None:
    h = Harness()
    seat = await h.limiter.acquire(GET, "a", None)
    assert seat is not None and h.limiter.executing == [1, 0]
    h.limiter.release(seat)
    h.assert_empty()
