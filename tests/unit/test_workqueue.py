"""WorkQueue: dedup, one worker per key, re-add after done, delays and rate limits (FakeClock)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tinykube.clock import FakeClock
from tinykube.workqueue import BucketRateLimiter, ItemExponentialRateLimiter, ShutDown, WorkQueue


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def new_queue() -> tuple[WorkQueue[str], FakeClock]:
    clock = FakeClock()
    return WorkQueue(clock), clock


async def test_adds_are_deduplicated_and_fifo() -> None:
    q, _ = new_queue()
    for key in ["a", "b", "a", "c", "b"]:
        q.add(key)
    assert len(q) == 3
    assert [await q.get(), await q.get(), await q.get()] == ["a", "b", "c"]
    assert len(q) == 0


async def test_key_being_processed_is_not_handed_out_again_until_done() -> None:
    q, _ = new_queue()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")  # re-added while processing
    assert len(q) == 0
    second = asyncio.ensure_future(q.get())
    await settle()
    assert not second.done()
    q.add("a")  # still only once
    q.done("a")
    assert await asyncio.wait_for(second, 1) == "a"
    q.done("a")
    assert len(q) == 0


async def test_done_without_readd_does_not_requeue() -> None:
    q, _ = new_queue()
    q.add("a")
    key = await q.get()
    q.done(key)
    assert len(q) == 0
    q.add("a")
    assert await q.get() == "a"


async def test_waiting_getter_is_woken_by_add() -> None:
    q, _ = new_queue()
    getters = [asyncio.ensure_future(q.get()) for _ in range(3)]
    await settle()
    q.add("x")
    q.add("y")
    await settle()
    done = [g for g in getters if g.done()]
    assert sorted(g.result() for g in done) == ["x", "y"]
    pending = [g for g in getters if not g.done()]
    assert len(pending) == 1
    q.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(pending[0], 1)


async def test_cancelled_getter_passes_its_wakeup_on() -> None:
    q, _ = new_queue()
    first = asyncio.ensure_future(q.get())
    second = asyncio.ensure_future(q.get())
    await settle()
    q.add("k")  # wakes `first` ...
    first.cancel()  # ... which is cancelled before it runs
    await settle()
    assert second.done() and second.result() == "k"


async def test_shutdown_wakes_getters_and_ignores_adds() -> None:
    q, _ = new_queue()
    getter = asyncio.ensure_future(q.get())
    await settle()
    q.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(getter, 1)
    q.add("late")
    assert len(q) == 0
    with pytest.raises(ShutDown):
        await q.get()


async def test_add_after_waits_on_the_clock() -> None:
    q, clock = new_queue()
    q.add_after("a", 5.0)
    assert len(q) == 0 and q.num_waiting() == 1
    await clock.step(4.9)
    assert len(q) == 0
    await clock.step(0.2)
    assert len(q) == 1 and q.num_waiting() == 0
    assert await q.get() == "a"


async def test_add_after_keeps_the_earliest_time() -> None:
    q, clock = new_queue()
    q.add_after("a", 10.0)
    q.add_after("a", 2.0)  # earlier wins
    q.add_after("a", 50.0)  # later is ignored
    await clock.step(2.0)
    assert len(q) == 1
    await q.get()
    q.done("a")
    await clock.step(100.0)
    assert len(q) == 0  # the 10 s and 50 s adds were superseded


async def test_add_after_zero_adds_at_once() -> None:
    q, _ = new_queue()
    q.add_after("a", 0)
    assert len(q) == 1


async def test_shutdown_drops_delayed_adds() -> None:
    q, clock = new_queue()
    q.add_after("a", 1.0)
    q.shutdown()
    await clock.step(5.0)
    assert len(q) == 0


def test_item_backoff_doubles_to_cap_and_forget_resets() -> None:
    limiter: ItemExponentialRateLimiter[str] = ItemExponentialRateLimiter(0.005, 1000.0)
    delays = [limiter.when("k") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1000.0
    assert all(b >= a for a, b in itertools.pairwise(delays))
    assert limiter.num_requeues("k") == 20
    assert limiter.when("other") == 0.005  # per key
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0
    assert limiter.when("k") == 0.005
    for _ in range(200):
        limiter.when("huge")
    assert limiter.when("huge") == 1000.0


def test_bucket_allows_burst_then_spaces_at_qps() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(clock, qps=10.0, burst=3)
    assert [bucket.when() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.when() == pytest.approx(0.1)
    assert bucket.when() == pytest.approx(0.2)
    clock.advance(1.0)  # refills (and repays the reservations)
    assert bucket.when() == 0.0


async def test_add_rate_limited_uses_per_key_backoff() -> None:
    q, clock = new_queue()
    q.add_rate_limited("a")  # 5 ms
    q.add_rate_limited("b")  # 5 ms (separate key)
    q.add_rate_limited("a")  # a already waiting for 5 ms: keeps it; failures now 2
    assert q.num_requeues("a") == 2
    await clock.step(0.005)
    assert len(q) == 2
    await q.get()
    await q.get()
    q.done("a")
    q.done("b")
    q.add_rate_limited("a")  # third failure: 20 ms
    await clock.step(0.019)
    assert len(q) == 0
    await clock.step(0.002)
    assert len(q) == 1
    q.forget("a")
    assert q.num_requeues("a") == 0


async def test_rate_limited_storm_is_capped_by_the_bucket() -> None:
    q, _ = new_queue()
    delays = [q.when(f"k{i}") for i in range(110)]
    # The first 100 distinct keys pass on the per-key 5 ms; then the 10 qps bucket dominates.
    assert delays[:100] == [0.005] * 100
    assert delays[100] == pytest.approx(0.1)
    assert delays[109] == pytest.approx(1.0)


async def test_many_workers_never_share_a_key() -> None:
    q, _ = new_queue()
    in_flight: set[str] = set()
    seen: list[str] = []
    overlaps: list[str] = []

    async def worker() -> None:
        while True:
            try:
                key = await q.get()
            except ShutDown:
                return
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
            await asyncio.sleep(0)
            if len(seen) < 200 and len(seen) % 3 == 0:
                q.add(key)  # re-added while being processed
            seen.append(key)
            await asyncio.sleep(0)
            in_flight.discard(key)
            q.done(key)

    workers = [asyncio.ensure_future(worker()) for _ in range(4)]
    for i in range(300):
        q.add(f"k{i % 7}")
        if i % 5 == 0:
            await asyncio.sleep(0)
    for _ in range(200):
        await asyncio.sleep(0)
        if len(q) == 0 and not any(q.is_processing(f"k{i}") for i in range(7)):
            break
    q.shutdown()
    await asyncio.wait_for(asyncio.gather(*workers), 2)
    assert overlaps == []
    assert set(seen) == {f"k{i}" for i in range(7)}
