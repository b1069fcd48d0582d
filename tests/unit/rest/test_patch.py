"""PATCH semantics of the REST API: the three patch types, their errors and the merge-key table.

The kubectl cases use the bodies kubectl v1.37 sent (recorded from `kubectl -v=9` against a
stub server); their expected results are what apimachinery's strategicpatch package and
evanphx/json-patch produce for the same original and patch.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from apiserver.rest.patch import (
    INVALID_JSON,
    INVALID_MERGE_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    PATCH_CONTENT_TYPES,
    REJECTED,
    STRATEGIC_MERGE_PATCH,
    _go_stable_sort,
    apply_patch,
)
from tinykube.errors import BadRequestError, InvalidError, RequestEntityTooLargeError
from tinykube.fieldfacts import PATCH_META, patch_meta
from tinykube.kinds import ALL_KINDS
from tinykube.v1 import endpoints_pb2, eventsv1_pb2, node_pb2, pod_pb2, replicaset_pb2, service_pb2

POD_D = pod_pb2.Pod.DESCRIPTOR
NODE_D = node_pb2.Node.DESCRIPTOR
RS_D = replicaset_pb2.ReplicaSet.DESCRIPTOR
SVC_D = service_pb2.Service.DESCRIPTOR

LAST = "kubectl.kubernetes.io/last-applied-configuration"


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "u1",
            "resourceVersion": "10",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": "x"},
            "finalizers": ["example.com/a", "example.com/b"],
        },
        "spec": {
            "containers": [
                {
                    "name": "nginx",
                    "image": "nginx:1.25",
                    "ports": [
                        {"containerPort": 80, "protocol": "TCP"},
                        {"containerPort": 443, "protocol": "TCP"},
                    ],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                },
                {"name": "sidecar", "image": "busybox", "command": ["sleep", "3600"]},
            ],
            "restartPolicy": "Always",
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        },
    }


def applied_pod() -> dict[str, Any]:
    """A pod made by `kubectl apply` (finalizers a and b, label tier, a sidecar), to which the
    server added a label, a finalizer, resources and a node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "api",
            "namespace": "default",
            "labels": {"app": "api", "tier": "back", "injected": "yes"},
            "annotations": {LAST: "{}"},
            "finalizers": ["example.com/a", "example.com/b", "example.com/server"],
        },
        "spec": {
            "containers": [
                {
                    "name": "nginx",
                    "image": "nginx:1.25",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "resources": {"requests": {"cpu": "100m"}},
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            "nodeSelector": {"disk": "ssd"},
            "nodeName": "n1",
        },
    }


def node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi"},
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "MemoryPressure", "status": "False"},
            ],
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "n1"},
            ],
        },
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": {LAST: "{}"}},
        "spec": {
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "8080"},
                {"name": "https", "protocol": "TCP", "port": 443, "targetPort": "8443"},
            ],
            "selector": {"app": "web"},
            "clusterIP": "10.96.0.10",
            "type": "ClusterIP",
        },
    }


def replicaset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]},
            },
        },
        "status": {
            "replicas": 2,
            "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "x"}],
        },
    }


def with_changes(doc: dict[str, Any], *changes: tuple[str, Any]) -> dict[str, Any]:
    """`doc` with each (slash path, value) set; value DELETE removes the key."""
    out = copy.deepcopy(doc)
    for path, value in changes:
        *parents, last = path.split("/")
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is DELETE:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return out


DELETE = object()


def run(content_type: str, doc: dict[str, Any], body: Any, descriptor: Any) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return apply_patch(content_type, doc, raw, descriptor)


# --- what kubectl sends -----------------------------------------------------------------------

