"""ServiceAccount tokens: JWTs the apiserver signs (TokenRequest) and accepts as bearer tokens.

As kube-apiserver's pkg/serviceaccount (jwt.go, claims.go):
- `TokenIssuer` signs with `--service-account-signing-key-file` (RSA: RS256, EC P-256: ES256;
  `tinykube up` makes an RSA `sa.key`), header `{"alg", "kid"}` where kid is the unpadded
  base64url SHA-256 of the public key's DER (kube's keyIDFromPublicKey). Claims: `iss` (the
  first `--service-account-issuer`), `sub` `system:serviceaccount:<ns>:<name>`, `aud`, `exp`,
  `iat`, `nbf`, `jti` (a UUID) and the private `kubernetes.io` claim: namespace, serviceaccount
  {name, uid} and, for a bound token, pod {name, uid} (plus node {name, uid} of the pod's node),
  secret {name, uid} or node {name, uid}.
- `TokenAuthenticator` accepts a token whose `iss` is one of the issuers (others are not ours:
  `authenticate` answers None, as kube's hasCorrectIssuer), signed by one of the
  `--service-account-key-file` keys, within exp/nbf give or take kube's one-minute leeway,
  with an audience among the requested ones (the apiserver's `--api-audiences`), whose
  ServiceAccount still exists with the same uid and whose bound pod, secret or node still exists
  with the same uid. Errors carry kube's messages ("service account token has expired", "token
  audiences [...] is invalid for the target audiences [...]", "service account token has been
  invalidated"...). The user is the account's: groups `system:serviceaccounts` and
  `system:serviceaccounts:<ns>`, uid the account's, extra pod-name/pod-uid, node-name/node-uid
  and credential-id `JTI=<jti>` (`authentication.kubernetes.io/...`).
- Legacy tokens (iss `kubernetes/serviceaccount`, the ones the controller manager writes into
  kubernetes.io/service-account-token Secrets; no expiry, no audience) are accepted while their
  Secret exists and holds that very token and their account keeps its uid, as kube's legacy
  validator.
- `jwks()` / `openid_configuration()`: the OIDC discovery documents of the issuer.

The JWT encoding and keys are tinykube/jwt.py's (shared with the controller manager). Lookups
of the account, pod, secret and node read the watch caches through `ObjectLookup`
(synchronous dictionary reads); when a token issued within the last minute names an object
they miss or hold with another uid, `StaleLookup` tells the caller to let the caches catch up
with etcd and ask again (`settled=True`), as kube's token getter falls back from its informer
to a live read. A token's verified claims are memoized (bounded), so a request pays one
signature check per token (~0.2 ms for RS256), then dictionary lookups (~20 us). Pure apart
from the clock; runs on the event loop.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from tinykube.clock import Clock
from tinykube.jwt import (
    LEGACY_ISSUER,
    LEGACY_PREFIX,
    KeyFileError,
    Parsed,
    PrivateKey,
    PublicKey,
    algorithm_of,
    b64url,
    b64url_decode,
    encode,
    jwk,
    key_id,
    load_private_key,
    load_public_keys,
    parse,
    public_key_from_jwk,
    sign,
    verify,
)

__all__ = [
    "KeyFileError",
    "Parsed",
    "PrivateKey",
    "PublicKey",
    "algorithm_of",
    "b64url",
    "b64url_decode",
    "encode",
    "jwk",
    "key_id",
    "load_private_key",
    "load_public_keys",
    "parse",
    "public_key_from_jwk",
    "sign",
    "verify",
]

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# TokenRequest's defaults and bounds (pkg/apis/authentication: defaults and validation).
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32
# go-jose's jwt.DefaultLeeway: exp and nbf are checked give or take a minute.
LEEWAY_SECONDS = 60
SERVICE_ACCOUNT_GROUP = "system:serviceaccounts"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
EXTRA_PREFIX = "authentication.kubernetes.io/"
POD_NAME_KEY = EXTRA_PREFIX + "pod-name"
POD_UID_KEY = EXTRA_PREFIX + "pod-uid"
NODE_NAME_KEY = EXTRA_PREFIX + "node-name"
NODE_UID_KEY = EXTRA_PREFIX + "node-uid"
CREDENTIAL_ID_KEY = EXTRA_PREFIX + "credential-id"
# go-jose's message for a signature no key verifies.
BAD_SIGNATURE = "go-jose/go-jose: error in cryptographic primitive"
INVALIDATED = "service account token has been invalidated"
_MEMO_LIMIT = 4096
# A token issued this recently may name objects the caches have not seen yet (StaleLookup).
FRESH_SECONDS = 60


class TokenError(ValueError):
    """A token that is ours (our issuer) and is not valid; the message is kube's."""


