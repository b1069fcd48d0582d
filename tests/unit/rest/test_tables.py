"""Server-side printing: each kind's columns and cells as kube-apiserver's printers produce them.

Expectations are derived from Kubernetes' pkg/printers/internalversion (printPod, printNode, ...)
and apimachinery's duration.HumanDuration, case by case.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import json_format

from tinykube import kinds, tables
from tinykube.duration import human_duration
from tinykube.errors import BadRequestError, InternalError
from tinykube.manifest import to_dict
from tinykube.v1 import node_pb2, pod_pb2
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
WIDGET = dataclasses.replace(kinds.POD, kind="Widget", plural="widgets")


def ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cells(info: kinds.KindInfo, obj: dict[str, Any]) -> list[Any]:
    (row,) = tables.rows(info, [obj], now=NOW)
    return list(row["cells"])


# --- HumanDuration --------------------------------------------------------------------------

DAY = 86400
YEAR = 365 * DAY


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0s"),
        (-1.5, "0s"),  # up to a second of clock skew reads as now
        (-2, "<invalid>"),
        (45, "45s"),
        (119.9, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 12 * 60, "3h12m"),
        (7 * 3600 + 59 * 60, "7h59m"),
        (8 * 3600 + 30 * 60, "8h"),
        (47 * 3600 + 59 * 60, "47h"),
        (2 * DAY, "2d"),
        (2 * DAY + 3 * 3600, "2d3h"),
        (7 * DAY + 23 * 3600, "7d23h"),
        (8 * DAY + 5 * 3600, "8d"),
        (2 * YEAR - DAY, "729d"),
        (2 * YEAR, "2y"),
        (2 * YEAR + 14 * DAY, "2y14d"),
        (4 * YEAR, "4y"),
        (8 * YEAR + 100 * DAY, "8y"),
        (20 * YEAR, "20y"),
    ],
)
def test_human_duration(seconds: float, expected: str) -> None:
    assert human_duration(seconds) == expected


# --- column definitions ---------------------------------------------------------------------

COLUMNS = {
    "CustomResourceDefinition": [("Name", 0), ("Created At", 0)],
    "Pod": [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ],
    "Node": [
        ("Name", 0),
        ("Status", 0),
        ("Roles", 0),
        ("Age", 0),
        ("Version", 0),
        ("Internal-IP", 1),
        ("External-IP", 1),
        ("OS-Image", 1),
        ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ],
    "ReplicaSet": [
        ("Name", 0),
        ("Desired", 0),
        ("Current", 0),
        ("Ready", 0),
        ("Age", 0),
        ("Containers", 1),
        ("Images", 1),
        ("Selector", 1),
    ],
    "Event": [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ],
    "Lease": [("Name", 0), ("Holder", 0), ("Age", 0)],
    "Service": [
        ("Name", 0),
        ("Type", 0),
        ("Cluster-IP", 0),
        ("External-IP", 0),
        ("Port(s)", 0),
        ("Age", 0),
        ("Selector", 1),
    ],
    "Endpoints": [("Name", 0), ("Endpoints", 0), ("Age", 0)],
    "PodDisruptionBudget": [
        ("Name", 0),
        ("Min Available", 0),
        ("Max Unavailable", 0),
        ("Allowed Disruptions", 0),
        ("Age", 0),
    ],
    "Namespace": [("Name", 0), ("Status", 0), ("Age", 0)],
    "Job": [
        ("Name", 0),
        ("Status", 0),
        ("Completions", 0),
        ("Duration", 0),
        ("Age", 0),
        ("Containers", 1),
        ("Images", 1),
        ("Selector", 1),
    ],
    # kube's printDeployment columns
    "Deployment": [
        ("Name", 0),
        ("Ready", 0),
        ("Up-to-date", 0),
        ("Available", 0),
        ("Age", 0),
        ("Containers", 1),
        ("Images", 1),
        ("Selector", 1),
    ],
    "PriorityClass": [
        ("Name", 0),
        ("Value", 0),
        ("Global-Default", 0),
        ("Age", 0),
        ("PreemptionPolicy", 0),
    ],
    "ConfigMap": [("Name", 0), ("Data", 0), ("Age", 0)],
    "MutatingWebhookConfiguration": [("Name", 0), ("Webhooks", 0), ("Age", 0)],
    "ValidatingWebhookConfiguration": [("Name", 0), ("Webhooks", 0), ("Age", 0)],
    "ValidatingAdmissionPolicy": [("Name", 0), ("Validations", 0), ("ParamKind", 0), ("Age", 0)],
    "ValidatingAdmissionPolicyBinding": [
        ("Name", 0),
        ("PolicyName", 0),
        ("ParamRef", 0),
        ("Age", 0),
    ],
    "Secret": [("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)],
    "ServiceAccount": [("Name", 0), ("Secrets", 0), ("Age", 0)],
    "EndpointSlice": [("Name", 0), ("AddressType", 0), ("Ports", 0), ("Endpoints", 0), ("Age", 0)],
    "DaemonSet": [
        ("Name", 0),
        ("Desired", 0),
        ("Current", 0),
        ("Ready", 0),
        ("Up-to-date", 0),
        ("Available", 0),
        ("Node Selector", 0),
        ("Age", 0),
        ("Containers", 1),
        ("Images", 1),
        ("Selector", 1),
    ],
    "ControllerRevision": [("Name", 0), ("Controller", 0), ("Revision", 0), ("Age", 0)],
    "Widget": [("Name", 0), ("Created At", 0)],
    "Role": [("Name", 0), ("Created At", 0)],
    "ClusterRole": [("Name", 0), ("Created At", 0)],
    **{
        kind: [
            ("Name", 0),
            ("Role", 0),
            ("Age", 0),
            ("Users", 1),
            ("Groups", 1),
            ("ServiceAccounts", 1),
        ]
        for kind in ("RoleBinding", "ClusterRoleBinding")
    },
}


@pytest.mark.parametrize("info", [*kinds.ALL_KINDS, WIDGET], ids=lambda i: i.kind)
def test_column_definitions(info: kinds.KindInfo) -> None:
    columns = tables.column_definitions(info)
    assert [(c["name"], c["priority"]) for c in columns] == COLUMNS[info.kind]
    for c in columns:
        assert set(c) == {"name", "type", "format", "description", "priority"}
        assert c["description"]
    # Kubernetes marks the object's own name column with format "name" (kubectl -o name uses it).
    assert [c["name"] for c in columns if c["format"] == "name"] == ["Name"]


def test_column_types_follow_kubernetes() -> None:
    types = {
        kind: [c["type"] for c in tables.column_definitions(info)]
        for kind, info in (
            ("ReplicaSet", kinds.REPLICA_SET),
            ("PriorityClass", kinds.PRIORITY_CLASS),
            ("Widget", WIDGET),
        )
    }
    assert types == {
        "ReplicaSet": ["string", "integer", "integer", "integer", "string", "string", "string",
                       "string"],
        "PriorityClass": ["string", "integer", "boolean", "string", "string"],
        "Widget": ["string", "date"],
    }  # fmt: skip
    assert all(c["type"] == "string" for c in tables.column_definitions(kinds.POD))


def test_column_definitions_are_fresh_copies() -> None:
    tables.column_definitions(kinds.POD)[0]["name"] = "changed"
    assert tables.column_definitions(kinds.POD)[0]["name"] == "Name"


# --- pods -----------------------------------------------------------------------------------


def pod(
    *,
    phase: str = "Running",
    containers: int = 1,
    statuses: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    reason: str = "",
    deleting: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if statuses is not None:
        status["containerStatuses"] = statuses
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    if conditions is not None:
        status["conditions"] = conditions
    if reason:
        status["reason"] = reason
    meta: dict[str, Any] = {"name": "p", "namespace": "default", "creationTimestamp": ago(hours=1)}
    if deleting:
        meta["deletionTimestamp"] = ago(seconds=5)
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}"} for i in range(containers)]}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": meta, "spec": spec, "status": status}


RUNNING = {"running": {"startedAt": ago(minutes=50)}}


def cs(
    state: dict[str, Any] | None = None,
    *,
    ready: bool = False,
    restarts: int = 0,
    finished_ago: float | None = None,
    started: bool | None = None,
    name: str = "c0",
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "ready": ready, "restartCount": restarts}
    if state is not None:
        out["state"] = state
    if finished_ago is not None:
        out["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": ago(seconds=finished_ago)}}
    if started is not None:
        out["started"] = started
    return out


def waiting(reason: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason}}


def terminated(exit_code: int = 0, reason: str = "", signal: int = 0) -> dict[str, Any]:
    t: dict[str, Any] = {"exitCode": exit_code}
    if reason:
        t["reason"] = reason
    if signal:
        t["signal"] = signal
    return {"terminated": t}


READY_TRUE = {"type": "Ready", "status": "True"}
INITIALIZED = {"type": "Initialized", "status": "True"}

POD_CASES: list[tuple[str, dict[str, Any], tuple[str, str, str]]] = [
    ("no status at all", pod(phase=""), ("0/1", "", "0")),
    ("pending", pod(phase="Pending"), ("0/1", "Pending", "0")),
    ("running and ready", pod(statuses=[cs(RUNNING, ready=True)]), ("1/1", "Running", "0")),
    ("running, not ready", pod(statuses=[cs(RUNNING)]), ("0/1", "Running", "0")),
    ("status.reason wins", pod(phase="Failed", reason="Evicted"), ("0/1", "Evicted", "0")),
    ("node lost, not deleted", pod(reason="NodeLost"), ("0/1", "NodeLost", "0")),
    ("node lost while deleting", pod(reason="NodeLost", deleting=True), ("0/1", "Unknown", "0")),
    (
        "scheduling gated",
        pod(
            phase="Pending",
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        ),
        ("0/1", "SchedulingGated", "0"),
    ),
    (
        "unschedulable is still Pending",
        pod(
            phase="Pending",
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        ),
        ("0/1", "Pending", "0"),
    ),
    (
        "container creating",
        pod(phase="Pending", statuses=[cs(waiting("ContainerCreating"))]),
        ("0/1", "ContainerCreating", "0"),
    ),
    (
        "waiting without a reason says nothing",
        pod(phase="Pending", statuses=[cs({"waiting": {}})]),
        ("0/1", "Pending", "0"),
    ),
    (
        "crash loop, restarts with when",
        pod(statuses=[cs(waiting("CrashLoopBackOff"), restarts=5, finished_ago=300)]),
        ("0/1", "CrashLoopBackOff", "5 (5m ago)"),
    ),
    (
        "restarts without a finish time",
        pod(statuses=[cs(RUNNING, ready=True, restarts=3)]),
        ("1/1", "Running", "3"),
    ),
    (
        "latest restart of all containers",
        pod(
            containers=2,
            statuses=[
                cs(RUNNING, ready=True, restarts=1, finished_ago=3600),
                cs(RUNNING, ready=True, restarts=2, finished_ago=45, name="c1"),
            ],
        ),
        ("2/2", "Running", "3 (45s ago)"),
    ),
    (
        "terminated with a reason",
        pod(phase="Failed", statuses=[cs(terminated(1, "Error"))]),
        ("0/1", "Error", "0"),
    ),
    (
        "terminated by exit code",
        pod(phase="Failed", statuses=[cs(terminated(137))]),
        ("0/1", "ExitCode:137", "0"),
    ),
    (
        "terminated by signal",
        pod(phase="Failed", statuses=[cs(terminated(137, signal=9))]),
        ("0/1", "Signal:9", "0"),
    ),
    (
        "completed",
        pod(phase="Succeeded", statuses=[cs(terminated(0, "Completed"))]),
        ("0/1", "Completed", "0"),
    ),
    (
        "completed beside a running container, pod ready",
        pod(
            containers=2,
            conditions=[READY_TRUE],
            statuses=[cs(terminated(0, "Completed")), cs(RUNNING, ready=True, name="c1")],
        ),
        ("1/2", "Running", "0"),
    ),
    (
        "completed beside a running container, pod not ready",
        pod(
            containers=2,
            statuses=[cs(terminated(0, "Completed")), cs(RUNNING, ready=True, name="c1")],
        ),
        ("1/2", "NotReady", "0"),
    ),
    (
        "the first container's reason wins",
        pod(
            phase="Pending",
            containers=2,
            statuses=[cs(waiting("ErrImagePull")), cs(waiting("CrashLoopBackOff"), name="c1")],
        ),
        ("0/2", "ErrImagePull", "0"),
    ),
    (
        "terminating",
        pod(deleting=True, statuses=[cs(RUNNING, ready=True)]),
        ("1/1", "Terminating", "0"),
    ),
    (
        "deleted after it finished",
        pod(phase="Succeeded", deleting=True, statuses=[cs(terminated(0, "Completed"))]),
        ("0/1", "Completed", "0"),
    ),
    (
        "first init container running",
        pod(
            phase="Pending",
            init=[{"name": "i0"}, {"name": "i1"}],
            init_statuses=[cs(RUNNING, name="i0"), cs(waiting("PodInitializing"), name="i1")],
            statuses=[cs(waiting("PodInitializing"))],
        ),
        ("0/1", "Init:0/2", "0"),
    ),
    (
        "second init container running",
        pod(
            phase="Pending",
            init=[{"name": "i0"}, {"name": "i1"}],
            init_statuses=[cs(terminated(0, "Completed"), name="i0"), cs(RUNNING, name="i1")],
        ),
        ("0/1", "Init:1/2", "0"),
    ),
    (
        "init waiting PodInitializing counts as Init:x/y",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[cs(waiting("PodInitializing"), name="i0")],
        ),
        ("0/1", "Init:0/1", "0"),
    ),
    (
        "init crash loop",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[cs(waiting("CrashLoopBackOff"), restarts=4, finished_ago=90, name="i0")],
            statuses=[cs(waiting("PodInitializing"))],
        ),
        ("0/1", "Init:CrashLoopBackOff", "4 (90s ago)"),
    ),
    (
        "init failed with a reason",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[cs(terminated(1, "Error"), name="i0")],
        ),
        ("0/1", "Init:Error", "0"),
    ),
    (
        "init failed by exit code",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[cs(terminated(2), name="i0")],
        ),
        ("0/1", "Init:ExitCode:2", "0"),
    ),
    (
        "init failed by signal",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[cs(terminated(143, signal=15), name="i0")],
        ),
        ("0/1", "Init:Signal:15", "0"),
    ),
    (
        "initialized: init restarts are dropped, the init reason stays",
        pod(
            init=[{"name": "i0"}],
            init_statuses=[cs(terminated(1, "Error"), restarts=3, name="i0")],
            conditions=[INITIALIZED],
            statuses=[cs(RUNNING, ready=True, restarts=1)],
        ),
        ("1/1", "Init:Error", "1"),
    ),
    (
        "a started sidecar counts as a container",
        pod(
            init=[{"name": "sc", "restartPolicy": "Always"}],
            init_statuses=[
                cs(RUNNING, ready=True, started=True, restarts=2, finished_ago=600, name="sc")
            ],
            conditions=[INITIALIZED, READY_TRUE],
            statuses=[cs(RUNNING, ready=True)],
        ),
        ("2/2", "Running", "2 (10m ago)"),
    ),
    (
        "a sidecar not started yet blocks initialization",
        pod(
            phase="Pending",
            init=[{"name": "sc", "restartPolicy": "Always"}],
            init_statuses=[cs(RUNNING, started=False, name="sc")],
        ),
        ("0/2", "Init:0/1", "0"),
    ),
]


@pytest.mark.parametrize(
    ("obj", "expected"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES]
)
def test_pod_ready_status_restarts(obj: dict[str, Any], expected: tuple[str, str, str]) -> None:
    name, ready, status, restarts, age, *_ = cells(kinds.POD, obj)
    assert (name, age) == ("p", "60m")
    assert (ready, status, restarts) == expected


@pytest.mark.parametrize(
    ("status", "spec", "expected"),
    [
        ({}, {}, ["<none>", "<none>", "<none>", "<none>"]),
        (
            {"podIP": "10.0.0.5", "nominatedNodeName": "n9"},
            {"nodeName": "n1"},
            ["10.0.0.5", "n1", "n9", "<none>"],
        ),
        # podIPs is what Kubernetes reads; podIP is its first entry.
        ({"podIPs": [{"ip": "fd00::5"}], "podIP": "fd00::5"}, {},
         ["fd00::5", "<none>", "<none>", "<none>"]),
        (
            {"conditions": [{"type": "g1", "status": "True"}, {"type": "g2", "status": "False"}]},
            {"readinessGates": [{"conditionType": "g1"}, {"conditionType": "g2"},
                                {"conditionType": "g3"}]},
            ["<none>", "<none>", "<none>", "1/3"],
        ),
    ],
)  # fmt: skip
def test_pod_wide_cells(status: dict[str, Any], spec: dict[str, Any], expected: list[str]) -> None:
    obj = {
        "metadata": {"name": "p", "creationTimestamp": ago(seconds=45)},
        "spec": {"containers": [{"name": "c"}], **spec},
        "status": status,
    }
    assert cells(kinds.POD, obj)[4:] == ["45s", *expected]


@pytest.mark.parametrize(
    ("phase", "conditions"),
    [
        ("Running", None),
        (
            "Succeeded",
            [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "Succeeded",
                    "message": "The pod has completed successfully.",
                }
            ],
        ),
        (
            "Failed",
            [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "Failed",
                    "message": "The pod failed.",
                }
            ],
        ),
    ],
)
def test_finished_pods_carry_a_row_condition(
    phase: str, conditions: list[dict[str, str]] | None
) -> None:
    (row,) = tables.rows(kinds.POD, [pod(phase=phase)], now=NOW)
    assert row.get("conditions") == conditions


def test_pod_from_the_protobuf_json() -> None:
    """The JSON names read here are the ones tinykube's .proto files produce."""
    message = json_format.ParseDict(
        {
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(days=3)},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.1.2.3",
                "nominatedNodeName": "n2",
                "containerStatuses": [
                    {
                        "name": "c",
                        "ready": True,
                        "restartCount": 2,
                        "state": {"running": {}},
                        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(hours=2)}},
                    }
                ],
            },
        },
        pod_pb2.Pod(),
    )
    assert cells(kinds.POD, to_dict(message)) == [
        "web", "1/1", "Running", "2 (120m ago)", "3d", "10.1.2.3", "n1", "n2", "<none>",
    ]  # fmt: skip


