"""events.k8s.io/v1 Events: the REST view of stored core/v1 Events (field renames both ways,
watch lines, field selectors, kube's stricter create validation, discovery and OpenAPI)."""

from __future__ import annotations

import json

from apiserver.rest.discovery import Discovery
from apiserver.rest.eventsview import (
    EventsViewCodec,
    field_selector,
    to_core,
    to_v1,
    validate_create,
)
from apiserver.rest.openapi import OpenAPI
from tinykube import fieldfacts
from tinykube.errors import BadRequestError
from tinykube.v1 import event_pb2

CORE = {
    "apiVersion": "v1",
    "kind": "Event",
    "metadata": {"name": "web.1", "namespace": "default"},
    "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
    "reason": "Scheduled",
    "message": "assigned default/web to node-1",
    "source": {"component": "default-scheduler"},
    "firstTimestamp": "2026-12-05T10:00:00Z",
    "lastTimestamp": "2026-12-05T10:00:01Z",
    "count": 2,
    "type": "Normal",
    "reportingComponent": "default-scheduler",
    "reportingInstance": "default-scheduler-node-1",
    "eventTime": "2026-12-05T10:00:00.123456Z",
    "action": "Binding",
    "related": {"kind": "Node", "name": "node-1"},
    "series": {"count": 2, "lastObservedTime": "2026-12-05T10:00:01.000000Z"},
}
V1 = {
    "kind": "Event",
    "apiVersion": "events.k8s.io/v1",
    "metadata": {"name": "web.1", "namespace": "default"},
    "eventTime": "2026-12-05T10:00:00.123456Z",
    "series": {"count": 2, "lastObservedTime": "2026-12-05T10:00:01.000000Z"},
    "reportingController": "default-scheduler",
    "reportingInstance": "default-scheduler-node-1",
    "action": "Binding",
    "reason": "Scheduled",
    "regarding": {"kind": "Pod", "namespace": "default", "name": "web"},
    "related": {"kind": "Node", "name": "node-1"},
    "note": "assigned default/web to node-1",
    "type": "Normal",
    "deprecatedSource": {"component": "default-scheduler"},
    "deprecatedFirstTimestamp": "2026-12-05T10:00:00Z",
    "deprecatedLastTimestamp": "2026-12-05T10:00:01Z",
    "deprecatedCount": 2,
}


def test_the_two_views_of_one_event() -> None:
    assert to_v1(CORE) == V1
    assert list(to_v1(CORE)) == list(V1)  # kube's field order
    assert to_core(V1) == CORE


def test_the_codec_reads_the_view_and_writes_it() -> None:
    codec = EventsViewCodec()
    core, warnings = codec.decode(dict(V1), "Strict")
    assert isinstance(core, event_pb2.Event) and warnings == []
    assert (core.message, core.involvedObject.name, core.count) == (
        "assigned default/web to node-1",
        "web",
        2,
    )
    assert (core.reportingComponent, core.action, core.related.name) == (
        "default-scheduler",
        "Binding",
        "node-1",
    )
    assert codec.object_dict(core) == V1
    assert json.loads(codec.list_json("7", [codec.object_json(core)]))["kind"] == "EventList"


def test_unknown_fields_are_named_in_the_view() -> None:
    codec = EventsViewCodec()
    doc = {**V1, "message": "core's name"}
    _, warnings = codec.decode(doc, "Warn")
    assert warnings == ['unknown field "message"']
    try:
        codec.decode(doc, "Strict")
    except BadRequestError as exc:
        assert 'unknown field "message"' in exc.message
    else:
        raise AssertionError("Strict must refuse an unknown field")


def test_watch_lines_are_renamed() -> None:
    codec = EventsViewCodec()
    line = b'{"type":"ADDED","object":' + json.dumps(CORE).encode() + b"}\n"
    event = json.loads(codec.convert_line(line))
    assert event == {"type": "ADDED", "object": V1}
    error = b'{"type":"ERROR","object":{"kind":"Status"}}\n'
    assert codec.convert_line(error) == error


def test_field_selectors_name_the_view() -> None:
    assert field_selector("regarding.name=web,reportingController!=x,type==Normal") == (
        "involvedObject.name=web,reportingComponent!=x,type==Normal"
    )
    assert field_selector("") == ""


def test_an_events_v1_create_is_validated_strictly() -> None:
    codec = EventsViewCodec()
    core, _ = codec.decode(dict(V1), "Strict")
    assert isinstance(core, event_pb2.Event)
    assert [str(e) for e in validate_create(core)] == [
        'deprecatedFirstTimestamp: Invalid value: "": needs to be unset',
        'deprecatedLastTimestamp: Invalid value: "": needs to be unset',
        'deprecatedCount: Invalid value: "": needs to be unset',
        'deprecatedSource: Invalid value: "": needs to be unset',
    ]
    bare = event_pb2.Event(type="Normal")
    bare.metadata.name, bare.metadata.namespace = "e", "default"
    assert [str(e) for e in validate_create(bare)] == [
        "reportingController: Required value",
        "reportingInstance: Required value",
        "action: Required value",
        "reason: Required value",
        "eventTime: Required value",
    ]


def test_discovery_and_openapi_serve_the_view() -> None:
    d = Discovery()
    gv = d.lookup("events.k8s.io", "v1")
    assert gv is not None
    [events] = gv.resources
    assert (events.plural, events.kind, events.namespaced, events.short_names) == (
        "events",
        "Event",
        True,
        ("ev",),
    )
    assert "create" in events.verbs and "watch" in events.verbs
    api = OpenAPI(d.schemas, fieldfacts.patch_meta)
    doc = json.loads(api.v3_document("apis/events.k8s.io/v1") or b"{}")
    schema = doc["components"]["schemas"]["io.k8s.api.events.v1.Event"]
    assert {"note", "regarding", "reportingController", "deprecatedCount"} <= set(
        schema["properties"]
    )
    assert schema["required"] == ["eventTime"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "events.k8s.io", "kind": "Event", "version": "v1"}
    ]
