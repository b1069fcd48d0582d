"""The resource layer: one `ResourceStore` per kind in `tinykube.kinds`, shared by both front ends.

`ResourceStore` implements create/get/list/update/update_status/delete/watch over `Storage`
(writes and point reads go to etcd) and the kind's `WatchCache` (unpaged lists and watches):
validation, defaults, optimistic concurrency, graceful deletion, finalizers. Every update goes
through one pipeline, `guaranteed_update` (kube's GuaranteedUpdate: read, transform, admit,
validate, compare-and-swap, retry on conflict), and every write takes the request's
`RequestContext` (apiserver/requestcontext.py: identity, dry run, field manager); a dry run
runs every check and stops before etcd. Pods (bind, evict) and namespaces (finalize, deletion
lifecycle) have their own stores over this one: apiserver/podstore.py and
apiserver/namespacestore.py. It is transport-neutral: methods take and return the API's
messages (a list returns the watch cache's objects, already encoded once; a watch registers a
`Watcher` on the cache) and raise `TinykubeError`s. The gRPC front end (apiserver/grpcapi.py)
and the REST front end (apiserver/rest/) are codecs and routers over it, so a rule lives here
once. Everything runs on the event loop; a request's etcd round trips are its only awaits, and
writes are compare-and-swap so concurrent requests are safe.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import dataclasses
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from google.protobuf import json_format
from google.protobuf.message import Message

from apiserver import fieldmanager
from apiserver.admission import Admission
from apiserver.allocator import Claims, ServiceAllocator
from apiserver.auth.escalation import EscalationGuard
from apiserver.auth.filters import admit_node_write
from apiserver.deletion import check_policy, gc_finalizers
from apiserver.policies import PolicyDispatcher
from apiserver.registry import META_FIELDS, SELECTABLE_FIELDS, Strategy
from apiserver.requestcontext import DRY_RUN_ALL, INTERNAL, RequestContext
from apiserver.settings import Settings
from apiserver.storage import KV, Storage, WriteResult
from apiserver.validation import required
from apiserver.watchcache import (
    CachedObject,
    Codec,
    Queued,
    WatchCache,
    Watcher,
)
from apiserver.webhooks import WebhookDispatcher, WebhookRequest, user_info
from tinykube.clock import Clock
from tinykube.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    FieldError,
    InternalError,
    InvalidError,
    NotFoundError,
    RequestEntityTooLargeError,
    ResourceExpiredError,
    TinykubeError,
    UnimplementedError,
)
from tinykube.kinds import KindInfo
from tinykube.manifest import ManifestError, parse_as, to_dict
from tinykube.meta import generate_name, get_continue, timestamp
from tinykube.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    check_fields,
    parse_field_selector,
    parse_label_selector,
)
from tinykube.v1 import meta_pb2

log = logging.getLogger(__name__)

_CAS_ATTEMPTS = 8
# Bindings per BindBatch: each is its own compare-and-swap, all in flight at once.
MAX_BIND_BATCH = 1000


@dataclass(slots=True)
class _Current:
    obj: Message  # a private copy, free to mutate
    revision: int  # its etcd mod_revision
    authoritative: bool  # read from etcd (or proven by the client's resourceVersion)


class _Reread(Exception):
    """An attempt's answer rests on a cached copy that only etcd may confirm: read again."""


# An update's transform (kube's UpdateFunc): the current object (a private copy, never to be
# mutated; None when it does not exist and the update may create it) -> the object wanted.
Transform = Callable[[Message | None], Awaitable[Message]]


# ASCII digits only, as Go's strconv reads a resourceVersion: Python's int() also takes
# "1_000", " 1" and other scripts' digits.
_REVISION_RE = re.compile(r"-?[0-9]+\Z")


def _parse_rv(text: str, what: str = "resourceVersion") -> int:
    # Past 19 digits it is no int64 (and int() of thousands of digits raises).
    if not _REVISION_RE.match(text) or len(text.lstrip("-0")) > 19:
        raise InvalidError(f'invalid {what} "{text}": must be an integer etcd revision')
    value = int(text)
    if value < 0:
        raise InvalidError(f'invalid {what} "{text}": must not be negative')
    if value > _MAX_REVISION:
        raise InvalidError(f'invalid {what} "{text}": must be an integer etcd revision')
    return value


def _encode_continue(revision: int, next_key: bytes, prefix: bytes) -> str:
    payload = {"v": 1, "rv": revision, "start": next_key[len(prefix) :].decode("utf-8", "replace")}
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


# etcd revisions are int64; a token's revision outside (0, 2**63) is forged, never issued.
_MAX_REVISION = 2**63 - 1


def _bad_continue(detail: str) -> BadRequestError:
    return BadRequestError(f"invalid continue token: continue key is not valid: {detail}")


