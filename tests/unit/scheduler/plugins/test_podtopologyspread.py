"""PodTopologySpread: each row names the kube-scheduler v1.36 behaviour it checks (filtering.go,
scoring.go, common.go, plugin.go of framework/plugins/podtopologyspread)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.cache import EventKind, SchedulerCache
from scheduler.core import Algorithm, Profile
from scheduler.cycle import Scheduler
from scheduler.framework import QUEUE, QUEUE_SKIP, ClusterEvent, Code, CycleState, Handle
from scheduler.plugins.podtopologyspread import (
    ERR_CONSTRAINTS,
    ERR_MISSING_LABEL,
    PodTopologySpread,
)
from scheduler.podinfo import PodInfo
from scheduler.workloads import Workloads
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder, make_cache
from tinykube.v1 import replicaset_pb2, service_pb2

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
UNSET: dict[str, str] = {"unset": ""}  # marker: no labelSelector at all


def spread(
    pod: PodBuilder,
    key: str = ZONE,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    match: dict[str, str] | None = None,
    min_domains: int | None = None,
    affinity_policy: str = "",
    taints_policy: str = "",
    match_label_keys: tuple[str, ...] = (),
) -> PodBuilder:
    c = pod.pod.spec.topologySpreadConstraints.add(
        maxSkew=max_skew,
        topologyKey=key,
        whenUnsatisfiable=when,
        nodeAffinityPolicy=affinity_policy,
        nodeTaintsPolicy=taints_policy,
    )
    c.matchLabelKeys.extend(match_label_keys)
    if match is not UNSET:
        c.labelSelector.SetInParent()
        c.labelSelector.matchLabels.update({"app": "web"} if match is None else match)
    if min_domains is not None:
        c.minDomains = min_domains
    return pod


def node(name: str, zone: str | None = None, **labels: str) -> NodeBuilder:
    b = NodeBuilder(name).label(HOST, name)
    if zone is not None:
        b.label(ZONE, zone)
    return b.labels(**labels)


def on(node_name: str, name: str, namespace: str = "default", **labels: str) -> PodInfo:
    b = PodBuilder(name, namespace).node_name(node_name).labels(**(labels or {"app": "web"}))
    return b.container().info()


def web() -> PodBuilder:
    return PodBuilder("incoming").labels(app="web").container()


def algorithm(
    nodes: list[NodeBuilder], pods: tuple[PodInfo, ...], workloads: Workloads | None = None
) -> Algorithm:
    cache = make_cache(*nodes, pods=pods)
    profile = Profile(handle=Handle(cache=cache, workloads=workloads or Workloads()))
    return Algorithm(cache, profile)


def feasible(pod: PodBuilder, nodes: list[NodeBuilder], pods: tuple[PodInfo, ...]) -> list[str]:
    algo = algorithm(nodes, pods)
    algo.schedule(pod.info())
    view = algo.attempts[pod.info().key].view(100)
    verdicts = view.filters["PodTopologySpread"]
    return [nm for nm, v in zip(view.nodes, verdicts, strict=True) if v == ""]


THREE_ZONES = [node("a", "z1"), node("b", "z2"), node("c", "z3")]
Z1_TWO_Z2_ONE = (on("a", "w1"), on("a", "w2"), on("b", "w3"))

FILTER_CASES: list[tuple[str, PodBuilder, list[NodeBuilder], tuple[PodInfo, ...], list[str]]] = [
    (
        "skew = matching pods + 1 (self-match) - global minimum must not exceed maxSkew",
        spread(web()),
        THREE_ZONES,
        Z1_TWO_Z2_ONE,
        ["c"],
    ),
    (
        "a pod its own selector does not match adds no self-match",
        spread(PodBuilder("incoming").labels(app="db").container()),
        THREE_ZONES,
        Z1_TWO_Z2_ONE,
        ["b", "c"],
    ),
    (
        "maxSkew 2 tolerates a domain one pod ahead",
        spread(web(), max_skew=2),
        THREE_ZONES,
        Z1_TWO_Z2_ONE,
        ["b", "c"],
    ),
    (
        "terminating pods are not counted (#87621)",
        spread(web()),
        THREE_ZONES,
        (
            PodBuilder("t1").node_name("a").labels(app="web").terminating().container().info(),
            on("b", "w3"),
            on("c", "w4"),
        ),
        ["a"],
    ),
    (
        "pods of other namespaces are not counted",
        spread(web()),
        THREE_ZONES,
        (on("a", "o1", "other"), on("a", "o2", "other"), on("b", "w3"), on("c", "w4")),
        ["a"],
    ),
    (
        "fewer eligible domains than minDomains: the global minimum is 0",
        spread(web(), min_domains=4),
        THREE_ZONES,
        (on("a", "w1"), on("b", "w2"), on("c", "w3")),
        [],
    ),
    (
        "as many domains as minDomains: the real minimum counts",
        spread(web(), min_domains=3),
        THREE_ZONES,
        (on("a", "w1"), on("b", "w2"), on("c", "w3")),
        ["a", "b", "c"],
    ),
    (
        "nodeAffinityPolicy Honor (default): domains the pod's nodeSelector excludes do not count",
        spread(web()).node_selector(pool="p"),
        [node("a", "z1", pool="p"), node("b", "z2", pool="p"), node("c", "z3")],
        (on("a", "w1"), on("b", "w2")),
        ["a", "b", "c"],
    ),
    (
        "nodeAffinityPolicy Ignore: every domain counts, so z3's zero is the minimum",
        spread(web(), affinity_policy="Ignore").node_selector(pool="p"),
        [node("a", "z1", pool="p"), node("b", "z2", pool="p"), node("c", "z3")],
        (on("a", "w1"), on("b", "w2")),
        ["c"],
    ),
    (
        "nodeTaintsPolicy Ignore (default): a tainted node's domain still counts",
        spread(web()),
        [node("a", "z1"), node("b", "z2"), node("c", "z3").taint("dedicated", "x")],
        (on("a", "w1"), on("b", "w2")),
        ["c"],
    ),
    (
        "nodeTaintsPolicy Honor: an untolerated NoSchedule taint takes the domain out",
        spread(web(), taints_policy="Honor"),
        [node("a", "z1"), node("b", "z2"), node("c", "z3").taint("dedicated", "x")],
        (on("a", "w1"), on("b", "w2")),
        ["a", "b", "c"],
    ),
    (
        "no labelSelector: matches nothing, neither existing pods nor the pod itself",
        spread(web(), match=UNSET),
        THREE_ZONES,
        Z1_TWO_Z2_ONE,
        ["a", "b", "c"],
    ),
    (
        "empty labelSelector: v1.36 counts no existing pod (Selector.Empty short-circuit)",
        spread(web(), match={}),
        THREE_ZONES,
        Z1_TWO_Z2_ONE,
        ["a", "b", "c"],
    ),
    (
        "matchLabelKeys: the pod's values are ANDed into the selector (another revision's pods"
        " do not count)",
        spread(web().labels(rev="2"), match_label_keys=("rev",)),
        THREE_ZONES,
        (on("a", "w1", app="web", rev="1"), on("a", "w2", app="web", rev="1")),
        ["a", "b", "c"],
    ),
    (
        "a node without the key fails; it is not an eligible domain either",
        spread(web()),
        [node("a", "z1"), node("b", "z2"), node("c")],
        (on("a", "w1"), on("c", "w2")),
        ["b"],
    ),
    (
        "domains are the values of nodes carrying every constraint's key",
        spread(spread(web(), key=HOST, max_skew=5), key=ZONE),
        [node("a", "z1"), node("b", "z2"), NodeBuilder("c").label(ZONE, "z3")],
        (on("a", "w1"), on("b", "w2")),
        ["a", "b"],
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "pods", "want"),
    [c[1:] for c in FILTER_CASES],
    ids=[c[0] for c in FILTER_CASES],
)
def test_filter(
    pod: PodBuilder, nodes: list[NodeBuilder], pods: tuple[PodInfo, ...], want: list[str]
) -> None:
    assert feasible(pod, nodes, pods) == want


def test_message_and_resolvability() -> None:
    """kube's two reasons; only the skew one is resolvable by preemption."""
    nodes = [node("a", "z1"), node("b", "z1"), node("c")]
    pods = (on("a", "w1"), on("a", "w2"))
    algo = algorithm(nodes, pods)
    pod = spread(web(), min_domains=2)
    result = algo.schedule(pod.info())
    # The preemption tail shows the resolvability: the node missing the label is not helped.
    assert result.message == (
        f"0/3 nodes are available: 1 {ERR_MISSING_LABEL}, 2 {ERR_CONSTRAINTS}. preemption: 0/3 "
        "nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption "
        "victims found for incoming pod."
    )
    plugin = next(p for p in algo.profile.filters if p.name == "PodTopologySpread")
    state = CycleState()
    assert plugin.pre_filter(state, pod.info(), algo.cache.nodes).ok
    res = plugin.filter(state, pod.info(), algo.cache.nodes)
    assert res.codes.tolist() == [1, 1, 2]
    assert res.code == Code.UNSCHEDULABLE and res.unresolvable_codes == frozenset({2})


