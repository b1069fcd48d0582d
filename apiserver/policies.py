"""ValidatingAdmissionPolicy: kube-apiserver's CEL admission plugin
(k8s.io/apiserver/pkg/admission/plugin/policy/validating), called from the store's write
pipeline (apiserver/resources.py) before the validating webhooks, as kube orders its plugins.

Policies and bindings come from their watch caches. Everything a request needs from a policy is
compiled once per policy generation (its uid and metadata.generation): the matchers, the CEL
programs of matchConditions, variables, validations, messageExpressions and auditAnnotations
(apiserver/crd/cel.py, every variable `dyn`). The set of (policy, its bindings) is rebuilt only
when either cache's revision moves, so a write that no policy's rules name costs a few string
comparisons and makes no JSON.

For a write, per policy (by name) whose matchConstraints match (resourceRules with their
resourceNames, not excludeResourceRules, namespaceSelector, objectSelector; matchPolicy
Equivalent has nothing to widen to, every resource being served at one version), per binding
of it (by name) whose matchResources match too: the binding's params are collected (paramRef
by name or selector, in paramRef.namespace or the request's, from the param kind's watch
cache; none found and parameterNotFoundAction Deny is a configuration error), then for each
param the matchConditions, the variables (in order, each seeing the ones before), the
validations and the audit annotations are evaluated over `object`, `oldObject`, `request`,
`params`, `namespaceObject` and `variables`. `authorizer` is null: tinykube does not evaluate
authorization checks from CEL. A false validation is the binding's validationActions: Deny
refuses the write in kube's words (`<resource> "<name>" is forbidden: ValidatingAdmissionPolicy
'p' with binding 'b' denied request: <message>`, with the validation's reason and its code:
Invalid 422 by default, Forbidden 403, Unauthorized 401, RequestEntityTooLarge 413), Warn adds
a warning (`Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': ...`, a REST
Warning header or gRPC trailing metadata), Audit records the failure as the audit annotation
`validation.policy.admission.k8s.io/validation_failure` (kept on the request: tinykube has no
audit log). An evaluation error counts as a failed validation under failurePolicy Fail and is
ignored under Ignore.

All on the event loop; the only awaits are the namespace's etcd read when the cache lacks it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.message import Message

from apiserver.crd.cel import Program
from apiserver.registry.admissionpolicy import POLICY_VARIABLES
from apiserver.registry.admissionregistration import Compiler, cel_compiler
from apiserver.watchcache import CachedObject
from apiserver.webhooks import (
    CacheView,
    StorageView,
    WebhookRequest,
    admission_request,
    error_for_http,
    exempt,
    object_labels,
    request_namespaced,
    resource_matches,
)
from tinykube.errors import TinykubeError
from tinykube.kinds import (
    NAMESPACE,
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING,
)
from tinykube.manifest import to_dict
from tinykube.selectors import LabelSelector, from_proto
from tinykube.v1 import admissionregistration_pb2 as ar
from tinykube.v1 import namespace_pb2

# kube's celconfig.MaxEvaluatedMessageExpressionSizeBytes.
MAX_MESSAGE_EXPRESSION_BYTES = 5 * 1024
# kube's maxAuditAnnotationValueLength.
MAX_AUDIT_ANNOTATION_BYTES = 10 * 1024
VALIDATION_FAILURE_ANNOTATION = "validation.policy.admission.k8s.io/validation_failure"
# How many distinct request shapes wants() remembers before starting over.
_WANTED_MEMO_SIZE = 4096
_REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}


class ParamCache(Protocol):
    """What the plugin reads of a param kind's watch cache (apiserver.watchcache.WatchCache)."""

    @property
    def state(self) -> Mapping[bytes, CachedObject]: ...

    async def wait_fresh(self) -> bool: ...


@dataclass(frozen=True)
class ParamSource:
    """Where a policy's paramKind lives: its watch cache, and how its objects become JSON."""

    namespaced: bool
    prefix: bytes  # the kind's etcd key prefix: prefix + b"<namespace>/<name>" or b"<name>"
    cache: ParamCache
    to_json: Callable[[Message], dict[str, Any]]


