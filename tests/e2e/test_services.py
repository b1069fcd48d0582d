"""Services across real processes: a ReplicaSet of two `python -m http.server` pods on two nodes
behind a NodePort Service, reached through each node's proxy.

The kubelets get distinct loopback node IPs (127.0.1.1, 127.0.1.2: `node_ips=True`); each pod
binds its node's IP ($POD_IP) and declares hostPort 8080, so the scheduler's NodePorts filter puts
one pod on each node. Requests go from this test process to the Service's cluster IP and to each
node's nodePort, through the userspace proxies (`python -m kubelet.proxy`). Every wait polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import waiting
from tests.e2e.conftest import tinykube_command
from tinykube.client import Client
from tinykube.errors import AlreadyExistsError, NotFoundError, TinykubeError
from tinykube.launcher import LocalCluster, has_main
from tinykube.meta import int_or_string, int_or_string_value
from tinykube.v1 import endpoints_pb2, endpointslice_pb2, pod_pb2, replicaset_pb2, service_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NS = "default"
NODE_IPS = {"node-1": "127.0.1.1", "node-2": "127.0.1.2"}
PORT = 8080
BIG = 10 * 1024 * 1024
LINE = b"0123456789abcdef\n"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "service.yaml"
KUBELET_ARGS = ["--node-status-update-frequency", "1s", "--poll-interval", "200ms"]


def expected_big() -> bytes:
    return (LINE * (BIG // len(LINE) + 1))[:BIG]


async def eventually(
    check: Callable[[], Awaitable[Any]], limit: float = 60.0, what: str = "condition"
) -> Any:
    """Also waits out connection errors: a proxy listener comes up after the endpoints."""
    return await waiting.eventually(
        check, limit, what, tolerate=(TinykubeError, OSError, http.client.HTTPException)
    )


def http_get(host: str, port: int, path: str, timeout: float = 10.0) -> bytes:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise http.client.HTTPException(f"GET {path}: HTTP {response.status}")
        return body
    finally:
        conn.close()


async def get(host: str, port: int, path: str) -> bytes:
    return await asyncio.to_thread(http_get, host, port, path)


def replica_set(replicas: int) -> replicaset_pb2.ReplicaSet:
    rs = replicaset_pb2.ReplicaSet()
    rs.metadata.name = "web"
    rs.metadata.namespace = NS
    rs.spec.replicas = replicas
    rs.spec.selector.matchLabels["app"] = "web"
    rs.spec.template.metadata.labels["app"] = "web"
    script = (
        f"yes {LINE.decode().strip()} | head -c {BIG} > big.bin; "
        'echo "$HOSTNAME" > name.txt; '
        f'exec {sys.executable} -m http.server {PORT} --bind "$POD_IP"'
    )
    c = rs.spec.template.spec.containers.add(
        name="web", image="python", command=["sh", "-c", script]
    )
    # The pod takes port 8080 on its node: hostPort makes the scheduler keep the two apart.
    c.ports.add(name="http", containerPort=PORT, hostPort=PORT)
    rs.spec.template.spec.terminationGracePeriodSeconds = 2
    return rs


def service() -> service_pb2.Service:
    svc = service_pb2.Service()
    svc.metadata.name = "web"
    svc.metadata.namespace = NS
    svc.spec.type = "NodePort"
    svc.spec.selector["app"] = "web"
    svc.spec.ports.add(port=PORT, targetPort=int_or_string_value("http"))
    return svc


def ready_ips(ep: endpoints_pb2.ServiceEndpoints) -> list[str]:
    return sorted(a.ip for s in ep.subsets for a in s.addresses)


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    if not has_main("scheduler"):
        pytest.skip("needs the scheduler")
    cl = LocalCluster(
        tmp_path_factory.mktemp("services"),
        kubelets=tuple(NODE_IPS),
        proxies=True,
        node_ips=True,  # kubelet i on 127.0.1.i, as NODE_IPS says
        extra_args={"kubelet": KUBELET_ARGS},
    )
    await asyncio.to_thread(cl.start)
    try:
        yield cl
    finally:
        await asyncio.to_thread(cl.stop)


@pytest.fixture(scope="module")
async def web(cluster: LocalCluster) -> AsyncIterator[service_pb2.Service]:
    """The Service with two ready pods behind it, answering through its cluster IP."""
    async with Client(cluster.api_address) as client:
        svc = await client.services.create(service())
        await client.replica_sets.create(replica_set(2))

        async def two_ready() -> bool:
            ep = await client.endpoints.get("web", NS)
            return ready_ips(ep) == sorted(NODE_IPS.values())

        await eventually(two_ready, what="two ready endpoints on the two nodes")
        yield svc


async def test_service_gets_a_cluster_ip_and_node_port(web: service_pb2.Service) -> None:
    assert web.spec.clusterIP.startswith("127.100.")
    assert 30000 <= web.spec.ports[0].nodePort <= 32767
    assert int_or_string(web.spec.ports[0].targetPort) == "http"


async def pod_names(client: Client) -> set[str]:
    pods = await client.pods.list(NS, label_selector="app=web")
    return {p.metadata.name for p in pods.items if not p.metadata.HasField("deletionTimestamp")}


async def test_cluster_ip_balances_over_both_pods(
    cluster: LocalCluster, web: service_pb2.Service
) -> None:
    ip = web.spec.clusterIP
    # The pods are Ready as soon as their process runs; wait until http.server answers.
    await eventually(lambda: get(ip, PORT, "/name.txt"), what="the service to answer")
    answers = [(await get(ip, PORT, "/name.txt")).decode().strip() for _ in range(50)]
    async with Client(cluster.api_address) as client:
        assert set(answers) == await pod_names(client)
    assert len(set(answers)) == 2


async def test_node_port_on_each_node(web: service_pb2.Service) -> None:
    node_port = web.spec.ports[0].nodePort
    for node_ip in NODE_IPS.values():
        answers = {(await get(node_ip, node_port, "/name.txt")).strip() for _ in range(20)}
        assert len(answers) == 2, node_ip


async def test_ten_megabytes_pass_intact(web: service_pb2.Service) -> None:
    body = await get(web.spec.clusterIP, PORT, "/big.bin")
    assert len(body) == BIG
    assert body == expected_big()
    body = await get(NODE_IPS["node-2"], web.spec.ports[0].nodePort, "/big.bin")
    assert body == expected_big()


async def test_deleted_pod_leaves_the_endpoints_and_no_request_fails(
    cluster: LocalCluster, web: service_pb2.Service
) -> None:
    async with Client(cluster.api_address) as client:
        pods = await client.pods.list(NS, label_selector="app=web")
        victim: pod_pb2.Pod = pods.items[0]
        victim_ip = victim.status.podIP
        await client.pods.delete(victim.metadata.name, NS)

        async def gone_from_endpoints() -> bool:
            ep = await client.endpoints.get("web", NS)
            return victim_ip not in ready_ips(ep)

        await eventually(gone_from_endpoints, what="the deleted pod to leave the endpoints")
        for _ in range(50):
            await get(web.spec.clusterIP, PORT, "/name.txt")

        # The ReplicaSet's replacement lands on the freed node and joins the Service.
        async def healed() -> bool:
            ep = await client.endpoints.get("web", NS)
            return ready_ips(ep) == sorted(NODE_IPS.values())

        await eventually(healed, what="the replacement pod in the endpoints")


def connect(host: str, port: int) -> str:
    """'refused', 'reset' (accepted then closed at once) or 'open'."""
    with socket.create_connection((host, port), timeout=2.0) as sock:
        sock.settimeout(2.0)
        try:
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = sock.recv(1)
        except ConnectionResetError:
            return "reset"
        return "open" if data else "reset"


async def probe(host: str, port: int) -> str:
    try:
        return await asyncio.to_thread(connect, host, port)
    except ConnectionRefusedError:
        return "refused"


async def test_scale_to_zero_refuses_connections_at_once(
    cluster: LocalCluster, web: service_pb2.Service
) -> None:
    async with Client(cluster.api_address) as client:
        rs = await client.replica_sets.get("web", NS)
        rs.spec.replicas = 0
        await client.replica_sets.update(rs)

        async def empty() -> bool:
            return ready_ips(await client.endpoints.get("web", NS)) == []

        await eventually(empty, what="no ready endpoints")
    targets = [(web.spec.clusterIP, PORT)] + [
        (ip, web.spec.ports[0].nodePort) for ip in NODE_IPS.values()
    ]
    for host, port in targets:

        async def refused(host: str = host, port: int = port) -> bool:
            return await probe(host, port) == "refused"

        await eventually(refused, limit=15, what=f"{host}:{port} to refuse connections")
        # Refused every time, at once (each probe would otherwise wait its 2 s timeout).
        for _ in range(5):
            assert await probe(host, port) == "refused"


async def test_deleting_the_service_releases_its_endpoints_and_addresses(
    cluster: LocalCluster, web: service_pb2.Service
) -> None:
    async with Client(cluster.api_address) as client:
        again = service()
        again.metadata.name = "web-2"
        again.spec.clusterIP = web.spec.clusterIP
        with pytest.raises(AlreadyExistsError, match="provided IP is already allocated"):
            await client.services.create(again)
        await client.services.delete("web", NS)

        async def endpoints_gone() -> bool:
            with contextlib.suppress(NotFoundError):
                await client.endpoints.get("web", NS)
                return False
            return True

        await eventually(endpoints_gone, what="the endpoints to be deleted with the service")
        # The cluster IP and nodePort are free again: asking for them explicitly succeeds.
        again.spec.ports[0].nodePort = web.spec.ports[0].nodePort
        svc = await client.services.create(again)
        assert (svc.spec.clusterIP, svc.spec.ports[0].nodePort) == (
            web.spec.clusterIP,
            web.spec.ports[0].nodePort,
        )


def cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tinykube_command(), "--server", cluster.api_address, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_example_applies_and_answers_through_the_cli(cluster: LocalCluster) -> None:
    example = EXAMPLE
    done = await asyncio.to_thread(cli, cluster, "apply", "-f", str(example))
    assert done.returncode == 0, done.stderr
    assert "service/hello created" in done.stdout
    async with Client(cluster.api_address) as client:

        async def two_ready() -> bool:
            return len(ready_ips(await client.endpoints.get("hello", NS))) == 2

        await eventually(two_ready, what="the example's two ready endpoints")
        svc = await client.services.get("hello", NS)
    answer = await eventually(
        lambda: get(svc.spec.clusterIP, 8080, "/"), what="the example to answer"
    )
    assert answer.startswith(b"hello from hello-")
    table = (await asyncio.to_thread(cli, cluster, "get", "services")).stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    row = next(line.split() for line in table if line.startswith("hello "))
    node_port = svc.spec.ports[0].nodePort
    assert row[1:5] == ["NodePort", svc.spec.clusterIP, "<none>", f"8080:{node_port}/TCP"]
    table = (await asyncio.to_thread(cli, cluster, "get", "endpoints")).stdout.splitlines()
    row = next(line.split() for line in table if line.startswith("hello "))
    assert row[1] == "127.0.1.1:8080,127.0.1.2:8080"
    # Re-applying the manifest (no clusterIP or nodePort in it) keeps both.
    done = await asyncio.to_thread(cli, cluster, "apply", "-f", str(example))
    assert done.returncode == 0, done.stderr
    async with Client(cluster.api_address) as client:
        again = await client.services.get("hello", NS)
    assert again.spec == svc.spec


async def test_kubelet_refuses_to_start_a_container_whose_port_is_taken(
    cluster: LocalCluster,
) -> None:
    # Something on node-1 already listens on the port the pod declares.
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind((NODE_IPS["node-1"], 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        pod = pod_pb2.Pod()
        pod.metadata.name = "port-taken"
        pod.metadata.namespace = NS
        pod.spec.nodeName = "node-1"
        c = pod.spec.containers.add(name="web", image="python", command=["sleep", "60"])
        c.ports.add(containerPort=port)
        async with Client(cluster.api_address) as client:
            await client.pods.create(pod)

            async def waiting_reason() -> str:
                got = await client.pods.get("port-taken", NS)
                for cs in got.status.containerStatuses:
                    if cs.state.waiting.message:
                        return f"{cs.state.waiting.reason}: {cs.state.waiting.message}"
                return ""

            reason = await eventually(waiting_reason, what="the container to wait on its port")
            assert f"port {port}/TCP on the node (127.0.1.1) is already in use" in reason
            await client.pods.delete("port-taken", NS, grace_period_seconds=0)
    finally:
        busy.close()


async def test_type_changes_allocate_and_release_node_ports(cluster: LocalCluster) -> None:
    async with Client(cluster.api_address) as client:
        svc = service()
        svc.metadata.name = "flip"
        svc.spec.type = "ClusterIP"
        created = await client.services.create(svc)
        assert created.spec.ports[0].nodePort == 0
        created.spec.type = "NodePort"
        as_node_port = await client.services.update(created)
        node_port = as_node_port.spec.ports[0].nodePort
        assert 30000 <= node_port <= 32767
        assert as_node_port.spec.clusterIP == created.spec.clusterIP

        # Taken while "flip" holds it.
        other = service()
        other.metadata.name = "other"
        other.spec.ports[0].nodePort = node_port
        with pytest.raises(AlreadyExistsError, match="provided port is already allocated"):
            await client.services.create(other)

        as_node_port.spec.type = "ClusterIP"
        as_node_port.spec.ports[0].nodePort = 0
        back = await client.services.update(as_node_port)
        assert back.spec.ports[0].nodePort == 0
        # Released by that update: now it can be had.
        got = await client.services.create(other)
        assert got.spec.ports[0].nodePort == node_port


async def test_the_proxy_routes_from_endpoint_slices(cluster: LocalCluster) -> None:
    """A selector-less Service whose only backend is a hand-made EndpointSlice (no Endpoints
    object): the proxies route by the slice, as kube-proxy does."""
    body = b"from a slice\n"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    backend = await asyncio.start_server(answer, NODE_IPS["node-1"], 0)
    backend_port = backend.sockets[0].getsockname()[1]
    try:
        async with Client(cluster.api_address) as client:
            svc = service_pb2.Service()
            svc.metadata.name = "sliced"
            svc.metadata.namespace = NS
            svc.spec.ports.add(name="http", port=8081)
            svc = await client.services.create(svc)
            eps = endpointslice_pb2.EndpointSlice(addressType="IPv4")
            eps.metadata.name = "sliced-1"
            eps.metadata.namespace = NS
            eps.metadata.labels["kubernetes.io/service-name"] = "sliced"
            eps.ports.add(name="http", port=backend_port, protocol="TCP")
            eps.endpoints.add(addresses=[NODE_IPS["node-1"]]).conditions.ready = True
            await client.endpoint_slices.create(eps)
            with contextlib.suppress(NotFoundError):
                await client.endpoints.get("sliced", NS)
                pytest.fail("the Service must have no Endpoints: the proxy reads slices")
            got = await eventually(
                lambda: get(svc.spec.clusterIP, 8081, "/"), what="the slice's backend to answer"
            )
            assert got == body
            await client.services.delete("sliced", NS)
            await client.endpoint_slices.delete("sliced-1", NS)
    finally:
        backend.close()
