"""The controller manager process: leader election, informers, work queues, controllers.

`ControllerManager.start()` serves gRPC health on the bind address and starts `run()`, which
campaigns for the Lease kube-system/tinykube-controller-manager. While leading it is shaped like
kube-controller-manager's Run: a shared informer factory (one informer per kind, made when the
first controller asks for it, tinykube/informer.py), then every controller `--controllers`
enables from the table in controller/controllers.py is initialised (it takes its informers
from the factory, registers its handlers and hands back its work queues, worker counts and
loops), then the factory starts every informer, workers start once every cache has synced (so
nothing acts on a partial picture), N worker tasks per queue (never the same key twice at once:
the WorkQueue guarantees it). Leadership lost: everything is cancelled and the manager
campaigns again with fresh caches (in-memory expectations must not survive a term in which
another leader acted).

Concurrency: a single asyncio event loop; controllers share the informers' stores by reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from google.protobuf.message import Message

from controller.controllers import ControllerContext, Running, enabled_controllers
from controller.discovery import Discovery
from controller.metrics import Metrics
from controller.settings import Settings
from tinykube.client import Client
from tinykube.clock import Clock
from tinykube.events import WARNING, EventRecorder
from tinykube.informer import InformerFactory, without_managed_fields
from tinykube.leaderelection import LeaderElector
from tinykube.serving import GrpcServer
from tinykube.workqueue import ShutDown, WorkQueue

log = logging.getLogger(__name__)


async def run_worker(
    name: str,
    queue: WorkQueue[str],
    sync: Callable[[str], Awaitable[None]],
    metrics: Metrics | None = None,
) -> None:
    """client-go's processNextWorkItem loop: success forgets the key, failure requeues it."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            key = await queue.get()
        except ShutDown:
            return
        started = loop.time()
        ok = False
        try:
            await sync(key)
            queue.forget(key)
            ok = True
        except asyncio.CancelledError:
            queue.done(key)
            raise
        except Exception as exc:
            log.warning("%s: sync %s failed (requeued): %s: %s", name, key, type(exc).__name__, exc)
            queue.add_rate_limited(key)
        queue.done(key)
        if metrics is not None:
            metrics.observe_sync(name, ok, loop.time() - started)


class ControllerManager:
    def __init__(self, settings: Settings, *, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self.server = GrpcServer(settings.bind_address, [], tls=settings.security.serving())
        self.metrics = Metrics()
        self.port = 0
        self._task: asyncio.Task[None] | None = None
        self.leading = asyncio.Event()

    async def start(self) -> int:
        self.port = await self.server.start()
        self.metrics.serve(self.settings.metrics_port, host=_host(self.settings.bind_address))
        self._task = asyncio.get_running_loop().create_task(self.run(), name="controller-manager")
        return self.port

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.server.stop(1.0)

    async def run(self) -> None:
        s = self.settings
        async with Client(s.apiserver, credentials=s.security.credentials()) as client:
            if not s.leader_elect:
                await self._lead(client)
                return
            while True:
                elector = LeaderElector(
                    client,
                    namespace=s.lease_namespace,
                    name=s.lease_name,
                    identity=s.identity,
                    lease_duration=s.lease_duration,
                    renew_deadline=s.renew_deadline,
                    retry_period=s.retry_period,
                    clock=self.clock,
                )
                try:
                    await elector.run(lambda: self._lead(client))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("leader election: %s: %s", type(exc).__name__, exc)
                self.leading.clear()
                self.metrics.leader.labels(name=s.lease_name).set(0)
                log.warning("leadership lost; campaigning again")
                await self.clock.sleep(s.retry_period)

    def _refused_by(self, recorder: EventRecorder) -> Callable[[Message, Exception], None]:
        """Report an object a controller's informer handler could not take (the informer logged
        it and kept its store as before): a metric and a Warning Event on the object."""

        def refused(obj: Message, exc: Exception) -> None:
            kind = type(obj).__name__
            self.metrics.informer_handler_errors.labels(kind).inc()
            recorder.emit(
                obj,
                WARNING,
                "FailedToCache",
                f"the controller manager cannot use this {kind}: {exc}",
            )

        return refused

    async def _lead(self, client: Client) -> None:
        s = self.settings
        log.info("%s: leading; --controllers=%s", s.identity, ",".join(s.controllers))
        # kube-controller-manager's factory drops managedFields (its `trim`): no controller
        # reads them, and a write carrying none keeps the stored ones, so the controllers'
        # Updates of cached objects lose nothing.
        factory = InformerFactory(client, clock=self.clock, transform=without_managed_fields)
        ctx = ControllerContext(
            client,
            s,
            factory,
            clock=self.clock,
            metrics=self.metrics,
            discovery=Discovery(client),
        )
        factory.on_handler_error = self._refused_by(ctx.recorder("kube-controller-manager"))
        running: list[Running] = []
        for descriptor in enabled_controllers(s.controllers):
            started = await descriptor.init(ctx)
            if started is None:
                log.info(
                    "skipping controller %s (its configuration leaves it nothing to do)",
                    descriptor.name,
                )
                continue
            log.info("started controller %s", descriptor.name)
            running.append(started)
        workers = [w for r in running for w in r.workers]
        try:
            factory.start()
            await factory.wait_for_cache_sync()
            log.info("caches synced; starting workers")
            self.leading.set()
            self.metrics.leader.labels(name=s.lease_name).set(1)
            async with asyncio.TaskGroup() as tg:
                for w in workers:
                    for i in range(w.count):
                        tg.create_task(
                            run_worker(w.name, w.queue, w.sync, self.metrics), name=f"{w.name}-{i}"
                        )
                for r in running:
                    for loop in r.loops:
                        tg.create_task(loop(), name=loop.__name__)
        finally:
            for w in workers:
                w.queue.shutdown()
            await factory.shutdown()


def _host(bind_address: str) -> str:
    """The host of a host:port listen address: metrics listen where the component does."""
    return bind_address.rsplit(":", 1)[0].strip("[]") if ":" in bind_address else bind_address
