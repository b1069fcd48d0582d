"""The pure parts of the DaemonSet controller, as kube's pkg/controller/daemon (and its util).

Which nodes should run a DaemonSet's pod (`node_should_run`: the template's nodeName,
nodeSelector and required node affinity, and the node's taints against the pod's tolerations
with the daemon tolerations added, as NodeShouldRunDaemonPod), the pod a node gets (the
template, the daemon tolerations, the hash and template-generation labels, and a required node
affinity term `matchFields metadata.name In [node]` that the scheduler honours), which node a
daemon pod is for (`target_node`), the rolling update's surge and unavailability arithmetic and
its plan (`rolling_update_plan`), and ControllerRevision naming and matching (the template hash,
kube's FNV-32a + SafeEncodeString shape over the template's canonical JSON).

Pure functions over protobuf messages; the clock is passed in.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.protobuf.struct_pb2 import Struct

from controller import controllerref
from controller.nodelifecycle import toleration_matches
from controller.util import (
    fnv32a,
    is_pod_available,
    is_terminating,
    safe_encode_string,
    scaled_value,
    selector_matches,
)
from tinykube.manifest import to_dict
from tinykube.meta import annotation_int
from tinykube.v1 import controllerrevision_pb2, daemonset_pb2, meta_pb2, node_pb2, pod_pb2

DaemonSet = daemonset_pb2.DaemonSet
Pod = pod_pb2.Pod
Node = node_pb2.Node
ControllerRevision = controllerrevision_pb2.ControllerRevision

KIND = "DaemonSet"
API_VERSION = "apps/v1"
# apps/v1 ControllerRevisionHashLabelKey (DefaultDaemonSetUniqueLabelKey).
HASH_LABEL = "controller-revision-hash"
# extensions/v1beta1 DaemonSetTemplateGenerationKey, still put on daemon pods.
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
OBJECT_NAME_FIELD = "metadata.name"

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"

# The tolerations every daemon pod gets (AddOrUpdateDaemonPodTolerations): it must survive the
# node problems that evict or keep out other pods.
DAEMON_TOLERATIONS: tuple[tuple[str, str], ...] = (
    ("node.kubernetes.io/not-ready", NO_EXECUTE),
    ("node.kubernetes.io/unreachable", NO_EXECUTE),
    ("node.kubernetes.io/disk-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/memory-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/pid-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/unschedulable", NO_SCHEDULE),
)
HOST_NETWORK_TOLERATION = ("node.kubernetes.io/network-unavailable", NO_SCHEDULE)


# ---- tolerations and the pod a node gets ----------------------------------------------------


def add_daemon_tolerations(spec: pod_pb2.PodSpec) -> None:
    """kube's AddOrUpdateDaemonPodTolerations: each daemon toleration (operator Exists, no
    tolerationSeconds) replaces a toleration with the same key, operator, value and effect, or
    is appended."""
    wanted = list(DAEMON_TOLERATIONS)
    if spec.hostNetwork:
        wanted.append(HOST_NETWORK_TOLERATION)
    for key, effect in wanted:
        tol = pod_pb2.Toleration(key=key, operator="Exists", effect=effect)
        for i, existing in enumerate(spec.tolerations):
            same = (existing.key, existing.operator, existing.value, existing.effect)
            if same == (key, "Exists", "", effect):
                if existing != tol:
                    spec.tolerations[i].CopyFrom(tol)
                break
        else:
            spec.tolerations.append(tol)


def node_name_affinity(affinity: pod_pb2.Affinity, node_name: str) -> None:
    """kube's ReplaceDaemonSetPodNodeNameNodeAffinity: the required node affinity becomes the
    one term `matchFields metadata.name In [node]`; preferred terms and pod (anti-)affinity are
    kept."""
    required = affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    del required.nodeSelectorTerms[:]
    term = required.nodeSelectorTerms.add()
    term.matchFields.add(key=OBJECT_NAME_FIELD, operator="In", values=[node_name])


def new_controller_ref(ds: DaemonSet) -> meta_pb2.OwnerReference:
    return controllerref.new_controller_ref(ds, API_VERSION, KIND)


def template_generation(ds: DaemonSet) -> int | None:
    return annotation_int(ds.metadata.annotations, TEMPLATE_GENERATION_ANNOTATION)


def pod_for_node(ds: DaemonSet, node_name: str, hash_: str) -> Pod:
    """kube's CreatePodTemplate plus the node's affinity: the pod `ds` creates for a node,
    named by the apiserver from generateName "<ds>-"."""
    tmpl = ds.spec.template
    pod = Pod(apiVersion="v1", kind="Pod")
    pod.metadata.generateName = f"{ds.metadata.name}-"
    pod.metadata.namespace = ds.metadata.namespace
    pod.metadata.labels.update(tmpl.metadata.labels)
    pod.metadata.annotations.update(tmpl.metadata.annotations)
    pod.metadata.finalizers.extend(tmpl.metadata.finalizers)
    generation = template_generation(ds)
    if generation is not None:
        pod.metadata.labels[TEMPLATE_GENERATION_LABEL] = str(generation)
    if hash_:
        pod.metadata.labels[HASH_LABEL] = hash_
    pod.metadata.ownerReferences.append(new_controller_ref(ds))
    pod.spec.CopyFrom(tmpl.spec)
    add_daemon_tolerations(pod.spec)
    node_name_affinity(pod.spec.affinity, node_name)
    return pod


def target_node(pod: Pod) -> str | None:
    """kube's GetTargetNodeName: spec.nodeName, else the node of the pod's required
    `matchFields metadata.name In [one node]` term; None when it names none (or several)."""
    if pod.spec.nodeName:
        return pod.spec.nodeName
    required = pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    for term in required.nodeSelectorTerms:
        for req in term.matchFields:
            if req.key == OBJECT_NAME_FIELD and req.operator == "In":
                return req.values[0] if len(req.values) == 1 else None
    return None


# ---- should this node run the pod? ----------------------------------------------------------


def _requirement_matches(req: pod_pb2.NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: pod_pb2.NodeSelectorTerm, node: Node) -> bool:
    """A node selector term: all its expressions (labels) and fields (metadata.name) hold; a
    term with neither matches no node, as in Kubernetes."""
    if not term.matchExpressions and not term.matchFields:
        return False
    labels = node.metadata.labels
    for req in term.matchExpressions:
        if not _requirement_matches(req, labels.get(req.key)):
            return False
    for req in term.matchFields:
        if req.key != OBJECT_NAME_FIELD or req.operator not in ("In", "NotIn"):
            return False  # the only field kube's node selectors accept
        if not _requirement_matches(req, node.metadata.name):
            return False
    return True


def fits_node_affinity(spec: pod_pb2.PodSpec, node: Node) -> bool:
    """kube's GetRequiredNodeAffinity(pod).Match(node): the nodeSelector, and one of the
    required node affinity terms when there are any."""
    labels = node.metadata.labels
    if any(labels.get(k) != v for k, v in spec.nodeSelector.items()):
        return False
    if not spec.affinity.nodeAffinity.HasField("requiredDuringSchedulingIgnoredDuringExecution"):
        return True
    required = spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    return any(term_matches(t, node) for t in required.nodeSelectorTerms)


def untolerated(
    taints: Iterable[node_pb2.Taint],
    tolerations: Iterable[pod_pb2.Toleration],
    effects: tuple[str, ...],
) -> node_pb2.Taint | None:
    """The first taint with one of `effects` that no toleration tolerates."""
    tols = list(tolerations)
    for taint in taints:
        if taint.effect in effects and not any(toleration_matches(t, taint) for t in tols):
            return taint
    return None


@dataclass(frozen=True)
class Eligibility:
    """NodeShouldRunDaemonPod's answer: should a pod be created there, and may a pod already
    there stay."""

    should_run: bool
    should_continue_running: bool


def eligibility_check(ds: DaemonSet) -> Callable[[Node], Eligibility]:
    """kube's NodeShouldRunDaemonPod for `ds`, with the pod it would create prepared once (a
    sync asks it of every node)."""
    spec = pod_pb2.PodSpec()
    spec.CopyFrom(ds.spec.template.spec)
    add_daemon_tolerations(spec)
    tolerations = list(spec.tolerations)

    def check(node: Node) -> Eligibility:
        if spec.nodeName and spec.nodeName != node.metadata.name:
            return Eligibility(False, False)
        if not fits_node_affinity(spec, node):
            return Eligibility(False, False)
        taints = node.spec.taints
        if not taints:
            return Eligibility(True, True)
        if untolerated(taints, tolerations, (NO_SCHEDULE, NO_EXECUTE)) is not None:
            # A running pod may stay unless a NoExecute taint would evict it.
            stay = untolerated(taints, tolerations, (NO_EXECUTE,)) is None
            return Eligibility(False, stay)
        return Eligibility(True, True)

    return check


def node_should_run(node: Node, ds: DaemonSet) -> Eligibility:
    """kube's NodeShouldRunDaemonPod over the pod `ds` would put on `node`."""
    return eligibility_check(ds)(node)


