"""`bench/harness.py` cut short by SIGTERM or SIGINT tears its cluster down as a normal end does.

The harness runs the smoke workload with its own marker in the environment, which every process
it starts inherits (etcd, the components in their own sessions, the creators). SIGTERM comes
once the fake kubelet is up (an op running), SIGINT while the cluster is still starting (its
apiserver spawned). Then the harness must have died of that signal, and no process may be
left whose environment holds the marker, nor any of the pids it printed as the cluster's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
MARK = "TINYKUBE_BENCH_SIGNAL_TEST"


def marked(token: str) -> list[int]:
    """The pids of the processes whose environment holds MARK=token."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def cmdlines(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):  # gone meanwhile
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_cluster_and_leaves_no_process(tmp_path: Path, sig: int) -> None:
    starting = sig == signal.SIGINT
    token = uuid.uuid4().hex
    tmp = tmp_path / "tmp"  # where the harness makes its cluster's work dir
    tmp.mkdir()
    out = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "harness.py"),
            str(ROOT / "bench" / "workloads" / "scheduling_basic.yaml"),
            "--workload",
            "smoke",
            "--no-ceilings",
            "--out-dir",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, MARK: token, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    cluster: dict[str, int] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if starting and "run 1: " in line:
                # The launcher is at work: wait for it to spawn the apiserver (not healthy yet).
                while not any(" -m apiserver " in c for c in cmdlines(marked(token))):
                    assert proc.poll() is None, "".join(lines)
                    time.sleep(0.05)
                break
            if "cluster up: " in line:
                cluster = json.loads(line.split("cluster up: ", 1)[1])
            if "fake kubelet(s)" in line:  # started and SERVING; the nodes are not Ready yet
                assert {"etcd", "apiserver", "scheduler"} <= set(cluster), cluster
                # the harness, etcd, apiserver, scheduler and kubelet
                assert len(marked(token)) >= 5
                break
        else:
            pytest.fail("the harness ended before it was signalled:\n" + "".join(lines))
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=120)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = marked(token)
        for pid in left:  # whatever the harness left, this test does not leave too
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    output = "".join(lines)
    assert proc.returncode == -sig, output[-3000:]
    assert f"{signal.Signals(sig).name}: stopping the cluster" in output
    assert ("cluster up: " in output) is not starting, output[-3000:]
    assert left == [], output[-3000:]
    assert [name for name, pid in cluster.items() if alive(pid)] == []
    assert list(tmp.iterdir()) == []  # the work dir went with the cluster
    assert list(out.iterdir()) == []  # no result for a run cut short
