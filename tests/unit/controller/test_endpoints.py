"""The endpoints controller: subsets of ready pods, targetPort resolution, writes on change."""

from __future__ import annotations

import itertools

import pytest

from controller.endpoints import EndpointsController, compute_subsets, resolve_target_port
from tests.unit.controller.fakes import FakeQueue, FakeResource, FakeStore
from tinykube.clock import FakeClock
from tinykube.informer import Store
from tinykube.meta import int_or_string_value
from tinykube.v1 import endpoints_pb2, pod_pb2, service_pb2


def service(
    name: str = "web",
    selector: dict[str, str] | None = None,
    ports: list[tuple[str, int, int | str]] | None = None,
) -> service_pb2.Service:
    svc = service_pb2.Service()
    svc.metadata.name = name
    svc.metadata.namespace = "default"
    svc.spec.selector.update({"app": "web"} if selector is None else selector)
    for pname, port, target in ports or [("", 80, 8080)]:
        svc.spec.ports.add(
            name=pname, port=port, targetPort=int_or_string_value(target), protocol="TCP"
        )
    return svc


def pod(
    name: str,
    ip: str = "127.0.1.1",
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    node: str = "n1",
    named_ports: dict[str, int] | None = None,
    terminating: bool = False,
    phase: str = "Running",
) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = name
    p.metadata.namespace = "default"
    p.metadata.uid = f"uid-{name}"
    p.metadata.labels.update({"app": "web"} if labels is None else labels)
    p.spec.nodeName = node
    c = p.spec.containers.add(name="c", image="python")
    for pname, number in (named_ports or {}).items():
        c.ports.add(name=pname, containerPort=number, protocol="TCP")
    p.status.phase = phase
    p.status.podIP = ip
    p.status.hostIP = ip
    p.status.conditions.add(type="Ready", status="True" if ready else "False")
    if terminating:
        p.metadata.deletionTimestamp.GetCurrentTime()
    return p


def ips(subset: endpoints_pb2.EndpointSubset) -> list[str]:
    return [a.ip for a in subset.addresses]


def test_ready_pods_are_addresses_others_not_ready_and_excluded_pods_left_out() -> None:
    pods = [
        pod("b", "127.0.1.2"),
        pod("a", "127.0.1.1"),
        pod("slow", "127.0.1.3", ready=False),
        pod("other", "127.0.1.4", labels={"app": "db"}),
        pod("gone", "127.0.1.5", terminating=True),
        pod("done", "127.0.1.6", phase="Succeeded"),
        pod("noip", ""),
    ]
    [subset] = compute_subsets(service(), pods)
    assert ips(subset) == ["127.0.1.1", "127.0.1.2"]
    assert [a.ip for a in subset.notReadyAddresses] == ["127.0.1.3"]
    assert [(p.name, p.port, p.protocol) for p in subset.ports] == [("", 8080, "TCP")]
    a = subset.addresses[0]
    assert (a.nodeName, a.targetRef.kind, a.targetRef.name, a.targetRef.uid) == (
        "n1",
        "Pod",
        "a",
        "uid-a",
    )


def test_named_target_port_resolves_per_pod_and_groups_subsets() -> None:
    svc = service(ports=[("http", 80, "http")])
    pods = [
        pod("a", "127.0.1.1", named_ports={"http": 8080}),
        pod("b", "127.0.1.2", named_ports={"http": 9090}),
        pod("c", "127.0.1.3", named_ports={"http": 8080}),
        pod("d", "127.0.1.4", named_ports={"grpc": 8080}),  # no port named http: left out
    ]
    subsets = compute_subsets(svc, pods)
    assert [(ips(s), [p.port for p in s.ports]) for s in subsets] == [
        (["127.0.1.1", "127.0.1.3"], [8080]),
        (["127.0.1.2"], [9090]),
    ]
    assert resolve_target_port(svc.spec.ports[0], pods[3]) is None
    assert resolve_target_port(service().spec.ports[0], pods[3]) == 8080


def test_empty_selector_selects_nothing() -> None:
    assert compute_subsets(service(selector={}), [pod("a")]) == []


@pytest.fixture
def world() -> tuple[EndpointsController, FakeResource, FakeResource, FakeResource, FakeQueue]:  # type: ignore[type-arg]
    clock = FakeClock()
    rv = itertools.count(1)
    services = FakeResource("Service", service_pb2.Service, clock, rv)
    pods = FakeResource("Pod", pod_pb2.Pod, clock, rv)
    eps = FakeResource("Endpoints", endpoints_pb2.ServiceEndpoints, clock, rv)
    queue = FakeQueue()
    ctrl = EndpointsController(eps, FakeStore(services), FakeStore(pods), FakeStore(eps), queue)
    return ctrl, services, pods, eps, queue


