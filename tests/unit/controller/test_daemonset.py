"""DaemonSet controller reconcile, against a fake client and a fake clock."""

from __future__ import annotations

import pytest

from controller import daemonutil as du
from controller.daemonset import Backoff, DaemonSetController
from controller.util import key_of
from tests.unit.controller.fakes import (
    FakeClient,
    FakeQueue,
    FakeRecorder,
    FakeResource,
    FakeStore,
)
from tinykube.clock import FakeClock
from tinykube.meta import set_int_or_string
from tinykube.v1 import controllerrevision_pb2, daemonset_pb2, node_pb2, pod_pb2


class Client(FakeClient):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        rv = self.pods._rv
        self.daemon_sets = FakeResource("DaemonSet", daemonset_pb2.DaemonSet, clock, rv)
        self.controller_revisions = FakeResource(
            "ControllerRevision", controllerrevision_pb2.ControllerRevision, clock, rv
        )


def make_ds(name: str = "agent", *, max_unavailable: int = 1) -> daemonset_pb2.DaemonSet:
    ds = daemonset_pb2.DaemonSet(apiVersion="apps/v1", kind="DaemonSet")
    ds.metadata.name = name
    ds.metadata.namespace = "default"
    ds.metadata.annotations[du.TEMPLATE_GENERATION_ANNOTATION] = "1"
    ds.spec.selector.matchLabels["app"] = name
    ds.spec.template.metadata.labels["app"] = name
    ds.spec.template.spec.containers.add(name="c", image="v1")
    ds.spec.updateStrategy.type = "RollingUpdate"
    set_int_or_string(ds.spec.updateStrategy.rollingUpdate.maxUnavailable, max_unavailable)
    set_int_or_string(ds.spec.updateStrategy.rollingUpdate.maxSurge, 0)
    ds.spec.revisionHistoryLimit = 10
    return ds


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.client = Client(self.clock)
        self.queue = FakeQueue()
        self.recorder = FakeRecorder()
        self.ctrl = DaemonSetController(
            self.client,
            FakeStore(self.client.daemon_sets),
            FakeStore(self.client.pods),
            FakeStore(self.client.nodes),
            FakeStore(self.client.controller_revisions),
            self.queue,
            clock=self.clock,
            recorder=self.recorder,
        )

    async def node(self, name: str, labels: dict[str, str] | None = None) -> node_pb2.Node:
        node = node_pb2.Node()
        node.metadata.name = name
        node.metadata.labels.update(labels or {})
        return await self.client.nodes.create(node)

    def ds(self, name: str = "agent") -> daemonset_pb2.DaemonSet:
        return self.client.daemon_sets.objects[f"default/{name}"]

    def pods(self) -> list[pod_pb2.Pod]:
        return sorted(self.client.pods.objects.values(), key=lambda p: du.target_node(p) or "")

    def pods_by_node(self) -> dict[str, pod_pb2.Pod]:
        return {du.target_node(p) or "": p for p in self.pods()}

    def bind_all(self, *, ready: bool = True) -> None:
        """What the scheduler and the kubelets would do: bind each new pod to its node and run
        it (Ready or not); with `ready`, every pod turns Ready."""
        for p in self.client.pods.objects.values():
            if not p.spec.nodeName:
                p.spec.nodeName = du.target_node(p) or ""
                p.status.phase = "Running"
                if not ready:
                    continue
            if ready and not any(c.type == "Ready" for c in p.status.conditions):
                p.status.conditions.add(type="Ready", status="True")
            p.status.phase = p.status.phase or "Running"

    async def sync(self, name: str = "agent") -> None:
        # A sync after every create/delete was observed (an instant watch).
        self.ctrl.expectations.delete(f"default/{name}")
        await self.ctrl.sync(f"default/{name}")


