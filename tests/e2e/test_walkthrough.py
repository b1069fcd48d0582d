"""`tinykube up` in a subprocess, then tinykube's own CLI against it.

The grpcurl walkthrough that used to be checked here lives in docs/grpcurl.md now;
tests/e2e/test_docs_commands.py runs it with every other page's commands.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import UpCluster, tinykube_command

pytestmark = pytest.mark.e2e

MANIFEST = """\
apiVersion: v1
kind: Pod
metadata:
  name: e2e-hello
  labels: {app: e2e}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: hello
    image: busybox
    command: [sleep, "300"]
    resources:
      requests: {cpu: 50m, memory: 16Mi}
"""


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def pod_json(cluster: UpCluster, name: str) -> dict[str, object]:
    result = cluster.cli("get", "pod", name, "-o", "json")
    assert result.code == 0, result.err
    data: dict[str, object] = json.loads(result.out)
    return data


def test_cli_against_tinykube_up(tinykube_up: UpCluster, tmp_path: Path) -> None:
    cluster = tinykube_up
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(MANIFEST)

    result = cluster.cli("apply", "-f", str(manifest))
    assert (result.code, result.out) == (0, "pod/e2e-hello created\n"), result.err
    result = cluster.cli("apply", "-f", "-", stdin=MANIFEST)
    assert result.out == "pod/e2e-hello unchanged\n", result.err
    result = cluster.cli("apply", "-f", "-", stdin=MANIFEST.replace("app: e2e", "app: e2e2"))
    assert result.out == "pod/e2e-hello configured\n", result.err
    assert pod_json(cluster, "e2e-hello")["metadata"]["labels"] == {"app": "e2e2"}  # type: ignore[index]

    result = cluster.cli("get", "pods", "-l", "app=e2e2")
    assert result.code == 0
    header, *rows = result.out.splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [r.split()[0] for r in rows] == ["e2e-hello"]

    if cluster.has("scheduler"):
        wait_for(
            lambda: pod_json(cluster, "e2e-hello")["spec"].get("nodeName"),  # type: ignore[attr-defined]
            60,
            "the scheduler to bind e2e-hello",
        )
    if cluster.has("kubelet"):
        nodes = cluster.cli("get", "nodes")
        assert {"node-1", "node-2"} <= {line.split()[0] for line in nodes.out.splitlines()[1:]}
        wait_for(
            lambda: pod_json(cluster, "e2e-hello")["status"].get("phase") == "Running",  # type: ignore[attr-defined]
            60,
            "e2e-hello to run",
        )
        result = cluster.cli("get", "pod", "e2e-hello", "-o", "wide")
        assert result.out.splitlines()[1].split()[1:3] == ["1/1", "Running"]

    described = cluster.cli("describe", "pod", "e2e-hello")
    assert described.code == 0, described.err
    lines = described.out.splitlines()
    assert lines[0].split() == ["Name:", "e2e-hello"]
    assert "Labels:           app=e2e2" in lines
    assert "      cpu:      50m" in lines
    assert any(line.startswith("Events:") for line in lines)
    if cluster.has("scheduler"):
        assert ["PodScheduled", "True"] in [line.split() for line in lines]
        assert "Successfully assigned default/e2e-hello to node-" in described.out

    result = cluster.cli("get", "pod", "no-such-pod")
    assert result.code == 1
    assert result.err == 'Error from server (NotFound): pods "no-such-pod" not found\n'

    # Without a kubelet, a bound pod would wait for one forever: delete it at once then.
    grace = [] if cluster.has("kubelet") else ["--grace-period", "0"]
    result = cluster.cli("delete", "pod", "e2e-hello", "--wait", "--timeout", "60", *grace)
    assert (result.code, result.out) == (0, 'pod "e2e-hello" deleted\n'), result.err
    result = cluster.cli("get", "pods", "-l", "app=e2e2")
    assert (result.out, result.err) == ("", "No resources found in default namespace.\n")


def test_health_command(tinykube_up: UpCluster) -> None:
    for name, address in tinykube_up.endpoints.items():
        if name == "etcd":
            continue
        result = tinykube_up.cli("health", address)
        assert (result.code, result.out) == (0, "SERVING\n"), name
    # Nothing listens there: the probe fails and says how.
    result = tinykube_up.cli("health", "127.0.0.1:1", "--timeout", "1")
    assert (result.code, result.out) == (1, "UNAVAILABLE\n")


def test_get_watch_prints_changes(tinykube_up: UpCluster) -> None:
    """`get pods -w` prints the current table, then a row per change, until interrupted."""
    watch = subprocess.Popen(
        [*tinykube_command(), "--server", tinykube_up.api, "get", "pods", "-w", "-l", "app=w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert watch.stdout is not None
        header = watch.stdout.readline()
        assert header.split()[:2] == ["NAME", "READY"]
        pod = MANIFEST.replace("e2e-hello", "watched").replace("app: e2e", "app: w")
        created = tinykube_up.cli("apply", "-f", "-", stdin=pod)
        assert created.out == "pod/watched created\n", created.err
        row = watch.stdout.readline()
        assert row.split()[0] == "watched"
    finally:
        interrupted = time.monotonic()
        watch.send_signal(signal.SIGINT)
        watch.wait(10)
        exited = time.monotonic() - interrupted
        tinykube_up.cli("delete", "pod", "watched", "--grace-period", "0", "--ignore-not-found")
    assert watch.returncode == 130
    # Ctrl-C gives the prompt back at once, on a busy machine too (it once took over 10 s).
    assert exited < 1.0
