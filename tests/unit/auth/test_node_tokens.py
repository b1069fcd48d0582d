"""Kubelets and service account tokens: the Node authorizer lets a node create tokens only for
accounts its pods run as, and NodeRestriction only tokens bound to a pod on that node."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth.authorizer import Attributes, Identity, Outcome
from apiserver.auth.node import NodeAuthorizer, StaticPods, admit_node_token
from tinykube.v1 import meta_pb2, pod_pb2

N1 = Identity("system:node:n1", ("system:nodes", "system:authenticated"))


def pod(name: str, node: str, account: str, uid: str = "") -> pod_pb2.Pod:
    return pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name=name, namespace="ns", uid=uid or f"{name}-uid"),
        spec=pod_pb2.PodSpec(nodeName=node, serviceAccountName=account),
    )


PODS = StaticPods(
    {("ns", "web"): "n1", ("ns", "far"): "n2"},
    {("ns", "web"): pod("web", "n1", "robot"), ("ns", "far"): pod("far", "n2", "other")},
)


def token(account: str, verb: str = "create", sub: str = "token") -> Attributes:
    return Attributes(verb, "serviceaccounts", "", sub, "ns", account)


@pytest.mark.parametrize(
    ("attrs", "outcome", "reason"),
    [
        (token("robot"), Outcome.ALLOW, ""),
        (token("other"), Outcome.NO_OPINION, "no relationship found between node 'n1' and this"),
        (token("robot", "get"), Outcome.NO_OPINION, "can only create tokens for individual"),
        (token(""), Outcome.NO_OPINION, "can only create tokens for individual"),
        (token("robot", sub=""), Outcome.NO_OPINION, "can only create token subresource"),
    ],
)
def test_node_authorizer_tokens(attrs: Attributes, outcome: Outcome, reason: str) -> None:
    decision = NodeAuthorizer(PODS).authorize(N1, attrs)
    assert decision.outcome is outcome
    assert decision.reason.startswith(reason)


WEB = {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "web-uid"}


@pytest.mark.parametrize(
    ("bound", "found", "message"),
    [
        (WEB, pod("web", "n1", "robot"), None),
        (None, None, 'serviceaccounts "robot" is forbidden: node requested token not bound'),
        ({**WEB, "kind": "Secret"}, None, "node requested token not bound to a pod"),
        ({**WEB, "uid": ""}, None, "node requested token with a pod binding without a uid"),
        (WEB, pod("web", "n1", "robot", uid="new"), "does not match the UID in record"),
        (WEB, pod("web", "n2", "robot"), "bound to a pod scheduled on a different node"),
    ],
)
def test_node_restriction_of_token_requests(bound: Any, found: Any, message: str | None) -> None:
    refused = admit_node_token(N1, "ns", "robot", bound, found)
    if message is None:
        assert refused is None
    else:
        assert refused is not None and message in refused


def test_others_are_not_restricted() -> None:
    alice = Identity("alice", ("system:authenticated",))
    assert admit_node_token(alice, "ns", "robot", None, None) is None
    assert NodeAuthorizer(PODS).authorize(alice, token("robot")).outcome is Outcome.NO_OPINION