# ---- rolling updates -------------------------------------------------------------------------


def surge_count(ds: DaemonSet, desired: int) -> int:
    """kube's SurgeCount: 0 unless the strategy is RollingUpdate with a maxSurge."""
    strategy = ds.spec.updateStrategy
    if strategy.type != "RollingUpdate" or not strategy.HasField("rollingUpdate"):
        return 0
    return scaled_value(strategy.rollingUpdate.maxSurge, desired, round_up=True)


def unavailable_count(ds: DaemonSet, desired: int) -> int:
    """kube's UnavailableCount: 0 unless the strategy is RollingUpdate."""
    strategy = ds.spec.updateStrategy
    if strategy.type != "RollingUpdate" or not strategy.HasField("rollingUpdate"):
        return 0
    return scaled_value(strategy.rollingUpdate.maxUnavailable, desired, round_up=True)


def allows_surge(ds: DaemonSet) -> bool:
    try:
        return surge_count(ds, 1) > 0
    except ValueError:
        return False


def is_pod_updated(pod: Pod, hash_: str, generation: int | None) -> bool:
    """kube's IsPodUpdated: the pod carries the current hash, or the current template
    generation."""
    labels = pod.metadata.labels
    generation_matches = generation is not None and labels.get(TEMPLATE_GENERATION_LABEL) == str(
        generation
    )
    return (bool(hash_) and labels.get(HASH_LABEL) == hash_) or generation_matches


