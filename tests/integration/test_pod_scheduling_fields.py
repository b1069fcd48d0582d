"""The new Pod scheduling fields through a real apiserver on etcd, over gRPC and REST.

A gated pod gets PodScheduled=False/SchedulingGated when created (and keeps it until it is
bound), its gates may only be removed, Bind refuses it while gated, a gated pod may gain a
nodeSelector; bad affinity / spread / gate fields are INVALID_ARGUMENT and 422 naming the field
in Kubernetes' words; matchLabelKeys are folded into the stored selector.
"""

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
    Stubs,
    bind_request,
    expect_error,
    make_node,
    make_pod,
    make_settings,
    make_stubs,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2

pytestmark = pytest.mark.integration

PODS = "/api/v1/namespaces/default/pods"
GATED = "Scheduling is blocked due to non-empty scheduling gates"


@dataclass
class Api:
    running: RunningAPIServer
    stubs: Stubs
    session: aiohttp.ClientSession
    base: str

    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        async with self.session.request(method, self.base + path, data=data, headers=headers) as r:
            return r.status, json.loads(await r.read())


@pytest.fixture(scope="module")
async def api(etcd_server: EtcdServer) -> AsyncIterator[Api]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    channel = grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS))
    session = aiohttp.ClientSession()
    try:
        yield Api(running, make_stubs(channel), session, f"http://{running.server.rest_address}")
    finally:
        await session.close()
        await channel.close()
        await running.server.stop()


def gated_pod(name: str, *gates: str) -> pod_pb2.Pod:
    pod = make_pod(name, app=name)
    for g in gates:
        pod.spec.schedulingGates.add(name=g)
    return pod


