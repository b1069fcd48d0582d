"""A private Docker engine for one test run: Debian's docker.io, started by hand, removed after.

`ensure_installed()` installs Debian's `docker.io` (Docker Engine 20.10 with Debian's
containerd and runc) and `mmdebstrap` with apt when they are missing, refusing when a
containerd or runc that no Debian package owns is on PATH (docker.io would run beside it).
`DockerEngine` runs `dockerd` with everything of its own under one temporary directory: data
root, exec root (its containerd's state and socket), pidfile and API socket
(`-H unix://<dir>/docker.sock`), so it never meets a system engine. It changes nothing of the
host's networking that outlives it:

- `--bridge=none`: no default bridge (docker0); the compose project's network is a user-defined
  bridge that `docker compose down` removes;
- `--iptables=false --ip-forward=false --ip-masq=false`: no iptables/nftables rules and no
  `net.ipv4.ip_forward` change. Nothing here leaves the machine (containers talk over their
  bridge, and images build with `--network=host`), and the ports compose publishes on
  127.0.0.1 are served by Docker's userland proxy (`docker-proxy`), which is what serves a
  loopback-published port with `--iptables=true` too (Docker's DNAT rules skip 127.0.0.0/8).

Its containers get a fair share of a loaded machine: on cgroup v1 every container's cgroup lies
under Docker's parent `/docker`, which competes for CPU as one task of the root cgroup (1024
shares), where the host's own processes each count as one. With forty runnable processes on the
host (other work on a shared 2-core machine), the dozen containers of the compose cluster got
about a fortieth of the CPU, and no health check of theirs finished within Docker's 4 s.
`start()` gives `/docker` the shares of `CONTAINER_TASKS` processes and `stop()` restores them
(or removes the parent it made).

`stop()` ends the daemon by its PID (SIGTERM, SIGKILL after a grace period), then anything
still running from its directory (its containerd, shims), unmounts what is left under the
directory, deletes Docker's links (br-*, veth*) and iptables rules and chains (DOCKER*)
added since it started (none with the flags above, but a daemon run otherwise leaves them),
and the directory. `changes()` says which of Docker's things differ from before it started;
`sysctl_changes()` which of the forwarding sysctls did: dockerd never writes them with
`--ip-forward=false`, so a change there is other work's on a shared machine (a CNI test sets
ip_forward too) and is reported, not undone. `cleanup_leftovers()` does the same for
the directories of a run that was killed before it could.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "tkdocker-"
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSCTLS = (
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/bridge/bridge-nf-call-iptables",
    "/proc/sys/net/bridge/bridge-nf-call-ip6tables",
)
# Docker's cgroup parent for the cpu controller (cgroup v1, the cgroupfs driver), and how many
# host processes' worth of CPU shares it gets while the engine runs (the compose cluster runs
# about this many containers).
DOCKER_CPU_CGROUP = Path("/sys/fs/cgroup/cpu/docker")
CONTAINER_TASKS = 16
PACKAGES = ("docker.io", "mmdebstrap")
TOOLS = ("dockerd", "docker-proxy", "docker", "mmdebstrap")


class EngineError(RuntimeError):
    pass


def host_path() -> str:
    """PATH with the sbin directories (dockerd, docker-proxy, runc) whatever the caller's."""
    return f"{os.environ.get('PATH', '')}:{SBIN_PATH}"


def which(tool: str) -> str | None:
    return shutil.which(tool, path=host_path())


def missing_tools() -> list[str]:
    return [t for t in TOOLS if which(t) is None]


def _foreign(tool: str) -> str | None:
    """`tool`'s path when it is on PATH but no Debian package owns it."""
    path = which(tool)
    if path is None:
        return None
    owned = subprocess.run(
        ["dpkg-query", "-S", os.path.realpath(path)], capture_output=True, text=True, check=False
    )
    return None if owned.returncode == 0 else path


def ensure_installed() -> list[str]:
    """Install docker.io and mmdebstrap with apt if a tool is missing; the commands run."""
    if not missing_tools():
        return []
    if which("apt-get") is None:
        raise EngineError(f"{', '.join(missing_tools())} missing and no apt-get to install them")
    for tool in ("containerd", "runc"):
        foreign = _foreign(tool)
        if foreign:
            raise EngineError(
                f"refusing to install docker.io: {foreign} belongs to no Debian package "
                "(another containerd/runc install); install Docker yourself"
            )
    env = {**os.environ, "PATH": host_path(), "DEBIAN_FRONTEND": "noninteractive"}
    commands = [
        ["apt-get", "update", "-qq"],
        [
            "apt-get",
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "-o",
            "DPkg::Lock::Timeout=300",
            *PACKAGES,
        ],
    ]
    for argv in commands:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise EngineError(
                f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}"
            )
    if missing_tools():
        raise EngineError(f"still missing after apt-get install: {', '.join(missing_tools())}")
    return [" ".join(argv) for argv in commands]


# The links Docker makes: a network's bridge, the default bridge, a container's host-side veth.
# Only those are ever deleted or reported: other work on the machine makes links of its own.
DOCKER_LINK = re.compile(r"br-[0-9a-f]{12}|docker0|veth[0-9a-f]{7}")


def _links() -> set[str]:
    done = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    names = {line.split(":")[1].strip().split("@")[0] for line in done.stdout.splitlines()}
    return {name for name in names if DOCKER_LINK.fullmatch(name)}


def _docker_rules() -> list[tuple[str, str]]:
    """(table, iptables-save line) of Docker's chains and rules, in every table of iptables
    (nf_tables backend on Debian 12): those naming a DOCKER* chain or a Docker bridge."""
    save = which("iptables-save")
    if save is None:
        return []
    out = subprocess.run([save], capture_output=True, text=True, check=False).stdout
    table, found = "", []
    for line in out.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith((":", "-A")) and re.search(r"DOCKER|\bbr-[0-9a-f]{12}\b", line):
            found.append((table, line))
    return found