# --- nodes ----------------------------------------------------------------------------------


def node(
    conditions: list[dict[str, str]] | None = None,
    *,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "n1", "creationTimestamp": ago(days=4), "labels": labels or {}},
        "status": dict(status or {}),
    }
    if conditions is not None:
        obj["status"]["conditions"] = conditions
    if unschedulable:
        obj["spec"] = {"unschedulable": True}
    return obj


@pytest.mark.parametrize(
    ("obj", "status", "roles"),
    [
        (node([{"type": "Ready", "status": "True"}]), "Ready", "<none>"),
        (node([{"type": "Ready", "status": "False"}]), "NotReady", "<none>"),
        (node([{"type": "Ready", "status": "Unknown"}]), "NotReady", "<none>"),
        (node(), "Unknown", "<none>"),
        (node([{"type": "MemoryPressure", "status": "True"}]), "Unknown", "<none>"),
        (
            node([{"type": "Ready", "status": "False"}, {"type": "Ready", "status": "True"}]),
            "Ready",
            "<none>",
        ),
        (
            node([{"type": "Ready", "status": "True"}], unschedulable=True),
            "Ready,SchedulingDisabled",
            "<none>",
        ),
        (node(unschedulable=True), "Unknown,SchedulingDisabled", "<none>"),
        (
            node(
                labels={
                    "node-role.kubernetes.io/worker": "",
                    "node-role.kubernetes.io/control-plane": "",
                    "node-role.kubernetes.io/": "",
                    "kubernetes.io/role": "edge",
                }
            ),
            "Unknown",
            "control-plane,edge,worker",
        ),
        (node(labels={"kubernetes.io/role": ""}), "Unknown", "<none>"),
    ],
)
def test_node_status_and_roles(obj: dict[str, Any], status: str, roles: str) -> None:
    assert cells(kinds.NODE, obj)[:5] == ["n1", status, roles, "4d", ""]


