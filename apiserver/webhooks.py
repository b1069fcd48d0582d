"""Admission webhooks: the MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins of
kube-apiserver (k8s.io/apiserver/pkg/admission/plugin/webhook), called from the store's write
pipeline (apiserver/resources.py).

The configurations come from the MutatingWebhookConfiguration and
ValidatingWebhookConfiguration watch caches, sorted by configuration name, webhooks in their
order, and are compiled once per cache revision. A webhook is called when a rule matches the
request (operation, group, version, resource/subresource, scope), the namespace's labels match
its namespaceSelector (a Namespace's own labels for a namespace; other cluster-scoped objects
always match), the old or new object's labels match its objectSelector, and every
matchCondition (CEL, apiserver/crd/cel.py) is true; writes of the admission configurations
themselves never go to webhooks (kube's exemption). The matcher works on group, version,
resource and subresource strings and objects as JSON, so custom resources go through it
unchanged. matchPolicy Equivalent has nothing to widen to: every tinykube resource is served
at one version.

Each call POSTs an AdmissionReview (v1, or v1beta1 when the webhook accepts only that) over
HTTPS, verified by the webhook's caBundle (the system roots without one), to the url with
`?timeout=<n>s` appended, or to a Service: `https://<name>.<namespace>.svc:<port><path>`
dialled at a ready address of the Service's EndpointSlices (kube-apiserver's endpoint routing:
the apiserver does not depend on a proxy or pod routes) or, when there is none, at its cluster
IP, with the TLS server name `<name>.<namespace>.svc`. Mutating webhooks run one after another
in order and may answer a JSONPatch; one with reinvocationPolicy IfNeeded runs a second time
when a later webhook changed the object. Validating webhooks run concurrently. A webhook that
cannot be called, times out (timeoutSeconds), answers garbage or whose matchCondition fails to
evaluate is an InternalError (`failed calling webhook "x": ...`) under failurePolicy Fail and
is skipped under Ignore; a refusal is kube's `admission webhook "x" denied the request: ...`
with the code, reason and details of the webhook's status (400 without one). A dry run calls
only webhooks whose sideEffects are None or NoneOnDryRun (a request that would reach another
is refused). Warnings go to the request's sink (REST Warning headers, gRPC trailing metadata);
audit annotations are kept on the request as `<webhook>/<key>` (tinykube has no audit log to
write them to).

All on the event loop: one aiohttp session per apiserver, SSL contexts cached per caBundle.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import ssl
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import jsonpatch

from apiserver.auth.authorizer import Identity
from apiserver.crd.cel import Program
from apiserver.metrics import Metrics
from apiserver.registry.admissionregistration import (
    MATCH_CONDITION_VARIABLES,
    Compiler,
    cel_compiler,
)
from apiserver.watchcache import CachedObject
from tinykube.errors import (
    BadRequestError,
    ConflictError,
    DeadlineExceededError,
    ForbiddenError,
    InternalError,
    InvalidError,
    NotFoundError,
    ResourceExhaustedError,
    ResourceExpiredError,
    TinykubeError,
    UnauthenticatedError,
    UnavailableError,
)
from tinykube.kinds import (
    ADMISSION_GROUP,
    ENDPOINT_SLICE,
    MUTATING_WEBHOOK_CONFIGURATION,
    NAMESPACE,
    SERVICE,
    VALIDATING_WEBHOOK_CONFIGURATION,
)
from tinykube.selectors import LabelSelector, from_proto
from tinykube.v1 import admissionregistration_pb2 as ar
from tinykube.v1 import endpointslice_pb2, namespace_pb2, service_pb2

log = logging.getLogger(__name__)

ADMISSION_V1 = "admission.k8s.io/v1"
ADMISSION_V1BETA1 = "admission.k8s.io/v1beta1"
# The label tying an EndpointSlice to its Service.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
NO_SIDE_EFFECTS_ON_DRY_RUN = ("None", "NoneOnDryRun")


class CacheView(Protocol):
    @property
    def state(self) -> Mapping[bytes, CachedObject]: ...

    @property
    def state_revision(self) -> int: ...


class StorageView(Protocol):
    async def get(self, key: bytes) -> Any: ...


@dataclass
class WebhookRequest:
    """One admission request as the webhooks see it (kube's admission.Attributes)."""

    group: str
    version: str
    kind: str
    resource: str
    subresource: str
    namespace: str
    name: str
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool = False
    # userInfo of the AdmissionRequest: {"username", "uid", "groups", "extra"}.
    user_info: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] | None = None
    # Where the webhooks' warnings go (None: nobody reads them).
    warnings: list[str] | None = None
    # `<webhook name>/<key>` -> value, from the responses' auditAnnotations.
    audit_annotations: dict[str, str] = field(default_factory=dict)
    # The object's group/version when it differs from the resource's (pods/eviction carries
    # a policy/v1 Eviction).
    kind_group: str | None = None
    kind_version: str | None = None


