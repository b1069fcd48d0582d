"""Cluster IP and nodePort allocation for Services, as compare-and-swap claims in etcd.

Every allocated value is one etcd key (`<prefix>/ranges/serviceips/<ip>`,
`<prefix>/ranges/servicenodeports/<port>`, value "namespace/name") created with
create_revision == 0 in the SAME transaction that writes the Service, and deleted in the same
transaction that deletes it (or changes it to no longer need the value). So a value is never
handed out twice, even by two apiservers racing on one etcd, and nothing leaks when a write
fails: either the Service and its claims are stored together or neither is.

Kubernetes keeps a bitmap per range in one key instead; one key per value costs a key per
Service but needs no read-modify-write of a shared key, so unrelated creates never conflict.

Choosing a free value is a guess first: a random value of the range, tried in the transaction,
whose compare-and-swap is what guarantees uniqueness anyway; a lost claim is retried with another
guess. Only after `GUESSES` lost claims (the range is filling up) does an attempt list the
range's claim keys and pick a random free one, which also finds a full range. (Listing first on
every create read every Service's claim: O(Services) per create, 12 % of the apiserver's time
while 2,000 Services were being made, quadratic over a cluster's life.) A
requested value that is taken is ALREADY_EXISTS; one outside the range or malformed is
INVALID_ARGUMENT naming the field; a full range is RESOURCE_EXHAUSTED. Pure asyncio over an
injected storage (the real `apiserver.storage.Storage`, or a fake in unit tests).
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from apiserver.storage import ListResult, WriteResult
from tinykube.errors import AlreadyExistsError, FieldError, InvalidError, ResourceExhaustedError
from tinykube.v1 import service_pb2

DEFAULT_CLUSTER_IP_RANGE = "127.100.0.0/16"
DEFAULT_NODE_PORT_RANGE = "30000-32767"
_ATTEMPTS = 16
# Attempts that guess a value instead of listing the range (see the module docstring): with the
# range a quarter full, 4 guesses all lose with probability 1/256.
GUESSES = 4
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")


# A headless Service's clusterIP: no address is allocated (DNS answers with its pods' IPs).
HEADLESS = "None"
# Service types that get node ports (LoadBalancer ones too, as kube's allocateLoadBalancerNodePorts
# default).
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


def _allocated(cluster_ip: str) -> bool:
    return bool(cluster_ip) and cluster_ip != HEADLESS


def parse_ip_range(text: str) -> ipaddress.IPv4Network:
    """An IPv4 CIDR of at least a /30. The default lies inside 127.0.0.0/8 (every address is
    local on Linux, what the process runtime's user-space proxy listens on); a range outside
    loopback (kube's 10.96.0.0/12, given by `tinykube up --runtime containerd`) is served by the
    proxy's nftables mode, which DNATs it inside pods' network namespaces too."""
    try:
        net = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(f"invalid service cluster IP range {text!r}: {exc}") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise ValueError(f"service cluster IP range {text!r} must be an IPv4 CIDR")
    if net.is_multicast or net.is_unspecified or net.subnet_of(_THIS_NETWORK):
        raise ValueError(f"service cluster IP range {text!r} is not a unicast range")
    if net.num_addresses < 4:
        raise ValueError(f"service cluster IP range {text!r} is too small (at least a /30)")
    return net


def parse_port_range(text: str) -> tuple[int, int]:
    """ "30000-32767" (inclusive) or a single port."""
    try:
        low_text, _, high_text = text.strip().partition("-")
        low = int(low_text)
        high = int(high_text) if high_text else low
    except ValueError:
        raise ValueError(f"invalid service node port range {text!r}: want LOW-HIGH") from None
    if not 1 <= low <= high <= 65535:
        raise ValueError(
            f"invalid service node port range {text!r}: want 1 <= LOW <= HIGH <= 65535"
        )
    return low, high


class AllocationStorage(Protocol):
    """The part of `apiserver.storage.Storage` allocation uses."""

    async def list_prefix(
        self, prefix: bytes, *, revision: int = 0, limit: int = 0, start: bytes = b""
    ) -> ListResult: ...


@dataclass
class Claims:
    """What a Service write must claim and release, besides writing the Service itself."""

    claims: list[tuple[bytes, bytes]] = field(default_factory=list)
    release: list[bytes] = field(default_factory=list)
    # Claim keys the client asked for explicitly (a taken one is the client's error), with the
    # field path and value to name in the error.
    requested: dict[bytes, tuple[str, str]] = field(default_factory=dict)


class ServiceAllocator:
    """Allocates and releases cluster IPs and nodePorts for one apiserver."""

    def __init__(
        self,
        storage: AllocationStorage,
        *,
        prefix: str = "/registry",
        cluster_ip_range: str = DEFAULT_CLUSTER_IP_RANGE,
        node_port_range: str = DEFAULT_NODE_PORT_RANGE,
        rng: random.Random | None = None,
    ) -> None:
        self.storage = storage
        self.ip_range = parse_ip_range(cluster_ip_range)
        self.port_range = parse_port_range(node_port_range)
        self.ip_prefix = f"{prefix}/ranges/serviceips/".encode()
        self.port_prefix = f"{prefix}/ranges/servicenodeports/".encode()
        self.rng = rng or random.Random()
        # The network and broadcast addresses are never handed out, as in Kubernetes.
        self._first_ip = int(self.ip_range.network_address) + 1
        self._ip_count = self.ip_range.num_addresses - 2

    # ---- keys ------------------------------------------------------------------------------

    def ip_key(self, ip: str) -> bytes:
        return self.ip_prefix + ip.encode()

    def port_key(self, port: int) -> bytes:
        return self.port_prefix + str(port).encode()

    def keys_of(self, spec: service_pb2.ServiceSpec) -> list[bytes]:
        """Every claim key a stored Service holds (released when it is deleted)."""
        keys = [self.ip_key(spec.clusterIP)] if _allocated(spec.clusterIP) else []
        keys += [self.port_key(p.nodePort) for p in spec.ports if p.nodePort]
        return keys

    # ---- validation ------------------------------------------------------------------------

    def validate(self, spec: service_pb2.ServiceSpec) -> list[FieldError]:
        """Requested values outside the configured ranges (format errors included)."""
        errs: list[FieldError] = []
        if _allocated(spec.clusterIP):
            try:
                ip = ipaddress.ip_address(spec.clusterIP)
            except ValueError:
                errs.append(
                    _invalid("spec.clusterIP", spec.clusterIP, "must be a valid IP address")
                )
            else:
                if ip not in self.ip_range or int(ip) in (
                    int(self.ip_range.network_address),
                    int(self.ip_range.broadcast_address),
                ):
                    errs.append(
                        _invalid(
                            "spec.clusterIP",
                            spec.clusterIP,
                            "provided IP is not in the valid range. The range of valid IPs is "
                            f"{self.ip_range}",
                        )
                    )
        low, high = self.port_range
        seen: set[int] = set()
        for i, p in enumerate(spec.ports):
            if not p.nodePort:
                continue
            path = f"spec.ports[{i}].nodePort"
            if spec.type not in NODE_PORT_TYPES:
                errs.append(
                    FieldError(
                        path,
                        f"Forbidden: may not be used when `type` is '{spec.type or 'ClusterIP'}'",
                    )
                )
            elif not low <= p.nodePort <= high:
                errs.append(
                    _invalid(
                        path,
                        p.nodePort,
                        "provided port is not in the valid range. The range of valid ports is "
                        f"{low}-{high}",
                    )
                )
            elif p.nodePort in seen:
                errs.append(FieldError(path, f'Duplicate value: "{p.nodePort}"'))
            seen.add(p.nodePort)
        return errs

    # ---- planning --------------------------------------------------------------------------

    def plan(
        self, owner: str, new: service_pb2.ServiceSpec, old: service_pb2.ServiceSpec | None
    ) -> Claims:
        """Claims for the values `new` names that `old` (None on create) did not hold, and
        releases for those `old` held that `new` does not. Unset values are not planned here."""
        held = set(self.keys_of(old)) if old is not None else set()
        wanted = self.keys_of(new)
        out = Claims()
        for key in wanted:
            if key not in held:
                out.claims.append((key, owner.encode()))
        if _allocated(new.clusterIP):
            out.requested[self.ip_key(new.clusterIP)] = ("spec.clusterIP", new.clusterIP)
        for i, p in enumerate(new.ports):
            if p.nodePort:
                out.requested[self.port_key(p.nodePort)] = (
                    f"spec.ports[{i}].nodePort",
                    str(p.nodePort),
                )
        out.release = [k for k in held if k not in set(wanted)]
        return out

    async def _used(self, prefix: bytes) -> set[str]:
        used: set[str] = set()
        start = b""
        while True:
            result = await self.storage.list_prefix(prefix, start=start)
            used.update(kv.key[len(prefix) :].decode() for kv in result.kvs)
            if not result.more or not result.kvs:
                return used
            start = result.kvs[-1].key + b"\x00"

    def _guess(self, count: int, avoid: set[int]) -> int | None:
        """A random offset into a range of `count` values not in `avoid` (None if a few draws
        found none: the caller lists the range instead)."""
        for _ in range(8):
            offset = self.rng.randrange(count)
            if offset not in avoid:
                return offset
        return None

    async def _pick_ip(self, avoid: set[str], guess: bool = False) -> str:
        if guess:
            taken = {int(ipaddress.ip_address(ip)) - self._first_ip for ip in avoid}
            offset = self._guess(self._ip_count, taken)
            if offset is not None:
                return str(ipaddress.ip_address(self._first_ip + offset))
        used = await self._used(self.ip_prefix) | avoid
        if len(used) >= self._ip_count:
            free = [
                str(ipaddress.ip_address(self._first_ip + i))
                for i in range(self._ip_count)
                if str(ipaddress.ip_address(self._first_ip + i)) not in used
            ]
            if not free:
                raise ResourceExhaustedError(
                    "Internal error occurred: failed to allocate a serviceIP: range is full "
                    f"(--service-cluster-ip-range {self.ip_range})"
                )
            return self.rng.choice(free)
        # Random probing from a random start: O(1) expected while the range is not nearly full.
        offset = self.rng.randrange(self._ip_count)
        for i in range(self._ip_count):
            ip = str(ipaddress.ip_address(self._first_ip + (offset + i) % self._ip_count))
            if ip not in used:
                return ip
        raise AssertionError("unreachable: a free address was counted")

    async def _pick_port(self, avoid: set[int], guess: bool = False) -> int:
        low, high = self.port_range
        if guess:
            offset = self._guess(high - low + 1, {p - low for p in avoid})
            if offset is not None:
                return low + offset
        used = {int(p) for p in await self._used(self.port_prefix)} | avoid
        count = high - low + 1
        offset = self.rng.randrange(count)
        for i in range(count):
            port = low + (offset + i) % count
            if port not in used:
                return port
        raise ResourceExhaustedError(
            "Internal error occurred: failed to allocate a nodePort: range is full "
            f"(--service-node-port-range {low}-{high})"
        )

    async def fill(
        self, spec: service_pb2.ServiceSpec, avoid: set[bytes], *, guess: bool = False
    ) -> None:
        """Give `spec` a cluster IP and nodePorts (NodePort services) where unset, avoiding
        keys that lost a race on an earlier attempt; with `guess`, values drawn at random
        without reading which are taken (the write's compare-and-swap checks them)."""
        if spec.clusterIP == HEADLESS:
            spec.clusterIPs[:] = [HEADLESS]
        elif spec.type == "ExternalName":
            pass  # a CNAME in cluster DNS: no address
        elif not spec.clusterIP:
            avoid_ips = {
                k[len(self.ip_prefix) :].decode() for k in avoid if k.startswith(self.ip_prefix)
            }
            spec.clusterIP = await self._pick_ip(avoid_ips, guess)
        if _allocated(spec.clusterIP):
            spec.clusterIPs[:] = [spec.clusterIP]
        # allocateLoadBalancerNodePorts false: a LoadBalancer Service gets no node ports (those
        # it names are still claimed)
        wanted = spec.type == "NodePort" or (
            spec.type == "LoadBalancer"
            and (
                spec.allocateLoadBalancerNodePorts
                or not spec.HasField("allocateLoadBalancerNodePorts")
            )
        )
        if wanted:
            taken_here = {p.nodePort for p in spec.ports if p.nodePort}
            avoid_ports = {
                int(k[len(self.port_prefix) :]) for k in avoid if k.startswith(self.port_prefix)
            }
            for p in spec.ports:
                if not p.nodePort:
                    p.nodePort = await self._pick_port(avoid_ports | taken_here, guess)
                    taken_here.add(p.nodePort)

    # ---- the write loop --------------------------------------------------------------------

    async def write(
        self,
        kind: str,
        name: str,
        owner: str,
        spec: service_pb2.ServiceSpec,
        old: service_pb2.ServiceSpec | None,
        attempt: Callable[[Claims], Awaitable[WriteResult | None]],
    ) -> WriteResult | None:
        """Fill unset values, then run `attempt` (the caller's etcd transaction with these
        claims and releases) until no auto-chosen claim is lost to a concurrent writer.

        `attempt` returns None or a result whose failure was not about claims (the caller
        handles those); a taken value the client asked for is AlreadyExistsError.
        """
        requested_before = self.plan(owner, spec, old).requested
        auto: list[bytes] = []
        avoid: set[bytes] = set()
        for n in range(_ATTEMPTS):
            # Reset the values chosen by an earlier attempt that lost a race.
            if auto:
                if self.ip_key(spec.clusterIP) in auto:
                    spec.clusterIP = ""
                for p in spec.ports:
                    if self.port_key(p.nodePort) in auto:
                        p.nodePort = 0
            await self.fill(spec, avoid, guess=n < GUESSES)
            claims = self.plan(owner, spec, old)
            auto = [k for k, _ in claims.claims if k not in requested_before]
            result = await attempt(claims)
            if result is None or result.succeeded or not result.taken:
                return result
            for key in result.taken:
                if key in requested_before:
                    raise self._taken(kind, name, key, requested_before[key])
            avoid.update(result.taken)
        raise ResourceExhaustedError(
            f'{kind} "{name}": could not allocate a cluster IP / nodePort after {_ATTEMPTS} '
            "attempts (heavy contention); try again"
        )

    async def dry_run(
        self,
        kind: str,
        name: str,
        owner: str,
        spec: service_pb2.ServiceSpec,
        old: service_pb2.ServiceSpec | None,
        get: Callable[[bytes], Awaitable[object | None]],
    ) -> None:
        """`write` for a dry run: unset values are filled with values free now (nothing is
        reserved), and a value the client asked for that is taken (`get` finds its claim key)
        is the same AlreadyExistsError the write's transaction would make."""
        requested = self.plan(owner, spec, old).requested
        await self.fill(spec, set())
        for key, _ in self.plan(owner, spec, old).claims:
            if key in requested and await get(key) is not None:
                raise self._taken(kind, name, key, requested[key])

    def _taken(
        self, kind: str, name: str, key: bytes, field: tuple[str, str]
    ) -> AlreadyExistsError:
        path, value = field
        what = "IP" if key.startswith(self.ip_prefix) else "port"
        return AlreadyExistsError(
            f'{kind} "{name}" is invalid: {path}: Invalid value: "{value}": '
            f"provided {what} is already allocated"
        )


def _invalid(path: str, value: object, detail: str) -> FieldError:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return FieldError(path, f"Invalid value: {shown}: {detail}")


def invalid_error(kind: str, name: str, errs: Sequence[FieldError]) -> InvalidError:
    return InvalidError.for_object(kind, name, list(errs))
