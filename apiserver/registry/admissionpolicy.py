"""ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
(admissionregistration.k8s.io/v1): defaults and validation, as kube's
pkg/apis/admissionregistration (v1 defaults.go, validation.go).

Defaults: a policy's failurePolicy Fail; matchConstraints' and a binding's matchResources'
matchPolicy Equivalent, empty namespaceSelector and objectSelector, rules' scope "*" (v1 has
no default for a paramRef's parameterNotFoundAction: it is required). Validation: a policy
needs matchConstraints with resourceRules, at least one validation or audit annotation,
expressions that compile (CEL, apiserver/crd/cel.py, every variable `dyn`: errors are reported
on the field in kube's `compilation failed: ERROR: <input>:...` shape), unique variable names
that are CEL identifiers, reasons kube knows; a binding needs a policyName, validationActions
from Deny/Warn/Audit (not Deny and Warn together), a paramRef with exactly one of name and selector.

The status is the server's: created and updated with `observedGeneration` at the spec's
generation and an empty `typeChecking` (tinykube checks expressions against `dyn`, so it has no
type warnings to report). Pure functions; the admission plugin is apiserver/policies.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from google.protobuf.message import Message

from apiserver.crd.cel import is_cel_identifier
from apiserver.registry.admissionregistration import (
    FAILURE_POLICIES,
    MATCH_POLICIES,
    Compiler,
    cel_compiler,
    validate_match_conditions,
    validate_rule,
)
from apiserver.registry.base import Strategy
from apiserver.validation import (
    GoValue,
    duplicate,
    forbidden,
    go_quote,
    invalid,
    required,
    unsupported,
    validate_label_selector,
)
from tinykube.errors import FieldError
from tinykube.selectors import validate_label_key
from tinykube.v1 import admissionregistration_pb2 as ar

# What a policy's expressions may name (kube's ValidatingAdmissionPolicy CEL environment).
POLICY_VARIABLES = (
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "authorizer",
    "variables",
)
# messageExpression and auditAnnotations see the same, less `authorizer`'s decisions (kube
# allows it there too).
REASONS = ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge")
VALIDATION_ACTIONS = ("Deny", "Warn", "Audit")
PARAMETER_NOT_FOUND_ACTIONS = ("Allow", "Deny")
MAX_VARIABLES = 64


def default_match_resources(match: ar.MatchResources) -> None:
    if not match.HasField("matchPolicy"):
        match.matchPolicy = "Equivalent"
    match.namespaceSelector.SetInParent()
    match.objectSelector.SetInParent()
    for rule in (*match.resourceRules, *match.excludeResourceRules):
        if not rule.HasField("scope"):
            rule.scope = "*"


def default_policy(policy: ar.ValidatingAdmissionPolicy) -> None:
    spec = policy.spec
    if not spec.HasField("failurePolicy"):
        spec.failurePolicy = "Fail"
    if spec.HasField("matchConstraints"):
        default_match_resources(spec.matchConstraints)


def default_binding(binding: ar.ValidatingAdmissionPolicyBinding) -> None:
    spec = binding.spec
    if spec.HasField("matchResources"):
        default_match_resources(spec.matchResources)


def _named_rule(path: str, rule: ar.NamedRuleWithOperations) -> list[FieldError]:
    plain = ar.RuleWithOperations(
        operations=rule.operations,
        apiGroups=rule.apiGroups,
        apiVersions=rule.apiVersions,
        resources=rule.resources,
    )
    if rule.HasField("scope"):
        plain.scope = rule.scope
    errs = validate_rule(path, plain)
    seen: set[str] = set()
    for i, name in enumerate(rule.resourceNames):
        if name in seen:
            errs.append(duplicate(f"{path}.resourceNames[{i}]", name))
        seen.add(name)
    return errs


def validate_match_resources(
    path: str, match: ar.MatchResources, *, rules_required: bool
) -> list[FieldError]:
    """kube's validateMatchResources."""
    errs: list[FieldError] = []
    if match.HasField("matchPolicy") and match.matchPolicy not in MATCH_POLICIES:
        errs.append(unsupported(f"{path}.matchPolicy", match.matchPolicy, MATCH_POLICIES))
    errs += validate_label_selector(f"{path}.namespaceSelector", match.namespaceSelector)
    errs += validate_label_selector(f"{path}.objectSelector", match.objectSelector)
    if rules_required and not match.resourceRules:
        errs.append(required(f"{path}.resourceRules"))
    for i, rule in enumerate(match.resourceRules):
        errs += _named_rule(f"{path}.resourceRules[{i}]", rule)
    for i, rule in enumerate(match.excludeResourceRules):
        errs += _named_rule(f"{path}.excludeResourceRules[{i}]", rule)
    return errs


