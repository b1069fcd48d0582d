"""Pods as real containers: a kubelet with `--container-runtime-endpoint` over a private
containerd, driven with the real kubectl.

Needs root and Debian's containerd, runc, containernetworking-plugins and busybox-static; as root
they are installed with apt when missing. Without them the module is skipped, saying why, except
under CI=true, where that is a failure. Images are built locally (tinykube/containerd.py
`oci_image`, busybox-static inside) and imported with `ctr`.

The machine is left as found: pods' sandboxes removed, containerd stopped by its PID and its
mounts unmounted, the bridge deleted, CNI's iptables chains removed, net.ipv4.ip_forward restored,
the kubelet's cgroups removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubelet.podstartup import parse_line
from tests.e2e.conftest import tinykube_command, venv_bin
from tests.e2e.crisupport import cri_prerequisites
from tests.e2e.waiting import eventually
from tinykube.containerd import (
    Containerd,
    Registry,
    iptables_chains,
    nft_all_tables,
    oci_image,
    push_image,
    remove_cgroups,
    remove_chains,
    remove_new_empty_iptables_tables,
)
from tinykube.cri.v1 import cri_pb2 as cri
from tinykube.cri.v1 import cri_pb2_grpc as cri_grpc
from tinykube.launcher import LocalCluster, has_main

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

NODE = "node-1"
CLUSTER_CIDR = "10.244.0.0/16"
BRIDGE = "tkcni1"
CGROUP_ROOT = "/tinykube-e2e"
WEB = "tinykube.local/web:1"
FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


METRICS_PORT = _free_port()


@pytest.fixture(scope="module")
def containerd(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Containerd]:
    cri_prerequisites()
    # A module reusing these fixtures names its own bridge and cgroup root (module constants
    # BRIDGE, CGROUP_ROOT), so that it may run beside this one.
    bridge = getattr(request.module, "BRIDGE", BRIDGE)
    cgroup_root = getattr(request.module, "CGROUP_ROOT", CGROUP_ROOT)
    forward = FORWARD.read_text().strip()
    chains = iptables_chains()
    tables = nft_all_tables()
    had_bridge = Path(f"/sys/class/net/{bridge}").exists()
    assert not had_bridge, f"bridge {bridge} already exists on this machine"
    ctd = Containerd(tmp_path_factory.mktemp("containerd"))
    try:
        ctd.start()
        ctd.ensure_pause_image()
        archive = ctd.paths.base / "web.tar"
        archive.write_bytes(oci_image(WEB, ["/bin/sh", "-c", "while true; do sleep 1; done"]))
        ctd.import_image(archive)
        yield ctd
    finally:
        with contextlib.suppress(Exception):
            ctd.remove_all_pods()
        ctd.stop()
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
        remove_chains(iptables_chains() - chains)
        remove_new_empty_iptables_tables(tables)
        if FORWARD.read_text().strip() != forward:
            FORWARD.write_text(forward)
        remove_cgroups(cgroup_root)
    # What the cleanup could not undo fails the module's last test.
    left = [f"chain {c}" for c in iptables_chains() - chains]
    left += [f"nft table {f} {t}" for f, t in nft_all_tables() - tables]
    left += [f"bridge {bridge}"] if Path(f"/sys/class/net/{bridge}").exists() else []
    left += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{cgroup_root.lstrip('/')}")]
    with open("/proc/self/mountinfo") as f:
        left += [m.split()[4] for m in f if str(ctd.paths.base) in m]
    assert not left, f"left on the machine: {left}"


@pytest.fixture(scope="module")
def registry(
    containerd: Containerd, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """The CNCF distribution registry (Debian's docker-registry) on 127.0.0.1."""
    if shutil.which("docker-registry") is None and os.geteuid() == 0:
        subprocess.run(
            ["apt-get", "install", "-y", "docker-registry"],
            capture_output=True,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    if shutil.which("docker-registry") is None:
        message = "docker-registry is not installed (apt-get install docker-registry)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reg = Registry(tmp_path_factory.mktemp("registry"), port)
    reg.start()
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
async def cluster(
    containerd: Containerd,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> AsyncIterator[LocalCluster]:
    bridge = getattr(request.module, "BRIDGE", BRIDGE)
    cgroup_root = getattr(request.module, "CGROUP_ROOT", CGROUP_ROOT)
    cluster_cidr = getattr(request.module, "CLUSTER_CIDR", CLUSTER_CIDR)
    if not has_main("scheduler") or not has_main("controller"):
        pytest.skip("needs the scheduler and the controller manager")
    cl = LocalCluster(
        tmp_path_factory.mktemp("cri"),
        kubelets=(NODE,),
        extra_args={
            # The node IPAM controller gives the Node its pod CIDR; the kubelet writes its CNI
            # network from it.
            "controller": ["--allocate-node-cidrs", "--cluster-cidr", cluster_cidr],
            "kubelet": [
                "--container-runtime-endpoint", containerd.paths.endpoint,
                "--cni-conf-dir", str(containerd.paths.cni_conf_dir),
                "--cni-bridge", bridge,
                "--cgroup-root", cgroup_root,
                "--crash-loop-backoff", "2s",
                "--crash-loop-backoff-max", "4s",
                "--node-status-update-frequency", "1s",
                "--metrics-port", str(METRICS_PORT),
            ]
        },
    )  # fmt: skip
    await asyncio.to_thread(cl.start)
    try:
        yield cl
    finally:
        await asyncio.to_thread(cl.stop)


def kubectl(cl: LocalCluster, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(cl.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def pods(cl: LocalCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl(cl, "get", "pods", "-n", ns, "-o", "json"))[
        "items"
    ]
    return items


def runtime(ctd: Containerd) -> tuple[grpc.Channel, cri_grpc.RuntimeServiceStub]:
    channel = grpc.insecure_channel(f"unix:{ctd.paths.socket}")
    return channel, cri_grpc.RuntimeServiceStub(channel)


def sandboxes_of(ctd: Containerd, uid: str) -> list[cri.PodSandbox]:
    channel, rt = runtime(ctd)
    with channel:
        req = cri.ListPodSandboxRequest(
            filter=cri.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": uid})
        )
        return list(rt.ListPodSandbox(req, timeout=30).items)


@pytest.fixture
def namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    ns = "cri-" + request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    kubectl(cluster, "create", "namespace", ns)
    yield ns
    kubectl(cluster, "delete", "namespace", ns, "--wait=false")
    kubectl(cluster, "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force")


async def test_deployment_pods_run_with_their_own_ips(
    cluster: LocalCluster, containerd: Containerd, namespace: str
) -> None:
    kubectl(
        cluster, "create", "deployment", "web", f"--image={WEB}", "--replicas=3", "-n", namespace
    )

    async def running() -> list[dict[str, Any]] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        up = [p for p in items if p["status"].get("phase") == "Running"]
        return up if len(up) == 3 and all(p["status"].get("podIP") for p in up) else None

    up = await eventually(running, 180)
    ips = {p["status"]["podIP"] for p in up}
    assert len(ips) == 3
    node = json.loads(kubectl(cluster, "get", "node", NODE, "-o", "json"))
    pod_cidr = ipaddress.IPv4Network(node["spec"]["podCIDR"])
    assert pod_cidr.subnet_of(ipaddress.IPv4Network(CLUSTER_CIDR)), pod_cidr
    assert all(ipaddress.ip_address(ip) in pod_cidr for ip in ips), (ips, pod_cidr)
    for p in up:
        assert p["status"]["podIPs"] == [{"ip": p["status"]["podIP"]}]
        # A BestEffort pod's cgroup, as kube lays them out under the kubelet's cgroup root.
        assert p["status"]["qosClass"] == "BestEffort"
        pod_cgroup = f"/sys/fs/cgroup/memory{CGROUP_ROOT}/besteffort/pod{p['metadata']['uid']}"
        assert await asyncio.to_thread(os.path.isdir, pod_cgroup), pod_cgroup
        (status,) = p["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://")
        assert status["imageID"].startswith("sha256:")

    # The container's own network namespace holds the pod's IP.
    pod = up[0]
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    channel, rt = runtime(containerd)
    with channel:
        out = rt.ExecSync(
            cri.ExecSyncRequest(container_id=container_id, cmd=["ip", "addr"], timeout=30),
            timeout=60,
        )
    assert out.exit_code == 0, out.stderr
    assert f"inet {pod['status']['podIP']}/{pod_cidr.prefixlen}" in out.stdout.decode()


async def test_deleting_a_pod_stops_it_and_removes_its_sandbox(
    cluster: LocalCluster, containerd: Containerd, namespace: str
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "doomed", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 3,
            "containers": [{"name": "app", "image": WEB}],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def running() -> dict[str, Any] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        return items[0] if items and items[0]["status"].get("phase") == "Running" else None

    pod = await eventually(running, 120)
    uid = pod["metadata"]["uid"]
    assert sandboxes_of(containerd, uid)
    kubectl(cluster, "delete", "pod", "doomed", "-n", namespace, "--wait=true", "--timeout=60s")
    assert sandboxes_of(containerd, uid) == []


async def test_missing_image_goes_err_image_pull_then_image_pull_back_off(
    cluster: LocalCluster, namespace: str
) -> None:
    image = "tinykube.local/missing:1"
    kubectl(cluster, "run", "ghost", f"--image={image}", "-n", namespace)

    async def back_off() -> str | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                waiting = s["state"].get("waiting", {})
                if waiting.get("reason") == "ImagePullBackOff":
                    return str(waiting.get("message", ""))
        return None

    # ErrImagePull shows between a failed pull and the next sync (a second at most), so the
    # failed pulls are read from the Events; the back-off is what the pod shows meanwhile.
    assert await eventually(back_off, 120) == f'Back-off pulling image "{image}"'

    async def events() -> list[tuple[str, str]] | None:
        out = await asyncio.to_thread(
            kubectl, cluster, "get", "events", "-n", namespace, "-o", "json"
        )
        got = [(e["reason"], e["message"]) for e in json.loads(out)["items"]]
        reasons = {r for r, _ in got}
        return got if {"Pulling", "Failed", "BackOff"} <= reasons else None

    got = await eventually(events, 60)
    assert ("Pulling", f'Pulling image "{image}"') in got
    assert ("BackOff", f'Back-off pulling image "{image}"') in got
    assert ("Failed", "Error: ErrImagePull") in got
    assert any(
        r == "Failed" and m.startswith(f'Failed to pull image "{image}": ') for r, m in got
    ), got


async def test_a_container_over_its_memory_limit_is_oom_killed(
    cluster: LocalCluster, namespace: str
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hog", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "hog",
                    "image": WEB,
                    # tail keeps a "line" of /dev/zero, which never ends, in memory.
                    "command": ["/bin/tail", "/dev/zero"],
                    "resources": {"limits": {"memory": "16Mi", "cpu": "500m"}},
                }
            ],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def terminated() -> dict[str, Any] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                if "terminated" in s["state"]:
                    return dict(s["state"]["terminated"])
        return None

    state = await eventually(terminated, 120)
    assert state["reason"] == "OOMKilled", state
    assert state["exitCode"] == 137


async def test_logs_host_network_and_the_nodes_images(
    cluster: LocalCluster, namespace: str
) -> None:
    base: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod"}
    talker = {
        **base,
        "metadata": {"name": "talker", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "command": ["/bin/sh", "-c", "echo hello from $(HOSTNAME); sleep 3600"],
                }
            ]
        },
    }
    host = {
        **base,
        "metadata": {"name": "host", "namespace": namespace},
        "spec": {"hostNetwork": True, "containers": [{"name": "app", "image": WEB}]},
    }
    for manifest in (talker, host):
        kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def both_running() -> dict[str, dict[str, Any]] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        up = {p["metadata"]["name"]: p for p in items if p["status"].get("phase") == "Running"}
        return up if len(up) == 2 else None

    up = await eventually(both_running, 120)
    # The CRI log file the runtime writes is what kubectl logs reads.
    logs = await eventually(
        lambda: asyncio.to_thread(kubectl, cluster, "logs", "talker", "-n", namespace), 60
    )
    assert logs == "hello from talker\n"
    # A hostNetwork pod keeps the node's IP; a pod-network one has its own.
    node = json.loads(kubectl(cluster, "get", "node", NODE, "-o", "json"))
    (node_ip,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert up["host"]["status"]["podIP"] == node_ip
    assert up["talker"]["status"]["podIP"] != node_ip

    # The node reports its runtime's images (status.images, from ListImages).
    async def images() -> list[str] | None:
        out = await asyncio.to_thread(kubectl, cluster, "get", "node", NODE, "-o", "json")
        names = [n for i in json.loads(out)["status"].get("images", []) for n in i["names"]]
        return names if WEB in names else None

    names = await eventually(images, 60)
    assert any(n.startswith("tinykube.local/web@sha256:") or n == WEB for n in names)


async def test_probes_exec_in_the_container_and_reach_the_pod_ip(
    cluster: LocalCluster, containerd: Containerd, namespace: str
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probed", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "command": [
                        "/bin/sh",
                        "-c",
                        "mkdir -p /www && echo ok > /www/index.html && httpd -f -p 8080 -h /www",
                    ],
                    # Ready once /tmp/ready exists in the container's own filesystem.
                    "readinessProbe": {
                        "exec": {"command": ["cat", "/tmp/ready"]},
                        "periodSeconds": 1,
                    },
                    # httpd answers on the pod's IP.
                    "livenessProbe": {
                        "httpGet": {"path": "/", "port": 8080},
                        "periodSeconds": 1,
                    },
                }
            ]
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def status(ready: bool) -> dict[str, Any] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                if s.get("started") and s["ready"] is ready:
                    return dict(s)
        return None

    unready = await eventually(lambda: status(False), 120)
    container_id = unready["containerID"].split("://", 1)[1]
    channel, rt = runtime(containerd)
    with channel:
        done = rt.ExecSync(
            cri.ExecSyncRequest(container_id=container_id, cmd=["touch", "/tmp/ready"]),
            timeout=60,
        )
    assert done.exit_code == 0, done.stderr
    ready = await eventually(lambda: status(True), 60)
    # The httpGet liveness probe to the pod's IP passes: no restart, no kill (a failure before
    # httpd listened may show as an Unhealthy Event).
    assert ready["restartCount"] == 0
    out = kubectl(cluster, "get", "events", "-n", namespace, "-o", "json")
    events = [(e["reason"], e["message"]) for e in json.loads(out)["items"]]
    assert not [m for r, m in events if r == "Killing" and "liveness" in m], events
    for reason, message in events:
        if reason == "Unhealthy" and message.startswith("Liveness"):
            assert "connection refused" in message, events


async def test_an_image_pushed_to_a_local_registry_is_pulled(
    cluster: LocalCluster, registry: Registry, namespace: str
) -> None:
    image = f"{registry.address}/late:1"
    kubectl(cluster, "run", "late", f"--image={image}", "-n", namespace)

    async def waiting_reason() -> str | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                reason = s["state"].get("waiting", {}).get("reason")
                if reason in ("ErrImagePull", "ImagePullBackOff"):
                    return str(reason)
        return None

    # Not pushed yet: the pull fails and backs off.
    await eventually(waiting_reason, 120)
    digest = await asyncio.to_thread(
        push_image, registry.address, "late", "1", ["/bin/sh", "-c", "sleep 3600"]
    )

    async def running() -> dict[str, Any] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                if "running" in s["state"]:
                    return dict(s)
        return None

    status = await eventually(running, 120)
    assert status["imageID"] == f"{registry.address}/late@{digest}"
    out = kubectl(cluster, "get", "events", "-n", namespace, "-o", "json")
    events = [(e["reason"], e["message"]) for e in json.loads(out)["items"]]
    assert ("Pulling", f'Pulling image "{image}"') in events
    pulled = f'Successfully pulled image "{image}" in '
    assert any(r == "Pulled" and m.startswith(pulled) for r, m in events), events


async def test_a_host_port_reaches_the_pod_through_portmap(
    cluster: LocalCluster, namespace: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        host_port = s.getsockname()[1]
    node = json.loads(kubectl(cluster, "get", "node", NODE, "-o", "json"))
    (node_ip,) = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ported", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "command": [
                        "/bin/sh",
                        "-c",
                        "mkdir -p /www && echo ported > /www/index.html && "
                        "exec httpd -f -p 80 -h /www",
                    ],
                    "ports": [{"containerPort": 80, "hostPort": host_port}],
                }
            ]
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    def get() -> str:
        with urllib.request.urlopen(f"http://{node_ip}:{host_port}/", timeout=5) as resp:
            return str(resp.read().decode().strip())

    async def answer() -> str | None:
        try:
            return await asyncio.to_thread(get)
        except OSError:
            return None

    assert await eventually(answer, 120) == "ported"