def updated_and_old(
    ds: DaemonSet, pods: Iterable[Pod], hash_: str
) -> tuple[Pod | None, Pod | None, bool]:
    """kube's findUpdatedPodsOnNode: the node's one new and one old pod (not deleting), and
    False when there is more than one of either."""
    new = old = None
    generation = template_generation(ds)
    for pod in pods:
        if is_terminating(pod):
            continue
        if is_pod_updated(pod, hash_, generation):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


@dataclass
class Plan:
    """What a rolling update step does: pods to delete, nodes to give a new pod."""

    delete: list[str] = field(default_factory=list)
    create: list[str] = field(default_factory=list)


def max_surge_and_unavailable(ds: DaemonSet, desired: int) -> tuple[int, int]:
    """kube's updatedDesiredNodeCounts limits; neither allowed means one unavailable."""
    max_surge = surge_count(ds, desired)
    max_unavailable = unavailable_count(ds, desired)
    if desired > 0 and max_unavailable == 0 and max_surge == 0:
        max_unavailable = 1
    return max_surge, max_unavailable


def rolling_update_plan(
    ds: DaemonSet,
    node_to_pods: Mapping[str, list[Pod]],
    hash_: str,
    should_run: Callable[[str], bool],
    now: datetime,
) -> Plan:
    """kube's rollingUpdate: which old pods to delete (and, when surging, which nodes get a new
    pod beside the old one) within maxUnavailable / maxSurge.

    `node_to_pods` has an entry (maybe empty) for every node that should run the pod and for
    every node with a pod; `should_run(node)` is NodeShouldRunDaemonPod's first answer. Nodes
    are visited in sorted order (kube visits a Go map, in no order).
    """
    desired = sum(1 for n in node_to_pods if should_run(n))
    max_surge, max_unavailable = max_surge_and_unavailable(ds, desired)
    min_ready = ds.spec.minReadySeconds

    def available(pod: Pod) -> bool:
        return is_pod_available(pod, min_ready, now)

    plan = Plan()
    if max_surge == 0:
        unavailable = 0
        replacements: list[str] = []
        candidates: list[str] = []
        for node in sorted(node_to_pods):
            new, old, ok = updated_and_old(ds, node_to_pods[node], hash_)
            if not ok or (new is None) == (old is None):
                unavailable += 1  # excess pods, or nothing / both: the manage loop's work
            elif new is not None:
                if not available(new):
                    unavailable += 1
            elif old is not None:
                if not available(old):
                    replacements.append(old.metadata.name)
                    unavailable += 1
                elif unavailable < max_unavailable:
                    candidates.append(old.metadata.name)
        remaining = max(0, min(max_unavailable - unavailable, len(candidates)))
        plan.delete = replacements + candidates[:remaining]
        return plan

    surging = 0
    num_available = 0
    should_not_run: list[str] = []
    candidate_nodes: list[str] = []
    allowed_nodes: list[str] = []
    for node in sorted(node_to_pods):
        new, old, ok = updated_and_old(ds, node_to_pods[node], hash_)
        if not ok:
            surging += 1
            continue
        if old is not None:
            num_available += available(old)
        elif new is not None:
            num_available += available(new)
        if old is None:
            continue
        if new is None:
            if not available(old):
                if not should_run(node):
                    plan.delete.append(old.metadata.name)
                else:
                    allowed_nodes.append(node)
            elif not should_run(node):
                should_not_run.append(old.metadata.name)
            elif surging < max_surge:
                candidate_nodes.append(node)
        elif not available(new):
            surging += 1
        else:
            plan.delete.append(old.metadata.name)
    # With surge the owner expects full availability: a pod on a node that no longer qualifies
    # goes only once another node's pod is available in its place.
    deletable = min(num_available - desired, len(should_not_run))
    if deletable > 0:
        plan.delete.extend(should_not_run[:deletable])
    remaining = max(0, min(max_surge - surging, len(candidate_nodes)))
    plan.create = allowed_nodes + candidate_nodes[:remaining]
    return plan


