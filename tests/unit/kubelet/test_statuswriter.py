"""StatusWriter: concurrent status writes share UpdateStatusBatch RPCs, each caller gets its own
pod's result (or the error its own UpdateStatus would raise), nothing waits when idle, and it
falls back to one UpdateStatus per pod without UpdateStatusBatch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from kubelet.statuswriter import StatusWriter
from tinykube.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    TinykubeError,
    UnavailableError,
    UnimplementedError,
)
from tinykube.v1 import meta_pb2, pod_pb2


def pod(name: str, rv: str = "5") -> pod_pb2.Pod:
    p = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=name, namespace="default"))
    p.metadata.resourceVersion = rv
    p.status.phase = "Running"
    return p


class FakePods:
    def __init__(self, api: FakeAPI) -> None:
        self.api = api
        self.hold = False
        self.release = asyncio.Event()

    async def update_status(self, p: pod_pb2.Pod) -> pod_pb2.Pod:
        self.api.singles.append(p.metadata.name)
        if self.hold:
            await self.release.wait()
        result = self.api.one(p)
        if isinstance(result, TinykubeError):
            raise result
        stored = pod_pb2.Pod()
        stored.CopyFrom(p)
        stored.metadata.resourceVersion = result
        return stored


class FakeAPI:
    """Records each UpdateStatusBatch; holds every RPC until `release` while `hold` is set."""

    def __init__(self, *, batch: bool = True) -> None:
        self.batches: list[list[str]] = []
        self.singles: list[str] = []
        self.hold = False
        self.release = asyncio.Event()
        self.fail_whole: Exception | None = None
        self.pods = FakePods(self)
        if not batch:
            self.update_status_batch = None  # type: ignore[assignment]

    def one(self, p: pod_pb2.Pod) -> str | TinykubeError:
        name = p.metadata.name
        if name == "gone":
            return NotFoundError(f'pods "{name}" not found')
        if name == "stale":
            return ConflictError(f'Operation cannot be fulfilled on pods "{name}"')
        return str(int(p.metadata.resourceVersion) + 1)

    async def update_status_batch(self, pods: Sequence[pod_pb2.Pod]) -> list[str | TinykubeError]:
        self.batches.append([p.metadata.name for p in pods])
        if self.hold:
            await self.release.wait()
        if self.fail_whole is not None:
            raise self.fail_whole
        return [self.one(p) for p in pods]


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_idle_write_goes_at_once_as_a_plain_update_status() -> None:
    api = FakeAPI()
    writer = StatusWriter(api)
    assert await writer.write(pod("a", "7")) == "8"
    assert api.singles == ["a"] and api.batches == []


async def behind_one(api: FakeAPI, writer: StatusWriter, *pods: pod_pb2.Pod) -> list[object]:
    """Write `pods` while a first write ("first") is out, then let it return: the results."""
    api.pods.hold = True
    first = asyncio.ensure_future(writer.write(pod("first", "1")))
    await settle()
    rest = asyncio.gather(*(writer.write(p) for p in pods), return_exceptions=True)
    await settle()
    assert api.batches == []  # they wait for the write in flight
    api.pods.hold = False
    api.pods.release.set()
    assert await first == "2"
    return list(await rest)


async def test_writes_made_while_one_is_out_share_a_batch_with_their_own_results() -> None:
    api = FakeAPI()
    writer = StatusWriter(api, max_in_flight=1)
    results = await behind_one(api, writer, pod("a", "1"), pod("stale"), pod("b", "3"), pod("gone"))
    assert api.singles == ["first"] and api.batches == [["a", "stale", "b", "gone"]]
    assert results[0] == "2" and results[2] == "4"
    assert isinstance(results[1], ConflictError)
    assert isinstance(results[3], NotFoundError)


async def test_writes_queue_behind_batches_in_flight_and_leave_together() -> None:
    api = FakeAPI()
    api.pods.hold = True
    api.hold = True
    writer = StatusWriter(api, max_in_flight=1, max_batch=3)
    first = asyncio.ensure_future(writer.write(pod("a")))
    await settle()
    rest = [asyncio.ensure_future(writer.write(pod(f"p{k}"))) for k in range(6)]
    await settle()
    assert api.singles == ["a"] and api.batches == []  # the rest wait for the one in flight
    api.pods.release.set()
    api.hold = False
    api.release.set()
    await asyncio.gather(first, *rest)
    assert api.batches == [["p0", "p1", "p2"], ["p3", "p4", "p5"]]


async def test_a_batch_of_one_is_a_plain_update_status() -> None:
    api = FakeAPI()
    api.pods.hold = True
    writer = StatusWriter(api)
    first = asyncio.ensure_future(writer.write(pod("a")))
    await settle()
    second = asyncio.ensure_future(writer.write(pod("b", "4")))
    await settle()
    api.pods.release.set()
    await first
    assert await second == "5"
    assert api.singles == ["a", "b"] and api.batches == []


async def test_whole_rpc_failure_fails_every_write_in_it() -> None:
    api = FakeAPI()
    api.fail_whole = UnavailableError("apiserver went away")
    writer = StatusWriter(api, max_in_flight=1)
    results = await behind_one(api, writer, pod("a"), pod("b"))
    assert all(isinstance(r, UnavailableError) for r in results)


async def test_unimplemented_falls_back_to_one_update_status_per_pod() -> None:
    api = FakeAPI()
    api.fail_whole = UnimplementedError("unknown method UpdateStatusBatch")
    writer = StatusWriter(api, max_in_flight=1)
    results = await behind_one(api, writer, pod("a", "1"), pod("gone"))
    assert results[0] == "2" and isinstance(results[1], NotFoundError)
    assert api.singles == ["first", "a", "gone"]
    assert not writer.batching
    assert await writer.write(pod("c", "9")) == "10"
    assert api.batches == [["a", "gone"]]  # never again


async def test_client_without_batch_writes_one_by_one() -> None:
    api = FakeAPI(batch=False)
    writer = StatusWriter(api)
    assert not writer.batching
    assert await writer.write(pod("a", "1")) == "2"
    with pytest.raises(ConflictError):
        await writer.write(pod("stale"))
    assert api.singles == ["a", "stale"] and api.batches == []


async def test_batch_refused_as_a_whole_is_resent_pod_by_pod() -> None:
    api = FakeAPI()
    api.fail_whole = ForbiddenError('pods "elsewhere" is forbidden: not bound to this node')
    writer = StatusWriter(api, max_in_flight=1)
    results = await behind_one(api, writer, pod("a", "1"), pod("stale"))
    assert results[0] == "2" and isinstance(results[1], ConflictError)
    assert api.singles == ["first", "a", "stale"]
    assert writer.batching  # still batching: the next batch may be fine
