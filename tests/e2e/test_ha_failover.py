"""A control plane with two apiservers over one etcd, two schedulers and two controller managers
(one of each leading through its Lease), and 20 fake nodes, under load: a ReplicaSet of 50 and
a stream of bare pods. In turn: kill -9 each apiserver, then the active scheduler, then the
active controller manager (each is started again afterwards). Every component was given both
apiservers and fails over between them; the standbys take over within the Lease timings
(15 s / 10 s / 2 s).

Invariants, from a watch (an informer over both apiservers, so it fails over too) and a final
List: no pod created is lost, none is bound twice or moved, the ReplicaSet never has more live
pods than its replicas, and everything converges unaided. The write stall after the apiserver
kills and the two takeover times are printed (run with -s to see them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.e2e.test_workloads import schedulable, sleeper_rs
from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.informer import Informer
from tinykube.launcher import HOST, Component, LocalCluster, has_main
from tinykube.localetcd import free_port
from tinykube.v1 import pod_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

NODES = 20
REPLICAS = 50
RS = "web"
# kube's leader election timings (the components' defaults)
LEASE, RETRY, JITTER = 15.0, 2.0, 1.2
# A standby takes over at most a lease duration after it last saw the leader renew, and it
# sees each renewal within a jittered retry period; a loaded 2-core machine adds a few seconds.
TAKEOVER_LIMIT = LEASE + 2 * RETRY * (1 + JITTER) + 5.0


@dataclass
class Ledger:
    """What the watch saw: every binding of every pod, and the ReplicaSet's live pod count."""

    limit: int = REPLICAS
    binds: collections.Counter[str] = field(default_factory=collections.Counter)
    node_of: dict[str, str] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)
    over: list[tuple[int, int]] = field(default_factory=list)  # (live, limit) when over

    def _bound(self, pod: pod_pb2.Pod) -> None:
        uid = pod.metadata.uid
        self.binds[uid] += 1
        self.node_of[uid] = pod.spec.nodeName

    def _count(self, pod: pod_pb2.Pod, gone: bool = False) -> None:
        if pod.metadata.labels.get("app") != RS:
            return
        if gone or pod.metadata.HasField("deletionTimestamp"):
            self.live.discard(pod.metadata.uid)
        else:
            self.live.add(pod.metadata.uid)
        if len(self.live) > self.limit:
            self.over.append((len(self.live), self.limit))

    def add(self, pod: pod_pb2.Pod) -> None:
        if pod.spec.nodeName:
            self._bound(pod)
        self._count(pod)

    def update(self, old: pod_pb2.Pod, new: pod_pb2.Pod) -> None:
        if not old.spec.nodeName and new.spec.nodeName:
            self._bound(new)
        elif old.spec.nodeName != new.spec.nodeName:
            self.moved.append(f"{new.metadata.name}: {old.spec.nodeName} -> {new.spec.nodeName}")
        self._count(new)

    def delete(self, pod: pod_pb2.Pod) -> None:
        self._count(pod, gone=True)


