"""ConfigMaps and Secrets against a real apiserver on a real etcd, over gRPC and REST.

stringData merged into data and never returned, kube's validation messages and status codes
(422 for an invalid object, 400 for a body Go's decoder refuses), immutability, the 1 MiB
limit, the three patch types, kubectl's protobuf bodies, the `type` field selector, and that
no Secret value reaches the apiserver's log.
"""

from __future__ import annotations

import base64
import json
import logging
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
from tinykube.v1 import (
    configmap_pb2,
    configmap_pb2_grpc,
    meta_pb2,
    secret_pb2,
    secret_pb2_grpc,
)

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}
CMS = "/api/v1/namespaces/default/configmaps"
SECRETS = "/api/v1/namespaces/default/secrets"
# Never to appear in a log line, an error or a response other than the object's own data.
SECRET_VALUE = "hunter2-do-not-log"
IMMUTABLE = "field is immutable when `immutable` is set"


@dataclass
class Api:
    running: RunningAPIServer
    session: aiohttp.ClientSession
    base: str
    cms: configmap_pb2_grpc.ConfigMapsAsyncStub
    secrets: secret_pb2_grpc.SecretsAsyncStub

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = body if isinstance(body, bytes | str) or body is None else json.dumps(body)
        hdrs = dict(JSON if body is not None else {})
        hdrs.update(headers or {})
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as r:
            raw = await r.read()
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw.decode()


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
            configmap_pb2_grpc.ConfigMapsStub(channel),
            secret_pb2_grpc.SecretsStub(channel),
        )
    finally:
        await channel.close()
        await session.close()
        await running.server.stop()


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def meta(name: str) -> meta_pb2.ObjectMeta:
    return meta_pb2.ObjectMeta(name=name, namespace="default")


def cm_doc(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra}


def secret_doc(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, **extra}


# ---- gRPC ---------------------------------------------------------------------------------


async def test_grpc_secret_string_data_is_merged_and_never_returned(api: Api) -> None:
    secret = secret_pb2.Secret(
        metadata=meta("g1"), data={"a": b"old", "b": b"kept"}, stringData={"a": "new", "c": "3"}
    )
    created = await api.secrets.Create(secret_pb2.CreateSecretRequest(secret=secret))
    assert dict(created.data) == {"a": b"new", "b": b"kept", "c": b"3"}
    assert not created.stringData
    assert created.type == "Opaque"
    assert created.metadata.generation == 0  # kube's secrets have none
    got = await api.secrets.Get(meta_pb2.GetRequest(namespace="default", name="g1"))
    assert not got.stringData and dict(got.data) == dict(created.data)

    got.stringData["b"] = "changed"
    updated = await api.secrets.Update(secret_pb2.UpdateSecretRequest(secret=got))
    assert dict(updated.data) == {"a": b"new", "b": b"changed", "c": b"3"}
    assert not updated.stringData

    got = await api.secrets.Get(meta_pb2.GetRequest(namespace="default", name="g1"))
    got.type = "kubernetes.io/basic-auth"
    await expect_error(
        api.secrets.Update(secret_pb2.UpdateSecretRequest(secret=got)),
        grpc.StatusCode.INVALID_ARGUMENT,
        'Secret "g1" is invalid: type: Invalid value: "kubernetes.io/basic-auth": '
        "field is immutable; data[username]: Required value; data[password]: Required value",
    )


async def test_grpc_immutable_config_map(api: Api) -> None:
    cm = configmap_pb2.ConfigMap(metadata=meta("g2"), data={"k": "v"}, immutable=True)
    created = await api.cms.Create(configmap_pb2.CreateConfigMapRequest(configMap=cm))
    created.data["k"] = "w"
    created.ClearField("immutable")
    await expect_error(
        api.cms.Update(configmap_pb2.UpdateConfigMapRequest(configMap=created)),
        grpc.StatusCode.INVALID_ARGUMENT,
        f'ConfigMap "g2" is invalid: immutable: Forbidden: {IMMUTABLE}; '
        f"data: Forbidden: {IMMUTABLE}",
    )
    # Metadata may still change.
    got = await api.cms.Get(meta_pb2.GetRequest(namespace="default", name="g2"))
    got.metadata.labels["tier"] = "web"
    updated = await api.cms.Update(configmap_pb2.UpdateConfigMapRequest(configMap=got))
    assert updated.metadata.labels["tier"] == "web"


