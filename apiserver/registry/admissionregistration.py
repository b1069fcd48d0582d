"""Mutating- and ValidatingWebhookConfigurations (admissionregistration.k8s.io/v1): defaults
and validation, as kube's pkg/apis/admissionregistration (v1 defaults, validation.go).

Defaults: failurePolicy Fail, matchPolicy Equivalent, timeoutSeconds 10, empty
namespaceSelector and objectSelector (match everything), rules' scope "*", reinvocationPolicy
Never (mutating), a service's port 443. Validation: webhook names are fully qualified
(at least three DNS labels) and unique, sideEffects None or NoneOnDryRun,
admissionReviewVersions include v1 or v1beta1, timeoutSeconds 1..30, exactly one of url or
service (url https, no user info, fragment or query), rules' operations, groups, versions and
resources (wildcards and subresources as kube allows them), matchConditions' names unique and
their CEL expressions compiling (apiserver/crd/cel.py). Pure
functions; the dispatcher is apiserver/webhooks.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from urllib.parse import urlsplit

from apiserver.crd.cel import Program, compile_expression
from apiserver.registry.base import Strategy
from apiserver.validation import (
    GoValue,
    dns1123_subdomain,
    duplicate,
    go_quote,
    invalid,
    required,
    unsupported,
    validate_label_selector,
)
from tinykube.errors import FieldError
from tinykube.selectors import validate_label_key
from tinykube.v1 import admissionregistration_pb2 as ar

FAILURE_POLICIES = ("Fail", "Ignore")
MATCH_POLICIES = ("Equivalent", "Exact")
SIDE_EFFECTS = ("None", "NoneOnDryRun")
REINVOCATION_POLICIES = ("Never", "IfNeeded")
SCOPES = ("Cluster", "Namespaced", "*")
OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
ADMISSION_REVIEW_VERSIONS = ("v1", "v1beta1")
DEFAULT_TIMEOUT_SECONDS = 10
MAX_TIMEOUT_SECONDS = 30
# kube's limit on matchConditions per webhook.
MAX_MATCH_CONDITIONS = 64
# The variables a matchCondition's expression may use (kube's webhook CEL environment).
MATCH_CONDITION_VARIABLES = ("object", "oldObject", "request", "authorizer", "params")

Webhook = ar.MutatingWebhook | ar.ValidatingWebhook
Configuration = ar.MutatingWebhookConfiguration | ar.ValidatingWebhookConfiguration


Compiler = Callable[[str, Sequence[str], str], tuple[Program | None, list[FieldError]]]


def cel_compiler() -> Compiler:
    """The CEL compiler of matchConditions (apiserver/crd/cel.py)."""
    return compile_expression


def set_defaults(hook: Webhook) -> None:
    """kube's SetDefaults_{Mutating,Validating}Webhook, Rule and ServiceReference."""
    if not hook.HasField("failurePolicy"):
        hook.failurePolicy = "Fail"
    if not hook.HasField("matchPolicy"):
        hook.matchPolicy = "Equivalent"
    if not hook.HasField("timeoutSeconds"):
        hook.timeoutSeconds = DEFAULT_TIMEOUT_SECONDS
    # An unset selector is the empty one: it matches everything.
    hook.namespaceSelector.SetInParent()
    hook.objectSelector.SetInParent()
    if isinstance(hook, ar.MutatingWebhook) and not hook.HasField("reinvocationPolicy"):
        hook.reinvocationPolicy = "Never"
    for rule in hook.rules:
        if not rule.HasField("scope"):
            rule.scope = "*"
    service = hook.clientConfig.service
    if hook.clientConfig.HasField("service") and not service.HasField("port"):
        service.port = 443


def _fully_qualified(path: str, name: str) -> list[FieldError]:
    """kube's IsFullyQualifiedName: a DNS subdomain with at least three segments."""
    if not name:
        return [required(path)]
    errs = dns1123_subdomain(path, name)
    if errs:
        return errs
    if len(name.split(".")) < 3:
        return [
            invalid(path, name, "should be a domain with at least three segments separated by dots")
        ]
    return []


def _go_strings(values: Sequence[str]) -> GoValue:
    """A []string as Go's %#v prints it (kube's Invalid value of a list)."""
    return GoValue("[]string{" + ", ".join(go_quote(v) for v in values) + "}")


def _one_star(path: str, values: Sequence[str], what: str) -> list[FieldError]:
    if "*" in values and len(values) > 1:
        return [
            invalid(path, _go_strings(values), f"if '*' is present, must not specify other {what}")
        ]
    return []


