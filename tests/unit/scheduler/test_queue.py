"""The scheduling queue's ordering, backoff, event-driven moves and queueing hints, on a fake
clock."""

from __future__ import annotations

import pytest

from scheduler.cache import EventKind
from scheduler.framework import QUEUE, QUEUE_SKIP, ClusterEvent, EventHint, QueueingHint
from scheduler.plugins.nodeaffinity import NodeAffinity
from scheduler.plugins.noderesourcesfit import NodeResourcesFit
from scheduler.plugins.tainttoleration import TaintToleration
from scheduler.podinfo import PodInfo
from scheduler.queue import SchedulingQueue
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder
from tinykube.clock import FakeClock

EVENTS = {p.name: p.events for p in (NodeResourcesFit, TaintToleration, NodeAffinity)}


def make() -> tuple[SchedulingQueue, FakeClock]:
    clock = FakeClock()
    return SchedulingQueue(clock, plugin_events=EVENTS), clock


def pop_key(q: SchedulingQueue) -> str | None:
    qp = q.pop_nowait()
    return qp.info.key if qp else None


def test_priority_then_age() -> None:
    q, _ = make()
    q.add(PodBuilder("old-low").created(1).info())
    q.add(PodBuilder("new-high").priority(10).created(5).info())
    q.add(PodBuilder("older-low").created(0).info())
    assert [pop_key(q) for _ in range(4)] == [
        "default/new-high",
        "default/older-low",
        "default/old-low",
        None,
    ]


@pytest.mark.parametrize(
    ("attempts", "seconds"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)]
)
def test_backoff_doubles_to_ten_seconds(attempts: int, seconds: float) -> None:
    q, _ = make()
    assert q.backoff_duration(attempts) == seconds


def test_error_goes_to_backoff_and_returns_after_it() -> None:
    q, clock = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.add_backoff(qp)
    assert q.where("default/a") == "backoff"
    clock.advance(0.9)
    q.flush()
    assert pop_key(q) is None
    clock.advance(0.1)
    q.flush()
    qp = q.pop_nowait()
    assert qp is not None and qp.attempts == 2
    q.add_backoff(qp)
    clock.advance(1.9)
    q.flush()
    assert pop_key(q) is None
    clock.advance(0.1)
    q.flush()
    assert pop_key(q) == "default/a"


def test_unschedulable_moves_only_on_registered_event() -> None:
    q, clock = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.add_unschedulable(qp, frozenset({"NodeResourcesFit"}))
    assert q.where("default/a") == "unschedulable"
    q.move_on_event(EventKind.NODE_LABEL)  # NodeResourcesFit does not care about labels
    assert q.where("default/a") == "unschedulable"
    clock.advance(60)
    q.flush()
    assert q.where("default/a") == "unschedulable"
    q.move_on_event(EventKind.POD_DELETE)
    # backoff (1 s from the failure) is over: straight to activeQ
    assert q.where("default/a") == "active"


def test_moved_pod_still_backing_off_goes_to_backoff() -> None:
    q, clock = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.add_unschedulable(qp, frozenset({"TaintToleration"}))
    clock.advance(0.5)
    q.move_on_event(EventKind.NODE_ADD)
    assert q.where("default/a") == "backoff"
    clock.advance(0.5)
    q.flush()
    assert q.where("default/a") == "active"


def test_unschedulable_leftover_after_five_minutes() -> None:
    q, clock = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.add_unschedulable(qp, frozenset({"NodeAffinity"}))
    clock.advance(299)
    q.flush()
    assert q.where("default/a") == "unschedulable"
    clock.advance(1)
    q.flush()
    assert q.where("default/a") == "active"


def test_event_during_cycle_sends_pod_to_backoff() -> None:
    q, _ = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.move_on_event(EventKind.NODE_ADD)  # arrives while the pod is being scheduled
    q.add_unschedulable(qp, frozenset({"NodeResourcesFit"}))
    assert q.where("default/a") == "backoff"


EVENT_DURING_CYCLE = [
    # kube-scheduler with queueing hints: only an event a rejecting plugin registered for sends
    # a pod that failed while it happened to backoffQ
    ("bind confirmed, pod lacked cpu", EventKind.POD_ADD, "unschedulable"),
    ("pod deleted, pod lacked cpu", EventKind.POD_DELETE, "backoff"),
]


@pytest.mark.parametrize(
    ("event", "where"), [c[1:] for c in EVENT_DURING_CYCLE], ids=[c[0] for c in EVENT_DURING_CYCLE]
)
def test_only_relevant_events_during_cycle_count(event: EventKind, where: str) -> None:
    q, _ = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.move_on_event(event)
    q.add_unschedulable(qp, frozenset({"NodeResourcesFit"}))
    assert q.where("default/a") == where


