"""The nftables proxier: Services' cluster IPs and node ports DNATed by the kernel to ready
endpoints, as kube-proxy's nftables mode (pkg/proxy/nftables) does, for pods in their own
network namespaces (the CRI runtime), where the user-space proxy's loopback listeners are out of
reach.

One table per proxy (`ip tinykube-proxy`, or `--nft-table`: several node proxies on one machine
each own theirs; identical DNAT rules in two tables are harmless, a connection is NATed once).
Its layout follows kube-proxy's:

- base chains `nat-prerouting` (prerouting, priority dstnat: -100) and `nat-output` (output,
  -100) jump to `services`; `nat-postrouting` (srcnat: 100) jumps to `masquerading`, which
  masquerades packets carrying the 0x4000 mark that `mark-for-masquerade` sets;
- `filter-prerouting-pre-dnat` / `filter-output-pre-dnat` (priority -110) reject new
  connections to a service port with no endpoints, through the `no-endpoint-services` and
  `no-endpoint-nodeports` verdict maps (the client sees "connection refused" at once);
- `services` looks the destination up in the verdict maps `service-ips`
  (`ipv4_addr . inet_proto . inet_service : verdict`) and, for the node's own address,
  `service-nodeports` (`inet_proto . inet_service`);
- a chain per service port `service-<hash>-<ns>/<name>/<proto>/<port>`: marks traffic from
  outside the cluster CIDR (or all, with no cluster CIDR known) for masquerade, then with
  `sessionAffinity: ClientIP` sends a client found in an endpoint's affinity set to that
  endpoint, and otherwise picks one with `numgen random mod N vmap { 0 : goto ..., ... }`;
- `external-<hash>-...` for node ports: externalTrafficPolicy Cluster masquerades and spreads
  over every endpoint, Local keeps the client's address and uses this node's endpoints
  (EndpointSlice nodeName); internalTrafficPolicy Local limits the cluster IP the same way; with
  Local and no endpoint on this node the traffic is dropped, as kube's "no local endpoints";
- a chain per endpoint `endpoint-<hash>-<ns>/<name>/<proto>/<port>__<ip>/<port>`: a packet from
  the endpoint itself (hairpin: a pod reaching itself through its Service) is marked for
  masquerade, the client is added to the affinity set (`update @affinity-... { ip saddr }`, the
  set's timeout is the Service's timeoutSeconds), and the packet is DNATed.

`build_ruleset` is pure (Services, EndpointSlices, node IP -> a `Ruleset`); `render_full` and
`render_update` turn rulesets into the text `nft -f -` reads. `NftablesProxier.sync` applies one
transaction per sync: the first writes the table whole (add, delete, add: stale state of an
earlier run is gone), later ones only flush and rewrite the chains and maps that changed and
delete chains and sets no longer wanted, as kube-proxy's partial syncs do. Syncs are at least
`min_sync_period` apart (kube's minSyncPeriod, 1 s): changes arriving meanwhile coalesce into the
next one. `close` deletes the table.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ipaddress
import logging
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kubelet.proxy.metrics import Metrics
from kubelet.proxy.proxier import Slices, affinity_timeout, ready_endpoints, vip_ingress_ips
from tinykube.v1 import service_pb2

log = logging.getLogger(__name__)

DEFAULT_TABLE = "tinykube-proxy"
# A refused `nft -f` is tried this many more times before a partial sync falls back to a full
# one (and a full one gives up until the next sync).
NFT_RETRIES = 2
MASQ_MARK = "0x4000"

BASE_CHAINS: dict[str, str] = {
    "filter-prerouting-pre-dnat": ("type filter hook prerouting priority -110; policy accept;"),
    "filter-output-pre-dnat": "type filter hook output priority -110; policy accept;",
    "nat-prerouting": "type nat hook prerouting priority -100; policy accept;",
    "nat-output": "type nat hook output priority -100; policy accept;",
    "nat-postrouting": "type nat hook postrouting priority 100; policy accept;",
}

MAP_TYPES: dict[str, str] = {
    "service-ips": "ipv4_addr . inet_proto . inet_service : verdict",
    "service-nodeports": "inet_proto . inet_service : verdict",
    "no-endpoint-services": "ipv4_addr . inet_proto . inet_service : verdict",
    "no-endpoint-nodeports": "inet_proto . inet_service : verdict",
}


def _hash(text: str) -> str:
    """kube's chain-name prefix: 8 base32 characters of the name's SHA-256."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:8].lower()


