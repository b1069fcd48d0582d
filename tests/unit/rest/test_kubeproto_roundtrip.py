"""Kubernetes protobuf both ways from one table: every served kind's JSON (as the REST API
prints it) encodes to protobuf and decodes back to the same JSON, for the examples and for an
object with every field tinykube models set; lists, Status, DeleteOptions, Eviction and watch
frames too."""

from __future__ import annotations

import contextlib
import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from apiserver.rest import kubeproto
from apiserver.rest.codec import KindCodec, negotiate, protobuf_fallback
from apiserver.rest.kubeproto_tables import MESSAGES
from tinykube.errors import BadRequestError
from tinykube.kinds import ALL_KINDS, BY_KIND, KindInfo
from tinykube.manifest import parse_as
from tinykube.protowire import delimited

EXAMPLES = Path(__file__).parents[3] / "examples"

# Value fields tinykube keeps as google.protobuf.Value: IntOrString ones and RawExtension.
INT_OR_STRING = {"maxUnavailable", "maxSurge", "port", "minAvailable", "targetPort"}


def _fill(message: Message, depth: int = 0) -> None:
    """Every field of a tinykube message set to a sample value (messages nested 6 deep)."""
    desc: Any = message.DESCRIPTOR
    for f in desc.fields:
        if f.containing_oneof is not None and f.containing_oneof.fields[0] is not f:
            continue
        name = f.name
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            target = getattr(message, name)
            if value_field.message_type is None:
                target["k"] = _scalar(value_field, "k")
            elif value_field.message_type.full_name == "google.protobuf.Timestamp":
                target["k"].seconds = 1_700_000_000
            elif depth < 6:
                _fill(target["k"], depth + 1)
            continue
        if f.message_type is not None:
            full = f.message_type.full_name
            if full == "google.protobuf.Timestamp":
                item = getattr(message, name).add() if _repeated(f) else getattr(message, name)
                item.seconds = 1_700_000_000
                continue
            if full == "google.protobuf.Value":
                value = getattr(message, name)
                if name in INT_OR_STRING:
                    value.string_value = "25%"
                else:
                    value.struct_value.update({"a": "b"})
                continue
            if full == "google.protobuf.Struct":
                content: dict[str, Any] = {"a": ["b", 1]} if name == "data" else {"f:a": {}}
                getattr(message, name).update(content)
                continue
            if depth >= 6:
                continue
            if _repeated(f):
                _fill(getattr(message, name).add(), depth + 1)
            else:
                _fill(getattr(message, name), depth + 1)
            continue
        if _repeated(f):
            getattr(message, name).append(_scalar(f, name))
        else:
            setattr(message, name, _scalar(f, name))


def _repeated(f: FieldDescriptor) -> bool:
    return bool(f.is_repeated)


def _scalar(f: FieldDescriptor, name: str) -> Any:
    if f.type == FieldDescriptor.TYPE_BOOL:
        return True
    if f.type == FieldDescriptor.TYPE_BYTES:
        return b"\x00\x01bytes"
    if f.type == FieldDescriptor.TYPE_ENUM:
        assert f.enum_type is not None
        return f.enum_type.values[-1].number
    if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 1.5
    if f.type == FieldDescriptor.TYPE_STRING:
        return "1" if "quantity" in name.lower() else f"{name}-value"
    return 7


def full_object(info: KindInfo, *, whole: bool = False) -> dict[str, Any]:
    message = info.message()
    _fill(message)
    if info.kind == "Service" and not whole:
        # tinykube models status.loadBalancer.ingress as strings, Kubernetes as
        # LoadBalancerIngress objects: see test_a_value_that_does_not_fit_is_left_out.
        message.status.loadBalancer.ClearField("ingress")  # type: ignore[attr-defined]
    return KindCodec(info).object_dict(message)


