"""Scale benchmark of the whole tinykube control plane, after Kubernetes' scheduler_perf.

    python bench/harness.py bench/workloads/scheduling_basic.yaml --workload 500Nodes --runs 3

Each run starts a fresh cluster of real OS processes through `tinykube.launcher.LocalCluster`:
etcd, `python -m apiserver --metrics-port`, `python -m scheduler` (and `python -m controller`
when the workload needs it), then one or more `python -m kubelet --runtime fake --fake-nodes N`
processes that register the nodes (hollow nodes, as kubemark and KWOK). It then plays the
workload's ops in order, as scheduler_perf does:

- createNodes: start fake kubelets hosting `count` nodes (labels, capacity) and wait until Ready;
  `labelNodePrepareStrategy: {labelKey, labelValues}` (scheduler_perf's) gives the nodes that
  label with the values in turn, e.g. three zones;
- createPods: run `bench/podcreator.py` processes (`--creators`, each with `--concurrency`
  Creates in flight) and, unless `skipWaitToCompletion`, wait until every pod is bound; several
  ops may fill one namespace (the names go on where the last op's ended);
- createReplicaSets: create ReplicaSets whose pods the controller manager makes;
- churn: in the background during the next measured op, create and delete nodes and pods
  every `intervalMs` (scheduler_perf's churn op, mode recreate).

The op with `collectMetrics: true` is measured. A watch on every pod, in this process, records
when each pod was first seen bound and first seen Running; a pod's start is when the watch
first delivered it (its creationTimestamp has whole seconds, as Kubernetes' metav1.Time, which
would add up to a second to every latency), or its creationTimestamp for pods already there
when the recorder listed.
Figures: SchedulingThroughput (pods bound in each 1 s interval, average/p50/p90/p99 as
scheduler_perf), scheduling latency (create to bound) and pod startup latency (create to
Running) p50/p90/p99, CPU seconds and peak RSS of every process (from /proc), apiserver request
rates by method (its /metrics) and etcd's (grpc_server_handled_total on etcd's /metrics), the
creators' rate. Then, in the same cluster, the ceilings: apiserver Create alone (the other
components stopped; pods for a scheduler nobody runs, same creators and concurrency) and
etcd's own write throughput (a create-if-absent Txn, as the apiserver writes a new object, at
the same total concurrency, from this process through etcd's gRPC API, over the link the
apiserver uses: TCP, or etcd's unix socket with `--etcd-socket`). `--profile
scheduler,apiserver` runs `py-spy record` on those processes during the measured op and
summarises the collapsed stacks.

It also checks that every measured pod was bound exactly once (one unbound-to-bound transition
on the watch, never moved) and that the apiserver counted as many successful Binds as pods.

Output: bench/results/<case>-<workload>-<stamp>-runK.json and .png per run, and with --runs > 1
a -summary.json with the medians and a Markdown row for bench/RESULTS.md.

Concurrency model: one asyncio loop drives the cluster (blocking launcher calls run in a
thread through `Run.blocking`), the pod watch, a 1 s /proc sampler and the ops; the creators
are separate processes so creating pods does not slow the watch that times them.

SIGTERM and SIGINT end the run as its normal end does: the running op is cancelled, the
creators and py-spy are killed, the cluster is stopped (its components run in sessions of
their own, so no signal reaches them otherwise; a cluster still starting is stopped once its
start returns), and the harness then dies of the same signal (exit status 143 or 130 in a
shell). A second signal while stopping is ignored. Once the cluster is up it prints
`cluster up: {name: pid, ...}`, the processes it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from google.protobuf import json_format

from kubelet.settings import parse_resources
from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.launcher import LocalCluster
from tinykube.localetcd import free_port
from tinykube.tls import PLAINTEXT, Credentials
from tinykube.v1 import node_pb2, pod_pb2, replicaset_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent))
# bench/ is a folder of scripts, not a package: its helpers import by path.
import plot
import sysmetrics
from namespaces import ensure_namespace

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
CREATOR = BENCH_DIR / "podcreator.py"

# scheduler_perf's node-default.yaml and pod-default.yaml.
DEFAULT_CAPACITY = "cpu=4,memory=32Gi,pods=110"
DEFAULT_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"labels": {"bench": "pod"}},
    "spec": {
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "500Mi"},
                    "limits": {"cpu": "100m", "memory": "500Mi"},
                },
            }
        ]
    },
}
NODES_PER_KUBELET = 2500  # hollow nodes per fake kubelet process unless the op says otherwise
# Ops whose pods the controller manager makes (the load test's are bench/load.py's).
CONTROLLER_OPS = {"createReplicaSets", "createDeployments"}
NO_SCHEDULER = "bench-no-scheduler"  # pods for nobody: the apiserver-alone ceiling


@dataclass
class Options:
    creators: int = 1
    concurrency: int = 32
    stream_creators: bool = False  # the creators' Creates as write-stream messages, not calls
    # The hollow kubelets renew Leases and write statuses on write streams (the kubelet's
    # default since session 14); False: unary calls (--write-streams=false).
    kubelet_write_streams: bool = True
    timeout: float = 0.0  # per waiting op; 0: derived from the pod count
    profile: tuple[str, ...] = ()
    ceilings: bool = True
    ceiling_count: int = 2000
    keep: bool = False
    out_dir: Path = RESULTS_DIR
    verbose: bool = False
    insecure: bool = False  # a plaintext cluster (tinykube up --insecure)
    # tinykube up --ha: 3 etcd members, 2 apiservers, 2 leader-elected schedulers and
    # controller managers (the pod creators and the harness use the first apiserver)
    ha: bool = False
    # The apiserver dials etcd's unix socket, not its TCP port (tinykube up --etcd-socket).
    etcd_socket: bool = False


# ---- the workload files ---------------------------------------------------------------------


def load_test_cases(path: Path) -> list[dict[str, Any]]:
    """A workload file holds one test case or a list of them (scheduler_perf's shape)."""
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, list) else [data]


def resolve(value: Any, params: dict[str, Any]) -> Any:
    """`$name` is the workload's parameter `name` (scheduler_perf's countParam)."""
    if isinstance(value, str) and value.startswith("$"):
        if value[1:] not in params:
            raise KeyError(f"parameter {value} is not set by the workload")
        return params[value[1:]]
    return value


def op_count(op: dict[str, Any], params: dict[str, Any]) -> int:
    return int(resolve(op.get("countParam", op.get("count", 0)), params))


def node_label_values(op: dict[str, Any], count: int) -> list[dict[str, str]]:
    """Each node's labels: the op's `labels`, plus scheduler_perf's labelNodePrepareStrategy,
    which gives node i `labelKey` = labelValues[i % len(labelValues)] (round robin, as kube's
    LabelNodePrepareStrategy)."""
    labels = {str(k): str(v) for k, v in op.get("labels", {}).items()}
    strategy = op.get("labelNodePrepareStrategy")
    if not strategy:
        return [labels] * count
    key, values = str(strategy["labelKey"]), [str(v) for v in strategy["labelValues"]]
    if not values:
        raise ValueError("labelNodePrepareStrategy.labelValues must not be empty")
    return [{**labels, key: values[i % len(values)]} for i in range(count)]


