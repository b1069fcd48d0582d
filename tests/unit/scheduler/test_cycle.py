"""The scheduler loop in-process: cache, queue, binds and reports with fakes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from scheduler.config import ProfileConfig
from scheduler.core import Profile
from scheduler.cycle import Reporter, Scheduler
from scheduler.framework import Handle
from scheduler.podinfo import PodInfo
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tinykube.clock import FakeClock
from tinykube.errors import AlreadyExistsError, UnavailableError
from tinykube.informer import Informer
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2


class FakeAPI:
    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.fail: dict[str, Exception] = {}
        self.unschedulable: list[tuple[str, str]] = []
        self.scheduled: list[tuple[str, str]] = []

    async def bind(self, pod: PodInfo, node: str) -> None:
        exc = self.fail.pop(pod.key, None)
        if exc is not None:
            raise exc
        assert pod.key not in self.bound
        self.bound[pod.key] = node

    async def report_unschedulable(self, pod: PodInfo, msg: str) -> None:
        self.unschedulable.append((pod.key, msg))

    async def report_scheduled(self, pod: PodInfo, node: str) -> None:
        self.scheduled.append((pod.key, node))


def make() -> tuple[Scheduler, FakeAPI, FakeClock]:
    api = FakeAPI()
    clock = FakeClock()
    prof = Profile(ProfileConfig(), Handle(bind=api.bind))
    rep = Reporter(api.report_unschedulable, api.report_scheduled)
    return Scheduler(prof, clock=clock, reporter=rep), api, clock


async def run_queue(s: Scheduler) -> None:
    while (qp := s.queue.pop_nowait()) is not None:
        await s.schedule_one(qp)
    await s.drain()


async def test_binds_and_accounts() -> None:
    s, api, _ = make()
    s.on_node_add(NodeBuilder("n1").alloc(cpu="2", memory="4Gi", pods="10").obj())
    for i in range(3):
        s.on_pod_add(PodBuilder(f"p{i}").req(cpu="1").obj())
    await run_queue(s)
    assert sorted(api.bound) == ["default/p0", "default/p1"]
    assert api.unschedulable == [
        (
            "default/p2",
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 "
            "No preemption victims found for incoming pod.",
        )
    ]
    assert s.queue.where("default/p2") == "unschedulable"
    # the informer confirms a bind; deleting that pod frees room and moves p2
    confirmed = PodBuilder("p0").req(cpu="1").node_name("n1").obj()
    s.on_pod_update(confirmed, confirmed)
    assert not s.cache.is_assumed("default/p0")
    s.on_pod_delete(confirmed)
    assert s.queue.where("default/p2") in ("active", "backoff")


async def test_node_added_later_schedules_pending_pod() -> None:
    s, api, clock = make()
    s.on_pod_add(PodBuilder("p").req(cpu="8").obj())
    await run_queue(s)
    assert api.unschedulable[0][1] == "no nodes available to schedule pods"
    s.on_node_add(NodeBuilder("big").alloc(cpu="16", memory="4Gi", pods="10").obj())
    clock.advance(1)
    s.queue.flush()
    await run_queue(s)
    assert api.bound == {"default/p": "big"}
    assert api.scheduled == [("default/p", "big")]


async def test_failed_bind_forgets_and_backs_off() -> None:
    s, api, clock = make()
    s.on_node_add(NodeBuilder("n1").obj())
    api.fail["default/p"] = UnavailableError("apiserver down")
    s.on_pod_add(PodBuilder("p").req(cpu="1").obj())
    await run_queue(s)
    assert not s.cache.pods
    assert s.queue.where("default/p") == "backoff"
    clock.advance(1)
    s.queue.flush()
    await run_queue(s)
    assert api.bound == {"default/p": "n1"}


async def test_already_bound_is_not_retried() -> None:
    s, api, clock = make()
    s.on_node_add(NodeBuilder("n1").obj())
    api.fail["default/p"] = AlreadyExistsError("pod default/p is already assigned to node n2")
    s.on_pod_add(PodBuilder("p").req(cpu="1").obj())
    await run_queue(s)
    assert "default/p" not in s.queue
    assert not s.cache.pods
    clock.advance(20)
    s.queue.flush()
    assert s.queue.pop_nowait() is None


async def test_pod_deleted_while_queued_is_never_bound() -> None:
    s, api, _ = make()
    s.on_node_add(NodeBuilder("n1").obj())
    pod = PodBuilder("p").obj()
    s.on_pod_add(pod)
    s.on_pod_delete(pod)
    await run_queue(s)
    assert api.bound == {}


async def test_other_scheduler_names_and_bound_pods_are_not_queued() -> None:
    s, _, _ = make()
    other = PodBuilder("o").obj()
    other.spec.schedulerName = "default-scheduler"
    s.on_pod_add(other)
    s.on_pod_add(PodBuilder("b").node_name("n1").obj())
    assert s.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    assert "default/b" in s.cache.pods  # counts against n1 (parked until n1 appears)


async def test_parked_pod_counts_when_node_appears() -> None:
    s, api, _ = make()
    s.on_pod_add(PodBuilder("b").node_name("n1").req(cpu="2").obj())
    s.on_node_add(NodeBuilder("n1").alloc(cpu="2", memory="1Gi", pods="10").obj())
    s.on_pod_add(PodBuilder("p").req(cpu="1").obj())
    await run_queue(s)
    assert api.bound == {}


async def test_run_loop_schedules_concurrently_added_pods() -> None:
    s, api, _ = make()
    s.on_node_add(NodeBuilder("n1").obj())
    task = asyncio.create_task(s.run())
    for i in range(5):
        s.on_pod_add(PodBuilder(f"p{i}").obj())
    for _ in range(100):
        await asyncio.sleep(0)
        if len(api.bound) == 5:
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(api.bound) == 5


def test_assumed_pod_expires_after_ttl() -> None:
    clock = FakeClock()
    s = Scheduler(Profile(), clock=clock, assumed_ttl=30)
    s.on_node_add(NodeBuilder("n1").obj())
    info = PodBuilder("p").req(cpu="1").info()
    s.cache.assume(info, "n1")
    s.cache.finish_binding(info.key)
    clock.advance(29)
    assert s.cache.cleanup_expired() == []
    clock.advance(1)
    assert s.cache.cleanup_expired() == ["default/p"]
    assert int(s.cache.nodes.req_cpu[0]) == 0


async def _no_list() -> node_pb2.NodeList:
    return node_pb2.NodeList()


async def _no_watch(rv: str) -> AsyncIterator[node_pb2.NodeWatchEvent]:
    return
    yield


@pytest.mark.parametrize(
    ("resource", "amount"),
    [("pods", "1e30"), ("cpu", "1e64"), ("memory", "99999999999999999999"), ("x.io/gpu", "1e30")],
)
async def test_a_node_past_int64_is_refused_whole_and_scheduling_goes_on(
    resource: str, amount: str
) -> None:
    # Stored before the apiserver refused such values. Before: the cache raised half-way (the
    # node got a slot, no pods allocatable: "1 Too many pods"), then cycles failed with
    # "operands could not be broadcast together".
    s, api, clock = make()
    refused: list[tuple[str, str]] = []
    nodes: Informer[node_pb2.Node] = Informer(
        _no_list,
        _no_watch,
        clock=clock,
        on_handler_error=lambda n, exc: refused.append((n.metadata.name, type(exc).__name__)),
    )
    nodes.add_handler(s.on_node_add, s.on_node_update, s.on_node_delete)

    def event(kind: str, node: node_pb2.Node) -> node_pb2.NodeWatchEvent:
        return node_pb2.NodeWatchEvent(type=kind, object=node)

    huge = NodeBuilder("huge").alloc(cpu="2", memory="4Gi", pods="10").obj()
    huge.status.allocatable[resource] = amount
    nodes.apply(event("ADDED", huge))
    good = NodeBuilder("n1").alloc(cpu="2", memory="4Gi", pods="10").obj()
    nodes.apply(event("ADDED", good))
    worse = NodeBuilder("n1").alloc(cpu="2", memory="4Gi", pods="10").obj()
    worse.status.allocatable[resource] = amount
    worse.metadata.resourceVersion = "2"
    nodes.apply(event("MODIFIED", worse))  # refused: n1 stays as it was
    assert refused == [("huge", "NodeRejectedError"), ("n1", "NodeRejectedError")]
    assert s.cache.node_names() == ["n1"] and nodes.store.keys() == ["n1"]
    assert int(s.cache.nodes.alloc_pods[s.cache.nodes.index["n1"]]) == 10
    for i in range(20):  # grows the table past its first capacity, as real clusters do
        nodes.apply(event("ADDED", NodeBuilder(f"m{i:02}").alloc(cpu="1", pods="1").obj()))
    for i in range(3):
        s.on_pod_add(PodBuilder(f"p{i}").req(cpu="2").obj())
    await run_queue(s)
    assert api.bound == {"default/p0": "n1"}
    assert sorted(set(msg for _, msg in api.unschedulable)) == [
        "0/21 nodes are available: 21 Insufficient cpu. preemption: 0/21 nodes are available: "
        "21 No preemption victims found for incoming pod."
    ]


async def test_extended_resources_count_in_whole_units_so_1ei_is_insufficient() -> None:
    """kube-scheduler counts extended resources in whole units: 1Ei GPUs is a request like any
    other (in thousandths it passed an int64 and the pod was refused as FailedToCache)."""
    s, api, _ = make()
    for name in ("n1", "n2"):
        s.on_node_add(
            NodeBuilder(name)
            .alloc(cpu="4", memory="4Gi", pods="10")
            .alloc_extra("example.com/gpu", "2")
            .obj()
        )
    s.on_pod_add(PodBuilder("huge").req(example_com__gpu="1Ei").obj())
    s.on_pod_add(PodBuilder("two").req(example_com__gpu="2").obj())
    await run_queue(s)
    assert list(api.bound) == ["default/two"]
    assert sorted(set(msg for _, msg in api.unschedulable)) == [
        "0/2 nodes are available: 2 Insufficient example.com/gpu. preemption: 0/2 nodes are "
        "available: 2 No preemption victims found for incoming pod."
    ]


async def _no_pods() -> pod_pb2.PodList:
    return pod_pb2.PodList()


async def _no_pod_watch(rv: str) -> AsyncIterator[pod_pb2.PodWatchEvent]:
    return
    yield


def _bound(name: str, node: str, **requests: str) -> pod_pb2.Pod:
    return PodBuilder(name).node_name(node).req(**requests).obj()


@pytest.mark.parametrize(
    ("label", "first", "second"),
    [
        # a pod stored before the apiserver refused such values
        ("one request past int64", {"cpu": "1e64"}, None),
        ("containers summing past int64", {"memory": "6E"}, None),
        # each fits, but two pods bound by nodeName (no fit filter) add up past int64: numpy
        # wrapped the node's sum negative, and a full node looked empty
        ("two pods' sum past int64", {"memory": "5E"}, {"memory": "5E"}),
        ("two pods' extended sum past int64", {"x.io/gpu": "5E"}, {"x.io/gpu": "5E"}),
    ],
)
async def test_pods_past_int64_are_refused_and_the_node_keeps_its_accounting(
    label: str, first: dict[str, str], second: dict[str, str] | None
) -> None:
    s, api, clock = make()
    s.on_node_add(NodeBuilder("n1").alloc(cpu="4", memory="4Gi", pods="10").obj())
    s.on_node_add(NodeBuilder("n2").alloc(cpu="4", memory="4Gi", pods="10").obj())
    refused: list[tuple[str, str]] = []
    pods: Informer[pod_pb2.Pod] = Informer(
        _no_pods,
        _no_pod_watch,
        clock=clock,
        on_handler_error=lambda p, exc: refused.append((p.metadata.name, type(exc).__name__)),
    )
    pods.add_handler(s.on_pod_add, s.on_pod_update, s.on_pod_delete)
    a = _bound("a", "n1", **first)
    if label == "containers summing past int64":
        a.spec.containers.add().resources.requests["memory"] = "6E"
    pods.apply(pod_pb2.PodWatchEvent(type="ADDED", object=a))
    if second is not None:
        assert refused == []
        pods.apply(pod_pb2.PodWatchEvent(type="ADDED", object=_bound("b", "n1", **second)))
    assert [r[1] for r in refused] == ["PodRejectedError"]
    slot = s.cache.nodes.index["n1"]
    t = s.cache.nodes
    assert int(t.req_cpu[slot]) >= 0 and int(t.req_mem[slot]) >= 0  # nothing wrapped
    assert int(t.free_mem[slot]) == int(t.alloc_mem[slot]) - int(t.req_mem[slot])
    # n1 is as full as what it holds says; a new pod still goes where it fits
    s.on_pod_add(PodBuilder("new").req(cpu="1", memory="1Gi").obj())
    await run_queue(s)
    assert api.bound == {"default/new": "n2" if second is not None else "n1"}


def test_parked_pods_past_int64_together_are_left_out_when_their_node_arrives() -> None:
    # pods bound to a node the scheduler has not seen yet wait for it; when it comes, one that
    # would take a sum past int64 stays out of its columns, and leaving subtracts nothing
    s, _api, _clock = make()
    a = PodInfo.from_pod(_bound("a", "z", memory="5E"))
    b = PodInfo.from_pod(_bound("b", "z", memory="5E"))
    s.cache.add_pod(a)
    s.cache.add_pod(b)
    s.on_node_add(NodeBuilder("z").alloc(cpu="4", memory="4Gi", pods="10").obj())
    t, slot = s.cache.nodes, s.cache.nodes.index["z"]
    assert int(t.req_mem[slot]) == 5 * 10**18
    s.cache.remove_pod("default/b")
    s.cache.remove_pod("default/a")
    assert int(t.req_mem[slot]) == 0 and int(t.req_pods[slot]) == 0


def _with_anti_affinity(b: PodBuilder, **labels: str) -> PodBuilder:
    t = b.pod.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
    t.topologyKey = "kubernetes.io/hostname"
    t.labelSelector.matchLabels.update(labels)
    return b


async def test_assigned_pod_events_move_inter_pod_affinity_rejects() -> None:
    """A pod rejected by InterPodAffinity waits for AssignedPodLabelChange / AssignedPodAdd /
    AssignedPodDelete; the cache re-reads a relabelled assigned pod (its old labels kept it
    out before the fix, and nothing moved the waiting pod)."""
    s, api, clock = make()
    s.on_node_add(NodeBuilder("n1").label("kubernetes.io/hostname", "n1").obj())
    web = PodBuilder("x").labels(app="web").container().node_name("n1").obj()
    s.on_pod_add(web)
    s.on_pod_add(_with_anti_affinity(PodBuilder("p").container(), app="web").obj())
    await run_queue(s)
    assert api.unschedulable[-1] == (
        "default/p",
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules. preemption: "
        "0/1 nodes are available: 1 No preemption victims found for incoming pod.",
    )
    assert s.queue.where("default/p") == "unschedulable"
    clock.advance(2)
    relabelled = PodBuilder("x").labels(app="db").container().node_name("n1").obj()
    s.on_pod_update(web, relabelled)
    assert s.queue.where("default/p") == "active"
    await run_queue(s)
    assert api.bound["default/p"] == "n1"
    # the scheduler's own bind, confirmed: a pod waiting for a web pod next to it moves
    t = PodBuilder("q").container()
    aff = t.pod.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
    aff.topologyKey = "kubernetes.io/hostname"
    aff.labelSelector.matchLabels["app"] = "cache"
    s.on_pod_add(t.obj())
    await run_queue(s)
    assert s.queue.where("default/q") == "unschedulable"
    clock.advance(2)
    s.on_pod_add(PodBuilder("c").labels(app="cache").container().node_name("n1").obj())
    assert s.queue.where("default/q") == "active"


async def test_anti_affinity_reject_waits_for_the_conflicting_pods_deletion() -> None:
    """Queueing hints: a pod rejected by required anti-affinity stays unschedulable when an
    unrelated pod is bound (the confirmation of the scheduler's own bind, an AssignedPodAdd,
    moved it before) and when a matching pod of another namespace goes away; deleting the pod
    it conflicts with moves it."""
    s, api, clock = make()
    s.on_node_add(NodeBuilder("n1").label("kubernetes.io/hostname", "n1").obj())
    web = PodBuilder("web").labels(app="web").container().node_name("n1").obj()
    s.on_pod_add(web)
    s.on_pod_add(_with_anti_affinity(PodBuilder("p").container(), app="web").obj())
    await run_queue(s)
    assert s.queue.where("default/p") == "unschedulable"
    clock.advance(2)
    s.on_pod_add(PodBuilder("db").labels(app="db").container().obj())
    await run_queue(s)
    assert api.bound["default/db"] == "n1"
    s.on_pod_add(PodBuilder("db").labels(app="db").container().node_name("n1").obj())
    assert s.queue.where("default/p") == "unschedulable"
    elsewhere = PodBuilder("web", "other").labels(app="web").container().node_name("n1").obj()
    s.on_pod_add(elsewhere)
    s.on_pod_delete(elsewhere)
    assert s.queue.where("default/p") == "unschedulable"
    s.on_pod_delete(web)
    assert s.queue.where("default/p") == "active"
    await run_queue(s)
    assert api.bound["default/p"] == "n1"


@dataclass
class _Namespace:
    metadata: meta_pb2.ObjectMeta


def _ns(name: str, **labels: str) -> _Namespace:
    return _Namespace(meta_pb2.ObjectMeta(name=name, labels=labels))


async def test_namespace_relabel_moves_a_pod_whose_terms_select_namespaces() -> None:
    """The Namespace informer feeds the cache's labels (namespaceSelector); a relabel that makes
    a namespace selected is a NamespaceLabelChange that moves a pod waiting for a pod in it;
    one that changes nothing the selector reads does not."""
    s, api, clock = make()
    s.on_node_add(NodeBuilder("n1").label("kubernetes.io/hostname", "n1").obj())
    s.on_namespace_add(_ns("cache-ns"))
    s.on_pod_add(PodBuilder("c", "cache-ns").labels(app="cache").container().node_name("n1").obj())
    waiting = PodBuilder("q").container()
    t = waiting.pod.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
    t.topologyKey = "kubernetes.io/hostname"
    t.labelSelector.matchLabels["app"] = "cache"
    t.namespaceSelector.matchLabels["team"] = "cache"
    s.on_pod_add(waiting.obj())
    await run_queue(s)
    assert s.queue.where("default/q") == "unschedulable"
    clock.advance(2)
    s.on_namespace_update(_ns("cache-ns"), _ns("cache-ns", other="x"))
    assert s.queue.where("default/q") == "unschedulable"
    assert s.cache.namespaces["cache-ns"] == {"other": "x"}
    s.on_namespace_update(_ns("cache-ns"), _ns("cache-ns", team="cache"))
    assert s.queue.where("default/q") == "active"
    await run_queue(s)
    assert api.bound["default/q"] == "n1"
    s.on_namespace_delete(_ns("cache-ns"))
    assert "cache-ns" not in s.cache.namespaces


async def test_the_cache_keeps_the_informers_version_of_a_bound_pod() -> None:
    # One decoded pod per pod in the scheduler, not also the pending version it was parsed from
    # (bytes per pod, issue 26).
    s, api, _ = make()
    s.on_node_add(NodeBuilder("n1").alloc(cpu="2", memory="4Gi", pods="10").obj())
    pending = PodBuilder("p").req(cpu="1").obj()
    s.on_pod_add(pending)
    await run_queue(s)
    assert api.bound == {"default/p": "n1"}
    bound = pod_pb2.Pod()
    bound.CopyFrom(pending)
    bound.spec.nodeName = "n1"
    s.on_pod_update(pending, bound)  # the informer confirms the bind
    running = pod_pb2.Pod()
    running.CopyFrom(bound)
    running.status.phase = "Running"
    s.on_pod_update(bound, running)  # the kubelet's status write
    info = s.cache.pods["default/p"].info
    assert info.pod is running
    assert not s.cache.is_assumed("default/p") and info.cpu == 1000
    assert s.cache.pods["default/p"].node == "n1"
