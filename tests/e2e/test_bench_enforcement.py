"""`bench/enforcement.py` runs against the current handler signatures (a tiny round of each
case; no figure is asserted, speed lives in bench/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def test_enforcement_bench_reports_every_case() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "enforcement.py"),
            *("--number", "20", "--repeat", "1"),
            *("--bindings", "10", "--pods", "20", "--nodes", "4"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases = json.loads(proc.stdout)["cases"]
    assert set(cases) == {
        "scheduler bind",
        "kubelet pod status update",
        "kubelet lease renewal",
        "controller manager leader lease",
        "kubelet REST list of its pods",
        "grpc auth_context() on a TLS call",
    }
    assert all(isinstance(us, float | int) for us in cases.values()), cases
