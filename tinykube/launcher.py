"""Run a whole tinykube cluster on this machine: etcd plus every component as its own OS process.

`LocalCluster` is what `tinykube up` and the e2e tests use. It starts a real etcd
(`tinykube.localetcd.EtcdServer`), then `python -m apiserver`, `python -m scheduler`,
`python -m controller` and one `python -m kubelet --node-name X` per node, each in its own
process group with stdout and stderr in `work_dir/logs/<name>.log`, and waits on each one's
`grpc.health.v1` RPC. A component whose package has no `__main__.py` yet is skipped with a note.

Component names: "etcd", "apiserver", "scheduler", "controller", and "kubelet-<node>" per kubelet
(the bare node name is accepted as an alias), and with `proxies=True` "proxy-<node>" beside each
kubelet (`python -m kubelet.proxy --node-name <node>`; its nodePorts listen on the Node's
InternalIP, its cluster IPs are shared by every proxy through SO_REUSEPORT). With
`node_ips=True` the i-th kubelet gets its own loopback address 127.0.1.i (`--node-ip`, and it
listens there): pods share their node's network in the process runtime, so two nodes' pods can
then both bind port 8080 (on $POD_IP), and each node's nodePorts are its own.
`start_component("scheduler-2")` starts one more instance of a known component on a free port
(e.g. a second, leader-elected scheduler).

High availability (`ha=True`, `tinykube up --ha`): etcd is a cluster of `etcd_members` (3)
members, "etcd-0".."etcd-2" (`tinykube.localetcd.EtcdCluster`: static bootstrap, TLS client
and peer links, each member its own certificate, data dir, ports and log), and `apiservers`
(2) apiservers, "apiserver" and "apiserver-2", each with its own gRPC and REST port and
every etcd member in its --etcd-servers. `api_addresses` / `rest_urls` list them all;
`api_address` / `rest_url` stay the first one's. `kill("etcd-1")` and `start_component("etcd-1")`
crash and restart one member from its data dir; `etcd_leader()` names the member leading now.

Standbys (`schedulers=2`, `controllers=2`, the default with `ha=True`): "scheduler-2" and
"controller-2" beside "scheduler" and "controller", one leading through its Lease. Every
component that dials the apiserver gets every apiserver of the cluster (each component whose
module is apiserver: "apiserver", "apiserver-2", ...) in `--apiserver a,b` and in its
kubeconfig, and fails over between them (tinykube/client.py).

Flags (DESIGN.md, "ports"): the apiserver gets `--etcd-servers` and `--bind-address
127.0.0.1:PORT`; every other component `--apiserver 127.0.0.1:APIPORT --bind-address 127.0.0.1
--port PORT`, kubelets also `--node-name` and `--runtime`. Components run with `work_dir` as
their working directory. `extra_args[module or name]` is appended to a component's command.

TLS (tinykube/tls.py, tinykube/pki.py): `start` first makes (or reuses) the cluster CA and every
certificate in `pki_dir` (default `work_dir/pki`; `$TINYKUBE_PKI_DIR` shares one CA between
clusters), and writes kubeconfig files with embedded credentials as kubeadm does:
`work_dir/kubeconfig` (the admin, `system:masters`), `scheduler.conf`,
`controller-manager.conf`, `kubelet-<node>.conf`, `proxy.conf`. etcd serves https and answers
only client certificates (the apiserver's); the apiserver serves both front ends with its
certificate and trusts the cluster CA for client certificates; every other component gets its
kubeconfig and its serving certificate. Health probes present the admin certificate.
`insecure=True` is the plaintext development mode: `--insecure` everywhere, no PKI.

The etcd link is TCP. With `etcd_socket=True` (`tinykube up --etcd-socket`) the single etcd
this cluster starts also serves a unix domain socket in its data directory, and the apiserver's
`--etcd-servers` is that socket (`unixs:///.../localhost:PORT`: TLS and etcd's
client-certificate check as on TCP; `unix://` with `insecure`). Not the default: measured
(bench/etcdlink.py, bench/RESULTS.md session 14) it cut etcd's kernel time per request by about
a tenth but the two processes' CPU per request by no more than the noise. An etcd cluster
(`ha`) and an external etcd (`etcd_endpoint`) are always dialled over TCP; etcd's TCP client
port stays open either way (health probes, /metrics, etcdctl).

Concurrency model: plain blocking code (subprocess + a synchronous gRPC health probe), so it can
be driven from a CLI, from a synchronous test, or from inside a running event loop. One owner
drives a cluster (its methods are not meant to be called from several threads at once); the
supervisor thread shares its state under one lock, held only for bookkeeping and spawns, never
across a health wait or a stop's grace period. Processes the supervisor restarts are forked by
its thread, which lives until `stop`, so `die_with_parent`'s signal still comes when `stop` or
the owner's death ends them.

Supervision (`supervise=True`, the default), as the kubelet supervises static pods (restartPolicy
Always, its crash-loop back-off): a thread started by `start` polls every process the cluster
runs, etcd members included, and starts one that exited on its own again after a back-off of
10 s, doubling to 300 s, back to 10 s once it ran 10 minutes (`RestartBackoff`). Each exit is
logged (a warning naming the exit code and the log file, and a line in that log) and recorded in
`events` (`Exited`, then `Restarted`), which `tinykube up` reports. What the owner does on
purpose is not undone: `kill` with a signal that ends a process (`HOLDING_SIGNALS`) holds the
component down until `start_component` or `restart`, a `start_component` that fails leaves it
down, and `stop` stops supervising first. A restart is a spawn, not a wait: the component
becomes healthy on its own, or exits again and backs off further. `supervise=False` only records
exits (restart_in None): for a test that must see a component stay down.

Orphans: `stop` sends SIGTERM to each process group, then SIGKILL after a grace period. Before
signalling, it records every descendant of each component (kubelet containers may live in their
own sessions) and kills the survivors afterwards, also for components earlier killed with
`kill(name, SIGKILL)` whose children were re-parented. A failed `start` stops what it started,
and an `atexit` hook stops a cluster its owner forgot.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from tinykube.health import wait_healthy
from tinykube.kubeconfig import write_kubeconfig
from tinykube.localetcd import EtcdCluster, EtcdServer, EtcdTLS, free_port
from tinykube.pdeathsig import with_parent_death_signal
from tinykube.pki import FAKE_KUBELETS, PKI, cluster_specs
from tinykube.tls import PLAINTEXT, Credentials

log = logging.getLogger(__name__)

# Default ports of `tinykube up` (DESIGN.md); tests pass 0 for free ports.
DEFAULT_ETCD_PORT = 2379
DEFAULT_APISERVER_PORT = 6443
DEFAULT_SCHEDULER_PORT = 10259
DEFAULT_CONTROLLER_PORT = 10257
DEFAULT_KUBELET_PORT = 10250
DEFAULT_PROXY_PORT = 10256
# Kubernetes' REST API: kubectl with no kubeconfig talks to localhost:8080.
DEFAULT_REST_PORT = 8080

HOST = "127.0.0.1"
# The directory holding the tinykube package this launcher was imported from (and the
# apiserver, scheduler, controller and kubelet packages beside it).
SOURCE_ROOT = Path(__file__).resolve().parents[1]
LOG_TAIL_LINES = 40
# In work_dir, flock()ed by the running cluster (see LocalCluster._take_lock).
LOCK_FILE = "tinykube.lock"
PKI_DIR_ENV = "TINYKUBE_PKI_DIR"
# The kubeconfig of kubelets hosting many fake nodes (--fake-nodes): group tinykube:fake-kubelets.
FAKE_KUBELETS_CONF = "fake-kubelets.conf"
# kubeconfig file of each component kind, as kubeadm names them, the certificate in it and
# the user it names (the certificate's CN)
COMPONENT_KUBECONFIGS = {
    "scheduler": ("scheduler.conf", "scheduler", "system:kube-scheduler"),
    "controller": (
        "controller-manager.conf",
        "controller-manager",
        "system:kube-controller-manager",
    ),
    "kubelet.proxy": ("proxy.conf", "proxy", "system:kube-proxy"),
    # Cluster DNS (kubelet/dns) runs on the host beside the proxies and reads what they read
    # (Services, EndpointSlices): it uses the proxies' identity.
    "kubelet.dns": ("proxy.conf", "proxy", "system:kube-proxy"),
}


# How often the supervisor looks at the processes: an exit is noticed within this.
SUPERVISE_POLL_SECONDS = 0.5
# `kill` with one of these is the owner taking a component down: it stays down until
# `start_component` or `restart`. Others (SIGSTOP, SIGCONT, SIGUSR1, ...) do not hold it.
HOLDING_SIGNALS = frozenset(
    {
        signal.SIGKILL,
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGQUIT,
        signal.SIGHUP,
        signal.SIGABRT,
    }
)


@dataclass(frozen=True)
class RestartBackoff:
    """The delay before a component that exited on its own is started again: the kubelet's
    crash-loop back-off (10 s doubling to 300 s; back to the start once it ran `reset_after`)."""

    initial: float = 10.0
    maximum: float = 300.0
    reset_after: float = 600.0


@dataclass
class CrashLoop:
    """One component's back-off state. Pure: the caller passes the (monotonic) time."""

    backoff: RestartBackoff
    started_at: float  # when its current process was started
    next_delay: float = 0.0  # the delay its next exit gets (0: the initial one)

    def exited(self, now: float) -> float:
        """The delay before starting it again, after an exit at `now`."""
        if not self.next_delay or now - self.started_at >= self.backoff.reset_after:
            self.next_delay = self.backoff.initial
        delay = self.next_delay
        self.next_delay = min(delay * 2, self.backoff.maximum)
        return delay


