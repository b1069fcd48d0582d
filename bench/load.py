"""ClusterLoader2's load test on tinykube: the scale envelope, phase by phase.

    python bench/load.py bench/workloads/load.yaml --workload 500Nodes [--insecure]

The cluster is `bench/harness.py`'s (`tinykube up`'s topology through LocalCluster: etcd,
apiserver with TLS and Node,RBAC authorization unless --insecure, scheduler, the controller
manager with every controller, fake-runtime kubelets each hosting `nodesPerKubelet` hollow
nodes with a Lease each renewed every 10 s and node status as the kubelet's defaults). The
workload file is scheduler_perf's format; after createNodes its ops are CL2's phases
(bench/workloads/load.yaml says what each does). Each phase is paced at `qps` pods/s offered
and waits, through a watch, until the cluster has converged (every Deployment's pods Running
on the current template; for the delete phase, every namespace gone).

Measured per phase: pod startup latency (create, as first seen by the harness's cluster-wide
pod watch, to Running on that watch; kube's definition) p50/p90/p99; bind throughput; server
side latency p50/p99 of every gRPC method (verb and kind) from the apiserver's histogram, and
the harness's own mutating calls client side; LIST latency of one namespace's pods (every 5 s)
and of every pod in the cluster (every 30 s, or 10 times the last such LIST took; one unpaged
call); watch delivery lag (a probe pod, never scheduled, relabelled every second: its write's
response to its event on the pod watch); CPU seconds and peak RSS of every process; etcd's db
size and the apiserver's compactions; nodes that went NotReady (a node watch) and Leases that
expired (polled every 10 s: two successive renewTimes further apart than
leaseDurationSeconds); pods lost (a Running pod that stopped running or vanished without being
deleted, or any pod deleted in the create phase) or bound twice (the watch saw a second bind or
a move). SIGTERM stops a run: the phase under way is measured as it stands, marked incomplete.
Every `--checkpoint-every` seconds (60) of a phase a checkpoint records what the cluster looks
like so far: pods Running and live, startup p99 of the pods created since the last one, the
cluster-wide and namespace LISTs in that window, the worst mutating p99 in it, RSS and CPU of
every process, etcd's db size and compactions, the invariants, and the load average; the JSON
is rewritten at each, so a phase of 150,000 pods stopped half way keeps its curve.
`python bench/load.py RUN.json --report` prints a saved run's tables and draws its checkpoints.

Output: bench/results/Load-<workload>-<stamp>.json and a PNG per phase (bench/plot.py).
Concurrency model: one asyncio loop; the harness's recorder (the pod watch), the node watch,
the Lease poller, the LIST and watch-lag probes and the /proc sampler are tasks on it; the
phase's writes are paced tasks bounded by a semaphore.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import harness
import plot
import sysmetrics
from namespaces import ensure_namespace

from tinykube.client import Client
from tinykube.errors import ConflictError, NotFoundError, TinykubeError
from tinykube.meta import set_int_or_string
from tinykube.v1 import deployment_pb2, pod_pb2, service_pb2

PROBE_NS = "load-probe"
SIZES = {"small": 5, "medium": 30, "big": 250}  # CL2's SMALL/MEDIUM/BIG_GROUP_SIZE
IN_FLIGHT = 64  # the harness's own writes in flight at most
LIST_NS_EVERY = 5.0
LIST_ALL_EVERY = 30.0
LEASE_POLL = 10.0
MUTATING = (
    "Create",
    "Update",
    "UpdateStatus",
    "UpdateStatusBatch",
    "Delete",
    "Bind",
    "BindBatch",
    "Patch",
)
CHECKPOINT_EVERY = 60.0  # seconds between a phase's checkpoints (--checkpoint-every)


def deployment_plan(nodes: int, params: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(namespace, name, replicas) of every Deployment, CL2's sizing: a namespace per
    nodesPerNamespace nodes, a quarter of its pods in big Deployments, a quarter in medium, the
    rest in small; shuffled (seeded) so the sizes interleave as CL2's parallel phases do."""
    per_ns_nodes = int(params["nodesPerNamespace"])
    namespaces = max(1, math.ceil(nodes / per_ns_nodes))
    total = int(params["podsPerNode"]) * nodes
    plan: list[tuple[str, str, int]] = []
    for k in range(namespaces):
        pods = total // namespaces + (1 if k < total % namespaces else 0)
        ns = f"load-{k}"
        big = pods // (4 * SIZES["big"])
        medium = pods // (4 * SIZES["medium"])
        rest = pods - big * SIZES["big"] - medium * SIZES["medium"]
        small, last = divmod(rest, SIZES["small"])
        groups = [("big", SIZES["big"])] * big + [("medium", SIZES["medium"])] * medium
        groups += [("small", SIZES["small"])] * small
        if last:
            groups.append(("small", last))
        for i, (size, replicas) in enumerate(groups):
            plan.append((ns, f"{size}-{i}", replicas))
    random.Random(int(params.get("seed", 1))).shuffle(plan)
    return plan


def make_deployment(ns: str, name: str, replicas: int, version: int) -> deployment_pb2.Deployment:
    """CL2's deployment.yaml with a realistic pod: requests, labels, a readiness probe, env;
    the ServiceAccount admission adds the projected token volume."""
    d = deployment_pb2.Deployment(apiVersion="apps/v1", kind="Deployment")
    d.metadata.name, d.metadata.namespace = name, ns
    d.metadata.labels.update({"group": "load", "size": name.split("-")[0]})
    d.spec.replicas = replicas
    d.spec.selector.matchLabels["name"] = name
    set_template(d, name, version)
    return d


def set_template(d: deployment_pb2.Deployment, name: str, version: int) -> None:
    tpl = d.spec.template
    tpl.metadata.labels.clear()
    tpl.metadata.labels.update({"name": name, "group": "load", "version": str(version)})
    del tpl.spec.containers[:]
    c = tpl.spec.containers.add(name="app", image="registry.k8s.io/pause:3.9")
    # No containerPort: tinykube's scheduler counts a bare containerPort as taken on the node
    # (its process runtime shares the node's network; scheduler/podinfo.py), so a port here
    # would allow one replica per node. The Service targets 8080 by number.
    c.resources.requests.update({"cpu": "10m", "memory": "10Mi"})
    c.env.add(name="ENV_VAR", value=f"value-{version}")
    c.env.add(name="GROUP", value="load")
    c.readinessProbe.httpGet.path = "/healthz"
    set_int_or_string(c.readinessProbe.httpGet.port, 8080)
    c.readinessProbe.periodSeconds = 10