def _compile(compiler: Compiler, expression: str, path: str) -> list[FieldError]:
    if not expression:
        return [required(path)]
    return compiler(expression, POLICY_VARIABLES, path)[1]


def _group_version(path: str, api_version: str) -> list[FieldError]:
    if not api_version:
        return [required(path)]
    parts = api_version.split("/")
    if len(parts) > 2 or not all(parts):
        return [invalid(path, api_version, f'unexpected GroupVersion string: "{api_version}"')]
    return []


def validate_policy(policy: ar.ValidatingAdmissionPolicy, compiler: Compiler) -> list[FieldError]:
    """kube's ValidateValidatingAdmissionPolicy (the spec; metadata is the generic checks')."""
    spec = policy.spec
    errs: list[FieldError] = []
    if spec.HasField("failurePolicy") and spec.failurePolicy not in FAILURE_POLICIES:
        errs.append(unsupported("spec.failurePolicy", spec.failurePolicy, FAILURE_POLICIES))
    if spec.HasField("paramKind"):
        errs += _group_version("spec.paramKind.apiVersion", spec.paramKind.apiVersion)
        if not spec.paramKind.kind:
            errs.append(required("spec.paramKind.kind"))
    if not spec.HasField("matchConstraints"):
        errs.append(required("spec.matchConstraints"))
    else:
        errs += validate_match_resources(
            "spec.matchConstraints", spec.matchConstraints, rules_required=True
        )
    if not spec.validations and not spec.auditAnnotations:
        errs.append(
            required(
                "spec.validations", "validations or auditAnnotations must contain at least one item"
            )
        )
    errs += validate_match_conditions("spec.matchConditions", spec.matchConditions, compiler)
    if len(spec.variables) > MAX_VARIABLES:
        errs.append(
            FieldError(
                "spec.variables",
                f"Too many: {len(spec.variables)}: must have at most {MAX_VARIABLES} items",
            )
        )
    names: set[str] = set()
    for i, var in enumerate(spec.variables):
        vp = f"spec.variables[{i}]"
        if not var.name:
            errs.append(required(f"{vp}.name"))
        elif not is_cel_identifier(var.name):
            errs.append(invalid(f"{vp}.name", var.name, "name is not a valid CEL identifier"))
        elif var.name in names:
            errs.append(duplicate(f"{vp}.name", var.name))
        names.add(var.name)
        errs += _compile(compiler, var.expression, f"{vp}.expression")
    for i, validation in enumerate(spec.validations):
        errs += _validation(f"spec.validations[{i}]", validation, compiler)
    keys: set[str] = set()
    for i, annotation in enumerate(spec.auditAnnotations):
        ap = f"spec.auditAnnotations[{i}]"
        if not annotation.key:
            errs.append(required(f"{ap}.key"))
        else:
            # kube: "<policy name>/<key>" must be a valid qualified annotation key.
            full = f"{policy.metadata.name}/{annotation.key}"
            errs += [invalid(f"{ap}.key", annotation.key, p) for p in validate_label_key(full)]
            if annotation.key in keys:
                errs.append(duplicate(f"{ap}.key", annotation.key))
            keys.add(annotation.key)
        errs += _compile(compiler, annotation.valueExpression, f"{ap}.valueExpression")
    return errs


def _validation(path: str, validation: ar.Validation, compiler: Compiler) -> list[FieldError]:
    errs = _compile(compiler, validation.expression, f"{path}.expression")
    message = validation.message
    if message and not message.strip():
        errs.append(invalid(f"{path}.message", message, "message must be non-empty if specified"))
    elif "\n" in message:
        errs.append(invalid(f"{path}.message", message, "message must not contain line breaks"))
    if validation.messageExpression:
        errs += _compile(compiler, validation.messageExpression, f"{path}.messageExpression")
    if validation.HasField("reason") and validation.reason not in REASONS:
        errs.append(unsupported(f"{path}.reason", validation.reason, REASONS))
    return errs


