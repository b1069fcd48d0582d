"""The kubelet process: node agents, the pod informer, pod workers and the Kubelet gRPC service.

`Kubelet.start()` binds the gRPC server (health, reflection, `tinykube.v1.Kubelet`) and then
runs, on one event loop: the runtime's restore from disk, a Node informer and a Pod informer,
a `NodeAgent` per hosted node (registration, status loop, lease loop) and the `PodManager`.
With the process runtime the informers watch only this node (field selectors
`metadata.name=<node>` and `spec.nodeName=<node>`); with `--fake-nodes N` one informer each
covers every node and pod and events are filtered locally, so N nodes cost two watches, unless
`--fake-pod-watch-per-node` gives every hosted node its own pod informer (`spec.nodeName=<node>`,
the watch a real kubelet holds), for scale tests that want the apiserver to carry N of them.

Stopping leaves containers running, as the kubelet does: a restarted kubelet adopts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.message import Message

from kubelet.cri import CRIRuntime, PodDNS
from kubelet.envvars import EnvSources
from kubelet.fake import FakeRuntime
from kubelet.kuberuntime import KubeRuntime
from kubelet.metrics import Metrics
from kubelet.node import NodeAgent, NodeConfig
from kubelet.objectcache import ObjectCache
from kubelet.pods import PodManager
from kubelet.prober import ProbeManager
from kubelet.process import ProcessRuntime
from kubelet.runtime import Runtime
from kubelet.settings import Settings, machine_memory_kib
from kubelet.stats import StatsProvider
from kubelet.streaming import StreamingService
from kubelet.volumes import RestTokenMinter, rest_token_minter
from tinykube.client import Client
from tinykube.clock import Clock
from tinykube.containerd import write_cni_config
from tinykube.events import WARNING, EventRecorder
from tinykube.informer import Informer
from tinykube.kubeconfig import load as load_kubeconfig
from tinykube.serving import GrpcServer
from tinykube.v1 import kubelet_pb2_grpc, node_pb2, pod_pb2

log = logging.getLogger(__name__)

REGISTER_CONCURRENCY = 50
# How often the CRI runtime's container stats are read (kube's housekeeping interval).
STATS_PERIOD = 10.0
# How often a pod's volumes are rewritten besides the watches' changes (kube's pod resync).
VOLUME_RESYNC_SECONDS = 60.0


class Kubelet:
    def __init__(self, settings: Settings, *, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self.node_names = set(settings.node_names)
        self.runtime: Runtime
        self.metrics = Metrics()
        if settings.runtime == "cri":
            self.runtime = CRIRuntime(
                settings.root_dir,
                settings.container_runtime_endpoint,
                clock=self.clock,
                backoff_initial=settings.backoff_initial,
                backoff_max=settings.backoff_max,
                poll_interval=max(settings.poll_interval, 1.0),
                node_ip=settings.node_ip,
                cgroup_root=settings.cgroup_root,
                seccomp_default=settings.seccomp_default,
                dns=PodDNS(settings.cluster_dns, settings.cluster_domain, settings.resolv_conf),
                machine_memory=machine_memory_kib() * 1024,
                on_operation=lambda kind, seconds: self.metrics.runtime_operations.labels(
                    kind
                ).observe(seconds),
            )
        elif settings.runtime == "process":
            self.runtime = ProcessRuntime(
                settings.root_dir,
                clock=self.clock,
                backoff_initial=settings.backoff_initial,
                backoff_max=settings.backoff_max,
                poll_interval=settings.poll_interval,
                node_ip=settings.node_ip,
            )
        else:
            self.runtime = FakeRuntime(self.clock)
        self.pods: Informer[Any] | PodsPerNode | None = None
        self.server = GrpcServer(
            settings.bind_address, ["tinykube.v1.Kubelet"], tls=settings.security.serving()
        )
        service = StreamingService(
            self._get_pod,
            self.runtime,
            clock=self.clock,
            node_names=frozenset(self.node_names),
            idle_timeout=settings.streaming_connection_idle_timeout,
        )
        self.server.add(lambda s: kubelet_pb2_grpc.add_KubeletServicer_to_server(service, s))
        service.stats = StatsProvider(
            settings.node_name,
            settings.root_dir,
            self.runtime,
            lambda: self.pods.store.list() if self.pods is not None else [],
        )
        self.port = 0
        self.manager: PodManager | None = None
        self.ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _get_pod(self, namespace: str, name: str) -> pod_pb2.Pod | None:
        if self.pods is None:
            return None
        pod: pod_pb2.Pod | None = self.pods.store.get(f"{namespace}/{name}")
        if pod is None or pod.spec.nodeName not in self.node_names:
            return None
        return pod

    async def start(self) -> int:
        self.port = await self.server.start()
        self.metrics.serve(self.settings.metrics_port, host=_host(self.settings.bind_address))
        self._task = asyncio.get_running_loop().create_task(self.run(), name="kubelet")
        self._task.add_done_callback(_report_crash)
        return self.port

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.server.stop(1.0)

    def _refused_by(self, events: EventRecorder) -> Callable[[Message, Exception], None]:
        """Report an object an informer handler could not take (the informer logged it and kept
        its store as before): a metric and a Warning Event on the object."""

        def refused(obj: Message, exc: Exception) -> None:
            kind = type(obj).__name__
            self.metrics.informer_handler_errors.labels(kind).inc()
            events.emit(obj, WARNING, "FailedToCache", f"the kubelet cannot use this {kind}: {exc}")

        return refused

    async def run(self) -> None:
        s = self.settings
        runtime_version = ""
        if isinstance(self.runtime, CRIRuntime):
            version = await self.runtime.version()
            runtime_version = f"{version.runtime_name}://{version.runtime_version}"
            log.info(
                "CRI runtime %s at %s (API %s)",
                runtime_version,
                s.container_runtime_endpoint,
                version.runtime_api_version,
            )
        restored = self.runtime.load()
        if restored:
            log.info("restored %d pod(s) from %s", len(restored), s.root_dir)
        async with Client(s.apiserver, credentials=s.security.credentials()) as client:
            single = s.fake_nodes == 0
            node_selector = f"metadata.name={s.node_name}" if single else ""
            # A kubelet never sees unscheduled pods (kube's spec.nodeName=<node>); one process
            # hosting many (hollow) nodes takes every bound pod and keeps its own nodes'.
            pod_selector = f"spec.nodeName={s.node_name}" if single else "spec.nodeName!="
            nodes: Informer[Any] = Informer.for_resource(
                client.nodes, field_selector=node_selector, clock=self.clock
            )
            if s.fake_nodes and s.fake_pod_watch_per_node:
                self.pods = PodsPerNode(client, s.node_names, self.clock)
            else:
                self.pods = Informer.for_resource(
                    client.pods, field_selector=pod_selector, clock=self.clock
                )
            events = EventRecorder(client, "kubelet", host=s.node_name, clock=self.clock)
            # Containers' envFrom and valueFrom: ConfigMaps and Secrets by GET (the Node
            # authorizer allows those a pod bound to the node references), limits defaulted
            # to the node's allocatable as the informer has it.
            # Services, for the service variables (kube's kubelet watches them all).
            services: Informer[Any] = Informer.for_resource(client.services, clock=self.clock)
            self.runtime.env_sources = EnvSources(
                api=client,
                host_ip=lambda _node: s.node_ip,
                allocatable=lambda node: _allocatable(nodes.store.get(node)),
                services=lambda: services.store.list(),
            )
            if isinstance(self.runtime, KubeRuntime):
                # Volumes: ConfigMaps and Secrets by GET, tokens by TokenRequest over REST.
                volumes = self.runtime.volumes
                volumes.api = client

                # kube's watch-based ConfigMap/Secret managers: watch what the pods mount, wake
                # their workers on a change; the periodic rewrite is then kube's minute.
                def wake_pods(uids: set[str]) -> None:
                    for uid in uids:
                        manager.wake(uid)

                volumes.cache = ObjectCache(client, on_change=wake_pods, clock=self.clock)
                volumes.resync = VOLUME_RESYNC_SECONDS
                volumes.allocatable = lambda node: _allocatable(nodes.store.get(node))
                if s.security.kubeconfig:
                    config = load_kubeconfig(s.security.kubeconfig)
                    volumes.mint_token = rest_token_minter(
                        config.server, config.credentials.ssl_context()
                    )

            refused = self._refused_by(events)
            nodes.on_handler_error = refused
            self.pods.on_handler_error = refused
            probes = None
            if isinstance(self.runtime, ProcessRuntime):
                probes = ProbeManager(
                    clock=self.clock,
                    events=events,
                    on_change=lambda uid: manager.wake(uid),
                    exec_context=self.runtime.exec_context,
                    pod_ip=lambda _pod: s.node_ip,
                )
            elif isinstance(self.runtime, CRIRuntime):
                # Exec probes run in the container (ExecSync); the others reach the pod's IP.
                probes = ProbeManager(
                    clock=self.clock,
                    events=events,
                    on_change=lambda uid: manager.wake(uid),
                    pod_ip=self.runtime.pod_ip,
                    exec_runner=self.runtime.exec_probe,
                )
            manager = PodManager(
                client,
                self.runtime,
                self.node_names,
                lambda _node: s.node_ip,
                clock=self.clock,
                events=events,
                on_event=lambda reason: self.metrics.container_events.labels(reason=reason).inc(),
                probes=probes,
                on_pod_started=self.metrics.pod_start.observe,
                write_streams=s.write_streams,
            )
            self.metrics.track_pods(lambda: len(manager.workers))
            self.manager = manager
            self.pods.add_handler(manager.on_add, manager.on_update, manager.on_delete)
            # The counters looked up once: 5,000 hollow nodes renew 500 times a second.
            renewals = {
                ok: self.metrics.lease_renewals.labels(result="success" if ok else "error")
                for ok in (True, False)
            }

            def renewed(ok: bool) -> None:
                renewals[ok].inc()

            agents = [
                NodeAgent(
                    client,
                    NodeConfig(
                        name=name,
                        node_ip=s.node_ip,
                        kubelet_port=self.port,
                        capacity=dict(s.capacity),
                        labels=dict(s.labels),
                        taints=list(s.taints),
                        runtime=s.runtime,
                        runtime_version=runtime_version,
                        lease_duration_seconds=s.node_lease_duration_seconds,
                        status_update_frequency=s.node_status_update_frequency,
                        status_report_frequency=s.node_status_report_frequency,
                        # hollow nodes start together; real kubelets at independent times
                        first_report_spread=0.5 if s.fake_nodes > 1 else 0.0,
                        write_streams=s.write_streams,
                    ),
                    lambda name=name: nodes.store.get(name),  # type: ignore[misc]
                    clock=self.clock,
                    on_renewal=renewed,
                    images=(
                        self.runtime.node_images if isinstance(self.runtime, CRIRuntime) else None
                    ),
                )
                for name in s.node_names
            ]
            limit = asyncio.Semaphore(REGISTER_CONCURRENCY)

            async def register(agent: NodeAgent) -> None:
                async with limit:
                    await agent.register()

            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(nodes.run(), name="informer-nodes")
                    await asyncio.gather(*(register(a) for a in agents))
                    log.info("registered node(s): %s", ", ".join(sorted(self.node_names)[:5]))
                    for agent in agents:
                        tg.create_task(agent.lease_loop(), name=f"lease-{agent.cfg.name}")
                        tg.create_task(agent.status_loop(), name=f"status-{agent.cfg.name}")
                    if isinstance(self.runtime, CRIRuntime):
                        tg.create_task(self._pod_network(nodes), name="pod-network")
                        tg.create_task(self._resource_stats(self.runtime), name="stats")
                    if isinstance(self.runtime, KubeRuntime):
                        # The service variables need the Services before pods start.
                        tg.create_task(services.run(), name="informer-services")
                        await services.wait_synced()
                    tg.create_task(self.pods.run(), name="informer-pods")
                    await self.pods.wait_synced()
                    live = {p.metadata.uid for p in self.pods.store.list()}
                    await manager.cleanup_orphans(live)
                    self.ready.set()
            finally:
                await manager.stop()
                if isinstance(self.runtime, KubeRuntime):
                    if self.runtime.volumes.cache:
                        await self.runtime.volumes.cache.close()
                    if isinstance(self.runtime.volumes.mint_token, RestTokenMinter):
                        await self.runtime.volumes.mint_token.close()

    async def _resource_stats(self, runtime: CRIRuntime) -> None:
        """Refresh the resource metrics from the runtime's container stats every 10 s."""
        while True:
            try:
                self.metrics.resources.snapshot = await runtime.container_stats()
            except Exception as exc:
                log.warning("container stats: %s", exc)
            await self.clock.sleep(STATS_PERIOD)

    async def _pod_network(self, nodes: Informer[Any]) -> None:
        """Write the node's CNI network config once its pod CIDR is known (--pod-cidr, else
        the Node's spec.podCIDR from the node IPAM controller), and again if it changes."""
        s = self.settings
        conf_dir = s.cni_conf_dir or s.root_dir / "cni" / "net.d"
        written = ""
        while True:
            node = nodes.store.get(s.node_name)
            cidr = s.pod_cidr or (node.spec.podCIDR if node is not None else "")
            if cidr and cidr != written:
                path = write_cni_config(conf_dir, cidr, s.cni_bridge, s.root_dir / "cni" / "ipam")
                log.info("pod network %s on bridge %s: %s", cidr, s.cni_bridge, path)
                written = cidr
            await self.clock.sleep(1.0)


