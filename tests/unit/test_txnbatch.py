"""TxnBatcher: concurrent single-key txns grouped into one etcd Txn, with fake senders (no etcd).

The fake etcd applies a combined txn only if every compare holds (compares here are plain
"key must be at this version" checks on a dict), as etcd does, and answers one revision.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from aetcd import rpc

from apiserver.txnbatch import FULL_BATCH, MAX_TXN_OPS, BatchedResult, TxnBatcher
from tinykube.errors import InternalError, UnavailableError

# Tests that are not about the slow-txn rule turn it off: on a loaded machine a test's own steps
# can take longer than SLOW_TXN (50 ms), and the rule would then send a second txn early.
NEVER_SLOW = 3600.0


def txn(key: bytes, expect: int, value: bytes = b"v") -> Any:
    """A guarded put: `key` must be at version `expect` (0: absent)."""
    return rpc.TxnRequest(
        compare=[
            rpc.Compare(
                key=key,
                result=rpc.Compare.CompareResult.EQUAL,
                target=rpc.Compare.CompareTarget.VERSION,
                version=expect,
            )
        ],
        success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))],
        failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key))],
    )


class FakeEtcd:
    def __init__(self) -> None:
        self.versions: dict[bytes, int] = {}
        self.revision = 1
        self.batches: list[list[bytes]] = []  # keys of each combined txn sent
        self.alone: list[bytes] = []  # keys of each single txn sent
        self.fail_with: Exception | None = None

    def _apply(self, req: Any) -> Any:
        ok = all(self.versions.get(c.key, 0) == c.version for c in req.compare)
        resp = rpc.TxnResponse(succeeded=ok)
        if ok:
            self.revision += 1
            for op in req.success:
                key = op.request_put.key
                self.versions[key] = self.versions.get(key, 0) + 1
        resp.header.revision = self.revision
        return resp

    async def send_batch(self, req: Any) -> Any:
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise self.fail_with
        self.batches.append([op.request_put.key for op in req.success])
        return self._apply(req)

    async def send_one(self, req: Any, operation: str) -> Any:
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise self.fail_with
        self.alone.append(req.success[0].request_put.key)
        return self._apply(req)


def make() -> tuple[FakeEtcd, TxnBatcher, list[int]]:
    etcd = FakeEtcd()
    sizes: list[int] = []
    batcher = TxnBatcher(etcd.send_batch, etcd.send_one, on_batch=sizes.append)
    batcher.slow_txn = NEVER_SLOW
    return etcd, batcher, sizes


async def test_an_idle_write_goes_alone_and_gets_its_own_response() -> None:
    etcd, batcher, sizes = make()
    resp = await batcher.submit(b"a", txn(b"a", 0), "create")
    assert not isinstance(resp, BatchedResult) and resp.succeeded
    assert etcd.alone == [b"a"] and etcd.batches == [] and sizes == [1]


async def test_writes_of_one_loop_turn_share_one_txn_and_revision() -> None:
    etcd, batcher, sizes = make()
    keys = [f"k{i}".encode() for i in range(10)]
    results = await asyncio.gather(*(batcher.submit(k, txn(k, 0), "create") for k in keys))
    assert etcd.batches == [keys]
    assert all(isinstance(r, BatchedResult) and r.succeeded for r in results)
    assert {r.revision for r in results} == {etcd.revision}
    assert sizes == [10]
    assert all(etcd.versions[k] == 1 for k in keys)


async def test_a_failed_compare_resends_each_write_alone_for_its_own_answer() -> None:
    etcd, batcher, _ = make()
    etcd.versions[b"taken"] = 1
    keys = [b"a", b"taken", b"b"]
    results = await asyncio.gather(*(batcher.submit(k, txn(k, 0), "create") for k in keys))
    assert etcd.batches == [keys]  # tried together, nothing written
    assert sorted(etcd.alone) == sorted(keys)
    ok = {k: r.succeeded for k, r in zip(keys, results, strict=True)}
    assert ok == {b"a": True, b"taken": False, b"b": True}
    assert etcd.versions == {b"a": 1, b"taken": 1, b"b": 1}  # each written once


async def test_the_same_key_never_shares_a_txn() -> None:
    etcd, batcher, _ = make()
    first = batcher.submit(b"a", txn(b"a", 0), "create")
    second = batcher.submit(b"a", txn(b"a", 1), "update")
    other = batcher.submit(b"b", txn(b"b", 0), "create")
    r1, r2, r3 = await asyncio.gather(first, second, other)
    assert r1.succeeded and r2.succeeded and r3.succeeded
    assert etcd.versions[b"a"] == 2
    sent = etcd.batches + [[k] for k in etcd.alone]
    assert not any(batch.count(b"a") > 1 for batch in sent)


async def test_an_exclusive_group_has_at_most_one_write_per_txn() -> None:
    etcd, batcher, _ = make()
    batcher.exclusive = lambda key: b"/pods/" if key.startswith(b"/pods/") else None
    keys = [b"/pods/a", b"/pods/b", b"/leases/x", b"/leases/y"]
    results = await asyncio.gather(*(batcher.submit(k, txn(k, 0), "create") for k in keys))
    assert all(r.succeeded for r in results)
    sent = etcd.batches + [[k] for k in etcd.alone]
    for batch in sent:
        assert sum(k.startswith(b"/pods/") for k in batch) <= 1
    assert sorted(k for batch in sent for k in batch) == sorted(keys)


async def test_a_failed_call_fails_every_write_in_it() -> None:
    etcd, batcher, _ = make()
    etcd.fail_with = UnavailableError("etcd is unavailable: UNAVAILABLE")
    keys = [b"a", b"b", b"c"]
    results = await asyncio.gather(
        *(batcher.submit(k, txn(k, 0), "create") for k in keys), return_exceptions=True
    )
    assert all(isinstance(r, UnavailableError) for r in results)
    assert etcd.versions == {}


class GatedEtcd(FakeEtcd):
    """A FakeEtcd whose calls wait for `gate`, counting how many are out at once."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.out = 0
        self.most_out = 0

    async def _held(self) -> None:
        self.out += 1
        self.most_out = max(self.most_out, self.out)
        try:
            await self.gate.wait()
        finally:
            self.out -= 1

    async def send_batch(self, req: Any) -> Any:
        await self._held()
        return await super().send_batch(req)

    async def send_one(self, req: Any, operation: str) -> Any:
        await self._held()
        return await super().send_one(req, operation)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_writes_arriving_while_a_txn_is_out_wait_for_it_and_leave_together() -> None:
    # With a second txn always allowed, a few writes arriving one by one each left as their
    # own small txn; they now wait for the one round trip and share the next txn.
    etcd = GatedEtcd()
    batcher = TxnBatcher(etcd.send_batch, etcd.send_one)
    batcher.slow_txn = NEVER_SLOW
    first = asyncio.ensure_future(batcher.submit(b"a", txn(b"a", 0), "create"))
    await settle()
    later = []
    for k in (b"b", b"c", b"d"):  # each in a turn of its own
        later.append(asyncio.ensure_future(batcher.submit(k, txn(k, 0), "create")))
        await settle()
    assert etcd.out == 1  # the others wait for the first
    etcd.gate.set()
    results = await asyncio.gather(first, *later)
    assert all(r.succeeded for r in results)
    assert etcd.alone == [b"a"] and etcd.batches == [[b"b", b"c", b"d"]]
    assert etcd.most_out == 1


