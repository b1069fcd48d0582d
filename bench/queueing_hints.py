"""What the scheduling queue's queueing hints cost per cluster event, in-process.

Builds a Scheduler (the default profile) with 100 nodes, puts `--waiting` pods rejected by
InterPodAffinity in the unschedulable set, and times `queue.move_on_event` for one assigned
pod's event (none of the events helps any waiting pod, so the set stays as it is):
- "none waiting": SchedulingBasic's case, a bind confirmation with an empty unschedulable set;
- anti-affinity pods waiting in another namespace / in the event's namespace, and a bind (an
  AssignedPodAdd, which never helps anti-affinity, so they are not even in its bucket);
- anti-affinity pods and an unrelated deletion in another namespace (none is asked) and in
  their namespace (every hint is asked);
- required-affinity pods and an unrelated bind in their namespace (every hint is asked).
Prints one JSON object per case: microseconds per event (best of 5 runs, GC off while timed)
and per waiting pod asked. Wall time suffers from other processes on a shared machine.

    .venv/bin/python bench/queueing_hints.py [--waiting 1000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import timeit
from collections.abc import Callable

from scheduler.cache import EventKind
from scheduler.core import Profile
from scheduler.cycle import Scheduler
from scheduler.podinfo import PodInfo
from tinykube.clock import FakeClock
from tinykube.v1 import node_pb2, pod_pb2

HOST = "kubernetes.io/hostname"


def make_node(i: int) -> node_pb2.Node:
    n = node_pb2.Node()
    n.metadata.name = f"node-{i}"
    n.metadata.labels.update({HOST: n.metadata.name, "topology.kubernetes.io/zone": f"z{i % 4}"})
    n.status.allocatable.update({"cpu": "32", "memory": "128Gi", "pods": "110"})
    return n


def make_pod(name: str, ns: str, kind: str = "", node: str = "") -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name, p.metadata.namespace, p.metadata.uid = name, ns, f"uid-{ns}-{name}"
    p.metadata.labels["app"] = "web" if kind else "basic"
    c = p.spec.containers.add(name="c")
    c.resources.requests.update({"cpu": "100m", "memory": "100Mi"})
    if kind == "anti":
        t = p.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
        t.topologyKey = HOST
        t.labelSelector.matchLabels["app"] = "web"
    elif kind == "affinity":
        a = p.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
        a.topologyKey = HOST
        a.labelSelector.matchLabels["app"] = "cache"
    p.spec.nodeName = node
    return p


def measure(waiting: int, kind: str, ns: str, event: EventKind) -> dict[str, object]:
    s = Scheduler(Profile(), clock=FakeClock())
    for i in range(100):
        s.on_node_add(make_node(i))
    for i in range(waiting):
        s.queue.add(PodInfo.from_pod(make_pod(f"w{i}", ns, kind)))
        qp = s.queue.pop_nowait()
        assert qp is not None
        s.queue.add_unschedulable(qp, frozenset({"InterPodAffinity"}))
    changed = PodInfo.from_pod(make_pod("x", "a", node="node-1"))
    q = s.queue
    run: Callable[[], int]
    if event == EventKind.POD_DELETE:
        run = lambda: q.move_on_event(event, old=changed)  # noqa: E731
    else:
        run = lambda: q.move_on_event(event, new=changed)  # noqa: E731
    number = 200 if waiting else 100_000
    gc.disable()
    try:
        best = min(timeit.repeat(run, number=number, repeat=5)) / number
    finally:
        gc.enable()
    assert q.lengths()["unschedulable"] == waiting
    return {
        "case": f"{waiting} {kind or '-'} pods waiting in ns {ns}, {event} in ns a",
        "us_per_event": round(best * 1e6, 2),
        "us_per_waiting_pod": round(best * 1e6 / waiting, 3) if waiting else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--waiting", type=int, default=1000)
    w = ap.parse_args().waiting
    cases = [
        (0, "", "a", EventKind.POD_ADD),
        (w, "anti", "b", EventKind.POD_ADD),
        (w, "anti", "a", EventKind.POD_ADD),
        (w, "anti", "b", EventKind.POD_DELETE),
        (w, "anti", "a", EventKind.POD_DELETE),
        (w, "affinity", "a", EventKind.POD_ADD),
    ]
    for case in cases:
        print(json.dumps(measure(*case)), flush=True)
    print(json.dumps({"load_average": round(os.getloadavg()[0], 1)}))


if __name__ == "__main__":
    main()
