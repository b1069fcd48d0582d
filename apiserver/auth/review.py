"""SelfSubjectAccessReview (authorization.k8s.io/v1): "may I?", answered by the authorizer chain.

`self_subject_access_review(authorizer, identity, review)` takes the review's JSON (as a
client posts it to /apis/authorization.k8s.io/v1/selfsubjectaccessreviews; `kubectl auth
can-i` does) and returns it with its status filled in, as kube's registry does: the spec's
resourceAttributes (namespace, verb, group, resource, subresource, name, fieldSelector) or
nonResourceAttributes (path, verb) are checked for the requesting identity, and the status says
`allowed`, `denied` (only an explicit deny) and the authorizer's `reason`. Nothing is stored.
A spec with neither or both kinds of attributes is InvalidError with kube's wording. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apiserver.auth.authorizer import (
    Attributes,
    Authorizer,
    Identity,
    Outcome,
    go_quote,
    non_resource,
)
from tinykube.errors import FieldError, InvalidError

GROUP = "authorization.k8s.io"
KIND = "SelfSubjectAccessReview"
PLURAL = "selfsubjectaccessreviews"


def _invalid(causes: list[FieldError]) -> InvalidError:
    body = str(causes[0]) if len(causes) == 1 else "[" + ", ".join(map(str, causes)) + "]"
    return InvalidError(f'{KIND}.{GROUP} "" is invalid: {body}', causes)


def _text(attrs: Mapping[str, Any], key: str) -> str:
    value = attrs.get(key, "")
    return value if isinstance(value, str) else ""


def review_attributes(spec: Mapping[str, Any]) -> Attributes:
    """The attributes a review's spec asks about; InvalidError for a spec kube refuses."""
    resource = spec.get("resourceAttributes")
    other = spec.get("nonResourceAttributes")
    if resource is not None and other is not None:
        shown = (
            f"authorization.NonResourceAttributes{{Path:{go_quote(_text(other, 'path'))}, "
            f"Verb:{go_quote(_text(other, 'verb'))}}}"
            if isinstance(other, Mapping)
            else '"object"'
        )
        raise _invalid(
            [
                FieldError(
                    "spec.nonResourceAttributes",
                    f"Invalid value: {shown}: cannot be specified in combination with "
                    "resourceAttributes",
                )
            ]
        )
    if resource is None and other is None:
        raise _invalid(
            [
                FieldError(
                    "spec.resourceAttributes",
                    'Invalid value: "null": exactly one of nonResourceAttributes or '
                    "resourceAttributes must be specified",
                )
            ]
        )
    if other is not None:
        if not isinstance(other, Mapping):
            raise _invalid([FieldError("spec.nonResourceAttributes", "must be an object")])
        return non_resource(_text(other, "verb"), _text(other, "path"))
    if not isinstance(resource, Mapping):
        raise _invalid([FieldError("spec.resourceAttributes", "must be an object")])
    selector = resource.get("fieldSelector")
    raw = _text(selector, "rawSelector") if isinstance(selector, Mapping) else ""
    return Attributes(
        verb=_text(resource, "verb"),
        resource=_text(resource, "resource"),
        api_group=_text(resource, "group"),
        subresource=_text(resource, "subresource"),
        namespace=_text(resource, "namespace"),
        name=_text(resource, "name"),
        field_selector=raw,
    )


def self_subject_access_review(
    authorizer: Authorizer, identity: Identity, review: Mapping[str, Any]
) -> dict[str, Any]:
    """The review answered for `identity` (the requester: "self")."""
    spec = review.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    attrs = review_attributes(spec)
    decision = authorizer.authorize(identity, attrs)
    status: dict[str, Any] = {"allowed": decision.outcome is Outcome.ALLOW}
    if decision.outcome is Outcome.DENY:
        status["denied"] = True
    if decision.reason:
        status["reason"] = decision.reason
    metadata = review.get("metadata")
    return {
        "kind": KIND,
        "apiVersion": f"{GROUP}/v1",
        "metadata": dict(metadata) if isinstance(metadata, Mapping) else {},
        "spec": dict(spec),
        "status": status,
    }