KUBECTL_CASES: list[tuple[str, str, Any, Any, Any, Any]] = [
    # (name, content type, original factory, descriptor, body as kubectl sent it, expected)
    (
        "label",
        MERGE_PATCH,
        pod,
        POD_D,
        {"metadata": {"labels": {"env": "prod"}}},
        with_changes(pod(), ("metadata/labels/env", "prod")),
    ),
    (
        "label --overwrite",
        MERGE_PATCH,
        pod,
        POD_D,
        {"metadata": {"labels": {"tier": "back"}}},
        with_changes(pod(), ("metadata/labels/tier", "back")),
    ),
    (
        "label tier-",
        MERGE_PATCH,
        pod,
        POD_D,
        {"metadata": {"labels": {"tier": None}}},
        with_changes(pod(), ("metadata/labels/tier", DELETE)),
    ),
    (
        "annotate",
        MERGE_PATCH,
        pod,
        POD_D,
        {"metadata": {"annotations": {"owner": "team-a"}}},
        with_changes(pod(), ("metadata/annotations/owner", "team-a")),
    ),
    (
        "annotate note-",
        MERGE_PATCH,
        pod,
        POD_D,
        {"metadata": {"annotations": {"note": None}}},
        with_changes(pod(), ("metadata/annotations", {})),
    ),
    (
        "label node",
        MERGE_PATCH,
        node,
        NODE_D,
        {"metadata": {"labels": {"zone": "a"}}},
        with_changes(node(), ("metadata/labels/zone", "a")),
    ),
    (
        "patch --type=merge",
        MERGE_PATCH,
        pod,
        POD_D,
        {"metadata": {"labels": {"app": None, "x": "y"}}},
        with_changes(pod(), ("metadata/labels", {"tier": "front", "x": "y"})),
    ),
    (
        "patch --type=json",
        JSON_PATCH,
        pod,
        POD_D,
        [
            {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.27"},
            {"op": "add", "path": "/metadata/labels/j", "value": "k"},
        ],
        with_changes(pod(), ("spec/containers/0/image", "nginx:1.27"), ("metadata/labels/j", "k")),
    ),
    (
        "cordon",
        STRATEGIC_MERGE_PATCH,
        node,
        NODE_D,
        {"spec": {"unschedulable": True}},
        with_changes(node(), ("spec/unschedulable", True)),
    ),
    (
        # taints have no merge key in Kubernetes: kubectl sends the whole new list
        "taint gpu=true:NoExecute",
        STRATEGIC_MERGE_PATCH,
        node,
        NODE_D,
        {
            "spec": {
                "taints": [
                    {"effect": "NoExecute", "key": "gpu", "value": "true"},
                    {"effect": "NoSchedule", "key": "dedicated", "value": "db"},
                ]
            }
        },
        with_changes(
            node(),
            (
                "spec/taints",
                [
                    {"effect": "NoExecute", "key": "gpu", "value": "true"},
                    {"effect": "NoSchedule", "key": "dedicated", "value": "db"},
                ],
            ),
        ),
    ),
    (
        "taint dedicated-",
        STRATEGIC_MERGE_PATCH,
        node,
        NODE_D,
        {"spec": {"taints": None}},
        with_changes(node(), ("spec/taints", DELETE)),
    ),
    (
        "patch (strategic): one container's image",
        STRATEGIC_MERGE_PATCH,
        pod,
        POD_D,
        {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.26"}]}},
        with_changes(pod(), ("spec/containers/0/image", "nginx:1.26")),
    ),
    (
        "edit: sidecar image and a label",
        STRATEGIC_MERGE_PATCH,
        pod,
        POD_D,
        {
            "metadata": {"labels": {"app": "web2"}},
            "spec": {
                "$setElementOrder/containers": [{"name": "nginx"}, {"name": "sidecar"}],
                "containers": [{"image": "busybox:1.36", "name": "sidecar"}],
            },
        },
        with_changes(
            pod(), ("metadata/labels/app", "web2"), ("spec/containers/1/image", "busybox:1.36")
        ),
    ),
    (
        # first apply over a live pod: containers reordered, env C and port 8080 added; the
        # server-only env A and port 80 keep their place before the applied items
        "apply: reorder containers, add env and port",
        STRATEGIC_MERGE_PATCH,
        pod,
        POD_D,
        {
            "metadata": {"annotations": {LAST: "{}"}},
            "spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "nginx"}],
                "containers": [
                    {
                        "$setElementOrder/env": [{"name": "B"}, {"name": "C"}],
                        "$setElementOrder/ports": [
                            {"containerPort": 443},
                            {"containerPort": 8080},
                        ],
                        "env": [{"name": "C", "value": "3"}],
                        "name": "nginx",
                        "ports": [{"containerPort": 8080}],
                    }
                ],
            },
        },
        with_changes(
            pod(),
            ("metadata/annotations", {"note": "x", LAST: "{}"}),
            (
                "spec/containers",
                [
                    {"name": "sidecar", "image": "busybox", "command": ["sleep", "3600"]},
                    {
                        "name": "nginx",
                        "image": "nginx:1.25",
                        "ports": [
                            {"containerPort": 80, "protocol": "TCP"},
                            {"containerPort": 443, "protocol": "TCP"},
                            {"containerPort": 8080},
                        ],
                        "env": [
                            {"name": "A", "value": "1"},
                            {"name": "B", "value": "2"},
                            {"name": "C", "value": "3"},
                        ],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    },
                ],
            ),
        ),
    ),
    (
        # re-apply with a finalizer, a label, a container and nodeSelector removed
        "apply: removals through the last-applied configuration",
        STRATEGIC_MERGE_PATCH,
        applied_pod,
        POD_D,
        {
            "metadata": {
                "$deleteFromPrimitiveList/finalizers": ["example.com/b"],
                "$setElementOrder/finalizers": ["example.com/a"],
                "annotations": {LAST: "{...}"},
                "labels": {"tier": None},
            },
            "spec": {
                "$setElementOrder/containers": [{"name": "nginx"}],
                "containers": [
                    {
                        "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
                        "image": "nginx:1.26",
                        "name": "nginx",
                    },
                    {"$patch": "delete", "name": "sidecar"},
                ],
                "nodeSelector": None,
            },
        },
        with_changes(
            applied_pod(),
            ("metadata/labels", {"app": "api", "injected": "yes"}),
            ("metadata/annotations", {LAST: "{...}"}),
            ("metadata/finalizers", ["example.com/a", "example.com/server"]),
            (
                "spec/containers",
                [
                    {
                        "name": "nginx",
                        "image": "nginx:1.26",
                        "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
                        "resources": {"requests": {"cpu": "100m"}},
                    }
                ],
            ),
            ("spec/nodeSelector", DELETE),
        ),
    ),
    (
        "apply service: a port added, one changed, one removed",
        STRATEGIC_MERGE_PATCH,
        service,
        SVC_D,
        {
            "spec": {
                "$setElementOrder/ports": [{"port": 9090}, {"port": 80}],
                "ports": [
                    {"name": "metrics", "port": 9090, "targetPort": "9090"},
                    {"port": 80, "targetPort": "8081"},
                    {"$patch": "delete", "port": 443},
                ],
            }
        },
        with_changes(
            service(),
            (
                "spec/ports",
                [
                    {"name": "metrics", "port": 9090, "targetPort": "9090"},
                    {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "8081"},
                ],
            ),
        ),
    ),
    (
        "patch replicaset (strategic): replicas and the template's image",
        STRATEGIC_MERGE_PATCH,
        replicaset,
        RS_D,
        {
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:2"}]}},
            }
        },
        with_changes(
            replicaset(),
            ("spec/replicas", 3),
            ("spec/template/spec/containers/0/image", "nginx:2"),
        ),
    ),
]