# ---- ControllerRevisions ---------------------------------------------------------------------


def compute_hash(template: Any, collision_count: int | None) -> str:
    """kube's controller.ComputeHash: FNV-32a over the template (here its canonical JSON, where
    kube hashes a dump of the Go struct), then the collision count as 4 little-endian bytes,
    and the decimal digest spelled in the safe alphabet (rand.SafeEncodeString)."""
    text = json.dumps(to_dict(template, zero_fields=False), sort_keys=True, separators=(",", ":"))
    data = text.encode()
    if collision_count is not None:
        data += struct.pack("<I", collision_count & 0xFFFFFFFF)
    return safe_encode_string(str(fnv32a(data)))


def revision_data(ds: DaemonSet) -> Struct:
    """kube's getPatch: the strategic merge patch that restores the template,
    {"spec": {"template": {..., "$patch": "replace"}}}."""
    template = to_dict(ds.spec.template, zero_fields=False)
    template["$patch"] = "replace"
    data = Struct()
    data.update({"spec": {"template": template}})
    return data


def revision_matches(ds: DaemonSet, revision: ControllerRevision) -> bool:
    """kube's Match: the revision holds the DaemonSet's current template."""
    return revision.data == revision_data(ds)


def new_revision(ds: DaemonSet, hash_: str, number: int) -> ControllerRevision:
    """kube's snapshot: `<ds>-<hash>`, the template's labels plus the hash, the DaemonSet's
    annotations, owned by it."""
    cr = ControllerRevision(apiVersion=API_VERSION, kind="ControllerRevision")
    cr.metadata.name = f"{ds.metadata.name}-{hash_}"
    cr.metadata.namespace = ds.metadata.namespace
    cr.metadata.labels.update(ds.spec.template.metadata.labels)
    cr.metadata.labels[HASH_LABEL] = hash_
    cr.metadata.annotations.update(ds.metadata.annotations)
    cr.metadata.ownerReferences.append(new_controller_ref(ds))
    cr.data.CopyFrom(revision_data(ds))
    cr.revision = number
    return cr


def owns(ds: DaemonSet, obj: Any) -> bool:
    return any(
        ref.controller and ref.uid == ds.metadata.uid for ref in obj.metadata.ownerReferences
    )


def selects(ds: DaemonSet, labels: Mapping[str, str]) -> bool:
    sel = ds.spec.selector
    if not sel.matchLabels and not sel.matchExpressions:
        return False
    return selector_matches(sel, labels)


def creation_order(pod: Pod) -> tuple[int, int, int, str]:
    """kube's podByCreationTimestampAndPhase: scheduled first, then oldest, then by name."""
    ts = pod.metadata.creationTimestamp
    return (0 if pod.spec.nodeName else 1, ts.seconds, ts.nanos, pod.metadata.name)