class StaleLookup(TokenError):
    """A recent token names an object the watch caches do not hold (yet) or hold with another
    uid: the cache may lag etcd (another apiserver minted the token for an object made a moment
    ago), so the caller lets the caches catch up and asks again with `settled=True`, as kube's
    token getter falls back from its informer to a live read."""


# ---- issuing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    name: str
    uid: str


def claims(
    *,
    issuer: str,
    namespace: str,
    service_account: Ref,
    audiences: Sequence[str],
    now: datetime,
    expiration_seconds: int,
    pod: Ref | None = None,
    secret: Ref | None = None,
    node: Ref | None = None,
    jti: str | None = None,
) -> dict[str, Any]:
    """kube's Claims(): the public and private claims of a service account token."""
    issued = int(now.timestamp())
    private: dict[str, Any] = {
        "namespace": namespace,
        "serviceaccount": {"name": service_account.name, "uid": service_account.uid},
    }
    if pod is not None:
        private["pod"] = {"name": pod.name, "uid": pod.uid}
    elif secret is not None:
        private["secret"] = {"name": secret.name, "uid": secret.uid}
    if node is not None and secret is None:
        # the node a bound pod runs on, or the node the token is bound to
        private["node"] = {"name": node.name, "uid": node.uid}
    return {
        "iss": issuer,
        "sub": f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{service_account.name}",
        "aud": list(audiences),
        "exp": issued + expiration_seconds,
        "iat": issued,
        "nbf": issued,
        "jti": jti or str(uuid.uuid4()),
        "kubernetes.io": private,
    }


@dataclass
class TokenIssuer:
    """Signs service account tokens with the apiserver's key."""

    key: PrivateKey
    issuer: str = DEFAULT_ISSUER
    # --api-audiences: what a TokenRequest without audiences gets.
    audiences: tuple[str, ...] = ()
    # --service-account-max-token-expiration (0: no bound): longer requests are shortened.
    max_expiration_seconds: int = 0

    def sign(self, token_claims: Mapping[str, Any]) -> str:
        return encode(token_claims, self.key)


# ---- authenticating ----------------------------------------------------------------------------


@dataclass(frozen=True)
class UserInfo:
    """An authenticated user as kube's user.Info: name, uid, groups, extra."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def extra_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.extra}


@dataclass(frozen=True)
class Authenticated:
    user: UserInfo
    # The token's audiences that the request's audiences accepted.
    audiences: tuple[str, ...]


@dataclass(frozen=True)
class Found:
    """What a lookup found of an object: its uid and when it was marked deleted (None: not);
    for a Secret, its data's `token` (legacy tokens must match it)."""

    uid: str
    deleted_at: datetime | None = None
    token: bytes = b""


class ObjectLookup(Protocol):
    """The apiserver's view of the objects a token names (its watch caches)."""

    def service_account(self, namespace: str, name: str) -> Found | None: ...

    def pod(self, namespace: str, name: str) -> Found | None: ...

    def secret(self, namespace: str, name: str) -> Found | None: ...

    def node(self, name: str) -> Found | None: ...


