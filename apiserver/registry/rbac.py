"""RBAC (rbac.authorization.k8s.io/v1): Roles, ClusterRoles and their bindings.

As kube's pkg/apis/rbac/validation and the rbac/v1 defaults: names are path segments
("system:node"), rules name verbs and either resources or non-resource URLs, a binding's
roleRef and User/Group subjects are in the RBAC group unless said, and roleRef never changes.
Privilege escalation is the store's (apiserver/auth/escalation.py). Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from apiserver.registry.base import Strategy
from apiserver.validation import (
    dns1123_subdomain,
    go_quote,
    invalid,
    required,
    unsupported,
)
from tinykube.errors import FieldError
from tinykube.kinds import RBAC_GROUP
from tinykube.selectors import label_selector_problems
from tinykube.v1 import rbac_pb2


def path_segment_problems(name: str) -> list[str]:
    """apimachinery's IsValidPathSegmentName: what RBAC accepts as a name."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def _policy_rule(path: str, rule: rbac_pb2.PolicyRule, *, namespaced: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    if not rule.verbs:
        errs.append(required(f"{path}.verbs", "verbs must contain at least one value"))
    if rule.nonResourceURLs:
        where = f"{path}.nonResourceURLs"
        if namespaced:
            detail = "namespaced rules cannot apply to non-resource URLs"
            errs.append(_url_list(where, rule.nonResourceURLs, detail))
        if rule.apiGroups or rule.resources or rule.resourceNames:
            detail = "rules cannot apply to both regular resources and non-resource URLs"
            errs.append(_url_list(where, rule.nonResourceURLs, detail))
        return errs
    if not rule.apiGroups:
        errs.append(
            required(f"{path}.apiGroups", "resource rules must supply at least one api group")
        )
    if not rule.resources:
        errs.append(
            required(f"{path}.resources", "resource rules must supply at least one resource")
        )
    if rule.resourceNames and len(rule.resources) > 1:
        errs.append(
            required(f"{path}.resourceNames", "resource names cannot apply to multiple resources")
        )
    return errs


def validate_role(
    role: rbac_pb2.Role | rbac_pb2.ClusterRole, *, namespaced: bool
) -> list[FieldError]:
    """A Role (namespaced) or ClusterRole: its rules, and a ClusterRole's aggregationRule."""
    errs: list[FieldError] = []
    for i, rule in enumerate(role.rules):
        errs.extend(_policy_rule(f"rules[{i}]", rule, namespaced=namespaced))
    if isinstance(role, rbac_pb2.ClusterRole) and role.HasField("aggregationRule"):
        selectors = role.aggregationRule.clusterRoleSelectors
        if not selectors:
            errs.append(
                required(
                    "aggregationRule.clusterRoleSelectors",
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                )
            )
        for i, selector in enumerate(selectors):
            for f, m in label_selector_problems(
                selector, f"aggregationRule.clusterRoleSelectors[{i}]"
            ):
                errs.append(FieldError(f, m))
    return errs


SERVICE_ACCOUNT_KIND = "ServiceAccount"

USER_KIND = "User"

GROUP_KIND = "Group"