@pytest.mark.parametrize(
    ("content_type", "factory", "descriptor", "body", "expected"),
    [case[1:] for case in KUBECTL_CASES],
    ids=[case[0] for case in KUBECTL_CASES],
)
def test_what_kubectl_sends(
    content_type: str, factory: Any, descriptor: Any, body: Any, expected: dict[str, Any]
) -> None:
    original = factory()
    before = copy.deepcopy(original)
    assert run(content_type, original, body, descriptor) == expected
    assert original == before  # the stored object is never modified


def test_result_order_is_kubernetes_order() -> None:
    """== on dicts ignores key order but not list order; check the lists' order explicitly."""
    body = KUBECTL_CASES[13][4]
    out = run(STRATEGIC_MERGE_PATCH, pod(), body, POD_D)
    assert [c["name"] for c in out["spec"]["containers"]] == ["sidecar", "nginx"]
    assert [e["name"] for e in out["spec"]["containers"][1]["env"]] == ["A", "B", "C"]


# --- strategic merge patch semantics --------------------------------------------------------

SMP_CASES: list[tuple[str, Any, Any, Any]] = [
    # (name, original factory or doc, patch, expected)
    (
        # apimachinery puts a patch item the live list does not have before the live items
        "a new container goes first",
        pod,
        {"spec": {"containers": [{"name": "log", "image": "fluentd"}]}},
        lambda: with_changes(
            pod(),
            (
                "spec/containers",
                [{"name": "log", "image": "fluentd"}] + pod()["spec"]["containers"],
            ),
        ),
    ),
    (
        "env merged by name, a new env var after the existing ones",
        pod,
        {
            "spec": {
                "containers": [
                    {
                        "name": "nginx",
                        "env": [{"name": "B", "value": "9"}, {"name": "Z", "value": "z"}],
                    }
                ]
            }
        },
        lambda: with_changes(
            pod(),
            (
                "spec/containers/0/env",
                [
                    {"name": "A", "value": "1"},
                    {"name": "B", "value": "9"},
                    {"name": "Z", "value": "z"},
                ],
            ),
        ),
    ),
    (
        "ports merged by containerPort",
        pod,
        {
            "spec": {
                "containers": [
                    {"name": "nginx", "ports": [{"containerPort": 443, "name": "https"}]}
                ]
            }
        },
        lambda: with_changes(
            pod(),
            (
                "spec/containers/0/ports/1",
                {"containerPort": 443, "protocol": "TCP", "name": "https"},
            ),
        ),
    ),
    (
        "$patch: delete in a list removes the item with that key",
        pod,
        {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}},
        lambda: with_changes(pod(), ("spec/containers", pod()["spec"]["containers"][:1])),
    ),
    (
        "$patch: replace in a list makes the list the patch items",
        pod,
        {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}},
        lambda: with_changes(pod(), ("spec/containers", [{"name": "only", "image": "x"}])),
    ),
    (
        "$patch: replace on a map replaces it",
        pod,
        {"metadata": {"labels": {"$patch": "replace", "new": "1"}}},
        lambda: with_changes(pod(), ("metadata/labels", {"new": "1"})),
    ),
    (
        "$patch: delete on a map empties it",
        pod,
        {"spec": {"nodeSelector": {"$patch": "delete"}}},
        lambda: with_changes(pod(), ("spec/nodeSelector", {})),
    ),
    (
        "a directive map for an absent field adds nothing",
        node,
        {"spec": {"podCIDR": "10.1.0.0/24"}, "metadata": {"annotations": {"$patch": "delete"}}},
        lambda: with_changes(node(), ("spec/podCIDR", "10.1.0.0/24")),
    ),
    (
        "lists without a strategy are replaced (tolerations)",
        pod,
        {"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}},
        lambda: with_changes(pod(), ("spec/tolerations", [{"key": "other", "operator": "Exists"}])),
    ),
    (
        "primitive lists without a strategy are replaced (command)",
        pod,
        {"spec": {"containers": [{"name": "sidecar", "command": ["sh"]}]}},
        lambda: with_changes(pod(), ("spec/containers/1/command", ["sh"])),
    ),
    (
        "finalizers are a union, patch items first when new",
        pod,
        {"metadata": {"finalizers": ["example.com/c", "example.com/a"]}},
        lambda: with_changes(
            pod(), ("metadata/finalizers", ["example.com/c", "example.com/a", "example.com/b"])
        ),
    ),
    (
        "$deleteFromPrimitiveList removes finalizers",
        pod,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a", "nope"]}},
        lambda: with_changes(pod(), ("metadata/finalizers", ["example.com/b"])),
    ),
    (
        "$setElementOrder on finalizers",
        pod,
        {"metadata": {"$setElementOrder/finalizers": ["example.com/b", "example.com/a"]}},
        lambda: with_changes(pod(), ("metadata/finalizers", ["example.com/b", "example.com/a"])),
    ),
    (
        "null deletes a field; nulls inside a new value are dropped",
        pod,
        {"spec": {"restartPolicy": None, "affinity": {"nodeAffinity": None}}, "status": None},
        lambda: with_changes(
            pod(), ("spec/restartPolicy", DELETE), ("spec/affinity", {}), ("status", DELETE)
        ),
    ),
    (
        "maps merge: requests",
        pod,
        {
            "spec": {
                "containers": [
                    {"name": "nginx", "resources": {"requests": {"cpu": "1", "memory": None}}}
                ]
            }
        },
        lambda: with_changes(pod(), ("spec/containers/0/resources/requests", {"cpu": "1"})),
    ),
    (
        "pod conditions merged by type (a status patch as the kubelet sends it)",
        pod,
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "X"}],
                "phase": "Failed",
            }
        },
        lambda: with_changes(
            pod(),
            ("status/phase", "Failed"),
            ("status/conditions/1", {"type": "Ready", "status": "False", "reason": "X"}),
        ),
    ),
    (
        "node addresses merged by type, conditions by type",
        node,
        {
            "status": {
                "addresses": [{"type": "ExternalIP", "address": "1.2.3.4"}],
                "conditions": [{"type": "Ready", "status": "Unknown"}],
            }
        },
        lambda: with_changes(
            node(),
            (
                "status/addresses",
                [{"type": "ExternalIP", "address": "1.2.3.4"}] + node()["status"]["addresses"],
            ),
            ("status/conditions/0/status", "Unknown"),
        ),
    ),
    (
        "replicaset conditions merged by type",
        replicaset,
        {"status": {"conditions": [{"type": "ReplicaFailure", "$patch": "delete"}]}},
        lambda: with_changes(replicaset(), ("status/conditions", [])),
    ),
    (
        "ownerReferences merged by uid",
        lambda: with_changes(
            pod(), ("metadata/ownerReferences", [{"uid": "o1", "kind": "ReplicaSet", "name": "rs"}])
        ),
        {
            "metadata": {
                "ownerReferences": [{"uid": "o1", "controller": True}, {"uid": "o2", "name": "b"}]
            }
        },
        lambda: with_changes(
            pod(),
            (
                "metadata/ownerReferences",
                [
                    {"uid": "o1", "kind": "ReplicaSet", "name": "rs", "controller": True},
                    {"uid": "o2", "name": "b"},
                ],
            ),
        ),
    ),
    (
        "service selector merges (a map), service ports by port",
        service,
        {"spec": {"selector": {"tier": "front"}, "ports": [{"port": 443, "name": "tls"}]}},
        lambda: with_changes(
            service(),
            ("spec/selector", {"app": "web", "tier": "front"}),
            ("spec/ports/1/name", "tls"),
        ),
    ),
    (
        "$retainKeys drops the other keys of the map",
        pod,
        {"spec": {"$retainKeys": ["containers", "nodeName"], "nodeName": "n2"}},
        lambda: with_changes(
            pod(),
            ("spec", {"containers": pod()["spec"]["containers"], "nodeName": "n2"}),
        ),
    ),
    (
        # apimachinery writes deletions and appends into the live list, which the
        # $setElementOrder step then orders against: the injected container stays between
        "deleting one container and adding another keeps a server-only one in place",
        lambda: with_changes(
            pod(),
            ("spec/containers", [{"name": "a"}, {"name": "b"}, {"name": "injected"}]),
        ),
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
                "containers": [{"name": "c"}, {"name": "b", "$patch": "delete"}],
            }
        },
        lambda: with_changes(
            pod(), ("spec/containers", [{"name": "a"}, {"name": "injected"}, {"name": "c"}])
        ),
    ),
    (
        "a type change replaces the value",
        pod,
        {"spec": {"nodeSelector": "oops"}},
        lambda: with_changes(pod(), ("spec/nodeSelector", "oops")),
    ),
    ("null body is no change", pod, None, pod),
    (
        "$patch: delete at the top empties the object",
        pod,
        {"$patch": "delete"},
        lambda: {},
    ),
]


