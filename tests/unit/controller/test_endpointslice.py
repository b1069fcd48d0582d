"""The endpointslice and endpointslicemirroring controllers over in-memory fakes: what slices a
Service gets (conditions, ports, zone, labels, owner), how kube's reconciler packs and reuses
slices, and that a lagging cache never makes a duplicate slice."""

from __future__ import annotations

import itertools

import pytest

from controller.endpointslice import (
    CONTROLLER_NAME,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    EndpointSliceController,
    Slice,
)
from controller.endpointslicemirroring import (
    CONTROLLER_NAME as MIRRORING,
)
from controller.endpointslicemirroring import (
    EndpointSliceMirroringController,
)
from tests.unit.controller.fakes import FakeQueue, FakeResource, FakeStore
from tests.unit.controller.test_endpoints import pod, service
from tinykube.clock import FakeClock
from tinykube.v1 import endpoints_pb2, node_pb2, pod_pb2, service_pb2


class World:
    def __init__(self, max_per_slice: int = 100) -> None:
        clock = FakeClock()
        rv = itertools.count(1)
        self.slices = FakeResource("EndpointSlice", Slice, clock, rv)
        self.services = FakeResource("Service", service_pb2.Service, clock, rv)
        self.pods = FakeResource("Pod", pod_pb2.Pod, clock, rv)
        self.nodes = FakeResource("Node", node_pb2.Node, clock, rv)
        self.endpoints = FakeResource("Endpoints", endpoints_pb2.ServiceEndpoints, clock, rv)
        self.slice_store = FakeStore(self.slices)
        self.queue = FakeQueue()
        self.controller = EndpointSliceController(
            self.slices,
            FakeStore(self.services),
            FakeStore(self.pods),
            FakeStore(self.nodes),
            self.slice_store,
            self.queue,
            max_endpoints_per_slice=max_per_slice,
        )
        self.mirroring = EndpointSliceMirroringController(
            self.slices,
            FakeStore(self.services),
            FakeStore(self.endpoints),
            self.slice_store,
            self.queue,
        )

    def node(self, name: str, zone: str = "") -> None:
        n = node_pb2.Node()
        n.metadata.name = name
        n.metadata.uid = f"uid-{name}"
        if zone:
            n.metadata.labels["topology.kubernetes.io/zone"] = zone
        self.nodes.objects[name] = n

    def add_service(self, svc: service_pb2.Service) -> service_pb2.Service:
        svc.metadata.uid = f"uid-svc-{svc.metadata.name}"
        self.services.objects[f"default/{svc.metadata.name}"] = svc
        return svc

    def add_pods(self, *pods: pod_pb2.Pod) -> None:
        for p in pods:
            if p.spec.nodeName and p.spec.nodeName not in self.nodes.objects:
                self.node(p.spec.nodeName)
            self.pods.objects[f"default/{p.metadata.name}"] = p

    def remove_pod(self, name: str) -> None:
        del self.pods.objects[f"default/{name}"]

    def stored(self) -> list[Slice]:
        return sorted(self.slices.objects.values(), key=lambda s: s.metadata.name)

    def writes(self) -> list[str]:
        out = [verb for verb, _ in self.slices.calls]
        self.slices.calls.clear()
        return out


def ready_ips(eps: Slice) -> list[str]:
    return sorted(e.addresses[0] for e in eps.endpoints if e.conditions.ready)


async def test_three_ready_pods_make_one_slice_shaped_as_kube() -> None:
    w = World()
    svc = w.add_service(service("web", ports=[("http", 80, 8080)]))
    w.node("n1", zone="zone-a")
    w.add_pods(*(pod(f"web-{i}", f"127.0.1.{i}") for i in range(3)))
    await w.controller.sync("default/web")
    [eps] = w.stored()
    assert eps.metadata.name.startswith("web-") and len(eps.metadata.name) == len("web-") + 5
    assert eps.metadata.generateName == "web-"
    assert dict(eps.metadata.labels) == {
        SERVICE_NAME_LABEL: "web",
        MANAGED_BY_LABEL: CONTROLLER_NAME,
    }
    [ref] = eps.metadata.ownerReferences
    assert (ref.apiVersion, ref.kind, ref.name, ref.uid) == (
        "v1",
        "Service",
        "web",
        svc.metadata.uid,
    )
    assert ref.controller and ref.blockOwnerDeletion
    assert eps.addressType == "IPv4"
    [port] = eps.ports
    assert (port.name, port.port, port.protocol) == ("http", 8080, "TCP")
    assert ready_ips(eps) == ["127.0.1.0", "127.0.1.1", "127.0.1.2"]
    first = eps.endpoints[0]
    assert first.conditions.serving and not first.conditions.terminating
    assert first.nodeName == "n1" and first.zone == "zone-a"
    assert (first.targetRef.kind, first.targetRef.name, first.targetRef.uid) == (
        "Pod",
        "web-0",
        "uid-web-0",
    )
    assert not first.HasField("hostname") and not first.HasField("hints")
    # Nothing changed: nothing is written.
    w.writes()
    await w.controller.sync("default/web")
    assert w.writes() == []


