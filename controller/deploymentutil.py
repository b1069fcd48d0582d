"""The arithmetic of the deployment controller, as pure functions over protobuf messages.

Modelled on kube-controller-manager's pkg/controller/deployment/util: resolving maxSurge and
maxUnavailable against spec.replicas (surge rounds up, unavailable down, never both 0), the size
of the new ReplicaSet in a rolling update, proportional scaling of every active ReplicaSet when a
Deployment is resized mid-rollout, the pod-template-hash, revisions and the replica annotations,
the orderings ReplicaSets are sorted by, and the status and conditions. No I/O and no clock of
its own (callers pass `now`), so every rule here is table-tested on its own
(tests/unit/controller/test_deploymentutil.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from google.protobuf.struct_pb2 import Value

from controller.util import (
    datetime_to_ts,
    fnv32a,
    safe_encode_string,
    scaled_value,
    ts_to_datetime,
)
from tinykube.manifest import to_dict
from tinykube.meta import annotation_int
from tinykube.v1 import deployment_pb2, replicaset_pb2

Deployment = deployment_pb2.Deployment
ReplicaSet = replicaset_pb2.ReplicaSet
Condition = deployment_pb2.DeploymentCondition

# Labels and annotations, as Kubernetes names them.
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
REVISION_HISTORY_ANNOTATION = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS_ANNOTATION = "deployment.kubernetes.io/max-replicas"
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
DEPRECATED_ROLLBACK_TO = "deprecated.deployment.rollback.to"
# Annotations of a Deployment that are not copied to its ReplicaSets.
_SKIP_COPY = frozenset(
    {
        LAST_APPLIED_ANNOTATION,
        REVISION_ANNOTATION,
        REVISION_HISTORY_ANNOTATION,
        DESIRED_REPLICAS_ANNOTATION,
        MAX_REPLICAS_ANNOTATION,
        DEPRECATED_ROLLBACK_TO,
    }
)
MAX_REVISION_HISTORY_CHARS = 2000

# Condition types and reasons (Kubernetes' deployment util constants).
AVAILABLE = "Available"
PROGRESSING = "Progressing"
REPLICA_FAILURE = "ReplicaFailure"
NEW_RS_REASON = "NewReplicaSetCreated"
FOUND_NEW_RS_REASON = "FoundNewReplicaSet"
RS_UPDATED_REASON = "ReplicaSetUpdated"
NEW_RS_AVAILABLE_REASON = "NewReplicaSetAvailable"
TIMED_OUT_REASON = "ProgressDeadlineExceeded"
FAILED_RS_CREATE_REASON = "ReplicaSetCreateError"
PAUSED_REASON = "DeploymentPaused"
RESUMED_REASON = "DeploymentResumed"
MIN_AVAILABLE_REASON = "MinimumReplicasAvailable"
MIN_UNAVAILABLE_REASON = "MinimumReplicasUnavailable"

RECREATE = "Recreate"
ROLLING_UPDATE = "RollingUpdate"
# progressDeadlineSeconds at math.MaxInt32 means "no deadline", as in Kubernetes.
NO_DEADLINE = 2**31 - 1


# ---- replica counts ----------------------------------------------------------------------------


def replicas_of(obj: Deployment | ReplicaSet) -> int:
    """spec.replicas, 1 when unset (the apiserver defaults it, so only fakes leave it out)."""
    return obj.spec.replicas if obj.spec.HasField("replicas") else 1


def resolve_fenceposts(max_surge: Value, max_unavailable: Value, desired: int) -> tuple[int, int]:
    """(surge, unavailable) for `desired` replicas; never both 0 (unavailable becomes 1)."""
    surge = scaled_value(max_surge, desired, True)
    unavailable = scaled_value(max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def is_rolling_update(d: Deployment) -> bool:
    return d.spec.strategy.type == ROLLING_UPDATE


def max_surge(d: Deployment) -> int:
    if not is_rolling_update(d):
        return 0
    ru = d.spec.strategy.rollingUpdate
    return resolve_fenceposts(ru.maxSurge, ru.maxUnavailable, replicas_of(d))[0]


def max_unavailable(d: Deployment) -> int:
    """At most spec.replicas; 0 for Recreate or a Deployment scaled to 0."""
    replicas = replicas_of(d)
    if not is_rolling_update(d) or replicas == 0:
        return 0
    ru = d.spec.strategy.rollingUpdate
    unavailable = resolve_fenceposts(ru.maxSurge, ru.maxUnavailable, replicas)[1]
    return min(unavailable, replicas)


def spec_total(rss: Iterable[ReplicaSet | None]) -> int:
    """GetReplicaCountForReplicaSets: the sum of spec.replicas."""
    return sum(replicas_of(rs) for rs in rss if rs is not None)


def actual_total(rss: Iterable[ReplicaSet | None]) -> int:
    return sum(rs.status.replicas for rs in rss if rs is not None)


def ready_total(rss: Iterable[ReplicaSet | None]) -> int:
    return sum(rs.status.readyReplicas for rs in rss if rs is not None)


def available_total(rss: Iterable[ReplicaSet | None]) -> int:
    return sum(rs.status.availableReplicas for rs in rss if rs is not None)


def pods_held(rs: ReplicaSet) -> int:
    """The pods `rs` may have: spec.replicas, or more while the pods of a scale-down are still
    counted in status.replicas (its ReplicaSet controller has not deleted them, or counted
    since)."""
    return max(replicas_of(rs), rs.status.replicas)


def available_kept(rs: ReplicaSet) -> int:
    """The available pods `rs` keeps: status.availableReplicas, but never more than
    spec.replicas. A status written before a scale-down took effect still counts the pods it
    will delete; its ReplicaSet controller deletes unavailable pods first, so at most
    min(available, spec.replicas) available pods remain."""
    return min(rs.status.availableReplicas, replicas_of(rs))


def active(rss: Iterable[ReplicaSet | None]) -> list[ReplicaSet]:
    """FilterActiveReplicaSets: the ones with spec.replicas > 0."""
    return [rs for rs in rss if rs is not None and replicas_of(rs) > 0]


def new_rs_new_replicas(d: Deployment, all_rss: Sequence[ReplicaSet], new_rs: ReplicaSet) -> int:
    """How big the new ReplicaSet may be now: RollingUpdate grows it while the pods of every
    ReplicaSet stay within replicas + maxSurge; Recreate makes it spec.replicas at once.

    Kubernetes counts spec.replicas only, so right after an old ReplicaSet is scaled down the
    new one grows while the old pods are still there (status.replicas above the ceiling until
    they go); here an old ReplicaSet counts its status.replicas until its pods are gone."""
    replicas = replicas_of(d)
    if is_rolling_update(d):
        current = sum(pods_held(rs) for rs in all_rss)
        max_total = replicas + max_surge(d)
        if current >= max_total:
            return replicas_of(new_rs)
        scale_up = min(max_total - current, replicas - replicas_of(new_rs))
        return replicas_of(new_rs) + scale_up
    if d.spec.strategy.type == RECREATE:
        return replicas
    raise ValueError(f"deployment type {d.spec.strategy.type} isn't supported")


def round_half_away(x: float) -> int:
    """Go's math.Round: halves away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def replica_set_fraction(rs: ReplicaSet, d: Deployment) -> int:
    """How much `rs` grows (or shrinks) when the Deployment is resized: its share of the new
    allowed total, by the max-replicas annotation it was last sized for."""
    if replicas_of(d) == 0:
        return -replicas_of(rs)
    deployment_replicas = replicas_of(d) + max_surge(d)
    annotated = annotation_int(rs.metadata.annotations, MAX_REPLICAS_ANNOTATION)
    if annotated is None or annotated == 0:
        # Kubernetes falls back to status.replicas (and divides by it as is).
        annotated = d.status.replicas
    if annotated == 0:
        return 0
    new_size = replicas_of(rs) * deployment_replicas / annotated
    return round_half_away(new_size) - replicas_of(rs)


