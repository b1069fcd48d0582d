"""TLS on every tinykube link: serving credentials, client credentials, and the shared flags.

`ServingTLS` is what a server presents (`--tls-cert-file`, `--tls-private-key-file`) and whom
it trusts for client certificates (`--client-ca-file`), as gRPC server credentials or as an
`ssl.SSLContext` for aiohttp. grpc Python can either require and verify a client certificate or
not ask for one (`ssl_server_credentials` has no "request but do not require" mode), so a gRPC
port with a client CA requires a certificate signed by it; the REST port asks for one but lets a
request without one through (CERT_OPTIONAL, as kube-apiserver), so bearer tokens work there.

`Credentials` (tinykube.credentials, below this module and tinykube.kubeconfig) is what a
client presents: the CA it trusts, an optional client certificate and key, an optional bearer
token, or `PLAINTEXT` (the development mode behind `--insecure`). `channel()` makes a grpc.aio
channel with them; the handshake happens once per connection and
channels are long-lived, so the per-call cost is nil. `explain()` turns the transport errors a
mismatch produces (plaintext against TLS, TLS against plaintext, an unknown CA, a refused
client certificate) into one sentence a person can act on.

`Security` holds the flags every component shares (`--kubeconfig`, `--insecure` and the serving
flags) and `add_flags` registers them. Synchronous, file-based set-up at process start; nothing
here runs on a request path.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import ssl
from dataclasses import dataclass

import grpc

from tinykube.credentials import PLAINTEXT as PLAINTEXT
from tinykube.credentials import Credentials as Credentials
from tinykube.credentials import TLSConfigError as TLSConfigError
from tinykube.credentials import read_file as read_file
from tinykube.errors import TinykubeError
from tinykube.kubeconfig import load, paths_from_env

log = logging.getLogger(__name__)

INSECURE_WARNING = (
    "running with --insecure: plaintext, unauthenticated connections; anyone who can reach "
    "this process's ports can read and change the cluster. For development only."
)


class TransportSecurityError(TinykubeError):
    """Client and server disagree about TLS (plaintext against TLS, an unknown CA, a refused
    client certificate). Never retried: sending again cannot fix it."""

    code = grpc.StatusCode.UNAUTHENTICATED


# ---- servers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingTLS:
    """A server's certificate and key, and the CA its clients' certificates must chain to."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""  # "": no client certificates are asked for

    def grpc_credentials(self) -> grpc.ServerCredentials:
        cert = read_file(self.cert_file, "--tls-cert-file")
        key = read_file(self.key_file, "--tls-private-key-file")
        ca = read_file(self.client_ca_file, "--client-ca-file") if self.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
        )

    def ssl_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        """For an HTTPS server: asks for a client certificate (when a client CA is set) and
        verifies the one it gets; without one the request goes on unauthenticated by x509."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(
                f"--tls-cert-file {self.cert_file!r} / --tls-private-key-file "
                f"{self.key_file!r}: {exc}"
            ) from exc
        if self.client_ca_file:
            ctx.load_verify_locations(
                cadata=read_file(self.client_ca_file, "--client-ca-file").decode()
            )
            ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        return ctx


# ---- clients ---------------------------------------------------------------------------------


def ambient_credentials() -> Credentials:
    """What kubectl would use without flags: `$KUBECONFIG`'s credentials, else plaintext."""
    if not paths_from_env():
        return PLAINTEXT
    return load().credentials


def speaks_tls(target: str, timeout: float = 1.0) -> bool | None:
    """Whether the server at `target` ("host:port") answers a TLS ClientHello as TLS: True, False
    (it spoke something else, e.g. plaintext HTTP/2), None (unreachable)."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    if target.startswith(("unix:", "dns:", "ipv4:", "ipv6:")) or not port.isdigit():
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError:
        return None
    with sock, contextlib.suppress(OSError):
        try:
            with ctx.wrap_socket(sock, server_hostname=host or None):
                return True
        except ssl.SSLError as exc:
            # a TLS server that refuses us still answered in TLS (an alert); a plaintext one
            # answers bytes that are no TLS record at all; a connection closed before any
            # answer (EOF) says nothing either way
            reason = (exc.reason or "").upper()
            if isinstance(exc, ssl.SSLEOFError) or "EOF" in reason:
                return None
            return not ("WRONG_VERSION" in reason or "RECORD_LAYER" in reason or "PACKET" in reason)
    return None


def refused_certificate(target: str, credentials: Credentials, timeout: float = 1.0) -> str:
    """Why a TLS server closes the connection on this client right after the handshake: a TLS 1.3
    server refuses a client certificate (or its absence) after the client's side of the
    handshake is done, with an alert (its reason is returned) or, as gRPC's servers do, by
    closing the connection ("CLOSED"). "" when the server keeps the connection."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit():
        return ""
    try:
        ctx = credentials.ssl_context()
    except (OSError, ssl.SSLError):
        return ""
    if ctx is None:
        return ""
    ctx.check_hostname = False  # only the server's verdict on us matters here
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError:
        return ""
    with sock, contextlib.suppress(OSError), ctx.wrap_socket(sock, server_hostname=host) as tls:
        try:
            return "" if tls.recv(1) else "CLOSED"
        except ssl.SSLError as exc:
            return (exc.reason or "").upper()
        except OSError:
            return ""  # a timeout: the server waits for the request, it took us
    return ""


