"""Enforcement: authentication, impersonation and authorization of every request, as
kube-apiserver's filter chain (WithAuthentication, WithImpersonation, WithAuthorization).

`Enforcer(authenticator, authorizer)` is what both front ends call before a request runs:
- `grpc_identity(context)` / `rest_identity(transport, path, headers)`: who sent the request.
  Anonymous requests are refused (`AuthenticationError`: UNAUTHENTICATED / 401 "Unauthorized")
  except the probes everybody may read (/healthz, /livez, /readyz, /version, which kube's
  system:public-info-viewer grants to system:unauthenticated; gRPC health and reflection never
  reach the enforcer). Then impersonation: `Impersonate-User` and `Impersonate-Group` headers
  (gRPC: the same keys, lowercase, as metadata) make the request act as that user, once the
  authorizer lets the requester `impersonate` each of them (resource users, groups or
  serviceaccounts), as `kubectl --as` / `--as-group`.
- `check(identity, attrs)`: the authorizer chain; a refusal is `ForbiddenError` with kube's
  message (PERMISSION_DENIED / 403).

NodeRestriction admission and RBAC's escalation check need the stored object, so the resource
layer does them (`admit_node_write`, apiserver/auth/escalation.py): the front ends pass the
identity to `ResourceStore` in the request's `RequestContext` (apiserver/requestcontext.py),
and the store consults it where it has the old and new objects; for an identity that is not a
node NodeRestriction costs one `node_name_of`.

Cost: a connection's certificate identity is memoized (by the transport for REST, by its PEM
for gRPC, in the authenticator), RBAC memoizes its answers, and the Node authorizer is a few
dictionary lookups, so a request pays a few microseconds (bench/authz_overhead.py measures it).
Pure and synchronous; runs on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grpc

from apiserver.auth.authn import AuthenticationError, Authenticator
from apiserver.auth.authorizer import (
    ALL_AUTHENTICATED,
    ALL_UNAUTHENTICATED,
    ANONYMOUS,
    SERVICE_ACCOUNT_PREFIX,
    Attributes,
    Authorizer,
    Identity,
    Outcome,
    forbidden_error,
    node_name_of,
)
from apiserver.auth.node import node_restriction
from tinykube.errors import BadRequestError, ForbiddenError

IMPERSONATE_USER = "Impersonate-User"
IMPERSONATE_GROUP = "Impersonate-Group"
# gRPC metadata keys are lowercase.
GRPC_IMPERSONATE_USER = IMPERSONATE_USER.lower()
GRPC_IMPERSONATE_GROUP = IMPERSONATE_GROUP.lower()

# What anonymous requests may reach: kube's system:public-info-viewer paths.
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})

UNAUTHORIZED = "Unauthorized"
# Connections whose identity is remembered at once (closed ones are dropped first).
TRANSPORT_MEMO_LIMIT = 4096
_UNKNOWN = object()


def unauthorized() -> AuthenticationError:
    return AuthenticationError(UNAUTHORIZED)


def is_node(identity: Identity) -> bool:
    return node_name_of(identity)[1]


class Enforcer:
    """Authentication, impersonation and authorization over one authenticator and chain."""

    def __init__(self, authenticator: Authenticator, authorizer: Authorizer) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        # A TLS connection's verified certificate never changes: its identity (or None, no
        # certificate) is kept for the connection's life.
        # Keyed by the transport itself (uvloop's cannot be weakly referenced): holding it
        # keeps its id from being reused, and closed ones are dropped when the memo is full.
        self._by_transport: dict[Any, Identity | None] = {}

    # ---- authorization -------------------------------------------------------------------

    def check(self, identity: Identity, attrs: Attributes) -> None:
        decision = self.authorizer.authorize(identity, attrs)
        if decision.outcome is not Outcome.ALLOW:
            raise forbidden_error(identity, attrs, decision.reason)

    def check_all(self, identity: Identity, attrs: Sequence[Attributes]) -> None:
        for one in attrs:
            self.check(identity, one)

    # ---- gRPC ----------------------------------------------------------------------------

    def grpc_identity(self, context: grpc.aio.ServicerContext[Any, Any]) -> Identity:
        """Who a tinykube RPC acts as; AuthenticationError for nobody or a bad token,
        ForbiddenError for an impersonation the requester may not do."""
        authn = self.authenticator
        identity: Identity | None = None
        auth = context.auth_context()
        if auth:
            for pem in auth.get("x509_pem_cert", ()):
                identity = authn.certificate(pem)
                break
        user: str | None = None
        groups: list[str] = []
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                if identity is None:
                    text = value.decode() if isinstance(value, bytes) else str(value)
                    identity = authn.token(text)
            elif key == GRPC_IMPERSONATE_USER:
                user = value.decode() if isinstance(value, bytes) else str(value)
            elif key == GRPC_IMPERSONATE_GROUP:
                groups.append(value.decode() if isinstance(value, bytes) else str(value))
        if identity is None:
            raise unauthorized()
        if user is not None or groups:
            return self.impersonate(identity, user, groups)
        return identity

    # ---- REST ----------------------------------------------------------------------------

    def rest_identity(
        self, transport: Any, path: str, headers: Mapping[str, str], *, settled: bool = False
    ) -> Identity:
        """Who a REST request acts as (anonymous only for `PUBLIC_PATHS`); StaleTokenError
        for a recent service account token the caches may not know yet (see authn.py)."""
        identity = self._certificate_of(transport)
        if identity is None:
            authorization = headers.get("Authorization")
            if authorization:
                identity = self.authenticator.token(authorization, settled=settled)
        if identity is None:
            if path in PUBLIC_PATHS:
                return Identity(ANONYMOUS, (ALL_UNAUTHENTICATED,))
            raise unauthorized()
        if IMPERSONATE_USER in headers or IMPERSONATE_GROUP in headers:
            return self.impersonate(
                identity, headers.get(IMPERSONATE_USER), _all(headers, IMPERSONATE_GROUP)
            )
        return identity

    def _certificate_of(self, transport: Any) -> Identity | None:
        if transport is None:
            return None
        memo = self._by_transport
        found = memo.get(transport, _UNKNOWN)
        if found is not _UNKNOWN:
            return found  # type: ignore[return-value]
        identity: Identity | None = None
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                identity = self.authenticator.certificate_der(der)
        if len(memo) >= TRANSPORT_MEMO_LIMIT:
            for closed in [t for t in memo if t.is_closing()]:
                del memo[closed]
            if len(memo) >= TRANSPORT_MEMO_LIMIT:
                memo.clear()
        memo[transport] = identity
        return identity

    # ---- impersonation -------------------------------------------------------------------

    def impersonate(self, requester: Identity, user: str | None, groups: Iterable[str]) -> Identity:
        """The identity `requester` asks to act as, each part authorized as kube's
        impersonation filter does (verb impersonate on users, groups or serviceaccounts)."""
        wanted = list(groups)
        if not user:
            asked = [f"{{Group {g}}}" for g in wanted]
            raise BadRequestError(f"requested [{' '.join(asked)}] without impersonating a user")
        if user.startswith(SERVICE_ACCOUNT_PREFIX):
            namespace, _, name = user[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
            self.check(
                requester, Attributes("impersonate", "serviceaccounts", "", "", namespace, name)
            )
        else:
            self.check(requester, Attributes("impersonate", "users", "", "", "", user))
        for group in wanted:
            self.check(requester, Attributes("impersonate", "groups", "", "", "", group))
        out = list(dict.fromkeys(wanted))
        if user.startswith(SERVICE_ACCOUNT_PREFIX) and not wanted:
            namespace = user[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")[0]
            out += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        # As kube: the acting user is authenticated (anonymous: unauthenticated).
        extra = ALL_UNAUTHENTICATED if user == ANONYMOUS else ALL_AUTHENTICATED
        if extra not in out:
            out.append(extra)
        return Identity(user, tuple(out))


def _all(headers: Mapping[str, str], key: str) -> list[str]:
    """Every value of a repeated header (aiohttp's multidict), or the one a dict has."""
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(key, []))
    value = headers.get(key)
    return [value] if value is not None else []


def admit_node_write(
    requester: Identity,
    verb: str,
    resource: str,
    group: str,
    subresource: str,
    namespace: str,
    name: str,
    obj: Any | None,
    old: Any | None,
) -> None:
    """NodeRestriction for a write `requester` makes: ForbiddenError when a node may not."""
    if not node_name_of(requester)[1]:
        return  # only nodes are restricted: no attributes to build for anyone else
    attrs = Attributes(verb, resource, group, subresource, namespace, name)
    refused = node_restriction(requester, attrs, obj, old)
    if refused is not None:
        raise ForbiddenError(refused)
