"""A failed controller sync leaves no exception in a reference cycle.

A sync that carries an error to raise at its end (kube's "update the status, then return the
error") must not keep a name for it in its frame: the error's traceback holds the frame, and
the two would make a cycle that only the cyclic GC frees, with every frame of the traceback.
Each test fails a sync's pod creates a few times, with a fresh error each time as a client
would raise, the collector off and DEBUG_SAVEALL on, then counts the exceptions it finds.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable

import pytest

from tests.unit.controller import test_daemonset, test_job, test_replicaset
from tests.unit.controller.fakes import FakeResource
from tinykube.errors import InvalidError
from tinykube.v1 import pod_pb2

pytestmark = pytest.mark.usefixtures("saved_garbage")

SYNCS = 4


async def exceptions_in_cycles(
    pods: FakeResource[pod_pb2.Pod], sync: Callable[[], Awaitable[None]]
) -> list[str]:
    gc.collect()
    del gc.garbage[:]
    for _ in range(SYNCS):
        pods.fail_creates = InvalidError("pods is forbidden: exceeded quota")
        with pytest.raises(InvalidError):
            await sync()
    pods.fail_creates = None
    gc.collect()
    found = sorted(type(o).__name__ for o in gc.garbage if isinstance(o, BaseException))
    del gc.garbage[:]
    return found


async def test_a_replicaset_sync() -> None:
    env = test_replicaset.Env()
    await env.create_rs(test_replicaset.make_rs(replicas=3))

    async def sync() -> None:
        env.ctrl.expectations.delete("default/web")
        await env.ctrl.sync("default/web")

    assert await exceptions_in_cycles(env.client.pods, sync) == []


async def test_a_daemonset_sync() -> None:
    env = test_daemonset.Env()
    for n in ("n1", "n2"):
        await env.node(n)
    await env.client.daemon_sets.create(test_daemonset.make_ds())
    assert await exceptions_in_cycles(env.client.pods, env.sync) == []


async def test_a_job_sync() -> None:
    env = test_job.Env()
    key = await env.create(test_job.make_job(completions=2, parallelism=2))

    async def sync() -> None:
        env.ctrl.expectations.delete(key)
        await env.sync(key)

    assert await exceptions_in_cycles(env.client.pods, sync) == []