def test_pre_filter_skips_pods_without_hard_constraints() -> None:
    algo = algorithm(THREE_ZONES, ())
    plugin = PodTopologySpread(handle=algo.profile.handle)
    for pod in (web(), spread(web(), when="ScheduleAnyway")):
        assert plugin.pre_filter(CycleState(), pod.info(), algo.cache.nodes).code == Code.SKIP


def scores(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    pods: tuple[PodInfo, ...],
    workloads: Workloads | None = None,
) -> list[int] | None:
    """Normalised scores over every node (None: PreScore skipped the plugin)."""
    cache = make_cache(*nodes, pods=pods)
    plugin = PodTopologySpread(handle=Handle(cache=cache, workloads=workloads or Workloads()))
    state = CycleState()
    info = pod.info()
    if plugin.pre_score(state, info, cache.nodes).code == Code.SKIP:
        return None
    idx = np.arange(cache.nodes.n)
    raw = plugin.score(state, info, cache.nodes, idx)
    return [int(x) for x in plugin.normalize(state, info, raw)]


def rs_workloads(selector: dict[str, str] | None = None) -> Workloads:
    w = Workloads()
    rs = replicaset_pb2.ReplicaSet()
    rs.metadata.namespace, rs.metadata.name = "default", "web"
    rs.spec.selector.matchLabels.update(selector or {"app": "web"})
    w.set_replica_set(rs)
    return w


