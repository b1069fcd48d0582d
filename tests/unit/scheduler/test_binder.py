"""BindBatcher: groups concurrent binds, per-item results to the right caller, no idle delay;
the bind-batch and dropped-event metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from prometheus_client import generate_latest

from scheduler.binder import BindBatcher
from scheduler.metrics import Metrics
from tinykube.client import BindItem
from tinykube.errors import (
    AlreadyExistsError,
    TinykubeError,
    UnavailableError,
    UnimplementedError,
)


class FakeAPI:
    """Records each BindBatch; holds every RPC until `release` while `hold` is set."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.singles: list[str] = []
        self.hold = False
        self.release = asyncio.Event()
        self.taken = {"taken"}
        self.fail_whole: Exception | None = None

    def _one(self, item: BindItem) -> str | TinykubeError:
        if item.name in self.taken:
            return AlreadyExistsError(
                f"pod {item.namespace}/{item.name} is already assigned to node other"
            )
        self.taken.add(item.name)
        return f"rv-{item.name}"

    async def send_batch(self, items: Sequence[BindItem]) -> list[str | TinykubeError]:
        self.batches.append([i.name for i in items])
        if self.hold:
            await self.release.wait()
        if self.fail_whole is not None:
            raise self.fail_whole
        return [self._one(i) for i in items]

    async def send_one(self, item: BindItem) -> str:
        self.singles.append(item.name)
        r = self._one(item)
        if isinstance(r, TinykubeError):
            raise r
        return r


async def settle() -> None:
    """Let every ready task run (no wall-clock waits)."""
    for _ in range(10):
        await asyncio.sleep(0)


def item(name: str) -> BindItem:
    return BindItem("default", name, "n1", f"uid-{name}")


async def test_idle_bind_goes_at_once_alone() -> None:
    api = FakeAPI()
    b = BindBatcher(api.send_batch, api.send_one)
    assert await b.bind(item("a")) == "rv-a"
    assert api.batches == [["a"]]


async def test_binds_ready_together_share_one_rpc() -> None:
    api = FakeAPI()
    sizes: list[int] = []
    b = BindBatcher(api.send_batch, api.send_one, on_batch=sizes.append)
    names = [f"p{i}" for i in range(5)]
    out = await asyncio.gather(*(b.bind(item(n)) for n in names))
    assert out == [f"rv-{n}" for n in names]
    assert api.batches == [names]
    assert sizes == [5]


async def test_binds_wait_while_rpcs_are_in_flight_then_go_together() -> None:
    api = FakeAPI()
    api.hold = True
    b = BindBatcher(api.send_batch, api.send_one, max_batch=3, max_in_flight=1)
    first = asyncio.ensure_future(b.bind(item("a")))
    await settle()
    assert api.batches == [["a"]]
    later = [asyncio.ensure_future(b.bind(item(f"q{i}"))) for i in range(5)]
    await settle()
    assert api.batches == [["a"]]  # at most one RPC in flight
    api.release.set()
    assert await first == "rv-a"
    assert await asyncio.gather(*later) == [f"rv-q{i}" for i in range(5)]
    assert api.batches == [["a"], ["q0", "q1", "q2"], ["q3", "q4"]]  # max_batch per RPC


async def test_item_errors_reach_only_their_caller() -> None:
    api = FakeAPI()
    b = BindBatcher(api.send_batch, api.send_one)
    results = await asyncio.gather(
        b.bind(item("ok")), b.bind(item("taken")), b.bind(item("ok2")), return_exceptions=True
    )
    assert results[0] == "rv-ok" and results[2] == "rv-ok2"
    assert isinstance(results[1], AlreadyExistsError)
    assert str(results[1]) == "pod default/taken is already assigned to node other"
    assert len(api.batches) == 1


async def test_whole_rpc_failure_fails_every_bind_in_it() -> None:
    api = FakeAPI()
    api.fail_whole = UnavailableError("apiserver unreachable")
    b = BindBatcher(api.send_batch, api.send_one)
    results = await asyncio.gather(b.bind(item("a")), b.bind(item("b")), return_exceptions=True)
    assert all(isinstance(r, UnavailableError) for r in results)
    api.fail_whole = None
    assert await b.bind(item("c")) == "rv-c"  # the batcher keeps working


async def test_unimplemented_falls_back_to_single_binds() -> None:
    api = FakeAPI()
    api.fail_whole = UnimplementedError("unknown method BindBatch")
    b = BindBatcher(api.send_batch, api.send_one)
    results = await asyncio.gather(b.bind(item("a")), b.bind(item("taken")), return_exceptions=True)
    assert results[0] == "rv-a" and isinstance(results[1], AlreadyExistsError)
    assert api.singles == ["a", "taken"]
    assert await b.bind(item("b")) == "rv-b"
    assert api.singles == ["a", "taken", "b"] and len(api.batches) == 1


async def test_cancelled_caller_does_not_break_the_batch() -> None:
    api = FakeAPI()
    api.hold = True
    b = BindBatcher(api.send_batch, api.send_one, max_in_flight=1)
    first = asyncio.ensure_future(b.bind(item("a")))
    await settle()
    gone = asyncio.ensure_future(b.bind(item("gone")))
    kept = asyncio.ensure_future(b.bind(item("kept")))
    await settle()
    gone.cancel()
    api.release.set()
    assert await first == "rv-a"
    assert await kept == "rv-kept"
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert api.batches == [["a"], ["kept"]]
    await b.close()


async def test_batch_sizes_and_event_drops_are_exported() -> None:
    metrics = Metrics()
    dropped = [0]
    metrics.track_events(lambda: dropped[0])
    api = FakeAPI()
    b = BindBatcher(api.send_batch, api.send_one, on_batch=metrics.observe_bind_batch)
    await asyncio.gather(*(b.bind(item(f"m{i}")) for i in range(3)))
    dropped[0] = 7
    text = generate_latest(metrics.registry).decode()
    assert "scheduler_bind_batch_size_count 1.0" in text
    assert "scheduler_bind_batch_size_sum 3.0" in text
    assert "scheduler_events_dropped_total 7.0" in text
