"""Namespaces and PriorityClasses across real processes (`tinykube up`), with the real kubectl and
the tinykube CLI: the built-in objects, creating and deleting namespaces (the controller
manager's namespace controller empties one, then it goes), NamespaceLifecycle and Priority
admission as kubectl reports them, and the examples. Each test uses objects of its own names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import assert_output, ok
from tests.e2e.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def get_json(cluster: UpCluster, *args: str) -> Any:
    return json.loads(ok(cluster.kubectl("get", *args, "-o", "json")))


def test_kubectl_lists_the_system_namespaces_and_priority_classes(tinykube_up: UpCluster) -> None:
    assert_output(
        ok(tinykube_up.kubectl("get", "ns", "default", "kube-node-lease", "kube-public",
                               "kube-system")),
        """
NAME              STATUS   AGE
default           Active   <age>
kube-node-lease   Active   <age>
kube-public       Active   <age>
kube-system       Active   <age>
""",
    )  # fmt: skip
    assert_output(
        ok(tinykube_up.kubectl("get", "priorityclasses")),
        """
NAME                      VALUE        GLOBAL-DEFAULT   AGE     PREEMPTIONPOLICY
system-cluster-critical   2000000000   false            <age>   PreemptLowerPriority
system-node-critical      2000001000   false            <age>   PreemptLowerPriority
""",
    )
    assert ok(tinykube_up.kubectl("get", "pc", "-o", "name")) == (
        "priorityclass.scheduling.k8s.io/system-cluster-critical\n"
        "priorityclass.scheduling.k8s.io/system-node-critical\n"
    )


def test_kubectl_create_and_delete_a_namespace(tinykube_up: UpCluster) -> None:
    assert ok(tinykube_up.kubectl("create", "namespace", "scratch")) == (
        "namespace/scratch created\n"
    )
    ns = get_json(tinykube_up, "namespace", "scratch")
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "scratch"}
    assert (ns["spec"], ns["status"]) == ({"finalizers": ["kubernetes"]}, {"phase": "Active"})
    # kubectl waits until the namespace is gone.
    assert ok(tinykube_up.kubectl("delete", "ns", "scratch")) == 'namespace "scratch" deleted\n'
    gone = tinykube_up.kubectl("get", "ns", "scratch")
    assert (gone.code, gone.err) == (
        1,
        'Error from server (NotFound): namespaces "scratch" not found\n',
    )


def test_system_namespaces_may_not_be_deleted(tinykube_up: UpCluster) -> None:
    refused = tinykube_up.kubectl("delete", "namespace", "kube-system")
    assert (refused.code, refused.err) == (
        1,
        'Error from server (Forbidden): namespaces "kube-system" is forbidden: this namespace '
        "may not be deleted\n",
    )


def test_objects_in_a_missing_namespace_are_refused(tinykube_up: UpCluster) -> None:
    refused = tinykube_up.kubectl("run", "lost", "-n", "nowhere", "--image=busybox")
    assert (refused.code, refused.err) == (
        1,
        'Error from server (NotFound): namespaces "nowhere" not found\n',
    )


HELD_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: held
  namespace: team
  finalizers: [example.com/hold]
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sleep, "3600"]
"""