def _allocatable(node: node_pb2.Node | None) -> Mapping[str, str]:
    return node.status.allocatable if node is not None else {}


def _report_crash(task: asyncio.Task[None]) -> None:
    """A kubelet whose main loop died must say so: it stays up (health, logs), doing nothing."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.critical("kubelet main loop failed; pods are no longer managed", exc_info=exc)


def _host(bind_address: str) -> str:
    """The host of a host:port listen address: metrics listen where the component does."""
    return bind_address.rsplit(":", 1)[0].strip("[]") if ":" in bind_address else bind_address


class _MergedPods:
    """The pods of every per-node informer, read as one store (by key, or all)."""

    def __init__(self, informers: list[Informer[Any]]) -> None:
        self._informers = informers

    def get(self, key: str) -> Any:
        for informer in self._informers:
            pod = informer.store.get(key)
            if pod is not None:
                return pod
        return None

    def list(self) -> list[Any]:
        return [pod for informer in self._informers for pod in informer.store.list()]


class PodsPerNode:
    """One pod informer per hosted node (field selector `spec.nodeName=<node>`, each its own
    list and watch as a real kubelet's), used as the one pod informer: the same handlers on
    each, lookups across their stores."""

    def __init__(self, client: Client, node_names: list[str], clock: Clock) -> None:
        self.informers: list[Informer[Any]] = [
            Informer.for_resource(
                client.pods,
                field_selector=f"spec.nodeName={name}",
                clock=clock,
                name=f"pods-{name}",
            )
            for name in node_names
        ]
        self.store = _MergedPods(self.informers)

    @property
    def on_handler_error(self) -> Callable[[Any, Exception], object] | None:
        return self.informers[0].on_handler_error if self.informers else None

    @on_handler_error.setter
    def on_handler_error(self, fn: Callable[[Any, Exception], object] | None) -> None:
        for informer in self.informers:
            informer.on_handler_error = fn

    def add_handler(
        self,
        on_add: Callable[[Any], object] | None = None,
        on_update: Callable[[Any, Any], object] | None = None,
        on_delete: Callable[[Any], object] | None = None,
    ) -> None:
        for informer in self.informers:
            informer.add_handler(on_add, on_update, on_delete)

    async def run(self) -> None:
        await asyncio.gather(*(informer.run() for informer in self.informers))

    async def wait_synced(self) -> None:
        await asyncio.gather(*(informer.wait_synced() for informer in self.informers))
