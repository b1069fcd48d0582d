"""The service load balancer controller: gives `type: LoadBalancer` Services an address from a
configured pool, as MetalLB's layer-2 mode (or k3s's ServiceLB) does on bare metal, so that
`kubectl get svc` shows an EXTERNAL-IP and the proxies answer on it.

The pool (`--service-lb-pool`: CIDRs or `first-last` ranges, comma separated) is this
controller's only state, rebuilt from the Services' `status.loadBalancer.ingress` that the
informer holds (as MetalLB rebuilds its allocations): no etcd key of its own. A Service is this
controller's when it is a LoadBalancer with no `spec.loadBalancerClass` or with ours
(`--service-lb-class`, `tinykube.io/service-lb` by default); others belong to another
implementation and are never touched. Each of ours gets one address, written as
`status.loadBalancer.ingress: [{ip, ipMode: VIP}]` (VIP: the proxies DNAT it, kube's 1.30+
field); an address it already holds is kept across restarts. `spec.loadBalancerIP`
(deprecated in kube, honoured by MetalLB) asks for one address of the pool: a Service asking
for one outside the pool or held by another gets none (an `AllocationFailed` Event says why).
A Service that stops being a LoadBalancer has its pool addresses removed from its status; a
deleted one frees its address.
Two Services claiming one address in their status (written by hand): the first seen keeps it,
the other is given a new one. When the pool is empty the Service stays `<pending>` with a
Warning Event `AllocationFailed` and is retried whenever an address is freed.

The address answers because the proxies make it: the nftables mode DNATs
`ingress-ip . proto . port` like a cluster IP (through the external chain:
externalTrafficPolicy applies), the userspace mode listens on it, so a userspace pool must be
local to the machine (loopback: `up`'s default 127.101.0.0/24), an nftables one must not be
(`up --runtime containerd`: 10.112.0.0/24; pods reach it through the host's DNAT).

Concurrency: one asyncio event loop; informer handlers keep the pool's owners current, the work
queue never hands out one key twice at once.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from typing import Protocol

from controller.api import Queue, Recorder, Store
from tinykube.errors import NotFoundError
from tinykube.events import NORMAL, WARNING
from tinykube.protocols import StatusResourceAPI
from tinykube.v1 import service_pb2

log = logging.getLogger(__name__)

Service = service_pb2.Service
DEFAULT_CLASS = "tinykube.io/service-lb"
# Loopback, next to the default service range 127.100.0.0/16: what the userspace proxy (the
# process runtime's) can listen on. `up --runtime containerd` passes CONTAINERD_POOL.
DEFAULT_POOL = "127.101.0.0/24"
IP_ALLOCATED = "IPAllocated"
ALLOCATION_FAILED = "AllocationFailed"
# kube's LoadBalancerIPMode: VIP (traffic arrives with the address as destination; the proxy
# handles it) or Proxy (the load balancer rewrites it; the proxy must not).
IP_MODE_VIP = "VIP"


class ServiceLBClientAPI(Protocol):
    @property
    def services(self) -> StatusResourceAPI[Service]: ...


def parse_pool(text: str) -> list[tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]]:
    """`10.112.0.0/24,192.0.2.10-192.0.2.20` -> inclusive (first, last) ranges. A CIDR of /30
    or wider leaves out its network and broadcast addresses."""
    ranges: list[tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            if "-" in part:
                a, b = (ipaddress.IPv4Address(x.strip()) for x in part.split("-", 1))
                if b < a:
                    raise ValueError(f"{b} is before {a}")
            else:
                net = ipaddress.IPv4Network(part, strict=True)
                a, b = net.network_address, net.broadcast_address
                if net.prefixlen <= 30:
                    a, b = a + 1, b - 1
        except ValueError as exc:
            raise ValueError(f"--service-lb-pool {part!r}: {exc}") from None
        if a.is_unspecified or a.is_multicast or b.is_multicast:
            raise ValueError(f"--service-lb-pool {part!r}: not unicast addresses")
        ranges.append((a, b))
    if not ranges:
        raise ValueError("--service-lb-pool is empty")
    return ranges


class AddressPool:
    """The pool's addresses and which Service (`namespace/name`) holds each."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ranges = parse_pool(text)
        self.owner: dict[str, str] = {}

    def __contains__(self, ip: object) -> bool:
        try:
            addr = ipaddress.IPv4Address(str(ip))
        except ValueError:
            return False
        return any(a <= addr <= b for a, b in self.ranges)

    def _addresses(self) -> Iterator[str]:
        for a, b in self.ranges:
            for n in range(int(a), int(b) + 1):
                yield str(ipaddress.IPv4Address(n))

    def claim(self, ip: str, key: str) -> bool:
        """Record `key` as the holder of `ip`; False when another Service holds it."""
        if ip not in self:
            return False
        holder = self.owner.setdefault(ip, key)
        return holder == key

    def held_by(self, key: str) -> list[str]:
        return [ip for ip, k in self.owner.items() if k == key]

    def release(self, key: str, keep: str = "") -> list[str]:
        """Free every address `key` holds but `keep`; the freed ones."""
        freed = [ip for ip in self.held_by(key) if ip != keep]
        for ip in freed:
            del self.owner[ip]
        return freed

    def allocate(self, key: str) -> str | None:
        for ip in self._addresses():
            if ip not in self.owner:
                self.owner[ip] = key
                return ip
        return None


