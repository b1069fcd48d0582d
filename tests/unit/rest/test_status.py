"""The one mapping from tinykube's errors to Kubernetes' Status: codes, reasons, messages."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.rest.status import (
    Resource,
    RestError,
    cause_of,
    method_not_allowed,
    not_found_path,
    status_of,
)
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
    ResourceExhaustedError,
    ResourceExpiredError,
    UnavailableError,
    is_retryable,
)
from tinykube.kinds import POD, REPLICA_SET

WEB = Resource(POD, "web")


@pytest.mark.parametrize(
    ("exc", "resource", "code", "reason", "message", "details"),
    [
        (NotFoundError('pods "web" not found'), WEB, 404, "NotFound", 'pods "web" not found',
         {"name": "web", "kind": "pods"}),
        (NotFoundError('replicasets "rs" not found'), Resource(REPLICA_SET, "rs"), 404,
         "NotFound", 'replicasets.apps "rs" not found',
         {"name": "rs", "group": "apps", "kind": "replicasets"}),
        (AlreadyExistsError('pods "web" already exists'), Resource(POD), 409, "AlreadyExists",
         'pods "web" already exists', {"name": "web", "kind": "pods"}),
        (ConflictError('Operation cannot be fulfilled on replicasets "rs": changed'),
         Resource(REPLICA_SET, "rs"), 409, "Conflict",
         'Operation cannot be fulfilled on replicasets.apps "rs": changed',
         {"name": "rs", "group": "apps", "kind": "replicasets"}),
        (PreconditionFailedError("Precondition failed: UID"), WEB, 409, "Conflict",
         "Precondition failed: UID", {"name": "web", "kind": "pods"}),
        (BadRequestError("bad json"), WEB, 400, "BadRequest", "bad json", None),
        (InvalidError('invalid label selector "a in"'), WEB, 400, "BadRequest",
         'invalid label selector "a in"', None),
        (ResourceExpiredError("too old resource version: 1 (5)"), WEB, 410, "Expired",
         "too old resource version: 1 (5)", None),
        (ResourceExhaustedError("slow"), WEB, 429, "TooManyRequests", "slow",
         {"retryAfterSeconds": 1}),
        # kube's eviction refusals: the budget's cause, Retry-After only when it suggests one,
        # the bare 500 Status for two budgets, and Forbidden naming the budget.
        (DisruptionBudgetError("Cannot evict", "needs 2"), WEB, 429, "TooManyRequests",
         "Cannot evict", {"causes": [{"reason": "DisruptionBudget", "message": "needs 2"}]}),
        (DisruptionBudgetError("Cannot evict", "processing", 10), WEB, 429, "TooManyRequests",
         "Cannot evict",
         {"causes": [{"reason": "DisruptionBudget", "message": "processing"}],
          "retryAfterSeconds": 10}),
        (ForbiddenError('poddisruptionbudget.policy "b" is forbidden: x',
                        {"name": "b", "group": "policy", "kind": "poddisruptionbudget"}),
         WEB, 403, "Forbidden", 'poddisruptionbudget.policy "b" is forbidden: x',
         {"name": "b", "group": "policy", "kind": "poddisruptionbudget"}),
        (UnavailableError("etcd down"), WEB, 503, "ServiceUnavailable", "etcd down", None),
        (DeadlineExceededError("Too large resource version"), WEB, 504, "Timeout",
         "Too large resource version", {"retryAfterSeconds": 1}),
        (RuntimeError("boom"), None, 500, "InternalError",
         "Internal error occurred: RuntimeError: boom", None),
        (not_found_path(), None, 404, "NotFound",
         "the server could not find the requested resource", {}),
        (method_not_allowed(), None, 405, "MethodNotAllowed",
         "the server does not allow this method on the requested resource", {}),
    ],
)  # fmt: skip
def test_status_of(
    exc: BaseException,
    resource: Resource | None,
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None,
) -> None:
    got_code, body, _ = status_of(exc, resource)
    assert got_code == code
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == code
    assert (body["reason"], body["message"]) == (reason, message)
    assert body.get("details") == details


def test_two_budgets_is_kubernetes_bare_500() -> None:
    code, body, headers = status_of(MultipleBudgetsError("more than one"), WEB)
    assert (code, headers) == (500, {})
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "more than one", "code": 500}  # fmt: skip


def test_budget_refusals_are_never_retried_and_survive_the_wire() -> None:
    refused = DisruptionBudgetError("Cannot evict", "needs 2")
    assert isinstance(refused, ResourceExhaustedError) and not is_retryable(refused)
    assert status_of(DisruptionBudgetError("x", "y", 10), WEB)[2] == {"Retry-After": "10"}


def test_invalid_has_causes_and_kubernetes_aggregate_message() -> None:
    causes = [
        FieldError("spec.containers", "Required value"),
        FieldError("metadata.name", 'Invalid value: "A": must be lowercase'),
    ]
    exc = InvalidError.for_object("Pod", "A", causes)
    code, body, _ = status_of(exc, Resource(POD))
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'Pod "A" is invalid: [spec.containers: Required value, metadata.name: Invalid value: '
        '"A": must be lowercase]'
    )
    assert body["details"] == {
        "name": "A",
        "kind": "Pod",
        "causes": [
            {"reason": "FieldValueRequired", "message": "Required value",
             "field": "spec.containers"},
            {"reason": "FieldValueInvalid", "message": 'Invalid value: "A": must be lowercase',
             "field": "metadata.name"},
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("Required value", "FieldValueRequired"),
        ('Unsupported value: "x": supported values: "a"', "FieldValueNotSupported"),
        ('Duplicate value: "c"', "FieldValueDuplicate"),
        ("Forbidden: may not be changed", "FieldValueForbidden"),
        ("Too long: may not be more than 63 bytes", "FieldValueTooLong"),
        ("something else", "FieldValueInvalid"),
    ],
)
def test_cause_reasons(message: str, reason: str) -> None:
    assert cause_of(FieldError("f", message))["reason"] == reason


def test_too_many_requests_sets_retry_after() -> None:
    _, _, headers = status_of(ResourceExhaustedError("slow"))
    assert headers == {"Retry-After": "1"}


def test_rest_error_passes_through() -> None:
    err = RestError(413, "RequestEntityTooLarge", "Request entity too large: limit is 5")
    code, body, _ = status_of(err)
    assert (code, body["reason"], "details" in body) == (413, "RequestEntityTooLarge", False)
