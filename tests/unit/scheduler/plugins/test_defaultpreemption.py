"""DefaultPreemption: candidates, minimal victims, node choice with PodDisruptionBudgets, kube's
PostFilter message tails, and the loop around it."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf import json_format

from scheduler.config import ProfileConfig
from scheduler.core import Profile
from scheduler.cycle import Reporter, Scheduler
from scheduler.framework import Handle, Status
from scheduler.plugins.defaultpreemption import victims
from scheduler.plugins.interpodaffinity import InterPodAffinity, _sized
from scheduler.podinfo import PodInfo
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tinykube.clock import FakeClock
from tinykube.meta import set_timestamp
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2


def running(name: str, node: str, cpu: str, priority: int = 0) -> PodInfo:
    return PodBuilder(name).req(cpu=cpu).node_name(node).priority(priority).info()


def small(name: str) -> NodeBuilder:
    return NodeBuilder(name).alloc(cpu="2", memory="4Gi", pods="10")


def setup(
    *nodes: NodeBuilder, pods: tuple[PodInfo, ...] = (), clock: FakeClock | None = None
) -> Scheduler:
    s = Scheduler(Profile(), clock=clock)
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


# --- the dry run runs every filter (kube's SelectVictimsOnNode) -----------------------------

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def host(name: str, zone: str = "") -> NodeBuilder:
    b = small(name).label(HOST, name)
    return b.label(ZONE, zone) if zone else b


def placed(name: str, node: str, priority: int, cpu: str = "", **labels: str) -> PodBuilder:
    b = PodBuilder(name).node_name(node).priority(priority).labels(**labels)
    return b.req(cpu=cpu) if cpu else b.container()


def anti(b: PodBuilder, key: str, **match: str) -> PodBuilder:
    """A required pod anti-affinity term over `key` against pods labelled `match`."""
    json_format.ParseDict(
        {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": key, "labelSelector": {"matchLabels": match}}
                ]
            }
        },
        b.pod.spec.affinity,
    )
    return b


def spread_zones(b: PodBuilder, **match: str) -> PodBuilder:
    """A DoNotSchedule zone spread constraint, maxSkew 1, over pods labelled `match`."""
    c = b.pod.spec.topologySpreadConstraints.add(
        maxSkew=1, topologyKey=ZONE, whenUnsatisfiable="DoNotSchedule"
    )
    c.labelSelector.matchLabels.update(match)
    return b


def incoming(cpu: str = "") -> PodBuilder:
    return placed("web", "", 10, cpu, app="web")


DryRunCase = tuple[str, list[NodeBuilder], list[PodBuilder], PodBuilder, tuple[str, list[str]]]

DRY_RUN_CASES: list[DryRunCase] = [
    (
        "an existing pod's anti-affinity (node(s) didn't satisfy existing pods anti-affinity "
        "rules) is cleared by evicting that pod; the unrelated lower-priority pod is reprieved",
        [host("a"), host("b")],
        [
            anti(placed("guard-low", "a", 1, app="db"), HOST, app="web"),
            placed("filler", "a", 0),
            anti(placed("guard-high", "b", 100, app="db"), HOST, app="web"),
        ],
        incoming(),
        ("a", ["guard-low"]),
    ),
    (
        "the pod's own anti-affinity (node(s) didn't match pod anti-affinity rules) is cleared "
        "by evicting the lower-priority pod it matches",
        [host("a"), host("b")],
        [
            placed("db-low", "a", 1, app="db"),
            placed("filler", "a", 0),
            placed("db-high", "b", 100, app="db"),
        ],
        anti(incoming(), HOST, app="db"),
        ("a", ["db-low"]),
    ),
    (
        "a zone conflict held by a higher-priority pod on another node: evicting on node a does "
        "not clear it, so a is no candidate though its victim would be the cheapest",
        [host("a", "z1"), host("b", "z1"), host("c", "z2")],
        [
            placed("filler", "a", 0),
            placed("db-high", "b", 100, app="db"),
            placed("db-low", "c", 1, app="db"),
        ],
        anti(incoming(), ZONE, app="db"),
        ("c", ["db-low"]),
    ),
    (
        "topology spread skew (node(s) didn't match pod topology spread constraints) is "
        "cleared by evicting a lower-priority matching pod from the crowded zone",
        [host("a", "z1"), host("b", "z2")],
        [
            placed("web-low", "a", 1, app="web"),
            placed("filler", "a", 0),
            placed("big", "b", 100, "2"),
        ],
        spread_zones(incoming("1"), app="web"),
        ("a", ["web-low"]),
    ),
]


@pytest.mark.parametrize(
    "nodes,pods,pod,want", [c[1:] for c in DRY_RUN_CASES], ids=[c[0] for c in DRY_RUN_CASES]
)
def test_dry_run_runs_every_filter(
    nodes: list[NodeBuilder],
    pods: list[PodBuilder],
    pod: PodBuilder,
    want: tuple[str, list[str]],
) -> None:
    s = setup(*nodes, pods=tuple(p.info() for p in pods))
    assert preempt(s, pod.info()) == want
    fresh = setup(*nodes, pods=tuple(p.info() for p in pods))
    assert snapshot(s) == snapshot(fresh, like=s)


MESSAGE_CASES: list[tuple[str, list[NodeBuilder], list[PodBuilder], PodBuilder, str]] = [
    (
        "evicting the node's own lower-priority pod leaves the zone conflict: the filter's "
        "reason stands for that node",
        [host("a", "z1"), host("b", "z1")],
        [placed("filler", "a", 0), placed("db-high", "b", 100, app="db")],
        anti(incoming(), ZONE, app="db"),
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. preemption: "
        "0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 node(s) "
        "didn't match pod anti-affinity rules.",
    ),
    (
        "the skew comes from a higher-priority pod: evicting the filler does not help",
        [host("a", "z1"), host("b", "z2")],
        [
            placed("web-high", "a", 100, app="web"),
            placed("filler", "a", 0),
            placed("big", "b", 100, "2"),
        ],
        spread_zones(incoming("1"), app="web"),
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology "
        "spread constraints. preemption: 0/2 nodes are available: 1 No preemption victims "
        "found for incoming pod, 1 node(s) didn't match pod topology spread constraints.",
    ),
]


@pytest.mark.parametrize(
    "nodes,pods,pod,want", [c[1:] for c in MESSAGE_CASES], ids=[c[0] for c in MESSAGE_CASES]
)
def test_dry_run_reports_the_filters_that_still_fail(
    nodes: list[NodeBuilder], pods: list[PodBuilder], pod: PodBuilder, want: str
) -> None:
    s = setup(*nodes, pods=tuple(p.info() for p in pods))
    r = s.algorithm.schedule(pod.info())
    assert (r.node, r.nominated_node, r.message) == (None, None, want)


def test_the_cache_is_restored_even_when_a_filter_raises() -> None:
    """The dry run takes pods off the node in the real cache: a filter raising midway (here on
    its second run, the first reprieve) must leave the columns, the pod counts, the placed
    pods' terms and the assumed and nominated pods exactly as a cache that never ran it."""
    nodes, pods, pod, _ = DRY_RUN_CASES[0][1:]

    def build() -> Scheduler:
        s = setup(*nodes, pods=tuple(p.info() for p in pods), clock=FakeClock())
        s.cache.assume(placed("assumed-low", "a", 2, app="db").info(), "a")
        s.cache.finish_binding("default/assumed-low")
        s.cache.nominate(placed("nominee", "", 50).info(), "b")
        return s

    s = build()
    handle = s.profile.handle
    real = handle.filter_node
    assert real is not None
    calls: list[int] = []

    def flaky(p: PodInfo, slot: int) -> Status:
        calls.append(slot)
        if len(calls) == 2:
            raise RuntimeError("filter broke")
        return real(p, slot)

    handle.filter_node = flaky
    with pytest.raises(RuntimeError, match="filter broke"):
        s.algorithm.schedule(pod.info())
    assert snapshot(s) == snapshot(build(), like=s)
    assert s.cache.is_assumed("default/assumed-low")
    assert set(s.cache.nominated) == {"default/nominee"}
    # and the same cache preempts as before once the filter behaves
    handle.filter_node = real
    assert preempt(s, pod.info()) == ("a", ["guard-low"])  # assumed-low was tried, reprieved
    assert snapshot(s) == snapshot(build(), like=s)