def _key(svc: Service) -> str:
    return f"{svc.metadata.namespace}/{svc.metadata.name}"


def ingress_ips(svc: Service) -> list[str]:
    return [i.ip for i in svc.status.loadBalancer.ingress if i.ip]


class ServiceLBController:
    name = "service-lb"

    def __init__(
        self,
        client: ServiceLBClientAPI,
        services: Store[Service],
        queue: Queue,
        pool: AddressPool,
        *,
        lb_class: str = DEFAULT_CLASS,
        recorder: Recorder | None = None,
    ) -> None:
        self.client = client
        self.services = services
        self.queue = queue
        self.pool = pool
        self.lb_class = lb_class
        self.recorder = recorder
        # Services the pool had no address for: retried when one is freed.
        self._starved: set[str] = set()

    def ours(self, svc: Service) -> bool:
        spec = svc.spec
        return spec.type == "LoadBalancer" and (
            not spec.HasField("loadBalancerClass") or spec.loadBalancerClass == self.lb_class
        )

    # ---- informer handlers -----------------------------------------------------------------

    def on_add(self, svc: Service) -> None:
        if self.ours(svc):
            # what an earlier run (or leader) gave it stays its own, first come first kept
            for ip in ingress_ips(svc):
                self.pool.claim(ip, _key(svc))
        if self.ours(svc) or any(ip in self.pool for ip in ingress_ips(svc)):
            self.queue.add(_key(svc))

    def on_update(self, old: Service, new: Service) -> None:
        self.on_add(new)

    def on_delete(self, svc: Service) -> None:
        if self.pool.release(_key(svc)):
            self._wake_starved()

    def _wake_starved(self) -> None:
        for key in sorted(self._starved):
            self.queue.add(key)
        self._starved.clear()

    # ---- reconcile -------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        svc = self.services.get(key)
        if svc is None:
            if self.pool.release(key):
                self._wake_starved()
            return
        if not self.ours(svc):
            await self._release(svc)
            return
        self._starved.discard(key)
        current = ingress_ips(svc)
        wanted = svc.spec.loadBalancerIP
        if wanted:
            keep = wanted if self.pool.claim(wanted, key) else ""
        else:
            keep = next((ip for ip in current if self.pool.claim(ip, key)), "")
        if self.pool.release(key, keep=keep):
            self._wake_starved()
        ip = keep or (None if wanted else self.pool.allocate(key))
        if ip is None:
            self._starved.add(key)
            if not wanted:
                why = f"no available IPs in pool {self.pool.text}"
            elif wanted not in self.pool:
                why = f'"{wanted}" is not in pool {self.pool.text}'
            else:
                why = f'"{wanted}" is already in use by {self.pool.owner.get(wanted, "")}'
            log.warning("service %s: no address: %s", key, why)
            await self._event(
                svc, WARNING, ALLOCATION_FAILED, f'Failed to allocate IP for "{key}": {why}'
            )
            if current and any(i in self.pool for i in current):
                await self._write(svc, [])  # what it had is not what it asks for
            return
        want = service_pb2.LoadBalancerIngress(ip=ip, ipMode=IP_MODE_VIP)
        if list(svc.status.loadBalancer.ingress) == [want]:
            return
        try:
            await self._write(svc, [want])
        except NotFoundError:
            self.pool.release(key)
            return
        except Exception:
            if not keep:
                self.pool.release(key)  # a fresh pick: the retry picks again
            raise
        if ip != keep:
            log.info("service %s: load balancer address %s", key, ip)
            await self._event(svc, NORMAL, IP_ALLOCATED, f'Assigned IP ["{ip}"]')

    async def _write(self, svc: Service, ingress: list[service_pb2.LoadBalancerIngress]) -> None:
        updated = Service()
        updated.CopyFrom(svc)
        del updated.status.loadBalancer.ingress[:]
        updated.status.loadBalancer.ingress.extend(ingress)
        await self.client.services.update_status(updated)

    async def _release(self, svc: Service) -> None:
        """A Service that is not (or no longer) ours: the pool's addresses leave its status."""
        key = _key(svc)
        if self.pool.release(key):
            self._wake_starved()
        if svc.spec.type == "LoadBalancer":
            return  # another implementation's: its status is its own
        ingress = svc.status.loadBalancer.ingress
        kept = [i for i in ingress if not (i.ip and i.ip in self.pool)]
        if len(kept) == len(ingress):
            return
        try:
            await self._write(svc, kept)
        except NotFoundError:
            return
        log.info("service %s: type %s, load balancer address released", key, svc.spec.type)

    async def _event(self, svc: Service, type: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            await self.recorder.record(svc, type, reason, message)