def test_node_wide_cells() -> None:
    obj = node(
        status={
            "addresses": [
                {"type": "Hostname", "address": "n1"},
                {"type": "InternalIP", "address": "192.168.1.10"},
                {"type": "InternalIP", "address": "192.168.1.11"},
                {"type": "ExternalIP", "address": "203.0.113.7"},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.37.0",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "kernelVersion": "6.1.0-18-amd64",
                "containerRuntimeVersion": "containerd://1.7.13",
            },
        }
    )
    assert cells(kinds.NODE, obj)[4:] == [
        "v1.37.0",
        "192.168.1.10",
        "203.0.113.7",
        "Debian GNU/Linux 12 (bookworm)",
        "6.1.0-18-amd64",
        "containerd://1.7.13",
    ]
    assert cells(kinds.NODE, node())[5:] == ["<none>", "<none>"] + ["<unknown>"] * 3


def test_node_from_the_protobuf_json() -> None:
    message = json_format.ParseDict(
        {
            "metadata": {"name": "n1", "creationTimestamp": ago(minutes=7)},
            "spec": {"unschedulable": True},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.37.0-tk", "osImage": "Linux"},
            },
        },
        node_pb2.Node(),
    )
    assert cells(kinds.NODE, to_dict(message)) == [
        "n1", "Ready,SchedulingDisabled", "<none>", "7m", "v1.37.0-tk", "10.0.0.1", "<none>",
        "Linux", "<unknown>", "<unknown>",
    ]  # fmt: skip