def rs_pod(name: str = "incoming", node_name: str = "") -> PodBuilder:
    b = PodBuilder(name).labels(app="web").container()
    b.pod.metadata.ownerReferences.add(
        apiVersion="apps/v1", kind="ReplicaSet", name="web", controller=True
    )
    return b.node_name(node_name) if node_name else b


SCORE_CASES: list[tuple[str, Any, list[NodeBuilder], tuple[PodInfo, ...], Any, Any]] = [
    (
        "count * log(domains + 2), normalised as 100 * (max + min - s) / max",
        spread(web(), when="ScheduleAnyway"),
        [node("a", "z1"), node("b", "z2")],
        (on("a", "w1"), on("a", "w2")),
        None,
        [0, 100],  # a: round(2 * ln 4) = 3; b: 0
    ),
    (
        "maxSkew - 1 is added, softening the difference",
        spread(web(), when="ScheduleAnyway", max_skew=3),
        [node("a", "z1"), node("b", "z2")],
        (on("a", "w1"), on("a", "w2")),
        None,
        [40, 100],  # a: round(2.77 + 2) = 5; b: 2 -> 100 * (5 + 2 - s) / 5
    ),
    (
        "a scored node missing a key of the pod's own constraints scores 0",
        spread(web(), when="ScheduleAnyway"),
        [node("a", "z1"), node("b", "z2"), node("c")],
        (on("a", "w1"),),
        None,
        [0, 100, 0],
    ),
    (
        "hostname counts the node's own pods; every domain empty scores 100",
        spread(web(), key=HOST, when="ScheduleAnyway"),
        [node("a"), node("b")],
        (),
        None,
        [100, 100],
    ),
    (
        "system defaults: a ReplicaSet's pod spreads by hostname even without zone labels",
        rs_pod(),
        [node("a"), node("b")],
        (rs_pod("w1", "a").info(),),
        rs_workloads(),
        [66, 100],  # a: round(1 * ln 4 + 2) = 3; b: 2
    ),
    (
        "system defaults apply to a pod a Service selects",
        web(),
        [node("a", "z1"), node("b", "z1")],
        (on("a", "w1"), on("a", "w2")),
        "service",
        [72, 100],  # hostname 2 ln 4 + 2 | 2, zone 2 ln 3 + 4 both: round(10.97) = 11 | 8
    ),
    (
        "no owner and no Service selecting the pod: no default constraints (PreScore skips)",
        web(),
        [node("a", "z1"), node("b", "z2")],
        (on("a", "w1"),),
        None,
        None,
    ),
    (
        "the pod's own constraints replace the defaults (here only DoNotSchedule ones)",
        spread(rs_pod()),
        [node("a", "z1"), node("b", "z2")],
        (rs_pod("w1", "a").info(),),
        rs_workloads(),
        None,
    ),
]