def proportion(rs: ReplicaSet | None, d: Deployment, to_add: int, added: int) -> int:
    """GetProportion: the replicas `rs` gets of `to_add`, never past what is left of it."""
    if rs is None or replicas_of(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = replica_set_fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def proportional_sizes(d: Deployment, rss: Sequence[ReplicaSet]) -> dict[str, int]:
    """The new size of every active ReplicaSet when a rolling Deployment is resized while more
    than one is active: the difference to replicas + maxSurge spread by each one's share, the
    largest first (newer first on ties when growing, older first when shrinking), the rounding
    leftover to the first."""
    all_rss = active(rss)
    allowed = replicas_of(d) + max_surge(d) if replicas_of(d) > 0 else 0
    to_add = allowed - spec_total(all_rss)
    if to_add > 0:
        all_rss.sort(key=lambda rs: (-replicas_of(rs), *_newer_first(rs)))
    elif to_add < 0:
        all_rss.sort(key=lambda rs: (-replicas_of(rs), *creation_key(rs)))
    sizes: dict[str, int] = {}
    added = 0
    for rs in all_rss:
        if to_add != 0:
            share = proportion(rs, d, to_add, added)
            sizes[rs.metadata.name] = replicas_of(rs) + share
            added += share
        else:
            sizes[rs.metadata.name] = replicas_of(rs)
    if all_rss and to_add != 0:
        first = all_rss[0].metadata.name
        sizes[first] = max(0, sizes[first] + to_add - added)
    return sizes


def is_saturated(d: Deployment, rs: ReplicaSet | None) -> bool:
    """The new ReplicaSet has all the Deployment's replicas, sized for them and available."""
    if rs is None:
        return False
    desired = annotation_int(rs.metadata.annotations, DESIRED_REPLICAS_ANNOTATION)
    if desired is None:
        return False
    replicas = replicas_of(d)
    return (
        replicas_of(rs) == replicas
        and desired == replicas
        and rs.status.availableReplicas == replicas
    )


def find_active_or_latest(new_rs: ReplicaSet | None, old_rss: Sequence[ReplicaSet]) -> Any:
    """The only active ReplicaSet; with none active, the new one or else the newest old one;
    None when more than one is active."""
    if new_rs is None and not old_rss:
        return None
    newest_first = sorted(old_rss, key=creation_key, reverse=True)
    all_active = active([*newest_first, new_rs])
    if not all_active:
        return new_rs if new_rs is not None else newest_first[0]
    if len(all_active) == 1:
        return all_active[0]
    return None


# ---- orderings ---------------------------------------------------------------------------------


def creation_key(rs: ReplicaSet) -> tuple[int, int, str]:
    """ReplicaSetsByCreationTimestamp: older first, by name on ties."""
    ts = rs.metadata.creationTimestamp
    return (ts.seconds, ts.nanos, rs.metadata.name)


def _newer_first(rs: ReplicaSet) -> tuple[int, int, str]:
    ts = rs.metadata.creationTimestamp
    # ReplicaSetsBySizeNewer breaks ties on the timestamp only; the name keeps it total.
    return (-ts.seconds, -ts.nanos, rs.metadata.name)


def revision_of(obj: Deployment | ReplicaSet) -> int:
    """The deployment.kubernetes.io/revision annotation; 0 when missing or not a number."""
    try:
        return int(obj.metadata.annotations.get(REVISION_ANNOTATION, "0"))
    except ValueError:
        return 0


def revision_key(rs: ReplicaSet) -> tuple[int, int, int, str]:
    """ReplicaSetsByRevision: lower revision first, then by creation."""
    return (revision_of(rs), *creation_key(rs))


def max_revision(rss: Iterable[ReplicaSet]) -> int:
    return max((revision_of(rs) for rs in rss), default=0)


# ---- templates and the hash ----------------------------------------------------------------


def _pruned(value: Any) -> Any:
    """`value` without empty objects and lists, recursively: `resources: {}` is no resources.

    Go compares struct fields by value, so Kubernetes sees an empty ResourceRequirements and a
    missing one as the same template; a protobuf message that is set but empty is not equal
    to an unset one, and `kubectl rollout undo` sends such empty objects back.
    """
    if isinstance(value, dict):
        out = {k: p for k, v in value.items() if (p := _pruned(v)) not in ({}, [])}
        return out
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def canonical_template(template: replicaset_pb2.PodTemplateSpec) -> dict[str, Any]:
    """The template as Kubernetes JSON, without the pod-template-hash label and empty parts."""
    doc: dict[str, Any] = _pruned(to_dict(template, zero_fields=False))
    labels = doc.get("metadata", {}).get("labels")
    if labels is not None and POD_TEMPLATE_HASH_LABEL in labels:
        labels = {k: v for k, v in labels.items() if k != POD_TEMPLATE_HASH_LABEL}
        doc["metadata"] = {**doc["metadata"], "labels": labels}
        if not labels:
            del doc["metadata"]["labels"]
        if not doc["metadata"]:
            del doc["metadata"]
    return doc


def template_bytes(template: replicaset_pb2.PodTemplateSpec) -> bytes:
    """The bytes hashed for a template: its canonical JSON with sorted keys and no spaces.

    Kubernetes hashes Go's spew dump of the PodTemplateSpec struct instead; the JSON says the
    same (every set field, nothing empty) in a form a Python program can reproduce.
    """
    return json.dumps(
        _pruned(to_dict(template, zero_fields=False)), sort_keys=True, separators=(",", ":")
    ).encode()


def compute_hash(template: replicaset_pb2.PodTemplateSpec, collision_count: int | None) -> str:
    """The pod-template-hash: FNV-32a over the template, then the collision count as 8 bytes
    (a little-endian uint32 and four zero bytes, as Kubernetes writes it), printed in decimal
    and made name-safe."""
    data = template_bytes(template)
    if collision_count is not None:
        data += (collision_count & 0xFFFFFFFF).to_bytes(4, "little") + bytes(4)
    return safe_encode_string(str(fnv32a(data)))


def template_key(template: replicaset_pb2.PodTemplateSpec) -> bytes:
    """What `equal_ignore_hash` compares: a digest (BLAKE2b, 128 bits) of the canonical
    template's JSON with sorted keys.

    A Deployment sync compares the Deployment's template with every ReplicaSet's several times
    (find_new_rs, find_old_rss, the scaling-event check), and the canonical form costs a walk
    of the message in Python (about 0.25 ms for a small pod) while templates rarely change: the
    digest is memoized by the template's serialized bytes (upb's deterministic encoding, a few
    microseconds). Equal bytes are the same template; templates whose bytes differ (one has the
    pod-template-hash label, or an empty `resources: {}`) still meet at the same digest.
    """
    return _canonical_digest(template.SerializeToString(deterministic=True))


# A template's entry is its bytes and a digest, about 0.5 KiB for a small pod: 16,384 cover the
# Deployments and ReplicaSets of a 1,000-node load test's roll (~10,000 templates) in ~8 MiB.
@functools.lru_cache(maxsize=16384)
def _canonical_digest(serialized: bytes) -> bytes:
    doc = canonical_template(replicaset_pb2.PodTemplateSpec.FromString(serialized))
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.blake2b(text, digest_size=16).digest()


def equal_ignore_hash(a: replicaset_pb2.PodTemplateSpec, b: replicaset_pb2.PodTemplateSpec) -> bool:
    """The templates are equal but for the pod-template-hash label (and empty parts)."""
    return a == b or template_key(a) == template_key(b)


def find_new_rs(d: Deployment, rss: Sequence[ReplicaSet]) -> ReplicaSet | None:
    """The oldest ReplicaSet whose template is the Deployment's (there should be one at most)."""
    want = template_key(d.spec.template)
    for rs in sorted(rss, key=creation_key):
        if template_key(rs.spec.template) == want:
            return rs
    return None


def find_old_rss(
    d: Deployment, rss: Sequence[ReplicaSet]
) -> tuple[list[ReplicaSet], list[ReplicaSet]]:
    """(old ones with pods, all old ones): every ReplicaSet but the new one."""
    new_rs = find_new_rs(d, rss)
    all_old = [rs for rs in rss if new_rs is None or rs.metadata.uid != new_rs.metadata.uid]
    return [rs for rs in all_old if replicas_of(rs) != 0], all_old


# ---- annotations ---------------------------------------------------------------------------


def replicas_annotations_need_update(rs: ReplicaSet, desired: int, max_replicas: int) -> bool:
    ann = rs.metadata.annotations
    return ann.get(DESIRED_REPLICAS_ANNOTATION) != str(desired) or ann.get(
        MAX_REPLICAS_ANNOTATION
    ) != str(max_replicas)


def set_replicas_annotations(rs: ReplicaSet, desired: int, max_replicas: int) -> bool:
    changed = replicas_annotations_need_update(rs, desired, max_replicas)
    rs.metadata.annotations[DESIRED_REPLICAS_ANNOTATION] = str(desired)
    rs.metadata.annotations[MAX_REPLICAS_ANNOTATION] = str(max_replicas)
    return changed


def copy_deployment_annotations(d: Deployment, rs: ReplicaSet) -> bool:
    """The Deployment's own annotations onto the ReplicaSet (not the controller's)."""
    changed = False
    for k, v in d.metadata.annotations.items():
        if k in _SKIP_COPY or rs.metadata.annotations.get(k) == v:
            continue
        rs.metadata.annotations[k] = v
        changed = True
    return changed


def set_new_rs_annotations(
    d: Deployment,
    rs: ReplicaSet,
    new_revision: str,
    exists: bool,
    history_limit_chars: int = MAX_REVISION_HISTORY_CHARS,
) -> bool:
    """SetNewReplicaSetAnnotations: the Deployment's annotations, the new revision (a ReplicaSet
    re-used by a rollback keeps its earlier revisions in revision-history), and on creation the
    replica annotations. True if anything changed."""
    changed = copy_deployment_annotations(d, rs)
    ann = rs.metadata.annotations
    old_revision = ann.get(REVISION_ANNOTATION, "")
    try:
        old_int = int(old_revision) if old_revision else 0
    except ValueError:
        return False
    try:
        new_int = int(new_revision)
    except ValueError:
        return False
    if old_int < new_int:
        ann[REVISION_ANNOTATION] = new_revision
        changed = True
    if old_revision and old_int < new_int:
        history = ann.get(REVISION_HISTORY_ANNOTATION, "")
        if not history:
            ann[REVISION_HISTORY_ANNOTATION] = old_revision
        else:
            olds = history.split(",")
            total = len(history) + len(old_revision) + 1
            start = 0
            while total > history_limit_chars and start < len(olds):
                total -= len(olds[start]) + 1
                start += 1
            if total <= history_limit_chars:
                ann[REVISION_HISTORY_ANNOTATION] = ",".join([*olds[start:], old_revision])
    if not exists and set_replicas_annotations(rs, replicas_of(d), replicas_of(d) + max_surge(d)):
        changed = True
    return changed


# ---- conditions and status -------------------------------------------------------------------


def new_condition(type_: str, status: str, reason: str, message: str, now: datetime) -> Condition:
    ts = datetime_to_ts(now)
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        lastUpdateTime=ts,
        lastTransitionTime=ts,
    )


