"""`tinykube up` in a subprocess, then the README's grpcurl walkthrough and the CLI against it.

The walkthrough commands are not copied here: they are read from README.md (the `console`
blocks between the walkthrough markers), run in order by one bash process with the real grpcurl
from the virtualenv, and each command's output is checked against the README's: every line the
README shows must appear, in order (`...` marks trimmed output), after values that differ per
run (uids, resourceVersions, timestamps) are masked on both sides.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import UpCluster, tinykube_command, venv_bin

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"
START_MARK = "<!-- walkthrough:start -->"
END_MARK = "<!-- walkthrough:end -->"
README_ADDRESS = "localhost:6443"
# where the README's grpcurl commands find the CA and the admin's certificate
README_PKI = ".tinykube/pki/"

_VOLATILE = re.compile(
    r'"(uid|resource_version|resourceVersion|generation|creation_timestamp|creationTimestamp|'
    r"deletion_timestamp|deletionTimestamp|deletion_grace_period_seconds|last_transition_time|"
    r'lastTransitionTime|time_added|timeAdded|start_time|startTime)": "[^"]*"'
)


@dataclass
class Step:
    command: str
    expected: list[str]

    @property
    def expects_error(self) -> bool:
        return any(line.strip() == "ERROR:" for line in self.expected)


def walkthrough_steps(text: str) -> list[Step]:
    """The `$ command` lines of the walkthrough's console blocks, each with the output shown."""
    section = text.split(START_MARK, 1)[1].split(END_MARK, 1)[0]
    steps: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", section, re.DOTALL):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith("$ "):
                steps[-1].expected.append(line)
                i += 1
                continue
            command = line[2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + lines[i]
            steps.append(Step(command, []))
            i += 1
    return steps


def normalise(line: str) -> str:
    return _VOLATILE.sub(lambda m: f'"{m.group(1)}": "*"', line.strip())


def missing_line(expected: list[str], actual: list[str]) -> str | None:
    """The first expected line not found (in order) in `actual`, or None if all are there."""
    remaining = iter(normalise(a) for a in actual)
    for line in expected:
        want = normalise(line)
        if not want or want == "...":
            continue
        if not any(got == want for got in remaining):
            return line
    return None


def run_steps(steps: list[Step], api: str, pki: Path) -> list[tuple[int, list[str]]]:
    """Run every command in one bash (so `RV=$(...)` carries over); (exit code, output) each."""
    script = ["set -u", f'export PATH="{venv_bin()}:$PATH"']
    for n, step in enumerate(steps):
        command = step.command.replace(README_ADDRESS, api).replace(README_PKI, f"{pki}/")
        script += [f"echo '@@@BEGIN {n}'", f"{{ {command} ; }} 2>&1", f'echo "@@@END {n} $?"']
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], capture_output=True, text=True, timeout=300
    )
    results: list[tuple[int, list[str]]] = []
    current: list[str] = []
    for line in done.stdout.splitlines():
        if line.startswith("@@@BEGIN "):
            current = []
        elif line.startswith("@@@END "):
            results.append((int(line.split()[2]), current))
        else:
            current.append(line)
    assert len(results) == len(steps), f"walkthrough script died:\n{done.stdout}\n{done.stderr}"
    return results


def test_readme_walkthrough_parses() -> None:
    steps = walkthrough_steps(README.read_text())
    commands = [s.command for s in steps]
    assert any("tinykube.v1.Pods/Bind" in c for c in commands)
    assert any("tinykube.v1.Pods/Watch" in c and "$RV" in c for c in commands)
    assert sum(s.expects_error for s in steps) >= 3  # watch end, AlreadyExists, Aborted
    assert all(c.startswith(("grpcurl ", "RV=", "LEASE_RV=")) for c in commands)


def test_output_matching_masks_volatile_values_and_keeps_order() -> None:
    shown = ['  "uid": "aaa",', "...", '"name": "web"', '"phase": "Pending"']
    actual = ["{", '"uid": "bbb",', '"x": 1', '"name": "web"', '"phase": "Pending"', "}"]
    assert missing_line(shown, actual) is None
    assert missing_line(list(reversed(shown)), actual) == '"name": "web"'
    assert missing_line(['"name": "db"'], actual) == '"name": "db"'


def test_grpcurl_walkthrough_from_readme(tinykube_up: UpCluster) -> None:
    steps = walkthrough_steps(README.read_text())
    results = run_steps(steps, tinykube_up.api, tinykube_up.pki_dir)
    for step, (code, output) in zip(steps, results, strict=True):
        shown = "\n".join(output)
        if step.expects_error:
            assert code != 0, f"expected an error from:\n$ {step.command}\n{shown}"
        else:
            assert code == 0, f"failed ({code}):\n$ {step.command}\n{shown}"
        missing = missing_line(step.expected, output)
        assert missing is None, (
            f"README line {missing!r} not in the output of:\n$ {step.command}\n{shown}"
        )


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
