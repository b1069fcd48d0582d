"""What the e2e tests of the containerd runtime share."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.e2e.conftest import READY_LINE, pump, tinykube_command, venv_bin
from tinykube.containerd import APT_PACKAGES, install_hint, missing_prerequisites


def cri_prerequisites() -> None:
    """Install Debian's containerd, runc, CNI plugins and busybox-static with apt when missing
    (as root); without them: skip saying why, or fail under CI=true."""
    why = missing_prerequisites()
    if why and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update"], capture_output=True, check=False, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", *APT_PACKAGES], capture_output=True, check=False, env=env
        )
        why = missing_prerequisites()
    if why:
        message = f"the containerd runtime cannot run here: {'; '.join(why)}. {install_hint()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


class UpContainerd:
    """`tinykube up --runtime containerd --free-ports --data-dir DATA`, started in its own
    session (a Ctrl-C on pytest must not race `stop`), its output read by a thread into
    `output` as `ready` and `stop` take it."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.process = subprocess.Popen(
            [*tinykube_command(), "up", "--runtime", "containerd", "--free-ports",
             "--data-dir", str(data)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=pump, args=(self.process.stdout, self.lines), daemon=True).start()

    async def ready(self) -> bool | None:
        """True once up printed READY_LINE, None before (for `eventually`); fails the test
        if up exited first."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return None
            if line is None:
                pytest.fail("tinykube up exited:\n" + "\n".join(self.output))
            self.output.append(line)
            if line == READY_LINE:
                return True

    @property
    def registry(self) -> str:
        """The local image registry's address, as up printed it once ready."""
        return next(ln.split()[1] for ln in self.output if ln.startswith("registry 127.0.0.1:"))

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The real kubectl with up's kubeconfig; with `check`, asserts it succeeded."""
        done = subprocess.run(
            [str(venv_bin() / "kubectl"), "--kubeconfig", str(self.data / "kubeconfig"), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def kubectl(self, *args: str) -> str:
        """What a kubectl command that must succeed printed."""
        return self.run(*args).stdout

    def stop(self) -> None:
        """Ctrl-C (if up still runs), then the rest of its output; `process.returncode` is
        then up's exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(120)
        while (line := self.lines.get(timeout=10)) is not None:
            self.output.append(line)