def test_deleting_a_namespace_removes_its_pods_and_then_itself(tinykube_up: UpCluster) -> None:
    applied = ok(tinykube_up.kubectl("apply", "-f", str(EXAMPLES / "namespace.yaml")))
    assert applied == "namespace/team created\npod/worker created\n"
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=HELD_POD))
    ok(tinykube_up.kubectl("create", "configmap", "settings", "-n", "team", "--from-literal=a=b"))
    ok(tinykube_up.kubectl("create", "secret", "generic", "creds", "-n", "team",
                           "--from-literal=p=q"))  # fmt: skip
    ok(tinykube_up.kubectl("wait", "--for=condition=Ready", "pod/worker", "-n", "team",
                           "--timeout=60s"))  # fmt: skip
    deleted = tinykube_up.kubectl("delete", "namespace", "team", "--wait=false")
    assert (deleted.code, deleted.out) == (0, 'namespace "team" deleted\n')

    # The running pod is stopped and goes; the held one stays (its finalizer), and so does
    # the namespace, Terminating, saying why.
    def only_held_left() -> bool:
        pods = get_json(tinykube_up, "pods", "-n", "team")["items"]
        return [p["metadata"]["name"] for p in pods] == ["held"]

    until(only_held_left, "the worker pod to be deleted")
    # ConfigMaps and Secrets go with the namespace's other content.
    until(
        lambda: not get_json(tinykube_up, "configmaps,secrets", "-n", "team")["items"],
        "the namespace's ConfigMap and Secret to be deleted",
    )

    def conditions() -> dict[str, tuple[str, str]]:
        ns = get_json(tinykube_up, "namespace", "team")
        found = {c["type"]: (c["status"], c["message"]) for c in ns["status"].get("conditions", ())}
        if found.get("NamespaceContentRemaining", ("", ""))[1].endswith("has 1 resource instances"):
            return found
        return {}

    found = until(conditions, "the namespace's conditions to name the held pod")
    assert found["NamespaceContentRemaining"] == (
        "True",
        "Some resources are remaining: pods. has 1 resource instances",
    )
    assert found["NamespaceFinalizersRemaining"] == (
        "True",
        "Some finalizers are remaining: example.com/hold in 1 resource instances",
    )
    assert found["NamespaceDeletionContentFailure"][0] == "False"
    assert_output(
        ok(tinykube_up.kubectl("get", "ns", "team")),
        """
NAME   STATUS        AGE
team   Terminating   <age>
""",
    )
    refused = tinykube_up.kubectl("run", "late", "-n", "team", "--image=busybox")
    assert (refused.code, refused.err) == (
        1,
        'Error from server (Forbidden): pods "late" is forbidden: unable to create new content '
        "in namespace team because it is being terminated\n",
    )
    # Let the held pod go: the namespace follows it.
    ok(tinykube_up.kubectl("patch", "pod", "held", "-n", "team", "--type=json",
                           '-p=[{"op": "remove", "path": "/metadata/finalizers"}]'))  # fmt: skip

    def namespace_gone() -> bool:
        return tinykube_up.kubectl("get", "namespace", "team").code == 1

    until(namespace_gone, "the namespace to be removed")
    assert tinykube_up.kubectl("get", "pods", "-n", "team").err == (
        "No resources found in team namespace.\n"
    )


def test_a_pod_gets_its_priority_class_value(tinykube_up: UpCluster) -> None:
    applied = ok(tinykube_up.kubectl("apply", "-f", str(EXAMPLES / "priorityclass.yaml")))
    assert applied == (
        "priorityclass.scheduling.k8s.io/high-priority created\npod/important created\n"
    )
    spec = get_json(tinykube_up, "pod", "important")["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "high-priority",
        1000000,
        "PreemptLowerPriority",
    )
    refused = tinykube_up.kubectl(
        "run", "unranked", "--image=busybox", '--overrides={"spec": {"priorityClassName": "nope"}}'
    )
    assert (refused.code, refused.err) == (
        1,
        'Error from server (Forbidden): pods "unranked" is forbidden: no PriorityClass with name '
        "nope was found\n",
    )


PRIORITY_CLASS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: cli-low
value: -10
preemptionPolicy: Never
description: below everything
"""


def test_the_tinykube_cli(tinykube_up: UpCluster) -> None:
    assert ok(tinykube_up.cli("create", "namespace", "cli-ns")) == "namespace/cli-ns created\n"
    again = tinykube_up.cli("create", "namespace", "cli-ns")
    assert (again.code, again.err) == (
        1,
        'Error from server (AlreadyExists): namespaces "cli-ns" already exists\n',
    )
    assert_output(
        ok(tinykube_up.cli("get", "ns", "cli-ns")),
        """
NAME     STATUS   AGE
cli-ns   Active   <age>
""",
    )
    assert_output(
        ok(tinykube_up.cli("describe", "namespace", "cli-ns")),
        """
Name:         cli-ns
Labels:       kubernetes.io/metadata.name=cli-ns
Annotations:  <none>
Status:       Active

No resource quota.

No LimitRange resource.
""",
    )
    assert ok(tinykube_up.cli("create", "-f", "-", stdin=PRIORITY_CLASS)) == (
        "priorityclass/cli-low created\n"
    )
    assert_output(
        ok(tinykube_up.cli("get", "pc", "cli-low")),
        """
NAME      VALUE   GLOBAL-DEFAULT   AGE     PREEMPTIONPOLICY
cli-low   -10     false            <age>   Never
""",
    )
    assert_output(
        ok(tinykube_up.cli("describe", "priorityclass", "cli-low")),
        """
Name:              cli-low
Value:             -10
GlobalDefault:     false
PreemptionPolicy:  Never
Description:       below everything
Annotations:       <none>
Events:            <none>
""",
    )
    deleted = tinykube_up.cli("delete", "ns", "cli-ns", "--wait")
    assert (deleted.code, deleted.out) == (0, 'namespace "cli-ns" deleted\n')
    gone = tinykube_up.cli("get", "ns", "cli-ns")
    assert (gone.code, gone.err) == (
        1,
        'Error from server (NotFound): namespaces "cli-ns" not found\n',
    )
    refused = tinykube_up.cli("delete", "ns", "default")
    assert refused.err == (
        'Error from server (Forbidden): namespaces "default" is forbidden: this namespace may not '
        "be deleted\n"
    )