def _resources(path: str, resources: Sequence[str]) -> list[FieldError]:
    """kube's validateResources: "r", "r/sub", "*", "*/sub", "r/*", "*/*", with the
    combinations that would overlap refused."""
    errs: list[FieldError] = []
    if not resources:
        return [required(path)]
    with_sub: dict[str, set[str]] = {}
    without_sub: set[str] = set()
    for i, res in enumerate(resources):
        if not res:
            errs.append(required(f"{path}[{i}]"))
            continue
        if res == "*/*" and len(resources) > 1:
            errs.append(
                invalid(
                    path,
                    _go_strings(resources),
                    "if '*/*' is present, must not specify other resources",
                )
            )
            continue
        main, _, sub = res.partition("/")
        if "/" in res:
            if "/" in sub:
                errs.append(
                    invalid(f"{path}[{i}]", res, "resource must not contain more than one '/'")
                )
                continue
            if not main or not sub:
                errs.append(
                    invalid(f"{path}[{i}]", res, "resource and subresource must not be empty")
                )
                continue
            with_sub.setdefault(main, set()).add(sub)
        else:
            without_sub.add(main)
    if "*" in without_sub and len(without_sub) > 1:
        errs.append(
            invalid(
                path,
                _go_strings(resources),
                "if '*' is present, must not specify other resources without subresources",
            )
        )
    for main, subs in with_sub.items():
        if "*" in subs and len(subs) > 1:
            errs.append(
                invalid(
                    path,
                    _go_strings(resources),
                    f"if '{main}/*' is present, must not specify {main}/x",
                )
            )
        if main != "*" and "*" in with_sub and subs & with_sub["*"]:
            sub = sorted(subs & with_sub["*"])[0]
            errs.append(
                invalid(
                    path,
                    _go_strings(resources),
                    f"if '*/{sub}' is present, must not specify {main}/{sub}",
                )
            )
    return errs


def validate_rule(path: str, rule: ar.RuleWithOperations) -> list[FieldError]:
    errs: list[FieldError] = []
    ops = list(rule.operations)
    if not ops:
        errs.append(required(f"{path}.operations"))
    errs += _one_star(f"{path}.operations", ops, "operations")
    for i, op in enumerate(ops):
        if op not in OPERATIONS:
            errs.append(unsupported(f"{path}.operations[{i}]", op, OPERATIONS))
    groups = list(rule.apiGroups)
    if not groups:
        errs.append(required(f"{path}.apiGroups"))
    errs += _one_star(f"{path}.apiGroups", groups, "API groups")
    versions = list(rule.apiVersions)
    if not versions:
        errs.append(required(f"{path}.apiVersions"))
    errs += _one_star(f"{path}.apiVersions", versions, "API versions")
    for i, version in enumerate(versions):
        if not version:
            errs.append(required(f"{path}.apiVersions[{i}]", "version must not be empty"))
    errs += _resources(f"{path}.resources", list(rule.resources))
    if rule.HasField("scope") and rule.scope not in SCOPES:
        errs.append(unsupported(f"{path}.scope", rule.scope, SCOPES))
    return errs