@dataclass(frozen=True)
class Exited:
    """A component exited on its own; `restart_in` seconds later it is started again (None:
    not supervised). `code` is Popen's: negative for a signal."""

    name: str
    code: int
    log_file: Path
    restart_in: float | None
    restarts: int  # how often the supervisor had restarted it before this exit

    def describe(self) -> str:
        how = f"with code {self.code}"
        if self.code < 0:
            with contextlib.suppress(ValueError):
                how += f" ({signal.Signals(-self.code).name})"
        then = "" if self.restart_in is None else f"; restarting it in {self.restart_in:g}s"
        return f"{self.name} exited {how}{then}; see {self.log_file}"


@dataclass(frozen=True)
class Restarted:
    """The supervisor started a component again (its `restarts`-th restart)."""

    name: str
    pid: int
    restarts: int
    log_file: Path

    def describe(self) -> str:
        return f"{self.name} restarted (pid {self.pid}, restart {self.restarts})"


@dataclass
class _Watch:
    """What the supervisor knows about one process name."""

    loop: CrashLoop
    seen: object = None  # the exited process already handled (Popen identity)
    due: float | None = None  # when to start it again


@dataclass
class Component:
    """One component process: how to start it and where it serves."""

    name: str
    module: str  # the package run with `python -m`
    port: int
    args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    host: str = HOST

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class ComponentError(RuntimeError):
    """A component failed to start or to become healthy; the message holds its log's tail."""


class ClusterRunning(ComponentError):
    """Another cluster holds this work directory's lock; nothing was started."""


class PortInUse(ComponentError):
    """A port the cluster would listen on is taken; nothing was started."""


def port_taken(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (the OS error), or None where it can.

    Binds without SO_REUSEPORT, so a listener that set it (gRPC servers and the proxy do)
    still counts as taken; SO_REUSEADDR lets a port with only TIME_WAIT connections pass, as
    it does for the servers themselves.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def has_main(package: str) -> bool:
    """Whether `python -m package` can run (the package and its `__main__` exist)."""
    try:
        return importlib.util.find_spec(f"{package}.__main__") is not None
    except (ImportError, ValueError):
        return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): tells a pid from its reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after it are plain.
    return stat.rsplit(")", 1)[1].split()[19]


