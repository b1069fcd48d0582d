"""Pods (core/v1): defaults, create-time mutations, validation and the update rules.

As kube's pkg/registry/core/pod strategy: a new pod's status is the server's (phase Pending),
its spec gets the pod defaults and the create-time mutations (apiserver/podmutation.py), an
update may change only what ValidatePodUpdate allows (images, activeDeadlineSeconds,
tolerations added, scheduling gates removed...) and keeps what the Priority admission filled
in, and UpdateStatus checks only the status, as kubelets write it often. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from google.protobuf import json_format
from google.protobuf.message import Message

from apiserver import ephemeral, podmutation
from apiserver.registry.base import META_FIELDS, Strategy
from apiserver.registry.godiff import pod_spec_diff
from apiserver.registry.podspec import default_pod_spec
from apiserver.validation import (
    MAX_INT32,
    dns1123_subdomain,
    forbidden,
    invalid,
    json_text,
    printable,
    unsupported,
    validate_conditions,
    validate_pod_spec,
)
from tinykube.errors import FieldError
from tinykube.protowire import each
from tinykube.v1 import pod_pb2

POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def validate_pod(pod: pod_pb2.Pod) -> list[FieldError]:
    errs = validate_pod_spec("spec", pod.spec)
    if pod.spec.nodeName and pod.spec.schedulingGates:
        # Only a pod (not a template) can be created bound; Bind refuses a gated pod too.
        errs.append(
            forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared")
        )
    return errs + validate_pod_priority(pod.spec) + validate_pod_status(pod)


def validate_pod_priority(spec: pod_pb2.PodSpec) -> list[FieldError]:
    """A pod's priorityClassName: a DNS subdomain, as Kubernetes' (its preemptionPolicy is
    checked with the other scheduling fields)."""
    if spec.priorityClassName:
        return dns1123_subdomain("spec.priorityClassName", spec.priorityClassName)
    return []


def validate_pod_status(pod: pod_pb2.Pod) -> list[FieldError]:
    errs: list[FieldError] = []
    if pod.status.phase not in POD_PHASES:
        errs.append(unsupported("status.phase", pod.status.phase, POD_PHASES))
    errs.extend(validate_conditions("status.conditions", each(pod.status.conditions)))
    return errs


# Kubernetes' updatablePodSpecFields, joined as its Forbidden message joins them.
UPDATABLE_POD_SPEC_FIELDS = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)

POD_UPDATE_FORBIDDEN = "pod updates may not change fields other than " + ",".join(
    UPDATABLE_POD_SPEC_FIELDS
)


def _as_dict(message: Message) -> object:
    return json_format.MessageToDict(message)


def _only_added_tolerations(
    new: Sequence[pod_pb2.Toleration], old: Sequence[pod_pb2.Toleration]
) -> list[FieldError]:
    """Kubernetes' validateOnlyAddedTolerations: every old toleration is still there, except
    that its tolerationSeconds may change."""
    for o in old:
        if not any(
            (o.key, o.operator, o.value, o.effect) == (n.key, n.operator, n.value, n.effect)
            for n in new
        ):
            return [
                forbidden(
                    "spec.tolerations",
                    "existing toleration can not be modified except its tolerationSeconds",
                )
            ]
    return []


def _only_deleted_gates(
    new: Sequence[pod_pb2.PodSchedulingGate], old: Sequence[pod_pb2.PodSchedulingGate]
) -> list[FieldError]:
    old_names = {g.name for g in old}
    return [
        forbidden(
            f"spec.schedulingGates[{i}].name",
            f"only deletion is allowed, but found new scheduling gate '{g.name}'",
        )
        for i, g in enumerate(new)
        if g.name not in old_names
    ]


def _term_has_only_additions(new: pod_pb2.NodeSelectorTerm, old: pod_pb2.NodeSelectorTerm) -> bool:
    if not old.matchExpressions and not old.matchFields:
        return not new.matchExpressions and not new.matchFields
    for new_reqs, old_reqs in (
        (new.matchExpressions, old.matchExpressions),
        (new.matchFields, old.matchFields),
    ):
        if old_reqs and list(new_reqs[: len(old_reqs)]) != list(old_reqs):
            return False
    return True


def _gated_node_affinity_changes(new: pod_pb2.PodSpec, old: pod_pb2.PodSpec) -> list[FieldError]:
    """Kubernetes' validateNodeAffinityMutation: a gated pod's required node affinity may only
    narrow (requirements appended to its existing terms); with none, anything may be set."""
    old_na, new_na = old.affinity.nodeAffinity, new.affinity.nodeAffinity
    if not old_na.HasField("requiredDuringSchedulingIgnoredDuringExecution"):
        return []
    old_terms = list(old_na.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms)
    new_terms = list(new_na.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms)
    tp = (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms"
    )
    if old_terms and len(old_terms) != len(new_terms):
        shown = json_text([_as_dict(t) for t in new_terms]) if new_terms else "null"
        return [
            FieldError(
                tp,
                f"Invalid value: {shown}: no additions/deletions to non-empty NodeSelectorTerms "
                "list are allowed",
            )
        ]
    return [
        FieldError(
            f"{tp}[{i}]",
            f"Invalid value: {json_text(_as_dict(new_terms[i]))}: only additions are allowed (no "
            "mutations or deletions)",
        )
        for i in range(len(old_terms))
        if not _term_has_only_additions(new_terms[i], old_terms[i])
    ]


def _container_updates(
    path: str, new: Sequence[pod_pb2.Container], old: Sequence[pod_pb2.Container]
) -> tuple[list[FieldError], bool]:
    """Kubernetes' ValidateContainerUpdates: the containers stay (their images may change,
    never to empty or padded names); True when the count changed and nothing else is checked."""
    if len(new) != len(old):
        return [forbidden(path, "pod updates may not add or remove containers")], True
    errs: list[FieldError] = []
    for i, c in enumerate(new):
        # An empty image is also the spec's own `Required value`, reported once.
        if c.image and c.image.strip() != c.image:
            errs.append(
                invalid(
                    f"{path}[{i}].image", c.image, "must not have leading or trailing whitespace"
                )
            )
    return errs, False


def _active_deadline_update(
    ns: pod_pb2.PodSpec, os_: pod_pb2.PodSpec
) -> tuple[list[FieldError], bool]:
    """Set when unset, or lowered; never unset or raised. True when kube stops checking (a
    value out of range, or raised)."""
    path = "spec.activeDeadlineSeconds"
    if ns.HasField("activeDeadlineSeconds"):
        value = ns.activeDeadlineSeconds
        if value < 0 or value > MAX_INT32:
            return [invalid(path, value, f"must be between 0 and {MAX_INT32}, inclusive")], True
        if os_.HasField("activeDeadlineSeconds") and os_.activeDeadlineSeconds < value:
            return [invalid(path, value, "must be less than or equal to previous value")], True
    elif os_.HasField("activeDeadlineSeconds"):
        detail = "must not update from a positive integer to nil value"
        return [invalid(path, "null", detail)], False
    return [], False


def validate_pod_update(new: pod_pb2.Pod, old: pod_pb2.Pod) -> list[FieldError]:
    """Kubernetes' ValidatePodUpdate over tinykube's pod spec: container images,
    activeDeadlineSeconds (set or lowered), tolerations (additions; tolerationSeconds may
    change), schedulingGates (deletions) and terminationGracePeriodSeconds (to 1 from a
    negative value) may change; a pod that still has scheduling gates may also gain
    nodeSelector entries and narrow its required node affinity. Anything else is kube's
    Forbidden `spec` error, the diff of the specs after it."""
    ns, os_ = new.spec, old.spec
    errs: list[FieldError] = []
    for path, new_cs, old_cs in (
        ("spec.containers", ns.containers, os_.containers),
        ("spec.initContainers", ns.initContainers, os_.initContainers),
    ):
        container_errs, stop = _container_updates(path, new_cs, old_cs)
        errs.extend(container_errs)
        if stop:
            return errs
    deadline_errs, stop = _active_deadline_update(ns, os_)
    errs.extend(deadline_errs)
    if stop:
        return errs
    errs.extend(_only_added_tolerations(ns.tolerations, os_.tolerations))
    errs.extend(_only_deleted_gates(ns.schedulingGates, os_.schedulingGates))
    if ns == os_:
        return errs
    munged = pod_pb2.PodSpec()
    munged.CopyFrom(ns)
    # The fields that may change, with their own checks above, are compared as the old ones.
    for mc, oc in (
        *zip(munged.containers, os_.containers, strict=True),
        *zip(munged.initContainers, os_.initContainers, strict=True),
    ):
        mc.image = oc.image
    if os_.HasField("activeDeadlineSeconds"):
        munged.activeDeadlineSeconds = os_.activeDeadlineSeconds
    else:
        munged.ClearField("activeDeadlineSeconds")
    del munged.tolerations[:]
    munged.tolerations.extend(os_.tolerations)
    del munged.schedulingGates[:]
    munged.schedulingGates.extend(os_.schedulingGates)
    if (
        os_.HasField("terminationGracePeriodSeconds")
        and os_.terminationGracePeriodSeconds < 0
        and munged.HasField("terminationGracePeriodSeconds")
        and munged.terminationGracePeriodSeconds == 1
    ):
        munged.terminationGracePeriodSeconds = os_.terminationGracePeriodSeconds
    if os_.schedulingGates:
        if munged.nodeSelector != os_.nodeSelector:
            if any(munged.nodeSelector.get(k) != v for k, v in os_.nodeSelector.items()):
                errs.append(
                    FieldError(
                        "spec.nodeSelector",
                        f"Invalid value: {json_text(dict(munged.nodeSelector))}: only additions to "
                        "spec.nodeSelector are allowed (no mutations or deletions)",
                    )
                )
            munged.nodeSelector.clear()
            munged.nodeSelector.update(os_.nodeSelector)
        if munged.affinity.nodeAffinity != os_.affinity.nodeAffinity:
            errs.extend(_gated_node_affinity_changes(munged, os_))
            if os_.affinity.HasField("nodeAffinity"):
                munged.affinity.nodeAffinity.CopyFrom(os_.affinity.nodeAffinity)
            else:
                munged.affinity.ClearField("nodeAffinity")
            if not os_.HasField("affinity") and not munged.affinity.ListFields():
                munged.ClearField("affinity")
    if munged != os_:
        errs.append(forbidden("spec", f"{POD_UPDATE_FORBIDDEN}\n{pod_spec_diff(os_, munged)}"))
    return errs


def _keep_admitted_priority(new: pod_pb2.PodSpec, old: pod_pb2.PodSpec) -> None:
    """An update that leaves out what the Priority admission filled in at creation keeps it
    (Kubernetes' Priority admission does the same on update)."""
    if not new.HasField("priority") and old.HasField("priority"):
        new.priority = old.priority
    if not new.preemptionPolicy and old.preemptionPolicy:
        new.preemptionPolicy = old.preemptionPolicy


class PodStrategy(Strategy[pod_pb2.Pod]):
    selectable_fields = (
        *META_FIELDS,
        "spec.nodeName",
        "spec.schedulerName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    )
    # Every kubelet watches its node's pods: the watch cache indexes them by node.
    index_field = "spec.nodeName"
    reset_status_on_create = True

    def decode_defaults(self, obj: pod_pb2.Pod) -> None:
        default_pod_spec(obj.spec, self.default_grace_seconds)

    def default(self, obj: pod_pb2.Pod, now: datetime) -> None:
        default_pod_spec(obj.spec, self.default_grace_seconds)
        self.default_created(obj, now)

    def default_created(self, obj: pod_pb2.Pod, now: datetime) -> None:
        obj.status.phase = "Pending"
        podmutation.prepare_pod_for_create(obj, now)

    def on_update(self, new: pod_pb2.Pod, old: pod_pb2.Pod) -> None:
        default_pod_spec(new.spec, self.default_grace_seconds)
        _keep_admitted_priority(new.spec, old.spec)

    def check(self, obj: pod_pb2.Pod) -> list[FieldError]:
        return validate_pod(obj)

    def validate_create(self, obj: Message) -> list[FieldError]:
        # Ephemeral containers come only through pods/ephemeralcontainers (apiserver/ephemeral.py).
        pod = self.typed(obj)
        return self.validate_object(pod) + ephemeral.validate_create(pod)

    def prepare_for_ephemeral_update(self, new: Message, old: Message) -> Message:
        """pods/ephemeralcontainers: the stored pod with only the new ephemeral containers (kube's
        dropNonEphemeralContainerUpdates); resourceVersion stays the client's precondition."""
        return ephemeral.prepare(self.typed(new), self.typed(old))

    def validate_ephemeral_update(self, new: Message, old: Message) -> list[FieldError]:
        """kube's ValidatePodEphemeralContainersUpdate."""
        return ephemeral.validate_update(self.typed(new), self.typed(old))

    def check_update(self, new: pod_pb2.Pod, old: pod_pb2.Pod) -> list[FieldError]:
        return validate_pod_update(new, old)

    def check_status(self, new: pod_pb2.Pod, old: pod_pb2.Pod) -> list[FieldError]:
        # Metadata and spec are as stored: only the status, as kube's ValidatePodStatusUpdate.
        return validate_pod_status(new) + printable("status", new.status)

    def fields(self, obj: pod_pb2.Pod) -> dict[str, str]:
        spec, status = obj.spec, obj.status
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": obj.metadata.namespace,
            "spec.nodeName": spec.nodeName,
            "spec.schedulerName": spec.schedulerName,
            "spec.restartPolicy": spec.restartPolicy,
            "spec.serviceAccountName": spec.serviceAccountName,
            "spec.hostNetwork": "true" if spec.hostNetwork else "false",
            "status.phase": status.phase,
            # kube selects on the first of status.podIPs.
            "status.podIP": status.podIPs[0].ip if status.podIPs else status.podIP,
            "status.nominatedNodeName": status.nominatedNodeName,
        }