def _subject(path: str, subject: rbac_pb2.Subject, *, namespaced: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    if not subject.name:
        errs.append(required(f"{path}.name"))
    if subject.kind == SERVICE_ACCOUNT_KIND:
        if subject.name:
            errs.extend(dns1123_subdomain(f"{path}.name", subject.name))
        if subject.apiGroup:
            errs.append(unsupported(f"{path}.apiGroup", subject.apiGroup, [""]))
        if not namespaced and not subject.namespace:
            errs.append(required(f"{path}.namespace"))
    elif subject.kind in (USER_KIND, GROUP_KIND):
        if not subject.name:
            what = "user" if subject.kind == USER_KIND else "group"
            errs.append(invalid(f"{path}.name", "", f"{what} name cannot be empty"))
        if subject.apiGroup != RBAC_GROUP:
            errs.append(unsupported(f"{path}.apiGroup", subject.apiGroup, [RBAC_GROUP]))
    else:
        errs.append(
            unsupported(f"{path}.kind", subject.kind, [SERVICE_ACCOUNT_KIND, USER_KIND, GROUP_KIND])
        )
    return errs


def validate_role_binding(
    binding: rbac_pb2.RoleBinding | rbac_pb2.ClusterRoleBinding, *, namespaced: bool
) -> list[FieldError]:
    """A RoleBinding (roleRef: Role or ClusterRole) or ClusterRoleBinding (ClusterRole only)."""
    errs: list[FieldError] = []
    ref = binding.roleRef
    if ref.apiGroup != RBAC_GROUP:
        errs.append(unsupported("roleRef.apiGroup", ref.apiGroup, [RBAC_GROUP]))
    kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    if ref.kind not in kinds:
        errs.append(unsupported("roleRef.kind", ref.kind, kinds))
    if not ref.name:
        errs.append(required("roleRef.name"))
    else:
        errs.extend(invalid("roleRef.name", ref.name, m) for m in path_segment_problems(ref.name))
    for i, subject in enumerate(binding.subjects):
        errs.extend(_subject(f"subjects[{i}]", subject, namespaced=namespaced))
    return errs


def _role_ref_text(ref: rbac_pb2.RoleRef) -> str:
    """A RoleRef as Go's %#v prints kube's struct in the immutability error."""
    group, kind, name = (go_quote(v) for v in (ref.apiGroup, ref.kind, ref.name))
    return f"rbac.RoleRef{{APIGroup:{group}, Kind:{kind}, Name:{name}}}"


def _url_list(path: str, urls: Iterable[str], detail: str) -> FieldError:
    """field.Invalid with a []string value, which Go prints with %#v."""
    shown = "[]string{" + ", ".join(go_quote(u) for u in urls) + "}"
    return FieldError(path, f"Invalid value: {shown}: {detail}")


def default_binding(binding: rbac_pb2.RoleBinding | rbac_pb2.ClusterRoleBinding) -> None:
    """rbac/v1's defaults: roleRef and User/Group subjects are in the RBAC group unless said."""
    if not binding.roleRef.apiGroup:
        binding.roleRef.apiGroup = RBAC_GROUP
    for subject in binding.subjects:
        if not subject.apiGroup and subject.kind in ("User", "Group"):
            subject.apiGroup = RBAC_GROUP


def _path_segment(path: str, name: str) -> list[FieldError]:
    # RBAC names are path segments ("system:node"), as Kubernetes' minimalNameRequirements.
    return [invalid(path, name, m) for m in path_segment_problems(name)]


class RoleStrategy(Strategy[rbac_pb2.Role | rbac_pb2.ClusterRole]):
    """Roles and ClusterRoles (the scope is the kind's)."""

    def name_problems(self, path: str, name: str) -> list[FieldError]:
        return _path_segment(path, name)

    def check(self, obj: rbac_pb2.Role | rbac_pb2.ClusterRole) -> list[FieldError]:
        return validate_role(obj, namespaced=self.info.namespaced)


Binding = rbac_pb2.RoleBinding | rbac_pb2.ClusterRoleBinding


class BindingStrategy(Strategy[Binding]):
    """RoleBindings and ClusterRoleBindings (the scope is the kind's)."""

    def name_problems(self, path: str, name: str) -> list[FieldError]:
        return _path_segment(path, name)

    def decode_defaults(self, obj: Binding) -> None:
        default_binding(obj)

    def default(self, obj: Binding, now: datetime) -> None:
        default_binding(obj)

    def on_update(self, new: Binding, old: Binding) -> None:
        default_binding(new)

    def check(self, obj: Binding) -> list[FieldError]:
        return validate_role_binding(obj, namespaced=self.info.namespaced)

    def check_update(self, new: Binding, old: Binding) -> list[FieldError]:
        if new.roleRef != old.roleRef:
            shown = _role_ref_text(new.roleRef)
            return [FieldError("roleRef", f"Invalid value: {shown}: cannot change roleRef")]
        return []
