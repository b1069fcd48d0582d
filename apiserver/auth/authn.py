"""Authentication: who sent a request, from its transport's client certificate or bearer token.

As kube-apiserver's authenticator union (x509 first, then the static token file), each front end
derives an `Identity` (apiserver/auth/authorizer.py) per request:
- a client certificate the TLS layer verified against `--client-ca-file`: CommonName is the
  user, each Organization a group (gRPC: `context.auth_context()`; REST: the transport's peer
  certificate);
- else an `Authorization: Bearer <token>` found in `--token-auth-file` (kube's CSV format:
  `token,user,uid,"group1,group2"`), or a service account token (a JWT of
  `--service-account-issuer`, apiserver/auth/tokens.py: `service_accounts`); any other token,
  or a service account token that is no longer valid, is `AuthenticationError` (kube answers
  401 for a bad token, it does not fall back to anonymous);
- else anonymous: `system:anonymous` in `system:unauthenticated`.
Every authenticated identity also gets `system:authenticated`, as kube adds it.

Nothing is enforced here: the front ends hand the identity to the authorizer (the REST server's
`identify`, `Authenticator.grpc` for a gRPC handler's context). Pure and synchronous; a
certificate's identity is parsed once and memoized by its PEM, so a request costs a dictionary
lookup. The token file is read once at start.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from cryptography import x509

from apiserver.auth.authorizer import ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, Identity
from apiserver.auth.tokens import StaleLookup, TokenAuthenticator, TokenError, UserInfo
from tinykube.errors import UnauthenticatedError
from tinykube.pki import identity as cert_identity

log = logging.getLogger(__name__)

ANONYMOUS_IDENTITY = Identity(ANONYMOUS, (ALL_UNAUTHENTICATED,))
# Bounds the memo of certificate identities: a cluster has a few hundred client certificates.
_MEMO_LIMIT = 4096


class AuthenticationError(UnauthenticatedError):
    """Credentials were presented and are not valid (kube-apiserver's 401 Unauthorized)."""


class StaleTokenError(AuthenticationError):
    """A recent service account token names objects the watch caches may not hold yet: await
    `Authenticator.settle()` and authenticate again with `settled=True` (apiserver/auth/tokens.py
    StaleLookup)."""


@dataclass(frozen=True, slots=True)
class TokenUser:
    name: str
    uid: str
    groups: tuple[str, ...]


class TokenFileError(ValueError):
    """A --token-auth-file that cannot be read; the message names the file and the record."""


def parse_token_file(text: str, path: str = "token file") -> dict[str, TokenUser]:
    """kube's static token file: CSV records of token, user name, uid and, optionally, groups
    as one comma-separated field. Empty tokens are skipped; a later duplicate wins."""
    tokens: dict[str, TokenUser] = {}
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    for number, record in enumerate(reader, start=1):
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if len(record) < 3:
            raise TokenFileError(
                f"token file {path!r} must have at least 3 columns (token, user name, user "
                f"uid), found {len(record)} in record {number}"
            )
        token = record[0]
        if not token:
            log.warning("empty token in token file %r, record %d: skipped", path, number)
            continue
        if token in tokens:
            log.warning("duplicate token in token file %r, record %d", path, number)
        groups = tuple(g for g in record[3].split(",") if g) if len(record) > 3 else ()
        tokens[token] = TokenUser(record[1], record[2], groups)
    return tokens


def load_token_file(path: str) -> dict[str, TokenUser]:
    try:
        with open(path, newline="") as f:
            text = f.read()
    except OSError as exc:
        raise TokenFileError(f"--token-auth-file {path!r}: {exc.strerror or exc}") from exc
    return parse_token_file(text, path)


def _with_authenticated(
    name: str,
    groups: tuple[str, ...],
    uid: str = "",
    extra: tuple[tuple[str, tuple[str, ...]], ...] = (),
) -> Identity:
    if ALL_AUTHENTICATED not in groups:
        groups = (*groups, ALL_AUTHENTICATED)
    return Identity(name, groups, uid, extra)


@dataclass
class Authenticator:
    """x509 client certificates, then bearer tokens, then anonymous."""

    tokens: Mapping[str, TokenUser] = field(default_factory=dict)
    # Service account tokens (JWTs); None: the apiserver has no --service-account-key-file.
    service_accounts: TokenAuthenticator | None = None
    # Lets the watch caches catch up with etcd (StaleTokenError); None: nothing to wait for.
    refresh: Callable[[], Awaitable[object]] | None = None
    _by_pem: dict[bytes, Identity] = field(default_factory=dict)
    _by_der: dict[bytes, Identity] = field(default_factory=dict)

    @classmethod
    def from_flags(cls, token_auth_file: str = "") -> Authenticator:
        return cls(tokens=load_token_file(token_auth_file) if token_auth_file else {})

    # ---- the credentials themselves ------------------------------------------------------

    def certificate(self, pem: bytes) -> Identity:
        """The identity of a verified client certificate (PEM)."""
        found = self._by_pem.get(pem)
        if found is None:
            user, groups = cert_identity(x509.load_pem_x509_certificate(pem))
            found = _with_authenticated(user, groups)
            if len(self._by_pem) >= _MEMO_LIMIT:
                self._by_pem.clear()
            self._by_pem[pem] = found
        return found

    def certificate_der(self, der: bytes) -> Identity:
        found = self._by_der.get(der)
        if found is None:
            user, groups = cert_identity(x509.load_der_x509_certificate(der))
            found = _with_authenticated(user, groups)
            if len(self._by_der) >= _MEMO_LIMIT:
                self._by_der.clear()
            self._by_der[der] = found
        return found

    async def settle(self) -> None:
        """Wait until the caches the token checks read hold what etcd holds now."""
        if self.refresh is not None:
            await self.refresh()

    def token(self, authorization: str, *, settled: bool = False) -> Identity | None:
        """The identity of an `Authorization` header value; None when it is no bearer token.
        An unknown or invalid token raises AuthenticationError (StaleTokenError: `settle`,
        then ask again with `settled=True`)."""
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        value = value.strip()
        user = self.tokens.get(value) if value else None
        if user is not None:
            return _with_authenticated(user.name, user.groups, user.uid)
        if value and self.service_accounts is not None:
            try:
                found = self.service_accounts.authenticate(value, settled=settled)
            except StaleLookup:
                raise StaleTokenError("Unauthorized") from None
            except TokenError as exc:
                log.debug("service account token refused: %s", exc)
                raise AuthenticationError("Unauthorized") from None
            if found is not None:
                info = found.user
                return _with_authenticated(info.name, info.groups, info.uid, info.extra)
        raise AuthenticationError("Unauthorized")

    def review(
        self, token: str, audiences: tuple[str, ...] = (), *, settled: bool = False
    ) -> tuple[UserInfo | None, tuple[str, ...], str]:
        """A TokenReview's answer for `token`: (user or None, the audiences it is valid for,
        error). As kube's, a token no authenticator knows is "invalid bearer token" and a
        service account token's refusal is joined to it. StaleTokenError as `token`'s."""
        user = self.tokens.get(token) if token else None
        if user is not None:
            groups = user.groups
            if ALL_AUTHENTICATED not in groups:
                groups = (*groups, ALL_AUTHENTICATED)
            # A static token is valid for the apiserver's own audiences only.
            own = self.service_accounts.audiences if self.service_accounts else ()
            if audiences and own and not set(audiences) & set(own):
                return None, (), "token audiences are invalid for the target audiences"
            return UserInfo(user.name, user.uid, groups), audiences or own, ""
        if token and self.service_accounts is not None:
            try:
                found = self.service_accounts.authenticate(
                    token, audiences or None, settled=settled
                )
            except StaleLookup:
                raise StaleTokenError("Unauthorized") from None
            except TokenError as exc:
                return None, (), f"[invalid bearer token, {exc}]"
            if found is not None:
                info = found.user
                groups = info.groups
                if ALL_AUTHENTICATED not in groups:
                    groups = (*groups, ALL_AUTHENTICATED)
                return UserInfo(info.name, info.uid, groups, info.extra), found.audiences, ""
        return None, (), "invalid bearer token"

    # ---- per front end -------------------------------------------------------------------

    def grpc(self, context: grpc.aio.ServicerContext[Any, Any]) -> Identity:
        """Who sent the gRPC call whose handler got `context`."""
        auth = context.auth_context()
        for pem in auth.get("x509_pem_cert", ()) if auth else ():
            return self.certificate(pem)
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                text = value.decode() if isinstance(value, bytes) else str(value)
                found = self.token(text)
                if found is not None:
                    return found
        return ANONYMOUS_IDENTITY

    def rest(self, transport: Any, headers: Mapping[str, str]) -> Identity:
        """Who sent an HTTP request over `transport` (an asyncio transport) with `headers`."""
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        if isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
            # Only a certificate the handshake verified is returned (CERT_OPTIONAL).
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                return self.certificate_der(der)
        authorization = headers.get("Authorization")
        if authorization:
            found = self.token(authorization)
            if found is not None:
                return found
        return ANONYMOUS_IDENTITY


def token_file_line(token: str, user: str, uid: str, groups: tuple[str, ...] = ()) -> str:
    """One record of a token file, quoted as kube's format needs ("g1,g2")."""
    out = io.StringIO()
    row = [token, user, uid, ",".join(groups)] if groups else [token, user, uid]
    csv.writer(out, lineterminator=os.linesep).writerow(row)
    return out.getvalue()
