"""A Client over several apiservers: calls and watches go to one, and move to the next when it
fails with UNAVAILABLE or DEADLINE_EXCEEDED; other answers are the caller's and move nothing.

Fake stubs stand for the apiservers (the channels point at closed ports and are never used).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tinykube import errors
from tinykube.client import Client
from tinykube.flags import split_addresses
from tinykube.v1 import meta_pb2, pod_pb2

RESET = "Stream removed (Socket closed)"
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: "
    "Failed to connect to remote host: Connection refused"
)
TARGETS = ("127.0.0.1:9", "127.0.0.1:19", "127.0.0.1:29")


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class FakeServer:
    """One apiserver: Get answers a pod, or raises `failure`; Watch streams one event first."""

    def __init__(self, name: str, failure: grpc.aio.AioRpcError | None = None) -> None:
        self.name = name
        self.failure = failure
        self.calls = 0

    async def Get(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        self.calls += 1
        await asyncio.sleep(0)
        if self.failure is not None:
            raise self.failure
        return pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=request.name, uid=self.name))

    def WatchBatch(self, request: Any) -> Any:
        server = self

        class Call:
            def __aiter__(self) -> AsyncIterator[Any]:
                return self.events()

            async def events(self) -> AsyncIterator[Any]:
                server.calls += 1
                yield pod_pb2.PodWatchEventBatch(
                    events=[
                        pod_pb2.PodWatchEvent(
                            type="BOOKMARK",
                            object=pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(uid=server.name)),
                        )
                    ]
                )
                if server.failure is not None:
                    raise server.failure

            def cancel(self) -> None:
                pass

        return Call()


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    async with Client(
        ",".join(TARGETS), timeout=5.0, retries=4, backoff_initial=0.001, backoff_max=0.001
    ) as c:
        yield c
        for channel in getattr(c, "_real_channels", []):
            await channel.close()


class FakeChannel:
    """What the failover asks a channel: its connectivity state."""

    def __init__(self, state: grpc.ChannelConnectivity) -> None:
        self.state = state

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.state

    async def close(self) -> None:
        pass


READY = grpc.ChannelConnectivity.READY
DOWN = grpc.ChannelConnectivity.TRANSIENT_FAILURE


def install(
    client: Client, *servers: FakeServer, states: tuple[grpc.ChannelConnectivity, ...] = ()
) -> None:
    client.pods._stubs = list(servers)
    real = client.channels
    client.channels = [FakeChannel(s) for s in states or [READY] * len(servers)]  # type: ignore[misc]
    client._current = 0
    client._real_channels = real  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:6443", ("127.0.0.1:6443",)),
        ("a:1,b:2", ("a:1", "b:2")),
        (" a:1 , b:2 ,, a:1 ", ("a:1", "b:2")),
        (["a:1", "b:2,c:3"], ("a:1", "b:2", "c:3")),
        ("", ()),
    ],
)
def test_split_addresses(value: str | list[str], expected: tuple[str, ...]) -> None:
    assert split_addresses(value) == expected


def test_a_client_knows_every_address_and_needs_one() -> None:
    async def make() -> None:
        async with Client(["127.0.0.1:9", "127.0.0.1:19,127.0.0.1:9"]) as c:
            assert c.targets == ("127.0.0.1:9", "127.0.0.1:19")
            assert c.target == "127.0.0.1:9,127.0.0.1:19"
            assert len(c.channels) == 2 and c.current_target in c.targets

    asyncio.run(make())
    with pytest.raises(ValueError, match="at least one apiserver"):
        Client(" , ")


@pytest.mark.parametrize(
    ("failure", "served_by", "calls", "failovers"),
    [
        # A reset stream or a refused connection: the retry goes to the next apiserver.
        (rpc_error(grpc.StatusCode.UNAVAILABLE, RESET), "b", [1, 1, 0], 1),
        (rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED), "b", [1, 1, 0], 1),
        (rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), "b", [1, 1, 0], 1),
    ],
    ids=["reset", "refused", "deadline"],
)
async def test_a_transient_failure_is_retried_on_the_next_apiserver(
    client: Client,
    failure: grpc.aio.AioRpcError,
    served_by: str,
    calls: list[int],
    failovers: int,
) -> None:
    servers = [FakeServer("a", failure), FakeServer("b"), FakeServer("c")]
    install(client, *servers)
    pod = await client.pods.get("web", "default")
    assert pod.metadata.uid == served_by
    assert [s.calls for s in servers] == calls
    assert client.failovers == failovers and client.current_target == TARGETS[1]
    # Sticky: the next call goes where the last one succeeded.
    await client.pods.get("web", "default")
    assert [s.calls for s in servers] == [calls[0], calls[1] + 1, 0]


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (grpc.StatusCode.NOT_FOUND, errors.NotFoundError),
        (grpc.StatusCode.PERMISSION_DENIED, errors.ForbiddenError),
        (grpc.StatusCode.ABORTED, errors.ConflictError),
    ],
)
async def test_an_answer_of_the_apiserver_moves_nothing(
    client: Client, code: grpc.StatusCode, error: type[errors.TinykubeError]
) -> None:
    servers = [FakeServer("a", rpc_error(code, "no")), FakeServer("b"), FakeServer("c")]
    install(client, *servers)
    with pytest.raises(error):
        await client.pods.get("web", "default")
    assert [s.calls for s in servers] == [1, 0, 0]
    assert client.failovers == 0 and client.current_target == TARGETS[0]


async def test_every_apiserver_down_is_tried_in_turn_then_raised(client: Client) -> None:
    down = rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED)
    servers = [FakeServer(n, down) for n in "abc"]
    install(client, *servers, states=(DOWN, DOWN, DOWN))
    with pytest.raises(errors.UnavailableError):
        await client.pods.get("web", "default")
    # 1 attempt + 4 retries, round the ring.
    assert [s.calls for s in servers] == [2, 2, 1]


async def test_the_failover_skips_an_apiserver_whose_connection_is_down(client: Client) -> None:
    servers = [
        FakeServer("a", rpc_error(grpc.StatusCode.UNAVAILABLE, RESET)),
        FakeServer("b"),
        FakeServer("c"),
    ]
    install(client, *servers, states=(READY, DOWN, READY))
    assert (await client.pods.get("web", "default")).metadata.uid == "c"
    assert [s.calls for s in servers] == [1, 0, 1]


async def test_calls_failing_together_fail_over_once(client: Client) -> None:
    servers = [
        FakeServer("a", rpc_error(grpc.StatusCode.UNAVAILABLE, RESET)),
        FakeServer("b"),
        FakeServer("c"),
    ]
    install(client, *servers)
    pods = await asyncio.gather(*(client.pods.get(f"p{k}", "default") for k in range(10)))
    assert {p.metadata.uid for p in pods} == {"b"}
    assert client.failovers == 1 and servers[2].calls == 0


async def test_a_watch_cut_by_its_apiserver_resumes_on_the_next(client: Client) -> None:
    servers = [
        FakeServer("a", rpc_error(grpc.StatusCode.UNAVAILABLE, RESET)),
        FakeServer("b"),
        FakeServer("c"),
    ]
    install(client, *servers)
    seen = []
    with pytest.raises(errors.UnavailableError):
        async for event in client.pods.watch(resource_version="5"):
            seen.append(event.object.metadata.uid)
    assert seen == ["a"] and client.current_target == TARGETS[1]
    seen = [e.object.metadata.uid async for e in client.pods.watch(resource_version="5")]
    assert seen == ["b"]


async def test_a_watch_ended_by_an_answer_does_not_fail_over(client: Client) -> None:
    gone = rpc_error(grpc.StatusCode.OUT_OF_RANGE, "too old resource version: 5 (9)")
    servers = [FakeServer("a", gone), FakeServer("b"), FakeServer("c")]
    install(client, *servers)
    with pytest.raises(errors.ResourceExpiredError):
        async for _ in client.pods.watch(resource_version="5"):
            pass
    assert client.failovers == 0 and client.current_target == TARGETS[0]
