"""Safe retries against the real apiserver and etcd: a request that landed but whose answer came
after the client's deadline, and which failures grpc.aio reports as "never sent".

A TcpProxy between client and apiserver holds the server's bytes (`holding_answers`), so the
first attempt is applied by the apiserver and times out at the client; the proxy releases them
when the client sends its next attempt, which the apiserver then answers normally.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.conftest import RunningAPIServer
from tests.integration.test_client_support import TcpProxy, make_node, make_pod
from tinykube import errors
from tinykube.client import BindItem, Client
from tinykube.retry import is_unsent

pytestmark = pytest.mark.integration

DEADLINE = 1.0


class ReleasingStub:
    """Wraps a generated stub: records each call, and releases the proxy's held answers when
    the second call starts (the client's retry), so only the first answer arrives late."""

    def __init__(self, stub: Any, proxy: TcpProxy) -> None:
        self._stub = stub
        self._proxy = proxy
        self.calls: list[str] = []

    def __getattr__(self, method: str) -> Any:
        inner = getattr(self._stub, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(method)
            if len(self.calls) >= 2:
                self._proxy.release()
            return inner(*args, **kwargs)

        return call


@pytest.fixture
async def direct(apiserver: RunningAPIServer) -> AsyncIterator[Client]:
    async with Client(apiserver.address, timeout=5.0) as c:
        await c.wait_ready(5.0)
        yield c


@pytest.fixture
async def late(apiserver: RunningAPIServer) -> AsyncIterator[tuple[Client, TcpProxy]]:
    """A client whose next answer from the apiserver arrives after its deadline."""
    proxy = await TcpProxy(apiserver.address).start()
    try:
        async with Client(proxy.address, timeout=DEADLINE, retries=3, backoff_max=0.2) as c:
            await c.wait_ready(5.0)
            await c.nodes.list()  # the connection is up before answers are held
            proxy.holding_answers = True
            yield c, proxy
    finally:
        await proxy.close()


def releasing(client: Client, proxy: TcpProxy) -> ReleasingStub:
    stub = ReleasingStub(client.pods._stub, proxy)
    client.pods._stub = stub
    return stub


async def test_a_create_answered_late_returns_its_own_object(
    late: tuple[Client, TcpProxy], direct: Client
) -> None:
    client, proxy = late
    stub = releasing(client, proxy)
    created = await client.pods.create(make_pod("late", app="late"))
    stored = await direct.pods.get("late", "default")
    assert created.metadata.uid == stored.metadata.uid != ""
    assert stub.calls == ["Create", "Create", "Get"]


async def test_a_generate_name_create_answered_late_makes_one_object(
    late: tuple[Client, TcpProxy], direct: Client
) -> None:
    client, proxy = late
    stub = releasing(client, proxy)
    pod = make_pod("", app="generated")
    pod.metadata.generateName = "gen-"
    created = await client.pods.create(pod)
    # Named by the client before the first attempt: the resend is recognised as its own.
    assert stub.calls == ["Create", "Create", "Get"]
    listed = await direct.pods.list("default", label_selector="app=generated")
    assert [p.metadata.name for p in listed.items] == [created.metadata.name]
    assert created.metadata.name.startswith("gen-") and len(created.metadata.name) == 9


async def test_a_bind_answered_late_succeeds(late: tuple[Client, TcpProxy], direct: Client) -> None:
    client, proxy = late
    await direct.nodes.create(make_node("n1"))
    pod = await direct.pods.create(make_pod("bindlate"))
    stub = releasing(client, proxy)
    rv = await client.bind("default", "bindlate", "n1", uid=pod.metadata.uid)
    stored = await direct.pods.get("bindlate", "default")
    assert stored.spec.nodeName == "n1" and rv == stored.metadata.resourceVersion
    assert stub.calls == ["Bind", "Bind", "Get"]


async def test_a_bind_batch_answered_late_reports_each_bind_once(
    late: tuple[Client, TcpProxy], direct: Client
) -> None:
    client, proxy = late
    await direct.nodes.create(make_node("n1"))
    for name in ("b1", "b2"):
        await direct.pods.create(make_pod(name))
    stub = releasing(client, proxy)
    out = await client.bind_batch(
        [BindItem("default", "b1", "n1"), BindItem("default", "b2", "n1")]
    )
    for name, result in zip(("b1", "b2"), out, strict=True):
        stored = await direct.pods.get(name, "default")
        assert result == stored.metadata.resourceVersion
        assert stored.spec.nodeName == "n1"
    assert stub.calls == ["BindBatch", "BindBatch", "Get", "Get"]


async def test_grpc_reports_a_refused_connection_as_unsent(apiserver: RunningAPIServer) -> None:
    proxy = await TcpProxy(apiserver.address).start()
    address = proxy.address
    await proxy.close()  # nothing listens there now
    async with Client(address, timeout=DEADLINE, retries=2, backoff_max=0.01) as c:
        pod = make_pod("", app="never")
        pod.metadata.generateName = "never-"
        with pytest.raises(errors.UnavailableError) as caught:
            await c.pods.create(pod)
    assert is_unsent(caught.value), caught.value.message


async def test_grpc_reports_a_stream_cut_after_sending_as_ambiguous(
    late: tuple[Client, TcpProxy], direct: Client
) -> None:
    client, proxy = late
    proxy.holding_answers = False
    stored = await client.pods.create(make_pod("cut", app="cut"))
    proxy.holding_answers = True
    # An Update without a resourceVersion is resent only when it surely never left.
    stored.metadata.resourceVersion = ""
    stored.metadata.labels["step"] = "2"
    update = asyncio.ensure_future(client.pods.update(stored))

    async def landed() -> bool:
        return (await direct.pods.get("cut", "default")).metadata.labels.get("step") == "2"

    for _ in range(200):
        if await landed():
            break
        await asyncio.sleep(0.01)
    proxy.cut()  # the request landed; its stream is reset before the answer
    with pytest.raises(errors.UnavailableError) as caught:
        await update
    assert not is_unsent(caught.value), caught.value.message
    assert await landed()
