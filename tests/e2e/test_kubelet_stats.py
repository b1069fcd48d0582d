"""The kubelet's summary API through the apiserver's nodes/proxy, with the real kubectl:
`kubectl get --raw /api/v1/nodes/<node>/proxy/stats/summary` (what metrics-server reads) under
`tinykube up` (process runtime: the containers' usage from /proc)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]


def summary(cluster: UpCluster, node: str, query: str = "") -> dict[str, Any]:
    out = ok(cluster.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/stats/summary{query}"))
    data: dict[str, Any] = json.loads(out)
    return data


def test_stats_summary_through_the_node_proxy(tinykube_up: UpCluster) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stats-busy"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "spin",
                    "image": "busybox",
                    "command": ["sh", "-c", "i=0; while true; do i=$((i+1)); done"],
                }
            ],
        },
    }
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=json.dumps(manifest)))

    def node_of() -> str:
        result = tinykube_up.kubectl("get", "pod", "stats-busy", "-o", "json")
        if result.code != 0:
            return ""
        pod = json.loads(result.out)
        return (
            str(pod["spec"].get("nodeName", "")) if pod["status"].get("phase") == "Running" else ""
        )

    node = until(node_of, "the pod running", 120)

    def pod_stats() -> dict[str, Any] | None:
        for p in summary(tinykube_up, node)["pods"]:
            # The second sample of a container has a rate.
            containers = p["containers"]
            if (
                p["podRef"]["name"] == "stats-busy"
                and containers
                and ("usageNanoCores" in containers[0]["cpu"])
            ):
                return dict(p)
        return None

    stats = until(pod_stats, "the pod's container stats", 120)
    assert stats is not None
    (container,) = stats["containers"]
    assert container["name"] == "spin"
    assert container["cpu"]["usageCoreNanoSeconds"] > 0
    assert container["memory"]["workingSetBytes"] > 0
    assert stats["cpu"]["usageCoreNanoSeconds"] >= container["cpu"]["usageCoreNanoSeconds"]
    full = summary(tinykube_up, node)
    assert full["node"]["nodeName"] == node
    assert full["node"]["memory"]["availableBytes"] > 0
    assert full["node"]["fs"]["capacityBytes"] >= full["node"]["fs"]["availableBytes"] > 0
    assert "fs" not in summary(tinykube_up, node, "?only_cpu_and_memory=true")["node"]
    # Only stats/summary is relayed.
    result = tinykube_up.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/pods")
    assert result.code != 0 and "(NotFound)" in result.err, result.err
    ok(tinykube_up.kubectl("delete", "pod", "stats-busy", "--wait=false"))