def go_quote_list(values: Iterable[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def _ref(value: Any) -> Ref | None:
    if not isinstance(value, Mapping):
        return None
    name, uid = value.get("name", ""), value.get("uid", "")
    return Ref(name if isinstance(name, str) else "", uid if isinstance(uid, str) else "")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass
class TokenAuthenticator:
    """Accepts service account tokens of `issuers`, signed by one of `keys`."""

    issuers: tuple[str, ...]
    keys: Sequence[PublicKey]
    # --api-audiences: the audiences a token must have one of when the caller names none.
    audiences: tuple[str, ...]
    lookup: ObjectLookup
    clock: Clock = field(default_factory=Clock)
    _verified: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_kid = {key_id(k): k for k in self.keys}

    def authenticate(
        self, token: str, audiences: Sequence[str] | None = None, *, settled: bool = False
    ) -> Authenticated | None:
        """The token's user; None when the token is not a JWT of our issuers (someone else's),
        TokenError when it is ours and not valid now: StaleLookup when a recent token's objects
        are missing or differ and the caches were not `settled` (caught up with etcd)."""
        verified = self._verified.get(token)
        if verified is None:
            parsed = parse(token)
            if parsed is None:
                return None
            issuer = parsed.claims.get("iss")
            if issuer not in self.issuers and issuer != LEGACY_ISSUER:
                return None
            self._check_signature(parsed)
            verified = parsed.claims
            if len(self._verified) >= _MEMO_LIMIT:
                self._verified.clear()
            self._verified[token] = verified
        if verified.get("iss") == LEGACY_ISSUER:
            return self._validate_legacy(token, verified, audiences)
        return self._validate(verified, audiences, settled)

    def _check_signature(self, parsed: Parsed) -> None:
        alg = parsed.header.get("alg")
        kid = parsed.header.get("kid")
        candidates = list(self.keys)
        if isinstance(kid, str) and kid in self._by_kid:
            candidates = [self._by_kid[kid]]
        for key in candidates:
            if isinstance(alg, str) and verify(key, alg, parsed.signing_input, parsed.signature):
                return
        raise TokenError(BAD_SIGNATURE)

    def _validate_legacy(
        self, token: str, c: Mapping[str, Any], audiences: Sequence[str] | None
    ) -> Authenticated:
        """A token of a kubernetes.io/service-account-token Secret (kube's legacy validator):
        the Secret must still exist and hold this very token, and the account its uid."""
        wanted = list(audiences) if audiences else list(self.audiences)
        accepted = tuple(a for a in self.audiences if a in wanted)
        if not accepted and self.audiences:
            raise TokenError(
                f"token audiences {go_quote_list(self.audiences)} is invalid for the target "
                f"audiences {go_quote_list(wanted)}"
            )

        def text(key: str) -> str:
            value = c.get(LEGACY_PREFIX + key, "")
            return value if isinstance(value, str) else ""

        namespace, secret_name = text("namespace"), text("secret.name")
        name, uid = text("service-account.name"), text("service-account.uid")
        secret = self.lookup.secret(namespace, secret_name)
        if secret is None or secret.deleted_at is not None:
            raise TokenError("Token has been invalidated")
        if secret.token != token.encode():
            raise TokenError("Token does not match server's copy")
        found = self.lookup.service_account(namespace, name)
        if found is None:
            raise TokenError(f'serviceaccounts "{name}" not found')
        if found.deleted_at is not None:
            raise TokenError(f"ServiceAccount {namespace}/{name} has been deleted")
        if found.uid != uid:
            raise TokenError(f"ServiceAccount UID ({found.uid}) does not match claim ({uid})")
        user = UserInfo(
            name=f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
            uid=uid,
            groups=(SERVICE_ACCOUNT_GROUP, f"{SERVICE_ACCOUNT_GROUP}:{namespace}"),
        )
        return Authenticated(user, accepted)

    def _validate(
        self, c: Mapping[str, Any], audiences: Sequence[str] | None, settled: bool
    ) -> Authenticated:
        now = self.clock.now().timestamp()
        exp, nbf, iat = _number(c.get("exp")), _number(c.get("nbf")), _number(c.get("iat"))
        # Missing or different objects: final for an old token, maybe the cache's lag for a
        # recent one.
        gone = TokenError if settled or iat is None or iat < now - FRESH_SECONDS else StaleLookup
        if exp is not None and now - LEEWAY_SECONDS > exp:
            raise TokenError("service account token has expired")
        if nbf is not None and now + LEEWAY_SECONDS < nbf:
            raise TokenError("service account token is not valid yet")
        if iat is not None and now + LEEWAY_SECONDS < iat:
            raise TokenError(
                "service account token claims could not be validated due to unexpected "
                "validation error"
            )
        aud = c.get("aud")
        token_auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        token_auds = [a for a in token_auds if isinstance(a, str)] or list(self.audiences)
        wanted = list(audiences) if audiences else list(self.audiences)
        accepted = tuple(a for a in token_auds if a in wanted)
        if not accepted and self.audiences:
            raise TokenError(
                f"token audiences {go_quote_list(token_auds)} is invalid for the target "
                f"audiences {go_quote_list(wanted)}"
            )
        private = c.get("kubernetes.io")
        if not isinstance(private, Mapping):
            private = {}
        namespace = private.get("namespace", "")
        namespace = namespace if isinstance(namespace, str) else ""
        sa = _ref(private.get("serviceaccount")) or Ref("", "")
        now_dt = datetime.fromtimestamp(now - LEEWAY_SECONDS, UTC)
        found = self.lookup.service_account(namespace, sa.name)
        if found is None:
            raise gone(f'serviceaccounts "{sa.name}" not found')
        if found.deleted_at is not None and found.deleted_at < now_dt:
            raise gone(f"service account {namespace}/{sa.name} has been deleted")
        if found.uid != sa.uid:
            raise gone(f"service account UID ({found.uid}) does not match claim ({sa.uid})")
        secret = _ref(private.get("secret"))
        if secret is not None:
            obj = self.lookup.secret(namespace, secret.name)
            if obj is None or (obj.deleted_at is not None and obj.deleted_at < now_dt):
                raise gone(INVALIDATED)
            if obj.uid != secret.uid:
                raise gone(
                    f"secret UID ({obj.uid}) does not match service account secret ref claim "
                    f"({secret.uid})"
                )
        extra: list[tuple[str, tuple[str, ...]]] = []
        pod = _ref(private.get("pod"))
        if pod is not None:
            obj = self.lookup.pod(namespace, pod.name)
            if obj is None or (obj.deleted_at is not None and obj.deleted_at < now_dt):
                raise gone(INVALIDATED)
            if obj.uid != pod.uid:
                raise gone(
                    f"pod UID ({obj.uid}) does not match service account pod ref claim ({pod.uid})"
                )
            extra += [(POD_NAME_KEY, (pod.name,)), (POD_UID_KEY, (pod.uid,))]
        node = _ref(private.get("node"))
        if node is not None and pod is None:
            # Bound to the node itself: it must still exist with the same uid.
            found_node = self.lookup.node(node.name)
            if found_node is None or (
                found_node.deleted_at is not None and found_node.deleted_at < now_dt
            ):
                raise gone(INVALIDATED)
            if found_node.uid != node.uid:
                raise gone(
                    f"node UID ({found_node.uid}) does not match service account node ref "
                    f"claim ({node.uid})"
                )
        if node is not None:
            extra += [(NODE_NAME_KEY, (node.name,)), (NODE_UID_KEY, (node.uid,))]
        jti = c.get("jti")
        if isinstance(jti, str) and jti:
            extra.append((CREDENTIAL_ID_KEY, (f"JTI={jti}",)))
        user = UserInfo(
            name=f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{sa.name}",
            uid=sa.uid,
            groups=(SERVICE_ACCOUNT_GROUP, f"{SERVICE_ACCOUNT_GROUP}:{namespace}"),
            extra=tuple(sorted(extra)),
        )
        return Authenticated(user, accepted)


# ---- OIDC discovery ----------------------------------------------------------------------------


def jwks(keys: Iterable[PublicKey]) -> dict[str, Any]:
    """/openid/v1/jwks: every verification key, once."""
    seen: dict[str, dict[str, str]] = {}
    for key in keys:
        doc = jwk(key)
        seen.setdefault(doc["kid"], doc)
    return {"keys": list(seen.values())}


def openid_configuration(issuer: str, jwks_uri: str, keys: Iterable[PublicKey]) -> dict[str, Any]:
    """/.well-known/openid-configuration as kube serves it for service account tokens."""
    algs = sorted({algorithm_of(k) for k in keys})
    return {
        "issuer": issuer,
        "jwks_uri": jwks_uri or issuer.rstrip("/") + "/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": algs,
    }