def _proto(protocol: str) -> str:
    return (protocol or "TCP").lower()


@dataclass
class Ruleset:
    """One table's content: regular chains with their rules, verdict maps with their elements,
    and affinity sets with their timeouts. Base chains are always there."""

    chains: dict[str, tuple[str, ...]] = field(default_factory=dict)
    maps: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sets: dict[str, int] = field(default_factory=dict)  # affinity set -> timeout seconds


def _static_chains(node_ip: str) -> dict[str, tuple[str, ...]]:
    nodeports: tuple[str, ...] = ()
    nodeports_check: tuple[str, ...] = ()
    if node_ip:
        nodeports = (f"ip daddr {node_ip} meta l4proto . th dport vmap @service-nodeports",)
        nodeports_check = (
            f"ip daddr {node_ip} meta l4proto . th dport vmap @no-endpoint-nodeports",
        )
    return {
        "filter-prerouting-pre-dnat": ("ct state new jump service-endpoints-check",),
        "filter-output-pre-dnat": ("ct state new jump service-endpoints-check",),
        "service-endpoints-check": (
            "ip daddr . meta l4proto . th dport vmap @no-endpoint-services",
            *nodeports_check,
        ),
        # TCP gets a reset (ECONNREFUSED at once, also over loopback), the rest ICMP unreachable
        "reject-chain": ("meta l4proto tcp reject with tcp reset", "reject"),
        "nat-prerouting": ("jump services",),
        "nat-output": ("jump services",),
        "nat-postrouting": ("jump masquerading",),
        "mark-for-masquerade": (f"mark set mark or {MASQ_MARK}",),
        "masquerading": (
            f"mark and {MASQ_MARK} == 0 return",
            f"mark set mark xor {MASQ_MARK}",
            "masquerade fully-random",
        ),
        "services": (
            "ip daddr . meta l4proto . th dport vmap @service-ips",
            *nodeports,
        ),
    }


