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

from collections.abc import Mapping, Sequence
from typing import Any

from apiserver.auth.authorizer import (
    Attributes,
    Authorizer,
    Chain,
    Identity,
    Outcome,
    go_quote,
    node_name_of,
    non_resource,
)
from apiserver.auth.rbac import Rule
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
    return _answer(KIND, review, spec, status)


# ---- SelfSubjectRulesReview ---------------------------------------------------------------

RULES_KIND = "SelfSubjectRulesReview"
RULES_PLURAL = "selfsubjectrulesreviews"


def _resolvers(authorizer: Authorizer) -> Sequence[Authorizer]:
    return authorizer.authorizers if isinstance(authorizer, Chain) else (authorizer,)


def self_subject_rules_review(
    authorizer: Authorizer, identity: Identity, review: Mapping[str, Any]
) -> dict[str, Any]:
    """What `identity` may do in `spec.namespace` (`kubectl auth can-i --list`), as kube's
    union of its authorizers' RulesFor: RBAC's rules cluster-wide and in the namespace, one
    ResourceRule per rule naming resources and one NonResourceRule per rule naming URLs. The
    Node authorizer cannot enumerate a node's permissions, so a node's answer is incomplete;
    bindings to missing roles are reported in evaluationError, as kube does."""
    spec = review.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    namespace = spec.get("namespace", "")
    if not isinstance(namespace, str):
        raise _kind_invalid(RULES_KIND, "", [FieldError("spec.namespace", "must be a string")])
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    errors: list[str] = []
    incomplete = False
    if node_name_of(identity)[1]:
        incomplete = True
        errors.append("node authorizer does not support user rule resolution")
    for resolver in _resolvers(authorizer):
        rules_for = getattr(resolver, "rules_for", None)
        if rules_for is None:
            continue
        rules: list[Rule]
        missing: list[tuple[str, str, str]]
        rules, missing = rules_for(identity, namespace)
        for rule in rules:
            if rule.resources:
                entry: dict[str, Any] = {"verbs": list(rule.verbs)}
                if rule.api_groups:
                    entry["apiGroups"] = list(rule.api_groups)
                entry["resources"] = list(rule.resources)
                if rule.resource_names:
                    entry["resourceNames"] = list(rule.resource_names)
                resource_rules.append(entry)
            if rule.non_resource_urls:
                non_resource_rules.append(
                    {"verbs": list(rule.verbs), "nonResourceURLs": list(rule.non_resource_urls)}
                )
        errors.extend(
            f"{kind.lower()}.rbac.authorization.k8s.io {go_quote(name)} not found"
            for kind, _, name in missing
        )
    status: dict[str, Any] = {
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": incomplete,
    }
    if errors:
        status["evaluationError"] = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return _answer(RULES_KIND, review, spec, status)


# ---- SubjectAccessReview, LocalSubjectAccessReview, TokenReview ---------------------------------

SUBJECT_KIND = "SubjectAccessReview"
LOCAL_KIND = "LocalSubjectAccessReview"
TOKEN_REVIEW_KIND = "TokenReview"
AUTHENTICATION_GROUP = "authentication.k8s.io"


def _kind_invalid(kind: str, name: str, causes: list[FieldError]) -> InvalidError:
    body = str(causes[0]) if len(causes) == 1 else "[" + ", ".join(map(str, causes)) + "]"
    return InvalidError(f'{kind}.{GROUP} "{name}" is invalid: {body}', causes)


def _answer(
    kind: str, review: Mapping[str, Any], spec: Mapping[str, Any], status: dict[str, Any]
) -> dict[str, Any]:
    """A review as the apiserver answers it: the request's metadata and spec, and the status."""
    metadata = review.get("metadata")
    return {
        "kind": kind,
        "apiVersion": f"{GROUP}/v1",
        "metadata": dict(metadata) if isinstance(metadata, Mapping) else {},
        "spec": dict(spec),
        "status": status,
    }


def _decide(authorizer: Authorizer, identity: Identity, attrs: Attributes) -> dict[str, Any]:
    decision = authorizer.authorize(identity, attrs)
    status: dict[str, Any] = {"allowed": decision.outcome is Outcome.ALLOW}
    if decision.outcome is Outcome.DENY:
        status["denied"] = True
    if decision.reason:
        status["reason"] = decision.reason
    return status


def subject_access_review(
    authorizer: Authorizer, review: Mapping[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    """A SubjectAccessReview (cluster-wide) or, with `namespace`, a LocalSubjectAccessReview
    (kube's registry: the spec's user and groups are asked about exactly as given, nothing
    added; a local review asks about its namespace only)."""
    kind = SUBJECT_KIND if namespace is None else LOCAL_KIND
    spec = review.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    metadata = review.get("metadata")
    name = _text(metadata, "name") if isinstance(metadata, Mapping) else ""
    user = _text(spec, "user")
    raw_groups = spec.get("groups")
    groups = (
        tuple(g for g in raw_groups if isinstance(g, str)) if isinstance(raw_groups, list) else ()
    )
    causes: list[FieldError] = []
    if not user and not groups:
        causes.append(
            FieldError(
                "spec.user", 'Invalid value: "": at least one of user or group must be specified'
            )
        )
    if namespace is not None:
        if spec.get("nonResourceAttributes") is not None:
            causes.append(
                FieldError(
                    "spec.nonResourceAttributes",
                    'Invalid value: "object": disallowed on this kind of request',
                )
            )
        resource = spec.get("resourceAttributes")
        asked = _text(resource, "namespace") if isinstance(resource, Mapping) else ""
        if isinstance(metadata, Mapping) and _text(metadata, "namespace") not in ("", namespace):
            causes.append(
                FieldError(
                    "metadata.namespace",
                    f'Invalid value: "{_text(metadata, "namespace")}": must match the '
                    "namespace of the request",
                )
            )
        if isinstance(resource, Mapping) and asked != namespace:
            causes.append(
                FieldError(
                    "spec.resourceAttributes.namespace",
                    f'Invalid value: "{asked}": must match metadata.namespace',
                )
            )
    if causes:
        raise _kind_invalid(kind, name, causes)
    try:
        attrs = review_attributes(spec)
    except InvalidError as exc:
        raise _kind_invalid(kind, name, exc.causes) from None
    return _answer(kind, review, spec, _decide(authorizer, Identity(user, groups), attrs))


def token_review_answer(
    review: Mapping[str, Any],
    user: Mapping[str, Any] | None,
    audiences: tuple[str, ...],
    error: str,
) -> dict[str, Any]:
    """A TokenReview's answer: `user` (username, uid, groups, extra) when authenticated."""
    spec = review.get("spec")
    spec = dict(spec) if isinstance(spec, Mapping) else {}
    status: dict[str, Any] = {"authenticated": user is not None, "user": dict(user or {})}
    if user is not None and audiences:
        status["audiences"] = list(audiences)
    if error:
        status["error"] = error
    metadata = review.get("metadata")
    return {
        "kind": TOKEN_REVIEW_KIND,
        "apiVersion": f"{AUTHENTICATION_GROUP}/v1",
        "metadata": dict(metadata) if isinstance(metadata, Mapping) else {},
        "spec": spec,
        "status": status,
    }