class FixedOffset(random.Random):
    def __init__(self, offset: int) -> None:
        super().__init__(0)
        self.fixed = offset

    def randrange(self, *args: Any, **kwargs: Any) -> int:
        return self.fixed


@pytest.mark.parametrize("offset,want", [(0, "a"), (1, "b"), (2, "c")])
def test_equal_candidates_go_to_the_first_from_the_random_offset(offset: int, want: str) -> None:
    """DryRunPreemption starts at GetOffsetAndNumCandidates' random offset; among candidates
    equal on every criterion of pickOneNodeForPreemption the first found wins."""
    s = setup(
        small("a"),
        small("b"),
        small("c"),
        pods=tuple(running(f"x{n}", n, "2", 1) for n in "abc"),
    )
    plugin = s.profile.post_filters[0]
    plugin.rng = FixedOffset(offset)
    assert preempt(s, HI.info()) == (want, [f"x{want}"])


def test_violating_candidates_are_capped_at_the_candidates_wanted() -> None:
    """kube keeps at most numCandidates of each kind: with max_candidates 1, only the first
    violating node found (a, from offset 0) is kept, though c's victim has a lower priority."""
    s = with_budgets(
        setup(
            small("a"),
            small("b"),
            small("c"),
            pods=(
                labelled("xa", "a", "2", 3, "guarded"),
                labelled("xb", "b", "2", 2, "guarded"),
                labelled("xc", "c", "2", 1, "guarded"),
            ),
        ),
        budget("guarded", 0),
    )
    plugin = s.profile.post_filters[0]
    plugin.rng = FixedOffset(0)
    assert preempt(s, HI.info()) == ("c", ["xc"])  # every node is tried: no clean candidate
    plugin.max_candidates = 1
    assert preempt(s, HI.info()) == ("a", ["xa"])