def _service_workloads() -> Workloads:
    w = Workloads()
    svc = service_pb2.Service()
    svc.metadata.namespace, svc.metadata.name = "default", "web"
    svc.spec.selector.update({"app": "web"})
    w.set_service(svc)
    return w


@pytest.mark.parametrize(
    ("pod", "nodes", "pods", "workloads", "want"),
    [c[1:] for c in SCORE_CASES],
    ids=[c[0] for c in SCORE_CASES],
)
def test_score(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    pods: tuple[PodInfo, ...],
    workloads: Any,
    want: list[int] | None,
) -> None:
    if workloads == "service":
        workloads = _service_workloads()
    assert scores(pod, nodes, pods, workloads) == want


def test_default_selector_ands_services_and_replica_set() -> None:
    """kube's DefaultSelector: the selecting Services' labels merged, the controller
    ReplicaSet's requirements added; a Service that does not select the pod adds nothing."""
    w = rs_workloads({"app": "web"})
    for name, selector in (("web", {"app": "web"}), ("other", {"app": "db"})):
        svc = service_pb2.Service()
        svc.metadata.namespace, svc.metadata.name = "default", name
        svc.spec.selector.update(selector)
        w.set_service(svc)
    got = w.default_selector(rs_pod().labels(tier="fe").info())
    assert got is not None
    assert str(got) == "app=web,app=web"
    assert w.default_selector(PodBuilder("x", "elsewhere").labels(app="web").info()) is None


def test_assigned_pod_events_and_relabel() -> None:
    """AssignedPodAdd on a pod newly bound; a relabel refreshes the counts and is
    AssignedPodLabelChange (kube's EventsToRegister for this plugin)."""
    sched = Scheduler(Profile())
    seen: list[EventKind] = []

    def record(event: EventKind, old: object = None, new: object = None) -> int:
        seen.append(event)
        return 0

    sched.queue.move_on_event = record  # type: ignore[method-assign]
    sched.on_node_add(node("a", "z1").obj())
    cache: SchedulerCache = sched.cache
    selector_pod = spread(web())
    plugin = PodTopologySpread(handle=sched.profile.handle)
    pod = PodBuilder("w1").node_name("a").labels(app="web").container().obj()
    sched.on_pod_add(pod)
    assert EventKind.POD_ADD in seen
    cons = plugin.constraints(selector_pod.info(), "DoNotSchedule")
    assert cons[0].selector is not None
    counts = cache.pod_index.counts(frozenset({"default"}), cons[0].selector)
    assert int(counts[0]) == 1
    seen.clear()
    relabelled = type(pod)()
    relabelled.CopyFrom(pod)
    relabelled.metadata.labels["app"] = "db"
    sched.on_pod_update(pod, relabelled)
    assert seen == [EventKind.POD_LABEL]
    assert int(cache.pod_index.counts(frozenset({"default"}), cons[0].selector)[0]) == 0
    seen.clear()
    sched.on_pod_update(relabelled, relabelled)
    assert seen == []


