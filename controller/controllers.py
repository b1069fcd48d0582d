"""The table of controllers the controller manager can run, as kube-controller-manager's.

Each row is a `ControllerDescriptor`: kube's canonical name ("replicaset-controller"), its
aliases (the older short names `--controllers` also takes, "replicaset"), and an `init(ctx)`
that builds the controller from the shared informers in `ctx`, registers its informer handlers
and returns its work queues with their sync functions and worker counts (`Running`), or None
when its configuration leaves it nothing to do (kube's "Skipping controller": node IPAM without
--allocate-node-cidrs, the token controller without a signing key, the CA publisher without a
root CA). A new controller is one init function and one row in `CONTROLLERS`.

`--controllers` (kube's flag) is a list of `*` (every controller on by default), `name` and
`-name`; the first entry naming a controller decides, and without one `*` decides
(`enabled()`). Names and aliases are both accepted.

Concurrency: init functions run one after another on the manager's event loop before any
informer starts, so handlers are in place before the first list is delivered.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.clusterroleaggregation import ClusterRoleAggregationController
from controller.customresources import CustomResourceAPI, custom_kind_key
from controller.daemonset import DaemonSetController
from controller.deployment import DeploymentController
from controller.discovery import Discovery, DiscoveryError, kinds_served, served_services
from controller.disruption import DisruptionController
from controller.endpoints import EndpointsController
from controller.endpointslice import EndpointSliceController
from controller.endpointslicemirroring import EndpointSliceMirroringController
from controller.garbagecollector import GarbageCollector
from controller.job import JobController
from controller.metrics import Metrics
from controller.namespace import NamespaceController
from controller.nodeipam import CIDRSet, NodeIPAMController
from controller.nodelifecycle import NodeLifecycleController
from controller.replicaset import ReplicaSetController
from controller.rootcacert import RootCACertPublisher
from controller.serviceaccount import ServiceAccountsController
from controller.servicelb import AddressPool, ServiceLBController
from controller.tokens import TokensController
from controller.ttlafterfinished import TTLAfterFinishedController
from tinykube import kinds
from tinykube.clock import Clock
from tinykube.errors import NotFoundError
from tinykube.events import EventRecorder
from tinykube.informer import Informer, InformerFactory
from tinykube.workqueue import WorkQueue

if TYPE_CHECKING:
    from controller.settings import Settings
    from tinykube.client import Client

log = logging.getLogger(__name__)

Sync = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Workers:
    """`count` workers draining `queue` through `sync` (client-go's processNextWorkItem)."""

    name: str  # metrics label and task name
    queue: WorkQueue[str]
    sync: Sync
    count: int


@dataclass
class Running:
    """What an init hands the manager: its queues' workers and any periodic loops."""

    workers: list[Workers] = field(default_factory=list)
    loops: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)


