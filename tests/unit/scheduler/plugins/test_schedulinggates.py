"""SchedulingGates: PreEnqueue keeps a gated pod out of activeQ until its last gate is gone.

Rows follow kube-scheduler's schedulinggates plugin and its scheduling queue (gated pods sit
apart, untouched by cluster events and the unschedulable timeout)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.cache import EventKind
from scheduler.config import ProfileConfig
from scheduler.core import Profile
from scheduler.cycle import Reporter, Scheduler
from scheduler.framework import Code, Handle
from scheduler.plugins.schedulinggates import SchedulingGates
from scheduler.podinfo import PodInfo
from scheduler.queue import SchedulingQueue
from scheduler.service import SchedulerService
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tinykube.cli.explain import render
from tinykube.clock import FakeClock
from tinykube.v1 import pod_pb2, scheduler_pb2


def gated(name: str, *gates: str) -> PodBuilder:
    b = PodBuilder(name).req(cpu="1")
    for g in gates:
        b.pod.spec.schedulingGates.add(name=g)
    return b


def ungate(pod: pod_pb2.Pod, *keep: str) -> pod_pb2.Pod:
    new = pod_pb2.Pod()
    new.CopyFrom(pod)
    del new.spec.schedulingGates[:]
    for g in keep:
        new.spec.schedulingGates.add(name=g)
    return new


PRE_ENQUEUE_CASES = [
    ("pod does not carry scheduling gates", gated("p"), Code.SUCCESS, ()),
    (
        "pod carries scheduling gates (kube's message lists them as Go prints []string)",
        gated("p", "foo", "bar"),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ("waiting for scheduling gates: [foo bar]",),
    ),
]


@pytest.mark.parametrize(
    ("pod", "code", "reasons"),
    [c[1:] for c in PRE_ENQUEUE_CASES],
    ids=[c[0] for c in PRE_ENQUEUE_CASES],
)
def test_pre_enqueue(pod: PodBuilder, code: Code, reasons: tuple[str, ...]) -> None:
    status = SchedulingGates().pre_enqueue(pod.info())
    assert (status.code, status.reasons) == (code, reasons)
    if code != Code.SUCCESS:
        assert status.plugin == "SchedulingGates"


def queue() -> tuple[SchedulingQueue, FakeClock]:
    clock = FakeClock()
    prof = Profile()
    return SchedulingQueue(
        clock, plugin_events=prof.plugins_for_events(), pre_enqueue=prof.pre_enqueue
    ), clock


def test_a_gated_pod_waits_apart_whatever_the_cluster_does() -> None:
    q, clock = queue()
    q.add(gated("g", "wait").info())
    q.add(gated("free").info())
    assert q.where("default/g") == "gated"
    assert q.lengths() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert q.pop_nowait().info.key == "default/free"  # type: ignore[union-attr]
    assert q.pop_nowait() is None
    for event in EventKind:
        q.move_on_event(event)
    clock.advance(600)  # past the unschedulable set's 5-minute limit
    q.flush()
    q.flush()
    assert q.where("default/g") == "gated" and q.pop_nowait() is None


def test_removing_the_last_gate_queues_the_pod_without_backoff() -> None:
    q, clock = queue()
    pod = gated("g", "a", "b").obj()
    q.add(PodInfo.from_pod(pod))
    clock.advance(30)
    q.update(PodInfo.from_pod(ungate(pod, "b")))  # one gate left: still waiting
    assert q.where("default/g") == "gated"
    q.update(PodInfo.from_pod(ungate(pod)))
    assert q.where("default/g") == "active"
    qp = q.pop_nowait()
    assert qp is not None and qp.info.key == "default/g" and qp.attempts == 1
    # the wait for the gates is not counted as scheduling latency
    assert qp.initial == clock.monotonic()


class FakeAPI:
    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.unschedulable: list[tuple[str, str]] = []

    async def bind(self, pod: PodInfo, node: str) -> None:
        self.bound[pod.key] = node

    async def report_unschedulable(self, pod: PodInfo, msg: str) -> None:
        self.unschedulable.append((pod.key, msg))


async def run_queue(s: Scheduler) -> None:
    while (qp := s.queue.pop_nowait()) is not None:
        await s.schedule_one(qp)
    await s.drain()


async def test_gated_pod_reserves_nothing_and_runs_with_what_changed_while_gated() -> None:
    api = FakeAPI()
    s = Scheduler(
        Profile(ProfileConfig(), Handle(bind=api.bind)),
        clock=FakeClock(),
        reporter=Reporter(api.report_unschedulable),
    )
    s.on_node_add(NodeBuilder("n1").alloc(cpu="2", memory="4Gi", pods="10").obj())
    s.on_node_add(
        NodeBuilder("n2").alloc(cpu="2", memory="4Gi", pods="10").labels(disk="ssd").obj()
    )
    pod = gated("g", "example.com/wait").obj()
    s.on_pod_add(pod)
    await run_queue(s)
    # no cycle ran: nothing bound, nothing assumed or reported (the apiserver set the condition)
    assert api.bound == {} and api.unschedulable == []
    assert not s.cache.is_assumed("default/g")
    assert s.algorithm.attempts.get("default/g") is None
    # the apiserver lets a gated pod gain a nodeSelector; the gate then goes
    narrowed = ungate(pod, "example.com/wait")
    narrowed.spec.nodeSelector["disk"] = "ssd"
    s.on_pod_update(pod, narrowed)
    await run_queue(s)
    assert api.bound == {}
    s.on_pod_update(narrowed, ungate(narrowed))
    await run_queue(s)
    assert api.bound == {"default/g": "n2"}


class FakeContext:
    async def abort(self, code: object, message: str) -> None:
        raise AssertionError(f"aborted: {code} {message}")


async def test_explain_and_simulate_show_the_gated_verdict() -> None:
    s = Scheduler(Profile())
    s.on_node_add(NodeBuilder("n1").alloc(cpu="2", memory="4Gi", pods="10").obj())
    pod = gated("g", "example.com/wait").obj()
    s.on_pod_add(pod)
    svc = SchedulerService(lambda: s, lambda: "")
    ctx: Any = FakeContext()
    gate = "waiting for scheduling gates: [example.com/wait]"
    explained = await svc.Explain(scheduler_pb2.ExplainRequest(namespace="default", name="g"), ctx)
    assert (explained.message, explained.selectedNode, list(explained.nodes)) == (gate, "", [])
    assert render(explained) == f"Pod default/g: unschedulable: {gate}\n"
    simulated = await svc.Simulate(scheduler_pb2.SimulateRequest(pod=pod), ctx)
    assert simulated.message == gate and not simulated.nodes
    assert not s.algorithm.attempts  # neither ran a cycle
    simulated = await svc.Simulate(scheduler_pb2.SimulateRequest(pod=ungate(pod)), ctx)
    assert simulated.selectedNode == "n1"