async def test_one_pod_per_node_placed_by_affinity_with_a_revision() -> None:
    env = Env()
    for n in ("n1", "n2", "n3"):
        await env.node(n)
    await env.client.daemon_sets.create(make_ds())
    await env.sync()
    pods = env.pods()
    assert [du.target_node(p) for p in pods] == ["n1", "n2", "n3"]
    assert all(p.spec.nodeName == "" for p in pods)
    (cr,) = env.client.controller_revisions.objects.values()
    hash_ = cr.metadata.labels[du.HASH_LABEL]
    assert cr.metadata.name == f"agent-{hash_}"
    assert cr.revision == 1
    assert all(p.metadata.labels[du.HASH_LABEL] == hash_ for p in pods)
    assert all(p.metadata.labels[du.TEMPLATE_GENERATION_LABEL] == "1" for p in pods)
    created = [m for t, r, m in env.recorder.events if r == "SuccessfulCreate"]
    assert sorted(created) == sorted(f"Created pod: {p.metadata.name}" for p in pods)
    st = env.ds().status
    assert (st.desiredNumberScheduled, st.currentNumberScheduled, st.numberReady) == (3, 3, 0)
    assert (st.numberAvailable, st.numberUnavailable, st.updatedNumberScheduled) == (0, 3, 3)
    assert st.observedGeneration == env.ds().metadata.generation

    env.bind_all()
    await env.sync()
    st = env.ds().status
    assert (st.numberReady, st.numberAvailable, st.numberUnavailable) == (3, 3, 0)
    assert len(env.pods()) == 3  # nothing more


async def test_follows_nodes_joining_and_no_longer_qualifying() -> None:
    env = Env()
    ds = make_ds()
    ds.spec.template.spec.nodeSelector["role"] = "edge"
    await env.node("n1", {"role": "edge"})
    await env.node("n2")
    await env.client.daemon_sets.create(ds)
    await env.sync()
    assert list(env.pods_by_node()) == ["n1"]

    new = await env.node("n3", {"role": "edge"})
    env.ctrl.on_node_add(new)
    assert "default/agent" in env.queue.added
    await env.sync()
    assert list(env.pods_by_node()) == ["n1", "n3"]

    env.bind_all()
    old = node_pb2.Node()
    old.CopyFrom(env.client.nodes.objects["n1"])
    env.client.nodes.objects["n1"].metadata.labels["role"] = "core"
    env.queue.added.clear()
    env.ctrl.on_node_update(old, env.client.nodes.objects["n1"])
    assert env.queue.added == ["default/agent"]
    await env.sync()
    assert list(env.pods_by_node()) == ["n3"]
    assert any(r == "SuccessfulDelete" for _, r, _ in env.recorder.events)


async def test_a_heartbeat_does_not_wake_daemon_sets() -> None:
    env = Env()
    await env.client.daemon_sets.create(make_ds())
    node = await env.node("n1")
    beat = node_pb2.Node()
    beat.CopyFrom(node)
    beat.status.conditions.add(type="Ready", status="True")
    env.ctrl.on_node_update(node, beat)
    assert env.queue.added == []


async def test_an_unscheduled_pod_for_a_deleted_node_is_deleted() -> None:
    env = Env()
    await env.node("n1")
    await env.node("n2")
    await env.client.daemon_sets.create(make_ds())
    await env.sync()
    del env.client.nodes.objects["n2"]
    await env.sync()
    assert list(env.pods_by_node()) == ["n1"]


async def test_a_failed_pod_is_replaced_with_back_off() -> None:
    env = Env()
    await env.node("n1")
    await env.client.daemon_sets.create(make_ds())
    await env.sync()
    env.bind_all()
    (first,) = env.pods()
    first.status.phase = "Failed"
    await env.sync()
    assert first.metadata.name not in {p.metadata.name for p in env.pods()}
    warnings = [m for t, r, m in env.recorder.events if r == "FailedDaemonPod"]
    assert warnings == [
        f"Found failed daemon pod default/{first.metadata.name} on node n1, will try to kill it"
    ]
    await env.sync()  # the replacement
    (second,) = env.pods()
    env.bind_all()
    second.status.phase = "Failed"
    env.clock.advance(0.5)  # within the 1 s back-off
    await env.sync()
    assert [p.metadata.name for p in env.pods()] == [second.metadata.name]
    assert ("default/agent", 1.0) in env.queue.delayed
    env.clock.advance(1.0)
    await env.sync()
    assert second.metadata.name not in {p.metadata.name for p in env.pods()}


