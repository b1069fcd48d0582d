"""Request attributes, decisions, the authorizer chain and Kubernetes' forbidden messages.

Modelled on k8s.io/apiserver's authorizer package: a request is described by `Attributes` (who
is asking is an `Identity`: user name and groups; what they ask is a verb on a resource, its
subresource, namespace and name, or a verb on a non-resource path), an authorizer answers a
`Decision` (allow, deny, or no opinion, with a reason), and `Chain` asks its authorizers in
order, as kube-apiserver's `--authorization-mode=Node,RBAC`: members of `system:masters` are
allowed before any is asked, the first allow or deny wins, and the reasons of those with no
opinion are joined for the forbidden message. Both front ends call `Chain.authorize` with the
attributes they derive from a request (apiserver/rest/attributes.py for REST paths,
apiserver/grpcattributes.py for gRPC methods) and answer a denial with `forbidden_message`.

Pure and synchronous: an authorizer reads in-memory indexes kept by the event loop and never
awaits, so a check is a few dictionary lookups on the request's own task.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from tinykube.errors import ForbiddenError
from tinykube.selectors import SelectorError, parse_field_selector

# Kubernetes' well-known users and groups (k8s.io/apiserver/pkg/authentication/user).
SYSTEM_MASTERS = "system:masters"
ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
KUBE_SCHEDULER = "system:kube-scheduler"
KUBE_CONTROLLER_MANAGER = "system:kube-controller-manager"
KUBE_PROXY = "system:kube-proxy"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is asking: the authenticated user name and groups (x509 CN and O, a token's entry),
    and for a service account token the account's uid and kube's extra (pod, node, credential
    id), which authorization ignores and SelfSubjectReview shows."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Attributes(NamedTuple):
    """What is asked, as Kubernetes' authorizer.Attributes (a tuple: built on every request,
    and a NamedTuple costs a fraction of a frozen dataclass to make).

    A resource request has a verb (get, list, watch, create, update, patch, delete,
    deletecollection), the resource's API group and plural, an optional subresource ("status",
    "binding", "eviction", "log"), the namespace ("" for cluster-scoped resources and for lists
    across namespaces) and the object's name ("" for collections and for creates). A
    non-resource request (`resource_request=False`) has a verb and a `path` instead.
    `field_selector` is the request's raw field selector on list and watch (the Node
    authorizer lets a kubelet list only its own pods: spec.nodeName=<node>).
    """

    verb: str
    resource: str = ""
    api_group: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    resource_request: bool = True
    path: str = ""
    field_selector: str = ""


def non_resource(verb: str, path: str) -> Attributes:
    return Attributes(verb=verb, resource_request=False, path=path)


def selected_name(field_selector: str) -> str:
    """The name a list or watch pins with metadata.name=<x> ("" if none), as kube's
    RequestInfoFactory puts it in the request's attributes."""
    if "metadata.name" not in field_selector:
        return ""
    try:
        name = parse_field_selector(field_selector).equality_value("metadata.name")
    except SelectorError:
        return ""
    if not name or name in (".", "..") or "/" in name or "%" in name:
        return ""
    return name


class Outcome(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    NO_OPINION = "no opinion"


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorizer's answer; `reason` is what a denial's message appends (may be "")."""

    outcome: Outcome
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ALLOW


ALLOWED = Decision(Outcome.ALLOW)
NO_OPINION = Decision(Outcome.NO_OPINION)


class Authorizer(Protocol):
    def authorize(self, identity: Identity, attrs: Attributes) -> Decision: ...


class Chain:
    """Authorizers asked in order (Node, then RBAC), after the `system:masters` shortcut.

    The first ALLOW or DENY is the answer; if every authorizer has no opinion, the request is
    refused with their reasons joined by newlines (kube's union authorizer).
    """

    def __init__(self, authorizers: Sequence[Authorizer]) -> None:
        self.authorizers = tuple(authorizers)

    def check(self, identity: Identity, attrs: Attributes) -> None:
        """`authorize`, raising the ForbiddenError a front end answers a refusal with."""
        decision = self.authorize(identity, attrs)
        if decision.outcome is not Outcome.ALLOW:
            raise forbidden_error(identity, attrs, decision.reason)

    def authorize(self, identity: Identity, attrs: Attributes) -> Decision:
        if SYSTEM_MASTERS in identity.groups:
            return ALLOWED
        reasons: list[str] = []
        for authorizer in self.authorizers:
            decision = authorizer.authorize(identity, attrs)
            if decision.outcome is not Outcome.NO_OPINION:
                return decision
            if decision.reason:
                reasons.append(decision.reason)
        if not reasons:
            return NO_OPINION
        return Decision(Outcome.NO_OPINION, "\n".join(reasons))


# ---- the forbidden message ---------------------------------------------------------------------

_GO_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_GO_QUOTE = str.maketrans({**{chr(c): f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}, **_GO_ESCAPES})
# kube-apiserver keeps a forbidden message from looking like HTML (responsewriters.Forbidden).
_SANITIZE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def go_quote(text: str) -> str:
    """Go's %q for the strings a forbidden message shows."""
    return '"' + text.translate(_GO_QUOTE) + '"'


def _denial(identity: Identity, attrs: Attributes) -> str:
    user = go_quote(identity.name)
    if not attrs.resource_request:
        return f"User {user} cannot {attrs.verb} path {go_quote(attrs.path)}"
    resource = attrs.resource
    if attrs.subresource:
        resource = f"{resource}/{attrs.subresource}"
    where = (
        f"in the namespace {go_quote(attrs.namespace)}"
        if attrs.namespace
        else "at the cluster scope"
    )
    return (
        f"User {user} cannot {attrs.verb} resource {go_quote(resource)} in API group "
        f"{go_quote(attrs.api_group)} {where}"
    )


def forbidden_message(identity: Identity, attrs: Attributes, reason: str = "") -> str:
    """Kubernetes' message for a refused request, as `kubectl` prints it after "(Forbidden): ".

    `pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the
    namespace "default"`; with a name `pods "web" is forbidden: ...`; for another group
    `leases.coordination.k8s.io ...`; cluster-scoped `... at the cluster scope`; non-resource
    `forbidden: User "alice" cannot get path "/foo"`; the authorizers' reason, if any, after
    ": ".
    """
    text = _denial(identity, attrs).translate(_SANITIZE)
    if reason:
        text = f"{text}: {reason}"
    if not attrs.resource_request or not attrs.resource:
        return f"forbidden: {text}"
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    if attrs.name:
        return f"{qualified} {go_quote(attrs.name)} is forbidden: {text}"
    return f"{qualified} is forbidden: {text}"


def forbidden_error(identity: Identity, attrs: Attributes, reason: str = "") -> ForbiddenError:
    """The refusal as an error: PERMISSION_DENIED over gRPC, and over REST a 403 Status whose
    details name the resource as kube's NewForbidden does (name, group, kind: the plural)."""
    details: dict[str, str] = {}
    if attrs.resource_request and attrs.resource:
        if attrs.name:
            details["name"] = attrs.name
        if attrs.api_group:
            details["group"] = attrs.api_group
        details["kind"] = attrs.resource
    return ForbiddenError(forbidden_message(identity, attrs, reason), details)


def node_name_of(identity: Identity) -> tuple[str, bool]:
    """(node name, is a node) as kube's nodeidentifier: a user "system:node:<name>" in the group
    "system:nodes". The name may be "" ("system:node:"), which no node may act as."""
    if not identity.name.startswith(NODE_USER_PREFIX) or NODES_GROUP not in identity.groups:
        return "", False
    return identity.name[len(NODE_USER_PREFIX) :], True
