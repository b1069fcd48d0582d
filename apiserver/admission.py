"""Admission: the apiserver's built-in NamespaceLifecycle, ServiceAccount and Priority plugins,
over the caches.

Kubernetes' admission chain runs between decoding a write and storing it; these are the
plugins tinykube has, in kube-apiserver's order, with its rules and messages:

- NamespaceLifecycle: creating a namespaced object in a namespace that does not exist is
  NotFound (`namespaces "x" not found`), in one being terminated Forbidden ("unable to create
  new content in namespace x because it is being terminated", cause NamespaceTerminating);
  the built-in namespaces may not be deleted. The check reads the Namespace watch cache (a
  dict lookup per create); only a namespace the cache does not have, or one this apiserver
  started deleting less than 30 s ago that the cache still shows Active, is read from etcd,
  as kube-apiserver's plugin falls back to a live lookup.
- ServiceAccount (plugin/pkg/admission/serviceaccount): a new pod that names no
  serviceAccountName runs as "default"; a pod whose account does not exist is Forbidden
  (`pods "web" is forbidden: error looking up service account team/robot: serviceaccount
  "robot" not found`; clients retry, as kube's message is meant). The account is read from the
  ServiceAccount watch cache (a dict lookup per pod); one the cache does not have is read from
  etcd, and "default", which the controller manager creates right after its namespace, is
  looked for ten times 100-200 ms apart first, as kube's plugin does. A mirror pod (annotation
  kubernetes.io/config.mirror) may name no account and reference no Secret. Only pod creates
  are checked (an account deleted later leaves its pods alone). Unless the pod's (else the
  account's) automountServiceAccountToken is false, the pod gets kube's projected
  `kube-api-access-<5 random>` volume (apiserver/serviceaccount.py) mounted read-only at
  /var/run/secrets/kubernetes.io/serviceaccount in every container that mounts nothing there;
  an apiserver without --service-account-signing-key-file (tinykube's insecure mode; kube's
  apiserver does not start without one) adds none, as no token could be minted for it.
  tinykube pods have no imagePullSecrets to copy from the account.
- Priority: a new pod's spec.priority (and spec.preemptionPolicy, when the class has one) come
  from its priorityClassName, or from the global default class when it names none (which also
  fills in priorityClassName); no default class means priority 0 and PreemptLowerPriority.
  An unknown class, or a priority or preemptionPolicy that differs from the class's, is
  Forbidden. A PriorityClass may be globalDefault only while no other class is (checked once
  the cache has caught up with etcd). Classes are read from the PriorityClass watch cache
  (etcd only for a name the cache does not have).

Admission runs on the event loop inside the request; its only awaits are those fallback reads.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Protocol

from apiserver.policies import PolicyDispatcher
from apiserver.registry.priorityclass import SYSTEM_PRIORITY_CLASSES
from apiserver.serviceaccount import (
    DEFAULT_SERVICE_ACCOUNT,
    add_api_access_volume,
    convert_pod_spec,
    random_suffix,
    set_pod_service_account,
    should_automount,
)
from apiserver.storage import KV, ListResult
from apiserver.watchcache import CachedObject
from apiserver.webhooks import WebhookDispatcher
from tinykube.clock import Clock
from tinykube.errors import ForbiddenError, NotFoundError
from tinykube.kinds import NAMESPACE, POD, PRIORITY_CLASS, SERVICE_ACCOUNT, KindInfo
from tinykube.v1 import namespace_pb2, pod_pb2, priorityclass_pb2, serviceaccount_pb2

# The namespaces every cluster has (created by the apiserver at start), which may not be
# deleted. Kubernetes protects default, kube-system and kube-public this way and recreates
# kube-node-lease when it is deleted; tinykube protects all four.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# How long after a namespace's deletion started its cached phase is not trusted (kube's
# forceLiveLookupTTL): another apiserver's cache may not have seen the deletion yet.
_LIVE_LOOKUP_SECONDS = 30.0

PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"

# kube's MirrorPodAnnotationKey: a static pod's copy in the API.
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# How often the ServiceAccount plugin looks for "default" before refusing (kube's numAttempts),
# and the bounds of the one random interval between the looks, in seconds.
_DEFAULT_ACCOUNT_ATTEMPTS = 10
_ACCOUNT_RETRY_SECONDS = (0.1, 0.2)


class CacheView(Protocol):
    """What admission reads of a kind's watch cache (apiserver.watchcache.WatchCache)."""

    @property
    def state(self) -> Mapping[bytes, CachedObject]: ...

    @property
    def state_revision(self) -> int: ...

    async def wait_fresh(self) -> bool: ...


