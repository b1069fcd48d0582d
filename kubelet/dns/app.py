"""The cluster DNS process: informers over Services and EndpointSlices keep a `ClusterRecords`
current (rebuilt when either changes, at most every `min_rebuild` seconds), and a `DnsServer`
answers from it; no API call per query. gRPC health is NOT_SERVING until both informers synced.
Concurrency: one asyncio event loop; `records` is replaced wholesale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kubelet.dns.records import ClusterRecords
from kubelet.dns.server import DnsServer, upstreams_from_resolv_conf
from kubelet.dns.settings import Settings
from kubelet.proxy.proxier import group_slices
from tinykube.client import Client
from tinykube.informer import Informer
from tinykube.serving import GrpcServer

log = logging.getLogger(__name__)


class ClusterDns:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.records = ClusterRecords(domain=settings.domain)
        upstreams = list(settings.upstreams) or upstreams_from_resolv_conf(settings.resolv_conf)
        self.dns = DnsServer(lambda: self.records, upstreams)
        self.server = GrpcServer(settings.bind_address, [], tls=settings.security.serving())
        self.dns_port = 0
        self.synced = asyncio.Event()
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        port = await self.server.start()
        await self.server.set_serving(False)
        host, _, dns_port = self.settings.dns_address.rpartition(":")
        self.dns_port = await self.dns.start(host.strip("[]"), int(dns_port))
        log.info(
            "cluster DNS for %s on %s:%d (udp, tcp), upstreams %s",
            self.settings.domain,
            host,
            self.dns_port,
            ", ".join(f"{h}:{p}" for h, p in self.dns.upstreams) or "none",
        )
        self._task = asyncio.get_running_loop().create_task(self.run(), name="dns")
        return port

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.dns.stop()
        await self.server.stop(1.0)

    def _changed(self, *_: Any) -> None:
        self._dirty.set()

    async def run(self) -> None:
        while True:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dns loop failed; restarting it")
            await asyncio.sleep(1.0)

    async def _run(self) -> None:
        s = self.settings
        async with Client(s.apiserver, credentials=s.security.credentials()) as client:
            services: Informer[Any] = Informer.for_resource(client.services)
            slices: Informer[Any] = Informer.for_resource(
                client.endpoint_slices, label_selector="kubernetes.io/service-name"
            )
            for inf in (services, slices):
                inf.add_handler(self._changed, self._changed, self._changed)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(services.run(), name="informer-services")
                tg.create_task(slices.run(), name="informer-endpointslices")
                await services.wait_synced()
                await slices.wait_synced()
                while True:
                    self._dirty.clear()
                    self.records = ClusterRecords.build(
                        services.store.list(), group_slices(slices.store.list()), s.domain
                    )
                    if not self.synced.is_set():
                        self.synced.set()
                        await self.server.set_serving(True)
                    await self._dirty.wait()
                    await asyncio.sleep(s.min_rebuild)  # a burst of changes: one rebuild