async def test_grpc_bad_keys_name_the_field(api: Api) -> None:
    cm = configmap_pb2.ConfigMap(metadata=meta("g3"), data={"a b": "1", "x": "1"})
    cm.binaryData["x"] = b"\x00"
    details = await expect_error(
        api.cms.Create(configmap_pb2.CreateConfigMapRequest(configMap=cm)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert details.startswith(
        'ConfigMap "g3" is invalid: data[a b]: Invalid value: "a b": a valid config key must '
        "consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
        "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    )
    assert details.endswith('data[x]: Invalid value: "x": duplicate of key present in binaryData')


# ---- REST ---------------------------------------------------------------------------------


async def test_rest_crud_list_and_patches(api: Api) -> None:
    status, body = await api.call("POST", CMS, cm_doc("r1", data={"a": "1", "b": "2"}))
    assert status == 201, body
    assert body["data"] == {"a": "1", "b": "2"}
    assert "generation" not in body["metadata"]
    sm = {"Content-Type": "application/strategic-merge-patch+json"}
    status, body = await api.call("PATCH", f"{CMS}/r1", {"data": {"a": None, "c": "3"}}, sm)
    assert status == 200, body
    assert body["data"] == {"b": "2", "c": "3"}
    merge = {"Content-Type": "application/merge-patch+json"}
    status, body = await api.call(
        "PATCH", f"{CMS}/r1", {"binaryData": {"bin": b64(b"\xff")}}, merge
    )
    assert status == 200, body
    assert body["binaryData"] == {"bin": "/w=="}
    jp = {"Content-Type": "application/json-patch+json"}
    ops = [{"op": "replace", "path": "/data/b", "value": "22"}]
    status, body = await api.call("PATCH", f"{CMS}/r1", ops, jp)
    assert status == 200, body
    assert body["data"]["b"] == "22"

    status, body = await api.call("GET", "/api/v1/configmaps")
    assert status == 200
    assert body["kind"] == "ConfigMapList"
    assert "r1" in [i["metadata"]["name"] for i in body["items"]]
    status, body = await api.call(
        "GET", CMS, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    )
    row = next(r for r in body["rows"] if r["cells"][0] == "r1")
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert row["cells"][1] == 3  # b, c and bin
    status, _ = await api.call("DELETE", f"{CMS}/r1")
    assert status == 200
    status, _ = await api.call("GET", f"{CMS}/r1")
    assert status == 404


async def test_rest_secret_string_data_and_table(api: Api) -> None:
    doc = secret_doc("r2", data={"user": b64("admin")}, stringData={"password": SECRET_VALUE})
    status, body = await api.call("POST", SECRETS, doc)
    assert status == 201, body
    assert body["type"] == "Opaque"
    assert body["data"] == {"password": b64(SECRET_VALUE), "user": b64("admin")}
    assert "stringData" not in body
    sm = {"Content-Type": "application/strategic-merge-patch+json"}
    status, body = await api.call("PATCH", f"{SECRETS}/r2", {"stringData": {"user": "root"}}, sm)
    assert status == 200, body
    assert body["data"]["user"] == b64("root") and "stringData" not in body
    status, body = await api.call(
        "GET", SECRETS, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    )
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Type", "Data", "Age"]
    row = next(r for r in body["rows"] if r["cells"][0] == "r2")
    assert row["cells"][1:3] == ["Opaque", 2]
    status, body = await api.call("GET", f"{SECRETS}?fieldSelector=type%3DOpaque")
    assert "r2" in [i["metadata"]["name"] for i in body["items"]]
    status, body = await api.call("GET", f"{SECRETS}?fieldSelector=type%3Dkubernetes.io%2Ftls")
    assert "r2" not in [i["metadata"]["name"] for i in body["items"]]


@pytest.mark.parametrize(
    ("doc", "message", "cause_field"),
    [
        (
            secret_doc("t1", type="kubernetes.io/tls", data={"tls.crt": b64("c")}),
            'Secret "t1" is invalid: data[tls.key]: Required value',
            "data[tls.key]",
        ),
        (
            secret_doc(
                "t2",
                type="kubernetes.io/dockerconfigjson",
                stringData={".dockerconfigjson": "{" + SECRET_VALUE},
            ),
            'Secret "t2" is invalid: data[.dockerconfigjson]: Invalid value: '
            "\"<secret contents redacted>\": invalid character 'h' looking for beginning of "
            "object key string",
            "data[.dockerconfigjson]",
        ),
        (
            secret_doc("t3", type="kubernetes.io/service-account-token"),
            'Secret "t3" is invalid: metadata.annotations[kubernetes.io/service-account.name]: '
            "Required value",
            "metadata.annotations[kubernetes.io/service-account.name]",
        ),
        (
            secret_doc("t4", type="kubernetes.io/ssh-auth", stringData={"ssh-privatekey": ""}),
            'Secret "t4" is invalid: data[ssh-privatekey]: Required value',
            "data[ssh-privatekey]",
        ),
        (
            secret_doc("t5", data={"big": b64("x" * (1024 * 1024 + 1))}),
            'Secret "t5" is invalid: data: Too long: must have at most 1048576 bytes',
            "data",
        ),
        (
            cm_doc("t6", data={"big": "x" * (1024 * 1024)}, binaryData={"more": b64("y")}),
            'ConfigMap "t6" is invalid: []: Too long: must have at most 1048576 bytes',
            "[]",
        ),
        (
            cm_doc("t7", data={"..": "x"}),
            'ConfigMap "t7" is invalid: data[..]: Invalid value: "..": must not be \'..\'',
            "data[..]",
        ),
    ],
    ids=["tls", "dockerconfigjson", "sa-token", "ssh", "secret-size", "cm-size", "dotdot"],
)
async def test_rest_invalid_objects_are_422_naming_the_field(
    api: Api, doc: dict[str, Any], message: str, cause_field: str
) -> None:
    path = SECRETS if doc["kind"] == "Secret" else CMS
    status, body = await api.call("POST", path, doc)
    assert status == 422, body
    assert body["reason"] == "Invalid"
    assert body["message"] == message
    assert body["details"]["causes"][0]["field"] == cause_field
    assert SECRET_VALUE not in json.dumps(body)


async def test_rest_immutable_config_map_update_is_422(api: Api) -> None:
    status, body = await api.call("POST", CMS, cm_doc("r3", data={"k": "v"}, immutable=True))
    assert status == 201, body
    body["data"]["k"] = "changed"
    status, body = await api.call("PUT", f"{CMS}/r3", body)
    assert status == 422
    assert body["message"] == f'ConfigMap "r3" is invalid: data: Forbidden: {IMMUTABLE}'
    merge = {"Content-Type": "application/merge-patch+json"}
    status, body = await api.call("PATCH", f"{CMS}/r3", {"immutable": False}, merge)
    assert status == 422
    assert body["message"] == f'ConfigMap "r3" is invalid: immutable: Forbidden: {IMMUTABLE}'


@pytest.mark.parametrize(
    ("path", "doc", "message"),
    [
        (
            SECRETS,
            secret_doc("d1", data={"k": "aGVsbG8"}),
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at '
            "input byte 4",
        ),
        (
            SECRETS,
            secret_doc("d2", data={"k": SECRET_VALUE}),
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at '
            "input byte 7",
        ),
        (
            CMS,
            cm_doc("d3", data={"port": 8080}),
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot '
            "unmarshal number into Go struct field ConfigMap.data of type string",
        ),
        (
            SECRETS,
            secret_doc("d4", stringData={"on": True}),
            'Secret in version "v1" cannot be handled as a Secret: json: cannot unmarshal '
            "bool into Go struct field Secret.stringData of type string",
        ),
    ],
    ids=["padding", "alphabet", "cm-number", "secret-bool"],
)
async def test_rest_undecodable_values_are_400(
    api: Api, path: str, doc: dict[str, Any], message: str
) -> None:
    status, body = await api.call("POST", path, doc)
    assert status == 400, body
    assert body["message"] == message


# ---- kubectl's protobuf bodies -------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _entry(number: int, key: str, value: bytes) -> bytes:
    return _field(number, _field(1, key.encode()) + _field(2, value))


def kube_protobuf(kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, b"v1") + _field(2, kind.encode())
    return b"k8s\x00" + _field(1, type_meta) + _field(2, raw)


PROTOBUF = {"Content-Type": "application/vnd.kubernetes.protobuf"}


async def test_kubectl_protobuf_bodies(api: Api) -> None:
    # k8s.io/api core/v1: ConfigMap data 2, binaryData 3, immutable 4.
    metadata = _field(1, _field(1, b"p1"))
    cm = metadata + _entry(2, "a", b"1") + _entry(3, "bin", b"\x00\xff") + _field(4, 0)
    status, body = await api.call("POST", CMS, kube_protobuf("ConfigMap", cm), PROTOBUF)
    assert status == 201, body
    assert body["data"] == {"a": "1"}
    assert body["binaryData"] == {"bin": b64(b"\x00\xff")}
    assert body["immutable"] is False
    # Secret data 2, type 3, stringData 4, immutable 5.
    metadata = _field(1, _field(1, b"p2"))
    secret = (
        metadata
        + _entry(2, "tls.crt", b"CERT")
        + _entry(2, "tls.key", b"KEY")
        + _field(3, b"kubernetes.io/tls")
        + _entry(4, "extra", b"x")
        + _field(5, 1)
    )
    status, body = await api.call("POST", SECRETS, kube_protobuf("Secret", secret), PROTOBUF)
    assert status == 201, body
    assert body["type"] == "kubernetes.io/tls"
    assert body["data"] == {"extra": b64("x"), "tls.crt": b64("CERT"), "tls.key": b64("KEY")}
    assert body["immutable"] is True


# ---- what the apiserver logs ---------------------------------------------------------------


async def test_no_secret_value_is_logged(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    doc = secret_doc("l1", stringData={"password": SECRET_VALUE})
    assert (await api.call("POST", SECRETS, doc))[0] == 201
    bad = secret_doc("l2", type="kubernetes.io/dockercfg", stringData={".dockercfg": SECRET_VALUE})
    status, body = await api.call("POST", SECRETS, bad)
    assert status == 422 and SECRET_VALUE not in json.dumps(body)
    status, body = await api.call("POST", SECRETS, secret_doc("l3", data={"k": SECRET_VALUE}))
    assert status == 400 and SECRET_VALUE not in json.dumps(body)
    status, body = await api.call("PUT", f"{SECRETS}/l1", secret_doc("l1", data={"k": "!"}))
    assert status == 400
    encoded = b64(SECRET_VALUE)
    for record in caplog.records:
        text = record.getMessage() + (str(record.exc_info) if record.exc_info else "")
        assert SECRET_VALUE not in text and encoded not in text, text
