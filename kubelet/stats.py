"""The kubelet's summary API (kube's /stats/summary, stats/v1alpha1 Summary JSON).

`StatsProvider.summary()` answers the `Summary` call of the kubelet's gRPC service (the
apiserver relays `GET /api/v1/nodes/<node>/proxy/stats/summary` to it): the node's CPU
(/proc/stat), memory (/proc/meminfo) and file system (statvfs of the kubelet's root
directory), and per pod its running containers' CPU and memory, with each pod's sums:

- CRI runtime: the runtime's ListContainerStats (cumulative CPU time, working set);
- process runtime: each container's process group from /proc (utime + stime of its live
  members, their resident set as the working set);
- fake runtime: no containers.

`usageNanoCores` is the rate since the previous sample of the same container (or node), as
kube's CRI stats provider computes it; absent on the first one. Reading it needs `nodes/stats`
(`authorize_stats`): the apiserver's kubelet client and the cluster admins, as kube's kubelet
authorizer with the default RBAC.

Concurrency: one event loop; /proc reads are small and done inline.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubelet.runtime import RUNNING, Runtime
from tinykube.errors import ForbiddenError
from tinykube.v1 import pod_pb2

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
APISERVER_CLIENT = "kube-apiserver-kubelet-client"
ADMIN_GROUPS = frozenset({"system:masters", "kubeadm:cluster-admins"})


def authorize_stats(identity: tuple[str, list[str]] | None, node: str) -> None:
    """kube's kubelet authorizer for /stats: `get` on nodes/stats."""
    if identity is None:
        return  # the development mode without TLS
    cn, groups = identity
    if cn == APISERVER_CLIENT or ADMIN_GROUPS.intersection(groups):
        return
    raise ForbiddenError(
        f"Forbidden (user={cn}, verb=get, resource=nodes, subresource(s)=[stats]) on node {node}"
    )


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Usage:
    """One container's cumulative CPU time and memory at `timestamp` (epoch seconds)."""

    cpu_ns: int
    working_set: int
    timestamp: float
    rss: int | None = None


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(pgid, utime + stime in ticks, rss pages) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 22 or fields[0] in ("Z", "X"):
        return None
    return int(fields[2]), int(fields[11]) + int(fields[12]), int(fields[21])