def get_condition(
    status: deployment_pb2.DeploymentStatus, type_: str
) -> deployment_pb2.DeploymentCondition | None:
    for cond in status.conditions:
        if cond.type == type_:
            return cond
    return None


def set_condition(status: deployment_pb2.DeploymentStatus, cond: Condition) -> None:
    """SetDeploymentCondition: the same status and reason is left alone; the same status keeps
    its lastTransitionTime; the new condition goes last."""
    current = get_condition(status, cond.type)
    if current is not None and current.status == cond.status and current.reason == cond.reason:
        return
    new = Condition()
    new.CopyFrom(cond)
    if current is not None and current.status == cond.status:
        new.lastTransitionTime.CopyFrom(current.lastTransitionTime)
    remove_condition(status, cond.type)
    status.conditions.append(new)


def remove_condition(status: deployment_pb2.DeploymentStatus, type_: str) -> None:
    keep = [c for c in status.conditions if c.type != type_]
    if len(keep) != len(status.conditions):
        del status.conditions[:]
        status.conditions.extend(keep)


def has_progress_deadline(d: Deployment) -> bool:
    return d.spec.HasField("progressDeadlineSeconds") and (
        d.spec.progressDeadlineSeconds != NO_DEADLINE
    )


def calculate_status(
    all_rss: Sequence[ReplicaSet | None],
    new_rs: ReplicaSet | None,
    d: Deployment,
    now: datetime,
    terminating: int | None = None,
) -> deployment_pb2.DeploymentStatus:
    """The status the ReplicaSets add up to, with the Available condition for minimum
    availability (replicas - maxUnavailable); other conditions carried over."""
    available = available_total(all_rss)
    status = deployment_pb2.DeploymentStatus(
        observedGeneration=d.metadata.generation,
        replicas=actual_total(all_rss),
        updatedReplicas=actual_total([new_rs]),
        readyReplicas=ready_total(all_rss),
        availableReplicas=available,
        unavailableReplicas=max(0, spec_total(all_rss) - available),
    )
    if terminating is not None:
        status.terminatingReplicas = terminating
    if d.status.HasField("collisionCount"):
        status.collisionCount = d.status.collisionCount
    status.conditions.extend(d.status.conditions)
    if available >= replicas_of(d) - max_unavailable(d):
        cond = new_condition(
            AVAILABLE, "True", MIN_AVAILABLE_REASON, "Deployment has minimum availability.", now
        )
    else:
        cond = new_condition(
            AVAILABLE,
            "False",
            MIN_UNAVAILABLE_REASON,
            "Deployment does not have minimum availability.",
            now,
        )
    set_condition(status, cond)
    return status