async def test_a_crashing_container_restarts_with_back_off_and_keeps_its_previous_log(
    cluster: LocalCluster, namespace: str
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "crasher", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "command": ["/bin/sh", "-c", "echo run at $(date +%s%N); exit 3"],
                }
            ]
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def crash_looping() -> dict[str, Any] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                waiting = s["state"].get("waiting", {})
                if s["restartCount"] >= 1 and waiting.get("reason") == "CrashLoopBackOff":
                    return dict(s)
        return None

    status = await eventually(crash_looping, 120)
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert "back-off" in status["state"]["waiting"]["message"]
    previous = kubectl(cluster, "logs", "crasher", "-n", namespace, "--previous")
    assert previous.startswith("run at "), previous


async def test_an_image_built_from_a_directory_runs(
    cluster: LocalCluster, registry: Registry, namespace: str, tmp_path: Path
) -> None:
    context = tmp_path / "site"
    context.mkdir()
    (context / "index.html").write_text("built by tinykube image\n")
    (context / "start.sh").write_text("exec httpd -f -p 8080 -h /app\n")
    image = f"{registry.address}/site:1"
    built = await asyncio.to_thread(
        subprocess.run,
        [*tinykube_command(), "image", "build", str(context), "-t", image, "--push"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.startswith(f"pushed {image} ({registry.address}/site@sha256:")
    kubectl(cluster, "run", "site", f"--image={image}", "-n", namespace)

    async def page() -> str | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        ips = [p["status"].get("podIP") for p in items if p["status"].get("phase") == "Running"]
        if not ips:
            return None
        try:
            return await asyncio.to_thread(_get, f"http://{ips[0]}:8080/")
        except OSError:
            return None

    assert await eventually(page, 120) == "built by tinykube image"


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode().strip())


async def test_a_changed_image_restarts_the_container_from_the_new_image(
    cluster: LocalCluster, registry: Registry, namespace: str
) -> None:
    new = f"{registry.address}/changed:2"
    await asyncio.to_thread(
        push_image, registry.address, "changed", "2", ["/bin/sh", "-c", "sleep 3600"]
    )
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "changing", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": WEB}],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def running_image(image: str) -> dict[str, Any] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                if "running" in s["state"] and s["image"] == image:
                    return dict(s)
        return None

    first = await eventually(lambda: running_image(WEB), 120)
    kubectl(cluster, "set", "image", "pod/changing", f"app={new}", "-n", namespace)
    second = await eventually(lambda: running_image(new), 120)
    assert second["restartCount"] == 1
    assert second["containerID"] != first["containerID"]
    assert second["imageID"].startswith(f"{registry.address}/changed@sha256:")
    out = kubectl(cluster, "get", "events", "-n", namespace, "-o", "json")
    events = [(e["reason"], e["message"]) for e in json.loads(out)["items"]]
    assert ("Killing", "Container app definition changed, will be restarted") in events


async def test_resource_metrics_from_the_runtimes_stats(
    cluster: LocalCluster, namespace: str
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "measured", "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": WEB}]},
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))
    series = f'container="app",namespace="{namespace}",pod="measured"'

    async def scraped() -> str | None:
        try:
            text = await asyncio.to_thread(_get, f"http://127.0.0.1:{METRICS_PORT}/metrics")
        except OSError:
            return None
        return text if f"container_memory_working_set_bytes{{{series}}}" in text else None

    text = await eventually(scraped, 120)
    prefix = "container_memory_working_set_bytes{" + series
    line = next(x for x in text.splitlines() if x.startswith(prefix))
    assert float(line.split()[1]) > 0
    assert f'pod_cpu_usage_seconds_total{{namespace="{namespace}",pod="measured"}}' in text


