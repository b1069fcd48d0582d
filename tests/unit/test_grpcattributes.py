"""gRPC requests' authorization attributes: a row for every method of every kind's service (a new
method without one fails)."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth.authorizer import Attributes
from apiserver.grpcattributes import METHOD_VERBS, grpc_attributes
from tinykube import kinds
from tinykube.kinds import KindInfo
from tinykube.v1 import meta_pb2, namespace_pb2, pod_pb2


def services() -> list[tuple[KindInfo, str]]:
    out: list[tuple[KindInfo, str]] = []
    for info in kinds.ALL_KINDS:
        module = info.message.DESCRIPTOR.file
        service = module.services_by_name[info.service.rsplit(".", 1)[1]]
        out.extend((info, m.name) for m in service.methods)
    return out


def test_every_method_has_a_verb() -> None:
    assert {m for _, m in services()} == set(METHOD_VERBS)


def request_for(info: KindInfo, method: str) -> Any:
    """A request naming namespace "team" (where the kind has one) and object "x" (a write
    stream's: one of its messages, its unary method's request)."""
    ns = "team" if info.namespaced else ""
    method = method.removesuffix("Stream")
    if method in ("Get", "Delete"):
        return (
            meta_pb2.GetRequest(namespace=ns, name="x")
            if method == "Get"
            else meta_pb2.DeleteRequest(namespace=ns, name="x")
        )
    if method == "List":
        return meta_pb2.ListRequest(namespace=ns, fieldSelector="status.phase=Running")
    if method in ("Watch", "WatchBatch"):
        return meta_pb2.WatchRequest(namespace=ns, fieldSelector="metadata.name=x")
    if method in ("Create", "Update", "UpdateStatus", "Finalize"):
        request = (info.create_request if method == "Create" else info.update_request)()
        meta = getattr(request, info.request_field).metadata
        meta.name, meta.namespace = "x", ns
        return request
    if method == "Bind":
        return pod_pb2.BindRequest(
            binding=pod_pb2.Binding(metadata=meta_pb2.ObjectMeta(name="x", namespace=ns))
        )
    if method == "BindBatch":
        b = [
            pod_pb2.Binding(metadata=meta_pb2.ObjectMeta(name=n, namespace=ns))
            for n in ("x", "y", "x")
        ]
        return pod_pb2.BindBatchRequest(bindings=b)
    if method == "UpdateStatusBatch":
        pods = [pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name=n, namespace=ns)) for n in "xyx"]
        return pod_pb2.UpdateStatusBatchRequest(pods=pods)
    assert method == "Evict"
    return pod_pb2.EvictRequest(
        eviction=pod_pb2.Eviction(metadata=meta_pb2.ObjectMeta(name="x", namespace=ns))
    )


def expected_for(info: KindInfo, method: str) -> tuple[Attributes, ...]:
    verb, sub = METHOD_VERBS[method]
    ns = "team" if info.namespaced else ""
    method = method.removesuffix("Stream")

    def one(name: str = "x", **kw: Any) -> Attributes:
        # A namespace's own requests carry its name as their namespace (kube's RequestInfo).
        namespace = name if info.kind == kinds.NAMESPACE.kind and "field_selector" not in kw else ns
        return Attributes(
            verb, info.plural, info.group, subresource=sub, namespace=namespace, name=name, **kw
        )

    if method == "Create":
        return (one(name=""),)  # as a POST: the name is in the body
    if method == "List":
        return (one(name="", field_selector="status.phase=Running"),)
    if method in ("Watch", "WatchBatch"):
        return (one(field_selector="metadata.name=x"),)
    if method in ("BindBatch", "UpdateStatusBatch"):
        return (one("x"), one("y"))
    return (one(),)


ROWS = services()


@pytest.mark.parametrize(("info", "method"), ROWS, ids=[f"{i.kind}.{m}" for i, m in ROWS])
def test_method_attributes(info: KindInfo, method: str) -> None:
    got = grpc_attributes(f"/{info.service}/{method}", request_for(info, method))
    assert got == expected_for(info, method)


@pytest.mark.parametrize(
    ("method", "request_", "expected"),
    [
        (
            "/tinykube.v1.Pods/Get",
            meta_pb2.GetRequest(name="web"),
            (Attributes("get", "pods", namespace="default", name="web"),),
        ),
        (
            "/tinykube.v1.Pods/List",
            meta_pb2.ListRequest(fieldSelector="spec.nodeName=n1"),
            (Attributes("list", "pods", field_selector="spec.nodeName=n1"),),
        ),
        (
            "/tinykube.v1.Nodes/Get",
            meta_pb2.GetRequest(namespace="ignored", name="n1"),
            (Attributes("get", "nodes", name="n1"),),
        ),
        (
            "/tinykube.v1.Namespaces/Finalize",
            namespace_pb2.UpdateNamespaceRequest(
                namespace=namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name="team"))
            ),
            (
                Attributes(
                    "update", "namespaces", subresource="finalize", namespace="team", name="team"
                ),
            ),
        ),
        ("/grpc.health.v1.Health/Check", None, ()),
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", None, ()),
        ("/tinykube.v1.Pods/NoSuchMethod", None, ()),
    ],
)
def test_defaults_and_other_services(
    method: str, request_: Any, expected: tuple[Attributes, ...]
) -> None:
    assert grpc_attributes(method, request_) == expected
