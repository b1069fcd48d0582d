"""The `default/kubernetes` Service and its Endpoints, as kube-apiserver's master endpoint
reconciler keeps them, so pods find the API (`KUBERNETES_SERVICE_HOST`, kube's in-cluster
config; the kubelet sets the variables).

- Service `kubernetes` in `default`: ClusterIP, the first address of the service CIDR
  (127.100.0.1 by default, 10.96.0.1 under kube's range; the apiserver's serving certificate
  carries both, tinykube/pki.py),
  port 443 named `https` (TCP), targetPort the apiserver's REST port, no selector, label
  `component: apiserver` and `provider: kubernetes` as kube's. It is created when missing and
  its ports put back when they differ.
- Endpoints `kubernetes`: this apiserver's address and REST port (port named https) added
  when missing; with several apiservers each adds its own (grouped by port, one subset per
  port). The endpointslicemirroring controller mirrors them into an EndpointSlice, through
  which the proxy forwards the cluster IP. An apiserver that stops is not removed (kube's
  lease reconciler expires them; tinykube's clients fail over to the next address).

`reconcile(services, endpoints, ...)` runs at start and every RECONCILE_SECONDS.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging

from google.protobuf.struct_pb2 import Value

from apiserver.resources import ResourceStore
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError
from tinykube.v1 import endpoints_pb2, meta_pb2, service_pb2

log = logging.getLogger(__name__)

NAME = "kubernetes"
NAMESPACE = "default"
PORT_NAME = "https"
SERVICE_PORT = 443
RECONCILE_SECONDS = 10.0
LABELS = {"component": "apiserver", "provider": "kubernetes"}


def service_ip(cidr: str) -> str:
    """kube's choice of the kubernetes Service's IP: the first address of the range."""
    return str(ipaddress.ip_network(cidr, strict=False).network_address + 1)


def _service(cluster_ip: str, rest_port: int) -> service_pb2.Service:
    svc = service_pb2.Service(apiVersion="v1", kind="Service")
    svc.metadata.name, svc.metadata.namespace = NAME, NAMESPACE
    svc.metadata.labels.update(LABELS)
    svc.spec.type = "ClusterIP"
    svc.spec.clusterIP = cluster_ip
    svc.spec.sessionAffinity = "None"
    port = svc.spec.ports.add(name=PORT_NAME, port=SERVICE_PORT, protocol="TCP")
    port.targetPort.CopyFrom(Value(number_value=rest_port))
    return svc


async def reconcile(
    services: ResourceStore, endpoints: ResourceStore, cluster_ip: str, ip: str, rest_port: int
) -> None:
    get = meta_pb2.GetRequest(namespace=NAMESPACE, name=NAME)
    try:
        current = await services.get(get)
    except NotFoundError:
        with contextlib.suppress(AlreadyExistsError):
            await services.create(
                service_pb2.CreateServiceRequest(service=_service(cluster_ip, rest_port))
            )
            log.info("created Service default/kubernetes (%s:443)", cluster_ip)
    else:
        assert isinstance(current, service_pb2.Service)
        want = _service(cluster_ip, rest_port).spec.ports
        if not any(p.name == PORT_NAME and p.port == SERVICE_PORT for p in current.spec.ports):
            updated = service_pb2.Service()
            updated.CopyFrom(current)
            del updated.spec.ports[:]
            updated.spec.ports.extend(want)
            with contextlib.suppress(ConflictError, NotFoundError):
                await services.update(service_pb2.UpdateServiceRequest(service=updated))
    try:
        ep = await endpoints.get(get)
    except NotFoundError:
        new = endpoints_pb2.ServiceEndpoints(apiVersion="v1", kind="Endpoints")
        new.metadata.name, new.metadata.namespace = NAME, NAMESPACE
        new.metadata.labels.update(LABELS)
        subset = new.subsets.add()
        subset.addresses.add(ip=ip)
        subset.ports.add(name=PORT_NAME, port=rest_port, protocol="TCP")
        with contextlib.suppress(AlreadyExistsError):
            await endpoints.create(endpoints_pb2.CreateEndpointsRequest(endpoints=new))
        return
    assert isinstance(ep, endpoints_pb2.ServiceEndpoints)
    for subset in ep.subsets:
        if any(p.port == rest_port for p in subset.ports) and any(
            a.ip == ip for a in subset.addresses
        ):
            return
    updated_ep = endpoints_pb2.ServiceEndpoints()
    updated_ep.CopyFrom(ep)
    for subset in updated_ep.subsets:
        if any(p.port == rest_port for p in subset.ports):
            subset.addresses.add(ip=ip)
            break
    else:
        subset = updated_ep.subsets.add()
        subset.addresses.add(ip=ip)
        subset.ports.add(name=PORT_NAME, port=rest_port, protocol="TCP")
    with contextlib.suppress(ConflictError, NotFoundError):
        await endpoints.update(endpoints_pb2.UpdateEndpointsRequest(endpoints=updated_ep))
