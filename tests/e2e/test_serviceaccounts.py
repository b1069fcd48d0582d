"""The real kubectl's ServiceAccount verbs against `tinykube up`, as against Kubernetes.

`kubectl create serviceaccount` (posted as protobuf), `get sa` showing `default` and the new
one, a pod running as an account (its env fieldRef spec.serviceAccountName read back from its
log), a pod naming a missing account refused with kube's 403 and message, `default` created
again by the controller manager after a delete, and a pod created right after its namespace
(admission waits for the controller's `default`). Each test uses names of its own.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import assert_output, ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e


def pod_manifest(name: str, account: str, namespace: str = "default") -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                **({"serviceAccountName": account} if account else {}),
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "whoami",
                        "image": "busybox",
                        "command": ["sh", "-c", "echo running as $SA"],
                        "env": [
                            {
                                "name": "SA",
                                "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}},
                            }
                        ],
                    }
                ],
            },
        }
    )


def test_create_and_get_service_accounts(tinykube_up: UpCluster) -> None:
    created = tinykube_up.kubectl("create", "serviceaccount", "robot")
    assert (created.code, created.out, created.err) == (0, "serviceaccount/robot created\n", "")
    assert_output(
        ok(tinykube_up.kubectl("get", "sa")),
        """
NAME      SECRETS   AGE
default   0         <age>
robot     0         <age>
""",
    )
    assert_output(
        ok(tinykube_up.kubectl("describe", "serviceaccount", "robot")),
        """
Name:                robot
Namespace:           default
Labels:              <none>
Annotations:         <none>
Image pull secrets:  <none>
Events:              <none>
""",
    )
    # tinykube's own CLI prints them as kubectl does.
    assert_output(
        ok(tinykube_up.cli("get", "serviceaccounts")),
        """
NAME      SECRETS   AGE
default   0         <age>
robot     0         <age>
""",
    )
    assert ok(tinykube_up.cli("describe", "sa", "robot")).startswith("Name:                robot\n")
    again = tinykube_up.kubectl("create", "sa", "robot")
    assert (again.code, again.err) == (
        1,
        'error: failed to create serviceaccount: serviceaccounts "robot" already exists\n',
    )


def test_a_pod_runs_as_the_account_it_names(tinykube_up: UpCluster) -> None:
    ok(tinykube_up.kubectl("create", "serviceaccount", "runner"))
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=pod_manifest("as-runner", "runner")))
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=pod_manifest("as-default", "")))

    def finished() -> bool:
        phases = tinykube_up.kubectl(
            "get", "pods", "as-runner", "as-default", "-o", "jsonpath={.items[*].status.phase}"
        )
        return ok(phases) == "Succeeded Succeeded"

    until(finished, "both pods to succeed")
    assert ok(tinykube_up.kubectl("logs", "as-runner")) == "running as runner\n"
    assert ok(tinykube_up.kubectl("logs", "as-default")) == "running as default\n"
    spec = json.loads(ok(tinykube_up.kubectl("get", "pod", "as-default", "-o", "json")))["spec"]
    assert (spec["serviceAccountName"], spec["serviceAccount"]) == ("default", "default")


def test_a_pod_naming_a_missing_account_is_refused(tinykube_up: UpCluster) -> None:
    refused = tinykube_up.kubectl("create", "-f", "-", stdin=pod_manifest("lost", "ghost"))
    assert (refused.code, refused.out) == (1, "")
    assert refused.err == (
        'Error from server (Forbidden): error when creating "STDIN": pods "lost" is forbidden: '
        'error looking up service account default/ghost: serviceaccount "ghost" not found\n'
    )


def test_a_deleted_default_account_is_created_again(tinykube_up: UpCluster) -> None:
    uid = ok(tinykube_up.kubectl("get", "sa", "default", "-o", "jsonpath={.metadata.uid}"))
    assert ok(tinykube_up.kubectl("delete", "sa", "default")) == (
        'serviceaccount "default" deleted from default namespace\n'
    )

    def recreated() -> str:
        got = tinykube_up.kubectl("get", "sa", "default", "-o", "jsonpath={.metadata.uid}")
        return got.out if got.code == 0 and got.out not in ("", uid) else ""

    assert until(recreated, "the controller to create default again") != uid


def test_a_new_namespace_admits_pods_at_once(tinykube_up: UpCluster) -> None:
    """The controller manager makes `default` right after the namespace; the pod created at
    once is admitted (kube's admission looks for `default` for about a second)."""
    ok(tinykube_up.kubectl("create", "namespace", "sa-team"))
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=pod_manifest("first", "", "sa-team")))
    names = ok(tinykube_up.kubectl("get", "sa", "-n", "sa-team", "-o", "name"))
    assert names == "serviceaccount/default\n"
