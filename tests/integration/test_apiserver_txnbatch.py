"""Concurrent writes sharing etcd transactions, against a real etcd (apiserver/txnbatch.py).

Many writes in flight at once are committed in shared txns (several objects at one revision);
each write still has its own outcome (a stale resourceVersion is ABORTED, a taken name
ALREADY_EXISTS) and every change reaches every watcher exactly once. While a plain Watch of a
kind is open, that kind's writes never share a revision.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from typing import Any

import grpc
import pytest

from apiserver.metrics import Metrics
from apiserver.storage import Storage
from apiserver.txnbatch import MAX_TXN_OPS
from tests.integration.conftest import (
    RunningAPIServer,
    Stubs,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, pod_pb2

pytestmark = pytest.mark.integration


def batch_sizes(running: RunningAPIServer) -> tuple[float, float]:
    """(writes, txns) the apiserver's etcd batcher has sent so far."""
    hist = running.server.metrics.etcd_txn_batch_size
    total = count = 0.0
    for metric in hist.collect():
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    return total, count


async def read_batches(call: Any, n: int, wait: float = 10.0) -> list[pod_pb2.PodWatchEvent]:
    out: list[pod_pb2.PodWatchEvent] = []
    while len(out) < n:
        msg = await asyncio.wait_for(call.read(), wait)
        assert msg is not grpc.aio.EOF
        out.extend(e for e in msg.events if e.type != "BOOKMARK")
    return out


async def test_concurrent_creates_share_txns_and_each_is_seen_once(
    apiserver: RunningAPIServer, stubs: Stubs
) -> None:
    start = (await stubs.pods.List(meta_pb2.ListRequest())).metadata.resourceVersion
    watch = stubs.pods.WatchBatch(meta_pb2.WatchRequest(resourceVersion=start))
    writes_before, txns_before = batch_sizes(apiserver)
    created = await asyncio.gather(
        *(stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(f"p{i}"))) for i in range(80))
    )
    writes, txns = batch_sizes(apiserver)
    assert writes - writes_before == 80
    assert txns - txns_before < 80, "no two of 80 concurrent creates shared a txn"
    # Objects written together share a resourceVersion; each is its own key and revision.
    by_rv = collections.Counter(p.metadata.resourceVersion for p in created)
    assert max(by_rv.values()) > 1
    events = await read_batches(watch, 80)
    assert sorted(e.object.metadata.name for e in events) == sorted(f"p{i}" for i in range(80))
    assert {e.object.metadata.name: e.object for e in events} == {
        p.metadata.name: p for p in created
    }
    watch.cancel()
    listed = await stubs.pods.List(meta_pb2.ListRequest())
    assert len(listed.items) == 80


async def test_each_write_in_a_shared_txn_keeps_its_own_outcome(stubs: Stubs) -> None:
    pods = [
        await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(f"w{i}"))) for i in range(20)
    ]
    # Move every odd pod on, so the requests below carry a stale resourceVersion for them.
    for p in pods[1::2]:
        fresh = pod_pb2.Pod()
        fresh.CopyFrom(p)
        fresh.metadata.labels["moved"] = "yes"
        await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=fresh))

    async def relabel(p: pod_pb2.Pod) -> pod_pb2.Pod | grpc.aio.AioRpcError:
        mine = pod_pb2.Pod()
        mine.CopyFrom(p)
        mine.metadata.labels["round"] = "2"
        try:
            return await stubs.pods.Update(pod_pb2.UpdatePodRequest(pod=mine))
        except grpc.aio.AioRpcError as exc:
            return exc

    async def recreate(i: int) -> pod_pb2.Pod | grpc.aio.AioRpcError:
        try:
            return await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(f"w{i}")))
        except grpc.aio.AioRpcError as exc:
            return exc

    results = await asyncio.gather(*(relabel(p) for p in pods), recreate(3), recreate(99))
    for i, r in enumerate(results[:20]):
        if i % 2:
            assert isinstance(r, grpc.aio.AioRpcError), f"w{i}: a stale update succeeded"
            assert r.code() == grpc.StatusCode.ABORTED
        else:
            assert isinstance(r, pod_pb2.Pod), f"w{i}: {r}"
            assert r.metadata.labels["round"] == "2"
    taken, new = results[20], results[21]
    assert isinstance(taken, grpc.aio.AioRpcError)
    assert taken.code() == grpc.StatusCode.ALREADY_EXISTS
    assert isinstance(new, pod_pb2.Pod)
    stored = {p.metadata.name: p for p in (await stubs.pods.List(meta_pb2.ListRequest())).items}
    for i in range(20):
        labels = stored[f"w{i}"].metadata.labels
        assert ("round" in labels) == (i % 2 == 0)
        assert ("moved" in labels) == (i % 2 == 1)