def pod_template(case: dict[str, Any], name: str | None) -> dict[str, Any]:
    templates: dict[str, Any] = case.get("podTemplates", {})
    if name is None:
        return dict(templates.get("default", DEFAULT_POD))
    if name not in templates:
        raise KeyError(f"pod template {name!r} is not in podTemplates")
    return dict(templates[name])


# ---- watching every pod ---------------------------------------------------------------------


@dataclass
class PodTrack:
    namespace: str
    created: float  # first seen by the watch (or creationTimestamp), seconds since the epoch
    bound: float | None = None  # when the watch first showed spec.nodeName
    running: float | None = None  # when the watch first showed phase Running
    node: str = ""
    binds: int = 0  # unbound -> bound transitions seen
    moves: int = 0  # nodeName changed from one node to another (must never happen)
    deleted: bool = False


@dataclass
class PodRecorder:
    """Follows every pod through list + watch (relisting if the watch breaks)."""

    client: Client
    pods: dict[str, PodTrack] = field(default_factory=dict)  # by uid
    bound_in: dict[str, int] = field(default_factory=dict)  # namespace -> pods bound
    running_in: dict[str, int] = field(default_factory=dict)
    events: int = 0
    relists: int = 0
    listed: bool = False  # the first list is done: pods seen from now on are new

    def observe(self, pod: pod_pb2.Pod, event_type: str, now: float) -> None:
        uid = pod.metadata.uid
        track = self.pods.get(uid)
        if track is None:
            ts = pod.metadata.creationTimestamp
            created = now if event_type == "ADDED" and self.listed else ts.seconds + ts.nanos / 1e9
            track = PodTrack(pod.metadata.namespace, created)
            self.pods[uid] = track
        if event_type == "DELETED":
            track.deleted = True
            return
        node = pod.spec.nodeName
        if node and not track.node:
            track.node, track.bound, track.binds = node, now, track.binds + 1
            self.bound_in[track.namespace] = self.bound_in.get(track.namespace, 0) + 1
        elif node and node != track.node:
            track.moves += 1
            track.node = node
        if pod.status.phase == "Running" and track.running is None:
            track.running = now
            self.running_in[track.namespace] = self.running_in.get(track.namespace, 0) + 1

    async def run(self, ready: asyncio.Event) -> None:
        while True:
            try:
                items, rv = await self.client.pods.list_all(page_size=5000)
                now = time.time()
                for pod in items:
                    self.observe(pod, "LISTED", now)
                self.listed = True
                ready.set()
                async for ev in self.client.pods.watch(resource_version=rv):
                    if ev.type == "BOOKMARK":
                        continue
                    self.events += 1
                    self.observe(ev.object, ev.type, time.time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken watch: relist, as an informer would
                print(f"  pod watch broke ({type(exc).__name__}: {exc}); relisting", flush=True)
            self.relists += 1
            await asyncio.sleep(0.2)


async def retry_list(
    fn: Callable[[], Awaitable[tuple[list[pod_pb2.Pod], str]]], attempts: int = 10
) -> list[pod_pb2.Pod]:
    """A List the harness needs, retried on any API error (a busy apiserver sheds calls)."""
    for i in range(attempts):
        try:
            return (await fn())[0]
        except TinykubeError:
            if i == attempts - 1:
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


async def watch_leases(client: Client, stop: asyncio.Event, out: dict[str, Any]) -> None:
    """Until `stop`: every 10 s, how long ago each node Lease was renewed; into `out` the
    worst age seen and the Leases seen expired (renewed longer than their duration ago: the
    node lifecycle controller would mark the node NotReady, where it runs)."""
    worst = 0.0
    expired: set[str] = set()
    samples = 0
    while not stop.is_set():
        try:
            # From the watch cache (resourceVersion "0", unpaged), as an informer's list: a
            # paged list is an etcd range of every Lease and a decode of each in the measured
            # apiserver, every 10 s.
            items = list((await client.leases.list("kube-node-lease", resource_version="0")).items)
        except TinykubeError:
            items = []
        now = time.time()
        for lease in items:
            renewed = lease.spec.renewTime
            age = now - renewed.seconds - renewed.nanos / 1e9
            worst = max(worst, age)
            if age > lease.spec.leaseDurationSeconds:
                expired.add(lease.metadata.name)
        samples += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 10.0)
    out.update(
        {"samples": samples, "oldest_renewal_seconds": round(worst, 1), "expired": len(expired)}
    )


