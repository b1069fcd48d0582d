"""The rolling update against ReplicaSet statuses that lag, as they do on a real cluster.

tests/unit/controller/test_deployment.py settles every ReplicaSet at once. Here every ReplicaSet
has pods of its own, and a model of the ReplicaSet controller writes status as Kubernetes' does:
counted from the pods it had before it created or deleted any, with observedGeneration current.
So an old ReplicaSet just scaled down can report more pods (and more available ones) than its
spec.replicas, and a status can be a generation behind its spec. The deployment controller
syncs in between, sometimes from an informer cache that is behind, and every step must keep
the Deployment within replicas - maxUnavailable available and replicas + maxSurge pods.
"""

from __future__ import annotations

import random

import pytest

from controller import deploymentutil as du
from tests.unit.controller.fakes import FakeStore
from tests.unit.controller.test_deployment import Env, make_deployment, set_image
from tinykube.errors import AlreadyExistsError, ConflictError
from tinykube.v1 import replicaset_pb2

ReplicaSet = replicaset_pb2.ReplicaSet


class Cluster:
    """A Deployment, its ReplicaSets' pods (True when available) and the steps that move them."""

    def __init__(self, replicas: int, surge: int | str, unavailable: int | str) -> None:
        self.env = Env()
        self.env.client.replica_sets.update_as_apiserver = True
        self.deployment = make_deployment(replicas, surge=surge, unavailable=unavailable)
        self.pods: dict[str, list[bool]] = {}
        self.snapshot: dict[str, ReplicaSet] = {}
        self.floor = replicas - du.max_unavailable(self.deployment)
        self.ceiling = replicas + du.max_surge(self.deployment)

    def rs(self, name: str) -> ReplicaSet:
        return self.env.rss()[name]

    def _store(self, rs: ReplicaSet) -> None:
        """A write by someone else: a new object (a snapshot keeps the old one)."""
        rs.metadata.resourceVersion = str(next(self.env.client.replica_sets._rv))
        self.env.client.replica_sets.objects[f"default/{rs.metadata.name}"] = rs

    def rs_sync(self, name: str, limit: int | None = None) -> None:
        """Kubernetes' syncReplicaSet: create or delete towards spec.replicas (at most `limit`
        creations, as a slow-start batch stops short), unavailable pods deleted first; status
        from the pods as they were before."""
        rs = ReplicaSet()
        rs.CopyFrom(self.rs(name))
        pods = self.pods.setdefault(name, [])
        rs.status.replicas = len(pods)
        rs.status.readyReplicas = rs.status.availableReplicas = sum(pods)
        rs.status.observedGeneration = rs.metadata.generation
        diff = rs.spec.replicas - len(pods)
        if diff > 0:
            pods.extend([False] * min(diff, diff if limit is None else limit))
        elif diff < 0:
            pods.sort()
            del pods[:-diff]
        self._store(rs)

    def kubelet(self, name: str, count: int | None = None) -> None:
        """`count` (else every) pod of `name` that is not available yet becomes available."""
        pods = self.pods.get(name, [])
        waiting = [i for i, ok in enumerate(pods) if not ok]
        for i in waiting[: len(waiting) if count is None else count]:
            pods[i] = True

    async def deployment_sync(self, *, stale: bool = False) -> None:
        store = self.env.ctrl.rs_store
        assert isinstance(store, FakeStore)
        if stale:
            store.lag(self.snapshot)
        try:
            await self.env.ctrl.sync("default/web")
        except (ConflictError, AlreadyExistsError):
            pass  # a write from a stale cache lost: the work queue retries the key
        finally:
            store.catch_up()

    def take_snapshot(self) -> None:
        self.snapshot = dict(self.env.client.replica_sets.objects)

    def check(self, what: str) -> None:
        """The bounds, on the pods that exist and on what the ReplicaSets report."""
        rss = self.env.rss().values()
        real_pods = sum(len(p) for p in self.pods.values())
        real_available = sum(sum(p) for p in self.pods.values())
        reported_pods = sum(rs.status.replicas for rs in rss)
        reported_available = sum(rs.status.availableReplicas for rs in rss)
        state = {
            rs.metadata.name[-5:]: (
                rs.spec.replicas,
                rs.status.replicas,
                rs.status.availableReplicas,
            )
            for rs in rss
        }
        assert real_available >= self.floor, f"{what}: {real_available} available: {state}"
        assert reported_available >= self.floor, f"{what}: reports {reported_available}: {state}"
        assert real_pods <= self.ceiling, f"{what}: {real_pods} pods: {state}"
        assert reported_pods <= self.ceiling, f"{what}: reports {reported_pods} pods: {state}"

    async def start(self) -> str:
        """The Deployment at full availability with one ReplicaSet; returns its name."""
        await self.env.create(self.deployment)
        for _ in range(20):
            await self.deployment_sync()
            for name in self.env.rss():
                self.rs_sync(name)
                self.kubelet(name)
                self.rs_sync(name)
            st = self.env.get().status
            if st.availableReplicas == self.deployment.spec.replicas:
                (name,) = self.env.rss()
                return name
        raise AssertionError("the first rollout did not finish")

    def done(self, old: str) -> bool:
        rss = self.env.rss()
        new = [rs for name, rs in rss.items() if name != old]
        replicas = self.deployment.spec.replicas
        return (
            rss[old].spec.replicas == 0
            and rss[old].status.replicas == 0
            and len(new) == 1
            and new[0].status.availableReplicas == replicas
            and self.env.get().status.updatedReplicas == replicas
        )


