"""The deployment controller's reconcile against a fake client, with a fake ReplicaSet controller
(`settle`) that gives every ReplicaSet its pods at once, ready unless their image is broken."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from controller import deploymentutil as du
from controller.deployment import DeploymentController
from controller.replicaset import new_controller_ref as rs_owner_ref
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeRecorder, FakeStore
from tinykube.clock import FakeClock
from tinykube.errors import AlreadyExistsError
from tinykube.meta import int_or_string_value
from tinykube.v1 import deployment_pb2, pod_pb2, replicaset_pb2

BROKEN = "broken:1"


def make_deployment(
    replicas: int = 3,
    image: str = "nginx:1",
    surge: int | str = "25%",
    unavailable: int | str = "25%",
    strategy: str = "RollingUpdate",
    history: int = 10,
) -> deployment_pb2.Deployment:
    """A Deployment as the apiserver stores it (defaults applied)."""
    d = deployment_pb2.Deployment(apiVersion="apps/v1", kind="Deployment")
    d.metadata.name = "web"
    d.metadata.namespace = "default"
    d.spec.replicas = replicas
    d.spec.selector.matchLabels["app"] = "web"
    d.spec.template.metadata.labels["app"] = "web"
    d.spec.template.spec.containers.add(name="c", image=image)
    d.spec.strategy.type = strategy
    if strategy == "RollingUpdate":
        d.spec.strategy.rollingUpdate.maxSurge.CopyFrom(int_or_string_value(surge))
        d.spec.strategy.rollingUpdate.maxUnavailable.CopyFrom(int_or_string_value(unavailable))
    d.spec.revisionHistoryLimit = history
    d.spec.progressDeadlineSeconds = 600
    return d


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.client = FakeClient(self.clock)
        self.queue = FakeQueue()
        self.recorder = FakeRecorder()
        self.pod_names = itertools.count()
        self.ctrl = DeploymentController(
            self.client,
            FakeStore(self.client.deployments),
            FakeStore(self.client.replica_sets),
            FakeStore(self.client.pods),
            self.queue,
            clock=self.clock,
            recorder=self.recorder,
        )

    async def create(self, d: deployment_pb2.Deployment) -> None:
        await self.client.deployments.create(d)

    def get(self) -> deployment_pb2.Deployment:
        return self.client.deployments.objects["default/web"]

    async def update_spec(self, change: object) -> None:
        """An Update as the apiserver does it: a spec change bumps the generation."""
        d = deployment_pb2.Deployment()
        d.CopyFrom(self.get())
        assert callable(change)
        change(d)
        d.metadata.generation += 1
        await self.client.deployments.update(d)

    def rss(self) -> dict[str, replicaset_pb2.ReplicaSet]:
        return {rs.metadata.name: rs for rs in self.client.replica_sets.objects.values()}

    def sizes(self) -> dict[str, int]:
        return {name: rs.spec.replicas for name, rs in sorted(self.rss().items())}

    def settle(self) -> None:
        """The ReplicaSet controller and kubelets, instantly: every ReplicaSet has its pods."""
        for rs in self.client.replica_sets.objects.values():
            n = rs.spec.replicas
            ok = rs.spec.template.spec.containers[0].image != BROKEN
            rs.status.replicas = n
            rs.status.readyReplicas = rs.status.availableReplicas = n if ok else 0
            rs.status.observedGeneration = rs.metadata.generation
            rs.metadata.resourceVersion = str(next(self.client.replica_sets._rv))

    def available(self) -> int:
        return sum(rs.status.availableReplicas for rs in self.rss().values())

    def total(self) -> int:
        return sum(rs.spec.replicas for rs in self.rss().values())

    async def roll(self, *, low: int = 0, high: int = 10**9, steps: int = 40) -> int:
        """Sync and settle until nothing changes; every step within [low, high] (available pods
        at least `low`, pods at most `high`). Returns the steps taken."""
        quiet = 0
        for step in range(steps):
            before = (self.sizes(), self.get().status.SerializeToString(deterministic=True))
            await self.ctrl.sync("default/web")
            assert self.total() <= high, f"step {step}: {self.sizes()} above {high} pods"
            self.settle()
            assert self.available() >= low, f"step {step}: {self.sizes()} below {low} available"
            after = (self.sizes(), self.get().status.SerializeToString(deterministic=True))
            # Quiet twice: the sync after a settle saw the settled ReplicaSets and did nothing.
            quiet = quiet + 1 if before == after else 0
            if quiet == 2:
                return step
        raise AssertionError(f"no steady state after {steps} steps: {self.sizes()}")

    def scaling_events(self) -> list[str]:
        return [m for _, reason, m in self.recorder.events if reason == "ScalingReplicaSet"]


def progressing(d: deployment_pb2.Deployment) -> tuple[str, str, str]:
    cond = du.get_condition(d.status, du.PROGRESSING)
    assert cond is not None
    return cond.status, cond.reason, cond.message


def set_image(image: str) -> object:
    def change(d: deployment_pb2.Deployment) -> None:
        d.spec.template.spec.containers[0].image = image

    return change


async def test_a_new_deployment_gets_one_replica_set_named_by_its_template_hash() -> None:
    env = Env()
    await env.create(make_deployment(replicas=3))
    await env.ctrl.sync("default/web")
    (rs,) = env.rss().values()
    template_hash = du.compute_hash(env.get().spec.template, None)
    assert rs.metadata.name == f"web-{template_hash}"
    assert rs.spec.replicas == 3
    for labels in (
        rs.metadata.labels,
        rs.spec.selector.matchLabels,
        rs.spec.template.metadata.labels,
    ):
        assert dict(labels) == {"app": "web", "pod-template-hash": template_hash}
    (ref,) = rs.metadata.ownerReferences
    assert (ref.kind, ref.name, ref.controller, ref.blockOwnerDeletion) == (
        "Deployment",
        "web",
        True,
        True,
    )
    ann = dict(rs.metadata.annotations)
    assert ann == {
        du.REVISION_ANNOTATION: "1",
        du.DESIRED_REPLICAS_ANNOTATION: "3",
        du.MAX_REPLICAS_ANNOTATION: "4",
    }
    assert env.scaling_events() == [f"Scaled up replica set {rs.metadata.name} from 0 to 3"]
    d = env.get()
    assert d.metadata.annotations[du.REVISION_ANNOTATION] == "1"
    assert progressing(d) == (
        "True",
        "NewReplicaSetCreated",
        f'Created new replica set "{rs.metadata.name}"',
    )

    await env.roll()
    d = env.get()
    st = d.status
    assert (st.replicas, st.updatedReplicas, st.readyReplicas, st.availableReplicas) == (3, 3, 3, 3)
    assert st.observedGeneration == 1 and st.unavailableReplicas == 0
    assert progressing(d) == (
        "True",
        "NewReplicaSetAvailable",
        f'ReplicaSet "{rs.metadata.name}" has successfully progressed.',
    )
    available = du.get_condition(st, du.AVAILABLE)
    assert available is not None and (available.status, available.reason) == (
        "True",
        "MinimumReplicasAvailable",
    )


@pytest.mark.parametrize(
    ("replicas", "surge", "unavailable", "high", "low"),
    [
        (10, "25%", "25%", 13, 8),  # surge rounds up (2.5 -> 3), unavailable down (2.5 -> 2)
        (10, 0, 1, 10, 9),
        (10, 3, 0, 13, 10),
        (5, "50%", "50%", 8, 3),
        (1, 1, 0, 2, 1),
    ],
)
async def test_rolling_update_stays_within_surge_and_unavailability(
    replicas: int, surge: int | str, unavailable: int | str, high: int, low: int
) -> None:
    env = Env()
    await env.create(make_deployment(replicas, surge=surge, unavailable=unavailable))
    await env.roll()
    first = next(iter(env.rss()))
    await env.update_spec(set_image("nginx:2"))
    await env.roll(low=low, high=high)
    sizes = env.sizes()
    assert sizes[first] == 0 and sum(sizes.values()) == replicas and len(sizes) == 2
    d = env.get()
    assert d.metadata.annotations[du.REVISION_ANNOTATION] == "2"
    assert d.status.updatedReplicas == replicas and d.status.observedGeneration == 2
    assert progressing(d)[1] == "NewReplicaSetAvailable"
    assert any(m.startswith(f"Scaled down replica set {first} from ") for m in env.scaling_events())


async def test_rollback_reuses_the_old_replica_set_with_the_next_revision() -> None:
    env = Env()
    await env.create(make_deployment(replicas=4))
    await env.roll()
    (v1,) = env.rss()
    await env.update_spec(set_image("nginx:2"))
    await env.roll()
    await env.update_spec(set_image("nginx:1"))  # what `kubectl rollout undo` writes
    await env.roll()
    rss = env.rss()
    assert len(rss) == 2, "a rollback made a third ReplicaSet"
    assert rss[v1].spec.replicas == 4
    assert rss[v1].metadata.annotations[du.REVISION_ANNOTATION] == "3"
    assert rss[v1].metadata.annotations[du.REVISION_HISTORY_ANNOTATION] == "1"
    assert env.get().metadata.annotations[du.REVISION_ANNOTATION] == "3"


async def test_a_broken_rollout_stalls_and_times_out() -> None:
    env = Env()
    await env.create(make_deployment(replicas=10))
    await env.roll()
    (v1,) = env.rss()
    await env.update_spec(set_image(BROKEN))
    await env.roll(low=8, high=13)
    sizes = env.sizes()
    assert sizes[v1] == 8 and sum(sizes.values()) == 13  # maxUnavailable and maxSurge used up
    d = env.get()
    assert progressing(d)[:2] == ("True", "ReplicaSetUpdated")
    assert env.queue.delayed, "nothing will look at the deadline"
    env.clock.advance(601)
    await env.ctrl.sync("default/web")
    d = env.get()
    new = next(n for n in env.rss() if n != v1)
    assert progressing(d) == (
        "False",
        "ProgressDeadlineExceeded",
        f'ReplicaSet "{new}" has timed out progressing.',
    )
    # Undo: the template of revision 1 again; the old ReplicaSet takes everything back.
    await env.update_spec(set_image("nginx:1"))
    await env.roll(low=8, high=13)
    assert env.sizes() == {v1: 10, new: 0}
    assert progressing(env.get())[1] == "NewReplicaSetAvailable"


async def test_scaling_mid_rollout_is_proportional() -> None:
    env = Env()
    await env.create(make_deployment(replicas=10))
    await env.roll()
    (v1,) = env.rss()
    await env.update_spec(set_image(BROKEN))
    await env.roll()
    new = next(n for n in env.rss() if n != v1)
    assert env.sizes() == {v1: 8, new: 5}

    def scale(d: deployment_pb2.Deployment) -> None:
        d.spec.replicas = 20

    await env.update_spec(scale)
    await env.ctrl.sync("default/web")
    # 25 = 20 + 5 surge, shared as 8:5 of the 13 (8*25/13 = 15.4, 5*25/13 = 9.6)
    assert env.sizes() == {v1: 15, new: 10}
    assert env.scaling_events()[-2:] == [
        f"Scaled up replica set {name} from {old} to {size}"
        for name, old, size in sorted([(v1, 8, 15), (new, 5, 10)], key=lambda x: -x[1])
    ]
    ann = env.rss()[v1].metadata.annotations
    assert (ann[du.DESIRED_REPLICAS_ANNOTATION], ann[du.MAX_REPLICAS_ANNOTATION]) == ("20", "25")


async def test_recreate_waits_for_the_old_pods_before_the_new_replica_set() -> None:
    env = Env()
    await env.create(make_deployment(replicas=2, strategy="Recreate"))
    await env.roll()
    (v1,) = env.rss()
    old_rs = env.rss()[v1]
    pod = pod_pb2.Pod()
    pod.metadata.name = "web-old-pod"
    pod.metadata.namespace = "default"
    pod.metadata.ownerReferences.append(rs_owner_ref(old_rs))
    pod.status.phase = "Running"
    await env.client.pods.create(pod)
    await env.update_spec(set_image("nginx:2"))
    await env.ctrl.sync("default/web")
    assert env.sizes() == {v1: 0}
    env.settle()
    await env.ctrl.sync("default/web")
    assert env.sizes() == {v1: 0}, "the new ReplicaSet came while an old pod still ran"
    env.client.pods.objects.clear()
    await env.ctrl.sync("default/web")
    sizes = env.sizes()
    assert sizes[v1] == 0 and sorted(sizes.values()) == [0, 2]


async def test_a_paused_deployment_only_scales() -> None:
    env = Env()
    await env.create(make_deployment(replicas=2))
    await env.roll()

    def pause(d: deployment_pb2.Deployment) -> None:
        d.spec.paused = True
        d.spec.template.spec.containers[0].image = "nginx:2"

    await env.update_spec(pause)
    await env.roll()
    assert len(env.rss()) == 1
    assert progressing(env.get())[:2] == ("Unknown", "DeploymentPaused")

    def resume(d: deployment_pb2.Deployment) -> None:
        d.spec.paused = False

    await env.update_spec(resume)
    await env.roll()
    assert len(env.rss()) == 2 and env.get().status.updatedReplicas == 2
    assert progressing(env.get())[1] == "NewReplicaSetAvailable"


async def test_old_replica_sets_beyond_the_history_limit_are_deleted() -> None:
    env = Env()
    await env.create(make_deployment(replicas=1, history=1))
    await env.roll()
    for image in ("nginx:2", "nginx:3", "nginx:4"):
        await env.update_spec(set_image(image))
        await env.roll()
    revisions = sorted(
        int(rs.metadata.annotations[du.REVISION_ANNOTATION]) for rs in env.rss().values()
    )
    assert revisions == [3, 4]


async def test_a_hash_collision_bumps_the_collision_count() -> None:
    env = Env()
    d = make_deployment(replicas=1)
    await env.create(d)
    taken = replicaset_pb2.ReplicaSet()
    taken.metadata.name = f"web-{du.compute_hash(env.get().spec.template, None)}"
    taken.metadata.namespace = "default"
    taken.spec.template.metadata.labels["app"] = "other"
    await env.client.replica_sets.create(taken)
    with pytest.raises(AlreadyExistsError):
        await env.ctrl.sync("default/web")
    assert env.get().status.collisionCount == 1
    await env.ctrl.sync("default/web")
    names = set(env.rss())
    assert f"web-{du.compute_hash(env.get().spec.template, 1)}" in names and len(names) == 2


async def test_a_new_replica_set_the_cache_has_not_seen_is_no_hash_collision() -> None:
    env = Env()
    await env.create(make_deployment(replicas=2))
    await env.roll()
    store = env.ctrl.rs_store
    assert isinstance(store, FakeStore)
    store.lag()  # the watch has not brought the new ReplicaSet the first sync creates
    await env.update_spec(set_image("nginx:2"))
    await env.ctrl.sync("default/web")
    with pytest.raises(AlreadyExistsError):
        await env.ctrl.sync("default/web")
    assert not env.get().status.HasField("collisionCount")
    store.catch_up()
    await env.roll()
    assert len(env.rss()) == 2 and env.get().status.updatedReplicas == 2


async def test_orphan_replica_sets_that_match_are_adopted() -> None:
    env = Env()
    await env.create(make_deployment(replicas=1))
    orphan = replicaset_pb2.ReplicaSet()
    orphan.metadata.name = "web-manual"
    orphan.metadata.namespace = "default"
    orphan.metadata.labels["app"] = "web"
    orphan.spec.replicas = 0
    await env.client.replica_sets.create(orphan)
    await env.ctrl.sync("default/web")
    (ref,) = env.rss()["web-manual"].metadata.ownerReferences
    assert ref.uid == env.get().metadata.uid and ref.controller


def test_handlers_enqueue_the_owning_deployment() -> None:
    env = Env()
    d = make_deployment()
    d.metadata.uid = "u1"
    env.client.deployments.objects["default/web"] = d
    rs = replicaset_pb2.ReplicaSet()
    rs.metadata.name = "web-abc"
    rs.metadata.namespace = "default"
    rs.metadata.ownerReferences.add(kind="Deployment", name="web", uid="u1", controller=True)
    env.ctrl.on_rs_add(rs)
    stranger = replicaset_pb2.ReplicaSet()
    stranger.CopyFrom(rs)
    stranger.metadata.ownerReferences[0].uid = "u2"  # a previous Deployment of that name
    env.ctrl.on_rs_add(stranger)
    assert env.queue.added == ["default/web"]
    env.clock.advance(timedelta(seconds=1).total_seconds())