async def test_a_pod_start_is_traced_and_the_runtime_calls_timed(
    cluster: LocalCluster, namespace: str
) -> None:
    """The kubelet's pod startup trace ("Observed pod startup duration", kubelet/podstartup.py)
    names the pod's CRI stages in order, and its metrics time the CRI calls by kube's
    operation types and the pod's start (kubelet_pod_start_duration_seconds)."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "traced", "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": WEB}]},
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))
    pod = f"{namespace}/traced"

    async def traced() -> dict[str, Any] | None:
        text = await asyncio.to_thread(cluster.log_path(NODE).read_text, errors="replace")
        found = [t for t in map(parse_line, text.splitlines()) if t and t["pod"] == pod]
        return found[0] if found else None

    trace = await eventually(traced, 120)
    stages = [name for name, _, _ in trace["spans"]]
    assert stages[-5:] == ["sandbox", "sandbox_status", "image:app", "create:app", "start:app"]
    times = [trace["seen"], trace["first_sync"]]
    for name in stages[-5:]:
        _, start, end = next(s for s in trace["spans"] if s[0] == name)
        times += [start, end]
    times += [trace["status_sent"], trace["status_written"]]
    assert times == sorted(times), trace

    text = await asyncio.to_thread(_get, f"http://127.0.0.1:{METRICS_PORT}/metrics")
    counts = {
        line.split("{", 1)[1].split("}", 1)[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("kubelet_runtime_operations_duration_seconds_count{")
    }
    for kind in ("run_podsandbox", "podsandbox_status", "create_container", "start_container"):
        assert counts.get(f'operation_type="{kind}"', 0) >= 1, (kind, counts)
    started = [
        x for x in text.splitlines() if x.startswith("kubelet_pod_start_duration_seconds_count")
    ]
    assert started and float(started[0].split()[1]) >= 1, started


async def test_volumes_are_real_mounts_in_the_container(
    cluster: LocalCluster, namespace: str
) -> None:
    """A configMap volume (updated in place), a Memory emptyDir (a tmpfs) and the projected
    service account token at kube's path, as bind mounts; gone once the pod is."""
    kubectl(cluster, "create", "configmap", "cfg", "-n", namespace, "--from-literal=greeting=hi")
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    script = (
        "while true; do "
        'echo "seen=$(cat /etc/cfg/greeting) ns=$(cat ' + sa + "/namespace) "
        "token=$(head -c 3 " + sa + "/token) "
        "fs=$(grep ' /scratch ' /proc/mounts | cut -d' ' -f3)\"; sleep 0.5; done"
    )
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vols", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "command": ["/bin/sh", "-c", script],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True},
                        {"name": "scratch", "mountPath": "/scratch"},
                    ],
                }
            ],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "scratch", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def logs_with(text: str) -> str:
        done = await asyncio.to_thread(
            subprocess.run,
            [str(venv_bin() / "kubectl"), "--kubeconfig", str(cluster.kubeconfig),
             "logs", "vols", "-n", namespace, "--tail", "1"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done.stdout if text in done.stdout else ""

    line = await eventually(lambda: logs_with("seen=hi"), 120, "the mounted files")
    # The token is a JWT ("eyJ..."), the namespace the pod's, /scratch a tmpfs.
    assert f"ns={namespace} token=eyJ fs=tmpfs" in line, line
    kubectl(
        cluster, "patch", "configmap", "cfg", "-n", namespace, "-p", '{"data":{"greeting":"yo"}}'
    )
    await eventually(lambda: logs_with("seen=yo"), 90, "the updated file")
    uid = json.loads(kubectl(cluster, "get", "pod", "vols", "-n", namespace, "-o", "json"))[
        "metadata"
    ]["uid"]
    kubectl(cluster, "delete", "pod", "vols", "-n", namespace, "--wait=true")

    async def unmounted() -> bool:
        mounts = await asyncio.to_thread(Path("/proc/self/mountinfo").read_text)
        return uid not in mounts

    await eventually(unmounted, 60, "the pod's tmpfs unmounted")


async def _logs(cl: LocalCluster, ns: str, pod: str, *args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(cl.kubeconfig),
         "logs", pod, "-n", ns, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.stdout


def _events(cl: LocalCluster, ns: str) -> list[tuple[str, str]]:
    out = kubectl(cl, "get", "events", "-n", ns, "-o", "json")
    return [(e["reason"], e["message"]) for e in json.loads(out)["items"]]


async def test_lifecycle_hooks_and_termination_messages(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """postStart runs in the container once it started, preStop before its SIGTERM; what a
    container writes at /dev/termination-log (or, FallbackToLogsOnError, its log's tail) is
    its terminated state's message."""
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    wait = "while true; do sleep 0.2; done"
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hooks", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 20,
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "command": [
                        "/bin/sh", "-c",
                        "trap 'test -f /out/prestop && echo after-hook > /out/term; exit 0' TERM; "
                        + wait,
                    ],
                    "lifecycle": {
                        "postStart": {"exec": {"command": ["sh", "-c", "echo up > /out/post"]}},
                        "preStop": {"exec": {"command": ["sh", "-c", "echo hook > /out/prestop"]}},
                    },
                    "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                }
            ],
            "volumes": [{"name": "out", "hostPath": {"path": str(out)}}],
        },
    }  # fmt: skip
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def running() -> bool:
        items = await asyncio.to_thread(pods, cluster, namespace)
        return bool(items) and items[0]["status"].get("phase") == "Running"

    await eventually(running, 120, "the hooks pod running")
    # The kubelet reports Running only once postStart has returned.
    assert (out / "post").read_text() == "up\n"
    kubectl(cluster, "delete", "pod", "hooks", "-n", namespace, "--wait=true", "--timeout=60s")
    assert (out / "prestop").read_text() == "hook\n"
    assert (out / "term").read_text() == "after-hook\n"

    messages = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "msgs", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "file",
                    "image": WEB,
                    "command": [
                        "/bin/sh", "-c", "printf 'out of disk' > /dev/termination-log; exit 1",
                    ],
                },
                {
                    "name": "logs",
                    "image": WEB,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "command": ["/bin/sh", "-c", "echo first; echo last words; exit 2"],
                },
            ],
        },
    }  # fmt: skip
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(messages))

    async def terminated() -> dict[str, dict[str, Any]] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        found = {
            s["name"]: s["state"]["terminated"]
            for p in items
            for s in p["status"].get("containerStatuses", [])
            if "terminated" in s["state"]
        }
        return found if len(found) == 2 else None

    done = await eventually(terminated, 120, "both containers terminated")
    assert (done["file"]["exitCode"], done["file"]["message"]) == (1, "out of disk")
    assert (done["logs"]["exitCode"], done["logs"]["message"]) == (2, "first\nlast words\n")
    pod = json.loads(kubectl(cluster, "get", "pod", "msgs", "-n", namespace, "-o", "json"))
    assert pod["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "File"


async def test_a_failing_post_start_hook_kills_the_container(
    cluster: LocalCluster, namespace: str
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "badhook", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "exit 3"]}}},
                }
            ],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def failed() -> dict[str, Any] | None:
        items = await asyncio.to_thread(pods, cluster, namespace)
        for p in items:
            for s in p["status"].get("containerStatuses", []):
                if s["restartCount"] >= 1 or s["state"].get("waiting", {}).get("reason") in (
                    "PostStartHookError",
                    "CrashLoopBackOff",
                ):
                    return dict(s)
        return None

    await eventually(failed, 120, "the container killed for its hook")
    events = await asyncio.to_thread(_events, cluster, namespace)
    assert ("FailedPostStartHook", "PostStartHook failed") in events, events
    assert ("Killing", "FailedPostStartHook") in events, events