def test_event_moves_only_the_pods_waiting_for_it() -> None:
    q, clock = make()
    for name in ("fit", "taint"):
        q.add(PodBuilder(name).info())
    fit, taint = q.pop_nowait(), q.pop_nowait()
    assert fit is not None and taint is not None
    q.add_unschedulable(fit, frozenset({"NodeResourcesFit"}))
    q.add_unschedulable(taint, frozenset({"TaintToleration"}))
    clock.advance(2)
    assert q.move_on_event(EventKind.NODE_TAINT) == 1
    assert (q.where("default/fit"), q.where("default/taint")) == ("unschedulable", "active")
    assert q.move_on_event(EventKind.NODE_TAINT) == 0  # it left every bucket when it moved


def test_delete_while_queued_and_in_flight() -> None:
    q, _ = make()
    q.add(PodBuilder("a").info())
    q.add(PodBuilder("b").info())
    q.delete("default/a")
    assert pop_key(q) == "default/b"
    assert pop_key(q) is None
    q.add(PodBuilder("c").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.delete("default/c")
    q.add_unschedulable(qp, frozenset())
    assert "default/c" not in q
    assert q.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}


def test_update_of_unschedulable_pod_moves_it() -> None:
    q, clock = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.add_unschedulable(qp, frozenset({"NodeAffinity"}))
    clock.advance(2)
    q.update(PodBuilder("a").toleration(operator="Exists").info())
    assert q.where("default/a") == "active"


def test_empty_plugin_set_moves_on_any_event() -> None:
    q, clock = make()
    q.add(PodBuilder("a").info())
    qp = q.pop_nowait()
    assert qp is not None
    q.add_unschedulable(qp, frozenset())
    clock.advance(2)
    q.move_on_event(EventKind.NODE_IMAGES)
    assert q.where("default/a") == "active"


async def test_pop_waits_for_add() -> None:
    import asyncio

    q, _ = make()
    task = asyncio.create_task(q.pop())
    await asyncio.sleep(0)
    assert not task.done()
    q.add(PodBuilder("a").info())
    qp = await asyncio.wait_for(task, 1)
    assert qp.info.key == "default/a"


# ----- queueing hints (kube's QueueingHintFn and isPodWorthRequeuing) ---------------------
class Hints:
    """Two fake plugins: "Hinted" registers AssignedPodAdd and NodeLabelChange with hints that
    answer from `answers` (by the changed object's name) and record whom they were asked for;
    "Plain" registers AssignedPodAdd without a hint."""

    def __init__(
        self,
        *,
        own_namespace: bool = True,
        reach: bool = False,
        reaches: frozenset[str] | None = None,
        never: bool = False,
    ):
        self.asked: list[tuple[str, str]] = []  # (waiting pod, changed object)
        self.answers: dict[str, QueueingHint | Exception] = {}

        def fn(pod: PodInfo, event: ClusterEvent) -> QueueingHint:
            obj = event.new if event.new is not None else event.old
            name = obj.name if isinstance(obj, PodInfo) else obj.metadata.name
            self.asked.append((pod.key, name))
            answer = self.answers.get(name, QUEUE_SKIP)
            if isinstance(answer, Exception):
                raise answer
            return answer

        pod_hint = EventHint(
            fn,
            (lambda pod: True) if own_namespace else None,
            (lambda event: reaches) if reach else None,
            (lambda pod: True) if never else None,
        )
        self.plugin_events = {
            "Hinted": frozenset({EventKind.POD_ADD, EventKind.NODE_LABEL}),
            "Plain": frozenset({EventKind.POD_ADD}),
        }
        self.plugin_hints = {
            "Hinted": {EventKind.POD_ADD: pod_hint, EventKind.NODE_LABEL: pod_hint}
        }

    def queue(self) -> tuple[SchedulingQueue, FakeClock]:
        clock = FakeClock()
        q = SchedulingQueue(clock, plugin_events=self.plugin_events, plugin_hints=self.plugin_hints)
        return q, clock

    @staticmethod
    def reject(q: SchedulingQueue, name: str, ns: str, *plugins: str) -> None:
        q.add(PodBuilder(name, ns).info())
        qp = q.pop_nowait()
        assert qp is not None
        q.add_unschedulable(qp, frozenset(plugins))


def _bound(name: str, ns: str = "default") -> PodInfo:
    return PodBuilder(name, ns).node_name("n1").info()


