"""ValidatingAdmissionPolicy with the real kubectl against `tinykube up`: a policy and its
binding applied from YAML, listed and described, a refused create in kube's words, a Warn
binding whose message kubectl prints as `Warning:`, and a policy whose limit comes from a
ConfigMap named by the binding's paramRef.

A policy takes effect once the apiserver's watch caches hold it and its binding, so each test
first waits until a server-side dry run shows its effect.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e

POLICY = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-limit
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["deployments"]
  validations:
  - expression: "object.spec.replicas <= 5"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-limit-binding
spec:
  policyName: replica-limit
  validationActions: [{actions}]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: default
"""

PARAM_POLICY = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-param
spec:
  paramKind:
    apiVersion: v1
    kind: ConfigMap
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]
  validations:
  - expression: "object.spec.replicas <= int(params.data.maxReplicas)"
    messageExpression: "'at most ' + params.data.maxReplicas + ' replicas here'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-param-binding
spec:
  policyName: replica-param
  validationActions: [Deny]
  paramRef:
    name: replica-limits
    namespace: default
    parameterNotFoundAction: Deny
"""


def deployment(name: str, replicas: int) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: main
        image: busybox
        command: [sleep, "3600"]
"""


def test_a_policy_refuses_with_kubes_message(tinykube_up: UpCluster) -> None:
    applied = ok(tinykube_up.kubectl("apply", "-f", "-", stdin=POLICY.format(actions="Deny")))
    assert applied == (
        "validatingadmissionpolicy.admissionregistration.k8s.io/replica-limit created\n"
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/replica-limit-binding "
        "created\n"
    )
    listed = ok(tinykube_up.kubectl("get", "validatingadmissionpolicies"))
    header, row = listed.splitlines()[:2]
    assert header.split() == ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]
    assert row.split()[:3] == ["replica-limit", "1", "<unset>"]
    bindings = ok(tinykube_up.kubectl("get", "validatingadmissionpolicybindings"))
    header, row = bindings.splitlines()[:2]
    assert header.split() == ["NAME", "POLICYNAME", "PARAMREF", "AGE"]
    assert row.split()[:3] == ["replica-limit-binding", "replica-limit", "<unset>"]
    described = ok(tinykube_up.kubectl("describe", "validatingadmissionpolicy", "replica-limit"))
    assert "replica-limit" in described and "object.spec.replicas <= 5" in described
    explained = ok(tinykube_up.kubectl("explain", "validatingadmissionpolicy.spec.validations"))
    assert "FIELD: validations" in explained and "expression" in explained
    generation = tinykube_up.kubectl(
        "get", "validatingadmissionpolicy", "replica-limit",
        "-o", "jsonpath={.status.observedGeneration}",
    )  # fmt: skip
    assert ok(generation) == "1"

    def refused() -> Any:
        result = tinykube_up.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=deployment("probe", 6)
        )
        return result if result.code == 1 else None

    until(refused, "the policy to take effect")
    refusal = tinykube_up.kubectl("apply", "-f", "-", stdin=deployment("big", 6))
    assert refusal.code == 1
    assert refusal.err == (
        "The deployments \"big\" is invalid: : ValidatingAdmissionPolicy 'replica-limit' with "
        "binding 'replica-limit-binding' denied request: failed expression: "
        "object.spec.replicas <= 5\n"
    )
    assert ok(tinykube_up.kubectl("apply", "-f", "-", stdin=deployment("small", 2))) == (
        "deployment.apps/small created\n"
    )

    # The binding switched to Warn: the write goes through, kubectl prints the warning.
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=POLICY.format(actions="Warn")))

    def warned() -> Any:
        result = tinykube_up.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=deployment("probe", 6)
        )
        return result if result.code == 0 and "Warning:" in result.err else None

    until(warned, "the Warn action to take effect")
    created = tinykube_up.kubectl("create", "-f", "-", stdin=deployment("warned", 6))
    assert created.code == 0, created.err
    assert created.out == "deployment.apps/warned created\n"
    assert created.err == (
        "Warning: Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding "
        "'replica-limit-binding': failed expression: object.spec.replicas <= 5\n"
    )
    ok(tinykube_up.kubectl("delete", "deployment", "small", "warned"))
    ok(tinykube_up.kubectl("delete", "validatingadmissionpolicybinding", "replica-limit-binding"))
    ok(tinykube_up.kubectl("delete", "validatingadmissionpolicy", "replica-limit"))


def test_a_param_driven_policy(tinykube_up: UpCluster) -> None:
    ok(tinykube_up.kubectl("create", "configmap", "replica-limits", "--from-literal=maxReplicas=3"))
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=PARAM_POLICY))
    bindings = ok(tinykube_up.kubectl("get", "validatingadmissionpolicybinding"))
    assert bindings.splitlines()[1].split()[:3] == [
        "replica-param-binding",
        "replica-param",
        "default/replica-limits",
    ]

    def refused() -> Any:
        result = tinykube_up.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=deployment("probe", 4)
        )
        return result if result.code == 1 else None

    until(refused, "the policy to take effect")
    refusal = tinykube_up.kubectl("create", "-f", "-", stdin=deployment("four", 4))
    assert refusal.code == 1
    assert refusal.err == (
        'Error from server (Forbidden): error when creating "STDIN": deployments.apps "four" is '
        "forbidden: ValidatingAdmissionPolicy 'replica-param' with binding "
        "'replica-param-binding' denied request: at most 3 replicas here\n"
    )
    # A larger limit in the ConfigMap lets it through.
    ok(tinykube_up.kubectl("patch", "configmap", "replica-limits", "-p",
                           '{"data": {"maxReplicas": "4"}}'))  # fmt: skip

    def allowed() -> Any:
        result = tinykube_up.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=deployment("probe", 4)
        )
        return result if result.code == 0 else None

    until(allowed, "the new param to take effect")
    assert ok(tinykube_up.kubectl("create", "-f", "-", stdin=deployment("four", 4))) == (
        "deployment.apps/four created\n"
    )
    ok(tinykube_up.kubectl("delete", "deployment", "four"))
    ok(tinykube_up.kubectl("delete", "validatingadmissionpolicybinding", "replica-param-binding"))
    ok(tinykube_up.kubectl("delete", "validatingadmissionpolicy", "replica-param"))
    ok(tinykube_up.kubectl("delete", "configmap", "replica-limits"))
