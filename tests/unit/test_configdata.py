"""ConfigMap and Secret rules (apiserver/configdata.py): kube's key check, Go's base64 and JSON
errors, stringData, and the protobuf bodies `kubectl create configmap|secret` send."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from apiserver import configdata, validation
from apiserver.registry import strategy_for
from apiserver.rest import kubeproto
from tinykube.errors import BadRequestError
from tinykube.kinds import CONFIG_MAP, SECRET
from tinykube.v1 import configmap_pb2, meta_pb2, secret_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "problems"),
    [
        ("a.b_C-1", []),
        (".hidden", []),
        (".", ["must not be '.'"]),
        ("..", ["must not be '..'"]),
        ("..a", ["must not start with '..'"]),
        ("a/b", [validation.CONFIG_MAP_KEY_MSG]),
        ("", [validation.CONFIG_MAP_KEY_MSG]),
        ("k\n", [validation.CONFIG_MAP_KEY_MSG]),
        ("x" * 254, ["must be no more than 253 characters"]),
    ],
)
def test_config_key_problems(key: str, problems: list[str]) -> None:
    assert validation.config_map_key_problems(key) == problems


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("", None),
        ("aGVsbG8=", None),
        ("aGVs\nbG8=", None),
        ("aGVsbG8", 4),  # missing padding: Go names the start of the short quantum
        ("aGVsbA", 4),
        ("aGVs!G8=", 4),
        ("aGVsbA-_", 6),  # the URL alphabet is not StdEncoding's
        ("a===", 1),
        ("aGVsbA=", 7),
        ("aGVsbG8=x", 8),
    ],
)
def test_go_base64_error(text: str, at: int | None) -> None:
    assert configdata.go_base64_error(text) == at


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"auths": {}}', ""),
        (b"", "unexpected end of JSON input"),
        (b'{"a": ', "unexpected end of JSON input"),
        (b"x", "invalid character 'x' looking for beginning of value"),
        (b"{x", "invalid character 'x' looking for beginning of object key string"),
        (b"[]", "json: cannot unmarshal array into Go value of type map[string]interface {}"),
        (b"{} {}", "invalid character '{' after top-level value"),
    ],
)
def test_go_json_object_problem(raw: bytes, problem: str) -> None:
    assert configdata.go_json_object_problem(raw) == problem


def test_string_data_wins_and_is_dropped_on_create_and_update() -> None:
    strategy = strategy_for(SECRET)
    secret = secret_pb2.Secret(
        metadata=meta_pb2.ObjectMeta(name="s", namespace="default"),
        data={"a": b"1", "b": b"2"},
        stringData={"a": "one"},
    )
    strategy.prepare_for_create(secret, NOW)
    assert dict(secret.data) == {"a": b"one", "b": b"2"}
    assert not secret.stringData and secret.type == "Opaque"
    assert secret.metadata.generation == 0
    new = secret_pb2.Secret()
    new.CopyFrom(secret)
    new.stringData["c"] = "three"
    new.type = ""
    strategy.prepare_for_update(new, secret)
    assert dict(new.data) == {"a": b"one", "b": b"2", "c": b"three"}
    assert not new.stringData and new.type == "Opaque"
    assert strategy.validate_update(new, secret) == []


def test_immutable_secret_keeps_its_data() -> None:
    old = secret_pb2.Secret(
        metadata=meta_pb2.ObjectMeta(name="s", namespace="default"),
        type="Opaque",
        data={"a": b"1"},
        immutable=True,
    )
    new = secret_pb2.Secret()
    new.CopyFrom(old)
    new.stringData["a"] = "2"
    strategy_for(SECRET).prepare_for_update(new, old)
    assert [str(e) for e in strategy_for(SECRET).validate_update(new, old)] == [
        "data: Forbidden: field is immutable when `immutable` is set"
    ]


def test_config_map_size_counts_data_and_binary_data() -> None:
    cm = configmap_pb2.ConfigMap(
        metadata=meta_pb2.ObjectMeta(name="c", namespace="default"),
        data={"a": "é" * (512 * 1024)},  # 2 bytes each in UTF-8: 1 MiB
    )
    assert configdata.validate_config_map(cm) == []
    cm.binaryData["b"] = b"\x00"
    assert [str(e) for e in configdata.validate_config_map(cm)] == [
        "[]: Too long: must have at most 1048576 bytes"
    ]


def test_json_body_values_are_checked_without_showing_them() -> None:
    doc = {"metadata": {"name": "s"}, "data": {"k": "c2VjcmV0!"}}
    with pytest.raises(BadRequestError) as info:
        configdata.checked_json_body(SECRET, doc)
    assert str(info.value) == (
        'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 8'
    )
    checked = configdata.checked_json_body(CONFIG_MAP, {"data": {"k": None}})
    assert checked == {"data": {"k": ""}}


def _field(number: int, value: bytes) -> bytes:
    return bytes([number << 3 | 2, len(value)]) + value


def test_protobuf_secret_and_config_map_bodies() -> None:
    def envelope(kind: str, raw: bytes) -> bytes:
        return b"k8s\x00" + _field(1, _field(1, b"v1") + _field(2, kind.encode())) + _field(2, raw)

    entry = _field(2, _field(1, b"k") + _field(2, b"\x00\x01"))
    secret = _field(1, _field(1, b"s")) + entry + _field(3, b"Opaque") + bytes([5 << 3, 1])
    assert kubeproto.decode(envelope("Secret", secret)) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"k": base64.b64encode(b"\x00\x01").decode()},
        "type": "Opaque",
        "immutable": True,
    }
    cm = _field(1, _field(1, b"c")) + _field(2, _field(1, b"a") + _field(2, b"b"))
    assert kubeproto.decode(envelope("ConfigMap", cm))["data"] == {"a": "b"}
