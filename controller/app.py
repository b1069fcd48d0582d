"""The controller manager process: leader election, informers, work queues, controllers.

`ControllerManager.start()` serves gRPC health on the bind address and starts `run()`, which
campaigns for the Lease kube-system/tinykube-controller-manager. While leading it runs one
informer per kind (pods, replicasets, deployments, jobs, nodes, node leases, services, endpoints,
namespaces) shared by every controller (and PodDisruptionBudgets for the disruption
controller, ClusterRoles for the clusterrole-aggregation controller, ServiceAccounts for the
serviceaccount controllers, Secrets for the serviceaccount-token controller), one work queue per
queue-driven controller with N worker tasks each (never the same key twice at once: the
WorkQueue guarantees it), and the node lifecycle monitor loop. Workers start only after every
informer has synced, so nothing acts on a partial picture. Leadership lost: everything is
cancelled and the manager campaigns again with fresh caches (in-memory expectations must not
survive a term in which another leader acted).

Concurrency: a single asyncio event loop; controllers share the informers' stores by reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from google.protobuf.message import Message

from controller.clusterroleaggregation import ClusterRoleAggregationController
from controller.daemonset import DaemonSetController
from controller.deployment import DeploymentController
from controller.disruption import DisruptionController
from controller.endpoints import EndpointsController
from controller.endpointslice import EndpointSliceController
from controller.endpointslicemirroring import EndpointSliceMirroringController
from controller.garbagecollector import GarbageCollector
from controller.job import JobController
from controller.metrics import Metrics
from controller.namespace import NamespaceController
from controller.nodeipam import CIDRSet, NodeIPAMController
from controller.nodelifecycle import NODE_LEASE_NAMESPACE, NodeLifecycleController
from controller.replicaset import ReplicaSetController
from controller.rootcacert import RootCACertPublisher
from controller.serviceaccount import ServiceAccountsController
from controller.servicelb import AddressPool, ServiceLBController
from controller.settings import Settings
from controller.tokens import TokensController
from controller.ttlafterfinished import TTLAfterFinishedController
from tinykube import kinds
from tinykube.client import Client
from tinykube.clock import Clock
from tinykube.events import WARNING, EventRecorder
from tinykube.informer import Informer
from tinykube.leaderelection import LeaderElector
from tinykube.serving import GrpcServer
from tinykube.workqueue import ShutDown, WorkQueue

log = logging.getLogger(__name__)

# The source component each controller's Events carry, as kube-controller-manager's do
# (`kubectl describe rs` shows it in the From column).
EVENT_SOURCES = {
    "replicaset": "replicaset-controller",
    "deployment": "deployment-controller",
    "nodelifecycle": "node-controller",
    # objects an informer handler refused (see _refused_by)
    "controller-manager": "kube-controller-manager",
    "disruption": "controllermanager",
    "job": "job-controller",
    "daemonset": "daemonset-controller",
    "nodeipam": "cidrAllocator",
    "service-lb": "service-lb-controller",
}


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

    def _endpoint_slices(
        self,
        client: Client,
        pods: Informer[Any],
        nodes: Informer[Any],
        services: Informer[Any],
        slices: Informer[Any],
        informers: list[Informer[Any]],
        queues: list[WorkQueue[str]],
        workers: list[tuple[str, WorkQueue[str], Callable[[str], Awaitable[None]], int]],
    ) -> None:
        """The endpointslice and endpointslicemirroring controllers (and an endpoints
        informer for the latter)."""
        s = self.settings
        if "endpointslice" in s.controllers:
            queue: WorkQueue[str] = WorkQueue(self.clock, name="endpoint_slice")
            esc = EndpointSliceController(
                client.endpoint_slices,
                services.store,
                pods.store,
                nodes.store,
                slices.store,
                queue,
                max_endpoints_per_slice=s.max_endpoints_per_slice,
            )
            services.add_handler(esc.on_service_add, esc.on_service_update, esc.on_service_delete)
            pods.add_handler(esc.on_pod_add, esc.on_pod_update, esc.on_pod_delete)
            nodes.add_handler(on_update=esc.on_node_update)
            slices.add_handler(esc.on_slice_add, esc.on_slice_update, esc.on_slice_delete)
            queues.append(queue)
            self.metrics.track_queue("endpointslice", queue.__len__)
            n = s.concurrent_service_endpoint_syncs
            workers.append(("endpointslice", queue, esc.sync, n))
        if "endpointslicemirroring" in s.controllers:
            endpoints: Informer[Any] = Informer.for_resource(client.endpoints, clock=self.clock)
            informers.append(endpoints)
            mqueue: WorkQueue[str] = WorkQueue(self.clock, name="endpoint_slice_mirroring")
            emc = EndpointSliceMirroringController(
                client.endpoint_slices, services.store, endpoints.store, slices.store, mqueue
            )
            for inf in (services, endpoints):
                inf.add_handler(emc.on_object, emc.on_object_update, emc.on_object)
            slices.add_handler(emc.on_slice, emc.on_slice_update, emc.on_slice)
            queues.append(mqueue)
            self.metrics.track_queue("endpointslicemirroring", mqueue.__len__)
            # kube's --mirroring-concurrent-service-endpoint-syncs default
            workers.append(("endpointslicemirroring", mqueue, emc.sync, 5))

    async def _lead(self, client: Client) -> None:
        s = self.settings
        log.info("%s: leading; starting controllers %s", s.identity, ",".join(s.controllers))
        host = socket.gethostname()
        recorders = {
            name: EventRecorder(client, component, host=host)
            for name, component in EVENT_SOURCES.items()
        }
        pods: Informer[Any] = Informer.for_resource(client.pods, clock=self.clock)
        rss: Informer[Any] = Informer.for_resource(client.replica_sets, clock=self.clock)
        nodes: Informer[Any] = Informer.for_resource(client.nodes, clock=self.clock)
        leases: Informer[Any] = Informer.for_resource(
            client.leases, namespace=NODE_LEASE_NAMESPACE, clock=self.clock
        )
        informers = [pods, rss, nodes, leases]
        job_inf: Informer[Any] = Informer.for_resource(client.jobs, clock=self.clock)
        informers.append(job_inf)
        queues: list[WorkQueue[str]] = []
        workers: list[tuple[str, WorkQueue[str], Callable[[str], Awaitable[None]], int]] = []
        loops: list[Callable[[], Coroutine[Any, Any, None]]] = []

        if "replicaset" in s.controllers:
            rs_queue: WorkQueue[str] = WorkQueue(self.clock, name="replicaset")
            rsc = ReplicaSetController(
                client,
                rss.store,
                pods.store,
                rs_queue,
                clock=self.clock,
                recorder=recorders["replicaset"],
            )
            rss.add_handler(rsc.on_rs_add, rsc.on_rs_update, rsc.on_rs_delete)
            pods.add_handler(rsc.on_pod_add, rsc.on_pod_update, rsc.on_pod_delete)
            queues.append(rs_queue)
            self.metrics.track_queue("replicaset", rs_queue.__len__)
            workers.append(("replicaset", rs_queue, rsc.sync, s.concurrent_replicaset_syncs))

        deployments: Informer[Any] = Informer.for_resource(client.deployments, clock=self.clock)
        informers.append(deployments)
        if "deployment" in s.controllers:
            d_queue: WorkQueue[str] = WorkQueue(self.clock, name="deployment")
            dc_ = DeploymentController(
                client,
                deployments.store,
                rss.store,
                pods.store,
                d_queue,
                clock=self.clock,
                recorder=recorders["deployment"],
            )
            deployments.add_handler(
                dc_.on_deployment_add, dc_.on_deployment_update, dc_.on_deployment_delete
            )
            rss.add_handler(dc_.on_rs_add, dc_.on_rs_update, dc_.on_rs_delete)
            pods.add_handler(on_delete=dc_.on_pod_delete)
            queues.append(d_queue)
            self.metrics.track_queue("deployment", d_queue.__len__)
            workers.append(("deployment", d_queue, dc_.sync, s.concurrent_deployment_syncs))

        # DaemonSets and their ControllerRevisions: for the DaemonSet controller and the GC.
        dss: Informer[Any] = Informer.for_resource(client.daemon_sets, clock=self.clock)
        crs: Informer[Any] = Informer.for_resource(client.controller_revisions, clock=self.clock)
        if "daemonset" in s.controllers or "garbagecollector" in s.controllers:
            informers += [dss, crs]
        if "daemonset" in s.controllers:
            ds_queue: WorkQueue[str] = WorkQueue(self.clock, name="daemonset")
            dsc = DaemonSetController(
                client,
                dss.store,
                pods.store,
                nodes.store,
                crs.store,
                ds_queue,
                clock=self.clock,
                recorder=recorders["daemonset"],
            )
            dss.add_handler(dsc.on_ds_add, dsc.on_ds_update, dsc.on_ds_delete)
            pods.add_handler(dsc.on_pod_add, dsc.on_pod_update, dsc.on_pod_delete)
            nodes.add_handler(dsc.on_node_add, dsc.on_node_update, dsc.on_node_delete)
            crs.add_handler(dsc.on_history_add, dsc.on_history_update, dsc.on_history_delete)
            queues.append(ds_queue)
            self.metrics.track_queue("daemonset", ds_queue.__len__)
            workers.append(("daemonset", ds_queue, dsc.sync, s.concurrent_daemonset_syncs))

        # Services and EndpointSlices: for the endpointslice controllers and the GC (a Service
        # deleted in the foreground waits for its slices, which block its deletion).
        svc_inf: Informer[Any] = Informer.for_resource(client.services, clock=self.clock)
        slice_inf: Informer[Any] = Informer.for_resource(client.endpoint_slices, clock=self.clock)
        slice_users = ("endpointslice", "endpointslicemirroring", "garbagecollector")
        if any(c in s.controllers for c in slice_users):
            informers += [svc_inf, slice_inf]

        if "garbagecollector" in s.controllers:
            gc_queue: WorkQueue[str] = WorkQueue(self.clock, name="garbagecollector")
            gc = GarbageCollector(
                client,
                {
                    "Pod": pods.store,
                    "ReplicaSet": rss.store,
                    "Node": nodes.store,
                    "Job": job_inf.store,
                    "Deployment": deployments.store,
                    "DaemonSet": dss.store,
                    "ControllerRevision": crs.store,
                    "Service": svc_inf.store,
                    "EndpointSlice": slice_inf.store,
                },
                gc_queue,
                apis={
                    "Job": client.jobs,
                    "Deployment": client.deployments,
                    "DaemonSet": client.daemon_sets,
                    "ControllerRevision": client.controller_revisions,
                    "Service": client.services,
                    "EndpointSlice": client.endpoint_slices,
                },
            )
            svc_inf.add_handler(*gc.handlers("Service"))
            slice_inf.add_handler(*gc.handlers("EndpointSlice"))
            job_inf.add_handler(*gc.handlers("Job"))
            pods.add_handler(*gc.handlers("Pod"))
            rss.add_handler(*gc.handlers("ReplicaSet"))
            nodes.add_handler(*gc.handlers("Node"))
            deployments.add_handler(*gc.handlers("Deployment"))
            dss.add_handler(*gc.handlers("DaemonSet"))
            crs.add_handler(*gc.handlers("ControllerRevision"))
            queues.append(gc_queue)
            self.metrics.track_queue("garbagecollector", gc_queue.__len__)
            workers.append(("garbagecollector", gc_queue, gc.sync, s.concurrent_gc_syncs))

        if "endpoints" in s.controllers:
            services: Informer[Any] = Informer.for_resource(client.services, clock=self.clock)
            endpoints: Informer[Any] = Informer.for_resource(client.endpoints, clock=self.clock)
            informers += [services, endpoints]
            ep_queue: WorkQueue[str] = WorkQueue(self.clock, name="endpoints")
            epc = EndpointsController(
                client.endpoints, services.store, pods.store, endpoints.store, ep_queue
            )
            services.add_handler(epc.on_service_add, epc.on_service_update, epc.on_service_delete)
            pods.add_handler(epc.on_pod_add, epc.on_pod_update, epc.on_pod_delete)
            queues.append(ep_queue)
            self.metrics.track_queue("endpoints", ep_queue.__len__)
            workers.append(("endpoints", ep_queue, epc.sync, s.concurrent_endpoint_syncs))

        if "endpointslice" in s.controllers or "endpointslicemirroring" in s.controllers:
            self._endpoint_slices(
                client, pods, nodes, svc_inf, slice_inf, informers, queues, workers
            )

        if "disruption" in s.controllers:
            pdbs: Informer[Any] = Informer.for_resource(
                client.pod_disruption_budgets, clock=self.clock
            )
            informers.append(pdbs)
            pdb_queue: WorkQueue[str] = WorkQueue(self.clock, name="disruption")
            dc = DisruptionController(
                client.pod_disruption_budgets,
                pdbs.store,
                pods.store,
                rss.store,
                pdb_queue,
                now=self.clock.now,
                recorder=recorders["disruption"],
            )
            pdbs.add_handler(dc.on_pdb_add, dc.on_pdb_update, dc.on_pdb_delete)
            pods.add_handler(dc.on_pod_add, dc.on_pod_update, dc.on_pod_delete)
            rss.add_handler(dc.on_rs_add, dc.on_rs_update, dc.on_rs_delete)
            queues.append(pdb_queue)
            self.metrics.track_queue("disruption", pdb_queue.__len__)
            workers.append(("disruption", pdb_queue, dc.sync, s.concurrent_disruption_syncs))

        if "job" in s.controllers:
            job_queue: WorkQueue[str] = WorkQueue(self.clock, name="job")
            orphan_queue: WorkQueue[str] = WorkQueue(self.clock, name="job-orphan-pod")
            jc = JobController(
                client,
                job_inf.store,
                pods.store,
                job_queue,
                orphan_queue,
                clock=self.clock,
                recorder=recorders["job"],
                backoff_base=s.job_backoff_base,
                backoff_max=s.job_backoff_max,
            )
            job_inf.add_handler(jc.on_job_add, jc.on_job_update, jc.on_job_delete)
            pods.add_handler(jc.on_pod_add, jc.on_pod_update, jc.on_pod_delete)
            queues += [job_queue, orphan_queue]
            self.metrics.track_queue("job", job_queue.__len__)
            workers.append(("job", job_queue, jc.sync, s.concurrent_job_syncs))
            workers.append(("job-orphan-pod", orphan_queue, jc.sync_orphan_pod, 1))

        if "nodeipam" in s.controllers and s.allocate_node_cidrs:
            ipam_queue: WorkQueue[str] = WorkQueue(self.clock, name="nodeipam")
            ipam = NodeIPAMController(
                client,
                nodes.store,
                ipam_queue,
                CIDRSet(s.cluster_cidr, s.node_cidr_mask_size),
                recorder=recorders["nodeipam"],
            )
            nodes.add_handler(ipam.on_node, ipam.on_node_update, ipam.on_node_delete)
            queues.append(ipam_queue)
            self.metrics.track_queue("nodeipam", ipam_queue.__len__)
            workers.append(("nodeipam", ipam_queue, ipam.sync, 1))

        if "service-lb" in s.controllers:
            if svc_inf not in informers:
                informers.append(svc_inf)
            lb_queue: WorkQueue[str] = WorkQueue(self.clock, name="service-lb")
            lbc = ServiceLBController(
                client,
                svc_inf.store,
                lb_queue,
                AddressPool(s.service_lb_pool),
                lb_class=s.service_lb_class,
                recorder=recorders["service-lb"],
            )
            svc_inf.add_handler(lbc.on_add, lbc.on_update, lbc.on_delete)
            queues.append(lb_queue)
            self.metrics.track_queue("service-lb", lb_queue.__len__)
            workers.append(("service-lb", lb_queue, lbc.sync, 1))

        if "ttl-after-finished" in s.controllers:
            ttl_queue: WorkQueue[str] = WorkQueue(self.clock, name="ttl_jobs_to_delete")
            ttl = TTLAfterFinishedController(client, job_inf.store, ttl_queue, clock=self.clock)
            job_inf.add_handler(ttl.on_job, ttl.on_job_update)
            queues.append(ttl_queue)
            self.metrics.track_queue("ttl-after-finished", ttl_queue.__len__)
            n = s.concurrent_ttl_after_finished_syncs
            workers.append(("ttl-after-finished", ttl_queue, ttl.sync, n))

        publish_ca = "root-ca-cert-publisher" in s.controllers and bool(s.root_ca)
        if "namespace" in s.controllers or "serviceaccount" in s.controllers or publish_ca:
            namespaces: Informer[Any] = Informer.for_resource(client.namespaces, clock=self.clock)
            informers.append(namespaces)
        if "namespace" in s.controllers:
            ns_queue: WorkQueue[str] = WorkQueue(self.clock, name="namespace")
            # Every namespaced kind, so kinds added to tinykube.kinds are emptied too.
            contents = [(k, client.resource(k)) for k in kinds.ALL_KINDS if k.namespaced]
            nsc = NamespaceController(
                client.namespaces, namespaces.store, contents, ns_queue, clock=self.clock
            )
            namespaces.add_handler(
                nsc.on_namespace_add, nsc.on_namespace_update, nsc.on_namespace_delete
            )
            pods.add_handler(on_delete=nsc.on_content_delete)
            queues.append(ns_queue)
            self.metrics.track_queue("namespace", ns_queue.__len__)
            workers.append(("namespace", ns_queue, nsc.sync, s.concurrent_namespace_syncs))

        if "serviceaccount" in s.controllers or "serviceaccount-token" in s.controllers:
            accounts: Informer[Any] = Informer.for_resource(
                client.service_accounts, clock=self.clock
            )
            informers.append(accounts)
        if "serviceaccount" in s.controllers:
            sa_queue: WorkQueue[str] = WorkQueue(self.clock, name="serviceaccount")
            sac = ServiceAccountsController(
                client.service_accounts, namespaces.store, accounts.store, sa_queue
            )
            namespaces.add_handler(sac.on_namespace_add, sac.on_namespace_update)
            accounts.add_handler(on_delete=sac.on_account_delete)
            queues.append(sa_queue)
            self.metrics.track_queue("serviceaccount", sa_queue.__len__)
            # One worker, as kube-controller-manager runs this controller.
            workers.append(("serviceaccount", sa_queue, sac.sync, 1))

        if publish_ca:
            root_cms: Informer[Any] = Informer.for_resource(client.config_maps, clock=self.clock)
            informers.append(root_cms)
            ca_queue: WorkQueue[str] = WorkQueue(self.clock, name="root_ca_cert_publisher")
            cap = RootCACertPublisher(
                client.config_maps, namespaces.store, root_cms.store, ca_queue, root_ca=s.root_ca
            )
            namespaces.add_handler(cap.on_namespace_add, cap.on_namespace_update)
            root_cms.add_handler(cap.on_config_map, cap.on_config_map_update, cap.on_config_map)
            queues.append(ca_queue)
            self.metrics.track_queue("root-ca-cert-publisher", ca_queue.__len__)
            workers.append(("root-ca-cert-publisher", ca_queue, cap.sync, 1))

        if "serviceaccount-token" in s.controllers and s.service_account_key is not None:
            token_secrets: Informer[Any] = Informer.for_resource(client.secrets, clock=self.clock)
            informers.append(token_secrets)
            tok_queue: WorkQueue[str] = WorkQueue(self.clock, name="serviceaccount-token")
            tokc = TokensController(
                client.secrets,
                token_secrets.store,
                accounts.store,
                tok_queue,
                key=s.service_account_key,
                root_ca=s.root_ca,
            )
            token_secrets.add_handler(tokc.on_secret, tokc.on_secret_update)
            accounts.add_handler(tokc.on_account, tokc.on_account_update, tokc.on_account)
            queues.append(tok_queue)
            self.metrics.track_queue("serviceaccount-token", tok_queue.__len__)
            workers.append(("serviceaccount-token", tok_queue, tokc.sync, 1))

        if "clusterrole-aggregation" in s.controllers:
            cluster_roles: Informer[Any] = Informer.for_resource(
                client.cluster_roles, clock=self.clock
            )
            informers.append(cluster_roles)
            cra_queue: WorkQueue[str] = WorkQueue(self.clock, name="clusterrole-aggregation")
            crac = ClusterRoleAggregationController(
                client.cluster_roles, cluster_roles.store, cra_queue
            )
            cluster_roles.add_handler(crac.on_add, crac.on_update, crac.on_delete)
            queues.append(cra_queue)
            self.metrics.track_queue("clusterrole-aggregation", cra_queue.__len__)
            workers.append(("clusterrole-aggregation", cra_queue, crac.sync, 1))

        if "nodelifecycle" in s.controllers:
            nlc = NodeLifecycleController(
                client,
                nodes.store,
                leases.store,
                pods.store,
                clock=self.clock,
                recorder=recorders["nodelifecycle"],
                grace_period=s.node_monitor_grace_period,
                default_unreachable_toleration=s.default_unreachable_toleration_seconds,
                default_not_ready_toleration=s.default_not_ready_toleration_seconds,
                eviction_rate=s.node_eviction_rate,
                secondary_eviction_rate=s.secondary_node_eviction_rate,
                large_cluster_threshold=s.large_cluster_size_threshold,
                unhealthy_zone_threshold=s.unhealthy_zone_threshold,
                on_eviction=self.metrics.evictions.inc,
                on_zone=self.metrics.observe_zone,
            )

            async def monitor_loop() -> None:
                while True:
                    try:
                        await nlc.monitor()
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("node lifecycle monitor failed")
                    await self.clock.sleep(s.node_monitor_period)

            loops.append(monitor_loop)

        refused = self._refused_by(recorders["controller-manager"])
        for inf in informers:
            inf.on_handler_error = refused
        try:
            async with asyncio.TaskGroup() as tg:
                for inf in informers:
                    tg.create_task(inf.run(), name=f"informer-{inf.name}")
                await asyncio.gather(*(inf.wait_synced() for inf in informers))
                log.info("caches synced; starting workers")
                self.leading.set()
                self.metrics.leader.labels(name=s.lease_name).set(1)
                for name, queue, sync, n in workers:
                    for i in range(n):
                        tg.create_task(
                            run_worker(name, queue, sync, self.metrics), name=f"{name}-{i}"
                        )
                for loop in loops:
                    tg.create_task(loop(), name=loop.__name__)
        finally:
            for q in queues:
                q.shutdown()


def _host(bind_address: str) -> str:
    """The host of a host:port listen address: metrics listen where the component does."""
    return bind_address.rsplit(":", 1)[0].strip("[]") if ":" in bind_address else bind_address
