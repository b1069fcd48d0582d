"""The kubelet's heartbeats against the real apiserver and etcd when an answer is lost: how many
requests a Lease renewal and a Node status report cost when the write landed but its answer
came after the client's deadline.

A TcpProxy between the kubelet's client and the apiserver holds the server's bytes
(`holding_answers`): the Update is applied by the apiserver and times out at the client. The
stub wrapper counts every call the node agent makes and releases the held answers when the
next call starts. The last test loses a renewal's answer with the link itself, on the write
stream the kubelet renews through by default (`proxy.cut()`, as when the apiserver dies).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from kubelet.node import NODE_LEASE_NAMESPACE, NodeAgent, NodeConfig
from tests.integration.conftest import RunningAPIServer
from tests.integration.test_client_support import TcpProxy
from tinykube import errors
from tinykube.client import Client
from tinykube.clock import Clock
from tinykube.retry import may_have_landed
from tinykube.v1 import node_pb2

pytestmark = pytest.mark.integration

DEADLINE = 1.0


class CountingStub:
    """Wraps a generated stub: records each call; the first call after `arm()` releases the
    proxy's held answers (so only the armed call's answer arrives late)."""

    def __init__(self, stub: Any, proxy: TcpProxy, calls: list[str]) -> None:
        self._stub = stub
        self._proxy = proxy
        self.calls = calls
        self._armed_at: int | None = None

    def arm(self) -> None:
        self._proxy.holding_answers = True
        self._armed_at = len(self.calls)

    def __getattr__(self, method: str) -> Any:
        inner = getattr(self._stub, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._armed_at is not None and len(self.calls) > self._armed_at:
                self._proxy.release()
                self._armed_at = None
            self.calls.append(method)
            return inner(*args, **kwargs)

        return call


@pytest.fixture
async def direct(apiserver: RunningAPIServer) -> AsyncIterator[Client]:
    async with Client(apiserver.address, timeout=5.0) as c:
        await c.wait_ready(5.0)
        yield c


@pytest.fixture
async def proxied(apiserver: RunningAPIServer) -> AsyncIterator[tuple[Client, TcpProxy]]:
    proxy = await TcpProxy(apiserver.address).start()
    try:
        async with Client(proxy.address, timeout=DEADLINE, retries=3, backoff_max=0.2) as c:
            await c.wait_ready(5.0)
            await c.nodes.list()  # the connection is up before answers are held
            yield c, proxy
    finally:
        await proxy.close()


class AheadClock(Clock):
    """Real time, `ahead` seconds ahead on the wall clock: heartbeats carry whole seconds,
    and a test moves it on so each heartbeat carries a time of its own."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def now(self) -> datetime:
        return super().now() + timedelta(seconds=self.ahead)


def agent_for(client: Client, direct: Client) -> NodeAgent:
    cfg = NodeConfig(
        name="hb1",
        node_ip="10.0.0.9",
        kubelet_port=10250,
        capacity={"cpu": "4", "memory": "8Gi", "pods": "110"},
        runtime="fake",
        status_report_frequency=300.0,
    )
    return NodeAgent(client, cfg, lambda: None, clock=AheadClock())


async def test_a_renewal_whose_answer_was_lost_costs_one_read(
    proxied: tuple[Client, TcpProxy], direct: Client
) -> None:
    client, proxy = proxied
    calls: list[str] = []
    stub = CountingStub(client.leases._stub, proxy, calls)
    client.leases._stub = stub
    agent = agent_for(client, direct)
    await agent.renew_lease()  # created
    await agent.renew_lease()  # renewed from the Lease the Create answered
    assert calls == ["Get", "Create", "Update"]
    before = await direct.leases.get("hb1", NODE_LEASE_NAMESPACE)

    del calls[:]
    stub.arm()
    agent.clock.ahead += 10  # type: ignore[attr-defined]
    with pytest.raises(errors.DeadlineExceededError):
        await agent.renew_lease()
    landed = await direct.leases.get("hb1", NODE_LEASE_NAMESPACE)
    assert landed.spec.renewTime != before.spec.renewTime  # applied; only its answer was lost
    assert await agent.renew_lease() > 0.0  # found stored: that renewal is done
    # One Update (not re-sent with its stale resourceVersion) and one read: two requests,
    # where re-sending it cost four (Update, Update ABORTED, Get, Update).
    assert calls == ["Update", "Get"]
    after = await direct.leases.get("hb1", NODE_LEASE_NAMESPACE)
    assert after.metadata.resourceVersion == landed.metadata.resourceVersion

    del calls[:]
    await agent.renew_lease()  # the next renewal: an Update from the Lease read
    assert calls == ["Update"]


