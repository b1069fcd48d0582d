"""Services against a real etcd (two apiservers allocating at once) and the proxier over real
loopback sockets (10 MB both ways, closes passed on, back-pressure), in one process."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from kubelet.proxy.metrics import Metrics
from kubelet.proxy.proxier import Proxier
from tests.integration.conftest import make_settings, start_apiserver
from tinykube.client import Client
from tinykube.errors import ResourceExhaustedError
from tinykube.localetcd import EtcdServer, free_port
from tinykube.v1 import endpointslice_pb2, service_pb2

pytestmark = [pytest.mark.integration]


def service(name: str, node_port: bool = True) -> service_pb2.Service:
    svc = service_pb2.Service()
    svc.metadata.name = name
    svc.metadata.namespace = "default"
    svc.spec.type = "NodePort" if node_port else "ClusterIP"
    svc.spec.selector["app"] = name
    svc.spec.ports.add(port=80)
    return svc


async def test_two_apiservers_never_hand_out_a_value_twice(etcd_server: EtcdServer) -> None:
    settings = make_settings(
        etcd_server.endpoint,
        service_cluster_ip_range="127.100.7.0/27",  # 30 addresses
        service_node_port_range="30000-30039",
    )
    one = await start_apiserver(settings)
    two = await start_apiserver(replace(settings, bind_address="127.0.0.1:0"))
    try:
        async with Client(one.address) as c1, Client(two.address) as c2:
            created = await asyncio.gather(
                *((c1 if i % 2 else c2).services.create(service(f"s{i}")) for i in range(30))
            )
            ips = {s.spec.clusterIP for s in created}
            ports = {s.spec.ports[0].nodePort for s in created}
            assert len(ips) == 30 and len(ports) == 30
            with pytest.raises(ResourceExhaustedError, match="range is full"):
                await c1.services.create(service("extra"))
            # Deletes through either apiserver release the values for both.
            await c2.services.delete("s3", "default")
            again = await c1.services.create(service("extra"))
            assert again.spec.clusterIP == created[3].spec.clusterIP
            assert again.spec.ports[0].nodePort not in ports - {created[3].spec.ports[0].nodePort}
    finally:
        await one.server.stop()
        await two.server.stop()


# ---- the proxier over real sockets ---------------------------------------------------------


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Echo until EOF, then close."""
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def proxied(handler: object) -> AsyncIterator[tuple[Proxier, int]]:
    """A backend running `handler` and a proxier whose "cluster IP" listener forwards to it."""
    backend = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
    backend_port = backend.sockets[0].getsockname()[1]
    proxier = Proxier(Metrics(CollectorRegistry()))
    port = free_port("127.0.0.1")
    svc = service("echo", node_port=False)
    svc.spec.clusterIP = "127.0.0.1"
    svc.spec.ports[0].port = port
    eps = endpointslice_pb2.EndpointSlice(addressType="IPv4")
    eps.endpoints.add(addresses=["127.0.0.1"]).conditions.ready = True
    eps.ports.add(name="", port=backend_port, protocol="TCP")
    try:
        await proxier.sync([svc], {"default/echo": [eps]}, "")
        yield proxier, port
    finally:
        await proxier.close()
        backend.close()


async def test_ten_megabytes_both_ways_intact() -> None:
    payload = hashlib.sha256(b"seed").digest() * (10 * 1024 * 1024 // 32)
    async with proxied(echo) as (proxier, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def send() -> None:
            writer.write(payload)
            await writer.drain()
            writer.write_eof()  # a half-close travels through the proxy to the backend

        sender = asyncio.create_task(send())
        received = await asyncio.wait_for(reader.read(-1), 60)  # until the backend closes
        await sender
        writer.close()
        assert received == payload
        sample = proxier.metrics.registry.get_sample_value
        assert sample("proxy_bytes_total", {"service": "default/echo", "direction": "in"}) == len(
            payload
        )
        assert sample("proxy_connections_total", {"service": "default/echo"}) == 1.0


async def test_backend_closing_closes_the_client() -> None:
    async def hello_and_close(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"bye")
        await w.drain()
        w.close()

    async with proxied(hello_and_close) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(-1), 10) == b"bye"
        writer.close()


async def test_client_closing_reaches_the_backend() -> None:
    saw_eof = asyncio.Event()

    async def wait_eof(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read(-1)
        saw_eof.set()
        w.close()

    async with proxied(wait_eof) as (_, port):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        await writer.drain()
        writer.close()
        await asyncio.wait_for(saw_eof.wait(), 10)


async def test_a_client_that_does_not_read_slows_the_backend() -> None:
    """Back-pressure: the proxy buffers a bounded amount, so the backend's drain blocks."""
    written = 0
    blocked = asyncio.Event()

    async def flood(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal written
        chunk = b"x" * 65536
        try:
            while written < 512 * 1024 * 1024:
                w.write(chunk)
                try:
                    await asyncio.wait_for(w.drain(), 1.0)
                except TimeoutError:
                    blocked.set()
                    return
                written += len(chunk)
        finally:
            w.transport.abort()

    async with proxied(flood) as (_, port):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.wait_for(blocked.wait(), 60)
        writer.transport.abort()
    # Kernel socket buffers on both hops plus one chunk in the proxy: far below the flood.
    assert written < 256 * 1024 * 1024