# (apiVersion, kind) -> the param kind's source, or None for a kind the server does not serve.
ParamResolver = Callable[[str, str], ParamSource | None]


@dataclass(frozen=True)
class _Expr:
    """One compiled CEL expression (program None: it did not compile, `error` says why)."""

    expression: str
    program: Program | None
    error: str


@dataclass(frozen=True)
class _Rule:
    """A NamedRuleWithOperations as Python sets (protobuf containers are slow to search)."""

    operations: frozenset[str]
    groups: frozenset[str]
    versions: frozenset[str]
    resources: tuple[str, ...]
    scope: str
    names: frozenset[str]

    @classmethod
    def of(cls, rule: ar.NamedRuleWithOperations) -> _Rule:
        return cls(
            frozenset(rule.operations),
            frozenset(rule.apiGroups),
            frozenset(rule.apiVersions),
            tuple(rule.resources),
            rule.scope if rule.HasField("scope") else "*",
            frozenset(rule.resourceNames),
        )

    def matches(self, req: WebhookRequest, namespaced: bool) -> bool:
        """kube's rules.Matcher, and resourceNames when given."""
        if "*" not in self.operations and req.operation not in self.operations:
            return False
        if "*" not in self.groups and req.group not in self.groups:
            return False
        if "*" not in self.versions and req.version not in self.versions:
            return False
        if not resource_matches(self.resources, req.resource, req.subresource):
            return False
        if (self.scope == "Cluster" and namespaced) or (
            self.scope == "Namespaced" and not namespaced
        ):
            return False
        return not self.names or req.name in self.names


@dataclass(frozen=True)
class _Match:
    namespace_selector: LabelSelector | None  # None: everything
    object_selector: LabelSelector | None
    rules: tuple[_Rule, ...]
    exclude: tuple[_Rule, ...]


@dataclass(frozen=True)
class _Validation:
    expr: _Expr
    message: str
    message_expr: _Expr | None
    reason: str


@dataclass(frozen=True)
class _Policy:
    name: str
    fail_closed: bool
    param_kind: tuple[str, str] | None  # (apiVersion, kind)
    match: _Match
    conditions: tuple[tuple[str, _Expr], ...]
    variables: tuple[tuple[str, _Expr], ...]
    validations: tuple[_Validation, ...]
    audits: tuple[tuple[str, _Expr], ...]


@dataclass(frozen=True)
class _Binding:
    name: str
    match: _Match | None
    param_ref: ar.ParamRef | None
    actions: tuple[str, ...]


@dataclass(frozen=True)
class _Hook:
    """A policy with the bindings that name it."""

    policy: _Policy
    bindings: tuple[_Binding, ...]


@dataclass
class _Denial:
    policy: str
    binding: str | None
    message: str
    reason: str


def _selector(sel: Any) -> LabelSelector | None:
    if not sel.matchLabels and not sel.matchExpressions:
        return None
    return from_proto(sel)


def _compile_match(match: ar.MatchResources) -> _Match:
    return _Match(
        namespace_selector=_selector(match.namespaceSelector),
        object_selector=_selector(match.objectSelector),
        rules=tuple(_Rule.of(r) for r in match.resourceRules),
        exclude=tuple(_Rule.of(r) for r in match.excludeResourceRules),
    )


def resources_match(match: _Match, req: WebhookRequest, *, empty_matches: bool) -> bool:
    """kube's matching of resourceRules less excludeResourceRules (objects not needed). An
    empty resourceRules matches everything when `empty_matches` (a binding's matchResources)."""
    namespaced = request_namespaced(req)
    if any(r.matches(req, namespaced) for r in match.exclude):
        return False
    if not match.rules:
        return empty_matches
    return any(r.matches(req, namespaced) for r in match.rules)