# ----- queueing hints: kube v1.36's isSchedulableAfterPodChange / ...NodeChange -----------
def _hint(kind: EventKind, waiting: PodBuilder, old: Any = None, new: Any = None) -> Any:
    plugin = PodTopologySpread(handle=Handle(cache=make_cache(), workloads=Workloads()))
    return plugin.queueing_hints()[kind].fn(waiting.info(), ClusterEvent(kind, old, new))


HINT_POD_CASES: list[tuple[str, EventKind, PodBuilder, PodInfo | None, PodInfo | None, Any]] = [
    (
        "kube: an added pod matching a constraint's selector queues",
        EventKind.POD_ADD,
        spread(web()),
        None,
        on("a", "x"),
        QUEUE,
    ),
    (
        "kube: an added pod matching no selector is skipped",
        EventKind.POD_ADD,
        spread(web()),
        None,
        on("a", "x", app="db"),
        QUEUE_SKIP,
    ),
    (
        "kube: a pod of another namespace is skipped (only the pod's namespace is counted)",
        EventKind.POD_ADD,
        spread(web()),
        None,
        on("a", "x", "other"),
        QUEUE_SKIP,
    ),
    (
        "kube: a deleted matching pod queues",
        EventKind.POD_DELETE,
        spread(web()),
        on("a", "x"),
        None,
        QUEUE,
    ),
    (
        "kube: a deleted pod matching no selector is skipped",
        EventKind.POD_DELETE,
        spread(web()),
        on("a", "x", app="db"),
        None,
        QUEUE_SKIP,
    ),
    (
        "kube: a relabel into a selector queues",
        EventKind.POD_LABEL,
        spread(web()),
        on("a", "x", app="db"),
        on("a", "x"),
        QUEUE,
    ),
    (
        "kube: a relabel out of a selector queues",
        EventKind.POD_LABEL,
        spread(web()),
        on("a", "x"),
        on("a", "x", app="db"),
        QUEUE,
    ),
    (
        "kube: a relabel that keeps every selector's verdict is skipped",
        EventKind.POD_LABEL,
        spread(web()),
        on("a", "x", app="web", v="1"),
        on("a", "x", app="web", v="2"),
        QUEUE_SKIP,
    ),
    (
        "kube: only DoNotSchedule constraints can reject; ScheduleAnyway ones are skipped",
        EventKind.POD_ADD,
        spread(web(), when="ScheduleAnyway"),
        None,
        on("a", "x"),
        QUEUE_SKIP,
    ),
    (
        "kube: a selector merged with matchLabelKeys must match the pod's own value",
        EventKind.POD_ADD,
        spread(web().labels(rev="2"), match_label_keys=("rev",)),
        None,
        on("a", "x", app="web", rev="1"),
        QUEUE_SKIP,
    ),
]


@pytest.mark.parametrize(
    ("kind", "waiting", "old", "new", "want"),
    [c[1:] for c in HINT_POD_CASES],
    ids=[c[0] for c in HINT_POD_CASES],
)
def test_pod_change_hint(
    kind: EventKind, waiting: PodBuilder, old: PodInfo | None, new: PodInfo | None, want: Any
) -> None:
    assert _hint(kind, waiting, old, new) == want


def _n(**labels: str) -> NodeBuilder:
    return NodeBuilder("n").labels(**labels)


