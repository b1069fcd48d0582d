"""The PKI's certificates work for mutual TLS as the components will use them: a client holding
a kubelet certificate reaches a server holding the apiserver's, both verified against the
cluster CA, and the server reads the client's identity from the verified certificate."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from cryptography import x509

from tinykube.pki import PKI, cluster_specs, identity


def _server_context(pki: PKI) -> ssl.SSLContext:
    paths = pki.paths("apiserver")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert_path))
    ctx.load_cert_chain(paths.cert, paths.key)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _client_context(pki: PKI, name: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert_path))
    if name is not None:
        paths = pki.paths(name)
        ctx.load_cert_chain(paths.cert, paths.key)
    return ctx


async def _serve(pki: PKI) -> tuple[asyncio.Server, int, list[tuple[str, tuple[str, ...]]]]:
    seen: list[tuple[str, tuple[str, ...]]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        seen.append(identity(x509.load_der_x509_certificate(der)))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=_server_context(pki))
    return server, server.sockets[0].getsockname()[1], seen


async def test_mutual_tls_with_the_cluster_certificates(tmp_path: Path) -> None:
    pki = PKI(tmp_path)
    pki.ensure_all(cluster_specs(["n1"]))
    server, port, seen = await _serve(pki)
    async with server:
        for host in ("localhost", "127.0.0.1"):  # both names are in the serving certificate
            reader, writer = await asyncio.open_connection(
                host, port, ssl=_client_context(pki, "kubelet-n1")
            )
            assert await reader.read() == b"ok"
            writer.close()
    assert seen == [("system:node:n1", ("system:nodes",))] * 2


async def test_a_client_without_a_certificate_or_from_another_ca_is_refused(
    tmp_path: Path,
) -> None:
    pki = PKI(tmp_path / "cluster")
    pki.ensure_all(cluster_specs(["n1"]))
    other = PKI(tmp_path / "other")
    other.ensure_all(cluster_specs(["n1"]))
    server, port, seen = await _serve(pki)
    foreign = _client_context(pki, None)  # trusts our server, presents the other CA's cert
    foreign.load_cert_chain(other.paths("admin").cert, other.paths("admin").key)
    async with server:
        for ctx in (_client_context(pki, None), foreign):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
                # TLS 1.3 reports the server's refusal of the client's certificate after the
                # handshake: an alert or end of stream on the first read
                answer = await reader.read()
                writer.close()
            except (ssl.SSLError, ConnectionError):
                answer = b""
            assert answer == b""
    assert seen == []