async def test_a_full_batch_waiting_goes_alongside_the_txn_in_flight() -> None:
    etcd = GatedEtcd()
    batcher = TxnBatcher(etcd.send_batch, etcd.send_one)
    batcher.slow_txn = NEVER_SLOW
    first = asyncio.ensure_future(batcher.submit(b"a", txn(b"a", 0), "create"))
    await settle()
    few = [f"f{i}".encode() for i in range(FULL_BATCH - 1)]
    waiting = [asyncio.ensure_future(batcher.submit(k, txn(k, 0), "create")) for k in few]
    await settle()
    assert etcd.out == 1  # one short of a full batch: it waits
    waiting.append(asyncio.ensure_future(batcher.submit(b"last", txn(b"last", 0), "create")))
    await settle()
    assert etcd.out == 2  # a full batch leaves alongside; never more than max_in_flight
    keys = [f"m{i}".encode() for i in range(2 * FULL_BATCH)]
    more = [asyncio.ensure_future(batcher.submit(k, txn(k, 0), "create")) for k in keys]
    await settle()
    assert etcd.out == 2
    etcd.gate.set()
    results = await asyncio.gather(first, *waiting, *more)
    assert all(r.succeeded for r in results)
    assert etcd.batches[0] == [*few, b"last"]
    assert etcd.most_out == 2