# --- replicasets ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (None, "<none>"),
        ({}, "<none>"),
        ({"matchLabels": {"tier": "web", "app": "shop"}}, "app=shop,tier=web"),
        (
            {
                "matchLabels": {"app": "shop"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                    {"key": "zone", "operator": "NotIn", "values": ["b", "a"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                    {"key": "ab", "operator": "Exists"},
                ],
            },
            "ab,app=shop,!canary,env in (dev,prod),zone notin (a,b)",
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "<error>"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "<error>"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "<error>"),
    ],
)
def test_replica_set_selector(selector: dict[str, Any] | None, expected: str) -> None:
    obj = {"metadata": {"name": "rs"}, "spec": {"selector": selector}}
    assert cells(kinds.REPLICA_SET, obj)[7] == expected


def test_replica_set_cells() -> None:
    obj = {
        "metadata": {"name": "web", "creationTimestamp": ago(minutes=10)},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx:1.27"},
                        {"name": "log", "image": "busybox"},
                    ]
                }
            },
        },
        "status": {"replicas": 3, "readyReplicas": 2},
    }
    assert cells(kinds.REPLICA_SET, obj) == [
        "web", 3, 3, 2, "10m", "app,log", "nginx:1.27,busybox", "app=web",
    ]  # fmt: skip
    # Unset replicas is 1 after Kubernetes' defaulting; an explicit 0 stays 0.
    assert cells(kinds.REPLICA_SET, {"metadata": {"name": "x"}})[:5] == ["x", 1, 0, 0, "<unknown>"]
    zero = {"metadata": {"name": "x"}, "spec": {"replicas": 0}}
    assert cells(kinds.REPLICA_SET, zero)[1] == 0


