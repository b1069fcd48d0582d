"""Timed sequential pod Creates over the REST API: the phases of bench/webhook_latency.py and
bench/policy_latency.py, which time them with and without admission work in the way.

`creates` posts `count` pods one after another (each waits for the one before, so the figure is
a Create's latency, not the apiserver's throughput) and returns each one's milliseconds;
`report` prints a phase's median and p90 as one JSON line.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import aiohttp


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


async def creates(
    session: aiohttp.ClientSession, base: str, prefix: str, count: int
) -> list[float]:
    """Create pods `<prefix>-0` ... in namespace default, one at a time; each one's ms."""
    times = []
    for i in range(count):
        body = json.dumps(pod(f"{prefix}-{i}"))
        start = time.perf_counter()
        async with session.post(
            base + "/api/v1/namespaces/default/pods",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as r:
            await r.read()
            if r.status != 201:
                raise SystemExit(f"create failed: {r.status}")
        times.append((time.perf_counter() - start) * 1000)
    return times


def report(phase: str, times: list[float]) -> None:
    ordered = sorted(times)
    print(
        json.dumps(
            {
                "phase": phase,
                "creates": len(times),
                "median_ms": round(statistics.median(times), 3),
                "p90_ms": round(ordered[int(len(ordered) * 0.9)], 3),
            }
        )
    )
