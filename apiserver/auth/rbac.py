"""The RBAC authorizer: Roles, ClusterRoles and their bindings, evaluated as Kubernetes does.

Rule matching follows k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go: "*" matches any
verb, group or resource; a rule's resource "pods/log" matches that subresource only and
"*/status" the status of any resource; resourceNames, when given, limit a rule to those
objects (so never to a list or a create, which name none); a nonResourceURL ending in "*"
matches every path it prefixes. A ClusterRoleBinding grants its ClusterRole everywhere; a
RoleBinding grants its Role, or a ClusterRole, only in its own namespace. Subjects are Users
(by name), Groups (any of the identity's) and ServiceAccounts (the user
"system:serviceaccount:<namespace>:<name>"; a RoleBinding's subject without a namespace is
in the binding's). Nothing is ever denied: no matching rule is "no opinion", and the reason
names the bindings whose roles do not exist, as kube's resolver reports them.

Cost per request: the bindings are indexed by subject ("u:<user>", "g:<group>"), so a check
visits only the identity's own bindings, and the answer for (identity, verb, group, resource,
subresource, namespace) is memoized (what it allows by name is kept beside it), so a repeated
request is one tuple and two dictionary lookups. The indexes follow the apiserver's watch
caches of the four kinds (`attach`): each applied event updates them and clears the memo.
Everything runs on the event loop; nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apiserver.auth.authorizer import (
    NO_OPINION,
    SERVICE_ACCOUNT_PREFIX,
    Attributes,
    Decision,
    Identity,
    Outcome,
    go_quote,
)
from apiserver.watchcache import CacheEvent, WatchCache
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, ROLE, ROLE_BINDING

# ---- rules --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """A PolicyRule with its lists as tuples (what matching reads)."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def of(cls, rule: Any) -> Rule:
        """From a rbac_pb2.PolicyRule."""
        return cls(
            tuple(rule.verbs),
            tuple(rule.apiGroups),
            tuple(rule.resources),
            tuple(rule.resourceNames),
            tuple(rule.nonResourceURLs),
        )


def verb_matches(rule: Rule, verb: str) -> bool:
    return "*" in rule.verbs or verb in rule.verbs


def api_group_matches(rule: Rule, group: str) -> bool:
    return "*" in rule.api_groups or group in rule.api_groups


def resource_matches(rule: Rule, combined: str, subresource: str) -> bool:
    """`combined` is "pods" or "pods/status"; "*/status" matches any resource's status."""
    for r in rule.resources:
        if r == "*" or r == combined:
            return True
        if subresource and r.startswith("*/") and r[2:] == subresource:
            return True
    return False


