"""A kubelet on write streams loses the apiserver its streams are on.

Two apiservers over one etcd, the controller manager (its node lifecycle controller marks a node
whose Lease and status go stale NotReady/Unknown) and a fake kubelet hosting 3 nodes, renewing
12 s Leases every 3 s through each node's own Leases/UpdateStream. Twice: the apiserver serving
the kubelet's Lease streams (its metrics count the messages) is stopped, first by SIGKILL (a
renewal in flight then is left to chance here; tests/integration/test_kubelet_heartbeats.py
loses one on purpose), then by SIGTERM (its graceful stop ends the streams after answering what
they read); the kubelet must move its streams to the other apiserver (which then counts
Leases/UpdateStream messages, so they are not unary calls), every node's Lease must keep being
renewed and never lapse (no two renewals further apart than the lease duration), no node may
turn anything but Ready, and a pod bound to each node after the stop must be reported Running,
its status written through the other apiserver. The stopped apiserver then starts again; the
second round stops the one the streams moved to, so the kubelet moves back to a restarted
apiserver.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.informer import Informer
from tinykube.launcher import HOST, LocalCluster
from tinykube.localetcd import free_port
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

NODES = 3
LEASE_SECONDS = 12  # renewed every 3 s
NODE_LEASE_NAMESPACE = "kube-node-lease"
RENEWALS_AFTER_KILL = 3


@dataclass
class Watched:
    """Every renewTime each node's Lease was seen with, and every non-Ready condition seen."""

    renewals: dict[str, list[float]] = field(default_factory=dict)
    not_ready: list[str] = field(default_factory=list)

    def lease(self, lease: lease_pb2.Lease, _new: lease_pb2.Lease | None = None) -> None:
        obj = _new if _new is not None else lease
        renew = obj.spec.renewTime.seconds + obj.spec.renewTime.nanos / 1e9
        seen = self.renewals.setdefault(obj.metadata.name, [])
        if not seen or seen[-1] != renew:
            seen.append(renew)

    def node(self, node: node_pb2.Node, _new: node_pb2.Node | None = None) -> None:
        obj = _new if _new is not None else node
        for cond in obj.status.conditions:
            if cond.type == "Ready" and cond.status != "True":
                self.not_ready.append(f"{obj.metadata.name}: Ready={cond.status} {cond.reason}")

    def longest_gap(self) -> float:
        return max(
            (b - a for seen in self.renewals.values() for a, b in itertools.pairwise(seen)),
            default=0.0,
        )


def stream_messages(metrics_port: int, method: str) -> float:
    """OK messages of write stream `method` ("Leases/UpdateStream") an apiserver counted."""
    url = f"http://{HOST}:{metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0  # not up (killed, or starting)
    want = f'apiserver_request_total{{code="OK",method="{method}"}} '
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(want))


@dataclass
class Cluster:
    local: LocalCluster
    metrics_ports: dict[str, int]  # by apiserver component


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    ports = {"apiserver": free_port(HOST), "apiserver-2": free_port(HOST)}
    cl = LocalCluster(
        tmp_path_factory.mktemp("streams-ha"),
        apiservers=2,
        scheduler=False,
        kubelets=("hollow",),
        kubelet_runtime="fake",
        extra_args={
            "kubelet": [
                "--fake-nodes",
                str(NODES),
                "--node-name-prefix",
                "hollow-",
                "--node-lease-duration-seconds",
                str(LEASE_SECONDS),
                "--write-streams",
            ],
            **{name: ["--metrics-port", str(port)] for name, port in ports.items()},
        },
    )
    await asyncio.to_thread(cl.start)
    try:
        yield Cluster(cl, ports)
    finally:
        await asyncio.to_thread(cl.stop)


def bare_pod(name: str, node: str) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = name
    pod.metadata.namespace = "default"
    pod.spec.nodeName = node  # no scheduler here
    pod.spec.containers.add(name="c", image="pause")
    return pod