def build_ruleset(
    services: Iterable[service_pb2.Service],
    endpoints: Mapping[str, Slices],
    node_ip: str,
    cluster_cidr: str = "",
    node_name: str = "",
) -> Ruleset:
    """The table for these Services and their slices (pure); `node_name` tells this node's
    endpoints (trafficPolicy Local)."""
    rs = Ruleset(chains=_static_chains(node_ip))
    maps: dict[str, list[str]] = {name: [] for name in MAP_TYPES}
    for svc in sorted(services, key=lambda s: (s.metadata.namespace, s.metadata.name)):
        spec = svc.spec
        cluster_ip = spec.clusterIP
        if not cluster_ip or cluster_ip == "None" or spec.type == "ExternalName":
            continue
        key = f"{svc.metadata.namespace}/{svc.metadata.name}"
        # sessionAffinityConfig.clientIP.timeoutSeconds (10800 s by default)
        timeout = affinity_timeout(svc)
        affinity = timeout > 0
        local = _local_addresses(endpoints.get(key), node_name)
        # status.loadBalancer.ingress IPs (the service-lb controller's, ipMode VIP) are external
        lb_ips = vip_ingress_ips(svc)
        for sp in spec.ports:
            proto = _proto(sp.protocol)
            port_id = f"{key}/{proto}/{sp.name}"
            eps = ready_endpoints(endpoints.get(key), sp.name, protocol=(sp.protocol or "TCP"))
            ip_key = f"{cluster_ip} . {proto} . {int(sp.port)}"
            node_port = int(sp.nodePort) if spec.type in ("NodePort", "LoadBalancer") else 0
            lb_keys = [f"{lb} . {proto} . {int(sp.port)}" for lb in lb_ips]
            if not eps:
                maps["no-endpoint-services"].append(f"{ip_key} : goto reject-chain")
                for lb_key in lb_keys:
                    maps["no-endpoint-services"].append(f"{lb_key} : goto reject-chain")
                if node_port and node_ip:
                    maps["no-endpoint-nodeports"].append(
                        f"{proto} . {node_port} : goto reject-chain"
                    )
                continue
            # trafficPolicy Local: only this node's endpoints; none here drops the traffic
            # (kube's "no local endpoints"), unlike no endpoints at all, which rejects
            internal = (
                [e for e in eps if e[0] in local] if spec.internalTrafficPolicy == "Local" else eps
            )
            etp_local = spec.externalTrafficPolicy == "Local"
            external = [e for e in eps if e[0] in local] if etp_local else eps
            chains: dict[tuple[str, int], str] = {}
            svc_rules: list[str] = []
            masq_match = f"ip daddr {cluster_ip} {proto} dport {int(sp.port)}"
            if cluster_cidr:
                svc_rules.append(
                    f"{masq_match} ip saddr != {cluster_cidr} jump mark-for-masquerade"
                )
            else:
                svc_rules.append(f"{masq_match} jump mark-for-masquerade")
            for ip, port in dict.fromkeys([*internal, *external]):
                ep_id = f"{port_id}__{ip}/{port}"
                ep_chain = f"endpoint-{_hash(ep_id)}-{ep_id}"
                chains[(ip, port)] = ep_chain
                ep_rules = [f"ip saddr {ip} jump mark-for-masquerade"]
                if affinity:
                    aff_set = f"affinity-{_hash(ep_id)}-{ep_id}"
                    rs.sets[aff_set] = timeout
                    ep_rules.append(f"update @{aff_set} {{ ip saddr }}")
                    if (ip, port) in internal:
                        svc_rules.append(f"ip saddr @{aff_set} goto {ep_chain}")
                ep_rules.append(f"meta l4proto {proto} dnat to {ip}:{port}")
                rs.chains[ep_chain] = tuple(ep_rules)
            if internal:
                svc_chain = f"service-{_hash(port_id)}-{port_id}"
                svc_rules.append(_numgen([chains[e] for e in internal]))
                rs.chains[svc_chain] = tuple(svc_rules)
                maps["service-ips"].append(f"{ip_key} : goto {svc_chain}")
            else:
                maps["no-endpoint-services"].append(f"{ip_key} : drop")
            with_node_port = bool(node_port and node_ip)
            if not (with_node_port or lb_keys):
                continue
            if not external:
                if with_node_port:
                    maps["no-endpoint-nodeports"].append(f"{proto} . {node_port} : drop")
                for lb_key in lb_keys:
                    maps["no-endpoint-services"].append(f"{lb_key} : drop")
                continue
            ext_chain = f"external-{_hash(port_id)}-{port_id}"
            # externalTrafficPolicy Cluster masquerades (the reply must come back here);
            # Local keeps the client's address and uses this node's endpoints only
            ext_rules = [] if etp_local else ["jump mark-for-masquerade"]
            rs.chains[ext_chain] = (*ext_rules, _numgen([chains[e] for e in external]))
            if with_node_port:
                maps["service-nodeports"].append(f"{proto} . {node_port} : goto {ext_chain}")
            for lb_key in lb_keys:
                maps["service-ips"].append(f"{lb_key} : goto {ext_chain}")
    rs.maps = {name: tuple(elements) for name, elements in maps.items()}
    return rs


def _numgen(chains: Sequence[str]) -> str:
    vmap = ", ".join(f"{i} : goto {c}" for i, c in enumerate(chains))
    return f"numgen random mod {len(chains)} vmap {{ {vmap} }}"


def _local_addresses(slices: Slices | None, node_name: str) -> set[str]:
    """Addresses of the endpoints on `node_name` (EndpointSlice endpoints' nodeName)."""
    return {
        e.addresses[0]
        for eps in slices or ()
        for e in eps.endpoints
        if e.addresses and node_name and e.nodeName == node_name
    }