def deployment_complete(d: Deployment, status: deployment_pb2.DeploymentStatus) -> bool:
    replicas = replicas_of(d)
    return (
        status.updatedReplicas == replicas
        and status.replicas == replicas
        and status.availableReplicas == replicas
        and status.observedGeneration >= d.metadata.generation
    )


def deployment_progressing(d: Deployment, status: deployment_pb2.DeploymentStatus) -> bool:
    """Progress since the stored status: more updated, fewer old, more ready or available."""
    old = d.status
    old_olds = old.replicas - old.updatedReplicas
    new_olds = status.replicas - status.updatedReplicas
    return (
        status.updatedReplicas > old.updatedReplicas
        or new_olds < old_olds
        or status.readyReplicas > old.readyReplicas
        or status.availableReplicas > old.availableReplicas
    )


def deployment_timed_out(
    d: Deployment, status: deployment_pb2.DeploymentStatus, now: datetime
) -> bool:
    """No progress for progressDeadlineSeconds since the Progressing condition's last update."""
    if not has_progress_deadline(d):
        return False
    cond = get_condition(status, PROGRESSING)
    if cond is None or cond.reason == NEW_RS_AVAILABLE_REASON:
        return False
    if cond.reason == TIMED_OUT_REASON:
        return True
    since = (now - ts_to_datetime(cond.lastUpdateTime)).total_seconds()
    return since > d.spec.progressDeadlineSeconds


