"""A gated pod across real processes (`tinykube up`, the real kubectl): it waits while ungated
pods created after it run, its gate can only be removed, and once removed it is scheduled and
runs. Waits poll conditions with a bound, never sleep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gated-pod.yaml"


WITNESS = """
apiVersion: v1
kind: Pod
metadata:
  name: witness
  labels: {app: witness}
spec:
  containers:
  - name: main
    image: busybox
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 50m, memory: 16Mi}
"""


def test_a_gated_pod_waits_until_its_gate_is_removed_then_runs(tinykube_up: UpCluster) -> None:
    kubectl = tinykube_up.kubectl
    assert ok(kubectl("apply", "-f", str(EXAMPLE))) == "pod/gated created\n"
    table = ok(kubectl("get", "pod", "gated", "--no-headers"))
    assert table.split()[:3] == ["gated", "0/1", "SchedulingGated"]

    def pod(name: str) -> Any:
        return json.loads(ok(kubectl("get", "pod", name, "-o", "json")))

    # A pod created after it is scheduled and runs; the gated one is still untouched.
    ok(kubectl("apply", "-f", "-", stdin=WITNESS))
    until(lambda: pod("witness")["status"]["phase"] == "Running", "the witness to run")
    gated = pod("gated")
    assert "nodeName" not in gated["spec"]
    [cond] = gated["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "PodScheduled",
        "False",
        "SchedulingGated",
    )
    assert cond["message"] == "Scheduling is blocked due to non-empty scheduling gates"
    # The scheduler agrees: its Explain shows the PreEnqueue verdict, no attempt.
    explained = tinykube_up.cli(
        "explain", "pod", "gated", "--scheduler", tinykube_up.endpoints["scheduler"]
    )
    assert explained.code == 0, explained.err
    assert explained.out == (
        "Pod default/gated: unschedulable: waiting for scheduling gates: [example.com/approval]\n"
    )

    # Gates may only be removed: kube-apiserver's answer, through kubectl.
    added = kubectl(
        "patch", "pod", "gated", "--type=json",
        "-p", '[{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "more"}}]',
    )  # fmt: skip
    assert added.code == 1
    assert (
        "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new "
        "scheduling gate 'more'"
    ) in added.err

    removed = kubectl(
        "patch", "pod", "gated", "--type=json",
        "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]',
    )  # fmt: skip
    assert ok(removed) == "pod/gated patched\n"
    until(lambda: pod("gated")["status"].get("phase") == "Running", "the released pod to run")
    released = pod("gated")
    assert released["spec"]["nodeName"]
    scheduled = [c for c in released["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [(c["status"], c.get("reason", "")) for c in scheduled] == [("True", "")]
    table = ok(kubectl("get", "pod", "gated", "--no-headers"))
    assert table.split()[2] == "Running"