class StorageView(Protocol):
    async def get(self, key: bytes) -> KV | None: ...

    async def list_prefix(self, prefix: bytes) -> ListResult: ...


def _object_name(obj: object) -> str:
    """The name admission errors give an object: its name, else its generateName (kube's
    extractResourceName: names are generated after admission)."""
    meta = obj.metadata  # type: ignore[attr-defined]
    return str(meta.name or meta.generateName)


class Admission:
    """The admission plugins of one apiserver, reading the given watch caches."""

    def __init__(
        self,
        caches: Mapping[str, CacheView],
        storage: StorageView,
        *,
        prefix: str,
        clock: Clock,
    ) -> None:
        self.namespaces = caches[NAMESPACE.kind]
        self.classes = caches[PRIORITY_CLASS.kind]
        self.accounts = caches[SERVICE_ACCOUNT.kind]
        self.storage = storage
        self.clock = clock
        self._ns_prefix = f"{prefix}/{NAMESPACE.plural}/".encode()
        self._pc_prefix = f"{prefix}/{PRIORITY_CLASS.plural}/".encode()
        self._sa_prefix = f"{prefix}/{SERVICE_ACCOUNT.plural}/".encode()
        # Whether pods get the kube-api-access token volume: only an apiserver with a service
        # account signing key can mint its tokens (kube-apiserver does not start without one).
        self.mount_tokens = True
        # Namespaces whose deletion this apiserver started -> until when to look them up live.
        self._deleting: dict[str, float] = {}
        # (cache state object, cache revision) -> the global default class at that point.
        self._default: tuple[int, int, priorityclass_pb2.PriorityClass | None] | None = None
        # The admission webhooks (apiserver/webhooks.py), which the stores call after these
        # plugins; set by the apiserver.
        self.webhooks: WebhookDispatcher | None = None
        # ValidatingAdmissionPolicy (apiserver/policies.py), run before the validating
        # webhooks; set by the apiserver.
        self.policies: PolicyDispatcher | None = None

    # ---- create / update -------------------------------------------------------------------

    async def admit(self, info: KindInfo, obj: object) -> None:
        """The mutating plugins on a create: may fill in fields of `obj`; raises NotFoundError
        or ForbiddenError to refuse it."""
        if info.namespaced:
            await self._check_namespace(info, obj)
        if info.kind == POD.kind:
            await self._admit_service_account(obj)  # type: ignore[arg-type]
            await self._admit_pod(obj)  # type: ignore[arg-type]

    def validates(self, info: KindInfo) -> bool:
        """Whether `validate` checks anything of `info`'s objects (only PriorityClasses'), so
        the store makes no coroutine for it otherwise."""
        return info.kind == PRIORITY_CLASS.kind

    async def validate(self, info: KindInfo, obj: object, old: object | None) -> None:
        """The validating plugins on a create (`old` None) or update, after validation."""
        if info.kind == PRIORITY_CLASS.kind and obj.globalDefault:  # type: ignore[attr-defined]
            # Rare, and a class made default a moment ago must count: read the cache only
            # once it holds everything etcd has, else etcd itself.
            if await self.classes.wait_fresh():
                current = self.default_class()
            else:
                current = await self._default_from_storage()
            self._check_default(obj, old, current)  # type: ignore[arg-type]

    # ---- NamespaceLifecycle ----------------------------------------------------------------

    def check_delete(self, info: KindInfo, name: str) -> None:
        """Refuse deleting a system namespace (Forbidden, as kube-apiserver words it)."""
        if info.kind == NAMESPACE.kind and name in SYSTEM_NAMESPACES:
            raise ForbiddenError.for_object(
                NAMESPACE.plural, name, "this namespace may not be deleted"
            )

    def namespace_deleting(self, name: str) -> None:
        """This apiserver marked namespace `name` Terminating: trust only etcd about it for a
        while, so creates through this apiserver never race its own cache."""
        self._deleting[name] = self.clock.monotonic() + _LIVE_LOOKUP_SECONDS

    def _live_lookup(self, name: str) -> bool:
        until = self._deleting.get(name)
        if until is None:
            return False
        if self.clock.monotonic() < until:
            return True
        del self._deleting[name]
        return False

    async def _check_namespace(self, info: KindInfo, obj: object) -> None:
        namespace = obj.metadata.namespace  # type: ignore[attr-defined]
        key = self._ns_prefix + namespace.encode()
        hit = self.namespaces.state.get(key)
        phase = hit.fields.get("status.phase", "") if hit is not None else ""
        if hit is None or (
            self._deleting and phase != "Terminating" and self._live_lookup(namespace)
        ):
            kv = await self.storage.get(key)
            if kv is None:
                raise NotFoundError(f'{NAMESPACE.plural} "{namespace}" not found').about(
                    NAMESPACE.group, NAMESPACE.plural, namespace
                )
            phase = namespace_pb2.Namespace.FromString(kv.value).status.phase
        if phase == "Terminating":
            raise ForbiddenError.for_object(
                info.plural,
                _object_name(obj),
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                [
                    (
                        "NamespaceTerminating",
                        f"namespace {namespace} is being terminated",
                        "metadata.namespace",
                    )
                ],
            )

    # ---- ServiceAccount --------------------------------------------------------------------

    async def _admit_service_account(self, pod: pod_pb2.Pod) -> None:
        spec = pod.spec
        # Admission sees the pod as kube's decoding left it: the deprecated alias converted.
        convert_pod_spec(spec)
        if MIRROR_POD_ANNOTATION in pod.metadata.annotations:
            # Mirror pods are left as the kubelet wrote them, and may not name accounts.
            if spec.serviceAccountName:
                raise self._pod_forbidden(pod, "a mirror pod may not reference service accounts")
            if _references_secrets(spec):
                raise self._pod_forbidden(pod, "a mirror pod may not reference secrets")
            return
        if not spec.serviceAccountName:
            set_pod_service_account(spec, DEFAULT_SERVICE_ACCOUNT)
        namespace = pod.metadata.namespace
        name = spec.serviceAccountName
        account = await self.service_account(namespace, name)
        if account is None:
            raise self._pod_forbidden(
                pod,
                f'error looking up service account {namespace}/{name}: serviceaccount "{name}" '
                "not found",
            )
        if self.mount_tokens and should_automount(spec, account):
            add_api_access_volume(spec, random_suffix())
        if not spec.imagePullSecrets:
            # kube's ServiceAccount admission: a pod naming no pull secrets gets its account's.
            spec.imagePullSecrets.extend(account.imagePullSecrets)

    async def service_account_exists(self, namespace: str, name: str) -> bool:
        return await self.service_account(namespace, name) is not None

    async def service_account(
        self, namespace: str, name: str
    ) -> serviceaccount_pb2.ServiceAccount | None:
        """ServiceAccount namespace/name, or None: the cache, else etcd (several times for
        "default", which its controller is about to create in a new namespace). Never mutate
        it."""
        key = self._sa_prefix + f"{namespace}/{name}".encode()
        cached = self.accounts.state.get(key)
        if cached is not None:
            return cached.obj  # type: ignore[return-value]
        attempts = _DEFAULT_ACCOUNT_ATTEMPTS if name == DEFAULT_SERVICE_ACCOUNT else 1
        interval = random.uniform(*_ACCOUNT_RETRY_SECONDS)
        for attempt in range(attempts):
            if attempt:
                await self.clock.sleep(interval)
                cached = self.accounts.state.get(key)
                if cached is not None:
                    return cached.obj  # type: ignore[return-value]
            kv = await self.storage.get(key)
            if kv is not None:
                return serviceaccount_pb2.ServiceAccount.FromString(kv.value)
        return None

    # ---- Priority --------------------------------------------------------------------------

    async def priority_class(self, name: str) -> priorityclass_pb2.PriorityClass | None:
        """The class named `name` (cache first, then etcd), or None. Never mutate it."""
        key = self._pc_prefix + name.encode()
        hit = self.classes.state.get(key)
        if hit is not None:
            return hit.obj  # type: ignore[return-value]
        kv = await self.storage.get(key)
        if kv is None:
            return None
        return priorityclass_pb2.PriorityClass.FromString(kv.value)

    def default_class(self) -> priorityclass_pb2.PriorityClass | None:
        """The globalDefault class (the lowest-valued one if a race made several, as kube)."""
        cache = self.classes
        memo = self._default
        if memo is not None and memo[0] == id(cache.state) and memo[1] == cache.state_revision:
            return memo[2]
        found: priorityclass_pb2.PriorityClass | None = None
        for cached in cache.state.values():
            pc: priorityclass_pb2.PriorityClass = cached.obj  # type: ignore[assignment]
            if pc.globalDefault and (found is None or pc.value < found.value):
                found = pc
        self._default = (id(cache.state), cache.state_revision, found)
        return found

    async def _admit_pod(self, pod: pod_pb2.Pod) -> None:
        spec = pod.spec
        policy: str | None
        if spec.priorityClassName:
            pc = await self.priority_class(spec.priorityClassName)
            if pc is None:
                raise self._pod_forbidden(
                    pod, f"no PriorityClass with name {spec.priorityClassName} was found"
                )
            priority = pc.value
            policy = pc.preemptionPolicy if pc.HasField("preemptionPolicy") else None
        else:
            default = self.default_class()
            if default is not None:
                spec.priorityClassName = default.metadata.name
                priority = default.value
                policy = default.preemptionPolicy if default.HasField("preemptionPolicy") else None
            else:
                priority, policy = 0, PREEMPT_LOWER_PRIORITY
        if spec.HasField("priority") and spec.priority != priority:
            raise self._pod_forbidden(
                pod,
                f"the integer value of priority ({spec.priority}) must not be provided in pod "
                f"spec; priority admission controller computed {priority} from the given "
                "PriorityClass name",
            )
        spec.priority = priority
        if policy is not None:
            if spec.preemptionPolicy and spec.preemptionPolicy != policy:
                raise self._pod_forbidden(
                    pod,
                    f"the string value of PreemptionPolicy ({spec.preemptionPolicy}) must not "
                    f"be provided in pod spec; priority admission controller computed {policy} "
                    "from the given PriorityClass name",
                )
            spec.preemptionPolicy = policy

    def _pod_forbidden(self, pod: pod_pb2.Pod, why: str) -> ForbiddenError:
        return ForbiddenError.for_object(POD.plural, _object_name(pod), why)

    async def _default_from_storage(self) -> priorityclass_pb2.PriorityClass | None:
        found: priorityclass_pb2.PriorityClass | None = None
        for kv in (await self.storage.list_prefix(self._pc_prefix)).kvs:
            pc = priorityclass_pb2.PriorityClass.FromString(kv.value)
            if pc.globalDefault and (found is None or pc.value < found.value):
                found = pc
        return found

    def _check_default(
        self,
        pc: priorityclass_pb2.PriorityClass,
        old: priorityclass_pb2.PriorityClass | None,
        current: priorityclass_pb2.PriorityClass | None,
    ) -> None:
        if not pc.globalDefault:
            return
        if current is None:
            return
        if old is None or current.metadata.name != pc.metadata.name:
            raise ForbiddenError.for_object(
                PRIORITY_CLASS.plural,
                pc.metadata.name,
                f"PriorityClass {current.metadata.name} is already marked as default. Only one "
                "default can exist",
            )


def _references_secrets(spec: pod_pb2.PodSpec) -> bool:
    """Whether a container reads a Secret (podutil.VisitPodSecretNames over what tinykube pods
    have: env secretKeyRef, envFrom secretRef, secret and projected secret volumes)."""
    for vol in spec.volumes:
        if vol.HasField("secret") or any(s.HasField("secret") for s in vol.projected.sources):
            return True
    for c in (*spec.initContainers, *spec.containers):
        if any(e.valueFrom.HasField("secretKeyRef") for e in c.env):
            return True
        if any(source.HasField("secretRef") for source in c.envFrom):
            return True
    return False


def system_priority_classes() -> list[priorityclass_pb2.PriorityClass]:
    """The built-in classes the apiserver creates at start when they are missing."""
    out = []
    for name, (value, description) in SYSTEM_PRIORITY_CLASSES.items():
        pc = priorityclass_pb2.PriorityClass(value=value, description=description)
        pc.metadata.name = name
        out.append(pc)
    return out
