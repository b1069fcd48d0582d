"""Reconciliation of the bootstrap RBAC policy at apiserver start, as kube-apiserver's
rbac/bootstrap-roles post-start hook (pkg/registry/rbac/rest/storage_rbac.go and
pkg/registry/rbac/reconciliation).

For every bootstrap ClusterRole and ClusterRoleBinding (apiserver/auth/bootstrap.py):
- missing: it is created (so a deleted bootstrap role is back after a restart);
- annotated `rbac.authorization.kubernetes.io/autoupdate: "false"`: it is left alone (a
  warning is logged when it lacks something);
- otherwise its missing labels and annotations are added (existing values win), the permissions
  the bootstrap version grants that it does not are appended (broken down as Covers reports
  them: one verb, group, resource and name per rule), missing aggregationRule selectors are
  appended (and an aggregationRule the bootstrap version no longer has is removed), and a
  binding's missing subjects are appended; extra permissions and subjects are kept. A binding
  whose roleRef differs (immutable) is deleted and created again.
So an upgrade that adds rules reaches existing clusters, and an administrator's additions stay.

`reconcile(store, roles, bindings)` does the writes through `PolicyStore` (the apiserver's own
resource layer, with no requester: trusted as kube's loopback client); the computation
(`reconcile_role`, `reconcile_binding`) is pure. A write that loses a race (conflict, already
exists, gone) is recomputed from a fresh read, a few times, as kube's RetryOnConflict.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.protobuf.message import Message

from apiserver.auth.escalation import covers
from apiserver.auth.rbac import Rule
from tinykube.errors import AlreadyExistsError, ConflictError, NotFoundError, TinykubeError
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, KindInfo
from tinykube.v1 import rbac_pb2

log = logging.getLogger(__name__)

AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"

CREATE = "create"
UPDATE = "update"
RECREATE = "recreate"
NONE = "none"

_ATTEMPTS = 4


class PolicyError(Exception):
    """Bootstrap objects that could not be reconciled: the message names the first and its
    error (the cause) and counts the others."""


class PolicyStore(Protocol):
    """The writes reconciliation makes (the apiserver's ResourceStores)."""

    async def get(self, info: KindInfo, name: str) -> Any | None: ...

    async def create(self, info: KindInfo, obj: Message) -> object: ...

    async def update(self, info: KindInfo, obj: Message) -> object: ...

    async def delete(self, info: KindInfo, name: str, uid: str) -> None: ...


@dataclass
class Result:
    """What reconciling one object needs: `operation`, the object to write, whether the
    stored object opted out (`protected`), and what it lacked."""

    operation: str
    obj: Any
    protected: bool = False
    missing: list[Any] = field(default_factory=list)


def _copy(obj: Any) -> Any:
    out = type(obj)()
    out.CopyFrom(obj)
    return out


def _merge_meta(result: Any, existing: Any, expected: Any) -> bool:
    """Add the expected labels and annotations the existing object lacks (its own values
    win); whether anything changed."""
    changed = False
    for name in ("annotations", "labels"):
        have: Any = getattr(result.metadata, name)
        want: Mapping[str, str] = getattr(expected.metadata, name)
        for key, value in want.items():
            if key not in have:
                have[key] = value
                changed = True
    return changed


def _policy_rule(rule: Rule) -> rbac_pb2.PolicyRule:
    return rbac_pb2.PolicyRule(
        verbs=list(rule.verbs),
        apiGroups=list(rule.api_groups),
        resources=list(rule.resources),
        resourceNames=list(rule.resource_names),
        nonResourceURLs=list(rule.non_resource_urls),
    )


def _protected(existing: Any) -> bool:
    return bool(existing.metadata.annotations.get(AUTOUPDATE) == "false")


def reconcile_role(existing: Any | None, expected: Any) -> Result:
    """kube's computeReconciledRole (union mode) for a ClusterRole."""
    if existing is None:
        return Result(CREATE, _copy(expected), missing=list(expected.rules))
    result = Result(NONE, _copy(existing), protected=_protected(existing))
    obj = result.obj
    if _merge_meta(obj, existing, expected):
        result.operation = UPDATE
    _, missing = covers([Rule.of(r) for r in existing.rules], (Rule.of(r) for r in expected.rules))
    if missing:
        result.missing = [_policy_rule(r) for r in missing]
        obj.rules.extend(result.missing)
        result.operation = UPDATE
    wants_rule = expected.HasField("aggregationRule")
    if not wants_rule and existing.HasField("aggregationRule"):
        obj.ClearField("aggregationRule")
        result.operation = UPDATE
    elif wants_rule:
        have = list(existing.aggregationRule.clusterRoleSelectors)
        absent = [s for s in expected.aggregationRule.clusterRoleSelectors if s not in have]
        if absent:
            obj.aggregationRule.clusterRoleSelectors.extend(absent)
            result.operation = UPDATE
    return result


def reconcile_binding(existing: Any | None, expected: Any) -> Result:
    """kube's computeReconciledRoleBinding (union mode) for a ClusterRoleBinding."""
    if existing is None:
        return Result(CREATE, _copy(expected), missing=list(expected.subjects))
    protected = _protected(existing)
    if existing.roleRef != expected.roleRef:
        return Result(RECREATE, _copy(expected), protected=protected)
    result = Result(NONE, _copy(existing), protected=protected)
    if _merge_meta(result.obj, existing, expected):
        result.operation = UPDATE
    have = list(existing.subjects)
    missing: list[Any] = []
    for subject in expected.subjects:
        if subject not in have and subject not in missing:
            missing.append(subject)
    if missing:
        result.missing = missing
        result.obj.subjects.extend(missing)
        result.operation = UPDATE
    return result


async def _reconcile_one(store: PolicyStore, info: KindInfo, expected: Any) -> Result:
    compute = reconcile_role if info.kind == CLUSTER_ROLE.kind else reconcile_binding
    name = expected.metadata.name
    for _attempt in range(_ATTEMPTS):
        existing = await store.get(info, name)
        result = compute(existing, expected)
        if result.protected or result.operation == NONE:
            return result
        try:
            if result.operation == RECREATE:
                assert existing is not None
                with contextlib.suppress(NotFoundError):
                    await store.delete(info, name, existing.metadata.uid)
                await store.create(info, result.obj)
            elif result.operation == CREATE:
                await store.create(info, result.obj)
            else:
                await store.update(info, result.obj)
            return result
        except (ConflictError, AlreadyExistsError, NotFoundError):
            continue  # raced another writer: read again
    raise ConflictError(f"reconciling {info.plural} {name!r}: exceeded maximum attempts")


async def reconcile(
    store: PolicyStore,
    roles: Iterable[rbac_pb2.ClusterRole],
    bindings: Iterable[rbac_pb2.ClusterRoleBinding],
) -> dict[str, int]:
    """Reconcile every bootstrap object; how many were created, updated, recreated and
    skipped as protected. An object that cannot be written (etcd down, a refused write, endless
    races) is logged and the rest are still reconciled, as kube's post-start hook does; then
    `PolicyError` naming the first is raised, so the caller tries the whole policy again later
    (kube's hook counts such a pass as done: tinykube stays not ready while one is missing).
    (Stopping at the first failure left every later object missing, and the components bound
    by them Forbidden, for as long as one early object kept failing.)"""
    counts = {CREATE: 0, UPDATE: 0, RECREATE: 0, "protected": 0}
    work: list[tuple[KindInfo, Any]] = [
        *((CLUSTER_ROLE, r) for r in roles),
        *((CLUSTER_ROLE_BINDING, b) for b in bindings),
    ]
    failed: list[tuple[str, TinykubeError]] = []
    for info, expected in work:
        name = expected.metadata.name
        try:
            result = await _reconcile_one(store, info, expected)
        except TinykubeError as exc:
            what = object_name(info, name)
            log.warning("unable to reconcile %s: %s", what, exc)
            failed.append((what, exc))
            continue
        if result.protected:
            if result.operation != NONE:
                counts["protected"] += 1
                log.warning(
                    "skipped reconcile-protected %s %s with missing %s: %s",
                    info.plural,
                    name,
                    "permissions" if info.kind == CLUSTER_ROLE.kind else "subjects",
                    result.missing,
                )
            continue
        if result.operation != NONE:
            counts[result.operation] += 1
            log.info("%s bootstrap %s %s", _PAST[result.operation], info.plural, name)
    if failed:
        (what, first), more = failed[0], len(failed) - 1
        # The errors' tracebacks hold this frame: let go of them before raising.
        del failed
        others = f" (and {more} more bootstrap RBAC objects)" if more else ""
        try:
            raise PolicyError(f"unable to reconcile {what}: {first}{others}") from first
        finally:
            del first
    return counts


def object_name(info: KindInfo, name: str) -> str:
    """An object as kube's messages name it: "clusterrole.rbac.authorization.k8s.io/view"."""
    return f"{info.kind.lower()}.{info.group}/{name}"


_PAST = {CREATE: "created", UPDATE: "updated", RECREATE: "recreated"}
