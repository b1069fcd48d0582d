"""Container probes through the REST front end (what kubectl sends) and the gRPC API: the JSON
round trip with Kubernetes' defaults, and 422 Invalid naming the field for bad probes."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from google.protobuf import json_format

from tests.integration.conftest import RunningAPIServer, make_settings, start_apiserver
from tinykube.client import Client
from tinykube.errors import InvalidError
from tinykube.localetcd import EtcdServer
from tinykube.meta import int_or_string
from tinykube.v1 import pod_pb2

pytestmark = pytest.mark.integration

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
async def running(etcd_server: EtcdServer) -> AsyncIterator[RunningAPIServer]:
    server = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    try:
        yield server
    finally:
        await server.server.stop()


async def post(running: RunningAPIServer, body: Any) -> tuple[int, Any]:
    url = f"http://{running.server.rest_address}{PODS}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, data=json.dumps(body), headers={"Content-Type": "application/json"}
        ) as resp,
    ):
        return resp.status, await resp.json()


def pod(name: str, **probes: Any) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "busybox",
        "ports": [{"name": "http", "containerPort": 8080}],
        **probes,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }


PROBES = {
    "readinessProbe": {
        "httpGet": {"port": "http", "httpHeaders": [{"name": "X-Probe", "value": "1"}]},
        "initialDelaySeconds": 2,
    },
    "livenessProbe": {"tcpSocket": {"port": 8080}, "terminationGracePeriodSeconds": 5},
    "startupProbe": {"grpc": {"port": 9090, "service": ""}, "failureThreshold": 30},
}


async def test_probes_round_trip_with_defaults(running: RunningAPIServer) -> None:
    code, body = await post(running, pod("probed", **copy.deepcopy(PROBES)))
    assert code == 201, body
    c = body["spec"]["containers"][0]
    assert c["readinessProbe"] == {
        "httpGet": {
            "path": "/",
            "port": "http",
            "scheme": "HTTP",
            "httpHeaders": [{"name": "X-Probe", "value": "1"}],
        },
        "initialDelaySeconds": 2,
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert c["livenessProbe"]["tcpSocket"] == {"port": 8080}
    assert c["livenessProbe"]["terminationGracePeriodSeconds"] == 5
    # An empty service is kept: it is set (Kubernetes' *string), unlike an absent one.
    assert c["startupProbe"]["grpc"] == {"port": 9090, "service": ""}
    async with Client(running.server.address) as client:
        got = await client.pods.get("probed", "default")
    container = got.spec.containers[0]
    assert container.startupProbe.grpc.HasField("service")
    assert int_or_string(container.readinessProbe.httpGet.port) == "http"


@pytest.mark.parametrize(
    ("probes", "field", "message"),
    [
        (
            {"livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}},
            "spec.containers[0].livenessProbe.successThreshold",
            "Invalid value: 2: must be 1",
        ),
        (
            {"readinessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}},
            "spec.containers[0].readinessProbe.tcpSocket",
            "Forbidden: may not specify more than 1 handler type",
        ),
        (
            {"startupProbe": {"httpGet": {"port": "no_such-port"}}},
            "spec.containers[0].startupProbe.httpGet.port",
            'Invalid value: "no_such-port": must contain only alpha-numeric characters (a-z, '
            "0-9), and hyphens (-)",
        ),
    ],
)
async def test_bad_probes_are_422_naming_the_field(
    running: RunningAPIServer, probes: dict[str, Any], field: str, message: str
) -> None:
    code, body = await post(running, pod("bad", **probes))
    assert code == 422 and body["reason"] == "Invalid", body
    assert f"{field}: {message}" in body["message"]
    assert field in [c["field"] for c in body["details"]["causes"]]
    # The same pod through gRPC: INVALID_ARGUMENT with the same words.
    p = json_format.ParseDict({**pod("bad", **probes), "apiVersion": "", "kind": ""}, pod_pb2.Pod())
    p.metadata.namespace = "default"
    async with Client(running.server.address) as client:
        with pytest.raises(InvalidError, match=message.replace("(", r"\(").replace(")", r"\)")):
            await client.pods.create(p)
