"""EndpointSlices and events.k8s.io/v1 against a real apiserver on a real etcd.

EndpointSlices over gRPC and REST: kube's defaults (a port's name "" and protocol TCP), the
generation bumped by a change, validation naming each field (INVALID_ARGUMENT / 422 with
causes), addressType immutable. events.k8s.io/v1 over REST: one stored Event in two versions
(create in one, read in the other), list with the view's field selectors, a watch in the view's
names, merge patch, delete. The controllers are not running here (tests/e2e has them).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import pytest

from tests.integration.conftest import (
    RunningAPIServer,
    expect_error,
    make_settings,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import endpointslice_pb2, endpointslice_pb2_grpc, meta_pb2

pytestmark = pytest.mark.integration

SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/default/events"
CORE_EVENTS = "/api/v1/namespaces/default/events"


@dataclass
class Api:
    running: RunningAPIServer
    session: aiohttp.ClientSession
    base: str
    slices: endpointslice_pb2_grpc.EndpointSlicesAsyncStub

    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        async with self.session.request(method, self.base + path, data=data, headers=headers) as r:
            return r.status, json.loads(await r.read())


@pytest.fixture(scope="module")
async def api(etcd_server: EtcdServer) -> AsyncIterator[Api]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    session = aiohttp.ClientSession()
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    try:
        yield Api(
            running,
            session,
            f"http://{running.server.rest_address}",
            endpointslice_pb2_grpc.EndpointSlicesStub(channel),
        )
    finally:
        await session.close()
        await channel.close()
        await running.server.stop()


def a_slice(name: str, *ips: str) -> endpointslice_pb2.EndpointSlice:
    eps = endpointslice_pb2.EndpointSlice(addressType="IPv4")
    eps.metadata.name = name
    eps.metadata.namespace = "default"
    eps.metadata.labels["kubernetes.io/service-name"] = "web"
    eps.ports.add(port=8080)
    for ip in ips:
        eps.endpoints.add(addresses=[ip]).conditions.ready = True
    return eps


async def test_a_slice_over_grpc_gets_kube_defaults_and_generations(api: Api) -> None:
    created = await api.slices.Create(
        endpointslice_pb2.CreateEndpointSliceRequest(endpointSlice=a_slice("g1", "10.0.0.1"))
    )
    assert (created.apiVersion, created.kind) == ("discovery.k8s.io/v1", "EndpointSlice")
    [port] = created.ports
    assert (port.HasField("name"), port.name, port.protocol) == (True, "", "TCP")
    assert created.metadata.generation == 1
    created.endpoints.add(addresses=["10.0.0.2"])
    updated = await api.slices.Update(
        endpointslice_pb2.UpdateEndpointSliceRequest(endpointSlice=created)
    )
    assert updated.metadata.generation == 2
    updated.metadata.labels["extra"] = "label"
    relabelled = await api.slices.Update(
        endpointslice_pb2.UpdateEndpointSliceRequest(endpointSlice=updated)
    )
    assert relabelled.metadata.generation == 2  # metadata only
    relabelled.addressType = "IPv6"
    del relabelled.endpoints[:]
    await expect_error(
        api.slices.Update(endpointslice_pb2.UpdateEndpointSliceRequest(endpointSlice=relabelled)),
        grpc.StatusCode.INVALID_ARGUMENT,
        'EndpointSlice.discovery.k8s.io "g1" is invalid: addressType: Invalid value: "IPv6": '
        "field is immutable",
    )
    got = await api.slices.Get(meta_pb2.GetRequest(namespace="default", name="g1"))
    assert [e.addresses[0] for e in got.endpoints] == ["10.0.0.1", "10.0.0.2"]


async def test_bad_slices_are_refused_naming_each_field(api: Api) -> None:
    bad = a_slice("bad", "300.1.1.1", "0.0.0.0", "169.254.1.1")
    bad.endpoints.add()  # no address
    bad.endpoints[0].nodeName = "Not_A_Name"
    bad.ports.add(name="Bad_Name", port=1, protocol="ICMP")
    bad.ports.add(name="", port=2)
    details = await expect_error(
        api.slices.Create(endpointslice_pb2.CreateEndpointSliceRequest(endpointSlice=bad)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    for expected in (
        'endpoints[0].addresses[0]: Invalid value: "300.1.1.1": must be a valid IPv4 address',
        'endpoints[1].addresses[0]: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)',
        'endpoints[2].addresses[0]: Invalid value: "169.254.1.1": may not be in the '
        "link-local range (169.254.0.0/16, fe80::/10)",
        "endpoints[3].addresses: Required value: must contain at least 1 address",
        'endpoints[0].nodeName: Invalid value: "Not_A_Name"',
        'ports[1].name: Invalid value: "Bad_Name"',
        'ports[1].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        'ports[2].name: Duplicate value: ""',
    ):
        assert expected in details, details
    status, body = await api.call(
        "POST",
        SLICES,
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "bad"},
            "addressType": "Banana",
            "endpoints": [{"addresses": ["10.0.0.1"]}] * 1001,
        },
    )
    assert status == 422
    assert body["details"] == {
        "name": "bad",
        "group": "discovery.k8s.io",
        "kind": "EndpointSlice",
        "causes": [
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "Banana": supported values: "FQDN", "IPv4", "IPv6"',
                "field": "addressType",
            },
            {
                "reason": "FieldValueTooMany",
                "message": "Too many: 1001: must have at most 1000 items",
                "field": "endpoints",
            },
        ],
    }


async def test_slices_over_rest(api: Api) -> None:
    status, body = await api.call(
        "POST",
        SLICES,
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "r1", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "FQDN",
            "endpoints": [{"addresses": ["db.example.com"], "conditions": {"ready": True}}],
            "ports": [{"name": "pg", "port": 5432, "appProtocol": "postgresql"}],
        },
    )
    assert status == 201, body
    assert body["ports"] == [
        {"name": "pg", "protocol": "TCP", "port": 5432, "appProtocol": "postgresql"}
    ]
    status, body = await api.call("GET", f"{SLICES}?labelSelector=kubernetes.io/service-name=web")
    assert status == 200
    assert body["kind"] == "EndpointSliceList"
    assert "r1" in {i["metadata"]["name"] for i in body["items"]}
    status, body = await api.call("DELETE", f"{SLICES}/r1")
    assert (status, body["status"]) == (200, "Success")


EVENT = {
    "apiVersion": "events.k8s.io/v1",
    "kind": "Event",
    "metadata": {"name": "web.1"},
    "eventTime": "2026-12-05T10:00:00.000001Z",
    "reportingController": "example.com/ctl",
    "reportingInstance": "ctl-1",
    "action": "Reconcile",
    "reason": "Synced",
    "regarding": {"kind": "Service", "namespace": "default", "name": "web"},
    "note": "all good",
    "type": "Normal",
}


async def test_one_event_in_two_versions(api: Api) -> None:
    status, body = await api.call("POST", EVENTS_V1, EVENT)
    assert status == 201, body
    assert body["apiVersion"] == "events.k8s.io/v1"
    assert (body["note"], body["regarding"]["name"]) == ("all good", "web")
    assert "deprecatedCount" not in body  # counted by a series, not defaulted as legacy ones
    status, core = await api.call("GET", f"{CORE_EVENTS}/web.1")
    assert status == 200
    assert (core["apiVersion"], core["message"], core["involvedObject"]["name"]) == (
        "v1",
        "all good",
        "web",
    )
    assert (core["reportingComponent"], core["eventTime"]) == (
        "example.com/ctl",
        "2026-12-05T10:00:00.000001Z",
    )
    status, listed = await api.call(
        "GET",
        f"{EVENTS_V1}?fieldSelector=regarding.name%3Dweb,reportingController%3Dexample.com/ctl",
    )
    assert status == 200
    assert listed["kind"] == "EventList" and listed["apiVersion"] == "events.k8s.io/v1"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["web.1"]
    status, patched = await api.call(
        "PATCH", f"{EVENTS_V1}/web.1", {"note": "patched"}, "application/merge-patch+json"
    )
    assert (status, patched["note"]) == (200, "patched")
    status, core = await api.call("GET", f"{CORE_EVENTS}/web.1")
    assert core["message"] == "patched"
    status, gone = await api.call("DELETE", f"{EVENTS_V1}/web.1")
    assert status == 200
    assert {k: gone["details"][k] for k in ("name", "group", "kind")} == {
        "name": "web.1",
        "group": "events.k8s.io",
        "kind": "events",
    }


async def test_an_events_v1_watch_speaks_the_view(api: Api) -> None:
    status, listed = await api.call("GET", EVENTS_V1)
    rv = listed["metadata"]["resourceVersion"]
    url = f"{api.base}{EVENTS_V1}?watch=1&resourceVersion={rv}&timeoutSeconds=20"
    async with api.session.get(url) as stream:
        status, _ = await api.call("POST", EVENTS_V1, {**EVENT, "metadata": {"name": "web.2"}})
        assert status == 201
        line = await asyncio.wait_for(stream.content.readline(), 20)
    event = json.loads(line)
    assert event["type"] == "ADDED"
    assert event["object"]["apiVersion"] == "events.k8s.io/v1"
    assert event["object"]["note"] == "all good"
    assert "message" not in event["object"]


async def test_an_events_v1_create_is_validated_as_kube_does(api: Api) -> None:
    status, body = await api.call(
        "POST", EVENTS_V1, {**EVENT, "metadata": {"name": "web.3"}, "deprecatedCount": 4}
    )
    assert status == 422
    assert body["message"] == (
        'Event.events.k8s.io "web.3" is invalid: deprecatedCount: Invalid value: "": needs to '
        "be unset"
    )
    assert body["details"]["group"] == "events.k8s.io"
    # Core/v1 takes the legacy shape, as kube-apiserver does.
    status, body = await api.call(
        "POST",
        CORE_EVENTS,
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web.4"},
            "involvedObject": {"kind": "Service", "namespace": "default", "name": "web"},
            "reason": "Old",
            "message": "legacy",
            "count": 3,
        },
    )
    assert status == 201, body
