"""What the scheduler needs to know about a pod, computed once per pod version.

`PodInfo.from_pod` parses every quantity of a pod once (the scheduling cycle must not parse
strings), applying kube-scheduler's request rules:
- a container with only limits requests its limits;
- a pod requests max(largest init container, sum of app containers) per resource;
- for scoring, a container without a cpu/memory request counts as 100m / 200Mi ("non-zero"
  requests), while fitting still uses the real (possibly zero) request.
`signature` identifies the parts of a pod that node-static plugins read (selectors, affinity,
tolerations, images, nodeName) so identical pods can share those plugins' results.
`affinity` holds the pod's inter-pod (anti-)affinity terms parsed once (kube's PodInfo
RequiredAffinityTerms and friends), or None for the common pod without any.

Pure data, no I/O; safe to share between tasks because it is never mutated after creation.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tinykube.quantity import milli_value, value
from tinykube.selectors import EVERYTHING, LabelSelector, SelectorError, from_proto
from tinykube.v1 import pod_pb2

# kube-scheduler's defaults for containers without a request, used only for scoring.
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

DEFAULT_SCHEDULER_NAME = "tinykube"

INT64_MAX = 2**63 - 1


class PodRejectedError(ValueError):
    """A pod the scheduler cannot account for: a request (summed over its containers) past an
    int64 in its unit, stored before the apiserver refused such values or by another version.
    It is refused before it touches the cache or the queue."""


@dataclass(frozen=True)
class HostPort:
    ip: str  # "0.0.0.0" when unset
    protocol: str  # "TCP" when unset
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """Same port and protocol, and either IP is the wildcard or both are equal."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        return self.ip == "0.0.0.0" or other.ip == "0.0.0.0" or self.ip == other.ip


@dataclass(frozen=True)
class AffinityTerm:
    """A PodAffinityTerm as kube's framework.AffinityTerm: the pods it selects are those in
    `namespaces` (the owner's own when both namespaces and namespaceSelector are unset) or in a
    namespace whose labels `namespace_selector` matches (None: unset, selects none; EVERYTHING
    for `{}`), whose labels match `selector` (None: labelSelector unset, matches no pod)."""

    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    selector: LabelSelector | None
    topology_key: str

    def matches(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str] | None
    ) -> bool:
        if self.selector is None:
            return False
        if namespace not in self.namespaces and not (
            self.namespace_selector is not None and self.namespace_selector.matches(ns_labels or {})
        ):
            return False
        return self.selector.matches(labels)

    @property
    def all_namespaces(self) -> bool:
        """namespaceSelector `{}`: pods of every namespace."""
        return self.namespace_selector is not None and self.namespace_selector.empty


@dataclass(frozen=True)
class WeightedAffinityTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True)
class PodAffinityTerms:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()
    parse_error: str = ""  # a selector the apiserver should have refused; its term is dropped


def _affinity_term(namespace: str, t: pod_pb2.PodAffinityTerm) -> AffinityTerm:
    ns_sel = from_proto(t.namespaceSelector) if t.HasField("namespaceSelector") else None
    if ns_sel is not None and ns_sel.empty:
        ns_sel = EVERYTHING
    names = frozenset(t.namespaces)
    if not names and ns_sel is None:
        names = frozenset({namespace})
    selector = from_proto(t.labelSelector) if t.HasField("labelSelector") else None
    return AffinityTerm(names, ns_sel, selector, t.topologyKey)


def parse_affinity(pod: pod_pb2.Pod) -> PodAffinityTerms | None:
    spec = pod.spec
    if not spec.HasField("affinity"):
        return None
    aff = spec.affinity
    if not aff.HasField("podAffinity") and not aff.HasField("podAntiAffinity"):
        return None
    ns = pod.metadata.namespace
    errors: list[str] = []

    def terms(src: Iterable[pod_pb2.PodAffinityTerm]) -> tuple[AffinityTerm, ...]:
        out = []
        for t in src:
            try:
                out.append(_affinity_term(ns, t))
            except SelectorError as exc:
                errors.append(str(exc))
        return tuple(out)

    def weighted(
        src: Iterable[pod_pb2.WeightedPodAffinityTerm],
    ) -> tuple[WeightedAffinityTerm, ...]:
        out = []
        for w in src:
            try:
                out.append(WeightedAffinityTerm(w.weight, _affinity_term(ns, w.podAffinityTerm)))
            except SelectorError as exc:
                errors.append(str(exc))
        return tuple(out)

    pa, paa = aff.podAffinity, aff.podAntiAffinity
    parsed = PodAffinityTerms(
        terms(pa.requiredDuringSchedulingIgnoredDuringExecution),
        terms(paa.requiredDuringSchedulingIgnoredDuringExecution),
        weighted(pa.preferredDuringSchedulingIgnoredDuringExecution),
        weighted(paa.preferredDuringSchedulingIgnoredDuringExecution),
        "; ".join(errors),
    )
    if parsed == PodAffinityTerms():
        return None
    return parsed


