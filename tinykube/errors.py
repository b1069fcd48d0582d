"""The one error hierarchy of tinykube, and its two mappings to and from gRPC status codes.

Servers raise these and convert them in one place (`answer_with`; `abort_with` ends a call at
once); clients convert a failed RPC back with `from_rpc_error` and raise the result `from` the
original error, so the cause chain keeps the wire-level detail. Expected outcomes inside a
process (a filter rejecting a node) use typed statuses, not exceptions; these are for failures
that cross an API boundary.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn, Self

import grpc


@dataclass(frozen=True)
class FieldError:
    """One invalid field: its path in Kubernetes JSON spelling and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class TinykubeError(Exception):
    """Base of every error that crosses an API boundary."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN
    # What the error is about when that is not the request's own object (a pod's create
    # refused because its namespace is missing): (group, plural, name), for the REST Status'
    # details. Server side only; not carried over gRPC.
    subject: tuple[str, str, str] | None = None
    # The REST Status to send as it is, when another server chose it (an admission webhook's
    # refusal: its code, reason and details). Server side only.
    rest_status: dict[str, Any] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def about(self, group: str, plural: str, name: str) -> Self:
        """Set `subject` and return the error (for `raise NotFoundError(...).about(...)`)."""
        self.subject = (group, plural, name)
        return self


class InvalidError(TinykubeError):
    """The request is malformed: INVALID_ARGUMENT, naming every bad field."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, message: str, causes: list[FieldError] | None = None) -> None:
        super().__init__(message)
        self.causes: list[FieldError] = list(causes or [])

    @classmethod
    def for_object(cls, kind: str, name: str, causes: list[FieldError]) -> InvalidError:
        """Kubernetes' message shape: `Pod "web" is invalid: spec.containers: Required value`."""
        detail = "; ".join(str(c) for c in causes) if causes else "invalid"
        shown = f'"{name}"' if name else '""'
        return cls(f"{kind} {shown} is invalid: {detail}", causes)


class BadRequestError(InvalidError):
    """A request that cannot be read at all (malformed JSON, YAML or patch, a bad query
    parameter): INVALID_ARGUMENT over gRPC, 400 BadRequest over REST, where InvalidError is
    422 Invalid with one cause per bad field."""


class RequestEntityTooLargeError(InvalidError):
    """A request, or the object it would store, is over a size limit: INVALID_ARGUMENT over
    gRPC (not RESOURCE_EXHAUSTED, which reads as overload and may be retried: a retry cannot
    make it smaller), 413 RequestEntityTooLarge over REST."""


