"""The typed async client every tinykube component uses to talk to the apiserver.

`Client` owns one grpc.aio channel per apiserver (keepalive options from `tinykube.serving`) and
exposes one `ResourceClient` per kind (`client.pods`, `client.nodes`, ...), all built from the
`tinykube.kinds` table by one generic implementation. Every unary call carries a deadline and
is retried with jittered exponential backoff on UNAVAILABLE/DEADLINE_EXCEEDED only, and only
where repeating it is safe; every failure is raised as a `tinykube.errors` type chained `from`
the gRPC error.

Which calls are retried (a DEADLINE_EXCEEDED or a reset stream does not say whether the server
applied the request, so a retry may be the second copy of a request that landed):
- Get, List, Delete, and Update/UpdateStatus carrying metadata.resourceVersion: on every
  UNAVAILABLE/DEADLINE_EXCEEDED. A read has no effect; a second copy of a preconditioned Update
  fails with ABORTED instead of applying twice. (A Delete that landed and is retried answers
  NOT_FOUND, or the object again while it is terminating; deleting is idempotent.)
- Update/UpdateStatus without a resourceVersion: only on failures that prove the request never
  left the client (`tinykube.retry.is_unsent`: no connection). A second copy would overwrite
  a newer write.
- Create, Bind and BindBatch: on every UNAVAILABLE/DEADLINE_EXCEEDED, and the retry recognises
  its own earlier success. A Create with only generateName is named here first (generateName
  plus 5 random characters, as the apiserver names it; a name someone else holds is replaced,
  up to 3 times) so that it is a named Create (kube's clients never resend a generateName
  Create: a second copy would be a second object). The apiserver assigns the uid, so nothing
  in the stored object says which request made it; the rule is: after an ambiguous failure, an
  ALREADY_EXISTS for a Create is ours if the stored object has every field the caller set in
  `spec`, `metadata.labels`, `annotations`, `ownerReferences` and `finalizers` with the value
  sent (the server's defaults and later writes to other fields do not matter), and the stored
  object is returned; an ALREADY_EXISTS for a Bind is ours if the pod (with the uid asked for,
  if one was) is bound to the node asked for, and the pod's current resourceVersion is returned.

Several apiservers (`Client("10.0.0.1:6443,10.0.0.2:6443")` or a list; the kubeconfig's
`tinykube.io/grpc` extension may list several): client-go knows one server and kube puts a load
balancer in front of the apiservers; gRPC's own answer (an `ipv4:` target, round_robin and
`healthCheckConfig`) checks every address against one TLS name and one resolver. This client
keeps one ordinary channel per address instead, so each apiserver's certificate is checked
against its own host, names and IPs mix, and a channel that "failed to connect to all
addresses" still proves a call unsent. Every call and watch goes to the *current* apiserver
(sticky, as a kube client on its one HTTP/2 connection behind a load balancer; clients start at
a random one, so together they spread); a call or watch that fails with UNAVAILABLE or
DEADLINE_EXCEEDED makes the next apiserver whose channel is not in TRANSIENT_FAILURE current
(concurrent failures move it once), so the call's retry, and the informer's resumed watch, go
there. Other answers (NOT_FOUND, ABORTED, OUT_OF_RANGE, ...) are the apiserver's and move
nothing. The channels connect at once, so the next apiserver is usually ready; when every other
one is in TRANSIENT_FAILURE the next is redialled on a fresh channel, since gRPC would fail
every call on the old one until its reconnect backoff ran out, apiserver back or not. Nothing fails
back: the current one stays until it fails. All apiservers share one etcd, and Get and a List
without resourceVersion read it consistently, so a failover never reads older than a write.

Any call refused by the apiserver's in-flight limit (RESOURCE_EXHAUSTED with a retry hint in
trailing metadata: refused before it ran) is sent again after the hint, jittered, while the
call's deadline (`timeout`) allows; that deadline covers the waits and the attempts together.
Other RESOURCE_EXHAUSTED answers are raised at once.

Watches have no deadline and are not retried here: a dropped stream raises `UnavailableError`,
a compacted resourceVersion raises `ResourceExpiredError`, and the informer decides whether to
resume or relist.

Credentials (tinykube/tls.py): `Client(target, credentials=...)` dials with them; without any it
reads `$KUBECONFIG` as kubectl does (its CA and credentials; `target` still wins over the
kubeconfig's server, as kubectl's --server), and is plaintext when that is unset.
`Client.from_kubeconfig(path)` takes the address from the kubeconfig too. A call that fails
because client and server disagree about TLS raises `tls.TransportSecurityError` saying so, at
once instead of after the retries.

Concurrency: a Client belongs to the event loop it was created on; any number of tasks may call
it at once (gRPC multiplexes calls over each HTTP/2 connection); the current apiserver's index
is changed only between awaits.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import logging
import random
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, Generic, NamedTuple, Self, cast

import grpc
from google.protobuf.message import Message
from typing_extensions import TypeVar

from tinykube import kinds
from tinykube.errors import (
    AlreadyExistsError,
    DeadlineExceededError,
    TinykubeError,
    from_rpc_error,
    from_status,
    is_retryable,
)
from tinykube.flags import split_addresses
from tinykube.kinds import KindInfo
from tinykube.meta import generate_name, get_continue, list_request
from tinykube.retry import (
    INITIAL_BACKOFF,
    MAX_BACKOFF,
    Attempts,
    call_with_retries,
    is_unsent,
    retry_throttled,
)
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.tls import Credentials, TransportSecurityError, ambient_credentials, explain
from tinykube.v1 import (
    admissionregistration_pb2,
    apiextensions_pb2,
    configmap_pb2,
    controllerrevision_pb2,
    daemonset_pb2,
    deployment_pb2,
    endpoints_pb2,
    endpointslice_pb2,
    event_pb2,
    job_pb2,
    lease_pb2,
    meta_pb2,
    namespace_pb2,
    node_pb2,
    pod_pb2,
    poddisruptionbudget_pb2,
    priorityclass_pb2,
    rbac_pb2,
    replicaset_pb2,
    secret_pb2,
    service_pb2,
    serviceaccount_pb2,
)
from tinykube.writestream import (
    MESSAGE_TIMEOUT_KEY,
    StreamUnsupported,
    WriteStream,
    declared_methods,
    write_result_type,
)

# T is the object type; L and E (its List and WatchEvent) default to Any so that
# `ResourceClient[pod_pb2.Pod]` is a valid annotation too.
T = TypeVar("T", bound=Message)
L = TypeVar("L", bound=Message, default=Any)
E = TypeVar("E", bound=Message, default=Any)

log = logging.getLogger(__name__)

# A generateName Create whose generated name is taken is tried with a new name this many times
# in all, as the apiserver does for the names it generates.
GENERATE_NAME_ATTEMPTS = 3
# Kubernetes' dryRun value: every check of the write runs, nothing is stored.
DRY_RUN_ALL = "All"

_STATUS_BY_NUMBER: dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


class BindItem(NamedTuple):
    """One binding of `Client.bind_batch`: the pod (and its uid, a precondition) and the node."""

    namespace: str
    name: str
    node_name: str
    uid: str = ""


class ResourceClient(Generic[T, L, E]):
    """CRUD + watch for one kind. One implementation, parameterised by a `KindInfo` row."""

    def __init__(self, info: KindInfo, owner: Client) -> None:
        self.info = info
        # One stub per apiserver, indexed as `owner.channels`.
        self._stubs: list[Any] = [info.stub(channel) for channel in owner.channels]
        self._owner = owner
        # Write streams (tinykube/writestream.py) by (method, apiserver index), when this client
        # pipelines its writes (`pipelined()`, or a Client made with pipeline=True); None: unary.
        self._streams: dict[tuple[str, int], WriteStream] | None = {} if owner.pipeline else None
        self._streamable = _streamable_methods(info)

    def pipelined(self) -> ResourceClient[T, L, E]:
        """This kind's client with write streams of its own: its Create, Update and UpdateStatus
        go as messages of `<Method>Stream` (each run exactly as the unary call; docs/api.md)
        where the kind declares one, on streams no other caller shares (a kubelet keeps one per
        node, as a real kubelet has its own connection), and as unary calls where the apiserver
        does not serve them. Everything else is this client's."""
        view = copy.copy(self)
        view._streams = {}
        return view

    def _stream_of(self, method: str) -> Callable[[int], WriteStream] | None:
        """The write stream of `method` on apiserver `index` (made on first use), or None when
        this client does not pipeline `method`."""
        streams = self._streams
        if streams is None or method not in self._streamable:
            return None
        result_type, field = self._streamable[method]
        owner = self._owner
        path = f"/{self.info.service}/{method}Stream"
        # Each message's deadline on the apiserver: this client's per-call timeout.
        timeout_metadata = ((MESSAGE_TIMEOUT_KEY, str(max(1, round(owner.timeout * 1000)))),)

        def stream_of(index: int) -> WriteStream:
            stream = streams.get((method, index))
            if stream is None:

                def open_call() -> Any:
                    return owner.channels[index].stream_stream(
                        path,
                        request_serializer=_serialize_message,
                        response_deserializer=result_type.FromString,
                    )(metadata=timeout_metadata)

                stream = streams[(method, index)] = WriteStream(
                    open_call, result_type, field, path.lstrip("/")
                )
                owner._write_streams.append(stream)
            return stream

        return stream_of

    @property
    def _stub(self) -> Any:
        """The stub of the apiserver the client uses now."""
        return self._stubs[self._owner._current]

    @_stub.setter
    def _stub(self, stub: Any) -> None:
        # Tests wrap the stub to count or delay calls; a wrapper stands for every apiserver.
        self._stubs = [stub] * len(self._stubs)

    async def _call(
        self,
        method: str,
        request: Message,
        *,
        retry_if: Callable[[BaseException], bool] = is_retryable,
        attempts: Attempts | None = None,
    ) -> Any:
        return await self._owner._unary(
            self._stubs,
            method,
            request,
            f"{self.info.service}/{method}",
            retry_if=retry_if,
            attempts=attempts,
            stream_of=self._stream_of(method) if self._streams is not None else None,
        )

    def _wrap(self, obj: T) -> Message:
        return self.info.create_request(**{self.info.request_field: obj})

    async def create(self, obj: T, *, dry_run: bool = False) -> T:
        """Create `obj`. Retried as the module docstring says: a retry returns the object its
        own earlier attempt created. An object with only generateName is named here, as the
        apiserver would name it, so that its Create can be resent like a named one.
        `dry_run` (Kubernetes' dryRun ["All"]): every check of the create runs and the object
        as it would be stored comes back, but nothing is stored (safe to retry)."""
        meta: Any = cast(Any, obj).metadata
        if dry_run:
            request = self._wrap(obj)
            cast(Any, request).dryRun.append(DRY_RUN_ALL)
            return cast(T, await self._call("Create", request))
        if meta.name or not meta.generateName:
            # (No name at all is the apiserver's INVALID_ARGUMENT to give.)
            return await self._create_named(self._wrap(obj))
        for attempt in range(GENERATE_NAME_ATTEMPTS):
            request = self._wrap(obj)
            sent: Any = getattr(request, self.info.request_field)
            sent.metadata.name = generate_name(meta.generateName)
            try:
                return await self._create_named(request)
            except AlreadyExistsError:
                # Someone else's object has the name (ours would have been recognised).
                if attempt == GENERATE_NAME_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def _create_named(self, request: Message) -> T:
        sent: T = getattr(request, self.info.request_field)
        if not cast(Any, sent).metadata.name:
            return cast(T, await self._call("Create", request, retry_if=is_unsent))
        attempts = Attempts()
        try:
            return cast(T, await self._call("Create", request, attempts=attempts))
        except AlreadyExistsError:
            if not attempts.ambiguous:
                raise
            mine = await self._stored_if_ours(sent)
            if mine is None:
                raise
            return mine

    async def _stored_if_ours(self, sent: T) -> T | None:
        """The stored object of `sent`'s name if it is the one `sent` created (the module
        docstring's rule), else None. Runs only after an ambiguous Create failed ALREADY_EXISTS."""
        meta: Any = cast(Any, sent).metadata
        if meta.uid:
            return None  # the caller named a uid; the server assigns its own, so never ours
        namespace = meta.namespace or ("default" if self.info.namespaced else "")
        try:
            stored: Any = await self.get(meta.name, namespace)
        except TinykubeError:
            return None
        for field in ("labels", "annotations", "ownerReferences", "finalizers"):
            if not _has_all(getattr(meta, field), getattr(stored.metadata, field)):
                return None
        sent_any: Any = sent
        if _has_field(sent_any, "spec") and not _contains(sent_any.spec, stored.spec):
            return None
        return cast(T, stored)

    async def get(self, name: str, namespace: str = "") -> T:
        request = meta_pb2.GetRequest(namespace=namespace, name=name)
        return cast(T, await self._call("Get", request))

    async def list(
        self,
        namespace: str = "",
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
    ) -> L:
        request = list_request(
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
        )
        return cast(L, await self._call("List", request))

    async def list_all(
        self,
        namespace: str = "",
        *,
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = 0,
    ) -> tuple[builtins.list[T], str]:
        """Every matching object, following continue tokens; returns (items, resourceVersion).

        The resourceVersion is the first page's, as in Kubernetes: a watch from it misses nothing.
        """
        items: builtins.list[T] = []
        token = ""
        rv = ""
        while True:
            page: Any = await self.list(
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
            )
            items.extend(page.items)
            rv = rv or page.metadata.resourceVersion
            token = get_continue(page.metadata)
            if not token or page_size <= 0:
                return items, rv

    async def update(self, obj: T, *, dry_run: bool = False, resend_ambiguous: bool = True) -> T:
        """Update `obj`; retried on every transient failure only if it carries
        metadata.resourceVersion (a precondition), else only if it was never sent.
        `dry_run`: checked and answered as the update would be, nothing stored.
        `resend_ambiguous=False`: a failure that leaves it unknown whether the update landed
        (a deadline, a lost stream) is raised instead of re-sent, for a caller that looks
        first: a re-sent copy of an update that landed only comes back ABORTED (its
        resourceVersion is stale now), after which the caller reads and writes again, three
        requests where one was due (the kubelet's Lease renewals, kubelet/node.py)."""
        request = self._update_request(obj, dry_run)
        retry_if = _update_retry(obj, dry_run, resend_ambiguous)
        return cast(T, await self._call("Update", request, retry_if=retry_if))

    async def update_status(
        self, obj: T, *, dry_run: bool = False, resend_ambiguous: bool = True
    ) -> T:
        """Update `obj`'s status; retried as `update`."""
        if not self.info.has_status:
            raise TypeError(f"{self.info.kind} has no status subresource")
        request = self._update_request(obj, dry_run)
        retry_if = _update_retry(obj, dry_run, resend_ambiguous)
        return cast(T, await self._call("UpdateStatus", request, retry_if=retry_if))

    def _update_request(self, obj: T, dry_run: bool) -> Message:
        request: Any = self.info.update_request(**{self.info.request_field: obj})
        if dry_run:
            request.dryRun.append(DRY_RUN_ALL)
        return cast(Message, request)

    async def finalize(self, obj: T) -> T:
        """Namespaces only: replace spec.finalizers (Kubernetes' namespaces/finalize); retried
        as `update`."""
        if self.info.kind != kinds.NAMESPACE.kind:
            raise TypeError(f"{self.info.kind} has no finalize subresource")
        request = self.info.update_request(**{self.info.request_field: obj})
        return cast(T, await self._call("Finalize", request, retry_if=_update_retry(obj)))

    async def delete(
        self,
        name: str,
        namespace: str = "",
        *,
        grace_period_seconds: int | None = None,
        uid: str = "",
        resource_version: str = "",
        propagation_policy: str = "",
        dry_run: bool = False,
    ) -> T:
        """Delete (or mark as deleting) one object. `propagation_policy` is Kubernetes':
        "Orphan", "Foreground", "Background" or "" for the kind's default. `dry_run`: the
        delete's checks run and the object comes back as the delete would leave it (marked
        or as it was), nothing deleted."""
        request = meta_pb2.DeleteRequest(
            namespace=namespace,
            name=name,
            propagationPolicy=propagation_policy,
            dryRun=[DRY_RUN_ALL] if dry_run else [],
        )
        if grace_period_seconds is not None:
            request.gracePeriodSeconds = grace_period_seconds
        if uid or resource_version:
            request.preconditions.uid = uid
            request.preconditions.resourceVersion = resource_version
        return cast(T, await self._call("Delete", request))

    async def watch(
        self,
        namespace: str = "",
        *,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str = "",
        allow_bookmarks: bool = False,
        batched: bool = True,
    ) -> AsyncIterator[E]:
        """Stream `<Kind>WatchEvent`s after `resource_version` until cancelled or the stream ends.

        No deadline (a watch lives as long as its consumer) and no retries; keepalive on the
        channel turns a cut link into UnavailableError within seconds. The events arrive
        through WatchBatch (several per gRPC message when they come fast) unless `batched` is
        False or the apiserver does not have it (UNIMPLEMENTED: an older apiserver), then
        through Watch; either way they are yielded one by one, in order.
        """
        request = meta_pb2.WatchRequest(
            namespace=namespace,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            resourceVersion=resource_version,
            allowWatchBookmarks=allow_bookmarks,
        )
        owner = self._owner
        index = owner._current
        stub = self._stubs[index]
        if batched and not owner._no_watch_batch:
            call = stub.WatchBatch(request)
            received = False
            try:
                async for batch in call:
                    received = True
                    for event in batch.events:
                        yield cast(E, event)
            except grpc.RpcError as exc:
                if received or exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise await owner._call_failed(index, exc) from exc
                owner._no_watch_batch = True
            else:
                return
            finally:
                call.cancel()
        call = stub.Watch(request)
        try:
            async for event in call:
                yield cast(E, event)
        except grpc.RpcError as exc:
            raise await owner._call_failed(index, exc) from exc
        finally:
            call.cancel()


