"""A long REST LIST is streamed as it is encoded (apiserver/rest/handlers.py `_stream_list`):
the same bytes as the whole answer, sent in chunks, as JSON and as the Table kubectl asks for.
Real apiserver on a real etcd, over HTTP with aiohttp."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from apiserver.rest import handlers
from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.localetcd import EtcdServer
from tinykube.v1 import configmap_pb2, meta_pb2

pytestmark = pytest.mark.integration

NS = "default"
BASE = f"/api/v1/namespaces/{NS}/configmaps"
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
COUNT = handlers.STREAM_LIST_ITEMS + 100


@pytest.fixture(scope="module")
async def server(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    try:
        store = running.server.services["ConfigMap"]
        for i in range(COUNT):
            cm = configmap_pb2.ConfigMap(
                metadata=meta_pb2.ObjectMeta(
                    name=f"cm-{i:04d}", namespace=NS, labels={"group": "g" if i % 2 else "h"}
                ),
                data={"key": "v" * (i % 700)},  # sizes vary, so chunks end anywhere
            )
            await store.create(configmap_pb2.CreateConfigMapRequest(configMap=cm))
        yield running
    finally:
        await running.server.stop()


async def get(
    running: RunningAPIServer, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes, aiohttp.ClientResponse]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{running.server.rest_address}{path}", headers=headers) as r,
    ):
        return r.status, await r.read(), r


async def test_long_json_list_is_streamed_and_whole(server: RunningAPIServer) -> None:
    status, body, resp = await get(server, BASE)
    assert status == 200
    assert resp.headers.get("Transfer-Encoding") == "chunked"
    assert "Content-Length" not in resp.headers
    doc = json.loads(body)
    assert doc["kind"] == "ConfigMapList" and doc["apiVersion"] == "v1"
    names = [item["metadata"]["name"] for item in doc["items"]]
    assert names == [f"cm-{i:04d}" for i in range(COUNT)]
    # The same bytes the whole answer would be: the list's head, each object's JSON, its end.
    store = server.server.services["ConfigMap"]
    rv, items, _ = await store.list_objects(
        meta_pb2.ListRequest(namespace=NS, resourceVersion=doc["metadata"]["resourceVersion"])
    )
    kcodec = store.codec.json
    assert kcodec is not None
    whole = kcodec.list_json(rv, [store.codec.object_json(o) for o in items])  # type: ignore[attr-defined]
    assert body == whole
    # A short list is answered whole, as before.
    status, short, resp = await get(server, BASE + "?labelSelector=group%3Dnone")
    assert status == 200 and resp.headers.get("Content-Length") == str(len(short))
    assert json.loads(short)["items"] == []


async def test_long_paged_list_keeps_its_continue_token(server: RunningAPIServer) -> None:
    status, body, _ = await get(server, f"{BASE}?limit={COUNT - 10}")
    assert status == 200
    doc = json.loads(body)
    assert len(doc["items"]) == COUNT - 10
    assert doc["metadata"]["continue"] and doc["metadata"]["remainingItemCount"] == 10
    status, rest, _ = await get(
        server, f"{BASE}?limit={COUNT}&continue={doc['metadata']['continue']}"
    )
    assert status == 200 and len(json.loads(rest)["items"]) == 10


async def test_long_table_is_streamed(server: RunningAPIServer) -> None:
    status, body, resp = await get(server, BASE, TABLE)
    assert status == 200 and resp.headers.get("Transfer-Encoding") == "chunked"
    assert resp.headers["Content-Type"].startswith("application/json;as=Table")
    table: dict[str, Any] = json.loads(body)
    assert table["kind"] == "Table" and table["metadata"]["resourceVersion"]
    assert [c["name"] for c in table["columnDefinitions"]][:2] == ["Name", "Data"]
    assert len(table["rows"]) == COUNT
    first = table["rows"][0]
    assert first["cells"][:2] == ["cm-0000", 1]
    assert first["object"]["kind"] == "PartialObjectMetadata"
    assert first["object"]["metadata"]["name"] == "cm-0000"
    # The same rows as a short Table of the same objects (but Age, a moment later).
    status, half, _ = await get(server, BASE + "?labelSelector=group%3Dh", TABLE)
    short = json.loads(half)
    assert status == 200 and len(short["rows"]) < handlers.STREAM_LIST_ITEMS
    by_name = {r["cells"][0]: r["cells"][:2] for r in table["rows"]}
    assert all(by_name[r["cells"][0]] == r["cells"][:2] for r in short["rows"])
    status, objects, _ = await get(server, BASE + "?includeObject=Object", TABLE)
    assert status == 200
    assert json.loads(objects)["rows"][5]["object"]["data"] == {"key": "v" * 5}
    # A bad includeObject is a 400 before anything is sent.
    status, bad, _ = await get(server, BASE + "?includeObject=Everything", TABLE)
    assert status == 400 and json.loads(bad)["kind"] == "Status"