async def test_sync_creates_updates_only_on_change_and_deletes(world) -> None:  # type: ignore[no-untyped-def]
    ctrl, services, pods, eps, queue = world
    await services.create(service())
    await pods.create(pod("a", "127.0.1.1"))
    await ctrl.sync("default/web")
    stored = eps.objects["default/web"]
    assert ips(stored.subsets[0]) == ["127.0.1.1"]

    await ctrl.sync("default/web")  # nothing changed: no write
    assert [c for c in eps.calls if c[0] != "create"] == []

    b = pod("b", "127.0.1.2")
    await pods.create(b)
    ctrl.on_pod_add(b)
    assert queue.added == ["default/web"]
    await ctrl.sync("default/web")
    assert ips(eps.objects["default/web"].subsets[0]) == ["127.0.1.1", "127.0.1.2"]

    # A pod turning unready moves to notReadyAddresses.
    unready = pod("a", "127.0.1.1", ready=False)
    unready.metadata.resourceVersion = pods.objects["default/a"].metadata.resourceVersion
    await pods.update(unready)
    await ctrl.sync("default/web")
    [subset] = eps.objects["default/web"].subsets
    assert ips(subset) == ["127.0.1.2"]
    assert [a.ip for a in subset.notReadyAddresses] == ["127.0.1.1"]

    # Every pod gone: the Endpoints stay, empty (connections are refused, not hung).
    await pods.delete("a", "default")
    await pods.delete("b", "default")
    await ctrl.sync("default/web")
    assert list(eps.objects["default/web"].subsets) == []

    await services.delete("web", "default")
    await ctrl.sync("default/web")
    assert "default/web" not in eps.objects


async def test_pod_events_enqueue_only_matching_services(world) -> None:  # type: ignore[no-untyped-def]
    ctrl, services, _pods, _eps, queue = world
    await services.create(service("web"))
    await services.create(service("db", selector={"app": "db"}))
    old = pod("a", labels={"app": "web"})
    new = pod("a", labels={"app": "db"})
    new.metadata.resourceVersion = "2"
    ctrl.on_pod_update(old, new)
    assert sorted(queue.added) == ["default/db", "default/web"]
    queue.added.clear()
    ctrl.on_pod_update(new, new)  # resync: same resourceVersion
    assert queue.added == []


async def test_selectorless_service_is_left_alone(world) -> None:  # type: ignore[no-untyped-def]
    ctrl, services, _pods, eps, _queue = world
    await services.create(service(selector={}))
    await ctrl.sync("default/web")
    assert eps.objects == {}


def test_pod_events_find_services_through_the_selector_index() -> None:
    """With the informer's Store (indexed), a pod event finds the Services selecting it by its
    own label pairs: other namespaces' Services with the same selector, Services whose
    selector the pod only partly matches and Services without a selector are not queued; a
    Service whose selector changes moves in the index."""
    services: Store[service_pb2.Service] = Store()
    queue = FakeQueue()
    eps = FakeResource("Endpoints", endpoints_pb2.ServiceEndpoints, FakeClock(), itertools.count(1))

    def put(svc: service_pb2.Service, namespace: str = "default") -> None:
        svc.metadata.namespace = namespace
        services._put(f"{namespace}/{svc.metadata.name}", svc)

    put(service("web", {"app": "web"}))
    put(service("web-v2", {"app": "web", "version": "2"}))
    put(service("other-ns", {"app": "web"}), "prod")
    put(service("none", {}))
    put(service("db", {"app": "db"}))
    ctrl = EndpointsController(eps, services, Store(), Store(), queue)
    assert sorted(ctrl._services_for(pod("a", labels={"app": "web", "version": "1"}))) == [
        "default/web"
    ]
    assert sorted(ctrl._services_for(pod("b", labels={"app": "web", "version": "2"}))) == [
        "default/web",
        "default/web-v2",
    ]
    put(service("db", {"version": "1"}))  # its selector changed: reindexed under version=1
    assert sorted(ctrl._services_for(pod("a", labels={"app": "web", "version": "1"}))) == [
        "default/db",
        "default/web",
    ]
    ctrl.on_pod_add(pod("c", labels={"app": "db"}))
    assert queue.added == []


def test_sync_reads_only_the_pods_carrying_the_selectors_indexed_pair() -> None:
    """With the informer's Store (indexed), a Service's candidate pods are those with its
    selector's smallest pair, in its namespace; a relabelled pod moves in the index."""
    pods: Store[pod_pb2.Pod] = Store()
    eps = FakeResource("Endpoints", endpoints_pb2.ServiceEndpoints, FakeClock(), itertools.count(1))
    ctrl = EndpointsController(eps, Store(), pods, Store(), FakeQueue())

    def put(p: pod_pb2.Pod, namespace: str = "default") -> None:
        p.metadata.namespace = namespace
        pods._put(f"{namespace}/{p.metadata.name}", p)

    put(pod("a", labels={"app": "web", "tier": "front"}))
    put(pod("b", labels={"app": "web"}))
    put(pod("c", labels={"app": "db"}))
    put(pod("d", labels={"app": "web"}), "prod")
    svc = service("web", {"tier": "front", "app": "web"})
    # The candidates carry app=web (the smallest key); `selects` then checks the rest.
    assert sorted(p.metadata.name for p in ctrl._pods_selected_by(svc)) == ["a", "b"]
    (subset,) = compute_subsets(svc, ctrl._pods_selected_by(svc))
    assert [a.targetRef.name for a in subset.addresses] == ["a"]
    put(pod("b", labels={"app": "db"}))
    assert sorted(p.metadata.name for p in ctrl._pods_selected_by(svc)) == ["a"]
