"""RBAC rule matching, one row per behaviour of kube's rbac/v1 evaluation helpers."""

from __future__ import annotations

import pytest

from apiserver.auth.authorizer import Attributes, non_resource
from apiserver.auth.rbac import Rule, rule_allows

PODS = Rule(("get",), ("",), ("pods",))

RESOURCE_ROWS = [
    # (behaviour, rule, attributes, allowed)
    ("exact verb, group and resource", PODS, Attributes("get", "pods"), True),
    ("another verb", PODS, Attributes("list", "pods"), False),
    ("verb * matches any verb", Rule(("*",), ("",), ("pods",)), Attributes("delete", "pods"), True),
    ("another group", PODS, Attributes("get", "pods", api_group="apps"), False),
    (
        "group * matches any group",
        Rule(("get",), ("*",), ("pods",)),
        Attributes("get", "pods", api_group="apps"),
        True,
    ),
    (
        "core group is the empty string",
        Rule(("get",), ("",), ("leases",)),
        Attributes("get", "leases", api_group="coordination.k8s.io"),
        False,
    ),
    ("another resource", PODS, Attributes("get", "nodes"), False),
    ("resource * matches any", Rule(("get",), ("",), ("*",)), Attributes("get", "nodes"), True),
    (
        "resource * matches subresources too",
        Rule(("get",), ("",), ("*",)),
        Attributes("get", "pods", subresource="log"),
        True,
    ),
    (
        "a resource does not grant its subresources",
        PODS,
        Attributes("get", "pods", subresource="log"),
        False,
    ),
    (
        "resource/subresource matches that subresource",
        Rule(("get",), ("",), ("pods/log",)),
        Attributes("get", "pods", subresource="log"),
        True,
    ),
    (
        "resource/subresource does not grant the resource",
        Rule(("get",), ("",), ("pods/log",)),
        Attributes("get", "pods"),
        False,
    ),
    (
        "resource/subresource does not grant another subresource",
        Rule(("update",), ("",), ("pods/status",)),
        Attributes("update", "pods", subresource="binding"),
        False,
    ),
    (
        "*/subresource matches it on any resource",
        Rule(("update",), ("",), ("*/status",)),
        Attributes("update", "nodes", subresource="status"),
        True,
    ),
    (
        "*/subresource does not grant the resource",
        Rule(("update",), ("",), ("*/status",)),
        Attributes("update", "nodes"),
        False,
    ),
    (
        "*/subresource does not match a longer subresource name",
        Rule(("get",), ("",), ("*/log",)),
        Attributes("get", "pods", subresource="logs"),
        False,
    ),
    (
        "resourceNames limits to the named object",
        Rule(("get",), ("",), ("pods",), ("web",)),
        Attributes("get", "pods", name="web"),
        True,
    ),
    (
        "resourceNames refuses other objects",
        Rule(("get",), ("",), ("pods",), ("web",)),
        Attributes("get", "pods", name="db"),
        False,
    ),
    (
        "resourceNames refuses requests without a name (list, create)",
        Rule(("list",), ("",), ("pods",), ("web",)),
        Attributes("list", "pods"),
        False,
    ),
    (
        "a resource rule never matches a non-resource request",
        Rule(("get",), ("*",), ("*",)),
        non_resource("get", "/healthz"),
        False,
    ),
]

URL_ROWS = [
    ("exact path", ("/healthz",), "/healthz", True),
    ("another path", ("/healthz",), "/livez", False),
    ("* matches any path", ("*",), "/anything/at/all", True),
    ("trailing * matches what it prefixes", ("/apis/*",), "/apis/apps/v1", True),
    ("trailing * matches the bare prefix", ("/apis/*",), "/apis/", True),
    ("trailing * needs its prefix", ("/apis/*",), "/apis", False),
    ("a path is not a prefix without *", ("/api",), "/api/v1", False),
]


@pytest.mark.parametrize(
    ("behaviour", "rule", "attrs", "allowed"), RESOURCE_ROWS, ids=[r[0] for r in RESOURCE_ROWS]
)
def test_resource_rules(behaviour: str, rule: Rule, attrs: Attributes, allowed: bool) -> None:
    assert rule_allows(rule, attrs) is allowed


@pytest.mark.parametrize(
    ("behaviour", "urls", "path", "allowed"), URL_ROWS, ids=[r[0] for r in URL_ROWS]
)
def test_non_resource_rules(
    behaviour: str, urls: tuple[str, ...], path: str, allowed: bool
) -> None:
    rule = Rule(("get",), non_resource_urls=urls)
    assert rule_allows(rule, non_resource("get", path)) is allowed
    assert not rule_allows(rule, non_resource("post", path))


def test_a_url_rule_never_matches_a_resource_request() -> None:
    assert not rule_allows(Rule(("*",), non_resource_urls=("*",)), Attributes("get", "pods"))
