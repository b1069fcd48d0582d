"""kubectl exec, cp and port-forward (and the Python client's `stream`) against `tinykube up`:
the apiserver's pods/exec, pods/portforward relayed over WebSockets to the process runtime's
kubelet (apiserver/podstream.py, kubelet/streaming.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import CLIResult, UpCluster, venv_bin
from tests.e2e.kubectl_output import ok

pytestmark = pytest.mark.e2e

k8s = pytest.importorskip("kubernetes.client")
k8s_config = pytest.importorskip("kubernetes.config")
stream = pytest.importorskip("kubernetes.stream").stream

PODS = """
apiVersion: v1
kind: Pod
metadata:
  name: box
spec:
  containers:
  - name: main
    image: busybox
    command: [sleep, "86400"]
    workingDir: /tmp
    env:
    - {name: GREETING, value: hello-from-env}
"""


@pytest.fixture(scope="module")
def cluster(tinykube_up: UpCluster) -> Iterator[UpCluster]:
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=PODS))
    ok(tinykube_up.kubectl("wait", "--for=condition=Ready", "pod/box", "--timeout=60s"))
    yield tinykube_up


def test_exec_echo(cluster: UpCluster) -> None:
    done = cluster.kubectl("exec", "box", "--", "echo", "hi")
    assert (done.code, done.out, done.err) == (0, "hi\n", "")


def test_exec_sees_the_containers_env_and_working_directory(cluster: UpCluster) -> None:
    done = cluster.kubectl("exec", "box", "--", "sh", "-c", 'echo "$GREETING $(pwd)"')
    assert (done.code, done.out) == (0, "hello-from-env /tmp\n"), done.err


def test_exec_stderr_goes_to_stderr(cluster: UpCluster) -> None:
    done = cluster.kubectl("exec", "box", "--", "sh", "-c", "echo out; echo err >&2")
    assert (done.code, done.out, done.err) == (0, "out\n", "err\n")


def test_exec_exit_code(cluster: UpCluster) -> None:
    done = cluster.kubectl("exec", "box", "--", "sh", "-c", "exit 3")
    assert done.code == 3
    assert done.err == "command terminated with exit code 3\n"


def test_exec_stdin_through_cat(cluster: UpCluster) -> None:
    text = "".join(f"line {i}\n" for i in range(2000))
    done = cluster.kubectl("exec", "-i", "box", "--", "cat", stdin=text)
    assert done.code == 0, done.err
    assert done.out == text


def test_exec_missing_command(cluster: UpCluster) -> None:
    done = cluster.kubectl("exec", "box", "--", "no-such-program-here")
    assert done.code != 0
    assert 'exec: "no-such-program-here": executable file not found in $PATH' in done.err


def test_exec_unknown_container(cluster: UpCluster) -> None:
    done = cluster.kubectl("exec", "box", "-c", "nope", "--", "true")
    assert done.code == 1
    assert "container nope is not valid for pod box" in done.err


def test_exec_tty_under_a_pty(cluster: UpCluster) -> None:
    """`kubectl exec -it` from a terminal (script(1) gives kubectl one): the command sees a
    terminal of the client's size."""
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    kubectl = f"{venv_bin() / 'kubectl'} --kubeconfig {cluster.kubeconfig}"
    command = f"stty cols 91 rows 33; {kubectl} exec -it box -- sh -c 'tty; stty size; exit 4'"
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "/dev/pts/" in done.stdout, done.stdout + done.stderr
    assert "33 91" in done.stdout, done.stdout
    assert done.returncode == 4, done.stdout


