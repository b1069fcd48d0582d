"""The `default/kubernetes` Service and its Endpoints, as kube-apiserver's master endpoint
reconciler keeps them, so pods find the API (`KUBERNETES_SERVICE_HOST`, kube's in-cluster
config; the kubelet sets the variables).

- Service `kubernetes` in `default`: ClusterIP, the first address of the service CIDR
  (127.100.0.1 by default, 10.96.0.1 under kube's range; the apiserver's serving certificate
  carries both, tinykube/pki.py),
  port 443 named `https` (TCP), targetPort the apiserver's REST port, no selector, label
  `component: apiserver` and `provider: kubernetes` as kube's. It is created when missing and
  its ports put back when they differ.
- Endpoints `kubernetes`: the addresses of the apiservers that are up, as kube-apiserver's
  lease endpoint reconciler (`--endpoint-reconciler-type=lease`, the default) keeps them.
  Each apiserver writes its address and REST port under `<prefix>/masterleases/` with an etcd
  lease of LEASE_TTL_SECONDS, renewed every RECONCILE_SECONDS, and rewrites the Endpoints to
  the addresses whose leases are alive (grouped by port, one subset per port, addresses
  sorted). An apiserver that is killed drops out when its lease expires; one that stops
  gracefully revokes its lease and takes itself out at once (kube's RemoveEndpoints). The
  endpointslicemirroring controller mirrors the Endpoints into an EndpointSlice, through
  which the proxy forwards the cluster IP.

`reconcile(services, endpoints, ...)` runs at start and every RECONCILE_SECONDS.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging

from google.protobuf.struct_pb2 import Value

from apiserver.resources import ResourceStore
from apiserver.storage import Storage
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError
from tinykube.v1 import endpoints_pb2, meta_pb2, service_pb2

log = logging.getLogger(__name__)

NAME = "kubernetes"
NAMESPACE = "default"
PORT_NAME = "https"
SERVICE_PORT = 443
# kube-apiserver's DefaultEndpointReconcilerInterval and DefaultEndpointReconcilerTTL.
RECONCILE_SECONDS = 10.0
LEASE_TTL_SECONDS = 15
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


class MasterLeases:
    """This apiserver's master lease and the list of every live one (etcd keys with a TTL)."""

    def __init__(self, storage: Storage, prefix: str, ip: str, port: int) -> None:
        self.storage = storage
        self.prefix = f"{prefix}/masterleases/".encode()
        self.address = (ip, port)
        self._lease = 0

    def _key(self) -> bytes:
        ip, port = self.address
        return self.prefix + f"{ip}:{port}".encode()

    async def renew(self) -> None:
        ip, port = self.address
        value = json.dumps({"ip": ip, "port": port}).encode()
        self._lease = await self.storage.put_leased(
            self._key(), value, LEASE_TTL_SECONDS, previous=self._lease
        )

    async def remove(self) -> None:
        lease, self._lease = self._lease, 0
        if lease:
            await self.storage.revoke_lease(lease)
        # A renewal cancelled (the apiserver stopping) between its put and its revoke of the
        # previous lease left the key under a lease this object never learned of, alive for
        # its TTL: delete the key itself too.
        kv = await self.storage.get(self._key())
        if kv is not None:
            await self.storage.delete(self._key(), kv.mod_revision)

    async def alive(self) -> list[tuple[str, int]]:
        """The (ip, port) of every apiserver whose lease has not expired, sorted."""
        found = set()
        for kv in (await self.storage.list_prefix(self.prefix)).kvs:
            try:
                entry = json.loads(kv.value)
                found.add((str(entry["ip"]), int(entry["port"])))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a malformed master lease %r", kv.key)
        return sorted(found)


def _desired_subsets(addresses: list[tuple[str, int]]) -> list[endpoints_pb2.EndpointSubset]:
    by_port: dict[int, list[str]] = {}
    for ip, port in addresses:
        by_port.setdefault(port, []).append(ip)
    subsets = []
    for port in sorted(by_port):
        subset = endpoints_pb2.EndpointSubset()
        for ip in sorted(set(by_port[port]), key=_ip_order):
            subset.addresses.add(ip=ip)
        subset.ports.add(name=PORT_NAME, port=port, protocol="TCP")
        subsets.append(subset)
    return subsets


def _ip_order(ip: str) -> tuple[int, int | str]:
    try:
        parsed = ipaddress.ip_address(ip)
    except ValueError:
        return (2, ip)
    return (parsed.version, int(parsed))


async def reconcile(
    services: ResourceStore,
    endpoints: ResourceStore,
    cluster_ip: str,
    rest_port: int,
    addresses: list[tuple[str, int]],
) -> None:
    """The Service as it should be, and its Endpoints holding exactly `addresses` (the live
    apiservers' (ip, port)). No addresses at all (etcd lost every lease) leaves the Endpoints
    alone, as kube refuses to erase all of them."""
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
    if not addresses:
        return
    subsets = _desired_subsets(addresses)
    try:
        ep = await endpoints.get(get)
    except NotFoundError:
        new = endpoints_pb2.ServiceEndpoints(apiVersion="v1", kind="Endpoints")
        new.metadata.name, new.metadata.namespace = NAME, NAMESPACE
        new.metadata.labels.update(LABELS)
        new.subsets.extend(subsets)
        with contextlib.suppress(AlreadyExistsError):
            await endpoints.create(endpoints_pb2.CreateEndpointsRequest(endpoints=new))
        return
    assert isinstance(ep, endpoints_pb2.ServiceEndpoints)
    if list(ep.subsets) == subsets:
        return
    updated_ep = endpoints_pb2.ServiceEndpoints()
    updated_ep.CopyFrom(ep)
    del updated_ep.subsets[:]
    updated_ep.subsets.extend(subsets)
    with contextlib.suppress(ConflictError, NotFoundError):
        await endpoints.update(endpoints_pb2.UpdateEndpointsRequest(endpoints=updated_ep))
        log.info(
            "Endpoints default/kubernetes now %s",
            ", ".join(f"{ip}:{port}" for ip, port in addresses),
        )
