"""The endpoints controller: keeps each Service's Endpoints equal to the pods it selects.

Modelled on kube-controller-manager's pkg/controller/endpoint. Informer handlers only enqueue
Service keys (a pod change enqueues every Service in its namespace whose selector matches the
pod's old or new labels); `sync(key)` is level-triggered: it re-reads the Service and the pods
from the caches, computes the Endpoints object (`compute_subsets`) and creates, updates or
deletes the stored one only when it differs. Selected pods that are Ready (condition True),
have an IP and are not terminating are `addresses`; the others with an IP are
`notReadyAddresses`. Each service port's targetPort is resolved per pod (a number, or the name
of one of the pod's containerPorts); pods serving the same resolved ports share a subset.
Services without a selector are left alone (their Endpoints are written by hand).

Concurrency: one event loop; the work queue never hands the same Service key to two workers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from controller.api import Queue, Store
from controller.util import is_terminating, key_of, pod_condition, split_key
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError
from tinykube.meta import int_or_string
from tinykube.protocols import ResourceAPI
from tinykube.v1 import endpoints_pb2, meta_pb2, pod_pb2, service_pb2

log = logging.getLogger(__name__)

Pod = pod_pb2.Pod
Service = service_pb2.Service
Endpoints = endpoints_pb2.ServiceEndpoints

NAMESPACE_INDEX = "namespace"
# Services by one pair of their selector: a pod can only be selected by a Service whose
# pair it carries, so a pod event looks up its own labels instead of scanning every Service.
SELECTOR_INDEX = "selector-pair"
# Pods by each of their label pairs: a Service's sync reads the pods carrying its selector's
# indexed pair, not every pod of the namespace.
POD_LABEL_INDEX = "label-pair"
# Kubernetes sets this on Endpoints so readers can tell when the controller last wrote them.
LAST_CHANGE_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"


def selects(svc: Service, pod: Pod) -> bool:
    """A Service's selector (a plain label map) matches the pod; an empty one selects none."""
    selector = svc.spec.selector
    if not selector or pod.metadata.namespace != svc.metadata.namespace:
        return False
    labels = pod.metadata.labels
    return all(labels.get(k) == v for k, v in selector.items())


def selector_pair(svc: Service) -> str | None:
    """The index value of a Service: its namespace and its selector's smallest key with that
    key's value (every pair must match, so a selected pod carries this one); None for a
    Service with no selector (it selects no pod)."""
    selector = svc.spec.selector
    if not selector:
        return None
    key = min(selector)
    return f"{svc.metadata.namespace}\0{key}={selector[key]}"


def pod_label_pairs(pod: Pod) -> list[str]:
    """The index values of a pod: its namespace with each of its label pairs."""
    ns = pod.metadata.namespace
    return [f"{ns}\0{k}={v}" for k, v in pod.metadata.labels.items()]


def resolve_target_port(port: service_pb2.ServicePort, pod: Pod) -> int | None:
    """The pod's port for a service port: a number as is, a name looked up among the pod's
    containerPorts (same protocol). None: the pod has no such named port."""
    target = int_or_string(port.targetPort)
    if target is None or target in (0, ""):
        return int(port.port)
    if isinstance(target, int):
        return target
    protocol = port.protocol or "TCP"
    for c in pod.spec.containers:
        for cp in c.ports:
            if cp.name == target and (cp.protocol or "TCP") == protocol:
                return int(cp.containerPort)
    return None


def _is_ready(pod: Pod) -> bool:
    cond = pod_condition(pod, "Ready")
    return cond is not None and cond.status == "True"


def _address(pod: Pod) -> endpoints_pb2.EndpointAddress:
    addr = endpoints_pb2.EndpointAddress(
        ip=pod.status.podIP,
        targetRef=meta_pb2.ObjectReference(
            kind="Pod",
            namespace=pod.metadata.namespace,
            name=pod.metadata.name,
            uid=pod.metadata.uid,
        ),
    )
    if pod.spec.nodeName:
        addr.nodeName = pod.spec.nodeName
    return addr


def compute_subsets(svc: Service, pods: Iterable[Pod]) -> list[endpoints_pb2.EndpointSubset]:
    """The Endpoints subsets `svc` should have given `pods` (deterministically ordered)."""
    groups: dict[
        tuple[tuple[str, int, str], ...],
        tuple[list[endpoints_pb2.EndpointAddress], list[endpoints_pb2.EndpointAddress]],
    ] = {}
    for pod in pods:
        if not selects(svc, pod) or not pod.status.podIP:
            continue
        if is_terminating(pod) or pod.status.phase in ("Succeeded", "Failed"):
            continue
        ports: list[tuple[str, int, str]] = []
        for sp in svc.spec.ports:
            number = resolve_target_port(sp, pod)
            if number is not None:
                ports.append((sp.name, number, sp.protocol or "TCP"))
        if not ports:
            continue
        ready, not_ready = groups.setdefault(tuple(sorted(ports)), ([], []))
        (ready if _is_ready(pod) else not_ready).append(_address(pod))
    subsets = []
    for ports_key in sorted(groups):
        ready, not_ready = groups[ports_key]

        def order(a: endpoints_pb2.EndpointAddress) -> tuple[str, str]:
            return (a.ip, a.targetRef.name)

        subset = endpoints_pb2.EndpointSubset(
            addresses=sorted(ready, key=order),
            notReadyAddresses=sorted(not_ready, key=order),
            ports=[
                endpoints_pb2.EndpointPort(name=name, port=number, protocol=protocol)
                for name, number, protocol in ports_key
            ],
        )
        subsets.append(subset)
    return subsets