class PolicyDispatcher:
    """The ValidatingAdmissionPolicy plugin of one apiserver."""

    def __init__(
        self,
        caches: Mapping[str, CacheView],
        storage: StorageView,
        *,
        prefix: str,
        params: ParamResolver | None = None,
        compiler: Compiler | None = None,
    ) -> None:
        self.policy_cache = caches[VALIDATING_ADMISSION_POLICY.kind]
        self.binding_cache = caches[VALIDATING_ADMISSION_POLICY_BINDING.kind]
        self.namespaces = caches[NAMESPACE.kind]
        self.storage = storage
        self.params = params
        self._ns_prefix = f"{prefix}/{NAMESPACE.plural}/".encode()
        self._compiler = compiler if compiler is not None else cel_compiler()
        # (uid, generation) -> the policy compiled.
        self._policies: dict[tuple[str, int], _Policy] = {}
        self._memo: tuple[int, int, int, int, tuple[_Hook, ...]] | None = None
        # wants()'s answers for the current hooks, by what the rules look at.
        self._wanted: dict[tuple[str, str, str, str, str, bool, str], bool] = {}
        self._wanted_for: tuple[_Hook, ...] | None = None
        self._names_matter = False

    # ---- configuration -----------------------------------------------------------------------

    def active(self) -> bool:
        """Whether any binding exists (a policy without one does nothing)."""
        return bool(self.binding_cache.state)

    def hooks(self) -> tuple[_Hook, ...]:
        """Every policy that has bindings, by name, with its bindings by name; rebuilt when
        either cache moves, each policy compiled once per generation."""
        pstate, bstate = self.policy_cache.state, self.binding_cache.state
        memo = self._memo
        key = (
            id(pstate),
            self.policy_cache.state_revision,
            id(bstate),
            self.binding_cache.state_revision,
        )
        if memo is not None and memo[:4] == key:
            return memo[4]
        by_policy: dict[str, list[_Binding]] = {}
        for cached in bstate.values():
            binding: ar.ValidatingAdmissionPolicyBinding = cached.obj  # type: ignore[assignment]
            spec = binding.spec
            by_policy.setdefault(spec.policyName, []).append(
                _Binding(
                    name=binding.metadata.name,
                    match=_compile_match(spec.matchResources)
                    if spec.HasField("matchResources")
                    else None,
                    param_ref=spec.paramRef if spec.HasField("paramRef") else None,
                    actions=tuple(spec.validationActions),
                )
            )
        hooks: list[_Hook] = []
        live: dict[tuple[str, int], _Policy] = {}
        for cached in pstate.values():
            policy: ar.ValidatingAdmissionPolicy = cached.obj  # type: ignore[assignment]
            bindings = by_policy.get(policy.metadata.name)
            ident = (policy.metadata.uid, policy.metadata.generation)
            compiled = self._policies.get(ident) or self._compile(policy)
            live[ident] = compiled
            if bindings:
                bindings.sort(key=lambda b: b.name)
                hooks.append(_Hook(compiled, tuple(bindings)))
        hooks.sort(key=lambda h: h.policy.name)
        self._policies = live
        result = tuple(hooks)
        self._memo = (*key, result)
        return result

    def _expr(self, expression: str) -> _Expr:
        program, errors = self._compiler(expression, POLICY_VARIABLES, "")
        return _Expr(expression, program, "; ".join(e.message for e in errors))

    def _compile(self, policy: ar.ValidatingAdmissionPolicy) -> _Policy:
        spec = policy.spec
        kind = spec.paramKind
        return _Policy(
            name=policy.metadata.name,
            fail_closed=spec.failurePolicy != "Ignore",
            param_kind=(kind.apiVersion, kind.kind) if spec.HasField("paramKind") else None,
            match=_compile_match(spec.matchConstraints),
            conditions=tuple((c.name, self._expr(c.expression)) for c in spec.matchConditions),
            variables=tuple((v.name, self._expr(v.expression)) for v in spec.variables),
            validations=tuple(
                _Validation(
                    expr=self._expr(v.expression),
                    message=v.message,
                    message_expr=self._expr(v.messageExpression) if v.messageExpression else None,
                    reason=v.reason if v.HasField("reason") else "",
                )
                for v in spec.validations
            ),
            audits=tuple((a.key, self._expr(a.valueExpression)) for a in spec.auditAnnotations),
        )

    # ---- matching ------------------------------------------------------------------------------

    def wants(self, req: WebhookRequest) -> bool:
        """Whether some bound policy's rules (and one of its bindings') name `req`: only then
        are its objects made JSON."""
        hooks = self.hooks()
        if hooks is not self._wanted_for:
            self._wanted_for = hooks
            self._wanted.clear()
            self._names_matter = any(
                rule.names
                for hook in hooks
                for match in (hook.policy.match, *(b.match for b in hook.bindings if b.match))
                for rule in (*match.rules, *match.exclude)
            )
        key = (
            req.operation,
            req.group,
            req.version,
            req.resource,
            req.subresource,
            bool(req.namespace),
            req.name if self._names_matter else "",
        )
        wanted = self._wanted.get(key)
        if wanted is None:
            wanted = not exempt(req) and any(
                resources_match(hook.policy.match, req, empty_matches=False)
                and any(
                    b.match is None or resources_match(b.match, req, empty_matches=True)
                    for b in hook.bindings
                )
                for hook in hooks
            )
            if len(self._wanted) >= _WANTED_MEMO_SIZE:
                self._wanted.clear()
            self._wanted[key] = wanted
        return wanted

    async def _namespace(self, req: WebhookRequest) -> namespace_pb2.Namespace | None:
        if not req.namespace:
            return None
        key = self._ns_prefix + req.namespace.encode()
        hit = self.namespaces.state.get(key)
        if hit is not None:
            return hit.obj  # type: ignore[return-value]
        kv = await self.storage.get(key)
        return None if kv is None else namespace_pb2.Namespace.FromString(kv.value)

    async def _selected(self, match: _Match, req: WebhookRequest, ns: Any) -> bool:
        if match.namespace_selector is not None:
            if req.resource == NAMESPACE.plural and not req.group:
                labels = object_labels(req.object if req.object is not None else req.old_object)
                if not match.namespace_selector.matches(labels):
                    return False
            elif req.namespace:
                ns_obj = await ns()
                labels = ns_obj.metadata.labels if ns_obj is not None else {}
                if not match.namespace_selector.matches(labels):
                    return False
        if match.object_selector is not None:
            sel = match.object_selector
            if not (
                sel.matches(object_labels(req.object)) or sel.matches(object_labels(req.old_object))
            ):
                return False
        return True

    # ---- the plugin ----------------------------------------------------------------------------

    async def validate(self, req: WebhookRequest) -> None:
        """Run every matching policy binding; raise the first denial (kube's order: policies
        by name, bindings by name, validations in order)."""
        if exempt(req):
            return
        hooks = self.hooks()
        if not hooks:
            return
        ns_cache: list[namespace_pb2.Namespace | None] = []

        async def namespace() -> namespace_pb2.Namespace | None:
            if not ns_cache:
                ns_cache.append(await self._namespace(req))
            return ns_cache[0]

        denials: list[_Denial] = []
        failures: list[dict[str, Any]] = []
        request: dict[str, Any] | None = None
        for hook in hooks:
            policy = hook.policy
            if not resources_match(policy.match, req, empty_matches=False):
                continue
            if not await self._selected(policy.match, req, namespace):
                continue
            annotations: dict[str, list[str]] = {}
            for binding in hook.bindings:
                if binding.match is not None and not (
                    resources_match(binding.match, req, empty_matches=True)
                    and await self._selected(binding.match, req, namespace)
                ):
                    continue
                try:
                    params = await self._collect_params(policy, binding, req)
                except _ConfigError as exc:
                    if policy.fail_closed:
                        denials.append(
                            _Denial(
                                policy.name,
                                binding.name,
                                f"failed to configure binding: {exc}",
                                "",
                            )
                        )
                    continue
                if request is None:
                    request = admission_request(str(uuid.uuid4()), req)
                ns_obj = await namespace() if _namespace_object_wanted(req) else None
                base = {
                    "object": req.object,
                    "oldObject": req.old_object,
                    "request": request,
                    "namespaceObject": _namespace_json(ns_obj),
                    "authorizer": None,
                }
                for param in params:
                    self._evaluate(
                        policy, binding, {**base, "params": param}, req, denials, failures,
                        annotations,
                    )  # fmt: skip
            for key, values in annotations.items():
                req.audit_annotations[f"{policy.name}/{key}"] = ", ".join(values)
        if failures:
            req.audit_annotations[VALIDATION_FAILURE_ANNOTATION] = json.dumps(
                failures, separators=(",", ":")
            )
        if denials:
            raise _denied(req, denials[0])

    async def _collect_params(
        self, policy: _Policy, binding: _Binding, req: WebhookRequest
    ) -> list[dict[str, Any] | None]:
        """kube's CollectParams: the params to evaluate the policy with ([None] without)."""
        ref = binding.param_ref
        if policy.param_kind is None or ref is None:
            return [None]
        api_version, kind = policy.param_kind
        source = self.params(api_version, kind) if self.params is not None else None
        if source is None:
            group, _, version = api_version.rpartition("/")
            raise _ConfigError(f"paramKind kind `{group}/{version}, Kind={kind}` not known")
        prefix = source.prefix
        if source.namespaced:
            namespace = ref.namespace or req.namespace
            if not namespace:
                raise _ConfigError(
                    "cannot use namespaced paramRef in policy binding that matches "
                    "cluster-scoped resources"
                )
            prefix += namespace.encode() + b"/"
        elif ref.namespace:
            raise _ConfigError(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
            )
        found = _params_in(source.cache.state, prefix, ref)
        if not found and await source.cache.wait_fresh():
            # None in the cache: look again once it holds what etcd has now, so a param
            # created just before the request counts (kube's informer may lag here).
            found = _params_in(source.cache.state, prefix, ref)
        if not found:
            if ref.parameterNotFoundAction != "Allow":
                raise _ConfigError(
                    "no params found for policy binding with `Deny` parameterNotFoundAction"
                )
            return []
        out: list[dict[str, Any] | None] = []
        for hit in found:
            data = source.to_json(hit.obj)
            data["apiVersion"] = api_version
            data["kind"] = kind
            out.append(data)
        return out

    def _evaluate(
        self,
        policy: _Policy,
        binding: _Binding,
        activation: dict[str, Any],
        req: WebhookRequest,
        denials: list[_Denial],
        failures: list[dict[str, Any]],
        annotations: dict[str, list[str]],
    ) -> None:
        """One (binding, param): matchConditions, variables, validations, audit annotations."""
        decisions: list[tuple[int, str, str]] = []  # (validation index, message, reason)
        for _name, cond in policy.conditions:
            ok, value, error = _run(cond, activation)
            if not ok:
                if policy.fail_closed:
                    decisions.append((0, error, ""))
                break
            if value is not True:
                return
        else:
            variables: dict[str, Any] = {}
            broken: dict[str, str] = {}
            activation["variables"] = variables
            for name, var in policy.variables:
                ok, value, error = _run(var, activation)
                if ok:
                    variables[name] = value
                else:
                    broken[name] = error
            for index, validation in enumerate(policy.validations):
                expr = validation.expr
                uses = [n for n in broken if f"variables.{n}" in expr.expression]
                if uses:
                    ok, value, error = False, None, broken[uses[0]]
                else:
                    ok, value, error = _run(expr, activation)
                if not ok:
                    if policy.fail_closed:
                        decisions.append((index, error, ""))
                    continue
                if value is True:
                    continue
                decisions.append(
                    (index, _message(validation, activation), validation.reason or "Invalid")
                )
            for key, audit in policy.audits:
                ok, value, error = _run(audit, activation)
                if not ok:
                    if policy.fail_closed:
                        decisions.append((-1, error, ""))
                    continue
                if value is None:
                    continue
                text = str(value)[:MAX_AUDIT_ANNOTATION_BYTES]
                values = annotations.setdefault(key, [])
                if text not in values:
                    values.append(text)
        for index, message, reason in decisions:
            for action in binding.actions:
                if action == "Deny":
                    denials.append(_Denial(policy.name, binding.name, message, reason))
                elif action == "Warn" and req.warnings is not None:
                    req.warnings.append(
                        f"Validation failed for ValidatingAdmissionPolicy '{policy.name}' with "
                        f"binding '{binding.name}': {message}"
                    )
                elif action == "Audit":
                    failures.append(
                        {
                            "message": message,
                            "policy": policy.name,
                            "binding": binding.name,
                            "expressionIndex": max(index, 0),
                            "validationActions": list(binding.actions),
                        }
                    )