@pytest.mark.parametrize(
    ("factory", "body", "expected"),
    [case[1:] for case in SMP_CASES],
    ids=[case[0] for case in SMP_CASES],
)
def test_strategic_merge_patch(factory: Any, body: Any, expected: Any) -> None:
    descriptor = {node: NODE_D, service: SVC_D, replicaset: RS_D}.get(factory, POD_D)
    out = run(STRATEGIC_MERGE_PATCH, factory(), body, descriptor)
    assert json.dumps(out, sort_keys=True) == json.dumps(expected(), sort_keys=True)


# --- merge patch and JSON patch -----------------------------------------------------------------

MERGE_CASES: list[tuple[str, Any, Any]] = [
    (
        "lists are replaced whole",
        {"spec": {"containers": [{"name": "x", "image": "y"}]}},
        with_changes(pod(), ("spec/containers", [{"name": "x", "image": "y"}])),
    ),
    (
        "nulls inside new values and arrays are dropped",
        {
            "spec": {
                "affinity": {"nodeAffinity": None},
                "tolerations": [None, {"key": "a", "value": None}],
            }
        },
        with_changes(pod(), ("spec/affinity", {}), ("spec/tolerations", [{"key": "a"}])),
    ),
    ("null deletes", {"status": None}, with_changes(pod(), ("status", DELETE))),
    ("empty patch changes nothing", {}, pod()),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES]
)
def test_merge_patch(body: Any, expected: dict[str, Any]) -> None:
    assert run(MERGE_PATCH, pod(), body, POD_D) == expected