def test_cp_directory_round_trip(cluster: UpCluster, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    inside = f"/tmp/tinykube-cp-{os.getpid()}"
    try:
        ok(cluster.kubectl("cp", str(src), f"box:{inside}"))
        back = tmp_path / "back"
        ok(cluster.kubectl("cp", f"box:{inside}", str(back)))
        for rel in ("a.txt", "sub/b.bin"):
            assert _digest(back / rel) == _digest(src / rel), rel
    finally:
        shutil.rmtree(inside, ignore_errors=True)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_python_client_stream(cluster: UpCluster) -> None:
    api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    out = stream(
        api.connect_get_namespaced_pod_exec,
        "box",
        "default",
        command=["sh", "-c", "echo one; echo two"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert out == "one\ntwo\n"
    resp = stream(
        api.connect_get_namespaced_pod_exec,
        "box",
        "default",
        command=["sh", "-c", "exit 5"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=30)
    assert resp.returncode == 5


def _as_token(cluster: UpCluster, tmp_path: Path, token: str, *args: str) -> CLIResult:
    """kubectl with a kubeconfig that presents only `token` (no client certificate)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "token", "user": {"token": token}}]
    for ctx in config["contexts"]:
        ctx["context"]["user"] = "token"
    path = tmp_path / "token.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return CLIResult(done.returncode, done.stdout, done.stderr)


def test_user_without_pods_exec_is_refused(cluster: UpCluster, tmp_path: Path) -> None:
    ok(cluster.kubectl("create", "serviceaccount", "viewer"))
    ok(
        cluster.kubectl(
            "create",
            "rolebinding",
            "viewer",
            "--clusterrole=view",
            "--serviceaccount=default:viewer",
        )
    )
    token = ok(cluster.kubectl("create", "token", "viewer")).strip()
    done = _as_token(cluster, tmp_path, token, "exec", "box", "--", "true")
    assert done.code == 1
    assert (
        'pods "box" is forbidden: User "system:serviceaccount:default:viewer" cannot create '
        'resource "pods/exec" in API group "" in the namespace "default"'
    ) in done.err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def web(cluster: UpCluster) -> Iterator[tuple[int, int]]:
    """A pod `web` with two containers serving HTTP (python3 -m http.server) on two ports of
    the node (the process runtime's pods share it), and a Service `web` in front of the first."""
    a, b = _free_port(), _free_port()
    manifest = f"""
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {{app: web}}
spec:
  containers:
  - name: a
    image: python:3
    command: [{sys.executable}, -m, http.server, "{a}"]
    ports: [{{containerPort: {a}}}]
    readinessProbe: {{tcpSocket: {{port: {a}}}, periodSeconds: 1}}
  - name: b
    image: python:3
    command: [{sys.executable}, -m, http.server, "{b}"]
    ports: [{{containerPort: {b}}}]
    readinessProbe: {{tcpSocket: {{port: {b}}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {{app: web}}
  ports:
  - {{port: 80, targetPort: {a}}}
"""
    ok(cluster.kubectl("apply", "-f", "-", stdin=manifest))
    ok(cluster.kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=60s"))
    yield a, b


class _PortForward:
    """A running `kubectl port-forward`, ready once it has printed its Forwarding lines."""

    def __init__(
        self, cluster: UpCluster, target: str, *mappings: str, env: dict[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [
                str(venv_bin() / "kubectl"),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "port-forward",
                target,
                *mappings,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        assert self.process.stdout is not None
        for _ in mappings:
            line = self.process.stdout.readline()
            assert line.startswith("Forwarding from"), line + self._stderr()

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return ""
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _get(port: int, path: str = "/") -> tuple[int, bytes]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
        return resp.status, resp.read()


def test_port_forward_pod_carries_100_requests(cluster: UpCluster, web: tuple[int, int]) -> None:
    local = _free_port()
    pf = _PortForward(cluster, "pod/web", f"{local}:{web[0]}")
    try:
        for _ in range(100):
            status, body = _get(local)
            assert status == 200
            assert b"Directory listing" in body
    finally:
        pf.close()


def test_port_forward_several_ports(cluster: UpCluster, web: tuple[int, int]) -> None:
    la, lb = _free_port(), _free_port()
    pf = _PortForward(cluster, "pod/web", f"{la}:{web[0]}", f"{lb}:{web[1]}")
    try:
        assert _get(la)[0] == 200
        assert _get(lb)[0] == 200
    finally:
        pf.close()


def test_port_forward_service(cluster: UpCluster, web: tuple[int, int]) -> None:
    local = _free_port()
    pf = _PortForward(cluster, "svc/web", f"{local}:80")
    try:
        for _ in range(100):
            assert _get(local)[0] == 200
    finally:
        pf.close()


def test_port_forward_to_a_closed_port_reports_the_error(cluster: UpCluster) -> None:
    local, closed = _free_port(), _free_port()
    pf = _PortForward(cluster, "pod/box", f"{local}:{closed}")
    try:
        with pytest.raises(OSError):
            _get(local)
        assert pf.process.poll() is None or pf.process.returncode != 0
    finally:
        pf.close()


def test_python_client_port_forward(cluster: UpCluster, web: tuple[int, int]) -> None:
    portforward = pytest.importorskip("kubernetes.stream").portforward
    api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    pf = portforward(
        api.connect_get_namespaced_pod_portforward, "web", "default", ports=str(web[0])
    )
    sock = pf.socket(web[0])
    sock.setblocking(True)
    sock.sendall(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    sock.close()
    assert reply.startswith(b"HTTP/1.0 200"), reply[:200]
    assert pf.error(web[0]) is None


def _process(*parts: str) -> int:
    """The pid of the one process whose command line (arguments joined by spaces) contains
    every one of `parts`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ") + b" "
            except OSError:
                continue
            if all(part.encode() in cmdline for part in parts):
                found.append(int(entry))
    assert len(found) == 1, (parts, found)
    return found[0]


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid and stat[0] != "Z":
                kids.append(int(entry))
    return kids


def test_1000_execs_leak_nothing(cluster: UpCluster) -> None:
    """1,000 Python-client exec calls (the issue's count; about 20 s): the kubelet's and the
    apiserver's open files and the kubelet's child processes are back where they were."""
    node = ok(cluster.kubectl("get", "pod", "box", "-o", "jsonpath={.spec.nodeName}"))
    kubelet = _process("-m kubelet ", f"--kubeconfig {cluster.data_dir}/kubelet-{node}.conf ")
    rest_port = cluster.rest_url.rsplit(":", 1)[1]
    apiserver = _process("-m apiserver ", f"--rest-port {rest_port} ")
    api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))

    def run(i: int) -> None:
        out = stream(
            api.connect_get_namespaced_pod_exec,
            "box",
            "default",
            command=["echo", str(i)],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
        assert out == f"{i}\n"

    run(-1)  # connections and caches warmed up
    before = (
        len(os.listdir(f"/proc/{kubelet}/fd")),
        len(os.listdir(f"/proc/{apiserver}/fd")),
        len(_children(kubelet)),
    )
    for i in range(1000):
        run(i)
    # A stream's ends are released just after its last message: wait for them to settle.
    deadline = time.monotonic() + 30
    while True:
        after = (
            len(os.listdir(f"/proc/{kubelet}/fd")),
            len(os.listdir(f"/proc/{apiserver}/fd")),
            len(_children(kubelet)),
        )
        if all(a <= b for a, b in zip(after, before, strict=True)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert after[0] <= before[0], f"kubelet fds {before[0]} -> {after[0]}"
    assert after[1] <= before[1] + 2, f"apiserver fds {before[1]} -> {after[1]}"
    assert after[2] <= before[2], f"kubelet children {before[2]} -> {after[2]}"


def test_a_disconnected_client_ends_its_exec_process(cluster: UpCluster) -> None:
    marker = f"tinykube-exec-gone-{os.getpid()}"
    proc = subprocess.Popen(
        [
            str(venv_bin() / "kubectl"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            f"exec sleep 3600 # {marker}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not _pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pids_with(marker), "the exec'd process never started"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while _pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_with(marker) == []


def _pids_with(word: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if word.encode() in cmdline and state != "Z" and int(entry) != os.getpid():
                found.append(int(entry))
    return found


NODE2_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: elsewhere
spec:
  nodeName: node-2
  containers:
  - name: main
    image: busybox
    command: [sleep, "86400"]
"""


def test_a_nodes_credentials_are_refused_on_another_nodes_pods(cluster: UpCluster) -> None:
    ok(cluster.kubectl("apply", "-f", "-", stdin=NODE2_POD))
    ok(cluster.kubectl("wait", "--for=condition=Ready", "pod/elsewhere", "--timeout=60s"))
    # Through the apiserver: kubectl's first GET of the pod is refused by the Node authorizer,
    # and pods/exec itself by RBAC (nodes are given no pods/exec).
    node1 = str(cluster.data_dir / "kubelet-node-1.conf")
    done = subprocess.run(
        [str(venv_bin() / "kubectl"), "--kubeconfig", node1, "exec", "elsewhere", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr == (
        'Error from server (Forbidden): pods "elsewhere" is forbidden: User "system:node:node-1" '
        'cannot get resource "pods" in API group "" in the namespace "default": no relationship '
        "found between node 'node-1' and this object\n"
    )
    api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=node1))
    with pytest.raises(Exception, match="403") as refused:
        stream(
            api.connect_get_namespaced_pod_exec,
            "elsewhere",
            "default",
            command=["true"],
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
        )
    assert 'cannot create resource \\"pods/exec\\"' in str(refused.value) or (
        'cannot create resource "pods/exec"' in str(refused.value)
    ), str(refused.value)
    # Straight to node-2's kubelet with node-1's certificate: its authorizer refuses.
    import grpc

    from tinykube.v1 import kubelet_pb2, kubelet_pb2_grpc

    pki = cluster.pki_dir
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "kubelet-node-1.key").read_bytes(),
        certificate_chain=(pki / "kubelet-node-1.crt").read_bytes(),
    )
    address = cluster.endpoints["kubelet-node-2"]
    options = (("grpc.ssl_target_name_override", "node-2"),)
    with grpc.secure_channel(address, creds, options) as channel:
        stub = kubelet_pb2_grpc.KubeletStub(channel)
        start = kubelet_pb2.StreamStart(
            namespace="default", name="elsewhere", container="main", command=["true"], stdout=True
        )
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Exec(iter([kubelet_pb2.StreamFrame(start=start)]), timeout=30))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "Forbidden (user=system:node:node-1, verb=create, resource=nodes" in str(
        err.value.details()
    )


def test_run_i_rm_attaches_stdin_and_deletes_the_pod(cluster: UpCluster) -> None:
    done = cluster.kubectl(
        "run",
        "-i",
        "--rm",
        "--restart=Never",
        "once",
        "--image=busybox",
        "--command",
        "--",
        "sh",
        "-c",
        "read x; echo got $x",
        stdin="hello\n",
        timeout=120,
    )
    assert done.code == 0, done.err
    assert done.out == 'got hello\npod "once" deleted from default namespace\n'
    assert cluster.kubectl("get", "pod", "once").code == 1


ATTACHABLE = """
apiVersion: v1
kind: Pod
metadata:
  name: reader
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command:
    - sh
    - -c
    - 'while read line; do echo "echo: $line"; echo "err: $line" >&2; done; echo bye'
    stdin: true
    stdinOnce: true
"""


def test_attach_to_a_stdin_container(cluster: UpCluster) -> None:
    """`kubectl attach -i`: input reaches the container's stdin, its stdout and stderr come
    back apart; stdinOnce closes its stdin when the attach's input ends, so it finishes."""
    ok(cluster.kubectl("apply", "-f", "-", stdin=ATTACHABLE))
    ok(cluster.kubectl("wait", "--for=condition=Ready", "pod/reader", "--timeout=60s"))
    done = cluster.kubectl("attach", "-i", "reader", stdin="one\ntwo\n", timeout=120)
    assert done.code == 0, done.err
    assert done.out == "echo: one\necho: two\nbye\n"
    assert "err: one\nerr: two\n" in done.err
    ok(
        cluster.kubectl(
            "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/reader", "--timeout=60s"
        )
    )


def test_port_forward_deployment(cluster: UpCluster) -> None:
    """kubectl resolves deploy/NAME to one of its pods, then forwards as to a pod."""
    port = _free_port()
    manifest = f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: site
spec:
  replicas: 1
  selector:
    matchLabels: {{app: site}}
  template:
    metadata:
      labels: {{app: site}}
    spec:
      containers:
      - name: http
        image: python:3
        command: [{sys.executable}, -m, http.server, "{port}"]
        ports: [{{containerPort: {port}}}]
        readinessProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1}}
"""
    ok(cluster.kubectl("apply", "-f", "-", stdin=manifest))
    ok(cluster.kubectl("rollout", "status", "deploy/site", "--timeout=90s", timeout=120))
    local = _free_port()
    pf = _PortForward(cluster, "deploy/site", f"{local}:{port}")
    try:
        for _ in range(10):
            assert _get(local)[0] == 200
    finally:
        pf.close()
        ok(cluster.kubectl("delete", "deploy", "site", "--wait=false"))


def test_run_it_rm_under_a_terminal(cluster: UpCluster) -> None:
    """`kubectl run -it --rm` from a terminal (script(1)): the container's stdio is a terminal
    of its own (kubelet/attach.py) sized as the client's; the Enter typed reaches it as the end
    of a line, its answer comes back, and the pod is deleted."""
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    kubectl = f"{venv_bin() / 'kubectl'} --kubeconfig {cluster.kubeconfig}"
    command = (
        f"stty cols 101 rows 41; {kubectl} run -it --rm --restart=Never typed --image=busybox "
        "--command -- sh -c 'read x; tty; stty size; echo got $x'"
    )
    proc = subprocess.Popen(
        ["script", "-qec", command, "/dev/null"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"hello\r")
        proc.stdin.flush()
        out = b""
        deadline = time.monotonic() + 120
        while b'pod "typed" deleted' not in out and time.monotonic() < deadline:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            out += chunk
        assert b"got hello" in out, out
        assert b"/dev/pts/" in out, out
        assert b"41 101" in out, out
        assert b'pod "typed" deleted from default namespace' in out, out
        assert proc.wait(60) == 0
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_exec_into_a_container_that_is_not_running(cluster: UpCluster) -> None:
    manifest = """
apiVersion: v1
kind: Pod
metadata: {name: broken}
spec:
  containers:
  - {name: c, image: busybox, command: [no-such-program-anywhere]}
"""
    ok(cluster.kubectl("apply", "-f", "-", stdin=manifest))
    ok(
        cluster.kubectl(
            "wait",
            "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=RunContainerError",
            "pod/broken",
            "--timeout=60s",
        )
    )
    done = cluster.kubectl("exec", "broken", "--", "true")
    assert done.code == 1
    assert done.err == 'error: unable to upgrade connection: container not found ("c")\n'


# kubectl's switches for its plain SPDY/3.1 clients (what it falls back to, and what client-go's
# SPDY executor and older kubectls speak): apiserver/spdyupgrade.py.
SPDY = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}


def test_spdy_exec_echo_stdin_and_exit_code(cluster: UpCluster) -> None:
    done = cluster.kubectl("exec", "box", "--", "sh", "-c", "echo out; echo err >&2", env=SPDY)
    assert (done.code, done.out, done.err) == (0, "out\n", "err\n")
    text = "".join(f"line {i}\n" for i in range(3000))
    done = cluster.kubectl("exec", "-i", "box", "--", "cat", stdin=text, env=SPDY)
    assert (done.code, done.out) == (0, text), done.err
    done = cluster.kubectl("exec", "box", "--", "sh", "-c", "exit 3", env=SPDY)
    assert (done.code, done.err) == (3, "command terminated with exit code 3\n")
    done = cluster.kubectl("exec", "box", "-c", "nope", "--", "true", env=SPDY)
    assert done.code == 1
    assert "container nope is not valid for pod box" in done.err, done.err


def test_spdy_exec_tty_and_resize(cluster: UpCluster) -> None:
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    kubectl = f"{venv_bin() / 'kubectl'} --kubeconfig {cluster.kubeconfig}"
    command = f"stty cols 97 rows 31; {kubectl} exec -it box -- sh -c 'tty; stty size; exit 4'"
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **SPDY},
    )
    assert "/dev/pts/" in done.stdout, done.stdout + done.stderr
    assert "31 97" in done.stdout, done.stdout
    assert done.returncode == 4, done.stdout


def test_spdy_cp_round_trip(cluster: UpCluster, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "b.bin").write_bytes(os.urandom(200_000))
    inside = f"/tmp/tinykube-spdy-cp-{os.getpid()}"
    try:
        ok(cluster.kubectl("cp", str(src), f"box:{inside}", env=SPDY))
        back = tmp_path / "back"
        ok(cluster.kubectl("cp", f"box:{inside}", str(back), env=SPDY))
        assert _digest(back / "sub" / "b.bin") == _digest(src / "sub" / "b.bin")
    finally:
        shutil.rmtree(inside, ignore_errors=True)


def test_spdy_port_forward_carries_100_requests(cluster: UpCluster, web: tuple[int, int]) -> None:
    la, lb = _free_port(), _free_port()
    pf = _PortForward(cluster, "pod/web", f"{la}:{web[0]}", f"{lb}:{web[1]}", env=SPDY)
    try:
        for _ in range(100):
            assert _get(la)[0] == 200
        assert _get(lb)[0] == 200
    finally:
        pf.close()


def test_spdy_without_a_common_protocol_is_refused(cluster: UpCluster) -> None:
    """kube's handshake: no protocol in common is a 403 naming both lists."""
    client = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    request = client.param_serialize(
        "POST",
        "/api/v1/namespaces/default/pods/box/exec",
        query_params=[("command", "true"), ("stdout", "true")],
        header_params={
            "Connection": "Upgrade",
            "Upgrade": "SPDY/3.1",
            "X-Stream-Protocol-Version": "v9.channel.k8s.io",
        },
        auth_settings=["BearerToken"],
    )
    resp = client.call_api(*request)
    body = resp.read().decode()
    assert resp.status == 403, body
    assert (
        "unable to negotiate protocol: client supports [v9.channel.k8s.io], "
        "server accepts [v4.channel.k8s.io]"
    ) in body, body


def _ephemeral_status(cluster: UpCluster, name: str) -> dict[str, Any]:
    import json

    pod = json.loads(ok(cluster.kubectl("get", "pod", "box", "-o", "json")))
    for status in pod["status"].get("ephemeralContainerStatuses", []):
        if status["name"] == name:
            return dict(status)
    return {}


def test_debug_adds_an_ephemeral_container_with_the_targets_environment(
    cluster: UpCluster,
) -> None:
    """`kubectl debug POD --image=... --target=main -- cmd`: pods/ephemeralcontainers gains the
    container, the kubelet runs it once in the pod (the process runtime: with the target's
    environment; the image is not used), its status and log are the pod's."""
    ok(
        cluster.kubectl(
            "debug", "box", "--image=busybox", "--target=main", "-c", "dbg1",
            "--", "sh", "-c", 'echo "debugging with $GREETING"',
        )
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not _ephemeral_status(cluster, "dbg1").get("state", {}).get("terminated"):
        assert time.monotonic() < deadline, _ephemeral_status(cluster, "dbg1")
        time.sleep(0.2)
    terminated = _ephemeral_status(cluster, "dbg1")["state"]["terminated"]
    assert terminated["exitCode"] == 0, terminated
    assert ok(cluster.kubectl("logs", "box", "-c", "dbg1")) == "debugging with hello-from-env\n"
    # Never restarted, and the pod's own containers untouched.
    assert _ephemeral_status(cluster, "dbg1")["restartCount"] == 0
    assert ok(cluster.kubectl("get", "pod", "box", "-o", "jsonpath={.status.phase}")) == "Running"


def test_debug_i_attaches_to_the_ephemeral_container(cluster: UpCluster) -> None:
    done = cluster.kubectl(
        "debug", "-i", "box", "--image=busybox", "--target=main", "-c", "dbg2",
        "--", "sh", "-c", 'read x; echo "got $x"',
        stdin="hello\n", timeout=120,
    )  # fmt: skip
    assert done.code == 0, done.err
    assert "got hello" in done.out, done.out


def test_ephemeral_containers_may_only_be_added(cluster: UpCluster) -> None:
    ok(
        cluster.kubectl(
            "debug", "box", "--image=busybox", "-c", "dbg3", "--", "sh", "-c", "sleep 300"
        )
    )
    # exec reaches a running ephemeral container as any other.
    deadline = time.monotonic() + 60
    while "running" not in _ephemeral_status(cluster, "dbg3").get("state", {}):
        assert time.monotonic() < deadline, _ephemeral_status(cluster, "dbg3")
        time.sleep(0.2)
    done = cluster.kubectl("exec", "box", "-c", "dbg3", "--", "sh", "-c", "echo in dbg3")
    assert (done.code, done.out) == (0, "in dbg3\n"), done.err
    changed = cluster.kubectl(
        "patch", "pod", "box", "--subresource=ephemeralcontainers", "--type=json",
        "-p", '[{"op": "replace", "path": "/spec/ephemeralContainers/2/image", "value": "x"}]',
    )  # fmt: skip
    assert changed.code == 1
    assert (
        'The Pod "box" is invalid: spec.ephemeralContainers[2]: Forbidden: existing ephemeral '
        'containers "dbg3" may not be changed'
    ) in changed.err, changed.err
    removed = cluster.kubectl(
        "patch", "pod", "box", "--subresource=ephemeralcontainers", "--type=json",
        "-p", '[{"op": "remove", "path": "/spec/ephemeralContainers/2"}]',
    )  # fmt: skip
    assert removed.code == 1
    assert 'existing ephemeral containers "dbg3" may not be removed' in removed.err, removed.err
    bad = cluster.kubectl(
        "patch", "pod", "box", "--subresource=ephemeralcontainers", "--type=json",
        "-p", '[{"op": "add", "path": "/spec/ephemeralContainers/-", "value": {"name": "main",'
        ' "image": "busybox", "ports": [{"containerPort": 80}], "targetContainerName": "nope"}}]',
    )  # fmt: skip
    assert bad.code == 1
    for part in (
        'spec.ephemeralContainers[3].name: Duplicate value: "main"',
        "spec.ephemeralContainers[3].ports: Forbidden: cannot be set for an Ephemeral Container",
        'spec.ephemeralContainers[3].targetContainerName: Not found: "nope"',
    ):
        assert part in bad.err, bad.err
    # A plain pod update may not touch them; a new pod may not have them.
    plain = cluster.kubectl(
        "patch", "pod", "box", "--type=json",
        "-p", '[{"op": "remove", "path": "/spec/ephemeralContainers/2"}]',
    )  # fmt: skip
    assert plain.code == 1
    assert "pod updates may not change fields other than" in plain.err, plain.err
    created = cluster.kubectl(
        "run", "eph", "--image=busybox", "--restart=Never",
        "--overrides", '{"spec": {"ephemeralContainers": [{"name": "e", "image": "busybox"}]}}',
        "--", "sleep", "1",
    )  # fmt: skip
    assert created.code == 1
    assert "spec.ephemeralContainers: Forbidden: cannot be set on create" in created.err, (
        created.err
    )


def test_debug_it_under_a_terminal(cluster: UpCluster) -> None:
    """`kubectl debug -it --target`: the ephemeral container gets a terminal of its own, the
    target's environment, and the keys typed."""
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    kubectl = f"{venv_bin() / 'kubectl'} --kubeconfig {cluster.kubeconfig}"
    command = (
        f"{kubectl} debug -it box --image=busybox --target=main -c dbg4 -- "
        "sh -c 'read x; tty; echo got $x $GREETING'"
    )
    proc = subprocess.Popen(
        ["script", "-qec", command, "/dev/null"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"hello\r")
        proc.stdin.flush()
        out = b""
        deadline = time.monotonic() + 120
        while b"got hello" not in out and time.monotonic() < deadline:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            out += chunk
        assert b"got hello hello-from-env" in out, out
        assert b"/dev/pts/" in out, out
        assert proc.wait(60) == 0, out
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
