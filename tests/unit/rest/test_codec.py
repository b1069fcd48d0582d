"""The REST codec: object JSON, lists from cached bytes, body decoding, media negotiation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apiserver.rest.codec import (
    AS_JSON,
    AS_PROTOBUF,
    AS_TABLE,
    AS_YAML,
    KindCodec,
    negotiate,
    parse_object_body,
)
from tinykube.errors import BadRequestError
from tinykube.kinds import POD, REPLICA_SET
from tinykube.v1 import meta_pb2, pod_pb2


def make_pod() -> pod_pb2.Pod:
    return pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default", labels={"b": "2", "a": "1"}),
        spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="busybox")]),
    )


def test_object_json_has_kind_and_api_version_first() -> None:
    data = json.loads(KindCodec(REPLICA_SET).object_json(make_pod()))
    assert list(data)[:2] == ["kind", "apiVersion"]
    assert (data["kind"], data["apiVersion"]) == ("ReplicaSet", "apps/v1")
    pod = json.loads(KindCodec(POD).object_json(make_pod()))
    assert list(pod["metadata"]["labels"]) == ["a", "b"]


def test_object_json_carries_the_zero_fields_kubernetes_prints() -> None:
    """The watch cache encodes each version once with this: every LIST and watcher gets them."""
    pod = make_pod()
    pod.status.phase = "Pending"
    pod.status.containerStatuses.add(name="c", image="busybox").state.waiting.reason = "x"
    data = json.loads(KindCodec(POD).object_json(pod))
    (status,) = data["status"]["containerStatuses"]
    assert (status["ready"], status["restartCount"], status["imageID"]) == (False, 0, "")
    assert status["lastState"] == {}
    assert data["spec"]["containers"][0]["resources"] == {}
    # Read back (a PUT of what a GET returned), it is the object it was.
    pod.apiVersion, pod.kind = "v1", "Pod"
    assert KindCodec(POD).decode(data, "Strict")[0] == pod


def test_list_json_assembles_item_bytes() -> None:
    codec = KindCodec(POD)
    item = codec.object_json(make_pod())
    data = json.loads(codec.list_json("7", [item, item], "tok"))
    assert data["kind"] == "PodList" and data["metadata"] == {
        "resourceVersion": "7",
        "continue": "tok",
    }
    assert data["items"] == [json.loads(item)] * 2


def test_bookmark_json() -> None:
    data = json.loads(KindCodec(POD).bookmark_json(12, {"k8s.io/initial-events-end": "true"}))
    assert data == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}},
    }


def pod_doc(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "bogus": 1}]},
    }
    doc.update(extra)
    return doc


@pytest.mark.parametrize(
    ("validation", "warnings"),
    [("Warn", ['unknown field "spec.containers[0].bogus"']), ("Ignore", [])],
)
def test_decode_drops_unknown_fields(validation: str, warnings: list[str]) -> None:
    obj, got = KindCodec(POD).decode(pod_doc(), validation)
    assert got == warnings
    assert obj.spec.containers[0].image == "busybox"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (pod_doc(), 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                    'unknown field "spec.containers[0].bogus"'),
        (pod_doc(apiVersion="apps/v1"),
         "the API version in the data (apps/v1) does not match the expected API version (v1)"),
        (pod_doc(kind="Node"),
         "the kind in the data (Node) does not match the expected kind (Pod)"),
        ({"spec": "x"},
         'Pod in version "v1" cannot be handled as a Pod: spec: expected an object, got str'),
    ],
)  # fmt: skip
def test_decode_refuses(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        KindCodec(POD).decode(doc, "Strict")
    assert info.value.message == message


def test_a_patched_objects_strict_error_does_not_name_the_kind() -> None:
    with pytest.raises(BadRequestError) as info:
        KindCodec(POD).decode(pod_doc(), "Strict", patched=True)
    assert info.value.message == 'strict decoding error: unknown field "spec.containers[0].bogus"'


def yaml_bomb(levels: int) -> bytes:
    """A "billion laughs" document: each level's list names the previous level nine times."""
    lines = ["  a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"  {cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return ("kind: Pod\nmetadata:\n  name: bomb\nbomb:\n" + "\n".join(lines) + "\n").encode()


def test_aliases_that_expand_little_are_kept() -> None:
    doc = parse_object_body(yaml_bomb(4) + b"copy: *d\n", "application/yaml")
    assert doc["copy"] == doc["bomb"]["d"] and len(doc["copy"]) == 9


@pytest.mark.parametrize(
    ("body", "media", "message"),
    [
        (b"", "application/json", "the request body is empty; an object is required"),
        (b"[1]", "application/json", "the request body must be an object, got an array"),
        (b'{"a":', "application/json",
         "couldn't get version/kind; json parse error: Expecting value at line 1, column 6 "
         "(offset 5)"),
        (b"a: [b", "application/yaml",
         "error converting YAML to JSON: yaml: line 1, column 6: expected ',' or ']', but got "
         "'<stream end>'"),
        (b"\xff", "application/json", "the request body is not UTF-8: byte 0"),
        # Hostile bodies the parsers refuse with ValueError or RecursionError, not JSON errors.
        (b'{"a": ' + b"9" * 5000 + b"}", "application/json",
         "couldn't get version/kind; json parse error: a number has too many digits"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json",
         "couldn't get version/kind; JSON parse error: the document is nested too deeply"),
        (b"[" * 100_000 + b"]" * 100_000, "application/yaml",
         "couldn't get version/kind; YAML parse error: the document is nested too deeply"),
        # Aliases: 300 bytes that expand to 387 million nodes (the apiserver spent minutes and
        # gigabytes decoding it into a managedFields entry), and a document that contains itself.
        (yaml_bomb(9), "application/yaml",
         "error converting YAML to JSON: yaml: line 1, column 1: document contains excessive "
         "aliasing"),
        (b"metadata: &m {name: x, labels: *m}\n", "application/yaml",
         "error converting YAML to JSON: yaml: line 1, column 11: anchor value contains itself"),
        # JSON has no NaN or Infinity, and no Kubernetes field holds a number past a double
        (b'{"spec": {"replicas": NaN}}', "application/json",
         "couldn't get version/kind; json parse error: invalid character 'N' looking for "
         "beginning of value"),
        (b'{"a": -Infinity}', "application/json",
         "couldn't get version/kind; json parse error: invalid character '-' looking for "
         "beginning of value"),
        (b'{"a": 1e400}', "application/json",
         "couldn't get version/kind; json parse error: cannot unmarshal number 1e400: it is "
         "out of range"),
    ],
)  # fmt: skip
def test_malformed_bodies(body: bytes, media: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_object_body(body, media)
    assert info.value.message == message


def test_yaml_keeps_timestamps_as_strings() -> None:
    doc = parse_object_body(
        b"metadata:\n  creationTimestamp: 2026-01-01T00:00:00Z\n", "application/yaml"
    )
    assert doc["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z"


KUBECTL_GET = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
    "g=meta.k8s.io,application/json"
)


@pytest.mark.parametrize(
    ("accept", "table", "expected"),
    [
        ("", True, AS_JSON),
        ("*/*", True, AS_JSON),
        ("application/json, */*", True, AS_JSON),
        ("application/yaml", True, AS_YAML),
        (KUBECTL_GET, True, AS_TABLE),
        (KUBECTL_GET, False, AS_JSON),
        ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json",
         True, AS_JSON),
        ("application/vnd.kubernetes.protobuf", True, AS_PROTOBUF),
        ("application/vnd.kubernetes.protobuf, application/json", True, "protobuf|json"),
        ("application/vnd.kubernetes.protobuf, application/vnd.kubernetes.protobuf;x=y, "
         "application/yaml", True, "protobuf|yaml"),
        ("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json",
         True, AS_JSON),
        ("application/json;as=Table;v=v1;g=meta.k8s.io", False, None),
    ],
)  # fmt: skip
def test_negotiate(accept: str, table: bool, expected: str | None) -> None:
    assert negotiate(accept, table=table) == expected