async def test_conditions_of_not_ready_and_terminating_pods() -> None:
    w = World()
    w.add_service(service("web"))
    w.add_pods(
        pod("ok", "127.0.1.1"),
        pod("starting", "127.0.1.2", ready=False),
        pod("leaving", "127.0.1.3", terminating=True),
        pod("leaving-unready", "127.0.1.4", ready=False, terminating=True),
        pod("done", "127.0.1.5", phase="Succeeded"),
        pod("no-ip", ""),
    )
    await w.controller.sync("default/web")
    [eps] = w.stored()
    got = {
        e.targetRef.name: (e.conditions.ready, e.conditions.serving, e.conditions.terminating)
        for e in eps.endpoints
    }
    assert got == {
        "ok": (True, True, False),
        "starting": (False, False, False),
        "leaving": (False, True, True),
        "leaving-unready": (False, False, True),
    }


async def test_named_target_ports_resolve_per_pod_and_group_slices() -> None:
    w = World()
    w.add_service(service("web", ports=[("http", 80, "web")]))
    w.add_pods(
        pod("a", "127.0.1.1", named_ports={"web": 8080}),
        pod("b", "127.0.1.2", named_ports={"web": 9090}),
        pod("c", "127.0.1.3", named_ports={"web": 8080}),
    )
    await w.controller.sync("default/web")
    by_port = {s.ports[0].port: ready_ips(s) for s in w.stored()}
    assert by_port == {8080: ["127.0.1.1", "127.0.1.3"], 9090: ["127.0.1.2"]}


async def test_more_than_max_endpoints_split_and_are_updated_in_place() -> None:
    w = World()
    w.add_service(service("web"))
    w.add_pods(*(pod(f"p{i:03}", f"127.0.{i // 200 + 1}.{i % 200 + 1}") for i in range(250)))
    await w.controller.sync("default/web")
    assert sorted(len(s.endpoints) for s in w.stored()) == [50, 100, 100]
    assert w.writes() == ["create"] * 3
    # Ten pods go: only their slice(s) are updated; nothing is recreated.
    for i in range(10):
        w.remove_pod(f"p{i:03}")
    await w.controller.sync("default/web")
    assert set(w.writes()) == {"update"}
    assert sum(len(s.endpoints) for s in w.stored()) == 240
    # Five new pods fill the slice being updated, not a new one.
    w.add_pods(*(pod(f"q{i}", f"127.0.9.{i + 1}") for i in range(5)))
    await w.controller.sync("default/web")
    assert "create" not in w.writes()
    assert sum(len(s.endpoints) for s in w.stored()) == 245
    assert max(len(s.endpoints) for s in w.stored()) <= 100


async def test_new_endpoints_fill_the_unchanged_slice_they_fit_best() -> None:
    w = World(max_per_slice=10)
    w.add_service(service("web"))
    w.add_pods(*(pod(f"p{i:02}", f"127.0.1.{i + 1}") for i in range(14)))
    await w.controller.sync("default/web")
    assert sorted(len(s.endpoints) for s in w.stored()) == [4, 10]
    w.writes()
    w.add_pods(*(pod(f"q{i}", f"127.0.2.{i + 1}") for i in range(3)))
    await w.controller.sync("default/web")
    assert w.writes() == ["update"]
    assert sorted(len(s.endpoints) for s in w.stored()) == [7, 10]


async def test_scaling_to_zero_leaves_an_empty_placeholder_slice() -> None:
    w = World()
    w.add_service(service("web"))
    w.add_pods(pod("a", "127.0.1.1"), pod("b", "127.0.1.2"))
    await w.controller.sync("default/web")
    [before] = w.stored()
    w.remove_pod("a")
    w.remove_pod("b")
    w.writes()
    await w.controller.sync("default/web")
    assert w.writes() == ["update"]  # the slice that would go becomes the placeholder
    [after] = w.stored()
    assert after.metadata.name == before.metadata.name
    assert list(after.endpoints) == [] and list(after.ports) == []
    await w.controller.sync("default/web")
    assert w.writes() == []
    # A Service with no pods at all gets the placeholder at once.
    w.add_service(service("idle", selector={"app": "idle"}))
    await w.controller.sync("default/idle")
    [idle] = [s for s in w.stored() if s.metadata.labels[SERVICE_NAME_LABEL] == "idle"]
    assert list(idle.endpoints) == []


