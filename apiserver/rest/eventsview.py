"""events.k8s.io/v1 Events: a second REST view of the stored core/v1 Events.

Kubernetes keeps one Event object and serves it in two versions; so does tinykube. The stored
message is core/v1's (`tinykube.v1.Event`); the events.k8s.io/v1 one (`EventsV1Event`) renames
fields as kube's conversion does: message<->note, involvedObject<->regarding,
reportingComponent<->reportingController, source<->deprecatedSource, firstTimestamp<->
deprecatedFirstTimestamp, lastTimestamp<->deprecatedLastTimestamp, count<->deprecatedCount;
eventTime, series, related, action, reason, type, reportingInstance and metadata are the same
in both. `EventsViewCodec` is the REST codec of the view: objects, lists and watch lines are
encoded as core JSON first (the watch cache's bytes) and renamed; bodies are read with the
view's schema (unknown fields named in its terms) and renamed back.

An events.k8s.io/v1 create is validated as kube's ValidateEventCreate does for that version
(`validate_create`): eventTime, reportingController (a qualified name), reportingInstance,
action and reason are required (each at most 128 characters, the note 1024); the deprecated
fields must be unset; type is Normal or Warning. Field selectors name the view's fields
(regarding.name, reportingController, ...) and are renamed too. Pure functions.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from google.protobuf.message import Message

from apiserver.registry.event import EVENT_TYPES
from apiserver.rest.codec import KindCodec, dumps
from apiserver.validation import dns1123_subdomain, invalid, required
from apiserver.watchcache import encode_json_event
from tinykube.errors import FieldError
from tinykube.kinds import EVENT
from tinykube.manifest import to_dict
from tinykube.selectors import validate_label_key
from tinykube.v1 import event_pb2, eventsv1_pb2

GROUP = "events.k8s.io"
# The view as the REST codec, discovery and OpenAPI see it; storage is EVENT's.
EVENTS_V1 = dataclasses.replace(
    EVENT,
    message=eventsv1_pb2.EventsV1Event,
    list_message=eventsv1_pb2.EventsV1EventList,
    group=GROUP,
    short_names=("ev",),
)

# core name -> events.k8s.io/v1 name, for the fields that differ.
_RENAMES = {
    "message": "note",
    "involvedObject": "regarding",
    "reportingComponent": "reportingController",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
}
_BACK = {v: k for k, v in _RENAMES.items()}
_V1_ORDER = [f.json_name for f in eventsv1_pb2.EventsV1Event.DESCRIPTOR.fields]
_CORE_ORDER = [f.json_name for f in event_pb2.Event.DESCRIPTOR.fields]

REASON_LIMIT = 128
ACTION_LIMIT = 128
REPORTING_INSTANCE_LIMIT = 128
NOTE_LIMIT = 1024


def _ordered(data: dict[str, Any], order: list[str]) -> dict[str, Any]:
    rank = {name: i for i, name in enumerate(order)}
    return dict(sorted(data.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def to_v1(core: dict[str, Any]) -> dict[str, Any]:
    """A core/v1 Event's JSON as events.k8s.io/v1's (apiVersion and kind first)."""
    body = {_RENAMES.get(k, k): v for k, v in core.items() if k not in ("apiVersion", "kind")}
    return {"kind": "Event", "apiVersion": EVENTS_V1.api_version, **_ordered(body, _V1_ORDER)}


def to_core(view: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event's JSON as core/v1's."""
    body = {_BACK.get(k, k): v for k, v in view.items() if k not in ("apiVersion", "kind")}
    return {"kind": "Event", "apiVersion": EVENT.api_version, **_ordered(body, _CORE_ORDER)}


def field_selector(text: str) -> str:
    """A field selector in the view's names (regarding.name=web) in core's."""
    if not text:
        return text
    terms = []
    for term in text.split(","):
        for op in ("!=", "==", "="):
            key, sep, value = term.partition(op)
            if sep:
                head, dot, rest = key.partition(".")
                key = _BACK.get(head, head) + dot + rest
                terms.append(key + sep + value)
                break
        else:
            terms.append(term)
    return ",".join(terms)


class EventsViewCodec(KindCodec):
    """The REST codec of events.k8s.io/v1 Events over stored core/v1 ones."""

    def __init__(self) -> None:
        super().__init__(EVENTS_V1)
        self.core = KindCodec(EVENT)

    def object_dict(self, obj: Message) -> dict[str, Any]:
        return to_v1(self.core.object_dict(obj))

    def decode(
        self, doc: dict[str, Any], validation: str, *, patched: bool = False
    ) -> tuple[Message, list[str]]:
        # The view's schema finds unknown fields (in its names); core reads the renamed rest.
        view, warnings = super().decode(doc, validation, patched=patched)
        core, _ = self.core.decode(to_core(to_dict(view)), "Ignore", patched=patched)
        return core, warnings

    def convert_line(self, line: bytes) -> bytes:
        """One REST watch line of core JSON as the view's."""
        event = json.loads(line)
        if event.get("type") == "ERROR":
            return line
        kind: str = event["type"]
        return encode_json_event(kind, dumps(to_v1(event["object"])))


def _timestamp_set(ts: Any) -> bool:
    return bool(ts.seconds or ts.nanos)


def validate_create(event: event_pb2.Event) -> list[FieldError]:
    """kube's ValidateEventCreate for events.k8s.io/v1, with the view's field names."""
    errs: list[FieldError] = []
    if not event.involvedObject.namespace and event.metadata.namespace not in (
        "default",
        "kube-system",
    ):
        errs.append(
            invalid(
                "regarding.namespace",
                event.involvedObject.namespace,
                "does not match event.namespace",
            )
        )
    if not event.reportingComponent:
        errs.append(required("reportingController"))
    else:
        errs.extend(
            invalid("reportingController", event.reportingComponent, p)
            for p in validate_label_key(event.reportingComponent)
        )
    for path, value, limit in (
        ("reportingInstance", event.reportingInstance, REPORTING_INSTANCE_LIMIT),
        ("action", event.action, ACTION_LIMIT),
        ("reason", event.reason, REASON_LIMIT),
    ):
        if not value:
            errs.append(required(path))
        elif len(value) > limit:
            errs.append(invalid(path, "", f"can have at most {limit} characters"))
    if len(event.message) > NOTE_LIMIT:
        errs.append(invalid("note", "", f"can have at most {NOTE_LIMIT} characters"))
    errs.extend(
        dns1123_subdomain("metadata.name", event.metadata.name) if event.metadata.name else []
    )
    if event.HasField("series"):
        if event.series.count < 2:
            errs.append(invalid("series.count", "", "should be at least 2"))
        if not _timestamp_set(event.series.lastObservedTime):
            errs.append(required("series.lastObservedTime"))
    if not _timestamp_set(event.eventTime):
        errs.append(required("eventTime"))
    if event.type not in EVENT_TYPES:
        errs.append(invalid("type", "", f"has invalid value: {event.type}"))
    for path, is_set in (
        ("deprecatedFirstTimestamp", _timestamp_set(event.firstTimestamp)),
        ("deprecatedLastTimestamp", _timestamp_set(event.lastTimestamp)),
        ("deprecatedCount", event.count != 0),
        ("deprecatedSource", bool(event.source.component or event.source.host)),
    ):
        if is_set:
            errs.append(invalid(path, "", "needs to be unset"))
    return errs