def _params_in(
    state: Mapping[bytes, CachedObject], prefix: bytes, ref: ar.ParamRef
) -> list[CachedObject]:
    """The objects `ref` names among `state`'s keys under `prefix`."""
    if ref.name:
        hit = state.get(prefix + ref.name.encode())
        return [] if hit is None else [hit]
    selector = _selector(ref.selector)
    found: list[CachedObject] = []
    for key in sorted(k for k in state if k.startswith(prefix)):
        if b"/" in key[len(prefix) :]:
            continue
        hit = state[key]
        if selector is None or selector.matches(hit.labels):
            found.append(hit)
    return found


class _ConfigError(Exception):
    """A binding that cannot be evaluated (its params); follows the policy's failurePolicy."""


def _run(expr: _Expr, activation: dict[str, Any]) -> tuple[bool, Any, str]:
    """(ok, value, error message in kube's words)."""
    if expr.program is None:
        return False, None, f"compilation error: {expr.error}"
    try:
        return True, expr.program.evaluate(activation), ""
    except Exception as exc:  # a CEL runtime error, whatever its type
        return False, None, f"expression '{expr.expression}' resulted in error: {exc}"


def _message(validation: _Validation, activation: dict[str, Any]) -> str:
    """kube's message of a failed validation: a usable messageExpression result, else the
    message, else `failed expression: <expression>`."""
    if validation.message_expr is not None:
        ok, value, _ = _run(validation.message_expr, activation)
        if ok and isinstance(value, str):
            text = value.strip()
            if text and len(text.encode()) <= MAX_MESSAGE_EXPRESSION_BYTES and "\n" not in text:
                return text
    if validation.message:
        return validation.message.strip()
    return f"failed expression: {validation.expr.expression.strip()}"


