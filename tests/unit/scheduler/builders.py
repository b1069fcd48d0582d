"""Builders for pods and nodes in scheduler tests (kube-scheduler's st.MakePod() style)."""

from __future__ import annotations

from typing import Self

from scheduler.cache import SchedulerCache
from scheduler.podinfo import PodInfo
from tinykube.v1 import node_pb2, pod_pb2


class PodBuilder:
    def __init__(self, name: str = "p", namespace: str = "default") -> None:
        self.pod = pod_pb2.Pod()
        self.pod.metadata.name = name
        self.pod.metadata.namespace = namespace
        self.pod.metadata.uid = f"uid-{name}"

    def container(
        self,
        requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None,
        image: str = "",
        init: bool = False,
    ) -> Self:
        c = (self.pod.spec.initContainers if init else self.pod.spec.containers).add()
        c.name = f"c{len(self.pod.spec.containers) + len(self.pod.spec.initContainers)}"
        c.image = image
        c.resources.requests.update(requests or {})
        c.resources.limits.update(limits or {})
        return self

    def req(self, **kw: str) -> Self:
        """Keyword names spell "/" as "__" and "." as "_": example_com__gpu -> example.com/gpu."""
        return self.container({k.replace("__", "/").replace("_", "."): v for k, v in kw.items()})

    def host_port(self, port: int, ip: str = "", protocol: str = "") -> Self:
        if not self.pod.spec.containers:
            self.container()
        p = self.pod.spec.containers[0].ports.add()
        p.hostPort = port
        p.containerPort = port
        p.hostIP = ip
        p.protocol = protocol
        return self

    def container_port(self, port: int) -> Self:
        """A declared containerPort without a hostPort."""
        if not self.pod.spec.containers:
            self.container()
        self.pod.spec.containers[0].ports.add(containerPort=port)
        return self

    def node_selector(self, **labels: str) -> Self:
        self.pod.spec.nodeSelector.update(labels)
        return self

    def required(self, *terms: list[tuple[str, str, list[str]]]) -> Self:
        sel = self.pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        for term in terms:
            t = sel.nodeSelectorTerms.add()
            for key, op, values in term:
                r = t.matchExpressions.add()
                r.key, r.operator = key, op
                r.values.extend(values)
        return self

    def preferred(self, weight: int, *exprs: tuple[str, str, list[str]]) -> Self:
        na = self.pod.spec.affinity.nodeAffinity
        pt = na.preferredDuringSchedulingIgnoredDuringExecution.add()
        pt.weight = weight
        for key, op, values in exprs:
            r = pt.preference.matchExpressions.add()
            r.key, r.operator = key, op
            r.values.extend(values)
        return self

    def toleration(
        self, key: str = "", operator: str = "", value: str = "", effect: str = ""
    ) -> Self:
        t = self.pod.spec.tolerations.add()
        t.key, t.operator, t.value, t.effect = key, operator, value, effect
        return self

    def node_name(self, name: str) -> Self:
        self.pod.spec.nodeName = name
        return self

    def priority(self, p: int) -> Self:
        self.pod.spec.priority = p
        return self

    def labels(self, **kw: str) -> Self:
        self.pod.metadata.labels.update(kw)
        return self

    def terminating(self) -> Self:
        self.pod.metadata.deletionTimestamp.seconds = 1
        return self

    def created(self, seconds: int) -> Self:
        self.pod.metadata.creationTimestamp.seconds = seconds
        return self

    def obj(self) -> pod_pb2.Pod:
        return self.pod

    def info(self) -> PodInfo:
        return PodInfo.from_pod(self.pod)


class NodeBuilder:
    def __init__(self, name: str = "n") -> None:
        self.node = node_pb2.Node()
        self.node.metadata.name = name
        self.node.status.allocatable.update({"cpu": "4", "memory": "8Gi", "pods": "110"})

    def alloc(self, **kw: str) -> Self:
        self.node.status.allocatable.clear()
        self.node.status.allocatable.update({k.replace("_", "."): v for k, v in kw.items()})
        return self

    def alloc_extra(self, name: str, q: str) -> Self:
        self.node.status.allocatable[name] = q
        return self

    def labels(self, **kw: str) -> Self:
        self.node.metadata.labels.update(kw)
        return self

    def label(self, key: str, value: str) -> Self:
        self.node.metadata.labels[key] = value
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> Self:
        t = self.node.spec.taints.add()
        t.key, t.value, t.effect = key, value, effect
        return self

    def unschedulable(self) -> Self:
        self.node.spec.unschedulable = True
        return self

    def image(self, name: str, size: int) -> Self:
        im = self.node.status.images.add()
        im.names.append(name)
        im.sizeBytes = size
        return self

    def obj(self) -> node_pb2.Node:
        return self.node


def make_cache(
    *nodes: NodeBuilder | node_pb2.Node, pods: tuple[PodInfo, ...] = ()
) -> SchedulerCache:
    cache = SchedulerCache()
    for n in nodes:
        cache.add_node(n.obj() if isinstance(n, NodeBuilder) else n)
    for p in pods:
        cache.add_pod(p)
    return cache
