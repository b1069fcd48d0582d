"""REST requests' authorization attributes, as kube's RequestInfoFactory derives them: a row
for every route the REST API serves (a resource or subresource without one fails)."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth.authorizer import Attributes, non_resource
from apiserver.rest.attributes import rest_attributes
from apiserver.rest.discovery import RESOURCES


def a(verb: str, resource: str, group: str = "", **kw: Any) -> Attributes:
    return Attributes(verb, resource, group, **kw)


NS = "/api/v1/namespaces/default"

# Every (group, resource, subresource) REST serves, with one request for each of its verbs.
ROUTES: dict[tuple[str, str, str], list[tuple[str, str, dict[str, str], Attributes]]] = {}


def route(group: str, plural: str, sub: str, namespaced: bool) -> None:
    prefix = f"/apis/{group}/v1" if group else "/api/v1"
    ns = "/namespaces/team" if namespaced else ""
    namespace = "team" if namespaced else ""
    # A namespace's own requests carry its name as their namespace (kube's RequestInfo).
    own = "x" if (group, plural) == ("", "namespaces") else namespace
    base = f"{prefix}{ns}/{plural}"
    rows: list[tuple[str, str, dict[str, str], Attributes]]
    if sub:
        one = f"{base}/x/{sub}"
        # A GET of a pod's stream (a WebSocket upgrade) is authorized as create, as kube's.
        streaming = plural == "pods" and sub in ("exec", "attach", "portforward")
        rows = [
            (
                "GET",
                one,
                {},
                a(
                    "create" if streaming else "get",
                    plural,
                    group,
                    subresource=sub,
                    namespace=own,
                    name="x",
                ),
            ),
            (
                "PUT",
                one,
                {},
                a("update", plural, group, subresource=sub, namespace=own, name="x"),
            ),
            (
                "PATCH",
                one,
                {},
                a("patch", plural, group, subresource=sub, namespace=own, name="x"),
            ),
            (
                "POST",
                one,
                {},
                a("create", plural, group, subresource=sub, namespace=own, name="x"),
            ),
        ]
    else:
        rows = [
            ("GET", base, {}, a("list", plural, group, namespace=namespace)),
            ("GET", base, {"watch": "true"}, a("watch", plural, group, namespace=namespace)),
            ("GET", base, {"watch": "0"}, a("list", plural, group, namespace=namespace)),
            ("POST", base, {}, a("create", plural, group, namespace=namespace)),
            ("DELETE", base, {}, a("deletecollection", plural, group, namespace=namespace)),
            ("GET", f"{base}/x", {}, a("get", plural, group, namespace=own, name="x")),
            ("HEAD", f"{base}/x", {}, a("get", plural, group, namespace=own, name="x")),
            ("PUT", f"{base}/x", {}, a("update", plural, group, namespace=own, name="x")),
            ("PATCH", f"{base}/x", {}, a("patch", plural, group, namespace=own, name="x")),
            ("DELETE", f"{base}/x", {}, a("delete", plural, group, namespace=own, name="x")),
        ]
    ROUTES[(group, plural, sub)] = rows


for _r in RESOURCES:
    route(_r.group, _r.plural, "", _r.namespaced)
    for _s in _r.subresources:
        route(_r.group, _r.plural, _s.name, _r.namespaced)


def test_every_served_route_has_rows() -> None:
    served = {(r.group, r.plural, "") for r in RESOURCES}
    served |= {(r.group, r.plural, s.name) for r in RESOURCES for s in r.subresources}
    assert served == set(ROUTES)
    # The ones the authorizers care about most are among them.
    assert {("", "pods", "binding"), ("", "pods", "eviction"), ("", "pods", "log")} <= served
    assert {
        ("", "pods", "status"),
        ("", "nodes", "status"),
        ("apps", "replicasets", "scale"),
    } <= served


ALL_ROWS = [row for rows in ROUTES.values() for row in rows]


@pytest.mark.parametrize(("method", "path", "query", "expected"), ALL_ROWS)
def test_route_attributes(
    method: str, path: str, query: dict[str, str], expected: Attributes
) -> None:
    assert rest_attributes(method, path, query) == expected


SPECIAL = [
    # (behaviour, method, path, query, attributes)
    (
        "legacy watch path",
        "GET",
        "/api/v1/watch/namespaces/default/pods",
        {},
        a("watch", "pods", namespace="default"),
    ),
    ("legacy watch of a cluster resource", "GET", "/api/v1/watch/nodes", {}, a("watch", "nodes")),
    (
        "list pinned to a name by metadata.name",
        "GET",
        "/api/v1/nodes",
        {"fieldSelector": "metadata.name=node-1"},
        a("list", "nodes", name="node-1", field_selector="metadata.name=node-1"),
    ),
    (
        "watch keeps the field selector (the Node authorizer reads spec.nodeName)",
        "GET",
        "/api/v1/pods",
        {"watch": "1", "fieldSelector": "spec.nodeName=node-1"},
        a("watch", "pods", field_selector="spec.nodeName=node-1"),
    ),
    (
        "an invalid name in the selector names nothing",
        "GET",
        "/api/v1/nodes",
        {"fieldSelector": "metadata.name=a/b"},
        a("list", "nodes", field_selector="metadata.name=a/b"),
    ),
    (
        "the namespace itself",
        "GET",
        "/api/v1/namespaces/team",
        {},
        a("get", "namespaces", namespace="team", name="team"),
    ),
    ("list namespaces", "GET", "/api/v1/namespaces", {}, a("list", "namespaces")),
    (
        "a namespace's status",
        "PUT",
        "/api/v1/namespaces/team/status",
        {},
        a("update", "namespaces", subresource="status", namespace="team", name="team"),
    ),
    (
        "a namespace's finalize",
        "PUT",
        "/api/v1/namespaces/team/finalize",
        {},
        a("update", "namespaces", subresource="finalize", namespace="team", name="team"),
    ),
    (
        "selfsubjectaccessreviews",
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {},
        a("create", "selfsubjectaccessreviews", "authorization.k8s.io"),
    ),
    ("trailing slash", "GET", f"{NS}/pods/", {}, a("list", "pods", namespace="default")),
    ("discovery root", "GET", "/api", {}, non_resource("get", "/api")),
    ("core group version", "GET", "/api/v1", {}, non_resource("get", "/api/v1")),
    ("named group", "GET", "/apis/apps", {}, non_resource("get", "/apis/apps")),
    ("named group version", "GET", "/apis/apps/v1", {}, non_resource("get", "/apis/apps/v1")),
    ("health", "GET", "/healthz", {}, non_resource("get", "/healthz")),
    ("a health check", "GET", "/readyz/etcd", {}, non_resource("get", "/readyz/etcd")),
    ("version", "GET", "/version", {}, non_resource("get", "/version")),
    ("openapi", "GET", "/openapi/v3/api/v1", {}, non_resource("get", "/openapi/v3/api/v1")),
    ("metrics", "GET", "/metrics", {}, non_resource("get", "/metrics")),
    ("a post to a path", "POST", "/foo", {}, non_resource("post", "/foo")),
    ("root", "GET", "/", {}, non_resource("get", "/")),
]


@pytest.mark.parametrize(
    ("behaviour", "method", "path", "query", "expected"), SPECIAL, ids=[s[0] for s in SPECIAL]
)
def test_special_paths(
    behaviour: str, method: str, path: str, query: dict[str, str], expected: Attributes
) -> None:
    assert rest_attributes(method, path, query) == expected