class Client:
    """A connection to the apiserver: `async with Client("127.0.0.1:6443") as c: ...`."""

    pods: ResourceClient[pod_pb2.Pod, pod_pb2.PodList, pod_pb2.PodWatchEvent]
    nodes: ResourceClient[node_pb2.Node, node_pb2.NodeList, node_pb2.NodeWatchEvent]
    replica_sets: ResourceClient[
        replicaset_pb2.ReplicaSet,
        replicaset_pb2.ReplicaSetList,
        replicaset_pb2.ReplicaSetWatchEvent,
    ]
    deployments: ResourceClient[
        deployment_pb2.Deployment,
        deployment_pb2.DeploymentList,
        deployment_pb2.DeploymentWatchEvent,
    ]
    events: ResourceClient[event_pb2.Event, event_pb2.EventList, event_pb2.EventWatchEvent]
    leases: ResourceClient[lease_pb2.Lease, lease_pb2.LeaseList, lease_pb2.LeaseWatchEvent]
    services: ResourceClient[
        service_pb2.Service, service_pb2.ServiceList, service_pb2.ServiceWatchEvent
    ]
    endpoints: ResourceClient[
        endpoints_pb2.ServiceEndpoints,
        endpoints_pb2.EndpointsList,
        endpoints_pb2.EndpointsWatchEvent,
    ]
    pod_disruption_budgets: ResourceClient[
        poddisruptionbudget_pb2.PodDisruptionBudget,
        poddisruptionbudget_pb2.PodDisruptionBudgetList,
        poddisruptionbudget_pb2.PodDisruptionBudgetWatchEvent,
    ]
    roles: ResourceClient[rbac_pb2.Role, rbac_pb2.RoleList, rbac_pb2.RoleWatchEvent]
    cluster_roles: ResourceClient[
        rbac_pb2.ClusterRole, rbac_pb2.ClusterRoleList, rbac_pb2.ClusterRoleWatchEvent
    ]
    role_bindings: ResourceClient[
        rbac_pb2.RoleBinding, rbac_pb2.RoleBindingList, rbac_pb2.RoleBindingWatchEvent
    ]
    cluster_role_bindings: ResourceClient[
        rbac_pb2.ClusterRoleBinding,
        rbac_pb2.ClusterRoleBindingList,
        rbac_pb2.ClusterRoleBindingWatchEvent,
    ]
    namespaces: ResourceClient[
        namespace_pb2.Namespace, namespace_pb2.NamespaceList, namespace_pb2.NamespaceWatchEvent
    ]
    priority_classes: ResourceClient[
        priorityclass_pb2.PriorityClass,
        priorityclass_pb2.PriorityClassList,
        priorityclass_pb2.PriorityClassWatchEvent,
    ]
    jobs: ResourceClient[job_pb2.Job, job_pb2.JobList, job_pb2.JobWatchEvent]
    daemon_sets: ResourceClient[
        daemonset_pb2.DaemonSet, daemonset_pb2.DaemonSetList, daemonset_pb2.DaemonSetWatchEvent
    ]
    controller_revisions: ResourceClient[
        controllerrevision_pb2.ControllerRevision,
        controllerrevision_pb2.ControllerRevisionList,
        controllerrevision_pb2.ControllerRevisionWatchEvent,
    ]
    config_maps: ResourceClient[
        configmap_pb2.ConfigMap, configmap_pb2.ConfigMapList, configmap_pb2.ConfigMapWatchEvent
    ]
    secrets: ResourceClient[secret_pb2.Secret, secret_pb2.SecretList, secret_pb2.SecretWatchEvent]
    service_accounts: ResourceClient[
        serviceaccount_pb2.ServiceAccount,
        serviceaccount_pb2.ServiceAccountList,
        serviceaccount_pb2.ServiceAccountWatchEvent,
    ]
    endpoint_slices: ResourceClient[
        endpointslice_pb2.EndpointSlice,
        endpointslice_pb2.EndpointSliceList,
        endpointslice_pb2.EndpointSliceWatchEvent,
    ]
    mutating_webhook_configurations: ResourceClient[
        admissionregistration_pb2.MutatingWebhookConfiguration,
        admissionregistration_pb2.MutatingWebhookConfigurationList,
        admissionregistration_pb2.MutatingWebhookConfigurationWatchEvent,
    ]
    validating_webhook_configurations: ResourceClient[
        admissionregistration_pb2.ValidatingWebhookConfiguration,
        admissionregistration_pb2.ValidatingWebhookConfigurationList,
        admissionregistration_pb2.ValidatingWebhookConfigurationWatchEvent,
    ]
    validating_admission_policies: ResourceClient[
        admissionregistration_pb2.ValidatingAdmissionPolicy,
        admissionregistration_pb2.ValidatingAdmissionPolicyList,
        admissionregistration_pb2.ValidatingAdmissionPolicyWatchEvent,
    ]
    validating_admission_policy_bindings: ResourceClient[
        admissionregistration_pb2.ValidatingAdmissionPolicyBinding,
        admissionregistration_pb2.ValidatingAdmissionPolicyBindingList,
        admissionregistration_pb2.ValidatingAdmissionPolicyBindingWatchEvent,
    ]
    custom_resource_definitions: ResourceClient[
        apiextensions_pb2.CustomResourceDefinition,
        apiextensions_pb2.CustomResourceDefinitionList,
        apiextensions_pb2.CustomResourceDefinitionWatchEvent,
    ]

    def __init__(
        self,
        target: str | Sequence[str],
        *,
        timeout: float = 10.0,
        retries: int = 5,
        backoff_initial: float = INITIAL_BACKOFF,
        backoff_max: float = MAX_BACKOFF,
        credentials: Credentials | None = None,
        pipeline: bool = False,
    ) -> None:
        # Every kind's Create, Update and UpdateStatus as messages of write streams, one per
        # method and apiserver, shared by this client's callers (ResourceClient.pipelined).
        self.pipeline = pipeline
        self._write_streams: list[WriteStream] = []
        self.targets = split_addresses(target)
        if not self.targets:
            raise ValueError("Client needs at least one apiserver address")
        self.target = ",".join(self.targets)
        self.timeout = timeout
        self.retries = retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.credentials = credentials if credentials is not None else ambient_credentials()
        self.channels = [self.credentials.channel(t, CHANNEL_OPTIONS) for t in self.targets]
        # The apiserver every call and watch goes to until it fails (the module docstring);
        # clients start at a random one, so that together they spread over all of them.
        self._current = random.randrange(len(self.targets)) if len(self.targets) > 1 else 0
        self.failovers = 0
        self._closing: set[asyncio.Task[None]] = set()  # channels replaced by _redial
        if len(self.channels) > 1:
            for channel in self.channels:
                # Connect to every apiserver now: a failover then finds its next one ready.
                channel.get_state(try_to_connect=True)
        # What explain() found wrong with TLS to each target, once it found something.
        self._tls_problems: dict[str, str] = {}
        # Set once the apiserver answered WatchBatch with UNIMPLEMENTED (it predates it).
        self._no_watch_batch = False
        self.pods = ResourceClient(kinds.POD, self)
        self.nodes = ResourceClient(kinds.NODE, self)
        self.replica_sets = ResourceClient(kinds.REPLICA_SET, self)
        self.events = ResourceClient(kinds.EVENT, self)
        self.deployments = ResourceClient(kinds.DEPLOYMENT, self)
        self.leases = ResourceClient(kinds.LEASE, self)
        self.services = ResourceClient(kinds.SERVICE, self)
        self.endpoints = ResourceClient(kinds.ENDPOINTS, self)
        self.pod_disruption_budgets = ResourceClient(kinds.POD_DISRUPTION_BUDGET, self)
        self.roles = ResourceClient(kinds.ROLE, self)
        self.cluster_roles = ResourceClient(kinds.CLUSTER_ROLE, self)
        self.role_bindings = ResourceClient(kinds.ROLE_BINDING, self)
        self.cluster_role_bindings = ResourceClient(kinds.CLUSTER_ROLE_BINDING, self)
        self.namespaces = ResourceClient(kinds.NAMESPACE, self)
        self.priority_classes = ResourceClient(kinds.PRIORITY_CLASS, self)
        self.jobs = ResourceClient(kinds.JOB, self)
        self._by_kind: dict[str, ResourceClient[Any, Any, Any]] = {
            r.info.kind: r
            for r in (
                self.pods,
                self.nodes,
                self.replica_sets,
                self.events,
                self.leases,
                self.services,
                self.endpoints,
                self.pod_disruption_budgets,
                self.roles,
                self.cluster_roles,
                self.role_bindings,
                self.cluster_role_bindings,
                self.namespaces,
                self.priority_classes,
                self.jobs,
                self.deployments,
            )
        }
        self.daemon_sets = ResourceClient(kinds.DAEMON_SET, self)
        self.controller_revisions = ResourceClient(kinds.CONTROLLER_REVISION, self)
        self.config_maps = ResourceClient(kinds.CONFIG_MAP, self)
        self.secrets = ResourceClient(kinds.SECRET, self)
        self.service_accounts = ResourceClient(kinds.SERVICE_ACCOUNT, self)
        self._by_kind.update(
            {
                r.info.kind: r
                for r in (
                    self.daemon_sets,
                    self.controller_revisions,
                    self.config_maps,
                    self.secrets,
                    self.service_accounts,
                )
            }
        )
        self.endpoint_slices = ResourceClient(kinds.ENDPOINT_SLICE, self)
        self._by_kind[kinds.ENDPOINT_SLICE.kind] = self.endpoint_slices
        self.mutating_webhook_configurations = ResourceClient(
            kinds.MUTATING_WEBHOOK_CONFIGURATION, self
        )
        self.validating_webhook_configurations = ResourceClient(
            kinds.VALIDATING_WEBHOOK_CONFIGURATION, self
        )
        self.validating_admission_policies = ResourceClient(kinds.VALIDATING_ADMISSION_POLICY, self)
        self.validating_admission_policy_bindings = ResourceClient(
            kinds.VALIDATING_ADMISSION_POLICY_BINDING, self
        )
        for webhooks in (
            self.mutating_webhook_configurations,
            self.validating_webhook_configurations,
            self.validating_admission_policies,
            self.validating_admission_policy_bindings,
        ):
            self._by_kind[webhooks.info.kind] = webhooks
        self.custom_resource_definitions = ResourceClient(kinds.CUSTOM_RESOURCE_DEFINITION, self)
        self._by_kind[kinds.CUSTOM_RESOURCE_DEFINITION.kind] = self.custom_resource_definitions

    def resource(self, kind: str | KindInfo) -> ResourceClient[Any, Any, Any]:
        """The untyped ResourceClient for a kind given as KindInfo, Kind, plural or short name."""
        info = kind if isinstance(kind, KindInfo) else kinds.lookup(kind)
        return self._by_kind[info.kind]

    @property
    def channel(self) -> grpc.aio.Channel:
        """The channel to the apiserver in use now."""
        return self.channels[self._current]

    @property
    def current_target(self) -> str:
        """The address of the apiserver in use now."""
        return self.targets[self._current]

    async def _unary(
        self,
        stubs: Sequence[Any],
        method: str,
        request: Message,
        what: str = "",
        *,
        retry_if: Callable[[BaseException], bool] = is_retryable,
        attempts: Attempts | None = None,
        stream_of: Callable[[int], WriteStream] | None = None,
    ) -> Any:
        """One unary call (`method` of the current apiserver's stub in `stubs`) with a deadline
        per attempt, retried while `retry_if` accepts the failure; each attempt goes to the
        apiserver current when it starts, so a retry after a failover goes to the next one.
        `attempts` (if given) learns whether a failed attempt may have landed. Within an
        attempt, refusals of the in-flight limit are retried until its deadline. With
        `stream_of`, an attempt is a message of that apiserver's write stream instead, while
        the apiserver serves it; its failures are handled exactly as the call's."""

        async def send(seconds: float) -> Any:
            index = self._current
            if stream_of is not None:
                stream = stream_of(index)
                if stream.supported:
                    try:
                        return await stream.send(request, seconds)
                    except StreamUnsupported:
                        pass  # not applied: the unary call below
                    except TinykubeError as stream_err:
                        failed = await self._stream_failed(index, stream_err)
                        try:
                            if attempts is not None:
                                attempts.failed(failed)
                            if failed is stream_err:
                                raise
                            raise failed from stream_err
                        finally:
                            del failed  # (a reference cycle otherwise: see below)
            try:
                return await getattr(stubs[index], method)(request, timeout=seconds)
            except grpc.RpcError as exc:
                err = await self._call_failed(index, exc)
                try:
                    if attempts is not None:
                        attempts.failed(err)
                    raise err from exc
                finally:
                    # The error's traceback holds this frame: a local still naming the error
                    # would make a cycle (error, traceback, frame, error) that only the cyclic
                    # GC frees, with the gRPC error and its call, for every failed call (a
                    # hollow kubelet under an overloaded apiserver fails thousands).
                    del err

        async def attempt() -> Any:
            return await retry_throttled(send, budget=self.timeout, what=what)

        return await call_with_retries(
            attempt,
            retries=self.retries,
            initial=self.backoff_initial,
            maximum=self.backoff_max,
            what=what,
            retry_if=retry_if,
        )

    def fail_over(self, reason: str) -> None:
        """Move to the next apiserver (with only one, do nothing): for a caller that gave up
        on a call itself (its own timeout cancelled it) and suspects the apiserver in use."""
        if len(self.channels) > 1:
            self._fail_over(self._current, DeadlineExceededError(reason))

    async def _stream_failed(self, index: int, err: TinykubeError) -> TinykubeError:
        """A write stream message's error as a unary call's `_call_failed` would give it: a TLS
        mismatch explained, a failover when the apiserver in use may be gone."""
        cause = err.__cause__
        if isinstance(cause, grpc.RpcError):
            err = await self.transport_error(cause, index) or err
        if len(self.channels) > 1 and is_retryable(err) and index == self._current:
            self._fail_over(index, err)
        return err

    async def _call_failed(self, index: int, exc: grpc.RpcError) -> TinykubeError:
        """The tinykube error of a failed call to apiserver `index`; fails over to another
        apiserver if this failure says the one in use may be gone."""
        err: TinykubeError = await self.transport_error(exc, index) or from_rpc_error(exc)
        if len(self.channels) > 1 and is_retryable(err) and index == self._current:
            # (Several calls failing together fail over once: the others see a new current.)
            self._fail_over(index, err)
        return err

    def _fail_over(self, index: int, err: TinykubeError) -> None:
        """Make the next apiserver that is not known to be down the current one; if every
        other one is down, the next anyway (its connection may be back by the retry)."""
        n = len(self.channels)
        others = [(index + k) % n for k in range(1, n)]
        chosen = None
        for k in others:
            state = self.channels[k].get_state(try_to_connect=True)
            if state != grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                chosen = k
                break
        if chosen is None:
            chosen = others[0]
            self._redial(chosen)
        self._current = chosen
        self.failovers += 1
        log.info(
            "apiserver %s failed (%s: %s); failing over to %s",
            self.targets[index],
            type(err).__name__,
            err.message,
            self.targets[chosen],
        )

    async def _bound_rv(self, namespace: str, name: str, node_name: str, uid: str) -> str | None:
        """The pod's resourceVersion if it is bound to `node_name` (and has `uid`, if given):
        an earlier, ambiguous attempt of our own Bind landed. None otherwise."""
        try:
            pod = await self.pods.get(name, namespace)
        except TinykubeError:
            return None
        if pod.spec.nodeName != node_name or (uid and pod.metadata.uid != uid):
            return None
        return pod.metadata.resourceVersion

    async def bind(self, namespace: str, name: str, node_name: str, uid: str = "") -> str:
        """Bind a pod to a node (a compare-and-swap on the server); returns the new resourceVersion.

        ALREADY_EXISTS means another binder won; FAILED_PRECONDITION means the pod is being
        deleted or its uid changed; NOT_FOUND means the pod or node is gone.
        """
        binding = pod_pb2.Binding(
            metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=meta_pb2.ObjectReference(kind="Node", name=node_name),
        )
        attempts = Attempts()
        try:
            response: pod_pb2.BindResponse = await self._unary(
                self.pods._stubs,
                "Bind",
                pod_pb2.BindRequest(binding=binding),
                "tinykube.v1.Pods/Bind",
                attempts=attempts,
            )
        except AlreadyExistsError:
            if not attempts.ambiguous:
                raise
            rv = await self._bound_rv(namespace, name, node_name, uid)
            if rv is None:
                raise
            return rv
        return response.resourceVersion

    async def bind_batch(self, items: Sequence[BindItem]) -> list[str | TinykubeError]:
        """Bind several pods in one RPC (Pods/BindBatch); each binding is its own
        compare-and-swap on the server, exactly as `bind`.

        Returns one entry per item, in order: the pod's new resourceVersion, or the error the
        same `bind` would have raised (AlreadyExistsError, PreconditionFailedError, ...). Only a
        failure of the whole RPC raises; it is retried on UNAVAILABLE and DEADLINE_EXCEEDED, and
        after a retry an item's ALREADY_EXISTS whose pod is bound to the node asked for is the
        earlier attempt's success (as in `bind`), reported as the pod's resourceVersion.
        """
        request = pod_pb2.BindBatchRequest(
            bindings=[
                pod_pb2.Binding(
                    metadata=meta_pb2.ObjectMeta(name=i.name, namespace=i.namespace, uid=i.uid),
                    target=meta_pb2.ObjectReference(kind="Node", name=i.node_name),
                )
                for i in items
            ]
        )
        attempts = Attempts()
        response: pod_pb2.BindBatchResponse = await self._unary(
            self.pods._stubs, "BindBatch", request, "tinykube.v1.Pods/BindBatch", attempts=attempts
        )
        if len(response.results) != len(items):
            raise TinykubeError(
                f"BindBatch answered {len(response.results)} results for {len(items)} bindings"
            )
        out: list[str | TinykubeError] = []
        for r in response.results:
            if r.code == 0:
                out.append(r.resourceVersion)
            else:
                code = _STATUS_BY_NUMBER.get(r.code, grpc.StatusCode.UNKNOWN)
                out.append(from_status(code, r.message))
        if attempts.ambiguous:
            await self._recognise_binds(items, out)
        return out

    async def update_status_batch(self, pods: Sequence[pod_pb2.Pod]) -> list[str | TinykubeError]:
        """Write several pods' status in one RPC (Pods/UpdateStatusBatch); each pod is its own
        UpdateStatus on the server, exactly as `pods.update_status`.

        Returns one entry per pod, in order: the pod's new resourceVersion (its stored status
        is the one sent), or the error the same `update_status` would have raised
        (ConflictError, NotFoundError, ForbiddenError, InvalidError, ...). Only a failure of the
        whole RPC raises; it is retried on UNAVAILABLE and DEADLINE_EXCEEDED when every pod
        carries a resourceVersion (a precondition: a write of an earlier attempt that landed
        then answers a conflict, never a double write), else only if unsent.
        """
        request = pod_pb2.UpdateStatusBatchRequest(pods=pods)
        retry_if = is_retryable if all(p.metadata.resourceVersion for p in pods) else is_unsent
        response: pod_pb2.UpdateStatusBatchResponse = await self._unary(
            self.pods._stubs,
            "UpdateStatusBatch",
            request,
            "tinykube.v1.Pods/UpdateStatusBatch",
            retry_if=retry_if,
        )
        if len(response.results) != len(pods):
            raise TinykubeError(
                f"UpdateStatusBatch answered {len(response.results)} results for {len(pods)} pods"
            )
        out: list[str | TinykubeError] = []
        for r in response.results:
            if r.code == 0:
                out.append(r.resourceVersion)
            else:
                code = _STATUS_BY_NUMBER.get(r.code, grpc.StatusCode.UNKNOWN)
                out.append(from_status(code, r.message))
        return out

    async def _recognise_binds(
        self, items: Sequence[BindItem], out: list[str | TinykubeError]
    ) -> None:
        """Turn each ALREADY_EXISTS in `out` whose pod is bound where `items` asked into the
        pod's resourceVersion (an earlier attempt's success); one Get per such item."""
        suspects = [k for k, r in enumerate(out) if isinstance(r, AlreadyExistsError)]
        found = await asyncio.gather(
            *(
                self._bound_rv(items[k].namespace, items[k].name, items[k].node_name, items[k].uid)
                for k in suspects
            )
        )
        for k, rv in zip(suspects, found, strict=True):
            if rv is not None:
                out[k] = rv

    def _redial(self, k: int) -> None:
        """Replace channel `k`, in TRANSIENT_FAILURE (its apiserver was down when it last
        tried), by a fresh one: that dials at once, where the old one would fail every call
        until the rest of gRPC's reconnect backoff (up to 2 s) had passed, even with its
        apiserver back (measured: a 3.3 s stall after the second of two apiserver kills)."""
        old = self.channels[k]
        if not isinstance(old, grpc.aio.Channel):
            return  # (a test's stand-in)
        fresh = self.credentials.channel(self.targets[k], CHANNEL_OPTIONS)
        fresh.get_state(try_to_connect=True)
        self.channels[k] = fresh
        for resource in self._by_kind.values():
            resource._stubs[k] = resource.info.stub(fresh)
        # It has no calls: each failed at once. Closing it is a coroutine.
        closing = asyncio.get_running_loop().create_task(old.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def wait_ready(self, timeout: float) -> None:  # noqa: ASYNC109 (the contract's API)
        """Wait until a channel is connected (the current apiserver's, else the first other
        one to connect, which becomes current); DeadlineExceededError after `timeout` seconds."""
        if self.channel.get_state() == grpc.ChannelConnectivity.READY:
            return
        ready = {
            asyncio.ensure_future(channel.channel_ready()): k
            for k, channel in enumerate(self.channels)
        }
        try:
            done, _ = await asyncio.wait(ready, timeout=timeout, return_when=FIRST_COMPLETED)
        finally:
            for task in ready:
                task.cancel()
        if not done:
            raise DeadlineExceededError(
                f"apiserver at {self.target} not reachable within {timeout:g}s"
            )
        if self.channel.get_state() != grpc.ChannelConnectivity.READY:
            self._current = ready[next(iter(done))]

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, *, context: str = "", **kwargs: Any
    ) -> Client:
        """A client for the kubeconfig's current context (`path`, else `$KUBECONFIG`)."""
        from tinykube.kubeconfig import load

        config = load(path, context=context)
        return cls(config.grpc_server, credentials=config.credentials, **kwargs)

    async def transport_error(
        self, exc: grpc.RpcError, index: int | None = None
    ) -> TransportSecurityError | None:
        """The TLS mismatch behind an UNAVAILABLE failure of a call to apiserver `index` (the
        current one by default), if that is what it is."""
        code = exc.code() if hasattr(exc, "code") else None
        if code != grpc.StatusCode.UNAVAILABLE:
            return None
        target = self.targets[self._current if index is None else index]
        problem = self._tls_problems.get(target)
        if problem is None:
            details = exc.details() if hasattr(exc, "details") else ""
            problem = await asyncio.to_thread(explain, target, self.credentials, details or "")
            if problem is None:
                return None  # not TLS (this time): a later failure is looked at afresh
            self._tls_problems[target] = problem
        return TransportSecurityError(problem)

    async def close(self) -> None:
        if self._write_streams:
            await asyncio.gather(*(s.close() for s in self._write_streams))
        for channel in self.channels:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _serialize_message(message: Message) -> bytes:
    return message.SerializeToString()


