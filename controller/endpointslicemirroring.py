"""The endpointslicemirroring controller: EndpointSlices for Endpoints made by hand.

Modelled on kube-controller-manager's EndpointSliceMirroringController. A Service without a
selector gets no slices from the endpointslice controller; its Endpoints object is written by
someone else, and this controller mirrors it into slices labelled `kubernetes.io/service-name=
<name>` and `endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io`
(plus the Endpoints' own labels), named `<name>-<random5>` and owned by the Endpoints. As kube:
only Endpoints whose Service exists and has no selector are mirrored, never those labelled
`endpointslice.kubernetes.io/skip-mirror: "true"` or used as a leader election lock; each
subset's `addresses` become endpoints with `ready: true`, its `notReadyAddresses` ones with
`ready: false` (only `ready` is set);
subsets with the same ports share slices of at most 1000 endpoints (kube's
--mirroring-max-endpoints-per-subset); addresses that are not IPv4 are skipped (tinykube
Services are IPv4 only). There is no placeholder slice. Slices go when the Endpoints or the
Service goes, or the Service gains a selector. The packing, the tracker of our own writes and
the writer are the endpointslice controller's (`controller/endpointslice.py`).

Concurrency: one event loop; the work queue never hands the same key to two workers.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from controller.api import Queue, Store
from controller.endpointslice import (
    MANAGED_BY_LABEL,
    Desired,
    Endpoint,
    Plan,
    Port,
    PortKey,
    Slice,
    SliceWriter,
    WriteTracker,
    endpoint_key,
    index_slices,
    new_slice,
    port_key,
    reconcile_slices,
    service_of,
    slice_labels,
    slices_for,
)
from controller.util import key_of
from tinykube.errors import AlreadyExistsError, ConflictError
from tinykube.protocols import ResourceAPI
from tinykube.v1 import endpoints_pb2, service_pb2

log = logging.getLogger(__name__)

Service = service_pb2.Service
Endpoints = endpoints_pb2.ServiceEndpoints

CONTROLLER_NAME = "endpointslicemirroring-controller.k8s.io"
SKIP_MIRROR_LABEL = "endpointslice.kubernetes.io/skip-mirror"
# Endpoints used as a leader election lock (client-go's old resourcelock) are not mirrored.
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"
DEFAULT_MAX_ENDPOINTS_PER_SUBSET = 1000


def _ipv4(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).version == 4
    except ValueError:
        return False


def address_to_endpoint(address: endpoints_pb2.EndpointAddress, ready: bool) -> Endpoint:
    ep = Endpoint(addresses=[address.ip])
    ep.conditions.ready = ready
    if address.HasField("targetRef"):
        ep.targetRef.CopyFrom(address.targetRef)
    if address.HasField("nodeName"):
        ep.nodeName = address.nodeName
    if address.hostname:
        ep.hostname = address.hostname
    return ep


def desired_from(endpoints: Endpoints) -> dict[PortKey, Desired]:
    groups: dict[PortKey, Desired] = {}
    for subset in endpoints.subsets:
        ports = [Port(name=p.name, port=p.port, protocol=p.protocol or "TCP") for p in subset.ports]
        want = groups.setdefault(port_key(ports), Desired(ports))
        for addresses, ready in ((subset.addresses, True), (subset.notReadyAddresses, False)):
            for address in addresses:
                if not _ipv4(address.ip):
                    continue
                ep = address_to_endpoint(address, ready)
                want.endpoints.setdefault(endpoint_key(ep), ep)
    return groups


class EndpointSliceMirroringController:
    def __init__(
        self,
        api: ResourceAPI[Slice],
        services: Store[Service],
        endpoints: Store[Endpoints],
        slices: Store[Slice],
        queue: Queue,
        *,
        max_endpoints_per_subset: int = DEFAULT_MAX_ENDPOINTS_PER_SUBSET,
    ) -> None:
        self.services = services
        self.endpoints = endpoints
        self.slices = slices
        self.queue = queue
        self.max_per_slice = max_endpoints_per_subset
        self.tracker = WriteTracker()
        self.writer = SliceWriter(api, self.tracker)
        self._slices_indexed = index_slices(slices)

    # ---- handlers (sync callables: enqueue only) ---------------------------------------

    def on_object(self, obj: Any) -> None:
        self.queue.add(key_of(obj))

    def on_object_update(self, old: Any, new: Any) -> None:
        self.queue.add(key_of(new))

    def on_slice(self, eps: Slice) -> None:
        if eps.metadata.labels.get(MANAGED_BY_LABEL) == CONTROLLER_NAME and service_of(eps):
            self.queue.add(service_of(eps))

    def on_slice_update(self, old: Slice, new: Slice) -> None:
        self.on_slice(old)
        self.on_slice(new)

    # ---- reconcile ---------------------------------------------------------------------

    def _new_slice_for(self, ep: Endpoints) -> Callable[[list[Port]], Slice]:
        def new(ports: list[Port]) -> Slice:
            return new_slice("Endpoints", ep.metadata, self._labels(ep), ports)

        return new

    @staticmethod
    def _labels(ep: Endpoints) -> dict[str, str]:
        return slice_labels({}, ep.metadata.labels, ep.metadata.name, CONTROLLER_NAME)

    async def sync(self, key: str) -> None:
        ep = self.endpoints.get(key)
        svc = self.services.get(key)
        mine = slices_for(self.slices, self._slices_indexed, key, CONTROLLER_NAME)
        if self.tracker.stale(key, mine):
            self.queue.add_after(key, 0.1)
            return
        live = [s for s in mine if not s.metadata.HasField("deletionTimestamp")]
        mirrored = (
            ep is not None
            and svc is not None
            and not svc.spec.selector
            and ep.metadata.labels.get(SKIP_MIRROR_LABEL) != "true"
            and LEADER_ANNOTATION not in ep.metadata.annotations
        )
        if not mirrored or ep is None:
            await self.writer.apply(key, Plan(delete=live))
            if ep is None:
                self.tracker.forget(key)
            return
        plan = reconcile_slices(
            live,
            desired_from(ep),
            owner=ep,
            labels=self._labels(ep),
            new_slice=self._new_slice_for(ep),
            max_per_slice=self.max_per_slice,
            placeholder=False,
        )
        if plan.empty:
            return
        try:
            await self.writer.apply(key, plan)
        except (AlreadyExistsError, ConflictError):
            self.queue.add_after(key, 0.1)
            return
        log.info(
            "mirrored endpointslices %s: %d created, %d updated, %d deleted",
            key,
            len(plan.create),
            len(plan.update),
            len(plan.delete),
        )
