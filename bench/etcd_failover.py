"""How long writes stall when an etcd member dies: the HA topology under a stream of writes.

    python -m bench.etcd_failover --rounds 2 --writers 8

Starts `tinykube.launcher.LocalCluster(ha=True)` without scheduler, controller manager or
kubelets (3 etcd members over TLS, 2 apiservers), registers a few Nodes, then runs `--writers`
loops in this process, each creating a pod and binding it, alternating between the two
apiservers (raw gRPC stubs, no client retries: an error the apiserver lets through counts).
In each round every member is killed with SIGKILL in turn, the current leader first, and
started again from its data dir once `--writes-per-step` more writes were acknowledged.

The figure for each kill and restart is the longest wait for an acknowledgement from that
moment on (over the next `--writes-per-step` acknowledgements). At the end every acknowledged
create and bind must be in a final List (they are asserted, the run fails otherwise).

Output: bench/results/etcd-failover-<stamp>.json (per event: what, whether it was the leader,
the stall in ms; the number of writes and of errors clients saw) and a PNG of
acknowledgements per 100 ms with the kills and restarts marked.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from tinykube.launcher import LocalCluster
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, node_pb2, node_pb2_grpc, pod_pb2, pod_pb2_grpc

RESULTS = Path(__file__).resolve().parent / "results"
STEP_TIMEOUT = 120.0


def pod(name: str) -> pod_pb2.Pod:
    return pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="default"),
        spec=pod_pb2.PodSpec(
            containers=[pod_pb2.Container(name="c", image="busybox")], schedulerName="none"
        ),
    )


class Load:
    def __init__(self) -> None:
        self.created: dict[str, int] = {}
        self.bound: dict[str, int] = {}
        self.acks: list[float] = []
        self.errors: list[str] = []
        self.stop = False

    async def wait(self, count: int) -> None:
        want = len(self.acks) + count
        deadline = time.monotonic() + STEP_TIMEOUT
        while len(self.acks) < want:
            if time.monotonic() > deadline:
                raise TimeoutError(f"writes stalled; errors: {self.errors[-3:]}")
            await asyncio.sleep(0.01)

    def stall_after(self, t: float, count: int) -> float:
        after = [a for a in self.acks if a >= t][:count]
        return max(b - a for a, b in itertools.pairwise([t, *after]))


async def writer(pods: Any, load: Load, index: int, nodes: int) -> None:
    for n in itertools.count():
        if load.stop:
            return
        name = f"w{index}-{n}"
        try:
            created = await pods.Create(pod_pb2.CreatePodRequest(pod=pod(name)), timeout=30)
            load.created[name] = int(created.metadata.resourceVersion)
            load.acks.append(time.monotonic())
            binding = pod_pb2.Binding(
                metadata=meta_pb2.ObjectMeta(name=name, namespace="default"),
                target=meta_pb2.ObjectReference(kind="Node", name=f"n{n % nodes}"),
            )
            resp = await pods.Bind(pod_pb2.BindRequest(binding=binding), timeout=30)
            load.bound[name] = int(resp.resourceVersion)
            load.acks.append(time.monotonic())
        except grpc.aio.AioRpcError as exc:
            load.errors.append(f"{name}: {exc.code().name}: {exc.details()}")


async def run(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    creds = cluster.credentials
    channels = [creds.channel(a, CHANNEL_OPTIONS) for a in cluster.api_addresses]
    pods = [pod_pb2_grpc.PodsStub(ch) for ch in channels]
    nodes = node_pb2_grpc.NodesStub(channels[0])
    for i in range(3):
        node = node_pb2.Node(metadata=meta_pb2.ObjectMeta(name=f"n{i}"))
        await nodes.Create(node_pb2.CreateNodeRequest(node=node), timeout=30)
    load = Load()
    tasks = [
        asyncio.create_task(writer(pods[i % len(pods)], load, i, 3)) for i in range(args.writers)
    ]
    t0 = time.monotonic()
    events: list[dict[str, Any]] = []
    marks: list[tuple[float, str]] = []
    try:
        await load.wait(args.writes_per_step)
        for _ in range(args.rounds):
            leader = await asyncio.to_thread(cluster.etcd_leader)
            order = [leader, *(m for m in cluster.etcd_members if m != leader)]
            for name in order:
                # Leadership moves when a member comes back: ask again before each kill.
                was_leader = name == await asyncio.to_thread(cluster.etcd_leader)
                for what in ("kill", "restart"):
                    t = time.monotonic()
                    if what == "kill":
                        await asyncio.to_thread(cluster.kill, name)
                    else:
                        await asyncio.to_thread(cluster.start_component, name)
                    await load.wait(args.writes_per_step)
                    stall = load.stall_after(t, args.writes_per_step)
                    events.append(
                        {
                            "event": what,
                            "member": name,
                            "leader": what == "kill" and was_leader,
                            "stall_ms": round(stall * 1000, 1),
                        }
                    )
                    marks.append((t - t0, f"{what} {name}"))
                    print(
                        f"{what} {name}{' (leader)' if events[-1]['leader'] else ''}: "
                        f"acknowledgements stalled {stall * 1000:.0f} ms",
                        flush=True,
                    )
    finally:
        load.stop = True
        await asyncio.gather(*tasks)
    listed = await pods[1 % len(pods)].List(meta_pb2.ListRequest(namespace="default"), timeout=60)
    stored = {p.metadata.name: p for p in listed.items}
    lost = [n for n in load.created if n not in stored]
    unbound = [n for n in load.bound if not stored[n].spec.nodeName]
    for ch in channels:
        await ch.close()
    if lost or unbound:
        raise AssertionError(f"acknowledged writes lost: creates {lost[:5]}, binds {unbound[:5]}")
    return {
        "writers": args.writers,
        "rounds": args.rounds,
        "writes": len(load.acks),
        "client_errors": len(load.errors),
        "errors_sample": load.errors[:10],
        "events": events,
        "acks": [round(a - t0, 4) for a in load.acks],
        "marks": marks,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acks = result["acks"]
    bins = [0] * (int(max(acks) * 10) + 1)
    for a in acks:
        bins[int(a * 10)] += 1
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot([i / 10 for i in range(len(bins))], [b * 10 for b in bins], lw=0.8)
    for t, label in result["marks"]:
        ax.axvline(t, color="red" if label.startswith("kill") else "green", lw=0.6)
        ax.text(t, ax.get_ylim()[1] * 0.95, label, rotation=90, fontsize=6, va="top")
    ax.set_xlabel("seconds")
    ax.set_ylabel("acknowledged writes / s")
    ax.set_title("tinykube HA: writes while etcd members are killed and restarted")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--writes-per-step", type=int, default=200)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args()
    work = args.work_dir or tempfile.mkdtemp(prefix="tinykube-failover-")
    cluster = LocalCluster(work, ha=True, scheduler=False, controller=False, kubelets=())
    with cluster:
        result = asyncio.run(run(cluster, args))
    stamp = time.strftime("%Y%m%dT%H%M%S")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"etcd-failover-{stamp}.json"
    out.write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    kills = [e["stall_ms"] for e in result["events"] if e["event"] == "kill" and e["leader"]]
    print(
        f"{result['writes']} writes, {result['client_errors']} client errors; "
        f"leader kills stalled {kills} ms; {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
