"""SelfSubjectAccessReview: the spec's attributes, the answer, kube's validation, and the
protobuf body kubectl posts."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth.authorizer import (
    Attributes,
    Decision,
    Identity,
    Outcome,
    non_resource,
)
from apiserver.auth.review import review_attributes, self_subject_access_review
from apiserver.rest import kubeproto
from tinykube.errors import BadRequestError, InvalidError


class Recorder:
    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.asked: list[tuple[Identity, Attributes]] = []

    def authorize(self, identity: Identity, attrs: Attributes) -> Decision:
        self.asked.append((identity, attrs))
        return self.decision


ALICE = Identity("alice", ("system:authenticated",))


@pytest.mark.parametrize(
    ("spec", "attrs"),
    [
        (
            {
                "resourceAttributes": {
                    "namespace": "team",
                    "verb": "get",
                    "group": "apps",
                    "resource": "replicasets",
                    "subresource": "scale",
                    "name": "web",
                    "version": "v1",
                }
            },
            Attributes(
                "get", "replicasets", "apps", subresource="scale", namespace="team", name="web"
            ),
        ),
        (
            {
                "resourceAttributes": {
                    "verb": "list",
                    "resource": "pods",
                    "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
                }
            },
            Attributes("list", "pods", field_selector="spec.nodeName=n1"),
        ),
        (
            {"nonResourceAttributes": {"verb": "get", "path": "/healthz"}},
            non_resource("get", "/healthz"),
        ),
    ],
)
def test_review_attributes(spec: dict[str, Any], attrs: Attributes) -> None:
    assert review_attributes(spec) == attrs


@pytest.mark.parametrize(
    ("decision", "status"),
    [
        (
            Decision(Outcome.ALLOW, "RBAC: allowed by x"),
            {"allowed": True, "reason": "RBAC: allowed by x"},
        ),
        (Decision(Outcome.NO_OPINION), {"allowed": False}),
        (Decision(Outcome.NO_OPINION, "why"), {"allowed": False, "reason": "why"}),
        (Decision(Outcome.DENY, "no"), {"allowed": False, "denied": True, "reason": "no"}),
    ],
)
def test_the_answer_is_for_the_requester(decision: Decision, status: dict[str, Any]) -> None:
    recorder = Recorder(decision)
    review = {"spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}}
    answer = self_subject_access_review(recorder, ALICE, review)
    assert answer["status"] == status
    assert answer["kind"] == "SelfSubjectAccessReview"
    assert answer["apiVersion"] == "authorization.k8s.io/v1"
    assert answer["spec"] == review["spec"]
    assert recorder.asked == [(ALICE, Attributes("list", "pods"))]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {},
            'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
            'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes '
            "must be specified",
        ),
        (
            {
                "resourceAttributes": {"verb": "get"},
                "nonResourceAttributes": {"verb": "get", "path": "/x"},
            },
            'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
            "spec.nonResourceAttributes: Invalid value: "
            'authorization.NonResourceAttributes{Path:"/x", Verb:"get"}: cannot be specified in '
            "combination with resourceAttributes",
        ),
    ],
)
def test_invalid_reviews(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidError) as info:
        self_subject_access_review(Recorder(Decision(Outcome.ALLOW)), ALICE, {"spec": spec})
    assert info.value.message == message


def _key(number: int, wire: int) -> bytes:
    return bytes([number << 3 | wire])


def _bytes(number: int, value: bytes) -> bytes:
    assert len(value) < 128
    return _key(number, 2) + bytes([len(value)]) + value


def test_protobuf_body() -> None:
    selector = _bytes(1, b"spec.nodeName=n1")
    attrs = b"".join(
        [
            _bytes(1, b"team"),
            _bytes(2, b"list"),
            _bytes(5, b"pods"),
            _bytes(4, b"v1"),
            _bytes(8, selector),
        ]
    )
    spec = _bytes(1, attrs)
    review = _bytes(1, b"") + _bytes(2, spec) + _key(9, 0) + b"\x01"  # an unknown varint field
    type_meta = _bytes(1, b"authorization.k8s.io/v1") + _bytes(2, b"SelfSubjectAccessReview")
    body = kubeproto.MAGIC + _bytes(1, type_meta) + _bytes(2, review)
    parsed = kubeproto.self_subject_access_review(body)
    assert parsed["spec"] == {
        "resourceAttributes": {
            "namespace": "team",
            "verb": "list",
            "resource": "pods",
            "version": "v1",
            "fieldSelector": {"rawSelector": "spec.nodeName=n1"},
        }
    }
    non = kubeproto.MAGIC + _bytes(
        2, _bytes(2, _bytes(2, _bytes(1, b"/healthz") + _bytes(2, b"get")))
    )
    assert kubeproto.self_subject_access_review(non)["spec"] == {
        "nonResourceAttributes": {"path": "/healthz", "verb": "get"}
    }


@pytest.mark.parametrize(
    "body", [b"", b"{}", kubeproto.MAGIC + b"\x12\x05ab", kubeproto.MAGIC + b"\x0f"]
)
def test_bad_protobuf_bodies_are_bad_requests(body: bytes) -> None:
    with pytest.raises(BadRequestError):
        kubeproto.self_subject_access_review(body)


# ---- SelfSubjectRulesReview ---------------------------------------------------------------------


def test_rules_review_lists_the_requesters_rules_in_the_namespace() -> None:
    from apiserver.auth.authorizer import Chain
    from apiserver.auth.bootstrap import cluster_role, rule, url_rule
    from apiserver.auth.review import self_subject_rules_review
    from tests.unit.auth.test_rbac import authorizer, binding, role, subject

    rbac = authorizer(
        cluster_role("urls", [url_rule(("get",), ("/healthz",))]),
        binding("urls", "", "ClusterRole", "urls", subject("User", "ann")),
        role("reader", "team", rule(("get", "list"), ("",), ("pods",))),
        binding("reader", "team", "Role", "reader", subject("User", "ann")),
        binding("ghost", "team", "Role", "ghost", subject("User", "ann")),
    )
    ann = Identity("ann", ("system:authenticated",))
    review = {"spec": {"namespace": "team"}}
    answer = self_subject_rules_review(Chain([rbac]), ann, review)
    assert answer["kind"] == "SelfSubjectRulesReview"
    assert answer["spec"] == {"namespace": "team"}
    status = answer["status"]
    assert status["resourceRules"] == [
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}
    ]
    assert status["nonResourceRules"] == [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]
    # A binding to a missing role is an evaluation error, the answer still complete (kube's).
    assert status["incomplete"] is False
    assert status["evaluationError"] == 'role.rbac.authorization.k8s.io "ghost" not found'
    elsewhere = self_subject_rules_review(Chain([rbac]), ann, {"spec": {"namespace": "x"}})
    assert elsewhere["status"]["resourceRules"] == []
    assert "evaluationError" not in elsewhere["status"]
    node = Identity("system:node:n1", ("system:nodes", "system:authenticated"))
    partial = self_subject_rules_review(Chain([rbac]), node, review)["status"]
    assert partial["incomplete"] is True
    assert partial["evaluationError"] == "node authorizer does not support user rule resolution"
