"""The Services and ReplicaSets that select pods, for PodTopologySpread's default constraints.

kube-scheduler's DefaultSelector (framework/plugins/helper/spread.go) gives a pod without
constraints of its own the selector of what manages it: the union of the selectors of the
Services in its namespace that select it, ANDed with the selector of the ReplicaSet that
controls it (its controller ownerReference, apps/v1 ReplicaSet). tinykube has no
ReplicationControllers or StatefulSets, the other two kinds kube consults. An empty result
means the pod gets no default constraints.

Fed by the scheduler's Service and ReplicaSet informers; a pod with no controller and a
namespace with no Services costs two dict lookups, so pods of SchedulingBasic pay nothing.
Single-threaded (the scheduler's event loop).
"""

from __future__ import annotations

from scheduler.podinfo import PodInfo
from tinykube.selectors import EQUALS, LabelSelector, Requirement, SelectorError, from_proto
from tinykube.v1 import replicaset_pb2, service_pb2

REPLICA_SET_API_VERSION = "apps/v1"


class Workloads:
    def __init__(self) -> None:
        # namespace -> name -> the Service's non-empty selector
        self.services: dict[str, dict[str, dict[str, str]]] = {}
        # namespace -> name -> the ReplicaSet's selector requirements (None: selects nothing)
        self.replica_sets: dict[str, dict[str, tuple[Requirement, ...] | None]] = {}

    # ----- informer handlers ------------------------------------------------------------
    def set_service(self, svc: service_pb2.Service) -> None:
        ns, name = svc.metadata.namespace, svc.metadata.name
        selector = dict(svc.spec.selector)
        if not selector:
            # kube skips Services without a selector; an empty one adds nothing either
            self.remove_service(svc)
            return
        self.services.setdefault(ns, {})[name] = selector

    def remove_service(self, svc: service_pb2.Service) -> None:
        ns = svc.metadata.namespace
        by_name = self.services.get(ns)
        if by_name is not None:
            by_name.pop(svc.metadata.name, None)
            if not by_name:
                del self.services[ns]

    def set_replica_set(self, rs: replicaset_pb2.ReplicaSet) -> None:
        reqs: tuple[Requirement, ...] | None = None
        if rs.spec.HasField("selector"):
            try:
                reqs = from_proto(rs.spec.selector).requirements
            except SelectorError:
                reqs = None  # kube ignores a selector it cannot parse
        self.replica_sets.setdefault(rs.metadata.namespace, {})[rs.metadata.name] = reqs

    def remove_replica_set(self, rs: replicaset_pb2.ReplicaSet) -> None:
        ns = rs.metadata.namespace
        by_name = self.replica_sets.get(ns)
        if by_name is not None:
            by_name.pop(rs.metadata.name, None)
            if not by_name:
                del self.replica_sets[ns]

    # ----- read by PodTopologySpread ----------------------------------------------------
    def default_selector(self, pod: PodInfo) -> LabelSelector | None:
        """kube's DefaultSelector for `pod`; None when it is empty (no default constraints)."""
        meta = pod.pod.metadata
        services = self.services.get(meta.namespace)
        owner = None
        for ref in meta.ownerReferences:
            if ref.controller:
                owner = ref
                break
        if not services and owner is None:
            return None
        labels = meta.labels
        merged: dict[str, str] = {}
        for selector in (services or {}).values():
            if all(labels.get(k) == v for k, v in selector.items()):
                merged.update(selector)
        reqs = [Requirement(k, EQUALS, frozenset({v})) for k, v in sorted(merged.items())]
        if (
            owner is not None
            and owner.kind == "ReplicaSet"
            and owner.apiVersion == REPLICA_SET_API_VERSION
        ):
            rs = self.replica_sets.get(meta.namespace, {}).get(owner.name)
            if rs:
                reqs.extend(rs)
        if not reqs:
            return None
        return LabelSelector(tuple(reqs))
