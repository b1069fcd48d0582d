"""The CRD naming and establishing controllers' decisions, as kube's apiextensions-apiserver
pkg/controller/status/naming_controller.go and pkg/controller/establish: pure functions.

A CRD's names are accepted one by one against the accepted names of the other CRDs of its
group: a plural, singular or short name another CRD of the group already serves as a resource
name, or a kind or listKind another already serves as a kind, is refused (NamesAccepted False
with the conflict's reason: PluralConflict, SingularConflict, ShortNamesConflict, KindConflict,
ListKindConflict, message `"<name>" is already in use`) while the names that do not conflict
are accepted. Once every name is accepted the CRD becomes Established (True,
InitialNamesAccepted) and stays so; before that Established is False (NotAccepted while a name
conflicts, Installing while the names were just accepted).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from tinykube.meta import set_timestamp
from tinykube.v1 import apiextensions_pb2

CRD = apiextensions_pb2.CustomResourceDefinition
Names = apiextensions_pb2.CustomResourceDefinitionNames
Condition = apiextensions_pb2.CustomResourceDefinitionCondition

NAMES_ACCEPTED = "NamesAccepted"
ESTABLISHED = "Established"
TERMINATING = "Terminating"


def _used(others: Iterable[CRD], group: str, name: str) -> tuple[set[str], set[str]]:
    """Resource names and kinds the other CRDs of `group` hold (their accepted names)."""
    resources: set[str] = set()
    kinds: set[str] = set()
    for other in others:
        if other.spec.group != group or other.metadata.name == name:
            continue
        accepted = other.status.acceptedNames
        resources.update(n for n in (accepted.plural, accepted.singular) if n)
        resources.update(accepted.shortNames)
        kinds.update(n for n in (accepted.kind, accepted.listKind) if n)
    return resources, kinds


def accept_names(crd: CRD, others: Iterable[CRD]) -> tuple[Names, Condition]:
    """The names `crd` may serve now and its NamesAccepted condition (without a time)."""
    wanted = crd.spec.names
    resources, kinds = _used(others, crd.spec.group, crd.metadata.name)
    accepted = Names()
    accepted.CopyFrom(crd.status.acceptedNames)
    problem: tuple[str, str] | None = None

    def refuse(reason: str, name: str) -> None:
        nonlocal problem
        if problem is None:
            problem = (reason, f'"{name}" is already in use')

    if wanted.plural in resources:
        refuse("PluralConflict", wanted.plural)
    else:
        accepted.plural = wanted.plural
    if wanted.singular in resources:
        refuse("SingularConflict", wanted.singular)
    else:
        accepted.singular = wanted.singular
    clash = [s for s in wanted.shortNames if s in resources]
    if clash:
        refuse("ShortNamesConflict", clash[0])
    else:
        del accepted.shortNames[:]
        accepted.shortNames.extend(wanted.shortNames)
    if wanted.kind in kinds:
        refuse("KindConflict", wanted.kind)
    else:
        accepted.kind = wanted.kind
    if wanted.listKind in kinds:
        refuse("ListKindConflict", wanted.listKind)
    else:
        accepted.listKind = wanted.listKind
    # Categories never conflict.
    del accepted.categories[:]
    accepted.categories.extend(wanted.categories)
    if problem is None:
        cond = Condition(
            type=NAMES_ACCEPTED, status="True", reason="NoConflicts", message="no conflicts found"
        )
    else:
        cond = Condition(type=NAMES_ACCEPTED, status="False", reason=problem[0], message=problem[1])
    return accepted, cond


def find_condition(crd: CRD, kind: str) -> Condition | None:
    for c in crd.status.conditions:
        if c.type == kind:
            return c
    return None


def set_condition(crd: CRD, cond: Condition, now: datetime) -> None:
    """kube's SetCRDCondition: the transition time moves only when the status changes."""
    existing = find_condition(crd, cond.type)
    if existing is None:
        new = crd.status.conditions.add()
        new.CopyFrom(cond)
        set_timestamp(new.lastTransitionTime, now)
        return
    if existing.status != cond.status:
        set_timestamp(existing.lastTransitionTime, now)
    existing.status, existing.reason, existing.message = cond.status, cond.reason, cond.message


def reconcile(crd: CRD, others: Iterable[CRD], now: datetime) -> CRD | None:
    """The status the controllers give `crd` (a copy), or None when it is already right."""
    new = CRD()
    new.CopyFrom(crd)
    if crd.metadata.HasField("deletionTimestamp"):
        return None
    accepted, names_cond = accept_names(crd, others)
    new.status.acceptedNames.CopyFrom(accepted)
    set_condition(new, names_cond, now)
    established = find_condition(crd, ESTABLISHED)
    if established is None or established.status != "True":
        if names_cond.status == "True":
            cond = Condition(
                type=ESTABLISHED,
                status="True",
                reason="InitialNamesAccepted",
                message="the initial names have been accepted",
            )
        else:
            cond = Condition(
                type=ESTABLISHED,
                status="False",
                reason="NotAccepted",
                message="not all names are accepted",
            )
        set_condition(new, cond, now)
    return None if new == crd else new
