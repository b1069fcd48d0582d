"""The disruption controller: kube's arithmetic for expectedPods, desiredHealthy, currentHealthy
and disruptionsAllowed, disruptedPods expiry, the DisruptionAllowed condition and failSafe."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import json_format

from controller.disruption import DisruptionController, compute_status, scaled
from tests.unit.controller.fakes import FakeQueue, FakeRecorder, FakeResource, FakeStore
from tinykube.clock import FakeClock
from tinykube.meta import set_timestamp
from tinykube.v1 import meta_pb2, pod_pb2, replicaset_pb2
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
RS_UID = "rs-uid"


def make_pdb(spec: dict[str, Any], **status: Any) -> pdb_pb2.PodDisruptionBudget:
    pdb = json_format.ParseDict(
        {
            "metadata": {"name": "web", "namespace": "default", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
            "status": status,
        },
        pdb_pb2.PodDisruptionBudget(),
    )
    return pdb


def pod(
    name: str,
    *,
    ready: bool = True,
    owned: bool = True,
    deleting: bool = False,
    app: str = "web",
) -> pod_pb2.Pod:
    p = pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=name, namespace="default"))
    p.metadata.labels["app"] = app
    if owned:
        p.metadata.ownerReferences.add(
            apiVersion="apps/v1", kind="ReplicaSet", name="web", uid=RS_UID, controller=True
        )
    if deleting:
        set_timestamp(p.metadata.deletionTimestamp, NOW)
    p.status.phase = "Running"
    p.status.conditions.add(type="Ready", status="True" if ready else "False")
    return p


def replica_set(replicas: int) -> replicaset_pb2.ReplicaSet:
    rs = replicaset_pb2.ReplicaSet(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default", uid=RS_UID)
    )
    rs.spec.replicas = replicas
    return rs


def pods(ready: int, unready: int = 0, **kw: Any) -> list[pod_pb2.Pod]:
    return [pod(f"r{i}", **kw) for i in range(ready)] + [
        pod(f"u{i}", ready=False, **kw) for i in range(unready)
    ]


@pytest.mark.parametrize(
    ("spec", "selected", "replicas", "expected"),
    [
        # minAvailable as a number: expectedPods is the number of selected pods.
        ({"minAvailable": 2}, pods(3), 5, (3, 2, 3, 1)),
        ({"minAvailable": 2}, pods(2, 1), 3, (3, 2, 2, 0)),
        ({"minAvailable": 4}, pods(3), 3, (3, 4, 3, 0)),  # never negative
        # minAvailable as a percentage: of the controllers' scale, rounded up.
        ({"minAvailable": "50%"}, pods(3), 3, (3, 2, 3, 1)),
        ({"minAvailable": "50%"}, pods(2), 5, (5, 3, 2, 0)),  # the RS wants 5: 3 desired
        ({"minAvailable": "100%"}, pods(3), 3, (3, 3, 3, 0)),
        # maxUnavailable: expectedPods minus the bound (a percentage rounded up), at least 0.
        ({"maxUnavailable": 1}, pods(3), 3, (3, 2, 3, 1)),
        ({"maxUnavailable": "34%"}, pods(3), 3, (3, 1, 3, 2)),  # ceil(1.02) = 2 unavailable
        ({"maxUnavailable": 5}, pods(3), 3, (3, 0, 3, 3)),
        ({"maxUnavailable": 0}, pods(3), 3, (3, 3, 3, 0)),
        # Pods being deleted and unready pods are not healthy.
        ({"maxUnavailable": 1}, [*pods(2), pod("d", deleting=True)], 3, (3, 2, 2, 0)),
        # No pods: expectedPods 0 allows nothing, whatever the counts.
        ({"maxUnavailable": 1}, [], 3, (0, 0, 0, 0)),
        ({"minAvailable": 0}, [], 3, (0, 0, 0, 0)),
        # Neither bound (Kubernetes allows it): nothing desired, nothing expected: none allowed.
        ({}, pods(3), 3, (0, 0, 3, 0)),
    ],
)
def test_status_arithmetic(
    spec: dict[str, Any],
    selected: list[pod_pb2.Pod],
    replicas: int,
    expected: tuple[int, int, int, int],
) -> None:
    rs = replica_set(replicas)
    c = compute_status(make_pdb(spec), selected, lambda ns, name: rs, NOW)
    assert (c.expected, c.desired, c.current, c.allowed) == expected


@pytest.mark.parametrize(
    ("value", "total", "expected"), [(3, 10, 3), ("10%", 10, 1), ("25%", 3, 1), ("1%", 1000, 10)]
)
def test_percentages_round_up(value: int | str, total: int, expected: int) -> None:
    assert scaled(value, total) == expected


def test_unmanaged_pods_are_reported_and_not_counted_in_the_scale() -> None:
    rs = replica_set(2)
    selected = [*pods(2), pod("stray", owned=False)]
    c = compute_status(make_pdb({"maxUnavailable": 1}), selected, lambda ns, n: rs, NOW)
    assert c.unmanaged == ["stray"]
    assert (c.expected, c.desired, c.current, c.allowed) == (2, 1, 3, 2)


def test_disrupted_pods_do_not_count_until_their_entry_expires() -> None:
    rs = replica_set(3)
    pdb = make_pdb({"maxUnavailable": 1})
    set_timestamp(pdb.status.disruptedPods["r0"], NOW - timedelta(seconds=30))
    set_timestamp(pdb.status.disruptedPods["r1"], NOW - timedelta(minutes=3))  # expired
    set_timestamp(pdb.status.disruptedPods["gone"], NOW)  # no such pod any more
    c = compute_status(pdb, pods(3), lambda ns, n: rs, NOW)
    assert list(c.disrupted) == ["r0"]
    assert c.current == 2
    assert c.recheck == NOW + timedelta(seconds=90)
    assert [p.metadata.name for p in c.not_deleted] == ["r1"]


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock(NOW)
        rv = itertools.count(1)
        self.api = FakeResource("PodDisruptionBudget", pdb_pb2.PodDisruptionBudget, self.clock, rv)
        self.pod_api = FakeResource("Pod", pod_pb2.Pod, self.clock, rv)
        self.rs_api = FakeResource("ReplicaSet", replicaset_pb2.ReplicaSet, self.clock, rv)
        self.queue = FakeQueue()
        self.recorder = FakeRecorder()
        self.controller = DisruptionController(
            self.api,
            FakeStore(self.api),
            FakeStore(self.pod_api),
            FakeStore(self.rs_api),
            self.queue,
            now=self.clock.now,
            recorder=self.recorder,
        )

    async def status(self) -> pdb_pb2.PodDisruptionBudgetStatus:
        await self.controller.sync("default/web")
        return (await self.api.get("web", "default")).status


async def test_sync_writes_the_status_and_condition_once() -> None:
    h = Harness()
    await h.rs_api.create(replica_set(3))
    rs = await h.rs_api.get("web", "default")
    for p in pods(3):
        p.metadata.ownerReferences[0].uid = rs.metadata.uid
        await h.pod_api.create(p)
    created = await h.api.create(make_pdb({"minAvailable": "50%"}))
    status = await h.status()
    assert (status.expectedPods, status.desiredHealthy, status.currentHealthy) == (3, 2, 3)
    assert status.disruptionsAllowed == 1
    assert status.observedGeneration == created.metadata.generation
    (cond,) = status.conditions
    assert (cond.type, cond.status, cond.reason) == ("DisruptionAllowed", "True", "SufficientPods")
    writes = list(h.api.calls)
    await h.controller.sync("default/web")
    assert h.api.calls == writes  # nothing changed: no write


async def test_a_pod_without_its_controller_fails_safe() -> None:
    h = Harness()
    await h.pod_api.create(pod("r0"))  # its ReplicaSet does not exist
    await h.api.create(make_pdb({"maxUnavailable": 1}))
    status = await h.status()
    assert status.disruptionsAllowed == 0
    (cond,) = status.conditions
    assert (cond.status, cond.reason, cond.message) == (
        "False",
        "SyncFailed",
        'found no controllers for pod "r0"',
    )
    assert ("Warning", "CalculateExpectedPodCountFailed") in [e[:2] for e in h.recorder.events]


async def test_pod_changes_enqueue_the_budgets_that_select_them() -> None:
    h = Harness()
    await h.api.create(make_pdb({"maxUnavailable": 1}))
    h.controller.on_pod_add(pod("r0"))
    h.controller.on_pod_add(pod("db", app="db"))
    relabelled = pod("r1", app="db")
    relabelled.metadata.resourceVersion = "2"
    h.controller.on_pod_update(pod("r1"), relabelled)
    assert h.queue.added == ["default/web", "default/web"]
