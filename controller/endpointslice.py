"""The endpointslice controller: each Service with a selector gets EndpointSlices of its pods.

Modelled on kube-controller-manager's EndpointSliceController (pkg/controller/endpointslice and
staging/src/k8s.io/endpointslice's reconciler). Informer handlers only enqueue Service keys;
`sync(key)` re-reads the Service, its pods, their nodes and the slices this controller manages
for it (labels `kubernetes.io/service-name=<svc>` and `endpointslice.kubernetes.io/managed-by=
endpointslice-controller.k8s.io`) from the caches and writes the difference:

- A pod is an endpoint when it is not terminal (Succeeded/Failed) and has an IP; terminating
  pods stay, with `terminating: true` and `ready: false`. `serving` is the pod's Ready
  condition; `ready` is serving and not terminating. nodeName is the pod's; zone is the node's
  topology.kubernetes.io/zone label; targetRef names the pod; hostname and hints are unset
  (tinykube pods have no subdomain). A pod whose node is not in the cache is left out and the
  Service retried, as kube does.
- Ports are the Service's ports resolved against each pod (a named targetPort looked up in the
  pod's containerPorts; a pod without the name leaves that port out), so pods group by their
  resolved ports, one set of slices per group.
- `reconcile_slices` is kube's reconciler: endpoints already in a slice stay there (updated in
  place when their conditions changed), slices that lose every endpoint are deleted, new
  endpoints fill the slices being updated anyway (fullest first), then the unchanged slice they
  fit best, and only then new slices of at most `max_endpoints_per_slice` (default 100, the
  --max-endpoints-per-slice flag); a create and a delete in one sync become an update of the
  slice that would be deleted. A Service with no endpoints keeps one placeholder slice with no
  ports and no endpoints. New slices are named `<svc>-<random5>` (generateName) and owned by
  the Service (controller and blockOwnerDeletion true).
- The slices of a deleted Service (or one whose selector was removed) are deleted here; kube
  leaves the former to the garbage collector, which in tinykube does not track EndpointSlices.

The informer cache can lag this controller's own writes: every write's generation is
remembered, and a sync whose cache does not show it yet is retried shortly instead of creating
a duplicate slice (kube's endpointSliceTracker).

Concurrency: one event loop; the work queue never hands the same Service key to two workers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.api import Queue, Store
from controller.endpoints import ServicePodHandlers, resolve_target_port, selects
from controller.util import is_pod_ready
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError
from tinykube.protocols import ResourceAPI
from tinykube.v1 import endpointslice_pb2, meta_pb2, node_pb2, pod_pb2, service_pb2

log = logging.getLogger(__name__)

Pod = pod_pb2.Pod
Service = service_pb2.Service
Node = node_pb2.Node
Slice = endpointslice_pb2.EndpointSlice
Endpoint = endpointslice_pb2.Endpoint
Port = endpointslice_pb2.EndpointSlicePort

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
HEADLESS_LABEL = "service.kubernetes.io/headless"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_MAX_ENDPOINTS_PER_SLICE = 100
_RESERVED = frozenset({SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL})
SLICE_INDEX = "endpointslice-service"

PortKey = tuple[tuple[str, int, str, str], ...]
EndpointKey = tuple[tuple[str, ...], str, str, str]


def port_key(ports: Iterable[Port]) -> PortKey:
    return tuple((p.name, p.port, p.protocol, p.appProtocol) for p in ports)


def endpoint_key(ep: Endpoint) -> EndpointKey:
    """What identifies an endpoint across syncs (kube's hashEndpoint)."""
    return (tuple(sorted(ep.addresses)), ep.hostname, ep.targetRef.namespace, ep.targetRef.name)


def service_of(eps: Slice) -> str:
    """The Service key a slice belongs to ("" without the service-name label)."""
    name = eps.metadata.labels.get(SERVICE_NAME_LABEL, "")
    return f"{eps.metadata.namespace}/{name}" if name else ""


def owned_by(eps: Slice, owner: Any) -> bool:
    return any(r.uid == owner.metadata.uid for r in eps.metadata.ownerReferences)


def slice_prefix(name: str) -> str:
    """kube's getEndpointSlicePrefix: `<name>-`, or "endpointslice-" when that is too long."""
    prefix = f"{name}-"
    return prefix if len(prefix) <= 253 - 5 else "endpointslice-"


def new_slice(
    owner_kind: str, owner: meta_pb2.ObjectMeta, labels: Mapping[str, str], ports: list[Port]
) -> Slice:
    """A new IPv4 EndpointSlice for the Service or Endpoints `owner` (its controller owner),
    named by generateName from the owner's name, as both slice controllers make them."""
    eps = Slice(apiVersion="discovery.k8s.io/v1", kind="EndpointSlice", addressType="IPv4")
    meta = eps.metadata
    meta.generateName = slice_prefix(owner.name)
    meta.namespace = owner.namespace
    meta.labels.update(labels)
    meta.ownerReferences.add(
        apiVersion="v1",
        kind=owner_kind,
        name=owner.name,
        uid=owner.uid,
        controller=True,
        blockOwnerDeletion=True,
    )
    eps.ports.extend(ports)
    return eps


def slice_labels(
    current: Mapping[str, str],
    owner_labels: Mapping[str, str],
    owner_name: str,
    controller: str,
    *,
    headless: bool = False,
) -> dict[str, str]:
    """The owner's labels (without the reserved ones) plus service-name and managed-by."""
    del current  # the owner's labels replace whatever else the slice carries, as kube's
    labels = {k: v for k, v in owner_labels.items() if k not in _RESERVED}
    if headless:
        labels[HEADLESS_LABEL] = ""
    labels[SERVICE_NAME_LABEL] = owner_name
    labels[MANAGED_BY_LABEL] = controller
    return labels


# ---- desired state ------------------------------------------------------------------------


def should_be_endpoint(pod: Pod) -> bool:
    """kube's ShouldPodBeInEndpoints with terminating pods included."""
    if pod.status.phase in ("Succeeded", "Failed"):
        return False
    return bool(pod.status.podIP or pod.status.podIPs)


def endpoint_ports(svc: Service, pod: Pod) -> list[Port]:
    ports = []
    for sp in svc.spec.ports:
        number = resolve_target_port(sp, pod)
        if number is None:
            continue
        ports.append(Port(name=sp.name, port=number, protocol=sp.protocol or "TCP"))
    return ports


def pod_to_endpoint(pod: Pod, node: Node | None) -> Endpoint:
    serving = is_pod_ready(pod)
    terminating = pod.metadata.HasField("deletionTimestamp")
    ep = Endpoint(
        addresses=[pod.status.podIP or pod.status.podIPs[0].ip],
        targetRef=meta_pb2.ObjectReference(
            kind="Pod",
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            uid=pod.metadata.uid,
        ),
    )
    ep.conditions.ready = serving and not terminating
    ep.conditions.serving = serving
    ep.conditions.terminating = terminating
    if pod.spec.nodeName:
        ep.nodeName = pod.spec.nodeName
    zone = node.metadata.labels.get(ZONE_LABEL, "") if node is not None else ""
    if zone:
        ep.zone = zone
    return ep


@dataclass
class Desired:
    """The endpoints of one port mapping, in the order they are to be placed."""

    ports: list[Port]
    endpoints: dict[EndpointKey, Endpoint] = field(default_factory=dict)


# ---- the reconciler -------------------------------------------------------------------------


@dataclass
class Plan:
    create: list[Slice] = field(default_factory=list)
    update: list[Slice] = field(default_factory=list)
    delete: list[Slice] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _copy(eps: Slice) -> Slice:
    out = Slice()
    out.CopyFrom(eps)
    return out


def _by_port_mapping(
    existing: list[Slice],
    desired: Desired,
    labels: dict[str, str],
    new_slice: Callable[[list[Port]], Slice],
    max_per_slice: int,
) -> Plan:
    """kube's reconcileByPortMapping for one group of slices with equal ports."""
    wanted = dict(desired.endpoints)
    by_name: dict[str, Slice] = {}
    unchanged: list[str] = []
    to_update: list[str] = []
    to_delete: list[str] = []
    # 1. Keep each desired endpoint where it is; drop the others.
    for eps in existing:
        name = eps.metadata.name
        by_name[name] = eps
        kept: list[Endpoint] = []
        changed = False
        for ep in eps.endpoints:
            got = wanted.pop(endpoint_key(ep), None)
            if got is not None:
                kept.append(got)
                changed = changed or got != ep
        if changed or len(kept) != len(eps.endpoints):
            if not kept:
                to_delete.append(name)
            else:
                new = _copy(eps)
                del new.endpoints[:]
                new.endpoints.extend(kept)
                new.metadata.labels.clear()
                new.metadata.labels.update(labels)
                by_name[name] = new
                to_update.append(name)
        elif dict(eps.metadata.labels) != labels:
            new = _copy(eps)
            new.metadata.labels.clear()
            new.metadata.labels.update(labels)
            by_name[name] = new
            to_update.append(name)
        else:
            unchanged.append(name)
    remaining = list(wanted.values())
    # 2. Fill the slices that are written anyway, fullest first.
    if remaining and to_update:
        for name in sorted(to_update, key=lambda n: -len(by_name[n].endpoints)):
            eps = by_name[name]
            while remaining and len(eps.endpoints) < max_per_slice:
                eps.endpoints.append(remaining.pop(0))
    # 3. Then the unchanged slice the rest fits best, else new slices.
    created: list[Slice] = []
    while remaining:
        fill: Slice | None = None
        if len(remaining) < max_per_slice and unchanged:
            best = max_per_slice
            for name in unchanged:
                diff = max_per_slice - (len(remaining) + len(by_name[name].endpoints))
                if 0 <= diff < best:
                    best, fill = diff, by_name[name]
                    if diff == 0:
                        break
        if fill is None:
            fill = new_slice(desired.ports)
        else:
            fill = _copy(fill)
            by_name[fill.metadata.name] = fill
        while remaining and len(fill.endpoints) < max_per_slice:
            fill.endpoints.append(remaining.pop(0))
        if fill.metadata.name:
            to_update.append(fill.metadata.name)
            unchanged.remove(fill.metadata.name)
        else:
            created.append(fill)
    return Plan(
        create=created,
        update=[by_name[n] for n in to_update],
        delete=[by_name[n] for n in to_delete],
    )


def reconcile_slices(
    existing: Sequence[Slice],
    desired: Mapping[PortKey, Desired],
    *,
    owner: Any,
    labels: dict[str, str],
    new_slice: Callable[[list[Port]], Slice],
    max_per_slice: int = DEFAULT_MAX_ENDPOINTS_PER_SLICE,
    placeholder: bool = True,
) -> Plan:
    """What to create, update and delete so that `existing` (the slices managed for `owner`)
    hold `desired`: kube's reconcileByAddressType and finalize, for one address type."""
    plan = Plan()
    grouped: dict[PortKey, list[Slice]] = {}
    for eps in sorted(existing, key=lambda s: s.metadata.name):
        if owned_by(eps, owner):
            grouped.setdefault(port_key(eps.ports), []).append(eps)
        else:
            plan.delete.append(eps)
    for key, want in desired.items():
        part = _by_port_mapping(grouped.get(key, []), want, labels, new_slice, max_per_slice)
        plan.create += part.create
        plan.update += part.update
        plan.delete += part.delete
    for key, slices in grouped.items():
        if key not in desired:
            plan.delete += slices
    if placeholder and len(existing) == len(plan.delete) and not plan.create:
        empty = new_slice([])
        if len(plan.delete) == 1 and _is_placeholder(plan.delete[0], empty):
            plan.delete = []  # the placeholder is there already
        else:
            plan.create.append(empty)
    # A create and a delete are an update of the slice that would go.
    i = 0
    while i < len(plan.delete) and plan.create:
        gone = plan.delete[i]
        if gone.addressType == plan.create[-1].addressType and owned_by(gone, owner):
            new = plan.create.pop()
            new.metadata.name = gone.metadata.name
            new.metadata.ClearField("generateName")
            new.metadata.resourceVersion = gone.metadata.resourceVersion
            new.metadata.uid = gone.metadata.uid
            plan.update.append(new)
            del plan.delete[i]
        else:
            i += 1
    return plan


def _is_placeholder(eps: Slice, empty: Slice) -> bool:
    return (
        not eps.endpoints
        and not eps.ports
        and eps.addressType == empty.addressType
        and dict(eps.metadata.labels) == dict(empty.metadata.labels)
        and list(eps.metadata.ownerReferences) == list(empty.metadata.ownerReferences)
    )


# ---- the controller --------------------------------------------------------------------------


class WriteTracker:
    """The generations this controller wrote, per owner key, until the cache shows them."""

    def __init__(self) -> None:
        self._written: dict[str, dict[str, int]] = {}

    def wrote(self, key: str, eps: Slice) -> None:
        self._written.setdefault(key, {})[eps.metadata.name] = eps.metadata.generation

    def deleted(self, key: str, name: str) -> None:
        self._written.setdefault(key, {})[name] = -1

    def forget(self, key: str) -> None:
        self._written.pop(key, None)

    def stale(self, key: str, cached: Iterable[Slice]) -> bool:
        """Whether the cache is behind a write; entries it caught up with are dropped."""
        written = self._written.get(key)
        if not written:
            return False
        seen = {s.metadata.name: s.metadata.generation for s in cached}
        behind = False
        for name, generation in list(written.items()):
            have = seen.get(name)
            if (generation < 0 and have is None) or (
                generation >= 0 and have is not None and have >= generation
            ):
                del written[name]
            else:
                behind = True
        if not written:
            del self._written[key]
        return behind


class SliceWriter:
    """Writes a Plan through the API, remembering each write in the tracker."""

    def __init__(self, api: ResourceAPI[Slice], tracker: WriteTracker) -> None:
        self.api = api
        self.tracker = tracker

    async def apply(self, key: str, plan: Plan, *, may_create: bool = True) -> None:
        if may_create:
            for eps in plan.create:
                created = await self.api.create(eps)
                self.tracker.wrote(key, created)
        for eps in plan.update:
            updated = await self.api.update(eps)
            self.tracker.wrote(key, updated)
        for eps in plan.delete:
            with contextlib.suppress(NotFoundError):
                await self.api.delete(
                    eps.metadata.name, eps.metadata.namespace, uid=eps.metadata.uid
                )
            self.tracker.deleted(key, eps.metadata.name)


def index_slices(slices: Store[Slice]) -> bool:
    """Index a slice store by owner key when it can be (the informer's store can)."""
    if hasattr(slices, "add_index") and hasattr(slices, "by_index"):
        indexed: Any = slices
        with contextlib.suppress(ValueError):
            indexed.add_index(SLICE_INDEX, lambda s: service_of(s) or None)
        return True
    return False


def slices_for(slices: Store[Slice], indexed: bool, key: str, controller: str) -> list[Slice]:
    found: Iterable[Slice]
    if indexed:
        store: Any = slices
        found = store.by_index(SLICE_INDEX, key)
    else:
        found = (s for s in slices.list() if service_of(s) == key)
    return [s for s in found if s.metadata.labels.get(MANAGED_BY_LABEL) == controller]


class EndpointSliceController(ServicePodHandlers):
    def __init__(
        self,
        api: ResourceAPI[Slice],
        services: Store[Service],
        pods: Store[Pod],
        nodes: Store[Node],
        slices: Store[Slice],
        queue: Queue,
        *,
        max_endpoints_per_slice: int = DEFAULT_MAX_ENDPOINTS_PER_SLICE,
    ) -> None:
        super().__init__(services, pods, queue)
        self.nodes = nodes
        self.slices = slices
        self.max_per_slice = max_endpoints_per_slice
        self.tracker = WriteTracker()
        self.writer = SliceWriter(api, self.tracker)
        self._slices_indexed = index_slices(slices)

    # ---- handlers (sync callables: enqueue only); Service and pod ones are inherited ------

    def on_slice_add(self, eps: Slice) -> None:
        if eps.metadata.labels.get(MANAGED_BY_LABEL) == CONTROLLER_NAME and service_of(eps):
            self.queue.add(service_of(eps))

    def on_slice_update(self, old: Slice, new: Slice) -> None:
        self.on_slice_add(old)
        self.on_slice_add(new)

    def on_slice_delete(self, eps: Slice) -> None:
        self.on_slice_add(eps)

    def on_node_update(self, old: Node, new: Node) -> None:
        """A node's zone changed (rare): its pods' Services show the new zone. A new node needs
        nothing: a Service whose pod named an unknown node is retried until it is known."""
        if old.metadata.labels.get(ZONE_LABEL) == new.metadata.labels.get(ZONE_LABEL):
            return
        for pod in self.pods.list():
            if pod.spec.nodeName == new.metadata.name:
                for key in self._services_for(pod):
                    self.queue.add(key)

    # ---- reconcile ---------------------------------------------------------------------

    def new_slice_for(self, svc: Service) -> Callable[[list[Port]], Slice]:
        def new(ports: list[Port]) -> Slice:
            return new_slice("Service", svc.metadata, self.labels_for(svc, {}), ports)

        return new

    @staticmethod
    def labels_for(svc: Service, current: Mapping[str, str]) -> dict[str, str]:
        headless = svc.spec.clusterIP == "None"
        return slice_labels(
            current, svc.metadata.labels, svc.metadata.name, CONTROLLER_NAME, headless=headless
        )

    def desired(
        self, svc: Service, pods: Iterable[Pod]
    ) -> tuple[dict[PortKey, Desired], list[str]]:
        """The endpoints per port mapping, and the pods left out because their node is unknown."""
        groups: dict[PortKey, Desired] = {}
        missing: list[str] = []
        for pod in sorted(pods, key=lambda p: p.metadata.name):
            if not selects(svc, pod) or not should_be_endpoint(pod):
                continue
            node: Node | None = None
            if pod.spec.nodeName:
                node = self.nodes.get(pod.spec.nodeName)
                if node is None:
                    missing.append(pod.metadata.name)
                    continue
            ports = endpoint_ports(svc, pod)
            want = groups.setdefault(port_key(ports), Desired(ports))
            ep = pod_to_endpoint(pod, node)
            want.endpoints[endpoint_key(ep)] = ep
        return groups, missing

    async def sync(self, key: str) -> None:
        svc = self.services.get(key)
        mine = slices_for(self.slices, self._slices_indexed, key, CONTROLLER_NAME)
        if self.tracker.stale(key, mine):
            self.queue.add_after(key, 0.1)  # our own last write is not in the cache yet
            return
        live = [s for s in mine if not s.metadata.HasField("deletionTimestamp")]
        if svc is None or not svc.spec.selector:
            # Gone, or no longer selecting pods: nothing of ours should remain.
            await self.writer.apply(key, Plan(delete=live))
            if svc is None:
                self.tracker.forget(key)
            return
        desired, missing = self.desired(svc, self._pods_selected_by(svc))
        plan = reconcile_slices(
            live,
            desired,
            owner=svc,
            labels=self.labels_for(svc, {}),
            new_slice=self.new_slice_for(svc),
            max_per_slice=self.max_per_slice,
        )
        if not plan.empty:
            try:
                await self.writer.apply(
                    key, plan, may_create=not svc.metadata.HasField("deletionTimestamp")
                )
            except (AlreadyExistsError, ConflictError):
                self.queue.add_after(key, 0.1)  # the cache is behind the apiserver
                return
            ready = sum(
                1 for d in desired.values() for e in d.endpoints.values() if e.conditions.ready
            )
            log.info(
                "endpointslices %s: %d created, %d updated, %d deleted; %d ready endpoint(s)",
                key,
                len(plan.create),
                len(plan.update),
                len(plan.delete),
                ready,
            )
        if missing:
            raise RuntimeError(
                f"skipping pod(s) {', '.join(missing)} of Service {key}: their node is not "
                "known (yet)"
            )
