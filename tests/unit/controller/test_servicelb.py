"""The service-lb controller (controller/servicelb.py): LoadBalancer Services get an address
from the pool, keep it, give it back, and leave other implementations' Services alone."""

from __future__ import annotations

import itertools

import pytest

from controller.servicelb import (
    ALLOCATION_FAILED,
    IP_ALLOCATED,
    AddressPool,
    ServiceLBController,
    parse_pool,
)
from tests.unit.controller.fakes import FakeQueue, FakeRecorder, FakeResource, FakeStore
from tinykube.clock import FakeClock
from tinykube.v1 import service_pb2


class Client:
    def __init__(self) -> None:
        self.services = FakeResource(
            "Service", service_pb2.Service, FakeClock(), itertools.count(1)
        )


def _setup(
    pool: str = "192.0.2.0/30",
) -> tuple[Client, ServiceLBController, FakeQueue, FakeRecorder]:
    client, queue, recorder = Client(), FakeQueue(), FakeRecorder()
    ctrl = ServiceLBController(
        client, FakeStore(client.services), queue, AddressPool(pool), recorder=recorder
    )
    return client, ctrl, queue, recorder


def _svc(
    client: Client, name: str, type: str = "LoadBalancer", ingress: str = "", cls: str | None = None
) -> service_pb2.Service:
    svc = service_pb2.Service()
    svc.metadata.name, svc.metadata.namespace = name, "default"
    svc.metadata.resourceVersion = "1"
    svc.spec.type = type
    if cls is not None:
        svc.spec.loadBalancerClass = cls
    if ingress:
        svc.status.loadBalancer.ingress.add(ip=ingress)
    client.services.objects[f"default/{name}"] = svc
    return svc


def _ingress(client: Client, name: str) -> list[tuple[str, str]]:
    svc = client.services.objects[f"default/{name}"]
    return [(i.ip, i.ipMode) for i in svc.status.loadBalancer.ingress]


def test_pool_ranges_and_cidrs() -> None:
    assert [(str(a), str(b)) for a, b in parse_pool("10.0.0.0/30, 10.0.1.5-10.0.1.6")] == [
        ("10.0.0.1", "10.0.0.2"),
        ("10.0.1.5", "10.0.1.6"),
    ]
    assert [(str(a), str(b)) for a, b in parse_pool("10.0.0.7/32")] == [("10.0.0.7", "10.0.0.7")]
    for bad in ("", "10.0.0.1/24", "10.0.0.9-10.0.0.1", "nope", "224.0.0.0/30"):
        with pytest.raises(ValueError, match="service-lb-pool"):
            parse_pool(bad)


async def test_load_balancers_get_distinct_addresses_with_ip_mode_vip() -> None:
    client, ctrl, queue, recorder = _setup()
    ctrl.on_add(_svc(client, "a"))
    ctrl.on_add(_svc(client, "b"))
    ctrl.on_add(_svc(client, "plain", type="ClusterIP"))  # not a load balancer: not queued
    assert queue.added == ["default/a", "default/b"]
    for key in queue.added:
        await ctrl.sync(key)
    assert _ingress(client, "a") == [("192.0.2.1", "VIP")]
    assert _ingress(client, "b") == [("192.0.2.2", "VIP")]
    assert ("Normal", IP_ALLOCATED, 'Assigned IP ["192.0.2.1"]') in recorder.events
    # a second sync changes nothing
    rv = client.services.objects["default/a"].metadata.resourceVersion
    await ctrl.sync("default/a")
    assert client.services.objects["default/a"].metadata.resourceVersion == rv


async def test_an_address_held_before_is_kept_and_a_duplicate_is_replaced() -> None:
    client, ctrl, queue, _ = _setup("192.0.2.0/29")
    # what an earlier leader wrote: both claim .3; the first seen keeps it
    ctrl.on_add(_svc(client, "a", ingress="192.0.2.3"))
    ctrl.on_add(_svc(client, "b", ingress="192.0.2.3"))
    for key in queue.added:
        await ctrl.sync(key)
    assert _ingress(client, "a") == [("192.0.2.3", "VIP")]
    assert _ingress(client, "b") == [("192.0.2.1", "VIP")]


async def test_exhausted_pool_is_an_event_and_a_deleted_service_frees_its_address() -> None:
    client, ctrl, queue, recorder = _setup("192.0.2.9/32")
    ctrl.on_add(_svc(client, "a"))
    ctrl.on_add(_svc(client, "b"))
    await ctrl.sync("default/a")
    await ctrl.sync("default/b")
    assert _ingress(client, "b") == []
    assert recorder.events[-1][:2] == ("Warning", ALLOCATION_FAILED)
    assert 'Failed to allocate IP for "default/b"' in recorder.events[-1][2]
    gone = client.services.objects.pop("default/a")
    ctrl.on_delete(gone)
    assert queue.added[-1] == "default/b"
    await ctrl.sync("default/b")
    assert _ingress(client, "b") == [("192.0.2.9", "VIP")]


async def test_type_change_releases_the_address() -> None:
    client, ctrl, _, _ = _setup("192.0.2.9/32")
    ctrl.on_add(_svc(client, "a"))
    await ctrl.sync("default/a")
    assert _ingress(client, "a") == [("192.0.2.9", "VIP")]
    now = client.services.objects["default/a"]
    now.spec.type = "ClusterIP"
    ctrl.on_update(now, now)
    await ctrl.sync("default/a")
    assert _ingress(client, "a") == []
    assert ctrl.pool.owner == {}


async def test_other_classes_are_left_alone_and_ours_is_served() -> None:
    client, ctrl, _, _ = _setup()
    ctrl.on_add(_svc(client, "theirs", cls="example.com/other", ingress="198.51.100.7"))
    ctrl.on_add(_svc(client, "ours", cls="tinykube.io/service-lb"))
    for key in ["default/theirs", "default/ours"]:
        await ctrl.sync(key)
    assert _ingress(client, "theirs") == [("198.51.100.7", "")]
    assert _ingress(client, "ours") == [("192.0.2.1", "VIP")]


async def test_load_balancer_ip_asks_for_an_address_of_the_pool() -> None:
    client, ctrl, queue, recorder = _setup("192.0.2.0/29")
    a = _svc(client, "a")
    a.spec.loadBalancerIP = "192.0.2.5"
    ctrl.on_add(a)
    await ctrl.sync("default/a")
    assert _ingress(client, "a") == [("192.0.2.5", "VIP")]
    # taken by a, or outside the pool: nothing, and an Event saying why
    b = _svc(client, "b")
    b.spec.loadBalancerIP = "192.0.2.5"
    ctrl.on_add(b)
    await ctrl.sync("default/b")
    assert _ingress(client, "b") == []
    assert recorder.events[-1] == (
        "Warning",
        ALLOCATION_FAILED,
        'Failed to allocate IP for "default/b": "192.0.2.5" is already in use by default/a',
    )
    c = _svc(client, "c", ingress="192.0.2.1")
    c.spec.loadBalancerIP = "198.51.100.1"
    ctrl.on_add(c)
    await ctrl.sync("default/c")
    assert _ingress(client, "c") == []  # what it had is released: it asks for another
    assert "not in pool 192.0.2.0/29" in recorder.events[-1][2]
    assert "192.0.2.1" not in ctrl.pool.owner
    # a frees .5: b gets it
    ctrl.on_delete(client.services.objects.pop("default/a"))
    assert "default/b" in queue.added
    await ctrl.sync("default/b")
    assert _ingress(client, "b") == [("192.0.2.5", "VIP")]