@pytest.mark.parametrize(
    ("replicas", "surge", "unavailable"),
    [(40, "25%", "25%"), (10, 0, 1), (10, 3, 0), (5, "50%", "50%"), (7, 2, 3)],
)
@pytest.mark.parametrize("seed", range(6))
async def test_a_rollout_with_lagging_statuses_stays_within_its_bounds(
    replicas: int, surge: int | str, unavailable: int | str, seed: int
) -> None:
    cluster = Cluster(replicas, surge, unavailable)
    old = await cluster.start()
    cluster.take_snapshot()
    await cluster.env.update_spec(set_image("nginx:2"))
    rng = random.Random(seed)
    for step in range(5000):
        if cluster.done(old):
            # Creating the new ReplicaSet again from a cache without it is no hash collision.
            assert not cluster.env.get().status.HasField("collisionCount")
            return
        names = sorted(cluster.env.rss())
        op = rng.choice(["sync", "sync", "stale", "snapshot", "rs", "rs", "kubelet"])
        if op == "sync":
            await cluster.deployment_sync()
        elif op == "stale":
            await cluster.deployment_sync(stale=True)
        elif op == "snapshot":
            cluster.take_snapshot()
        elif op == "rs":
            cluster.rs_sync(rng.choice(names), rng.choice([1, 2, 4, 8, None]))
        else:
            cluster.kubelet(rng.choice(names), rng.choice([1, 3, None]))
        cluster.check(f"step {step} ({op})")
    raise AssertionError(f"the rollout did not finish: {cluster.env.sizes()}")


# The interleaving a 400-replica rollout (maxSurge 100, maxUnavailable 100) met on a real
# cluster: each row is the old and the new ReplicaSet as (spec.replicas, status.replicas,
# status.availableReplicas, status a generation behind), and their sizes after one sync.
@pytest.mark.parametrize(
    ("old", "new", "sizes"),
    [
        # Old scaled to 269, its status still from before: 300 pods, all available. Only 169
        # more may go (269 + 200 - 300), not the 200 the stale 300 suggests.
        ((269, 300, 300, True), (231, 200, 200, False), (100, 231)),
        # The same after its ReplicaSet controller deleted, before it counted again.
        ((269, 300, 300, False), (231, 200, 200, False), (100, 231)),
        ((269, 269, 269, False), (231, 200, 200, False), (100, 231)),
        # Old scaled to 69 but 300 of its pods still there: no room for the new one yet.
        ((69, 300, 300, True), (231, 200, 200, False), (69, 231)),
        ((69, 300, 300, False), (231, 200, 200, False), (69, 231)),
        # Once the old pods are gone, the new one takes the room.
        ((69, 69, 69, False), (231, 200, 200, False), (69, 400)),
    ],
)
async def test_one_sync_counts_a_status_no_further_than_its_spec(
    old: tuple[int, int, int, bool], new: tuple[int, int, int, bool], sizes: tuple[int, int]
) -> None:
    cluster = Cluster(400, "25%", "25%")
    old_name = await cluster.start()
    await cluster.env.update_spec(set_image("nginx:2"))
    await cluster.deployment_sync()
    (new_name,) = (n for n in cluster.env.rss() if n != old_name)
    for name, (spec, replicas, available, behind) in ((old_name, old), (new_name, new)):
        rs = ReplicaSet()
        rs.CopyFrom(cluster.rs(name))
        rs.spec.replicas = spec
        rs.metadata.generation += 1
        rs.status.replicas = replicas
        rs.status.readyReplicas = rs.status.availableReplicas = available
        rs.status.observedGeneration = rs.metadata.generation - (1 if behind else 0)
        cluster._store(rs)
    await cluster.deployment_sync()
    assert (cluster.rs(old_name).spec.replicas, cluster.rs(new_name).spec.replicas) == sizes
