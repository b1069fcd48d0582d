"""The userspace proxier: listeners for Services' cluster IPs and nodePorts, forwarding TCP to
ready endpoints round robin (kube-proxy's original "userspace" mode).

Endpoints come from EndpointSlices (discovery.k8s.io/v1), as kube-proxy reads them: the slices
of a Service are those labelled `kubernetes.io/service-name=<name>`; a service port's backends
are the IPv4 addresses of the endpoints whose slice has a TCP port of the same name, each
address:port once (the first slice by name wins). Endpoints with `ready` true (or unset) are
used; when none is ready, those that are serving and terminating are (kube-proxy's fallback, so
a Service whose every pod is shutting down still reaches the pods that still serve).

`desired_state(services, slices, node_ip)` is pure: it maps every listening address (cluster
IPs, node ports, and LoadBalancer Services' ipMode-VIP ingress IPs at the service port) to the
service port it serves and every service port to its ready endpoints. `Proxier.sync` applies it:
it closes listeners no longer wanted and opens new ones. A service port listens only while it
has at least one ready endpoint, so a Service with none refuses connections at once (the kernel
answers with RST, as kube-proxy's REJECT rule does), instead of accepting and hanging.

Every listener sets SO_REUSEPORT. In a LocalCluster all "nodes" are one machine, so several
proxies want the same clusterIP:port; with SO_REUSEPORT each proxy binds it and the kernel spreads
connections between them. All proxies see the same Services and Endpoints, so any of them
forwards correctly, and one proxy exiting does not take a cluster IP down. nodePorts listen on
the node's own IP (in a LocalCluster give kubelets distinct loopback IPs, 127.0.1.x), so each
node's nodePort is served by that node's proxy.

An accepted connection goes to the next endpoint in round-robin order (with `sessionAffinity:
ClientIP`, a client whose last connection is younger than the Service's
sessionAffinityConfig.clientIP.timeoutSeconds goes to that connection's endpoint first); one
that refuses (or does not accept within the connect timeout) is skipped and the next is tried;
when all fail the client gets a reset. Bytes are copied both ways with back-pressure (`drain`
after each write); EOF on one side is passed on as a half-close to the other, an error on either
side aborts both.

Concurrency: one asyncio event loop; the route table is replaced wholesale by `sync`, and a new
connection reads it once when accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubelet.proxy.metrics import Metrics
from tinykube.v1 import endpointslice_pb2, service_pb2

log = logging.getLogger(__name__)

Endpoint = tuple[str, int]
Connector = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@dataclass(frozen=True, order=True)
class ServicePortName:
    namespace: str
    name: str
    port: str  # the service port's name ("" for a single unnamed port)

    def __str__(self) -> str:
        base = f"{self.namespace}/{self.name}"
        return f"{base}:{self.port}" if self.port else base


@dataclass(frozen=True, order=True)
class Listener:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


Slices = Sequence[endpointslice_pb2.EndpointSlice]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
DEFAULT_AFFINITY_TIMEOUT = 10800  # kube's default sessionAffinityConfig.clientIP.timeoutSeconds


def group_slices(slices: Iterable[endpointslice_pb2.EndpointSlice]) -> dict[str, list[Any]]:
    """Slices by the `namespace/name` of the Service their service-name label names, each
    group ordered by slice name; slices without the label belong to no Service."""
    grouped: dict[str, list[Any]] = {}
    for eps in slices:
        svc = eps.metadata.labels.get(SERVICE_NAME_LABEL, "")
        if svc:
            grouped.setdefault(f"{eps.metadata.namespace}/{svc}", []).append(eps)
    for group in grouped.values():
        group.sort(key=lambda s: s.metadata.name)
    return grouped


def ready_endpoints(
    slices: Slices | None, port_name: str, *, protocol: str = "TCP"
) -> list[Endpoint]:
    """The (ip, port) pairs one service port sends to: the ready endpoints, or when none is
    ready the serving terminating ones, in slice order, each pair once."""
    ready: list[Endpoint] = []
    draining: list[Endpoint] = []
    seen: set[Endpoint] = set()
    for eps in slices or ():
        if eps.addressType != "IPv4":
            continue
        for p in eps.ports:
            if p.name != port_name or (p.protocol or "TCP") != protocol or not p.HasField("port"):
                continue
            for e in eps.endpoints:
                if not e.addresses:
                    continue
                pair = (e.addresses[0], int(p.port))
                if pair in seen:
                    continue
                seen.add(pair)
                c = e.conditions
                is_ready = not c.HasField("ready") or c.ready
                serving = c.serving if c.HasField("serving") else is_ready
                if is_ready:
                    ready.append(pair)
                elif serving and c.terminating:
                    draining.append(pair)
    return ready or draining


def desired_state(
    services: Iterable[service_pb2.Service],
    endpoints: Mapping[str, Slices],
    node_ip: str,
) -> tuple[dict[Listener, ServicePortName], dict[ServicePortName, list[Endpoint]]]:
    """Listening addresses -> service port, and service port -> ready endpoints.

    Only service ports with ready endpoints get listeners.
    """
    routes: dict[Listener, ServicePortName] = {}
    backends: dict[ServicePortName, list[Endpoint]] = {}
    for svc in services:
        meta = svc.metadata
        if svc.spec.clusterIP in ("", "None") or svc.spec.type == "ExternalName":
            continue  # headless and ExternalName Services are DNS only
        ep = endpoints.get(f"{meta.namespace}/{meta.name}")
        for sp in svc.spec.ports:
            if (sp.protocol or "TCP") != "TCP":
                continue
            spn = ServicePortName(meta.namespace, meta.name, sp.name)
            eps = ready_endpoints(ep, sp.name)
            backends[spn] = eps
            if not eps:
                continue
            if svc.spec.clusterIP:
                routes[Listener(svc.spec.clusterIP, int(sp.port))] = spn
            if svc.spec.type in ("NodePort", "LoadBalancer") and sp.nodePort and node_ip:
                routes[Listener(node_ip, int(sp.nodePort))] = spn
            for lb_ip in vip_ingress_ips(svc):
                routes[Listener(lb_ip, int(sp.port))] = spn
    return routes, backends


def vip_ingress_ips(svc: service_pb2.Service) -> list[str]:
    """A LoadBalancer Service's `status.loadBalancer.ingress` IPs the proxy answers on: those
    with ipMode VIP (or unset); ipMode Proxy means the load balancer delivers to the node
    itself, as kube-proxy leaves them."""
    if svc.spec.type != "LoadBalancer":
        return []
    return [
        i.ip
        for i in svc.status.loadBalancer.ingress
        if i.ip and (not i.HasField("ipMode") or i.ipMode == "VIP")
    ]


def affinity_timeout(svc: service_pb2.Service) -> int:
    """Seconds a ClientIP-affine client sticks to its endpoint; 0 without ClientIP affinity."""
    if svc.spec.sessionAffinity != "ClientIP":
        return 0
    client_ip = svc.spec.sessionAffinityConfig.clientIP
    if client_ip.HasField("timeoutSeconds") and client_ip.timeoutSeconds > 0:
        return int(client_ip.timeoutSeconds)
    return DEFAULT_AFFINITY_TIMEOUT


class RoundRobin:
    """Per service port: its ready endpoints and where the next connection starts."""

    def __init__(self) -> None:
        self._endpoints: dict[ServicePortName, list[Endpoint]] = {}
        self._next: dict[ServicePortName, int] = {}

    def set_all(self, backends: Mapping[ServicePortName, list[Endpoint]]) -> None:
        for spn in [s for s in self._endpoints if s not in backends]:
            del self._endpoints[spn]
            self._next.pop(spn, None)
        for spn, eps in backends.items():
            if self._endpoints.get(spn) != eps:
                self._endpoints[spn] = list(eps)
                self._next[spn] = self._next.get(spn, 0) % max(len(eps), 1)

    def endpoints(self, spn: ServicePortName) -> list[Endpoint]:
        return list(self._endpoints.get(spn, ()))

    def order(self, spn: ServicePortName) -> list[Endpoint]:
        """Every endpoint, starting with this connection's turn; the next call starts one later."""
        eps = self._endpoints.get(spn)
        if not eps:
            return []
        start = self._next.get(spn, 0) % len(eps)
        self._next[spn] = (start + 1) % len(eps)
        return eps[start:] + eps[:start]


