"""The apiserver process object: wires storage, watch caches and services, and runs them.

`APIServer(settings).start()` connects to etcd (lazily, retried by gRPC), starts one watch
cache task per kind, serves every kind plus health and reflection, and returns the bound port
once the caches have synced (or after a bounded wait if etcd is down: health then reports
NOT_SERVING until it is reachable). Background tasks on the same event loop: the caches, a
health monitor (SERVING iff etcd answers and every cache is synced and watching) and the
periodic etcd compaction. `stop()` drains in-flight RPCs and cancels the tasks.

Kubernetes' REST API (apiserver/rest) is served beside gRPC on `settings.rest_port` at the
same host, by aiohttp on the same event loop and over the same services; its health
endpoints report the same etcd and cache checks as the gRPC health service.

Readiness waits for the bootstrap RBAC policy (apiserver/auth/reconcile.py), as kube-apiserver's
post-start hook `rbac/bootstrap-roles` holds /readyz and /healthz: the check
`poststarthook/rbac/bootstrap-roles` fails, and gRPC health stays NOT_SERVING, until one
reconcile has completed (retried every second while it fails, for up to 30 s: then the
apiserver sets `fatal` and its process exits 255, as kube's hook ends kube-apiserver; it never
fails again after one success). So a component waiting for SERVING never starts to be
refused for want of its ClusterRoleBinding. /livez leaves it out (kube's livez has it too, but
behind --livez-grace-period; tinykube's livez is only about this process).

TLS (tinykube/tls.py): with `tls_cert_file` both front ends serve the certificate, gRPC
requiring and REST asking for a client certificate of `client_ca_file`; etcd is dialled with
`etcd_*file`, kubelets (the log proxy) with `kubelet_client_*`. Without certificate settings
everything is plaintext (`--insecure`). On TLS, `enforcer` (apiserver/auth/filters.py)
authenticates every request on both front ends (`authenticator`), applies impersonation and
authorizes it with `authorizer` (Node, then RBAC); in plaintext nothing is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from aiohttp import web
from google.protobuf.message import Message

from apiserver import masterservice
from apiserver.admission import SYSTEM_NAMESPACES, Admission, system_priority_classes
from apiserver.allocator import ServiceAllocator
from apiserver.auth import bootstrap
from apiserver.auth.authn import Authenticator
from apiserver.auth.authorizer import Chain, Identity
from apiserver.auth.escalation import EscalationGuard
from apiserver.auth.filters import Enforcer
from apiserver.auth.node import NodeAuthorizer, PodsFromCache
from apiserver.auth.rbac import RbacAuthorizer
from apiserver.auth.reconcile import PolicyError, reconcile
from apiserver.auth.tokenrequest import CacheLookup, TokenRequests
from apiserver.auth.tokens import (
    PublicKey,
    TokenAuthenticator,
    TokenIssuer,
    load_private_key,
    load_public_keys,
)
from apiserver.crd import controller as crd_controller
from apiserver.crd.serving import (
    CustomResources,
    CustomResourceStore,
    CustomResourceStrategy,
    JsonCodec,
    object_dict,
)
from apiserver.flowcontrol import Limiter, MessageGate
from apiserver.grpcapi import (
    CUSTOM_RESOURCES_SERVICE,
    GrpcCustomResources,
    GrpcResource,
    MetricsInterceptor,
    OpenWriteStreams,
)
from apiserver.metrics import Metrics
from apiserver.namespacestore import NamespaceStore
from apiserver.podstore import PodStore
from apiserver.policies import ParamSource, PolicyDispatcher
from apiserver.registry import INDEX_FIELD, META_FIELDS, fields_of, strategy_for
from apiserver.resources import ResourceStore
from apiserver.rest.app import SHUTDOWN_CHECK, RestServer
from apiserver.rest.authapi import AuthAPI
from apiserver.rest.codec import KindCodec
from apiserver.serviceaccount import DEFAULT_SERVICE_ACCOUNT
from apiserver.settings import Settings
from apiserver.storage import Storage
from apiserver.watchcache import Codec, WatchCache
from apiserver.webhooks import WebhookDispatcher
from tinykube.clock import Clock
from tinykube.errors import AlreadyExistsError, NotFoundError, TinykubeError, UnavailableError
from tinykube.kinds import (
    ALL_KINDS,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CUSTOM_RESOURCE_DEFINITION,
    ENDPOINTS,
    EVENT,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    PRIORITY_CLASS,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING,
    KindInfo,
)
from tinykube.manifest import to_dict
from tinykube.serving import GrpcServer, ListenError
from tinykube.tls import PLAINTEXT, Credentials, ServingTLS, TLSConfigError
from tinykube.v1 import meta_pb2, namespace_pb2, priorityclass_pb2, serviceaccount_pb2
from tinykube.v1.apiextensions_pb2 import CustomResourceDefinition

log = logging.getLogger(__name__)

# How long a stopping apiserver tries to take itself out of default/kubernetes (etcd may be
# the reason it stops).
MASTER_REMOVAL_SECONDS = 3.0


def serving_tls(settings: Settings) -> ServingTLS | None:
    """The certificate both front ends serve with (None: plaintext, --insecure)."""
    if not settings.tls_cert_file:
        return None
    return ServingTLS(
        settings.tls_cert_file, settings.tls_private_key_file, settings.client_ca_file
    )


def etcd_credentials(settings: Settings) -> Credentials:
    """The etcd link: TLS with the apiserver's etcd client certificate, or plaintext."""
    if not settings.etcd_tls:
        return PLAINTEXT
    if not settings.etcd_cafile:
        raise TLSConfigError("--etcd-cafile is required for an https:// or unixs:// etcd")
    return Credentials.from_files(
        ca_file=settings.etcd_cafile,
        cert_file=settings.etcd_certfile,
        key_file=settings.etcd_keyfile,
    )


