"""bench/: every workload file plays (its parameters set, its pod templates valid Pods), and the
harness's node labelling follows scheduler_perf's labelNodePrepareStrategy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.registry.pod import validate_pod
from tinykube.v1 import pod_pb2

BENCH = Path(__file__).resolve().parents[2] / "bench"
WORKLOADS = sorted((BENCH / "workloads").glob("*.yaml"))


def load_harness() -> ModuleType:
    # bench/ is a folder of scripts, not a package: load the harness by path, as its helpers do.
    spec = importlib.util.spec_from_file_location("bench_harness", BENCH / "harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_harness", module)
    spec.loader.exec_module(module)
    return module


harness = load_harness()

ZONE = "topology.kubernetes.io/zone"

LABEL_CASES: list[tuple[str, dict[str, Any], int, list[dict[str, str]]]] = [
    ("no labels: every node gets none", {}, 2, [{}, {}]),
    ("`labels` go to every node", {"labels": {"a": "b"}}, 2, [{"a": "b"}, {"a": "b"}]),
    (
        "labelNodePrepareStrategy gives the values round robin, as kube's roundRobinIdx",
        {"labelNodePrepareStrategy": {"labelKey": ZONE, "labelValues": ["m1", "m2", "m3"]}},
        5,
        [{ZONE: "m1"}, {ZONE: "m2"}, {ZONE: "m3"}, {ZONE: "m1"}, {ZONE: "m2"}],
    ),
    (
        "one value labels every node (SchedulingPodAffinity's zone1)",
        {"labelNodePrepareStrategy": {"labelKey": ZONE, "labelValues": ["zone1"]}},
        2,
        [{ZONE: "zone1"}, {ZONE: "zone1"}],
    ),
    (
        "the strategy's key adds to `labels` and wins over the same key there",
        {
            "labels": {"a": "b", ZONE: "x"},
            "labelNodePrepareStrategy": {"labelKey": ZONE, "labelValues": ["m1", "m2"]},
        },
        2,
        [{"a": "b", ZONE: "m1"}, {"a": "b", ZONE: "m2"}],
    ),
]


@pytest.mark.parametrize(
    ("op", "count", "want"), [c[1:] for c in LABEL_CASES], ids=[c[0] for c in LABEL_CASES]
)
def test_node_label_values(op: dict[str, Any], count: int, want: list[dict[str, str]]) -> None:
    assert harness.node_label_values(op, count) == want


def test_label_strategy_without_values_is_refused() -> None:
    op = {"labelNodePrepareStrategy": {"labelKey": ZONE, "labelValues": []}}
    with pytest.raises(ValueError, match="labelValues must not be empty"):
        harness.node_label_values(op, 3)


def templates_used(case: dict[str, Any], params: dict[str, Any]) -> set[str | None]:
    return {
        harness.resolve(op.get("podTemplate"), params)
        for op in case["workloadTemplate"]
        if op["opcode"] in ("createPods", "createReplicaSets", "churn")
    } | {None}  # the ceilings use the default template


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.stem for p in WORKLOADS])
def test_workload_file_plays(path: Path) -> None:
    for case in harness.load_test_cases(path):
        assert case["workloads"], case["name"]
        for workload in case["workloads"]:
            params = {**case.get("defaultParams", {}), **workload.get("params", {})}
            for op in case["workloadTemplate"]:
                harness.op_count(op, params)  # KeyError names an unset $param
                for value in op.values():
                    harness.resolve(value, params)
                if op["opcode"] == "createNodes":
                    assert len(harness.node_label_values(op, 7)) == 7
            for name in templates_used(case, params):
                body = harness.pod_template(case, name)
                pod = json_format.ParseDict(body, pod_pb2.Pod())  # unknown fields raise
                pod.metadata.name, pod.metadata.namespace = "p", "default"
                # the apiserver's defaults for what a template leaves out
                pod.spec.restartPolicy = pod.spec.restartPolicy or "Always"
                pod.spec.dnsPolicy = pod.spec.dnsPolicy or "ClusterFirst"
                pod.status.phase = "Pending"
                assert validate_pod(pod) == [], (case["name"], workload["name"], name)