def validate_binding(binding: ar.ValidatingAdmissionPolicyBinding) -> list[FieldError]:
    """kube's ValidateValidatingAdmissionPolicyBinding."""
    spec = binding.spec
    errs: list[FieldError] = []
    if not spec.policyName:
        errs.append(required("spec.policyName"))
    if spec.HasField("paramRef"):
        errs += _param_ref("spec.paramRef", spec.paramRef)
    if spec.HasField("matchResources"):
        errs += validate_match_resources(
            "spec.matchResources", spec.matchResources, rules_required=False
        )
    errs += _validation_actions("spec.validationActions", list(spec.validationActions))
    return errs


def _param_ref(path: str, ref: ar.ParamRef) -> list[FieldError]:
    errs: list[FieldError] = []
    has_selector = ref.HasField("selector")
    if ref.name and has_selector:
        errs.append(forbidden(f"{path}.name", "name and selector are mutually exclusive"))
        errs.append(forbidden(f"{path}.selector", "name and selector are mutually exclusive"))
    if not ref.name and not has_selector:
        errs.append(required(path, "one of name or selector must be set"))
    if ref.name and (ref.name.startswith(".") or "/" in ref.name or "%" in ref.name):
        errs.append(invalid(f"{path}.name", ref.name, "may not contain '/' or '%'"))
    if has_selector:
        errs += validate_label_selector(f"{path}.selector", ref.selector)
    action = ref.parameterNotFoundAction
    if not ref.HasField("parameterNotFoundAction"):
        errs.append(required(f"{path}.parameterNotFoundAction"))
    elif action not in PARAMETER_NOT_FOUND_ACTIONS:
        errs.append(
            unsupported(f"{path}.parameterNotFoundAction", action, PARAMETER_NOT_FOUND_ACTIONS)
        )
    return errs


def _validation_actions(path: str, actions: Sequence[str]) -> list[FieldError]:
    if not actions:
        return [required(path)]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, action in enumerate(actions):
        if action in seen:
            errs.append(duplicate(f"{path}[{i}]", action))
        elif action not in VALIDATION_ACTIONS:
            errs.append(unsupported(f"{path}[{i}]", action, VALIDATION_ACTIONS))
        seen.add(action)
    if {"Deny", "Warn"} <= seen:
        errs.append(
            invalid(
                path,
                _go_actions(actions),
                "must not contain both Deny and Warn (repeating the same validation failure "
                "information in the API response and headers serves no purpose)",
            )
        )
    return errs


def _go_actions(actions: Sequence[str]) -> GoValue:
    return GoValue("[]v1.ValidationAction{" + ", ".join(go_quote(a) for a in actions) + "}")


class ValidatingAdmissionPolicyStrategy(Strategy[ar.ValidatingAdmissionPolicy]):
    def decode_defaults(self, obj: ar.ValidatingAdmissionPolicy) -> None:
        default_policy(obj)

    def default(self, obj: ar.ValidatingAdmissionPolicy, now: datetime) -> None:
        default_policy(obj)
        obj.ClearField("status")
        _observe(obj)

    def on_update(
        self, new: ar.ValidatingAdmissionPolicy, old: ar.ValidatingAdmissionPolicy
    ) -> None:
        default_policy(new)

    def prepare_for_update(self, new: Message, old: Message) -> None:
        super().prepare_for_update(new, old)
        _observe(self.typed(new))

    def check(self, obj: ar.ValidatingAdmissionPolicy) -> list[FieldError]:
        return validate_policy(obj, cel_compiler())

    def check_status(
        self, new: ar.ValidatingAdmissionPolicy, old: ar.ValidatingAdmissionPolicy
    ) -> list[FieldError]:
        # kube validates only the status (conditions) on a status update.
        return []


def _observe(policy: ar.ValidatingAdmissionPolicy) -> None:
    """What kube's type-checking controller writes: the generation checked, and its warnings
    (none: every variable is `dyn` here)."""
    policy.status.observedGeneration = policy.metadata.generation
    policy.status.typeChecking.SetInParent()


class ValidatingAdmissionPolicyBindingStrategy(Strategy[ar.ValidatingAdmissionPolicyBinding]):
    def decode_defaults(self, obj: ar.ValidatingAdmissionPolicyBinding) -> None:
        default_binding(obj)

    def default(self, obj: ar.ValidatingAdmissionPolicyBinding, now: datetime) -> None:
        default_binding(obj)

    def on_update(
        self, new: ar.ValidatingAdmissionPolicyBinding, old: ar.ValidatingAdmissionPolicyBinding
    ) -> None:
        default_binding(new)

    def check(self, obj: ar.ValidatingAdmissionPolicyBinding) -> list[FieldError]:
        return validate_binding(obj)
