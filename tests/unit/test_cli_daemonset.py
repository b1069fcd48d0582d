"""The tinykube CLI's DaemonSet and ControllerRevision columns and `describe ds`, as kubectl's."""

from __future__ import annotations

from datetime import UTC, datetime

from tinykube import kinds
from tinykube.cli import printers
from tinykube.cli.describe import describe_daemonset
from tinykube.v1 import controllerrevision_pb2, daemonset_pb2, meta_pb2, pod_pb2

NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


def make_ds() -> daemonset_pb2.DaemonSet:
    ds = daemonset_pb2.DaemonSet()
    ds.metadata.name = "agent"
    ds.metadata.namespace = "default"
    ds.metadata.uid = "u1"
    ds.metadata.creationTimestamp.FromDatetime(datetime(2026, 1, 1))
    ds.metadata.annotations["deprecated.daemonset.template.generation"] = "1"
    ds.spec.selector.matchLabels["app"] = "agent"
    ds.spec.template.metadata.labels["app"] = "agent"
    ds.spec.template.spec.nodeSelector["role"] = "edge"
    ds.spec.template.spec.containers.add(name="main", image="agent:v1")
    st = ds.status
    st.desiredNumberScheduled, st.currentNumberScheduled, st.numberReady = 3, 3, 2
    st.updatedNumberScheduled, st.numberAvailable, st.numberMisscheduled = 1, 2, 1
    return ds


def test_daemonset_columns_and_row() -> None:
    info = kinds.DAEMON_SET
    assert printers.columns(info, wide=True) == [
        "NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE",
        "CONTAINERS", "IMAGES", "SELECTOR",
    ]  # fmt: skip
    assert printers.row(info, make_ds(), NOW, wide=True) == [
        "agent", "3", "3", "2", "1", "2", "role=edge", "5m", "main", "agent:v1", "app=agent",
    ]  # fmt: skip


def test_controller_revision_row_names_its_controller_with_the_group() -> None:
    cr = controllerrevision_pb2.ControllerRevision(revision=2)
    cr.metadata.name = "agent-5d8f"
    cr.metadata.creationTimestamp.FromDatetime(datetime(2026, 1, 1, 0, 4))
    cr.metadata.ownerReferences.append(
        meta_pb2.OwnerReference(
            apiVersion="apps/v1", kind="DaemonSet", name="agent", controller=True
        )
    )
    info = kinds.CONTROLLER_REVISION
    assert printers.columns(info) == ["NAME", "CONTROLLER", "REVISION", "AGE"]
    assert printers.row(info, cr, NOW) == ["agent-5d8f", "daemonset.apps/agent", "2", "60s"]
    del cr.metadata.ownerReferences[:]
    assert printers.row(info, cr, NOW)[1] == "<none>"


def test_describe_daemonset() -> None:
    ds = make_ds()
    pods = []
    for phase in ("Running", "Running", "Pending"):
        pod = pod_pb2.Pod()
        pod.metadata.ownerReferences.add(uid="u1", controller=True)
        pod.status.phase = phase
        pods.append(pod)
    out = describe_daemonset(ds, pods, [], NOW).splitlines()
    assert out[:12] == [
        "Name:           agent",
        "Namespace:      default",
        "Selector:       app=agent",
        "Node-Selector:  role=edge",
        "Labels:         <none>",
        "Annotations:    deprecated.daemonset.template.generation: 1",
        "Desired Number of Nodes Scheduled: 3",
        "Current Number of Nodes Scheduled: 3",
        "Number of Nodes Scheduled with Up-to-date Pods: 1",
        "Number of Nodes Scheduled with Available Pods: 2",
        "Number of Nodes Misscheduled: 1",
        "Pods Status:  2 Running / 1 Waiting / 0 Succeeded / 0 Failed",
    ]
    assert out[12] == "Pod Template:"
    assert out[-1] == "Events:           <none>"