HINT_CASES = [
    # (name, plugins that rejected the pod, hint's answer, event objects given, where after)
    ("kube: QueueSkip keeps the pod unschedulable", ("Hinted",), QUEUE_SKIP, True, "unschedulable"),
    ("kube: Queue moves the pod", ("Hinted",), QUEUE, True, "active"),
    ("kube: a hint's error counts as Queue", ("Hinted",), RuntimeError("x"), True, "active"),
    (
        "kube: a registered plugin without a hint queues whatever the others say",
        ("Hinted", "Plain"),
        QUEUE_SKIP,
        True,
        "active",
    ),
    (
        "an event that carries no objects queues as if unhinted",
        ("Hinted",),
        QUEUE_SKIP,
        False,
        "active",
    ),
]


@pytest.mark.parametrize(
    ("plugins", "answer", "objects", "where"),
    [c[1:] for c in HINT_CASES],
    ids=[c[0] for c in HINT_CASES],
)
def test_hints_decide_whether_an_event_moves_a_pod(
    plugins: tuple[str, ...], answer: QueueingHint | Exception, objects: bool, where: str
) -> None:
    h = Hints()
    q, clock = h.queue()
    Hints.reject(q, "a", "default", *plugins)
    clock.advance(2)
    h.answers["x"] = answer
    q.move_on_event(EventKind.POD_ADD, new=_bound("x") if objects else None)
    assert q.where("default/a") == where


def test_hints_are_asked_only_of_pods_in_the_changed_pods_namespace() -> None:
    """A bind in namespace A does not evaluate the waiting pods of namespace B when the hint
    says only its own namespace matters; a node event asks every hinted pod."""
    h = Hints()
    q, _ = h.queue()
    Hints.reject(q, "a", "ns-a", "Hinted")
    Hints.reject(q, "b", "ns-b", "Hinted")
    q.move_on_event(EventKind.POD_ADD, new=_bound("x", "ns-a"))
    assert h.asked == [("ns-a/a", "x")]
    h.asked.clear()
    q.move_on_event(EventKind.NODE_LABEL, old=NodeBuilder("n1").obj(), new=NodeBuilder("n1").obj())
    assert sorted(h.asked) == [("ns-a/a", "n1"), ("ns-b/b", "n1")]


def test_hints_of_pods_looking_beyond_their_namespace_are_always_asked() -> None:
    h = Hints(own_namespace=False)
    q, _ = h.queue()
    Hints.reject(q, "b", "ns-b", "Hinted")
    q.move_on_event(EventKind.POD_ADD, new=_bound("x", "ns-a"))
    assert h.asked == [("ns-b/b", "x")]


@pytest.mark.parametrize(
    ("reaches", "asked"),
    [({"ns-b"}, ["ns-b/b"]), (None, ["ns-b/b", "ns-c/c"])],
    ids=["named namespaces", "every namespace"],
)
def test_an_event_reaches_the_namespaces_its_hints_name(
    reaches: set[str] | None, asked: list[str]
) -> None:
    h = Hints(reach=True, reaches=frozenset(reaches) if reaches is not None else None)
    q, _ = h.queue()
    Hints.reject(q, "b", "ns-b", "Hinted")
    Hints.reject(q, "c", "ns-c", "Hinted")
    q.move_on_event(EventKind.POD_ADD, new=_bound("x", "ns-a"))
    assert sorted(k for k, _ in h.asked) == asked


def test_no_hint_runs_without_hinted_waiting_pods() -> None:
    """No per-event work when no waiting pod was rejected by a hinted plugin."""
    h = Hints()
    q, clock = h.queue()
    Hints.reject(q, "plain", "default", "Plain")
    clock.advance(2)
    assert q.move_on_event(EventKind.POD_ADD, new=_bound("x")) == 1
    for i in range(3):
        q.move_on_event(EventKind.POD_ADD, new=_bound(f"y{i}"))
    assert h.asked == []


def test_a_hinted_pod_leaves_its_bucket_when_it_moves() -> None:
    h = Hints()
    q, clock = h.queue()
    Hints.reject(q, "a", "default", "Hinted")
    clock.advance(2)
    h.answers["x"] = QUEUE
    assert q.move_on_event(EventKind.POD_ADD, new=_bound("x")) == 1
    h.asked.clear()
    assert q.move_on_event(EventKind.POD_ADD, new=_bound("x")) == 0
    assert h.asked == []
    q.delete("default/a")
    assert q.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}


def test_a_pod_no_event_of_a_kind_can_help_is_not_asked() -> None:
    """EventHint.never: the pod stays out of that event's bucket (not asked, not moved), and
    an event of another kind still reaches it."""
    h = Hints(never=True)
    q, clock = h.queue()
    Hints.reject(q, "a", "default", "Hinted")
    clock.advance(2)
    h.answers["x"] = QUEUE
    assert q.move_on_event(EventKind.POD_ADD, new=_bound("x")) == 0
    assert h.asked == [] and q.where("default/a") == "unschedulable"
