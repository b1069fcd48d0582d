"""What a write request carries besides its object: who sends it, whether it is a dry run, and
which field manager it records. Both front ends build one per request and pass it explicitly
to `ResourceStore`'s writes (kube's request context: user info, dryRun, fieldManager);
admission (NodeRestriction, RBAC escalation, TokenRequest's node check) reads the identity
from it. `INTERNAL` is the apiserver's own in-process write: no identity (trusted, as
kube-apiserver's loopback client), not a dry run, no managedFields recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from apiserver.auth.authorizer import Identity
from apiserver.validation import unsupported
from tinykube.errors import InvalidError

# The one dry-run value Kubernetes defines: every stage runs, nothing is persisted.
DRY_RUN_ALL = "All"


@dataclass(frozen=True, slots=True)
class RequestContext:
    # Who sends the request (after impersonation); None for the apiserver's own writes.
    identity: Identity | None = None
    # dryRun=All: run every check and admission the write runs, then stop before etcd.
    dry_run: bool = False
    # Records the write's fields in managedFields (operation Update); None keeps the
    # request's managedFields as they are (an apply computed them, or gRPC named none).
    field_manager: str | None = None
    # Where admission webhooks' warnings go, for the front end to send (REST Warning headers,
    # gRPC trailing metadata); None: nobody reads them.
    warnings: list[str] | None = None


INTERNAL = RequestContext()


def dry_run_of(values: Sequence[str], field: str = "dryRun") -> bool:
    """Whether a request's dryRun list asks for a dry run: [] no, ["All"] yes; any other value
    is InvalidError naming the field (`dryRun[0]: Unsupported value: "x": supported values:
    "All"`)."""
    if not values:
        return False  # nearly every request: nothing to look at
    problems = [
        unsupported(f"{field}[{i}]", value, (DRY_RUN_ALL,))
        for i, value in enumerate(values)
        if value != DRY_RUN_ALL
    ]
    if problems:
        text = "; ".join(str(p) for p in problems)
        raise InvalidError(text, problems)
    return bool(values)
