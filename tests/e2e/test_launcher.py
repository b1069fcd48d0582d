"""LocalCluster with real processes: start, health, kill -9 and restart, clean stop, no orphans,
and the supervisor that starts again what exits on its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from tests.e2e.conftest import READY_LINE, processes_in, pump, tinykube_command
from tinykube.client import Client
from tinykube.health import check_sync, wait_healthy
from tinykube.launcher import (
    ComponentError,
    Exited,
    LocalCluster,
    Restarted,
    descendants,
    has_main,
)
from tinykube.v1 import pod_pb2

pytestmark = pytest.mark.e2e

T = TypeVar("T")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def run_bound_pod(address: str, node: str) -> None:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = "sleeper"
    pod.metadata.namespace = "default"
    pod.spec.nodeName = node
    pod.spec.containers.add(name="c", image="busybox", command=["sleep", "300"])
    # No controller manager runs here, so nothing publishes the kube-root-ca.crt ConfigMap the
    # kube-api-access volume projects: the pod would wait for it, as in Kubernetes.
    pod.spec.automountServiceAccountToken = False
    async with Client(address) as client:
        await client.pods.create(pod)
        for _ in range(300):
            if (await client.pods.get("sleeper", "default")).status.phase == "Running":
                return
            await asyncio.sleep(0.1)
    pytest.fail("the kubelet never ran the pod")


def test_kill_restart_and_stop_leave_no_orphans(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, scheduler=False, controller=False, kubelets=["n1"])
    if not has_main("kubelet"):
        pytest.skip("no kubelet yet")
    with cluster:
        assert set(cluster.processes) == {"etcd", "apiserver", "kubelet-n1"}
        for name in ("apiserver", "kubelet-n1"):
            assert check_sync(cluster.address(name))
        assert (tmp_path / "logs" / "apiserver.log").stat().st_size > 0

        asyncio.run(run_bound_pod(cluster.api_address, "n1"))
        kubelet = cluster.processes["kubelet-n1"]
        containers = descendants(kubelet.pid)
        assert containers, "the pod's container should be a descendant of its kubelet"

        # A crash: the kubelet dies, its container lives on (as in Kubernetes).
        cluster.kill("n1", signal.SIGKILL)
        assert kubelet.returncode == -signal.SIGKILL
        assert any(alive(pid) for pid in containers)

        cluster.restart("n1")
        assert cluster.processes["kubelet-n1"].pid != kubelet.pid
        assert check_sync(cluster.address("kubelet-n1"))
        # Killed and restarted on purpose: nothing for the supervisor to see or undo.
        assert cluster.events == []

    assert all(p.poll() is not None for p in cluster.processes.values())
    assert not any(alive(pid) for pid in containers), "stop must kill orphaned containers"


async def create_and_list(cluster: LocalCluster, name: str) -> list[str]:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name, pod.metadata.namespace = name, "default"
    pod.spec.containers.add(name="c", image="busybox")
    async with Client(cluster.api_address, credentials=cluster.credentials) as client:
        await client.pods.create(pod)
        return sorted(p.metadata.name for p in (await client.pods.list("default")).items)


def test_the_apiserver_reaches_its_etcd_over_the_socket(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, scheduler=False, controller=False, kubelets=[], etcd_socket=True
    )
    with cluster:
        assert cluster.etcd is not None
        path = cluster.etcd.socket_path
        assert path == str(tmp_path / "etcd" / f"localhost:{cluster.etcd.client_port}")
        argv = Path(f"/proc/{cluster.processes['apiserver'].pid}/cmdline").read_bytes()
        # TLS and etcd's client-certificate check on the socket, as on TCP
        assert f"unixs://{path}".encode() in argv.split(b"\0")
        assert asyncio.run(create_and_list(cluster, "a")) == ["a"]
        cluster.restart("etcd")  # a new socket at the same path
        assert asyncio.run(create_and_list(cluster, "b")) == ["a", "b"]
    assert not os.path.exists(path)


class Clock:
    """Monotonic time the test moves forward: back-off delays pass without waiting them out."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def wait_for(probe: Callable[[], T | None], what: str, limit: float = 60.0) -> T:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        found = probe()
        if found is not None and found is not False:
            return found
        time.sleep(0.05)
    pytest.fail(f"no {what} within {limit}s")