async def test_a_lagging_cache_does_not_make_a_second_slice() -> None:
    w = World()
    w.add_service(service("web"))
    w.add_pods(pod("a", "127.0.1.1"))
    w.slice_store.lag()  # the informer has not seen our create yet
    await w.controller.sync("default/web")
    await w.controller.sync("default/web")
    assert len(w.slices.objects) == 1
    assert w.queue.delayed == [("default/web", 0.1)]
    w.slice_store.catch_up()
    await w.controller.sync("default/web")
    assert len(w.slices.objects) == 1


async def test_service_labels_are_copied_and_the_service_going_deletes_its_slices() -> None:
    w = World()
    svc = w.add_service(service("web"))
    w.add_pods(pod("a", "127.0.1.1"))
    await w.controller.sync("default/web")
    svc.metadata.labels["tier"] = "front"
    await w.controller.sync("default/web")
    [eps] = w.stored()
    assert eps.metadata.labels["tier"] == "front"
    del w.services.objects["default/web"]
    await w.controller.sync("default/web")
    assert w.stored() == []


async def test_a_pod_on_an_unknown_node_is_left_out_and_the_service_retried() -> None:
    w = World()
    w.add_service(service("web"))
    w.add_pods(pod("a", "127.0.1.1"))
    ghost = pod("b", "127.0.1.2", node="gone")
    w.pods.objects["default/b"] = ghost
    with pytest.raises(RuntimeError, match="node is not known"):
        await w.controller.sync("default/web")
    [eps] = w.stored()
    assert ready_ips(eps) == ["127.0.1.1"]


def hand_made_endpoints(name: str) -> endpoints_pb2.ServiceEndpoints:
    ep = endpoints_pb2.ServiceEndpoints()
    ep.metadata.name = name
    ep.metadata.namespace = "default"
    ep.metadata.uid = f"uid-ep-{name}"
    ep.metadata.labels["team"] = "db"
    subset = ep.subsets.add()
    subset.addresses.add(ip="10.1.0.1")
    subset.addresses.add(ip="10.1.0.2", nodeName="n1")
    subset.notReadyAddresses.add(ip="10.1.0.3")
    subset.ports.add(name="pg", port=5432, protocol="TCP")
    return ep


async def test_mirroring_a_selectorless_service() -> None:
    w = World()
    w.add_service(service("db", selector={}))
    w.endpoints.objects["default/db"] = hand_made_endpoints("db")
    await w.mirroring.sync("default/db")
    [eps] = w.stored()
    assert dict(eps.metadata.labels) == {
        "team": "db",
        SERVICE_NAME_LABEL: "db",
        MANAGED_BY_LABEL: MIRRORING,
    }
    assert eps.metadata.ownerReferences[0].kind == "Endpoints"
    assert [(p.name, p.port) for p in eps.ports] == [("pg", 5432)]
    got = {e.addresses[0]: e.conditions.ready for e in eps.endpoints}
    assert got == {"10.1.0.1": True, "10.1.0.2": True, "10.1.0.3": False}
    assert not eps.endpoints[0].conditions.HasField("serving")
    # The endpointslice controller leaves the selector-less Service alone.
    await w.controller.sync("default/db")
    assert len(w.stored()) == 1
    # Skip-mirror, or the Service gaining a selector, removes the mirror.
    w.endpoints.objects["default/db"].metadata.labels["endpointslice.kubernetes.io/skip-mirror"] = (
        "true"
    )
    await w.mirroring.sync("default/db")
    assert w.stored() == []


async def test_mirroring_ignores_endpoints_of_a_service_with_a_selector() -> None:
    w = World()
    w.add_service(service("web"))
    w.endpoints.objects["default/web"] = hand_made_endpoints("web")
    await w.mirroring.sync("default/web")
    assert w.stored() == []
    # Nor a leader election lock of a selector-less Service.
    w.add_service(service("lock", selector={}))
    lock = hand_made_endpoints("lock")
    lock.metadata.annotations["control-plane.alpha.kubernetes.io/leader"] = "{}"
    w.endpoints.objects["default/lock"] = lock
    await w.mirroring.sync("default/lock")
    assert w.stored() == []


async def test_a_zone_change_enqueues_the_services_of_the_nodes_pods() -> None:
    w = World()
    w.add_service(service("web"))
    w.node("n1", zone="a")
    w.add_pods(pod("a", "127.0.1.1"))
    old = w.nodes.objects["n1"]
    new = node_pb2.Node()
    new.CopyFrom(old)
    new.metadata.resourceVersion = "9"
    w.controller.on_node_update(old, new)  # a heartbeat: nothing to do
    assert w.queue.added == []
    new.metadata.labels["topology.kubernetes.io/zone"] = "b"
    w.controller.on_node_update(old, new)
    assert w.queue.added == ["default/web"]
    w.nodes.objects["n1"] = new
    await w.controller.sync("default/web")
    [eps] = w.stored()
    assert eps.endpoints[0].zone == "b"
