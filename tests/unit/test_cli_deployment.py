"""The tinykube CLI's Deployment columns and describe, as kubectl prints them."""

from __future__ import annotations

from datetime import UTC, datetime

from tinykube import kinds
from tinykube.cli import printers
from tinykube.cli.describe import describe_deployment
from tinykube.meta import int_or_string_value
from tinykube.v1 import deployment_pb2, meta_pb2, replicaset_pb2

NOW = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def deployment() -> deployment_pb2.Deployment:
    d = deployment_pb2.Deployment()
    d.metadata.name = "web"
    d.metadata.namespace = "default"
    d.metadata.uid = "u1"
    d.metadata.creationTimestamp.FromDatetime(datetime(2026, 12, 1, 9, 58, 0))
    d.spec.replicas = 4
    d.spec.selector.matchLabels["app"] = "web"
    d.spec.template.metadata.labels["app"] = "web"
    d.spec.template.spec.containers.add(name="app", image="nginx:2")
    d.spec.strategy.type = "RollingUpdate"
    d.spec.strategy.rollingUpdate.maxSurge.CopyFrom(int_or_string_value("25%"))
    d.spec.strategy.rollingUpdate.maxUnavailable.CopyFrom(int_or_string_value(1))
    st = d.status
    st.replicas, st.updatedReplicas, st.readyReplicas, st.availableReplicas = 5, 2, 3, 3
    st.unavailableReplicas = 2
    st.conditions.add(type="Available", status="True", reason="MinimumReplicasAvailable")
    st.conditions.add(type="Progressing", status="True", reason="ReplicaSetUpdated")
    return d


def replica_set(
    name: str, image: str, replicas: int, owner: str = "u1"
) -> replicaset_pb2.ReplicaSet:
    rs = replicaset_pb2.ReplicaSet()
    rs.metadata.name = name
    rs.metadata.ownerReferences.append(meta_pb2.OwnerReference(uid=owner, controller=True))
    rs.spec.replicas = replicas
    rs.status.replicas = replicas
    rs.spec.template.metadata.labels.update({"app": "web", "pod-template-hash": name[4:]})
    rs.spec.template.spec.containers.add(name="app", image=image)
    return rs


def test_columns_and_rows() -> None:
    assert printers.columns(kinds.DEPLOYMENT, wide=True) == [
        "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR",
    ]  # fmt: skip
    assert printers.row(kinds.DEPLOYMENT, deployment(), NOW, wide=True) == [
        "web", "3/4", "2", "3", "2m", "app", "nginx:2", "app=web",
    ]  # fmt: skip


def test_describe() -> None:
    rss = [
        replica_set("web-new", "nginx:2", 2),
        replica_set("web-old", "nginx:1", 3),
        replica_set("web-other", "nginx:2", 9, owner="u2"),  # another Deployment's
    ]
    text = describe_deployment(deployment(), rss, [], NOW)
    for line in (
        "Replicas:               4 desired | 2 updated | 5 total | 3 available | 2 unavailable",
        "StrategyType:           RollingUpdate",
        "RollingUpdateStrategy:  1 max unavailable, 25% max surge",
        "  Progressing    True    ReplicaSetUpdated",
        "  Available      True    MinimumReplicasAvailable",
        "OldReplicaSets:  web-old (3/3 replicas created)",
        "NewReplicaSet:   web-new (2/2 replicas created)",
    ):
        assert line in text.splitlines(), text
    assert text.splitlines()[-1].split() == ["Events:", "<none>"]