def canonical(doc: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """`doc` as decoding gives it back: zero values of non-pointer fields (Go writes them, the
    JSON may print them, decoding leaves them out as JSON readers take them as unset) and
    empty non-pointer structs left out; walked by the same tables."""
    if name is None:
        found = kubeproto.message_of(doc.get("apiVersion", ""), doc.get("kind", ""))
        assert found is not None
        name = found
    fields_by_json: dict[str, tuple[str, str]] = {}
    pending = [name]
    while pending:
        for json_name, type_, nested in MESSAGES[pending.pop()].values():
            if type_ == "inline":
                pending.append(nested)
            else:
                fields_by_json[json_name] = (type_, nested)
    out: dict[str, Any] = {}
    for key, value in doc.items():
        type_, nested = fields_by_json.get(key, ("", ""))
        if nested in MESSAGES and type_ in ("message", "*message") and isinstance(value, dict):
            value = canonical(value, nested)
        elif nested in MESSAGES and type_ == "[]message":
            value = [canonical(v, nested) if isinstance(v, dict) else v for v in value]
        elif type_ == "map" and nested in MESSAGES and isinstance(value, dict):
            value = {k: canonical(v, nested) for k, v in value.items()}
        pointer = type_.startswith("*")
        zero = value in ("", 0, {}, [], None)  # False == 0 too
        if type_ and not pointer and zero and nested != "Quantity":
            continue
        out[key] = value
    return out


def round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    encoded = kubeproto.encode(doc, strict=True)
    assert encoded is not None, f"{doc.get('kind')} has no protobuf form"
    decoded, unknown = kubeproto.decode_unknown(encoded)
    assert unknown == []
    return decoded


def _paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        out = set()
        for key, item in value.items():
            out |= _paths(item, f"{prefix}.{key}" if prefix else key) or {f"{prefix}.{key}"}
        return out
    if isinstance(value, list):
        out = set()
        for item in value:
            out |= _paths(item, f"{prefix}[]")
        return out
    return {prefix}


# CustomResourceDefinitions are served as JSON only (their schema has no protobuf table).
_PROTOBUF_KINDS = [k for k in ALL_KINDS if kubeproto.supports(k.api_version, k.kind)]


def test_only_custom_resource_definitions_are_json_only() -> None:
    assert {k.kind for k in ALL_KINDS} - {k.kind for k in _PROTOBUF_KINDS} == {
        "CustomResourceDefinition"
    }


@pytest.mark.parametrize("info", _PROTOBUF_KINDS, ids=[k.kind for k in _PROTOBUF_KINDS])
def test_every_modelled_field_of_every_kind_round_trips(info: KindInfo) -> None:
    doc = canonical(full_object(info))
    back = round_trip(copy.deepcopy(doc))
    missing = sorted(_paths(doc) - _paths(back))
    assert missing == [], f"fields Kubernetes' {info.kind} table lacks or drops: {missing}"
    assert back == doc
    # ... and what comes back is a body the JSON path takes without unknown fields.
    _, unknown = parse_as(info, back)
    assert unknown == []


def _examples() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in BY_KIND:
                out.append((f"{path.stem}-{doc['kind']}", doc))
    return out


@pytest.mark.parametrize(("name", "doc"), _examples(), ids=[n for n, _ in _examples()])
def test_the_examples_round_trip_as_the_rest_api_prints_them(
    name: str, doc: dict[str, Any]
) -> None:
    info = BY_KIND[doc["kind"]]
    obj, _ = parse_as(info, doc)
    printed = KindCodec(info).object_dict(obj)
    assert round_trip(printed) == canonical(printed)


def test_a_list_status_and_watch_frame() -> None:
    info = BY_KIND["Pod"]
    pod = full_object(info)
    listed = KindCodec(info).list_dict("42", [pod, pod], "token")
    # A list's items carry no kind and apiVersion in protobuf, as in kube-apiserver's.
    item = {k: v for k, v in pod.items() if k not in ("kind", "apiVersion")}
    assert round_trip(listed) == {**listed, "items": [item, item]}
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "x" not found',
        "reason": "NotFound",
        "details": {"name": "x", "kind": "pods", "causes": [{"field": "a", "reason": "b"}]},
        "code": 404,
    }
    expected = {k: v for k, v in status.items() if k != "metadata"}
    assert round_trip(status) == expected
    obj = kubeproto.encode(pod)
    assert obj is not None
    frame = kubeproto.watch_frame("ADDED", obj)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    # a bare WatchEvent (no magic, no envelope: kube's raw stream serializer): type 1, object
    # 2, a RawExtension whose raw is the object's own envelope
    assert not frame[4:].startswith(kubeproto.MAGIC)
    event = dict(kubeproto.fields(frame[4:]))
    assert event[1] == b"ADDED"
    raw_object = event[2]
    assert isinstance(raw_object, bytes)
    (inner,) = [v for n, v in kubeproto.fields(raw_object) if n == 1]
    assert inner == obj


def test_delete_options_as_client_go_sends_them() -> None:
    """gracePeriodSeconds 1, preconditions 2 {uid 1, resourceVersion 2}, orphanDependents 3,
    propagationPolicy 4, dryRun 5; a pointer field set to zero is kept."""
    raw = (
        b"\x08\x00"  # gracePeriodSeconds 0
        + delimited(2, delimited(1, b"u-1") + delimited(2, b"7"))
        + delimited(4, b"Foreground")
        + delimited(5, b"All")
    )
    body = kubeproto.envelope("v1", "DeleteOptions", raw)
    assert kubeproto.delete_options(body) == {
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": "u-1", "resourceVersion": "7"},
        "propagationPolicy": "Foreground",
        "dryRun": ["All"],
    }
    orphan = kubeproto.envelope("meta.k8s.io/v1", "DeleteOptions", b"\x18\x01")
    assert kubeproto.delete_options(orphan) == {"orphanDependents": True}
    assert kubeproto.delete_options(kubeproto.envelope("", "", b"")) == {}


