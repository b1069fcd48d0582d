"""LocalCluster with real processes: start, health, kill -9 and restart, clean stop, no orphans."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import tinykube_command
from tinykube.client import Client
from tinykube.health import check_sync
from tinykube.launcher import ComponentError, LocalCluster, descendants, has_main
from tinykube.v1 import pod_pb2

pytestmark = pytest.mark.e2e


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

    assert all(p.poll() is not None for p in cluster.processes.values())
    assert not any(alive(pid) for pid in containers), "stop must kill orphaned containers"


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
    assert done.stderr.startswith(
        f"error: apiserver did not become healthy on 127.0.0.1:{port}: exited with code"
    )
    assert "Failed to bind to address" in done.stderr  # the tail of the apiserver's log
    assert "Traceback" not in done.stderr.split("---", 1)[0]