@dataclass(frozen=True)
class _Condition:
    name: str
    program: Program | None
    error: str  # why it did not compile ("" when it did)


@dataclass(frozen=True)
class _Hook:
    """One webhook of a configuration, compiled for matching."""

    name: str
    config: str
    mutating: bool
    spec: ar.MutatingWebhook | ar.ValidatingWebhook
    namespace_selector: LabelSelector | None  # None: matches everything
    object_selector: LabelSelector | None
    conditions: tuple[_Condition, ...]

    @property
    def fail_closed(self) -> bool:
        return self.spec.failurePolicy != "Ignore"

    @property
    def timeout(self) -> float:
        return float(self.spec.timeoutSeconds if self.spec.HasField("timeoutSeconds") else 10)

    @property
    def reinvoke(self) -> bool:
        spec = self.spec
        return isinstance(spec, ar.MutatingWebhook) and spec.reinvocationPolicy == "IfNeeded"


class _CallError(Exception):
    """A webhook could not be called or answered nonsense (kube's ErrCallingWebhook)."""


def _selector(sel: Any) -> LabelSelector | None:
    if not sel.matchLabels and not sel.matchExpressions:
        return None
    return from_proto(sel)


def resource_matches(patterns: Sequence[str], resource: str, subresource: str) -> bool:
    for pattern in patterns:
        if pattern == "*/*":
            return True
        main, _, sub = pattern.partition("/")
        if main not in ("*", resource):
            continue
        if "/" not in pattern:
            if not subresource:
                return True
        elif sub in ("*", subresource) and (subresource or sub != "*"):
            return True
    return False


def rule_matches(
    rule: ar.RuleWithOperations | ar.NamedRuleWithOperations, req: WebhookRequest, namespaced: bool
) -> bool:
    """kube's rules.Matcher: operation, group, version, resource/subresource and scope."""
    ops = rule.operations
    if "*" not in ops and req.operation not in ops:
        return False
    if "*" not in rule.apiGroups and req.group not in rule.apiGroups:
        return False
    if "*" not in rule.apiVersions and req.version not in rule.apiVersions:
        return False
    if not resource_matches(rule.resources, req.resource, req.subresource):
        return False
    scope = rule.scope if rule.HasField("scope") else "*"
    if scope == "Cluster":
        return not namespaced
    if scope == "Namespaced":
        return namespaced
    return True


# kube's IsExemptAdmissionConfigurationResource: writes of the admission configurations
# themselves never go to webhooks (a broken webhook could otherwise lock itself in).
EXEMPT_RESOURCES = frozenset(
    {
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    }
)


def exempt(req: WebhookRequest) -> bool:
    return req.group == ADMISSION_GROUP and req.resource in EXEMPT_RESOURCES


def request_namespaced(req: WebhookRequest) -> bool:
    """Whether the request is about a namespaced object (a Namespace itself is not)."""
    return bool(req.namespace) and not (req.resource == NAMESPACE.plural and not req.group)


def object_labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    if not obj:
        return {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, dict) else {}


def user_info(identity: Identity | None) -> dict[str, Any]:
    """The AdmissionRequest's userInfo; the apiserver's own writes are kube's loopback user."""
    if identity is None:
        return {"username": "system:apiserver", "groups": ["system:masters"]}
    info: dict[str, Any] = {"username": identity.name}
    if identity.uid:
        info["uid"] = identity.uid
    if identity.groups:
        info["groups"] = list(identity.groups)
    if identity.extra:
        info["extra"] = {key: list(values) for key, values in identity.extra}
    return info


