"""The pods' store: `ResourceStore` with what only pods have, as kube-apiserver's
pkg/registry/core/pod/storage: pods/binding (Bind, BindBatch: the scheduler's compare-and-swap
of spec.nodeName, which requires the node to exist), pods/eviction (Evict: a delete that
respects PodDisruptionBudgets, marking the pod with the DisruptionTarget condition first), and
a pod's graceful deletion (terminationGracePeriodSeconds once it ran on a node). Every write
takes the request's `RequestContext`; a dry run checks everything and writes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime
from typing import Any

from google.protobuf.message import Message

from apiserver import fieldmanager
from apiserver.deletion import policy_of
from apiserver.requestcontext import INTERNAL, RequestContext
from apiserver.resources import _CAS_ATTEMPTS, ResourceStore, _Current
from apiserver.validation import invalid, required, unsupported
from tinykube import disruption
from tinykube.clock import Clock
from tinykube.errors import (
    AlreadyExistsError,
    ConflictError,
    DisruptionBudgetError,
    FieldError,
    ForbiddenError,
    InvalidError,
    MultipleBudgetsError,
    NotFoundError,
    PreconditionFailedError,
    TinykubeError,
    to_status,
)
from tinykube.kinds import NODE, KindInfo
from tinykube.meta import set_timestamp
from tinykube.protowire import each
from tinykube.v1 import meta_pb2, pod_pb2
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

log = logging.getLogger(__name__)

# Bindings per BindBatch: each is its own compare-and-swap, all in flight at once.
MAX_BIND_BATCH = 1000
# Pods per UpdateStatusBatch, likewise.
MAX_STATUS_BATCH = 1000


class PodStore(ResourceStore):
    """The pods' `ResourceStore`, with Bind, BindBatch, UpdateStatusBatch and Evict."""

    def __init__(self, info: KindInfo, *, node_prefix: bytes, **kwargs: Any) -> None:
        super().__init__(info, **kwargs)
        self.node_prefix = node_prefix  # b"/registry/nodes/" (Bind checks the node)
        # The PodDisruptionBudgets store evictions consult (APIServer wires it).
        self.budgets: ResourceStore | None = None

    def _prepare_update(
        self, subresource: str, obj: Message, old: Message
    ) -> tuple[Message, list[FieldError]]:
        """pods/ephemeralcontainers (`kubectl debug`): only spec.ephemeralContainers changes,
        by kube's rules (apiserver/ephemeral.py); the managed fields stay as stored."""
        if subresource == "ephemeralcontainers":
            strategy: Any = self.strategy
            new = strategy.prepare_for_ephemeral_update(obj, old)
            fieldmanager.keep_managed_fields(new, old)
            return new, strategy.validate_ephemeral_update(new, old)
        return super()._prepare_update(subresource, obj, old)

    def _grace_period(self, obj: Message, request: meta_pb2.DeleteRequest) -> int:
        """The request's gracePeriodSeconds, else the pod's terminationGracePeriodSeconds; 0
        for a pod that never ran on a node (nothing to stop)."""
        pod: pod_pb2.Pod = obj  # type: ignore[assignment]
        if not pod.spec.nodeName:
            return 0
        if request.HasField("gracePeriodSeconds"):
            return request.gracePeriodSeconds
        return pod.spec.terminationGracePeriodSeconds

    # ---- Bind ------------------------------------------------------------------------------

    async def bind(
        self, request: pod_pb2.BindRequest, ctx: RequestContext = INTERNAL
    ) -> pod_pb2.BindResponse:
        """Assign the pod to a node (pods/binding). A dry run checks everything the bind
        checks (the binding, the pod's uid, deletion, node and scheduling gates, that the node
        exists) and answers the pod's current resourceVersion, writing nothing."""
        rv = await self._bind(request.binding, ctx)
        return pod_pb2.BindResponse(resourceVersion=rv)

    async def bind_batch(
        self, request: pod_pb2.BindBatchRequest, ctx: RequestContext = INTERNAL
    ) -> pod_pb2.BindBatchResponse:
        """Each binding exactly as Bind (its own compare-and-swap, its own status), all
        concurrently: one RPC's overhead for many binds. The storage layer may commit several
        of them in one etcd txn; one failing compare never fails another binding."""
        if len(request.bindings) > MAX_BIND_BATCH:
            raise InvalidError(
                f"BindBatch: at most {MAX_BIND_BATCH} bindings per request, "
                f"got {len(request.bindings)}"
            )

        async def one(binding: pod_pb2.Binding) -> pod_pb2.BindResult:
            result = pod_pb2.BindResult(
                name=binding.metadata.name,
                namespace=self._namespace(binding.metadata.namespace),
            )
            try:
                result.resourceVersion = await self._bind(binding, ctx)
            except Exception as exc:
                if not isinstance(exc, TinykubeError):
                    log.exception("BindBatch item %s failed", binding.metadata.name)
                code, result.message = to_status(exc)
                result.code = code.value[0]
            return result

        results = await asyncio.gather(*(one(b) for b in request.bindings))
        return pod_pb2.BindBatchResponse(results=results)

    async def update_status_batch(
        self, request: pod_pb2.UpdateStatusBatchRequest, ctx: RequestContext = INTERNAL
    ) -> pod_pb2.UpdateStatusBatchResponse:
        """Each pod exactly as UpdateStatus (its own admission, NodeRestriction, validation and
        compare-and-swap, its own status code), all concurrently: one RPC's overhead for many
        status writes, which a kubelet's pods make together. The storage layer may commit
        several of them in one etcd txn."""
        if len(request.pods) > MAX_STATUS_BATCH:
            raise InvalidError(
                f"UpdateStatusBatch: at most {MAX_STATUS_BATCH} pods per request, "
                f"got {len(request.pods)}"
            )

        async def one(pod: pod_pb2.Pod) -> pod_pb2.UpdateStatusResult:
            result = pod_pb2.UpdateStatusResult(
                name=pod.metadata.name, namespace=self._namespace(pod.metadata.namespace)
            )
            try:
                stored = await self.replace_object(pod, ctx, "status")
                result.resourceVersion = stored.metadata.resourceVersion  # type: ignore[attr-defined]
            except Exception as exc:
                if not isinstance(exc, TinykubeError):
                    log.exception("UpdateStatusBatch item %s failed", pod.metadata.name)
                code, result.message = to_status(exc)
                result.code = code.value[0]
            return result

        results = await asyncio.gather(*(one(p) for p in request.pods))
        return pod_pb2.UpdateStatusBatchResponse(results=results)

    async def _bind(self, binding: pod_pb2.Binding, ctx: RequestContext) -> str:
        name = binding.metadata.name
        namespace = self._namespace(binding.metadata.namespace)
        target = binding.target
        problems = []
        if not name:
            problems.append(required("metadata.name"))
        if target.kind not in ("", "Node"):
            problems.append(invalid("target.kind", target.kind, 'must be "Node"'))
        if not target.name:
            problems.append(required("target.name"))
        if problems:
            raise InvalidError.for_object("Binding", name, problems)
        # Admission webhooks see a CREATE of pods/binding (the Binding as the object).
        await self.subresource_webhooks("binding", binding, "", ctx)
        target = binding.target
        key = self.key(namespace, name)
        node_key = self.node_prefix + target.name.encode()
        cur = await self._current(key, cached=not ctx.dry_run)
        # Set once an attempt of ours failed in flight and may have landed.
        maybe_bound = False
        for _attempt in range(_CAS_ATTEMPTS):
            if cur is None:
                raise self._not_found(name)
            pod: pod_pb2.Pod = cur.obj  # type: ignore[assignment]
            if maybe_bound and pod.spec.nodeName == target.name and cur.authoritative:
                # Our earlier attempt bound it (and the pod changed since, its kubelet's
                # status, say): the bind succeeded. Any bind to this node is the same bind.
                return str(cur.revision)
            problem: TinykubeError | None = None
            if binding.metadata.uid and binding.metadata.uid != pod.metadata.uid:
                problem = PreconditionFailedError(
                    f"Precondition failed: UID in precondition: {binding.metadata.uid}, "
                    f"UID in object meta: {pod.metadata.uid}"
                )
            elif pod.metadata.HasField("deletionTimestamp"):
                problem = PreconditionFailedError(
                    f"pod {namespace}/{name} is being deleted, cannot be assigned to a host"
                )
            elif pod.spec.nodeName:
                problem = AlreadyExistsError(
                    f"pod {namespace}/{name} is already assigned to node {pod.spec.nodeName}"
                )
            elif pod.spec.schedulingGates:
                # Kubernetes' binding storage: a pod still gated is not ready to be scheduled.
                problem = ConflictError(
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} has '
                    "non-empty .spec.schedulingGates"
                )
            if problem is not None:
                if not cur.authoritative:
                    cur = await self._current(key, cached=False)
                    continue
                raise problem
            if ctx.dry_run:
                # The write's transaction requires the node: so does its dry run.
                if await self.storage.get(node_key) is None:
                    raise NotFoundError(f'{NODE.plural} "{target.name}" not found')
                return str(cur.revision)
            pod.spec.nodeName = target.name
            # As kube-apiserver since v1.34 (ClearingNominatedNodeNameAfterBinding): a bound
            # pod's preemption nomination is spent.
            pod.status.nominatedNodeName = ""
            _set_scheduled(pod, self.clock)
            result = await self.storage.update(
                key, self._stored_value(pod), cur.revision, require=(node_key,)
            )
            if result.succeeded:
                return str(result.revision)
            if result.missing:
                raise NotFoundError(f'{NODE.plural} "{target.name}" not found')
            maybe_bound = maybe_bound or result.maybe_applied
            # The pod changed under us (a status update, say): retry on its current value.
            cur = self._after_failure(result)
        raise self._conflict(name)

    # ---- Evict -----------------------------------------------------------------------------

    async def evict(
        self, request: pod_pb2.EvictRequest, ctx: RequestContext = INTERNAL
    ) -> pod_pb2.EvictResponse:
        """Delete a pod through `delete` once its disruption budgets allow it (pods/eviction).

        As kube-apiserver's eviction: a pod that is terminal (Succeeded, Failed), Pending or
        already being deleted disrupts nothing, so it is deleted without consulting budgets;
        a Pending one is deleted on the condition that it is still the version read (unless
        the caller named a resourceVersion), so a pod that starts meanwhile is looked at again.
        Any other pod goes through `check_disruption_budgets` first. Before the delete the pod
        gets the DisruptionTarget condition (EvictionByEvictionAPI, "Eviction API: evicting"),
        so it says why it is terminating. deleteOptions' gracePeriodSeconds and preconditions
        are Delete's; dryRun ["All"] (or `ctx.dry_run`) checks everything, the delete's checks
        included, and writes nothing. Raises
        NotFoundError for a missing pod, ConflictError for a failed precondition, InvalidError
        for bad options, and whatever the budget check raises.
        """
        eviction = request.eviction
        name = eviction.metadata.name
        if not name:
            raise InvalidError.for_object("Eviction.policy", name, [required("metadata.name")])
        namespace = self._namespace(eviction.metadata.namespace)
        options = eviction.deleteOptions
        dry_run = _eviction_dry_run(name, options) or ctx.dry_run
        # Admission webhooks see a CREATE of pods/eviction (the policy/v1 Eviction).
        webhook_ctx = dataclasses.replace(ctx, dry_run=dry_run)
        await self.subresource_webhooks("eviction", eviction, "policy", webhook_ctx)
        options = eviction.deleteOptions
        key = self.key(namespace, name)
        caller_rv = bool(options.preconditions.resourceVersion)
        for attempt in range(_CAS_ATTEMPTS):
            cur = await self._current(key, cached=False)
            if cur is None:
                raise self._not_found(name)
            pod: pod_pb2.Pod = cur.obj  # type: ignore[assignment]
            self._admit_node(ctx, "create", "eviction", namespace, name, None, pod)
            req = meta_pb2.DeleteRequest(namespace=namespace, name=name)
            if options.HasField("gracePeriodSeconds"):
                req.gracePeriodSeconds = options.gracePeriodSeconds
            req.preconditions.CopyFrom(options.preconditions)
            req.propagationPolicy = policy_of(
                options.propagationPolicy if options.HasField("propagationPolicy") else None,
                options.orphanDependents if options.HasField("orphanDependents") else None,
            )
            phase = pod.status.phase or "Pending"
            ignores_budgets = phase in ("Succeeded", "Failed", "Pending") or (
                pod.metadata.HasField("deletionTimestamp")
            )
            ours = False
            unhealthy_under: str | None = None
            if not ignores_budgets:
                unhealthy_under = await self.check_disruption_budgets(pod, dry_run=dry_run)
                if unhealthy_under is not None and not caller_rv:
                    # Let through without spending the budget because it is not Ready:
                    # delete only the version judged, so a pod that became Ready meanwhile
                    # is not taken.
                    req.preconditions.resourceVersion = pod.metadata.resourceVersion
            elif phase == "Pending" and not pod.metadata.HasField("deletionTimestamp"):
                ours = not caller_rv
                if ours:
                    req.preconditions.resourceVersion = pod.metadata.resourceVersion
            # As kube-apiserver, the eviction's own delete is not admitted again: its webhooks
            # saw the pods/eviction CREATE.
            if dry_run:
                await self.delete(req, dataclasses.replace(ctx, dry_run=True), admit=False)
                return pod_pb2.EvictResponse(pod=pod)
            try:
                await self._mark_disruption_target(key, req, cur)
                deleted = await self.delete(req, ctx, admit=False)
            except ConflictError:
                if ours and attempt < _CAS_ATTEMPTS - 1:
                    continue  # the pod changed (it may have started): decide again
                if unhealthy_under is not None and not caller_rv:
                    # As kube-apiserver: the client may retry, and the pod is judged again.
                    raise _still_processing(unhealthy_under) from None
                raise
            return pod_pb2.EvictResponse(pod=deleted)  # type: ignore[arg-type]
        raise self._conflict(name)

    async def _mark_disruption_target(
        self, key: bytes, req: meta_pb2.DeleteRequest, cur: _Current | None
    ) -> None:
        """kube-apiserver's addConditionAndDeletePod, before the delete: on the latest pod,
        once the delete's preconditions hold, the DisruptionTarget condition (reason
        EvictionByEvictionAPI), written by compare-and-swap (a lost race is applied again to
        the current pod). A resourceVersion precondition then names the version written, so
        the delete still takes only the pod judged. ConflictError for a failed precondition."""
        name = req.name
        for _attempt in range(_CAS_ATTEMPTS):
            if cur is None:
                raise self._not_found(name)
            pod: pod_pb2.Pod = cur.obj  # type: ignore[assignment]
            problem = self._precondition_failure(name, req.preconditions, pod.metadata)
            if problem is not None:
                raise problem
            if not _set_eviction_condition(pod, self.clock.now()):
                return  # already marked so
            result = await self.storage.update(key, self._stored_value(pod), cur.revision)
            if result.succeeded:
                if req.preconditions.resourceVersion:
                    req.preconditions.resourceVersion = str(result.revision)
                return
            cur = self._after_failure(result)
        raise self._conflict(name)

    async def check_disruption_budgets(self, pod: pod_pb2.Pod, *, dry_run: bool) -> str | None:
        """The PodDisruptionBudget check of an eviction (kube-apiserver's EvictionREST).

        Finds the budgets in the pod's namespace whose selector matches it: none lets the
        eviction through; more than one is MultipleBudgetsError. A pod that is not Ready is
        let through without spending the budget when the budget's unhealthyPodEvictionPolicy
        is AlwaysAllow, or (IfHealthyBudget, the default) while currentHealthy >=
        desiredHealthy > 0; the budget's name is returned so `evict` deletes only the version
        judged. Otherwise the budget must allow a disruption: it is decremented and the pod
        recorded in status.disruptedPods by a compare-and-swap on the budget's
        resourceVersion (re-read and retried on conflict, so two evictions never spend one
        disruption), skipped when `dry_run`. Raises DisruptionBudgetError (429) when the
        budget allows none or its status is behind its generation, ForbiddenError when its
        disruptedPods map is full, ConflictError after too many lost races.
        """
        budgets = self.budgets
        if budgets is None:
            return None
        # A consistent read, as kube's eviction lists the budgets from storage: a budget
        # written just before the eviction must count (List with resourceVersion "" waits
        # for the watch cache to hold everything etcd had, or reads etcd).
        _rv, current, _ = await budgets.list_objects(
            meta_pb2.ListRequest(namespace=pod.metadata.namespace)
        )
        matching = [
            o.obj
            for o in current
            if disruption.selects(o.obj, pod)  # type: ignore[arg-type]
        ]
        if not matching:
            return None
        if len(matching) > 1:
            raise MultipleBudgetsError(
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support."
            )
        pdb = pdb_pb2.PodDisruptionBudget()
        pdb.CopyFrom(matching[0])  # type: ignore[arg-type]
        name = pdb.metadata.name
        if not disruption.is_pod_ready(pod):
            status = pdb.status
            if pdb.spec.unhealthyPodEvictionPolicy == disruption.ALWAYS_ALLOW or (
                status.currentHealthy >= status.desiredHealthy and status.desiredHealthy > 0
            ):
                return name
        key = budgets.key(pdb.metadata.namespace, name)
        for _attempt in range(_CAS_ATTEMPTS):
            _check_budget(pdb)
            status = pdb.status
            status.disruptionsAllowed -= 1
            if status.disruptionsAllowed == 0:
                disruption.update_disruption_allowed_condition(pdb, self.clock.now())
            if dry_run:
                return None
            set_timestamp(status.disruptedPods[pod.metadata.name], self.clock.now())
            try:
                await budgets.update_status(
                    pdb_pb2.UpdatePodDisruptionBudgetRequest(podDisruptionBudget=pdb)
                )
                return None
            except ConflictError:
                pass  # another eviction (or the controller) wrote it first: judge again
            except NotFoundError:
                return None  # the budget is gone: nothing protects the pod any more
            cur = await budgets._current(key, cached=False)
            if cur is None:
                return None
            pdb = cur.obj  # type: ignore[assignment]
            if not disruption.selects(pdb, pod):
                return None
        raise ConflictError(
            f'Operation cannot be fulfilled on poddisruptionbudgets.policy "{name}": '
            "couldn't update PodDisruptionBudget due to conflicts"
        )