def explain(target: str, credentials: Credentials, details: str) -> str | None:
    """One sentence for a connection failure caused by TLS configuration, or None when the
    failure is something else (a refused connection, a server that is down)."""
    text = details.upper()
    if credentials.insecure:
        if speaks_tls(target):
            return (
                f"the server at {target} requires TLS, and this client connects in plaintext "
                "(--insecure): use the cluster's kubeconfig (--kubeconfig or $KUBECONFIG)"
            )
        return None
    if "WRONG_VERSION_NUMBER" in text or "RECORD_LAYER_FAILURE" in text:
        return (
            f"the server at {target} does not speak TLS (was it started with --insecure?); "
            "connect with --insecure, or start it with its certificates"
        )
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            f"x509: certificate signed by unknown authority: the server at {target} presents a "
            "certificate the kubeconfig's certificate-authority did not sign"
        )
    if "SOCKET CLOSED" in text or "CONNECTION RESET" in text or "HANDSHAKE" in text:
        reason = refused_certificate(target, credentials)
        if reason == "CLOSED":
            reason = "BAD_CERTIFICATE" if credentials.has_client_cert else "CERTIFICATE_REQUIRED"
        if "CERTIFICATE_REQUIRED" in reason:
            return (
                f"the server at {target} requires a client certificate signed by the cluster "
                "CA, and this client presents none"
            )
        if "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason or "DECRYPT" in reason:
            return (
                f"the server at {target} refused this client's certificate: it requires one "
                "signed by the cluster CA and still valid"
            )
        if "HANDSHAKE" in text:
            return f"TLS handshake with {target} failed: {details}"
    return None


# ---- the flags every component shares --------------------------------------------------------


@dataclass(frozen=True)
class Security:
    """A component's TLS and credential flags, resolved into what it serves and dials with."""

    insecure: bool = False
    kubeconfig: str = ""
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    client_ca_file: str = ""

    def check(self, *, serves: bool = True, dials: bool = True) -> None:
        """Refuse a component that would run in plaintext without --insecure."""
        if self.insecure:
            return
        missing = []
        if dials and not self.kubeconfig:
            missing.append("--kubeconfig")
        if serves and not (self.tls_cert_file and self.tls_private_key_file):
            missing.append("--tls-cert-file and --tls-private-key-file")
        if missing:
            raise TLSConfigError(
                f"{' and '.join(missing)} required (`tinykube up` writes them); pass --insecure "
                "for plaintext development mode"
            )

    def serving(self) -> ServingTLS | None:
        """What the component's own server presents (None: plaintext). Without certificate
        flags that is plaintext here; `check` (at a process's start) refuses it unless
        --insecure, so only in-process users (tests) get it silently."""
        if not self.tls_cert_file:
            return None
        return ServingTLS(self.tls_cert_file, self.tls_private_key_file, self.client_ca_file)

    def credentials(self) -> Credentials:
        """How the component dials the apiserver (plaintext without a kubeconfig; `check`
        refuses that at a process's start unless --insecure)."""
        if not self.kubeconfig:
            return PLAINTEXT
        return load(self.kubeconfig).credentials

    def apiserver(self, flag: str, default: str) -> str:
        """The apiserver's gRPC address: `flag` (--apiserver, as kube's --master overrides
        the kubeconfig's server) when given, else the kubeconfig's, else `default`."""
        if flag:
            return flag
        if self.kubeconfig:
            return load(self.kubeconfig).grpc_server or default
        return default

    def warn_if_insecure(self, component: str) -> None:
        if self.insecure:
            logging.getLogger(component).warning("%s", INSECURE_WARNING)


def start_checks(security: Security, component: str, *, serves: bool = True) -> None:
    """At a component's start: exit 2 naming the missing TLS flags, or warn about --insecure."""
    try:
        security.check(serves=serves)
    except TLSConfigError as exc:
        raise SystemExit(f"{component}: error: {exc}") from exc
    security.warn_if_insecure(component)


def add_flags(parser: argparse.ArgumentParser, *, serves: bool = True, dials: bool = True) -> None:
    env = os.environ.get
    if dials:
        parser.add_argument(
            "--kubeconfig",
            default=env("TINYKUBE_KUBECONFIG", ""),
            help="kubeconfig with the apiserver's address, the cluster CA and this component's "
            "credentials (env TINYKUBE_KUBECONFIG)",
        )
    if serves:
        parser.add_argument(
            "--tls-cert-file",
            default=env("TINYKUBE_TLS_CERT_FILE", ""),
            help="serving certificate (PEM)",
        )
        parser.add_argument(
            "--tls-private-key-file",
            default=env("TINYKUBE_TLS_PRIVATE_KEY_FILE", ""),
            help="serving certificate's private key (PEM)",
        )
        parser.add_argument(
            "--client-ca-file",
            default=env("TINYKUBE_CLIENT_CA_FILE", ""),
            help="CA that clients' certificates must be signed by (gRPC requires one)",
        )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=env("TINYKUBE_INSECURE", "").lower() in ("1", "true", "yes"),
        help="development only: plaintext, unauthenticated links (logs a warning at start)",
    )


def security_from_args(args: argparse.Namespace) -> Security:
    return Security(
        insecure=bool(args.insecure),
        kubeconfig=getattr(args, "kubeconfig", "") or "",
        tls_cert_file=getattr(args, "tls_cert_file", "") or "",
        tls_private_key_file=getattr(args, "tls_private_key_file", "") or "",
        client_ca_file=getattr(args, "client_ca_file", "") or "",
    )
