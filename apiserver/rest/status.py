"""Errors as Kubernetes' REST API reports them: a meta/v1 `Status` with code, reason, message.

`status_of(exc, resource)` is the one mapping from tinykube's error hierarchy (and from the
REST front end's own `RestError`, for failures only HTTP has: unknown paths, methods and media
types, oversized bodies) to the HTTP code and Status body kube-apiserver would send. Messages
that name a resource of a named API group get the group appended as Kubernetes prints them
(`replicasets.apps "web" not found`); Invalid errors carry one `details.causes` entry per field.
Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apiserver.auth.authn import AuthenticationError
from tinykube.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    DeadlineExceededError,
    DisruptionBudgetError,
    FieldError,
    ForbiddenError,
    InvalidError,
    MultipleBudgetsError,
    NotFoundError,
    PreconditionFailedError,
    RequestEntityTooLargeError,
    ResourceExhaustedError,
    ResourceExpiredError,
    TinykubeError,
    UnavailableError,
    UnimplementedError,
)
from tinykube.kinds import KindInfo


@dataclass
class RestError(Exception):
    """A failure of the HTTP layer itself, already in Kubernetes' terms."""

    code: int
    reason: str
    message: str
    # None leaves `details` out of the Status; kube-apiserver sends {} for unknown paths.
    details: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


# kube-apiserver's texts for the errors only the HTTP layer raises.
NOT_FOUND_MESSAGE = "the server could not find the requested resource"
METHOD_NOT_ALLOWED_MESSAGE = "the server does not allow this method on the requested resource"


def not_found_path() -> RestError:
    """An unknown path or resource (kube-apiserver's body, with empty details)."""
    return RestError(404, "NotFound", NOT_FOUND_MESSAGE, {})


def method_not_allowed(detail: str = "") -> RestError:
    message = METHOD_NOT_ALLOWED_MESSAGE + (f": {detail}" if detail else "")
    return RestError(405, "MethodNotAllowed", message, {})


def unsupported_media_type(accepted: list[str]) -> RestError:
    return RestError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def not_acceptable(accepted: list[str]) -> RestError:
    return RestError(
        406,
        "NotAcceptable",
        "only the following media types are accepted: " + ", ".join(accepted),
    )


def too_large(limit: int) -> RestError:
    return RestError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


@dataclass(frozen=True)
class Resource:
    """What a request was about, to fill a Status' details as Kubernetes does."""

    info: KindInfo | None = None
    name: str = ""
    # Subresource, as in "pods/binding": Conflicts on it name it.
    subresource: str = ""

    @property
    def qualified(self) -> str:
        """`pods`, `replicasets.apps`."""
        if self.info is None:
            return ""
        return f"{self.info.plural}.{self.info.group}" if self.info.group else self.info.plural


# Kubernetes' cause reasons by the leading words of a field error (apimachinery's
# field.ErrorType strings, which tinykube's validation messages begin with).
_CAUSE_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Invalid value", "FieldValueInvalid"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Forbidden", "FieldValueForbidden"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Not found", "FieldValueNotFound"),
    ("Internal error", "InternalError"),
)


def cause_of(error: FieldError) -> dict[str, str]:
    reason = next(
        (r for prefix, r in _CAUSE_REASONS if error.message.startswith(prefix)),
        "FieldValueInvalid",
    )
    return {"reason": reason, "message": error.message, "field": error.field}


def _qualify(message: str, resource: Resource) -> str:
    """`replicasets "x" ...` as `replicasets.apps "x" ...` (tinykube's gRPC messages name the
    bare plural; Kubernetes qualifies resources of named groups)."""
    info = resource.info
    if info is None or not info.group:
        return message
    bare = f'{info.plural} "'
    at = message.find(bare)
    if at < 0 or message[at:].startswith(f"{info.plural}.{info.group}"):
        return message
    return message[:at] + f'{info.plural}.{info.group} "' + message[at + len(bare) :]


def _invalid_message(exc: InvalidError, resource: Resource) -> str:
    info = resource.info
    # Kubernetes prints several field errors as one bracketed, comma-separated aggregate.
    if info is not None and exc.causes and exc.message.startswith(f'{info.qualified_kind} "'):
        head = exc.message.split(" is invalid: ", 1)[0]
        texts = [str(c) for c in exc.causes]
        body = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
        return f"{head} is invalid: {body}"
    return exc.message