def _q(name: str) -> str:
    """A chain/set name in nft's syntax: nft's identifiers take '/', '.', '-' and '_' unquoted
    (and nft 1.0.6 refuses quoted chain names), so names are written as they are."""
    return name


def _quote_refs(rule: str) -> str:
    """Quote chain and set names after goto/jump/@ in a rule."""
    out: list[str] = []
    words = rule.split(" ")
    for i, w in enumerate(words):
        prev = words[i - 1] if i else ""
        if prev in ("goto", "jump") and w not in ("{", "}"):
            trail = "," if w.endswith(",") else ""
            out.append(_q(w.rstrip(",")) + trail)
        elif w.startswith("@") and not w.startswith("@service-") and not w.startswith("@no-"):
            out.append("@" + _q(w[1:]))
        else:
            out.append(w)
    return " ".join(out)


def _chain_lines(table: str, name: str, rules: Sequence[str]) -> list[str]:
    return [f"add rule ip {table} {_q(name)} {_quote_refs(r)}" for r in rules]


def _elements(table: str, name: str, elements: Sequence[str]) -> list[str]:
    if not elements:
        return []
    body = ", ".join(_quote_refs(e) for e in elements)
    return [f"add element ip {table} {name} {{ {body} }}"]


def render_full(table: str, rs: Ruleset) -> str:
    """A transaction that recreates the table from scratch."""
    lines = [f"add table ip {table}", f"delete table ip {table}", f"add table ip {table}"]
    for name, hook in BASE_CHAINS.items():
        lines.append(f"add chain ip {table} {name} {{ {hook} }}")
    for name in rs.chains:
        if name not in BASE_CHAINS:
            lines.append(f"add chain ip {table} {_q(name)}")
    for name, timeout in rs.sets.items():
        lines.append(
            f"add set ip {table} {_q(name)} {{ type ipv4_addr; flags dynamic,timeout; "
            f"timeout {timeout}s; }}"
        )
    for name, typ in MAP_TYPES.items():
        lines.append(f"add map ip {table} {name} {{ type {typ}; }}")
    for name, rules in rs.chains.items():
        lines += _chain_lines(table, name, rules)
    for name, elements in rs.maps.items():
        lines += _elements(table, name, elements)
    return "\n".join(lines) + "\n"


def render_update(table: str, old: Ruleset, new: Ruleset) -> str:
    """A transaction from `old` (what the kernel has) to `new`: changed chains flushed and
    rewritten, changed maps flushed and refilled, chains and sets gone deleted (after the maps
    and chains that referred to them changed, in the same transaction)."""
    lines: list[str] = []
    # A set whose timeout changed (sessionAffinityConfig) is recreated: the rules naming it
    # are flushed first (a set in use cannot be deleted) and written again below.
    retimed = [n for n, t in new.sets.items() if n in old.sets and old.sets[n] != t]
    touched = {
        chain
        for chain, rules in old.chains.items()
        if any(f"@{n} " in r or r.endswith(f"@{n}") for r in rules for n in retimed)
    }
    for name in touched:
        lines.append(f"flush chain ip {table} {_q(name)}")
    for name, timeout in new.sets.items():
        if old.sets.get(name) != timeout:
            if name in old.sets:
                lines.append(f"delete set ip {table} {_q(name)}")
            lines.append(
                f"add set ip {table} {_q(name)} {{ type ipv4_addr; flags dynamic,timeout; "
                f"timeout {timeout}s; }}"
            )
    for name in new.chains:
        if name not in old.chains:
            lines.append(f"add chain ip {table} {_q(name)}")
    for name, elements in new.maps.items():
        if old.maps.get(name) != elements:
            lines.append(f"flush map ip {table} {name}")
            lines += _elements(table, name, elements)
    for name, rules in new.chains.items():
        if old.chains.get(name) != rules or name in touched:
            if name in old.chains and name not in touched:
                lines.append(f"flush chain ip {table} {_q(name)}")
            lines += _chain_lines(table, name, rules)
    gone = [n for n in old.chains if n not in new.chains]
    for name in gone:
        lines.append(f"flush chain ip {table} {_q(name)}")
    for name in gone:
        lines.append(f"delete chain ip {table} {_q(name)}")
    for name in old.sets:
        if name not in new.sets:
            lines.append(f"delete set ip {table} {_q(name)}")
    return "\n".join(lines) + "\n" if lines else ""


