"""What the e2e tests of the containerd runtime share."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

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