def make_service(ns: str, name: str) -> service_pb2.Service:
    s = service_pb2.Service(apiVersion="v1", kind="Service")
    s.metadata.name, s.metadata.namespace = name, ns
    s.spec.selector["name"] = name
    port = s.spec.ports.add(port=80, protocol="TCP")
    set_int_or_string(port.targetPort, 8080)
    return s


@dataclass
class LoadRecorder(harness.PodRecorder):
    """The harness's pod watch, also keeping what the load test converges on: live pods per
    namespace, and the good ones (Running, not terminating) per (namespace, template version)."""

    live: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # uid -> ns, ver, good
    live_in: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    good_in: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    lost: list[str] = field(default_factory=list)
    deletes_are_lost: bool = False  # the create phase: nobody deletes a pod
    probe_seen: dict[str, float] = field(default_factory=dict)  # probe seq -> first seen

    def observe(self, pod: pod_pb2.Pod, event_type: str, now: float) -> None:
        meta = pod.metadata
        if meta.namespace == PROBE_NS:
            seq = meta.labels.get("seq", "")
            if event_type != "LISTED" and seq:
                self.probe_seen.setdefault(seq, now)
            return
        super().observe(pod, event_type, now)
        uid = meta.uid
        old = self.live.pop(uid, None)
        if old is not None:
            self.live_in[old[0]] -= 1
            if old[2]:
                self.good_in[old[0], old[1]] -= 1
        terminating = meta.HasField("deletionTimestamp")
        if event_type == "DELETED":
            if self.listed and (self.deletes_are_lost or (old and old[2] and not terminating)):
                self.lost.append(f"{meta.namespace}/{meta.name} deleted")
            return
        good = pod.status.phase == "Running" and not terminating
        if old is not None and old[2] and not good and not terminating:
            self.lost.append(f"{meta.namespace}/{meta.name} stopped ({pod.status.phase})")
        new = (meta.namespace, meta.labels.get("version", ""), good)
        self.live[uid] = new
        self.live_in[new[0]] += 1
        if good:
            self.good_in[new[0], new[1]] += 1


@dataclass
class Health:
    """Nodes that went NotReady (a watch) and Leases that expired (polled)."""

    client: Client
    ready: dict[str, bool] = field(default_factory=dict)
    not_ready: list[tuple[float, str]] = field(default_factory=list)
    renewed: dict[str, float] = field(default_factory=dict)
    expired: list[tuple[float, str, float]] = field(default_factory=list)  # when, lease, gap
    lease_polls: int = 0
    lease_poll_errors: int = 0

    def node_event(self, name: str, is_ready: bool, deleted: bool = False) -> None:
        was = self.ready.get(name)
        if was and not is_ready and not deleted:
            self.not_ready.append((time.time(), name))
        if deleted:
            self.ready.pop(name, None)
        else:
            self.ready[name] = is_ready

    async def watch_nodes(self) -> None:
        while True:
            try:
                items, rv = await self.client.nodes.list_all(page_size=5000)
                for n in items:
                    self.node_event(n.metadata.name, _ready(n))
                async for ev in self.client.nodes.watch(resource_version=rv):
                    if ev.type == "BOOKMARK":
                        continue
                    self.node_event(
                        ev.object.metadata.name, _ready(ev.object), ev.type == "DELETED"
                    )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                print(f"  node watch broke ({type(exc).__name__}: {exc}); relisting", flush=True)
            await asyncio.sleep(0.5)

    async def poll_leases(self) -> None:
        while True:
            try:
                items, _ = await self.client.leases.list_all("kube-node-lease", page_size=5000)
                self.lease_polls += 1
                for lease in items:
                    ts = lease.spec.renewTime
                    renew = ts.seconds + ts.nanos / 1e9
                    duration = lease.spec.leaseDurationSeconds or 40
                    prev = self.renewed.get(lease.metadata.name)
                    if prev is not None and renew - prev > duration:
                        self.expired.append((time.time(), lease.metadata.name, renew - prev))
                    self.renewed[lease.metadata.name] = renew
                # A Lease not renewed for longer than its duration now has expired too.
                now = time.time()
                for lease in items:
                    ts = lease.spec.renewTime
                    age = now - (ts.seconds + ts.nanos / 1e9)
                    if age > (lease.spec.leaseDurationSeconds or 40) + LEASE_POLL:
                        self.expired.append((now, lease.metadata.name, age))
            except asyncio.CancelledError:
                raise
            except TinykubeError:
                self.lease_poll_errors += 1
            await asyncio.sleep(LEASE_POLL)


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


