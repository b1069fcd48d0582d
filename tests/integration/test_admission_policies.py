"""ValidatingAdmissionPolicy and its bindings against a real apiserver on a real etcd, over
REST: the kinds' defaults and validation, and the plugin's answers (kube's denial message,
codes and Status, Warn as Warning headers, params, variables, matching).

Each test writes its policy and binding, waits until the plugin's caches hold them (a
condition: kube-apiserver's plugin also sees them through informers), then writes objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import json_format

from tests.integration.conftest import Rest, rest_apiserver, until
from tinykube.client import Client
from tinykube.errors import ForbiddenError, InvalidError
from tinykube.localetcd import EtcdServer
from tinykube.v1 import admissionregistration_pb2 as ar
from tinykube.v1 import deployment_pb2

pytestmark = pytest.mark.integration

GROUP = "/apis/admissionregistration.k8s.io/v1"
POLICIES = f"{GROUP}/validatingadmissionpolicies"
BINDINGS = f"{GROUP}/validatingadmissionpolicybindings"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"


@pytest.fixture(scope="module")
async def rest(etcd_server: EtcdServer) -> AsyncIterator[Rest]:
    async with rest_apiserver(etcd_server) as rest:
        yield rest


def _bound(rest: Rest) -> set[tuple[str, str]]:
    policies = rest.running.server.admission.policies
    assert policies is not None
    return {(h.policy.name, b.name) for h in policies.hooks() for b in h.bindings}


def deployment_rules() -> dict[str, Any]:
    return {
        "resourceRules": [
            {
                "apiGroups": ["apps"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["deployments"],
            }
        ]
    }


async def bind(rest: Rest, policy_spec: dict[str, Any], name: str, **binding_spec: Any) -> None:
    """Create policy `name` and binding `name`-binding (validationActions Deny unless given)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": policy_spec,
    }
    status, body, _ = await rest.call("POST", POLICIES, policy)
    assert status == 201, body
    binding_spec.setdefault("validationActions", ["Deny"])
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"{name}-binding"},
        "spec": {"policyName": name, **binding_spec},
    }
    status, body, _ = await rest.call("POST", BINDINGS, binding)
    assert status == 201, body
    await until(lambda: (name, f"{name}-binding") in _bound(rest))


async def unbind(rest: Rest, name: str) -> None:
    await rest.call("DELETE", f"{BINDINGS}/{name}-binding")
    await rest.call("DELETE", f"{POLICIES}/{name}")
    await until(lambda: all(p != name for p, _ in _bound(rest)))


def deployment(name: str, replicas: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
            },
        },
    }