def descendants(pid: int) -> dict[int, str]:
    """Every live descendant of `pid` mapped to its start time (empty where /proc is absent)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: dict[int, str] = {}
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        start = _proc_start_time(child)
        if start is not None:
            found[child] = start
        stack.extend(children.get(child, []))
    return found


class LocalCluster:
    """etcd + apiserver + scheduler + controller manager + kubelets as local OS processes."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        *,
        apiserver_port: int = 0,
        scheduler: bool = True,
        controller: bool = True,
        kubelets: Iterable[str] = ("node-1", "node-2"),
        kubelet_runtime: str = "process",
        extra_args: Mapping[str, list[str]] | None = None,
        etcd_port: int = 0,
        scheduler_port: int = 0,
        controller_port: int = 0,
        kubelet_port: int = 0,
        start_timeout: float = 60.0,
        stop_grace: float = 10.0,
        etcd_endpoint: str | None = None,
        env: Mapping[str, str] | None = None,
        proxies: bool = False,
        proxy_port: int = 0,
        node_ips: bool = False,
        rest_port: int = 0,
        die_with_parent: bool = False,
        insecure: bool = False,
        pki_dir: str | os.PathLike[str] | None = None,
        ha: bool = False,
        schedulers: int | None = None,
        controllers: int | None = None,
        etcd_members: int | None = None,
        apiservers: int | None = None,
        advertise_address: str = "",
        etcd_socket: bool = False,
        supervise: bool = True,
        restart_backoff: RestartBackoff | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Ports 0 pick free ports. `kubelet_port` is the first kubelet's; the i-th gets +i.

        `etcd_endpoint` reuses a running etcd instead of starting one (tests that share a
        session etcd should also pass a distinct `--etcd-prefix` in extra_args["apiserver"]).
        `die_with_parent`: every process gets SIGTERM when the process that started it dies,
        even by SIGKILL (tinykube.pdeathsig; Linux). Start it from a thread that lives as long
        as the cluster should: the kernel sends the signal when the forking thread exits.

        `ha`: 3 etcd members and 2 apiservers unless `etcd_members` / `apiservers` say how many.
        `schedulers` / `controllers`: how many of each (leader-elected; default 1, 2 with `ha`).
        `advertise_address`: every apiserver's --advertise-address (the `kubernetes` Service's
        endpoint, served beside 127.0.0.1 and carried by the serving certificate); "" is
        127.0.0.1. `up --runtime containerd` sets it to an address its pods can reach.
        `etcd_socket`: the apiserver reaches the etcd this starts (a single member) over its
        unix socket instead of TCP.

        `supervise`: start components (and etcd members) that exit on their own again after
        `restart_backoff` (default: the kubelet's); False only records their exits in `events`.
        `clock` (monotonic seconds) times the back-off.
        """
        self.die_with_parent = die_with_parent
        self._lock: IO[str] | None = None
        self.work_dir = Path(work_dir).resolve()
        self.insecure = insecure
        pki_path = pki_dir or os.environ.get(PKI_DIR_ENV) or self.work_dir / "pki"
        self.pki = PKI(Path(pki_path).resolve())
        # What the launcher's probes (and callers) dial with: the admin's certificate.
        self.credentials: Credentials = PLAINTEXT
        self.logs_dir = self.work_dir / "logs"
        self.extra_args: dict[str, list[str]] = {k: list(v) for k, v in (extra_args or {}).items()}
        self.kubelet_runtime = kubelet_runtime
        self.advertise_address = advertise_address
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.env = dict(env or {})
        self.skipped: list[str] = []  # notes on components that could not be started
        self._external_etcd = etcd_endpoint
        self._etcd_port = etcd_port
        self.etcd_socket = etcd_socket
        self.ha = ha
        self.etcd_member_count = etcd_members or (3 if ha else 1)
        if etcd_socket and (etcd_endpoint or self.etcd_member_count > 1):
            raise ValueError(
                "etcd_socket is for the single etcd this cluster starts: an etcd cluster or an "
                "external etcd is dialled over TCP"
            )
        # The single etcd, or with several members the first of `etcd_cluster.members`.
        self.etcd: EtcdServer | None = None
        # Made now (not started): its members' ports and URLs are part of the plan.
        self.etcd_cluster: EtcdCluster | None = (
            self._make_etcd_cluster() if self.etcd_member_count > 1 and not etcd_endpoint else None
        )
        self._orphans: dict[int, str] = {}  # pid -> start time, killed at stop
        self._started = False
        self._atexit_registered = False
        self.supervise = supervise
        self.restart_backoff = restart_backoff or RestartBackoff()
        self._clock = clock
        # What the supervisor saw, in order (`tinykube up` prints them); restarts by name.
        self.events: list[Exited | Restarted] = []
        self.restarts: dict[str, int] = {}
        self._held: set[str] = set()  # taken down on purpose: not restarted
        self._watches: dict[str, _Watch] = {}
        self._mutex = threading.RLock()
        self._supervisor: threading.Thread | None = None
        self._supervisor_stop = threading.Event()

        api_port = apiserver_port or free_port(HOST)
        self.api_address = f"{HOST}:{api_port}"
        # The apiserver's REST API (kubectl, client-go); its kubeconfig is written at start.
        self.rest_address = f"{HOST}:{rest_port or free_port(HOST)}"
        self.kubeconfig = self.work_dir / "kubeconfig"
        self.components: dict[str, Component] = {}
        self.components["apiserver"] = Component("apiserver", "apiserver", api_port)
        # Each apiserver's REST address, by component name.
        self.rest_addresses = {"apiserver": self.rest_address}
        for i in range(2, (apiservers or (2 if ha else 1)) + 1):
            # Fixed ports (`tinykube up`): the i-th apiserver on the first one's ports + i - 1.
            self._add_apiserver(
                f"apiserver-{i}",
                apiserver_port + i - 1 if apiserver_port else 0,
                rest_port + i - 1 if rest_port else 0,
            )
        if scheduler:
            self.components["scheduler"] = Component(
                "scheduler", "scheduler", scheduler_port or free_port(HOST)
            )
        if controller:
            self.components["controller"] = Component(
                "controller", "controller", controller_port or free_port(HOST)
            )
        for module, wanted, first_port in (
            ("scheduler", scheduler and (schedulers or (2 if ha else 1)), scheduler_port),
            ("controller", controller and (controllers or (2 if ha else 1)), controller_port),
        ):
            for i in range(2, int(wanted) + 1):
                # Fixed ports (`tinykube up`): the i-th on the first one's port + 100 * (i - 1)
                # (+ 1 would be the controller's and the next kubelet's defaults).
                port = first_port + 100 * (i - 1) if first_port else free_port(HOST)
                self.components[f"{module}-{i}"] = Component(f"{module}-{i}", module, port)
        for i, node in enumerate(kubelets):
            host = f"127.0.1.{i + 1}" if node_ips else HOST
            port = kubelet_port + i if kubelet_port else free_port(host)
            self.components[f"kubelet-{node}"] = Component(
                f"kubelet-{node}",
                "kubelet",
                port,
                ["--node-name", node, *(["--node-ip", host] if node_ips else [])],
                host=host,
            )
            if proxies:
                # Only the first proxy gets the default port: 10256 + 1 is the controller's.
                pport = proxy_port if proxy_port and i == 0 else free_port(HOST)
                self.components[f"proxy-{node}"] = Component(
                    f"proxy-{node}", "kubelet.proxy", pport, ["--node-name", node]
                )

    def _add_apiserver(self, name: str, port: int = 0, rest_port: int = 0) -> Component:
        comp = Component(name, "apiserver", port or free_port(HOST))
        self.components[name] = comp
        self.rest_addresses[name] = f"{HOST}:{rest_port or free_port(HOST)}"
        return comp

    # ---- addresses and processes -------------------------------------------------------

    @property
    def etcd_endpoint(self) -> str:
        """etcd's host:port (every member's, comma-separated, for a cluster)."""
        if self._external_etcd:
            return self._external_etcd
        if self.etcd_cluster is not None:
            return self.etcd_cluster.endpoint
        if self.etcd is None:
            raise RuntimeError("etcd is not started")
        return self.etcd.endpoint

    @property
    def etcd_members(self) -> dict[str, EtcdServer]:
        """The etcd processes this cluster runs, by name ("etcd", or "etcd-0".."etcd-2")."""
        if self.etcd_cluster is not None:
            return {m.name: m for m in self.etcd_cluster.members}
        return {"etcd": self.etcd} if self.etcd is not None else {}

    def etcd_leader(self, timeout: float = 15.0) -> str:
        """The name of the etcd member that leads now (waiting for an election to settle)."""
        if self.etcd_cluster is None:
            if self.etcd is None:
                raise RuntimeError("etcd is external or not started")
            return "etcd"
        return self.etcd_cluster.leader(timeout).name

    @property
    def apiserver_names(self) -> list[str]:
        return [n for n, c in self.components.items() if c.module == "apiserver"]

    @property
    def api_addresses(self) -> list[str]:
        """Every apiserver's gRPC address, the first one's (`api_address`) first."""
        return [self.components[n].address for n in self.apiserver_names]

    @property
    def rest_urls(self) -> list[str]:
        """Every apiserver's REST URL, `rest_url` first."""
        scheme = "http" if self.insecure else "https"
        return [f"{scheme}://{self.rest_addresses[n]}" for n in self.apiserver_names]

    @property
    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        """Running and exited processes by component name, etcd included."""
        found: dict[str, subprocess.Popen[bytes]] = {}
        for name, member in self.etcd_members.items():
            if member.process is not None:
                found[name] = member.process
        for name, comp in self.components.items():
            if comp.process is not None:
                found[name] = comp.process
        return found

    @property
    def addresses(self) -> dict[str, str]:
        """gRPC address of every component that was started (etcd's client URL host:port)."""
        found: dict[str, str] = {}
        if self._external_etcd:
            found["etcd"] = self.etcd_endpoint
        found.update(
            {name: m.endpoint for name, m in self.etcd_members.items() if m.process is not None}
        )
        found.update({name: c.address for name, c in self.components.items() if c.process})
        return found

    def _apiserver_targets(self) -> str:
        """Every apiserver's gRPC address, comma-separated: what clients' --apiserver takes."""
        found = [c.address for c in self.components.values() if c.module == "apiserver"]
        return ",".join(found) or self.api_address

    @property
    def rest_url(self) -> str:
        """The REST API's URL, what kubectl's --server takes."""
        return f"{'http' if self.insecure else 'https'}://{self.rest_address}"

    # ---- certificates and kubeconfig files ----------------------------------------------

    def _node_ips(self) -> dict[str, str]:
        return {
            c.args[c.args.index("--node-name") + 1]: c.host
            for c in self.components.values()
            if c.module == "kubelet" and "--node-name" in c.args
        }

    def make_credentials(self) -> None:
        """Issue (or reuse) every certificate and write every kubeconfig; sets `credentials`."""
        if self.insecure:
            self.credentials = PLAINTEXT
            write_kubeconfig(self.kubeconfig, self.rest_url, grpc_server=self._apiserver_targets())
            return
        node_ips = self._node_ips()
        advertised = (self.advertise_address,) if self.advertise_address else ()
        ips = tuple(dict.fromkeys((HOST, *advertised, *node_ips.values())))
        members = [(f"etcd-{i}", HOST) for i in range(self.etcd_member_count)]
        specs = cluster_specs(
            list(node_ips),
            ips=ips,
            node_ips=node_ips,
            etcd_members=members if self.etcd_member_count > 1 else (),
        )
        self.pki.ensure_all(specs)
        self.pki.ensure_service_account_key()
        ca = self.pki.ca_cert_path.read_bytes()
        self._write_conf(self.kubeconfig, "admin", "kubernetes-admin", ca)
        for conf, cert, user in COMPONENT_KUBECONFIGS.values():
            self._write_conf(self.work_dir / conf, cert, user, ca)
        for node in node_ips:
            self._kubelet_conf(node)
        self._write_conf(self.work_dir / FAKE_KUBELETS_CONF, "fake-kubelets", FAKE_KUBELETS, ca)
        admin = self.pki.paths("admin")
        self.credentials = Credentials(
            ca=ca, cert=admin.cert.read_bytes(), key=admin.key.read_bytes()
        )

    def _write_conf(self, path: Path, cert_name: str, user: str, ca: bytes) -> None:
        paths = self.pki.paths(cert_name)
        write_kubeconfig(
            path,
            self.rest_url,
            user=user,
            ca=ca,
            cert=paths.cert.read_bytes(),
            key=paths.key.read_bytes(),
            grpc_server=self._apiserver_targets(),
        )

    def _node_credentials(self, comp: Component) -> None:
        """The certificates (and kubeconfig) of a kubelet or proxy started after `start`
        (`start_component("kubelet-n3")`)."""
        if self.insecure or comp.module not in ("kubelet", "kubelet.proxy"):
            return
        node = _node_of(comp)
        for spec in cluster_specs([node], node_ips={node: comp.host}):
            if spec.name.startswith((f"kubelet-{node}", f"proxy-{node}")):
                self.pki.ensure(spec)
        if comp.module == "kubelet":
            self._kubelet_conf(node)

    def _kubelet_conf(self, node: str) -> Path:
        """A kubelet's kubeconfig: its `system:node:<node>` certificate."""
        path = self.work_dir / f"kubelet-{node}.conf"
        self._write_conf(path, f"kubelet-{node}", f"system:node:{node}", self.ca_bytes())
        return path

    def ca_bytes(self) -> bytes:
        return self.pki.ca_cert_path.read_bytes()

    def _serving(self, name: str) -> list[str]:
        paths = self.pki.paths(name)
        return [
            "--tls-cert-file",
            str(paths.cert),
            "--tls-private-key-file",
            str(paths.key),
            "--client-ca-file",
            str(self.pki.ca_cert_path),
        ]

    def security_args(self, comp: Component, *, fake_nodes: bool = False) -> list[str]:
        """A component's TLS flags: its kubeconfig and serving certificate (or --insecure).
        A kubelet hosting many fake nodes (`fake_nodes`) gets the fake-kubelets identity."""
        if self.insecure:
            return ["--insecure"]
        pki = self.pki
        if comp.module == "apiserver":
            etcd = (
                []
                if self._external_etcd and "https://" not in self._external_etcd
                else [
                    "--etcd-cafile",
                    str(pki.ca_cert_path),
                    "--etcd-certfile",
                    str(pki.paths("apiserver-etcd-client").cert),
                    "--etcd-keyfile",
                    str(pki.paths("apiserver-etcd-client").key),
                ]
            )
            kubelet = pki.paths("apiserver-kubelet-client")
            return [
                *self._serving("apiserver"),
                *etcd,
                "--kubelet-client-certificate",
                str(kubelet.cert),
                "--kubelet-client-key",
                str(kubelet.key),
                "--kubelet-certificate-authority",
                str(pki.ca_cert_path),
                # every apiserver signs and verifies service account tokens with one pair
                "--service-account-key-file",
                str(pki.service_account_pub_path),
                "--service-account-signing-key-file",
                str(pki.service_account_key_path),
            ]
        node = _node_of(comp)
        if comp.module == "kubelet":
            conf = self.work_dir / f"kubelet-{node}.conf"
            if fake_nodes:
                # Not one node: the Node authorizer would refuse its watches of all of them.
                conf = self.work_dir / FAKE_KUBELETS_CONF
            return ["--kubeconfig", str(conf), *self._serving(f"kubelet-{node}-serving")]
        conf_name, _, _ = COMPONENT_KUBECONFIGS[comp.module]
        tokens = (
            # the serviceaccount-token controller signs token Secrets with the apiservers' key
            [
                "--service-account-private-key-file",
                str(pki.service_account_key_path),
                "--root-ca-file",
                str(pki.ca_cert_path),
            ]
            if comp.module == "controller"
            else []
        )
        if comp.module == "kubelet.dns":
            # its gRPC health server: the first node proxy's serving certificate (same host)
            node = next((_node_of(c) for c in self.components.values() if _node_of(c)), "")
        serving = {
            "scheduler": "scheduler-serving",
            "controller": "controller-manager-serving",
        }.get(comp.module, f"proxy-{node}-serving")
        return ["--kubeconfig", str(self.work_dir / conf_name), *self._serving(serving), *tokens]

    def address(self, name: str) -> str:
        return self._component(name).address

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{self._resolve(name)}.log"

    def _resolve(self, name: str) -> str:
        if name == "etcd" or name in self.components or name in self.etcd_members:
            return name
        if f"kubelet-{name}" in self.components:
            return f"kubelet-{name}"
        raise KeyError(f"no component {name!r}; known: etcd, {', '.join(self.components)}")

    def _component(self, name: str) -> Component:
        resolved = self._resolve(name)
        if resolved == "etcd" or resolved in self.etcd_members:
            raise KeyError("etcd is not a tinykube component; use .etcd")
        return self.components[resolved]

    # ---- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd, then the apiserver, then everything else; wait until all are SERVING.

        On any failure, stops whatever was started and raises ComponentError.
        """
        if self._started:
            raise RuntimeError("this LocalCluster is already started; stop() it first")
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        # Before anything starts: a second cluster in this directory would share etcd's data
        # and the logs; one on a taken port would fail half-way, or, through SO_REUSEPORT,
        # share the port with another cluster.
        self._take_lock()
        try:
            self.check_ports()
        except BaseException:
            self._release_lock()
            raise
        self._started = True
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            self.make_credentials()
            if not self._external_etcd:
                self._start_etcd()
            apiservers = [c for c in self.components.values() if c.module == "apiserver"]
            for comp in apiservers:
                self._spawn(comp)
            for comp in apiservers:
                self._wait(comp)
            rest = [c for c in self.components.values() if c.module != "apiserver"]
            # Start all the others at once, then wait: their start-up (imports, informer sync)
            # overlaps instead of adding up.
            started = [c for c in rest if self._spawn(c)]
            for comp in started:
                self._wait(comp)
        except BaseException:
            self.stop()
            raise
        self._start_supervisor()

    @property
    def lock_path(self) -> Path:
        return self.work_dir / LOCK_FILE

    def _take_lock(self) -> None:
        """flock() `work_dir/tinykube.lock` for the cluster's lifetime, or raise ClusterRunning.

        The kernel drops the lock when the holder dies, however it dies, so a stale file from
        a killed cluster never blocks the next one. The file says who holds it.
        """
        self.work_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.lock_path, "a+")  # noqa: SIM115 - held open until stop()
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock.seek(0)
            holder = lock.read().strip() or "unknown pid"
            lock.close()
            raise ClusterRunning(
                f"a tinykube cluster is already running in {self.work_dir} ({holder}); "
                "stop it (Ctrl-C where it runs) or use another --data-dir"
            ) from exc
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}, apiserver {self.api_address}\n")
        lock.flush()
        self._lock = lock

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the last descriptor releases the flock
            self._lock = None

    def planned_ports(self) -> list[tuple[str, str, int]]:
        """(what, host, port) of every listening port the cluster's processes will bind."""
        found: list[tuple[str, str, int]] = []
        if not self._external_etcd and self._etcd_port:
            if self.etcd_member_count == 1:
                found.append(("etcd", HOST, self._etcd_port))
            for i in range(self.etcd_member_count if self.etcd_member_count > 1 else 0):
                found.append((f"etcd-{i}", HOST, self._etcd_port + 2 * i))
                found.append((f"etcd-{i} peer", HOST, self._etcd_port + 2 * i + 1))
        for comp in self.components.values():
            found.append((comp.name, comp.host, comp.port))
            if comp.module == "apiserver":
                host, rest = self.rest_addresses[comp.name].rsplit(":", 1)
                found.append(("apiserver's REST API", host, int(rest)))
        return found

    def check_ports(self) -> None:
        """Raise PortInUse naming the first planned port something already listens on."""
        for what, host, port in self.planned_ports():
            reason = port_taken(host, port)
            if reason is not None:
                raise PortInUse(
                    f"port {host}:{port} ({what}) is not free: {reason}; is another cluster "
                    "running? stop it, or pick other ports (--free-ports, --*-port)"
                )

    def _member_tls(self, i: int) -> EtcdTLS:
        server = self.pki.paths(f"etcd-server-etcd-{i}")
        peer = self.pki.paths(f"etcd-peer-etcd-{i}")
        return EtcdTLS(
            cert_file=str(server.cert),
            key_file=str(server.key),
            trusted_ca_file=str(self.pki.ca_cert_path),
            peer_cert_file=str(peer.cert),
            peer_key_file=str(peer.key),
        )

    def _make_etcd_cluster(self) -> EtcdCluster:
        n = self.etcd_member_count
        port = self._etcd_port
        return EtcdCluster(
            n,
            base_dir=str(self.work_dir / "etcd-cluster"),
            host=HOST,
            # With a fixed etcd port, member i listens on port + 2i and its peers on + 2i + 1.
            client_ports=[port + 2 * i for i in range(n)] if port else (),
            peer_ports=[port + 2 * i + 1 for i in range(n)] if port else (),
            log_dir=str(self.logs_dir),
            tls=None if self.insecure else [self._member_tls(i) for i in range(n)],
            # Stable across restarts of the same cluster: a member's data dir names it.
            token=f"tinykube-{self.work_dir.name}",
            die_with_parent=self.die_with_parent,
        )

    def _start_etcd_cluster(self) -> None:
        assert self.etcd_cluster is not None
        self.etcd = self.etcd_cluster.members[0]
        try:
            self.etcd_cluster.start(timeout=self.start_timeout)
        except Exception as exc:
            self.etcd_cluster.stop()
            tails = "\n".join(
                f"--- tail of {m.log_file} ---\n{log_tail(Path(m.log_file), 10)}"
                for m in self.etcd_cluster.members
            )
            raise ComponentError(f"the etcd cluster failed to start: {exc}\n{tails}") from exc

    def _start_etcd(self) -> None:
        if self.etcd_cluster is not None:
            self._start_etcd_cluster()
            return
        tls = None
        if not self.insecure:
            server, peer = self.pki.paths("etcd-server"), self.pki.paths("etcd-peer")
            tls = EtcdTLS(
                cert_file=str(server.cert),
                key_file=str(server.key),
                trusted_ca_file=str(self.pki.ca_cert_path),
                peer_cert_file=str(peer.cert),
                peer_key_file=str(peer.key),
            )
        self.etcd = EtcdServer(
            data_dir=str(self.work_dir / "etcd"),
            client_port=self._etcd_port,
            log_file=str(self.logs_dir / "etcd.log"),
            die_with_parent=self.die_with_parent,
            tls=tls,
            socket=self.etcd_socket,
        )
        try:
            self.etcd.start(timeout=self.start_timeout)
        except Exception as exc:
            self.etcd.stop()
            raise ComponentError(
                f"etcd failed to start: {exc}\n--- tail of {self.etcd.log_file} ---\n"
                f"{log_tail(Path(self.etcd.log_file))}"
            ) from exc

    def command(self, comp: Component) -> list[str]:
        """The full command line of a component."""
        base = [sys.executable, "-m", comp.module]
        if comp.module == "apiserver":
            if self.etcd_cluster is not None:
                etcd = self.etcd_cluster.url
            elif self.etcd is not None:
                etcd = self.etcd.socket_url if self.etcd.socket else self.etcd.url
            else:
                etcd = self.etcd_endpoint
            base += ["--etcd-servers", etcd, "--bind-address", comp.address]
            base += ["--rest-port", self.rest_addresses[comp.name].rsplit(":", 1)[1]]
            if self.advertise_address:
                base += ["--advertise-address", self.advertise_address]
        else:
            # The other processes take the host and the port as separate flags.
            base += ["--apiserver", self._apiserver_targets(), "--bind-address", comp.host]
            base += ["--port", str(comp.port)]
        if comp.module == "kubelet":
            base += ["--runtime", self.kubelet_runtime]
        # extra_args keyed by module ("kubelet") apply to every instance of it, keyed by
        # component name ("kubelet-node-1", "scheduler-2") to that one only.
        extra = list(self.extra_args.get(comp.module, []))
        if comp.name != comp.module:
            extra += self.extra_args.get(comp.name, [])
        fake_nodes = any(a.partition("=")[0] == "--fake-nodes" for a in (*comp.args, *extra))
        return [*base, *self.security_args(comp, fake_nodes=fake_nodes), *comp.args, *extra]

    def _spawn(self, comp: Component) -> bool:
        """Start one component's process (not waiting); False if its package cannot run yet."""
        if not has_main(comp.module):
            note = f"{comp.name}: skipped, {comp.module}/__main__.py does not exist yet"
            if note not in self.skipped:
                self.skipped.append(note)
            log.info("%s", note)
            return False
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.logs_dir / f"{comp.name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        # Components run the same source tree as the launcher (a checkout, a worktree), not
        # whatever tree an installed or editable package happens to point at.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SOURCE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        cmd = self.command(comp)
        if self.die_with_parent:
            cmd = with_parent_death_signal(cmd)
        with open(log_file, "ab") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} starting {comp.name}\n".encode())
            out.flush()
            comp.process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                env=env,
                # Its own process group (and session): a Ctrl-C in our terminal reaches only
                # us, and stop() can signal the component together with its children.
                start_new_session=True,
            )
        log.info("started %s (pid %d) on %s", comp.name, comp.process.pid, comp.address)
        return True

    def _wait(self, comp: Component) -> None:
        proc = comp.process
        assert proc is not None
        try:
            wait_healthy(
                comp.address,
                self.start_timeout,
                alive=lambda: proc.poll() is None,
                credentials=self.credentials,
            )
        except (TimeoutError, RuntimeError) as exc:
            status = proc.poll()
            why = f"exited with code {status}" if status is not None else str(exc)
            raise ComponentError(
                f"{comp.name} did not become healthy on {comp.address}: {why}\n"
                f"--- tail of {self.logs_dir / (comp.name + '.log')} ---\n"
                f"{log_tail(self.logs_dir / (comp.name + '.log'))}"
            ) from exc

    def start_component(self, name: str, extra_args: list[str] | None = None) -> None:
        """Start (or start again) one component and wait until it is SERVING.

        A name not yet known is a new instance of the component its prefix names:
        "scheduler-2" runs `python -m scheduler` on a free port; "kubelet-n3" a kubelet for
        node n3. `extra_args` are appended to its command line (and remembered).
        """
        if name == "etcd":
            self._restart_etcd()
            return
        if self.etcd_cluster is not None and name in self.etcd_members:
            self._hold(name)
            self.etcd_cluster.start_member(name, timeout=self.start_timeout)
            self._release(name)
            return
        with self._mutex:
            try:
                comp = self._component(name)
            except KeyError:
                comp = self._new_component(name)
                self.components[name] = comp
            if comp.running():
                raise RuntimeError(f"{comp.name} is already running (pid {comp.process.pid})")  # type: ignore[union-attr]
            # Not the supervisor's while it starts; left down if it fails to.
            self._held.add(comp.name)
        if extra_args:
            comp.args = [*comp.args, *extra_args]
        self._node_credentials(comp)
        if not self._spawn(comp):
            raise ComponentError(self.skipped[-1])
        try:
            self._wait(comp)
        except BaseException:
            self._terminate([comp])
            raise
        self._release(comp.name)

    def _new_component(self, name: str) -> Component:
        if name.startswith("apiserver"):
            comp = self._add_apiserver(name)
            del self.components[name]  # the caller adds it
            return comp
        for module in ("scheduler", "controller"):
            if name.startswith(module):
                return Component(name, module, free_port(HOST))
        if name.startswith("kubelet-"):
            node = name.removeprefix("kubelet-")
            return Component(name, "kubelet", free_port(HOST), ["--node-name", node])
        if name.startswith("proxy-"):
            node = name.removeprefix("proxy-")
            return Component(name, "kubelet.proxy", free_port(HOST), ["--node-name", node])
        raise KeyError(f"cannot tell which component {name!r} is; name it scheduler-2, ...")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a component's process group (as a crash or an operator would).

        With a signal that ends it (HOLDING_SIGNALS) the component stays down, unsupervised,
        until `start_component` or `restart`. For SIGKILL and SIGTERM this waits until the
        process is gone. Children that outlive it (a kubelet's containers) are remembered and
        killed by `stop`.
        """
        resolved = self._resolve(name)
        with self._mutex:
            if sig in HOLDING_SIGNALS:
                # Taken down on purpose: the supervisor leaves it down, even where it already
                # died (a test that killed it itself) and a restart was due.
                self._held.add(resolved)
            if resolved == "etcd" or resolved in self.etcd_members:
                member = self.etcd_members.get(resolved, self.etcd)
                if member is None:
                    raise RuntimeError("etcd is external or not started")
                proc = member.process
            else:
                proc = self.components[resolved].process
        if proc is None or proc.poll() is not None:
            return
        self._orphans.update(descendants(proc.pid))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                proc.wait(self.stop_grace if sig == signal.SIGTERM else 10.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def restart(self, name: str) -> None:
        """Stop a component (SIGTERM, then SIGKILL) if it runs, start it again, wait healthy."""
        resolved = self._resolve(name)
        if resolved == "etcd":
            self._restart_etcd()
            return
        self._hold(resolved)
        if self.etcd_cluster is not None and resolved in self.etcd_members:
            member = self.etcd_members[resolved]
            member.stop()
            member.start(timeout=self.start_timeout)
            self._release(resolved)
            return
        comp = self.components[resolved]
        if comp.running():
            self._terminate([comp])
        self.start_component(resolved)

    def _restart_etcd(self) -> None:
        if self.etcd is None:
            raise RuntimeError("etcd is external or not started")
        self._hold("etcd")
        self.etcd.stop()
        self.etcd.start(timeout=self.start_timeout)
        self._release("etcd")

    # ---- supervision --------------------------------------------------------------------

    def _hold(self, name: str) -> None:
        """The owner takes `name` down or starts it: the supervisor keeps off it."""
        with self._mutex:
            self._held.add(name)

    def _release(self, name: str) -> None:
        """Started on purpose: supervised again, its back-off from the start."""
        with self._mutex:
            self._held.discard(name)
            self._watches.pop(name, None)

    def _start_supervisor(self) -> None:
        with self._mutex:
            self._held.clear()
            self._watches.clear()
            self._supervisor_stop.clear()
        self._supervisor = threading.Thread(
            target=self._supervise_loop, name="tinykube-supervisor", daemon=True
        )
        self._supervisor.start()

    def _supervise_loop(self) -> None:
        while not self._supervisor_stop.wait(SUPERVISE_POLL_SECONDS):
            try:
                self.supervise_once()
            except Exception:  # one bad pass must not end supervision
                log.exception("supervising the cluster's processes failed")

    def _stop_supervisor(self) -> None:
        with self._mutex:  # a pass under way finishes first; later ones do nothing
            self._supervisor_stop.set()

    def supervise_once(self) -> None:
        """One look at every process: record exits, start again those whose back-off is over.

        The supervisor thread calls this every SUPERVISE_POLL_SECONDS; so may a test.
        """
        with self._mutex:
            if not self._started or self._supervisor_stop.is_set():
                return
            now = self._clock()
            targets: list[tuple[str, subprocess.Popen[bytes] | None, Path]] = [
                (name, m.process, Path(m.log_file)) for name, m in self.etcd_members.items()
            ]
            targets += [
                (name, c.process, self.log_path(name)) for name, c in self.components.items()
            ]
            for name, proc, log_file in targets:
                if name in self._held or proc is None:
                    continue
                watch = self._watches.get(name)
                if watch is None:
                    watch = self._watches[name] = _Watch(CrashLoop(self.restart_backoff, now))
                code = proc.poll()
                if code is None:
                    continue
                if watch.seen is not proc:
                    watch.seen = proc
                    delay = watch.loop.exited(now) if self.supervise else None
                    watch.due = None if delay is None else now + delay
                    restarts = self.restarts.get(name, 0)
                    self._record(Exited(name, code, log_file, delay, restarts))
                elif watch.due is not None and now >= watch.due:
                    watch.due = None
                    self._respawn(name, watch, now, log_file)

    def _respawn(self, name: str, watch: _Watch, now: float, log_file: Path) -> None:
        try:
            if name in self.etcd_members:
                member = self.etcd_members[name]
                member.spawn()
                assert member.process is not None
                pid = member.process.pid
            else:
                comp = self.components[name]
                if not self._spawn(comp):
                    return
                assert comp.process is not None
                pid = comp.process.pid
        except OSError as exc:
            delay = watch.loop.exited(now)
            watch.due = now + delay
            log.warning("could not restart %s (%s); trying again in %gs", name, exc, delay)
            return
        watch.loop.started_at = now
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self._record(Restarted(name, pid, self.restarts[name], log_file))

    def _record(self, event: Exited | Restarted) -> None:
        self.events.append(event)
        if isinstance(event, Restarted):
            log.info("%s", event.describe())
            return
        log.warning("%s", event.describe())
        # In its log too, between its last words and the next start's banner.
        with contextlib.suppress(OSError), open(event.log_file, "ab") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} {event.describe()}\n".encode())

    def _terminate(self, comps: list[Component]) -> None:
        """SIGTERM each running component's group, SIGKILL whatever outlives the grace."""
        live = [c for c in comps if c.running()]
        for comp in live:
            assert comp.process is not None
            self._orphans.update(descendants(comp.process.pid))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(comp.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        for comp in live:
            assert comp.process is not None
            try:
                comp.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM for %gs; killing it", comp.name, self.stop_grace)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(comp.process.pid, signal.SIGKILL)
                comp.process.wait()
            # The group may still hold children that ignored SIGTERM.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(comp.process.pid, signal.SIGKILL)

    def _kill_orphans(self) -> None:
        for pid, started in list(self._orphans.items()):
            if _proc_start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        self._orphans.clear()

    def stop(self) -> None:
        """Stop every component (reverse start order), then etcd; idempotent."""
        if not self._started:
            return
        self._stop_supervisor()
        comps = list(self.components.values())
        others = [c for c in comps if c.module != "apiserver"]
        # Clients first, so they do not spend their shutdown retrying a vanished apiserver.
        self._terminate(others)
        self._terminate([c for c in comps if c.module == "apiserver"])
        self._kill_orphans()
        if self.etcd_cluster is not None:
            self.etcd_cluster.stop()
        elif self.etcd is not None:
            self.etcd.stop()
        # Only now: the processes it restarted die with it under die_with_parent.
        if self._supervisor is not None:
            self._supervisor.join()
            self._supervisor = None
        self._release_lock()
        self._started = False
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False


def _node_of(comp: Component) -> str:
    """The node a kubelet or proxy component runs for ("" for the others)."""
    return comp.args[comp.args.index("--node-name") + 1] if "--node-name" in comp.args else ""