def snapshot(s: Scheduler, like: Scheduler | None = None) -> dict[str, Any]:
    """Everything the filters and the cache's bookkeeping read, comparable across caches.
    With `like`, the selectors and terms `like` tracks are registered here first, so a fresh
    cache is compared on the same counts."""
    cache = s.cache
    nodes = cache.nodes
    n = nodes.n
    index = nodes.pod_index
    ipa = next(p for p in s.profile.plugins if isinstance(p, InterPodAffinity))
    if like is not None:
        for key in like.cache.pod_index._counts:
            index.counts(*key)
        if next(p for p in like.profile.plugins if isinstance(p, InterPodAffinity))._tracked:
            ipa.placed_terms(nodes)
    columns = (
        *("valid", "req_cpu", "req_mem", "req_pods", "nz_cpu", "nz_mem"),
        *("free_cpu", "free_mem", "free_pods", "alloc_cpu", "alloc_mem", "alloc_pods"),
    )
    tracked = ipa._tracked[1] if ipa._tracked is not None else None
    terms: dict[str, Any] = {}
    if tracked is not None:
        for kind in ("required_anti", "required_affinity", "preferred"):
            table = getattr(tracked, kind)
            terms[kind] = {
                t: (_sized(c.count, n).tolist(), _sized(c.weight, n).tolist(), c.total)
                for t, c in table.items()
            }
    return {
        "columns": {c: getattr(nodes, c)[:n].tolist() for c in columns},
        "ext": {k: (c.alloc[:n].tolist(), c.req[:n].tolist()) for k, c in nodes.ext.items()},
        "ports": {
            port: {slot: sorted(map(repr, hps)) for slot, hps in users.items()}
            for port, users in nodes.ports.items()
        },
        "on_slots": [{k: i.uid for k, i in index.slots[slot].items()} for slot in range(n)],
        "counts": {key: arr[:n].tolist() for key, arr in index._counts.items()},
        "terms": terms,
        "pods": {
            k: (st.node, st.assumed, st.binding_finished, st.deadline, st.info.uid)
            for k, st in cache.pods.items()
        },
        "assumed": set(cache.assumed),
        "nominated": {k: (node, i.uid) for k, (node, i) in cache.nominated.items()},
        "by_node": cache.by_node,
        "priorities": cache.priorities,
        "parked": cache.parked,
        "unaccounted": cache.unaccounted,
    }


def test_a_node_needing_no_victim_is_kubes_error() -> None:
    """DryRunPreemption: SelectVictimsOnNode succeeding with no victims is the error "expected
    at least one victim pod on node"; with no candidate at all, PostFilter returns the errors
    (NewAggregate: one as itself, several as a list) instead of the FitError."""
    s = setup(small("a"), small("b"), pods=(running("xa", "a", "1"), running("xb", "b", "1")))
    s.profile.handle.filter_node = lambda pod, slot: Status()  # filters that always pass
    s.profile.handle.filter_names = ()  # and no resource check to short-circuit them
    plugin = s.profile.post_filters[0]
    plugin.rng = FixedOffset(0)
    r = s.algorithm.schedule(PodBuilder("hi").req(cpu="2").priority(10).info())
    assert r.nominated_node is None
    assert r.message == (
        "0/2 nodes are available: 2 Insufficient cpu. preemption: [expected at least one "
        'victim pod on node "a", expected at least one victim pod on node "b"]'
    )