async def wait_until(pred: Callable[[], bool], limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {limit:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


# ---- process accounting ---------------------------------------------------------------------


@dataclass
class Sampler:
    """Samples CPU and RSS of named processes once a second."""

    pids: dict[str, int] = field(default_factory=dict)
    last: dict[str, sysmetrics.ProcSample] = field(default_factory=dict)
    peak_rss: dict[str, int] = field(default_factory=dict)
    timeline: dict[str, list[float]] = field(default_factory=dict)  # % of a core per second
    recording: bool = False

    def sample(self) -> dict[str, sysmetrics.ProcSample]:
        now: dict[str, sysmetrics.ProcSample] = {}
        for name, pid in list(self.pids.items()):
            s = sysmetrics.proc_sample(pid)
            if s is None:
                continue
            now[name] = s
            self.peak_rss[name] = max(self.peak_rss.get(name, 0), s.peak_rss_bytes, s.rss_bytes)
        return now

    async def run(self) -> None:
        prev, prev_t = self.sample(), time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            cur, t = self.sample(), time.monotonic()
            if self.recording:
                for name, s in cur.items():
                    base = prev.get(name)
                    used = s.cpu_seconds - (base.cpu_seconds if base else 0.0)
                    self.timeline.setdefault(name, []).append(round(100 * used / (t - prev_t), 1))
            self.last = cur
            prev, prev_t = cur, t


# ---- one run --------------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    arr = np.array(values)
    return {
        "count": len(values),
        "p50": round(float(np.percentile(arr, 50)), 4),
        "p90": round(float(np.percentile(arr, 90)), 4),
        "p99": round(float(np.percentile(arr, 99)), 4),
        "max": round(float(arr.max()), 4),
        # 101 points (every percent) are enough to draw the CDF without every sample.
        "cdf": [round(float(x), 4) for x in np.percentile(arr, np.linspace(0, 100, 101))],
    }


def throughput_summary(bound_times: list[float], start: float) -> dict[str, Any]:
    """scheduler_perf's SchedulingThroughput: pods bound in each 1 s interval.

    Intervals run from the start of the measured op; leading intervals before the first bind
    are skipped (scheduler_perf starts counting once pods are scheduled), and the last partial
    interval counts at its real length when it is at least half a second.
    """
    if not bound_times:
        return {"samples": [], "average": 0.0}
    ts = sorted(bound_times)
    last = ts[-1] - start
    n_full = int(last)
    counts = np.histogram([t - start for t in ts], bins=np.arange(0, n_full + 2, 1.0))[0]
    samples = [float(c) for c in counts[:n_full]]
    tail = last - n_full
    if tail >= 0.5:
        samples.append(float(counts[n_full]) / tail)
    elif samples:
        samples[-1] += float(counts[n_full])  # fold the few stragglers into the last second
    first = int(ts[0] - start)
    samples = samples[first:] or [float(len(ts))]
    arr = np.array(samples)
    return {
        "samples": [round(s, 1) for s in samples],
        "average": round(float(arr.mean()), 1),
        "p50": round(float(np.percentile(arr, 50)), 1),
        "p90": round(float(np.percentile(arr, 90)), 1),
        "p99": round(float(np.percentile(arr, 99)), 1),
        "overall": round(len(ts) / max(1e-9, ts[-1] - start), 1),
        "seconds": round(ts[-1] - start, 2),
    }


class Run:
    """One fresh cluster playing one workload once."""

    def __init__(
        self, case: dict[str, Any], workload: dict[str, Any], opts: Options, run_no: int
    ) -> None:
        self.case = case
        self.workload = workload
        self.params: dict[str, Any] = {
            **case.get("defaultParams", {}),
            **workload.get("params", {}),
        }
        self.opts = opts
        self.run_no = run_no
        self.ops: list[dict[str, Any]] = case["workloadTemplate"]
        self.needs_controller = any(op["opcode"] in CONTROLLER_OPS for op in self.ops)
        self.work = Path(tempfile.mkdtemp(prefix="tinykube-bench-"))
        self.api_metrics_port = free_port()
        self.sched_metrics_port = free_port()
        extra_args = {
            "apiserver": ["--metrics-port", str(self.api_metrics_port)],
            "scheduler": [
                "--leader-elect",
                "false",
                "--metrics-port",
                str(self.sched_metrics_port),
            ],
            "controller": ["--leader-elect", "false"],
        }
        if opts.ha:
            # Standbys behind leader election, as the HA topology runs them; the second
            # apiserver and scheduler get metrics ports of their own. Whichever scheduler takes
            # the Lease schedules; the scheduler metrics scraped are the first one's.
            extra_args = {
                "apiserver": ["--metrics-port", str(self.api_metrics_port)],
                "apiserver-2": ["--metrics-port", str(free_port())],
                "scheduler": ["--metrics-port", str(self.sched_metrics_port)],
                "scheduler-2": ["--metrics-port", str(free_port())],
            }
        self.cluster = LocalCluster(
            self.work,
            kubelets=(),
            kubelet_runtime="fake",
            controller=self.needs_controller or opts.ha,
            extra_args=extra_args,
            start_timeout=120.0,
            insecure=opts.insecure,
            ha=opts.ha,
            etcd_socket=opts.etcd_socket,
            # A component that dies in a run is the run's failure to see, not one for the
            # launcher to restart under it (the sampler follows the pids it started with).
            supervise=False,
        )
        self.sampler = Sampler()
        self.kubelet_groups = 0
        self.bare_nodes = 0  # nodes with no kubelet: their pods are bound but never run
        self.named_in: dict[str, int] = {}  # namespace -> pod names the creators have used
        self.result: dict[str, Any] = {}
        self.creator_stats: list[dict[str, Any]] = []
        self.churn_task: asyncio.Task[dict[str, int]] | None = None
        # The creators and py-spy processes running now (killed if the run is cut short).
        self.children: set[asyncio.subprocess.Process] = set()
        self.pending_churn: dict[str, Any] | None = None
        self.measured = False

    @property
    def etcd_url(self) -> str:
        etcd = self.cluster.etcd
        return etcd.url if etcd is not None else f"http://{self.cluster.etcd_endpoint}"

    def etcd_tls_context(self) -> ssl.SSLContext | None:
        etcd = self.cluster.etcd
        return etcd.tls.probe_context() if etcd is not None and etcd.tls is not None else None

    def etcd_credentials(self) -> Credentials:
        """The apiserver's etcd client certificate: etcd answers no other."""
        if self.opts.insecure:
            return PLAINTEXT
        pki = self.cluster.pki
        return Credentials.from_files(
            ca_file=str(pki.ca_cert_path),
            cert_file=str(pki.paths("apiserver-etcd-client").cert),
            key_file=str(pki.paths("apiserver-etcd-client").key),
            # what etcd's certificate is checked against on its socket, as the apiserver does
            server_name="localhost" if self.etcd_target.startswith("unix:") else None,
        )

    @property
    def etcd_target(self) -> str:
        """Where the apiserver dials etcd (its socket, or TCP): the ceiling's writes go there."""
        etcd = self.cluster.etcd
        if etcd is not None and etcd.socket and self.cluster.etcd_cluster is None:
            return f"unix:{etcd.socket_path}"
        return self.cluster.etcd_endpoint

    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def timeout_for(self, pods: int) -> float:
        return self.opts.timeout or max(120.0, pods / 20.0)

    # ---- ops --------------------------------------------------------------------------------

    async def create_nodes(self, op: dict[str, Any], client: Client) -> None:
        count = op_count(op, self.params)
        if not resolve(op.get("kubelets", True), self.params):
            await self.create_bare_nodes(op, client, count)
            return
        per = int(resolve(op.get("nodesPerKubelet", NODES_PER_KUBELET), self.params))
        procs = max(1, math.ceil(count / per))
        # A fake kubelet gives all its nodes one label set: one set per process, taken in turn
        # (so the label values split the nodes as evenly as scheduler_perf's round robin).
        label_sets = list({tuple(x.items()): x for x in node_label_values(op, count)}.values())
        procs = math.ceil(procs / len(label_sets)) * len(label_sets) if label_sets else procs
        group = self.kubelet_groups
        self.kubelet_groups += 1
        prefixes = []
        for k in range(procs):
            n = count // procs + (1 if k < count % procs else 0)
            prefix = f"hollow-{group}-{k}-"
            prefixes.append(prefix)
            args = ["--fake-nodes", str(n), "--node-name-prefix", prefix]
            args += ["--capacity", str(op.get("capacity", DEFAULT_CAPACITY))]
            args += [str(x) for x in resolve(op.get("kubeletArgs", []), self.params)]
            # Said either way: a tree from before session 14 made calls unless told.
            args.append(
                "--write-streams" if self.opts.kubelet_write_streams else "--write-streams=false"
            )
            labels = label_sets[k % len(label_sets)] if label_sets else {}
            if labels:
                args += ["--node-labels", ",".join(f"{a}={b}" for a, b in labels.items())]
            name = f"kubelet-hollow-{group}-{k}"
            await self.blocking(self.cluster.start_component, name, args)
            self.sampler.pids[name] = self.cluster.processes[name].pid
        self.log(f"createNodes: {procs} fake kubelet(s) for {count} nodes; waiting until Ready")
        began = time.monotonic()

        async def ready() -> int:
            items, _ = await client.nodes.list_all(page_size=5000)
            return sum(
                1
                for n in items
                if n.metadata.name.startswith(tuple(prefixes))
                and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
            )

        deadline = time.monotonic() + max(120.0, count / 10.0)
        got = 0
        while True:
            try:
                got = await ready()
            except TinykubeError as exc:  # a busy apiserver may fail a List; poll again
                self.log(f"  listing nodes failed ({type(exc).__name__}: {exc}); retrying")
            if got >= count:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {got}/{count} nodes Ready")
            await asyncio.sleep(1.0)
        self.log(f"createNodes: {count} nodes Ready in {time.monotonic() - began:.1f}s")

    async def create_bare_nodes(self, op: dict[str, Any], client: Client, count: int) -> None:
        """scheduler_perf's createNodes: Node objects written through the API, Ready, with no
        kubelet behind them (no Leases, no status updates, pods never run)."""
        group = self.kubelet_groups
        self.kubelet_groups += 1
        # The same string a fake kubelet gets as --capacity, read by the kubelet's own parser.
        capacity = parse_resources(str(op.get("capacity", DEFAULT_CAPACITY)))
        names = iter(zip((f"bare-{group}-{i:05d}" for i in range(count)),
                         node_label_values(op, count), strict=True))  # fmt: skip
        self.bare_nodes += count
        began = time.monotonic()

        async def worker() -> None:
            for name, labels in names:
                node = node_pb2.Node(apiVersion="v1", kind="Node")
                node.metadata.name = name
                node.metadata.labels.update({"kubernetes.io/hostname": name, **labels})
                node.status.capacity.update(capacity)
                node.status.allocatable.update(capacity)
                ready = node.status.conditions.add(type="Ready", status="True")
                ready.reason = "KubeletReady"
                await client.nodes.create(node)

        await asyncio.gather(*(worker() for _ in range(32)))
        self.log(f"createNodes: {count} nodes without kubelets in {time.monotonic() - began:.1f}s")

    async def run_creators(
        self,
        template: dict[str, Any],
        namespace: str,
        count: int,
        scheduler_name: str = "",
        qps: float = 0.0,
    ) -> dict[str, Any]:
        """Create `count` pods through `--creators` podcreator processes; their merged summary."""
        async with Client(
            self.cluster.api_address, timeout=60.0, credentials=self.cluster.credentials
        ) as client:
            await ensure_namespace(client, namespace)
        tpl_file = self.work / f"template-{namespace}.json"
        tpl_file.write_text(json.dumps(template))
        n = max(1, min(self.opts.creators, count))
        procs = []
        # Names go on from the namespace's earlier ops, so several ops can fill one namespace.
        start = self.named_in.get(namespace, 0)
        self.named_in[namespace] = start + count
        for k in range(n):
            share = count // n + (1 if k < count % n else 0)
            cmd = [sys.executable, str(CREATOR), "--apiserver", self.cluster.api_address]
            cmd += ["--template", str(tpl_file), "--namespace", namespace, "--prefix", "pod"]
            cmd += ["--count", str(share), "--start", str(start)]
            cmd += ["--concurrency", str(self.opts.concurrency)]
            if self.opts.stream_creators:
                cmd += ["--stream"]
            if scheduler_name:
                cmd += ["--scheduler-name", scheduler_name]
            if qps > 0:
                cmd += ["--qps", str(qps * share / count)]
            start += share
            # the creators dial with the admin kubeconfig, as every client of the cluster
            env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdout=asyncio.subprocess.PIPE, env=env
            )
            self.sampler.pids[f"creator-{k}"] = proc.pid
            self.children.add(proc)
            procs.append(proc)
        outs = await asyncio.gather(*(p.communicate() for p in procs))
        self.children.difference_update(procs)
        stats = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outs]
        for k in range(n):
            self.sampler.pids.pop(f"creator-{k}", None)
        seconds = max(s["seconds"] for s in stats)
        created = sum(s["created"] for s in stats)
        merged = {
            "namespace": namespace,
            "created": created,
            "errors": sum(s["errors"] for s in stats),
            "first_error": next((s["first_error"] for s in stats if s["first_error"]), ""),
            "seconds": seconds,
            "per_second": round(created / seconds, 1) if seconds else 0.0,
            "creators": n,
            "concurrency_each": self.opts.concurrency,
            "creator_cpu_seconds": round(sum(s.get("cpu_seconds", 0.0) for s in stats), 2),
        }
        if merged["errors"]:
            self.log(f"  {merged['errors']} creates failed, first: {merged['first_error']}")
        return merged

    async def create_replica_sets(
        self, op: dict[str, Any], client: Client, namespace: str, count: int
    ) -> dict[str, Any]:
        """`count` pods as ReplicaSets of `replicasPerSet` replicas each (the controller makes
        them); returns the creation summary (the RS creates, not the pods)."""
        per = int(resolve(op.get("replicasPerSet", 100), self.params))
        template = pod_template(self.case, resolve(op.get("podTemplate"), self.params))
        sets = math.ceil(count / per)
        began = time.perf_counter()
        for i in range(sets):
            rs = replicaset_pb2.ReplicaSet(apiVersion="apps/v1", kind="ReplicaSet")
            rs.metadata.name = f"rs-{i:04d}"
            rs.metadata.namespace = namespace
            rs.spec.replicas = min(per, count - i * per)
            rs.spec.selector.matchLabels["rs"] = rs.metadata.name
            json_format.ParseDict(
                {"metadata": template.get("metadata", {}), "spec": template["spec"]},
                rs.spec.template,
            )
            rs.spec.template.metadata.labels["rs"] = rs.metadata.name
            await client.replica_sets.create(rs)
        seconds = time.perf_counter() - began
        return {"namespace": namespace, "replica_sets": sets, "replicas_each": per,
                "seconds": round(seconds, 3)}  # fmt: skip

    async def churn(
        self, op: dict[str, Any], client: Client, stop: asyncio.Event
    ) -> dict[str, int]:
        """scheduler_perf's churn in recreate mode: each interval, delete what the previous one
        made and make `number` nodes and pods anew (nodes through the API, no kubelet)."""
        interval = float(op.get("intervalMs", 500)) / 1000.0
        number = int(op.get("number", 1))
        template = json_format.ParseDict(
            pod_template(self.case, resolve(op.get("podTemplate"), self.params)), pod_pb2.Pod()
        )
        made: list[tuple[str, str]] = []
        counts = {"nodes_created": 0, "pods_created": 0, "deleted": 0, "errors": 0}
        await ensure_namespace(client, "churn")
        i = 0
        while not stop.is_set():
            for kind, name in made:
                try:
                    if kind == "node":
                        await client.nodes.delete(name)
                    else:
                        await client.pods.delete(name, "churn", grace_period_seconds=0)
                    counts["deleted"] += 1
                except Exception:
                    counts["errors"] += 1
            made = []
            for _ in range(number):
                i += 1
                node = node_pb2.Node(apiVersion="v1", kind="Node")
                node.metadata.name = f"churn-node-{i}"
                for key, val in (("cpu", "4"), ("memory", "32Gi"), ("pods", "110")):
                    node.status.capacity[key] = val
                    node.status.allocatable[key] = val
                pod = pod_pb2.Pod()
                pod.CopyFrom(template)
                pod.metadata.name = f"churn-pod-{i}"
                pod.metadata.namespace = "churn"
                try:
                    await client.nodes.create(node)
                    made.append(("node", node.metadata.name))
                    counts["nodes_created"] += 1
                    await client.pods.create(pod)
                    made.append(("pod", pod.metadata.name))
                    counts["pods_created"] += 1
                except Exception:
                    counts["errors"] += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
        return counts

    # ---- measuring --------------------------------------------------------------------------

    async def measured_op(
        self,
        op: dict[str, Any],
        client: Client,
        recorder: PodRecorder,
        namespace: str,
        count: int,
    ) -> None:
        self.log(f"measuring {op['opcode']} of {count} pods in {namespace}")
        backlog: dict[str, Any] | None = None
        if resolve(op.get("backlog", False), self.params):
            # "From a backlog": every pod exists before the scheduler starts, so what is
            # measured is scheduling, binding and the kubelets alone (no Creates compete).
            self.log("  backlog: scheduler stopped while the pods are created")
            await self.blocking(self.cluster.kill, "scheduler", signal.SIGTERM)
            template = pod_template(self.case, resolve(op.get("podTemplate"), self.params))
            backlog = await self.run_creators(template, namespace, count)
            self.log(f"  created {backlog['created']} in {backlog['seconds']}s; starting scheduler")
            await self.blocking(self.cluster.start_component, "scheduler")
            self.sampler.pids["scheduler"] = self.cluster.processes["scheduler"].pid
        api_url = f"http://127.0.0.1:{self.api_metrics_port}/metrics"
        etcd_url = f"{self.etcd_url}/metrics"
        sched_url = f"http://127.0.0.1:{self.sched_metrics_port}/metrics"
        api_before, etcd_before = (
            sysmetrics.scrape(api_url),
            sysmetrics.scrape(etcd_url, context=self.etcd_tls_context()),
        )
        sched_before = sysmetrics.scrape(sched_url)
        cpu_before = self.sampler.sample()
        load_before = sysmetrics.load_average()
        profilers = await self.start_pyspy(f"{namespace}")
        stop_churn = asyncio.Event()
        if self.pending_churn is not None:
            self.churn_task = asyncio.create_task(
                self.churn(self.pending_churn, client, stop_churn)
            )
        self.sampler.recording = True
        leases: dict[str, Any] = {}
        stop_leases = asyncio.Event()
        lease_task = (
            asyncio.create_task(watch_leases(client, stop_leases, leases))
            if not self.bare_nodes
            else None
        )
        start = time.time()
        t0 = time.monotonic()
        if backlog is not None:
            creation = {**backlog, "backlog": True}
        elif op["opcode"] == "createReplicaSets":
            creation = await self.create_replica_sets(op, client, namespace, count)
        else:
            template = pod_template(self.case, resolve(op.get("podTemplate"), self.params))
            qps = float(resolve(op.get("qps", 0), self.params))
            creation = await self.run_creators(template, namespace, count, qps=qps)
            creation["offered_qps"] = qps
        if backlog is None:
            self.log(f"  created {creation.get('created', count)} in {creation['seconds']}s")
        else:
            # The creators ran before the measured window: their CPU is not the window's.
            creation["backlog_creator_cpu_seconds"] = creation.pop("creator_cpu_seconds", None)
        # Creates that failed for good made no pod: wait for the pods that exist.
        expect = int(creation.get("created", count))
        incomplete = ""
        try:
            await wait_until(
                lambda: recorder.bound_in.get(namespace, 0) >= expect,
                self.timeout_for(count),
                f"{expect} pods bound in {namespace}",
            )
        except TimeoutError as exc:  # report what was measured, marked incomplete
            incomplete = str(exc)
            self.log(f"  {exc}")
        bound_wall = time.monotonic() - t0
        self.log(f"  {recorder.bound_in.get(namespace, 0)} bound after {bound_wall:.1f}s")
        try:
            if not self.bare_nodes:
                await wait_until(
                    lambda: recorder.running_in.get(namespace, 0) >= expect,
                    max(60.0, count / 50),
                    f"{expect} pods Running in {namespace}",
                )
        except TimeoutError as exc:
            incomplete = incomplete or str(exc)
            self.log(f"  {exc}")
        seconds = time.monotonic() - t0
        self.sampler.recording = False
        stop_churn.set()
        stop_leases.set()
        if lease_task is not None:
            await lease_task
        cpu_after = self.sampler.sample()
        api_after, etcd_after = (
            sysmetrics.scrape(api_url),
            sysmetrics.scrape(etcd_url, context=self.etcd_tls_context()),
        )
        sched_after = sysmetrics.scrape(sched_url)
        profiles = await self.stop_pyspy(profilers)
        churned = await self.churn_task if self.churn_task else None

        tracks = [t for t in recorder.pods.values() if t.namespace == namespace]
        created_at = sorted(t.created for t in tracks)
        if len(created_at) > 1 and created_at[-1] > created_at[0]:
            # From the apiserver's timestamps: also right when the controller made the pods.
            span = created_at[-1] - created_at[0]
            creation["pods_per_second_by_timestamp"] = round((len(created_at) - 1) / span, 1)
            creation.setdefault("per_second", creation["pods_per_second_by_timestamp"])
        bound = [t.bound for t in tracks if t.bound is not None]
        sched_lat = [t.bound - t.created for t in tracks if t.bound is not None]
        start_lat = [t.running - t.created for t in tracks if t.running is not None]
        processes = {}
        for name, after in cpu_after.items():
            before = cpu_before.get(name)
            processes[name] = {
                "cpu_seconds": round(after.cpu_seconds - (before.cpu_seconds if before else 0), 2),
                "peak_rss_mib": round(self.sampler.peak_rss.get(name, 0) / 2**20, 1),
            }
        if "creator_cpu_seconds" in creation:
            processes["creators"] = {"cpu_seconds": creation["creator_cpu_seconds"]}
        api_rates = sysmetrics.counter_rates(
            api_before, api_after, "apiserver_request_total", ("method", "code"), seconds
        )
        # A second bind that the watch missed would show in a fresh List as another node.
        listed = await retry_list(lambda: client.pods.list_all(namespace, page_size=5000))
        by_uid = {p.metadata.uid: p.spec.nodeName for p in listed}
        disagree = sum(
            1
            for uid, t in recorder.pods.items()
            if t.namespace == namespace and by_uid.get(uid, t.node) != t.node
        )
        self.result.update(
            {
                "measured_pods": count,
                "incomplete": incomplete,
                "namespace": namespace,
                "creation": creation,
                "throughput": throughput_summary(bound, start),
                "latency": {
                    "scheduling": percentiles(sched_lat),
                    "startup": percentiles(start_lat),
                },
                "seconds_to_all_bound": round(bound_wall, 2),
                "seconds_measured": round(seconds, 2),
                "processes": processes,
                "cpu_timeline": self.sampler.timeline,
                "apiserver_requests_per_second": api_rates,
                "etcd_requests_per_second": sysmetrics.counter_rates(
                    etcd_before,
                    etcd_after,
                    "grpc_server_handled_total",
                    ("grpc_method",),
                    seconds,
                ),
                # Watch fan-out: events and gRPC messages written per second (kind, method).
                "apiserver_watch_events_per_second": sysmetrics.counter_rates(
                    api_before,
                    api_after,
                    "apiserver_watch_events_sent_total",
                    ("kind", "method"),
                    seconds,
                ),
                "apiserver_watch_messages_per_second": sysmetrics.counter_rates(
                    api_before,
                    api_after,
                    "apiserver_watch_messages_sent_total",
                    ("kind", "method"),
                    seconds,
                ),
                "apiserver_request_latency": sysmetrics.histogram_means(
                    api_before, api_after, "apiserver_request_duration_seconds", ("method",)
                ),
                "apiserver_etcd_latency": sysmetrics.histogram_means(
                    api_before,
                    api_after,
                    "apiserver_etcd_request_duration_seconds",
                    ("operation",),
                ),
                "scheduler_metrics": {
                    "attempts_per_second": sysmetrics.counter_rates(
                        sched_before,
                        sched_after,
                        "scheduler_schedule_attempts_total",
                        ("result",),
                        seconds,
                    ),
                    "attempt_duration": sysmetrics.histogram_means(
                        sched_before,
                        sched_after,
                        "scheduler_scheduling_attempt_duration_seconds",
                        ("result",),
                    ),
                    "bind_batch_size": sysmetrics.histogram_means(
                        sched_before, sched_after, "scheduler_bind_batch_size", (), seconds=False
                    ),
                },
                "bind_check": {
                    "pods": len(tracks),
                    "bound": len(bound),
                    "bound_exactly_once": sum(1 for t in tracks if t.binds == 1 and t.moves == 0),
                    "moved": sum(t.moves for t in tracks),
                    "final_list_disagrees": disagree,
                    "final_list_pods": len(listed),
                },
                "node_leases": leases,
                "load_average_before": load_before,
                "load_average_after": sysmetrics.load_average(),
                "profiles": profiles,
                "churn": churned,
            }
        )

    async def start_pyspy(self, tag: str) -> list[tuple[str, asyncio.subprocess.Process, Path]]:
        started = []
        for name in self.opts.profile:
            pid = self.sampler.pids.get(name)
            if pid is None:
                self.log(f"  no process {name!r} to profile (have {', '.join(self.sampler.pids)})")
                continue
            out = self.work / f"pyspy-{name}.txt"
            spy = str(Path(sys.executable).parent / "py-spy")
            proc = await asyncio.create_subprocess_exec(
                spy, "record", "--pid", str(pid), "--rate", "100", "--format", "raw",
                "--nonblocking", "-o", str(out),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            self.children.add(proc)
            started.append((name, proc, out))
        return started

    async def stop_pyspy(
        self, started: list[tuple[str, asyncio.subprocess.Process, Path]]
    ) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, proc, out in started:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
            self.children.discard(proc)
            summary = sysmetrics.pyspy_top(out)
            keep = self.opts.out_dir / f"{self.stem()}-pyspy-{name}.txt"
            with contextlib.suppress(OSError):
                keep.write_bytes(out.read_bytes())
                summary["collapsed_stacks"] = keep.name
            found[name] = summary
        return found

    # ---- ceilings ---------------------------------------------------------------------------

    async def ceilings(self) -> dict[str, Any]:
        # "Alone": stop the scheduler, controller and kubelets (their Lease renewals and status
        # updates would otherwise share the apiserver); etcd and the apiserver keep their data.
        for name in list(self.cluster.components):
            if name != "apiserver" and self.cluster.components[name].running():
                await self.blocking(self.cluster.kill, name, signal.SIGTERM)
        count = min(self.opts.ceiling_count, int(self.result.get("measured_pods", 500)))
        template = pod_template(self.case, None)
        self.log(f"ceiling: apiserver Create alone, {count} pods")
        api = await self.run_creators(template, "ceiling", count, NO_SCHEDULER)
        self.log(f"  {api['per_second']} creates/s")
        concurrency = self.opts.concurrency * max(1, self.opts.creators)
        pod = json_format.ParseDict(template, pod_pb2.Pod())
        value = pod.SerializeToString()
        self.log(f"ceiling: etcd create-if-absent Txn, {count} keys at concurrency {concurrency}")
        etcd = await etcd_write_ceiling(
            self.etcd_target, value, count, concurrency, self.etcd_credentials()
        )
        self.log(f"  {etcd['per_second']} txns/s")
        return {"apiserver_create_alone": api, "etcd_txn_put": etcd}

    # ---- the run ----------------------------------------------------------------------------

    def stem(self) -> str:
        return f"{self.case['name']}-{self.workload['name']}-{STAMP}-run{self.run_no}"

    async def execute(self) -> dict[str, Any]:
        self.log(f"run {self.run_no}: {self.case['name']}/{self.workload['name']} {self.params}")
        load_start = sysmetrics.load_average()
        try:
            await self.blocking(self.cluster.start)
        except asyncio.CancelledError:
            # Cut short while starting: what did start is stopped (a failed start stops
            # itself).
            await self.blocking(self.cluster.stop)
            self.remove_work()
            raise
        sampler_task = asyncio.create_task(self.sampler.run())
        recorder_task: asyncio.Task[None] | None = None
        try:
            self.sampler.pids.update({n: p.pid for n, p in self.cluster.processes.items()})
            self.log(f"cluster up: {json.dumps(self.sampler.pids)}")
            self.sampler.pids["harness"] = os.getpid()
            async with Client(
                self.cluster.api_address, timeout=60.0, credentials=self.cluster.credentials
            ) as client:
                recorder = PodRecorder(client)
                ready = asyncio.Event()
                recorder_task = asyncio.create_task(recorder.run(ready))
                await asyncio.wait_for(ready.wait(), 60)
                for i, op in enumerate(self.ops):
                    await self.play(op, i, client, recorder)
                if self.opts.ceilings:
                    self.result["ceilings"] = await self.ceilings()
                self.result["watch"] = {"events": recorder.events, "relists": recorder.relists}
                # Every namespace's end state, e.g. the unschedulable pods still unbound.
                namespaces: dict[str, dict[str, int]] = {}
                for t in recorder.pods.values():
                    ns = namespaces.setdefault(t.namespace, {"pods": 0, "bound": 0, "running": 0})
                    ns["pods"] += 1
                    ns["bound"] += t.bound is not None
                    ns["running"] += t.running is not None
                self.result["namespaces"] = namespaces
        finally:
            if recorder_task is not None:
                recorder_task.cancel()
            sampler_task.cancel()
            if self.churn_task is not None:
                self.churn_task.cancel()
            self.kill_children()
            await self.blocking(self.cluster.stop)
            self.remove_work()
        self.result.update(
            {
                "test_case": self.case["name"],
                "workload": self.workload["name"],
                "params": self.params,
                "run": self.run_no,
                "machine": {"nproc": os.cpu_count(), "load_average_at_start": load_start},
                "commit": git_commit(),
                "options": {
                    "creators": self.opts.creators,
                    "concurrency": self.opts.concurrency,
                    "ha": self.opts.ha,
                    "etcd_link": "socket" if self.opts.etcd_socket and not self.opts.ha else "tcp",
                    "stream_creators": self.opts.stream_creators,
                    "kubelet_write_streams": self.opts.kubelet_write_streams,
                },
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        self.add_ratios()
        return self.result

    async def blocking(self, call: Callable[..., Any], *args: Any) -> Any:
        """A blocking launcher call in a thread. Cancelled meanwhile (a signal), it is still
        awaited to its end before the cancellation goes on: the launcher is not thread-safe, so
        the teardown must not overlap a start or a kill, nor miss what a start spawned."""
        return await _uncancelled(asyncio.to_thread(call, *args))

    def remove_work(self) -> None:
        """The cluster's work dir (etcd's data, logs) goes with it, unless --keep."""
        if not self.opts.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def kill_children(self) -> None:
        """SIGKILL the creators and profilers still running (they are in our process group,
        which the signal that cut the run short may not have reached)."""
        for proc in self.children:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        self.children.clear()

    def add_ratios(self) -> None:
        ceil = self.result.get("ceilings")
        tp = self.result.get("throughput", {}).get("average")
        if not ceil or not tp:
            return
        api = ceil["apiserver_create_alone"]["per_second"]
        etcd = ceil["etcd_txn_put"]["per_second"]
        self.result["ratios"] = {
            "throughput_over_apiserver_create_alone": round(tp / api, 3) if api else None,
            "throughput_over_etcd_txn_put": round(tp / etcd, 3) if etcd else None,
            "creation_rate_over_apiserver_create_alone": (
                round(self.result["creation"].get("per_second", 0) / api, 3) if api else None
            ),
        }

    async def play(self, op: dict[str, Any], i: int, client: Client, rec: PodRecorder) -> None:
        code = op["opcode"]
        if code == "createNodes":
            await self.create_nodes(op, client)
            return
        if code == "churn":
            self.pending_churn = op
            return
        count = op_count(op, self.params)
        namespace = op.get("namespace") or ("measure" if op.get("collectMetrics") else f"init-{i}")
        if count <= 0:
            return
        await ensure_namespace(client, namespace)
        if op.get("collectMetrics"):
            if self.measured:
                raise ValueError("only one op may collect metrics")
            self.measured = True
            await self.measured_op(op, client, rec, namespace, count)
            return
        self.log(f"{code}: {count} pods in {namespace}")
        bound_before = rec.bound_in.get(namespace, 0)  # an earlier op's pods in the namespace
        if code == "createReplicaSets":
            await self.create_replica_sets(op, client, namespace, count)
        elif code == "createPods":
            template = pod_template(self.case, resolve(op.get("podTemplate"), self.params))
            stats = await self.run_creators(template, namespace, count)
            self.creator_stats.append(stats)
            self.log(f"  created at {stats['per_second']} pods/s")
            count = int(stats["created"])
        else:
            raise ValueError(f"unknown opcode {code!r}")
        if op.get("skipWaitToCompletion"):
            return
        await wait_until(
            lambda: rec.bound_in.get(namespace, 0) >= bound_before + count,
            self.timeout_for(count),
            f"{count} pods bound in {namespace}",
        )
        self.log(f"  all {count} bound")


def git_commit() -> str:
    """The commit measured (with "+dirty" when the work tree has changes).

    TINYKUBE_BENCH_COMMIT names it when the code runs from an exported copy (no .git there).
    """
    import subprocess

    if os.environ.get("TINYKUBE_BENCH_COMMIT"):
        return os.environ["TINYKUBE_BENCH_COMMIT"]

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=BENCH_DIR, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


async def etcd_write_ceiling(
    endpoint: str,
    value: bytes,
    count: int,
    concurrency: int,
    credentials: Credentials = PLAINTEXT,
) -> dict[str, Any]:
    """Create-if-absent Txns (what the apiserver sends for a Create) at `concurrency` in flight."""
    from aetcd import rpc  # bench/ may talk to etcd; only the processes may not

    prefix = f"/bench-ceiling/{time.time_ns()}/".encode()
    async with credentials.channel(endpoint) as channel:
        kv = rpc.KVStub(channel)
        keys = iter(range(count))

        async def worker() -> None:
            for i in keys:
                key = prefix + b"%06d" % i
                cmp = rpc.Compare(
                    key=key,
                    result=rpc.Compare.CompareResult.EQUAL,
                    target=rpc.Compare.CompareTarget.CREATE,
                    create_revision=0,
                )
                put = rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))
                await kv.Txn(rpc.TxnRequest(compare=[cmp], success=[put]), timeout=30)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - began
        await kv.DeleteRange(rpc.DeleteRangeRequest(key=prefix, range_end=prefix[:-1] + b"0"))
    return {
        "writes": count,
        "concurrency": concurrency,
        "value_bytes": len(value),
        "seconds": round(seconds, 3),
        "per_second": round(count / seconds, 1),
    }


# ---- many runs ------------------------------------------------------------------------------

STAMP = time.strftime("%Y%m%dT%H%M%S", time.gmtime())


def median_of(results: list[dict[str, Any]], path: str) -> float | None:
    values = []
    for r in results:
        v: Any = r
        for part in path.split("."):
            if isinstance(v, list) and part.isdigit() and int(part) < len(v):
                v = v[int(part)]
            else:
                v = v.get(part) if isinstance(v, dict) else None
        if isinstance(v, int | float):
            values.append(float(v))
    return round(statistics.median(values), 3) if values else None


SUMMARY_FIELDS = {
    "throughput_avg": "throughput.average",
    "throughput_p50": "throughput.p50",
    "throughput_p90": "throughput.p90",
    "throughput_p99": "throughput.p99",
    "creation_per_second": "creation.per_second",
    "sched_p50": "latency.scheduling.p50",
    "sched_p90": "latency.scheduling.p90",
    "sched_p99": "latency.scheduling.p99",
    "startup_p50": "latency.startup.p50",
    "startup_p90": "latency.startup.p90",
    "startup_p99": "latency.startup.p99",
    "api_create_alone": "ceilings.apiserver_create_alone.per_second",
    "etcd_txn_put": "ceilings.etcd_txn_put.per_second",
    "ratio_api": "ratios.throughput_over_apiserver_create_alone",
    "ratio_etcd": "ratios.throughput_over_etcd_txn_put",
    "cpu_scheduler": "processes.scheduler.cpu_seconds",
    "cpu_apiserver": "processes.apiserver.cpu_seconds",
    "cpu_etcd": "processes.etcd.cpu_seconds",
    "rss_scheduler_mib": "processes.scheduler.peak_rss_mib",
    "rss_apiserver_mib": "processes.apiserver.peak_rss_mib",
    "load1_before": "load_average_before.0",
}


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: median_of(results, p) for k, p in SUMMARY_FIELDS.items()}
    for r in results:
        r.setdefault("load_average_before", [None])
    loads = [r.get("load_average_before", [None])[0] for r in results]
    out["load1_before_each_run"] = loads
    out["runs"] = len(results)
    return out


