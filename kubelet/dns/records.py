"""Cluster DNS answers (pure), as CoreDNS's `kubernetes` plugin gives them for the zone
`cluster.local` (and the reverse zone of Services' and pods' addresses):

- `<svc>.<ns>.svc.cluster.local` A (AAAA for IPv6): the cluster IPs; for a headless Service
  (`clusterIP: None`) the ready endpoints' IPs, A from IPv4 EndpointSlices and AAAA from IPv6
  ones (all of them with `publishNotReadyAddresses`); an ExternalName Service answers a CNAME
  to its `externalName`;
- `_<port>._<proto>.<svc>.<ns>.svc.cluster.local` SRV for named ports: priority 0, weight
  100 / number of records, the port, and the Service's name (headless: each endpoint's
  `<hostname or ip-with-dashes>.<svc>.<ns>.svc.cluster.local`, whose A record is its IP);
- `<a-b-c-d>.<ns>.pod.cluster.local` A: a-b-c-d as an address, and `<2001-db8--5>` AAAA
  (CoreDNS's `pods insecure`);
- `in-addr.arpa` and `ip6.arpa` PTR for cluster IPs and headless endpoints (other reverse
  names are forwarded);
- a name in the zone that matches nothing is NXDOMAIN with the zone's SOA in the authority
  section; a name that exists without records of the asked type is NOERROR with no answer
  (NODATA); TTL 5 s (CoreDNS's default) and the SOA's minimum 5.

`ClusterRecords.build(services, slices)` indexes what the informers hold; `answer(query)` builds
the reply, or returns None for a name outside the cluster's zones (the server forwards it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.reversename
import dns.rrset

TTL = 5
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass
class ClusterRecords:
    domain: str = "cluster.local"
    # name (absolute, lower case, no trailing dot) -> record type -> rdata texts
    records: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)

    def add(self, name: str, rtype: str, text: str) -> None:
        values = self.records.setdefault(name.lower(), {}).setdefault(rtype, [])
        if text not in values:
            values.append(text)

    @classmethod
    def build(
        cls,
        services: Iterable[Any],
        slices: Mapping[str, Sequence[Any]],
        domain: str = "cluster.local",
    ) -> ClusterRecords:
        """`slices`: EndpointSlices by the `namespace/name` of their Service."""
        rec = cls(domain=domain)
        for svc in services:
            ns, name, spec = svc.metadata.namespace, svc.metadata.name, svc.spec
            rec.namespaces.add(ns)
            fqdn = f"{name}.{ns}.svc.{domain}"
            if spec.type == "ExternalName":
                target = spec.externalName
                if target:
                    rec.add(fqdn, "CNAME", target.rstrip(".") + ".")
                continue
            headless = spec.clusterIP in ("None", "")
            if not headless:
                for cip in dict.fromkeys([spec.clusterIP, *spec.clusterIPs]):
                    if cip and cip != "None":
                        rec.add(fqdn, _address_type(cip), cip)
                        rec.add(_reverse(cip), "PTR", fqdn + ".")
            publish = spec.publishNotReadyAddresses
            targets: list[tuple[str, str]] = []  # (endpoint fqdn, ip) of a headless Service
            eps_by_port: dict[str, list[tuple[str, int]]] = {}
            for eps in slices.get(f"{ns}/{name}", ()):
                if eps.addressType not in ("IPv4", "IPv6"):
                    continue  # FQDN slices name no address
                rtype = "A" if eps.addressType == "IPv4" else "AAAA"
                for e in eps.endpoints:
                    c = e.conditions
                    ready = not c.HasField("ready") or c.ready
                    if not (ready or publish) or not e.addresses:
                        continue
                    ip = e.addresses[0]
                    host = e.hostname or _dashed(ip)
                    target = f"{host}.{fqdn}"
                    if headless:
                        rec.add(fqdn, rtype, ip)
                        rec.add(target, rtype, ip)
                        rec.add(_reverse(ip), "PTR", target + ".")
                        targets.append((target, ip))
                    for p in eps.ports:
                        if p.name and p.HasField("port"):
                            key = f"{p.name}/{(p.protocol or 'TCP').lower()}"
                            eps_by_port.setdefault(key, []).append((target, int(p.port)))
            for sp in spec.ports:
                if not sp.name:
                    continue
                proto = (sp.protocol or "TCP").lower()
                srv_name = f"_{sp.name}._{proto}.{fqdn}"
                if headless:
                    found = eps_by_port.get(f"{sp.name}/{proto}", [])
                    weight = 100 // max(len(found), 1)
                    for target, port in found:
                        rec.add(srv_name, "SRV", f"0 {weight} {port} {target}.")
                else:
                    rec.add(srv_name, "SRV", f"0 100 {int(sp.port)} {fqdn}.")
        return rec

    # ---- answers ---------------------------------------------------------------------------

    def soa(self) -> dns.rrset.RRset:
        return dns.rrset.from_text(
            f"{self.domain}.",
            TTL,
            "IN",
            "SOA",
            f"ns.dns.{self.domain}. hostmaster.{self.domain}. 1 7200 1800 86400 {TTL}",
        )

    def in_zone(self, qname: str) -> bool:
        """Names of the cluster domain, and the PTR names of known addresses (other reverse
        names go upstream, as CoreDNS's `fallthrough in-addr.arpa`)."""
        if qname.endswith((".in-addr.arpa", ".ip6.arpa")):
            return qname in self.records
        return qname == self.domain or qname.endswith("." + self.domain)

    def answer(self, query: dns.message.Message) -> dns.message.Message | None:
        """The reply to `query`, or None when its name is outside the cluster's zones."""
        if not query.question:
            reply = dns.message.make_response(query)
            reply.set_rcode(dns.rcode.FORMERR)
            return reply
        q = query.question[0]
        qname = q.name.to_text(omit_final_dot=True).lower()
        if not self.in_zone(qname):
            return None
        reply = dns.message.make_response(query)
        reply.flags |= dns.flags.AA
        qtype = dns.rdatatype.to_text(q.rdtype)
        found = self._lookup(qname)
        if found is None:
            reply.set_rcode(dns.rcode.NXDOMAIN)
            reply.authority.append(self.soa())
            return reply
        cname = found.get("CNAME")
        if cname and qtype != "CNAME":
            reply.answer.append(dns.rrset.from_text(q.name, TTL, "IN", "CNAME", *cname))
            return reply
        values = found.get(qtype, [])
        if not values:
            reply.authority.append(self.soa())  # NODATA
            return reply
        reply.answer.append(dns.rrset.from_text(q.name, TTL, "IN", qtype, *values))
        if qtype == "SRV":  # the targets' addresses, as CoreDNS adds them
            for text in values:
                target = text.split()[-1].rstrip(".")
                for rtype in ("A", "AAAA"):
                    addresses = self.records.get(target, {}).get(rtype, [])
                    if addresses:
                        reply.additional.append(
                            dns.rrset.from_text(target + ".", TTL, "IN", rtype, *addresses)
                        )
        return reply

    def _lookup(self, qname: str) -> dict[str, list[str]] | None:
        """The records at qname; {} for a name that exists without records (NODATA)."""
        if qname in self.records:
            return self.records[qname]
        pod = self._pod(qname)
        if pod is not None:
            return pod
        # empty non-terminals: the zone, svc/pod, a namespace, a Service's SRV parents
        if any(name.endswith("." + qname) for name in self.records):
            return {}
        if qname in (self.domain, f"svc.{self.domain}", f"pod.{self.domain}"):
            return {}
        parts = qname.split(".")
        if len(parts) >= 2 and ".".join(parts[1:]) in (f"svc.{self.domain}", f"pod.{self.domain}"):
            return {} if parts[0] in self.namespaces else None
        return None

    def _pod(self, qname: str) -> dict[str, list[str]] | None:
        suffix = f".pod.{self.domain}"
        if not qname.endswith(suffix):
            return None
        labels = qname[: -len(suffix)].split(".")
        if len(labels) != 2:
            return None
        # a-b-c-d (IPv4) or 2001-db8--1 (IPv6, a dash for each colon), as CoreDNS reads them
        text = labels[0]
        try:
            return {"A": [str(ipaddress.IPv4Address(text.replace("-", ".")))]}
        except ValueError:
            pass
        try:
            return {"AAAA": [str(ipaddress.IPv6Address(text.replace("-", ":")))]}
        except ValueError:
            return None


def _reverse(ip: str) -> str:
    return dns.reversename.from_address(ip).to_text(omit_final_dot=True)


def _address_type(ip: str) -> str:
    return "AAAA" if ":" in ip else "A"


def _dashed(ip: str) -> str:
    """An address as one DNS label: dots (IPv4) or colons (IPv6) as dashes, as CoreDNS."""
    return ip.replace(".", "-").replace(":", "-")