# --- jobs -----------------------------------------------------------------------------------


def _cond(type_: str, status: str = "True") -> dict[str, str]:
    return {"type": type_, "status": status}


@pytest.mark.parametrize(
    ("meta", "spec", "status", "expected"),
    [
        # Kubernetes' printJob, case by case: the status from the conditions in its order.
        ({}, {"completions": 5}, {}, ["Running", "0/5", ""]),
        (
            {},
            {"completions": 5},
            {"succeeded": 2, "startTime": ago(minutes=3)},
            ["Running", "2/5", "3m"],
        ),
        (
            {},
            {"completions": 1},
            {
                "succeeded": 1,
                "startTime": ago(minutes=10),
                "completionTime": ago(minutes=9, seconds=48),
                "conditions": [_cond("SuccessCriteriaMet"), _cond("Complete")],
            },
            ["Complete", "1/1", "12s"],
        ),
        ({}, {"completions": 2}, {"conditions": [_cond("Failed")]}, ["Failed", "0/2", ""]),
        (
            {},
            {"completions": 2},
            {"conditions": [_cond("FailureTarget"), _cond("Failed", "False")]},
            ["FailureTarget", "0/2", ""],
        ),
        (
            {"deletionTimestamp": ago(seconds=1)},
            {"completions": 2},
            {"conditions": [_cond("Suspended")]},
            ["Terminating", "0/2", ""],
        ),
        ({}, {"completions": 2}, {"conditions": [_cond("Suspended")]}, ["Suspended", "0/2", ""]),
        (
            {},
            {"completions": 2},
            {"conditions": [_cond("Suspended", "False")]},
            ["Running", "0/2", ""],
        ),
        # Without completions: "n/1", or "n/1 of P" when parallel.
        ({}, {"parallelism": 1}, {"succeeded": 1}, ["Running", "1/1", ""]),
        ({}, {"parallelism": 3}, {}, ["Running", "0/1 of 3", ""]),
    ],
)
def test_job_cells(
    meta: dict[str, Any], spec: dict[str, Any], status: dict[str, Any], expected: list[str]
) -> None:
    obj = {
        "metadata": {"name": "pi", "creationTimestamp": ago(minutes=20), **meta},
        "spec": {
            **spec,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}},
        },
        "status": status,
    }
    assert cells(kinds.JOB, obj) == [
        "pi", *expected, "20m", "pi", "perl:5.34", "batch.kubernetes.io/controller-uid=u1",
    ]  # fmt: skip


