"""What a failed request leaves for the cyclic garbage collector, per kind of failure.

    PYTHONPATH=<tree> python bench/errcycles.py --calls 20 --out errcycles.json

Starts an etcd and an in-process apiserver (plaintext, both front ends) from whichever tree
PYTHONPATH names first (so one script measures a base commit and a branch alike), then makes
`--calls` failing requests of each kind (gRPC ABORTED, NOT_FOUND, ALREADY_EXISTS,
INVALID_ARGUMENT, a Watch's INVALID_ARGUMENT, REST 404 and 409) with the collector off and
DEBUG_SAVEALL on, and counts what the collector then finds unreachable: objects and exceptions
per request, client and server together (both in this process). One warm-up request of each
kind first. Counts, not times: they do not depend on the machine's load. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import grpc

from apiserver.app import APIServer
from apiserver.settings import Settings
from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import lease_pb2, meta_pb2

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def _lease(name: str, rv: str = "") -> lease_pb2.Lease:
    return lease_pb2.Lease(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="default", resourceVersion=rv)
    )


def _free_cycles() -> None:
    """Free what is in cycles now (with DEBUG_SAVEALL a collection keeps it in gc.garbage, and
    what is dropped from there is found again by the next one)."""
    gc.set_debug(0)
    gc.garbage.clear()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)


async def _count(fail: Callable[[], Awaitable[None]], calls: int) -> dict[str, float]:
    await fail()
    _free_cycles()
    for _ in range(calls):
        await fail()
    gc.collect()
    objects = len(gc.garbage)
    exceptions = sum(isinstance(o, BaseException) for o in gc.garbage)
    _free_cycles()
    return {"objects_per_call": objects / calls, "exceptions_per_call": exceptions / calls}


async def measure(calls: int) -> dict[str, Any]:
    etcd = EtcdServer()
    etcd.start()
    settings = Settings(
        etcd_endpoints=etcd.endpoint,
        etcd_prefix="/errcycles",
        bind_address="127.0.0.1:0",
        metrics_port=0,
        compaction_interval_seconds=0,
        rest_port=0,
        insecure=True,
    )
    server = APIServer(replace(settings))
    await server.start()
    channel = grpc.aio.insecure_channel(server.address, options=list(CHANNEL_OPTIONS))
    session = aiohttp.ClientSession()
    results: dict[str, Any] = {}
    try:
        async with Client(server.address, timeout=5.0) as client:
            await client.wait_ready(10.0)
            created = await client.leases.create(_lease("l1"))
            stale = _lease("l1", str(int(created.metadata.resourceVersion) - 1))
            base = f"http://{server.rest_address}"

            def grpc_call(call: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
                async def fail() -> None:
                    try:
                        await call()
                    except TinykubeError:
                        return
                    raise AssertionError("the request did not fail")

                return fail

            async def watch() -> None:
                stream = channel.unary_stream(
                    "/tinykube.v1.Pods/Watch",
                    request_serializer=meta_pb2.WatchRequest.SerializeToString,
                    response_deserializer=lambda raw: raw,
                )(meta_pb2.WatchRequest(labelSelector="a in (!"), timeout=5)
                try:
                    async for _ in stream:
                        pass
                except grpc.aio.AioRpcError:
                    return

            def rest(method: str, path: str, body: Any = None) -> Callable[[], Awaitable[None]]:
                async def fail() -> None:
                    async with session.request(method, base + path, json=body) as resp:
                        await resp.read()
                        assert resp.status >= 400, resp.status

                return fail

            invalid = _lease("bad")
            invalid.spec.leaseDurationSeconds = -1
            cases: dict[str, Callable[[], Awaitable[None]]] = {
                "gRPC Update ABORTED": grpc_call(lambda: client.leases.update(stale)),
                "gRPC Get NOT_FOUND": grpc_call(lambda: client.leases.get("none", "default")),
                "gRPC Create ALREADY_EXISTS": grpc_call(lambda: client.leases.create(_lease("l1"))),
                "gRPC Create INVALID_ARGUMENT": grpc_call(lambda: client.leases.create(invalid)),
                "gRPC Watch INVALID_ARGUMENT": watch,
                "REST GET 404": rest("GET", f"{LEASES}/none"),
                "REST POST 409": rest(
                    "POST",
                    LEASES,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": "l1"},
                    },
                ),
            }
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for what, fail in cases.items():
                    results[what] = await _count(fail, calls)
                    print(what, results[what], flush=True)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
    finally:
        await session.close()
        await channel.close()
        await server.stop()
        etcd.cleanup()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    results = asyncio.run(measure(args.calls))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"calls": args.calls, "results": results}, f, indent=1)
    json.dump(results, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