async def test_security_context_users_groups_read_only_root_and_capabilities(
    cluster: LocalCluster, namespace: str
) -> None:
    script = (
        'echo "ids=$(id -u):$(id -g):$(id -G)"; '
        "if touch /probe 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi; "
        "grep CapEff /proc/self/status; sleep 3600"
    )
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ids", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000],
            },
            "containers": [
                {
                    "name": "app",
                    "image": WEB,
                    "command": ["/bin/sh", "-c", script],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }  # fmt: skip
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))

    async def logged() -> str:
        text = await _logs(cluster, namespace, "ids")
        return text if "CapEff" in text else ""

    text = await eventually(logged, 120, "the ids pod's output")
    assert "ids=1000:3000:3000 4000\n" in text, text
    assert "rootfs=ro\n" in text, text
    assert "CapEff:\t0000000000000000" in text, text

    nonroot = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nonroot", "namespace": namespace},
        "spec": {
            "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "app", "image": WEB}],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(nonroot))

    async def refused() -> dict[str, Any] | None:
        pod = json.loads(kubectl(cluster, "get", "pod", "nonroot", "-n", namespace, "-o", "json"))
        for s in pod["status"].get("containerStatuses", []):
            waiting = s["state"].get("waiting", {})
            if waiting.get("reason") == "CreateContainerConfigError":
                return {"uid": pod["metadata"]["uid"], **waiting}
        return None

    waiting = await eventually(refused, 120, "CreateContainerConfigError")
    assert waiting["message"] == (
        "container has runAsNonRoot and image will run as root "
        f'(pod: "nonroot_{namespace}({waiting["uid"]})", container: app)'
    )


async def test_image_pull_secrets_authenticate_to_the_registry(
    cluster: LocalCluster, registry: Registry, namespace: str, tmp_path: Path
) -> None:
    """A registry that wants a password (htpasswd): pulls with the pod's imagePullSecrets, or
    its ServiceAccount's, succeed; without them the pull is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    private = Registry(tmp_path / "private", port, users={"alice": "s3cret"})
    await asyncio.to_thread(private.start)
    try:
        image = f"{private.address}/secret-app:1"
        await asyncio.to_thread(
            push_image,
            private.address,
            "secret-app",
            "1",
            ["/bin/sh", "-c", "sleep 3600"],
            credentials=("alice", "s3cret"),
        )
        kubectl(
            cluster, "create", "secret", "docker-registry", "regcred", "-n", namespace,
            f"--docker-server={private.address}", "--docker-username=alice",
            "--docker-password=s3cret",
        )  # fmt: skip

        def pod(name: str, secrets: list[str]) -> str:
            spec: dict[str, Any] = {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "app", "image": image}],
            }
            if secrets:
                spec["imagePullSecrets"] = [{"name": n} for n in secrets]
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
            return json.dumps(body)

        kubectl(cluster, "apply", "-n", namespace, "-f", "-", stdin=pod("with", ["regcred"]))
        kubectl(cluster, "apply", "-n", namespace, "-f", "-", stdin=pod("without", []))

        async def state(name: str) -> dict[str, Any]:
            p = json.loads(
                await asyncio.to_thread(kubectl, cluster, "get", "pod", name, "-n", namespace,
                                        "-o", "json")
            )  # fmt: skip
            statuses = p["status"].get("containerStatuses", [{}])
            return dict(statuses[0].get("state", {}))

        async def with_running() -> bool:
            return "running" in await state("with")

        async def without_refused() -> str:
            waiting = (await state("without")).get("waiting", {})
            return str(waiting.get("message", "")) if waiting.get("reason") in (
                "ErrImagePull", "ImagePullBackOff"
            ) else ""  # fmt: skip

        await eventually(with_running, 120, "the pod with pull secrets running")
        await eventually(without_refused, 120, "the pod without them refused")
        events = await asyncio.to_thread(_events, cluster, namespace)
        assert any(r == "Failed" and "401 Unauthorized" in m for r, m in events), events

        # The ServiceAccount's imagePullSecrets are the pod's when it names none (admission).
        kubectl(
            cluster, "patch", "serviceaccount", "default", "-n", namespace,
            "-p", '{"imagePullSecrets": [{"name": "regcred"}]}',
        )  # fmt: skip
        kubectl(cluster, "apply", "-n", namespace, "-f", "-", stdin=pod("via-sa", []))
        got = json.loads(kubectl(cluster, "get", "pod", "via-sa", "-n", namespace, "-o", "json"))
        assert got["spec"]["imagePullSecrets"] == [{"name": "regcred"}]

        async def sa_running() -> bool:
            return "running" in await state("via-sa")

        await eventually(sa_running, 120, "the pod with its account's pull secrets running")
        kubectl(cluster, "delete", "pods", "--all", "-n", namespace, "--wait=true")
    finally:
        await asyncio.to_thread(private.stop)


async def test_stats_summary_from_the_runtimes_container_stats(
    cluster: LocalCluster, namespace: str
) -> None:
    """kube's summary API through nodes/proxy: the pods' usage from ListContainerStats."""
    kubectl(cluster, "run", "busy", f"--image={WEB}", "-n", namespace)

    async def listed() -> dict[str, Any] | None:
        out = await asyncio.to_thread(
            kubectl, cluster, "get", "--raw", f"/api/v1/nodes/{NODE}/proxy/stats/summary"
        )
        for p in json.loads(out)["pods"]:
            if p["podRef"]["namespace"] == namespace and p["containers"]:
                return dict(p)
        return None

    stats = await eventually(listed, 120, "the pod in the summary")
    (container,) = stats["containers"]
    assert container["name"] == "busy"
    assert container["memory"]["workingSetBytes"] > 0
    assert container["cpu"]["usageCoreNanoSeconds"] > 0