class ServicePodHandlers:
    """What both endpoint controllers share (kube's endpointutil): a Service's key is queued
    when it or a pod it selects changes, and a namespace's pods come from the shared pod
    informer's namespace index."""

    def __init__(self, services: Store[Service], pods: Store[Pod], queue: Queue) -> None:
        self.services = services
        self.pods = pods
        self.queue = queue
        self._pods_indexed = hasattr(pods, "add_index") and hasattr(pods, "by_index")
        if self._pods_indexed:
            indexed: Any = pods
            # Controllers sharing the pod informer share its indexes.
            with contextlib.suppress(ValueError):
                indexed.add_index(NAMESPACE_INDEX, lambda p: str(p.metadata.namespace))
            with contextlib.suppress(ValueError):
                indexed.add_index(POD_LABEL_INDEX, pod_label_pairs)
        self._services_indexed = hasattr(services, "add_index") and hasattr(services, "by_index")
        if self._services_indexed:
            shared: Any = services
            with contextlib.suppress(ValueError):
                shared.add_index(SELECTOR_INDEX, selector_pair)

    # ---- handlers (sync callables: enqueue only) ---------------------------------------

    def on_service_add(self, svc: Service) -> None:
        self.queue.add(key_of(svc))

    def on_service_update(self, old: Service, new: Service) -> None:
        self.queue.add(key_of(new))

    def on_service_delete(self, svc: Service) -> None:
        self.queue.add(key_of(svc))

    def _services_for(self, pod: Pod) -> list[str]:
        """The keys of the Services selecting `pod`: from the selector index, the Services
        keyed by one of the pod's label pairs (a cost in the pod's labels, not in the
        cluster's Services), each then checked whole."""
        if not self._services_indexed:
            return [key_of(s) for s in self.services.list() if selects(s, pod)]
        indexed: Any = self.services
        ns = pod.metadata.namespace
        found = []
        for k, v in pod.metadata.labels.items():
            for svc in indexed.by_index(SELECTOR_INDEX, f"{ns}\0{k}={v}"):
                if selects(svc, pod):
                    found.append(key_of(svc))
        return found

    def on_pod_add(self, pod: Pod) -> None:
        for key in self._services_for(pod):
            self.queue.add(key)

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        if old.metadata.resourceVersion == new.metadata.resourceVersion:
            return  # a resync: nothing changed
        for key in {*self._services_for(old), *self._services_for(new)}:
            self.queue.add(key)

    def on_pod_delete(self, pod: Pod) -> None:
        self.on_pod_add(pod)

    def _pods_selected_by(self, svc: Service) -> list[Pod]:
        """The pods that may be `svc`'s (the callers check `selects` on each): those carrying
        its selector's indexed pair, else every pod of its namespace."""
        pair = selector_pair(svc)
        if not self._pods_indexed or pair is None:
            return self._pods_in(svc.metadata.namespace)
        indexed: Any = self.pods
        return list(indexed.by_index(POD_LABEL_INDEX, pair))

    def _pods_in(self, namespace: str) -> list[Pod]:
        if self._pods_indexed:
            indexed: Any = self.pods
            return list(indexed.by_index(NAMESPACE_INDEX, namespace))
        return [p for p in self.pods.list() if p.metadata.namespace == namespace]


class EndpointsController(ServicePodHandlers):
    def __init__(
        self,
        endpoints_api: ResourceAPI[Endpoints],
        services: Store[Service],
        pods: Store[Pod],
        endpoints: Store[Endpoints],
        queue: Queue,
    ) -> None:
        super().__init__(services, pods, queue)
        self.api = endpoints_api
        self.endpoints = endpoints

    # ---- reconcile ---------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        namespace, name = split_key(key)
        svc = self.services.get(key)
        current = self.endpoints.get(key)
        if svc is None:
            # The Service is gone: so are its Endpoints (its owner in all but ownerReferences).
            if current is not None:
                with contextlib.suppress(NotFoundError):
                    await self.api.delete(name, namespace, uid=current.metadata.uid)
            return
        if not svc.spec.selector:
            return
        subsets = compute_subsets(svc, self._pods_selected_by(svc))
        if (
            current is not None
            and list(current.subsets) == subsets
            and dict(current.metadata.labels) == dict(svc.metadata.labels)
        ):
            return
        desired = Endpoints(apiVersion="v1", kind="Endpoints")
        if current is not None:
            desired.metadata.CopyFrom(current.metadata)
        else:
            desired.metadata.name = name
            desired.metadata.namespace = namespace
        desired.metadata.labels.clear()
        desired.metadata.labels.update(svc.metadata.labels)
        desired.subsets.extend(subsets)
        ready = sum(len(s.addresses) for s in subsets)
        try:
            if current is None:
                await self.api.create(desired)
            else:
                await self.api.update(desired)
        except (AlreadyExistsError, ConflictError):
            # Our cache is behind the apiserver: retry once the informer catches up.
            self.queue.add_after(key, 0.1)
            return
        log.info("endpoints %s: %d ready address(es)", key, ready)