def group_usage(pgid: int, now: float) -> Usage | None:
    """The summed usage of process group `pgid` (a process runtime container)."""
    cpu = rss = 0
    found = False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = _proc_stat(int(entry.name))
        if st is None or st[0] != pgid:
            continue
        found = True
        cpu += st[1]
        rss += st[2]
    if not found:
        return None
    return Usage(cpu * 1_000_000_000 // TICKS, rss * PAGE, now, rss * PAGE)


def node_cpu_ns() -> int:
    with open("/proc/stat") as f:
        first = f.readline().split()
    # user nice system idle iowait irq softirq steal: all but idle and iowait are use.
    values = [int(v) for v in first[1:9]]
    busy = sum(values) - values[3] - values[4]
    return busy * 1_000_000_000 // TICKS


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


class StatsProvider:
    def __init__(
        self,
        node_name: str,
        root_dir: Path,
        runtime: Runtime,
        pods: Any,
        *,
        start_time: float | None = None,
    ) -> None:
        self.node_name = node_name
        self.root_dir = root_dir
        self.runtime = runtime
        # () -> the pods bound to this node (the kubelet's informer).
        self.pods = pods
        self.start_time = start_time if start_time is not None else time.time()
        # key -> (cpu ns, timestamp) of the previous sample, for usageNanoCores.
        self._previous: dict[str, tuple[int, float]] = {}

    def _cpu(self, key: str, cpu_ns: int, now: float) -> dict[str, Any]:
        out: dict[str, Any] = {"time": _time(now), "usageCoreNanoSeconds": cpu_ns}
        before = self._previous.get(key)
        if before is not None and now > before[1] and cpu_ns >= before[0]:
            out["usageNanoCores"] = int((cpu_ns - before[0]) / (now - before[1]))
        self._previous[key] = (cpu_ns, now)
        return out

    async def _container_usage(self) -> dict[tuple[str, str], Usage]:
        """(pod uid, container) -> usage of every running container."""
        out: dict[tuple[str, str], Usage] = {}
        stats = getattr(self.runtime, "container_stats", None)
        if stats is not None:
            for u in await stats():
                if u.uid:
                    out[(u.uid, u.container)] = Usage(
                        int(u.cpu_seconds * 1e9), u.memory_working_set_bytes, u.timestamp
                    )
            return out
        now = time.time()
        for uid in self.runtime.known_pods():
            rec = self.runtime.record(uid)
            if rec is None:
                continue
            for crec in (*rec.init_containers.values(), *rec.containers.values()):
                if crec.state == RUNNING and crec.pid > 0:
                    usage = group_usage(crec.pid, now)
                    if usage is not None:
                        out[(uid, crec.name)] = usage
        return out

    def _node(self, now: float, only_cpu_and_memory: bool) -> dict[str, Any]:
        mem = meminfo()
        total = mem.get("MemTotal", 0)
        available = mem.get("MemAvailable", mem.get("MemFree", 0))
        node: dict[str, Any] = {
            "nodeName": self.node_name,
            "startTime": _time(self.start_time),
            "cpu": self._cpu("node", node_cpu_ns(), now),
            "memory": {
                "time": _time(now),
                "availableBytes": available,
                "usageBytes": total - mem.get("MemFree", 0),
                "workingSetBytes": total - available,
                "rssBytes": mem.get("AnonPages", 0),
            },
        }
        if not only_cpu_and_memory:
            try:
                vfs = os.statvfs(self.root_dir)
            except OSError:
                return node
            node["fs"] = {
                "time": _time(now),
                "availableBytes": vfs.f_bavail * vfs.f_frsize,
                "capacityBytes": vfs.f_blocks * vfs.f_frsize,
                "usedBytes": (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize,
                "inodesFree": vfs.f_ffree,
                "inodes": vfs.f_files,
                "inodesUsed": vfs.f_files - vfs.f_ffree,
            }
        return node

    async def summary(self, only_cpu_and_memory: bool = False) -> dict[str, Any]:
        now = time.time()
        usage = await self._container_usage()
        pods: list[dict[str, Any]] = []
        seen: set[str] = set()
        pod: pod_pb2.Pod
        for pod in sorted(self.pods(), key=lambda p: (p.metadata.namespace, p.metadata.name)):
            uid = pod.metadata.uid
            rec = self.runtime.record(uid)
            if rec is None:
                continue
            containers = []
            cpu_total = mem_total = 0
            for crec in (*rec.init_containers.values(), *rec.containers.values()):
                u = usage.get((uid, crec.name))
                if u is None or crec.state != RUNNING:
                    continue
                key = f"{uid}/{crec.name}/{crec.container_id or crec.pid}"
                seen.add(key)
                memory: dict[str, Any] = {
                    "time": _time(u.timestamp),
                    "workingSetBytes": u.working_set,
                }
                if u.rss is not None:
                    memory["rssBytes"] = u.rss
                containers.append(
                    {
                        "name": crec.name,
                        "startTime": _time(crec.started_at),
                        "cpu": self._cpu(key, u.cpu_ns, u.timestamp),
                        "memory": memory,
                    }
                )
                cpu_total += u.cpu_ns
                mem_total += u.working_set
            entry: dict[str, Any] = {
                "podRef": {
                    "name": pod.metadata.name,
                    "namespace": pod.metadata.namespace,
                    "uid": uid,
                },
                "startTime": _time(rec.start_time),
                "containers": containers,
            }
            if containers:
                seen.add(f"pod/{uid}")
                entry["cpu"] = self._cpu(f"pod/{uid}", cpu_total, now)
                entry["memory"] = {"time": _time(now), "workingSetBytes": mem_total}
            pods.append(entry)
        # Forget samples of containers that are gone.
        self._previous = {k: v for k, v in self._previous.items() if k in seen or k == "node"}
        return {"node": self._node(now, only_cpu_and_memory), "pods": pods}