async def test_rolling_update_replaces_max_unavailable_pods_at_a_time() -> None:
    env = Env()
    for n in ("n1", "n2", "n3"):
        await env.node(n)
    await env.client.daemon_sets.create(make_ds())
    await env.sync()
    env.bind_all()
    await env.sync()
    old_hash = env.pods()[0].metadata.labels[du.HASH_LABEL]

    ds = env.ds()
    ds.spec.template.spec.containers[0].image = "v2"
    ds.metadata.annotations[du.TEMPLATE_GENERATION_ANNOTATION] = "2"
    ds.metadata.generation += 1
    await env.sync()
    revisions = sorted(env.client.controller_revisions.objects.values(), key=lambda r: r.revision)
    assert [r.revision for r in revisions] == [1, 2]
    new_hash = revisions[1].metadata.labels[du.HASH_LABEL]
    assert new_hash != old_hash
    # One old pod went (maxUnavailable 1); the other two still run the old template.
    assert [p.metadata.labels[du.HASH_LABEL] for p in env.pods()] == [old_hash, old_hash]
    assert env.ds().status.updatedNumberScheduled == 0

    for _ in range(3):
        await env.sync()  # the manage loop gives the node its new pod
        assert len(env.pods()) == 3
        env.bind_all(ready=False)
        await env.sync()  # the new pod is not available: no further deletion
        assert len(env.pods()) == 3
        env.bind_all()
        await env.sync()  # available: the next old pod goes
    hashes = [p.metadata.labels[du.HASH_LABEL] for p in env.pods()]
    assert hashes == [new_hash] * 3
    st = env.ds().status
    assert (st.updatedNumberScheduled, st.numberAvailable) == (3, 3)


async def test_on_delete_waits_for_old_pods_to_be_deleted() -> None:
    env = Env()
    await env.node("n1")
    ds = make_ds()
    ds.spec.updateStrategy.type = "OnDelete"
    ds.spec.updateStrategy.ClearField("rollingUpdate")
    await env.client.daemon_sets.create(ds)
    await env.sync()
    env.bind_all()
    env.ds().spec.template.spec.containers[0].image = "v2"
    env.ds().metadata.annotations[du.TEMPLATE_GENERATION_ANNOTATION] = "2"  # as the apiserver
    await env.sync()
    (old,) = env.pods()
    assert old.spec.containers[0].image == "v1"
    assert env.ds().status.updatedNumberScheduled == 0
    del env.client.pods.objects[key_of(old)]
    await env.sync()
    (new,) = env.pods()
    assert new.spec.containers[0].image == "v2"


async def test_rollback_reuses_the_old_revision_with_a_new_number() -> None:
    env = Env()
    await env.node("n1")
    await env.client.daemon_sets.create(make_ds())
    await env.sync()
    ds = env.ds()
    ds.spec.template.spec.containers[0].image = "v2"
    await env.sync()
    ds.spec.template.spec.containers[0].image = "v1"
    await env.sync()
    crs = sorted(env.client.controller_revisions.objects.values(), key=lambda r: r.revision)
    assert len(crs) == 2
    assert du.revision_matches(ds, crs[-1])
    assert crs[-1].revision == 3


async def test_old_revisions_beyond_the_history_limit_are_deleted() -> None:
    env = Env()
    await env.node("n1")
    ds = make_ds()
    ds.spec.revisionHistoryLimit = 1
    await env.client.daemon_sets.create(ds)
    for image in ("v1", "v2", "v3", "v4"):
        env.ds().spec.template.spec.containers[0].image = image
        await env.sync()
        env.client.pods.objects.clear()  # no pod keeps an old revision alive
    crs = sorted(env.client.controller_revisions.objects.values(), key=lambda r: r.revision)
    assert [r.revision for r in crs] == [3, 4]