class ControllerContext:
    """What every init gets (kube's ControllerContext): the client, the settings, the shared
    informer factory, the clock, Event recorders by source component, the metrics."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        informers: InformerFactory,
        *,
        clock: Clock,
        metrics: Metrics,
        discovery: Discovery,
    ) -> None:
        self.client = client
        self.settings = settings
        self.informers = informers
        self.clock = clock
        self.metrics = metrics
        self.discovery = discovery
        self._recorders: dict[str, EventRecorder] = {}
        self._host = socket.gethostname()

    def recorder(self, component: str) -> EventRecorder:
        """The Event recorder whose Events carry `component` as their source (the From
        column of `kubectl describe`), one per component."""
        rec = self._recorders.get(component)
        if rec is None:
            rec = self._recorders[component] = EventRecorder(
                self.client, component, host=self._host
            )
        return rec

    def queue(self, name: str, metric: str) -> WorkQueue[str]:
        """A work queue named `name` whose depth is exported under `metric`."""
        queue: WorkQueue[str] = WorkQueue(self.clock, name=name)
        self.metrics.track_queue(metric, queue.__len__)
        return queue


Init = Callable[[ControllerContext], Awaitable[Running | None]]


@dataclass(frozen=True)
class ControllerDescriptor:
    name: str  # kube's canonical name
    aliases: tuple[str, ...]  # older names --controllers also takes
    init: Init
    disabled_by_default: bool = False


# ---- the controllers ----------------------------------------------------------------------


async def start_replicaset(ctx: ControllerContext) -> Running:
    s, inf = ctx.settings, ctx.informers
    rss, pods = inf.for_kind(kinds.REPLICA_SET), inf.for_kind(kinds.POD)
    queue = ctx.queue("replicaset", "replicaset")
    c = ReplicaSetController(
        ctx.client,
        rss.store,
        pods.store,
        queue,
        clock=ctx.clock,
        recorder=ctx.recorder("replicaset-controller"),
    )
    rss.add_handler(c.on_rs_add, c.on_rs_update, c.on_rs_delete)
    pods.add_handler(c.on_pod_add, c.on_pod_update, c.on_pod_delete)
    return Running([Workers("replicaset", queue, c.sync, s.concurrent_replicaset_syncs)])


async def start_deployment(ctx: ControllerContext) -> Running:
    s, inf = ctx.settings, ctx.informers
    deployments, rss = inf.for_kind(kinds.DEPLOYMENT), inf.for_kind(kinds.REPLICA_SET)
    pods = inf.for_kind(kinds.POD)
    queue = ctx.queue("deployment", "deployment")
    c = DeploymentController(
        ctx.client,
        deployments.store,
        rss.store,
        pods.store,
        queue,
        clock=ctx.clock,
        recorder=ctx.recorder("deployment-controller"),
    )
    deployments.add_handler(c.on_deployment_add, c.on_deployment_update, c.on_deployment_delete)
    rss.add_handler(c.on_rs_add, c.on_rs_update, c.on_rs_delete)
    pods.add_handler(on_delete=c.on_pod_delete)
    return Running([Workers("deployment", queue, c.sync, s.concurrent_deployment_syncs)])


async def start_daemonset(ctx: ControllerContext) -> Running:
    s, inf = ctx.settings, ctx.informers
    dss, crs = inf.for_kind(kinds.DAEMON_SET), inf.for_kind(kinds.CONTROLLER_REVISION)
    pods, nodes = inf.for_kind(kinds.POD), inf.for_kind(kinds.NODE)
    queue = ctx.queue("daemonset", "daemonset")
    c = DaemonSetController(
        ctx.client,
        dss.store,
        pods.store,
        nodes.store,
        crs.store,
        queue,
        clock=ctx.clock,
        recorder=ctx.recorder("daemonset-controller"),
    )
    dss.add_handler(c.on_ds_add, c.on_ds_update, c.on_ds_delete)
    pods.add_handler(c.on_pod_add, c.on_pod_update, c.on_pod_delete)
    nodes.add_handler(c.on_node_add, c.on_node_update, c.on_node_delete)
    crs.add_handler(c.on_history_add, c.on_history_update, c.on_history_delete)
    return Running([Workers("daemonset", queue, c.sync, s.concurrent_daemonset_syncs)])


async def start_job(ctx: ControllerContext) -> Running:
    s, inf = ctx.settings, ctx.informers
    jobs, pods = inf.for_kind(kinds.JOB), inf.for_kind(kinds.POD)
    queue = ctx.queue("job", "job")
    orphans: WorkQueue[str] = WorkQueue(ctx.clock, name="job-orphan-pod")
    c = JobController(
        ctx.client,
        jobs.store,
        pods.store,
        queue,
        orphans,
        clock=ctx.clock,
        recorder=ctx.recorder("job-controller"),
        backoff_base=s.job_backoff_base,
        backoff_max=s.job_backoff_max,
    )
    jobs.add_handler(c.on_job_add, c.on_job_update, c.on_job_delete)
    pods.add_handler(c.on_pod_add, c.on_pod_update, c.on_pod_delete)
    return Running(
        [
            Workers("job", queue, c.sync, s.concurrent_job_syncs),
            Workers("job-orphan-pod", orphans, c.sync_orphan_pod, 1),
        ]
    )


async def start_garbage_collector(ctx: ControllerContext) -> Running:
    """Kube's garbage collector over every kind the API serves, custom kinds included
    (discovered, and looked for again every `gc_resync_period` as kube's collector resyncs its
    monitors, and at once when a CRD changes, so a kind served later is collected within
    moments and a deleted CRD's kind is dropped)."""
    s, inf = ctx.settings, ctx.informers
    queue = ctx.queue("garbagecollector", "garbagecollector")
    gc = GarbageCollector(ctx.client, {}, queue)
    # The custom kinds' informers are the collector's own (kube's GC monitors): made when a
    # CRD's kind appears, stopped when it goes.
    custom: dict[str, tuple[str, asyncio.Task[None]]] = {}  # kind -> (version, informer)
    wake = asyncio.Event()
    crds: Informer[Any] | None = None

    def add_custom_kind(kind: Any) -> None:
        api = CustomResourceAPI(ctx.client, kind)
        key = custom_kind_key(kind.kind, kind.group)

        # The kind stops being served when its CRD goes: its watch ends and the next one is
        # NotFound. That is news for discovery (which drops the kind), not a failure to log.
        async def watch(resource_version: str) -> AsyncIterator[Any]:
            try:
                async for event in api.watch(resource_version=resource_version):
                    yield event
            except NotFoundError:
                wake.set()

        async def list_all() -> Any:
            try:
                return await api.list()
            except NotFoundError:
                wake.set()
                raise

        informer: Informer[Any] = Informer(
            list_all,
            watch,
            clock=ctx.clock,
            name=api.name,
            on_handler_error=inf.on_handler_error,
            transform=inf.transform,
        )
        gc.add_kind(
            key, informer.store, api, namespaced=kind.namespaced, has_synced=informer.has_synced
        )
        informer.add_handler(*gc.handlers(key))
        custom[key] = (kind.version, informer.start())
        log.info("garbage collector: collecting %s", key)

    async def watch_kinds() -> bool:
        """Watch every kind served now and drop the custom kinds no longer served; False if an
        Established CRD's kind is not served yet (the apiserver is a moment behind)."""
        try:
            services = await served_services(ctx.client.channel, ctx.discovery.timeout)
        except DiscoveryError as exc:
            if gc.kinds():
                raise
            log.warning("%s; watching every known kind", exc)
            services = {k.service for k in kinds.ALL_KINDS}
        for info in ctx.discovery.collectable(kinds_served(services)):
            if gc.knows(info.kind):
                continue
            informer = inf.for_kind(info)
            api = ctx.client.resource(info)
            gc.add_kind(
                info.kind,
                informer.store,
                api,
                namespaced=info.namespaced,
                has_synced=informer.has_synced,
            )
            informer.add_handler(*gc.handlers(info.kind))
        # One per kind: the preferred version (ListKinds lists each served version,
        # preferred first; with conversion None any of them reads every object).
        served: dict[str, Any] = {}
        versions: dict[str, set[str]] = {}
        for k in await ctx.discovery.custom_kinds(services):
            key = custom_kind_key(k.kind, k.group)
            served.setdefault(key, k)
            versions.setdefault(key, set()).add(k.version)
        for key in [k for k in custom if k not in served]:
            log.info("garbage collector: %s is no longer served", key)
            custom.pop(key)[1].cancel()
            gc.remove_kind(key)
        for key, kind in served.items():
            running = custom.get(key)
            if running is not None and running[0] not in versions[key]:
                running[1].cancel()  # its version is no longer served: watch another
                running = None
            if running is None:
                add_custom_kind(kind)
        if crds is None:
            return True
        wanted = {
            custom_kind_key(c.status.acceptedNames.kind, c.spec.group)
            for c in crds.store.list()
            if c.status.acceptedNames.kind
            and not c.metadata.HasField("deletionTimestamp")
            and any(x.type == "Established" and x.status == "True" for x in c.status.conditions)
        }
        return wanted <= set(served)

    await watch_kinds()
    if gc.knows(kinds.CUSTOM_RESOURCE_DEFINITION.kind):
        crds = inf.for_kind(kinds.CUSTOM_RESOURCE_DEFINITION)
        crds.add_handler(lambda _: wake.set(), lambda _o, _n: wake.set(), lambda _: wake.set())

    async def resync_kinds() -> None:
        period = s.gc_resync_period
        try:
            while True:
                await _sleep_or_wake(ctx.clock, period, wake)
                wake.clear()
                try:
                    complete = await watch_kinds()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning(
                        "garbage collector: rediscovery failed: %s: %s", type(exc).__name__, exc
                    )
                    complete = False
                inf.start()  # the informers of built-in kinds found just now
                period = s.gc_resync_period if complete else min(1.0, s.gc_resync_period)
        finally:
            for _version, task in custom.values():
                task.cancel()

    return Running(
        [Workers("garbagecollector", queue, gc.sync, s.concurrent_gc_syncs)], [resync_kinds]
    )


async def _sleep_or_wake(clock: Clock, seconds: float, wake: asyncio.Event) -> None:
    """Return after `seconds` on `clock`, or as soon as `wake` is set."""
    tasks = {asyncio.ensure_future(clock.sleep(seconds)), asyncio.ensure_future(wake.wait())}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def start_endpoints(ctx: ControllerContext) -> Running:
    inf = ctx.informers
    services, endpoints = inf.for_kind(kinds.SERVICE), inf.for_kind(kinds.ENDPOINTS)
    pods = inf.for_kind(kinds.POD)
    queue = ctx.queue("endpoints", "endpoints")
    c = EndpointsController(
        ctx.client.endpoints, services.store, pods.store, endpoints.store, queue
    )
    services.add_handler(c.on_service_add, c.on_service_update, c.on_service_delete)
    pods.add_handler(c.on_pod_add, c.on_pod_update, c.on_pod_delete)
    return Running([Workers("endpoints", queue, c.sync, ctx.settings.concurrent_endpoint_syncs)])


async def start_endpointslice(ctx: ControllerContext) -> Running:
    s, inf = ctx.settings, ctx.informers
    services, slices = inf.for_kind(kinds.SERVICE), inf.for_kind(kinds.ENDPOINT_SLICE)
    pods, nodes = inf.for_kind(kinds.POD), inf.for_kind(kinds.NODE)
    queue = ctx.queue("endpoint_slice", "endpointslice")
    c = EndpointSliceController(
        ctx.client.endpoint_slices,
        services.store,
        pods.store,
        nodes.store,
        slices.store,
        queue,
        max_endpoints_per_slice=s.max_endpoints_per_slice,
    )
    services.add_handler(c.on_service_add, c.on_service_update, c.on_service_delete)
    pods.add_handler(c.on_pod_add, c.on_pod_update, c.on_pod_delete)
    nodes.add_handler(on_update=c.on_node_update)
    slices.add_handler(c.on_slice_add, c.on_slice_update, c.on_slice_delete)
    n = s.concurrent_service_endpoint_syncs
    return Running([Workers("endpointslice", queue, c.sync, n)])


async def start_endpointslice_mirroring(ctx: ControllerContext) -> Running:
    inf = ctx.informers
    services, endpoints = inf.for_kind(kinds.SERVICE), inf.for_kind(kinds.ENDPOINTS)
    slices = inf.for_kind(kinds.ENDPOINT_SLICE)
    queue = ctx.queue("endpoint_slice_mirroring", "endpointslicemirroring")
    c = EndpointSliceMirroringController(
        ctx.client.endpoint_slices, services.store, endpoints.store, slices.store, queue
    )
    for informer in (services, endpoints):
        informer.add_handler(c.on_object, c.on_object_update, c.on_object)
    slices.add_handler(c.on_slice, c.on_slice_update, c.on_slice)
    # kube's --mirroring-concurrent-service-endpoint-syncs default
    return Running([Workers("endpointslicemirroring", queue, c.sync, 5)])


async def start_disruption(ctx: ControllerContext) -> Running:
    inf = ctx.informers
    pdbs, pods = inf.for_kind(kinds.POD_DISRUPTION_BUDGET), inf.for_kind(kinds.POD)
    rss = inf.for_kind(kinds.REPLICA_SET)
    queue = ctx.queue("disruption", "disruption")
    c = DisruptionController(
        ctx.client.pod_disruption_budgets,
        pdbs.store,
        pods.store,
        rss.store,
        queue,
        now=ctx.clock.now,
        recorder=ctx.recorder("controllermanager"),
    )
    pdbs.add_handler(c.on_pdb_add, c.on_pdb_update, c.on_pdb_delete)
    pods.add_handler(c.on_pod_add, c.on_pod_update, c.on_pod_delete)
    rss.add_handler(c.on_rs_add, c.on_rs_update, c.on_rs_delete)
    n = ctx.settings.concurrent_disruption_syncs
    return Running([Workers("disruption", queue, c.sync, n)])


async def start_node_ipam(ctx: ControllerContext) -> Running | None:
    s = ctx.settings
    if not s.allocate_node_cidrs:
        return None
    nodes = ctx.informers.for_kind(kinds.NODE)
    queue = ctx.queue("nodeipam", "nodeipam")
    c = NodeIPAMController(
        ctx.client,
        nodes.store,
        queue,
        CIDRSet(s.cluster_cidr, s.node_cidr_mask_size),
        recorder=ctx.recorder("cidrAllocator"),
    )
    nodes.add_handler(c.on_node, c.on_node_update, c.on_node_delete)
    return Running([Workers("nodeipam", queue, c.sync, 1)])


async def start_service_lb(ctx: ControllerContext) -> Running:
    """LoadBalancer Services' addresses from --service-lb-pool (controller/servicelb.py)."""
    s = ctx.settings
    services = ctx.informers.for_kind(kinds.SERVICE)
    queue = ctx.queue("service-lb", "service-lb")
    c = ServiceLBController(
        ctx.client,
        services.store,
        queue,
        AddressPool(s.service_lb_pool),
        lb_class=s.service_lb_class,
        recorder=ctx.recorder("service-lb-controller"),
    )
    services.add_handler(c.on_add, c.on_update, c.on_delete)
    return Running([Workers("service-lb", queue, c.sync, 1)])


async def start_ttl_after_finished(ctx: ControllerContext) -> Running:
    jobs = ctx.informers.for_kind(kinds.JOB)
    queue = ctx.queue("ttl_jobs_to_delete", "ttl-after-finished")
    c = TTLAfterFinishedController(ctx.client, jobs.store, queue, clock=ctx.clock)
    jobs.add_handler(c.on_job, c.on_job_update)
    n = ctx.settings.concurrent_ttl_after_finished_syncs
    return Running([Workers("ttl-after-finished", queue, c.sync, n)])


async def start_namespace(ctx: ControllerContext) -> Running:
    inf = ctx.informers
    namespaces, pods = inf.for_kind(kinds.NAMESPACE), inf.for_kind(kinds.POD)
    queue = ctx.queue("namespace", "namespace")
    c = NamespaceController(
        ctx.client.namespaces,
        namespaces.store,
        [],
        queue,
        clock=ctx.clock,
        discover=ctx.discovery.namespaced_contents,
    )
    namespaces.add_handler(c.on_namespace_add, c.on_namespace_update, c.on_namespace_delete)
    pods.add_handler(on_delete=c.on_content_delete)
    n = ctx.settings.concurrent_namespace_syncs
    return Running([Workers("namespace", queue, c.sync, n)])


async def start_serviceaccount(ctx: ControllerContext) -> Running:
    inf = ctx.informers
    namespaces, accounts = inf.for_kind(kinds.NAMESPACE), inf.for_kind(kinds.SERVICE_ACCOUNT)
    queue = ctx.queue("serviceaccount", "serviceaccount")
    c = ServiceAccountsController(
        ctx.client.service_accounts, namespaces.store, accounts.store, queue
    )
    namespaces.add_handler(c.on_namespace_add, c.on_namespace_update)
    accounts.add_handler(on_delete=c.on_account_delete)
    # One worker, as kube-controller-manager runs this controller.
    return Running([Workers("serviceaccount", queue, c.sync, 1)])


async def start_serviceaccount_token(ctx: ControllerContext) -> Running | None:
    s = ctx.settings
    if s.service_account_key is None:
        return None
    secrets = ctx.informers.for_kind(kinds.SECRET)
    accounts = ctx.informers.for_kind(kinds.SERVICE_ACCOUNT)
    queue = ctx.queue("serviceaccount-token", "serviceaccount-token")
    c = TokensController(
        ctx.client.secrets,
        secrets.store,
        accounts.store,
        queue,
        key=s.service_account_key,
        root_ca=s.root_ca,
    )
    secrets.add_handler(c.on_secret, c.on_secret_update)
    accounts.add_handler(c.on_account, c.on_account_update, c.on_account)
    return Running([Workers("serviceaccount-token", queue, c.sync, 1)])


async def start_root_ca_cert_publisher(ctx: ControllerContext) -> Running | None:
    s = ctx.settings
    if not s.root_ca:
        return None
    namespaces = ctx.informers.for_kind(kinds.NAMESPACE)
    config_maps = ctx.informers.for_kind(kinds.CONFIG_MAP)
    queue = ctx.queue("root_ca_cert_publisher", "root-ca-cert-publisher")
    c = RootCACertPublisher(
        ctx.client.config_maps, namespaces.store, config_maps.store, queue, root_ca=s.root_ca
    )
    namespaces.add_handler(c.on_namespace_add, c.on_namespace_update)
    config_maps.add_handler(c.on_config_map, c.on_config_map_update, c.on_config_map)
    return Running([Workers("root-ca-cert-publisher", queue, c.sync, 1)])


async def start_clusterrole_aggregation(ctx: ControllerContext) -> Running:
    roles = ctx.informers.for_kind(kinds.CLUSTER_ROLE)
    queue = ctx.queue("clusterrole-aggregation", "clusterrole-aggregation")
    c = ClusterRoleAggregationController(ctx.client.cluster_roles, roles.store, queue)
    roles.add_handler(c.on_add, c.on_update, c.on_delete)
    return Running([Workers("clusterrole-aggregation", queue, c.sync, 1)])


async def start_node_lifecycle(ctx: ControllerContext) -> Running:
    s, inf = ctx.settings, ctx.informers
    nodes, pods = inf.for_kind(kinds.NODE), inf.for_kind(kinds.POD)
    leases = inf.for_kind(kinds.LEASE)  # read in kube-node-lease
    c = NodeLifecycleController(
        ctx.client,
        nodes.store,
        leases.store,
        pods.store,
        clock=ctx.clock,
        recorder=ctx.recorder("node-controller"),
        grace_period=s.node_monitor_grace_period,
        default_unreachable_toleration=s.default_unreachable_toleration_seconds,
        default_not_ready_toleration=s.default_not_ready_toleration_seconds,
        eviction_rate=s.node_eviction_rate,
        secondary_eviction_rate=s.secondary_node_eviction_rate,
        large_cluster_threshold=s.large_cluster_size_threshold,
        unhealthy_zone_threshold=s.unhealthy_zone_threshold,
        on_eviction=ctx.metrics.evictions.inc,
        on_zone=ctx.metrics.observe_zone,
    )

    async def monitor_loop() -> None:
        while True:
            try:
                await c.monitor()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node lifecycle monitor failed")
            await ctx.clock.sleep(s.node_monitor_period)

    return Running(loops=[monitor_loop])


# kube's names (cmd/kube-controller-manager/names) and the aliases its --controllers takes;
# "endpoints" was tinykube's own name for the endpoints controller.
CONTROLLERS: tuple[ControllerDescriptor, ...] = (
    ControllerDescriptor("replicaset-controller", ("replicaset",), start_replicaset),
    ControllerDescriptor("deployment-controller", ("deployment",), start_deployment),
    ControllerDescriptor("daemonset-controller", ("daemonset",), start_daemonset),
    ControllerDescriptor("job-controller", ("job",), start_job),
    ControllerDescriptor(
        "garbage-collector-controller", ("garbagecollector",), start_garbage_collector
    ),
    ControllerDescriptor("endpoints-controller", ("endpoint", "endpoints"), start_endpoints),
    ControllerDescriptor("endpointslice-controller", ("endpointslice",), start_endpointslice),
    ControllerDescriptor(
        "endpointslice-mirroring-controller",
        ("endpointslicemirroring",),
        start_endpointslice_mirroring,
    ),
    ControllerDescriptor("disruption-controller", ("disruption",), start_disruption),
    ControllerDescriptor("namespace-controller", ("namespace",), start_namespace),
    ControllerDescriptor("serviceaccount-controller", ("serviceaccount",), start_serviceaccount),
    ControllerDescriptor(
        "serviceaccount-token-controller", ("serviceaccount-token",), start_serviceaccount_token
    ),
    ControllerDescriptor(
        "root-ca-certificate-publisher-controller",
        ("root-ca-cert-publisher",),
        start_root_ca_cert_publisher,
    ),
    ControllerDescriptor(
        "ttl-after-finished-controller", ("ttl-after-finished",), start_ttl_after_finished
    ),
    ControllerDescriptor(
        "clusterrole-aggregation-controller",
        ("clusterrole-aggregation",),
        start_clusterrole_aggregation,
    ),
    ControllerDescriptor("node-lifecycle-controller", ("nodelifecycle",), start_node_lifecycle),
    ControllerDescriptor("node-ipam-controller", ("nodeipam",), start_node_ipam),
    ControllerDescriptor("service-lb-controller", ("service-lb", "service"), start_service_lb),
)


def canonical_names(table: Sequence[ControllerDescriptor] = CONTROLLERS) -> dict[str, str]:
    """Every name and alias -> the canonical name; raises ValueError on a clash."""
    out: dict[str, str] = {}
    for d in table:
        for name in (d.name, *d.aliases):
            if name in out:
                raise ValueError(f"controller name {name!r} is used twice")
            out[name] = d.name
    return out


def check_selection(
    selection: Sequence[str], table: Sequence[ControllerDescriptor] = CONTROLLERS
) -> None:
    """Raise ValueError naming the first entry of a --controllers list that is not `*`, a
    known controller or alias, or one with a leading `-`."""
    known = canonical_names(table)
    for entry in selection:
        if entry == "*":
            continue
        if entry.removeprefix("-") not in known:
            raise ValueError(
                f'"{entry}" is not in the list of known controllers: '
                + ", ".join(sorted(d.name for d in table))
            )


def enabled(
    selection: Sequence[str],
    descriptor: ControllerDescriptor,
    table: Sequence[ControllerDescriptor] = CONTROLLERS,
) -> bool:
    """kube's IsControllerEnabled: the first entry naming the controller (by name or alias,
    `-` for off) decides; else `*` turns on what is on by default; else it is off."""
    known = canonical_names(table)
    star = False
    for entry in selection:
        if entry == "*":
            star = True
            continue
        off = entry.startswith("-")
        if known.get(entry.removeprefix("-")) == descriptor.name:
            return not off
    return star and not descriptor.disabled_by_default


def enabled_controllers(
    selection: Sequence[str], table: Sequence[ControllerDescriptor] = CONTROLLERS
) -> list[ControllerDescriptor]:
    return [d for d in table if enabled(selection, d, table)]
