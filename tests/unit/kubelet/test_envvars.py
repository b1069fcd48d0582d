"""A container's environment as kube's makeEnvironmentVariables builds it, against in-memory
ConfigMaps and Secrets; and the fake runtime's handling of one that cannot be resolved."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from google.protobuf import json_format

from kubelet.envvars import (
    ContainerConfigError,
    EnvSources,
    expand,
    make_environment,
    static_environment,
)
from kubelet.fake import FakeRuntime
from kubelet.pods import PodManager
from kubelet.runtime import RUNNING, TERMINATED, WAITING, build_pod_status
from tests.unit.controller.fakes import FakeClient, FakeResource
from tinykube.clock import FakeClock
from tinykube.v1 import configmap_pb2, pod_pb2, secret_pb2


class CountingResource(FakeResource[Any]):
    def __init__(self, kind: str, cls: type[Any], clock: FakeClock) -> None:
        super().__init__(kind, cls, clock, itertools.count(1))
        self.gets: list[str] = []

    async def get(self, name: str, namespace: str = "") -> Any:
        self.gets.append(f"{namespace}/{name}")
        return await super().get(name, namespace)


class FakeEnvAPI:
    def __init__(self, clock: FakeClock) -> None:
        self.config_maps = CountingResource("ConfigMap", configmap_pb2.ConfigMap, clock)
        self.secrets = CountingResource("Secret", secret_pb2.Secret, clock)

    async def add_config_map(self, name: str, data: dict[str, str]) -> None:
        cm = configmap_pb2.ConfigMap(data=data)
        cm.metadata.name, cm.metadata.namespace = name, "default"
        await self.config_maps.create(cm)

    async def add_secret(self, name: str, data: dict[str, bytes]) -> None:
        secret = secret_pb2.Secret(data=data)
        secret.metadata.name, secret.metadata.namespace = name, "default"
        await self.secrets.create(secret)


def make_pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None) -> pod_pb2.Pod:
    spec: dict[str, Any] = {"nodeName": "n1", "containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return json_format.ParseDict(
        {
            "metadata": {
                "name": "web",
                "namespace": "default",
                "uid": "u-1",
                "labels": {"app": "web"},
                "annotations": {"batch.kubernetes.io/job-completion-index": "3"},
            },
            "spec": spec,
        },
        pod_pb2.Pod(),
    )


def c(**fields: Any) -> dict[str, Any]:
    return {"name": "c", "image": "busybox", **fields}


@pytest.fixture
def api() -> FakeEnvAPI:
    return FakeEnvAPI(FakeClock())


def sources(api: FakeEnvAPI | None, allocatable: dict[str, str] | None = None) -> EnvSources:
    return EnvSources(
        api=api,
        host_ip=lambda node: {"n1": "10.0.0.5"}[node],
        allocatable=lambda node: allocatable or {},
    )


async def env_of(pod: pod_pb2.Pod, api: FakeEnvAPI | None, **kw: Any) -> dict[str, str]:
    return await make_environment(pod, pod.spec.containers[0], sources(api, **kw))


def field_ref(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


async def test_field_refs_read_the_pod(api: FakeEnvAPI) -> None:
    pod = make_pod(
        c(
            env=[
                {"name": "NAME", **field_ref("metadata.name")},
                {"name": "NS", **field_ref("metadata.namespace")},
                {"name": "UID", **field_ref("metadata.uid")},
                {"name": "APP", **field_ref("metadata.labels['app']")},
                {"name": "NONE", **field_ref("metadata.labels['nope']")},
                {
                    "name": "IDX",
                    **field_ref("metadata.annotations['batch.kubernetes.io/job-completion-index']"),
                },
                {"name": "NODE", **field_ref("spec.nodeName")},
                {"name": "SA", **field_ref("spec.serviceAccountName")},
                {"name": "HOST", **field_ref("status.hostIP")},
                {"name": "HOSTS", **field_ref("status.hostIPs")},
                {"name": "POD", **field_ref("status.podIP")},
                {"name": "PODS", **field_ref("status.podIPs")},
            ]
        )
    )
    pod.spec.serviceAccountName = "robot"  # as admission left it
    assert await env_of(pod, api) == {
        "NAME": "web",
        "NS": "default",
        "UID": "u-1",
        "APP": "web",
        "NONE": "",
        "IDX": "3",
        "NODE": "n1",
        "SA": "robot",
        "HOST": "10.0.0.5",
        "HOSTS": "10.0.0.5",
        "POD": "10.0.0.5",
        "PODS": "10.0.0.5",
    }
    assert api.config_maps.gets == [] and api.secrets.gets == []


def resource_ref(resource: str, divisor: str | None = None, container: str = "") -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource}
    if divisor is not None:
        ref["divisor"] = divisor
    if container:
        ref["containerName"] = container
    return {"valueFrom": {"resourceFieldRef": ref}}


async def test_resource_refs_divide_round_up_and_default_limits_to_allocatable() -> None:
    pod = make_pod(
        c(
            resources={"limits": {"memory": "100Mi"}, "requests": {"cpu": "250m"}},
            env=[
                {"name": "CPU_REQ", **resource_ref("requests.cpu")},  # 0.25 cpu -> 1
                {"name": "CPU_REQ_M", **resource_ref("requests.cpu", "1m")},
                {"name": "CPU_LIM", **resource_ref("limits.cpu")},  # allocatable: 4
                {"name": "MEM_LIM", **resource_ref("limits.memory", "1Mi")},
                {"name": "MEM_LIM_G", **resource_ref("limits.memory", "1G")},  # 104857600 B
                {"name": "MEM_REQ", **resource_ref("requests.memory")},  # the limit, in bytes
                {"name": "ZERO_DIV", **resource_ref("limits.memory", "0")},
                {"name": "OTHER", **resource_ref("limits.cpu", "1m", container="side")},
            ],
        ),
        {"name": "side", "image": "busybox", "resources": {"limits": {"cpu": "1500m"}}},
    )
    env = await env_of(pod, None, allocatable={"cpu": "4", "memory": "8Gi"})
    assert env == {
        "CPU_REQ": "1",
        "CPU_REQ_M": "250",
        "CPU_LIM": "4",
        "MEM_LIM": "100",
        "MEM_LIM_G": "1",
        "MEM_REQ": "104857600",
        "ZERO_DIV": "104857600",
        "OTHER": "1500",
    }


async def test_a_resource_ref_to_an_unknown_container_is_a_config_error() -> None:
    pod = make_pod(c(env=[{"name": "X", **resource_ref("limits.cpu", container="ghost")}]))
    with pytest.raises(ContainerConfigError, match=r"^container ghost not found$"):
        await env_of(pod, None)


async def test_env_from_first_then_env_in_order_with_expansion(api: FakeEnvAPI) -> None:
    await api.add_config_map("cfg", {"color": "blue", "size": "L"})
    await api.add_secret("creds", {"user": b"admin", "pass": b"s3cr\xc3\xa9t"})
    pod = make_pod(
        c(
            envFrom=[
                {"configMapRef": {"name": "cfg"}, "prefix": "CFG_"},
                {"secretRef": {"name": "creds"}},
                {"configMapRef": {"name": "absent", "optional": True}},
            ],
            env=[
                {"name": "CFG_size", "value": "XL"},  # env wins over envFrom
                {"name": "GREETING", "value": "$(user) likes $(CFG_color), $(LATER) $$(user)"},
                {
                    "name": "COLOR",
                    "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "color"}},
                },
                {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pass"}}},
                {
                    "name": "OPT",
                    "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x", "optional": True}},
                },
                {"name": "LATER", "value": "late"},
                {"name": "EMPTY"},
            ],
        )
    )
    env = await env_of(pod, api)
    assert env == {
        "CFG_color": "blue",
        "CFG_size": "XL",
        "pass": "s3cr\u00e9t",
        "user": "admin",
        "GREETING": "admin likes blue, $(LATER) $(user)",
        "COLOR": "blue",
        "PASS": "s3cr\u00e9t",
        "LATER": "late",
        "EMPTY": "",
    }
    # One GET per object per resolution.
    assert api.config_maps.gets == ["default/cfg", "default/absent"]
    assert api.secrets.gets == ["default/creds"]


async def test_secret_bytes_reach_the_process_unchanged(api: FakeEnvAPI) -> None:
    await api.add_secret("bin", {"k": b"\xff\xfe"})
    pod = make_pod(
        c(env=[{"name": "B", "valueFrom": {"secretKeyRef": {"name": "bin", "key": "k"}}}])
    )
    value = (await env_of(pod, api))["B"]
    assert value.encode("utf-8", "surrogateescape") == b"\xff\xfe"


@pytest.mark.parametrize(
    ("container", "message"),
    [
        (
            c(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}]),
            'configmap "x" not found',
        ),
        (
            c(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]),
            "couldn't find key k in ConfigMap default/cfg",
        ),
        (
            c(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}]),
            'secret "x" not found',
        ),
        (
            c(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]),
            "couldn't find key k in Secret default/creds",
        ),
        (c(envFrom=[{"configMapRef": {"name": "x"}}]), 'configmap "x" not found'),
        (c(envFrom=[{"secretRef": {"name": "x"}}]), 'secret "x" not found'),
    ],
)
async def test_missing_references_are_config_errors_with_kubes_messages(
    api: FakeEnvAPI, container: dict[str, Any], message: str
) -> None:
    await api.add_config_map("cfg", {"color": "blue"})
    await api.add_secret("creds", {"user": b"admin"})
    with pytest.raises(ContainerConfigError) as caught:
        await env_of(make_pod(container), api)
    assert str(caught.value) == message


async def test_optional_missing_references_leave_the_variable_unset(api: FakeEnvAPI) -> None:
    pod = make_pod(
        c(
            env=[
                {
                    "name": "A",
                    "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k", "optional": True}},
                },
                {
                    "name": "B",
                    "valueFrom": {"secretKeyRef": {"name": "x", "key": "k", "optional": True}},
                },
                {"name": "C", "value": "c"},
            ],
            envFrom=[{"secretRef": {"name": "y", "optional": True}}],
        )
    )
    assert await env_of(pod, api) == {"C": "c"}


async def test_without_a_client_a_reference_cannot_be_resolved() -> None:
    pod = make_pod(c(envFrom=[{"configMapRef": {"name": "cfg"}}]))
    with pytest.raises(ContainerConfigError) as caught:
        await env_of(pod, None)
    assert str(caught.value) == "couldn't get configMap default/cfg, no kubeClient defined"


def test_static_environment_expands_values_only() -> None:
    pod = make_pod(
        c(
            env=[
                {"name": "A", "value": "a"},
                {"name": "B", **field_ref("metadata.name")},
                {"name": "C", "value": "$(A)-$(B)"},
            ]
        )
    )
    assert static_environment(pod.spec.containers[0]) == {"A": "a", "C": "a-$(B)"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)$(B)", "ab"),
        ("$(A", "$(A"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$a"),
        ("x$", "x$"),
        ("$()", "$()"),
        ("$(MISSING)", "$(MISSING)"),
    ],
)
def test_expansion_is_kubes(text: str, expected: str) -> None:
    assert expand(text, {"A": "a"}, {"B": "b", "A": "shadowed"}) == expected


# ---- the fake runtime ------------------------------------------------------------------------


async def test_fake_pods_without_sources_make_no_api_calls(api: FakeEnvAPI) -> None:
    clock = FakeClock()
    rt = FakeRuntime(clock, env_sources=sources(api))
    pod = make_pod(c(env=[{"name": "A", "value": "a"}]))
    rec = await rt.sync_pod(pod)
    assert rec.containers["c"].state == RUNNING and rec.retry_at == 0
    assert api.config_maps.gets == [] and api.secrets.gets == []


async def test_fake_pod_waits_for_its_config_map_then_runs(api: FakeEnvAPI) -> None:
    clock = FakeClock()
    rt = FakeRuntime(clock, env_sources=sources(api), retry_seconds=10)
    init = [{"name": "init", "image": "busybox", "envFrom": [{"configMapRef": {"name": "cfg"}}]}]
    pod = make_pod(c(envFrom=[{"configMapRef": {"name": "cfg"}}]), init=init)
    rec = await rt.sync_pod(pod)
    waiting = rec.init_containers["init"]
    assert (waiting.state, waiting.waiting_reason, waiting.waiting_message) == (
        WAITING,
        "CreateContainerConfigError",
        'configmap "cfg" not found',
    )
    assert "c" not in rec.containers
    assert rec.events == [("Warning", "Failed", 'Error: configmap "cfg" not found')]
    status = build_pod_status(pod, rec, "10.0.0.5", pod_pb2.PodStatus(), 0.0)
    assert status.phase == "Pending"
    assert status.initContainerStatuses[0].state.waiting.reason == "CreateContainerConfigError"
    assert status.containerStatuses[0].state.waiting.reason == "PodInitializing"
    assert rec.retry_at == clock.now().timestamp() + 10

    await api.add_config_map("cfg", {"a": "1"})
    await rt.sync_pod(pod)  # not yet time to retry
    assert api.config_maps.gets == ["default/cfg"]
    clock.advance(10)
    rec = await rt.sync_pod(pod)
    assert rec.init_containers["init"].state == TERMINATED
    assert rec.containers["c"].state == RUNNING
    assert rec.retry_at == 0


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, obj: Any, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason, message))


async def test_the_pod_worker_reports_the_error_and_retries_when_the_runtime_asks() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    api = FakeEnvAPI(clock)
    runtime = FakeRuntime(clock, env_sources=sources(api), retry_seconds=0.05)
    recorded = Recorded()
    manager = PodManager(
        client, runtime, {"n1"}, lambda _n: "10.0.0.5", clock=clock, events=recorded
    )
    pod = make_pod(
        c(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}}])
    )
    stored = await client.pods.create(pod)
    manager.on_add(stored)

    def state() -> pod_pb2.ContainerState:
        statuses = client.pods.objects["default/web"].status.containerStatuses
        return statuses[0].state if statuses else pod_pb2.ContainerState()

    for _ in range(200):
        if state().waiting.reason == "CreateContainerConfigError":
            break
        await asyncio.sleep(0.005)
    assert state().waiting.message == 'configmap "cfg" not found'
    assert ("Warning", "Failed", 'Error: configmap "cfg" not found') in recorded.events

    await api.add_config_map("cfg", {"a": "1"})
    clock.advance(1)  # past retry_at: the worker's next wake-up syncs again
    for _ in range(200):
        if state().HasField("running"):
            break
        await asyncio.sleep(0.005)
    assert state().HasField("running")
    assert client.pods.objects["default/web"].status.phase == "Running"
    await manager.stop()