# Slots: one per pod in the cluster (the cache's); 192 bytes an instance against 248 with
# Python 3.11's inline attribute values (a materialised __dict__ would cost more).
@dataclass(frozen=True, slots=True)
class PodInfo:
    key: str  # "namespace/name"
    namespace: str
    name: str
    uid: str
    pod: pod_pb2.Pod
    priority: int
    created: float  # creation timestamp, seconds since the epoch (queue order)
    node_name: str
    scheduler_name: str
    cpu: int  # milli
    memory: int  # bytes
    extended: Mapping[str, int]  # whole units (kube-scheduler's ScalarResources), non-zero only
    nz_cpu: int
    nz_memory: int
    host_ports: tuple[HostPort, ...]
    images: tuple[str, ...]
    signature: bytes = field(repr=False)
    terminating: bool = False  # deletionTimestamp set
    affinity: PodAffinityTerms | None = None  # inter-pod (anti-)affinity terms, if any

    @property
    def zero_request(self) -> bool:
        return self.cpu == 0 and self.memory == 0 and not self.extended

    @classmethod
    def from_pod(cls, pod: pod_pb2.Pod) -> PodInfo:
        spec = pod.spec
        meta = pod.metadata
        cpu, memory, extended, nz_cpu, nz_memory = _pod_requests(spec)
        for resource, amount in (
            (CPU, max(cpu, nz_cpu)),
            (MEMORY, max(memory, nz_memory)),
            *extended.items(),
        ):
            if amount > INT64_MAX:
                raise PodRejectedError(
                    f"pod {meta.namespace}/{meta.name}: its {resource} requests sum to more than "
                    "an int64 holds in their unit"
                )
        # Unlike kube-scheduler, a bare containerPort counts too: in tinykube's process runtime
        # pods share their node's network, so the port a container listens on is taken on the
        # node (the kubelet checks the same number: hostPort if set, else containerPort).
        ports = tuple(
            HostPort(p.hostIP or "0.0.0.0", p.protocol or "TCP", p.hostPort or p.containerPort)
            for c in spec.containers
            for p in c.ports
            if (p.hostPort or p.containerPort) > 0
        )
        images = tuple(normalize_image(c.image) for c in spec.containers if c.image)
        sig = hashlib.blake2b(digest_size=16)
        for k in sorted(spec.nodeSelector):
            sig.update(f"s{k}={spec.nodeSelector[k]}\0".encode())
        sig.update(b"a" + spec.affinity.SerializeToString(deterministic=True))
        for t in spec.tolerations:
            sig.update(b"t" + t.SerializeToString(deterministic=True))
        sig.update(f"n{spec.nodeName}\0".encode())
        for im in images:
            sig.update(f"i{im}\0".encode())
        sig.update(f"c{len(spec.containers)}\0".encode())  # ImageLocality's threshold
        created = 0.0
        if meta.HasField("creationTimestamp"):
            created = meta.creationTimestamp.seconds + meta.creationTimestamp.nanos / 1e9
        return cls(
            key=f"{meta.namespace}/{meta.name}",
            namespace=meta.namespace,
            name=meta.name,
            uid=meta.uid,
            pod=pod,
            priority=spec.priority if spec.HasField("priority") else 0,
            created=created,
            node_name=spec.nodeName,
            scheduler_name=spec.schedulerName or DEFAULT_SCHEDULER_NAME,
            cpu=cpu,
            memory=memory,
            extended=extended,
            nz_cpu=nz_cpu,
            nz_memory=nz_memory,
            host_ports=ports,
            images=images,
            signature=sig.digest(),
            terminating=meta.HasField("deletionTimestamp"),
            affinity=parse_affinity(pod),
        )


def normalize_image(name: str) -> str:
    """ "nginx" and "nginx:latest" are the same image; a digest or tag is kept as given."""
    if "@" in name:
        return name
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


def _container_requests(c: pod_pb2.Container) -> dict[str, int]:
    """Requests (cpu in millis, the rest in whole units); a resource with only a limit
    requests the limit."""
    out: dict[str, int] = {}
    res = c.resources
    for name, q in res.limits.items():
        if name not in res.requests:
            out[name] = _amount(name, q)
    for name, q in res.requests.items():
        out[name] = _amount(name, q)
    return out


# Pure and hot (every pod of a ReplicaSet repeats the same strings): memoised.
@functools.lru_cache(maxsize=4096)
def _amount(name: str, q: str) -> int:
    # cpu in millis; everything else in whole units rounded up (memory in bytes, a GPU is 1),
    # as kube-scheduler's Resource counts them: thousandths of 1Ei GPUs would pass an int64.
    return milli_value(q) if name == CPU else value(q)


def _combine(app: Iterable[dict[str, int]], init: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for r in app:
        for k, v in r.items():
            total[k] = total.get(k, 0) + v
    for r in init:
        for k, v in r.items():
            if v > total.get(k, 0):
                total[k] = v
    return total


def _pod_requests(spec: pod_pb2.PodSpec) -> tuple[int, int, dict[str, int], int, int]:
    app = [_container_requests(c) for c in spec.containers]
    init = [_container_requests(c) for c in spec.initContainers]
    total = _combine(app, init)

    def nonzero(reqs: dict[str, int]) -> dict[str, int]:
        return {
            CPU: reqs.get(CPU, DEFAULT_MILLI_CPU),
            MEMORY: reqs.get(MEMORY, DEFAULT_MEMORY),
        }

    nz = _combine([nonzero(r) for r in app], [nonzero(r) for r in init])
    extended = {k: v for k, v in total.items() if k not in (CPU, MEMORY, PODS) and v > 0}
    return (
        total.get(CPU, 0),
        total.get(MEMORY, 0),
        extended,
        nz.get(CPU, 0),
        nz.get(MEMORY, 0),
    )
