"""tinykube.tls.speaks_tls tells a TLS server from a plaintext one, and says nothing for a server
that closes the connection before answering (test_client_retries' proxy cutting a stream was
taken for a TLS server, and a plaintext client got 'requires TLS' instead of UNAVAILABLE)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tinykube.pki import PKI, CertSpec
from tinykube.tls import speaks_tls


@contextmanager
def serving(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def loop() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                handle(conn)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop.set()
        t.join(2)
        listener.close()


def _close_at_once(conn: socket.socket) -> None:
    conn.close()


def _plaintext(conn: socket.socket) -> None:
    conn.recv(1024)
    conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00HTTP/2 plaintext settings frame....")


def test_closed_before_answering_is_unknown() -> None:
    with serving(_close_at_once) as target:
        assert speaks_tls(target) is None


def test_plaintext_is_not_tls() -> None:
    with serving(_plaintext) as target:
        assert speaks_tls(target) is False


def test_tls_is_tls(tmp_path: Path) -> None:
    paths = PKI(tmp_path).ensure(
        CertSpec("s", "s", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True)
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths.cert, paths.key)

    def handshake(conn: socket.socket) -> None:
        # the probe hangs up after the handshake
        with contextlib.suppress(ssl.SSLError, OSError):
            ctx.wrap_socket(conn, server_side=True).close()

    with serving(handshake) as target:
        assert speaks_tls(target) is True