_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


# The condition kube-apiserver's eviction sets on a pod before deleting it.
DISRUPTION_TARGET = "DisruptionTarget"
EVICTION_REASON = "EvictionByEvictionAPI"
EVICTION_MESSAGE = "Eviction API: evicting"
_EVICTION_CONDITION = ("True", EVICTION_REASON, EVICTION_MESSAGE)


def _set_eviction_condition(pod: pod_pb2.Pod, now: datetime) -> bool:
    """podutil.UpdatePodCondition with DisruptionTarget=True/EvictionByEvictionAPI: the
    transition time moves only when the status changes; False when nothing changed."""
    for cond in each(pod.status.conditions):
        if cond.type == DISRUPTION_TARGET:
            if (cond.status, cond.reason, cond.message) == _EVICTION_CONDITION:
                return False
            if cond.status != "True":
                set_timestamp(cond.lastTransitionTime, now)
            cond.status, cond.reason, cond.message = "True", EVICTION_REASON, EVICTION_MESSAGE
            return True
    added = pod.status.conditions.add(
        type=DISRUPTION_TARGET, status="True", reason=EVICTION_REASON, message=EVICTION_MESSAGE
    )
    set_timestamp(added.lastTransitionTime, now)
    return True


def _still_processing(name: str) -> DisruptionBudgetError:
    """kube-apiserver's createTooManyRequestsError: retry in 10 s."""
    return DisruptionBudgetError(
        _REFUSED,
        f"The disruption budget {name} is still being processed by the server.",
        retry_after_seconds=10,
    )