def kubelet_credentials(settings: Settings) -> Credentials:
    """What the log proxy presents to kubelets and verifies them with."""
    if not settings.kubelet_certificate_authority:
        return PLAINTEXT
    return Credentials.from_files(
        ca_file=settings.kubelet_certificate_authority,
        cert_file=settings.kubelet_client_certificate,
        key_file=settings.kubelet_client_key,
    )


def service_account_keys(settings: Settings) -> tuple[TokenIssuer | None, tuple[PublicKey, ...]]:
    """The token signer (None without --service-account-signing-key-file) and the keys tokens
    are verified with (the key files', else the signing key's public half, as kube)."""
    issuer: TokenIssuer | None = None
    keys: list[PublicKey] = []
    for path in settings.service_account_key_files:
        keys += load_public_keys(path)
    if settings.service_account_signing_key_file:
        private = load_private_key(settings.service_account_signing_key_file)
        issuer = TokenIssuer(
            private,
            issuer=settings.service_account_issuers[0],
            audiences=settings.audiences,
            max_expiration_seconds=settings.service_account_max_token_expiration_seconds,
        )
        if not keys:
            keys.append(private.public_key())
    return issuer, tuple(keys)


# kube-apiserver's name for the check of its rbac/bootstrap-roles post-start hook.
RBAC_BOOTSTRAP_CHECK = "poststarthook/rbac/bootstrap-roles"
# The hook tries the policy again this often (kube's wait.Poll interval), for
# Settings.bootstrap_policy_timeout_seconds.
POLICY_RETRY_SECONDS = 1.0