def crash_and_recover(cluster: LocalCluster, clock: Clock, name: str) -> Exited:
    """SIGKILL `name` from outside the launcher (as the OOM killer would); once the supervisor
    has seen the exit, let its back-off pass and wait until the new process is SERVING."""
    victim = cluster.processes[name]
    seen = len(cluster.events)
    os.killpg(victim.pid, signal.SIGKILL)

    def exit_seen() -> Exited | None:
        return next((e for e in cluster.events[seen:] if isinstance(e, Exited)), None)

    exited = wait_for(exit_seen, f"exit of {name} seen by the supervisor")
    assert exited.restart_in is not None
    clock.offset += exited.restart_in
    wait_for(lambda: cluster.processes[name] is not victim, f"restart of {name}")
    restarted = cluster.processes[name]
    if name == "etcd":
        assert cluster.etcd is not None
        cluster.etcd.wait_healthy(60)
    else:
        wait_healthy(
            cluster.address(name),
            60,
            alive=lambda: restarted.poll() is None,
            credentials=cluster.credentials,
        )
    return exited


def test_a_component_that_dies_on_its_own_is_restarted_with_the_kubelets_backoff(
    tmp_path: Path,
) -> None:
    clock = Clock()
    cluster = LocalCluster(tmp_path, controller=False, kubelets=[], clock=clock)
    with cluster:
        first = cluster.processes["scheduler"]
        exits = [crash_and_recover(cluster, clock, "scheduler") for _ in range(3)]
        assert [(e.name, e.code, e.restart_in, e.restarts) for e in exits] == [
            ("scheduler", -signal.SIGKILL, 10, 0),
            ("scheduler", -signal.SIGKILL, 20, 1),
            ("scheduler", -signal.SIGKILL, 40, 2),
        ]
        assert cluster.restarts == {"scheduler": 3}
        restarts = [e for e in cluster.events if isinstance(e, Restarted)]
        assert [(e.name, e.restarts) for e in restarts] == [("scheduler", n) for n in (1, 2, 3)]
        assert restarts[-1].pid == cluster.processes["scheduler"].pid != first.pid
        log_text = cluster.log_path("scheduler").read_text()
        assert log_text.count(" starting scheduler\n") == 4
        assert (
            f" scheduler exited with code -9 (SIGKILL); restarting it in 20s; "
            f"see {cluster.log_path('scheduler')}\n" in log_text
        )

        # Ten minutes of running since its last start: the back-off starts over.
        clock.offset += 600
        assert crash_and_recover(cluster, clock, "scheduler").restart_in == 10

        # Killed through the launcher, on purpose: it stays down, however long.
        seen = len(cluster.events)
        cluster.kill("scheduler", signal.SIGKILL)
        clock.offset += 3600
        cluster.supervise_once()
        cluster.supervise_once()
        assert not cluster.components["scheduler"].running()
        assert cluster.events[seen:] == []

        # A start that fails (bad flags) is the owner's to see, not the supervisor's to retry.
        with pytest.raises(ComponentError, match="unrecognized arguments: --no-such-flag"):
            cluster.start_component("scheduler-2", ["--no-such-flag"])
        clock.offset += 3600
        cluster.supervise_once()
        cluster.supervise_once()
        assert cluster.processes["scheduler-2"].poll() == 2
        assert cluster.events[seen:] == []

        # Started again on purpose: supervised again, its back-off from the start.
        cluster.start_component("scheduler")
        assert crash_and_recover(cluster, clock, "scheduler").restart_in == 10

        # etcd too (the kubelet restarts kube's etcd static pod), from its data dir.
        assert crash_and_recover(cluster, clock, "etcd").restart_in == 10
        assert cluster.restarts == {"scheduler": 5, "etcd": 1}  # never scheduler-2
        wait_healthy(cluster.api_address, 60, credentials=cluster.credentials)


def test_failed_start_reports_the_log_and_stops_everything(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path,
        scheduler=False,
        controller=False,
        kubelets=[],
        extra_args={"apiserver": ["--no-such-flag"]},
        start_timeout=30,
    )
    with pytest.raises(ComponentError) as info:
        cluster.start()
    message = str(info.value)
    assert message.startswith("apiserver did not become healthy")
    assert "unrecognized arguments: --no-such-flag" in message
    etcd = cluster.processes["etcd"]
    assert etcd.poll() is not None, "etcd must be stopped when start fails"
    assert not alive(etcd.pid)
    assert os.listdir(tmp_path / "logs")


