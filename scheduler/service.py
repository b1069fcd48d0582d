"""`tinykube.v1.Scheduler`: Explain (a pod's last attempt) and Simulate (a dry run).

Both read the live `Scheduler` owned by the app; when this replica is not the leader there is
none and the RPCs answer UNAVAILABLE naming that. Handlers run on the scheduler's event loop
between scheduling cycles (the cycle never awaits mid-algorithm), so they see a consistent cache.
Simulate runs the real algorithm without recording, assuming or binding, and restores the
rotating start index so it does not perturb real scheduling. A pod a PreEnqueue plugin holds
back (SchedulingGates) has no attempt: both answer with that verdict, and no nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from scheduler.core import Attempt
from scheduler.cycle import Scheduler
from scheduler.podinfo import PodInfo
from tinykube.errors import InvalidError, NotFoundError, UnavailableError, abort_with
from tinykube.quantity import QuantityError
from tinykube.v1 import pod_pb2, scheduler_pb2, scheduler_pb2_grpc

DEFAULT_MAX_NODES = 20


def to_response(
    att: Attempt, namespace: str, name: str, max_nodes: int
) -> scheduler_pb2.ExplainResponse:
    view = att.view(max_nodes or DEFAULT_MAX_NODES)
    ts = Timestamp()
    ts.FromNanoseconds(int(att.timestamp * 1e9))
    resp = scheduler_pb2.ExplainResponse(
        namespace=namespace,
        name=name,
        attemptedAt=ts,
        selectedNode=att.selected or "",
        message=att.message,
        totalNodes=att.evaluated,
        feasibleNodes=att.feasible,
    )
    for i, node in enumerate(view.nodes):
        ne = resp.nodes.add(node=node, scored=view.candidate[i])
        feasible = True
        for plugin, verdicts in view.filters.items():
            v = verdicts[i]
            if v is None:
                ne.filters.add(plugin=plugin, verdict="NOT_RUN")
                feasible = False
            elif v:
                ne.filters.add(plugin=plugin, verdict="FAILED", reasons=v.split(", "))
                feasible = False
            else:
                ne.filters.add(plugin=plugin, verdict="PASSED")
        ne.feasible = feasible
        for plugin, (weight, scores) in view.scores.items():
            sc = scores[i]
            if sc is not None:
                ne.scores.add(plugin=plugin, score=sc, weight=weight, weighted=sc * weight)
        total = view.totals[i]
        if total is not None:
            ne.totalScore = total
    return resp


class SchedulerService(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, current: Callable[[], Scheduler | None], leader: Callable[[], str]) -> None:
        self._current = current
        self._leader = leader

    def _scheduler(self) -> Scheduler:
        s = self._current()
        if s is None:
            leader = self._leader()
            raise UnavailableError(
                "this scheduler is not the leader"
                + (f"; the leader is {leader}" if leader else "")
                + "; ask the leading replica"
            )
        return s

    async def Explain(
        self,
        request: scheduler_pb2.ExplainRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> scheduler_pb2.ExplainResponse:
        try:
            s = self._scheduler()
            ns = request.namespace or "default"
            key = f"{ns}/{request.name}"
            att = s.algorithm.attempts.get(key)
            gated = s.queue.gated_message(key)
            if att is None and gated is not None:
                return scheduler_pb2.ExplainResponse(namespace=ns, name=request.name, message=gated)
            if att is None:
                raise NotFoundError(
                    f"no scheduling attempt of pod {key} is known to this scheduler "
                    "(it keeps the last attempts since it started; try Simulate)"
                )
            return to_response(att, ns, request.name, request.maxNodes)
        except Exception as exc:
            await abort_with(context, exc)

    async def Simulate(
        self,
        request: scheduler_pb2.SimulateRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> scheduler_pb2.ExplainResponse:
        try:
            s = self._scheduler()
            pod = pod_pb2.Pod()
            pod.CopyFrom(request.pod)
            pod.metadata.namespace = pod.metadata.namespace or "default"
            pod.metadata.name = pod.metadata.name or "simulated"
            try:
                info = PodInfo.from_pod(pod)
            except QuantityError as exc:
                raise InvalidError(f"pod.spec: {exc}") from exc
            held = s.profile.pre_enqueue(info)
            if not held.ok:
                return scheduler_pb2.ExplainResponse(
                    namespace=pod.metadata.namespace,
                    name=pod.metadata.name,
                    message=held.message(),
                )
            algo = s.algorithm
            saved = algo.next_start
            # a key no real pod can have, so the real pod's attempt stays as it was
            sim_key = "\0simulate"
            sim = dataclasses.replace(info, key=sim_key)
            try:
                algo.schedule(sim)
                att = algo.attempts.pop(sim_key)
            finally:
                algo.next_start = saved
            return to_response(att, pod.metadata.namespace, pod.metadata.name, request.maxNodes)
        except Exception as exc:
            await abort_with(context, exc)
