"""kubectl exec, attach, cp and port-forward into real containers: the kubelet's streaming calls
relayed to containerd's streaming server (kubelet/cristream.py) under the CRI runtime.

Reuses test_cri_containerd's private containerd and cluster (its fixtures; the same cleanup
leaves the machine as found). Needs root and Debian's containerd, runc,
containernetworking-plugins and busybox-static, installed or skipped as there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import venv_bin
from tests.e2e.test_cri_containerd import WEB, cluster, containerd, kubectl  # noqa: F401
from tinykube.containerd import Containerd
from tinykube.launcher import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

# Its own bridge, cgroup root and pod network (read by test_cri_containerd's fixtures), so that
# it may run while test_cri_containerd does.
BRIDGE = "tkcni-stream"
CGROUP_ROOT = "/tinykube-e2e-stream"
CLUSTER_CIDR = "10.246.0.0/16"
NS = "cri-stream"
BOX = f"""
apiVersion: v1
kind: Pod
metadata:
  name: box
  namespace: {NS}
  annotations: {{kubectl.kubernetes.io/default-container: main}}
spec:
  containers:
  - name: main
    image: {WEB}
    command:
    - sh
    - -c
    - mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www
    workingDir: /tmp
    env:
    - {{name: GREETING, value: hello-from-env}}
"""
READER = f"""
apiVersion: v1
kind: Pod
metadata:
  name: reader
  namespace: {NS}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: {WEB}
    command:
    - sh
    - -c
    - 'while read line; do echo "echo: $line"; echo "err: $line" >&2; done; echo bye'
    stdin: true
    stdinOnce: true
