"""The REST API's authentication and authorization endpoints, answered and never stored.

- POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token: TokenRequest
  (apiserver/auth/tokenrequest.py); 404 when the apiserver has no signing key, as kube's
  without --service-account-signing-key-file.
- POST /apis/authentication.k8s.io/v1/tokenreviews: TokenReview of `spec.token` for
  `spec.audiences` (default: the apiserver's --api-audiences), as a webhook or proxy asks it.
- POST /apis/authentication.k8s.io/v1/selfsubjectreviews: who the requester is
  (`kubectl auth whoami`).
- POST /apis/authorization.k8s.io/v1/subjectaccessreviews and
  /namespaces/<ns>/localsubjectaccessreviews: may that user do that (apiserver/auth/review.py).
- GET /.well-known/openid-configuration and /openid/v1/jwks: the service account issuer's OIDC
  discovery documents (authorized as non-resource URLs, which kube's bootstrap role
  system:service-account-issuer-discovery grants to every service account).

Every answer is 201 Created (the discovery documents 200) in JSON; bodies are JSON or YAML.
Authentication and authorization of the request itself happened in the enforcer before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from apiserver.auth.authn import Authenticator, StaleTokenError
from apiserver.auth.authorizer import Authorizer, Identity
from apiserver.auth.review import (
    AUTHENTICATION_GROUP,
    subject_access_review,
    token_review_answer,
)
from apiserver.auth.tokenrequest import TokenRequests
from apiserver.auth.tokens import PublicKey, jwks, openid_configuration
from apiserver.requestcontext import RequestContext
from apiserver.rest import codec as codecs
from apiserver.rest.codec import dumps
from apiserver.rest.discovery import (
    LOCAL_SUBJECT_ACCESS_REVIEW,
    SELF_SUBJECT_REVIEW,
    SUBJECT_ACCESS_REVIEW,
    TOKEN_REVIEW,
    Resource,
)
from apiserver.rest.kubeproto import MAGIC, fields
from apiserver.rest.status import RestError, cause_of, method_not_allowed, not_found_path
from tinykube.errors import BadRequestError, InvalidError

OPENID_CONFIGURATION_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
JWKS_TYPE = "application/jwk-set+json"

Requester = Callable[[web.Request], Identity]


def _created(data: Any) -> web.Response:
    return web.Response(status=201, body=dumps(data), headers={"Content-Type": "application/json"})


def _invalid(exc: InvalidError, group: str, kind: str, name: str = "") -> RestError:
    details: dict[str, Any] = {"group": group, "kind": kind}
    if name:
        details["name"] = name
    details["causes"] = [cause_of(c) for c in exc.causes]
    return RestError(422, "Invalid", exc.message, details)


# ---- protobuf bodies ---------------------------------------------------------------------------
# kubectl's typed client posts a TokenRequest as protobuf (`kubectl create token`), client-go
# webhooks may post TokenReviews and SubjectAccessReviews so: the fields read here are
# k8s.io/api's generated.proto numbers (authentication/v1, authorization/v1).


def _text(value: int | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ""


def _submessage(data: bytes, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in fields(data):
        if number in names and isinstance(value, bytes):
            out[names[number]] = _text(value)
    return out


def _metadata(data: bytes) -> dict[str, Any]:
    return _submessage(data, {1: "name", 3: "namespace"})


def _token_request_spec(data: bytes) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            spec.setdefault("audiences", []).append(_text(value))
        elif number == 4 and isinstance(value, int):
            spec["expirationSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and isinstance(value, bytes):
            spec["boundObjectRef"] = _submessage(
                value, {1: "kind", 2: "apiVersion", 3: "name", 4: "uid"}
            )
    return spec


def _token_review_spec(data: bytes) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for number, value in fields(data):
        if number == 1:
            spec["token"] = _text(value)
        elif number == 2:
            spec.setdefault("audiences", []).append(_text(value))
    return spec


_RESOURCE_ATTRIBUTES = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}


def _access_review_spec(data: bytes) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for number, value in fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            spec["resourceAttributes"] = _submessage(value, _RESOURCE_ATTRIBUTES)
        elif number == 2:
            spec["nonResourceAttributes"] = _submessage(value, {1: "path", 2: "verb"})
        elif number == 3:
            spec["user"] = _text(value)
        elif number == 4:
            spec.setdefault("groups", []).append(_text(value))
        elif number == 6:
            spec["uid"] = _text(value)
    return spec


def _no_spec(data: bytes) -> dict[str, Any]:
    return {}


_SPECS: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "TokenRequest": _token_request_spec,
    "TokenReview": _token_review_spec,
    "SubjectAccessReview": _access_review_spec,
    "LocalSubjectAccessReview": _access_review_spec,
    "SelfSubjectReview": _no_spec,  # `kubectl auth whoami`: nothing asked
}


def from_protobuf(body: bytes) -> dict[str, Any]:
    """A protobuf TokenRequest, TokenReview or (Local)SubjectAccessReview as its JSON form."""
    if not body.startswith(MAGIC):
        raise BadRequestError("the protobuf body does not start with the Kubernetes magic bytes")
    raw, api_version, kind = b"", "", ""
    for number, value in fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            meta = _submessage(value, {1: "apiVersion", 2: "kind"})
            api_version, kind = meta.get("apiVersion", ""), meta.get("kind", "")
        elif number == 2 and isinstance(value, bytes):
            raw = value
    read_spec = _SPECS.get(kind)
    if read_spec is None:
        raise RestError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types "
            f"include: {', '.join(codecs.BODY_TYPES)}",
        )
    out: dict[str, Any] = {"kind": kind, "apiVersion": api_version}
    for number, value in fields(raw):
        if number == 1 and isinstance(value, bytes):
            out["metadata"] = _metadata(value)
        elif number == 2 and isinstance(value, bytes):
            out["spec"] = read_spec(value)
    return out


def user_info(who: Identity) -> dict[str, Any]:
    """authentication/v1 UserInfo: username, uid, groups, extra (empty ones left out)."""
    info: dict[str, Any] = {"username": who.name}
    if who.uid:
        info["uid"] = who.uid
    info["groups"] = list(who.groups)
    if who.extra:
        info["extra"] = {k: list(v) for k, v in who.extra}
    return info


class AuthAPI:
    """The endpoints above over one authenticator, authorizer and (optional) token issuer."""

    def __init__(
        self,
        *,
        max_request_bytes: int,
        authenticator: Authenticator,
        authorizer: Authorizer,
        token_requests: TokenRequests | None = None,
        issuer: str = "",
        keys: tuple[PublicKey, ...] = (),
        jwks_uri: str = "",
    ) -> None:
        self.max_request_bytes = max_request_bytes
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.token_requests = token_requests
        self.issuer = issuer
        self.keys = keys
        self.jwks_uri = jwks_uri

    @property
    def discovery_paths(self) -> list[str]:
        return [OPENID_CONFIGURATION_PATH, JWKS_PATH] if self.keys and self.issuer else []

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if request.method != "POST":
            raise method_not_allowed()
        limit = self.max_request_bytes
        body = await request.read()
        if len(body) > limit:
            raise RestError(
                413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}"
            )
        media = codecs.content_type_of(request.headers.get("Content-Type", "")) or codecs.JSON
        if media == codecs.PROTOBUF:
            return from_protobuf(body)
        if media not in codecs.BODY_TYPES:
            raise RestError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(codecs.BODY_TYPES)}",
            )
        return codecs.parse_object_body(body, media)

    # ---- serviceaccounts/token -----------------------------------------------------------------

    async def token(
        self, request: web.Request, namespace: str, name: str, identity: Identity | None
    ) -> web.Response:
        """POST serviceaccounts/NAME/token, for `identity` (None: --insecure)."""
        if self.token_requests is None:
            raise not_found_path()
        body = await self._body(request)
        dry_run = "All" in request.query.getall("dryRun", [])
        ctx = RequestContext(identity=identity, dry_run=dry_run)
        try:
            answer = await self.token_requests.create(namespace, name, body, ctx)
        except InvalidError as exc:
            if not exc.causes:
                raise
            raise _invalid(exc, AUTHENTICATION_GROUP, "TokenRequest", name) from None
        return _created(answer)

    # ---- reviews --------------------------------------------------------------------------------

    async def review(
        self,
        request: web.Request,
        resource: Resource,
        namespace: str | None,
        rest: list[str],
        requester: Requester,
    ) -> web.Response:
        if len(rest) != 1:
            raise not_found_path()
        if resource.namespaced != (namespace is not None):
            raise not_found_path()
        body = await self._body(request)
        if resource is TOKEN_REVIEW:
            return await self._token_review(body)
        if resource is SELF_SUBJECT_REVIEW:
            return self._self_subject_review(body, requester(request))
        if resource is SUBJECT_ACCESS_REVIEW or resource is LOCAL_SUBJECT_ACCESS_REVIEW:
            try:
                answer = subject_access_review(self.authorizer, body, namespace)
            except InvalidError as exc:
                if not exc.causes:
                    raise
                raise _invalid(exc, "authorization.k8s.io", resource.kind) from None
            return _created(answer)
        raise not_found_path()

    async def _token_review(self, body: Mapping[str, Any]) -> web.Response:
        spec = body.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        token = spec.get("token", "")
        if not isinstance(token, str) or not token:
            # kube's validation: a review without a token is refused.
            exc = InvalidError(
                'TokenReview.authentication.k8s.io "" is invalid: spec.token: Required value',
                [],
            )
            raise RestError(
                422,
                "Invalid",
                exc.message,
                {
                    "group": AUTHENTICATION_GROUP,
                    "kind": "TokenReview",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value",
                            "field": "spec.token",
                        }
                    ],
                },
            )
        raw = spec.get("audiences")
        audiences = tuple(a for a in raw if isinstance(a, str)) if isinstance(raw, list) else ()
        try:
            user, accepted, error = self.authenticator.review(token, audiences)
        except StaleTokenError:
            await self.authenticator.settle()
            user, accepted, error = self.authenticator.review(token, audiences, settled=True)
        shown: dict[str, Any] | None = None
        if user is not None:
            shown = {"username": user.name}
            if user.uid:
                shown["uid"] = user.uid
            shown["groups"] = list(user.groups)
            if user.extra:
                shown["extra"] = user.extra_dict()
        return _created(token_review_answer(body, shown, accepted, error))

    def _self_subject_review(self, body: Mapping[str, Any], who: Identity) -> web.Response:
        metadata = body.get("metadata")
        return _created(
            {
                "kind": "SelfSubjectReview",
                "apiVersion": f"{AUTHENTICATION_GROUP}/v1",
                "metadata": dict(metadata) if isinstance(metadata, Mapping) else {},
                "status": {"userInfo": user_info(who)},
            }
        )

    # ---- OIDC discovery -------------------------------------------------------------------------

    def discovery(self, request: web.Request, path: str) -> web.Response:
        if not self.discovery_paths:
            raise not_found_path()
        if request.method not in ("GET", "HEAD"):
            raise method_not_allowed()
        headers = {"Cache-Control": "public, max-age=3600"}
        if path == OPENID_CONFIGURATION_PATH:
            doc = openid_configuration(self.issuer, self.jwks_uri, self.keys)
            return web.Response(
                body=dumps(doc), headers={**headers, "Content-Type": "application/json"}
            )
        if path == JWKS_PATH:
            return web.Response(
                body=dumps(jwks(self.keys)), headers={**headers, "Content-Type": JWKS_TYPE}
            )
        raise not_found_path()
