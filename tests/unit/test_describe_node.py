"""`describe node`'s pod table and Allocated resources, checked against kubectl v1.37.

The expected amounts and percentages are what the real kubectl printed for the same node and
pods (kubectl describe node against tinykube's REST API); the columns are tinykube's own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest

from tinykube.cli.describe import describe_node
from tinykube.manifest import load_manifests
from tinykube.quantity import BINARY_SI, DECIMAL_EXPONENT, DECIMAL_SI, format_quantity

NOW = datetime(2026, 12, 1, tzinfo=UTC)

SMALL_NODE = """
apiVersion: v1
kind: Node
metadata: {name: node-1}
status:
  capacity: {cpu: "2", memory: 24683584Ki, pods: "110"}
  allocatable: {cpu: "2", memory: 24683584Ki, pods: "110"}
"""

SMALL_PODS = """
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default}
spec:
  nodeName: node-1
  containers:
  - name: one
    image: busybox
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: 300m, memory: 128Mi}
  - name: two
    image: busybox
    resources:
      requests: {cpu: 250m, memory: 100M, example.com/gpu: "1"}
      limits: {example.com/gpu: "1"}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: default}
spec:
  nodeName: node-1
  containers: [{name: one, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: c, namespace: default}
spec:
  nodeName: node-1
  initContainers:
  - name: init
    image: busybox
    resources: {requests: {cpu: "1", memory: 10Mi}}
  containers:
  - name: one
    image: busybox
    resources: {requests: {cpu: 200m, memory: 20Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: done, namespace: default}
spec:
  nodeName: node-1
  containers:
  - name: one
    image: busybox
    resources: {requests: {cpu: "1"}}
status: {phase: Succeeded}
"""

BIG_NODE = """
apiVersion: v1
kind: Node
metadata: {name: nx}
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "110"}
  allocatable:
    cpu: 3500m
    memory: 7Gi
    pods: "110"
    example.com/gpu: "4"
    hugepages-2Mi: 1Gi
    ephemeral-storage: 10Gi
    example.com/aaa: "2"
"""

BIG_PODS = """
apiVersion: v1
kind: Pod
metadata: {name: d, namespace: default}
spec:
  nodeName: nx
  containers:
  - name: one
    image: busybox
    resources:
      requests:
        cpu: 700m
        memory: 1Gi
        example.com/gpu: "1"
        hugepages-2Mi: 256Mi
        ephemeral-storage: 1Gi
      limits: {cpu: "7", memory: 14Gi, example.com/gpu: "1", hugepages-2Mi: 256Mi}
  - name: two
    image: busybox
    resources: {requests: {memory: 512M}}
"""


def objects(text: str) -> list[Any]:
    return [o.obj for o in load_manifests(text)]


def section(out: str, title: str, end: str) -> list[str]:
    """The lines from `title` to `end`, each with its runs of spaces as one (the columns are
    tinykube's; kubectl's tabwriter spaces them differently)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    stop = next(i for i, line in enumerate(lines) if line.startswith(end))
    return [" ".join(line.split()) for line in lines[start:stop]]


CASES = [
    pytest.param(
        SMALL_NODE,
        SMALL_PODS,
        [
            "Non-terminated Pods: (3 in total)",
            "Namespace Name CPU Requests CPU Limits Memory Requests Memory Limits Age",
            "--------- ---- ------------ ---------- --------------- ------------- ---",
            "default a 350m (17%) 300m (15%) 167108864 (0%) 128Mi (0%) <unknown>",
            "default b 0 (0%) 0 (0%) 0 (0%) 0 (0%) <unknown>",
            "default c 1 (50%) 0 (0%) 20Mi (0%) 0 (0%) <unknown>",
        ],
        [
            "Allocated resources:",
            "(Total limits may be over 100 percent, i.e., overcommitted.)",
            "Resource Requests Limits",
            "-------- -------- ------",
            "cpu 1350m (67%) 300m (15%)",
            "memory 188080384 (0%) 128Mi (0%)",
            "ephemeral-storage 0 (0%) 0 (0%)",
        ],
        id="small node, init container and mixed memory suffixes",
    ),
    pytest.param(
        BIG_NODE,
        BIG_PODS,
        [
            "Non-terminated Pods: (1 in total)",
            "Namespace Name CPU Requests CPU Limits Memory Requests Memory Limits Age",
            "--------- ---- ------------ ---------- --------------- ------------- ---",
            "default d 700m (20%) 7 (200%) 1548576Ki (21%) 14Gi (200%) <unknown>",
        ],
        [
            "Allocated resources:",
            "(Total limits may be over 100 percent, i.e., overcommitted.)",
            "Resource Requests Limits",
            "-------- -------- ------",
            "cpu 700m (20%) 7 (200%)",
            "memory 1548576Ki (21%) 14Gi (200%)",
            "ephemeral-storage 1Gi (10%) 0 (0%)",
            "hugepages-2Mi 256Mi (25%) 256Mi (25%)",
            "example.com/aaa 0 0",
            "example.com/gpu 1 1",
        ],
        id="overcommitted limits, hugepages and extended resources",
    ),
    pytest.param(
        SMALL_NODE,
        "",
        [
            "Non-terminated Pods: (0 in total)",
            "Namespace Name CPU Requests CPU Limits Memory Requests Memory Limits Age",
            "--------- ---- ------------ ---------- --------------- ------------- ---",
        ],
        [
            "Allocated resources:",
            "(Total limits may be over 100 percent, i.e., overcommitted.)",
            "Resource Requests Limits",
            "-------- -------- ------",
            "cpu 0 (0%) 0 (0%)",
            "memory 0 (0%) 0 (0%)",
            "ephemeral-storage 0 (0%) 0 (0%)",
        ],
        id="no pods",
    ),
]


@pytest.mark.parametrize(("node", "pods", "pod_rows", "allocated"), CASES)
def test_describe_node_allocated_resources_as_kubectl(
    node: str, pods: str, pod_rows: list[str], allocated: list[str]
) -> None:
    out = describe_node(objects(node)[0], objects(pods) if pods else [], [], NOW)
    assert section(out, "Non-terminated Pods:", "Allocated resources:") == pod_rows
    assert section(out, "Allocated resources:", "Events:") == allocated


@pytest.mark.parametrize(
    ("amount", "fmt", "text"),
    [
        (Fraction(0), BINARY_SI, "0"),
        (Fraction(1350, 1000), DECIMAL_SI, "1350m"),
        (Fraction(2), DECIMAL_SI, "2"),
        (Fraction(1, 2), BINARY_SI, "500m"),
        (Fraction(512), BINARY_SI, "512"),
        (Fraction(167108864), BINARY_SI, "167108864"),
        (Fraction(1585741824), BINARY_SI, "1548576Ki"),
        (Fraction(14 * 2**30), BINARY_SI, "14Gi"),
        (Fraction(10**8), DECIMAL_SI, "100M"),
        (Fraction(1000), DECIMAL_EXPONENT, "1e3"),
        (Fraction(1, 10**10), DECIMAL_SI, "1n"),
    ],
)
def test_quantities_print_canonically(amount: Fraction, fmt: str, text: str) -> None:
    assert format_quantity(amount, fmt) == text


def test_describe_node_system_info_in_kubectls_order() -> None:
    node = objects(
        SMALL_NODE
        + """  nodeInfo:
    machineID: m1
    systemUUID: 3d1219c7-c4c5-404a-aa1f-6d2a48adfda4
    bootID: f7f3adeb-afcc-4d89-83f0-27842646884b
    kernelVersion: "6.1"
    osImage: Debian
    operatingSystem: linux
    architecture: amd64
    containerRuntimeVersion: process://tinykube
    kubeletVersion: tinykube-v0.1.0
    kubeProxyVersion: ""
"""
    )[0]
    out = describe_node(node, [], [], NOW)
    assert section(out, "System Info:", "Non-terminated Pods:") == [
        "System Info:",
        "Machine ID: m1",
        "System UUID: 3d1219c7-c4c5-404a-aa1f-6d2a48adfda4",
        "Boot ID: f7f3adeb-afcc-4d89-83f0-27842646884b",
        "Kernel Version: 6.1",
        "OS Image: Debian",
        "Operating System: linux",
        "Architecture: amd64",
        "Container Runtime Version: process://tinykube",
        "Kubelet Version: tinykube-v0.1.0",
    ]
    # Aligned as kubectl aligns them, on the longest key (kube-proxy's empty one is left out).
    assert "\n  Boot ID:                    f7f3" in out
    assert "\n  Container Runtime Version:  process://tinykube\n" in out