"""


def run(cl: LocalCluster, *args: str, stdin: str | bytes | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(cl.kubeconfig), "-n", NS, *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        timeout=120,
    )
    return (
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )


@pytest.fixture(scope="module")
def box(cluster: LocalCluster) -> Iterator[LocalCluster]:  # noqa: F811
    kubectl(cluster, "create", "namespace", NS)
    kubectl(cluster, "apply", "-f", "-", stdin=BOX)
    kubectl(cluster, "wait", "-n", NS, "--for=condition=Ready", "pod/box", "--timeout=120s")
    yield cluster
    kubectl(cluster, "delete", "namespace", NS, "--wait=false")
    kubectl(cluster, "delete", "pods", "--all", "-n", NS, "--grace-period=0", "--force")


def test_exec_echo_env_and_working_directory(box: LocalCluster) -> None:
    assert run(box, "exec", "box", "--", "echo", "hi") == (0, "hi\n", "")
    code, out, err = run(box, "exec", "box", "--", "sh", "-c", 'echo "$GREETING $(pwd)"')
    assert (code, out) == (0, "hello-from-env /tmp\n"), err


def test_exec_stderr_and_exit_code(box: LocalCluster) -> None:
    assert run(box, "exec", "box", "--", "sh", "-c", "echo out; echo err >&2") == (
        0,
        "out\n",
        "err\n",
    )
    code, _, err = run(box, "exec", "box", "--", "sh", "-c", "exit 3")
    assert (code, err) == (3, "command terminated with exit code 3\n")


def test_exec_missing_command_and_container(box: LocalCluster) -> None:
    code, _, err = run(box, "exec", "box", "-c", "main", "--", "no-such-command")
    assert code != 0
    assert "no-such-command" in err, err
    code, _, err = run(box, "exec", "box", "-c", "nope", "--", "true")
    assert code == 1
    assert "container nope is not valid for pod box" in err, err


def test_exec_stdin_through_cat(box: LocalCluster) -> None:
    text = "".join(f"line {i}\n" for i in range(5000))
    code, out, err = run(box, "exec", "-i", "box", "-c", "main", "--", "cat", stdin=text)
    assert code == 0, err
    assert out == text


# The client's terminal size reaches containerd's pty as resizes after the process has started
# (CRI's Exec and Attach carry no initial size; containerd applies the resize stream once the
# process exists, as it does for kube's kubelet), so a command that reads the size at once can
# race them and see 0 rows (busybox's `stty size` then prints a stale errno and nothing else).
# And kubectl attach (so `run -it`) sends two sizes: the client's plus one row and one column,
# then the client's (kubectl's "fake resizing +1" that makes a reattached screen redraw); a
# command reading between the two sees the first: `size 42 102` for 41x101, in 2 of 30 runs
# of `run -it` on a loaded machine when the commands waited for any size but 0. So they wait,
# up to 20 s, for the client's size itself, as an interactive shell is redrawn on each SIGWINCH,
# and print the first size they read.


def stty_wait(rows: int, cols: int) -> str:
    """A shell loop: wait until the terminal is `rows` x `cols` (at most 400 polls of 50 ms),
    then print `size <rows> <cols> after <polls> (first <size>)`, or the last size seen."""
    return (
        f'i=0; first=; until s=$(stty size 2>/dev/null) && first="${{first:-$s}}" && '
        f'[ "$s" = "{rows} {cols}" ]; do i=$((i+1)); [ "$i" -gt 400 ] && break; sleep 0.05; '
        'done; echo "size $s after $i (first $first)"'
    )


def _size_lines(out: bytes | str) -> str:
    text = out.decode(errors="replace") if isinstance(out, bytes) else out
    return " | ".join(line.strip() for line in text.splitlines() if "size" in line) or text[-400:]


def test_exec_tty_under_a_pty(box: LocalCluster) -> None:
    """`kubectl exec -it` from a terminal: containerd gives the command a terminal of the
    client's size."""
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    kubectl_cmd = f"{venv_bin() / 'kubectl'} --kubeconfig {box.kubeconfig} -n {NS}"
    command = (
        f"stty cols 91 rows 33; {kubectl_cmd} exec -it box -c main -- "
        f"sh -c 'tty; {stty_wait(33, 91)}; exit 4'"
    )
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "/dev/pts/" in done.stdout, done.stdout + done.stderr
    assert "size 33 91" in done.stdout, _size_lines(done.stdout)
    assert done.returncode == 4, done.stdout


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cp_directory_round_trip(box: LocalCluster, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    code, _, err = run(box, "cp", "-c", "main", str(src), "box:/tmp/copied")
    assert code == 0, err
    code, out, err = run(box, "exec", "box", "-c", "main", "--", "ls", "/tmp/copied/sub")
    assert (code, out) == (0, "b.bin\n"), err
    back = tmp_path / "back"
    code, _, err = run(box, "cp", "-c", "main", "box:/tmp/copied", str(back))
    assert code == 0, err
    for rel in ("a.txt", "sub/b.bin"):
        assert _digest(back / rel) == _digest(src / rel), rel


def test_attach_to_a_stdin_container(box: LocalCluster) -> None:
    """`kubectl attach -i`: input reaches the container's stdin (containerd keeps it open),
    stdout and stderr come back apart; stdinOnce closes it when the attach's input ends."""
    kubectl(box, "apply", "-f", "-", stdin=READER)
    kubectl(box, "wait", "-n", NS, "--for=condition=Ready", "pod/reader", "--timeout=120s")
    code, out, err = run(box, "attach", "-i", "reader", stdin="one\ntwo\n")
    assert code == 0, err
    assert out == "echo: one\necho: two\nbye\n"
    assert "err: one\nerr: two\n" in err, err
    kubectl(box, "wait", "-n", NS, "--for=jsonpath={.status.phase}=Succeeded", "pod/reader")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_port_forward_carries_100_requests(box: LocalCluster) -> None:
    """kubectl's port-forward (SPDY in a WebSocket to the apiserver), one kubelet call per
    connection, each a SPDY connection to containerd dialing the port in the pod's netns."""
    local = _free_port()
    proc = subprocess.Popen(
        [
            str(venv_bin() / "kubectl"),
            "--kubeconfig",
            str(box.kubeconfig),
            "-n",
            NS,
            "port-forward",
            "pod/box",
            f"{local}:8080",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Forwarding from"), line
        for _ in range(100):
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=30) as resp:
                assert resp.status == 200
                assert resp.read() == b"hello-from-httpd\n"
    finally:
        proc.terminate()
        proc.wait(30)


def test_port_forward_to_a_closed_port_reports_the_error(box: LocalCluster) -> None:
    local = _free_port()
    proc = subprocess.Popen(
        [
            str(venv_bin() / "kubectl"),
            "--kubeconfig",
            str(box.kubeconfig),
            "-n",
            NS,
            "port-forward",
            "pod/box",
            f"{local}:9",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("Forwarding from")
        # kubectl prints the error stream's message once it has read it, after the local
        # connection has failed: its stderr is read until it does.
        stderr = proc.stderr
        reader = threading.Thread(target=lambda: lines.extend(stderr), daemon=True)
        reader.start()
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=30).read()
        deadline = time.monotonic() + 60
        while not any("error forwarding port 9 to pod" in line for line in lines):
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(30)


def test_debug_runs_an_ephemeral_container_in_the_pods_sandbox(box: LocalCluster) -> None:
    """`kubectl debug --image --target`: containerd runs the image as a container of the pod's
    sandbox, so it shares the pod's network (the httpd on localhost:8080), in the target's PID
    namespace (it sees httpd)."""
    code, _, err = run(
        box, "debug", "box", f"--image={WEB}", "--target=main", "-c", "dbg",
        "--", "sh", "-c", "wget -qO- http://localhost:8080/; ps -o comm | grep -c httpd",
    )  # fmt: skip
    assert code == 0, err
    pods = json.loads(kubectl(box, "get", "pod", "box", "-n", NS, "-o", "json"))
    assert [c["name"] for c in pods["spec"]["ephemeralContainers"]] == ["dbg"]

    def terminated() -> dict[str, Any] | None:
        pod = json.loads(kubectl(box, "get", "pod", "box", "-n", NS, "-o", "json"))
        for status in pod["status"].get("ephemeralContainerStatuses", []):
            if status["name"] == "dbg" and "terminated" in status["state"]:
                return dict(status["state"]["terminated"])
        return None

    deadline = time.monotonic() + 120
    while (state := terminated()) is None:
        assert time.monotonic() < deadline, "the ephemeral container did not finish"
        time.sleep(0.5)
    assert state["exitCode"] == 0, state
    code, out, err = run(box, "logs", "box", "-c", "dbg")
    assert (code, out) == (0, "hello-from-httpd\n1\n"), err


def test_spdy_exec_into_a_container(box: LocalCluster) -> None:
    """kubectl's plain SPDY/3.1 client (apiserver/spdyupgrade.py) against containerd."""
    env = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}
    text = "".join(f"line {i}\n" for i in range(2000))
    done = subprocess.run(
        [str(venv_bin() / "kubectl"), "--kubeconfig", str(box.kubeconfig), "-n", NS,
         "exec", "-i", "box", "--", "cat"],
        input=text.encode(), capture_output=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip
    assert (done.returncode, done.stdout.decode()) == (0, text), done.stderr


def test_run_it_rm_gets_the_containers_terminal(box: LocalCluster) -> None:
    """`kubectl run -it --rm` from a terminal: containerd gives the `tty: true` container its
    terminal, attach carries the keys typed and the client's size, and the pod is deleted."""
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    kubectl_cmd = f"{venv_bin() / 'kubectl'} --kubeconfig {box.kubeconfig} -n {NS}"
    command = (
        f"stty cols 101 rows 41; {kubectl_cmd} run -it --rm --restart=Never typed "
        f"--image={WEB} --command -- sh -c 'read x; tty; {stty_wait(41, 101)}; echo got $x'"
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
        assert b"size 41 101" in out, _size_lines(out)
        assert b'pod "typed" deleted' in out, out
        assert proc.wait(60) == 0
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _kubelet_pid(endpoint: str) -> int:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"-m kubelet " in cmdline and endpoint.encode() in cmdline:
                found.append(int(entry))
    assert len(found) == 1, found
    return found[0]


def test_300_execs_leak_nothing(box: LocalCluster, containerd: Containerd) -> None:  # noqa: F811
    """300 Python-client exec calls: the kubelet's and containerd's open files are back where
    they were (each call is a CRI Exec and a SPDY connection to containerd's stream server)."""
    k8s = pytest.importorskip("kubernetes")
    from kubernetes.stream import stream

    api = k8s.client.CoreV1Api(k8s.config.new_client_from_config(config_file=str(box.kubeconfig)))
    kubelet = _kubelet_pid(containerd.paths.endpoint)
    assert containerd.proc is not None
    runtime = containerd.proc.pid

    def one(i: int) -> None:
        out = stream(
            api.connect_get_namespaced_pod_exec, "box", NS, command=["echo", str(i)],
            container="main", stderr=True, stdin=False, stdout=True, tty=False,
        )  # fmt: skip
        assert out == f"{i}\n"

    one(-1)
    before = (len(os.listdir(f"/proc/{kubelet}/fd")), len(os.listdir(f"/proc/{runtime}/fd")))
    for i in range(300):
        one(i)
    deadline = time.monotonic() + 60
    while True:
        after = (len(os.listdir(f"/proc/{kubelet}/fd")), len(os.listdir(f"/proc/{runtime}/fd")))
        if all(a <= b + 2 for a, b in zip(after, before, strict=True)):
            break
        assert time.monotonic() < deadline, f"open files (kubelet, containerd) {before} -> {after}"
        time.sleep(0.5)