async def test_kinds_get_kube_defaults_status_and_validation(rest: Rest) -> None:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "defaults"},
        "spec": {
            "matchConstraints": deployment_rules(),
            "validations": [{"expression": "object.spec.replicas <= 5"}],
        },
    }
    status, created, _ = await rest.call("POST", POLICIES, policy)
    assert status == 201, created
    spec = created["spec"]
    assert spec["failurePolicy"] == "Fail"
    match = spec["matchConstraints"]
    assert match["matchPolicy"] == "Equivalent"
    assert match["namespaceSelector"] == {} and match["objectSelector"] == {}
    assert match["resourceRules"][0]["scope"] == "*"
    assert created["status"]["observedGeneration"] == 1
    assert created["status"]["typeChecking"] == {}
    binding: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "defaults"},
        "spec": {
            "policyName": "defaults",
            "validationActions": ["Deny"],
            "paramRef": {"name": "limits"},
        },
    }
    status, refused, _ = await rest.call("POST", BINDINGS, binding)
    assert status == 422, refused
    assert refused["message"] == (
        'ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io "defaults" is invalid: '
        "spec.paramRef.parameterNotFoundAction: Required value"
    )
    binding["spec"]["paramRef"]["parameterNotFoundAction"] = "Allow"
    binding["spec"]["matchResources"] = {"resourceRules": deployment_rules()["resourceRules"]}
    status, made, _ = await rest.call("POST", BINDINGS, binding)
    assert status == 201, made
    match = made["spec"]["matchResources"]
    assert match["matchPolicy"] == "Equivalent" and match["namespaceSelector"] == {}
    await rest.call("DELETE", f"{BINDINGS}/defaults")
    await rest.call("DELETE", f"{POLICIES}/defaults")

    bad = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "bad"},
        "spec": {
            "failurePolicy": "Sometimes",
            "validations": [
                {"expression": "object.spec.replicas <=", "reason": "Nope"},
            ],
            "variables": [{"name": "not-an-identifier", "expression": "1"}],
        },
    }
    status, body, _ = await rest.call("POST", POLICIES, bad)
    assert status == 422, body
    message = body["message"]
    assert message.startswith(
        'ValidatingAdmissionPolicy.admissionregistration.k8s.io "bad" is invalid: '
    ), message
    fields = {c["field"] for c in body["details"]["causes"]}
    assert fields == {
        "spec.failurePolicy",
        "spec.matchConstraints",
        "spec.variables[0].name",
        "spec.validations[0].expression",
        "spec.validations[0].reason",
    }
    assert (
        'spec.validations[0].expression: Invalid value: "object.spec.replicas <=": '
        "compilation failed: ERROR: <input>:1:" in message
    ), message
    assert 'spec.failurePolicy: Unsupported value: "Sometimes"' in message

    bad_binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "bad"},
        "spec": {"validationActions": ["Deny", "Warn", "Shout"]},
    }
    status, body, _ = await rest.call("POST", BINDINGS, bad_binding)
    assert status == 422, body
    message = body["message"]
    assert "spec.policyName: Required value" in message
    assert (
        'spec.validationActions[2]: Unsupported value: "Shout": supported values: "Deny", '
        '"Warn", "Audit"' in message
    ), message
    assert "must not contain both Deny and Warn" in message


async def test_a_denied_create_gets_kubes_message_code_and_status(rest: Rest) -> None:
    await bind(
        rest,
        {
            "matchConstraints": deployment_rules(),
            "validations": [{"expression": "object.spec.replicas <= 5"}],
        },
        "max-replicas",
    )
    try:
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("big", 6))
        assert status == 422, body
        text = (
            "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' "
            "denied request: failed expression: object.spec.replicas <= 5"
        )
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f'deployments.apps "big" is forbidden: {text}',
            "reason": "Invalid",
            "details": {
                "name": "big",
                "group": "apps",
                "kind": "deployments",
                "causes": [{"message": text}],
            },
            "code": 422,
        }
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("small", 3))
        assert status == 201, body
        # An update is judged too, with oldObject.
        body["spec"]["replicas"] = 9
        status, refused, _ = await rest.call("PUT", f"{DEPLOYMENTS}/small", body)
        assert status == 422, refused
        await rest.call("DELETE", f"{DEPLOYMENTS}/small")
    finally:
        await unbind(rest, "max-replicas")


async def test_message_expression_reason_variables_and_request(rest: Rest) -> None:
    await bind(
        rest,
        {
            "matchConstraints": deployment_rules(),
            "variables": [
                {"name": "replicas", "expression": "object.spec.replicas"},
                {"name": "limit", "expression": "variables.replicas > 2 ? 2 : 100"},
            ],
            "validations": [
                {
                    "expression": "variables.replicas <= variables.limit",
                    "messageExpression": "'user ' + request.userInfo.username + "
                    "' asked for ' + string(variables.replicas) + ' replicas in ' + "
                    "namespaceObject.metadata.name",
                    "reason": "Forbidden",
                },
                {
                    "expression": "oldObject == null || object.spec.replicas >= "
                    "oldObject.spec.replicas",
                    "message": "no scaling down",
                },
            ],
        },
        "scaled",
    )
    try:
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("many", 3))
        assert status == 403, body
        assert body["reason"] == "Forbidden"
        assert body["message"].endswith(
            "denied request: user system:apiserver asked for 3 replicas in default"
        ), body["message"]
        status, made, _ = await rest.call("POST", DEPLOYMENTS, deployment("two", 2))
        assert status == 201, made
        made["spec"]["replicas"] = 1
        status, body, _ = await rest.call("PUT", f"{DEPLOYMENTS}/two", made)
        assert status == 422, body
        assert body["message"].endswith("denied request: no scaling down"), body["message"]
        await rest.call("DELETE", f"{DEPLOYMENTS}/two")
    finally:
        await unbind(rest, "scaled")


