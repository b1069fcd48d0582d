"""Pod updates on both front ends of a real apiserver on a real etcd: the same rules
(kube's ValidatePodUpdate) answer gRPC Update (INVALID_ARGUMENT) and REST PUT and PATCH (422
Invalid with one cause per field, kube's message)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
import pytest

from tests.integration.conftest import (
    RunningAPIServer,
    expect_error,
    make_pod,
    make_settings,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import pod_pb2, pod_pb2_grpc

pytestmark = pytest.mark.integration

FIRST_LINE = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)\n"
)


@dataclass
class Api:
    running: RunningAPIServer
    session: aiohttp.ClientSession
    base: str
    pods: pod_pb2_grpc.PodsAsyncStub

    async def call(
        self, method: str, path: str, body: Any, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        headers = {"Content-Type": content_type}
        async with self.session.request(
            method, self.base + path, data=json.dumps(body), headers=headers
        ) as r:
            return r.status, json.loads(await r.read())


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
            pod_pb2_grpc.PodsStub(channel),
        )
    finally:
        await session.close()
        await channel.close()
        await running.server.stop()


async def test_grpc_update_changes_the_image_and_refuses_the_rest(api: Api) -> None:
    pod = await api.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("grpc-web")))
    pod.spec.containers[0].image = "busybox:1.37"
    pod.spec.activeDeadlineSeconds = 600
    updated = await api.pods.Update(pod_pb2.UpdatePodRequest(pod=pod))
    assert updated.spec.containers[0].image == "busybox:1.37"
    assert updated.spec.activeDeadlineSeconds == 600
    assert updated.metadata.generation == pod.metadata.generation + 1

    # Kubernetes' JSON: an int64 as a number.
    status, body = await api.call(
        "PATCH", "/api/v1/namespaces/default/pods/grpc-web", {}, "application/merge-patch+json"
    )
    assert (status, body["spec"]["activeDeadlineSeconds"]) == (200, 600)

    updated.spec.containers[0].args.append("x")
    details = await expect_error(
        api.pods.Update(pod_pb2.UpdatePodRequest(pod=updated)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert details.startswith('Pod "grpc-web" is invalid: ' + FIRST_LINE), details
    assert '+ \t\t\tArgs: {"x"},' in details

    updated.spec.containers[0].ClearField("args")
    updated.spec.activeDeadlineSeconds = 601
    await expect_error(
        api.pods.Update(pod_pb2.UpdatePodRequest(pod=updated)),
        grpc.StatusCode.INVALID_ARGUMENT,
        'Pod "grpc-web" is invalid: spec.activeDeadlineSeconds: Invalid value: 601: must be less '
        "than or equal to previous value",
    )


async def test_rest_put_and_patch_follow_the_same_rules(api: Api) -> None:
    await api.pods.Create(pod_pb2.CreatePodRequest(pod=make_pod("rest-web")))
    path = "/api/v1/namespaces/default/pods/rest-web"
    status, body = await api.call(
        "PATCH",
        path,
        {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}},
        "application/strategic-merge-patch+json",
    )
    assert status == 200, body
    assert body["spec"]["containers"][0]["image"] == "busybox:1.37"

    status, body = await api.call(
        "PATCH", path, {"spec": {"restartPolicy": "Never"}}, "application/merge-patch+json"
    )
    assert status == 422, body
    assert (body["reason"], body["code"]) == ("Invalid", 422)
    assert body["message"].startswith('Pod "rest-web" is invalid: ' + FIRST_LINE)
    assert '- \tRestartPolicy: "Always",\n+ \tRestartPolicy: "Never",' in body["message"]
    (cause,) = body["details"]["causes"]
    assert (cause["reason"], cause["field"]) == ("FieldValueForbidden", "spec")
    assert cause["message"].startswith("Forbidden: pod updates may not change fields other than")

    status, current = await api.call("PATCH", path, {}, "application/merge-patch+json")
    assert status == 200, current
    current["spec"]["containers"].append({"name": "d", "image": "busybox"})
    status, body = await api.call("PUT", path, current)
    assert status == 422, body
    assert body["message"] == (
        'Pod "rest-web" is invalid: spec.containers: Forbidden: pod updates may not add or '
        "remove containers"
    )
    current["spec"]["containers"].pop()
    current["spec"]["containers"][0]["image"] = ""
    status, body = await api.call("PUT", path, current)
    assert status == 422, body
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.containers[0].image"]
