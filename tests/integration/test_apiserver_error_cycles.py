"""The apiserver's error answers leave no exception in a reference cycle.

An error answered with `context.abort` left one per failed request: gRPC keeps the AbortError
in the call's state, and its traceback holds the handler's frames, which hold the context and
through it that state; the error answered (a ConflictError, a NotFoundError, ...) hung off it
as its context, with its own traceback, frames and request. At 500 Lease renewals a second
with conflicts that is GC pressure on the busiest process. Each case here fails requests of one
kind against an in-process apiserver (both front ends, the client in the same process) with the
cyclic collector off and DEBUG_SAVEALL on, then counts the exceptions it finds unreachable:
none, on either side. (grpcio's server leaves a few objects per call in a cycle of its own,
`_find_method_handler`'s closure; no exception among them.)
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable

import grpc
import pytest

from tests.integration.conftest import Rest, make_pod, rest_apiserver
from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import lease_pb2, meta_pb2

pytestmark = pytest.mark.integration

CALLS = 5
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
PODS = "/api/v1/namespaces/default/pods"


async def exceptions_in_cycles(fail: Callable[[], Awaitable[object]]) -> list[str]:
    """The exceptions (type names) left in reference cycles by CALLS `fail()`s, each of which
    checks that its request failed as it should."""
    gc.collect()
    del gc.garbage[:]
    for _ in range(CALLS):
        await fail()
    gc.collect()
    found = sorted(type(o).__name__ for o in gc.garbage if isinstance(o, BaseException))
    del gc.garbage[:]
    return found


def _lease(name: str, rv: str = "") -> lease_pb2.Lease:
    return lease_pb2.Lease(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="default", resourceVersion=rv)
    )


def _grpc_fails(
    call: Callable[[], Awaitable[object]], code: grpc.StatusCode
) -> Callable[[], Awaitable[None]]:
    async def fail() -> None:
        with pytest.raises(TinykubeError) as info:
            await call()
        assert info.value.code == code, info.value
        del info  # (the test's own frame would hold the error)

    return fail


def _rest_fails(
    rest: Rest, status: int, method: str, path: str, body: object = None
) -> Callable[[], Awaitable[None]]:
    async def fail() -> None:
        got, answer, _ = await rest.call(method, path, body)
        assert got == status, answer

    return fail


async def _watch_fails(channel: grpc.aio.Channel) -> None:
    watch = channel.unary_stream(
        "/tinykube.v1.Pods/Watch",
        request_serializer=meta_pb2.WatchRequest.SerializeToString,
        response_deserializer=lambda raw: raw,
    )
    call = watch(meta_pb2.WatchRequest(namespace="default", labelSelector="a in (!"), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in call:
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
    del info


async def _undecodable(channel: grpc.aio.Channel) -> None:
    get = channel.unary_unary(
        "/tinykube.v1.Pods/Get",
        request_serializer=lambda raw: raw,
        response_deserializer=lambda raw: raw,
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await get(b"\xff\xff\xff", timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
    del info


@pytest.mark.usefixtures("saved_garbage")
async def test_failed_requests_of_every_kind(etcd_server: EtcdServer) -> None:
    async with (
        rest_apiserver(etcd_server) as rest,
        Client(rest.running.address, timeout=5.0) as client,
        Client(rest.running.address, timeout=5.0, pipeline=True) as streams,
    ):
        channel = grpc.aio.insecure_channel(rest.running.address, options=list(CHANNEL_OPTIONS))
        await client.wait_ready(5.0)
        created = await client.leases.create(_lease("l1"))
        stale = _lease("l1", rv=str(int(created.metadata.resourceVersion) - 1))
        await client.pods.create(make_pod("p1"))
        invalid = make_pod("bad")
        invalid.spec.containers[0].resources.requests["cpu"] = "a lot"
        stale_json = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l1", "resourceVersion": stale.metadata.resourceVersion},
        }
        code = grpc.StatusCode
        cases: dict[str, Callable[[], Awaitable[object]]] = {
            "gRPC Update, stale (ABORTED)": _grpc_fails(
                lambda: client.leases.update(stale), code.ABORTED
            ),
            "gRPC Get, missing (NOT_FOUND)": _grpc_fails(
                lambda: client.pods.get("none", "default"), code.NOT_FOUND
            ),
            "gRPC Create, existing (ALREADY_EXISTS)": _grpc_fails(
                lambda: client.leases.create(_lease("l1")), code.ALREADY_EXISTS
            ),
            "gRPC Create, invalid (INVALID_ARGUMENT)": _grpc_fails(
                lambda: client.pods.create(invalid), code.INVALID_ARGUMENT
            ),
            "gRPC Bind, unknown node (NOT_FOUND)": _grpc_fails(
                lambda: client.bind("default", "p1", "nowhere"),
                code.NOT_FOUND,
            ),
            "gRPC Get, undecodable (INVALID_ARGUMENT)": lambda: _undecodable(channel),
            "gRPC Watch, bad selector (INVALID_ARGUMENT)": lambda: _watch_fails(channel),
            "stream Update, stale (ABORTED)": _grpc_fails(
                lambda: streams.leases.update(stale), code.ABORTED
            ),
            "stream Create, existing (ALREADY_EXISTS)": _grpc_fails(
                lambda: streams.pods.create(make_pod("p1")), code.ALREADY_EXISTS
            ),
            "REST GET, missing (404)": _rest_fails(rest, 404, "GET", f"{LEASES}/none"),
            "REST PUT, stale (409)": _rest_fails(rest, 409, "PUT", f"{LEASES}/l1", stale_json),
            "REST POST, existing (409)": _rest_fails(rest, 409, "POST", LEASES, stale_json),
            "REST POST, not JSON (400)": _rest_fails(rest, 400, "POST", LEASES, "{not json"),
            "REST POST, invalid (422)": _rest_fails(
                rest,
                422,
                "POST",
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "bad"},
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "i", "resources": {"requests": {"cpu": "?"}}}
                        ]
                    },
                },
            ),
            "REST watch, bad selector (400)": _rest_fails(
                rest, 400, "GET", f"{PODS}?watch=1&labelSelector=a%20in%20(%21"
            ),
            "REST, unknown path (404)": _rest_fails(rest, 404, "GET", "/api/v1/nothing"),
        }
        try:
            # Each kind once first: what is built on first use is not a failure's garbage.
            for fail in cases.values():
                await fail()
            found = {what: await exceptions_in_cycles(fail) for what, fail in cases.items()}
        finally:
            await channel.close()
        assert found == {what: [] for what in cases}