async def test_warn_and_audit_actions_let_the_write_through(rest: Rest) -> None:
    await bind(
        rest,
        {
            "matchConstraints": deployment_rules(),
            "validations": [{"expression": "object.spec.replicas <= 1", "message": "too many"}],
            "auditAnnotations": [
                {"key": "replicas", "valueExpression": "string(object.spec.replicas)"}
            ],
        },
        "warned",
        validationActions=["Warn", "Audit"],
    )
    try:
        status, body, resp = await rest.call("POST", DEPLOYMENTS, deployment("warned", 2))
        assert status == 201, body
        assert resp.headers.getall("Warning") == [
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'warned' with binding "
            "'warned-binding': too many\""
        ]
        await rest.call("DELETE", f"{DEPLOYMENTS}/warned")
    finally:
        await unbind(rest, "warned")


async def test_params_from_a_configmap_and_a_missing_param(rest: Rest) -> None:
    limits = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "limits", "namespace": "default", "labels": {"limits": "yes"}},
        "data": {"maxReplicas": "4"},
    }
    status, body, _ = await rest.call("POST", "/api/v1/namespaces/default/configmaps", limits)
    assert status == 201, body
    await bind(
        rest,
        {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": deployment_rules(),
            "validations": [
                {
                    "expression": "object.spec.replicas <= int(params.data.maxReplicas)",
                    "messageExpression": "'at most ' + params.data.maxReplicas + ' replicas'",
                }
            ],
        },
        "param-limit",
        paramRef={"name": "limits", "parameterNotFoundAction": "Deny"},
    )
    try:
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("over", 5))
        assert status == 422, body
        assert body["message"].endswith("denied request: at most 4 replicas"), body
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("under", 4))
        assert status == 201, body
        await rest.call("DELETE", f"{DEPLOYMENTS}/under")
        # The param gone, parameterNotFoundAction Deny refuses every matching write.
        await rest.call("DELETE", "/api/v1/namespaces/default/configmaps/limits")
        server = rest.running.server
        await until(lambda: not any(b"limits" in k for k in server.caches["ConfigMap"].state))
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("orphan", 1))
        assert status == 422, body
        assert body["message"] == (
            "deployments.apps \"orphan\" is forbidden: ValidatingAdmissionPolicy 'param-limit' "
            "with binding 'param-limit-binding' denied request: failed to configure binding: "
            "no params found for policy binding with `Deny` parameterNotFoundAction"
        )
    finally:
        await unbind(rest, "param-limit")


async def test_match_conditions_selectors_and_exclusions(rest: Rest) -> None:
    rules = deployment_rules()
    rules["objectSelector"] = {"matchLabels": {"checked": "yes"}}
    rules["excludeResourceRules"] = [
        {
            "apiGroups": ["apps"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["deployments"],
            "resourceNames": ["exempt"],
        }
    ]
    await bind(
        rest,
        {
            "matchConstraints": rules,
            "matchConditions": [
                {"name": "not-tiny", "expression": "object.spec.replicas > 1"},
            ],
            "validations": [{"expression": "false", "message": "refused"}],
        },
        "selective",
    )
    try:
        # Not labelled: the objectSelector does not match.
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("plain", 3))
        assert status == 201, body
        # Labelled but one replica: the matchCondition is false.
        status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment("tiny", 1, checked="yes"))
        assert status == 201, body
        # Excluded by name.
        status, body, _ = await rest.call(
            "POST", DEPLOYMENTS, deployment("exempt", 3, checked="yes")
        )
        assert status == 201, body
        status, body, _ = await rest.call(
            "POST", DEPLOYMENTS, deployment("caught", 3, checked="yes")
        )
        assert status == 422, body
        assert body["message"].endswith("denied request: refused")
        for name in ("plain", "tiny", "exempt"):
            await rest.call("DELETE", f"{DEPLOYMENTS}/{name}")
    finally:
        await unbind(rest, "selective")


