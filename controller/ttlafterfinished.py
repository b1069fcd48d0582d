"""The TTL-after-finished controller: deletes a finished Job `ttlSecondsAfterFinished` after it
finished, as kube-controller-manager's pkg/controller/ttlafterfinished.

A Job that finished (Complete or Failed) and has ttlSecondsAfterFinished is due at its finish
time (the terminal condition's lastTransitionTime) plus the TTL. `sync(key)` deletes a due Job
with propagation Foreground and a uid precondition, after re-reading it live (the TTL may have
been changed, or the Job recreated, since the cache saw it); one not yet due is queued again
for when it is. Informer handlers only enqueue keys.

Concurrency: one asyncio event loop; the work queue never hands out one key twice at once.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Protocol

from controller.api import Queue, Store
from controller.util import is_terminating, key_of, split_key, ts_to_datetime
from tinykube import jobs
from tinykube.clock import Clock
from tinykube.errors import NotFoundError, PreconditionFailedError
from tinykube.protocols import StatusResourceAPI
from tinykube.v1 import job_pb2

log = logging.getLogger(__name__)

Job = job_pb2.Job


class TTLClientAPI(Protocol):
    @property
    def jobs(self) -> StatusResourceAPI[job_pb2.Job]: ...


def finish_time(job: Job) -> datetime | None:
    """When the Job finished: its Complete=True or Failed=True condition's transition time."""
    for cond in job.status.conditions:
        terminal = cond.type in (jobs.COMPLETE, jobs.FAILED) and cond.status == "True"
        if terminal and cond.HasField("lastTransitionTime"):
            return ts_to_datetime(cond.lastTransitionTime)
    return None


def needs_cleanup(job: Job) -> bool:
    return (
        job.spec.HasField("ttlSecondsAfterFinished")
        and jobs.is_finished(job)
        and not is_terminating(job)
    )


def time_left(job: Job, now: datetime) -> float | None:
    """Seconds until the Job expires (<= 0: due); None if it never does."""
    if not needs_cleanup(job):
        return None
    finished = finish_time(job)
    if finished is None:
        return None
    return job.spec.ttlSecondsAfterFinished - (now - finished).total_seconds()


class TTLAfterFinishedController:
    name = "ttl-after-finished"

    def __init__(
        self,
        client: TTLClientAPI,
        job_store: Store[Job],
        queue: Queue,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.job_store = job_store
        self.queue = queue
        self.clock = clock or Clock()

    def on_job(self, job: Job) -> None:
        if needs_cleanup(job):
            self.queue.add(key_of(job))

    def on_job_update(self, old: Job, new: Job) -> None:
        self.on_job(new)

    async def sync(self, key: str) -> None:
        cached = self.job_store.get(key)
        if cached is None:
            return
        left = time_left(cached, self.clock.now())
        if left is None:
            return
        if left > 0:
            self.queue.add_after(key, left)
            return
        namespace, name = split_key(key)
        try:
            fresh = await self.client.jobs.get(name, namespace)
        except NotFoundError:
            return
        left = time_left(fresh, self.clock.now())
        if left is None:
            return
        if left > 0:
            self.queue.add_after(key, left)
            return
        log.info("cleaning up job %s: finished %ss ago", key, fresh.spec.ttlSecondsAfterFinished)
        try:
            await self.client.jobs.delete(
                name, namespace, uid=fresh.metadata.uid, propagation_policy="Foreground"
            )
        except (NotFoundError, PreconditionFailedError):
            return