def test_up_reports_a_busy_port_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        flags = ["--free-ports", "--apiserver-port", str(port), "--data-dir", str(tmp_path)]
        done = subprocess.run(
            [*tinykube_command(), "up", *flags, "--kubelets", "0", "--start-timeout", "30"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    # Refused before anything started: no etcd, no component, no log.
    assert done.stderr == (
        f"error: port 127.0.0.1:{port} (apiserver) is not free: Address already in use; "
        "is another cluster running? stop it, or pick other ports (--free-ports, --*-port)\n"
    )
    assert not (tmp_path / "logs" / "etcd.log").exists()
    assert not (tmp_path / "logs" / "apiserver.log").exists()


def start_up(data_dir: Path, *flags: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """`tinykube up` (one fake kubelet) running until READY_LINE; its endpoints."""
    process = subprocess.Popen(
        [*tinykube_command(), "up", "--free-ports", "--data-dir", str(data_dir), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    output = []
    for line in process.stdout:
        output.append(line)
        if line.rstrip("\n") == READY_LINE:
            break
    else:
        pytest.fail(f"tinykube up exited with {process.wait()}:\n{''.join(output)}")
    return process, json.loads((data_dir / "endpoints.json").read_text())


def test_second_up_is_refused_and_components_die_with_up(tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first, endpoints = start_up(first_dir, "--kubelets", "1", "--kubelet-runtime", "fake")
    try:
        logs_before = {p.name: p.read_bytes() for p in (first_dir / "logs").iterdir()}
        # The same data directory: refused by the lock, naming the running cluster.
        same_dir = subprocess.run(
            [*tinykube_command(), "up", "--free-ports", "--data-dir", str(first_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert same_dir.returncode == 1, same_dir.stdout + same_dir.stderr
        assert same_dir.stderr == (
            f"error: a tinykube cluster is already running in {first_dir} (pid {first.pid}, "
            f"apiserver {endpoints['apiserver']}); stop it (Ctrl-C where it runs) or use "
            "another --data-dir\n"
        )
        # Another directory on the first cluster's ports: refused by the port check.
        rest = yaml.safe_load((first_dir / "kubeconfig").read_text())["clusters"][0]
        taken_ports = [
            ("--apiserver-port", endpoints["apiserver"], "apiserver"),
            ("--rest-port", rest["cluster"]["server"].split("://", 1)[-1], "REST"),
            ("--kubelet-port", endpoints["kubelet-node-1"], "kubelet-node-1"),
        ]
        for flag, address, what in taken_ports:
            port = address.rsplit(":", 1)[1]
            args = ["up", "--free-ports", "--data-dir", str(second_dir), flag, port]
            taken = subprocess.run(
                [*tinykube_command(), *args, "--kubelets", "1"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert taken.returncode == 1, taken.stdout + taken.stderr
            what = "apiserver's REST API" if what == "REST" else what
            assert taken.stderr.startswith(f"error: port {address} ({what}) is not free: ")
        assert not (second_dir / "logs" / "apiserver.log").exists()
        # The first cluster's components go on logging (a leader election, a slow start on a
        # busy machine); what the refused `up`s must not do is truncate, rewrite or add a log.
        logs_after = {p.name: p.read_bytes() for p in (first_dir / "logs").iterdir()}
        assert logs_after.keys() == logs_before.keys()
        for name, before in logs_before.items():
            assert logs_after[name].startswith(before), f"a refused `up` rewrote logs/{name}"

        # SIGKILL of `up`: the kernel's parent-death signal stops every component.
        components = processes_in(first_dir)
        assert len(components) >= 5  # etcd, apiserver, scheduler, controller, kubelet, proxy
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 30
        while processes_in(first_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_in(first_dir) == [], "components outlived a SIGKILLed tinykube up"
        # The lock died with its holder: the directory can be used again at once.
        again, _ = start_up(first_dir, "--kubelets", "0")
        again.send_signal(signal.SIGINT)
        assert again.wait(60) == 0
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGINT)
            first.wait(60)


def component_pid(data_dir: Path, module: str) -> int:
    """The pid of `python -m <module>` among the processes working in `data_dir`."""
    for pid in processes_in(data_dir):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[1:3] == [b"-m", module.encode()]:
                return pid
    pytest.fail(f"no {module} process in {data_dir}")


def test_up_restarts_a_component_that_dies_and_says_so(tmp_path: Path) -> None:
    process, _ = start_up(tmp_path, "--kubelets", "0")
    try:
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=pump, args=(process.stdout, lines), daemon=True).start()
        scheduler = component_pid(tmp_path, "scheduler")
        os.kill(scheduler, signal.SIGKILL)
        log_file = tmp_path.resolve() / "logs" / "scheduler.log"
        expected = [
            f"warning: scheduler exited with code -9 (SIGKILL); restarting it in 10s; "
            f"see {log_file}",
            "scheduler restarted (pid ",
        ]
        deadline = time.monotonic() + 60
        output: list[str] = []
        while expected and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            assert line is not None, "tinykube up exited:\n" + "\n".join(output)
            output.append(line)
            if line.startswith(expected[0]):
                expected.pop(0)
        assert not expected, f"up did not say {expected[0]!r}:\n" + "\n".join(output)
        assert component_pid(tmp_path, "scheduler") != scheduler
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
