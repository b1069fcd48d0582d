"""RBAC privilege escalation prevention: a Role, ClusterRole or binding may grant only what its
author already holds, as kube-apiserver's pkg/registry/rbac (escalation_check.go, the
policybased storages, validation/rule.go's ConfirmNoEscalation).

- Creating or updating a Role or ClusterRole is allowed when the requester is in
  `system:masters`, or may `escalate` the resource (roles / clusterroles; on an update the
  object's name, on a create none), or already holds every permission in its rules: in the
  role's namespace for a Role (cluster-wide bindings and that namespace's), cluster-wide only
  for a ClusterRole. Setting, changing or removing a ClusterRole's aggregationRule needs full
  authority (`*` on `*.*` and on every URL) unless `escalate` or system:masters applies.
- Creating or updating a RoleBinding or ClusterRoleBinding is allowed for system:masters, for
  one who may `bind` the referenced role (verb bind on roles / clusterroles named by the
  roleRef, in the binding's namespace; "" for a ClusterRoleBinding), or for one who holds every
  permission of the referenced role (in the binding's namespace). A referenced role that does
  not exist is NotFound (`clusterroles.rbac.authorization.k8s.io "x" not found`).
- An update that only changes what garbage collection changes (ownerReferences, finalizers;
  tinykube also ignores managedFields and resourceVersion) is never refused.

Refusals are Forbidden with kube's message: `clusterroles.rbac.authorization.k8s.io "x" is
forbidden: user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC
permissions not currently held:` and then one line per missing permission (rules broken down
to one verb, group, resource and name, then merged per group and resource, sorted), e.g.
`{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}`; a binding whose role cannot be
resolved adds `; resolution errors: [...]`.

Who asks is the request context's identity (apiserver/requestcontext.py), which both front
ends pass to the store with every write. None means the apiserver's own in-process write
(bootstrap reconciliation): trusted, as kube-apiserver's loopback client is in system:masters.
The guard is installed on the four RBAC stores only when authorization is on, so --insecure
stays open and other kinds pay nothing. Pure and synchronous: the rule resolver reads the RBAC
authorizer's in-memory indexes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from apiserver.auth.authorizer import SYSTEM_MASTERS, Attributes, Authorizer, Identity, go_quote
from apiserver.auth.rbac import Rule
from tinykube.errors import ForbiddenError, NotFoundError
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, RBAC_GROUP, ROLE, ROLE_BINDING

RoleKey = tuple[str, str, str]  # (kind, namespace, name); ClusterRoles have namespace ""

# What an aggregationRule needs: everything (kube's fullAuthority).
FULL_AUTHORITY = (
    Rule(verbs=("*",), api_groups=("*",), resources=("*",)),
    Rule(verbs=("*",), non_resource_urls=("*",)),
)

AGGREGATION_RULE_REFUSAL = "must have cluster-admin privileges to use the aggregationRule"


class RuleResolver(Protocol):
    """What the escalation check reads of RBAC (apiserver.auth.rbac.RbacAuthorizer)."""

    def rules_for(self, identity: Identity, namespace: str) -> tuple[list[Rule], list[RoleKey]]:
        """Every rule bound to `identity` cluster-wide and, if `namespace`, in it; and the
        roles its bindings name that do not exist."""
        ...

    def role_rules(self, key: RoleKey) -> tuple[Rule, ...] | None:
        """A role's rules; None if it does not exist."""
        ...


# ---- covers ------------------------------------------------------------------------------------


def breakdown(rule: Rule) -> list[Rule]:
    """The rule as rules of one group, resource, verb and (if it names any) one name; and of
    one URL and verb for its non-resource URLs (kube's BreakdownRule)."""
    out: list[Rule] = []
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    out.extend(
                        Rule((verb,), (group,), (resource,), (name,))
                        for name in rule.resource_names
                    )
                else:
                    out.append(Rule((verb,), (group,), (resource,)))
    for url in rule.non_resource_urls:
        for verb in rule.verbs:
            out.append(Rule((verb,), non_resource_urls=(url,)))
    return out