def _decode_continue(token: str, prefix: bytes) -> tuple[int, bytes]:
    """(revision, start key) of a token `_encode_continue` made; BadRequestError (Kubernetes'
    400 wording) for anything else, so a forged token never reaches etcd."""
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, binascii.Error, RecursionError) as exc:
        # ValueError covers bad JSON, bad UTF-8 and Python's int-string digit limit.
        raise _bad_continue(f"not base64-encoded JSON ({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("v") != 1:
        raise _bad_continue("unrecognized encoded version")
    revision, start = payload.get("rv"), payload.get("start")
    # bool is an int to Python, and 1e400 decodes to inf: only a JSON integer is a revision.
    if type(revision) is not int or not 0 < revision <= _MAX_REVISION:
        raise _bad_continue("incorrect encoded start resourceVersion")
    if not isinstance(start, str):
        raise _bad_continue("encoded start key is not a string")
    return revision, prefix + start.encode("utf-8", "surrogatepass")


class ListPage(NamedTuple):
    """One List answer before encoding."""

    revision: str
    items: builtins.list[CachedObject]
    token: str
    # Objects after this page (kube's remainingItemCount), when knowable: None otherwise.
    remaining: int | None = None


class ResourceStore:
    """Create/Get/List/Update/UpdateStatus/Delete/Watch of one kind, for either front end."""

    def __init__(
        self,
        info: KindInfo,
        *,
        storage: Storage,
        cache: WatchCache,
        codec: Codec,
        strategy: Strategy,
        settings: Settings,
        clock: Clock,
        key_prefix: bytes,
        allocator: ServiceAllocator | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.info = info
        self.storage = storage
        self.cache = cache
        self.codec = codec
        self.strategy = strategy
        self.settings = settings
        self.clock = clock
        self.prefix = key_prefix  # b"/registry/pods/"
        # Services only: cluster IPs and nodePorts claimed in the same txn as each write.
        self.allocator = allocator
        # NamespaceLifecycle and Priority (apiserver/admission.py); None admits everything.
        self.admission = admission
        self.plural = info.plural
        # The four RBAC kinds only, when authorization is on: privilege escalation prevention
        # (apiserver/auth/escalation.py). None everywhere else.
        self.escalation: EscalationGuard | None = None
        # Whether a write is answered only once the watch cache holds it (`_settled`).
        self.answer_when_cached = False
        # Seconds an object lives after its last write (kube's TTLFunc: Events, --event-ttl);
        # 0: until deleted. Each create and update writes it under an etcd lease that long.
        self.ttl_seconds = 0
        # Kinds without their own entry (new rows in tinykube.kinds) select by metadata only.
        self.supported_fields = SELECTABLE_FIELDS.get(info.kind, META_FIELDS)

    @property
    def webhooks(self) -> WebhookDispatcher | None:
        """The admission webhooks (apiserver/webhooks.py), which come with the admission
        plugins, so every store given them (custom kinds' too) calls the webhooks."""
        return self.admission.webhooks if self.admission is not None else None

    @property
    def policies(self) -> PolicyDispatcher | None:
        """ValidatingAdmissionPolicy (apiserver/policies.py), with the admission plugins."""
        return self.admission.policies if self.admission is not None else None

    # ---- helpers ---------------------------------------------------------------------------

    def _namespace(self, namespace: str) -> str:
        if not self.info.namespaced:
            return ""
        return namespace or "default"

    def key(self, namespace: str, name: str) -> bytes:
        if "/" in name or "/" in namespace:
            # No valid name holds a "/"; refusing here keeps requests inside their own key.
            raise self._not_found(name)
        if self.info.namespaced:
            return self.prefix + f"{namespace}/{name}".encode()
        return self.prefix + name.encode()

    def _list_prefix(self, namespace: str) -> bytes:
        if "/" in namespace:
            raise InvalidError(f'invalid namespace "{namespace}"')
        if self.info.namespaced and namespace:
            return self.prefix + f"{namespace}/".encode()
        return self.prefix

    def _decode(self, kv: KV) -> Message:
        obj = self.info.message.FromString(kv.value)
        obj.metadata.resourceVersion = str(kv.mod_revision)  # type: ignore[attr-defined]
        return obj

    async def _current(
        self, key: bytes, *, revision: int = 0, cached: bool = True
    ) -> _Current | None:
        """The object at `key` as a private copy, or None if it does not exist.

        Writes use the watch cache's copy as their first guess when it is at the revision the
        client names (or any revision for unconditional writes): the compare-and-swap proves
        it current, and a failed one returns the real value. That saves an etcd read per write.
        Only etcd's answer (`authoritative`) may justify an error.
        """
        if cached:
            hit = self.cache.state.get(key)
            if hit is not None and (revision == 0 or hit.revision == revision):
                obj = self.info.message.FromString(hit.data)
                obj.metadata.resourceVersion = str(hit.revision)  # type: ignore[attr-defined]
                return _Current(obj, hit.revision, revision != 0)
        kv = await self.storage.get(key)
        if kv is None:
            return None
        return _Current(self._decode(kv), kv.mod_revision, True)

    def _after_failure(self, result: WriteResult) -> _Current | None:
        if result.current is None:
            return None
        return _Current(self._decode(result.current), result.current.mod_revision, True)

    def _not_found(self, name: str) -> NotFoundError:
        return NotFoundError(f'{self.plural} "{name}" not found')

    def _conflict(self, name: str, detail: str = "") -> ConflictError:
        return ConflictError(
            f'Operation cannot be fulfilled on {self.plural} "{name}": '
            + (
                detail
                or "the object has been modified; please apply your changes to the latest "
                "version and try again"
            )
        )

    def _check_size(self, request: Message, name: str) -> None:
        size = request.ByteSize()
        limit = self.settings.max_request_bytes
        if size > limit:
            raise RequestEntityTooLargeError(
                f'{self.info.kind} "{name}" is invalid: request is too large: {size} bytes, '
                f"the limit is {limit} bytes (max_request_bytes)"
            )

    def _selectors(self, label_text: str, field_text: str) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels = parse_label_selector(label_text)
            fields = parse_field_selector(field_text)
            check_fields(fields, self.supported_fields, self.plural)
        except SelectorError as exc:
            raise InvalidError(str(exc)) from None
        return labels, fields

    def _stored_value(self, obj: Message) -> bytes:
        meta = obj.metadata  # type: ignore[attr-defined]
        rv = meta.resourceVersion
        meta.resourceVersion = ""
        data = obj.SerializeToString()
        meta.resourceVersion = rv
        limit = self.settings.max_object_bytes
        if len(data) > limit:
            raise RequestEntityTooLargeError(
                f'Request entity too large: {self.info.kind} "{meta.name}" is {len(data)} '
                f"bytes as stored, the limit is {limit} bytes (max_object_bytes)"
            )
        return data

    # ---- Service allocations -----------------------------------------------------------

    def _held(self, obj: Message) -> list[bytes]:
        """Allocation keys a stored object holds, released in the txn that deletes it."""
        if self.allocator is None:
            return []
        return self.allocator.keys_of(obj.spec)  # type: ignore[attr-defined]

    async def _create_allocated(self, namespace: str, name: str, obj: Message) -> WriteResult:
        assert self.allocator is not None
        key = self.key(namespace, name)

        async def attempt(claims: Claims) -> WriteResult:
            result = await self.storage.create(key, self._stored_value(obj), claims=claims.claims)
            if not result.succeeded and result.current is not None:
                return dataclasses.replace(result, taken=())  # the name exists: not a claim
            return result

        spec = obj.spec  # type: ignore[attr-defined]
        result = await self.allocator.write(
            self.info.kind, name, f"{namespace}/{name}", spec, None, attempt
        )
        assert result is not None
        return result

    async def _update_allocated(
        self, key: bytes, new: Message, old: Message, revision: int
    ) -> WriteResult:
        assert self.allocator is not None
        meta = new.metadata  # type: ignore[attr-defined]

        async def attempt(claims: Claims) -> WriteResult:
            result = await self.storage.update(
                key,
                self._stored_value(new),
                revision,
                claims=claims.claims,
                release=claims.release,
            )
            if not result.succeeded and (
                result.current is None or result.current.mod_revision != revision
            ):
                return dataclasses.replace(result, taken=())  # the object changed: retry it
            return result

        result = await self.allocator.write(
            self.info.kind,
            meta.name,
            f"{meta.namespace}/{meta.name}",
            new.spec,  # type: ignore[attr-defined]
            old.spec,  # type: ignore[attr-defined]
            attempt,
        )
        assert result is not None
        return result

    # ---- Create ----------------------------------------------------------------------------

    async def create(self, request: Message, ctx: RequestContext = INTERNAL) -> Message:
        """Create the object. `ctx.field_manager` records its fields in managedFields
        (operation Update); None leaves managedFields as the request has them (an apply
        computed them). A dry run (`ctx.dry_run`) runs every step the write runs (admission,
        NodeRestriction, escalation, defaults, validation, cluster IP / nodePort allocation
        without claiming anything, the name's uniqueness) and answers the object as it would be
        stored, without a resourceVersion, writing nothing."""
        obj: Message = getattr(request, self.info.request_field)
        meta = obj.metadata  # type: ignore[attr-defined]
        self._check_size(request, meta.name or meta.generateName)
        created = await self._create(obj, ctx)
        if self.answer_when_cached:  # (`_settled` only when it waits: one coroutine fewer)
            return await self._settled(created, ctx)
        return created

    async def _settled(self, obj: Message, ctx: RequestContext) -> Message:
        """`obj` once this apiserver's watch cache holds the write, for kinds that ask
        (`answer_when_cached`: admission policies, so a policy applied through an apiserver is
        in force there when the client hears back). Other kinds answer at once."""
        if self.answer_when_cached and not ctx.dry_run:
            rv = obj.metadata.resourceVersion  # type: ignore[attr-defined]
            if rv:
                await self.cache.wait_for_revision(int(rv))
        return obj

    async def _create(self, obj: Message, ctx: RequestContext) -> Message:
        meta = obj.metadata  # type: ignore[attr-defined]
        meta.namespace = self._namespace(meta.namespace)
        generated = not meta.name and bool(meta.generateName)
        # kube-apiserver defaults a body as it decodes it, so admission sees the defaults.
        self.strategy.set_defaults(obj)
        # Whether they still hold: the built-in plugins set whole fields; a webhook's object
        # is decoded again, so defaulted again by `prepare_for_create`.
        defaulted = True
        # Mutating admission runs before the strategy's PrepareForCreate, as in kube-apiserver
        # (the Priority plugin's preemptionPolicy comes before the strategy's fallback).
        await self.admit(obj)
        if self.webhooks is not None and self.webhooks.active():
            mutated = await self._mutating_webhooks("CREATE", "", obj, None, ctx)
            if mutated is not None:
                defaulted = False
                obj.CopyFrom(mutated)
                # CopyFrom detaches the sub-messages taken before it.
                meta = obj.metadata  # type: ignore[attr-defined]
                meta.namespace = self._namespace(meta.namespace)
                generated = not meta.name and bool(meta.generateName)
        # NodeRestriction is admission too: it refuses a node's write before validation.
        self._admit_node(ctx, "create", "", meta.namespace, meta.name, obj, None)
        if self.escalation is not None:
            # Before validation, as kube's policybased RBAC storage wraps the store.
            self.escalation.admit(self.info.kind, obj, None, ctx.identity)
        self.strategy.prepare_for_create(obj, self.clock.now(), defaulted=defaulted)
        if ctx.field_manager is not None:
            fieldmanager.record_update(
                None, obj, self.info, manager=ctx.field_manager, now=self.clock.now()
            )
        for _attempt in range(3):
            if generated:
                meta.name = generate_name(meta.generateName)
                self.strategy.canonicalize(obj)
            errors = self.strategy.validate_create(obj)
            if self.allocator is not None:
                errors += self.allocator.validate(obj.spec)  # type: ignore[attr-defined]
            if errors:
                raise InvalidError.for_object(self.info.qualified_kind, meta.name, errors)
            if self._validates():
                await self.admit_validated(obj, None)
            if self._validation_configured():
                await self._validating_admission("CREATE", "", obj, None, ctx)
            if ctx.dry_run:
                return await self._dry_create(obj)
            if self.allocator is not None:
                result = await self._create_allocated(meta.namespace, meta.name, obj)
            else:
                result = await self.storage.create(
                    self.key(meta.namespace, meta.name),
                    self._stored_value(obj),
                    ttl=self.ttl_seconds,
                )
            if result.succeeded:
                meta.resourceVersion = str(result.revision)
                return obj
            if result.maybe_applied and result.current is not None:
                # Our own earlier attempt created it (the uid is ours), and someone changed it
                # since (a scheduler's bind): the create succeeded, at the key's creation.
                stored = self._decode(result.current)
                if stored.metadata.uid == meta.uid:  # type: ignore[attr-defined]
                    meta.resourceVersion = str(result.current.create_revision)
                    return obj
            if not generated:
                break
        raise AlreadyExistsError(f'{self.plural} "{meta.name}" already exists')

    async def _dry_create(self, obj: Message) -> Message:
        """The end of a dry-run create: what the write's transaction would refuse (the size
        limit, a requested cluster IP or nodePort that is taken, the name in use), checked
        against etcd without writing; unset cluster IPs and nodePorts are filled with free
        values, reserving none."""
        meta = obj.metadata  # type: ignore[attr-defined]
        key = self.key(meta.namespace, meta.name)
        if self.allocator is not None:
            await self._dry_allocate(obj, None)
        self._stored_value(obj)  # refuses an object over max_object_bytes
        if await self.storage.get(key) is not None:
            raise AlreadyExistsError(f'{self.plural} "{meta.name}" already exists')
        meta.resourceVersion = ""
        return obj

    async def _dry_allocate(self, new: Message, old: Message | None) -> None:
        assert self.allocator is not None
        meta = new.metadata  # type: ignore[attr-defined]
        await self.allocator.dry_run(
            self.info.kind,
            meta.name,
            f"{meta.namespace}/{meta.name}",
            new.spec,  # type: ignore[attr-defined]
            old.spec if old is not None else None,  # type: ignore[attr-defined]
            self.storage.get,
        )

    def _admit_node(
        self,
        ctx: RequestContext,
        verb: str,
        subresource: str,
        namespace: str,
        name: str,
        obj: Message | None,
        old: Message | None,
    ) -> None:
        """NodeRestriction admission when a node sends the request: a kubelet writes only its
        own Node, Lease and pods' status."""
        if ctx.identity is not None:
            info = self.info
            admit_node_write(
                ctx.identity,
                verb,
                info.plural,
                info.group,
                subresource,
                namespace if info.namespaced else "",
                name,
                obj,
                old,
            )

    async def admit(self, obj: Message) -> None:
        """The mutating admission of a create (after defaults, before validation)."""
        if self.admission is not None:
            await self.admission.admit(self.info, obj)

    async def admit_validated(self, obj: Message, old: Message | None) -> None:
        """The validating admission of a create (`old` None) or update."""
        if self.admission is not None:
            await self.admission.validate(self.info, obj, old)

    # The hot writes ask these first, so a write with nothing to admit or validate makes no
    # coroutine for it (each is one more frame on the write's await chain).

    def _validates(self) -> bool:
        """Whether `admit_validated` has anything to check for this kind."""
        return self.admission is not None and self.admission.validates(self.info)

    def _validation_configured(self) -> bool:
        """Whether `_validating_admission` may have anything to do: some admission policy or
        validating webhook is configured."""
        policies, hooks = self.policies, self.webhooks
        return (policies is not None and policies.active()) or (
            hooks is not None and bool(hooks.hooks(False))
        )

    # ---- admission webhooks ----------------------------------------------------------------

    def _attributes(
        self,
        operation: str,
        subresource: str,
        obj: Message | None,
        old: Message | None,
        ctx: RequestContext,
        options: dict[str, Any] | None,
    ) -> WebhookRequest:
        """The admission attributes of a write (kube's admission.Attributes), without the
        objects' JSON: `_with_objects` adds it once some plugin's rules name the request."""
        info = self.info
        either = obj if obj is not None else old
        meta = either.metadata  # type: ignore[union-attr]
        if options is None:
            kind = "CreateOptions" if operation == "CREATE" else "UpdateOptions"
            options = self._create_options(ctx, kind)
        return WebhookRequest(
            group=info.group,
            version=info.version,
            kind=info.kind,
            resource=info.plural,
            subresource=subresource,
            namespace=meta.namespace if info.namespaced else "",
            name=meta.name,
            operation=operation,
            object=None,
            old_object=None,
            dry_run=ctx.dry_run,
            user_info=user_info(ctx.identity),
            options=options,
            warnings=ctx.warnings,
        )

    def _with_objects(
        self, req: WebhookRequest, obj: Message | None, old: Message | None
    ) -> WebhookRequest:
        req.object = self._json(obj) if obj is not None else None
        req.old_object = self._json(old) if old is not None else None
        return req

    def _json(self, obj: Message) -> dict[str, Any]:
        data = to_dict(obj)
        return {
            "kind": self.info.kind,
            "apiVersion": self.info.api_version,
            **{k: v for k, v in data.items() if k not in ("kind", "apiVersion")},
        }

    async def _mutating_webhooks(
        self,
        operation: str,
        subresource: str,
        obj: Message | None,
        old: Message | None,
        ctx: RequestContext,
        options: dict[str, Any] | None = None,
    ) -> Message | None:
        """The mutating webhooks (apiserver/webhooks.py) on `obj`: the object they made, or
        None when they changed nothing."""
        assert self.webhooks is not None
        if not self.webhooks.hooks(True):
            return None
        req = self._attributes(operation, subresource, obj, old, ctx, options)
        if not self.webhooks.rules_match(True, req):
            return None
        self._with_objects(req, obj, old)
        if not await self.webhooks.mutate(req) or req.object is None:
            return None
        try:
            mutated, _unknown = parse_as(self.info, req.object, drop_unknown=True)
        except ManifestError as exc:
            raise InternalError(
                f"the object mutated by admission webhooks cannot be decoded: {exc}"
            ) from exc
        return mutated

    async def _validating_admission(
        self,
        operation: str,
        subresource: str,
        obj: Message | None,
        old: Message | None,
        ctx: RequestContext,
        options: dict[str, Any] | None = None,
    ) -> None:
        """The validating admission of a write that sees other objects' state: the
        ValidatingAdmissionPolicies (apiserver/policies.py), then the validating webhooks, as
        kube-apiserver orders the two plugins. Costs nothing when neither has configurations,
        and makes the objects' JSON only when some policy's or webhook's rules name the write."""
        policies, hooks = self.policies, self.webhooks
        by_policy = policies is not None and policies.active()
        by_hook = hooks is not None and bool(hooks.hooks(False))
        if not (by_policy or by_hook):
            return
        req = self._attributes(operation, subresource, obj, old, ctx, options)
        by_policy = by_policy and policies is not None and policies.wants(req)
        by_hook = by_hook and hooks is not None and hooks.rules_match(False, req)
        if not (by_policy or by_hook):
            return
        self._with_objects(req, obj, old)
        if by_policy and policies is not None:
            await policies.validate(req)
        if by_hook and hooks is not None:
            await hooks.validate(req)

    async def subresource_webhooks(
        self,
        subresource: str,
        obj: Message,
        kind_group: str,
        ctx: RequestContext,
    ) -> None:
        """The admission webhooks and policies of a CREATE on a subresource whose body is
        another kind (pods/binding's Binding, pods/eviction's policy/v1 Eviction): mutating
        webhooks (their patches applied to `obj` in place), then the policies, then the
        validating webhooks."""
        hooks, policies = self.webhooks, self.policies
        by_hook = hooks is not None and hooks.active()
        by_policy = policies is not None and policies.active()
        if not (by_hook or by_policy):
            return
        meta = obj.metadata  # type: ignore[attr-defined]
        descriptor = obj.DESCRIPTOR
        version = "v1"
        req = WebhookRequest(
            group=self.info.group,
            version=self.info.version,
            kind=descriptor.name,
            resource=self.info.plural,
            subresource=subresource,
            namespace=self._namespace(meta.namespace),
            name=meta.name,
            operation="CREATE",
            object=None,
            old_object=None,
            dry_run=ctx.dry_run,
            user_info=user_info(ctx.identity),
            options=self._create_options(ctx),
            warnings=ctx.warnings,
            kind_group=kind_group,
            kind_version=version,
        )
        mutating = by_hook and hooks is not None and hooks.rules_match(True, req)
        validating = by_hook and hooks is not None and hooks.rules_match(False, req)
        by_policy = by_policy and policies is not None and policies.wants(req)
        if not (mutating or validating or by_policy):
            return
        data = to_dict(obj)
        data["apiVersion"] = f"{kind_group}/{version}" if kind_group else version
        data["kind"] = descriptor.name
        req.object = data
        if mutating and hooks is not None and await hooks.mutate(req) and req.object is not None:
            patched = {k: v for k, v in req.object.items() if k not in ("apiVersion", "kind")}
            try:
                fresh = type(obj)()
                json_format.ParseDict(patched, fresh, ignore_unknown_fields=True)
            except json_format.ParseError as exc:
                raise InternalError(
                    f"the object mutated by admission webhooks cannot be decoded: {exc}"
                ) from exc
            obj.CopyFrom(fresh)
        if by_policy and policies is not None:
            await policies.validate(req)
        if validating and hooks is not None:
            await hooks.validate(req)

    def webhooks_see(self, operation: str, namespace: str, name: str) -> bool:
        """Whether some webhook's or admission policy's rules name this kind's `operation`
        (no objects needed)."""
        hooks, policies = self.webhooks, self.policies
        by_hook = hooks is not None and hooks.active()
        by_policy = policies is not None and policies.active()
        if not (by_hook or by_policy):
            return False
        info = self.info
        req = WebhookRequest(
            group=info.group,
            version=info.version,
            kind=info.kind,
            resource=info.plural,
            subresource="",
            namespace=namespace if info.namespaced else "",
            name=name,
            operation=operation,
            object=None,
            old_object=None,
        )
        if (
            by_hook
            and hooks is not None
            and (hooks.rules_match(True, req) or hooks.rules_match(False, req))
        ):
            return True
        return by_policy and policies is not None and policies.wants(req)

    async def delete_webhooks(
        self, request: meta_pb2.DeleteRequest, obj: Message, ctx: RequestContext
    ) -> None:
        """The admission webhooks of a DELETE of `obj` (the old object; no new one)."""
        options = _delete_options(request, ctx)
        if self.webhooks is not None and self.webhooks.active():
            await self._mutating_webhooks("DELETE", "", None, obj, ctx, options)
        await self._validating_admission("DELETE", "", None, obj, ctx, options)

    @staticmethod
    def _create_options(ctx: RequestContext, kind: str = "CreateOptions") -> dict[str, Any]:
        options: dict[str, Any] = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
        if ctx.field_manager:
            options["fieldManager"] = ctx.field_manager
        if ctx.dry_run:
            options["dryRun"] = [DRY_RUN_ALL]
        return options

    # ---- Get -------------------------------------------------------------------------------

    async def get(self, request: meta_pb2.GetRequest) -> Message:
        if not request.name:
            raise InvalidError(f"{self.info.kind} name is required")
        kv = await self.storage.get(self.key(self._namespace(request.namespace), request.name))
        if kv is None:
            raise self._not_found(request.name)
        return self._decode(kv)

    # ---- List ------------------------------------------------------------------------------

    async def list_objects(
        self, request: meta_pb2.ListRequest
    ) -> tuple[str, builtins.list[CachedObject], str]:
        """List's answer before encoding: (list resourceVersion, objects, continue token).

        The objects are the watch cache's (or freshly decoded from etcd for paged lists);
        never mutate them. The REST front end encodes them as JSON, once per object version.
        """
        page = await self.list_page(request)
        return page.revision, page.items, page.token

    async def list_page(self, request: meta_pb2.ListRequest) -> ListPage:
        """`list_objects` with the count of objects after a page (remainingItemCount)."""
        labels, fields = self._selectors(request.labelSelector, request.fieldSelector)
        namespace = self._namespace(request.namespace) if request.namespace else ""
        if request.limit < 0:
            raise InvalidError(f"invalid limit {request.limit}: must not be negative")
        if request.limit > 0 or get_continue(request):
            return await self._list_paged(request, namespace, labels, fields)
        rv = request.resourceVersion
        cache = self.cache
        if rv == "0":
            if not cache.synced.is_set():
                return await self._list_paged(request, namespace, labels, fields)
        elif rv == "":
            if not await cache.wait_fresh():
                # The cache lags (etcd progress not confirmed): read etcd directly.
                return await self._list_paged(request, namespace, labels, fields)
        else:
            wanted = _parse_rv(rv)
            if not await cache.wait_for_revision(wanted) or not cache.state_covers(wanted):
                return await self._list_paged(request, namespace, labels, fields)
        items = cache.snapshot(namespace, labels, fields)
        return ListPage(str(cache.state_revision), items, "")

    def continue_token_at(self, namespace: str, revision: int) -> str:
        """A continue token that lists from the first key at etcd `revision`: the REST
        front end's resourceVersionMatch=Exact is a paged list that starts there."""
        prefix = self._list_prefix(self._namespace(namespace) if namespace else "")
        return _encode_continue(revision, prefix, prefix)

    async def _list_paged(
        self,
        request: meta_pb2.ListRequest,
        namespace: str,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> ListPage:
        prefix = self._list_prefix(namespace)
        limit = request.limit
        revision = 0
        start = b""
        if get_continue(request):
            revision, start = _decode_continue(get_continue(request), prefix)
        collected: list[CachedObject] = []
        next_key = b""
        first_count: int | None = None
        decode = self.codec.decode
        while True:
            want = (limit - len(collected)) if limit else 0
            try:
                result = await self.storage.list_prefix(
                    prefix, revision=revision, limit=max(want, 0), start=start
                )
            except ResourceExpiredError:
                if get_continue(request):
                    raise ResourceExpiredError(
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter."
                    ) from None
                raise
            if revision == 0:
                revision = result.revision
            if first_count is None:
                first_count = result.count
            kvs = result.kvs
            for i, kv in enumerate(kvs):
                obj = decode(kv.key, kv.value, kv.mod_revision)
                if (
                    (not namespace or obj.namespace == namespace)
                    and labels.matches(obj.labels)
                    and fields.matches(obj.fields)
                ):
                    collected.append(obj)
                    if limit and len(collected) >= limit:
                        if i + 1 < len(kvs) or result.more:
                            next_key = kv.key + b"\x00"
                        break
            else:
                if result.more and kvs:
                    start = kvs[-1].key + b"\x00"
                    continue
            break
        token = _encode_continue(revision, next_key, prefix) if next_key else ""
        remaining = None
        if token and first_count is not None and labels.empty and fields.empty:
            # kube's remainingItemCount: known only when nothing was filtered out (no
            # selectors), from etcd's count of the keys from the page's start.
            remaining = max(first_count - len(collected), 0)
        return ListPage(str(revision), collected, token, remaining)

    # ---- Update / UpdateStatus / finalize: one GuaranteedUpdate ------------------------------

    # update, update_status, update_subresource and _replace are plain functions returning
    # `replace_object`'s coroutine: each coroutine level is walked again on every resume of
    # the write (its etcd round trip), and these levels did nothing but pass the call on.

    def update(self, request: Message, ctx: RequestContext = INTERNAL) -> Awaitable[Message]:
        """Replace the object; `ctx` as for `create`. A request without managedFields keeps
        the stored ones. Its resourceVersion, if any, must be the stored one."""
        return self._replace(request, ctx, "")

    def update_status(self, request: Message, ctx: RequestContext = INTERNAL) -> Awaitable[Message]:
        """Replace the status; `ctx.field_manager` records the change (subresource status)."""
        return self._replace(request, ctx, "status")

    def update_subresource(
        self, request: Message, subresource: str, ctx: RequestContext = INTERNAL
    ) -> Awaitable[Message]:
        """Replace the object through one of its subresources' update rules (e.g. pods'
        ephemeralcontainers; see `_prepare_update`)."""
        return self._replace(request, ctx, subresource)

    def _replace(
        self, request: Message, ctx: RequestContext, subresource: str
    ) -> Awaitable[Message]:
        return self.replace_object(
            getattr(request, self.info.request_field), ctx, subresource, request
        )

    async def replace_object(
        self,
        obj: Message,
        ctx: RequestContext,
        subresource: str = "",
        request: Message | None = None,
    ) -> Message:
        """An update (or a subresource's, e.g. "status") of `obj` as sent (its resourceVersion,
        if set, a precondition); the size limit applies to `request` (the whole message that
        carried it), else to `obj`."""
        meta = obj.metadata  # type: ignore[attr-defined]
        if not meta.name:
            raise InvalidError.for_object(self.info.qualified_kind, "", [required("metadata.name")])
        self._check_size(obj if request is None else request, meta.name)
        expected = _parse_rv(meta.resourceVersion) if meta.resourceVersion else 0
        # `obj` itself is the transform's result at every attempt (no transform coroutine).
        new, _ = await self._guaranteed(
            meta.namespace, meta.name, None, ctx, subresource, expected, False, obj
        )
        return new

    def guaranteed_update(
        self,
        namespace: str,
        name: str,
        transform: Transform,
        ctx: RequestContext = INTERNAL,
        *,
        subresource: str = "",
        expected: int = 0,
        create_missing: bool = False,
    ) -> Awaitable[tuple[Message, bool]]:
        """Every update's one path (kube's GuaranteedUpdate): read the current object (the
        watch cache's copy first, etcd's when that is not proven current), `transform` it
        (old -> the object the client wants: a PUT's body, a patched or applied object, a
        scaled one), run admission and NodeRestriction and the escalation check, the
        strategy's update rules and validation, then compare-and-swap on the revision read.
        A lost race runs the transform again on the new current object, so unconditional
        updates and patches retry; a transform whose result names a resourceVersion (a PUT
        with one, a patch that sets it) must match the stored one (Conflict otherwise).

        `subresource` "" (spec and metadata), "status" or "finalize" picks the strategy's
        rules. `expected` is the revision the caller already names (a PUT's), so the cache's
        copy is used only at that revision. `create_missing` (server-side apply) creates the
        object from `transform(None)` when it does not exist. A dry run runs everything and
        stops before etcd, answering the object as it would be stored. Returns (object,
        created)."""
        return self._guaranteed(
            namespace, name, transform, ctx, subresource, expected, create_missing, None
        )

    async def _guaranteed(
        self,
        namespace: str,
        name: str,
        transform: Transform | None,
        ctx: RequestContext,
        subresource: str,
        expected: int,
        create_missing: bool,
        replacement: Message | None,
    ) -> tuple[Message, bool]:
        """`guaranteed_update`; with no `transform`, `replacement` is its result (a replace:
        the object as sent, at every attempt)."""
        namespace = self._namespace(namespace)
        key = self.key(namespace, name)
        # A dry run has no compare-and-swap to prove a cached copy: it reads etcd.
        cur = await self._current(key, revision=expected, cached=not ctx.dry_run)
        for _attempt in range(_CAS_ATTEMPTS):
            if cur is None:
                if not create_missing or transform is None:
                    raise self._not_found(name)
                obj = await transform(None)
                self._check_size(obj, name)
                try:
                    return await self._settled(await self._create(obj, ctx), ctx), True
                except AlreadyExistsError:
                    # Created meanwhile: apply to it.
                    cur = await self._current(key, cached=False)
                    if cur is None:
                        raise
                    continue
            try:
                outcome = await self._try_update(
                    key, namespace, name, cur, transform, ctx, subresource, replacement
                )
            except (TinykubeError, _Reread):
                # Only etcd's answer may justify an error (or a no-op answer).
                if cur.authoritative:
                    raise
                cur = await self._current(key, cached=False)
                continue
            if isinstance(outcome, _Current) or outcome is None:
                # The compare-and-swap lost a race: transform the current object again.
                cur = outcome
                continue
            if self.answer_when_cached:
                outcome = await self._settled(outcome, ctx)
            return outcome, False
        raise self._conflict(name)

    async def _try_update(
        self,
        key: bytes,
        namespace: str,
        name: str,
        cur: _Current,
        transform: Transform | None,
        ctx: RequestContext,
        subresource: str,
        replacement: Message | None = None,
    ) -> Message | _Current | None:
        """One attempt of `guaranteed_update`: the object written (or, dry, that would be), or
        the current object after a lost compare-and-swap (None: it is gone)."""
        old = cur.obj
        if transform is None:
            assert replacement is not None
            obj = replacement
        else:
            obj = await transform(old)
        webhooks = self.webhooks is not None and self.webhooks.active()
        if webhooks or subresource != "status":
            # The decoded body's defaults (a patch's result is decoded, so defaulted, too). A
            # status update stores the old object with the body's status only, so its body's
            # defaults are seen by nobody but a webhook (a kubelet's status write is the
            # hottest update: no pod spec walked for it).
            self.strategy.set_defaults(obj)
        if webhooks:
            obj.metadata.namespace = namespace  # type: ignore[attr-defined]
            mutated = await self._mutating_webhooks("UPDATE", subresource, obj, old, ctx)
            if mutated is not None:
                obj = mutated
        meta = obj.metadata  # type: ignore[attr-defined]
        meta.namespace = namespace
        if meta.resourceVersion and _parse_rv(meta.resourceVersion) != cur.revision:
            raise self._conflict(name)
        old_uid = old.metadata.uid  # type: ignore[attr-defined]
        if meta.uid and meta.uid != old_uid:
            # The client's object is an earlier incarnation of this name.
            raise self._conflict(
                name,
                f"Precondition failed: UID in precondition: {meta.uid}, UID in object meta: "
                f"{old_uid}",
            )
        new, errors = self._prepare_update(subresource, obj, old)
        new.metadata.resourceVersion = old.metadata.resourceVersion  # type: ignore[attr-defined]
        if ctx.field_manager is not None and not errors:
            fieldmanager.record_update(
                old,
                new,
                self.info,
                manager=ctx.field_manager,
                now=self.clock.now(),
                subresource=subresource,
            )
        self._admit_node(ctx, "update", subresource, namespace, name, new, old)
        if self.escalation is not None and not subresource:
            self.escalation.admit(self.info.kind, new, old, ctx.identity)
        if not errors and not subresource and self._validates():
            await self.admit_validated(new, old)
        if not errors and self._validation_configured():
            await self._validating_admission("UPDATE", subresource, new, old, ctx)
        if errors:
            raise InvalidError.for_object(self.info.qualified_kind, name, errors)
        # A status write (the kubelets') changes the status nearly always: a status that differs
        # settles it without walking the rest (a pod's spec) as the whole comparison does.
        unchanged = subresource != "status" or new.status == old.status  # type: ignore[attr-defined]
        if unchanged and new == old:
            if not cur.authoritative:
                raise _Reread
            return old  # a no-op write keeps the resourceVersion, as Kubernetes does
        nmeta = new.metadata  # type: ignore[attr-defined]
        removing = (
            nmeta.HasField("deletionTimestamp")
            and not nmeta.finalizers
            and nmeta.deletionGracePeriodSeconds == 0
            and not self._held_by_spec(new)
        )
        allocating = self.allocator is not None and subresource != "status"
        if ctx.dry_run:
            if allocating and not removing:
                await self._dry_allocate(new, old)
            self._stored_value(new)  # refuses an object over max_object_bytes
            return new
        if removing:
            # The last finalizer is gone from an object being deleted: remove it.
            result = await self.storage.delete(key, cur.revision, release=self._held(old))
            if result.succeeded:
                return new
        else:
            if allocating:
                result = await self._update_allocated(key, new, old, cur.revision)
            else:
                result = await self.storage.update(
                    key, self._stored_value(new), cur.revision, ttl=self.ttl_seconds
                )
            if result.succeeded:
                nmeta.resourceVersion = str(result.revision)
                return new
        return self._after_failure(result)

    def _prepare_update(
        self, subresource: str, obj: Message, old: Message
    ) -> tuple[Message, list[FieldError]]:
        """The strategy's update rules for `subresource` ("" or "status"): the object to
        store, and what is invalid about it."""
        if subresource == "status":
            new = self.strategy.prepare_for_status_update(obj, old)
            return new, self.strategy.validate_status_update(new, old)
        if subresource:
            raise UnimplementedError(f"{self.plural} have no {subresource} subresource")
        new = type(obj)()
        new.CopyFrom(obj)
        self.strategy.prepare_for_update(new, old)
        errors = self.strategy.validate_update(new, old)
        if self.allocator is not None:
            errors += self.allocator.validate(new.spec)  # type: ignore[attr-defined]
        fieldmanager.keep_managed_fields(new, old)
        return new, errors

    # ---- Delete ----------------------------------------------------------------------------

    async def delete(
        self,
        request: meta_pb2.DeleteRequest,
        ctx: RequestContext = INTERNAL,
        *,
        admit: bool = True,
    ) -> Message:
        """Delete, or mark as deleting: graceful pods and objects held by finalizers stay,
        with deletionTimestamp set, until the kubelet or the finalizers' owners let go.

        propagationPolicy (apiserver/deletion.py) decides the garbage collector's finalizers:
        Orphan and Foreground keep the object until the collector has dealt with its
        dependents. Returns the object as stored (marked) or as it was (deleted). A dry run
        checks what the delete checks (options, preconditions, admission, NodeRestriction)
        and answers the same object, writing nothing.
        """
        if not request.name:
            raise InvalidError(f"{self.info.kind} name is required")
        check_policy(request.propagationPolicy)
        namespace = self._namespace(request.namespace)
        key = self.key(namespace, request.name)
        _check_grace_period(request)
        pre = request.preconditions
        cur = await self._current(key, cached=not ctx.dry_run)
        if cur is not None and admit and self.webhooks_see("DELETE", namespace, request.name):
            if not cur.authoritative:
                # The webhooks judge the object etcd holds, not a cached copy.
                cur = await self._current(key, cached=False)
            if cur is not None:
                await self.delete_webhooks(request, cur.obj, ctx)
        for _attempt in range(_CAS_ATTEMPTS):
            if cur is None:
                raise self._not_found(request.name)
            obj = cur.obj
            meta = obj.metadata  # type: ignore[attr-defined]
            self._admit_node(ctx, "delete", "", namespace, request.name, None, obj)
            problem = self._precondition_failure(request.name, pre, meta)
            grace = self._grace_period(obj, request)
            marked = meta.HasField("deletionTimestamp")
            # A graceful deletion under way is only ever shortened; its finalizers stay as
            # they are (as kube-apiserver: DeleteOptions cannot change them once it started).
            pending = marked and 0 < meta.deletionGracePeriodSeconds <= grace
            finalizers = (
                list(meta.finalizers)
                if pending
                else gc_finalizers(self.info.kind, meta.finalizers, request.propagationPolicy)
            )
            changed = finalizers != list(meta.finalizers)
            settled = (
                (grace > 0 or finalizers)
                and marked
                and not changed
                and (meta.deletionGracePeriodSeconds <= grace)
            )
            if (problem is not None or settled) and not cur.authoritative:
                cur = await self._current(key, cached=False)
                continue
            if problem is not None:
                raise problem
            if settled:
                return obj  # already terminating; a longer grace period never extends it
            if grace > 0 or finalizers:
                # Graceful (a kubelet must stop the containers) or held by finalizers: mark it.
                nmeta = meta
                if changed:
                    del nmeta.finalizers[:]
                    nmeta.finalizers.extend(finalizers)
                deadline = timestamp(self.clock.now() + timedelta(seconds=grace))
                if not marked and nmeta.generation > 0:
                    # Controllers see the generation move when deletion starts (Kubernetes).
                    nmeta.generation += 1
                if not marked or nmeta.deletionTimestamp.seconds > deadline.seconds:
                    nmeta.deletionTimestamp.CopyFrom(deadline)
                if not marked or nmeta.deletionGracePeriodSeconds > grace:
                    nmeta.deletionGracePeriodSeconds = grace
                if ctx.dry_run:
                    return obj
                result = await self.storage.update(
                    key, self._stored_value(obj), cur.revision, ttl=self.ttl_seconds
                )
                if result.succeeded:
                    nmeta.resourceVersion = str(result.revision)
                    return obj
            else:
                if ctx.dry_run:
                    return obj
                result = await self.storage.delete(key, cur.revision, release=self._held(obj))
                if result.succeeded:
                    return obj
            cur = self._after_failure(result)
        raise self._conflict(request.name)

    def _grace_period(self, obj: Message, request: meta_pb2.DeleteRequest) -> int:
        """Seconds a deletion of `obj` waits before the object goes: none, but for pods."""
        return 0

    def _held_by_spec(self, obj: Message) -> bool:
        """Whether `obj`, being deleted with no finalizers left, is still held by its spec
        (a namespace's spec.finalizers); such an object is not removed by an update."""
        return False

    # ---- Watch -----------------------------------------------------------------------------

    async def open_watch(
        self,
        request: meta_pb2.WatchRequest,
        *,
        batched: bool = False,
        json: bool = False,
        ends_in: float | None = None,
    ) -> tuple[Watcher, builtins.list[Queued]]:
        """Register a watcher on the cache: it and the events to send before live ones.

        The caller owns the watcher and must `self.cache.unregister` it when done. `json`
        queues REST watch lines (see apiserver/watchcache.py) instead of protobuf events.
        `ends_in`: seconds until the watch ends by its deadline, if it has one.
        """
        labels, fields = self._selectors(request.labelSelector, request.fieldSelector)
        rv_text = request.resourceVersion
        rv = None if rv_text in ("", "0") else _parse_rv(rv_text)
        namespace = self._namespace(request.namespace) if request.namespace else ""
        if rv_text == "":
            # kube's "Get State and Start at Most Recent": the initial state holds every write
            # made before the watch (a consistent read), where "0" takes the cache as it is.
            # Without this a write acknowledged a moment before could arrive as a live event
            # after the replay instead of in it. If the cache cannot confirm it is current in
            # time it serves what it holds, as for "0".
            await self.cache.wait_fresh()
        return await self.cache.watch(
            namespace=namespace,
            labels=labels,
            fields=fields,
            resource_version=rv,
            bookmarks=request.allowWatchBookmarks,
            batched=batched,
            json=json,
            ends_in=ends_in,
        )

    def _precondition_failure(
        self, name: str, pre: meta_pb2.Preconditions, meta: meta_pb2.ObjectMeta
    ) -> ConflictError | None:
        """The Conflict a delete's preconditions make against the object's metadata, if any."""
        if pre.uid and pre.uid != meta.uid:
            return self._conflict(
                name,
                f"Precondition failed: UID in precondition: {pre.uid}, UID in object meta: "
                f"{meta.uid}",
            )
        if pre.resourceVersion and pre.resourceVersion != meta.resourceVersion:
            return self._conflict(
                name,
                "Precondition failed: ResourceVersion in precondition: "
                f"{pre.resourceVersion}, ResourceVersion in object meta: "
                f"{meta.resourceVersion}",
            )
        return None


def _check_grace_period(request: meta_pb2.DeleteRequest) -> None:
    if request.HasField("gracePeriodSeconds") and request.gracePeriodSeconds < 0:
        raise InvalidError(
            f"invalid gracePeriodSeconds {request.gracePeriodSeconds}: must not be negative"
        )


def _delete_options(request: meta_pb2.DeleteRequest, ctx: RequestContext) -> dict[str, Any]:
    """The DeleteOptions an admission webhook sees."""
    options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    if request.HasField("gracePeriodSeconds"):
        options["gracePeriodSeconds"] = request.gracePeriodSeconds
    if request.propagationPolicy:
        options["propagationPolicy"] = request.propagationPolicy
    if ctx.dry_run:
        options["dryRun"] = [DRY_RUN_ALL]
    return options
