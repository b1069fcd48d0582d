"""Admission webhook configurations: kube's defaults and validation, and the dispatcher's rule
matcher (operations, groups, versions, resources with subresources and wildcards, scope).
Pure: no server, no etcd."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict

from apiserver.registry.admissionregistration import (
    cel_compiler,
    set_defaults,
    validate_configuration,
    validate_url,
)
from apiserver.webhooks import WebhookDispatcher, WebhookRequest, denied, exempt, rule_matches
from tinykube.errors import BadRequestError
from tinykube.v1 import admissionregistration_pb2 as ar


def _config(**hook: Any) -> ar.ValidatingWebhookConfiguration:
    base: dict[str, Any] = {
        "name": "check.example.com",
        "clientConfig": {"url": "https://hooks.example.com/check"},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    base.update(hook)
    config = ar.ValidatingWebhookConfiguration()
    ParseDict({"metadata": {"name": "c"}, "webhooks": [base]}, config)
    return config


def _problems(**hook: Any) -> dict[str, str]:
    return {e.field: e.message for e in validate_configuration(_config(**hook), cel_compiler())}


def test_a_good_configuration_is_valid_and_gets_kube_defaults() -> None:
    config = _config()
    assert validate_configuration(config, cel_compiler()) == []
    hook = config.webhooks[0]
    set_defaults(hook)
    assert hook.failurePolicy == "Fail"
    assert hook.matchPolicy == "Equivalent"
    assert hook.timeoutSeconds == 10
    assert hook.rules[0].scope == "*"
    assert hook.HasField("namespaceSelector") and hook.HasField("objectSelector")
    mutating = ar.MutatingWebhook()
    set_defaults(mutating)
    assert mutating.reinvocationPolicy == "Never"


@pytest.mark.parametrize(
    ("hook", "field", "message"),
    [
        (
            {"name": "two.parts"},
            "webhooks[0].name",
            "Invalid value: "
            '"two.parts": should be a domain with at least three segments separated by dots',
        ),
        (
            {"sideEffects": "Some"},
            "webhooks[0].sideEffects",
            'Unsupported value: "Some": supported values: "None", "NoneOnDryRun"',
        ),
        (
            {"sideEffects": ""},
            "webhooks[0].sideEffects",
            "Required value: must specify one of None, NoneOnDryRun",
        ),
        (
            {"admissionReviewVersions": ["v2"]},
            "webhooks[0].admissionReviewVersions",
            'Invalid value: []string{"v2"}: must include at least one of v1, v1beta1',
        ),
        (
            {"admissionReviewVersions": []},
            "webhooks[0].admissionReviewVersions",
            "Required value: must specify one of v1, v1beta1",
        ),
        (
            {"timeoutSeconds": 0},
            "webhooks[0].timeoutSeconds",
            "Invalid value: 0: the timeout value must be between 1 and 30 seconds",
        ),
        (
            {"failurePolicy": "Maybe"},
            "webhooks[0].failurePolicy",
            'Unsupported value: "Maybe": supported values: "Fail", "Ignore"',
        ),
        (
            {"clientConfig": {}},
            "webhooks[0].clientConfig",
            "Required value: exactly one of url or service is required",
        ),
        (
            {"clientConfig": {"url": "https://h/x", "service": {"namespace": "n", "name": "s"}}},
            "webhooks[0].clientConfig",
            "Required value: exactly one of url or service is required",
        ),
        (
            {"clientConfig": {"service": {"namespace": "n", "name": "s", "path": "x"}}},
            "webhooks[0].clientConfig.service.path",
            "Invalid value: \"x\": must start with a '/'",
        ),
        (
            {
                "rules": [
                    {
                        "operations": ["*", "CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ]
            },
            "webhooks[0].rules[0].operations",
            "Invalid value: "
            '[]string{"*", "CREATE"}: if \'*\' is present, must not specify other operations',
        ),
        (
            {
                "rules": [
                    {
                        "operations": ["PATCH"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ]
            },
            "webhooks[0].rules[0].operations[0]",
            "Unsupported value: "
            '"PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"',
        ),
        (
            {
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["*/*", "pods"],
                    }
                ]
            },
            "webhooks[0].rules[0].resources",
            "Invalid value: "
            '[]string{"*/*", "pods"}: if \'*/*\' is present, must not specify other resources',
        ),
        (
            {
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Global",
                    }
                ]
            },
            "webhooks[0].rules[0].scope",
            'Unsupported value: "Global": supported values: "Cluster", "Namespaced", "*"',
        ),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}},
            "webhooks[0].namespaceSelector.matchExpressions[0].values",
            "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        ),
        (
            {"matchConditions": [{"name": "", "expression": "true"}]},
            "webhooks[0].matchConditions[0].name",
            "Required value",
        ),
    ],
)
def test_kube_validation_names_the_field(hook: dict[str, Any], field: str, message: str) -> None:
    assert _problems(**hook)[field] == message


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://h/x", "'https' is the only allowed URL scheme"),
        ("https:///x", "host must be specified"),
        ("https://u:p@h/x", "user information is not permitted in the URL"),
        ("https://h/x#f", "fragments are not permitted in the URL"),
        ("https://h/x?a=b", "query parameters are not permitted in the URL"),
    ],
)
def test_webhook_urls(url: str, problem: str) -> None:
    (error,) = validate_url("url", url)
    assert error.message.endswith(problem)


def _rule(
    resources: list[str], scope: str = "*", ops: tuple[str, ...] = ("*",)
) -> ar.RuleWithOperations:
    return ar.RuleWithOperations(
        operations=list(ops), apiGroups=["*"], apiVersions=["*"], resources=resources, scope=scope
    )


def _req(resource: str, subresource: str = "", operation: str = "CREATE") -> WebhookRequest:
    return WebhookRequest(
        group="",
        version="v1",
        kind="Pod",
        resource=resource,
        subresource=subresource,
        namespace="default",
        name="p",
        operation=operation,
        object=None,
        old_object=None,
    )


@pytest.mark.parametrize(
    ("patterns", "resource", "subresource", "matches"),
    [
        (["pods"], "pods", "", True),
        (["pods"], "pods", "status", False),
        (["pods/status"], "pods", "status", True),
        (["pods/*"], "pods", "status", True),
        (["pods/*"], "pods", "", False),
        (["*"], "services", "", True),
        (["*"], "pods", "status", False),
        (["*/status"], "deployments", "status", True),
        (["*/status"], "deployments", "scale", False),
        (["*/*"], "pods", "binding", True),
        (["*/*"], "pods", "", True),
        (["widgets"], "widgets", "", True),
    ],
)
def test_resource_patterns(
    patterns: list[str], resource: str, subresource: str, matches: bool
) -> None:
    assert rule_matches(_rule(patterns), _req(resource, subresource), True) is matches


def test_operations_and_scope() -> None:
    assert not rule_matches(_rule(["pods"], ops=("UPDATE",)), _req("pods"), True)
    assert rule_matches(_rule(["pods"], ops=("CREATE", "UPDATE")), _req("pods"), True)
    assert not rule_matches(_rule(["pods"], scope="Cluster"), _req("pods"), True)
    assert rule_matches(_rule(["nodes"], scope="Cluster"), _req("nodes"), False)
    assert rule_matches(_rule(["pods"], scope="Namespaced"), _req("pods"), True)


def test_a_refusal_keeps_the_webhooks_code_and_reason() -> None:
    error = denied("x.example.com", {"code": 403, "reason": "Forbidden", "message": "no"})
    assert error.rest_status is not None
    assert error.rest_status["code"] == 403
    assert (
        error.rest_status["message"] == 'admission webhook "x.example.com" denied the request: no'
    )
    assert type(error).__name__ == "ForbiddenError"
    plain = denied("x.example.com", {"code": 200})
    assert plain.rest_status is not None and plain.rest_status["code"] == 400
    assert (
        plain.message == 'admission webhook "x.example.com" denied the request without explanation'
    )


def test_the_configurations_themselves_are_exempt() -> None:
    req = _req("validatingwebhookconfigurations")
    req.group = "admissionregistration.k8s.io"
    assert exempt(req)
    assert not exempt(_req("pods"))


@dataclass
class _Cached:
    obj: Any


@dataclass
class _Cache:
    state: dict[bytes, Any] = field(default_factory=dict)
    state_revision: int = 1


class _NoStorage:
    async def get(self, key: bytes) -> Any:
        return None


async def test_a_dry_run_refuses_a_webhook_with_side_effects() -> None:
    # Only a configuration stored by an older API can say "Some": v1 validation refuses it.
    config = _config(sideEffects="Some")
    caches = {
        kind: _Cache()
        for kind in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "Namespace",
            "Service",
            "EndpointSlice",
        )
    }
    caches["ValidatingWebhookConfiguration"].state[b"k"] = _Cached(config)
    dispatcher = WebhookDispatcher(caches, _NoStorage(), prefix="/registry")
    req = _req("pods")
    req.dry_run = True
    with pytest.raises(BadRequestError) as refused:
        await dispatcher.validate(req)
    assert str(refused.value) == 'admission webhook "check.example.com" does not support dry run'
    await dispatcher.close()