async def test_an_evaluation_error_follows_the_failure_policy(rest: Rest) -> None:
    for policy, expected in (("Fail", 422), ("Ignore", 201)):
        name = f"broken-{policy.lower()}"
        await bind(
            rest,
            {
                "failurePolicy": policy,
                "matchConstraints": deployment_rules(),
                "validations": [{"expression": "object.spec.missing.field == 1"}],
            },
            name,
        )
        try:
            status, body, _ = await rest.call("POST", DEPLOYMENTS, deployment(name, 1))
            assert status == expected, body
            if policy == "Fail":
                assert body["message"].endswith(
                    "denied request: expression 'object.spec.missing.field == 1' resulted in "
                    "error: no such key: missing"
                ), body["message"]
            else:
                await rest.call("DELETE", f"{DEPLOYMENTS}/{name}")
        finally:
            await unbind(rest, name)


async def test_policies_over_grpc_with_the_typed_client(rest: Rest) -> None:
    policy = ar.ValidatingAdmissionPolicy()
    json_format.ParseDict(
        {
            "metadata": {"name": "grpc-made"},
            "spec": {
                "matchConstraints": deployment_rules(),
                "validations": [{"expression": "object.spec.replicas < 2", "reason": "Forbidden"}],
            },
        },
        policy,
    )
    binding = ar.ValidatingAdmissionPolicyBinding()
    json_format.ParseDict(
        {
            "metadata": {"name": "grpc-made"},
            "spec": {"policyName": "grpc-made", "validationActions": ["Deny"]},
        },
        binding,
    )
    async with Client(rest.running.address, timeout=10.0) as client:
        made = await client.validating_admission_policies.create(policy)
        assert made.spec.failurePolicy == "Fail"
        assert made.status.observedGeneration == 1
        await client.validating_admission_policy_bindings.create(binding)
        listed = await client.validating_admission_policies.list()
        assert "grpc-made" in {p.metadata.name for p in listed.items}
        deployment_msg = deployment_pb2.Deployment()
        json_format.ParseDict(deployment("grpc-big", 3), deployment_msg)
        deployment_msg.metadata.namespace = "default"
        with pytest.raises(ForbiddenError) as refused:
            await client.deployments.create(deployment_msg)
        assert str(refused.value) == (
            "deployments.apps \"grpc-big\" is forbidden: ValidatingAdmissionPolicy 'grpc-made' "
            "with binding 'grpc-made' denied request: failed expression: "
            "object.spec.replicas < 2"
        )
        bad = ar.ValidatingAdmissionPolicy()
        bad.metadata.name = "grpc-bad"
        with pytest.raises(InvalidError) as invalid:
            await client.validating_admission_policies.create(bad)
        assert "spec.matchConstraints: Required value" in str(invalid.value)
        await client.validating_admission_policy_bindings.delete("grpc-made")
        await client.validating_admission_policies.delete("grpc-made")


async def test_an_eviction_is_judged_as_a_create_of_pods_eviction(rest: Rest) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "protected", "labels": {"keep": "yes"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    status, body, _ = await rest.call("POST", "/api/v1/namespaces/default/pods", pod)
    assert status == 201, body
    await bind(
        rest,
        {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods/eviction"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "request.name != 'protected'",
                    "messageExpression": "'pod ' + request.name + ' may not be evicted by ' + "
                    "object.kind",
                }
            ],
        },
        "no-eviction",
    )
    try:
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "protected", "namespace": "default"},
        }
        status, body, _ = await rest.call(
            "POST", "/api/v1/namespaces/default/pods/protected/eviction", eviction
        )
        assert status == 422, body
        assert body["message"].endswith(
            "denied request: pod protected may not be evicted by Eviction"
        ), body
    finally:
        await unbind(rest, "no-eviction")
        await rest.call("DELETE", "/api/v1/namespaces/default/pods/protected")