async def test_a_pod_of_another_template_is_adopted_and_an_extra_pod_removed() -> None:
    env = Env()
    await env.node("n1")
    await env.client.daemon_sets.create(make_ds())
    for i in range(2):
        orphan = pod_pb2.Pod()
        orphan.metadata.name = f"stray-{i}"
        orphan.metadata.namespace = "default"
        orphan.metadata.labels["app"] = "agent"
        orphan.spec.nodeName = "n1"
        orphan.status.phase = "Running"
        await env.client.pods.create(orphan)
        env.clock.advance(1)
    await env.sync()
    pods = env.pods()
    assert [p.metadata.name for p in pods] == ["stray-0"]  # the oldest stays
    assert du.owns(env.ds(), pods[0])


async def test_an_empty_selector_selects_nothing_and_says_so() -> None:
    env = Env()
    await env.node("n1")
    ds = make_ds()
    ds.spec.selector.Clear()
    await env.client.daemon_sets.create(ds)
    await env.sync()
    assert env.pods() == []
    assert env.recorder.events == [
        (
            "Warning",
            "SelectingAll",
            "This daemon set is selecting all pods. A non-empty selector is required.",
        )
    ]


async def test_expectations_hold_back_a_second_round_of_creates() -> None:
    env = Env()
    await env.node("n1")
    await env.client.daemon_sets.create(make_ds())
    store: FakeStore[pod_pb2.Pod] = env.ctrl.pod_store  # type: ignore[assignment]
    store.lag()
    await env.ctrl.sync("default/agent")
    await env.ctrl.sync("default/agent")  # the watch has not shown the pod yet
    assert len(env.pods()) == 1


@pytest.mark.parametrize(
    ("steps", "in_backoff_at", "want"),
    [
        ([0.0], 0.5, True),
        ([0.0], 1.5, False),
        ([0.0, 1.0], 2.5, True),  # doubled to 2 s
        ([0.0, 1.0], 3.5, False),
        ([0.0, 4000.0], 4000.5, True),  # idle for more than 2 x 15 min: from 1 s again
        ([0.0, 4000.0], 4001.5, False),
    ],
)
def test_backoff(steps: list[float], in_backoff_at: float, want: bool) -> None:
    b = Backoff()
    for t in steps:
        b.next("k", t)
    assert b.in_backoff_since_update("k", in_backoff_at) is want


async def test_status_counts_misscheduled_pods_and_the_oldest_pod_per_node() -> None:
    env = Env()
    ds = await env.client.daemon_sets.create(make_ds())
    ds.spec.template.spec.nodeSelector["role"] = "edge"
    edge = await env.node("edge", {"role": "edge"})
    core = await env.node("core")
    hash_ = "h"
    pods = []
    for i, node in enumerate(("edge", "edge", "core")):
        pod = du.pod_for_node(ds, node, hash_ if i == 0 else "old")
        pod.metadata.name = f"p{i}"
        pod.metadata.creationTimestamp.seconds = 100 + i
        pod.spec.nodeName = node
        if i == 0:
            pod.status.conditions.add(type="Ready", status="True")
        pods.append(pod)
    by_node = {"edge": pods[:2], "core": pods[2:]}
    check = du.eligibility_check(ds)
    nodes = {n.metadata.name: check(n) for n in (edge, core)}
    st = env.ctrl.calculate_status(ds, nodes, by_node, hash_, observed=True)
    assert (st.desiredNumberScheduled, st.currentNumberScheduled) == (1, 1)
    assert (st.numberMisscheduled, st.numberReady, st.numberAvailable) == (1, 1, 1)
    assert (st.updatedNumberScheduled, st.numberUnavailable) == (1, 0)
    assert st.observedGeneration == ds.metadata.generation
