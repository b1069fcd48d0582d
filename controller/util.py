"""Small helpers every controller shares: keys, label selectors, owner references, pod state.

Pure functions over the generated protobuf messages; no I/O, no clock of their own.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from google.protobuf.struct_pb2 import Value
from google.protobuf.timestamp_pb2 import Timestamp

from tinykube.meta import NAME_ALPHABET, int_or_string, timestamp
from tinykube.v1 import meta_pb2, pod_pb2


class HasMeta(Protocol):
    @property
    def metadata(self) -> meta_pb2.ObjectMeta: ...


T = TypeVar("T")


def key_of(obj: HasMeta) -> str:
    """The informer key: "namespace/name", or "name" for cluster-scoped objects."""
    meta = obj.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


def split_key(key: str) -> tuple[str, str]:
    """("namespace", "name") from an informer key; namespace is "" when cluster-scoped."""
    if "/" in key:
        namespace, name = key.split("/", 1)
        return namespace, name
    return "", key


def safe_encode_string(text: str) -> str:
    """Kubernetes' rand.SafeEncodeString: every character mapped into the name alphabet."""
    return "".join(NAME_ALPHABET[ord(ch) % len(NAME_ALPHABET)] for ch in text)


def fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits (Go's hash/fnv New32a): what Kubernetes' ComputeHash feeds."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def scaled_value(value: Value, total: int, round_up: bool) -> int:
    """Kubernetes' GetScaledValueFromIntOrPercent on an IntOrString Value, unset as 0. Raises
    ValueError for anything else (validation keeps such values out)."""
    if value.WhichOneof("kind") in (None, "null_value"):
        return 0  # unset counts as 0, as Kubernetes' ValueOrDefault(nil, 0)
    return scaled_int_or_percent(int_or_string(value), total, round_up)


def scaled_int_or_percent(held: object, total: int, round_up: bool) -> int:
    """Kubernetes' GetScaledValueFromIntOrPercent: a number as is, "N%" of `total` rounded up or
    down ("50%" of 3: 2 up, 1 down). Raises ValueError in kube's words for anything else."""
    if isinstance(held, int):
        return held
    if not isinstance(held, str) or not held.endswith("%"):
        raise ValueError("invalid value for IntOrString: invalid type: string is not a percentage")
    try:
        percent = int(held[:-1])
    except ValueError:
        raise ValueError(f'invalid value "{held}": not a percentage') from None
    return -(-percent * total // 100) if round_up else percent * total // 100


def random_suffix(rng: random.Random | None = None, length: int = 5) -> str:
    chooser = rng or random
    return "".join(chooser.choice(NAME_ALPHABET) for _ in range(length))


def _requirement_matches(req: meta_pb2.LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "In":
        return present and labels[req.key] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.key] not in req.values
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    return False  # an unknown operator selects nothing, as Kubernetes' conversion would reject it


def selector_matches(selector: meta_pb2.LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy a metav1.LabelSelector (matchLabels AND matchExpressions)."""
    for k, v in selector.matchLabels.items():
        if labels.get(k) != v:
            return False
    return all(_requirement_matches(r, labels) for r in selector.matchExpressions)


def selector_is_empty(selector: meta_pb2.LabelSelector) -> bool:
    """An empty selector; a ReplicaSet with one would select every pod, so it selects none."""
    return not selector.matchLabels and not selector.matchExpressions


def controller_ref(meta: meta_pb2.ObjectMeta) -> meta_pb2.OwnerReference | None:
    """The owner reference with controller=true, if any."""
    for ref in meta.ownerReferences:
        if ref.controller:
            return ref
    return None


M = TypeVar("M", bound=HasMeta)
M_co = TypeVar("M_co", bound=HasMeta, covariant=True)


class _Cache(Protocol[M_co]):
    def get(self, key: str) -> M_co | None: ...


def resolve_controller_ref(
    namespace: str, ref: meta_pb2.OwnerReference | None, kind: str, cache: _Cache[M]
) -> M | None:
    """client-go's resolveControllerRef: the `kind` object in `namespace` that a controller
    reference names, from an informer cache, if it is the same incarnation (its uid); else
    None (no reference, another kind, gone, or a new object of the same name)."""
    if ref is None or ref.kind != kind:
        return None
    owner = cache.get(f"{namespace}/{ref.name}")
    if owner is None or owner.metadata.uid != ref.uid:
        return None
    return owner


def is_terminating(obj: HasMeta) -> bool:
    return obj.metadata.HasField("deletionTimestamp")


def is_pod_active(pod: pod_pb2.Pod) -> bool:
    """Kubernetes' FilterActivePods: not finished and not being deleted."""
    return pod.status.phase not in ("Succeeded", "Failed") and not is_terminating(pod)


def pod_condition(pod: pod_pb2.Pod, type_: str) -> pod_pb2.PodCondition | None:
    for cond in pod.status.conditions:
        if cond.type == type_:
            return cond
    return None


def is_pod_ready(pod: pod_pb2.Pod) -> bool:
    cond = pod_condition(pod, "Ready")
    return cond is not None and cond.status == "True"


def ts_to_datetime(ts: Timestamp) -> datetime:
    return datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=UTC)


def datetime_to_ts(when: datetime) -> Timestamp:
    """A metav1.Time: whole seconds, as Kubernetes prints them."""
    return timestamp(when)


def is_pod_available(pod: pod_pb2.Pod, min_ready_seconds: int, now: datetime) -> bool:
    """Ready for at least minReadySeconds, judged from the Ready condition's transition time."""
    cond = pod_condition(pod, "Ready")
    if cond is None or cond.status != "True":
        return False
    if min_ready_seconds <= 0:
        return True
    if not cond.HasField("lastTransitionTime"):
        return False
    ready_for = (now - ts_to_datetime(cond.lastTransitionTime)).total_seconds()
    return ready_for >= min_ready_seconds