class LoadRun(harness.Run):
    """One fresh cluster playing the load test once, every phase measured."""

    def __init__(self, case: dict[str, Any], workload: dict[str, Any], opts: harness.Options):
        super().__init__(case, workload, opts, 1)
        self.client_latency: dict[str, list[float]] = defaultdict(list)
        self.client_errors: dict[str, int] = defaultdict(int)
        self.first_errors: dict[str, str] = {}
        self.plan: list[tuple[str, str, int]] = []
        self.replicas: dict[tuple[str, str], int] = {}
        self.version = 1
        self.list_samples: list[tuple[float, str, float, int]] = []  # when, scope, s, items
        self.probe_sent: list[tuple[str, float, float]] = []  # seq, sent, acked
        self.phases: dict[str, Any] = {}
        self.phase_peak: dict[str, int] = {}
        self.waiting_for: dict[str, str] = {}
        self.only_phases: list[str] = []  # --phases: run only these (default: every one)
        self.load_start: list[float] = []
        self.stopped = False  # SIGTERM arrived during a phase
        self.checkpoint_every = CHECKPOINT_EVERY
        self.phase_checkpoints: dict[str, list[dict[str, Any]]] = {}  # phase -> its checkpoints

    # ---- writes, paced ------------------------------------------------------------------------

    async def call(self, what: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        began = time.perf_counter()
        try:
            out = await fn()
        except TinykubeError as exc:
            self.client_errors[what] += 1
            self.first_errors.setdefault(what, f"{type(exc).__name__}: {exc}")
            return None
        self.client_latency[what].append(time.perf_counter() - began)
        return out

    async def paced(
        self, items: Sequence[tuple[int, Callable[[], Awaitable[None]]]], qps: float
    ) -> dict[str, Any]:
        """Run each item when its pods are due at `qps` pods/s offered (CL2's tuning set)."""
        sem = asyncio.Semaphore(IN_FLIGHT)
        tasks = []
        began = time.monotonic()
        offered = 0

        async def one(fn: Callable[[], Awaitable[None]]) -> None:
            try:
                await fn()
            finally:
                sem.release()

        for pods, fn in items:
            due = began + offered / qps
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
            offered += pods
            await sem.acquire()
            tasks.append(asyncio.create_task(one(fn)))
        await asyncio.gather(*tasks)
        seconds = time.monotonic() - began
        return {
            "objects": len(items),
            "pods_offered": offered,
            "offered_qps": qps,
            "seconds": round(seconds, 2),
            "achieved_pods_per_second": round(offered / seconds, 1) if seconds else None,
        }

    async def update_deployment(
        self, client: Client, ns: str, name: str, change: Callable[[Any], None]
    ) -> None:
        for _ in range(10):
            d = await self.call("Deployments/Get", lambda: client.deployments.get(name, ns))
            if d is None:
                return
            change(d)
            try:
                began = time.perf_counter()
                await client.deployments.update(d)
                self.client_latency["Deployments/Update"].append(time.perf_counter() - began)
                return
            except ConflictError:
                self.client_errors["Deployments/Update conflict (retried)"] += 1
            except TinykubeError as exc:
                self.client_errors["Deployments/Update"] += 1
                self.first_errors.setdefault("Deployments/Update", str(exc))
                return

    # ---- the phases -------------------------------------------------------------------------

    def converged(self, rec: LoadRecorder, version: str) -> Callable[[], bool]:
        targets: dict[str, int] = defaultdict(int)
        for (ns, _), r in self.replicas.items():
            targets[ns] += r

        next_log = [time.monotonic() + 30.0]

        def done() -> bool:
            if time.monotonic() >= next_log[0]:
                next_log[0] += 30.0
                self.log(f"  waiting: {self.waiting_for or 'converged'}")
            self.waiting_for = {
                ns: f"{rec.live_in.get(ns, 0)} live, {rec.good_in.get((ns, version), 0)} Running "
                f"at version {version}, want {n}"
                for ns, n in targets.items()
                if not rec.live_in.get(ns, 0) == n == rec.good_in.get((ns, version), 0)
            }
            return not self.waiting_for

        return done

    async def phase_create(self, op: dict[str, Any], client: Client, rec: LoadRecorder) -> Any:
        qps = float(harness.resolve(op.get("qps", 100), self.params))
        for ns in sorted({ns for ns, _, _ in self.plan}):
            await ensure_namespace(client, ns)

        def item(ns: str, name: str, r: int) -> tuple[int, Callable[[], Awaitable[None]]]:
            async def fn() -> None:
                await self.call("Services/Create", lambda: client.services.create(
                    make_service(ns, name)))  # fmt: skip
                made = await self.call("Deployments/Create", lambda: client.deployments.create(
                    make_deployment(ns, name, r, self.version)))  # fmt: skip
                if made is not None:
                    self.replicas[ns, name] = r

            return r, fn

        rec.deletes_are_lost = True
        try:
            pacing = await self.paced([item(*p) for p in self.plan], qps)
            await harness.wait_until(
                self.converged(rec, str(self.version)),
                self.timeout_for(pacing["pods_offered"]),
                "every Deployment's pods Running",
            )
        finally:
            rec.deletes_are_lost = False
        return pacing

    async def phase_scale(self, op: dict[str, Any], client: Client, rec: LoadRecorder) -> Any:
        qps = float(harness.resolve(op.get("qps", 100), self.params))
        factor = float(harness.resolve(op.get("factor", 0.5), self.params))
        rng = random.Random(int(self.params.get("seed", 1)) + 1)
        items = []
        for (ns, name), r in sorted(self.replicas.items()):
            new = max(1, round(r * rng.uniform(1 - factor, 1 + factor)))

            def fn(ns: str = ns, name: str = name, new: int = new) -> Awaitable[None]:
                def change(d: Any) -> None:
                    d.spec.replicas = new

                return self.update_deployment(client, ns, name, change)

            items.append((abs(new - r), fn))
            self.replicas[ns, name] = new
        pacing = await self.paced(items, qps)
        await harness.wait_until(
            self.converged(rec, str(self.version)),
            self.timeout_for(pacing["pods_offered"]),
            "every Deployment at its new size",
        )
        return pacing

    async def phase_roll(self, op: dict[str, Any], client: Client, rec: LoadRecorder) -> Any:
        qps = float(harness.resolve(op.get("qps", 100), self.params))
        self.version += 1
        items = []
        for (ns, name), r in sorted(self.replicas.items()):

            def fn(ns: str = ns, name: str = name) -> Awaitable[None]:
                def change(d: Any) -> None:
                    set_template(d, name, self.version)

                return self.update_deployment(client, ns, name, change)

            items.append((r, fn))
        pacing = await self.paced(items, qps)
        await harness.wait_until(
            self.converged(rec, str(self.version)),
            self.timeout_for(2 * pacing["pods_offered"]),
            "every Deployment rolled to the new template",
        )
        return pacing

    async def phase_delete(self, op: dict[str, Any], client: Client, rec: LoadRecorder) -> Any:
        per_ns = []
        for ns in sorted({ns for ns, _ in self.replicas}):
            began = time.monotonic()
            pods = rec.live_in.get(ns, 0)
            await self.call("Namespaces/Delete", functools.partial(client.namespaces.delete, ns))

            async def gone(ns: str = ns) -> bool:
                try:
                    await client.namespaces.get(ns)
                except NotFoundError:
                    return True
                return False

            deadline = time.monotonic() + self.timeout_for(pods)
            while rec.live_in.get(ns, 0) > 0 or not await gone():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"namespace {ns} not gone ({rec.live_in.get(ns)} pods)")
                await asyncio.sleep(0.5)
            seconds = time.monotonic() - began
            per_ns.append({"namespace": ns, "pods": pods, "seconds": round(seconds, 2)})
            self.log(f"  {ns}: {pods} pods gone in {seconds:.1f}s")
        self.replicas.clear()
        return {"namespaces": per_ns, "pods_deleted": sum(x["pods"] for x in per_ns)}

    # ---- probes ------------------------------------------------------------------------------

    async def list_probe(self, client: Client) -> None:
        last_all = 0.0
        k = 0
        while True:
            namespaces = sorted({ns for ns, _ in self.replicas})
            if namespaces:
                ns = namespaces[k % len(namespaces)]
                k += 1
                began = time.perf_counter()
                with contextlib.suppress(TinykubeError):
                    items = (await client.pods.list(ns)).items
                    self.list_samples.append(
                        (time.time(), "namespace", time.perf_counter() - began, len(items))
                    )
            slow = max((d for _, sc, d, _ in self.list_samples[-50:] if sc == "cluster"), default=0)
            if time.monotonic() - last_all >= max(LIST_ALL_EVERY, 10 * slow):
                last_all = time.monotonic()
                await self.list_all_once(client)
            await asyncio.sleep(LIST_NS_EVERY)

    async def list_all_once(self, client: Client) -> None:
        began = time.perf_counter()
        try:
            items = (await client.pods.list()).items
        except TinykubeError as exc:
            self.client_errors["Pods/List cluster"] += 1
            self.first_errors.setdefault("Pods/List cluster", str(exc))
            return
        self.list_samples.append((time.time(), "cluster", time.perf_counter() - began, len(items)))

    async def watch_probe(self, client: Client) -> None:
        await ensure_namespace(client, PROBE_NS)
        pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
        pod.metadata.name, pod.metadata.namespace = "probe", PROBE_NS
        pod.spec.schedulerName = harness.NO_SCHEDULER
        pod.spec.containers.add(name="c", image="registry.k8s.io/pause:3.9")
        pod = await client.pods.create(pod)
        seq = 0
        while True:
            await asyncio.sleep(1.0)
            seq += 1
            pod.metadata.labels["seq"] = str(seq)
            sent = time.time()
            try:
                pod = await client.pods.update(pod)
            except TinykubeError:
                with contextlib.suppress(TinykubeError):
                    pod = await client.pods.get("probe", PROBE_NS)
                continue
            self.probe_sent.append((str(seq), sent, time.time()))

    async def peak_tracker(self) -> None:
        while True:
            for name, s in self.sampler.last.items():
                self.phase_peak[name] = max(self.phase_peak.get(name, 0), s.rss_bytes)
            await asyncio.sleep(1.0)

    async def checkpoint_loop(
        self, name: str, rec: LoadRecorder, health: Health, start: float, t0: float
    ) -> None:
        """Every `checkpoint_every` seconds of a phase, what the cluster looks like so far (a
        phase of 150,000 pods lasts half an hour, and a run stopped in it keeps these)."""
        points = self.phase_checkpoints.setdefault(name, [])
        api_url = f"http://127.0.0.1:{self.api_metrics_port}/metrics"
        etcd_url = f"{self.etcd_url}/metrics"
        ctx = self.etcd_tls_context()
        api_first = api_prev = await asyncio.to_thread(sysmetrics.scrape, api_url)
        cpu_first = self.sampler.sample()
        lost0, nr0, exp0 = len(rec.lost), len(health.not_ready), len(health.expired)
        prev_wall = start
        while True:
            await asyncio.sleep(self.checkpoint_every)
            now = time.time()
            api_now = await asyncio.to_thread(sysmetrics.scrape, api_url)
            etcd_now = await asyncio.to_thread(sysmetrics.scrape, etcd_url, 5.0, ctx)
            points.append(
                self.phase_checkpoint(
                    rec, health, start, prev_wall, now, time.monotonic() - t0,
                    (api_first, api_prev, api_now), etcd_now, cpu_first, (lost0, nr0, exp0),
                )
            )  # fmt: skip
            api_prev, prev_wall = api_now, now
            c = points[-1]
            self.log(
                f"  checkpoint {c['t']:.0f}s: {c['pods']['running']} Running of "
                f"{c['pods']['live']} live, startup p99 {c['startup_window'].get('p99')}s, LIST "
                f"all {c['list_cluster']} ns p99 {c['list_namespace'].get('p99')}s, mutating "
                f"p99 {c['mutating_p99_ms']} ms, RSS MiB {c['rss_mib']}, etcd db "
                f"{c['etcd'].get('db_mib')} MiB, load {c['load_average']}, invariants "
                f"{c['invariants']}"
            )
            partial = {**self.summary(), "complete": False, "partial": True}
            with contextlib.suppress(OSError):
                self.out_path().write_text(json.dumps(partial, indent=1))

    def phase_checkpoint(
        self,
        rec: LoadRecorder,
        health: Health,
        start: float,
        since: float,
        now: float,
        t: float,
        api: tuple[Any, Any, Any],
        etcd_now: Any,
        cpu_first: dict[str, sysmetrics.ProcSample],
        marks: tuple[int, int, int],
    ) -> dict[str, Any]:
        api_first, api_prev, api_now = api
        created = running = 0
        window: list[float] = []
        for tr in rec.pods.values():
            if tr.created >= start:
                created += 1
                if tr.running is not None and tr.created >= since:
                    window.append(tr.running - tr.created)
            if tr.running is not None and not tr.deleted:
                running += 1
        startup = harness.percentiles(window)
        startup.pop("cdf", None)
        cluster = [
            [round(s, 2), n] for w, sc, s, n in self.list_samples if sc == "cluster" and w >= since
        ]
        namespace = harness.percentiles(
            [s for w, sc, s, _ in self.list_samples if sc == "namespace" and w >= since]
        )
        namespace.pop("cdf", None)
        lat = sysmetrics.histogram_quantiles(
            api_prev, api_now, "apiserver_request_duration_seconds", ("method",)
        )
        mutating = {k: v for k, v in lat.items() if k.split("/")[-1] in MUTATING}
        worst = sorted(mutating.items(), key=lambda kv: -kv[1]["p99_ms"])[:4]
        rss: dict[str, float] = {}
        cpu: dict[str, float] = {}
        kubelet_rss = kubelet_cpu = 0.0
        for proc, s in self.sampler.last.items():
            mib = round(s.rss_bytes / 2**20, 1)
            used = s.cpu_seconds - (cpu_first[proc].cpu_seconds if proc in cpu_first else 0.0)
            if proc.startswith("kubelet"):
                kubelet_rss += mib
                kubelet_cpu += used
                rss["kubelet_max"] = max(rss.get("kubelet_max", 0.0), mib)
            else:
                rss[proc] = mib
                cpu[proc] = round(used, 1)
        rss["kubelets"] = round(kubelet_rss, 1)
        cpu["kubelets"] = round(kubelet_cpu, 1)
        lost0, nr0, exp0 = marks
        return {
            "t": round(t, 1),
            "at": time.strftime("%H:%M:%S", time.gmtime(now)),
            "load_average": sysmetrics.load_average(),
            "pods": {
                "live": len(rec.live),
                "running": running,
                "created_in_phase": created,
                "good": sum(rec.good_in.values()),
            },
            "startup_window": startup,
            "list_cluster": cluster,
            "list_namespace": namespace,
            "mutating_p99_ms": worst[0][1]["p99_ms"] if worst else 0.0,
            "mutating_worst": {k: v["p99_ms"] for k, v in worst},
            "rss_mib": rss,
            "cpu_seconds": cpu,
            "etcd": etcd_state(etcd_now),
            "apiserver_compactions": {
                dict(lab).get("result", ""): int(v - api_first.get((m, lab), 0.0))
                for (m, lab), v in api_now.items()
                if m == "apiserver_etcd_compactions_total"
            },
            "invariants": {
                "pods_lost": len(rec.lost) - lost0,
                "nodes_not_ready": len(health.not_ready) - nr0,
                "leases_expired": len(health.expired) - exp0,
            },
        }

    # ---- one phase, measured ----------------------------------------------------------------

    async def measure(
        self, op: dict[str, Any], client: Client, rec: LoadRecorder, health: Health
    ) -> None:
        name = str(op.get("phase", op["opcode"]))
        action = {
            "createDeployments": self.phase_create,
            "scaleDeployments": self.phase_scale,
            "rollDeployments": self.phase_roll,
            "deleteNamespaces": self.phase_delete,
        }[op["opcode"]]
        self.log(f"phase {name}: {op['opcode']}")
        api_url = f"http://127.0.0.1:{self.api_metrics_port}/metrics"
        etcd_url = f"{self.etcd_url}/metrics"
        ctx = self.etcd_tls_context()
        api_before, etcd_before = (
            sysmetrics.scrape(api_url),
            sysmetrics.scrape(etcd_url, context=ctx),
        )
        cpu_before = self.sampler.sample()
        self.client_latency.clear()
        self.client_errors.clear()
        self.first_errors.clear()
        self.phase_peak.clear()
        self.sampler.timeline = {}
        self.sampler.recording = True
        lost_before, nr_before, exp_before = (
            len(rec.lost),
            len(health.not_ready),
            len(health.expired),
        )
        load_before = sysmetrics.load_average()
        profilers = await self.start_pyspy(name)
        start = time.time()
        t0 = time.monotonic()
        incomplete = ""
        pacing: Any = None
        checkpoints = asyncio.create_task(self.checkpoint_loop(name, rec, health, start, t0))
        try:
            pacing = await action(op, client, rec)
        except TimeoutError as exc:
            incomplete = f"{exc}: {self.waiting_for}"
            self.log(f"  {exc}")
        except asyncio.CancelledError:
            # Stopped (SIGTERM): what the phase did so far is measured and kept, then the run
            # ends (execute re-raises).
            incomplete = f"stopped; waiting for {self.waiting_for}"
            self.stopped = True
            self.log(f"  {incomplete}")
        seconds = time.monotonic() - t0
        checkpoints.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checkpoints
        if not self.stopped:
            await self.list_all_once(client)  # at least one cluster-wide LIST per phase
        end = time.time()
        self.sampler.recording = False
        profiles = await self.stop_pyspy(profilers)
        for proc, prof in profiles.items():  # one collapsed-stacks file per phase
            kept = self.opts.out_dir / str(prof.get("collapsed_stacks", ""))
            if prof.get("collapsed_stacks") and kept.exists():
                per_phase = kept.with_name(f"{self.stem()}-{name}-pyspy-{proc}.txt")
                kept.rename(per_phase)
                prof["collapsed_stacks"] = per_phase.name
        cpu_after = self.sampler.sample()
        api_after, etcd_after = sysmetrics.scrape(api_url), sysmetrics.scrape(etcd_url, context=ctx)

        tracks = [t for t in rec.pods.values() if start <= t.created <= end]
        startup = [t.running - t.created for t in tracks if t.running is not None]
        sched = [t.bound - t.created for t in tracks if t.bound is not None]
        bound = [
            t.bound for t in rec.pods.values() if t.bound is not None and start <= t.bound <= end
        ]
        processes: dict[str, dict[str, float]] = {}
        kubelets = {"cpu_seconds": 0.0, "peak_rss_mib": 0.0, "processes": 0}
        for proc, after in cpu_after.items():
            before = cpu_before.get(proc)
            cpu = after.cpu_seconds - (before.cpu_seconds if before else 0.0)
            rss = max(self.phase_peak.get(proc, 0), after.rss_bytes) / 2**20
            processes[proc] = {"cpu_seconds": round(cpu, 2), "peak_rss_mib": round(rss, 1)}
            if proc.startswith("kubelet"):
                kubelets["cpu_seconds"] = round(kubelets["cpu_seconds"] + cpu, 2)
                kubelets["peak_rss_mib"] = round(kubelets["peak_rss_mib"] + rss, 1)
                kubelets["processes"] += 1
        processes["kubelets"] = kubelets
        lists = {
            scope: harness.percentiles(
                [s for w, sc, s, _ in self.list_samples if sc == scope and start <= w <= end]
            )
            for scope in ("namespace", "cluster")
        }
        for scope, row in lists.items():
            row.pop("cdf", None)
            items = [n for w, sc, _, n in self.list_samples if sc == scope and start <= w <= end]
            row["items_max"] = max(items, default=0)
        lag, write_to_watch = [], []
        for seq, sent, acked in self.probe_sent:
            seen = rec.probe_seen.get(seq)
            if seen is not None and start <= sent <= end:
                lag.append(max(0.0, seen - acked))
                write_to_watch.append(seen - sent)
        api_lat = sysmetrics.histogram_quantiles(
            api_before, api_after, "apiserver_request_duration_seconds", ("method",)
        )
        mutating_p99 = max(
            (v["p99_ms"] for k, v in api_lat.items() if k.split("/")[-1] in MUTATING), default=0.0
        )
        result = {
            "phase": name,
            "opcode": op["opcode"],
            "incomplete": incomplete,
            "seconds": round(seconds, 2),
            "pacing": pacing,
            "pods_created": len(tracks),
            "latency": {
                "startup": harness.percentiles(startup),
                "scheduling": harness.percentiles(sched),
            },
            "throughput": harness.throughput_summary(bound, start),
            "apiserver_latency": api_lat,
            "mutating_p99_ms_max": mutating_p99,
            "harness_calls": {
                k: {
                    **{
                        q: round(1000 * v[min(len(v) - 1, int(len(v) * p))], 1)
                        for q, p in (("p50_ms", 0.5), ("p99_ms", 0.99))
                    },
                    "count": len(v),
                }
                for k, v in ((k, sorted(v)) for k, v in self.client_latency.items())
                if v
            },
            "harness_errors": dict(self.client_errors),
            "harness_first_errors": dict(self.first_errors),
            "list_latency": lists,
            "watch_lag": {
                "ack_to_event": harness.percentiles(lag),
                "write_to_event": harness.percentiles(write_to_watch),
            },
            "processes": processes,
            "cpu_timeline": self.sampler.timeline,
            "etcd": etcd_state(etcd_after),
            "apiserver_compactions": {
                r: int(v - api_before.get((m, lab), 0.0))
                for (m, lab), v in api_after.items()
                if m == "apiserver_etcd_compactions_total"
                for r in [dict(lab).get("result", "")]
            },
            "apiserver_requests_per_second": sysmetrics.counter_rates(
                api_before, api_after, "apiserver_request_total", ("method", "code"), seconds
            ),
            "etcd_requests_per_second": sysmetrics.counter_rates(
                etcd_before, etcd_after, "grpc_server_handled_total", ("grpc_method",), seconds
            ),
            "invariants": {
                "pods_lost": len(rec.lost) - lost_before,
                "pods_lost_examples": rec.lost[lost_before:][:10],
                "nodes_not_ready": len(health.not_ready) - nr_before,
                "leases_expired": len(health.expired) - exp_before,
                "leases_expired_examples": health.expired[exp_before:][:10],
                "pods_bound_twice": sum(1 for t in tracks if t.binds > 1 or t.moves > 0),
            },
            "load_average_before": load_before,
            "load_average_after": sysmetrics.load_average(),
            "checkpoints": self.phase_checkpoints.get(name, []),
            "profiles": profiles,
        }
        for row in result["latency"].values():
            row.pop("cdf", None) if not row.get("count") else None
        self.phases[name] = result
        s, inv = result["latency"]["startup"], result["invariants"]
        self.log(
            f"  {name}: {seconds:.1f}s, {len(tracks)} pods created, startup p50/p90/p99 "
            f"{s.get('p50')}/{s.get('p90')}/{s.get('p99')}s, binds/s "
            f"{result['throughput'].get('average')}, mutating p99 {mutating_p99} ms, LIST ns/all "
            f"p99 {lists['namespace'].get('p99')}/{lists['cluster'].get('p99')}s, invariants "
            f"{ {k: v for k, v in inv.items() if not k.endswith('examples')} }"
        )
        # The per-phase plot: bench/plot.py's three panels for this phase's window.
        with contextlib.suppress(Exception):
            plot.plot_run(
                {
                    "test_case": self.case["name"],
                    "workload": f"{self.workload['name']} phase {name}",
                    "run": 1,
                    "machine": {"nproc": os.cpu_count()},
                    **{k: result[k] for k in ("throughput", "latency", "cpu_timeline")},
                },
                self.opts.out_dir / f"{self.stem()}-{name}.png",
            )

    def stem(self) -> str:
        tls = "insecure" if self.opts.insecure else "tls"
        return f"{self.case['name']}-{self.workload['name']}-{tls}-{harness.STAMP}"

    # ---- the run ----------------------------------------------------------------------------

    async def execute(self) -> dict[str, Any]:
        self.log(f"load: {self.case['name']}/{self.workload['name']} {self.params}")
        self.load_start = sysmetrics.load_average()
        began = time.monotonic()
        tasks: list[asyncio.Task[Any]] = []
        try:
            # A SIGTERM while the cluster starts waits for the start, then stops the cluster.
            starting = asyncio.ensure_future(asyncio.to_thread(self.cluster.start))
            try:
                await asyncio.shield(starting)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await starting
                raise
            tasks.append(asyncio.create_task(self.sampler.run()))
            self.sampler.pids.update({n: p.pid for n, p in self.cluster.processes.items()})
            self.sampler.pids["harness"] = os.getpid()
            async with Client(
                self.cluster.api_address, timeout=120.0, credentials=self.cluster.credentials
            ) as client:
                rec = LoadRecorder(client)
                health = Health(client)
                ready = asyncio.Event()
                tasks.append(asyncio.create_task(rec.run(ready)))
                await asyncio.wait_for(ready.wait(), 60)
                tasks += [
                    asyncio.create_task(health.watch_nodes()),
                    asyncio.create_task(self.peak_tracker()),
                ]
                for op in self.ops:
                    if op["opcode"] == "createNodes":
                        await self.create_nodes(op, client)
                        nodes = harness.op_count(op, self.params)
                        self.plan = deployment_plan(nodes, self.params)
                        tasks += [
                            asyncio.create_task(health.poll_leases()),
                            asyncio.create_task(self.list_probe(client)),
                            asyncio.create_task(self.watch_probe(client)),
                        ]
                        continue
                    phase = str(op.get("phase", op["opcode"]))
                    if self.only_phases and phase not in self.only_phases:
                        continue
                    await self.measure(op, client, rec, health)
                    # What is measured so far, in case the run is stopped before its end.
                    partial = {**self.summary(), "complete": False, "partial": True}
                    self.out_path().write_text(json.dumps(partial, indent=1))
                    if self.stopped:
                        raise asyncio.CancelledError
                    if self.phases[phase]["incomplete"]:
                        break
                # A List after the run agrees with the watch on every pod's node (a pod the
                # watch has not yet seen bound, the List being newer, is no disagreement).
                listed = await harness.retry_list(lambda: client.pods.list_all(page_size=5000))
                disagree = sum(
                    1
                    for p in listed
                    if p.metadata.namespace != PROBE_NS
                    and (track := rec.pods.get(p.metadata.uid)) is not None
                    and track.node
                    and track.node != p.spec.nodeName
                )
                self.result["final_list"] = {"pods": len(listed), "disagree": disagree}
                self.result["watch"] = {"events": rec.events, "relists": rec.relists}
                self.result["health"] = {
                    "nodes": len(health.ready),
                    "lease_polls": health.lease_polls,
                    "lease_poll_errors": health.lease_poll_errors,
                }
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.to_thread(self.cluster.stop)
            if not self.opts.keep:
                shutil.rmtree(self.work, ignore_errors=True)
        self.result.update(self.summary())
        wanted = [
            str(op.get("phase", op["opcode"]))
            for op in self.ops
            if op["opcode"] != "createNodes"
            and (not self.only_phases or op.get("phase") in self.only_phases)
        ]
        done = list(self.phases)
        incomplete = any(p["incomplete"] for p in self.phases.values())
        self.result["complete"] = done == wanted and not incomplete
        self.result["wall_seconds"] = round(time.monotonic() - began, 1)
        return self.result

    def out_path(self) -> Path:
        return self.opts.out_dir / f"{self.stem()}.json"

    def summary(self) -> dict[str, Any]:
        phases = self.phases
        return {
            **self.result,
            "test_case": self.case["name"],
            "workload": self.workload["name"],
            "params": self.params,
            "insecure": self.opts.insecure,
            "deployments": len(self.plan),
            "pods_target": sum(r for _, _, r in self.plan),
            "phases": phases,
            # the phase under way's checkpoints too (a finished phase has its own copy)
            "checkpoints": self.phase_checkpoints,
            "invariants": {
                k: sum(p["invariants"][k] for p in phases.values())
                for k in ("pods_lost", "nodes_not_ready", "leases_expired", "pods_bound_twice")
            },
            "machine": {"nproc": os.cpu_count(), "load_average_at_start": self.load_start},
            "commit": harness.git_commit(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def etcd_state(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    names = {
        "etcd_mvcc_db_total_size_in_bytes": "db_mib",
        "etcd_mvcc_db_total_size_in_use_in_bytes": "db_in_use_mib",
        "etcd_server_quota_backend_bytes": "quota_mib",
    }
    return {names[m]: round(v / 2**20, 1) for (m, _), v in scrape.items() if m in names}


MARKDOWN_HEADER = (
    "| phase | s | pods made | offered → achieved pods/s | startup p50/p90/p99 s | binds/s avg "
    "| mutating p99 ms (worst method) | LIST ns / all p99 s (items) | watch lag p99 s "
    "| CPU s api/etcd/sched/cm/kubelets | peak RSS MiB api/etcd | etcd db MiB | lost/NotReady/"
    "expired/bound twice |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def markdown_rows(result: dict[str, Any]) -> str:
    rows = []
    for name, p in result["phases"].items():
        s, pr, pacing = p["latency"]["startup"], p["processes"], p["pacing"] or {}
        worst = max(
            ((k, v["p99_ms"]) for k, v in p["apiserver_latency"].items()
             if k.split("/")[-1] in MUTATING),
            key=lambda kv: kv[1], default=("-", 0.0),
        )  # fmt: skip

        def cpu(n: str, pr: dict[str, Any] = pr) -> str:
            return f"{pr.get(n, {}).get('cpu_seconds', 0):.0f}"

        lst = p["list_latency"]
        inv = p["invariants"]
        rows.append(
            f"| {name}{' (incomplete)' if p['incomplete'] else ''} | {p['seconds']:.0f} | "
            f"{p['pods_created']} | {pacing.get('offered_qps', '-')} → "
            f"{pacing.get('achieved_pods_per_second', '-')} | "
            f"{s.get('p50', '-')}/{s.get('p90', '-')}/{s.get('p99', '-')} | "
            f"{p['throughput'].get('average', 0)} | {worst[1]:.0f} ({worst[0]}) | "
            f"{lst['namespace'].get('p99', '-')} / {lst['cluster'].get('p99', '-')} "
            f"({lst['cluster'].get('items_max', 0)}) | "
            f"{p['watch_lag']['ack_to_event'].get('p99', '-')} | "
            f"{cpu('apiserver')}/{cpu('etcd')}/{cpu('scheduler')}/{cpu('controller')}/"
            f"{pr['kubelets']['cpu_seconds']:.0f} | "
            f"{pr.get('apiserver', {}).get('peak_rss_mib', 0):.0f}/"
            f"{pr.get('etcd', {}).get('peak_rss_mib', 0):.0f} | "
            f"{p['etcd'].get('db_mib', '-')} | {inv['pods_lost']}/{inv['nodes_not_ready']}/"
            f"{inv['leases_expired']}/{inv['pods_bound_twice']} |"
        )
    return "\n".join(rows)


CHECKPOINT_HEADER = (
    "| phase | t s (UTC) | load1 | pods Running / live | startup p99 s (window) | LIST all s "
    "(items) | LIST ns p99 s | mutating p99 ms (worst) | RSS MiB api/etcd/sched/cm/kubelets "
    "(largest) | CPU s api/etcd/sched/cm/kubelets | etcd db MiB (in use) | compactions | "
    "lost/NotReady/expired |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def checkpoint_rows(result: dict[str, Any]) -> str:
    """One row per checkpoint of every phase (the phase under way's too, in a partial run)."""
    rows = []
    for phase, points in result.get("checkpoints", {}).items():
        for c in points:
            rss, cpu, inv = c["rss_mib"], c["cpu_seconds"], c["invariants"]
            worst = max(c["mutating_worst"].items(), key=lambda kv: kv[1], default=("-", 0.0))
            lists = ", ".join(f"{s:g} ({n})" for s, n in c["list_cluster"]) or "-"
            procs = ("apiserver", "etcd", "scheduler", "controller")
            rows.append(
                f"| {phase} | {c['t']:.0f} ({c['at']}) | {c['load_average'][0]} | "
                f"{c['pods']['running']} / {c['pods']['live']} | "
                f"{c['startup_window'].get('p99', '-')} | {lists} | "
                f"{c['list_namespace'].get('p99', '-')} | {worst[1]:.0f} ({worst[0]}) | "
                + "/".join(f"{rss.get(n, 0):.0f}" for n in procs)
                + f"/{rss.get('kubelets', 0):.0f} ({rss.get('kubelet_max', 0):.0f}) | "
                + "/".join(f"{cpu.get(n, 0):.0f}" for n in (*procs, "kubelets"))
                + f" | {c['etcd'].get('db_mib', '-')} ({c['etcd'].get('db_in_use_mib', '-')}) | "
                f"{c['apiserver_compactions'].get('ok', 0)} | "
                f"{inv['pods_lost']}/{inv['nodes_not_ready']}/{inv['leases_expired']} |"
            )
    return "\n".join(rows)


def plot_checkpoints(result: dict[str, Any], path: Path) -> None:
    """RSS per process and the cluster-wide LIST against the pods, and the load, per checkpoint."""
    import matplotlib.pyplot as plt  # bench/plot.py has chosen the Agg backend

    points = [c for cs in result.get("checkpoints", {}).values() for c in cs]
    if not points:
        return
    fig, (ax_rss, ax_list, ax_load) = plt.subplots(1, 3, figsize=(17, 4.8))
    fig.suptitle(f"tinykube {result['test_case']}/{result['workload']}: checkpoints")
    live = [c["pods"]["live"] for c in points]
    for proc in ("apiserver", "etcd", "scheduler", "controller", "kubelets", "harness"):
        ax_rss.plot(live, [c["rss_mib"].get(proc, 0) for c in points], marker=".", label=proc)
    ax_rss.set_xlabel("pods live")
    ax_rss.set_ylabel("RSS MiB")
    ax_rss.set_title("RSS per process")
    ax_rss.legend(loc="best", fontsize="x-small")
    lists = [(n, s) for c in points for s, n in c["list_cluster"]]
    if lists:
        ax_list.plot([n for n, _ in lists], [s for _, s in lists], "o")
    ax_list.set_xlabel("pods listed")
    ax_list.set_ylabel("seconds")
    ax_list.set_title("cluster-wide LIST (one unpaged call)")
    ts = [c["t"] for c in points]
    ax_load.plot(ts, [c["load_average"][0] for c in points], marker=".", label="load1")
    ax_load.plot(
        ts, [c["startup_window"].get("p99", 0) for c in points], marker=".", label="startup p99 s"
    )
    ax_load.set_xlabel("seconds into the phase")
    ax_load.set_title("load average, pod startup p99")
    ax_load.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(path: Path) -> None:
    """The markdown tables of a saved run (a partial one too), and its checkpoint plot."""
    result = json.loads(path.read_text())
    print(MARKDOWN_HEADER)
    print(markdown_rows(result))
    print()
    print(CHECKPOINT_HEADER)
    print(checkpoint_rows(result), flush=True)
    for name, p in result["phases"].items():
        print(
            f"- {name}: load {p['load_average_before']} -> {p['load_average_after']}; "
            f"invariants {p['invariants']}; harness errors {p['harness_errors']}"
        )
    plot_checkpoints(result, path.with_name(f"{path.stem}-checkpoints.png"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tinykube load test (after ClusterLoader2)")
    p.add_argument("workload_file", type=Path)
    p.add_argument("--workload", default="", help="the workload name, e.g. 500Nodes")
    p.add_argument("--insecure", action="store_true", help="a plaintext cluster, to compare")
    p.add_argument("--profile", default="", help="py-spy these processes in every phase")
    p.add_argument("--timeout", type=float, default=0.0, help="seconds per phase's wait")
    p.add_argument("--keep", action="store_true", help="keep the cluster's work dir (logs)")
    p.add_argument("--phases", default="", help="only these phases, e.g. create,scale")
    p.add_argument("--out-dir", type=Path, default=harness.RESULTS_DIR)
    p.add_argument(
        "--checkpoint-every",
        type=float,
        default=CHECKPOINT_EVERY,
        help="seconds between checkpoints",
    )
    p.add_argument("--report", action="store_true", help="print a saved run's tables (a JSON path)")
    a = p.parse_args(argv)
    if a.report:
        report(a.workload_file)
        return 0
    if not a.workload:
        p.error("--workload is required")
    opts = harness.Options(
        timeout=a.timeout,
        profile=tuple(x for x in a.profile.split(",") if x),
        ceilings=False,
        keep=a.keep,
        out_dir=a.out_dir,
        insecure=a.insecure,
    )
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    cases = [c for c in harness.load_test_cases(a.workload_file)]
    chosen = [(c, w) for c in cases for w in c["workloads"] if w["name"] == a.workload]
    if not chosen:
        p.error(f"no workload {a.workload!r} in {a.workload_file}")
    case, workload = chosen[0]
    run = LoadRun(case, workload, opts)
    run.only_phases = [x for x in a.phases.split(",") if x]
    run.checkpoint_every = a.checkpoint_every

    async def stoppable() -> dict[str, Any]:
        # SIGTERM (and SIGINT, which a background job ignores) cancels the run: the cluster is
        # stopped and the phases measured so far stay in the JSON.
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
        return await run.execute()

    try:
        result = asyncio.run(stoppable())
    except asyncio.CancelledError:
        print(f"stopped; the phases measured so far are in {run.out_path()}", flush=True)
        return 1
    out = run.out_path()
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}", flush=True)
    print(f"invariants: {json.dumps(result['invariants'])}; complete: {result['complete']}")
    print(MARKDOWN_HEADER)
    print(markdown_rows(result), flush=True)
    print(CHECKPOINT_HEADER)
    print(checkpoint_rows(result), flush=True)
    with contextlib.suppress(Exception):
        plot_checkpoints(result, out.with_name(f"{out.stem}-checkpoints.png"))
    ok = result["complete"] and not any(result["invariants"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