def test_an_eviction_with_delete_options() -> None:
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 0, "preconditions": {"uid": "u"}},
    }
    assert round_trip(eviction) == eviction


def test_every_table_names_only_tables_or_well_known_messages() -> None:
    well_known = {
        "Time",
        "MicroTime",
        "Quantity",
        "IntOrString",
        "RawExtension",
        "FieldsV1",
        "Strings",
    }
    scalars = {"string", "bytes"}
    for name, table in MESSAGES.items():
        for number, (json_name, type_, nested) in table.items():
            assert number > 0
            assert json_name or type_ == "inline", (name, number)
            if nested:
                assert nested in MESSAGES or nested in well_known or nested in scalars, nested


def test_negotiation_falls_back_only_where_the_client_allows() -> None:
    fmt = negotiate("application/vnd.kubernetes.protobuf, application/json", table=False)
    assert fmt is not None
    assert protobuf_fallback(fmt) == "json"
    only = negotiate("application/vnd.kubernetes.protobuf", table=False)
    assert only is not None
    assert protobuf_fallback(only) is None
    assert kubeproto.encode({"apiVersion": "autoscaling/v2", "kind": "Scale"}) is None


def test_time_and_micro_time() -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"renewTime": "2026-12-01T10:00:00.123456Z", "leaseDurationSeconds": 0},
    }
    assert round_trip(lease) == lease
    assert json.loads(json.dumps(lease)) == lease


def test_review_and_token_kinds_for_their_handlers() -> None:
    """authentication/v1 and authorization/v1 bodies (kubectl create token, auth can-i) read
    from the same tables; ExtraValue (a Go []string) is a plain JSON list."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "resourceAttributes": {"namespace": "ns", "verb": "get", "resource": "pods"},
            "user": "jane",
            "groups": ["dev"],
            "extra": {"scopes": ["a", "b"]},
        },
    }
    assert round_trip(review) == review
    token = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": "robot", "namespace": "ns"},
        "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600},
    }
    assert round_trip(token) == token
    scale = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": 0},
        "status": {"replicas": 3, "selector": "app=web"},
    }
    # replicas is not a pointer: 0 is unset, and an empty non-pointer struct is left out
    assert round_trip(scale) == {k: v for k, v in scale.items() if k != "spec"}


def test_mangled_bodies_are_bad_requests_never_crashes() -> None:
    """Every byte of a full Pod's encoding flipped or cut (a fixed sample): decoding answers or
    refuses with a BadRequestError, never another exception."""
    body = kubeproto.encode(full_object(BY_KIND["Pod"]))
    assert body is not None
    rng = random.Random(22)
    for _ in range(400):
        mangled = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(mangled))
            mangled[i] = rng.randrange(256)
        if rng.random() < 0.3:
            del mangled[rng.randrange(len(mangled)) :]
        with contextlib.suppress(BadRequestError):
            kubeproto.decode_unknown(bytes(mangled))
    revision = kubeproto.envelope(
        "apps/v1",
        "ControllerRevision",
        delimited(2, delimited(1, b"[" * 100000 + b"]" * 100000)),
    )
    with pytest.raises(BadRequestError, match="not JSON"):
        kubeproto.decode(revision)


def test_a_value_that_does_not_fit_is_left_out() -> None:
    """A value whose shape is not Kubernetes' (a load balancer ingress as a bare string,
    where Kubernetes has objects) is left out of an answer (a Go client could not decode it
    from JSON either) rather than failing it; strict encoding (the tests') refuses it."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": ["192.0.2.1"]}},
    }
    assert kubeproto.encode(service, strict=True) is None
    encoded = kubeproto.encode(service)
    assert encoded is not None
    back = kubeproto.decode(encoded)
    assert "loadBalancer" not in back.get("status", {})
    assert back["spec"] == service["spec"]
    for bad in ({"data": {"a": 1}}, {"data": "x"}, {"immutable": "yes"}):
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, **bad}
        assert kubeproto.encode(config_map, strict=True) is None
        lenient = kubeproto.encode(config_map)
        assert lenient is not None
        assert kubeproto.decode(lenient) == {k: v for k, v in config_map.items() if k not in bad}


def test_zero_values_the_json_prints_come_back_as_unset() -> None:
    """Kubernetes' JSON prints some zero values (restartCount 0, ready false); decoding, as Go
    writes every non-pointer field, cannot tell them from unset and leaves them out, which
    the JSON reader takes the same way. Pointer fields keep their zero (replicas 0)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "generation": 0},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}]},
        "status": {
            "containerStatuses": [
                {"name": "c", "ready": False, "restartCount": 0, "image": "i", "imageID": ""}
            ]
        },
    }
    back = round_trip(copy.deepcopy(pod))
    assert back == canonical(pod)
    assert back["status"]["containerStatuses"] == [{"name": "c", "image": "i"}]
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 0}}
    assert round_trip(deployment) == deployment == canonical(deployment)
