"""Failed calls leave no exception in a reference cycle.

An error kept by a frame that its own traceback holds (a local naming it after `raise`, a
future holding it in a frame that awaited the future, a retry library's state) is freed only
by the cyclic GC, with its traceback, frames and the gRPC call: a hollow kubelet under an
overloaded apiserver failed thousands of calls a minute and its gen-0 collections took
0.15-0.57 s. Each test fails calls of one kind with the collector off and DEBUG_SAVEALL on,
then counts the exceptions the collector finds unreachable: none, whatever the call, on the
client's side or the in-process apiserver's (tests/integration/test_apiserver_error_cycles.py
has the apiserver's answers of every kind).
"""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from kubelet.node import NODE_LEASE_NAMESPACE, NodeAgent, NodeConfig
from kubelet.statuswriter import StatusWriter
from tests.integration.conftest import RunningAPIServer
from tests.integration.test_client_support import TcpProxy, make_pod
from tinykube.client import Client
from tinykube.errors import DeadlineExceededError, TinykubeError
from tinykube.v1 import lease_pb2, pod_pb2

pytestmark = pytest.mark.integration

CALLS = 5


async def exceptions_in_cycles(call: Callable[[], Awaitable[object]]) -> list[str]:
    """The exceptions (type names) left in reference cycles by CALLS failing `call()`s."""
    gc.collect()
    del gc.garbage[:]
    for _ in range(CALLS):
        with pytest.raises(TinykubeError):
            await call()
    gc.collect()
    found = sorted(type(o).__name__ for o in gc.garbage if isinstance(o, BaseException))
    del gc.garbage[:]
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def a_lease(rv: str = "5") -> lease_pb2.Lease:
    lease = lease_pb2.Lease()
    lease.metadata.name = "n1"
    lease.metadata.namespace = NODE_LEASE_NAMESPACE
    lease.metadata.resourceVersion = rv
    return lease


@pytest.fixture
async def nowhere() -> AsyncIterator[Client]:
    """A client of an apiserver that is down: every call fails UNAVAILABLE, after retries."""
    async with Client(
        f"127.0.0.1:{free_port()}", timeout=1.0, retries=2, backoff_initial=0.001
    ) as client:
        yield client


@pytest.mark.usefixtures("saved_garbage")
async def test_calls_to_a_stopped_apiserver(nowhere: Client) -> None:
    pod = make_pod("p")
    pod.metadata.resourceVersion = "3"
    writer = StatusWriter(nowhere)

    async def batch() -> None:
        # Three writes at once: one alone, then two in one UpdateStatusBatch, all failing.
        pods = [pod_pb2.Pod(), pod_pb2.Pod(), pod_pb2.Pod()]
        for p in pods:
            p.CopyFrom(pod)
        first, *rest = [writer.write(p) for p in pods]
        try:
            await first
        finally:
            for other in rest:
                with pytest.raises(TinykubeError):
                    await other

    agent = NodeAgent(
        nowhere,
        NodeConfig(name="n1", node_ip="10.0.0.1", kubelet_port=1, capacity={}, runtime="fake"),
        lambda: None,
    )
    assert await exceptions_in_cycles(lambda: nowhere.leases.get("n1", NODE_LEASE_NAMESPACE)) == []
    assert await exceptions_in_cycles(lambda: nowhere.leases.update(a_lease())) == []
    assert await exceptions_in_cycles(lambda: writer.write(pod)) == []
    assert await exceptions_in_cycles(batch) == []
    assert await exceptions_in_cycles(agent.renew_lease) == []
    assert await exceptions_in_cycles(agent.sync_status) == []


@pytest.mark.usefixtures("saved_garbage")
async def test_answers_of_a_running_apiserver(apiserver: RunningAPIServer) -> None:
    async with Client(apiserver.address, timeout=5.0) as client:
        await client.wait_ready(5.0)
        created = await client.leases.create(a_lease(rv=""))
        stale = a_lease(rv=str(int(created.metadata.resourceVersion) - 1))
        # ABORTED (a conflict), NOT_FOUND: the answers an overloaded kubelet meets most.
        assert await exceptions_in_cycles(lambda: client.leases.update(stale)) == []
        assert await exceptions_in_cycles(lambda: client.pods.get("none", "default")) == []


@pytest.mark.usefixtures("saved_garbage")
async def test_calls_past_their_deadline(apiserver: RunningAPIServer) -> None:
    proxy = await TcpProxy(apiserver.address).start()
    try:
        async with Client(proxy.address, timeout=0.2, retries=1, backoff_initial=0.001) as c:
            await c.wait_ready(5.0)
            # The connection is up before answers are held; a warm-up call may itself miss the
            # 0.2 s deadline on a loaded machine, so it is tried until one gets through.
            async with asyncio.timeout(20):
                while True:
                    try:
                        await c.nodes.list()
                        break
                    except DeadlineExceededError:
                        continue
            proxy.holding_answers = True  # every answer arrives after its deadline
            found = await exceptions_in_cycles(lambda: c.leases.get("n1", NODE_LEASE_NAMESPACE))
            assert found == []
    finally:
        await proxy.close()