def _streamable_methods(info: KindInfo) -> dict[str, tuple[type[Message], str]]:
    """The write methods whose `<Method>Stream` the kind's service declares: their answer
    message (`<Kind>WriteResult`) and its object field."""
    result_type = write_result_type(info.message)
    if result_type is None:
        return {}
    declared = declared_methods(info.message, info.service)
    return {
        method: (result_type, info.request_field)
        for method in ("Create", "Update", "UpdateStatus")
        if f"{method}Stream" in declared
    }


def _update_retry(
    obj: Message, dry_run: bool = False, resend_ambiguous: bool = True
) -> Callable[[BaseException], bool]:
    """The retry rule of an Update: always with a resourceVersion precondition or for a dry
    run (which changes nothing), else only if unsent; only if unsent, too, when the caller
    asked that an update that may have landed not be re-sent (`resend_ambiguous` False)."""
    if not resend_ambiguous:
        return is_unsent
    meta: Any = cast(Any, obj).metadata
    return is_retryable if meta.resourceVersion or dry_run else is_unsent


def _has_field(msg: Any, name: str) -> bool:
    return name in msg.DESCRIPTOR.fields_by_name


def _has_all(sent: Any, stored: Any) -> bool:
    """Every entry of a map or list field `sent` is in `stored` (messages: `_contains`)."""
    if hasattr(sent, "keys"):
        return all(k in stored and _same(sent[k], stored[k]) for k in sent)
    return len(sent) == len(stored) and all(_same(a, b) for a, b in zip(sent, stored, strict=True))


def _same(sent: Any, stored: Any) -> bool:
    if isinstance(sent, Message):
        return isinstance(stored, Message) and _contains(sent, stored)
    return bool(sent == stored)


def _contains(sent: Message, stored: Message) -> bool:
    """Every field set in `sent` has the same value in `stored`, recursively; fields `sent`
    left unset (the server's defaults) are not compared."""
    for field, value in sent.ListFields():
        other = getattr(stored, field.name)
        if field.is_repeated:
            if not _has_all(value, other):
                return False
        elif not _same(value, other):
            return False
    return True
