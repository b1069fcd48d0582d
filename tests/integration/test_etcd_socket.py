"""The apiserver on etcd's unix domain socket (`--etcd-servers unix:///path`, `unixs://` with TLS).

A dedicated etcd serving its socket (tinykube.localetcd, `socket=True`) beside its TCP port:
the apiserver creates, lists and watches through the socket; with TLS on it (`unixs://`) etcd
still answers only the apiserver's client certificate; a crashed etcd leaves its socket file
behind, and etcd started again serves a new one at the same path, which the apiserver finds
by itself; a stopped etcd leaves no socket file.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from aetcd import rpc

from tests.integration.conftest import (
    RunningAPIServer,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer, EtcdTLS
from tinykube.pki import PKI, cluster_specs
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.tls import Credentials
from tinykube.v1 import meta_pb2, pod_pb2

pytestmark = [pytest.mark.integration]


@pytest.fixture
async def socket_etcd() -> AsyncIterator[EtcdServer]:
    server = EtcdServer(socket=True)
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.cleanup)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    made = PKI(tmp_path_factory.mktemp("pki"))
    made.ensure_all([s for s in cluster_specs([]) if not s.name.endswith("-serving")])
    return made


@pytest.fixture
def tls_socket_etcd(pki: PKI) -> Iterator[EtcdServer]:
    server, peer = pki.paths("etcd-server"), pki.paths("etcd-peer")
    tls = EtcdTLS(
        str(server.cert), str(server.key), str(pki.ca_cert_path), str(peer.cert), str(peer.key)
    )
    etcd = EtcdServer(tls=tls, socket=True)
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.cleanup()


async def create_list_watch(running: RunningAPIServer) -> None:
    """A pod created, listed, and a watch from the list's revision sees the next one."""
    async with grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS)) as ch:
        stubs = make_stubs(ch)
        await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("first")))
        listed = await stubs.pods.List(meta_pb2.ListRequest(namespace="default"))
        assert [p.metadata.name for p in listed.items] == ["first"]
        watch = stubs.pods.Watch(
            meta_pb2.WatchRequest(
                namespace="default", resourceVersion=listed.metadata.resourceVersion
            )
        )
        second = await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("second")))
        event = await asyncio.wait_for(watch.read(), 20)
        while isinstance(event, pod_pb2.PodWatchEvent) and event.type == "BOOKMARK":
            event = await asyncio.wait_for(watch.read(), 20)
        assert isinstance(event, pod_pb2.PodWatchEvent)
        assert (event.type, event.object.metadata.name) == ("ADDED", "second")
        assert event.object.metadata.resourceVersion == second.metadata.resourceVersion
        watch.cancel()


async def test_the_apiserver_creates_lists_and_watches_over_the_socket(
    socket_etcd: EtcdServer,
) -> None:
    path = Path(socket_etcd.socket_path)
    assert socket_etcd.socket_url == f"unix://{path}"
    mode = (await asyncio.to_thread(os.stat, path)).st_mode
    assert stat.S_ISSOCK(mode)
    assert mode & 0o077 == 0, oct(mode)  # only its owner may connect
    running = await start_apiserver(make_settings(socket_etcd.socket_url))
    try:
        assert running.server.storage.target == f"unix:{path}"
        await create_list_watch(running)
    finally:
        await running.server.stop()


async def test_a_crashed_etcd_comes_back_on_the_same_socket(socket_etcd: EtcdServer) -> None:
    running = await start_apiserver(
        make_settings(socket_etcd.socket_url, etcd_request_timeout_seconds=15.0)
    )
    try:
        async with grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS)) as ch:
            stubs = make_stubs(ch)
            await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("before")))
            await asyncio.to_thread(socket_etcd.kill)
            # SIGKILL leaves the file behind; `start` removes it before etcd binds the path
            assert await asyncio.to_thread(os.path.exists, socket_etcd.socket_path)
            await asyncio.to_thread(socket_etcd.start)
            await stubs.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("after")))
            listed = await stubs.pods.List(meta_pb2.ListRequest(namespace="default"))
            assert sorted(p.metadata.name for p in listed.items) == ["after", "before"]
    finally:
        await running.server.stop()
    await asyncio.to_thread(socket_etcd.stop)
    assert not await asyncio.to_thread(os.path.exists, socket_etcd.socket_path)


async def test_tls_over_the_socket_answers_only_the_apiservers_certificate(
    pki: PKI, tls_socket_etcd: EtcdServer
) -> None:
    assert tls_socket_etcd.socket_url.startswith("unixs:///")
    client = pki.paths("apiserver-etcd-client")
    running = await start_apiserver(
        make_settings(
            tls_socket_etcd.socket_url,
            etcd_cafile=str(pki.ca_cert_path),
            etcd_certfile=str(client.cert),
            etcd_keyfile=str(client.key),
        )
    )
    try:
        await create_list_watch(running)
    finally:
        await running.server.stop()
    # The apiserver's certificate is answered on the socket; no certificate is refused.
    target = f"unix:{tls_socket_etcd.socket_path}"
    ca = str(pki.ca_cert_path)
    apiservers = Credentials.from_files(
        ca_file=ca, cert_file=str(client.cert), key_file=str(client.key), server_name="localhost"
    )
    async with apiservers.channel(target) as ch:
        await rpc.KVStub(ch).Range(rpc.RangeRequest(key=b"/"), timeout=5)
    anonymous = Credentials.from_files(ca_file=ca, server_name="localhost")
    async with anonymous.channel(target) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await rpc.KVStub(ch).Range(rpc.RangeRequest(key=b"/"), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