JSON_PATCH_CASES: list[tuple[str, Any, Any]] = [
    (
        "remove, move and copy",
        [
            {"op": "remove", "path": "/spec/tolerations"},
            {"op": "move", "from": "/metadata/labels/tier", "path": "/metadata/labels/layer"},
            {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/annotations/app"},
        ],
        with_changes(
            pod(),
            ("spec/tolerations", DELETE),
            ("metadata/labels", {"app": "web", "layer": "front"}),
            ("metadata/annotations/app", "web"),
        ),
    ),
    (
        "a passing test, then append to a list with -",
        [
            {"op": "test", "path": "/metadata/name", "value": "web"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
        ],
        with_changes(pod(), ("metadata/finalizers", ["example.com/a", "example.com/b", "c"])),
    ),
    ("null is an empty patch", None, pod()),
    ("no operations", [], pod()),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in JSON_PATCH_CASES], ids=[c[0] for c in JSON_PATCH_CASES]
)
def test_json_patch(body: Any, expected: dict[str, Any]) -> None:
    assert run(JSON_PATCH, pod(), body, POD_D) == expected


def test_content_type_parameters_are_ignored() -> None:
    out = run(MERGE_PATCH + "; charset=utf-8", pod(), {"spec": {"nodeName": "n1"}}, POD_D)
    assert out["spec"]["nodeName"] == "n1"
    assert {JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH} == PATCH_CONTENT_TYPES


# --- errors -------------------------------------------------------------------------------------

ERROR_CASES: list[tuple[str, str, Any, type[Exception], str]] = [
    # (name, content type, raw body or JSON value, error class, message or its start)
    ("not JSON (json patch)", JSON_PATCH, b"[{", BadRequestError, INVALID_JSON),
    ("not JSON (merge)", MERGE_PATCH, b"{'a': 1}", BadRequestError, INVALID_JSON),
    ("not JSON (strategic)", STRATEGIC_MERGE_PATCH, b"", BadRequestError, INVALID_JSON),
    ("NaN is not JSON", MERGE_PATCH, b'{"a": NaN}', BadRequestError, INVALID_JSON),
    (
        "json patch that is an object",
        JSON_PATCH,
        {"op": "add"},
        BadRequestError,
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
    ),
    (
        "json patch with a string operation",
        JSON_PATCH,
        ["add"],
        BadRequestError,
        "json: cannot unmarshal string into Go value of type jsonpatch.Operation",
    ),
    (
        "json patch test that fails",
        JSON_PATCH,
        [{"op": "test", "path": "/metadata/name", "value": "other"}],
        InvalidError,
        REJECTED,
    ),
    (
        "json patch replace of a missing path",
        JSON_PATCH,
        [{"op": "replace", "path": "/spec/nodeName", "value": "n1"}],
        InvalidError,
        REJECTED,
    ),
    (
        "json patch remove of a missing path",
        JSON_PATCH,
        [{"op": "remove", "path": "/metadata/labels/nope"}],
        InvalidError,
        REJECTED,
    ),
    (
        "json patch add under a missing parent",
        JSON_PATCH,
        [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {}}],
        InvalidError,
        REJECTED,
    ),
    ("json patch unknown op", JSON_PATCH, [{"op": "frob", "path": "/a"}], InvalidError, REJECTED),
    ("json patch without op", JSON_PATCH, [{"path": "/a"}], InvalidError, REJECTED),
    ("json patch null op", JSON_PATCH, [None], InvalidError, REJECTED),
    (
        "json patch over 10000 operations",
        JSON_PATCH,
        [{"op": "test", "path": "/kind", "value": "Pod"}] * 10_001,
        RequestEntityTooLargeError,
        "The allowed maximum operations in a JSON patch is 10000, got 10001",
    ),
    (
        "json patch replacing the whole document with a list",
        JSON_PATCH,
        [{"op": "replace", "path": "", "value": [1]}],
        InvalidError,
        'Pod is invalid: patch: Invalid value: "[1]"',
    ),
    ("merge patch null", MERGE_PATCH, None, BadRequestError, INVALID_MERGE_PATCH),
    ("merge patch scalar", MERGE_PATCH, 5, BadRequestError, INVALID_MERGE_PATCH),
    ("merge patch list", MERGE_PATCH, [1], InvalidError, "Pod is invalid: patch"),
    (
        "strategic patch that is a list",
        STRATEGIC_MERGE_PATCH,
        [],
        BadRequestError,
        "json: cannot unmarshal array into Go value of type map[string]interface {}",
    ),
    (
        "$patch: merge on a map",
        STRATEGIC_MERGE_PATCH,
        {"metadata": {"labels": {"$patch": "merge"}}},
        BadRequestError,
        "unknown patch type: merge in map: map[$patch:merge]",
    ),
    (
        "$patch: merge in a list",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"containers": [{"$patch": "merge"}]}},
        BadRequestError,
        "merging lists cannot yet be specified in the patch",
    ),
    (
        "unknown $patch in a list",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"containers": [{"name": "a", "$patch": "frob"}]}},
        BadRequestError,
        "unknown patch type: frob in map: map[$patch:frob name:a]",
    ),
    (
        "list item without its merge key",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"containers": [{"image": "x"}]}},
        BadRequestError,
        "map: map[image:x] does not contain declared merge key: name",
    ),
    (
        "$patch: delete without the merge key",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"containers": [{"$patch": "delete"}]}},
        BadRequestError,
        "map: map[$patch:delete] does not contain declared merge key: name",
    ),
    (
        "mixed element types",
        STRATEGIC_MERGE_PATCH,
        {"metadata": {"finalizers": [1]}},
        BadRequestError,
        "list element types are not identical: [[example.com/a example.com/b] [1]]",
    ),
    (
        "$deleteFromPrimitiveList without a field",
        STRATEGIC_MERGE_PATCH,
        {"metadata": {"$deleteFromPrimitiveList": ["a"]}},
        BadRequestError,
        "invalid patch format of primitive list",
    ),
    (
        "$setElementOrder without a field",
        STRATEGIC_MERGE_PATCH,
        {"metadata": {"$setElementOrder": ["a"]}},
        BadRequestError,
        "invalid patch format of setElementOrder list",
    ),
    (
        "$setElementOrder that is not a list",
        STRATEGIC_MERGE_PATCH,
        {"metadata": {"$setElementOrder/finalizers": "a"}},
        BadRequestError,
        "expected a []interface {}, but received a string",
    ),
    (
        "$setElementOrder missing a patch item",
        STRATEGIC_MERGE_PATCH,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "nginx"}],
                "containers": [{"name": "x"}],
            }
        },
        BadRequestError,
        "The order in patch list:\n[map[name:x]]\n doesn't match $setElementOrder list:\n"
        "[map[name:nginx]]\n",
    ),
    (
        "$setElementOrder for an unknown field",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"$setElementOrder/sidecars": [{"name": "a"}]}},
        BadRequestError,
        'unable to find api field in struct PodSpec for the json field "sidecars"',
    ),
    (
        "$retainKeys not a list",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"$retainKeys": "containers"}},
        BadRequestError,
        "invalid patch format of retainKeys",
    ),
    (
        "$retainKeys missing a patched key",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"$retainKeys": ["containers"], "nodeName": "n1"}},
        BadRequestError,
        "invalid patch format of retainKeys",
    ),
    (
        "unsupported media type",
        "application/apply-patch+yaml",
        {},
        BadRequestError,
        "the body of the request was in an unknown format",
    ),
]


