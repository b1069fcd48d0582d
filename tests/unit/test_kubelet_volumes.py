"""The kubelet's volume manager: kube's atomic writer, and every volume kind's files, with a
fake API (no sockets)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.serviceaccount import add_api_access_volume
from kubelet.envvars import ContainerConfigError
from kubelet.volumes import AtomicWriter, VolumeManager, container_mounts
from tinykube.errors import NotFoundError
from tinykube.v1 import configmap_pb2, pod_pb2, secret_pb2


class _Objects:
    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    async def get(self, name: str, namespace: str) -> Any:
        if name not in self.objects:
            raise NotFoundError(f'"{name}" not found')
        return self.objects[name]


class FakeAPI:
    def __init__(self) -> None:
        self.cms: dict[str, Any] = {}
        self.secs: dict[str, Any] = {}
        self.config_maps = _Objects(self.cms)
        self.secrets = _Objects(self.secs)


def _pod(volumes: list[dict[str, Any]]) -> pod_pb2.Pod:
    pod = json_format.ParseDict(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}},
            "spec": {
                "serviceAccountName": "default",
                "containers": [
                    {"name": "c", "image": "i", "resources": {"limits": {"memory": "64Mi"}}}
                ],
                "volumes": volumes,
            },
        },
        pod_pb2.Pod(),
    )
    return pod


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writer_swaps_data_and_removes_stale_names(tmp_path: Path) -> None:
    w = AtomicWriter(tmp_path / "v")
    assert w.write({"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})
    first = os.readlink(tmp_path / "v" / "..data")
    assert (tmp_path / "v" / "a").read_text() == "1"
    assert (tmp_path / "v" / "dir" / "b").read_text() == "2"
    assert os.readlink(tmp_path / "v" / "a") == "..data/a"
    assert _mode(tmp_path / "v" / "dir" / "b") == 0o600
    assert not w.write({"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})  # unchanged: no write
    assert w.write({"a": (b"changed", 0o644)})
    assert (tmp_path / "v" / "a").read_text() == "changed"
    assert not (tmp_path / "v" / "dir").exists()
    assert not (tmp_path / "v" / first).exists()  # the old timestamped directory is gone
    hidden = [p.name for p in (tmp_path / "v").iterdir() if p.name.startswith("..")]
    assert sorted(hidden)[0] != first and "..data" in hidden and len(hidden) == 2


async def test_config_map_secret_and_downward_api_files(tmp_path: Path) -> None:
    api = FakeAPI()
    api.cms["cfg"] = configmap_pb2.ConfigMap(data={"greeting": "hello", "other": "x"})
    api.secs["sec"] = secret_pb2.Secret(data={"password": b"s3cret"})
    vm = VolumeManager(tmp_path, resync=0.0)
    vm.api = api  # type: ignore[assignment]
    pod = _pod(
        [
            {
                "name": "cfg",
                "configMap": {"name": "cfg", "items": [{"key": "greeting", "path": "g/x"}]},
            },
            {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
            {
                "name": "info",
                "downwardAPI": {
                    "items": [
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        {
                            "path": "mem",
                            "resourceFieldRef": {
                                "containerName": "c",
                                "resource": "limits.memory",
                                "divisor": "1Mi",
                            },
                        },
                    ]
                },
            },
            {"name": "scratch", "emptyDir": {}},
        ]
    )
    paths = await vm.setup(pod)
    assert (paths["cfg"] / "g" / "x").read_text() == "hello"
    assert not (paths["cfg"] / "other").exists()
    assert (paths["sec"] / "password").read_bytes() == b"s3cret"
    assert _mode(paths["sec"] / "password") == 0o400
    assert (paths["info"] / "labels").read_text() == 'app="x"'
    assert (paths["info"] / "name").read_text() == "p"
    assert (paths["info"] / "mem").read_text() == "64"
    assert paths["scratch"].is_dir()
    assert paths["cfg"] == tmp_path / "u1" / "volumes" / "kubernetes.io~configmap" / "cfg"
    # An update reaches the files at the next sync.
    api.cms["cfg"] = configmap_pb2.ConfigMap(data={"greeting": "bye"})
    await vm.setup(pod)
    assert (paths["cfg"] / "g" / "x").read_text() == "bye"
    vm.teardown("u1")
    assert not (tmp_path / "u1" / "volumes").exists()


async def test_a_missing_config_map_is_kubes_error_unless_optional(tmp_path: Path) -> None:
    vm = VolumeManager(tmp_path)
    vm.api = FakeAPI()  # type: ignore[assignment]
    with pytest.raises(ContainerConfigError, match='configmap "nope" not found'):
        await vm.setup(_pod([{"name": "v", "configMap": {"name": "nope"}}]))
    paths = await vm.setup(
        _pod([{"name": "v", "configMap": {"name": "nope", "optional": True}}]), force=True
    )
    assert [p.name for p in paths["v"].iterdir() if not p.name.startswith("..")] == []


async def test_the_kube_api_access_volume_holds_token_ca_and_namespace(tmp_path: Path) -> None:
    api = FakeAPI()
    api.cms["kube-root-ca.crt"] = configmap_pb2.ConfigMap(data={"ca.crt": "PEM"})
    minted: list[tuple[str, ...]] = []
    now = [1000.0]

    async def mint(ns: str, sa: str, aud: str, secs: int, pod: str, uid: str) -> tuple[str, float]:
        minted.append((ns, sa, aud, str(secs), pod, uid))
        return f"token-{len(minted)}", now[0] + secs

    vm = VolumeManager(tmp_path, resync=0.0, now=lambda: now[0])
    vm.api = api  # type: ignore[assignment]
    vm.mint_token = mint
    pod = _pod([])
    add_api_access_volume(pod.spec, "abcde")
    paths = await vm.setup(pod)
    vol = paths["kube-api-access-abcde"]
    assert {p.name for p in vol.iterdir() if not p.name.startswith("..")} == {
        "token",
        "ca.crt",
        "namespace",
    }
    assert (vol / "token").read_text() == "token-1"
    assert (vol / "ca.crt").read_text() == "PEM"
    assert (vol / "namespace").read_text() == "ns"
    assert _mode(vol / "token") == 0o644
    assert minted == [("ns", "default", "", "3607", "p", "u1")]
    now[0] += 0.79 * 3607
    await vm.setup(pod)
    assert (vol / "token").read_text() == "token-1"
    now[0] += 0.02 * 3607  # past 80% of its lifetime: a new token
    await vm.setup(pod)
    assert (vol / "token").read_text() == "token-2"
    (mount,) = container_mounts(pod.spec.containers[0], paths)
    assert (mount.container_path, mount.host_path, mount.read_only) == (
        "/var/run/secrets/kubernetes.io/serviceaccount",
        vol,
        True,
    )


async def test_host_path_types(tmp_path: Path) -> None:
    vm = VolumeManager(tmp_path / "pods")
    made = tmp_path / "made"
    paths = await vm.setup(
        _pod([{"name": "h", "hostPath": {"path": str(made), "type": "DirectoryOrCreate"}}])
    )
    assert paths["h"] == made and made.is_dir()
    with pytest.raises(ContainerConfigError, match="is not a file"):
        await vm.setup(
            _pod([{"name": "h", "hostPath": {"path": str(made), "type": "File"}}]), force=True
        )


def test_service_variables_as_kubes_kubelet_sets_them() -> None:
    from google.protobuf.struct_pb2 import Value

    from apiserver.masterservice import service_ip
    from kubelet.envvars import service_environment
    from tinykube.v1 import service_pb2

    def svc(ns: str, name: str, ip: str, *ports: tuple[str, int]) -> service_pb2.Service:
        s = service_pb2.Service()
        s.metadata.name, s.metadata.namespace, s.spec.clusterIP = name, ns, ip
        for port_name, port in ports:
            s.spec.ports.add(name=port_name, port=port, protocol="TCP", targetPort=Value())
        return s

    services = [
        svc("default", "kubernetes", service_ip("127.100.0.0/16"), ("https", 443)),
        svc("team", "my-db", "127.100.3.4", ("sql", 5432), ("", 9000)),
        svc("team", "headless", "None", ("x", 1)),
        svc("other", "elsewhere", "127.100.9.9", ("x", 1)),
    ]
    env = service_environment(services, "team")
    assert env["KUBERNETES_SERVICE_HOST"] == "127.100.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == env["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert env["KUBERNETES_PORT"] == "tcp://127.100.0.1:443"
    assert env["KUBERNETES_PORT_443_TCP_ADDR"] == "127.100.0.1"
    assert env["MY_DB_SERVICE_HOST"] == "127.100.3.4"
    assert env["MY_DB_SERVICE_PORT"] == env["MY_DB_SERVICE_PORT_SQL"] == "5432"
    assert env["MY_DB_PORT"] == "tcp://127.100.3.4:5432"
    assert env["MY_DB_PORT_9000_TCP"] == "tcp://127.100.3.4:9000"
    assert env["MY_DB_PORT_9000_TCP_PROTO"] == "tcp"
    assert env["MY_DB_PORT_9000_TCP_PORT"] == "9000"
    assert not any(k.startswith(("HEADLESS", "ELSEWHERE")) for k in env)
    # enableServiceLinks: false keeps only the master service's.
    only = service_environment(services, "team", links=False)
    assert {k.split("_")[0] for k in only} == {"KUBERNETES"}


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group needs root")
async def test_fs_group_owns_the_volumes(tmp_path: Path) -> None:
    """kube's SetVolumeOwnership: the pod's fsGroup on every file, group-readable secrets
    (even with defaultMode 0400), a setgid emptyDir; no rewrite at the next setup."""
    api = FakeAPI()
    sec = secret_pb2.Secret()
    sec.data["password"] = b"pw"
    api.secs["s"] = sec
    pod = _pod(
        [
            {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0o400}},
            {"name": "scratch", "emptyDir": {}},
        ]
    )
    pod.spec.securityContext.fsGroup = 2345
    vm = VolumeManager(tmp_path)
    vm.api = api  # type: ignore[assignment]
    paths = await vm.setup(pod)
    secret_file = paths["sec"] / "password"
    assert (secret_file.stat().st_gid, _mode(secret_file)) == (2345, 0o440)
    scratch = paths["scratch"].stat()
    assert scratch.st_gid == 2345 and scratch.st_mode & stat.S_ISGID
    data = os.readlink(paths["sec"] / "..data")
    await vm.setup(pod, force=True)
    assert os.readlink(paths["sec"] / "..data") == data  # nothing rewritten


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's group needs root")
async def test_fs_group_change_policy_does_not_spare_ephemeral_volumes(tmp_path: Path) -> None:
    """kube's secret, configMap, downwardAPI, projected and emptyDir plugins pass no
    fsGroupChangePolicy: with OnRootMismatch (the root's group already right) a Secret's
    update still gets the group on its new files."""
    api = FakeAPI()
    sec = secret_pb2.Secret()
    sec.data["password"] = b"pw"
    api.secs["s"] = sec
    pod = _pod([{"name": "sec", "secret": {"secretName": "s"}}])
    pod.spec.securityContext.fsGroup = 2345
    pod.spec.securityContext.fsGroupChangePolicy = "OnRootMismatch"
    vm = VolumeManager(tmp_path)
    vm.api = api  # type: ignore[assignment]
    paths = await vm.setup(pod)
    assert paths["sec"].stat().st_gid == 2345
    sec.data["token"] = b"t"
    await vm.setup(pod, force=True)
    new = paths["sec"] / "token"
    assert (new.stat().st_gid, _mode(new)) == (2345, 0o644 | 0o040)
