"""The ValidatingAdmissionPolicy plugin (apiserver/policies.py) and the kinds' validation
(apiserver/registry/admissionpolicy.py), pure: policies and bindings in in-memory caches,
requests as the store builds them, CEL through apiserver/crd/cel.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.policies import ParamSource, PolicyDispatcher, resources_match
from apiserver.registry.admissionpolicy import (
    default_binding,
    default_policy,
    validate_binding,
    validate_policy,
)
from apiserver.registry.admissionregistration import cel_compiler
from apiserver.watchcache import CachedObject
from apiserver.webhooks import WebhookRequest
from tinykube.errors import ForbiddenError, InvalidError, TinykubeError
from tinykube.manifest import to_dict
from tinykube.v1 import admissionregistration_pb2 as ar
from tinykube.v1 import configmap_pb2, namespace_pb2

PREFIX = "/registry"


@dataclass
class FakeCache:
    state: dict[bytes, CachedObject] = field(default_factory=dict)
    revision: int = 1

    def put(self, key: bytes, obj: Any, namespace: str = "") -> None:
        self.revision += 1
        self.state = {
            **self.state,
            key: CachedObject(
                key=key,
                namespace=namespace,
                obj=obj,
                data=b"",
                revision=self.revision,
                labels=dict(obj.metadata.labels),
                fields={},
            ),
        }

    @property
    def state_revision(self) -> int:
        return self.revision

    async def wait_fresh(self) -> bool:
        return True


class FakeStorage:
    async def get(self, key: bytes) -> Any:
        return None


@dataclass
class World:
    policies: FakeCache = field(default_factory=FakeCache)
    bindings: FakeCache = field(default_factory=FakeCache)
    namespaces: FakeCache = field(default_factory=FakeCache)
    configmaps: FakeCache = field(default_factory=FakeCache)

    def dispatcher(self) -> PolicyDispatcher:
        caches: Mapping[str, Any] = {
            "ValidatingAdmissionPolicy": self.policies,
            "ValidatingAdmissionPolicyBinding": self.bindings,
            "Namespace": self.namespaces,
        }

        def params(api_version: str, kind: str) -> ParamSource | None:
            if (api_version, kind) == ("v1", "ConfigMap"):
                return ParamSource(True, f"{PREFIX}/configmaps/".encode(), self.configmaps, to_dict)
            return None

        return PolicyDispatcher(caches, FakeStorage(), prefix=PREFIX, params=params)

    def policy(self, name: str, spec: dict[str, Any]) -> None:
        obj = json_format.ParseDict({"metadata": {"name": name, "generation": 1}, "spec": spec},
                                    ar.ValidatingAdmissionPolicy())  # fmt: skip
        obj.metadata.uid = f"uid-{name}"
        default_policy(obj)
        assert validate_policy(obj, cel_compiler()) == []
        self.policies.put(f"{PREFIX}/vap/{name}".encode(), obj)

    def binding(self, name: str, spec: dict[str, Any]) -> None:
        spec.setdefault("validationActions", ["Deny"])
        obj = json_format.ParseDict({"metadata": {"name": name}, "spec": spec},
                                    ar.ValidatingAdmissionPolicyBinding())  # fmt: skip
        default_binding(obj)
        assert validate_binding(obj) == []
        self.bindings.put(f"{PREFIX}/vapb/{name}".encode(), obj)

    def namespace(self, name: str, **labels: str) -> None:
        ns = namespace_pb2.Namespace()
        ns.metadata.name = name
        ns.metadata.labels.update(labels)
        self.namespaces.put(f"{PREFIX}/namespaces/{name}".encode(), ns)

    def configmap(self, namespace: str, name: str, data: dict[str, str], **labels: str) -> None:
        cm = configmap_pb2.ConfigMap()
        cm.metadata.name, cm.metadata.namespace = name, namespace
        cm.metadata.labels.update(labels)
        cm.data.update(data)
        self.configmaps.put(f"{PREFIX}/configmaps/{namespace}/{name}".encode(), cm, namespace)


DEPLOYMENTS = {
    "resourceRules": [
        {
            "apiGroups": ["apps"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["deployments"],
        }
    ]
}


def request(
    replicas: int,
    *,
    name: str = "web",
    namespace: str = "default",
    operation: str = "CREATE",
    old: int | None = None,
    labels: dict[str, str] | None = None,
) -> WebhookRequest:
    def obj(n: int) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"replicas": n},
        }

    return WebhookRequest(
        group="apps",
        version="v1",
        kind="Deployment",
        resource="deployments",
        subresource="",
        namespace=namespace,
        name=name,
        operation=operation,
        object=obj(replicas),
        old_object=None if old is None else obj(old),
        user_info={"username": "alice", "groups": ["devs"]},
        warnings=[],
    )


def run(dispatcher: PolicyDispatcher, req: WebhookRequest) -> TinykubeError | None:
    try:
        asyncio.run(dispatcher.validate(req))
    except TinykubeError as exc:
        return exc
    return None


def world_with(spec: dict[str, Any], **binding: Any) -> World:
    world = World()
    world.namespace("default", team="a")
    world.policy("p", {"matchConstraints": DEPLOYMENTS, **spec})
    world.binding("b", {"policyName": "p", **binding})
    return world


# ---- matching -----------------------------------------------------------------------------


def test_no_binding_means_no_work() -> None:
    world = World()
    world.policy("p", {"matchConstraints": DEPLOYMENTS, "validations": [{"expression": "false"}]})
    dispatcher = world.dispatcher()
    assert not dispatcher.active()
    assert dispatcher.hooks() == ()


def test_rules_exclusions_and_resource_names() -> None:
    match = {
        **DEPLOYMENTS,
        "excludeResourceRules": [
            {
                "apiGroups": ["apps"],
                "apiVersions": ["v1"],
                "operations": ["*"],
                "resources": ["deployments"],
                "resourceNames": ["skipped"],
            }
        ],
    }
    world = World()
    world.policy("p", {"matchConstraints": match, "validations": [{"expression": "false"}]})
    world.binding("b", {"policyName": "p"})
    dispatcher = world.dispatcher()
    assert dispatcher.wants(request(1))
    assert not dispatcher.wants(request(1, name="skipped"))
    assert not dispatcher.wants(request(1, operation="DELETE"))
    pods = request(1)
    pods.group, pods.resource = "", "pods"
    assert not dispatcher.wants(pods)
    policy = dispatcher.hooks()[0].policy
    assert resources_match(policy.match, request(1), empty_matches=False)


def test_binding_match_resources_narrow_the_policy() -> None:
    world = world_with(
        {"validations": [{"expression": "false"}]},
        matchResources={"namespaceSelector": {"matchLabels": {"team": "b"}}},
    )
    world.namespace("other", team="b")
    dispatcher = world.dispatcher()
    assert run(dispatcher, request(1)) is None  # namespace "default" is team a
    assert isinstance(run(dispatcher, request(1, namespace="other")), InvalidError)


def test_object_selector_matches_new_or_old_labels() -> None:
    match = {**DEPLOYMENTS, "objectSelector": {"matchLabels": {"checked": "yes"}}}
    world = World()
    world.namespace("default")
    world.policy("p", {"matchConstraints": match, "validations": [{"expression": "false"}]})
    world.binding("b", {"policyName": "p"})
    dispatcher = world.dispatcher()
    assert run(dispatcher, request(1)) is None
    assert run(dispatcher, request(1, labels={"checked": "yes"})) is not None


def test_policies_compile_once_per_generation() -> None:
    world = world_with({"validations": [{"expression": "object.spec.replicas < 3"}]})
    dispatcher = world.dispatcher()
    first = dispatcher.hooks()[0].policy
    world.binding("b2", {"policyName": "p"})
    hooks = dispatcher.hooks()
    assert hooks[0].policy is first
    assert [b.name for b in hooks[0].bindings] == ["b", "b2"]


# ---- evaluation ---------------------------------------------------------------------------


def test_denial_is_kubes_message_status_and_code() -> None:
    world = world_with({"validations": [{"expression": "object.spec.replicas <= 5"}]})
    error = run(world.dispatcher(), request(6))
    assert isinstance(error, InvalidError)
    text = (
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: "
        "failed expression: object.spec.replicas <= 5"
    )
    assert str(error) == f'deployments.apps "web" is forbidden: {text}'
    assert error.rest_status is not None
    assert error.rest_status["code"] == 422
    assert error.rest_status["reason"] == "Invalid"
    assert error.rest_status["details"]["causes"] == [{"message": text}]
    assert run(world.dispatcher(), request(5)) is None


@pytest.mark.parametrize(
    ("reason", "code", "cls"),
    [("Forbidden", 403, ForbiddenError), ("Invalid", 422, InvalidError)],
)
def test_reason_picks_the_code(reason: str, code: int, cls: type[TinykubeError]) -> None:
    world = world_with({"validations": [{"expression": "false", "reason": reason}]})
    error = run(world.dispatcher(), request(1))
    assert isinstance(error, cls)
    assert error.rest_status is not None and error.rest_status["code"] == code


def test_message_expression_variables_request_and_namespace_object() -> None:
    world = world_with(
        {
            "variables": [
                {"name": "n", "expression": "object.spec.replicas"},
                {"name": "doubled", "expression": "variables.n * 2"},
            ],
            "validations": [
                {
                    "expression": "variables.doubled < 4",
                    "messageExpression": "request.userInfo.username + ' wants ' + "
                    "string(variables.doubled) + ' in team ' + "
                    "namespaceObject.metadata.labels.team",
                }
            ],
        }
    )
    error = run(world.dispatcher(), request(3))
    assert error is not None
    assert str(error).endswith("denied request: alice wants 6 in team a")


def test_a_bad_message_expression_falls_back_to_the_message() -> None:
    world = world_with(
        {
            "validations": [
                {"expression": "false", "messageExpression": "'two\\nlines'", "message": "plain"}
            ]
        }
    )
    error = run(world.dispatcher(), request(1))
    assert error is not None and str(error).endswith("denied request: plain")


def test_old_object_on_update() -> None:
    world = world_with(
        {
            "validations": [
                {
                    "expression": "oldObject == null || object.spec.replicas >= "
                    "oldObject.spec.replicas",
                    "message": "no scaling down",
                }
            ]
        }
    )
    dispatcher = world.dispatcher()
    assert run(dispatcher, request(1)) is None
    assert run(dispatcher, request(3, operation="UPDATE", old=2)) is None
    assert run(dispatcher, request(1, operation="UPDATE", old=2)) is not None


def test_match_conditions_skip_and_errors_follow_failure_policy() -> None:
    world = world_with(
        {
            "matchConditions": [{"name": "big", "expression": "object.spec.replicas > 2"}],
            "validations": [{"expression": "false"}],
        }
    )
    dispatcher = world.dispatcher()
    assert run(dispatcher, request(1)) is None
    assert run(dispatcher, request(3)) is not None
    for policy, refused in (("Fail", True), ("Ignore", False)):
        broken = world_with(
            {"failurePolicy": policy, "validations": [{"expression": "object.spec.nope == 1"}]}
        )
        error = run(broken.dispatcher(), request(1))
        assert (error is not None) == refused
        if error is not None:
            assert str(error).endswith(
                "denied request: expression 'object.spec.nope == 1' resulted in error: "
                "no such key: nope"
            ), str(error)


def test_warn_and_audit_actions() -> None:
    world = world_with(
        {
            "validations": [{"expression": "false", "message": "careful"}],
            "auditAnnotations": [{"key": "seen", "valueExpression": "'yes'"}],
        },
        validationActions=["Warn", "Audit"],
    )
    req = request(1)
    assert run(world.dispatcher(), req) is None
    assert req.warnings == [
        "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': careful"
    ]
    assert req.audit_annotations["p/seen"] == "yes"
    assert (
        '"expressionIndex":0'
        in req.audit_annotations["validation.policy.admission.k8s.io/validation_failure"]
    )


def test_params_by_name_selector_and_not_found() -> None:
    spec = {
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [
            {
                "expression": "object.spec.replicas <= int(params.data.max)",
                "messageExpression": "'max ' + params.data.max",
            }
        ],
    }
    world = world_with(spec, paramRef={"name": "limits", "parameterNotFoundAction": "Deny"})
    dispatcher = world.dispatcher()
    error = run(dispatcher, request(1))
    assert error is not None and str(error).endswith(
        "failed to configure binding: no params found for policy binding with `Deny` "
        "parameterNotFoundAction"
    )
    world.configmap("default", "limits", {"max": "2"})
    assert run(dispatcher, request(2)) is None
    error = run(dispatcher, request(3))
    assert error is not None and str(error).endswith("denied request: max 2")
    # A selector: every matching param is evaluated; the strictest refuses.
    world.configmap("default", "a", {"max": "5"}, tier="x")
    world.configmap("default", "b", {"max": "4"}, tier="x")
    world.binding(
        "b",
        {
            "policyName": "p",
            "paramRef": {
                "selector": {"matchLabels": {"tier": "x"}},
                "parameterNotFoundAction": "Allow",
            },
        },
    )
    assert run(dispatcher, request(4)) is None
    error = run(dispatcher, request(5))
    assert error is not None and str(error).endswith("denied request: max 4")
    # Allow: no params in another namespace means nothing to check.
    world.namespace("empty")
    assert run(dispatcher, request(50, namespace="empty")) is None


# ---- the kinds' validation ----------------------------------------------------------------


def _policy(spec: dict[str, Any]) -> ar.ValidatingAdmissionPolicy:
    return json_format.ParseDict(
        {"metadata": {"name": "p"}, "spec": spec}, ar.ValidatingAdmissionPolicy()
    )


def test_policy_validation_messages() -> None:
    errors = validate_policy(
        _policy(
            {
                "paramKind": {"apiVersion": "a/b/c"},
                "validations": [{"expression": "1 +", "message": "two\nlines"}],
                "auditAnnotations": [{"key": "k", "valueExpression": ""}],
                "variables": [{"name": "if", "expression": "1"}],
            }
        ),
        cel_compiler(),
    )
    shown = [str(e) for e in errors]
    assert (
        'spec.paramKind.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: "a/b/c"'
        in shown
    )
    assert "spec.paramKind.kind: Required value" in shown
    assert "spec.matchConstraints: Required value" in shown
    assert (
        'spec.variables[0].name: Invalid value: "if": name is not a valid CEL identifier' in shown
    )
    assert any(
        s.startswith('spec.validations[0].expression: Invalid value: "1 +": compilation failed: ')
        for s in shown
    ), shown
    assert (
        'spec.validations[0].message: Invalid value: "two\\nlines": '
        "message must not contain line breaks" in shown
    )
    assert "spec.auditAnnotations[0].valueExpression: Required value" in shown
    empty = validate_policy(_policy({"matchConstraints": {}}), cel_compiler())
    assert [str(e) for e in empty] == [
        "spec.matchConstraints.resourceRules: Required value",
        "spec.validations: Required value: validations or auditAnnotations must contain at "
        "least one item",
    ]


def test_binding_validation_messages() -> None:
    binding = json_format.ParseDict(
        {
            "metadata": {"name": "b"},
            "spec": {
                "policyName": "p",
                "validationActions": ["Audit", "Audit"],
                "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Maybe"},
            },
        },
        ar.ValidatingAdmissionPolicyBinding(),
    )
    shown = [str(e) for e in validate_binding(binding)]
    assert shown == [
        "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
        "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
        'spec.paramRef.parameterNotFoundAction: Unsupported value: "Maybe": supported values: '
        '"Allow", "Deny"',
        'spec.validationActions[1]: Duplicate value: "Audit"',
    ]