@pytest.mark.parametrize(
    ("content_type", "body", "error", "message"),
    [c[1:] for c in ERROR_CASES],
    ids=[c[0] for c in ERROR_CASES],
)
def test_errors(content_type: str, body: Any, error: type[Exception], message: str) -> None:
    original = pod()
    with pytest.raises(error) as caught:
        run(content_type, original, body, POD_D)
    assert type(caught.value) is error
    assert str(caught.value).startswith(message)
    assert original == pod()


def test_json_patch_copy_limit() -> None:
    big = "x" * (1024 * 1024)
    doc = with_changes(pod(), ("metadata/annotations", {"big": big}))
    copies = [
        {"op": "copy", "from": "/metadata/annotations/big", "path": f"/metadata/labels/c{i}"}
        for i in range(3)
    ]
    assert len(run(JSON_PATCH, doc, copies[:2], POD_D)["metadata"]["labels"]) == 4
    with pytest.raises(InvalidError, match=REJECTED) as caught:
        run(JSON_PATCH, doc, copies, POD_D)
    assert "accumulated size" in str(caught.value.__cause__)


def test_json_patch_error_keeps_the_reason_as_cause() -> None:
    with pytest.raises(InvalidError) as caught:
        run(JSON_PATCH, pod(), [{"op": "test", "path": "/kind", "value": "Node"}], POD_D)
    assert caught.value.__cause__ is not None


# --- the merge-key table --------------------------------------------------------------------

