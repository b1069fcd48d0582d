"""Deletion propagation: the finalizers a Delete leaves for the garbage collector.

Kubernetes' DeleteOptions.propagationPolicy as kube-apiserver's generic registry applies it.
`Orphan` adds the `orphan` finalizer (the garbage collector strips the object's uid from its
dependents' ownerReferences, then removes the finalizer); `Foreground` adds
`foregroundDeletion` (the garbage collector deletes the dependents and removes the finalizer
once no dependent with blockOwnerDeletion is left); `Background` adds neither (the object goes
at once, its dependents after it). A Delete with no policy keeps a propagation finalizer the
object already carries, else uses the kind's default. The default is Background for every kind
tinykube serves but batch/v1 Jobs, which Kubernetes orphans by default for compatibility (kubectl
sends Background itself); Kubernetes' other Orphan defaults are ReplicationControllers in core/v1
and ReplicaSets in extensions/v1beta1 and apps/v1beta2, none of which tinykube serves; Events are
never collected (`Unsupported`: propagation finalizers are never set on them).

Both front ends validate DeleteOptions here. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from tinykube.errors import FieldError, InvalidError
from tinykube.kinds import EVENT, JOB

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
GC_FINALIZERS = (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)

FOREGROUND = "Foreground"
BACKGROUND = "Background"
ORPHAN = "Orphan"
POLICIES = (FOREGROUND, BACKGROUND, ORPHAN)
# A kind whose objects the garbage collector never finalizes.
UNSUPPORTED = "Unsupported"

_UNCOLLECTED_KINDS = frozenset({EVENT.kind})
# DefaultGarbageCollectionPolicy of Kubernetes' Job strategy for batch/v1.
_ORPHANED_BY_DEFAULT = frozenset({JOB.kind})


def default_policy(kind: str) -> str:
    """What a Delete of `kind` without a policy (nor a propagation finalizer) does."""
    if kind in _UNCOLLECTED_KINDS:
        return UNSUPPORTED
    return ORPHAN if kind in _ORPHANED_BY_DEFAULT else BACKGROUND


def delete_options_errors(
    policy: object | None, orphan_dependents: object | None = None
) -> list[FieldError]:
    """Kubernetes' DeleteOptions validation of propagationPolicy (None: not given) and the
    deprecated orphanDependents (None: not given)."""
    errors: list[FieldError] = []
    if policy is not None and orphan_dependents is not None:
        errors.append(
            FieldError(
                "propagationPolicy",
                f'Invalid value: "{policy}": orphanDependents and deletionPropagation cannot '
                "be both set",
            )
        )
    if policy is not None and policy not in POLICIES:
        shown = ", ".join(f'"{p}"' for p in (*POLICIES, "nil"))
        errors.append(
            FieldError(
                "propagationPolicy",
                f'Unsupported value: "{policy}": supported values: {shown}',
            )
        )
    return errors


def check_policy(policy: str) -> None:
    """Raise InvalidError (Kubernetes' message) unless `policy` is "" or a known policy."""
    errors = delete_options_errors(policy or None)
    if errors:
        raise InvalidError.for_object("DeleteOptions.meta.k8s.io", "", errors)


def policy_of(policy: str | None, orphan_dependents: bool | None) -> str:
    """One policy from DeleteOptions' two spellings ("" when neither is given).

    orphanDependents true is Orphan; false is Background (both strip a propagation
    finalizer the object carries and add none), as kube-apiserver treats them."""
    if orphan_dependents is not None:
        return ORPHAN if orphan_dependents else BACKGROUND
    return policy or ""


def gc_finalizers(kind: str, finalizers: Sequence[str], policy: str) -> list[str]:
    """The object's finalizers after a Delete with `policy` ("" when none was given).

    The list is returned unchanged (same order) when it holds the same finalizers as before;
    otherwise the propagation finalizers go to its end.
    """
    default = default_policy(kind)
    if default == UNSUPPORTED:
        orphan = foreground = False
    elif policy:
        orphan, foreground = policy == ORPHAN, policy == FOREGROUND
    else:
        # A finalizer from an earlier Delete (or set by the client) outranks the default.
        existing = next((f for f in finalizers if f in GC_FINALIZERS), None)
        if existing is not None:
            orphan, foreground = existing == ORPHAN_FINALIZER, existing == FOREGROUND_FINALIZER
        else:
            orphan, foreground = default == ORPHAN, False
    kept = [f for f in finalizers if f not in GC_FINALIZERS]
    if orphan:
        kept.append(ORPHAN_FINALIZER)
    if foreground:
        kept.append(FOREGROUND_FINALIZER)
    if set(kept) == set(finalizers):
        return list(finalizers)
    return kept