def admission_request(uid: str, req: WebhookRequest) -> dict[str, Any]:
    """The AdmissionRequest of `req` (what webhooks receive and CEL's `request` is)."""
    kind = {
        "group": req.group if req.kind_group is None else req.kind_group,
        "version": req.version if req.kind_version is None else req.kind_version,
        "kind": req.kind,
    }
    resource = {"group": req.group, "version": req.version, "resource": req.resource}
    out: dict[str, Any] = {
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
    }
    if req.subresource:
        out["subResource"] = req.subresource
        out["requestSubResource"] = req.subresource
    if req.name:
        out["name"] = req.name
    if req.namespace:
        out["namespace"] = req.namespace
    out["operation"] = req.operation
    out["userInfo"] = req.user_info
    out["object"] = req.object
    out["oldObject"] = req.old_object
    out["dryRun"] = req.dry_run
    out["options"] = req.options
    return out


class WebhookDispatcher:
    """The two webhook plugins of one apiserver, reading the configurations' watch caches."""

    def __init__(
        self,
        caches: Mapping[str, CacheView],
        storage: StorageView,
        *,
        prefix: str,
        compiler: Compiler | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.mutating_cache = caches[MUTATING_WEBHOOK_CONFIGURATION.kind]
        self.validating_cache = caches[VALIDATING_WEBHOOK_CONFIGURATION.kind]
        self.namespaces = caches[NAMESPACE.kind]
        self.services = caches[SERVICE.kind]
        self.slices = caches[ENDPOINT_SLICE.kind]
        self.storage = storage
        self.metrics = metrics
        self._ns_prefix = f"{prefix}/{NAMESPACE.plural}/".encode()
        self._svc_prefix = f"{prefix}/{SERVICE.plural}/"
        self._compiler = compiler if compiler is not None else cel_compiler()
        self._compiled: dict[bool, tuple[int, int, tuple[_Hook, ...]]] = {}
        self._ssl: dict[bytes, ssl.SSLContext] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- configurations ----------------------------------------------------------------------

    def hooks(self, mutating: bool) -> tuple[_Hook, ...]:
        """The webhooks of every configuration of one kind, in kube's order (configuration
        name, then position), compiled once per cache revision."""
        cache = self.mutating_cache if mutating else self.validating_cache
        state = cache.state
        if not state:
            return ()
        memo = self._compiled.get(mutating)
        if memo is not None and memo[0] == id(state) and memo[1] == cache.state_revision:
            return memo[2]
        configs = sorted(
            (c.obj for c in state.values()),
            key=lambda c: c.metadata.name,  # type: ignore[attr-defined]
        )
        out: list[_Hook] = []
        for config in configs:
            for spec in config.webhooks:  # type: ignore[attr-defined]
                out.append(self._compile(config.metadata.name, mutating, spec))  # type: ignore[attr-defined]
        hooks = tuple(out)
        self._compiled[mutating] = (id(state), cache.state_revision, hooks)
        return hooks

    def _compile(self, config: str, mutating: bool, spec: Any) -> _Hook:
        conditions = []
        for cond in spec.matchConditions:
            program, errors = self._compiler(cond.expression, MATCH_CONDITION_VARIABLES, "")
            detail = "; ".join(e.message for e in errors)
            conditions.append(_Condition(cond.name, program, detail))
        return _Hook(
            name=spec.name,
            config=config,
            mutating=mutating,
            spec=spec,
            namespace_selector=_selector(spec.namespaceSelector),
            object_selector=_selector(spec.objectSelector),
            conditions=tuple(conditions),
        )

    def active(self) -> bool:
        """Whether any webhook configuration exists (else the write skips the JSON work)."""
        return bool(self.mutating_cache.state) or bool(self.validating_cache.state)

    # ---- matching ----------------------------------------------------------------------------

    async def _namespace_labels(self, req: WebhookRequest) -> Mapping[str, str] | None:
        """The labels namespaceSelector is matched against: a Namespace's own (the new object,
        the old one on delete), else the request's namespace's; None for other cluster-scoped
        objects (they always match)."""
        if req.resource == NAMESPACE.plural and not req.group:
            return object_labels(req.object if req.object is not None else req.old_object)
        if not req.namespace:
            return None
        key = self._ns_prefix + req.namespace.encode()
        hit = self.namespaces.state.get(key)
        if hit is not None:
            return hit.obj.metadata.labels  # type: ignore[attr-defined, no-any-return]
        kv = await self.storage.get(key)
        if kv is None:
            return {}
        return namespace_pb2.Namespace.FromString(kv.value).metadata.labels

    def rules_match(self, mutating: bool, req: WebhookRequest) -> bool:
        """Whether any webhook of the kind's rules match `req` (its objects not needed)."""
        if exempt(req):
            return False
        namespaced = request_namespaced(req)
        return any(
            rule_matches(r, req, namespaced)
            for hook in self.hooks(mutating)
            for r in hook.spec.rules
        )

    async def _matches(self, hook: _Hook, req: WebhookRequest) -> bool:
        if exempt(req):
            return False
        if not any(rule_matches(r, req, request_namespaced(req)) for r in hook.spec.rules):
            return False
        if hook.namespace_selector is not None:
            labels = await self._namespace_labels(req)
            if labels is not None and not hook.namespace_selector.matches(labels):
                return False
        if hook.object_selector is not None:
            sel = hook.object_selector
            if not (
                sel.matches(object_labels(req.object)) or sel.matches(object_labels(req.old_object))
            ):
                return False
        return True

    def _conditions_hold(self, hook: _Hook, req: WebhookRequest, request: dict[str, Any]) -> bool:
        """Every matchCondition true (False: skip the webhook). An error is a _CallError."""
        activation = {
            "object": req.object,
            "oldObject": req.old_object,
            "request": request,
            "authorizer": None,
            "params": None,
        }
        for cond in hook.conditions:
            if cond.program is None:
                raise _CallError(
                    f"compilation error in match condition {cond.name!r}: {cond.error}"
                )
            try:
                result = cond.program.evaluate(activation)
            except Exception as exc:  # a CEL runtime error, whatever its type
                raise _CallError(f"failed evaluating match condition {cond.name!r}: {exc}") from exc
            if result is not True:
                if result is False:
                    return False
                raise _CallError(
                    f"match condition {cond.name!r} must evaluate to bool, got "
                    f"{type(result).__name__}"
                )
        return True

    # ---- the two plugins ---------------------------------------------------------------------

    async def mutate(self, req: WebhookRequest) -> bool:
        """Call the matching mutating webhooks in order, applying their patches to
        `req.object` in place. Returns whether the object changed."""
        hooks = self.hooks(True)
        if not hooks:
            return False
        changed = False
        called: list[int] = []
        last_change = -1
        for index, hook in enumerate(hooks):
            was_called, did_change = await self._run_mutating(hook, req)
            if was_called:
                called.append(index)
            if did_change:
                changed, last_change = True, index
        # Reinvocation (IfNeeded): once more for a webhook called before a later one changed
        # the object.
        for index in called:
            hook = hooks[index]
            if hook.reinvoke and index < last_change:
                _, did_change = await self._run_mutating(hook, req)
                changed = changed or did_change
        return changed

    async def _run_mutating(self, hook: _Hook, req: WebhookRequest) -> tuple[bool, bool]:
        """(whether `hook` was called, whether its patch changed the object)."""
        response = await self._dispatch(hook, req)
        if response is None:
            return False, False
        patch = response.get("patch")
        if not patch or req.object is None:
            return True, False
        patch_type = response.get("patchType")
        if patch_type != "JSONPatch":
            raise InternalError(
                f'failed calling webhook "{hook.name}": unsupported patch type "{patch_type}"'
            )
        try:
            ops = json.loads(base64.b64decode(patch))
            patched = jsonpatch.JsonPatch(ops).apply(copy.deepcopy(req.object))
        except (
            ValueError,
            TypeError,
            jsonpatch.JsonPatchException,
            jsonpatch.JsonPointerException,
        ) as exc:
            raise InternalError(
                f'failed calling webhook "{hook.name}": the patch is invalid: {exc}'
            ) from exc
        if not isinstance(patched, dict):
            raise InternalError(
                f'failed calling webhook "{hook.name}": the patched object is not an object'
            )
        if patched == req.object:
            return True, False
        req.object.clear()
        req.object.update(patched)
        return True, True

    async def validate(self, req: WebhookRequest) -> None:
        """Call the matching validating webhooks concurrently; the first refusal or failure (in
        the webhooks' order) is raised."""
        hooks = self.hooks(False)
        if not hooks:
            return
        results = await asyncio.gather(
            *(self._dispatch(hook, req) for hook in hooks), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    # ---- one call ----------------------------------------------------------------------------

    async def _dispatch(self, hook: _Hook, req: WebhookRequest) -> dict[str, Any] | None:
        """Call `hook` if it matches: its allowing response, or None when it was not called
        (or failed open). A refusal or a failure under Fail is raised."""
        if not await self._matches(hook, req):
            return None
        uid = str(uuid.uuid4())
        request = admission_request(uid, req)
        try:
            if hook.conditions and not self._conditions_hold(hook, req, request):
                return None
        except _CallError as exc:
            self._failed(hook, str(exc))
            return None
        if req.dry_run and hook.spec.sideEffects not in NO_SIDE_EFFECTS_ON_DRY_RUN:
            raise BadRequestError(f'admission webhook "{hook.name}" does not support dry run')
        start = time.perf_counter()
        try:
            response = await self._call(hook, request)
        except _CallError as exc:
            self._observe(hook, req, start, rejected=True, error="calling_webhook_error", code=0)
            self._failed(hook, str(exc))
            return None
        allowed = response.get("allowed") is True
        self._observe(hook, req, start, rejected=not allowed, error="no_error", code=0)
        for warning in response.get("warnings") or ():
            if req.warnings is not None and isinstance(warning, str):
                req.warnings.append(warning)
        for key, value in (response.get("auditAnnotations") or {}).items():
            req.audit_annotations[f"{hook.name}/{key}"] = str(value)
        if not allowed:
            error = denied(hook.name, response.get("status"))
            if self.metrics is not None and error.rest_status is not None:
                self.metrics.webhook_rejections.labels(
                    hook.name,
                    _hook_type(hook),
                    req.operation,
                    "no_error",
                    str(error.rest_status["code"]),
                ).inc()
            raise error
        return response

    def _observe(
        self,
        hook: _Hook,
        req: WebhookRequest,
        start: float,
        *,
        rejected: bool,
        error: str,
        code: int,
    ) -> None:
        if self.metrics is None:
            return
        kind = _hook_type(hook)
        self.metrics.webhook_duration.labels(
            hook.name, kind, req.operation, str(rejected).lower()
        ).observe(time.perf_counter() - start)
        if error != "no_error":
            self.metrics.webhook_rejections.labels(
                hook.name, kind, req.operation, error, str(code)
            ).inc()

    def _failed(self, hook: _Hook, reason: str) -> None:
        """Raise under failurePolicy Fail; log and go on under Ignore."""
        message = f'failed calling webhook "{hook.name}": {reason}'
        if hook.fail_closed:
            raise InternalError(message)
        log.warning("ignoring webhook failure (failurePolicy Ignore): %s", message)

    async def _call(self, hook: _Hook, request: dict[str, Any]) -> dict[str, Any]:
        versions = list(hook.spec.admissionReviewVersions)
        api_version = ADMISSION_V1 if "v1" in versions or not versions else ADMISSION_V1BETA1
        review = {"kind": "AdmissionReview", "apiVersion": api_version, "request": request}
        url, server_name = self._target(hook)
        try:
            context = self._ssl_context(bytes(hook.spec.clientConfig.caBundle))
        except (ssl.SSLError, ValueError) as exc:
            raise _CallError(
                f"could not get REST client: unable to load root certificates: {exc}"
            ) from exc
        session = self._client()
        body = json.dumps(review, separators=(",", ":")).encode()
        try:
            async with asyncio.timeout(hook.timeout):
                async with session.post(
                    url,
                    data=body,
                    headers={"Content-Type": "application/json", "Accept": "application/json"},
                    ssl=context,
                    server_hostname=server_name,
                ) as resp:
                    text = await resp.read()
                    status = resp.status
        except TimeoutError as exc:
            raise _CallError(
                f'failed to call webhook: Post "{url}": context deadline exceeded'
            ) from exc
        except (aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            raise _CallError(f'failed to call webhook: Post "{url}": {_go_error(exc)}') from exc
        if not 200 <= status < 300:
            raise _CallError(
                f"received invalid webhook response: status code {status}: "
                f"{text[:200].decode(errors='replace')}"
            )
        try:
            answer = json.loads(text)
        except ValueError as exc:
            raise _CallError(f"received invalid webhook response: {exc}") from exc
        if not isinstance(answer, dict):
            raise _CallError("received invalid webhook response: not a JSON object")
        if answer.get("apiVersion") != api_version or answer.get("kind") != "AdmissionReview":
            raise _CallError(
                f"expected webhook response of {api_version}, Kind=AdmissionReview, got "
                f"{answer.get('apiVersion', '')}, Kind={answer.get('kind', '')}"
            )
        response = answer.get("response")
        if not isinstance(response, dict):
            raise _CallError("webhook response was absent")
        if response.get("uid") != request["uid"]:
            raise _CallError(
                f'expected response.uid="{request["uid"]}", got "{response.get("uid", "")}"'
            )
        return response

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _ssl_context(self, ca_bundle: bytes) -> ssl.SSLContext:
        context = self._ssl.get(ca_bundle)
        if context is None:
            if ca_bundle:
                context = ssl.create_default_context(cadata=ca_bundle.decode(errors="replace"))
            else:
                context = ssl.create_default_context()
            self._ssl[ca_bundle] = context
        return context

    def _target(self, hook: _Hook) -> tuple[str, str | None]:
        """(URL to POST to, TLS server name when it differs from the URL's host)."""
        config = hook.spec.clientConfig
        timeout = f"?timeout={int(hook.timeout)}s"
        if config.HasField("url"):
            return config.url + timeout, None
        ref = config.service
        port = ref.port if ref.HasField("port") else 443
        path = ref.path if ref.HasField("path") else ""
        host = f"{ref.name}.{ref.namespace}.svc"
        address, target_port = self._resolve(ref.namespace, ref.name, port)
        shown = f"[{address}]" if ":" in address else address
        return f"https://{shown}:{target_port}{path}{timeout}", host

    def _resolve(self, namespace: str, name: str, port: int) -> tuple[str, int]:
        """A ready endpoint of Service namespace/name's `port`, else its cluster IP."""
        cached = self.services.state.get(f"{self._svc_prefix}{namespace}/{name}".encode())
        if cached is None:
            raise _CallError(f'failed to call webhook: service "{name}" not found')
        svc: service_pb2.Service = cached.obj  # type: ignore[assignment]
        svc_port = next((p for p in svc.spec.ports if p.port == port), None)
        if svc_port is None:
            raise _CallError(
                f'failed to call webhook: no service port {port} found for service "{name}"'
            )
        for hit in self.slices.state.values():
            eps: endpointslice_pb2.EndpointSlice = hit.obj  # type: ignore[assignment]
            if (
                eps.metadata.namespace != namespace
                or eps.metadata.labels.get(SERVICE_NAME_LABEL) != name
            ):
                continue
            number = next((p.port for p in eps.ports if p.name == svc_port.name), None)
            if number is None:
                continue
            for endpoint in eps.endpoints:
                ready = not endpoint.conditions.HasField("ready") or endpoint.conditions.ready
                if ready and endpoint.addresses:
                    return endpoint.addresses[0], number
        if svc.spec.clusterIP and svc.spec.clusterIP != "None":
            return svc.spec.clusterIP, port
        raise _CallError(
            f'failed to call webhook: service "{namespace}/{name}" has no ready endpoints'
        )


def _hook_type(hook: _Hook) -> str:
    return "admit" if hook.mutating else "validating"


def _go_error(exc: BaseException) -> str:
    """A failed connection as Go's net/http words the common cases (what kube-apiserver's
    message shows), else the error's own text."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if isinstance(exc, aiohttp.ClientConnectorError):
        target = f"{exc.host}:{exc.port}"
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"dial tcp {target}: connect: connection refused"
        return f"dial tcp {target}: {exc.os_error.strerror or exc.os_error}"
    return str(exc) or type(exc).__name__


def denied(name: str, status: Any) -> TinykubeError:
    """kube's webhookerrors.ToStatusErr: the webhook's status with the message prefixed, code
    at least 400 (400 without one)."""
    result: dict[str, Any] = dict(status) if isinstance(status, dict) else {}
    code = result.get("code")
    if not isinstance(code, int) or code < 400:
        code = 400
    head = f'admission webhook "{name}" denied the request'
    if result.get("message"):
        message = f"{head}: {result['message']}"
    elif result.get("reason"):
        message = f"{head}: {result['reason']}"
    else:
        message = f"{head} without explanation"
    error = error_for_http(code, message)
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if result.get("reason"):
        body["reason"] = result["reason"]
    if isinstance(result.get("details"), dict):
        body["details"] = result["details"]
    body["code"] = code
    error.rest_status = body
    return error


def error_for_http(code: int, message: str) -> TinykubeError:
    """The error class whose REST code is `code` (the gRPC status follows from it)."""
    classes: dict[int, type[TinykubeError]] = {
        401: UnauthenticatedError,
        403: ForbiddenError,
        404: NotFoundError,
        409: ConflictError,
        410: ResourceExpiredError,
        422: InvalidError,
        429: ResourceExhaustedError,
        503: UnavailableError,
        504: DeadlineExceededError,
    }
    cls = classes.get(code, InternalError if code >= 500 else BadRequestError)
    return cls(message)