async def open_tcp(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0): the client sees 'connection reset', not a clean EOF."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxier:
    mode = "userspace"

    def __init__(
        self,
        metrics: Metrics,
        *,
        connect: Connector = open_tcp,
        connect_timeout: float = 2.0,
        buffer_size: int = 64 * 1024,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.now = now
        # ClientIP affinity: the timeout of each affine service port, and per (service port,
        # client address) the endpoint it went to and when it was last used (kube's userspace
        # proxier's affinity state).
        self.affinity: dict[ServicePortName, int] = {}
        self.sticky: dict[tuple[ServicePortName, str], tuple[Endpoint, float]] = {}
        self.connect = connect
        self.connect_timeout = connect_timeout
        self.buffer_size = buffer_size
        self.lb = RoundRobin()
        self.routes: dict[Listener, ServicePortName] = {}
        self.servers: dict[Listener, asyncio.Server] = {}
        self.bind_errors: dict[Listener, str] = {}
        self._connections: set[asyncio.Task[None]] = set()

    # ---- listeners -------------------------------------------------------------------------

    async def sync(
        self,
        services: Iterable[service_pb2.Service],
        endpoints: Mapping[str, Slices],
        node_ip: str,
    ) -> None:
        services = list(services)
        routes, backends = desired_state(services, endpoints, node_ip)
        self.lb.set_all(backends)
        self.routes = routes
        self.affinity = {
            ServicePortName(svc.metadata.namespace, svc.metadata.name, sp.name): timeout
            for svc in services
            if (timeout := affinity_timeout(svc))
            for sp in svc.spec.ports
        }
        now = self.now()
        self.sticky = {  # gone service ports and endpoints, and expired clients, dropped
            k: v
            for k, v in self.sticky.items()
            if k[0] in self.affinity
            and v[0] in backends.get(k[0], ())
            and now - v[1] < self.affinity[k[0]]
        }
        for listener in [lst for lst in self.servers if lst not in routes]:
            server = self.servers.pop(listener)
            server.close()  # stops listening; connections being forwarded carry on
            log.info("stopped listening on %s", listener)
        self.bind_errors = {k: v for k, v in self.bind_errors.items() if k in routes}
        for listener, spn in routes.items():
            if listener in self.servers:
                continue
            try:
                self.servers[listener] = await asyncio.start_server(
                    lambda r, w, lst=listener: self._accept(lst, r, w),  # type: ignore[misc]
                    listener.host,
                    listener.port,
                    reuse_address=True,
                    reuse_port=True,
                )
            except OSError as exc:
                if self.bind_errors.get(listener) != str(exc):
                    log.error("cannot listen on %s for %s: %s", listener, spn, exc)
                    self.metrics.errors.labels(str(spn), "bind").inc()
                self.bind_errors[listener] = str(exc)
                continue
            self.bind_errors.pop(listener, None)
            log.info("listening on %s for %s", listener, spn)
        self.metrics.listeners.set(len(self.servers))

    async def close(self) -> None:
        for server in self.servers.values():
            server.close()
        self.servers.clear()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ---- connections -----------------------------------------------------------------------

    def _accept(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(listener, reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    def _order(self, spn: ServicePortName, client: str) -> list[Endpoint]:
        """The endpoints to try: round robin, a ClientIP-affine client's own one first while
        its timeout has not passed since its last connection."""
        order = self.lb.order(spn)
        timeout = self.affinity.get(spn, 0)
        if timeout and client:
            held = self.sticky.get((spn, client))
            if held is not None and self.now() - held[1] < timeout and held[0] in order:
                order.remove(held[0])
                order.insert(0, held[0])
        return order

    async def dial(
        self, spn: ServicePortName, client: str = ""
    ) -> tuple[Endpoint, asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Connect to the next endpoint that accepts, round robin (a ClientIP-affine client's
        own endpoint first); None when none does."""
        service = str(spn)
        for host, port in self._order(spn, client):
            try:
                reader, writer = await asyncio.wait_for(
                    self.connect(host, port), self.connect_timeout
                )
            except (OSError, TimeoutError) as exc:
                log.info("%s: endpoint %s:%d failed (%s); trying the next", spn, host, port, exc)
                self.metrics.errors.labels(service, "endpoint_refused").inc()
                continue
            if client and spn in self.affinity:
                self.sticky[(spn, client)] = ((host, port), self.now())
            return (host, port), reader, writer
        return None

    async def _serve(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        spn = self.routes.get(listener)
        if spn is None:
            _reset(writer)
            return
        service = str(spn)
        self.metrics.connections.labels(service).inc()
        peer = writer.get_extra_info("peername")
        picked = await self.dial(spn, str(peer[0]) if peer else "")
        if picked is None:
            self.metrics.errors.labels(service, "no_endpoints").inc()
            _reset(writer)
            return
        _, up_reader, up_writer = picked
        active = self.metrics.active.labels(service)
        active.inc()
        try:
            await self.splice(service, reader, writer, up_reader, up_writer)
        finally:
            active.dec()

    async def _copy(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        count: Callable[[int], None],
    ) -> None:
        while True:
            data = await src.read(self.buffer_size)
            if not data:
                break
            dst.write(data)
            count(len(data))
            await dst.drain()  # back-pressure: a slow reader slows the sender
        if dst.can_write_eof():
            with contextlib.suppress(OSError):
                dst.write_eof()

    async def splice(
        self,
        service: str,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
    ) -> None:
        """Copy both ways until both sides finished; an error on either aborts both."""
        bytes_in = self.metrics.bytes.labels(service, "in")
        bytes_out = self.metrics.bytes.labels(service, "out")
        tasks = [
            asyncio.ensure_future(self._copy(client_r, up_w, bytes_in.inc)),
            asyncio.ensure_future(self._copy(up_r, client_w, bytes_out.inc)),
        ]
        failed = False
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if task.exception() is not None:
                    failed = True
                    log.debug("%s: copy ended: %s", service, task.exception())
            if failed:
                self.metrics.errors.labels(service, "copy").inc()
                for task in pending:
                    task.cancel()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for w in (client_w, up_w):
                if failed:
                    w.transport.abort()
                else:
                    w.close()
            for w in (client_w, up_w):
                with contextlib.suppress(Exception):
                    await w.wait_closed()
