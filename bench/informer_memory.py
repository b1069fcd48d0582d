"""Bytes per pod in the processes that hold informers, measured in one process, no cluster.

    python bench/informer_memory.py [--pods 20000] [--managed-fields] [--batch 4]
                                    [--only KIND ...] [--trace 12] [--out FILE]

Pods are bench/load.py's (its Deployments' template, CL2's group sizes from
`deployment_plan`), made as the cluster makes them, each step by the component's own code: the
ReplicaSet controller's `pod_from_template` (owner reference, the pod-template-hash label), the
apiserver's create defaults and admission (`default_pod_spec`, `prepare_pod_for_create`, the
ServiceAccount admission's projected token volume, priority), Bind (spec.nodeName and
PodScheduled), and the hollow kubelet's status (`build_pod_status`: phase Running, conditions,
containerStatuses, IPs, QoS). `--managed-fields` adds metadata.managedFields as the apiserver
records them (`fieldmanager.record_update`: the creator's entry, then the kubelet's on the status
subresource), as every pod has them in Kubernetes and in tinykube when written over REST
(tinykube's own components write over gRPC, which records none unless asked).

Each pod reaches the informers as it does in a cluster: three watch events (ADDED, MODIFIED at
the bind, MODIFIED with the kubelet's status) on a WatchBatch stream, `--batch` events per
message (the apiserver's 10 ms window at 100 pods/s carries 3-4), decoded with the gRPC stub's
own deserializer, the versions of different pods interleaved as in the load test.

Each KIND runs in a fresh child process (so its RSS starts clean) and reports, per pod:
`rss` (VmRSS delta: what the kernel sees, upb's arenas included), `malloc` (glibc's bytes in
use: upb allocates with malloc, out of tracemalloc's sight), `python` (tracemalloc: Python's
own objects) and, with `--trace N`, the top N allocation sites.

KINDs: `bytes` (the serialized pods, for scale), `decoded` (each pod decoded alone, one arena
each), `listed` (all in one PodList, one arena), `copied` (each decoded pod copied into a new
message: what the informer's default transform keeps; also the CPU of a copy), `informer`
(tinykube.informer.Informer's store, no handlers), `scheduler` (the scheduler's pod informer
feeding `Scheduler`'s handlers, nodes known), `controller` (the controller manager's informer
factory with every controller's handlers and indexes, workers not running: their queues are
emptied before the measurement).

Results: JSON on stdout, or `--out FILE`. Every figure carries `nproc` and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apiserver import fieldmanager, podmutation, serviceaccount
from apiserver.registry.podspec import default_pod_spec
from controller.replicaset import pod_from_template
from kubelet.runtime import RUNNING, ContainerRecord, PodRecord, build_pod_status
from tinykube import kinds
from tinykube.memreport import malloc_info
from tinykube.meta import timestamp
from tinykube.v1 import node_pb2, pod_pb2, replicaset_pb2

KINDS = ("bytes", "decoded", "listed", "copied", "informer", "scheduler", "controller")
PODS_PER_NODE = 30
T0 = 1_796_500_000  # creation times near the session's


def _load_module() -> Any:
    import load  # bench/load.py: imported late, it pulls the harness in

    return load


def replica_sets(pods: int) -> list[replicaset_pb2.ReplicaSet]:
    """The load test's Deployments (CL2's sizes) as the ReplicaSets the Deployment controller
    makes of them, covering at least `pods` pods."""
    load = _load_module()
    nodes = max(1, -(-pods // PODS_PER_NODE))
    plan = load.deployment_plan(nodes, {"nodesPerNamespace": 100, "podsPerNode": PODS_PER_NODE})
    out = []
    for n, (ns, name, replicas) in enumerate(plan):
        d = load.make_deployment(ns, name, replicas, 1)
        rs = replicaset_pb2.ReplicaSet(apiVersion="apps/v1", kind="ReplicaSet")
        template_hash = f"{random.Random(n).getrandbits(40):010x}"[:10]
        rs.metadata.name = f"{name}-{template_hash}"
        rs.metadata.namespace = ns
        rs.metadata.uid = str(uuid.UUID(int=random.Random(-n - 1).getrandbits(128)))
        rs.spec.replicas = replicas
        rs.spec.template.CopyFrom(d.spec.template)
        rs.spec.template.metadata.labels["pod-template-hash"] = template_hash
        out.append(rs)
    return out


def pod_versions(
    rs: replicaset_pb2.ReplicaSet, i: int, node: str, managed_fields: bool
) -> list[pod_pb2.Pod]:
    """The three stored versions of pod `i` of `rs`: created, bound, running."""
    rng = random.Random(hash((rs.metadata.uid, i)))
    now = datetime.fromtimestamp(T0 + i // 100, UTC)
    pod = pod_from_template(rs)
    meta = pod.metadata
    meta.name = meta.generateName + serviceaccount.random_suffix()
    meta.uid = str(uuid.UUID(int=rng.getrandbits(128)))
    meta.creationTimestamp.seconds = T0 + i // 100
    default_pod_spec(pod.spec, 30)
    pod.status.phase = "Pending"
    podmutation.prepare_pod_for_create(pod, now)
    serviceaccount.convert_pod_spec(pod.spec)
    serviceaccount.set_pod_service_account(pod.spec, "default")
    serviceaccount.add_api_access_volume(pod.spec, serviceaccount.random_suffix())
    pod.spec.priority = 0
    pod.spec.preemptionPolicy = podmutation.DEFAULT_PREEMPTION_POLICY
    if managed_fields:
        fieldmanager.record_update(None, pod, kinds.POD, manager="kube-controller-manager", now=now)
    rv = 10_000 + 3 * i
    meta.resourceVersion = str(rv)
    created = pod_pb2.Pod()
    created.CopyFrom(pod)

    pod.spec.nodeName = node
    pod.status.conditions.add(type="PodScheduled", status="True", lastTransitionTime=timestamp(now))
    meta.resourceVersion = str(rv + 1)
    bound = pod_pb2.Pod()
    bound.CopyFrom(pod)

    octets = [10, (i >> 16) & 255, (i >> 8) & 255, i & 255]
    host_ip = ".".join(map(str, octets))
    record = PodRecord(meta.uid, meta.namespace, meta.name, start_time=T0 + i // 100 + 1)
    record.containers["app"] = ContainerRecord(
        "app",
        state=RUNNING,
        pid=100_000 + i,
        started_at=T0 + i // 100 + 1,
        image=pod.spec.containers[0].image,
    )
    status = build_pod_status(pod, record, host_ip, bound.status, T0 + i // 100 + 1)
    pod.status.CopyFrom(status)
    if managed_fields:
        fieldmanager.record_update(
            bound, pod, kinds.POD, manager="kubelet", now=now, subresource="status"
        )
    meta.resourceVersion = str(rv + 2)
    return [created, bound, pod]


def make_pods(n: int, managed_fields: bool) -> list[list[pod_pb2.Pod]]:
    """`n` pods' versions, ReplicaSet by ReplicaSet, on n/30 nodes."""
    random.seed(1)
    out: list[list[pod_pb2.Pod]] = []
    nodes = max(1, n // PODS_PER_NODE)
    for rs in replica_sets(n):
        for _ in range(rs.spec.replicas):
            if len(out) == n:
                return out
            i = len(out)
            out.append(pod_versions(rs, i, f"hollow-node-{i % nodes}", managed_fields))
    return out


def watch_batches(versions: list[list[pod_pb2.Pod]], batch: int) -> list[bytes]:
    """PodWatchEventBatch messages, as the apiserver sends them: every pod's three events in
    order, interleaved with other pods' (a pod is bound a few pods after its creation and
    Running a few after that), `batch` events per message."""
    lag = 8
    events: list[tuple[str, pod_pb2.Pod]] = []
    n = len(versions)
    for step in range(n + 2 * lag):
        if step < n:
            events.append(("ADDED", versions[step][0]))
        if 0 <= step - lag < n:
            events.append(("MODIFIED", versions[step - lag][1]))
        if 0 <= step - 2 * lag < n:
            events.append(("MODIFIED", versions[step - 2 * lag][2]))
    out = []
    for start in range(0, len(events), batch):
        msg = pod_pb2.PodWatchEventBatch()
        for kind, obj in events[start : start + batch]:
            msg.events.add(type=kind, object=obj)
        out.append(msg.SerializeToString())
    return out


def nodes_for(n: int) -> list[node_pb2.Node]:
    out = []
    for k in range(max(1, n // PODS_PER_NODE)):
        node = node_pb2.Node()
        node.metadata.name = f"hollow-node-{k}"
        node.metadata.uid = str(uuid.UUID(int=k + 1))
        node.metadata.resourceVersion = str(k + 1)
        node.metadata.labels["kubernetes.io/hostname"] = node.metadata.name
        for res, amount in (("cpu", "4"), ("memory", "32Gi"), ("pods", "110")):
            node.status.capacity[res] = amount
            node.status.allocatable[res] = amount
        node.status.conditions.add(type="Ready", status="True")
        out.append(node)
    return out


# ---- one KIND in this process --------------------------------------------------------------


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _settle() -> None:
    gc.collect()
    gc.collect()


class Probe:
    """RSS, malloc in use and Python's traced bytes: a baseline, then the delta per pod."""

    def __init__(self, trace: int) -> None:
        self.trace = trace
        tracemalloc.start(max(1, trace and 8))
        _settle()
        self.rss0 = rss()
        self.malloc0 = malloc_info()["in_use"]
        self.py0 = tracemalloc.get_traced_memory()[0]
        self.snap0 = tracemalloc.take_snapshot() if trace else None

    def per_pod(self, n: int) -> dict[str, Any]:
        _settle()
        out: dict[str, Any] = {
            "rss": round((rss() - self.rss0) / n),
            "malloc": round((malloc_info()["in_use"] - self.malloc0) / n),
            "python": round((tracemalloc.get_traced_memory()[0] - self.py0) / n),
        }
        if self.snap0 is not None:
            stats = tracemalloc.take_snapshot().compare_to(self.snap0, "lineno")
            out["top"] = [
                {
                    "where": f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}",
                    "bytes_per_pod": round(s.size_diff / n),
                    "blocks_per_pod": round(s.count_diff / n, 2),
                }
                for s in stats[: self.trace]
            ]
        return out


def _transform() -> dict[str, Any]:
    """The transform the scheduler and the controller manager give their informers, in a tree
    that has one (this script also measures the commits before)."""
    from tinykube import informer

    strip = getattr(informer, "without_managed_fields", None)
    return {} if strip is None else {"transform": strip}


def decode_events(batches: list[bytes]) -> Any:
    """The events of each WatchBatch message, decoded as the client's stub decodes them."""
    for data in batches:
        yield from pod_pb2.PodWatchEventBatch.FromString(data).events


def build_input(n: int, managed_fields: bool, batch: int, path: Path) -> None:
    """The pods' final versions and the watch stream's messages, built once for every KIND."""
    versions = make_pods(n, managed_fields)
    serialized = [v[2].SerializeToString() for v in versions]
    path.write_bytes(pickle.dumps((serialized, watch_batches(versions, batch))))


def run_kind(kind: str, n: int, path: Path, trace: int) -> dict[str, Any]:
    serialized, batches = pickle.loads(path.read_bytes())
    nodes = nodes_for(n)
    result: dict[str, Any] = {
        "kind": kind,
        "pods": n,
        "serialized_bytes_per_pod": round(sum(map(len, serialized)) / n),
    }
    if kind == "bytes":
        probe = Probe(trace)
        kept: Any = [bytes(bytearray(b)) for b in serialized]
        result.update(probe.per_pod(n))
    elif kind == "decoded":
        probe = Probe(trace)
        kept = [pod_pb2.Pod.FromString(b) for b in serialized]
        result.update(probe.per_pod(n))
    elif kind == "listed":
        data = pod_pb2.PodList(items=[pod_pb2.Pod.FromString(b) for b in serialized])
        encoded = data.SerializeToString()
        del data
        probe = Probe(trace)
        kept = pod_pb2.PodList.FromString(encoded)
        result.update(probe.per_pod(n))
    elif kind == "copied":
        decoded = [pod_pb2.Pod.FromString(b) for b in serialized]
        probe = Probe(trace)
        kept = []
        for p in decoded:
            copy = pod_pb2.Pod()
            copy.CopyFrom(p)
            kept.append(copy)
        result.update(probe.per_pod(n))  # the copies only: the decoded pods are still held
        began = time.process_time()
        for p in kept:
            pod_pb2.Pod().CopyFrom(p)
        result["cpu_us_per_copy"] = round((time.process_time() - began) / n * 1e6, 2)
    elif kind == "informer":
        kept = _informer(n, batches, trace, result)
    elif kind == "scheduler":
        kept = _scheduler(n, batches, nodes, trace, result)
    elif kind == "controller":
        kept = asyncio.run(_controller(n, batches, nodes, trace, result))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    result["kept"] = type(kept).__name__
    return result


def _informer(n: int, batches: list[bytes], trace: int, result: dict[str, Any]) -> Any:
    from tinykube.informer import Informer

    async def never() -> Any:
        raise AssertionError

    informer: Informer[pod_pb2.Pod] = Informer(never, never)  # type: ignore[arg-type]
    informer.replace([], "1")
    probe = Probe(trace)
    for event in decode_events(batches):
        informer.apply(event)
    assert len(informer.store) == n
    result.update(probe.per_pod(n))
    # CPU per event (the messages' decoding and the events' application, the store's copy
    # included), tracemalloc off, best of three passes, each into a fresh informer.
    tracemalloc.stop()
    passes = []
    for _ in range(3):
        fresh: Informer[pod_pb2.Pod] = Informer(never, never)  # type: ignore[arg-type]
        fresh.replace([], "1")
        began = time.process_time()
        events = 0
        for event in decode_events(batches):
            fresh.apply(event)
            events += 1
        passes.append((time.process_time() - began) / events)
        del fresh
        _settle()
    result["cpu_us_per_event"] = round(min(passes) * 1e6, 2)
    return informer


def _scheduler(
    n: int, batches: list[bytes], nodes: list[node_pb2.Node], trace: int, result: dict[str, Any]
) -> Any:
    from scheduler.core import Profile
    from scheduler.cycle import Scheduler
    from tinykube.informer import Informer

    async def never() -> Any:
        raise AssertionError

    sched = Scheduler(Profile())
    node_informer: Informer[node_pb2.Node] = Informer(never, never, **_transform())  # type: ignore[arg-type]
    node_informer.add_handler(sched.on_node_add, sched.on_node_update, sched.on_node_delete)
    node_informer.replace(nodes, "1")
    pods: Informer[pod_pb2.Pod] = Informer(never, never, **_transform())  # type: ignore[arg-type]
    pods.add_handler(sched.on_pod_add, sched.on_pod_update, sched.on_pod_delete)
    pods.replace([], "1")
    probe = Probe(trace)
    for event in decode_events(batches):
        pods.apply(event)
    assert len(pods.store) == n and len(sched.cache.pods) == n, len(sched.cache.pods)
    # Every pod came bound by now: the scheduling loop would have popped the activeQ's entries
    # of their pending versions (deleted from the queue lazily); nothing is queued.
    assert not any(sched.queue.lengths().values())
    sched.queue._active.clear()
    result.update(probe.per_pod(n))
    return (sched, pods, node_informer)


async def _controller(
    n: int, batches: list[bytes], nodes: list[node_pb2.Node], trace: int, result: dict[str, Any]
) -> Any:
    from controller.controllers import ControllerContext, enabled_controllers
    from controller.discovery import Discovery
    from controller.metrics import Metrics
    from controller.settings import Settings
    from tinykube import kinds as k
    from tinykube.client import Client
    from tinykube.clock import Clock
    from tinykube.informer import InformerFactory

    # Nothing listens here: no controller calls the apiserver before its informers sync, and
    # they are fed by hand.
    client = Client("127.0.0.1:9", timeout=1.0)
    settings = Settings()
    factory = InformerFactory(client, **_transform())
    ctx = ControllerContext(
        client,
        settings,
        factory,
        clock=Clock(),
        metrics=Metrics(),
        discovery=Discovery(client),
    )
    started = []
    skipped = []
    for descriptor in enabled_controllers(settings.controllers):
        try:
            running = await descriptor.init(ctx)
        except Exception as exc:  # one that needs the apiserver at init: left out, named
            skipped.append(f"{descriptor.name}: {type(exc).__name__}")
            continue
        if running is not None:
            started.append((descriptor.name, running))
    result["controllers"] = [name for name, _ in started]
    result["controllers_skipped"] = skipped
    queues = [w.queue for _, r in started for w in r.workers]
    for informer in factory.informers:
        informer.replace([], "1")
    factory.for_kind(k.NODE).replace(nodes, "1")
    pods = factory.for_kind(k.POD)

    def drain() -> None:
        # Workers would take the keys; here they are dropped, so queued keys are not counted.
        for q in queues:
            q._queue.clear()
            q._dirty.clear()

    drain()
    probe = Probe(trace)
    for count, event in enumerate(decode_events(batches), 1):
        pods.apply(event)
        if count % 1000 == 0:
            drain()
    drain()
    assert len(pods.store) == n
    result.update(probe.per_pod(n))
    await client.close()
    return (factory, started)


# ---- the parent: one child per KIND --------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pods", type=int, default=20_000)
    p.add_argument("--managed-fields", action="store_true")
    p.add_argument("--batch", type=int, default=4, help="watch events per WatchBatch message")
    p.add_argument("--only", nargs="*", choices=KINDS, default=list(KINDS))
    p.add_argument("--trace", type=int, default=0, help="top N allocation sites per KIND")
    p.add_argument("--out", type=Path)
    p.add_argument("--commit", help="the tree's commit, where it is not a git checkout")
    p.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_kind(args.child, args.pods, args.input, args.trace)))
        return
    commit = (
        args.commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=False,
        ).stdout.strip()
    )
    summary: dict[str, Any] = {
        "commit": commit,
        "nproc": os.cpu_count(),
        "load_average_start": os.getloadavg()[0],
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pods": args.pods,
        "managed_fields": args.managed_fields,
        "batch": args.batch,
        "kinds": {},
    }
    tmp = tempfile.TemporaryDirectory(prefix="informer-memory-")
    data = Path(tmp.name) / "input.pickle"
    began = time.monotonic()
    build_input(args.pods, args.managed_fields, args.batch, data)
    summary["build_seconds"] = round(time.monotonic() - began, 1)
    for kind in args.only:
        began = time.monotonic()
        cmd = [sys.executable, __file__, "--child", kind, "--pods", str(args.pods)]
        cmd += ["--input", str(data), "--trace", str(args.trace)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"{kind}: exit {out.returncode}\n{out.stderr}")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["seconds"] = round(time.monotonic() - began, 1)
        res["load_average"] = os.getloadavg()[0]
        summary["kinds"][kind] = res
        print(
            f"{kind:10s} rss {res['rss']:6d}  malloc {res['malloc']:6d}  python "
            f"{res['python']:6d} bytes/pod  (serialized {res['serialized_bytes_per_pod']}, "
            f"{res['seconds']} s, load {res['load_average']:.1f})",
            file=sys.stderr,
        )
    tmp.cleanup()
    text = json.dumps(summary, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
