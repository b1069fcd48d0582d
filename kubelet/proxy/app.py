"""The proxy process: informers over Services and EndpointSlices driving a `Proxier`.

`Proxy.start()` serves gRPC health (NOT_SERVING until the first sync) and starts `run()`: it
learns the node's IP (flag, or the Node's InternalIP from the API), runs one informer per kind,
and re-syncs the proxier's listeners whenever either informer reports a change (handlers only
set an event, so bursts of changes coalesce into one sync) and every `sync_period` seconds
(which retries listeners that failed to bind). Concurrency: one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kubelet.proxy.metrics import Metrics
from kubelet.proxy.nftables import NftablesProxier, nft_available
from kubelet.proxy.proxier import Connector, Proxier, group_slices, open_tcp
from kubelet.proxy.settings import Settings
from tinykube.client import Client
from tinykube.clock import Clock
from tinykube.errors import NotFoundError, TinykubeError
from tinykube.informer import Informer
from tinykube.serving import GrpcServer

log = logging.getLogger(__name__)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"
PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"


class Proxy:
    def __init__(
        self, settings: Settings, *, clock: Clock | None = None, connect: Connector = open_tcp
    ) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self.metrics = Metrics()
        mode, why = choose_mode(settings)
        self.proxier: Proxier | NftablesProxier
        if mode == "nftables":
            self.proxier = NftablesProxier(
                self.metrics,
                table=settings.nft_table,
                cluster_cidr=settings.cluster_cidr,
                min_sync_period=settings.min_sync_period,
                node_name=settings.node_name,
            )
        else:
            self.proxier = Proxier(
                self.metrics,
                connect=connect,
                connect_timeout=settings.connect_timeout,
                buffer_size=settings.buffer_size,
            )
        self.metrics.mode.labels(mode).set(1)
        log.info("proxy mode %s (%s)", mode, why)
        self.server = GrpcServer(settings.bind_address, [], tls=settings.security.serving())
        self.node_ip = settings.node_ip
        self.port = 0
        self.synced = asyncio.Event()
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        self.port = await self.server.start()
        await self.server.set_serving(False)
        self.metrics.serve(self.settings.metrics_port, host=_host(self.settings.bind_address))
        self._task = asyncio.get_running_loop().create_task(self.run(), name="proxy")
        return self.port

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.proxier.close()
        await self.server.stop(1.0)

    def _changed(self, *_: Any) -> None:
        self._dirty.set()

    async def _node_ip(self, client: Client) -> str:
        """The Node's InternalIP; waits for the kubelet to register the Node."""
        warned = False
        while True:
            try:
                node = await client.nodes.get(self.settings.node_name)
                for address in node.status.addresses:
                    if address.type == "InternalIP" and address.address:
                        return str(address.address)
            except NotFoundError:
                pass
            except TinykubeError as exc:
                log.warning("reading node %s: %s", self.settings.node_name, exc)
            if not warned:
                log.info("waiting for node %s to report an InternalIP", self.settings.node_name)
                warned = True
            await self.clock.sleep(0.5)

    async def run(self) -> None:
        """`_run` until cancelled; an unexpected failure is logged and the loop starts over
        (listeners stay up meanwhile, serving the last known endpoints)."""
        while True:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("proxy loop failed; restarting it")
            await self.clock.sleep(1.0)

    async def _run(self) -> None:
        s = self.settings
        async with Client(s.apiserver, credentials=s.security.credentials()) as client:
            if not self.node_ip:
                self.node_ip = await self._node_ip(client)
            log.info("proxy for node %s: nodePorts on %s", s.node_name, self.node_ip)
            services: Informer[Any] = Informer.for_resource(client.services, clock=self.clock)
            # kube-proxy's selector: slices of a Service, not those of headless Services or of
            # Services another proxy implements.
            endpoints: Informer[Any] = Informer.for_resource(
                client.endpoint_slices,
                label_selector=f"{SERVICE_NAME_LABEL},!{HEADLESS_LABEL},!{PROXY_NAME_LABEL}",
                clock=self.clock,
            )
            for inf in (services, endpoints):
                inf.add_handler(self._changed, self._changed, self._changed)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(services.run(), name="informer-services")
                tg.create_task(endpoints.run(), name="informer-endpointslices")
                await services.wait_synced()
                await endpoints.wait_synced()
                while True:
                    self._dirty.clear()
                    eps = group_slices(endpoints.store.list())
                    await self.proxier.sync(services.store.list(), eps, self.node_ip)
                    if not self.synced.is_set():
                        self.synced.set()
                        await self.server.set_serving(True)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._dirty.wait(), s.sync_period)


def choose_mode(settings: Settings) -> tuple[str, str]:
    """The proxy mode and why: --proxy-mode, or for auto nftables when the pods have their own
    network (--cluster-cidr) and nft can run here, userspace otherwise."""
    if settings.proxy_mode == "userspace":
        return "userspace", "--proxy-mode userspace"
    why_not = nft_available()
    if settings.proxy_mode == "nftables":
        if why_not:
            raise SystemExit(f"--proxy-mode nftables: {why_not}")
        return "nftables", "--proxy-mode nftables"
    if not settings.cluster_cidr:
        return "userspace", "auto: no --cluster-cidr (pods share the host's network)"
    if why_not:
        return "userspace", f"auto: {why_not}"
    return "nftables", f"auto: --cluster-cidr {settings.cluster_cidr}, root, nft installed"


def _host(bind_address: str) -> str:
    """The host of a host:port listen address: metrics listen where the component does."""
    return bind_address.rsplit(":", 1)[0].strip("[]") if ":" in bind_address else bind_address