def test_deployment_cells() -> None:
    obj = {
        "metadata": {"name": "web", "creationTimestamp": ago(minutes=10)},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}},
        },
        "status": {"replicas": 4, "readyReplicas": 2, "updatedReplicas": 1, "availableReplicas": 2},
    }
    # READY is ready/desired; UP-TO-DATE and AVAILABLE are the status counts.
    assert cells(kinds.DEPLOYMENT, obj) == [
        "web", "2/3", 1, 2, "10m", "app", "nginx:1.27", "app=web",
    ]  # fmt: skip
    assert cells(kinds.DEPLOYMENT, {"metadata": {"name": "x"}})[:4] == ["x", "0/1", 0, 0]


# --- events ---------------------------------------------------------------------------------


def event(**fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web.17a", "namespace": "default"}, **fields}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            event(
                type="Normal",
                reason="Scheduled",
                message="Successfully assigned default/web to n1",
                involvedObject={"kind": "Pod", "name": "web"},
                source={"component": "default-scheduler"},
                firstTimestamp=ago(minutes=5),
                lastTimestamp=ago(minutes=5),
                count=1,
            ),
            ["5m", "Normal", "Scheduled", "pod/web", "", "default-scheduler",
             "Successfully assigned default/web to n1", "5m", 1, "web.17a"],
        ),
        (
            event(
                type="Warning",
                reason="BackOff",
                message="  Back-off restarting failed container\n",
                involvedObject={"kind": "Pod", "name": "web", "fieldPath": "spec.containers{c}"},
                source={"component": "kubelet", "host": "n1"},
                firstTimestamp=ago(hours=3),
                lastTimestamp=ago(seconds=20),
                count=42,
            ),
            ["20s", "Warning", "BackOff", "pod/web", "spec.containers{c}", "kubelet, n1",
             "Back-off restarting failed container", "3h", 42, "web.17a"],
        ),
        # No lastTimestamp: last seen is first seen. No count: a singleton, 1.
        (
            event(firstTimestamp=ago(seconds=30), involvedObject={"kind": "Node"}),
            ["30s", "", "", "node", "", "", "", "30s", 1, "web.17a"],
        ),
        # events.k8s.io-style: eventTime, reporting controller and instance, series.
        (
            event(
                eventTime="2026-12-01T09:58:00.123456Z",
                reportingComponent="tinykube-scheduler",
                reportingInstance="sched-1",
                series={"count": 7, "lastObservedTime": ago(seconds=10)},
                count=3,
                involvedObject={"kind": "ReplicaSet", "name": "web"},
            ),
            ["10s", "", "", "replicaset/web", "", "tinykube-scheduler, sched-1", "", "119s", 7,
             "web.17a"],
        ),
        (event(), ["<unknown>", "", "", "", "", "", "", "<unknown>", 1, "web.17a"]),
    ],
)  # fmt: skip
def test_event_cells(obj: dict[str, Any], expected: list[Any]) -> None:
    assert cells(kinds.EVENT, obj) == expected


# --- leases, services, endpoints, other kinds -----------------------------------------------


def test_lease_cells() -> None:
    lease = {
        "metadata": {"name": "n1", "creationTimestamp": ago(days=2, hours=3)},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40},
    }
    assert cells(kinds.LEASE, lease) == ["n1", "n1", "2d3h"]
    assert cells(kinds.LEASE, {"metadata": {"name": "free"}}) == ["free", "", "<unknown>"]


def service(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "creationTimestamp": ago(days=30)},
        "spec": spec,
        "status": status or {},
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            service({"clusterIP": "10.96.0.1", "ports": [{"port": 443, "protocol": "TCP"}]}),
            ["ClusterIP", "10.96.0.1", "<none>", "443/TCP", "30d", "<none>"],
        ),
        (
            service(
                {
                    "type": "NodePort",
                    "clusterIP": "10.96.0.10",
                    "selector": {"tier": "fe", "app": "web"},
                    "ports": [{"port": 80, "nodePort": 30080}, {"port": 53, "protocol": "UDP"}],
                }
            ),
            ["NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53/UDP", "30d", "app=web,tier=fe"],
        ),
        (service({}), ["ClusterIP", "<none>", "<none>", "<none>", "30d", "<none>"]),
        (
            service({"clusterIPs": ["10.96.0.7", "fd00::7"], "clusterIP": "10.96.0.7",
                     "externalIPs": ["198.51.100.1", "198.51.100.2"]}),
            ["ClusterIP", "10.96.0.7", "198.51.100.1,198.51.100.2", "<none>", "30d", "<none>"],
        ),
        (
            service({"type": "LoadBalancer", "clusterIP": "10.96.0.8"}),
            ["LoadBalancer", "10.96.0.8", "<pending>", "<none>", "30d", "<none>"],
        ),
        (
            service(
                {"type": "LoadBalancer", "clusterIP": "10.96.0.8", "externalIPs": ["192.0.2.9"]},
                {"loadBalancer": {"ingress": ["203.0.113.2", {"hostname": "lb.example.com"},
                                              {"ip": "203.0.113.1"}, "203.0.113.2"]}},
            ),
            ["LoadBalancer", "10.96.0.8", "203.0.113.1,203.0.113.2,lb.example.com,192.0.2.9",
             "<none>", "30d", "<none>"],
        ),
        (
            service({"type": "ExternalName", "externalName": "db.example.com"}),
            ["ExternalName", "<none>", "db.example.com", "<none>", "30d", "<none>"],
        ),
        (
            service({"type": "Weird", "clusterIP": "None"}),
            ["Weird", "None", "<unknown>", "<none>", "30d", "<none>"],
        ),
    ],
)  # fmt: skip
def test_service_cells(obj: dict[str, Any], expected: list[str]) -> None:
    assert cells(kinds.SERVICE, obj) == ["web", *expected]


