"""The kubelet's summary API (kubelet/stats.py) over the process runtime's real processes."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from kubelet.process import ProcessRuntime
from kubelet.stats import StatsProvider, authorize_stats, group_usage
from tinykube.clock import Clock
from tinykube.errors import ForbiddenError
from tinykube.v1 import pod_pb2


def test_authorization_is_nodes_stats() -> None:
    authorize_stats(("kube-apiserver-kubelet-client", []), "n1")
    authorize_stats(("admin", ["system:masters"]), "n1")
    authorize_stats(None, "n1")  # no TLS: no identities
    with pytest.raises(ForbiddenError) as err:
        authorize_stats(("system:node:n2", ["system:nodes"]), "n1")
    assert str(err.value.message) == (
        "Forbidden (user=system:node:n2, verb=get, resource=nodes, subresource(s)=[stats]) "
        "on node n1"
    )


def test_group_usage_of_this_process() -> None:
    usage = group_usage(os.getpgid(0), 1.0)
    assert usage is not None and usage.cpu_ns > 0 and usage.working_set > 0


async def test_summary_of_a_running_container(tmp_path: Path) -> None:
    rt = ProcessRuntime(tmp_path, clock=Clock())
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace, pod.metadata.uid = "p", "default", "u1"
    pod.spec.containers.add(name="c", image="x", command=["sh", "-c", "exec sleep 30"])
    await rt.sync_pod(pod)
    # A just-started container's process group can report a resident size of 0 for a moment
    # (seen on a loaded machine: the summary then said workingSetBytes 0); wait for the
    # running command's pages, as the assertions below are about a running container.
    rec = rt.record("u1")
    assert rec is not None
    pid = rec.containers["c"].pid
    deadline = time.monotonic() + 10
    while (u := group_usage(pid, 0.0)) is None or u.working_set == 0:
        assert time.monotonic() < deadline, "the container's process never mapped any memory"
        await asyncio.sleep(0.01)
    stats = StatsProvider("n1", tmp_path, rt, lambda: [pod])
    try:
        first = await stats.summary()
        await asyncio.sleep(0.05)
        second = await stats.summary(only_cpu_and_memory=True)
    finally:
        await rt.kill_pod("u1", 0)
    (p,) = first["pods"]
    assert p["podRef"] == {"name": "p", "namespace": "default", "uid": "u1"}
    (c,) = p["containers"]
    assert c["name"] == "c" and c["memory"]["workingSetBytes"] > 0
    assert "usageNanoCores" not in c["cpu"]  # no earlier sample
    assert "usageNanoCores" in second["pods"][0]["containers"][0]["cpu"]
    assert first["node"]["nodeName"] == "n1" and "fs" in first["node"]
    assert "fs" not in second["node"]
    assert second["node"]["cpu"]["usageNanoCores"] >= 0
