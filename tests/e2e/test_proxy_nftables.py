"""The nftables proxier against a real kernel: `nft` programs a throwaway network namespace
(`unshare -n`, so the host's rules are never touched and nothing is left behind), and TCP
connections to cluster IPs and a node port land on the endpoints. Needs root and Debian's
nftables (installed with apt as root when missing); under CI=true a missing prerequisite fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _need_nft() -> None:
    if shutil.which("nft") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "nftables"],
            capture_output=True,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    problem = ""
    if os.geteuid() != 0:
        problem = "the nftables proxier needs root"
    elif shutil.which("nft") is None:
        problem = "nft is not installed (apt-get install nftables)"
    elif shutil.which("unshare") is None:
        problem = "unshare (util-linux) is not installed"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="module")
def observed() -> dict[str, Any]:
    _need_nft()
    proc = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.e2e.nftprobe"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


PODS = {"10.244.1.5", "10.244.1.6", "10.244.2.7"}


def test_cluster_ip_spreads_over_every_endpoint(observed: dict[str, Any]) -> None:
    assert set(observed["cluster_ip"]) == PODS, observed["cluster_ip"]
    assert set(observed["back_to_3"]) == PODS, observed["back_to_3"]


def test_node_port_answers_on_the_node_address(observed: dict[str, Any]) -> None:
    assert set(observed["node_port"]) <= PODS and len(observed["node_port"]) >= 2


def test_client_ip_affinity_keeps_one_backend(observed: dict[str, Any]) -> None:
    assert len(observed["sticky"]) == 1 and set(observed["sticky"]) <= PODS


def test_no_endpoints_refuses_at_once(observed: dict[str, Any]) -> None:
    assert observed["scaled_to_0"] == {"refused": 3}
    assert observed["node_port_scaled_to_0"] == {"refused": 3}
    assert observed["load_balancer_scaled_to_0"] == {"refused": 3}


def test_load_balancer_ingress_ip_spreads_over_the_endpoints(observed: dict[str, Any]) -> None:
    assert set(observed["load_balancer"]) == PODS, observed["load_balancer"]


def test_affinity_timeout_change_is_a_partial_sync(observed: dict[str, Any]) -> None:
    assert observed["retimed_full_rewrites"] == 0
    assert "timeout 30s" in observed["sticky_sets"], observed["sticky_sets"]
    assert "timeout 3h" not in observed["sticky_sets"], observed["sticky_sets"]
    assert len(observed["sticky_after_retime"]) == 1
    assert set(observed["sticky_after_retime"]) <= PODS


def test_table_gone_after_close(observed: dict[str, Any]) -> None:
    assert "tinykube-proxy-probe" in observed["tables_running"]
    assert "tinykube-proxy-probe" not in observed["tables_stopped"]