def resource_name_matches(rule: Rule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def non_resource_url_matches(rule: Rule, path: str) -> bool:
    for url in rule.non_resource_urls:
        if url == "*" or url == path:
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(rule: Rule, attrs: Attributes) -> bool:
    """kube's RuleAllows."""
    if attrs.resource_request:
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        return (
            verb_matches(rule, attrs.verb)
            and api_group_matches(rule, attrs.api_group)
            and resource_matches(rule, combined, attrs.subresource)
            and resource_name_matches(rule, attrs.name)
        )
    return verb_matches(rule, attrs.verb) and non_resource_url_matches(rule, attrs.path)


def rules_allow(attrs: Attributes, rules: Iterable[Rule]) -> bool:
    return any(rule_allows(rule, attrs) for rule in rules)


# ---- the index ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Grant:
    """One binding of one subject: which role it grants, and how kube describes it."""

    role_key: tuple[str, str, str]  # ("ClusterRole", "", name) or ("Role", namespace, name)
    source: str  # 'ClusterRoleBinding "x" of ClusterRole "y" to User "alice"'


@dataclass(slots=True)
class _Answer:
    """What the identity's rules allow for one (verb, group, resource, subresource, namespace):
    `any_name` is the source of a rule allowing every name (None if none does), `by_name` the
    sources of rules limited to resourceNames, `errors` kube's resolver errors. `decision` is
    the answer for a request whose name does not matter (any_name, or no opinion), made once
    with the memo entry rather than on every request."""

    any_name: str | None = None
    by_name: dict[str, str] = field(default_factory=dict)
    errors: str = ""
    decision: Decision = NO_OPINION


def _role_not_found(role_key: tuple[str, str, str]) -> str:
    kind, _, name = role_key
    return f"{kind.lower()}.rbac.authorization.k8s.io {go_quote(name)} not found"


def _describe_subject(subject: Any, binding_namespace: str) -> str:
    if subject.kind == "ServiceAccount":
        namespace = subject.namespace or binding_namespace
        return f"ServiceAccount {go_quote(subject.name + '/' + namespace)}"
    return f"{subject.kind} {go_quote(subject.name)}"


def _subject_key(subject: Any, binding_namespace: str) -> str | None:
    """The index key a subject is found under: "u:<user name>" or "g:<group>"."""
    name: str = subject.name
    if subject.kind == "User":
        return "u:" + name
    if subject.kind == "Group":
        return "g:" + name
    if subject.kind == "ServiceAccount":
        namespace = subject.namespace or binding_namespace
        if not namespace:
            return None
        return f"u:{SERVICE_ACCOUNT_PREFIX}{namespace}:{subject.name}"
    return None


# Memoized answers kept at most; past it the memo starts over (identities x request shapes
# is small in practice; this bounds a client that invents namespaces or paths).
MEMO_LIMIT = 50_000

_BindingId = tuple[str, str, str]  # (kind, namespace, name)


class RbacAuthorizer:
    """Evaluates requests against the RBAC objects it is fed (`apply`, or `attach` to the
    apiserver's watch caches)."""

    def __init__(self) -> None:
        self._roles: dict[tuple[str, str, str], tuple[Rule, ...]] = {}
        # Subject key -> binding id -> grant; cluster-wide and per namespace.
        self._cluster: dict[str, dict[_BindingId, _Grant]] = {}
        self._namespaced: dict[tuple[str, str], dict[_BindingId, _Grant]] = {}
        self._memo: dict[tuple[object, ...], _Answer] = {}

    # ---- feeding -------------------------------------------------------------------------

    def apply(self, kind: str, old: Any | None, new: Any | None) -> None:
        """One object of `kind` changed from `old` to `new` (None: absent)."""
        self._memo.clear()
        if kind in (ROLE.kind, CLUSTER_ROLE.kind):
            if old is not None:
                self._roles.pop(self._role_key(kind, old), None)
            if new is not None:
                self._roles[self._role_key(kind, new)] = tuple(Rule.of(r) for r in new.rules)
        elif kind in (ROLE_BINDING.kind, CLUSTER_ROLE_BINDING.kind):
            if old is not None:
                self._unbind(kind, old)
            if new is not None:
                self._bind(kind, new)

    def reset(self, kind: str, objects: Iterable[Any]) -> None:
        """Replace every object of `kind` (after a relist)."""
        self._memo.clear()
        if kind in (ROLE.kind, CLUSTER_ROLE.kind):
            for key in [k for k in self._roles if k[0] == kind]:
                del self._roles[key]
        else:
            for index in (self._cluster, self._namespaced):
                for grants in index.values():
                    for bid in [b for b in grants if b[0] == kind]:
                        del grants[bid]
        for obj in objects:
            self.apply(kind, None, obj)

    def attach(self, caches: Mapping[str, WatchCache]) -> None:
        """Follow the four kinds' watch caches from now on (their current state included)."""
        for kind in (ROLE.kind, CLUSTER_ROLE.kind, ROLE_BINDING.kind, CLUSTER_ROLE_BINDING.kind):
            cache = caches[kind]
            cache.listeners.append(self._listener(kind, cache))
            self.reset(kind, (c.obj for c in cache.state.values()))

    def _listener(self, kind: str, cache: WatchCache) -> Callable[[CacheEvent | None], None]:
        def on_event(event: CacheEvent | None) -> None:
            if event is None:
                self.reset(kind, (c.obj for c in cache.state.values()))
            elif event.type == "DELETED":
                self.apply(kind, event.cur.obj, None)
            else:
                self.apply(kind, event.prev.obj if event.prev else None, event.cur.obj)

        return on_event

    @staticmethod
    def _role_key(kind: str, role: Any) -> tuple[str, str, str]:
        namespace = role.metadata.namespace if kind == ROLE.kind else ""
        return (kind, namespace, role.metadata.name)

    def _grants(self, kind: str, binding: Any) -> list[tuple[str, _Grant]]:
        namespace = binding.metadata.namespace if kind == ROLE_BINDING.kind else ""
        ref = binding.roleRef
        role_ns = namespace if ref.kind == ROLE.kind else ""
        role_key = (ref.kind, role_ns, ref.name)
        shown = (
            f"RoleBinding {go_quote(binding.metadata.name + '/' + namespace)}"
            if kind == ROLE_BINDING.kind
            else f"ClusterRoleBinding {go_quote(binding.metadata.name)}"
        )
        out = []
        for subject in binding.subjects:
            key = _subject_key(subject, namespace)
            if key is None:
                continue
            source = (
                f"{shown} of {ref.kind} {go_quote(ref.name)} to "
                f"{_describe_subject(subject, namespace)}"
            )
            out.append((key, _Grant(role_key, source)))
        return out

    def _index_for(self, kind: str, binding: Any, key: str) -> dict[_BindingId, _Grant]:
        if kind == CLUSTER_ROLE_BINDING.kind:
            return self._cluster.setdefault(key, {})
        return self._namespaced.setdefault((binding.metadata.namespace, key), {})

    def _bind(self, kind: str, binding: Any) -> None:
        bid = (kind, binding.metadata.namespace, binding.metadata.name)
        for i, (key, grant) in enumerate(self._grants(kind, binding)):
            # A binding may name one subject twice; each entry stays distinct.
            self._index_for(kind, binding, key)[(*bid[:2], f"{bid[2]}#{i}")] = grant

    def _unbind(self, kind: str, binding: Any) -> None:
        bid = (kind, binding.metadata.namespace, binding.metadata.name)
        for i, (key, _) in enumerate(self._grants(kind, binding)):
            index = self._cluster if kind == CLUSTER_ROLE_BINDING.kind else self._namespaced
            bucket_key: Any = key if kind == CLUSTER_ROLE_BINDING.kind else (bid[1], key)
            bucket = index.get(bucket_key)
            if bucket is not None:
                bucket.pop((*bid[:2], f"{bid[2]}#{i}"), None)
                if not bucket:
                    del index[bucket_key]

    # ---- evaluation ----------------------------------------------------------------------

    def authorize(self, identity: Identity, attrs: Attributes) -> Decision:
        if attrs.resource_request:
            key: tuple[object, ...] = (
                identity.name,
                identity.groups,
                attrs.verb,
                attrs.api_group,
                attrs.resource,
                attrs.subresource,
                attrs.namespace,
            )
        else:
            key = (identity.name, identity.groups, attrs.verb, None, attrs.path)
        answer = self._memo.get(key)
        if answer is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            answer = self._memo[key] = self._evaluate(identity, attrs)
        if answer.by_name and answer.any_name is None:
            source = answer.by_name.get(attrs.name)
            if source is not None:
                return Decision(Outcome.ALLOW, source)
        return answer.decision

    def allows(self, identity: Identity, attrs: Attributes) -> bool:
        return self.authorize(identity, attrs).outcome is Outcome.ALLOW

    def _identity_grants(self, identity: Identity, namespace: str) -> list[_Grant]:
        keys = ["u:" + identity.name, *("g:" + g for g in identity.groups)]
        grants: list[_Grant] = []
        for key in keys:
            bucket = self._cluster.get(key)
            if bucket:
                grants.extend(bucket.values())
        if namespace:
            for key in keys:
                bucket = self._namespaced.get((namespace, key))
                if bucket:
                    grants.extend(bucket.values())
        return grants

    # ---- rule resolution (the escalation check, apiserver/auth/escalation.py) -------------

    def rules_for(
        self, identity: Identity, namespace: str
    ) -> tuple[list[Rule], list[tuple[str, str, str]]]:
        """Every rule bound to `identity` cluster-wide and, if `namespace`, in that namespace
        (kube's RulesFor), and the roles its bindings name that do not exist."""
        rules: list[Rule] = []
        missing: list[tuple[str, str, str]] = []
        for grant in self._identity_grants(identity, namespace):
            found = self._roles.get(grant.role_key)
            if found is None:
                missing.append(grant.role_key)
            else:
                rules.extend(found)
        return rules, missing

    def role_rules(self, key: tuple[str, str, str]) -> tuple[Rule, ...] | None:
        """The rules of ("ClusterRole", "", name) or ("Role", namespace, name); None if absent."""
        return self._roles.get(key)

    def _evaluate(self, identity: Identity, attrs: Attributes) -> _Answer:
        """Every rule of every role bound to the identity, the name left out of the match."""
        answer = _Answer()
        errors: list[str] = []
        unnamed = (
            Attributes(
                verb=attrs.verb,
                resource=attrs.resource,
                api_group=attrs.api_group,
                subresource=attrs.subresource,
                namespace=attrs.namespace,
            )
            if attrs.resource_request
            else attrs
        )
        for grant in self._identity_grants(identity, attrs.namespace):
            rules = self._roles.get(grant.role_key)
            if rules is None:
                errors.append(_role_not_found(grant.role_key))
                continue
            for rule in rules:
                if not (rule.resource_names and attrs.resource_request):
                    if answer.any_name is None and rule_allows(rule, unnamed):
                        answer.any_name = f"RBAC: allowed by {grant.source}"
                    continue
                # Limited to names: match everything but the name, then keep the names.
                open_rule = Rule(rule.verbs, rule.api_groups, rule.resources)
                if rule_allows(open_rule, unnamed):
                    for name in rule.resource_names:
                        answer.by_name.setdefault(name, f"RBAC: allowed by {grant.source}")
            if answer.any_name is not None:
                break
        if errors:
            shown = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            answer.errors = f"RBAC: {shown}"
        if answer.any_name is not None:
            answer.decision = Decision(Outcome.ALLOW, answer.any_name)
        elif answer.errors:
            answer.decision = Decision(Outcome.NO_OPINION, answer.errors)
        return answer
