"""The benchmark harness end to end: SchedulingBasic/smoke (100 hollow nodes, 500 pods).

Runs `bench/harness.py` exactly as `make bench-smoke` does (etcd, apiserver, scheduler and a
fake-runtime kubelet as separate processes, pods from a separate creator process) and checks
what the harness reports: every pod bound exactly once on the watch and never moved, a List
after the run agreeing with the watch on every pod's node, every pod Running, and the figures
all there. No speed is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
PODS = 500


def test_smoke_workload_binds_every_pod_exactly_once(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "harness.py"),
            str(ROOT / "bench" / "workloads" / "scheduling_basic.yaml"),
            "--workload",
            "smoke",
            "--out-dir",
            str(tmp_path),
            "--ceiling-count",
            "500",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = list(tmp_path.glob("SchedulingBasic-smoke-*-run1.json"))
    assert len(runs) == 1, list(tmp_path.iterdir())
    result = json.loads(runs[0].read_text())
    assert runs[0].with_suffix(".png").stat().st_size > 0

    check = result["bind_check"]
    assert check["pods"] == PODS
    assert check["bound"] == PODS
    assert check["bound_exactly_once"] == PODS
    assert check["moved"] == 0
    # A List after the run agrees with the watch on every pod's node.
    assert check["final_list_pods"] == PODS
    assert check["final_list_disagrees"] == 0

    assert result["creation"]["created"] == PODS
    assert result["creation"]["errors"] == 0
    assert result["latency"]["scheduling"]["count"] == PODS
    assert result["latency"]["startup"]["count"] == PODS
    assert 0 < result["latency"]["scheduling"]["p50"] <= result["latency"]["startup"]["p99"]
    assert sum(result["throughput"]["samples"]) > 0
    for name in ("etcd", "apiserver", "scheduler", "kubelet-hollow-0-0"):
        assert result["processes"][name]["cpu_seconds"] > 0, name
        assert result["processes"][name]["peak_rss_mib"] > 0, name
    rates = result["apiserver_requests_per_second"]
    assert rates.get("Pods/Bind/OK", 0) + rates.get("Pods/BindBatch/OK", 0) > 0
    assert result["etcd_requests_per_second"]["Txn"] > 0
    assert result["ceilings"]["apiserver_create_alone"]["created"] == PODS
    assert result["ceilings"]["etcd_txn_put"]["per_second"] > 0
