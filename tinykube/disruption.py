"""PodDisruptionBudget rules shared by the eviction API, the disruption controller and the
scheduler's preemption: which pods a budget selects, what counts as healthy, and the
DisruptionAllowed condition (Kubernetes' component-helpers/apps/poddisruptionbudget).

Pure functions over the API messages; no I/O, no clock of their own (callers pass `now`).
"""

from __future__ import annotations

from datetime import datetime

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from tinykube.meta import set_timestamp
from tinykube.selectors import LabelSelector, SelectorError, from_proto
from tinykube.v1 import pod_pb2
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

DISRUPTION_ALLOWED = "DisruptionAllowed"
SUFFICIENT_PODS = "SufficientPods"
INSUFFICIENT_PODS = "InsufficientPods"
SYNC_FAILED = "SyncFailed"
# The Status cause type (StatusCause.reason in JSON) of an eviction a budget refused.
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
ALWAYS_ALLOW = "AlwaysAllow"
IF_HEALTHY_BUDGET = "IfHealthyBudget"
# The eviction API refuses evictions under a budget whose disruptedPods map is larger than
# this (the controller has not caught up with the evictions it already allowed).
MAX_DISRUPTED_PODS = 2000


def budget_selector(pdb: pdb_pb2.PodDisruptionBudget) -> LabelSelector | None:
    """The budget's selector; None when it selects nothing (empty or unparsable: policy/v1's
    rule, so a budget without a selector never blocks every pod of its namespace)."""
    sel = pdb.spec.selector
    if not sel.matchLabels and not sel.matchExpressions:
        return None
    try:
        return from_proto(sel)
    except SelectorError:
        return None


def selects(pdb: pdb_pb2.PodDisruptionBudget, pod: pod_pb2.Pod) -> bool:
    """Whether `pdb` covers `pod`: same namespace and the selector matches its labels."""
    if pdb.metadata.namespace != pod.metadata.namespace:
        return False
    selector = budget_selector(pdb)
    return selector is not None and selector.matches(pod.metadata.labels)


def is_pod_ready(pod: pod_pb2.Pod) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)


def set_condition(
    conditions: RepeatedCompositeFieldContainer[pdb_pb2.PodDisruptionBudgetCondition],
    *,
    type_: str,
    status: str,
    reason: str,
    message: str,
    observed_generation: int,
    now: datetime,
) -> None:
    """meta.SetStatusCondition on a repeated PodDisruptionBudgetCondition field: the
    transition time moves only when the status changes."""
    for cond in conditions:
        if cond.type == type_:
            if cond.status != status:
                cond.status = status
                set_timestamp(cond.lastTransitionTime, now)
            cond.reason = reason
            cond.message = message
            cond.observedGeneration = observed_generation
            return
    added = conditions.add(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observedGeneration=observed_generation,
    )
    set_timestamp(added.lastTransitionTime, now)


def update_disruption_allowed_condition(pdb: pdb_pb2.PodDisruptionBudget, now: datetime) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition: True/SufficientPods while disruptions are
    allowed, False/InsufficientPods otherwise."""
    allowed = pdb.status.disruptionsAllowed > 0
    set_condition(
        pdb.status.conditions,
        type_=DISRUPTION_ALLOWED,
        status="True" if allowed else "False",
        reason=SUFFICIENT_PODS if allowed else INSUFFICIENT_PODS,
        message="",
        observed_generation=pdb.status.observedGeneration,
        now=now,
    )


def conditions_up_to_date(pdb: pdb_pb2.PodDisruptionBudget) -> bool:
    """pdbhelper.ConditionsAreUpToDate."""
    cond = next((c for c in pdb.status.conditions if c.type == DISRUPTION_ALLOWED), None)
    if cond is None or pdb.status.observedGeneration != pdb.metadata.generation:
        return False
    if pdb.status.disruptionsAllowed > 0:
        return cond.status == "True" and cond.reason == SUFFICIENT_PODS
    return cond.status == "False" and cond.reason == INSUFFICIENT_PODS