def _namespace_object_wanted(req: WebhookRequest) -> bool:
    # kube: a Namespace's own request has no namespaceObject (its namespace is itself).
    return bool(req.namespace) and not (req.resource == NAMESPACE.plural and not req.group)


def _namespace_json(ns: namespace_pb2.Namespace | None) -> dict[str, Any] | None:
    if ns is None:
        return None
    data = to_dict(ns)
    data["apiVersion"] = "v1"
    data["kind"] = NAMESPACE.kind
    return data


def _object_name(req: WebhookRequest) -> str:
    """kube's extractResourceName: the request's name, else the object's name or its
    generateName (names are generated after admission)."""
    if req.name:
        return req.name
    meta = ((req.object or req.old_object) or {}).get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "Unknown")


def _denied(req: WebhookRequest, denial: _Denial) -> TinykubeError:
    if denial.binding is not None:
        text = (
            f"ValidatingAdmissionPolicy '{denial.policy}' with binding '{denial.binding}' "
            f"denied request: {denial.message}"
        )
    else:
        text = f"ValidatingAdmissionPolicy '{denial.policy}' denied request: {denial.message}"
    resource = f"{req.resource}.{req.group}" if req.group else req.resource
    name = _object_name(req)
    message = f'{resource} "{name}" is forbidden: {text}'
    reason = denial.reason or "Invalid"
    code = _REASON_CODES.get(reason, 422)
    error = error_for_http(code, message)
    details: dict[str, Any] = {"name": name}
    if req.group:
        details["group"] = req.group
    details["kind"] = req.resource
    details["causes"] = [{"message": text}]
    error.rest_status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }
    return error