# Repeated fields that Kubernetes' types leave without a patchStrategy (atomic lists).
ATOMIC_IN_KUBERNETES = {
    # PodDNSConfig: +listType=atomic.
    ("tinykube.v1.PodDNSConfig", "nameservers"),
    ("tinykube.v1.PodDNSConfig", "searches"),
    ("tinykube.v1.PodDNSConfig", "options"),
    # k8s.io/api/core/v1 security contexts: no patchStrategy (+listType=atomic).
    ("tinykube.v1.Capabilities", "add"),
    ("tinykube.v1.Capabilities", "drop"),
    ("tinykube.v1.PodSecurityContext", "supplementalGroups"),
    # k8s.io/apiextensions-apiserver v1: no patchStrategy tags anywhere.
    ("tinykube.v1.CustomResourceDefinitionNames", "shortNames"),
    ("tinykube.v1.CustomResourceDefinitionNames", "categories"),
    ("tinykube.v1.CustomResourceDefinitionSpec", "versions"),
    ("tinykube.v1.CustomResourceDefinitionVersion", "additionalPrinterColumns"),
    ("tinykube.v1.CustomResourceDefinitionVersion", "selectableFields"),
    ("tinykube.v1.WebhookConversion", "conversionReviewVersions"),
    ("tinykube.v1.CustomResourceDefinitionStatus", "conditions"),
    ("tinykube.v1.CustomResourceDefinitionStatus", "storedVersions"),
    # k8s.io/api/core/v1 volume sources: no patchStrategy (+listType=atomic).
    ("tinykube.v1.ConfigMapVolumeSource", "items"),
    ("tinykube.v1.SecretVolumeSource", "items"),
    ("tinykube.v1.ConfigMapProjection", "items"),
    ("tinykube.v1.SecretProjection", "items"),
    ("tinykube.v1.DownwardAPIVolumeSource", "items"),
    ("tinykube.v1.DownwardAPIProjection", "items"),
    ("tinykube.v1.ProjectedVolumeSource", "sources"),
    # k8s.io/api/core/v1 probes: +listType=atomic.
    ("tinykube.v1.ExecAction", "command"),
    ("tinykube.v1.HTTPGetAction", "httpHeaders"),
    # k8s.io/api/rbac/v1: no list there has a patchStrategy.
    ("tinykube.v1.Role", "rules"),
    ("tinykube.v1.ClusterRole", "rules"),
    ("tinykube.v1.RoleBinding", "subjects"),
    ("tinykube.v1.ClusterRoleBinding", "subjects"),
    ("tinykube.v1.AggregationRule", "clusterRoleSelectors"),
    ("tinykube.v1.PolicyRule", "verbs"),
    ("tinykube.v1.PolicyRule", "apiGroups"),
    ("tinykube.v1.PolicyRule", "resources"),
    ("tinykube.v1.PolicyRule", "resourceNames"),
    ("tinykube.v1.PolicyRule", "nonResourceURLs"),
    ("tinykube.v1.ObjectMeta", "managedFields"),
    ("tinykube.v1.NamespaceSpec", "finalizers"),
    ("tinykube.v1.Container", "command"),
    ("tinykube.v1.EphemeralContainer", "command"),
    ("tinykube.v1.EphemeralContainer", "args"),
    ("tinykube.v1.EphemeralContainer", "envFrom"),
    ("tinykube.v1.PodStatus", "ephemeralContainerStatuses"),
    ("tinykube.v1.Container", "args"),
    # k8s.io/api/core/v1 Container.envFrom: +listType=atomic, no patchStrategy.
    ("tinykube.v1.Container", "envFrom"),
    ("tinykube.v1.PodSpec", "tolerations"),
    ("tinykube.v1.PodStatus", "initContainerStatuses"),
    ("tinykube.v1.PodStatus", "containerStatuses"),
    ("tinykube.v1.NodeSelector", "nodeSelectorTerms"),
    ("tinykube.v1.NodeSelectorTerm", "matchExpressions"),
    ("tinykube.v1.NodeSelectorTerm", "matchFields"),
    ("tinykube.v1.NodeSelectorRequirement", "values"),
    ("tinykube.v1.NodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("tinykube.v1.PodAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("tinykube.v1.PodAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("tinykube.v1.PodAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("tinykube.v1.PodAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("tinykube.v1.PodAffinityTerm", "namespaces"),
    ("tinykube.v1.PodAffinityTerm", "matchLabelKeys"),
    ("tinykube.v1.PodAffinityTerm", "mismatchLabelKeys"),
    ("tinykube.v1.TopologySpreadConstraint", "matchLabelKeys"),
    ("tinykube.v1.NodeSpec", "taints"),
    ("tinykube.v1.NodeStatus", "images"),
    ("tinykube.v1.ContainerImage", "names"),
    ("tinykube.v1.LabelSelector", "matchExpressions"),
    ("tinykube.v1.LabelSelectorRequirement", "values"),
    ("tinykube.v1.ServiceEndpoints", "subsets"),
    ("tinykube.v1.EndpointSubset", "addresses"),
    ("tinykube.v1.EndpointSubset", "notReadyAddresses"),
    ("tinykube.v1.EndpointSubset", "ports"),
    ("tinykube.v1.LoadBalancerStatus", "ingress"),
    ("tinykube.v1.LoadBalancerIngress", "ports"),
    ("tinykube.v1.ServiceSpec", "clusterIPs"),
    ("tinykube.v1.ServiceSpec", "ipFamilies"),
    # batch/v1 Job: listType=atomic or listType=set, no patch strategy
    ("tinykube.v1.PodFailurePolicy", "rules"),
    ("tinykube.v1.PodFailurePolicyRule", "onPodConditions"),
    ("tinykube.v1.PodFailurePolicyOnExitCodesRequirement", "values"),
    ("tinykube.v1.UncountedTerminatedPods", "succeeded"),
    ("tinykube.v1.UncountedTerminatedPods", "failed"),
    # core/v1 ServiceAccount: listType=atomic
    ("tinykube.v1.ServiceAccount", "imagePullSecrets"),
    # discovery/v1 EndpointSlice: endpoints and ports listType=atomic, addresses listType=set,
    # hints' lists atomic
    ("tinykube.v1.EndpointSlice", "ports"),
    ("tinykube.v1.EndpointSlice", "endpoints"),
    ("tinykube.v1.Endpoint", "addresses"),
    ("tinykube.v1.EndpointHints", "forNodes"),
    ("tinykube.v1.EndpointHints", "forZones"),
    # admissionregistration/v1: rules, their lists and admissionReviewVersions listType=atomic
    ("tinykube.v1.MutatingWebhook", "rules"),
    ("tinykube.v1.ValidatingWebhook", "rules"),
    ("tinykube.v1.MutatingWebhook", "admissionReviewVersions"),
    ("tinykube.v1.ValidatingWebhook", "admissionReviewVersions"),
    ("tinykube.v1.RuleWithOperations", "operations"),
    ("tinykube.v1.RuleWithOperations", "apiGroups"),
    ("tinykube.v1.RuleWithOperations", "apiVersions"),
    ("tinykube.v1.RuleWithOperations", "resources"),
    # ValidatingAdmissionPolicy and its binding: listType=atomic (validationActions is a
    # listType=set of strings)
    ("tinykube.v1.ValidatingAdmissionPolicySpec", "validations"),
    ("tinykube.v1.ValidatingAdmissionPolicySpec", "auditAnnotations"),
    ("tinykube.v1.ValidatingAdmissionPolicySpec", "variables"),
    ("tinykube.v1.MatchResources", "resourceRules"),
    ("tinykube.v1.MatchResources", "excludeResourceRules"),
    ("tinykube.v1.NamedRuleWithOperations", "resourceNames"),
    ("tinykube.v1.NamedRuleWithOperations", "operations"),
    ("tinykube.v1.NamedRuleWithOperations", "apiGroups"),
    ("tinykube.v1.NamedRuleWithOperations", "apiVersions"),
    ("tinykube.v1.NamedRuleWithOperations", "resources"),
    ("tinykube.v1.TypeChecking", "expressionWarnings"),
    ("tinykube.v1.ValidatingAdmissionPolicyBindingSpec", "validationActions"),
}


def _repeated_fields() -> set[tuple[str, str]]:
    seen: set[str] = set()
    found: set[tuple[str, str]] = set()

    def walk(message: Any) -> None:
        if message.full_name in seen or not message.full_name.startswith("tinykube."):
            return
        seen.add(message.full_name)
        for field in message.fields:
            is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
            if field.is_repeated and not is_map:
                found.add((message.full_name, field.json_name))
            if field.message_type is not None and not is_map:
                walk(field.message_type)

    for info in ALL_KINDS:
        walk(info.message.DESCRIPTOR)
    return found


def test_every_repeated_field_is_classified() -> None:
    """A new repeated field must be looked up in k8s.io/api and added to one of the two."""
    assert _repeated_fields() == set(PATCH_META) | ATOMIC_IN_KUBERNETES
    assert not set(PATCH_META) & ATOMIC_IN_KUBERNETES


@pytest.mark.parametrize(
    ("message", "field", "expected"),
    [
        ("tinykube.v1.PodSpec", "containers", ("merge", "name")),
        ("tinykube.v1.PodSpec", "initContainers", ("merge", "name")),
        ("tinykube.v1.PodSpec", "topologySpreadConstraints", ("merge", "topologyKey")),
        ("tinykube.v1.PodSpec", "schedulingGates", ("merge", "name")),
        ("tinykube.v1.Container", "ports", ("merge", "containerPort")),
        ("tinykube.v1.Container", "env", ("merge", "name")),
        ("tinykube.v1.PodStatus", "conditions", ("merge", "type")),
        ("tinykube.v1.NodeStatus", "conditions", ("merge", "type")),
        ("tinykube.v1.NodeStatus", "addresses", ("merge", "type")),
        ("tinykube.v1.ReplicaSetStatus", "conditions", ("merge", "type")),
        ("tinykube.v1.ObjectMeta", "ownerReferences", ("merge", "uid")),
        ("tinykube.v1.ObjectMeta", "finalizers", ("merge", "")),
        ("tinykube.v1.ServiceSpec", "ports", ("merge", "port")),
        ("tinykube.v1.NodeSpec", "taints", None),
        ("tinykube.v1.PodSpec", "tolerations", None),
        ("tinykube.v1.PodSpec", "nodeSelector", None),
    ],
)
def test_patch_meta(message: str, field: str, expected: tuple[str, str] | None) -> None:
    assert patch_meta(message, field) == expected


# --- Go's stable sort -----------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 2, 5, 19, 20, 21, 40, 41, 97, 250])
def test_go_stable_sort_is_a_stable_sort_for_a_proper_order(size: int) -> None:
    rng = random.Random(size)
    items = [(rng.randrange(10), i) for i in range(size)]
    got = list(items)
    _go_stable_sort(got, lambda a, b: bool(a[0] < b[0]))
    assert got == sorted(items, key=lambda x: x[0])


def _order_less(order: list[str]) -> Any:
    def less(x: str, y: str) -> bool:
        if x in order and y in order:
            return order.index(x) < order.index(y)
        return True  # apimachinery's comparator: an item not in the order list is "less"

    return less


@pytest.mark.parametrize(
    ("items", "order", "expected"),
    [
        (["a", "x", "b", "y"], ["b", "a"], ["y", "b", "x", "a"]),
        (
            # 57 items: insertion-sorted blocks of 20, then SymMerge
            [f"k{(i * 7) % 13}" for i in range(57)],
            ["k3", "k1", "k4", "k9", "k0", "k12"],
            [
                "k2",
                "k8",
                "k7",
                "k6",
                "k5",
                "k11",
                "k10",
                "k3",
                "k2",
                "k8",
                "k1",
                "k1",
                "k4",
                "k6",
                "k5",
                "k11",
                "k10",
                "k3",
                "k2",
                "k8",
                "k1",
                "k7",
                "k6",
                "k5",
                "k11",
                "k4",
                "k4",
                "k9",
                "k0",
                "k0",
                "k12",
                "k12",
                "k10",
                "k2",
                "k8",
                "k7",
                "k6",
                "k5",
                "k11",
                "k10",
                "k3",
                "k3",
                "k2",
                "k8",
                "k1",
                "k1",
                "k4",
                "k9",
                "k9",
                "k9",
                "k7",
                "k0",
                "k0",
                "k0",
                "k12",
                "k12",
                "k7",
            ],
        ),
    ],
)
def test_go_stable_sort_with_apimachinery_comparator(
    items: list[str], order: list[str], expected: list[str]
) -> None:
    """Go's sort.SliceStable gives these orders (run with Go 1.19) for a comparator that is
    not a strict order; only the same algorithm reproduces them."""
    got = list(items)
    _go_stable_sort(got, _order_less(order))
    assert got == expected


def test_lists_of_lists_are_unprocessable() -> None:
    doc = with_changes(pod(), ("metadata/finalizers", []))
    with pytest.raises(InvalidError, match=REJECTED) as caught:
        run(STRATEGIC_MERGE_PATCH, doc, {"metadata": {"finalizers": [["a"]]}}, POD_D)
    assert type(caught.value) is InvalidError
    assert str(caught.value.__cause__) == "lists of lists are not supported"


def test_errors_name_kubernetes_type_for_renamed_messages() -> None:
    """Errors name Kubernetes' Go type (tinykube.fieldfacts.KUBE_TYPE_NAMES), not tinykube's
    message: events.k8s.io/v1's Event, core's Endpoints."""
    renamed = (
        (eventsv1_pb2.EventsV1Event.DESCRIPTOR, "Event"),
        (endpoints_pb2.ServiceEndpoints.DESCRIPTOR, "Endpoints"),
    )
    for descriptor, kube in renamed:
        with pytest.raises(InvalidError) as err:
            apply_patch(MERGE_PATCH, {}, b"[1]", descriptor)
        assert str(err.value).startswith(f"{kube} is invalid: patch"), str(err.value)
