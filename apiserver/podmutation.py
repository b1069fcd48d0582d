"""What kube-apiserver's pod strategy changes in a pod as it is created, beyond plain defaults.

As Kubernetes v1.36's PrepareForCreate (pkg/registry/core/pod/strategy.go) and its Priority
admission's fallback:
- a pod created with scheduling gates gets condition PodScheduled=False, reason
  SchedulingGated (no Event); the apiserver never touches it again: Bind replaces it, or the
  scheduler's Unschedulable verdict does, once the last gate is gone;
- `matchLabelKeys` / `mismatchLabelKeys` of pod (anti-)affinity terms, and `matchLabelKeys` of
  topology spread constraints (MatchLabelKeysInPodTopologySpreadSelectorMerge, on by default
  since v1.33), are folded into the term's labelSelector as `key In (value)` /
  `key NotIn (value)` with the value of the pod's own label; a key the pod does not carry, or a
  term without a labelSelector (which selects nothing), is left alone. The keys stay in the
  spec, and validation then runs on the folded selector;
- `preemptionPolicy` left empty becomes PreemptLowerPriority, the policy Priority admission
  gives a pod whose PriorityClass sets none.

Pure functions over the pod message, run once per create (also for dry runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from tinykube.meta import set_timestamp
from tinykube.protowire import each
from tinykube.v1 import meta_pb2, pod_pb2

SCHEDULING_GATED = "SchedulingGated"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"


def apply_scheduling_gated_condition(pod: pod_pb2.Pod, now: datetime) -> None:
    """PodScheduled=False/SchedulingGated on a new pod with gates (unless it has one)."""
    if not pod.spec.schedulingGates:
        return
    if any(c.type == "PodScheduled" for c in each(pod.status.conditions)):
        return
    cond = pod.status.conditions.add(
        type="PodScheduled",
        status="False",
        reason=SCHEDULING_GATED,
        message=SCHEDULING_GATED_MESSAGE,
    )
    set_timestamp(cond.lastTransitionTime, now)


def _fold(
    selector: meta_pb2.LabelSelector, keys: Iterable[str], operator: str, labels: Mapping[str, str]
) -> None:
    for key in keys:
        if key in labels:
            selector.matchExpressions.add(key=key, operator=operator, values=[labels[key]])


def _fold_term(term: pod_pb2.PodAffinityTerm, labels: Mapping[str, str]) -> None:
    if not term.HasField("labelSelector"):
        return  # a term without a selector matches no pods; nothing to narrow
    _fold(term.labelSelector, term.matchLabelKeys, "In", labels)
    _fold(term.labelSelector, term.mismatchLabelKeys, "NotIn", labels)


def fold_label_keys(pod: pod_pb2.Pod) -> None:
    """Merge matchLabelKeys / mismatchLabelKeys into the labelSelectors, from the pod's labels."""
    labels = pod.metadata.labels
    spec = pod.spec
    for affinity in (spec.affinity.podAffinity, spec.affinity.podAntiAffinity):
        for weighted in each(affinity.preferredDuringSchedulingIgnoredDuringExecution):
            _fold_term(weighted.podAffinityTerm, labels)
        for term in each(affinity.requiredDuringSchedulingIgnoredDuringExecution):
            _fold_term(term, labels)
    for constraint in each(spec.topologySpreadConstraints):
        if constraint.HasField("labelSelector"):
            _fold(constraint.labelSelector, constraint.matchLabelKeys, "In", labels)


def default_preemption_policy(spec: pod_pb2.PodSpec) -> None:
    """The hook after PriorityClass admission: that admission (when a class names a policy)
    fills spec.preemptionPolicy first, as Kubernetes' mutating admission runs before the
    strategy; a pod still without one gets PreemptLowerPriority."""
    if not spec.preemptionPolicy:
        spec.preemptionPolicy = DEFAULT_PREEMPTION_POLICY


def prepare_pod_for_create(pod: pod_pb2.Pod, now: datetime) -> None:
    """Every create-time mutation above, in kube's order."""
    apply_scheduling_gated_condition(pod, now)
    fold_label_keys(pod)
    default_preemption_policy(pod.spec)
