"""ReplicaSet controller reconcile, against a fake client and a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controller.replicaset import (
    ReplicaSetController,
    new_controller_ref,
    pods_to_delete,
    slow_start_batch,
)
from controller.util import datetime_to_ts, key_of
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeRecorder, FakeStore
from tinykube.clock import FakeClock
from tinykube.errors import DeadlineExceededError, InvalidError, UnavailableError
from tinykube.v1 import meta_pb2, pod_pb2, replicaset_pb2


def make_rs(
    name: str = "web", replicas: int = 3, labels: dict[str, str] | None = None
) -> replicaset_pb2.ReplicaSet:
    labels = labels or {"app": name}
    rs = replicaset_pb2.ReplicaSet(apiVersion="v1", kind="ReplicaSet")
    rs.metadata.name = name
    rs.metadata.namespace = "default"
    rs.spec.replicas = replicas
    rs.spec.selector.matchLabels.update(labels)
    rs.spec.template.metadata.labels.update(labels)
    rs.spec.template.spec.containers.add(name="c", image="sleep", command=["sleep", "100"])
    return rs


def make_pod(
    name: str,
    labels: dict[str, str],
    *,
    owner: replicaset_pb2.ReplicaSet | None = None,
    node: str = "",
    phase: str = "Pending",
    ready: bool = False,
) -> pod_pb2.Pod:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = name
    pod.metadata.namespace = "default"
    pod.metadata.labels.update(labels)
    if owner is not None:
        pod.metadata.ownerReferences.append(new_controller_ref(owner))
    pod.spec.nodeName = node
    pod.status.phase = phase
    if ready:
        pod.status.conditions.add(type="Ready", status="True")
    return pod


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.client = FakeClient(self.clock)
        self.rs_store = FakeStore(self.client.replica_sets)
        self.pod_store = FakeStore(self.client.pods)
        self.queue = FakeQueue()
        self.recorder = FakeRecorder()
        self.ctrl = ReplicaSetController(
            self.client,
            self.rs_store,
            self.pod_store,
            self.queue,
            clock=self.clock,
            recorder=self.recorder,
        )

    async def create_rs(self, rs: replicaset_pb2.ReplicaSet) -> replicaset_pb2.ReplicaSet:
        return await self.client.replica_sets.create(rs)

    def pods(self) -> list[pod_pb2.Pod]:
        return list(self.client.pods.objects.values())


async def test_creates_missing_pods_owned_by_the_replicaset() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=6))
    await env.ctrl.sync("default/web")
    pods = env.pods()
    assert len(pods) == 6
    for pod in pods:
        assert pod.metadata.name.startswith("web-") and len(pod.metadata.name) == len("web-") + 5
        assert pod.metadata.generateName == "web-"
        assert dict(pod.metadata.labels) == {"app": "web"}
        (ref,) = pod.metadata.ownerReferences
        assert (ref.kind, ref.name, ref.uid, ref.controller) == (
            "ReplicaSet",
            "web",
            rs.metadata.uid,
            True,
        )
        assert list(pod.spec.containers[0].command) == ["sleep", "100"]
    # Status reflects what the caches held at the start of the sync, as in Kubernetes; the
    # watch events of the new pods trigger the sync that counts them.
    assert env.client.replica_sets.objects["default/web"].status.observedGeneration == 1
    for pod in pods:
        env.ctrl.on_pod_add(pod)
    await env.ctrl.sync("default/web")
    status = env.client.replica_sets.objects["default/web"].status
    assert status.replicas == 6 and status.readyReplicas == 0 and status.observedGeneration == 1
    assert len(env.pods()) == 6
    assert [e[1] for e in env.recorder.events].count("SuccessfulCreate") == 6


async def test_expectations_prevent_extra_pods_while_the_watch_lags() -> None:
    env = Env()
    await env.create_rs(make_rs(replicas=4))
    env.pod_store.lag()  # the informer has not seen any of the creations yet
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 4
    await env.ctrl.sync("default/web")
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 4, "a second sync before the watch caught up created pods"
    # The watch delivers the creations: expectations are met, and nothing more is needed.
    env.pod_store.catch_up()
    for pod in env.pods():
        env.ctrl.on_pod_add(pod)
    assert env.ctrl.expectations.satisfied("default/web")
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 4


async def test_expectations_expire_so_a_lost_event_cannot_wedge_the_replicaset() -> None:
    env = Env()
    await env.create_rs(make_rs(replicas=2))
    env.pod_store.lag()
    await env.ctrl.sync("default/web")
    assert not env.ctrl.expectations.satisfied("default/web")
    env.clock.advance(301)
    assert env.ctrl.expectations.satisfied("default/web")


async def test_slow_start_batches_double_and_stop_at_the_first_failure() -> None:
    calls = 0

    async def fn() -> None:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise InvalidError("quota")

    successes, error = await slow_start_batch(20, 1, fn)
    # Batches 1, 2 succeed; the batch of 4 has one failure; the batch of 8 is never tried.
    assert calls == 7
    assert successes == 6
    assert isinstance(error, InvalidError)


async def test_failed_creations_lower_expectations_and_set_replica_failure() -> None:
    env = Env()
    await env.create_rs(make_rs(replicas=3))
    env.client.pods.fail_creates = InvalidError(
        'Pod "x" is invalid: spec.containers: Required value'
    )
    with pytest.raises(InvalidError):
        await env.ctrl.sync("default/web")
    assert env.ctrl.expectations.satisfied("default/web")
    (cond,) = env.client.replica_sets.objects["default/web"].status.conditions
    assert (cond.type, cond.status, cond.reason) == ("ReplicaFailure", "True", "FailedCreate")
    assert ("Warning", "FailedCreate") in [(e[0], e[1]) for e in env.recorder.events]
    env.client.pods.fail_creates = None
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 3
    assert not env.client.replica_sets.objects["default/web"].status.conditions


@pytest.mark.parametrize(
    "lost",
    [
        DeadlineExceededError("Deadline Exceeded"),
        UnavailableError("Stream removed (Socket closed)"),
    ],
    ids=["deadline", "reset"],
)
async def test_a_create_whose_answer_was_lost_is_expected_not_made_again(
    lost: Exception,
) -> None:
    env = Env()
    await env.create_rs(make_rs(replicas=3))
    env.pod_store.lag()
    env.client.pods.lose_create_answers = lost  # each create lands; its answer does not
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 3
    assert not env.ctrl.expectations.satisfied("default/web")  # waiting to observe them
    env.client.pods.lose_create_answers = None
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 3, "a pod whose create answer was lost was created again"
    env.pod_store.catch_up()
    for pod in env.pods():
        env.ctrl.on_pod_add(pod)
    assert env.ctrl.expectations.satisfied("default/web")


async def test_a_create_that_never_left_the_client_is_a_failure() -> None:
    env = Env()
    await env.create_rs(make_rs(replicas=1))
    env.client.pods.fail_creates = UnavailableError(
        "failed to connect to all addresses; last error: UNKNOWN: Connection refused"
    )
    with pytest.raises(UnavailableError):
        await env.ctrl.sync("default/web")
    assert env.ctrl.expectations.satisfied("default/web")  # nothing to wait for


async def test_scale_down_deletes_the_least_useful_pods_first() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=5))
    labels = {"app": "web"}
    for pod in [
        make_pod("running-ready", labels, owner=rs, node="n1", phase="Running", ready=True),
        make_pod("running-notready", labels, owner=rs, node="n1", phase="Running"),
        make_pod("pending-bound", labels, owner=rs, node="n2", phase="Pending"),
        make_pod("unbound", labels, owner=rs),
        make_pod("running-ready-2", labels, owner=rs, node="n2", phase="Running", ready=True),
    ]:
        await env.client.pods.create(pod)
    rs = env.client.replica_sets.objects["default/web"]
    rs.spec.replicas = 2
    await env.ctrl.sync("default/web")
    left = sorted(p.metadata.name for p in env.pods())
    assert left == ["running-ready", "running-ready-2"]
    assert env.ctrl.expectations.pending("default/web") == (0, 3)


async def test_deletion_expectations_count_each_pod_once() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=0))
    pod = await env.client.pods.create(make_pod("a", {"app": "web"}, owner=rs))
    env.pod_store.lag()
    await env.ctrl.sync("default/web")
    assert env.ctrl.expectations.pending("default/web") == (0, 1)
    terminating = pod_pb2.Pod()
    terminating.CopyFrom(pod)
    terminating.metadata.deletionTimestamp.FromDatetime(env.clock.now().replace(tzinfo=None))
    terminating.metadata.resourceVersion = "999"
    env.ctrl.on_pod_update(pod, terminating)
    env.ctrl.on_pod_delete(terminating)
    assert env.ctrl.expectations.pending("default/web") == (0, 0)


def test_pods_to_delete_prefers_crowded_nodes_and_newer_pods() -> None:
    labels = {"app": "web"}
    a = make_pod("a", labels, node="n1", phase="Running", ready=True)
    b = make_pod("b", labels, node="n1", phase="Running", ready=True)
    c = make_pod("c", labels, node="n2", phase="Running", ready=True)
    for i, p in enumerate((a, b, c)):
        p.metadata.creationTimestamp.seconds = 1000 + i
    assert [p.metadata.name for p in pods_to_delete([a, b, c], [a, b, c], 1)] == ["b"]


async def test_terminating_and_finished_pods_do_not_count() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=2))
    labels = {"app": "web"}
    done = make_pod("done", labels, owner=rs, node="n1", phase="Succeeded")
    going = make_pod("going", labels, owner=rs, node="n1", phase="Running")
    going.metadata.deletionTimestamp.seconds = 5
    for p in (done, going):
        await env.client.pods.create(p)
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 4
    assert env.client.replica_sets.objects["default/web"].status.replicas == 0
    for pod in env.pods():
        env.ctrl.on_pod_add(pod)
    await env.ctrl.sync("default/web")
    assert len(env.pods()) == 4
    assert env.client.replica_sets.objects["default/web"].status.replicas == 2


async def test_adopts_matching_orphans_but_not_pods_owned_by_others() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=2))
    other = await env.create_rs(make_rs("other", replicas=0, labels={"app": "x"}))
    await env.client.pods.create(make_pod("orphan", {"app": "web"}))
    await env.client.pods.create(make_pod("owned", {"app": "web"}, owner=other))
    await env.client.pods.create(make_pod("stranger", {"app": "db"}))
    await env.ctrl.sync("default/web")
    orphan = env.client.pods.objects["default/orphan"]
    assert [r.uid for r in orphan.metadata.ownerReferences] == [rs.metadata.uid]
    assert (
        env.client.pods.objects["default/owned"].metadata.ownerReferences[0].uid
        == other.metadata.uid
    )
    assert not env.client.pods.objects["default/stranger"].metadata.ownerReferences
    assert len(env.pods()) == 4  # orphan adopted + one new pod (+ owned + stranger)


async def test_releases_owned_pods_that_no_longer_match() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=1))
    await env.client.pods.create(make_pod("relabelled", {"app": "other"}, owner=rs))
    await env.ctrl.sync("default/web")
    assert not env.client.pods.objects["default/relabelled"].metadata.ownerReferences
    assert len(env.pods()) == 2


@pytest.mark.parametrize("policy", ["Foreground", "Orphan"])
async def test_a_replicaset_being_deleted_leaves_its_pods_to_the_collector(policy: str) -> None:
    """Foreground: no replacement for the pods the collector deletes. Orphan: the pods the
    collector released are neither adopted back nor replaced, and no owned pod is deleted."""
    env = Env()
    rs = await env.create_rs(make_rs(replicas=3))
    await env.client.pods.create(make_pod("owned", {"app": "web"}, owner=rs))
    await env.client.pods.create(make_pod("released", {"app": "web"}))  # ref already stripped
    await env.client.replica_sets.delete("web", "default", propagation_policy=policy)
    before = len(env.client.pods.calls)
    await env.ctrl.sync("default/web")
    assert env.client.pods.calls[before:] == []  # no create, no delete, no adopt
    assert not env.client.pods.objects["default/released"].metadata.ownerReferences
    status = env.client.replica_sets.objects["default/web"].status
    assert status.replicas == 1  # what it still owns, reported while it goes


async def test_a_replicaset_being_deleted_keeps_pods_that_stopped_matching() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=1))
    await env.client.pods.create(make_pod("relabelled", {"app": "other"}, owner=rs))
    await env.client.replica_sets.delete("web", "default", propagation_policy="Foreground")
    await env.ctrl.sync("default/web")
    # Releasing it would let it escape the foreground deletion that waits for it.
    refs = env.client.pods.objects["default/relabelled"].metadata.ownerReferences
    assert [r.uid for r in refs] == [rs.metadata.uid]


async def test_status_counts_ready_and_available_with_min_ready_seconds() -> None:
    env = Env()
    spec = make_rs(replicas=2)
    spec.spec.minReadySeconds = 10
    rs = await env.create_rs(spec)
    labels = {"app": "web"}
    old = make_pod("old", labels, owner=rs, node="n1", phase="Running", ready=True)
    new = make_pod("new", labels, owner=rs, node="n1", phase="Running", ready=True)
    old.status.conditions[0].lastTransitionTime.CopyFrom(
        datetime_to_ts(env.clock.now() - timedelta(seconds=60))
    )
    new.status.conditions[0].lastTransitionTime.CopyFrom(datetime_to_ts(env.clock.now()))
    for p in (old, new):
        await env.client.pods.create(p)
    await env.ctrl.sync("default/web")
    status = env.client.replica_sets.objects["default/web"].status
    assert (status.replicas, status.readyReplicas, status.availableReplicas) == (2, 2, 1)
    assert ("default/web", 10.0) in env.queue.delayed


async def test_handlers_enqueue_the_owner_and_observe_creations() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=1))
    env.ctrl.expectations.expect_creations("default/web", 1)
    pod = make_pod("p", {"app": "web"}, owner=rs)
    env.ctrl.on_pod_add(pod)
    assert env.ctrl.expectations.satisfied("default/web")
    assert env.queue.added == ["default/web"]
    orphan = make_pod("o", {"app": "web"})
    env.ctrl.on_pod_add(orphan)
    assert env.queue.added == ["default/web", "default/web"]


async def test_deleted_replicaset_is_forgotten() -> None:
    env = Env()
    rs = await env.create_rs(make_rs(replicas=1))
    env.ctrl.expectations.expect_creations(key_of(rs), 1)
    del env.client.replica_sets.objects["default/web"]
    await env.ctrl.sync("default/web")
    assert env.ctrl.expectations.pending("default/web") == (0, 0)
    assert not env.pods()


def test_owner_reference_shape() -> None:
    rs = make_rs()
    rs.metadata.uid = "u1"
    ref = new_controller_ref(rs)
    assert ref == meta_pb2.OwnerReference(
        apiVersion="apps/v1",
        kind="ReplicaSet",
        name="web",
        uid="u1",
        controller=True,
        blockOwnerDeletion=True,
    )