def validate_url(path: str, url: str) -> list[FieldError]:
    """kube's ValidateWebhookURL (forceHttps): an https URL with a host, without user info,
    fragment or query."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return [invalid(path, url, f"url must be a valid URL: {exc}")]
    errs: list[FieldError] = []
    if parts.scheme != "https":
        errs.append(invalid(path, parts.scheme, "'https' is the only allowed URL scheme"))
    if not parts.hostname:
        errs.append(invalid(path, parts.netloc, "host must be specified"))
    if parts.username is not None or parts.password is not None:
        errs.append(
            invalid(path, parts.username or "", "user information is not permitted in the URL")
        )
    if parts.fragment or url.endswith("#"):
        errs.append(invalid(path, parts.fragment, "fragments are not permitted in the URL"))
    if parts.query or url.endswith("?"):
        errs.append(invalid(path, parts.query, "query parameters are not permitted in the URL"))
    return errs


def validate_client_config(path: str, config: ar.AdmissionWebhookClientConfig) -> list[FieldError]:
    has_url = config.HasField("url")
    has_service = config.HasField("service")
    if has_url == has_service:
        return [required(path, "exactly one of url or service is required")]
    if has_url:
        return validate_url(f"{path}.url", config.url)
    svc = config.service
    sp = f"{path}.service"
    errs: list[FieldError] = []
    if not svc.name:
        errs.append(required(f"{sp}.name", "service name is required"))
    if not svc.namespace:
        errs.append(required(f"{sp}.namespace", "service namespace is required"))
    if svc.HasField("path") and svc.path:
        if not svc.path.startswith("/"):
            errs.append(invalid(f"{sp}.path", svc.path, "must start with a '/'"))
        elif "//" in svc.path or any(not seg for seg in svc.path.split("/")[1:-1]):
            errs.append(invalid(f"{sp}.path", svc.path, "segment[1] may not be empty"))
    if svc.HasField("port") and not 1 <= svc.port <= 65535:
        errs.append(
            invalid(
                f"{sp}.port", svc.port, "port is not valid: must be between 1 and 65535, inclusive"
            )
        )
    return errs


def validate_match_conditions(
    path: str, conditions: Iterable[ar.MatchCondition], compiler: Compiler
) -> list[FieldError]:
    conditions = list(conditions)
    errs: list[FieldError] = []
    if len(conditions) > MAX_MATCH_CONDITIONS:
        errs.append(
            FieldError(
                path, f"Too many: {len(conditions)}: must have at most {MAX_MATCH_CONDITIONS} items"
            )
        )
    seen: set[str] = set()
    for i, cond in enumerate(conditions):
        cp = f"{path}[{i}]"
        if not cond.name:
            errs.append(required(f"{cp}.name"))
        else:
            errs += [invalid(f"{cp}.name", cond.name, p) for p in validate_label_key(cond.name)]
            if cond.name in seen:
                errs.append(duplicate(f"{cp}.name", cond.name))
            seen.add(cond.name)
        if not cond.expression:
            errs.append(required(f"{cp}.expression"))
        else:
            _, problems = compiler(cond.expression, MATCH_CONDITION_VARIABLES, f"{cp}.expression")
            errs += problems
    return errs


def validate_webhook(path: str, hook: Webhook, compiler: Compiler) -> list[FieldError]:
    """kube's validateMutatingWebhook / validateValidatingWebhook (v1 rules)."""
    errs = _fully_qualified(f"{path}.name", hook.name)
    for i, rule in enumerate(hook.rules):
        errs += validate_rule(f"{path}.rules[{i}]", rule)
    if hook.HasField("failurePolicy") and hook.failurePolicy not in FAILURE_POLICIES:
        errs.append(unsupported(f"{path}.failurePolicy", hook.failurePolicy, FAILURE_POLICIES))
    if hook.HasField("matchPolicy") and hook.matchPolicy not in MATCH_POLICIES:
        errs.append(unsupported(f"{path}.matchPolicy", hook.matchPolicy, MATCH_POLICIES))
    if not hook.HasField("sideEffects") or not hook.sideEffects:
        errs.append(required(f"{path}.sideEffects", "must specify one of None, NoneOnDryRun"))
    elif hook.sideEffects not in SIDE_EFFECTS:
        errs.append(unsupported(f"{path}.sideEffects", hook.sideEffects, SIDE_EFFECTS))
    if hook.HasField("timeoutSeconds") and not 1 <= hook.timeoutSeconds <= MAX_TIMEOUT_SECONDS:
        errs.append(
            invalid(
                f"{path}.timeoutSeconds",
                hook.timeoutSeconds,
                "the timeout value must be between 1 and 30 seconds",
            )
        )
    errs += _review_versions(f"{path}.admissionReviewVersions", list(hook.admissionReviewVersions))
    errs += validate_label_selector(f"{path}.namespaceSelector", hook.namespaceSelector)
    errs += validate_label_selector(f"{path}.objectSelector", hook.objectSelector)
    if (
        isinstance(hook, ar.MutatingWebhook)
        and hook.HasField("reinvocationPolicy")
        and hook.reinvocationPolicy not in REINVOCATION_POLICIES
    ):
        errs.append(
            unsupported(
                f"{path}.reinvocationPolicy", hook.reinvocationPolicy, REINVOCATION_POLICIES
            )
        )
    errs += validate_client_config(f"{path}.clientConfig", hook.clientConfig)
    errs += validate_match_conditions(f"{path}.matchConditions", hook.matchConditions, compiler)
    return errs


def _review_versions(path: str, versions: list[str]) -> list[FieldError]:
    if not versions:
        return [required(path, f"must specify one of {', '.join(ADMISSION_REVIEW_VERSIONS)}")]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, version in enumerate(versions):
        if version in seen:
            errs.append(duplicate(f"{path}[{i}]", version))
        seen.add(version)
    if not seen & set(ADMISSION_REVIEW_VERSIONS):
        errs.append(
            invalid(
                path,
                _go_strings(versions),
                f"must include at least one of {', '.join(ADMISSION_REVIEW_VERSIONS)}",
            )
        )
    return errs


def validate_configuration(config: Configuration, compiler: Compiler) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    hooks: Sequence[Webhook] = config.webhooks
    for i, hook in enumerate(hooks):
        path = f"webhooks[{i}]"
        errs += validate_webhook(path, hook, compiler)
        if hook.name in seen:
            errs.append(duplicate(f"{path}.name", hook.name))
        seen.add(hook.name)
    return errs


class WebhookConfigurationStrategy(Strategy[Configuration]):
    """Both configuration kinds: their messages differ only in reinvocationPolicy."""

    def decode_defaults(self, obj: Configuration) -> None:
        for hook in obj.webhooks:
            set_defaults(hook)

    def default(self, obj: Configuration, now: datetime) -> None:
        for hook in obj.webhooks:
            set_defaults(hook)

    def on_update(self, new: Configuration, old: Configuration) -> None:
        for hook in new.webhooks:
            set_defaults(hook)

    def check(self, obj: Configuration) -> list[FieldError]:
        return validate_configuration(obj, cel_compiler())