Z1 = {"topology.kubernetes.io/zone": "z1"}
Z2 = {"topology.kubernetes.io/zone": "z2"}
HINT_NODE_CASES: list[tuple[str, EventKind, PodBuilder, Any, Any, Any]] = [
    (
        "kube: an added node with every key queues",
        EventKind.NODE_ADD,
        spread(web()),
        None,
        _n(**Z1),
        QUEUE,
    ),
    (
        "kube: an added node lacking a key is skipped",
        EventKind.NODE_ADD,
        spread(web()),
        None,
        _n(),
        QUEUE_SKIP,
    ),
    (
        "kube: a deleted node with every key queues",
        EventKind.NODE_DELETE,
        spread(web()),
        _n(**Z1),
        None,
        QUEUE,
    ),
    (
        "kube: a deleted node lacking a key is skipped",
        EventKind.NODE_DELETE,
        spread(web()),
        _n(),
        None,
        QUEUE_SKIP,
    ),
    (
        "kube: a node gaining the key queues",
        EventKind.NODE_LABEL,
        spread(web()),
        _n(),
        _n(**Z1),
        QUEUE,
    ),
    (
        "kube: a node losing the key queues",
        EventKind.NODE_LABEL,
        spread(web()),
        _n(**Z1),
        _n(),
        QUEUE,
    ),
    (
        "kube: a node changing the key's value queues",
        EventKind.NODE_LABEL,
        spread(web()),
        _n(**Z1),
        _n(**Z2),
        QUEUE,
    ),
    (
        "kube: another label's change is skipped",
        EventKind.NODE_LABEL,
        spread(web()),
        _n(**Z1, x="1"),
        _n(**Z1, x="2"),
        QUEUE_SKIP,
    ),
    (
        "kube: a node without the keys is skipped whatever else changes",
        EventKind.NODE_TAINT,
        spread(web()),
        _n(),
        _n().taint("k"),
        QUEUE_SKIP,
    ),
    (
        "kube: a taint change of a node with every key queues",
        EventKind.NODE_TAINT,
        spread(web()),
        _n(**Z1),
        _n(**Z1).taint("k"),
        QUEUE,
    ),
    (
        "a node entering the pod's node affinity queues (nodeAffinityPolicy Honor decides "
        "whether its domain counts)",
        EventKind.NODE_LABEL,
        spread(web().node_selector(disk="ssd")),
        _n(**Z1),
        _n(**Z1, disk="ssd"),
        QUEUE,
    ),
    (
        "... not under nodeAffinityPolicy Ignore",
        EventKind.NODE_LABEL,
        spread(web().node_selector(disk="ssd"), affinity_policy="Ignore"),
        _n(**Z1),
        _n(**Z1, disk="ssd"),
        QUEUE_SKIP,
    ),
    (
        "kube: a pod without DoNotSchedule constraints is skipped",
        EventKind.NODE_ADD,
        spread(web(), when="ScheduleAnyway"),
        None,
        _n(**Z1),
        QUEUE_SKIP,
    ),
]


@pytest.mark.parametrize(
    ("kind", "waiting", "old", "new", "want"),
    [c[1:] for c in HINT_NODE_CASES],
    ids=[c[0] for c in HINT_NODE_CASES],
)
def test_node_change_hint(
    kind: EventKind,
    waiting: PodBuilder,
    old: NodeBuilder | None,
    new: NodeBuilder | None,
    want: Any,
) -> None:
    objs = [b.obj() if b is not None else None for b in (old, new)]
    assert _hint(kind, waiting, *objs) == want


def test_pod_hints_wait_in_the_pods_namespace_bucket() -> None:
    """Only pods of the pod's own namespace are counted, so the queue asks the hint only about
    changes there (a bind in namespace A never evaluates a spread pod of namespace B)."""
    hint = PodTopologySpread().queueing_hints()[EventKind.POD_ADD]
    assert hint.own_namespace is not None and hint.own_namespace(spread(web()).info())
    assert hint.reaches is None
