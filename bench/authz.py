"""Per-request cost of authorization: deriving attributes and asking the Node,RBAC chain.

No processes: the chain of a real apiserver (apiserver.auth) over the bootstrap policy plus
`--bindings` RoleBindings in as many namespaces (the per-subject index must make their number
irrelevant) and `--pods` pods spread over `--nodes` nodes (the Node authorizer's lookups). Each
case is timed with timeit (best of `--repeat` rounds of `--number` calls) and reported in
microseconds per call, as JSON on stdout:

- kubelet pod status update (gRPC Pods/UpdateStatus of a pod on its node: Node authorizer),
- kubelet get of its own pod (the pod-to-node lookup) and its Lease renewal,
- scheduler bind (gRPC Pods/Bind: Node has no opinion, RBAC's memoized answer allows),
- an edit user's create in its namespace, and a denied list (RBAC's memo, both ways),
- the derivation of attributes from a gRPC request and from a REST path.

    python -m bench.authz [--number 20000] [--repeat 5] [--bindings 1000] [--pods 10000]
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable

from apiserver.auth import bootstrap
from apiserver.auth.authorizer import Attributes, Chain, Identity
from apiserver.auth.node import NodeAuthorizer, StaticPods
from apiserver.auth.rbac import RbacAuthorizer
from apiserver.grpcattributes import grpc_attributes
from apiserver.rest.attributes import rest_attributes
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, RBAC_GROUP, ROLE_BINDING
from tinykube.v1 import meta_pb2, pod_pb2, rbac_pb2

AUTHENTICATED = "system:authenticated"


def build(bindings: int, pods: int, nodes: int) -> Chain:
    rbac = RbacAuthorizer()
    for role in bootstrap.cluster_roles():
        rbac.apply(CLUSTER_ROLE.kind, None, role)
    for crb in bootstrap.cluster_role_bindings():
        rbac.apply(CLUSTER_ROLE_BINDING.kind, None, crb)
    for i in range(bindings):
        rb = rbac_pb2.RoleBinding(
            metadata=meta_pb2.ObjectMeta(name="edit", namespace=f"ns-{i}"),
            roleRef=rbac_pb2.RoleRef(apiGroup=RBAC_GROUP, kind="ClusterRole", name="edit"),
            subjects=[rbac_pb2.Subject(kind="User", apiGroup=RBAC_GROUP, name=f"user-{i}")],
        )
        rbac.apply(ROLE_BINDING.kind, None, rb)
    placement = {("default", f"pod-{i}"): f"node-{i % nodes}" for i in range(pods)}
    return Chain([NodeAuthorizer(StaticPods(placement)), rbac])


def per_call_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--number", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--bindings", type=int, default=1000)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--nodes", type=int, default=1000)
    a = p.parse_args()
    chain = build(a.bindings, a.pods, a.nodes)
    node = Identity("system:node:node-1", ("system:nodes", AUTHENTICATED))
    scheduler = Identity("system:kube-scheduler", (AUTHENTICATED,))
    editor = Identity("user-7", (AUTHENTICATED,))
    status = Attributes("update", "pods", subresource="status", namespace="default", name="pod-1")
    own_pod = Attributes("get", "pods", namespace="default", name="pod-1001")
    lease = Attributes(
        "update", "leases", "coordination.k8s.io", namespace="kube-node-lease", name="node-1"
    )
    bind = Attributes("create", "pods", subresource="binding", namespace="default", name="pod-5")
    create = Attributes("create", "pods", namespace="ns-7")
    denied = Attributes("list", "pods", namespace="ns-8")
    for identity, attrs, allowed in (
        (node, status, True),
        (node, own_pod, True),
        (node, lease, True),
        (scheduler, bind, True),
        (editor, create, True),
        (editor, denied, False),
    ):
        assert chain.authorize(identity, attrs).allowed is allowed, (identity, attrs)
    bind_request = pod_pb2.BindRequest(
        binding=pod_pb2.Binding(metadata=meta_pb2.ObjectMeta(name="pod-5", namespace="default"))
    )
    status_request = pod_pb2.UpdatePodRequest(
        pod=pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name="pod-1", namespace="default"))
    )
    cases: dict[str, Callable[[], object]] = {
        "node: pod status update": lambda: chain.authorize(node, status),
        "node: get own pod": lambda: chain.authorize(node, own_pod),
        "node: lease renewal": lambda: chain.authorize(node, lease),
        "rbac: scheduler bind": lambda: chain.authorize(scheduler, bind),
        "rbac: edit user create": lambda: chain.authorize(editor, create),
        "rbac: denied list": lambda: chain.authorize(editor, denied),
        "grpc attributes: Bind": lambda: grpc_attributes("/tinykube.v1.Pods/Bind", bind_request),
        "grpc attributes: UpdateStatus": lambda: grpc_attributes(
            "/tinykube.v1.Pods/UpdateStatus", status_request
        ),
        "grpc attributes + authorize: Bind": lambda: chain.authorize(
            scheduler, grpc_attributes("/tinykube.v1.Pods/Bind", bind_request)[0]
        ),
        "rest attributes: pod status": lambda: rest_attributes(
            "PUT", "/api/v1/namespaces/default/pods/pod-1/status", {}
        ),
    }
    results = {name: round(per_call_us(fn, a.number, a.repeat), 3) for name, fn in cases.items()}
    print(
        json.dumps(
            {
                "unit": "microseconds per call",
                "bindings": a.bindings,
                "pods": a.pods,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