def addresses(*ips: str) -> list[dict[str, str]]:
    return [{"ip": ip} for ip in ips]


@pytest.mark.parametrize(
    ("subsets", "expected"),
    [
        (None, "<none>"),
        ([], "<none>"),
        ([{"addresses": addresses("10.0.0.1"), "ports": [{"port": 8080}]}], "10.0.0.1:8080"),
        (
            [{"addresses": addresses("10.0.0.1", "10.0.0.2"), "ports": [{"port": 80},
                                                                       {"port": 443}]}],
            "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more...",
        ),
        (
            [{"addresses": addresses(*(f"10.0.0.{i}" for i in range(1, 6))),
              "ports": [{"port": 8080}]}],
            "10.0.0.1:8080,10.0.0.2:8080,10.0.0.3:8080 + 2 more...",
        ),
        ([{"addresses": addresses("10.0.0.1", "10.0.0.2")}], "10.0.0.1,10.0.0.2"),
        ([{"addresses": addresses("fd00::1"), "ports": [{"port": 80}]}], "[fd00::1]:80"),
        # Not-ready addresses are not endpoints; a subset with only those prints nothing.
        ([{"notReadyAddresses": addresses("10.0.0.9"), "ports": [{"port": 80}]}], ""),
        (
            [{"addresses": addresses("10.0.0.1"), "ports": [{"port": 80}]},
             {"addresses": addresses("10.0.1.1", "10.0.1.2", "10.0.1.3")}],
            "10.0.0.1:80,10.0.1.1,10.0.1.2 + 1 more...",
        ),
    ],
)  # fmt: skip
def test_endpoints_cells(subsets: list[dict[str, Any]] | None, expected: str) -> None:
    obj: dict[str, Any] = {"metadata": {"name": "web", "creationTimestamp": ago(minutes=10)}}
    if subsets is not None:
        obj["subsets"] = subsets
    assert cells(kinds.ENDPOINTS, obj) == ["web", expected, "10m"]


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        # Kubernetes' printPodDisruptionBudget: the unset bound is N/A, the integer column is
        # status.disruptionsAllowed (0 when the controller has not written it yet).
        ({"minAvailable": 2}, {"disruptionsAllowed": 1}, ["web", "2", "N/A", 1, "5m"]),
        ({"maxUnavailable": "25%"}, {}, ["web", "N/A", "25%", 0, "5m"]),
        ({"minAvailable": "100%"}, {"disruptionsAllowed": 0}, ["web", "100%", "N/A", 0, "5m"]),
        ({}, {}, ["web", "N/A", "N/A", 0, "5m"]),
    ],
)
def test_pdb_cells(spec: dict[str, Any], status: dict[str, Any], expected: list[Any]) -> None:
    obj = {
        "metadata": {"name": "web", "creationTimestamp": ago(minutes=5)},
        "spec": spec,
        "status": status,
    }
    assert cells(kinds.POD_DISRUPTION_BUDGET, obj) == expected


def test_pdb_cells_from_the_protobuf_json() -> None:
    """The JSON the codec prints from the message (a Value holds 2 as a float)."""
    pdb = pdb_pb2.PodDisruptionBudget()
    pdb.metadata.name = "web"
    pdb.spec.minAvailable.number_value = 2
    pdb.status.disruptionsAllowed = 0
    assert cells(kinds.POD_DISRUPTION_BUDGET, to_dict(pdb))[:4] == ["web", "2", "N/A", 0]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"status": {"phase": "Active"}}, ["Active"]),
        ({"status": {"phase": "Terminating"}}, ["Terminating"]),
        # kube's printer prints the phase as stored, empty included.
        ({}, [""]),
    ],
)
def test_namespace_cells(obj: dict[str, Any], expected: list[str]) -> None:
    ns = {"metadata": {"name": "team", "creationTimestamp": ago(hours=5)}, **obj}
    assert cells(kinds.NAMESPACE, ns) == ["team", *expected, "5h"]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            {"value": 2000000000, "description": "critical",
             "preemptionPolicy": "PreemptLowerPriority"},
            [2000000000, False, "PreemptLowerPriority"],
        ),
        ({"value": -5, "globalDefault": True, "preemptionPolicy": "Never"}, [-5, True, "Never"]),
        # Zero values are omitted from the JSON: kube prints 0, false and an empty policy.
        ({}, [0, False, ""]),
    ],
)  # fmt: skip
def test_priority_class_cells(obj: dict[str, Any], expected: list[Any]) -> None:
    pc = {"metadata": {"name": "high", "creationTimestamp": ago(days=3)}, **obj}
    value, default, policy = expected
    assert cells(kinds.PRIORITY_CLASS, pc) == ["high", value, default, "3d", policy]