def _check_budget(pdb: pdb_pb2.PodDisruptionBudget) -> None:
    """checkAndDecrement's refusals, in Kubernetes' order."""
    name, status = pdb.metadata.name, pdb.status
    if status.observedGeneration < pdb.metadata.generation:
        raise _still_processing(name)
    forbidden = {"name": name, "group": "policy", "kind": "poddisruptionbudget"}
    if status.disruptionsAllowed < 0:
        raise ForbiddenError(
            f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is '
            "negative",
            forbidden,
        )
    if len(status.disruptedPods) > disruption.MAX_DISRUPTED_PODS:
        raise ForbiddenError(
            f'poddisruptionbudget.policy "{name}" is forbidden: DisruptedPods map too big - '
            "too many evictions not confirmed by PDB controller",
            forbidden,
        )
    if status.disruptionsAllowed == 0:
        raise DisruptionBudgetError(
            _REFUSED,
            f"The disruption budget {name} needs {status.desiredHealthy} healthy pods and has "
            f"{status.currentHealthy} currently",
        )


def _set_scheduled(pod: pod_pb2.Pod, clock: Clock) -> None:
    now = clock.now()
    for cond in each(pod.status.conditions):
        if cond.type == "PodScheduled":
            if cond.status != "True":
                cond.status = "True"
                set_timestamp(cond.lastTransitionTime, now)
            cond.reason = ""
            cond.message = ""
            return
    cond = pod.status.conditions.add(type="PodScheduled", status="True")
    set_timestamp(cond.lastTransitionTime, now)


_PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def _eviction_dry_run(name: str, options: meta_pb2.DeleteOptions) -> bool:
    """Whether an Eviction's deleteOptions ask for a dry run; bad options are InvalidError."""
    problems = []
    for i, value in enumerate(options.dryRun):
        if value != "All":
            problems.append(unsupported(f"deleteOptions.dryRun[{i}]", value, ("All",)))
    if options.HasField("propagationPolicy") and (
        options.propagationPolicy not in _PROPAGATION_POLICIES
    ):
        problems.append(
            unsupported(
                "deleteOptions.propagationPolicy", options.propagationPolicy, _PROPAGATION_POLICIES
            )
        )
    if options.HasField("gracePeriodSeconds") and options.gracePeriodSeconds < 0:
        problems.append(
            invalid(
                "deleteOptions.gracePeriodSeconds",
                options.gracePeriodSeconds,
                "must be greater than or equal to 0",
            )
        )
    if problems:
        raise InvalidError.for_object("Eviction.policy", name, problems)
    return bool(options.dryRun)