def replica_failure(
    all_rss: Sequence[ReplicaSet | None], new_rs: ReplicaSet | None
) -> Condition | None:
    """getReplicaFailures: a ReplicaSet's ReplicaFailure condition (the new one's first)."""
    for rs in (new_rs, *all_rss):
        if rs is None:
            continue
        for cond in rs.status.conditions:
            if cond.type == REPLICA_FAILURE:
                return Condition(
                    type=cond.type,
                    status=cond.status,
                    reason=cond.reason,
                    message=cond.message,
                    lastUpdateTime=cond.lastTransitionTime,
                    lastTransitionTime=cond.lastTransitionTime,
                )
    return None


def rollout_status(
    d: Deployment,
    all_rss: Sequence[ReplicaSet | None],
    new_rs: ReplicaSet | None,
    now: datetime,
    terminating: int | None = None,
) -> deployment_pb2.DeploymentStatus:
    """syncRolloutStatus's new status: calculate_status plus the Progressing condition (complete,
    progressing, or timed out against progressDeadlineSeconds) and ReplicaFailure."""
    status = calculate_status(all_rss, new_rs, d, now, terminating)
    if not has_progress_deadline(d):
        remove_condition(status, PROGRESSING)
    current = get_condition(d.status, PROGRESSING)
    complete_before = (
        status.replicas == status.updatedReplicas
        and current is not None
        and current.reason == NEW_RS_AVAILABLE_REASON
    )
    what = f'ReplicaSet "{new_rs.metadata.name}"' if new_rs is not None else None
    what = what or f'Deployment "{d.metadata.name}"'
    if has_progress_deadline(d) and not complete_before:
        if deployment_complete(d, status):
            set_condition(
                status,
                new_condition(
                    PROGRESSING,
                    "True",
                    NEW_RS_AVAILABLE_REASON,
                    f"{what} has successfully progressed.",
                    now,
                ),
            )
        elif deployment_progressing(d, status):
            cond = new_condition(
                PROGRESSING, "True", RS_UPDATED_REASON, f"{what} is progressing.", now
            )
            if current is not None:
                if current.status == "True":
                    cond.lastTransitionTime.CopyFrom(current.lastTransitionTime)
                remove_condition(status, PROGRESSING)
            set_condition(status, cond)
        elif deployment_timed_out(d, status, now):
            set_condition(
                status,
                new_condition(
                    PROGRESSING,
                    "False",
                    TIMED_OUT_REASON,
                    f"{what} has timed out progressing.",
                    now,
                ),
            )
    failure = replica_failure(all_rss, new_rs)
    if failure is not None:
        set_condition(status, failure)
    else:
        remove_condition(status, REPLICA_FAILURE)
    return status