def nft_available() -> str | None:
    """Why the nftables mode cannot run here, or None when it can."""
    import os

    if os.geteuid() != 0:
        return "not root"
    if shutil.which("nft") is None:
        return "no nft binary (Debian's nftables package)"
    return None


async def run_nft(script: str, *args: str) -> tuple[int, str]:
    """`nft -f -` with `script` on stdin: (exit code, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        "nft",
        *args,
        "-f",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(script.encode())
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError, RuntimeError):
        # nft exited before reading its input (its cache setup failed: "Interrupted system
        # call" when another process changes the ruleset meanwhile); its stderr says why.
        # uvloop reports the closed pipe as RuntimeError, asyncio's own loop as BrokenPipe.
        pass
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()
    _, err = await proc.communicate()
    return proc.returncode or 0, err.decode(errors="replace").strip()


class NftablesProxier:
    """Keeps one nftables table equal to `build_ruleset` of the latest Services and slices."""

    mode = "nftables"

    def __init__(
        self,
        metrics: Metrics,
        *,
        table: str = DEFAULT_TABLE,
        cluster_cidr: str = "",
        min_sync_period: float = 1.0,
        node_name: str = "",
    ) -> None:
        if cluster_cidr:
            ipaddress.IPv4Network(cluster_cidr)  # a bad flag fails at start, not at sync
        self.metrics = metrics
        self.table = table
        self.cluster_cidr = cluster_cidr
        self.node_name = node_name
        self.min_sync_period = min_sync_period
        self.applied: Ruleset | None = None
        # partial syncs the kernel refused, each followed by a full rewrite
        self.full_rewrites = 0
        self._last_sync = 0.0

    async def sync(
        self,
        services: Iterable[service_pb2.Service],
        endpoints: Mapping[str, Slices],
        node_ip: str,
    ) -> None:
        wait = self._last_sync + self.min_sync_period - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)  # changes meanwhile are read below: one transaction
        self._last_sync = time.monotonic()
        new = build_ruleset(services, endpoints, node_ip, self.cluster_cidr, self.node_name)
        if self.applied is None:
            script = render_full(self.table, new)
        else:
            script = render_update(self.table, self.applied, new)
        if not script:
            return
        started = time.monotonic()
        rc, err = await run_nft(script)
        for attempt in range(1, NFT_RETRIES + 1):
            if rc == 0:
                break
            # a refused transaction changed nothing: the same one again, after a moment (nft
            # fails at times while other processes change the ruleset)
            log.info("nft -f failed for table %s (%s); attempt %d", self.table, err, attempt + 1)
            await asyncio.sleep(0.1 * attempt)
            rc, err = await run_nft(script)
        if rc != 0 and self.applied is not None:
            log.warning("partial nftables sync failed (%s); rewriting table %s", err, self.table)
            self.full_rewrites += 1
            rc, err = await run_nft(render_full(self.table, new))
        if rc != 0:
            self.applied = None
            self.metrics.errors.labels("", "nft").inc()
            log.error("nft -f failed for table %s: %s", self.table, err)
            return
        self.metrics.sync_seconds.observe(time.monotonic() - started)
        self.metrics.listeners.set(len(new.maps.get("service-ips", ())))
        if self.applied is None:
            log.info("nftables table ip %s written (%d chains)", self.table, len(new.chains))
        self.applied = new

    async def close(self) -> None:
        rc, err = await run_nft(f"add table ip {self.table}\ndelete table ip {self.table}\n")
        if rc != 0:
            log.error("deleting nftables table %s: %s", self.table, err)
        else:
            log.info("nftables table ip %s deleted", self.table)
        self.applied = None