def markdown_row(case: str, workload: str, s: dict[str, Any], nproc: int) -> str:
    def f(key: str, fmt: str = "{:.0f}") -> str:
        v = s.get(key)
        return "-" if v is None else fmt.format(v)

    loads = "/".join("?" if x is None else f"{x:.1f}" for x in s["load1_before_each_run"])
    return (
        f"| {case}/{workload} | {nproc} | {s['runs']} | {f('throughput_avg')} "
        f"({f('throughput_p50')}/{f('throughput_p90')}/{f('throughput_p99')}) | "
        f"{f('creation_per_second')} | {f('api_create_alone')} | {f('etcd_txn_put')} | "
        f"{f('ratio_api', '{:.2f}')} | {f('sched_p50', '{:.2f}')}/{f('sched_p99', '{:.2f}')} | "
        f"{f('startup_p50', '{:.2f}')}/{f('startup_p99', '{:.2f}')} | "
        f"{f('cpu_scheduler', '{:.1f}')}/{f('cpu_apiserver', '{:.1f}')}/{f('cpu_etcd', '{:.1f}')}"
        f" | {f('rss_scheduler_mib')}/{f('rss_apiserver_mib')} | {loads} |"
    )


MARKDOWN_HEADER = (
    "| workload | cores | runs | throughput avg (p50/p90/p99) pods/s | created/s | "
    "api Create alone/s | etcd txn/s | tp ÷ api alone | sched lat p50/p99 s | "
    "startup p50/p99 s | CPU s sched/api/etcd | peak RSS MiB sched/api | load1 before |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


async def _uncancelled(aw: Awaitable[Any]) -> Any:
    """Await `aw` to its end even if this task is cancelled meanwhile; the cancellation is
    raised once it has ended (its own error, if any, is logged then)."""
    task = asyncio.ensure_future(aw)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = cancelled or not task.done()
        except Exception:
            break
    if cancelled:
        if not task.cancelled() and task.exception() is not None:
            print(f"while stopping: {task.exception()!r}", flush=True)
        raise asyncio.CancelledError
    return task.result()


async def run_workloads(
    path: Path, names: list[str], runs: int, opts: Options
) -> list[dict[str, Any]]:
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    summaries = []
    for case in load_test_cases(path):
        for workload in case["workloads"]:
            if names and workload["name"] not in names:
                continue
            results = []
            for k in range(1, runs + 1):
                run = Run(case, workload, opts, k)
                result = await run.execute()
                out = opts.out_dir / f"{run.stem()}.json"
                out.write_text(json.dumps(result, indent=1))
                with contextlib.suppress(Exception):
                    plot.plot_run(result, out.with_suffix(".png"))
                print_result(result)
                results.append(result)
            summary = summarise(results)
            row = markdown_row(case["name"], workload["name"], summary, os.cpu_count() or 0)
            summary["markdown_row"] = row
            summaries.append(summary)
            if runs > 1:
                out = opts.out_dir / f"{case['name']}-{workload['name']}-{STAMP}-summary.json"
                out.write_text(json.dumps(summary, indent=1))
            print(MARKDOWN_HEADER)
            print(row, flush=True)
    return summaries


def print_result(r: dict[str, Any]) -> None:
    tp, lat, bc = r.get("throughput", {}), r.get("latency", {}), r.get("bind_check", {})
    print(
        f"== {r['test_case']}/{r['workload']} run {r['run']}: throughput avg {tp.get('average')} "
        f"p50 {tp.get('p50')} p90 {tp.get('p90')} p99 {tp.get('p99')} pods/s; "
        f"created {r.get('creation', {}).get('per_second')}/s; "
        f"sched p50/p99 {lat.get('scheduling', {}).get('p50')}/"
        f"{lat.get('scheduling', {}).get('p99')}s; startup p50/p99 "
        f"{lat.get('startup', {}).get('p50')}/{lat.get('startup', {}).get('p99')}s; "
        f"bound once {bc.get('bound_exactly_once')}/{bc.get('pods')}",
        flush=True,
    )
    print(f"   processes: {json.dumps(r.get('processes'))}", flush=True)
    print(f"   ceilings: {json.dumps(r.get('ratios'))}", flush=True)
    if r.get("node_leases"):
        rates = r.get("apiserver_requests_per_second") or {}
        renewals = {k: v for k, v in rates.items() if k.startswith("Leases/Update")}
        print(f"   node leases: {json.dumps(r['node_leases'])}; renewals/s {renewals}", flush=True)
    for name, prof in (r.get("profiles") or {}).items():
        print(f"   py-spy {name} ({prof['samples']} samples), top self:", flush=True)
        for fn, pct in prof["self"][:8]:
            print(f"     {pct:5.1f}%  {fn}", flush=True)
        print("     top inclusive (our code and the libraries it calls):", flush=True)
        for fn, pct in prof["inclusive"][:12]:
            print(f"     {pct:5.1f}%  {fn}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tinykube scale benchmark (after scheduler_perf)")
    p.add_argument("workload_file", type=Path, nargs="+")
    p.add_argument("--workload", action="append", default=[], help="only these workload names")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--creators", type=int, default=1, help="pod creator processes")
    p.add_argument("--concurrency", type=int, default=32, help="Creates in flight per creator")
    p.add_argument(
        "--stream-creators",
        action="store_true",
        help="the pod creators send their Creates as messages of one write stream each, not as "
        "unary calls (as a Kubernetes client does)",
    )
    p.add_argument(
        "--kubelet-write-streams",
        nargs="?",
        const="true",
        default="true",
        choices=("true", "false"),
        help="the hollow kubelets renew their Leases and write pod status as messages of write "
        "streams (the kubelet's --write-streams, its default); false: unary calls (default true)",
    )
    p.add_argument("--timeout", type=float, default=0.0, help="seconds per waiting op")
    p.add_argument("--profile", default="", help="py-spy these processes: scheduler,apiserver")
    p.add_argument("--no-ceilings", action="store_true")
    p.add_argument("--ceiling-count", type=int, default=2000, help="writes per ceiling")
    p.add_argument("--keep", action="store_true", help="keep the cluster's work dir (logs)")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="run the cluster in plaintext (tinykube up --insecure), to compare with TLS",
    )
    p.add_argument(
        "--ha",
        action="store_true",
        help="the HA topology: 3 etcd members, 2 apiservers, 2 schedulers and controller managers",
    )
    p.add_argument(
        "--etcd-socket",
        action="store_true",
        help="the apiserver dials etcd's unix socket instead of its TCP port (tinykube up "
        "--etcd-socket), to compare",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    a = p.parse_args(argv)
    opts = Options(
        creators=a.creators,
        concurrency=a.concurrency,
        stream_creators=a.stream_creators,
        kubelet_write_streams=a.kubelet_write_streams == "true",
        timeout=a.timeout,
        profile=tuple(x for x in a.profile.split(",") if x),
        ceilings=not a.no_ceilings,
        ceiling_count=a.ceiling_count,
        keep=a.keep,
        out_dir=a.out_dir,
        insecure=a.insecure,
        ha=a.ha,
        etcd_socket=a.etcd_socket,
    )

    stopped_by: list[int] = []

    async def everything() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        main_task = asyncio.current_task()
        assert main_task is not None

        def stop(sig: int) -> None:
            if stopped_by:
                print(f"{signal.Signals(sig).name}: already stopping the cluster", flush=True)
                return
            stopped_by.append(sig)
            print(f"{signal.Signals(sig).name}: stopping the cluster", flush=True)
            main_task.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, sig)
        out = []
        try:
            for path in a.workload_file:
                out += await run_workloads(path, a.workload, a.runs, opts)
        except asyncio.CancelledError:
            if not stopped_by:
                raise
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return out

    summaries = asyncio.run(everything())
    if stopped_by:
        return 128 + stopped_by[0]
    return 0 if summaries else 2


def exit_as(code: int) -> None:
    """Exit with `code`; 128 + SIGTERM or SIGINT by dying of that signal, as a shell's
    parent expects of a program its signal stopped (everything is cleaned up by now)."""
    if code - 128 in (signal.SIGTERM, signal.SIGINT):
        sys.stdout.flush()
        signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    sys.exit(code)


if __name__ == "__main__":
    exit_as(main())