@dataclass
class Stream:
    """Bare pods created one after another; each create's start and end times."""

    names: list[str] = field(default_factory=list)
    calls: list[tuple[float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    async def run(self, client: Client) -> None:
        while True:
            pod = pod_pb2.Pod()
            pod.metadata.generateName = "bare-"
            pod.metadata.namespace = "default"
            pod.metadata.labels["app"] = "bare"
            pod.spec.containers.add(name="c", image="pause")
            started = time.monotonic()
            try:
                created = await client.pods.create(pod)
            except TinykubeError as exc:
                self.failures.append(f"{type(exc).__name__}: {exc.message}")
            else:
                self.names.append(created.metadata.name)
                self.calls.append((started, time.monotonic()))
            await asyncio.sleep(0.3)

    def stall_after(self, moment: float) -> float:
        """The longest create in flight at `moment` or started after it (seconds)."""
        return max((end - start for start, end in self.calls if end >= moment), default=0.0)


def make_cluster(work_dir: object) -> LocalCluster:
    extra = {
        "kubelet": ["--fake-nodes", str(NODES), "--node-name-prefix", "hollow-"],
        "scheduler-2": ["--identity", "scheduler-2"],
        "controller-2": ["--identity", "controller-2"],
    }
    kwargs: dict[str, object] = {}
    if "apiservers" in inspect.signature(LocalCluster).parameters:
        kwargs["apiservers"] = 2
    else:
        # Until the launcher starts several apiservers itself: a second one with its own ports.
        extra["apiserver-2"] = ["--rest-port", str(free_port(HOST))]
    cl = LocalCluster(
        work_dir,  # type: ignore[arg-type]
        kubelets=("hollow",),
        kubelet_runtime="fake",
        schedulers=2,
        controllers=2,
        extra_args=extra,
        **kwargs,  # type: ignore[arg-type]
    )
    if "apiserver-2" not in cl.components:
        cl.components["apiserver-2"] = Component("apiserver-2", "apiserver", free_port(HOST))
    return cl


@pytest.fixture(scope="module")
async def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    if not (has_main("scheduler") and has_main("controller")):
        pytest.skip("needs the scheduler and the controller manager")
    cl = make_cluster(tmp_path_factory.mktemp("ha"))
    await asyncio.to_thread(cl.start)
    try:
        yield cl
    finally:
        await asyncio.to_thread(cl.stop)


def apiservers(cl: LocalCluster) -> list[str]:
    return [c.address for c in cl.components.values() if c.module == "apiserver"]


async def holder(client: Client, lease: str) -> str:
    return (await client.leases.get(lease, "kube-system")).spec.holderIdentity


def component_of(identity: str, module: str) -> str:
    """The component holding a Lease: the second instance has its name as identity."""
    return f"{module}-2" if identity == f"{module}-2" else module


@dataclass
class Killed:
    victim: str
    leader: str
    at: float


async def kill_leader(cl: LocalCluster, client: Client, lease: str, module: str) -> Killed:
    """Kill -9 the component holding `lease`."""
    leader = await eventually(lambda: holder(client, lease), what=f"a {module} leader")
    victim = component_of(leader, module)
    at = time.monotonic()
    await asyncio.to_thread(cl.kill, victim)
    return Killed(victim, leader, at)


async def taken_over(cl: LocalCluster, client: Client, lease: str, killed: Killed) -> float:
    """The seconds from the kill until another holds `lease`; then the victim starts again."""

    async def new_leader() -> bool:
        now = await holder(client, lease)
        return bool(now) and now != killed.leader

    await eventually(new_leader, limit=TAKEOVER_LIMIT + 10, what=f"a standby for {lease}")
    took = time.monotonic() - killed.at
    await asyncio.to_thread(cl.start_component, killed.victim)  # back, as a standby
    return took


async def converged(client: Client, stream: Stream, replicas: int) -> bool:
    pods = (await client.pods.list("default")).items
    by_name = {p.metadata.name: p for p in pods}
    bare_ok = all(
        n in by_name and by_name[n].spec.nodeName and by_name[n].status.phase == "Running"
        for n in list(stream.names)
    )
    web = [
        p
        for p in pods
        if p.metadata.labels.get("app") == RS and not p.metadata.HasField("deletionTimestamp")
    ]
    web_ok = len(web) == replicas and all(
        p.spec.nodeName and p.status.phase == "Running" for p in web
    )
    return bare_ok and web_ok


async def test_losing_an_apiserver_and_each_leader_loses_no_pod_and_binds_none_twice(
    ha_cluster: LocalCluster,
) -> None:
    cl = ha_cluster
    targets = apiservers(cl)
    assert len(targets) == 2
    async with Client(targets) as client, Client(targets) as writer:

        async def nodes_ready() -> bool:
            nodes = (await client.nodes.list()).items
            return sum(schedulable(n) for n in nodes) == NODES

        await eventually(nodes_ready, limit=120, what=f"{NODES} Ready fake nodes")
        ledger = Ledger()
        informer: Informer[pod_pb2.Pod] = Informer.for_resource(client.pods, namespace="default")
        informer.add_handler(ledger.add, ledger.update, ledger.delete)
        watching = informer.start()
        stream = Stream()
        streaming: asyncio.Task[None] | None = None
        try:
            await informer.wait_synced()
            await writer.replica_sets.create(sleeper_rs(RS, REPLICAS, "1000"))
            streaming = asyncio.create_task(stream.run(writer))
            await eventually(
                lambda: converged(client, stream, REPLICAS), limit=120, what="50 Running"
            )

            # 1. Each apiserver dies in turn and comes back: every client started at a random
            # one, so each component loses the one it uses in one of the two.
            stalls: dict[str, float] = {}
            for name in [c.name for c in cl.components.values() if c.module == "apiserver"]:
                if writer.current_target == cl.address(name):
                    name = f"{name} (the writer's)"
                killed_at = time.monotonic()
                await asyncio.to_thread(cl.kill, name.split()[0])

                async def moved_on(since: float = killed_at) -> bool:
                    # Pods created since the kill, bound and Running: everyone failed over.
                    after = sum(1 for _, end in stream.calls if end > since)
                    return after >= 5 and await converged(client, stream, REPLICAS)

                await eventually(moved_on, limit=90, what=f"convergence without {name}")
                stalls[name] = stream.stall_after(killed_at)
                await asyncio.to_thread(cl.start_component, name.split()[0])

            # 2. The active scheduler dies; pods keep coming and must still be bound.
            lease = "tinykube-scheduler"
            killed = await kill_leader(cl, client, lease, "scheduler")
            scheduler_took = await taken_over(cl, client, lease, killed)
            await eventually(
                lambda: converged(client, stream, REPLICAS),
                limit=90,
                what="convergence under the second scheduler",
            )

            # 3. The active controller manager dies; the ReplicaSet grows and loses 5 pods
            # meanwhile, and the new leader must bring it to its count, never above.
            lease = "tinykube-controller-manager"
            killed = await kill_leader(cl, client, lease, "controller")
            ledger.limit = REPLICAS + 10
            rs = await writer.replica_sets.get(RS, "default")
            rs.spec.replicas = REPLICAS + 10
            await writer.replica_sets.update(rs)
            web = [p for p in informer.store.list() if p.metadata.labels.get("app") == RS]
            for pod in web[:5]:
                await writer.pods.delete(pod.metadata.name, "default", uid=pod.metadata.uid)
            controller_took = await taken_over(cl, client, lease, killed)
            await eventually(
                lambda: converged(client, stream, REPLICAS + 10),
                limit=90,
                what="convergence under the second controller manager",
            )
        finally:
            if streaming is not None:
                streaming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await streaming
        await eventually(
            lambda: converged(client, stream, REPLICAS + 10), limit=60, what="final convergence"
        )
        final = {p.metadata.uid: p for p in (await client.pods.list("default")).items}

        async def watched_every_binding() -> bool:
            return all(ledger.node_of.get(uid) for uid, p in final.items() if p.spec.nodeName)

        await eventually(watched_every_binding, limit=20, what="the watch to see every binding")
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching

    print(
        "\nlongest create after each apiserver kill: "
        + ", ".join(f"{name} {took:.2f}s" for name, took in stalls.items())
        + f"; the standby scheduler took over in {scheduler_took:.1f}s, the standby "
        f"controller manager in {controller_took:.1f}s; {len(stream.names)} bare pods created, "
        f"the writer failed over {writer.failovers} times"
    )
    assert stream.failures == []  # not one create failed across the kills
    names = {p.metadata.name for p in final.values()}
    assert set(stream.names) <= names  # 0 pods lost
    assert {uid: n for uid, n in ledger.binds.items() if n != 1} == {}  # 0 bound twice
    assert ledger.moved == []
    assert all(p.spec.nodeName == ledger.node_of[uid] for uid, p in final.items())
    assert ledger.over == []  # the ReplicaSet never over its count
    assert scheduler_took <= TAKEOVER_LIMIT
    assert controller_took <= TAKEOVER_LIMIT