async def test_a_slow_txn_holds_back_the_writes_behind_it_only_so_long() -> None:
    # A member that dies with a txn of ours out answers nothing until the attempt's deadline
    # (seconds); the writes queued behind it go beside it after `slow_txn`, to another member.
    etcd = GatedEtcd()
    batcher = TxnBatcher(etcd.send_batch, etcd.send_one)
    batcher.slow_txn = 0.05
    stuck = asyncio.ensure_future(batcher.submit(b"a", txn(b"a", 0), "create"))
    await settle()
    behind = asyncio.ensure_future(batcher.submit(b"b", txn(b"b", 0), "create"))
    await settle()
    assert etcd.out == 1
    await asyncio.sleep(0.1)
    assert etcd.out == 2  # b went beside the slow one, alone, without another enqueue
    etcd.gate.set()
    assert all(r.succeeded for r in await asyncio.gather(stuck, behind))
    assert etcd.alone == [b"a", b"b"]


async def test_a_batch_stays_within_etcds_op_limit() -> None:
    etcd, batcher, sizes = make()
    keys = [f"k{i}".encode() for i in range(MAX_TXN_OPS * 2 + 5)]
    results = await asyncio.gather(*(batcher.submit(k, txn(k, 0), "create") for k in keys))
    assert all(r.succeeded for r in results)
    assert max(sizes) <= MAX_TXN_OPS
    assert sum(sizes) == len(keys) == len(etcd.versions)


async def test_a_cancelled_caller_is_left_out() -> None:
    etcd, batcher, _ = make()
    task = asyncio.ensure_future(batcher.submit(b"gone", txn(b"gone", 0), "create"))
    kept = asyncio.ensure_future(batcher.submit(b"kept", txn(b"kept", 0), "create"))
    task.cancel()
    assert (await kept).succeeded
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b"gone" not in etcd.versions


def etcd_error(code: grpc.StatusCode, details: str) -> InternalError:
    """An error as Storage raises it: the mapped API error, etcd's gRPC error its cause."""
    error = InternalError(f"etcd error: {code.name}: {details}")
    error.__cause__ = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)
    return error


async def test_a_combination_etcd_refuses_is_sent_one_by_one() -> None:
    etcd, batcher, _ = make()
    refused = etcd_error(grpc.StatusCode.INVALID_ARGUMENT, "too many operations in txn request")

    async def refuse(req: Any) -> Any:
        raise refused

    batcher._send_batch = refuse
    keys = [b"a", b"b", b"c"]
    results = await asyncio.gather(*(batcher.submit(k, txn(k, 0), "create") for k in keys))
    assert all(r.succeeded for r in results)
    assert sorted(etcd.alone) == keys


async def test_a_batch_that_may_have_been_applied_is_not_resent_alone() -> None:
    # Resent alone, each write would fail its compare against its own earlier success and
    # read as a conflict; its caller (Storage._txn) retries it knowing what it wrote.
    etcd, batcher, _ = make()
    unknown = etcd_error(grpc.StatusCode.UNKNOWN, "raft proposal dropped")

    async def lost(req: Any) -> Any:
        raise unknown

    batcher._send_batch = lost
    keys = [b"a", b"b", b"c"]
    results = await asyncio.gather(
        *(batcher.submit(k, txn(k, 0), "create") for k in keys), return_exceptions=True
    )
    assert results == [unknown] * 3
    assert etcd.alone == []