def cleanup_unhealthy_plan(old_rss: Sequence[ReplicaSet], max_cleanup: int) -> dict[str, int]:
    """cleanupUnhealthyReplicas: new sizes (by name) that drop the old ReplicaSets' pods that
    are not available, oldest ReplicaSet first, at most `max_cleanup` pods in all."""
    plan: dict[str, int] = {}
    total = 0
    for rs in sorted(old_rss, key=creation_key):
        if total >= max_cleanup:
            break
        replicas = replicas_of(rs)
        unhealthy = replicas - available_kept(rs)
        if replicas == 0 or unhealthy == 0:
            continue
        scaled = min(max_cleanup - total, unhealthy)
        plan[rs.metadata.name] = replicas - scaled
        total += scaled
    return plan


def scale_down_old_plan(
    d: Deployment, all_rss: Sequence[ReplicaSet | None], old_rss: Sequence[ReplicaSet]
) -> dict[str, int]:
    """scaleDownOldReplicaSetsForRollingUpdate: new sizes (by name) that take available pods
    from the old ReplicaSets, oldest first, down to replicas - maxUnavailable available.

    Available pods are counted as each ReplicaSet keeps them (`available_kept`), not as
    status.availableReplicas sums them: a status not yet caught up with the last scale-down
    still counts the pods that scale-down removes, and taking them again pushed availability
    below the minimum. (Kubernetes sums the statuses, but its cleanupUnhealthyReplicas gives
    up the whole scale-down with an "invalid request to scale down" error when an old
    ReplicaSet reports more available pods than its spec, which mostly hides this there.)"""
    min_available = replicas_of(d) - max_unavailable(d)
    available = sum(available_kept(rs) for rs in all_rss if rs is not None)
    if available <= min_available:
        return {}
    to_scale = available - min_available
    plan: dict[str, int] = {}
    total = 0
    for rs in sorted(old_rss, key=creation_key):
        if total >= to_scale:
            break
        replicas = replicas_of(rs)
        if replicas == 0:
            continue
        count = min(replicas, to_scale - total)
        plan[rs.metadata.name] = replicas - count
        total += count
    return plan


def history_to_delete(old_rss: Sequence[ReplicaSet], limit: int) -> list[ReplicaSet]:
    """cleanupDeployment: the oldest revisions beyond `limit` that are empty and settled."""
    cleanable = [rs for rs in old_rss if not rs.metadata.HasField("deletionTimestamp")]
    diff = len(cleanable) - limit
    if diff <= 0:
        return []
    out = []
    for rs in sorted(cleanable, key=revision_key)[:diff]:
        if (
            rs.status.replicas != 0
            or replicas_of(rs) != 0
            or rs.metadata.generation > rs.status.observedGeneration
        ):
            continue
        out.append(rs)
    return out