def _details(resource: Resource, *, kind: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if resource.name:
        details["name"] = resource.name
    info = resource.info
    if info is not None:
        if info.group:
            details["group"] = info.group
        details["kind"] = kind if kind is not None else info.plural
    return details


def _named(res: Resource, message: str) -> Resource:
    """`res` with the object's name taken from a message that quotes it after the resource
    (`pods "web" already exists`): a POST names its object only in the body."""
    if res.name or res.info is None:
        return res
    for head in (f'{res.qualified} "', f'{res.info.plural} "'):
        at = message.find(head)
        if at >= 0:
            return Resource(res.info, message[at + len(head) :].split('"', 1)[0], res.subresource)
    return res


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A failure Status in kube-apiserver's field order; `details` None is left out."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_body(code: int = 200, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    body["status"] = "Success"
    if details:
        body["details"] = details
    body["code"] = code
    return body


def _budget_refusal(exc: DisruptionBudgetError) -> tuple[int, dict[str, Any], dict[str, str]]:
    details: dict[str, Any] = {"causes": [{"reason": exc.reason, "message": exc.cause}]}
    headers = {}
    if exc.retry_after_seconds > 0:
        details["retryAfterSeconds"] = exc.retry_after_seconds
        headers["Retry-After"] = str(exc.retry_after_seconds)
    return 429, status_body(429, "TooManyRequests", exc.message, details), headers


def status_of(
    exc: BaseException, resource: Resource | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(HTTP code, Status body, extra headers) for an error raised while serving `resource`."""
    res = resource or Resource()
    if isinstance(exc, RestError):
        return exc.code, status_body(exc.code, exc.reason, exc.message, exc.details), exc.headers
    if isinstance(exc, TinykubeError) and exc.rest_status is not None:
        return int(exc.rest_status["code"]), exc.rest_status, {}
    if isinstance(exc, AuthenticationError):
        return 401, status_body(401, "Unauthorized", exc.message), {}
    if isinstance(exc, RequestEntityTooLargeError):
        return 413, status_body(413, "RequestEntityTooLarge", exc.message), {}
    if isinstance(exc, BadRequestError):
        return 400, status_body(400, "BadRequest", exc.message), {}
    if isinstance(exc, InvalidError):
        if not exc.causes:
            # Not about an object's fields (a selector, a resourceVersion): unreadable input.
            return 400, status_body(400, "BadRequest", exc.message), {}
        if not res.name and res.info is not None:
            # A POST names its object only in the body; the message carries the name.
            head = f'{res.info.qualified_kind} "'
            if exc.message.startswith(head):
                res = Resource(res.info, exc.message[len(head) :].split('"', 1)[0])
        details = _details(res, kind=res.info.kind if res.info else None)
        details["causes"] = [cause_of(c) for c in exc.causes]
        return 422, status_body(422, "Invalid", _invalid_message(exc, res), details), {}
    if isinstance(exc, DisruptionBudgetError):
        # kube-apiserver's eviction: TooManyRequests with the budget's cause; Retry-After only
        # when it suggests one (the budget waits for its controller).
        return _budget_refusal(exc)
    if isinstance(exc, MultipleBudgetsError):
        # Kubernetes returns this as a bare Status (no reason, no details) with code 500.
        body = status_body(500, "", exc.message)
        del body["reason"]
        return 500, body, {}
    about: dict[str, Any] | None = None
    if isinstance(exc, TinykubeError) and exc.subject is not None:
        # About another object than the request's (a pod's missing namespace).
        group, plural, name = exc.subject
        about = {"name": name, **({"group": group} if group else {}), "kind": plural}
        res = Resource()
    if isinstance(exc, NotFoundError):
        body = status_body(404, "NotFound", _qualify(exc.message, res), about or _details(res))
        return 404, body, {}
    if isinstance(exc, ForbiddenError):
        res = _named(res, exc.message)
        forbidden: dict[str, Any] = dict(exc.details) if exc.details else (about or _details(res))
        if exc.causes:
            forbidden["causes"] = [
                {"reason": reason, "message": message, "field": field}
                for reason, message, field in exc.causes
            ]
        return 403, status_body(403, "Forbidden", _qualify(exc.message, res), forbidden), {}
    if isinstance(exc, AlreadyExistsError):
        res = _named(res, exc.message)
        body = status_body(409, "AlreadyExists", _qualify(exc.message, res), _details(res))
        return 409, body, {}
    if isinstance(exc, ConflictError | PreconditionFailedError):
        return 409, status_body(409, "Conflict", _qualify(exc.message, res), _details(res)), {}
    if isinstance(exc, ResourceExpiredError):
        return 410, status_body(410, "Expired", exc.message), {}
    if isinstance(exc, ResourceExhaustedError):
        details = {"retryAfterSeconds": 1}
        body = status_body(429, "TooManyRequests", exc.message, details)
        return 429, body, {"Retry-After": "1"}
    if isinstance(exc, UnavailableError):
        return 503, status_body(503, "ServiceUnavailable", exc.message), {}
    if isinstance(exc, DeadlineExceededError):
        details = {"retryAfterSeconds": 1}
        return 504, status_body(504, "Timeout", exc.message, details), {}
    if isinstance(exc, UnimplementedError):
        return 405, status_body(405, "MethodNotAllowed", exc.message, {}), {}
    if isinstance(exc, TinykubeError):
        message = f"Internal error occurred: {exc.message}"
        return 500, status_body(500, "InternalError", message), {}
    message = f"Internal error occurred: {type(exc).__name__}: {exc}"
    return 500, status_body(500, "InternalError", message), {}
