"""SubjectAccessReview and LocalSubjectAccessReview (asked for the spec's user, nothing added),
TokenReview answers, and the protobuf bodies of TokenRequest and the reviews."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth.authorizer import ALLOWED, Attributes, Decision, Identity, Outcome
from apiserver.auth.review import subject_access_review, token_review_answer
from apiserver.rest.authapi import from_protobuf
from apiserver.rest.status import RestError
from tinykube.errors import InvalidError


class Recorder:
    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.asked: list[tuple[Identity, Attributes]] = []

    def authorize(self, identity: Identity, attrs: Attributes) -> Decision:
        self.asked.append((identity, attrs))
        return self.decision


GET_PODS = {"namespace": "ns", "verb": "get", "resource": "pods"}


def test_subject_access_review_asks_for_the_spec_user() -> None:
    authz = Recorder(ALLOWED)
    review = {"spec": {"user": "bob", "groups": ["g1"], "resourceAttributes": GET_PODS}}
    answer = subject_access_review(authz, review)
    assert answer["kind"] == "SubjectAccessReview"
    assert answer["status"] == {"allowed": True}
    assert authz.asked == [(Identity("bob", ("g1",)), Attributes("get", "pods", namespace="ns"))]


def test_a_denial_carries_the_reason() -> None:
    authz = Recorder(Decision(Outcome.NO_OPINION, "no RBAC policy matched"))
    answer = subject_access_review(authz, {"spec": {"user": "bob", "resourceAttributes": GET_PODS}})
    assert answer["status"] == {"allowed": False, "reason": "no RBAC policy matched"}


def test_user_or_group_is_required() -> None:
    with pytest.raises(InvalidError) as refused:
        subject_access_review(Recorder(ALLOWED), {"spec": {"resourceAttributes": GET_PODS}})
    assert refused.value.message == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": '
        "at least one of user or group must be specified"
    )


def test_local_reviews_stay_in_their_namespace() -> None:
    authz = Recorder(ALLOWED)
    spec: dict[str, Any] = {"user": "bob", "resourceAttributes": GET_PODS}
    answer = subject_access_review(authz, {"metadata": {"namespace": "ns"}, "spec": spec}, "ns")
    assert answer["kind"] == "LocalSubjectAccessReview"
    with pytest.raises(InvalidError, match=r"must match metadata\.namespace"):
        subject_access_review(authz, {"spec": spec}, "other")
    nonresource = {"user": "bob", "nonResourceAttributes": {"path": "/x", "verb": "get"}}
    with pytest.raises(InvalidError, match="disallowed on this kind of request"):
        subject_access_review(authz, {"spec": nonresource}, "ns")


def test_token_review_answer() -> None:
    user = {"username": "u", "groups": ["g"]}
    good = token_review_answer({"spec": {"token": "t"}}, user, ("aud",), "")
    assert good["status"] == {"authenticated": True, "user": user, "audiences": ["aud"]}
    bad = token_review_answer({"spec": {"token": "t"}}, None, (), "invalid bearer token")
    assert bad["status"] == {"authenticated": False, "user": {}, "error": "invalid bearer token"}


# ---- protobuf -----------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def field(number: int, value: bytes | int | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, obj: bytes) -> bytes:
    type_meta = field(1, api_version) + field(2, kind)
    return b"k8s\x00" + field(1, type_meta) + field(2, obj) + field(4, "application/json")


def test_token_request_from_protobuf() -> None:
    ref = field(1, "Pod") + field(2, "v1") + field(3, "web") + field(4, "uid-1")
    spec = field(1, "a") + field(1, "b") + field(4, 900) + field(3, ref)
    body = envelope(
        "authentication.k8s.io/v1", "TokenRequest", field(1, field(1, "robot")) + field(2, spec)
    )
    assert from_protobuf(body) == {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": "robot"},
        "spec": {
            "audiences": ["a", "b"],
            "expirationSeconds": 900,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "uid-1"},
        },
    }


def test_reviews_from_protobuf() -> None:
    token_review = envelope(
        "authentication.k8s.io/v1", "TokenReview", field(2, field(1, "tok") + field(2, "aud"))
    )
    assert from_protobuf(token_review)["spec"] == {"token": "tok", "audiences": ["aud"]}
    attrs = field(1, "ns") + field(2, "get") + field(5, "pods")
    sar = envelope(
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        field(2, field(1, attrs) + field(3, "bob") + field(4, "g1") + field(4, "g2")),
    )
    assert from_protobuf(sar)["spec"] == {
        "resourceAttributes": {"namespace": "ns", "verb": "get", "resource": "pods"},
        "user": "bob",
        "groups": ["g1", "g2"],
    }
    with pytest.raises(RestError) as unsupported:
        from_protobuf(envelope("v1", "Pod", b""))
    assert unsupported.value.code == 415
