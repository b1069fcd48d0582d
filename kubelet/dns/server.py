"""DNS over UDP and TCP (asyncio) answering from a `ClusterRecords` and forwarding other names
to upstream servers (the host's resolv.conf, as CoreDNS's `forward . /etc/resolv.conf`).

UDP replies longer than the client's limit (512 bytes, or its EDNS payload size) are truncated
with TC set, so the client retries over TCP. A forwarded query goes to each upstream in turn over
UDP (TCP when the client asked over TCP) until one answers within `timeout`; when none does the
client gets SERVFAIL. Concurrency: one asyncio event loop; `records` is replaced wholesale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Sequence

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.rcode

from kubelet.dns.records import ClusterRecords

log = logging.getLogger(__name__)


def upstreams_from_resolv_conf(path: str = "/etc/resolv.conf") -> list[str]:
    servers: list[str] = []
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                servers.append(parts[1])
    return servers


class DnsServer:
    def __init__(
        self,
        records: Callable[[], ClusterRecords],
        upstreams: Sequence[str],
        *,
        timeout: float = 2.0,
    ) -> None:
        self.records = records
        self.upstreams = [_split(u) for u in upstreams]
        self.timeout = timeout
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self.queries = 0

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._tcp = await asyncio.start_server(self._tcp_client, host, port, reuse_address=True)
        port = int(self._tcp.sockets[0].getsockname()[1])
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self), local_addr=(host, port)
        )
        self._udp = transport
        return port

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()

    async def resolve(self, wire: bytes, *, tcp: bool) -> bytes | None:
        try:
            query = dns.message.from_wire(wire)
        except dns.exception.DNSException as exc:
            log.debug("malformed query: %s", exc)
            return _formerr(wire)
        self.queries += 1
        try:
            reply = self.records().answer(query)
            if reply is None:
                reply = await self.forward(query, tcp=tcp)
        except Exception:  # a bug answers SERVFAIL, never silence
            log.exception("answering %s", query.question)
            reply = dns.message.make_response(query)
            reply.set_rcode(dns.rcode.SERVFAIL)
        limit = 65535 if tcp else max(512, query.payload if query.edns >= 0 else 512)
        try:
            return reply.to_wire(max_size=limit)
        except dns.exception.TooBig:
            reply.answer.clear()
            reply.additional.clear()
            reply.flags |= dns.flags.TC
            return reply.to_wire()

    async def forward(self, query: dns.message.Message, *, tcp: bool) -> dns.message.Message:
        for host, port in self.upstreams:
            try:
                if tcp:
                    return await dns.asyncquery.tcp(query, host, port=port, timeout=self.timeout)
                return await dns.asyncquery.udp(query, host, port=port, timeout=self.timeout)
            except (dns.exception.DNSException, OSError) as exc:
                log.info("upstream %s:%d: %s", host, port, exc)
        reply = dns.message.make_response(query)
        reply.set_rcode(dns.rcode.SERVFAIL)
        return reply

    async def _tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readexactly(2)
                wire = await reader.readexactly(struct.unpack("!H", head)[0])
                out = await self.resolve(wire, tcp=True)
                if out is not None:
                    writer.write(struct.pack("!H", len(out)) + out)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        task = asyncio.get_running_loop().create_task(self._answer(data, addr))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, data: bytes, addr: tuple[str, int]) -> None:
        out = await self.server.resolve(data, tcp=False)
        if out is not None and self.transport is not None:
            self.transport.sendto(out, addr)


def _split(address: str) -> tuple[str, int]:
    if address.count(":") == 1:
        host, port = address.split(":")
        return host, int(port)
    return address, 53


def _formerr(wire: bytes) -> bytes | None:
    """FORMERR echoing the query's ID, when there are at least the 12 header bytes."""
    if len(wire) < 12:
        return None
    qid = struct.unpack("!H", wire[:2])[0]
    return struct.pack("!HHHHHH", qid, 0x8000 | dns.rcode.FORMERR, 0, 0, 0, 0)
