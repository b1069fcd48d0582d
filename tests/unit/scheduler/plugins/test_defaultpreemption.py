"""DefaultPreemption: candidates, minimal victims, node choice with PodDisruptionBudgets, kube's
PostFilter message tails, and the loop around it."""

from __future__ import annotations

from scheduler.config import ProfileConfig
from scheduler.core import Profile
from scheduler.cycle import Reporter, Scheduler
from scheduler.framework import Handle
from scheduler.plugins.defaultpreemption import victims
from scheduler.podinfo import PodInfo
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tinykube.clock import FakeClock
from tinykube.meta import set_timestamp
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2


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
    dying.status.conditions.add(
        type="DisruptionTarget", status="True", reason="PreemptionByScheduler"
    )
    s = setup(small("a"), pods=(PodInfo.from_pod(dying),))
    assert preempt(s, PodInfo.from_pod(pod)) == (None, [])
    assert s.algorithm.schedule(PodInfo.from_pod(pod)).message == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to a "
        "terminating pod on the nominated node."
    )


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


# --- PodDisruptionBudgets ------------------------------------------------------------------


class Budgets:
    """The scheduler's PDB informer store, as preemption reads it."""

    def __init__(self, *pdbs: pdb_pb2.PodDisruptionBudget) -> None:
        self.pdbs = list(pdbs)

    def list(self) -> list[pdb_pb2.PodDisruptionBudget]:
        return self.pdbs


def budget(app: str, allowed: int, *disrupted: str) -> pdb_pb2.PodDisruptionBudget:
    pdb = pdb_pb2.PodDisruptionBudget()
    pdb.metadata.name, pdb.metadata.namespace = app, "default"
    pdb.spec.selector.matchLabels["app"] = app
    pdb.status.disruptionsAllowed = allowed
    for name in disrupted:
        set_timestamp(pdb.status.disruptedPods[name], FakeClock().now())
    return pdb


def labelled(name: str, node: str, cpu: str, priority: int, app: str) -> PodInfo:
    return PodBuilder(name).req(cpu=cpu).node_name(node).priority(priority).labels(app=app).info()


def with_budgets(s: Scheduler, *pdbs: pdb_pb2.PodDisruptionBudget) -> Scheduler:
    s.profile.handle.pdbs = Budgets(*pdbs)
    return s


def two_nodes() -> Scheduler:
    # Without budgets node a wins: its victim has the lower priority.
    return setup(
        small("a"),
        small("b"),
        pods=(labelled("xa", "a", "2", 1, "guarded"), labelled("xb", "b", "2", 2, "free")),
    )


HI = PodBuilder("hi").req(cpu="1").priority(10)


def test_without_budgets_the_lowest_priority_victim_goes() -> None:
    assert preempt(two_nodes(), HI.info()) == ("a", ["xa"])


def test_a_node_whose_victim_would_break_a_budget_loses_to_one_that_breaks_none() -> None:
    # pickOneNodeForPreemption: the fewest PDB violations comes before every priority rule
    s = with_budgets(two_nodes(), budget("guarded", 0))
    assert preempt(s, HI.info()) == ("b", ["xb"])


def test_a_budget_with_disruptions_left_is_no_violation() -> None:
    s = with_budgets(two_nodes(), budget("guarded", 1))
    assert preempt(s, HI.info()) == ("a", ["xa"])


def test_a_victim_the_budget_already_let_go_is_no_violation() -> None:
    # kube: a pod in disruptedPods was processed by the eviction API; it spends nothing more
    s = with_budgets(two_nodes(), budget("guarded", 0, "xa"))
    assert preempt(s, HI.info()) == ("a", ["xa"])


def test_violating_victims_are_reprieved_first() -> None:
    # Either pod alone makes room. By priority the higher one (v1) would be reprieved and v2
    # evicted; v2 is guarded, so kube tries to keep it first and evicts v1 instead.
    pods = (labelled("v1", "a", "1", 5, "free"), labelled("v2", "a", "1", 1, "guarded"))
    assert preempt(setup(small("a"), pods=pods), HI.info()) == ("a", ["v2"])
    s = with_budgets(setup(small("a"), pods=pods), budget("guarded", 0))
    assert preempt(s, HI.info()) == ("a", ["v1"])


def test_a_budget_is_spent_across_the_victims_of_a_node() -> None:
    # One disruption allowed, two guarded victims needed: the node still preempts (a violation
    # is a preference, not a veto), and a node with no violation would have won.
    pods = (labelled("g1", "a", "1", 1, "guarded"), labelled("g2", "a", "1", 1, "guarded"))
    s = with_budgets(setup(small("a"), pods=pods), budget("guarded", 1))
    assert preempt(s, PodBuilder("hi").req(cpu="2").priority(10).info()) == ("a", ["g1", "g2"])


def test_equal_candidates_go_to_the_latest_started_victims() -> None:
    s = setup(
        small("a"),
        small("b"),
        pods=(
            PodBuilder("old").req(cpu="2").node_name("a").priority(1).created(100).info(),
            PodBuilder("new").req(cpu="2").node_name("b").priority(1).created(200).info(),
        ),
    )
    assert preempt(s, HI.info()) == ("b", ["new"])


# --- FailedScheduling tails (kube v1.36's PostFilter messages) ------------------------------


def message(s: Scheduler, pod: PodBuilder) -> str:
    r = s.algorithm.schedule(pod.info())
    assert r.node is None and r.nominated_node is None
    return r.message


def test_message_tails() -> None:
    full = setup(small("a"), small("b"), small("c"), pods=tuple(
        running(f"x{n}", n, "2", 10) for n in "abc"
    ))  # fmt: skip
    assert message(full, PodBuilder("p").req(cpu="1").priority(10)) == (
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No "
        "preemption victims found for incoming pod."
    )
    never = PodBuilder("p").req(cpu="1").priority(100)
    never_pod = never.obj()
    never_pod.spec.preemptionPolicy = "Never"
    r = full.algorithm.schedule(PodInfo.from_pod(never_pod))
    assert r.message == (
        "0/3 nodes are available: 3 Insufficient cpu. preemption: not eligible due to "
        "preemptionPolicy=Never."
    )
    # Nodes failing for a reason removing pods cannot fix: preemption is not helpful there.
    mixed = setup(
        small("a"),
        small("b").taint("k", "v"),
        small("c").unschedulable(),
        pods=(running("lo", "a", "1", 0), running("hi", "a", "1", 50)),
    )
    # On a, evicting the only lower-priority pod is not enough: the filters' reason stands.
    assert message(mixed, PodBuilder("p").req(cpu="2").priority(10)) == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k: v}, "
        "1 node(s) were unschedulable. preemption: 0/3 nodes are available: 1 Insufficient "
        "cpu, 2 Preemption is not helpful for scheduling."
    )
    # Unresolvable everywhere: preemption helps nowhere.
    assert message(mixed, PodBuilder("p").node_selector(zone="nowhere").priority(10)).endswith(
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )


def test_successful_preemption_has_no_tail() -> None:
    s = setup(small("a"), pods=(running("x", "a", "2"),))
    r = s.algorithm.schedule(HI.info())
    assert r.nominated_node == "a"
    assert "preemption" not in r.message