async def test_a_plain_watch_never_sees_two_events_at_one_revision(
    etcd_server: EtcdServer,
) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint))
    ch = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        stubs = make_stubs(ch)
        plain = stubs.pods.Watch(meta_pb2.WatchRequest())
        # The watch is registered once its first (here: empty) replay is done; a write seen on
        # it proves that.
        await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("marker")))
        first: Any = await asyncio.wait_for(plain.read(), 10)
        assert first.object.metadata.name == "marker"
        await asyncio.gather(
            *(stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(f"q{i}"))) for i in range(60))
        )
        seen: list[int] = []
        while len(seen) < 60:
            ev: Any = await asyncio.wait_for(plain.read(), 10)
            seen.append(int(ev.object.metadata.resourceVersion))
        assert len(set(seen)) == 60, "two pod events shared a revision on a plain Watch"
        assert seen == sorted(seen)
        plain.cancel()
        # With no plain watcher left, pod writes share txns again.
        await asyncio.sleep(0.1)
        assert running.server.caches["Pod"].plain_watchers == 0
        created = await asyncio.gather(
            *(stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod(f"r{i}"))) for i in range(60))
        )
        assert len({p.metadata.resourceVersion for p in created}) < 60
    finally:
        await ch.close()
        await running.server.stop()


async def test_the_largest_batches_stay_within_etcds_limits(etcd_server: EtcdServer) -> None:
    # 300 writes submitted in one turn of the event loop fill batches to the 128-op limit; a
    # larger txn would be refused by etcd ("too many operations in txn request") and fail every
    # write in it. Storage directly, so nothing spreads the writes over several turns.
    metrics = Metrics()
    storage = Storage([etcd_server.endpoint], timeout=10.0, metrics=metrics)
    storage.connect()
    prefix = f"/tinykube-test-txnbatch-{uuid.uuid4().hex[:8]}/".encode()
    try:
        results = await asyncio.gather(
            *(storage.create(prefix + b"k%03d" % i, b"v") for i in range(300))
        )
        assert all(r.succeeded for r in results)
        by_revision = collections.Counter(r.revision for r in results)
        assert max(by_revision.values()) == MAX_TXN_OPS
        listed = await storage.list_prefix(prefix)
        assert len(listed.kvs) == 300
        # Every key written exactly once, each at the revision its write reported.
        assert {kv.key: kv.mod_revision for kv in listed.kvs} == {
            prefix + b"k%03d" % i: r.revision for i, r in enumerate(results)
        }
    finally:
        await storage.close()


class SmallTxnEtcd(EtcdServer):
    """A real etcd that takes at most 16 ops per txn."""

    def command(self) -> list[str]:
        return [*super().command(), "--max-txn-ops", "16"]


async def test_an_etcd_with_a_smaller_txn_limit_still_gets_every_write() -> None:
    etcd = SmallTxnEtcd()
    await asyncio.to_thread(etcd.start)
    storage = Storage([etcd.endpoint], timeout=10.0, metrics=Metrics())
    storage.connect()
    try:
        results = await asyncio.gather(
            *(storage.create(b"/small/k%03d" % i, b"v") for i in range(300))
        )
        assert all(r.succeeded for r in results)
        assert len((await storage.list_prefix(b"/small/")).kvs) == 300
    finally:
        await storage.close()
        await asyncio.to_thread(etcd.stop)
        etcd.cleanup()
