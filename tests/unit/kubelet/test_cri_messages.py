"""The CRI messages the kubelet builds for a pod (kubelet/cri.py), and kube's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.cri import container_config, default_pull_policy, linux_resources, sandbox_config
from kubelet.runtime import qos_class
from tinykube.cri.v1 import cri_pb2 as cri
from tinykube.v1 import pod_pb2

GIB = 1 << 30


def _pod(**resources: dict[str, str]) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace, pod.metadata.uid = "web", "ns", "u1"
    c = pod.spec.containers.add(name="app", image="tinykube.local/web:1")
    c.resources.requests.update(resources.get("requests", {}))
    c.resources.limits.update(resources.get("limits", {}))
    return pod


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("localhost:5000/web", "Always"),
        ("localhost:5000/web:1", "IfNotPresent"),
        ("web@sha256:" + "a" * 64, "IfNotPresent"),
    ],
)
def test_default_pull_policy_is_kubes(image: str, policy: str) -> None:
    assert default_pull_policy(image) == policy


def test_guaranteed_resources() -> None:
    pod = _pod(requests={"cpu": "500m", "memory": "64Mi"}, limits={"cpu": "500m", "memory": "64Mi"})
    res = linux_resources(pod, pod.spec.containers[0], 8 * GIB)
    assert res.cpu_shares == 512
    assert (res.cpu_quota, res.cpu_period) == (50_000, 100_000)
    assert res.memory_limit_in_bytes == 64 << 20
    assert res.oom_score_adj == -997


def test_best_effort_gets_min_shares_and_no_quota() -> None:
    pod = _pod()
    res = linux_resources(pod, pod.spec.containers[0], 8 * GIB)
    assert (res.cpu_shares, res.cpu_quota, res.memory_limit_in_bytes) == (2, 0, 0)
    assert res.oom_score_adj == 1000


def test_burstable_oom_score_adj_from_memory_request() -> None:
    pod = _pod(requests={"memory": "2Gi"})
    res = linux_resources(pod, pod.spec.containers[0], 8 * GIB)
    assert res.oom_score_adj == 1000 - 250


def test_cpu_limit_alone_gives_shares_of_the_limit() -> None:
    pod = _pod(limits={"cpu": "2"})
    res = linux_resources(pod, pod.spec.containers[0], 8 * GIB)
    assert res.cpu_shares == 2048 and res.cpu_quota == 200_000


def test_sandbox_config_pod_network_and_host_ports() -> None:
    pod = _pod()
    pod.spec.containers[0].ports.add(containerPort=80, hostPort=8080, protocol="TCP")
    config = sandbox_config(pod, 1, Path("/logs"), "/tinykube/podu1")
    assert config.metadata == cri.PodSandboxMetadata(
        name="web", uid="u1", namespace="ns", attempt=1
    )
    assert config.hostname == "web"
    assert config.log_directory == "/logs"
    assert config.linux.cgroup_parent == "/tinykube/podu1"
    assert config.linux.security_context.namespace_options.network == cri.POD
    assert config.labels["io.kubernetes.pod.uid"] == "u1"
    assert [(m.container_port, m.host_port) for m in config.port_mappings] == [(80, 8080)]


def test_host_network_sandbox_uses_the_nodes_namespace() -> None:
    pod = _pod()
    pod.spec.hostNetwork = True
    config = sandbox_config(pod, 0, Path("/logs"), "/tinykube/podu1")
    assert config.linux.security_context.namespace_options.network == cri.NODE
    assert config.hostname == ""


def test_container_config_expands_variables_and_names_the_log() -> None:
    pod = _pod(limits={"memory": "32Mi"})
    c = pod.spec.containers[0]
    c.command.extend(["/bin/sh", "-c"])
    c.args.append("echo $(GREETING)")
    config = container_config(pod, c, "sha256:abc", 2, {"GREETING": "hi"}, 8 * GIB)
    assert list(config.command) == ["/bin/sh", "-c"]
    assert list(config.args) == ["echo hi"]
    assert config.metadata == cri.ContainerMetadata(name="app", attempt=2)
    assert config.image.image == "sha256:abc"
    assert config.image.user_specified_image == "tinykube.local/web:1"
    assert config.log_path == "app/2.log"
    assert [(e.key, e.value) for e in config.envs] == [("GREETING", "hi")]
    assert config.linux.resources.memory_limit_in_bytes == 32 << 20


@pytest.mark.parametrize(
    ("requests", "limits", "qos"),
    [
        ({}, {}, "BestEffort"),
        ({"cpu": "500m", "memory": "1Gi"}, {"cpu": "0.5", "memory": "1024Mi"}, "Guaranteed"),
        ({}, {"cpu": "1", "memory": "1Gi"}, "Guaranteed"),
        ({"cpu": "100m"}, {}, "Burstable"),
        ({"cpu": "100m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}, "Burstable"),
    ],
)
def test_qos_class_is_kubes(requests: dict[str, str], limits: dict[str, str], qos: str) -> None:
    assert qos_class(_pod(requests=requests, limits=limits)) == qos


def test_seccomp_profiles_as_kubes_kubelet_passes_them() -> None:
    """kube's getSeccompProfile: the container's field, else the pod's, else Unconfined (or
    RuntimeDefault under --seccomp-default); Localhost under the kubelet's seccomp root. The
    sandbox gets the pod's."""
    root = Path("/var/lib/tk/seccomp")
    pod = _pod()
    c = pod.spec.containers[0]
    seccomp = container_config(pod, c, "sha256:abc", 0, {}, GIB, seccomp_root=root)
    assert seccomp.linux.security_context.seccomp.profile_type == cri.SecurityProfile.Unconfined
    assert not seccomp.linux.security_context.HasField("apparmor")
    on = container_config(pod, c, "i", 0, {}, GIB, seccomp_root=root, seccomp_default=True)
    assert on.linux.security_context.seccomp.profile_type == cri.SecurityProfile.RuntimeDefault
    pod.spec.securityContext.seccompProfile.type = "RuntimeDefault"
    box = sandbox_config(pod, 0, Path("/logs"), "/x", seccomp_root=root)
    assert box.linux.security_context.seccomp.profile_type == cri.SecurityProfile.RuntimeDefault
    c.securityContext.seccompProfile.type = "Localhost"
    c.securityContext.seccompProfile.localhostProfile = "profiles/./deny.json"
    c.securityContext.appArmorProfile.type = "Unconfined"
    got = container_config(pod, c, "i", 0, {}, GIB, seccomp_root=root).linux.security_context
    assert got.seccomp.profile_type == cri.SecurityProfile.Localhost
    assert got.seccomp.localhost_ref == "/var/lib/tk/seccomp/profiles/deny.json"
    assert got.apparmor.profile_type == cri.SecurityProfile.Unconfined
    # the sandbox keeps the pod's profile
    box = sandbox_config(pod, 0, Path("/logs"), "/x", seccomp_root=root)
    assert box.linux.security_context.seccomp.profile_type == cri.SecurityProfile.RuntimeDefault