def _remove_rules(rules: list[tuple[str, str]]) -> None:
    """Delete the rules, then flush and delete the chains, of `rules` (from _docker_rules)."""
    iptables = which("iptables") or "iptables"
    for table, line in rules:
        if line.startswith("-A"):
            argv = [iptables, "-t", table, "-D", *shlex.split(line)[1:]]
            subprocess.run(argv, capture_output=True, check=False)
    for table, line in rules:
        if line.startswith(":"):
            chain = line[1:].split()[0]
            for op in ("-F", "-X"):
                subprocess.run([iptables, "-t", table, op, chain], capture_output=True, check=False)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _pids_under(directory: Path) -> list[int]:
    """Processes whose command line names `directory` (the daemon, its containerd, shims)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(directory).encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _mounts_under(directory: Path) -> list[str]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(directory) or point.startswith(f"{directory}/"):
            mounts.append(point)
    return mounts


def remove_directory(directory: Path, grace: float = 20.0) -> None:
    """Stop everything still running from `directory`, unmount under it, delete it."""
    pids = _pids_under(directory)
    _kill(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _pids_under(directory) and time.monotonic() < deadline:
        time.sleep(0.2)
    _kill(_pids_under(directory), signal.SIGKILL)
    for point in sorted(_mounts_under(directory), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    shutil.rmtree(directory, ignore_errors=True)


def cleanup_leftovers() -> list[Path]:
    """Remove the directories (and daemons) of earlier runs that did not stop their engine."""
    left = sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*"))
    for directory in left:
        remove_directory(directory, grace=5.0)
    return left


@dataclass
class DockerEngine:
    """dockerd with a data root, exec root, pidfile and socket of its own (see module doc)."""

    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix=PREFIX)))
    process: subprocess.Popen[bytes] | None = None
    links_before: set[str] = field(default_factory=set)
    rules_before: list[tuple[str, str]] = field(default_factory=list)
    sysctls_before: dict[str, str | None] = field(default_factory=dict)
    # /docker's cpu.shares before start ("" when start made the cgroup; None: not touched)
    cpu_shares_before: str | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.directory}/docker.sock"

    @property
    def log(self) -> Path:
        return self.directory / "dockerd.log"

    def env(self) -> dict[str, str]:
        """The environment for docker, compose and make: this engine, the legacy builder."""
        return {**os.environ, "PATH": host_path(), "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "0"}

    def argv(self) -> list[str]:
        d = self.directory
        return [
            str(which("dockerd")),
            f"--data-root={d}/data",
            f"--exec-root={d}/exec",
            f"--pidfile={d}/docker.pid",
            f"--host={self.host}",
            "--bridge=none",
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
        ]

    def start(self, timeout: float = 60.0) -> None:
        self.links_before = _links()
        self.rules_before = _docker_rules()
        self.sysctls_before = {path: _read(path) for path in SYSCTLS}
        self._weigh_containers()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.argv(),
                env={**os.environ, "PATH": host_path()},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(f"dockerd exited {self.process.returncode}:\n{self.log_tail()}")
            if self.server_version():
                return
            time.sleep(0.3)
        raise EngineError(f"dockerd not answering after {timeout}s:\n{self.log_tail()}")

    def _weigh_containers(self) -> None:
        """/docker's cpu.shares as CONTAINER_TASKS root-cgroup processes (see module doc)."""
        if not DOCKER_CPU_CGROUP.parent.is_dir():  # cgroup v2, or no cpu controller
            return
        made = not DOCKER_CPU_CGROUP.exists()
        DOCKER_CPU_CGROUP.mkdir(exist_ok=True)
        shares = DOCKER_CPU_CGROUP / "cpu.shares"
        self.cpu_shares_before = "" if made else shares.read_text().strip()
        shares.write_text(f"{1024 * CONTAINER_TASKS}\n")

    def _unweigh_containers(self) -> None:
        if self.cpu_shares_before is None:
            return
        if self.cpu_shares_before:
            (DOCKER_CPU_CGROUP / "cpu.shares").write_text(f"{self.cpu_shares_before}\n")
        else:
            with contextlib.suppress(OSError):  # still holding a container's: left to Docker
                DOCKER_CPU_CGROUP.rmdir()
        self.cpu_shares_before = None

    def server_version(self) -> str:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 30.0) -> None:
        """dockerd by its PID, then whatever is left of it; its links, rules, directory."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                print(f"dockerd still running {grace:.0f}s after SIGTERM:\n{self.log_tail(10)}")
                self.process.kill()
                self.process.wait(timeout=10)
        remove_directory(self.directory)
        self._unweigh_containers()
        for link in _links() - self.links_before:
            subprocess.run(["ip", "link", "delete", link], capture_output=True, check=False)
        _remove_rules([r for r in _docker_rules() if r not in self.rules_before])

    def changes(self) -> list[str]:
        """Docker's things on the host that were not there before start(): links, iptables
        rules and chains, its directory, its processes."""
        found = [f"link {link} added" for link in sorted(_links() - self.links_before)]
        found += [
            f"iptables -t {t}: {line}"
            for t, line in _docker_rules()
            if (t, line) not in self.rules_before
        ]
        if self.directory.exists():
            found.append(f"{self.directory} left")
        if _pids_under(self.directory):
            found.append(f"processes of {self.directory} left")
        return found

    def sysctl_changes(self) -> list[str]:
        return [
            f"{path}: {value} -> {_read(path)}"
            for path, value in self.sysctls_before.items()
            if _read(path) != value
        ]
