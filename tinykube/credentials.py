"""What a client presents to a tinykube server, and the file reading both sides of TLS share.

`Credentials` holds the CA a client trusts, an optional client certificate and key, an optional
bearer token, or is `PLAINTEXT` (the development mode behind `--insecure`); `channel()` makes a
grpc.aio channel with them. tinykube.kubeconfig builds them from a kubeconfig file and
tinykube.tls (serving credentials and the shared flags) reads kubeconfigs, so this module sits
below both and imports neither.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc


class TLSConfigError(ValueError):
    """A flag or kubeconfig names TLS material that cannot be used (missing, unreadable)."""


def read_file(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TLSConfigError(f"{what} {os.fspath(path)!r}: {exc.strerror or exc}") from exc


# ---- clients ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """How a client reaches a server: the CA it trusts and what it presents.

    `insecure=True` is plaintext (no TLS at all). `server_name` overrides the name the server's
    certificate is checked against (kubeconfig's tls-server-name), e.g. when dialling an IP.
    """

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    token: str | None = None
    server_name: str | None = None
    insecure: bool = False

    @classmethod
    def from_files(
        cls,
        *,
        ca_file: str,
        cert_file: str = "",
        key_file: str = "",
        token: str | None = None,
        server_name: str | None = None,
    ) -> Credentials:
        if bool(cert_file) != bool(key_file):
            raise TLSConfigError("a client certificate needs its key, and a key its certificate")
        return cls(
            ca=read_file(ca_file, "certificate authority"),
            cert=read_file(cert_file, "client certificate") if cert_file else None,
            key=read_file(key_file, "client key") if key_file else None,
            token=token,
            server_name=server_name,
        )

    @property
    def has_client_cert(self) -> bool:
        return self.cert is not None and self.key is not None

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )
        if self.token:
            creds = grpc.composite_channel_credentials(
                creds, grpc.access_token_call_credentials(self.token)
            )
        return creds

    def _options(self, options: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
        opts = list(options)
        if self.server_name and not self.insecure:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        return opts

    def channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        """A grpc.aio channel to `target` ("host:port") with these credentials."""
        if self.insecure:
            return grpc.aio.insecure_channel(target, options=list(options))
        return grpc.aio.secure_channel(target, self.grpc_credentials(), self._options(options))

    def sync_channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        if self.insecure:
            return grpc.insecure_channel(target, options=list(options))
        return grpc.secure_channel(target, self.grpc_credentials(), self._options(options))

    def ssl_context(self) -> ssl.SSLContext | None:
        """For an HTTPS client (aiohttp, urllib); None when plaintext."""
        if self.insecure:
            return None
        ctx = ssl.create_default_context(cadata=self.ca.decode() if self.ca is not None else None)
        if self.has_client_cert:
            assert self.cert is not None and self.key is not None
            # ssl loads a certificate chain from files only: hand it private temporary ones
            with tempfile.TemporaryDirectory(prefix="tinykube-tls-") as tmp:
                cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
                cert.write_bytes(self.cert)
                fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(self.key)
                ctx.load_cert_chain(cert, key)
        return ctx

    def headers(self) -> dict[str, str]:
        """HTTP headers carrying the bearer token (none without one)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


PLAINTEXT = Credentials(insecure=True)