class APIServer:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        storage: Storage | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self.metrics = metrics or Metrics()
        self.storage = storage or Storage(
            settings.endpoints,
            timeout=settings.etcd_request_timeout_seconds,
            write_attempt_timeout=settings.etcd_write_attempt_timeout_seconds,
            metrics=self.metrics,
            batch_writes=settings.etcd_batch_writes,
            credentials=etcd_credentials(settings),
        )
        # Who sent a request (apiserver/auth/authn.py).
        self.authenticator = Authenticator.from_flags(settings.token_auth_file)
        self.serving_tls = serving_tls(settings)
        self.caches: dict[str, WatchCache] = {}
        self.services: dict[str, ResourceStore] = {}
        prefix = settings.prefix
        self.allocator = ServiceAllocator(
            self.storage,
            prefix=prefix,
            cluster_ip_range=settings.service_cluster_ip_range,
            node_port_range=settings.service_node_port_range,
        )
        for info in ALL_KINDS:
            key_prefix = f"{prefix}/{info.plural}/".encode()
            codec = Codec(info.message, info.namespaced, fields_of(info.kind), json=KindCodec(info))
            cache = self._watch_cache(
                info, key_prefix, codec, index_field=INDEX_FIELD.get(info.kind)
            )
            self.caches[info.kind] = cache
            common: dict[str, Any] = {
                "storage": self.storage,
                "cache": cache,
                "codec": codec,
                "strategy": strategy_for(
                    info, default_grace_seconds=settings.default_termination_grace_seconds
                ),
                "settings": settings,
                "clock": self.clock,
                "key_prefix": key_prefix,
                "allocator": self.allocator if info.kind == SERVICE.kind else None,
            }
            if info.kind == POD.kind:
                node_prefix = f"{prefix}/{NODE.plural}/".encode()
                self.services[info.kind] = PodStore(info, node_prefix=node_prefix, **common)
            elif info.kind == NAMESPACE.kind:
                self.services[info.kind] = NamespaceStore(info, **common)
            else:
                self.services[info.kind] = ResourceStore(info, **common)
            if info.kind == EVENT.kind:
                self.services[info.kind].ttl_seconds = settings.event_ttl_seconds
        # Evictions consult the pods' disruption budgets.
        pod_store = self.services[POD.kind]
        assert isinstance(pod_store, PodStore)
        pod_store.budgets = self.services[POD_DISRUPTION_BUDGET.kind]
        self.admission = Admission(self.caches, self.storage, prefix=prefix, clock=self.clock)
        # Admission webhooks (apiserver/webhooks.py), over the configurations' caches: part
        # of admission, so every store holding it calls them.
        self.webhooks = WebhookDispatcher(
            self.caches, self.storage, prefix=prefix, metrics=self.metrics
        )
        self.admission.webhooks = self.webhooks
        # ValidatingAdmissionPolicy (apiserver/policies.py), over the policies' and bindings'
        # caches; params come from any served kind's cache.
        self.admission.policies = PolicyDispatcher(
            self.caches, self.storage, prefix=prefix, params=self._param_source
        )
        for policy_kind in (VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING):
            self.services[policy_kind.kind].answer_when_cached = True
        for store in self.services.values():
            store.admission = self.admission
        # Custom kinds of Established CRDs (apiserver/crd/serving.py), kept in step by the CRD
        # controller.
        self.custom = CustomResources(
            self._custom_store, self._publish_custom, frozenset(k.kind for k in ALL_KINDS)
        )
        # The system namespaces and priority classes exist (created at start when missing).
        self._bootstrapped = False
        # The bootstrap RBAC policy has been reconciled once (readiness waits for it).
        self._policy_reconciled = False
        self._policy_error = ""  # why the last reconcile failed (not the error: its frames)
        self._policy_etcd_down = False  # it failed because etcd did not answer
        # Set, with `fatal_error` saying why, when the apiserver cannot go on and must exit
        # (its process ends non-zero, as kube-apiserver's klog.Fatalf): the bootstrap RBAC
        # policy failed for bootstrap_policy_timeout_seconds.
        self.fatal = asyncio.Event()
        self.fatal_error = ""
        # Set when stop() begins: from then on nothing reports SERVING again.
        self._stopping = False
        self.storage.set_exclusive(self._plainly_watched_kind)
        # One in-flight limit for both front ends (apiserver/flowcontrol.py).
        self.limiter = Limiter(
            settings.max_requests_inflight,
            settings.max_mutating_requests_inflight,
            metrics=self.metrics,
        )
        # Authorization, as kube-apiserver's --authorization-mode=Node,RBAC: both read the
        # watch caches (RBAC objects, pods by node), so a check is in-memory lookups.
        self.rbac = RbacAuthorizer()
        self.rbac.attach(self.caches)
        pods = PodsFromCache(self.caches[POD.kind], f"{prefix}/{POD.plural}/".encode())
        self.authorizer = Chain([NodeAuthorizer(pods), self.rbac])
        # Every request is authenticated and authorized on a TLS apiserver; a plaintext one
        # (--insecure, or in-process without certificates) checks nothing, as kube's old
        # insecure port.
        self.enforcer: Enforcer | None = (
            Enforcer(self.authenticator, self.authorizer)
            if self.serving_tls is not None and not settings.insecure
            else None
        )
        if self.enforcer is not None:
            # RBAC writes may grant only what their author holds (kube's policybased storage).
            guard = EscalationGuard(self.authorizer, self.rbac)
            for kind in (
                ROLE.kind,
                CLUSTER_ROLE.kind,
                ROLE_BINDING.kind,
                CLUSTER_ROLE_BINDING.kind,
            ):
                self.services[kind].escalation = guard
        # Write-stream messages of one connection handed to handlers at once (flowcontrol.py).
        self.message_gate = MessageGate(settings.max_stream_messages_per_connection)
        # The write streams being served: ended at the graceful stop, as the watches are.
        self.write_streams = OpenWriteStreams()
        self.grpc = GrpcServer(
            settings.bind_address,
            [*(info.service for info in ALL_KINDS), CUSTOM_RESOURCES_SERVICE],
            interceptors=[
                MetricsInterceptor(
                    self.metrics,
                    self.limiter,
                    self.enforcer,
                    gate=self.message_gate,
                    access_log=settings.access_log,
                    streams=self.write_streams,
                )
            ],
            tls=self.serving_tls,
        )
        handlers = (
            *(GrpcResource(r).handler() for r in self.services.values()),
            GrpcCustomResources(self.custom.lookup, self.custom.stores).handler(),
        )
        self.grpc.add(lambda s: s.add_generic_rpc_handlers(handlers))
        self._tasks: list[asyncio.Task[None]] = []
        self._leases: masterservice.MasterLeases | None = None
        self.port = 0
        self._serving: bool | None = None
        self._etcd_ok = False
        self.rest: RestServer | None = None
        # Service account tokens: issued by TokenRequest with the signing key, accepted as
        # bearer tokens when signed by one of the verification keys (apiserver/auth/tokens.py).
        self.token_issuer, sa_keys = service_account_keys(settings)
        # Without a signing key no token can be minted: pods get no kube-api-access volume.
        self.admission.mount_tokens = self.token_issuer is not None
        if sa_keys:
            lookup = CacheLookup(self.caches, prefix)
            self.authenticator.service_accounts = TokenAuthenticator(
                issuers=settings.service_account_issuers,
                keys=sa_keys,
                audiences=settings.audiences,
                lookup=lookup,
                clock=self.clock,
            )
            self.authenticator.refresh = lookup.refresh
        self.auth_api = AuthAPI(
            max_request_bytes=settings.max_request_bytes,
            authenticator=self.authenticator,
            authorizer=self.authorizer,
            token_requests=(
                TokenRequests(self.services, self.token_issuer, self.clock)
                if self.token_issuer is not None
                else None
            ),
            issuer=settings.service_account_issuers[0] if settings.service_account_issuers else "",
            keys=sa_keys,
            jwks_uri=settings.service_account_jwks_uri,
        )
        if settings.rest_port >= 0:
            self.rest = RestServer(
                self.services,
                settings=settings,
                clock=self.clock,
                metrics=self.metrics,
                health=self.health_checks,
                limiter=self.limiter,
                authorizer=self.authorizer,
                identify=self.identify,
                ssl_context=self.serving_tls.ssl_context() if self.serving_tls else None,
                kubelet_credentials=kubelet_credentials(settings),
                enforcer=self.enforcer,
                auth_api=self.auth_api,
            )
        self.rest_port = 0

    @property
    def address(self) -> str:
        host = self.settings.bind_address.rsplit(":", 1)[0]
        if host in ("0.0.0.0", "", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    def identify(self, request: web.Request) -> Identity:
        """Who sent a REST request: its verified client certificate, bearer token, or nobody."""
        return self.authenticator.rest(request.transport, request.headers)

    @property
    def rest_url(self) -> str:
        """The REST API's URL ("" when it is disabled)."""
        if self.rest is None:
            return ""
        scheme = "https" if self.serving_tls is not None else "http"
        return f"{scheme}://{self.rest_address}"

    @property
    def rest_address(self) -> str:
        """host:port of the REST API ("" when it is disabled)."""
        if self.rest is None:
            return ""
        host = self.address.rsplit(":", 1)[0]
        return f"{host}:{self.rest_port}"

    def health_checks(self) -> dict[str, bool]:
        """The checks behind health: etcd answers, every watch cache synced and watching, the
        bootstrap RBAC policy reconciled (kube's post-start hook check, by its name), and
        `shutdown`, which fails once the graceful stop has begun (kube's readyz check of that
        name: load balancers stop sending while in-flight requests drain; /healthz leaves it
        out, as kube's does)."""
        return {
            "etcd": self._etcd_ok,
            "watch-cache-synced": all(c.synced.is_set() for c in self.caches.values()),
            "watch-cache-healthy": all(c.healthy for c in self.caches.values()),
            RBAC_BOOTSTRAP_CHECK: self._policy_reconciled,
            SHUTDOWN_CHECK: not self._stopping,
        }

    def _plainly_watched_kind(self, key: bytes) -> bytes | None:
        """The key prefix of `key`'s kind while a plain Watch of that kind is open (its writes
        then never share an etcd txn, see apiserver/txnbatch.py), else None."""
        for cache in self.caches.values():
            if cache.plain_watchers and key.startswith(cache.prefix):
                return cache.prefix
        return None

    def etcd_watch_count(self) -> int:
        """etcd watch streams open right now (one per kind when healthy)."""
        return sum(1 for c in self.caches.values() if c._etcd_watch is not None)

    def etcd_watches_opened(self) -> int:
        return sum(c.etcd_watches_opened for c in self.caches.values())

    async def start(self, sync_timeout: float = 10.0) -> int:
        self.storage.connect()
        for cache in self.caches.values():
            self._tasks.append(asyncio.create_task(cache.run(), name=f"watchcache-{cache.kind}"))
        self.port = await self.grpc.start()
        # The post-start hook's time counts from here, when the server listens, as kube's.
        hook_started = self.clock.monotonic()
        if self.rest is not None:
            host = self.settings.bind_address.rsplit(":", 1)[0].strip("[]") or "0.0.0.0"
            try:
                self.rest_port = await self.rest.start(host, self.settings.rest_port)
            except OSError as exc:
                await self.grpc.stop(0)
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                raise ListenError("--rest-port", f"{host}:{self.settings.rest_port}", why) from exc
            advertised = self.settings.advertise_address
            if advertised and advertised != host and host not in ("0.0.0.0", "::"):
                # Pods reach the API at the advertised address (the kubernetes Service's
                # endpoint), on the same port.
                try:
                    await self.rest.listen_also(advertised, self.rest_port)
                except OSError as exc:
                    await self.rest.stop()
                    await self.grpc.stop(0)
                    why = os.strerror(exc.errno) if exc.errno else str(exc)
                    raise ListenError(
                        "--advertise-address", f"{advertised}:{self.rest_port}", why
                    ) from exc
        await self._set_serving(False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(c.synced.wait() for c in self.caches.values())), sync_timeout
            )
        await self._bootstrap_within(sync_timeout)
        synced = all(c.synced.is_set() for c in self.caches.values())
        if not (synced and await self._ensure_policy()):
            # etcd is not there yet: keep trying in the background (not ready until then).
            self._tasks.append(
                asyncio.create_task(self._policy_loop(hook_started), name="bootstrap-policy")
            )
        await self._update_health()
        self._tasks.append(asyncio.create_task(self._health_loop(), name="health"))
        # The CRD naming and establishing controllers (apiserver/crd/controller.py).
        self._tasks.append(
            asyncio.create_task(
                crd_controller.run(self.services[CUSTOM_RESOURCE_DEFINITION.kind], self.custom),
                name="crd-controller",
            )
        )
        if self.rest is not None:
            self._tasks.append(
                asyncio.create_task(self._master_service_loop(), name="master-service")
            )
        if self.settings.compaction_interval_seconds > 0:
            self._tasks.append(asyncio.create_task(self._compaction_loop(), name="compaction"))
        log.info("apiserver serving on %s (etcd %s)", self.address, self.storage.target)
        if self.enforcer is None:
            log.warning(
                "authentication and authorization are off (plaintext development mode): "
                "every request is allowed"
            )
        if self.rest is not None:
            log.info("apiserver REST API on %s", self.rest_url)
        return self.port

    def _param_source(self, api_version: str, kind: str) -> ParamSource | None:
        """Where a ValidatingAdmissionPolicy's paramKind is kept: a built-in kind's watch
        cache, or a served custom kind's."""
        group, _, version = api_version.rpartition("/")
        for info in ALL_KINDS:
            if (info.group, info.version, info.kind) == (group, version, kind):
                cache = self.caches[info.kind]
                return ParamSource(info.namespaced, cache.prefix, cache, to_dict)
        for store in self.custom.stores():
            info = store.info
            if (info.group, info.version, info.kind) == (group, version, kind):
                return ParamSource(info.namespaced, store.cache.prefix, store.cache, object_dict)
        return None

    def _watch_cache(
        self, info: KindInfo, prefix: bytes, codec: Codec, *, index_field: str | None = None
    ) -> WatchCache:
        """A kind's watch cache over the keys under `prefix`, sized and timed by the settings
        (the same for built-in and custom kinds)."""
        settings = self.settings
        return WatchCache(
            kind=info.kind,
            prefix=prefix,
            codec=codec,
            storage=self.storage,
            metrics=self.metrics,
            window_size=settings.watch_cache_size,
            window_bytes=settings.watch_cache_bytes,
            watcher_queue_size=settings.watcher_queue_size,
            watcher_queue_bytes=settings.watcher_queue_bytes,
            bookmark_interval=settings.bookmark_interval_seconds,
            bookmark_frequency=settings.bookmark_frequency_seconds,
            wait_timeout=settings.cache_wait_seconds,
            index_field=index_field,
            clock=self.clock,
        )

    def _custom_store(
        self, info: KindInfo, crd: CustomResourceDefinition
    ) -> tuple[CustomResourceStore, asyncio.Task[None]]:
        """A custom kind's store over its own watch cache (running from now on)."""
        settings = self.settings
        key_prefix = f"{settings.prefix}/{info.group}/{info.plural}/".encode()
        strategy = CustomResourceStrategy(info, crd)
        codec = JsonCodec(
            info.message, info.namespaced, strategy.field_values, json=KindCodec(info)
        )
        cache = self._watch_cache(info, key_prefix, codec)
        store = CustomResourceStore(
            info,
            storage=self.storage,
            cache=cache,
            codec=codec,
            strategy=strategy,
            settings=settings,
            clock=self.clock,
            key_prefix=key_prefix,
            admission=self.admission,
        )
        store.supported_fields = (*META_FIELDS, *strategy.selectable)

        async def run() -> None:
            try:
                await cache.run()
            finally:
                cache.terminate_all(
                    UnavailableError(f"the {info.plural}.{info.group} kind is no longer served"),
                    "removed",
                )

        return store, asyncio.create_task(run(), name=f"watchcache-{info.plural}.{info.group}")

    def _publish_custom(self, stores: dict[str, CustomResourceStore]) -> None:
        """Serve exactly these custom kinds (with the built-in ones) over REST."""
        for kind in [k for k, s in self.services.items() if isinstance(s, CustomResourceStore)]:
            del self.services[kind]
        self.services.update(stores)
        if self.rest is not None:
            self.rest.set_custom_resources(stores)

    async def reconcile_policy(self) -> dict[str, int]:
        """Reconcile the bootstrap RBAC policy (apiserver/auth/reconcile.py): create what is
        missing, add back what an autoupdate object lacks; how many objects were written."""
        return await reconcile(
            _PolicyStore(self.services),
            bootstrap.cluster_roles(),
            bootstrap.cluster_role_bindings(),
        )

    async def _ensure_policy(self) -> bool:
        """`reconcile_policy`; False if it failed (etcd did not answer, a write was refused),
        the error kept for `_policy_loop`. The first success passes the readiness check for
        good."""
        try:
            # As kube's hook, make sure etcd answers before going through every object (each
            # would log its own UNAVAILABLE).
            try:
                await self.storage.current_revision(retry=False)
            except TinykubeError as exc:
                self._policy_etcd_down = True
                raise PolicyError(f"unable to initialize clusterroles: {exc}") from None
            self._policy_etcd_down = False
            await self.reconcile_policy()
        except (PolicyError, TinykubeError) as exc:
            log.warning("bootstrap RBAC policy not reconciled yet: %s", exc)
            self._policy_error = str(exc)
            return False
        self._policy_error = ""
        self._policy_reconciled = True
        return True

    async def _policy_loop(self, started: float) -> None:
        """kube-apiserver's post-start hook rbac/bootstrap-roles: the policy again every
        second until a pass succeeds, for bootstrap_policy_timeout_seconds since `started`.
        Then, as kube's hook:
        - if etcd still does not answer, the apiserver ends (`fatal`), as the hook fails and
          klog.Fatalf ends kube-apiserver: better restarted (by its supervisor) with the error
          in its log than not ready forever;
        - if etcd answers but objects keep failing (a webhook refuses one, say), each failure
          has been logged and the hook is done: the apiserver becomes ready without them, as
          kube's hook counts such a pass as done (it does not retry it at all; tinykube retries
          for the hook's time first, so a passing failure costs nothing)."""
        deadline = started + self.settings.bootstrap_policy_timeout_seconds
        while not await self._ensure_policy():
            if self.clock.monotonic() >= deadline:
                if self._policy_etcd_down:
                    self._fail(
                        'PostStartHook "rbac/bootstrap-roles" failed: unable to initialize '
                        f"roles: {self._policy_error}"
                    )
                    return
                log.error(
                    'PostStartHook "rbac/bootstrap-roles": %s; going on without it after %gs',
                    self._policy_error,
                    self.settings.bootstrap_policy_timeout_seconds,
                )
                self._policy_reconciled = True
                break
            await self.clock.sleep(POLICY_RETRY_SECONDS)
        await self._update_health()

    def _fail(self, error: str) -> None:
        """The apiserver cannot go on: log why and set `fatal` (its process exits)."""
        log.error("%s", error)
        self.fatal_error = error
        self.fatal.set()

    async def stop(self) -> None:
        """Graceful: NOT_SERVING, end every watch (clients re-watch elsewhere) and write stream
        (clients reconnect), drain, close."""
        self._stopping = True
        await self._set_serving(False)
        for task in self._tasks:
            if task.get_name() == "master-service":
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(MASTER_REMOVAL_SECONDS):
                await self._remove_master_endpoint()
        for cache in self.caches.values():
            cache.shut_down(UnavailableError("watch closed: the apiserver is shutting down"))
        # Write streams (a kubelet's Lease and status writes) answer what they have read and
        # end, so their clients reconnect now and the drain waits for no idle stream.
        self.write_streams.end()
        await self.grpc.stop(self.settings.shutdown_grace_seconds)
        if self.rest is not None:
            await self.rest.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.webhooks.close()
        await self.custom.stop()
        await self.storage.close()

    async def _set_serving(self, serving: bool) -> None:
        if serving != self._serving:
            self._serving = serving
            await self.grpc.set_serving(serving)

    async def bootstrap(self) -> None:
        """Create the system namespaces (default, kube-system, kube-public, kube-node-lease),
        priority classes (system-cluster-critical, system-node-critical) and those
        namespaces' default ServiceAccounts that are missing, as kube-apiserver does at start
        (but for the accounts, its controller manager's). Another apiserver creating one at the same
        time is fine. Health stays NOT_SERVING until this has succeeded once (it is retried
        by the health loop), so no component starts before its namespace exists."""
        namespaces = self.services[NAMESPACE.kind]
        for name in SYSTEM_NAMESPACES:
            ns = namespace_pb2.Namespace()
            ns.metadata.name = name
            with contextlib.suppress(AlreadyExistsError):
                await namespaces.create(namespace_pb2.CreateNamespaceRequest(namespace=ns))
        classes = self.services[PRIORITY_CLASS.kind]
        for pc in system_priority_classes():
            with contextlib.suppress(AlreadyExistsError):
                await classes.create(priorityclass_pb2.CreatePriorityClassRequest(priorityClass=pc))
        # Their default ServiceAccounts too, which kube leaves to the controller manager: the
        # ServiceAccount admission refuses pods until it exists, and the components' own pods
        # (and every test's) must not wait for the controller manager to be elected first.
        # The controller creates it in every other namespace, and again when it is deleted.
        accounts = self.services[SERVICE_ACCOUNT.kind]
        for name in SYSTEM_NAMESPACES:
            sa = serviceaccount_pb2.ServiceAccount()
            sa.metadata.name, sa.metadata.namespace = DEFAULT_SERVICE_ACCOUNT, name
            with contextlib.suppress(AlreadyExistsError):
                await accounts.create(
                    serviceaccount_pb2.CreateServiceAccountRequest(serviceAccount=sa)
                )
        if not self._bootstrapped:
            log.info("system namespaces, priority classes and service accounts are in place")
        self._bootstrapped = True

    async def _bootstrap_within(self, seconds: float) -> None:
        """`bootstrap`, retried for up to `seconds` (then the health loop retries)."""
        deadline = self.clock.monotonic() + seconds
        while True:
            try:
                await self.bootstrap()
                return
            except TinykubeError as exc:
                if self.clock.monotonic() >= deadline:
                    log.warning("creating the system namespaces failed (retrying): %s", exc)
                    return
                log.info("creating the system namespaces failed, retrying: %s", exc)
            await self.clock.sleep(0.2)

    async def _update_health(self) -> bool:
        try:
            await self.storage.current_revision(retry=False)
            self._etcd_ok = True
            if not self._bootstrapped:
                await self.bootstrap()
            ok = self._policy_reconciled and all(
                c.synced.is_set() and c.healthy for c in self.caches.values()
            )
        except TinykubeError:
            self._etcd_ok = False
            ok = False
        # The health loop runs on through the graceful stop's drain: it must not report
        # SERVING again to the health watches (client-side health checking) of a draining server.
        ok = ok and not self._stopping
        await self._set_serving(ok)
        return ok

    async def _master_service_loop(self) -> None:
        """The default/kubernetes Service, this apiserver's master lease and the Endpoints of
        every live apiserver (apiserver/masterservice.py), at start and every
        RECONCILE_SECONDS."""
        cluster_ip = masterservice.service_ip(self.settings.service_cluster_ip_range)
        leases = self._master_leases()
        while True:
            try:
                await leases.renew()
                await masterservice.reconcile(
                    self.services[SERVICE.kind],
                    self.services[ENDPOINTS.kind],
                    cluster_ip,
                    self.rest_port,
                    await leases.alive(),
                )
            except TinykubeError as exc:
                log.warning("the kubernetes Service is not reconciled yet: %s", exc)
            await self.clock.sleep(masterservice.RECONCILE_SECONDS)

    def _master_leases(self) -> masterservice.MasterLeases:
        if self._leases is None:
            host = self.settings.advertise_address or self.rest_address.rsplit(":", 1)[0].strip(
                "[]"
            )
            self._leases = masterservice.MasterLeases(
                self.storage, self.settings.prefix, host, self.rest_port
            )
        return self._leases

    async def _remove_master_endpoint(self) -> None:
        """At shutdown: revoke this apiserver's master lease and rewrite the Endpoints without
        it, so in-cluster clients stop being sent here (kube's RemoveEndpoints)."""
        if self._leases is None:
            return
        cluster_ip = masterservice.service_ip(self.settings.service_cluster_ip_range)
        try:
            await self._leases.remove()
            await masterservice.reconcile(
                self.services[SERVICE.kind],
                self.services[ENDPOINTS.kind],
                cluster_ip,
                self.rest_port,
                await self._leases.alive(),
            )
        except TinykubeError as exc:
            log.warning("could not take this apiserver out of default/kubernetes: %s", exc)

    async def _health_loop(self) -> None:
        while True:
            await self.clock.sleep(1.0)
            await self._update_health()

    async def compact(self, revision: int | None = None) -> int:
        """Compact etcd at `revision` (default: now) and trim every cache window below it."""
        if revision is None:
            revision = await self.storage.current_revision()
        try:
            await self.storage.compact(revision)
        except TinykubeError as exc:
            if "compacted" not in exc.message:
                self.metrics.compactions.labels("error").inc()
                raise
        self.metrics.compactions.labels("ok").inc()
        for cache in self.caches.values():
            cache.trim_below(revision)
        return revision

    async def _compaction_loop(self) -> None:
        # Compact to the revision seen one interval ago: clients get a full interval of history.
        previous = 0
        while True:
            await self.clock.sleep(self.settings.compaction_interval_seconds)
            try:
                current = await self.storage.current_revision()
                if previous:
                    await self.compact(previous)
                previous = current
            except TinykubeError as exc:
                log.warning("etcd compaction failed: %s", exc)


class _PolicyStore:
    """Bootstrap reconciliation's reads and writes, through the resource layer (in-process:
    no requester, so the escalation check trusts them as kube trusts its loopback client)."""

    def __init__(self, services: dict[str, ResourceStore]) -> None:
        self.services = services

    async def get(self, info: KindInfo, name: str) -> Any | None:
        try:
            return await self.services[info.kind].get(meta_pb2.GetRequest(name=name))
        except NotFoundError:
            return None

    async def create(self, info: KindInfo, obj: Message) -> object:
        return await self.services[info.kind].create(
            info.create_request(**{info.request_field: obj})
        )

    async def update(self, info: KindInfo, obj: Message) -> object:
        return await self.services[info.kind].update(
            info.update_request(**{info.request_field: obj})
        )

    async def delete(self, info: KindInfo, name: str, uid: str) -> None:
        request = meta_pb2.DeleteRequest(name=name)
        request.preconditions.uid = uid
        await self.services[info.kind].delete(request)
