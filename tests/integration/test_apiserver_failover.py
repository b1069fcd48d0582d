"""Clients over two apiservers sharing one etcd: when the one in use goes away, calls are
retried on the other, watches resume there from their last resourceVersion (or relist when its
window does not reach back that far), and nothing is lost or applied twice.

The apiserver "going away" is a `TcpProxy` in front of it that resets every connection and
refuses new ones (as a SIGKILLed process looks to its clients), while the server itself may
still finish what it had received: the worst case, a request that landed whose answer is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest

from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tests.integration.test_client_support import TcpProxy, eventually, make_node, make_pod
from tests.integration.test_informer import Seen, server_state, store_state
from tests.integration.test_leaderelection import (
    DEADLINE,
    LEASE,
    NAME,
    NS,
    RETRY,
    Candidate,
    OverlapWatch,
)
from tinykube.client import Client
from tinykube.errors import DeadlineExceededError
from tinykube.informer import Informer
from tinykube.leaderelection import LeadershipLost
from tinykube.localetcd import EtcdServer, free_port
from tinykube.v1 import pod_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@dataclass
class Pair:
    """Apiserver A behind a proxy (`a_proxy`, what clients dial) and apiserver B, one etcd."""

    a: RunningAPIServer
    a_proxy: TcpProxy
    b: RunningAPIServer

    @property
    def targets(self) -> list[str]:
        return [self.a_proxy.address, self.b.address]

    def kill_a(self) -> None:
        self.a_proxy.refusing = True
        self.a_proxy.cut()

    def client(self, **kwargs: object) -> Client:
        """A client over both, using A first."""
        client = Client(self.targets, **kwargs)  # type: ignore[arg-type]
        client._current = 0
        return client


@contextlib.asynccontextmanager
async def two_apiservers(etcd: EtcdServer, **b_overrides: object) -> AsyncIterator[Pair]:
    settings = make_settings(etcd.endpoint)
    a = await start_apiserver(settings)
    b: RunningAPIServer | None = None
    proxy = await TcpProxy(a.address).start()
    try:
        b = await start_apiserver(replace(settings, **b_overrides))  # type: ignore[arg-type]
        yield Pair(a, proxy, b)
    finally:
        await proxy.close()
        for running in (a, b):
            if running is not None:
                await running.server.stop()


@contextlib.asynccontextmanager
async def informer_over(
    pair: Pair, namespace: str = "default"
) -> AsyncIterator[tuple[Client, Informer[pod_pb2.Pod], Seen]]:
    client = pair.client(timeout=3.0, retries=3)
    informer = Informer.for_resource(client.pods, namespace=namespace, min_backoff=0.05)
    seen = Seen()
    informer.add_handler(seen.add, seen.update, seen.delete)
    task = informer.start()
    try:
        await asyncio.wait_for(informer.wait_synced(), 10)
        yield client, informer, seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


async def test_calls_under_load_fail_over_and_none_is_lost_or_doubled(
    etcd_server: EtcdServer,
) -> None:
    async with two_apiservers(etcd_server) as pair, pair.client() as client:
        await client.nodes.create(make_node("n1"))
        made: list[str] = []
        bound: list[str] = []
        started = asyncio.Event()

        async def worker(w: int) -> None:
            for _ in range(15):
                pod = make_pod("", app="load")
                pod.metadata.generateName = f"w{w}-"
                created = await client.pods.create(pod)
                made.append(created.metadata.name)
                await client.bind("default", created.metadata.name, "n1", created.metadata.uid)
                bound.append(created.metadata.name)
                if len(made) >= 30:
                    started.set()

        workers = [asyncio.create_task(worker(w)) for w in range(8)]
        await asyncio.wait_for(started.wait(), 30)
        pair.kill_a()
        await asyncio.gather(*workers)  # not one call failed
        assert client.failovers >= 1 and client.current_target == pair.b.address
        listed = (await client.pods.list("default", label_selector="app=load")).items
        assert sorted(p.metadata.name for p in listed) == sorted(made)
        assert len(made) == len(set(made)) == 8 * 15
        assert sorted(bound) == sorted(made)
        assert all(p.spec.nodeName == "n1" for p in listed)


async def test_a_watch_resumes_on_the_other_apiserver_with_nothing_lost_or_repeated(
    etcd_server: EtcdServer,
) -> None:
    async with (
        two_apiservers(etcd_server) as pair,
        Client(pair.b.address) as writer,
        informer_over(pair) as (_, informer, seen),
    ):
        expected: list[tuple[str, str]] = []
        for n in range(20):
            name = f"p-{n}"
            created = await writer.pods.create(make_pod(name))
            expected.append(("add", name))
            created.metadata.labels["step"] = "2"
            await writer.pods.update(created)
            expected.append(("update", name))
            if n % 4 == 0:
                await writer.pods.delete(name, "default", grace_period_seconds=0)
                expected.append(("delete", name))
            if n == 9:
                pair.kill_a()  # mid-stream: events keep coming, now only B can deliver them
        await eventually(lambda: len(seen.events) >= len(expected), what="every event")
        await asyncio.sleep(0.2)  # a repeat would arrive meanwhile
        assert seen.events == expected
        assert seen.rvs == sorted(set(seen.rvs))
        assert informer.lists == 1  # resumed on B from its resourceVersion, no relist
        assert store_state(informer) == await server_state(writer)


async def test_bookmarks_keep_a_quiet_watch_resumable_on_an_apiserver_started_later(
    etcd_server: EtcdServer,
) -> None:
    """The informer watches namespace default, where nothing changes; the cluster's revision
    moves on elsewhere. B starts after that, so its window begins past every event the informer
    saw: only bookmarks (which carry the revision) let it resume on B without a relist."""
    settings = make_settings(
        etcd_server.endpoint, bookmark_interval_seconds=0.5, bookmark_frequency_seconds=0.5
    )
    a = await start_apiserver(settings)
    proxy = await TcpProxy(a.address).start()
    # B's address is known from the start; it listens only later.
    b_settings = replace(settings, bind_address=f"127.0.0.1:{free_port('127.0.0.1')}")
    b: RunningAPIServer | None = None
    try:
        async with Client(a.address) as writer:
            await writer.pods.create(make_pod("quiet"))
            pair = Pair(a, proxy, a)
            pair.b = replace(a, address=b_settings.bind_address)
            async with informer_over(pair) as (client, informer, seen):
                synced_at = int(informer.last_resource_version)
                for i in range(5):
                    await writer.pods.create(make_pod(f"elsewhere-{i}", "kube-system"))
                b = await start_apiserver(b_settings)
                b_start = b.server.caches["Pod"].window_start
                assert b_start > synced_at
                await eventually(
                    lambda: int(informer.last_resource_version) >= b_start,
                    what="a bookmark past B's start",
                )
                pair.kill_a()
                await writer.pods.delete("quiet", "default", grace_period_seconds=0)
                await eventually(lambda: "default/quiet" not in informer.store, within=15)
                assert client.current_target == b.address
                assert informer.lists == 1
                assert seen.events == [("add", "quiet"), ("delete", "quiet")]
    finally:
        await proxy.close()
        for running in (a, b):
            if running is not None:
                await running.server.stop()


async def test_a_watch_the_other_apiserver_cannot_resume_relists_each_change_once(
    etcd_server: EtcdServer,
) -> None:
    async with (
        two_apiservers(etcd_server, watch_cache_size=5) as pair,
        Client(pair.b.address) as writer,
    ):
        for i in range(4):
            await writer.pods.create(make_pod(f"old-{i}"))
        async with informer_over(pair) as (client, informer, seen):
            await eventually(lambda: len(informer.store) == 4)
            seen.events.clear()
            # A's stream stalls (nothing reaches the informer) while more changes than B's
            # window holds happen; then A dies.
            pair.a_proxy.holding_answers = True
            for i in range(8):
                await writer.pods.create(make_pod(f"new-{i}"))
            await writer.pods.delete("old-0", "default", grace_period_seconds=0)
            changed = await writer.pods.get("old-1", "default")
            changed.metadata.labels["changed"] = "yes"
            await writer.pods.update(changed)
            pair.kill_a()
            await eventually(lambda: informer.lists == 2, what="a relist on B")
            await eventually(lambda: len(informer.store) == 11)
            assert client.current_target == pair.b.address
            assert sorted(seen.events) == sorted(
                [("delete", "old-0"), ("update", "old-1")] + [("add", f"new-{i}") for i in range(8)]
            )
            assert store_state(informer) == await server_state(writer)
            await writer.pods.create(make_pod("after"))
            await eventually(lambda: "default/after" in informer.store)
            assert informer.lists == 2


@pytest.mark.parametrize("how", ["killed", "silent"])
async def test_a_leader_whose_apiserver_goes_away_keeps_leading_through_the_other(
    etcd_server: EtcdServer, how: str
) -> None:
    """killed: A's connections reset and it refuses new ones. silent: A answers nothing and
    resets nothing (a partition, until keepalive notices): only the elector's own limit on a
    renewal try (half the renew deadline) and its failover hint keep the round from timing out
    as a whole."""
    async with two_apiservers(etcd_server) as pair:
        # The client's own deadline is longer than the renew deadline, as in the components
        # (10 s each): a silent apiserver would hold a renewal's only call for the whole round.
        leader = Candidate("alpha", pair.a_proxy, pair.client(timeout=5.0, retries=3))
        standby = Candidate("beta", pair.a_proxy, Client(pair.b.address, timeout=1.0, retries=3))
        watch = OverlapWatch((leader, standby))
        try:
            leader.start()
            await eventually(lambda: leader.working, within=5, what="alpha to lead")
            standby.start()
            await asyncio.sleep(0.5)
            if how == "killed":
                pair.kill_a()
            else:
                pair.a_proxy.holding_answers = True
            # Several lease durations: a lost lease would have been taken by now.
            await asyncio.sleep(3 * LEASE)
            assert leader.working and not standby.working
            assert leader.client.current_target == pair.b.address
            async with Client(pair.b.address) as observer:
                lease = await observer.leases.get(NAME, NS)
            assert lease.spec.holderIdentity == "alpha"
            assert lease.spec.leaseTransitions == 0
        finally:
            await watch.close()
            for c in (leader, standby):
                await c.stop()
                await c.client.close()
        assert watch.overlaps == 0


async def test_a_leader_cut_off_from_every_apiserver_stops_before_the_standby_starts(
    etcd_server: EtcdServer,
) -> None:
    """The leader knows both apiservers and loses both; it must stop leading within its renew
    deadline, before its Lease expires for the standby (which reaches B directly)."""
    async with two_apiservers(etcd_server) as pair:
        b_proxy = await TcpProxy(pair.b.address).start()
        leader_client = Client([pair.a_proxy.address, b_proxy.address], timeout=5.0, retries=3)
        leader = Candidate("alpha", pair.a_proxy, leader_client)
        standby = Candidate("beta", pair.a_proxy, Client(pair.b.address, timeout=1.0, retries=3))
        watch = OverlapWatch((leader, standby))
        try:
            leader.start()
            await eventually(lambda: leader.working, within=5, what="alpha to lead")
            standby.start()
            await asyncio.sleep(0.5)
            for proxy in (pair.a_proxy, b_proxy):
                proxy.refusing = True
                proxy.cut()
            cut_at = asyncio.get_running_loop().time()
            await eventually(lambda: not leader.working, within=5, what="alpha to step down")
            stepped_down = asyncio.get_running_loop().time() - cut_at
            await eventually(lambda: standby.working, within=10, what="beta to take over")
            took_over = asyncio.get_running_loop().time() - cut_at
            assert stepped_down <= DEADLINE + RETRY + 0.5
            assert stepped_down < took_over
            assert leader.task is not None and leader.task.done()
            assert isinstance(leader.task.exception(), LeadershipLost)
        finally:
            await watch.close()
            for c in (leader, standby):
                await c.stop()
                await c.client.close()
            await b_proxy.close()
        assert watch.overlaps == 0


async def test_wait_ready_settles_on_an_apiserver_that_answers(
    apiserver: RunningAPIServer,
) -> None:
    nowhere = f"127.0.0.1:{free_port('127.0.0.1')}"
    async with Client([nowhere, apiserver.address], timeout=2.0) as client:
        client._current = 0
        await client.wait_ready(5.0)
        assert client.current_target == apiserver.address
        await client.pods.list("default")
    async with Client([nowhere], timeout=2.0) as client:
        with pytest.raises(DeadlineExceededError, match=r"not reachable within 0\.5s"):
            await client.wait_ready(0.5)