class NotFoundError(TinykubeError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(TinykubeError):
    code = grpc.StatusCode.ALREADY_EXISTS


class ConflictError(TinykubeError):
    """Optimistic concurrency failed: the object changed since it was read."""

    code = grpc.StatusCode.ABORTED


class PreconditionFailedError(TinykubeError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExpiredError(TinykubeError):
    """The requested resourceVersion was compacted away: the client must relist."""

    code = grpc.StatusCode.OUT_OF_RANGE


class UnavailableError(TinykubeError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(TinykubeError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class ResourceExhaustedError(TinykubeError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


# Trailing metadata of a RESOURCE_EXHAUSTED from the apiserver's in-flight limit: how long to
# wait before sending the request again, in milliseconds (gRPC's server pushback key, gRFC A6).
# Only the limiter sends it, and it refuses a request before running it, so a call answered
# with it may be sent again whatever it was; other RESOURCE_EXHAUSTED answers (an eviction
# refused by a disruption budget, a full node port range) ran and carry no pushback.
RETRY_PUSHBACK_KEY = "grpc-retry-pushback-ms"


class TooManyRequestsError(ResourceExhaustedError):
    """The apiserver refused the request before running it (over its in-flight limit): safe to
    send again after `retry_after` seconds. RESOURCE_EXHAUSTED with `RETRY_PUSHBACK_KEY`."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# Trailing metadata naming why a RESOURCE_EXHAUSTED (or other) status was sent, where the code
# alone is ambiguous: "DisruptionBudget" for an eviction a PodDisruptionBudget refused, which
# retrying at once cannot fix (unlike an overloaded server's RESOURCE_EXHAUSTED).
REASON_METADATA_KEY = "x-tinykube-reason"


class DisruptionBudgetError(ResourceExhaustedError):
    """An eviction a PodDisruptionBudget refuses: RESOURCE_EXHAUSTED with trailing metadata
    `x-tinykube-reason: DisruptionBudget` over gRPC; over REST kube-apiserver's 429
    TooManyRequests with a DisruptionBudget cause (and Retry-After when the budget is only
    waiting for its controller). Never retried blindly: only the budget's status changing
    (pods becoming ready, the controller catching up) lets the eviction through."""

    reason: ClassVar[str] = "DisruptionBudget"

    def __init__(self, message: str, cause: str, retry_after_seconds: int = 0) -> None:
        super().__init__(message)
        self.cause = cause
        self.retry_after_seconds = retry_after_seconds


class MultipleBudgetsError(PreconditionFailedError):
    """A pod selected by more than one PodDisruptionBudget cannot be evicted (Kubernetes
    answers 500 with this message over REST; FAILED_PRECONDITION over gRPC, since it is the
    cluster's configuration, not the server, that is wrong)."""


class ForbiddenError(TinykubeError):
    """The request is understood but refused: PERMISSION_DENIED, 403 Forbidden over REST.
    `details` is the REST Status' details when the refused object is not the request's (an
    eviction refused by its pod's budget names the budget). Admission refusals use
    Kubernetes' message shape (`for_object`: `pods "web" is forbidden: <why>`); `causes` are
    (reason, message, field) triples for the Status' details."""

    code = grpc.StatusCode.PERMISSION_DENIED

    def __init__(
        self,
        message: str,
        details: dict[str, str] | None = None,
        *,
        causes: list[tuple[str, str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.details = details
        self.causes: list[tuple[str, str, str]] = list(causes or [])

    @classmethod
    def for_object(
        cls, plural: str, name: str, why: str, causes: list[tuple[str, str, str]] | None = None
    ) -> ForbiddenError:
        """Kubernetes' NewForbidden: `pods "web" is forbidden: why` (`pods is forbidden: why`
        without a name)."""
        shown = f'{plural} "{name}"' if name else plural
        return cls(f"{shown} is forbidden: {why}", causes=causes)


class UnauthenticatedError(TinykubeError):
    """The request carried no valid credentials: UNAUTHENTICATED, 401 Unauthorized over REST
    (an anonymous request, an unknown token, a certificate from another CA)."""

    code = grpc.StatusCode.UNAUTHENTICATED


class UnimplementedError(TinykubeError):
    code = grpc.StatusCode.UNIMPLEMENTED


class CancelledError(TinykubeError):
    code = grpc.StatusCode.CANCELLED


class InternalError(TinykubeError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE: dict[grpc.StatusCode, type[TinykubeError]] = {
    cls.code: cls
    for cls in (
        InvalidError,
        NotFoundError,
        AlreadyExistsError,
        ForbiddenError,
        ConflictError,
        PreconditionFailedError,
        ResourceExpiredError,
        UnavailableError,
        DeadlineExceededError,
        ResourceExhaustedError,
        UnimplementedError,
        CancelledError,
        InternalError,
        UnauthenticatedError,
    )
}

# Retried by clients: the request may not have been applied, and sending it again is safe for
# reads and for writes guarded by resourceVersion or uid.
RETRYABLE_CODES: frozenset[grpc.StatusCode] = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
)


def answer_with(context: grpc.aio.ServicerContext[Any, Any], exc: Exception) -> None:
    """Server side: set the status that `exc` stands for on the call, which gRPC sends when the
    handler returns (a unary handler returns None: no response is sent with a status not OK).

    This, not `abort_with`, is how a server answers an error: `context.abort` raises an
    AbortError that gRPC keeps in the call's state, and that error's traceback holds the
    handler's frames, which hold the context and through it the call's state. Every error
    answered by an abort left that cycle (the AbortError, the error it answered as its context,
    their tracebacks, frames and the request) for the cyclic GC. Unknown exceptions become
    INTERNAL with their type and text. A call whose deadline has passed already has its status
    (gRPC sent DEADLINE_EXCEEDED); it ends as cancelled (`deadline_passed`), as with
    `abort_with`.
    """
    if deadline_passed(context):
        raise asyncio.CancelledError
    code, details, trailing = _status(exc)
    if trailing:
        context.set_trailing_metadata(trailing)
    context.set_code(code)
    context.set_details(details)


async def abort_with(context: grpc.aio.ServicerContext[object, object], exc: Exception) -> NoReturn:
    """Server side: end the RPC at once with the status that `exc` stands for, raising gRPC's
    AbortError (see `answer_with`, which leaves no reference cycle, for handlers that can
    return instead).

    Unknown exceptions become INTERNAL with their type and text, never a bare traceback.
    A call whose deadline has passed already has its status (gRPC sent DEADLINE_EXCEEDED);
    it ends as cancelled (`deadline_passed`).
    """
    if deadline_passed(context):
        raise asyncio.CancelledError
    code, details, trailing = _status(exc)
    if trailing:
        await context.abort(code, details, trailing_metadata=trailing)
    await context.abort(code, details)
    raise AssertionError("context.abort returned")  # (it always raises)


def _status(exc: Exception) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The status (code, details, trailing metadata) that `exc` stands for."""
    if isinstance(exc, DisruptionBudgetError):
        return exc.code, exc.message, ((REASON_METADATA_KEY, exc.reason),)
    if isinstance(exc, TooManyRequestsError):
        # The retry hint (the in-flight limit's refusal), as REST's Retry-After.
        pushback = str(max(1, round(exc.retry_after * 1000)))
        return exc.code, exc.message, ((RETRY_PUSHBACK_KEY, pushback),)
    code, details = to_status(exc)
    return code, details, ()


def deadline_passed(context: grpc.aio.ServicerContext[Any, Any]) -> bool:
    """The call's deadline has passed: gRPC core has sent DEADLINE_EXCEEDED and ended it, and
    an abort now fails (ExecuteBatchError, then "Abort already called!" from the handler's
    error path: two tracebacks and an INTERNAL in the metrics for a call the client had already
    given up on). The handler learns of it late when the event loop is busy: its cancellation
    is queued behind the work that made it late, so an abort can run first."""
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


def to_status(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The (code, message) pair `answer_with` would send, for code that builds statuses itself."""
    if isinstance(exc, TinykubeError):
        return exc.code, exc.message
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


def from_rpc_error(exc: grpc.RpcError) -> TinykubeError:
    """Client side: the TinykubeError for a failed RPC. Raise it `from exc`."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if _reason(exc) == DisruptionBudgetError.reason:
        return DisruptionBudgetError(details or "", cause="")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and hasattr(exc, "trailing_metadata"):
        retry_after = _pushback(exc.trailing_metadata())
        if retry_after is not None:
            return TooManyRequestsError(details or code.name, retry_after)
    return from_status(code, details)


def _pushback(metadata: object) -> float | None:
    """Seconds of a RETRY_PUSHBACK_KEY entry in trailing metadata; None if absent or garbled
    (gRFC A6: a pushback that is not a non-negative integer means "do not retry")."""
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key == RETRY_PUSHBACK_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            if text.isdigit() and len(text) <= 9:
                return int(text) / 1000.0
            return None
    return None


def _reason(exc: grpc.RpcError) -> str:
    """The x-tinykube-reason trailing metadata of a failed RPC, "" without one."""
    trailing: Any = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == REASON_METADATA_KEY:
            return value if isinstance(value, str) else bytes(value).decode()
    return ""


def from_status(code: grpc.StatusCode, details: str | None) -> TinykubeError:
    """Client side: the TinykubeError for a (code, message) pair carried in a response body
    (a BindBatch item), mapped exactly as `from_rpc_error` maps a failed RPC."""
    message = details or (code.name if isinstance(code, grpc.StatusCode) else "unknown error")
    cls = _BY_CODE.get(code, TinykubeError)
    err = cls(message)
    if cls is TinykubeError:
        err.message = f"{getattr(code, 'name', code)}: {message}"
    return err


def is_retryable(exc: BaseException) -> bool:
    """True for the failures a client retries: UNAVAILABLE and DEADLINE_EXCEEDED only; never
    an eviction a disruption budget refused, whatever its code."""
    if isinstance(exc, DisruptionBudgetError):
        return False
    if isinstance(exc, grpc.RpcError) and _reason(exc) == DisruptionBudgetError.reason:
        return False
    if isinstance(exc, TinykubeError):
        return exc.code in RETRYABLE_CODES
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return exc.code() in RETRYABLE_CODES
    return False
