"""Kubernetes' forbidden messages, and the chain's order and reasons."""

from __future__ import annotations

import grpc
import pytest

from apiserver.auth.authorizer import (
    ALLOWED,
    NO_OPINION,
    Attributes,
    Chain,
    Decision,
    Identity,
    Outcome,
    forbidden_message,
    node_name_of,
    non_resource,
)
from tinykube.errors import ForbiddenError

ALICE = Identity("alice", ("system:authenticated",))

MESSAGES = [
    (
        "namespaced collection",
        Attributes("list", "pods", namespace="default"),
        "",
        'pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the '
        'namespace "default"',
    ),
    (
        "named object",
        Attributes("get", "pods", namespace="default", name="web"),
        "",
        'pods "web" is forbidden: User "alice" cannot get resource "pods" in API group "" in '
        'the namespace "default"',
    ),
    (
        "cluster scope",
        Attributes("list", "nodes"),
        "",
        'nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the '
        "cluster scope",
    ),
    (
        "named group is qualified",
        Attributes("update", "leases", "coordination.k8s.io", namespace="kube-system", name="x"),
        "",
        'leases.coordination.k8s.io "x" is forbidden: User "alice" cannot update resource '
        '"leases" in API group "coordination.k8s.io" in the namespace "kube-system"',
    ),
    (
        "subresource is resource/subresource, the qualified resource is not",
        Attributes("get", "pods", subresource="log", namespace="default", name="web"),
        "",
        'pods "web" is forbidden: User "alice" cannot get resource "pods/log" in API group "" '
        'in the namespace "default"',
    ),
    (
        "non-resource path",
        non_resource("get", "/foo"),
        "",
        'forbidden: User "alice" cannot get path "/foo"',
    ),
    (
        "the reason follows a colon",
        Attributes("get", "pods", namespace="default", name="web"),
        "no relationship found between node 'n1' and this object",
        'pods "web" is forbidden: User "alice" cannot get resource "pods" in API group "" in '
        "the namespace \"default\": no relationship found between node 'n1' and this object",
    ),
    (
        "HTML-looking characters are escaped, quotes are Go's",
        non_resource("get", '/a<b>&"c"'),
        "",
        'forbidden: User "alice" cannot get path "/a&lt;b&gt;&amp;\\"c\\""',
    ),
]


@pytest.mark.parametrize(
    ("case", "attrs", "reason", "message"), MESSAGES, ids=[m[0] for m in MESSAGES]
)
def test_forbidden_message(case: str, attrs: Attributes, reason: str, message: str) -> None:
    assert forbidden_message(ALICE, attrs, reason) == message


@pytest.mark.parametrize(
    ("attrs", "details"),
    [
        (
            Attributes("get", "pods", namespace="default", name="web"),
            {"name": "web", "kind": "pods"},
        ),
        (
            Attributes("list", "leases", "coordination.k8s.io", namespace="x"),
            {"group": "coordination.k8s.io", "kind": "leases"},
        ),
        (non_resource("get", "/foo"), {}),
    ],
)
def test_check_raises_kubes_forbidden(attrs: Attributes, details: dict[str, str]) -> None:
    with pytest.raises(ForbiddenError) as info:
        Chain([Fixed(Decision(Outcome.NO_OPINION, "why"))]).check(ALICE, attrs)
    assert info.value.message == forbidden_message(ALICE, attrs, "why")
    assert info.value.details == details
    assert info.value.code is grpc.StatusCode.PERMISSION_DENIED
    Chain([Fixed(ALLOWED)]).check(ALICE, attrs)  # allowed: no error


class Fixed:
    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.asked = 0

    def authorize(self, identity: Identity, attrs: Attributes) -> Decision:
        self.asked += 1
        return self.decision


def test_system_masters_is_allowed_before_any_authorizer_is_asked() -> None:
    deny = Fixed(Decision(Outcome.DENY, "no"))
    chain = Chain([deny])
    assert chain.authorize(Identity("admin", ("system:masters",)), Attributes("delete", "nodes"))
    assert deny.asked == 0
    assert chain.authorize(ALICE, Attributes("delete", "nodes")).outcome is Outcome.DENY


def test_the_first_allow_or_deny_wins_and_no_opinions_join_their_reasons() -> None:
    first, second = Fixed(Decision(Outcome.NO_OPINION, "a")), Fixed(ALLOWED)
    assert Chain([first, second]).authorize(ALICE, Attributes("get", "pods")) is ALLOWED
    late = Fixed(ALLOWED)
    Chain([Fixed(Decision(Outcome.DENY, "d")), late]).authorize(ALICE, Attributes("get", "x"))
    assert late.asked == 0
    both = Chain(
        [Fixed(Decision(Outcome.NO_OPINION, "a")), Fixed(Decision(Outcome.NO_OPINION, "b"))]
    )
    assert both.authorize(ALICE, Attributes("get", "pods")) == Decision(Outcome.NO_OPINION, "a\nb")
    assert Chain([Fixed(NO_OPINION)]).authorize(ALICE, Attributes("get", "pods")) is NO_OPINION
    assert not Chain([]).authorize(ALICE, Attributes("get", "pods")).allowed


@pytest.mark.parametrize(
    ("identity", "expected"),
    [
        (Identity("system:node:n1", ("system:nodes",)), ("n1", True)),
        (Identity("system:node:n1", ()), ("", False)),  # not in system:nodes
        (Identity("n1", ("system:nodes",)), ("", False)),  # not a node user name
        (Identity("system:node:", ("system:nodes",)), ("", True)),  # a node without a name
    ],
)
def test_node_identity(identity: Identity, expected: tuple[str, bool]) -> None:
    assert node_name_of(identity) == expected
