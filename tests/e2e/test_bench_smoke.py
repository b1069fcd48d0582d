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


def test_load_workload_keeps_its_invariants(tmp_path: Path) -> None:
    """bench/load.py's CI size (10 hollow nodes, 300 pods in Deployments with a Service each):
    every phase converges, no pod is lost or bound twice, no node goes NotReady and no Lease
    expires; the figures of every phase are there. No speed is asserted."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "load.py"),
            str(ROOT / "bench" / "workloads" / "load.yaml"),
            "--workload",
            "ci",
            "--out-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (out,) = tmp_path.glob("Load-ci-tls-*.json")
    result = json.loads(out.read_text())
    assert result["complete"], {k: p["incomplete"] for k, p in result["phases"].items()}
    assert result["invariants"] == {
        "pods_lost": 0,
        "nodes_not_ready": 0,
        "leases_expired": 0,
        "pods_bound_twice": 0,
    }
    assert result["final_list"]["disagree"] == 0
    assert result["health"]["nodes"] == 10
    assert result["health"]["lease_polls"] > 0
    phases = result["phases"]
    assert list(phases) == ["create", "scale", "roll", "delete"]
    assert result["pods_target"] == 300
    create = phases["create"]
    assert create["pods_created"] == 300
    assert create["latency"]["startup"]["count"] == 300
    assert create["pacing"]["pods_offered"] == 300
    assert not create["harness_errors"], create["harness_first_errors"]
    # The roll replaced every pod: as many new pods as the scaled Deployments hold.
    assert phases["roll"]["pods_created"] == phases["roll"]["pacing"]["pods_offered"]
    assert phases["delete"]["pacing"]["pods_deleted"] == phases["roll"]["pods_created"]
    for p in phases.values():
        assert p["apiserver_latency"], p["phase"]
        assert p["list_latency"]["cluster"]["count"] >= 1
        assert p["processes"]["apiserver"]["cpu_seconds"] > 0
        assert p["etcd"]["db_mib"] > 0 and p["etcd"]["quota_mib"] == 8192
        assert (tmp_path / f"{out.stem}-{p['phase']}.png").stat().st_size > 0
    assert phases["create"]["apiserver_latency"]["Deployments/Create"]["count"] > 0
