"""Kubernetes field shapes protobuf's Python classes cannot spell plainly: `continue`,
IntOrString, whole-second timestamps; and their JSON as manifests and grpcurl see it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf import json_format
from google.protobuf.struct_pb2 import ListValue, Value

from apiserver.registry.service import default_service_spec, validate_service
from tinykube.manifest import load_manifests, to_dict
from tinykube.meta import (
    get_continue,
    int_or_string,
    int_or_string_value,
    list_request,
    set_continue,
    timestamp,
)
from tinykube.v1 import meta_pb2, service_pb2

SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports:
  - {name: a, port: 80, targetPort: 8080}
  - {name: b, port: 81, targetPort: http}
  - {name: c, port: 82}
"""


def test_continue_is_readable_and_writable_and_is_kubernetes_json() -> None:
    meta = meta_pb2.ListMeta(resourceVersion="7")
    assert get_continue(meta) == ""
    set_continue(meta, "tok")
    assert get_continue(meta) == "tok"
    assert json_format.MessageToDict(meta) == {"resourceVersion": "7", "continue": "tok"}
    request = list_request(namespace="ns", limit=5, continue_token="tok", label_selector="a=b")
    assert json_format.MessageToDict(request) == {
        "namespace": "ns",
        "labelSelector": "a=b",
        "limit": 5,
        "continue": "tok",
    }
    parsed = json_format.ParseDict({"continue": "x"}, meta_pb2.ListRequest())
    assert get_continue(parsed) == "x"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (int_or_string_value(8080), 8080),
        (int_or_string_value("http"), "http"),
        (Value(), None),
        (Value(number_value=80.5), None),
        (Value(bool_value=True), None),
    ],
)
def test_int_or_string_reads_values(value: Value, expected: int | str | None) -> None:
    assert int_or_string(value) == expected


def test_target_port_reads_and_prints_as_written() -> None:
    (obj,) = load_manifests(SERVICE)
    svc = obj.obj
    assert isinstance(svc, service_pb2.Service)
    assert [int_or_string(p.targetPort) for p in svc.spec.ports] == [8080, "http", None]
    default_service_spec(svc.spec)
    ports = to_dict(svc)["spec"]["ports"]
    # A number stays a JSON number (not 8080.0, not "8080"), a name a string; unset is `port`.
    assert [p["targetPort"] for p in ports] == [8080, "http", 82]
    assert validate_service(svc) == []


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (Value(number_value=80.5), "must be an integer or a string"),
        (Value(bool_value=True), "must be an integer or a string"),
        (Value(list_value=ListValue()), "must be an integer or a string"),
        (int_or_string_value(70000), "must be between 1 and 65535, inclusive"),
        (int_or_string_value("Not_A_Name"), "IANA_SVC_NAME"),
    ],
)
def test_bad_target_port_is_refused_naming_the_field(target: Value, message: str) -> None:
    svc = service_pb2.Service()
    svc.metadata.name = "web"
    svc.metadata.namespace = "default"
    port = svc.spec.ports.add(name="a", port=80, protocol="TCP")
    port.targetPort.CopyFrom(target)
    errors = [str(e) for e in validate_service(svc)]
    assert any(e.startswith("spec.ports[0].targetPort: Invalid value") for e in errors), errors
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 12, 1, 10, 0, 0, 987654),
        datetime(2026, 12, 1, 10, 0, 0, 987654, tzinfo=UTC),
        datetime(2026, 12, 1, 12, 0, 0, 5, tzinfo=timezone(timedelta(hours=2))),
    ],
)
def test_timestamps_are_whole_seconds_in_rfc3339(when: datetime) -> None:
    ts = timestamp(when)
    assert ts.nanos == 0
    assert json_format.MessageToJson(ts) == '"2026-12-01T10:00:00Z"'


@pytest.mark.parametrize(
    ("when", "printed"),
    [
        # Before 1970 a fraction still rounds down (to the earlier second), as Go's Truncate.
        (datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC), '"1969-12-31T23:59:59Z"'),
        (datetime(1, 1, 1, tzinfo=UTC), '"0001-01-01T00:00:00Z"'),
        (datetime(9999, 12, 31, 23, 59, 59, 999999), '"9999-12-31T23:59:59Z"'),
    ],
)
def test_timestamps_at_the_ends_of_the_range(when: datetime, printed: str) -> None:
    ts = timestamp(when)
    assert ts.nanos == 0
    assert json_format.MessageToJson(ts) == printed