async def test_a_node_status_report_whose_answer_was_lost_is_not_resent(
    proxied: tuple[Client, TcpProxy], direct: Client
) -> None:
    client, proxy = proxied
    calls: list[str] = []
    stub = CountingStub(client.nodes._stub, proxy, calls)
    client.nodes._stub = stub
    agent = agent_for(client, direct)
    stored: list[node_pb2.Node] = []
    agent.get_node = lambda: stored[0] if stored else None
    await agent.register()
    stored.append(await direct.nodes.get("hb1"))
    agent._last_report = -1e18  # the periodic report is due
    agent.clock.ahead += 10  # type: ignore[attr-defined]
    del calls[:]
    stub.arm()
    with pytest.raises(errors.DeadlineExceededError):
        await agent.sync_status()
    # The informer brings the Node with our report; the next sync writes nothing.
    stored[0] = await direct.nodes.get("hb1")
    await agent.sync_status()
    assert calls == ["UpdateStatus"]
    # With an informer that lags (the Node as before the report), the conflict's read
    # recognises it: UpdateStatus, Get, and no third write.
    agent._last_report = -1e18
    agent.clock.ahead += 10  # type: ignore[attr-defined]
    del calls[:]
    stub.arm()
    with pytest.raises(errors.DeadlineExceededError):
        await agent.sync_status()
    await agent.sync_status()
    assert calls == ["UpdateStatus", "UpdateStatus", "Get"]


async def test_a_renewal_on_a_stream_cut_after_it_landed_is_read_not_resent(
    apiserver: RunningAPIServer, direct: Client
) -> None:
    """The kubelet's default: renewals as messages of the node's Leases/UpdateStream. The link
    is cut (as when the apiserver dies) after a renewal was applied and before its answer
    arrived: the renewal fails UNAVAILABLE, is not re-sent with its stale resourceVersion, the
    next attempt reads the Lease and takes the renewal as done, and the one after renews through
    a new stream."""
    proxy = await TcpProxy(apiserver.address).start()
    try:
        async with Client(proxy.address, timeout=10.0, retries=3, backoff_max=0.2) as client:
            await client.wait_ready(5.0)
            cfg = NodeConfig(
                name="hb2",
                node_ip="10.0.0.9",
                kubelet_port=10250,
                capacity={"cpu": "4", "memory": "8Gi", "pods": "110"},
                runtime="fake",
                write_streams=True,
            )
            agent = NodeAgent(client, cfg, lambda: None, clock=AheadClock())
            await agent.renew_lease()  # created (a call)
            await agent.renew_lease()  # renewed: the stream's first message
            (stream,) = client._write_streams
            assert stream.what == "tinykube.v1.Leases/UpdateStream" and stream.opened == 1
            before = await direct.leases.get("hb2", NODE_LEASE_NAMESPACE)

            proxy.holding_answers = True
            agent.clock.ahead += 10  # type: ignore[attr-defined]
            renewal = asyncio.create_task(agent.renew_lease())
            async with asyncio.timeout(8):
                while (  # noqa: ASYNC110
                    await direct.leases.get("hb2", NODE_LEASE_NAMESPACE)
                ).spec.renewTime == before.spec.renewTime:
                    await asyncio.sleep(0.01)
            proxy.cut()  # applied; its answer held: the answer is lost with the link
            proxy.release()
            with pytest.raises(errors.UnavailableError) as lost:
                await renewal
            assert may_have_landed(lost.value)
            landed = await direct.leases.get("hb2", NODE_LEASE_NAMESPACE)

            assert await agent.renew_lease() > 0.0  # read, found stored: done, nothing sent
            after = await direct.leases.get("hb2", NODE_LEASE_NAMESPACE)
            assert after.metadata.resourceVersion == landed.metadata.resourceVersion

            agent.clock.ahead += 10  # type: ignore[attr-defined]
            await agent.renew_lease()  # from the Lease read, on a new stream
            renewed = await direct.leases.get("hb2", NODE_LEASE_NAMESPACE)
            assert renewed.spec.renewTime != landed.spec.renewTime
            assert stream.opened == 2
    finally:
        await proxy.close()