def _has_all(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    return all(w in owned for w in wanted)


def _resources_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    if "*" in owned or _has_all(owned, wanted):
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path:
            return False
        if "*/" + path.split("/", 1)[1] not in owned:
            return False
    return True


def _url_covers(owner: str, path: str) -> bool:
    return owner == path or (owner.endswith("*") and path.startswith(owner.rstrip("*")))


def _urls_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    return all(any(_url_covers(o, w) for o in owned) for w in wanted)


def rule_covers(owner: Rule, sub: Rule) -> bool:
    """Whether `owner` allows everything the broken-down rule `sub` does (kube's ruleCovers:
    a rule limited to names never covers one that is not)."""
    if not ("*" in owner.verbs or _has_all(owner.verbs, sub.verbs)):
        return False
    if not ("*" in owner.api_groups or _has_all(owner.api_groups, sub.api_groups)):
        return False
    if not _resources_cover(owner.resources, sub.resources):
        return False
    if not _urls_cover(owner.non_resource_urls, sub.non_resource_urls):
        return False
    if not sub.resource_names:
        return not owner.resource_names
    return not owner.resource_names or _has_all(owner.resource_names, sub.resource_names)


def covers(owner_rules: Sequence[Rule], servant_rules: Iterable[Rule]) -> tuple[bool, list[Rule]]:
    """Whether `owner_rules` allow everything `servant_rules` do, and the broken-down rules
    they do not (kube's Covers)."""
    missing = [
        sub
        for rule in servant_rules
        for sub in breakdown(rule)
        if not any(rule_covers(owner, sub) for owner in owner_rules)
    ]
    return not missing, missing


def compact_rules(rules: Iterable[Rule]) -> list[Rule]:
    """Rules of one group and one resource with nothing but verbs merged into one rule per
    (group, resource), verbs in order (kube's CompactRules); the others kept as they are."""
    out: list[Rule] = []
    simple: dict[tuple[str, str], list[str]] = {}
    for rule in rules:
        if (
            not rule.resource_names
            and not rule.non_resource_urls
            and len(rule.api_groups) == 1
            and len(rule.resources) == 1
        ):
            simple.setdefault((rule.api_groups[0], rule.resources[0]), []).extend(rule.verbs)
        else:
            out.append(rule)
    out.extend(Rule(tuple(verbs), (g,), (r,)) for (g, r), verbs in simple.items())
    return out


def go_quote_list(items: Iterable[str]) -> str:
    """Go's %q of a []string: `["a" "b"]`."""
    return "[" + " ".join(go_quote(i) for i in items) + "]"


def compact_string(rule: Rule) -> str:
    """kube's CompactString: `{APIGroups:[""], Resources:["nodes"], Verbs:["delete"]}`."""
    parts = []
    for label, values in (
        ("APIGroups", rule.api_groups),
        ("Resources", rule.resources),
        ("NonResourceURLs", rule.non_resource_urls),
        ("ResourceNames", rule.resource_names),
        ("Verbs", rule.verbs),
    ):
        if values:
            parts.append(f"{label}:{go_quote_list(values)}")
    return "{" + ", ".join(parts) + "}"


def _not_found_text(key: RoleKey) -> str:
    kind, _, name = key
    plural = ROLE.plural if kind == ROLE.kind else CLUSTER_ROLE.plural
    return f"{plural}.{RBAC_GROUP} {go_quote(name)} not found"


def no_escalation_problem(
    resolver: RuleResolver, identity: Identity, namespace: str, rules: Iterable[Rule]
) -> str | None:
    """None if `identity` holds every permission in `rules` in `namespace` ("" : cluster-wide
    bindings only), else kube's ConfirmNoEscalation message."""
    owned, unresolved = resolver.rules_for(identity, namespace)
    ok, missing = covers(owned, rules)
    if ok:
        return None
    shown = sorted({compact_string(r) for r in compact_rules(missing)})
    text = (
        f"user {go_quote(identity.name)} (groups={go_quote_list(identity.groups)}) is "
        "attempting to grant RBAC permissions not currently held:\n" + "\n".join(shown)
    )
    if unresolved:
        errors = list(dict.fromkeys(_not_found_text(k) for k in unresolved))
        joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        text += f"; resolution errors: [{joined}]"
    return text


def only_gc_fields_change(new: Any, old: Any) -> bool:
    """Whether `new` differs from `old` only in what garbage collection writes (kube's
    IsOnlyMutatingGCFields; bookkeeping managedFields and resourceVersion are ignored too)."""
    copied = type(new)()
    copied.CopyFrom(new)
    meta, old_meta = copied.metadata, old.metadata
    del meta.ownerReferences[:]
    meta.ownerReferences.extend(old_meta.ownerReferences)
    del meta.finalizers[:]
    meta.finalizers.extend(old_meta.finalizers)
    del meta.managedFields[:]
    meta.managedFields.extend(old_meta.managedFields)
    meta.resourceVersion = old_meta.resourceVersion
    return bool(copied == old)


def _has_aggregation_rule(role: Any) -> bool:
    return (
        role is not None
        and role.HasField("aggregationRule")
        and len(role.aggregationRule.clusterRoleSelectors) > 0
    )


class EscalationGuard:
    """The check of one apiserver: `authorizer` answers escalate and bind (the whole chain, as
    kube asks its authorizer), `resolver` says what an identity holds (RBAC only)."""

    def __init__(self, authorizer: Authorizer, resolver: RuleResolver) -> None:
        self.authorizer = authorizer
        self.resolver = resolver

    def admit(self, kind: str, obj: Any, old: Any | None, identity: Identity | None) -> None:
        """Refuse (ForbiddenError, or NotFoundError for a binding's missing role) a create
        (`old` None) or update of an RBAC object of `kind` by `identity`."""
        if identity is None or SYSTEM_MASTERS in identity.groups:
            return
        if old is not None and only_gc_fields_change(obj, old):
            return
        if kind in (ROLE.kind, CLUSTER_ROLE.kind):
            self._admit_role(kind, obj, old, identity)
        elif kind in (ROLE_BINDING.kind, CLUSTER_ROLE_BINDING.kind):
            self._admit_binding(kind, obj, identity)

    def _allowed(self, identity: Identity, attrs: Attributes) -> bool:
        return self.authorizer.authorize(identity, attrs).allowed

    def _admit_role(self, kind: str, role: Any, old: Any | None, identity: Identity) -> None:
        plural = ROLE.plural if kind == ROLE.kind else CLUSTER_ROLE.plural
        meta = role.metadata
        namespace = meta.namespace if kind == ROLE.kind else ""
        # kube asks with the request's name: none on a create (a POST to the collection).
        name = meta.name if old is not None else ""
        if self._allowed(identity, Attributes("escalate", plural, RBAC_GROUP, "", namespace, name)):
            return
        problem = no_escalation_problem(
            self.resolver, identity, namespace, (Rule.of(r) for r in role.rules)
        )
        if problem is not None:
            raise _forbidden(plural, meta.name, problem)
        if kind != CLUSTER_ROLE.kind:
            return
        # An aggregationRule gathers anything and keeps a role from being tightened.
        aggregated = _has_aggregation_rule(role) or _has_aggregation_rule(old)
        if aggregated and no_escalation_problem(self.resolver, identity, "", FULL_AUTHORITY):
            raise _forbidden(plural, meta.name, AGGREGATION_RULE_REFUSAL)

    def _admit_binding(self, kind: str, binding: Any, identity: Identity) -> None:
        plural = ROLE_BINDING.plural if kind == ROLE_BINDING.kind else CLUSTER_ROLE_BINDING.plural
        namespace = binding.metadata.namespace if kind == ROLE_BINDING.kind else ""
        ref = binding.roleRef
        if ref.kind == CLUSTER_ROLE.kind:
            key: RoleKey = (CLUSTER_ROLE.kind, "", ref.name)
            resource = CLUSTER_ROLE.plural
        elif ref.kind == ROLE.kind and kind == ROLE_BINDING.kind:
            key = (ROLE.kind, namespace, ref.name)
            resource = ROLE.plural
        else:
            return  # validation refuses the roleRef
        bind = Attributes("bind", resource, ref.apiGroup, "", namespace, ref.name)
        if self._allowed(identity, bind):
            return
        rules = self.resolver.role_rules(key)
        if rules is None:
            raise NotFoundError(_not_found_text(key))
        problem = no_escalation_problem(self.resolver, identity, namespace, rules)
        if problem is not None:
            raise _forbidden(plural, binding.metadata.name, problem)


def _forbidden(plural: str, name: str, why: str) -> ForbiddenError:
    """kube's NewForbidden for an RBAC resource, with the Status details it carries."""
    qualified = f"{plural}.{RBAC_GROUP}"
    shown = f"{qualified} {go_quote(name)}" if name else qualified
    details = {"group": RBAC_GROUP, "kind": plural}
    if name:
        details = {"name": name, **details}
    return ForbiddenError(f"{shown} is forbidden: {why}", details)