async def test_a_kubelet_keeps_its_leases_and_pod_statuses_through_losing_its_apiserver(
    cluster: Cluster,
) -> None:
    cl, ports = cluster.local, cluster.metrics_ports
    targets = [cl.address(name) for name in ports]
    nodes = [f"hollow-{i}" for i in range(NODES)]
    watched = Watched()
    async with Client(targets) as client:
        leases: Informer[lease_pb2.Lease] = Informer.for_resource(
            client.leases, namespace=NODE_LEASE_NAMESPACE
        )
        leases.add_handler(watched.lease, watched.lease, lambda lease: None)
        node_informer: Informer[node_pb2.Node] = Informer.for_resource(client.nodes)
        tasks = [leases.start(), node_informer.start()]
        try:
            await leases.wait_synced()
            await node_informer.wait_synced()

            async def all_ready() -> bool:
                found = [node_informer.store.get(n) for n in nodes]
                return all(
                    n is not None
                    and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
                    for n in found
                )

            await eventually(all_ready, limit=120, what=f"{NODES} Ready fake nodes")
            node_informer.add_handler(watched.node, watched.node, lambda node: None)

            async def serving_streams() -> str:
                """The apiserver the kubelet's Lease streams are on: the one whose count of
                Leases/UpdateStream messages grows over a renewal interval."""
                before = {
                    n: await asyncio.to_thread(stream_messages, p, "Leases/UpdateStream")
                    for n, p in ports.items()
                }
                await asyncio.sleep(LEASE_SECONDS / 4 + 1)
                after = {
                    n: await asyncio.to_thread(stream_messages, p, "Leases/UpdateStream")
                    for n, p in ports.items()
                }
                grew = [n for n in ports if after[n] > before[n]]
                return grew[0] if len(grew) == 1 else ""

            # First a crash, then a graceful stop (which ends the streams itself).
            for round_, sig in ((1, signal.SIGKILL), (2, signal.SIGTERM)):
                victim = await eventually(
                    serving_streams, limit=60, what="the apiserver of the kubelet's streams"
                )
                (other,) = [n for n in ports if n != victim]
                statuses_before = await asyncio.to_thread(
                    stream_messages, ports[other], "Pods/UpdateStatusStream"
                )
                leases_before = await asyncio.to_thread(
                    stream_messages, ports[other], "Leases/UpdateStream"
                )
                renewed_by = {n: len(watched.renewals.get(n, [])) for n in nodes}
                await asyncio.to_thread(cl.kill, victim, sig)

                async def renewed_elsewhere(renewed_by: dict[str, int] = renewed_by) -> bool:
                    counts = {n: len(watched.renewals.get(n, [])) for n in nodes}
                    return all(counts[n] >= renewed_by[n] + RENEWALS_AFTER_KILL for n in nodes)

                await eventually(
                    renewed_elsewhere,
                    limit=LEASE_SECONDS * 4,
                    what=f"every Lease renewed {RENEWALS_AFTER_KILL} times without {victim}",
                )
                # Through the other apiserver's Lease streams, not unary calls.
                assert (
                    await asyncio.to_thread(stream_messages, ports[other], "Leases/UpdateStream")
                    >= leases_before + NODES * RENEWALS_AFTER_KILL
                )

                # A pod on each node, one at a time: each status write goes alone, so on the
                # node's Pods/UpdateStatusStream (writes that are ready together share a
                # Pods/UpdateStatusBatch call instead).
                for node in nodes:
                    name = f"r{round_}-{node}"
                    await client.pods.create(bare_pod(name, node))

                    async def running(name: str = name) -> bool:
                        pod = await client.pods.get(name, "default")
                        return pod.status.phase == "Running"

                    await eventually(running, limit=60, what=f"{name} Running")
                assert (
                    await asyncio.to_thread(
                        stream_messages, ports[other], "Pods/UpdateStatusStream"
                    )
                    >= statuses_before + NODES
                )
                await asyncio.to_thread(cl.start_component, victim)

            assert watched.not_ready == []
            # No Lease lapsed: a renewal always came within the lease duration of the last.
            assert watched.longest_gap() < LEASE_SECONDS, watched.renewals
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
