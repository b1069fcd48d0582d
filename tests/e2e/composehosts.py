"""Run docker-compose.yml without Docker: one Linux network namespace per service.

`ComposeProject.load` reads the compose file (PyYAML, anchors and merge keys resolved) into
the parts that matter here: each service's command (entrypoint + command), environment,
healthcheck, depends_on, volumes and either its address on the project network or the service
whose network namespace it joins (`network_mode: service:<name>`). `ComposeHosts` then plays the
Docker engine's part as closely as a machine without one allows:

- a bridge stands for the compose network; its host side gets the network's gateway address, so
  the host reaches services the way `docker compose` users on Linux reach container IPs;
- every service on the network gets a network namespace with `lo` up and a veth on the bridge at
  its compose address, and a hosts file (`/etc/netns/<ns>/hosts`, which `ip netns exec`
  bind-mounts over /etc/hosts) that maps every such service name to its address, as Docker's
  embedded DNS would;
- a service with `network_mode: service:<owner>` runs in the owner's namespace: same interfaces,
  address, loopback and hosts file, no name of its own on the network; as Compose does, it
  depends on the owner (started), and the keys Compose or the Docker daemon refuse beside
  `network_mode` (networks, ports, hostname, dns, extra_hosts, mac_address) are refused here;
- each service runs its exact command and environment from the file under `ip netns exec`, in
  a working directory of its own; only the image's executables are mapped to local ones
  (`python`, `/usr/local/bin/etcd`, ...) and volume paths to temporary directories (a named
  volume is one directory; a long-syntax mount's `volume.subpath` is a directory inside it; a
  volume mounted inside another's path is that path of the outer one's directory, a symlink to
  its own, as Docker stacks the two mounts);
- services start in `depends_on` order, waiting for `service_healthy` dependencies by running
  the service's own healthcheck command inside its namespace, and for
  `service_completed_successfully` ones (a one-shot service) by waiting for them to exit 0;
- stopping a service sends SIGTERM to its main process, as `docker stop` does, and SIGKILL to
  whatever is left of it after a grace period: everything in its namespace (a kubelet's pods
  included) when it owns one, only its own session's processes when it joined another's.

Everything it creates is named with `PREFIX`, and `cleanup_leftovers()` removes anything with
that prefix, so a run killed half-way never breaks the next one; `exclusive()` makes concurrent
runs on one machine take turns. Not thread-safe: one fixture drives it from one thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PREFIX = "tkc-"
BRIDGE = f"{PREFIX}br"
NETNS_ETC = Path("/etc/netns")
LOCK_FILE = Path("/tmp/tinykube-compose-e2e.lock")
STOP_GRACE = 10.0
# A container's PATH: the image puts its virtualenv first (see Dockerfile).
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Beside `network_mode`, Compose refuses `networks`; the daemon refuses the others at create time
# ("conflicting options: port publishing and the container type network mode", ...).
NOT_WITH_NETWORK_MODE = ("networks", "ports", "hostname", "dns", "extra_hosts", "mac_address")


class ComposeError(Exception):
    """The compose file asks for something this stand-in cannot do faithfully."""


@dataclass
class Service:
    name: str
    argv: list[str]
    environment: dict[str, str]
    healthcheck: list[str] | None
    depends_on: dict[str, str]  # service -> condition
    volumes: list[tuple[str, str]]  # (source, path in the container)
    ip: str  # its address on the project network; "" when it joins another's namespace
    network_of: str = ""  # `network_mode: service:<network_of>`; "" when on the network itself


@dataclass
class ComposeProject:
    services: dict[str, Service]
    network: str
    subnet: ipaddress.IPv4Network

    @property
    def gateway(self) -> str:
        return str(next(self.subnet.hosts()))

    @classmethod
    def load(cls, path: Path) -> ComposeProject:
        doc = yaml.safe_load(path.read_text())
        networks = doc.get("networks") or {}
        if len(networks) != 1:
            raise ComposeError("expected exactly one network in the compose file")
        (network, net_spec), *_ = networks.items()
        subnet = ipaddress.ip_network(net_spec["ipam"]["config"][0]["subnet"])
        assert isinstance(subnet, ipaddress.IPv4Network)
        services = {name: _service(name, spec, network) for name, spec in doc["services"].items()}
        for service in services.values():
            owner = services.get(service.network_of) if service.network_of else None
            if service.network_of and (owner is None or owner.network_of):
                raise ComposeError(
                    f"{service.name}.network_mode: service:{service.network_of} is not a service"
                    " on the project network"
                )
        return cls(services, network, subnet)

    def owner(self, name: str) -> Service:
        """The service whose network namespace `name` runs in (itself, unless it joins one)."""
        service = self.services[name]
        return self.services[service.network_of] if service.network_of else service

    def on_network(self) -> list[Service]:
        """Services with their own namespace and address, in file order."""
        return [s for s in self.services.values() if not s.network_of]

    def start_order(self) -> list[str]:
        """Services with their dependencies first (compose's order), file order otherwise."""
        order: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in order:
                return
            if name in path:
                raise ComposeError(f"dependency cycle: {' -> '.join((*path, name))}")
            for dep in self.services[name].depends_on:
                visit(dep, (*path, name))
            order.append(name)

        for name in self.services:
            visit(name, ())
        return order


def _as_argv(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        raise ComposeError(f"{what}: use the exec (list) form, the etcd image has no shell")
    return [str(v) for v in value]


def _service(name: str, spec: Mapping[str, Any], network: str) -> Service:
    argv = _as_argv(spec.get("entrypoint"), f"{name}.entrypoint") + _as_argv(
        spec.get("command"), f"{name}.command"
    )
    if not argv:
        raise ComposeError(f"{name}: no command; the image default is not known here")
    env_spec = spec.get("environment") or {}
    if isinstance(env_spec, list):
        env_spec = dict(item.split("=", 1) for item in env_spec)
    environment = {str(k): str(v) for k, v in env_spec.items()}
    healthcheck = None
    if "healthcheck" in spec:
        test = _as_argv(spec["healthcheck"].get("test"), f"{name}.healthcheck.test")
        if not test or test[0] != "CMD":
            raise ComposeError(f"{name}.healthcheck.test: expected the exec form [CMD, ...]")
        healthcheck = test[1:]
    deps = spec.get("depends_on") or {}
    if isinstance(deps, list):
        deps = {d: {"condition": "service_started"} for d in deps}
    depends_on = {str(d): str(c.get("condition", "service_started")) for d, c in deps.items()}
    network_of = ""
    if "network_mode" in spec:
        mode = str(spec["network_mode"])
        if not mode.startswith("service:"):
            raise ComposeError(f"{name}.network_mode: only service:<name> is supported, not {mode}")
        network_of = mode.removeprefix("service:")
        refused = [key for key in NOT_WITH_NETWORK_MODE if key in spec]
        if refused:
            raise ComposeError(f"{name}: {', '.join(refused)} cannot be set with network_mode")
        # Compose adds this dependency itself: the namespace must exist before it is joined.
        depends_on.setdefault(network_of, "service_started")
    volumes = []
    for volume in spec.get("volumes") or []:
        if isinstance(volume, Mapping):
            if volume.get("type", "volume") != "volume":
                raise ComposeError(f"{name}.volumes: only named volumes are supported")
            subpath = str((volume.get("volume") or {}).get("subpath") or "").strip("/")
            source = str(volume["source"]) + (f"/{subpath}" if subpath else "")
            volumes.append((source, str(volume["target"])))
            continue
        source, target = str(volume).split(":")[:2]
        volumes.append((source, target))
    ip = ""
    if not network_of:
        try:
            ip = str(spec["networks"][network]["ipv4_address"])
        except (KeyError, TypeError) as exc:
            raise ComposeError(f"{name}: no ipv4_address on network {network}") from exc
    return Service(name, argv, environment, healthcheck, depends_on, volumes, ip, network_of)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def our_links() -> list[str]:
    names = []
    for line in ip("-o", "link", "show").stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0]
        if name.startswith(PREFIX):
            names.append(name)
    return names


def our_namespaces() -> list[str]:
    return [
        line.split()[0]
        for line in ip("netns", "list").stdout.splitlines()
        if line.split() and line.split()[0].startswith(PREFIX)
    ]


def namespace_pids(ns: str) -> list[int]:
    return [int(p) for p in ip("netns", "pids", ns, check=False).stdout.split()]


def session_pids(sid: int) -> list[int]:
    """The live processes of session `sid` (a service is started as a session leader)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def kill_until_gone(what: str, pids_of: Callable[[], list[int]], timeout: float = 5.0) -> None:
    """SIGKILL every process `pids_of()` lists until it lists none."""
    deadline = time.monotonic() + timeout
    while pids := pids_of():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} of {what} survive SIGKILL")
        time.sleep(0.05)


def kill_namespace_processes(ns: str, timeout: float = 5.0) -> None:
    """SIGKILL everything in `ns` and wait until it is gone."""
    kill_until_gone(ns, functools.partial(namespace_pids, ns), timeout)


@contextlib.contextmanager
def exclusive(timeout: float = 600.0) -> Iterator[None]:
    """Hold the machine-wide lock of the PREFIX names: the compose file fixes the addresses, so
    two runs (several people share a machine) must take turns, and a run may remove leftovers
    only while it holds the lock. flock is released by the kernel if its holder dies."""
    with open(LOCK_FILE, "a") as lock:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{LOCK_FILE} held by another run for {timeout}s") from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cleanup_leftovers() -> None:
    """Remove every namespace (and its processes), link and hosts directory named PREFIX*."""
    for ns in our_namespaces():
        kill_namespace_processes(ns)
        ip("netns", "delete", ns, check=False)
    for link in our_links():
        ip("link", "delete", link, check=False)
    if NETNS_ETC.is_dir():
        for entry in NETNS_ETC.glob(f"{PREFIX}*"):
            shutil.rmtree(entry, ignore_errors=True)


@dataclass
class Running:
    service: Service
    process: subprocess.Popen[bytes]
    ns: str
    log: Path


@dataclass
class ComposeHosts:
    """The compose project's services, each in its own network namespace (see module doc)."""

    project: ComposeProject
    work_dir: Path
    executables: Mapping[str, str]
    running: dict[str, Running] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)  # one-shot services that exited 0
    host_links: dict[str, str] = field(default_factory=dict)

    def namespace(self, service: str) -> str:
        """The network namespace the service runs in (its owner's, with network_mode)."""
        return f"{PREFIX}{self.project.owner(service).name}"

    def ip_of(self, service: str) -> str:
        """The service's address: its owner's, with network_mode."""
        return self.project.owner(service).ip

    def sharing(self, service: str) -> list[str]:
        """Every service that runs in the same network namespace as `service`."""
        owner = self.project.owner(service).name
        return [s for s in self.project.services if self.project.owner(s).name == owner]

    # -- network -------------------------------------------------------------------------------

    def create_network(self) -> None:
        prefix_len = self.project.subnet.prefixlen
        ip("link", "add", BRIDGE, "type", "bridge")
        # Bridged frames must not meet the host's iptables (br_netfilter, a Docker-style FORWARD
        # DROP): the compose network is a plain L2 segment.
        ip("link", "set", BRIDGE, "type", "bridge", "nf_call_iptables", "0", check=False)
        ip("addr", "add", f"{self.project.gateway}/{prefix_len}", "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")
        hosts = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        hosts += [f"{s.ip}\t{s.name}" for s in self.project.on_network()]
        for i, service in enumerate(self.project.on_network()):
            ns = self.namespace(service.name)
            host_end, ns_end = f"{PREFIX}v{i}", f"{PREFIX}p{i}"
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            ip("link", "set", ns_end, "netns", ns)
            ip("-n", ns, "link", "set", ns_end, "name", "eth0")
            ip("-n", ns, "addr", "add", f"{service.ip}/{prefix_len}", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("link", "set", host_end, "master", BRIDGE)
            ip("link", "set", host_end, "up")
            self.host_links[service.name] = host_end
            etc = NETNS_ETC / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("\n".join(hosts) + "\n")

    def set_link(self, service: str, up: bool) -> None:
        """Plug or unplug the service's cable at the switch (its veth's bridge end); with
        network_mode, the owner's, which every service in that namespace shares."""
        ip("link", "set", self.host_links[self.project.owner(service).name], "up" if up else "down")

    # -- processes -----------------------------------------------------------------------------

    def _local(self, service: Service, arg: str) -> str:
        """`arg` with the service's volume mount paths replaced by their local directories."""
        for source, target in service.volumes:
            directory = str(self.volume_dir(service, source))
            arg = re.sub(rf"(?<![\w/.-]){re.escape(target)}(?=$|/)", directory, arg)
        return arg

    def _map(self, service: Service, argv: list[str]) -> list[str]:
        exe = argv[0]
        if exe not in self.executables:
            raise ComposeError(f"{service.name}: no local stand-in for the image's {exe!r}")
        return [self.executables[exe], *(self._local(service, a) for a in argv[1:])]

    def volume_dir(self, service: Service, source: str) -> Path:
        # "certs/node-1" (a subpath mount) is the node-1 directory of the certs volume
        volume, _, subpath = source.partition("/")
        name = volume.strip("._") or "volume"
        directory = self.work_dir / "volumes" / name / subpath
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _env(self, service: Service) -> dict[str, str]:
        env = {
            "PATH": f"{Path(self.executables['python']).parent}:{BASE_PATH}",
            "HOME": str(self.service_dir(service.name)),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        # The image holds this checkout's code: run it, not whichever tree the venv's
        # editable install points at (tests/conftest.py sets PYTHONPATH to the checkout).
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        # paths in the environment (KUBECONFIG) name the mounts too
        env.update({k: self._local(service, v) for k, v in service.environment.items()})
        return env

    def service_dir(self, name: str) -> Path:
        directory = self.work_dir / "services" / name
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _mount_nested(self, service: Service) -> None:
        """A volume mounted inside another's path (the `certs` service's per-component volumes
        in its own) is seen there: that directory of the outer volume links to the inner one."""
        for source, target in service.volumes:
            for outer_source, outer_target in service.volumes:
                rel = os.path.relpath(target, outer_target)
                if target == outer_target or rel.startswith(".."):
                    continue
                link = self.volume_dir(service, outer_source) / rel
                if link.is_symlink():
                    continue
                if link.is_dir():
                    link.rmdir()  # made empty by volume_dir before the service started
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(self.volume_dir(service, source))

    def start(self, name: str) -> None:
        service = self.project.services[name]
        ns = self.namespace(name)
        self._mount_nested(service)
        log = self.work_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", ns, *self._map(service, service.argv)],
                cwd=self.service_dir(name),
                env=self._env(service),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running[name] = Running(service, process, ns, log)

    def exec(self, name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """`docker compose exec NAME ARGV...`: run in the service's namespace and environment."""
        service = self.project.services[name]
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace(name), *self._map(service, argv)],
            cwd=self.service_dir(name),
            env=self._env(service),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def healthy(self, name: str) -> bool:
        """Run the service's own healthcheck command inside its namespace, as Docker would."""
        service = self.project.services[name]
        if service.healthcheck is None:
            raise ComposeError(f"{name} has no healthcheck")
        done = subprocess.run(
            ["ip", "netns", "exec", self.namespace(name), *self._map(service, service.healthcheck)],
            cwd=self.service_dir(name),
            env=self._env(service),
            capture_output=True,
            timeout=30,
        )
        return done.returncode == 0

    def wait(self, what: str, ok: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            for name, run in self.running.items():
                one_shot_done = run.process.poll() == 0 and run.service.healthcheck is None
                if run.process.poll() is not None and not one_shot_done:
                    raise RuntimeError(
                        f"{name} exited with {run.process.returncode} while waiting for {what}:\n"
                        + self.log_tail(name)
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not reached after {timeout}s")
            time.sleep(0.25)

    def up(self, timeout: float = 120.0) -> None:
        """`docker compose up --wait`: start in dependency order, then wait for every health."""
        for name in self.project.start_order():
            for dep, condition in self.project.services[name].depends_on.items():
                if condition == "service_healthy":
                    self.wait(f"{dep} healthy", functools.partial(self.healthy, dep), timeout)
                elif condition == "service_completed_successfully":
                    self.wait_completed(dep, timeout)
                elif condition != "service_started":
                    raise ComposeError(f"{name}: depends_on condition {condition} not supported")
            self.start(name)
        for name, service in self.project.services.items():
            if service.healthcheck is not None:
                self.wait(f"{name} healthy", functools.partial(self.healthy, name), timeout)

    def wait_completed(self, name: str, timeout: float) -> None:
        """A one-shot service ran to its end with status 0 (then it is no longer running)."""
        if name in self.completed:
            return
        run = self.running.pop(name)
        try:
            code = run.process.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"{name} still running after {timeout}s") from exc
        if code != 0:
            raise RuntimeError(f"{name} exited with {code}:\n{self.log_tail(name)}")
        self.completed.add(name)

    def stop(self, name: str) -> None:
        run = self.running.pop(name, None)
        if run is not None and run.process.poll() is None:
            run.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.process.wait(STOP_GRACE)
        if self.project.services[name].network_of:
            # Its "container" is its own processes: the namespace's owner (and the owner's pods)
            # are another container and stay.
            if run is not None:
                kill_until_gone(name, functools.partial(session_pids, run.process.pid))
        else:
            kill_namespace_processes(self.namespace(name))
        if run is not None and run.process.poll() is None:
            run.process.kill()
        if run is not None:
            run.process.wait()

    def down(self) -> None:
        """Stop services (dependents first), then remove namespaces, links and hosts files."""
        errors: list[BaseException] = []
        for name in reversed(self.project.start_order()):
            try:
                self.stop(name)
            except Exception as exc:
                errors.append(exc)
        cleanup_leftovers()
        if errors:
            raise errors[0]

    def log_tail(self, name: str, lines: int = 30) -> str:
        log = self.work_dir / "logs" / f"{name}.log"
        if not log.exists():
            return "(no log)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
