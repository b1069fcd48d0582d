"""MicroBatcher, the queue under the bind batcher, the status writer and the txn batcher: at
most `max_batch` per batch, cancelled callers dropped, each waiter settled with its own result
or error, and waiters of a cancelled batch failed with `abandoned()`."""

from __future__ import annotations

import asyncio

import pytest

from tinykube.batching import MicroBatcher


class Recorder(MicroBatcher[str, str]):
    """Answers each item upper-cased, "bad" with a ValueError; holds every batch while `hold`."""

    def __init__(self, *, max_in_flight: int, max_batch: int | None = None) -> None:
        super().__init__(max_in_flight=max_in_flight, max_batch=max_batch)
        self.batches: list[list[str]] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def send(self, batch: list[tuple[str, asyncio.Future[str]]]) -> None:
        self.batches.append([item for item, _ in batch])
        await self.hold.wait()
        self.settle(batch, [ValueError(i) if i == "bad" else i.upper() for i, _ in batch])


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def queued_behind_one(b: Recorder, items: list[str]) -> list[asyncio.Task[str]]:
    """`first` sent and held, then `items` queued behind it."""
    b.hold.clear()
    tasks = [asyncio.ensure_future(b.enqueue("first"))]
    await settle()
    tasks += [asyncio.ensure_future(b.enqueue(i)) for i in items]
    await settle()
    return tasks


async def test_at_most_max_batch_items_leave_together() -> None:
    b = Recorder(max_in_flight=1, max_batch=2)
    tasks = await queued_behind_one(b, ["a", "b", "c", "d", "e"])
    b.hold.set()
    assert await asyncio.gather(*tasks) == ["FIRST", "A", "B", "C", "D", "E"]
    assert b.batches == [["first"], ["a", "b"], ["c", "d"], ["e"]]


async def test_without_max_batch_everything_waiting_leaves_together() -> None:
    b = Recorder(max_in_flight=1)
    tasks = await queued_behind_one(b, ["a", "b", "c"])
    b.hold.set()
    await asyncio.gather(*tasks)
    assert b.batches == [["first"], ["a", "b", "c"]]


async def test_cancelled_callers_are_dropped_and_the_batch_is_cut_from_the_rest() -> None:
    b = Recorder(max_in_flight=1, max_batch=2)
    tasks = await queued_behind_one(b, ["a", "gone", "b"])
    tasks[2].cancel()
    await settle()
    b.hold.set()
    assert list(await asyncio.gather(tasks[0], tasks[1], tasks[3])) == ["FIRST", "A", "B"]
    # the cancelled one still counted against its batch's max_batch: it was cut, then dropped
    assert b.batches == [["first"], ["a"], ["b"]]


async def test_each_waiter_gets_its_own_result_or_error() -> None:
    b = Recorder(max_in_flight=1)
    tasks = await queued_behind_one(b, ["a", "bad", "c"])
    b.hold.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[:2] == ["FIRST", "A"] and results[3] == "C"
    assert isinstance(results[2], ValueError)


async def test_waiters_of_a_cancelled_batch_fail_with_abandoned() -> None:
    b = Recorder(max_in_flight=1)
    tasks = await queued_behind_one(b, [])
    await b.close()
    with pytest.raises(RuntimeError, match="batch abandoned"):
        await tasks[0]
