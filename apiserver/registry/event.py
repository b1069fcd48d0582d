"""Events (core/v1): defaults and validation.

A legacy (core/v1) Event counts itself; one with an eventTime (events.k8s.io/v1 style) keeps
its count in `series`, as in kube. Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from apiserver.registry.base import META_FIELDS, Strategy
from apiserver.validation import invalid, unsupported
from tinykube.errors import FieldError
from tinykube.v1 import event_pb2

EVENT_TYPES = ("Normal", "Warning")


def validate_event(event: event_pb2.Event) -> list[FieldError]:
    errs: list[FieldError] = []
    if event.type and event.type not in EVENT_TYPES:
        errs.append(unsupported("type", event.type, EVENT_TYPES))
    if event.count < 0:
        errs.append(invalid("count", event.count, "must be greater than or equal to 0"))
    return errs


class EventStrategy(Strategy[event_pb2.Event]):
    selectable_fields = (
        *META_FIELDS,
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "type",
        "source",
    )

    def default(self, obj: event_pb2.Event, now: datetime) -> None:
        # deprecatedCount stays unset on an events.k8s.io/v1-style Event, as in kube.
        if obj.count == 0 and not obj.HasField("eventTime"):
            obj.count = 1
        if not obj.type:
            obj.type = "Normal"

    def check(self, obj: event_pb2.Event) -> list[FieldError]:
        return validate_event(obj)

    def fields(self, obj: event_pb2.Event) -> dict[str, str]:
        ref = obj.involvedObject
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": obj.metadata.namespace,
            "involvedObject.kind": ref.kind,
            "involvedObject.namespace": ref.namespace,
            "involvedObject.name": ref.name,
            "involvedObject.uid": ref.uid,
            "involvedObject.apiVersion": ref.apiVersion,
            "involvedObject.resourceVersion": ref.resourceVersion,
            "involvedObject.fieldPath": ref.fieldPath,
            "reason": obj.reason,
            "reportingComponent": obj.reportingComponent,
            "type": obj.type,
            "source": obj.source.component,
        }