def test_other_kinds_get_the_default_table() -> None:
    obj = {"metadata": {"name": "w", "creationTimestamp": "2026-11-30T08:15:00.250Z"}}
    assert cells(WIDGET, obj) == ["w", "2026-11-30T08:15:00Z"]
    assert cells(WIDGET, {"metadata": {"name": "w"}}) == ["w", "0001-01-01T00:00:00Z"]


def test_roles_print_as_kubes_name_and_created_at() -> None:
    role = {"metadata": {"name": "view", "creationTimestamp": "2026-11-30T08:15:00Z"}}
    assert cells(kinds.CLUSTER_ROLE, role) == ["view", "2026-11-30T08:15:00Z"]
    assert cells(kinds.ROLE, role) == ["view", "2026-11-30T08:15:00Z"]


@pytest.mark.parametrize("info", [kinds.ROLE_BINDING, kinds.CLUSTER_ROLE_BINDING])
def test_role_binding_cells(info: kinds.KindInfo) -> None:
    binding = {
        "metadata": {"name": "b", "creationTimestamp": ago(days=3)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "name": "devs"},
            {"kind": "User", "name": "bob"},
            {"kind": "ServiceAccount", "name": "ci", "namespace": "build"},
            {"kind": "Robot", "name": "ignored"},
        ],
    }
    assert cells(info, binding) == ["b", "ClusterRole/edit", "3d", "alice, bob", "devs", "build/ci"]
    empty = {"metadata": {"name": "system:node"}, "roleRef": {"kind": "ClusterRole", "name": "n"}}
    assert cells(info, empty) == ["system:node", "ClusterRole/n", "<unknown>", "", "", ""]


@pytest.mark.parametrize("info", [*kinds.ALL_KINDS, WIDGET], ids=lambda i: i.kind)
def test_every_row_has_a_cell_per_column(info: kinds.KindInfo) -> None:
    for obj in ({}, {"metadata": {"name": "x"}}):
        assert len(cells(info, obj)) == len(tables.column_definitions(info))


# --- rows' objects and the Table ------------------------------------------------------------


def test_include_object_modes() -> None:
    obj = pod()
    (meta_row,) = tables.rows(kinds.POD, [obj], now=NOW)
    assert meta_row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }
    assert meta_row["object"]["metadata"] is obj["metadata"]  # shared, not copied
    (default_row,) = tables.rows(kinds.POD, [obj], include_object="", now=NOW)
    assert default_row["object"] == meta_row["object"]

    (none_row,) = tables.rows(kinds.POD, [obj], include_object="None", now=NOW)
    assert none_row["object"] is None

    (object_row,) = tables.rows(kinds.POD, [obj], include_object="Object", now=NOW)
    assert object_row["object"] == {"apiVersion": "v1", "kind": "Pod", **obj}
    assert object_row["object"]["spec"] is obj["spec"]
    typed = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r"}}
    (typed_row,) = tables.rows(kinds.REPLICA_SET, [typed], include_object="Object", now=NOW)
    assert typed_row["object"] is typed


def test_unknown_include_object_is_a_bad_request() -> None:
    with pytest.raises(BadRequestError) as err:
        tables.rows(kinds.POD, [], include_object="Everything", now=NOW)
    assert str(err.value) == (
        "Unable to convert to Table as requested: includeObject: Unsupported value: "
        '"Everything": supported values: "Metadata", "None", "Object"'
    )


def test_table() -> None:
    got = tables.table(
        kinds.NODE,
        [node([{"type": "Ready", "status": "True"}])],
        resource_version="42",
        continue_token="tok",
        remaining_item_count=5,
        include_object="None",
        now=NOW,
    )
    assert got == {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "42", "continue": "tok", "remainingItemCount": 5},
        "columnDefinitions": tables.column_definitions(kinds.NODE),
        "rows": [
            {
                "cells": ["n1", "Ready", "<none>", "4d", "", "<none>", "<none>"]
                + ["<unknown>"] * 3,
                "object": None,
            }
        ],
    }
    empty = tables.table(kinds.POD, [], resource_version="7", now=NOW)
    assert (empty["metadata"], empty["rows"]) == ({"resourceVersion": "7"}, [])


def test_a_bad_timestamp_names_the_object_and_field() -> None:
    obj = pod(statuses=[cs(RUNNING, restarts=1, finished_ago=10), cs(RUNNING, name="c1")])
    obj["status"]["containerStatuses"][1]["lastState"] = {"terminated": {"finishedAt": "yesterday"}}
    with pytest.raises(InternalError) as err:
        tables.rows(kinds.POD, [obj], now=NOW)
    assert str(err.value) == (
        "Pod \"p\": status.containerStatuses[1].lastState.terminated.finishedAt: 'yesterday' "
        "is not an RFC 3339 timestamp"
    )


def test_now_must_carry_a_timezone() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        tables.rows(kinds.POD, [], now=datetime(2026, 12, 1))