def conditions(pod: Any) -> list[tuple[str, str, str, str]]:
    if isinstance(pod, dict):
        return [
            (c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
            for c in pod["status"].get("conditions", [])
        ]
    return [(c.type, c.status, c.reason, c.message) for c in pod.status.conditions]


async def test_grpc_gated_pod_lifecycle(api: Api) -> None:
    pods = api.stubs.pods
    await api.stubs.nodes.Create(node_pb2.CreateNodeRequest(node=make_node("n1")))
    created = await pods.Create(
        pod_pb2.CreatePodRequest(pod=gated_pod("g1", "example.com/a", "example.com/b"))
    )
    expected = [("PodScheduled", "False", "SchedulingGated", GATED)]
    assert conditions(created) == expected
    assert created.spec.preemptionPolicy == "PreemptLowerPriority"
    # Bind refuses a pod that still has gates, as kube's binding storage (Conflict).
    await expect_error(
        pods.Bind(bind_request("g1", "n1")),
        grpc.StatusCode.ABORTED,
        'Operation cannot be fulfilled on pods/binding "g1": pod g1 has non-empty '
        ".spec.schedulingGates",
    )
    # Gates may only be removed.
    more = pod_pb2.Pod()
    more.CopyFrom(created)
    more.spec.schedulingGates.add(name="example.com/c")
    details = await expect_error(
        pods.Update(pod_pb2.UpdatePodRequest(pod=more)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (
        "spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new "
        "scheduling gate 'example.com/c'"
    ) in details
    # While gated, a nodeSelector entry may be added; the gate goes in the same update.
    fewer = pod_pb2.Pod()
    fewer.CopyFrom(created)
    del fewer.spec.schedulingGates[0]
    fewer.spec.nodeSelector["disk"] = "ssd"
    updated = await pods.Update(pod_pb2.UpdatePodRequest(pod=fewer))
    assert [g.name for g in updated.spec.schedulingGates] == ["example.com/b"]
    del updated.spec.schedulingGates[:]
    ungated = await pods.Update(pod_pb2.UpdatePodRequest(pod=updated))
    # The apiserver leaves the condition to the scheduler: Bind replaces it.
    assert conditions(ungated) == expected
    await pods.Bind(bind_request("g1", "n1"))
    got = await pods.Get(meta_pb2.GetRequest(namespace="default", name="g1"))
    assert got.spec.nodeName == "n1"
    assert conditions(got) == [("PodScheduled", "True", "", "")]


async def test_grpc_bad_fields_are_invalid_argument_naming_them(api: Api) -> None:
    pod = make_pod("bad-grpc", app="web")
    term = pod.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
    term.labelSelector.matchLabels["app"] = "web"
    pod.spec.topologySpreadConstraints.add(maxSkew=0, topologyKey="zone", whenUnsatisfiable="X")
    details = await expect_error(
        api.stubs.pods.Create(pod_pb2.CreatePodRequest(pod=pod)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert details.startswith('Pod "bad-grpc" is invalid: ')
    for part in (
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".topologyKey: Required value: can not be empty",
        "spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero",
        'spec.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: "X": '
        'supported values: "DoNotSchedule", "ScheduleAnyway"',
    ):
        assert part in details, details


async def test_rest_gated_pod_patches_and_table(api: Api) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "g2", "labels": {"app": "g2"}},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "schedulingGates": [{"name": "wait"}],
        },
    }
    code, created = await api.call("POST", PODS, body)
    assert code == 201, created
    assert conditions(created) == [("PodScheduled", "False", "SchedulingGated", GATED)]
    async with api.session.get(
        api.base + PODS + "/g2",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    ) as r:
        table = json.loads(await r.read())
    names = [c["name"] for c in table["columnDefinitions"]]
    assert table["rows"][0]["cells"][names.index("Status")] == "SchedulingGated"
    # Adding a gate through a merge patch is 422 naming the field.
    code, status = await api.call(
        "PATCH",
        PODS + "/g2",
        {"spec": {"schedulingGates": [{"name": "wait"}, {"name": "more"}]}},
        "application/merge-patch+json",
    )
    assert code == 422 and status["reason"] == "Invalid", status
    assert {c["field"] for c in status["details"]["causes"]} == {"spec.schedulingGates[1].name"}
    # A strategic patch may add a nodeSelector while gated; a JSON patch removes the gate.
    code, patched = await api.call(
        "PATCH",
        PODS + "/g2",
        {"spec": {"nodeSelector": {"disk": "ssd"}}},
        "application/strategic-merge-patch+json",
    )
    assert code == 200 and patched["spec"]["nodeSelector"] == {"disk": "ssd"}, patched
    code, patched = await api.call(
        "PATCH",
        PODS + "/g2",
        [{"op": "remove", "path": "/spec/schedulingGates"}],
        "application/json-patch+json",
    )
    assert code == 200 and "schedulingGates" not in patched["spec"], patched
    # Once ungated, its nodeSelector is as immutable as any other pod's.
    code, status = await api.call(
        "PATCH",
        PODS + "/g2",
        {"spec": {"nodeSelector": {"zone": "a"}}},
        "application/strategic-merge-patch+json",
    )
    assert code == 422 and status["details"]["causes"][0]["field"] == "spec", status


async def test_rest_bad_fields_are_422_and_label_keys_are_folded(api: Api) -> None:
    term = {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": {"tier": "web"}},
        "matchLabelKeys": ["app"],
        "mismatchLabelKeys": ["track"],
    }
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "folded", "labels": {"app": "web", "track": "canary"}},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            },
        },
    }
    code, created = await api.call("POST", PODS, body)
    assert code == 201, created
    stored = created["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ][0]
    assert stored["labelSelector"] == {
        "matchLabels": {"tier": "web"},
        "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["web"]},
            {"key": "track", "operator": "NotIn", "values": ["canary"]},
        ],
    }
    assert stored["matchLabelKeys"] == ["app"]
    bad = json.loads(json.dumps(body))
    bad["metadata"]["name"] = "bad-rest"
    bad["spec"]["affinity"] = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 0, "podAffinityTerm": {"topologyKey": "zone"}}
            ]
        }
    }
    bad["spec"]["schedulingGates"] = [{"name": "a"}, {"name": "a"}]
    code, status = await api.call("POST", PODS, bad)
    assert code == 422 and status["reason"] == "Invalid", status
    fields = {c["field"] for c in status["details"]["causes"]}
    assert fields == {
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        "spec.schedulingGates[1]",
    }
    # A preemptionPolicy other than the class's (PreemptLowerPriority without one) is refused
    # by Priority admission, which runs before validation, as on Kubernetes.
    other = json.loads(json.dumps(body))
    other["metadata"]["name"] = "bad-policy"
    other["spec"]["preemptionPolicy"] = "Sometimes"
    code, refused = await api.call("POST", PODS, other)
    assert (code, refused["reason"], refused["message"]) == (
        403,
        "Forbidden",
        'pods "bad-policy" is forbidden: the string value of PreemptionPolicy (Sometimes) must '
        "not be provided in pod spec; priority admission controller computed "
        "PreemptLowerPriority from the given PriorityClass name",
    ), refused
    assert (
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
        "Invalid value: 0: must be in the range 1-100" in status["message"]
    )
