"""DefaultPreemption: candidates, minimal victims, node choice, and the loop around it."""

from __future__ import annotations

from scheduler.config import ProfileConfig
from scheduler.core import Profile
from scheduler.cycle import Reporter, Scheduler
from scheduler.framework import Handle
from scheduler.podinfo import PodInfo
from scheduler.preemption import victims
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tinykube.clock import FakeClock


def running(name: str, node: str, cpu: str, priority: int = 0) -> PodInfo:
    return PodBuilder(name).req(cpu=cpu).node_name(node).priority(priority).info()


def small(name: str) -> NodeBuilder:
    return NodeBuilder(name).alloc(cpu="2", memory="4Gi", pods="10")


def setup(*nodes: NodeBuilder, pods: tuple[PodInfo, ...] = ()) -> Scheduler:
    s = Scheduler(Profile())
    for n in nodes:
        s.on_node_add(n.obj())
    for p in pods:
        s.cache.add_pod(p)
    return s


def preempt(s: Scheduler, pod: PodInfo) -> tuple[str | None, list[str]]:
    r = s.algorithm.schedule(pod)
    assert r.node is None
    return r.nominated_node, sorted(v.name for v in victims(r.state))


def test_evicts_the_fewest_lower_priority_pods() -> None:
    s = setup(
        small("a"),
        pods=(
            running("x1", "a", "500m", 1),
            running("x2", "a", "500m", 2),
            running("x3", "a", "1", 3),
        ),
    )
    # needs 1 cpu: removing x3 alone (1 cpu) is enough, but reprieve starts from the highest
    # priority: x3 is kept if x1+x2 suffice, and they do
    assert preempt(s, PodBuilder("hi").req(cpu="1").priority(10).info()) == ("a", ["x1", "x2"])


def test_never_evicts_equal_or_higher_priority() -> None:
    s = setup(small("a"), pods=(running("x", "a", "2", 10),))
    assert preempt(s, PodBuilder("hi").req(cpu="1").priority(10).info()) == (None, [])


def test_unresolvable_nodes_are_not_candidates() -> None:
    s = setup(
        small("a").taint("k", "v").labels(zone="z1"),
        small("b").labels(zone="z2"),
        pods=(running("x", "a", "2"), running("y", "b", "2")),
    )
    pod = (
        PodBuilder("hi").req(cpu="1").priority(5).node_selector(zone="z1").toleration("k", "Exists")
    )
    # a: resolvable (the pod tolerates the taint); b: affinity mismatch, unresolvable
    assert preempt(s, pod.info()) == ("a", ["x"])
    s2 = setup(small("a").taint("k", "v"), pods=(running("x", "a", "2"),))
    assert preempt(s2, PodBuilder("hi").req(cpu="1").priority(5).info()) == (None, [])


def test_prefers_node_with_lowest_priority_victims() -> None:
    s = setup(
        small("a"),
        small("b"),
        pods=(running("xa", "a", "2", 5), running("xb", "b", "2", 1)),
    )
    assert preempt(s, PodBuilder("hi").req(cpu="1").priority(10).info()) == ("b", ["xb"])


def test_host_port_conflict_preempted() -> None:
    holder = PodBuilder("web").node_name("a").host_port(80).info()
    s = setup(small("a"), pods=(holder,))
    assert preempt(s, PodBuilder("hi").host_port(80).priority(1).info()) == ("a", ["web"])


def test_terminating_victims_are_waited_for() -> None:
    pod = PodBuilder("hi").req(cpu="1").priority(10).obj()
    pod.status.nominatedNodeName = "a"
    dying = PodBuilder("x").req(cpu="2").node_name("a").obj()
    dying.metadata.deletionTimestamp.seconds = 1
    s = setup(small("a"), pods=(PodInfo.from_pod(dying),))
    assert preempt(s, PodInfo.from_pod(pod)) == (None, [])


async def test_loop_preempts_then_binds_after_victims_go() -> None:
    bound: dict[str, str] = {}
    preempted: list[tuple[str, str, list[str]]] = []

    async def bind(pod: PodInfo, node: str) -> None:
        bound[pod.key] = node

    async def on_preempt(pod: PodInfo, node: str, vs: list[PodInfo]) -> None:
        preempted.append((pod.name, node, [v.name for v in vs]))

    clock = FakeClock()
    s = Scheduler(
        Profile(ProfileConfig(), Handle(bind=bind)),
        clock=clock,
        reporter=Reporter(preempt=on_preempt),
    )
    s.on_node_add(small("a").obj())
    low = PodBuilder("low").req(cpu="2").node_name("a").obj()
    s.on_pod_add(low)
    s.on_pod_add(PodBuilder("hi").req(cpu="1").priority(100).obj())
    qp = s.queue.pop_nowait()
    assert qp is not None
    await s.schedule_one(qp)
    await s.drain()
    assert preempted == [("hi", "a", ["low"])]
    assert bound == {}
    s.on_pod_delete(low)  # the victim is gone: the pod is retried and fits
    clock.advance(1)
    s.queue.flush()
    qp = s.queue.pop_nowait()
    assert qp is not None
    await s.schedule_one(qp)
    await s.drain()
    assert bound == {"default/hi": "a"}


def test_nominated_room_is_not_taken_by_lower_priority_pod() -> None:
    s = setup(small("a"))
    hi = PodBuilder("hi").req(cpu="2").priority(10).info()
    s.cache.nominate(hi, "a")
    assert s.algorithm.schedule(PodBuilder("low").req(cpu="1").priority(1).info()).node is None
    # an equally important or more important pod is not held back, nor is the nominee itself
    assert s.algorithm.schedule(PodBuilder("peer").req(cpu="1").priority(20).info()).node == "a"
    assert s.algorithm.schedule(hi).node == "a"
    assert int(s.cache.nodes.req_cpu[0]) == 0  # the reservation lasts one cycle only
    s.cache.assume(hi, "a")
    assert not s.cache.nominated


def test_graceful_deletion_of_bound_pod_is_seen_by_preemption() -> None:
    s = setup(small("a"))
    victim = PodBuilder("x").req(cpu="2").node_name("a").obj()
    s.on_pod_add(victim)
    dying = PodBuilder("x").req(cpu="2").node_name("a").obj()
    dying.metadata.deletionTimestamp.seconds = 1
    s.on_pod_update(victim, dying)
    assert s.cache.pods["default/x"].info.terminating
    assert int(s.cache.nodes.req_cpu[0]) == 2000  # still counted until it is gone
    # nothing left to evict: the terminating pod is not a victim
    assert preempt(s, PodBuilder("hi").req(cpu="1").priority(5).info()) == (None, [])
