"""The worker loop: failures are requeued with back-off, successes forgotten, metrics kept."""

from __future__ import annotations

import asyncio

from controller.app import run_worker
from controller.metrics import Metrics
from tinykube.clock import FakeClock
from tinykube.workqueue import WorkQueue


async def test_failed_sync_is_retried_and_counted() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock, base_delay=1.0)
    metrics = Metrics()
    calls: list[str] = []

    async def sync(key: str) -> None:
        calls.append(key)
        if len(calls) == 1:
            raise RuntimeError("apiserver hiccup")

    worker = asyncio.create_task(run_worker("replicaset", queue, sync, metrics))
    queue.add("default/web")
    for _ in range(10):
        await asyncio.sleep(0)
    assert calls == ["default/web"]
    assert queue.num_requeues("default/web") == 1
    await clock.step(1.0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert calls == ["default/web", "default/web"]
    assert queue.num_requeues("default/web") == 0  # forgotten after success
    syncs = metrics.syncs
    assert syncs.labels(controller="replicaset", result="error")._value.get() == 1
    assert syncs.labels(controller="replicaset", result="success")._value.get() == 1
    queue.shutdown()
    await asyncio.wait_for(worker, 1)
