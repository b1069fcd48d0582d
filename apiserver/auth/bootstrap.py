"""Kubernetes' bootstrap RBAC policy, trimmed to what tinykube serves, reconciled at every start.

From kube's plugin/pkg/auth/authorizer/rbac/bootstrappolicy (policy.go, controller_policy.go):
the ClusterRoles `cluster-admin`, `admin`, `edit`, `view` (aggregated from
`system:aggregate-to-{admin,edit,view}`), `system:discovery`, `system:basic-user`,
`system:public-info-viewer`, `system:node`, `system:node-proxier`, `system:kube-scheduler`,
`system:kube-controller-manager` and the `system:controller:*` roles of the controllers tinykube
runs, and their ClusterRoleBindings. Every object carries the label
`kubernetes.io/bootstrapping: rbac-defaults` and the annotation
`rbac.authorization.kubernetes.io/autoupdate: "true"`, as kube's.

What differs from kube, and why:
- Rules name only resources tinykube serves (pods and their status, binding, eviction and log;
  nodes, events, services, endpoints, namespaces, configmaps, secrets, serviceaccounts;
  endpointslices;
  replicasets and deployments with status and scale; daemonsets with status,
  controllerrevisions; jobs; leases; poddisruptionbudgets; the RBAC kinds;
  selfsubjectaccessreviews and selfsubjectreviews; tokenreviews and subjectaccessreviews for
  `system:auth-delegator`, serviceaccounts/token): volumes and the rest are left out of every
  role. A rule over one kind is built from the kind's facts (`kind_rule`, `subresource_rule`:
  group, plural, declared subresources); rules naming several kinds, reviews or kube's
  authorization-only names (`<resource>/finalizers`) are written out, and
  tests/unit/test_kindfacts.py checks those against what discovery serves.
  `view` reads serviceaccounts, `edit` writes them, may impersonate them and create
  their tokens (as kube's). `system:service-account-issuer-discovery` lets every service
  account read the OIDC discovery documents, as kube's binding does. As kube's, `view`
  reads configmaps but not secrets (reading a Secret is an escalation); `edit` (and so `admin`)
  reads and writes both.
- `admin`, `edit` and `view` are aggregated as in kube (aggregationRule selecting the labels
  `rbac.authorization.k8s.io/aggregate-to-{admin,edit,view}`; the `system:aggregate-to-*` roles
  carry the rule tables below, `edit` is aggregated into `admin` and `view` into `edit`), and
  the clusterrole-aggregation controller (controller/clusterroleaggregation.py) keeps their
  rules the union of the roles selected, so a user's ClusterRole labelled aggregate-to-view
  extends `view`. Unlike kube's (created with no rules), they are created with the union
  already in place (`_union`, the order the controller writes), so they grant the same before
  the controller manager first runs.
- The leader election Leases are tinykube's names (`tinykube-scheduler`,
  `tinykube-controller-manager`, in kube-system), not kube's.
- tinykube's controller manager runs every controller under its own identity (kube's runs
  each under a service account, --use-service-account-credentials): each controller role's
  binding names the user `system:kube-controller-manager` beside kube's service account.

At start the apiserver reconciles these objects (apiserver/auth/reconcile.py): missing ones
are created, those annotated autoupdate "true" get missing permissions and subjects back,
those annotated "false" are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from tinykube.kinds import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CONFIG_MAP,
    CONTROLLER_REVISION,
    DAEMON_SET,
    DEPLOYMENT,
    ENDPOINT_SLICE,
    ENDPOINTS,
    JOB,
    LEASE,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    RBAC_GROUP,
    REPLICA_SET,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    KindInfo,
)
from tinykube.pki import FAKE_KUBELETS
from tinykube.v1 import meta_pb2, rbac_pb2

BOOTSTRAP_LABEL = ("kubernetes.io/bootstrapping", "rbac-defaults")
AUTOUPDATE_ANNOTATION = ("rbac.authorization.kubernetes.io/autoupdate", "true")
AGGREGATE_LABEL = "rbac.authorization.k8s.io/aggregate-to-{}"

SCHEDULER_LEASE = "tinykube-scheduler"
CONTROLLER_MANAGER_LEASE = "tinykube-controller-manager"

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
READ_WRITE = (*READ, *WRITE)

_CORE = ""
_APPS = "apps"
_AUTHZ = "authorization.k8s.io"
_AUTHN = "authentication.k8s.io"
_COORDINATION = "coordination.k8s.io"
_BATCH = "batch"
_EVENTS = "events.k8s.io"


def rule(
    verbs: Iterable[str],
    groups: Iterable[str],
    resources: Iterable[str],
    names: Iterable[str] = (),
) -> rbac_pb2.PolicyRule:
    return rbac_pb2.PolicyRule(
        verbs=list(verbs),
        apiGroups=list(groups),
        resources=list(resources),
        resourceNames=list(names),
    )


def kind_rule(verbs: Iterable[str], info: KindInfo, *subresources: str) -> rbac_pb2.PolicyRule:
    """A rule over one kind and some of its subresources, named from the kind's facts (group,
    plural, subresources); a subresource the kind does not declare is a programming error."""
    declared = {s.name for s in info.all_subresources}
    unknown = [s for s in subresources if s not in declared]
    if unknown:
        raise ValueError(f"{info.plural} has no subresource {', '.join(unknown)}")
    names = (info.plural, *(f"{info.plural}/{s}" for s in subresources))
    return rule(verbs, (info.group,), names)


def subresource_rule(
    verbs: Iterable[str], info: KindInfo, *subresources: str
) -> rbac_pb2.PolicyRule:
    """A rule over subresources of one kind only ("pods/status"), named from its facts as
    `kind_rule`'s are."""
    whole = kind_rule(verbs, info, *subresources)
    return rule(whole.verbs, whole.apiGroups, whole.resources[1:])


def url_rule(verbs: Iterable[str], urls: Iterable[str]) -> rbac_pb2.PolicyRule:
    return rbac_pb2.PolicyRule(verbs=list(verbs), nonResourceURLs=list(urls))


def _events() -> rbac_pb2.PolicyRule:
    """kube's eventsRule: events may be written in either API version."""
    return rule(("create", "update", "patch"), (_CORE, _EVENTS), ("events",))


def _meta(name: str, labels: dict[str, str] | None = None) -> meta_pb2.ObjectMeta:
    meta = meta_pb2.ObjectMeta(name=name)
    meta.labels.update(labels or {})
    meta.labels[BOOTSTRAP_LABEL[0]] = BOOTSTRAP_LABEL[1]
    meta.annotations[AUTOUPDATE_ANNOTATION[0]] = AUTOUPDATE_ANNOTATION[1]
    return meta


def cluster_role(
    name: str,
    rules: Iterable[rbac_pb2.PolicyRule],
    *,
    labels: dict[str, str] | None = None,
    aggregate_from: str = "",
) -> rbac_pb2.ClusterRole:
    role = rbac_pb2.ClusterRole(
        apiVersion=CLUSTER_ROLE.api_version,
        kind=CLUSTER_ROLE.kind,
        metadata=_meta(name, labels),
        rules=list(rules),
    )
    if aggregate_from:
        selector = role.aggregationRule.clusterRoleSelectors.add()
        selector.matchLabels[AGGREGATE_LABEL.format(aggregate_from)] = "true"
    return role


def user(name: str) -> rbac_pb2.Subject:
    return rbac_pb2.Subject(kind="User", apiGroup=RBAC_GROUP, name=name)


def group(name: str) -> rbac_pb2.Subject:
    return rbac_pb2.Subject(kind="Group", apiGroup=RBAC_GROUP, name=name)


def service_account(namespace: str, name: str) -> rbac_pb2.Subject:
    return rbac_pb2.Subject(kind="ServiceAccount", namespace=namespace, name=name)


def cluster_binding(
    role: str, subjects: Iterable[rbac_pb2.Subject], name: str = ""
) -> rbac_pb2.ClusterRoleBinding:
    return rbac_pb2.ClusterRoleBinding(
        apiVersion=CLUSTER_ROLE_BINDING.api_version,
        kind=CLUSTER_ROLE_BINDING.kind,
        metadata=_meta(name or role),
        roleRef=rbac_pb2.RoleRef(apiGroup=RBAC_GROUP, kind="ClusterRole", name=role),
        subjects=list(subjects),
    )


# ---- the user-facing roles ---------------------------------------------------------------------

_AGGREGATE_TO_VIEW = (
    rule(
        READ,
        (_CORE,),
        ("pods", "serviceaccounts", "services", "services/status", "endpoints", "configmaps"),
    ),
    rule(READ, (_CORE,), ("events", "pods/status", "namespaces/status", "pods/log")),
    kind_rule(READ, NAMESPACE),
    kind_rule(READ, REPLICA_SET, "status", "scale"),
    kind_rule(READ, DEPLOYMENT, "status", "scale"),
    kind_rule(READ, POD_DISRUPTION_BUDGET, "status"),
    kind_rule(READ, JOB, "status"),
    rule(READ, (_APPS,), ("controllerrevisions", "daemonsets", "daemonsets/status")),
    # As kube's: read only, in view and so edit and admin (CVE-2021-25740 took the writes away).
    kind_rule(READ, ENDPOINT_SLICE),
)
_AGGREGATE_TO_EDIT = (
    # Recorded only: tinykube has no impersonation (Impersonate-User headers are not read).
    kind_rule(("impersonate",), SERVICE_ACCOUNT),
    # kube's "read on escalating resources": view must not read secrets, edit does.
    rule(READ, (_CORE,), ("pods/attach", "pods/exec", "pods/portforward", "secrets")),
    kind_rule(WRITE, POD, "attach", "exec", "portforward"),
    subresource_rule(("create",), POD, "eviction"),
    rule(WRITE, (_CORE,), ("serviceaccounts", "services", "configmaps", "secrets", "events")),
    subresource_rule(("create",), SERVICE_ACCOUNT, "token"),
    kind_rule(WRITE, REPLICA_SET, "scale"),
    kind_rule(WRITE, DEPLOYMENT, "scale"),
    kind_rule(WRITE, POD_DISRUPTION_BUDGET),
    kind_rule(WRITE, JOB),
    kind_rule(READ_WRITE, LEASE),
    kind_rule(WRITE, DAEMON_SET),
)
_AGGREGATE_TO_ADMIN = (rule(READ_WRITE, (RBAC_GROUP,), ("roles", "rolebindings")),)


def _union(*rule_lists: Iterable[rbac_pb2.PolicyRule]) -> list[rbac_pb2.PolicyRule]:
    """Rules of the aggregated roles in kube's order (by role name), each once."""
    out: list[rbac_pb2.PolicyRule] = []
    for rules in rule_lists:
        for r in rules:
            if r not in out:
                out.append(r)
    return out


# Aggregation as kube's controller computes it: view <- aggregate-to-view; edit <-
# aggregate-to-edit and view (labelled aggregate-to-edit); admin <- edit (labelled
# aggregate-to-admin) and aggregate-to-admin. Matching roles are taken in name order.
_VIEW_RULES = _union(_AGGREGATE_TO_VIEW)
_EDIT_RULES = _union(_AGGREGATE_TO_EDIT, _VIEW_RULES)
_ADMIN_RULES = _union(_EDIT_RULES, _AGGREGATE_TO_ADMIN)

_ISSUER_DISCOVERY = (
    "/.well-known/openid-configuration",
    "/.well-known/openid-configuration/",
    "/openid/v1/jwks",
    "/openid/v1/jwks/",
)
_HEALTH_AND_VERSION = ("/livez", "/readyz", "/healthz", "/version", "/version/")
_DISCOVERY = (*_HEALTH_AND_VERSION, "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*")

# NodeRules(): what the system:node role grants (the Node authorizer gives nodes the same,
# limited to their own objects; this role is bound to no one, as in kube).
_NODE_RULES = (
    rule(("create",), ("authentication.k8s.io",), ("tokenreviews",)),
    rule(("create",), (_AUTHZ,), ("subjectaccessreviews", "localsubjectaccessreviews")),
    kind_rule(READ, SERVICE),
    kind_rule(("create", "get", "list", "watch"), NODE),
    subresource_rule(("update", "patch"), NODE, "status"),
    kind_rule(("update", "patch"), NODE),
    _events(),
    kind_rule(("create", "delete"), POD),
    subresource_rule(("update", "patch"), POD, "status"),
    subresource_rule(("create",), POD, "eviction"),
    kind_rule(("get",), ENDPOINTS),
    kind_rule(("get", "create", "update", "patch", "delete"), LEASE),
)


# tinykube's own: what a kubelet hosting many fake nodes (--fake-nodes N, KWOK-like) needs for
# all of them at once. The Node authorizer serves one node per identity and refuses a watch of
# every node or of pods without spec.nodeName=<node>, so such a process authenticates in the
# group tinykube:fake-kubelets instead, bound to this role: a kubelet's rights over every node
# (and no NodeRestriction admission, which applies to node identities only). For scale tests;
# a real kubelet keeps its system:node:<name> identity.
_FAKE_KUBELET_RULES = (
    kind_rule(("get", "list", "watch", "create", "update", "patch"), NODE),
    subresource_rule(("update", "patch"), NODE, "status"),
    kind_rule(("get", "list", "watch", "delete"), POD),
    subresource_rule(("update", "patch"), POD, "status"),
    subresource_rule(("create",), POD, "eviction"),
    kind_rule(("get", "list", "watch", "create", "update", "patch"), LEASE),
    _events(),
    rule(READ, (_CORE,), ("services", "endpoints")),
)


def cluster_roles() -> list[rbac_pb2.ClusterRole]:
    """The bootstrap ClusterRoles, user-facing and component ones."""
    return [
        cluster_role("cluster-admin", [rule("*", "*", "*"), url_rule("*", "*")]),
        cluster_role("system:discovery", [url_rule(("get",), _DISCOVERY)]),
        cluster_role(
            "system:basic-user",
            [
                rule(("create",), (_AUTHN,), ("selfsubjectreviews",)),
                rule(
                    ("create",),
                    (_AUTHZ,),
                    ("selfsubjectaccessreviews", "selfsubjectrulesreviews"),
                ),
            ],
        ),
        # For webhooks and proxies that delegate authentication and authorization; bound to
        # no one, as kube's.
        cluster_role(
            "system:auth-delegator",
            [
                rule(("create",), (_AUTHN,), ("tokenreviews",)),
                rule(("create",), (_AUTHZ,), ("subjectaccessreviews",)),
            ],
        ),
        # The service account issuer's OIDC discovery documents, for every service account.
        cluster_role(
            "system:service-account-issuer-discovery",
            [url_rule(("get",), _ISSUER_DISCOVERY)],
        ),
        cluster_role("system:public-info-viewer", [url_rule(("get",), _HEALTH_AND_VERSION)]),
        cluster_role("admin", _ADMIN_RULES, aggregate_from="admin"),
        cluster_role(
            "edit",
            _EDIT_RULES,
            labels={AGGREGATE_LABEL.format("admin"): "true"},
            aggregate_from="edit",
        ),
        cluster_role(
            "view",
            _VIEW_RULES,
            labels={AGGREGATE_LABEL.format("edit"): "true"},
            aggregate_from="view",
        ),
        cluster_role(
            "system:aggregate-to-admin",
            _AGGREGATE_TO_ADMIN,
            labels={AGGREGATE_LABEL.format("admin"): "true"},
        ),
        cluster_role(
            "system:aggregate-to-edit",
            _AGGREGATE_TO_EDIT,
            labels={AGGREGATE_LABEL.format("edit"): "true"},
        ),
        cluster_role(
            "system:aggregate-to-view",
            _AGGREGATE_TO_VIEW,
            labels={AGGREGATE_LABEL.format("view"): "true"},
        ),
        cluster_role("system:node", _NODE_RULES),
        cluster_role(
            "system:node-proxier",
            [
                rule(("list", "watch"), (_CORE,), ("services", "endpoints")),
                kind_rule(READ, NODE),
                _events(),
                kind_rule(("list", "watch"), ENDPOINT_SLICE),
            ],
        ),
        cluster_role(
            "system:kube-scheduler",
            [
                _events(),
                kind_rule(("create",), LEASE),
                rule(("get", "update"), (_COORDINATION,), ("leases",), (SCHEDULER_LEASE,)),
                kind_rule(READ, NODE),
                kind_rule(("get", "list", "watch", "delete"), POD),
                rule(("create",), (_CORE,), ("pods/binding", "bindings")),
                subresource_rule(("patch", "update"), POD, "status"),
                kind_rule(READ, SERVICE),
                kind_rule(READ, REPLICA_SET),
                kind_rule(READ, POD_DISRUPTION_BUDGET),
                rule(("create",), (_AUTHZ,), ("subjectaccessreviews",)),
                kind_rule(READ, NAMESPACE),
            ],
        ),
        cluster_role(
            "system:kube-controller-manager",
            [
                _events(),
                kind_rule(("create",), LEASE),
                rule(
                    ("get", "update"),
                    (_COORDINATION,),
                    ("leases",),
                    (CONTROLLER_MANAGER_LEASE,),
                ),
                # kube's "fundamental resources": the serviceaccount controller's accounts and
                # the serviceaccount-token controller's Secrets.
                kind_rule(("create",), SERVICE_ACCOUNT),
                kind_rule(("get", "update", "delete"), SECRET),
                rule(("get",), (_CORE,), ("namespaces", "serviceaccounts")),
                kind_rule(("update",), SERVICE_ACCOUNT),
                rule(("create",), (_AUTHZ,), ("subjectaccessreviews",)),
                rule(("list", "watch"), "*", "*"),
            ],
        ),
        cluster_role(FAKE_KUBELETS, _FAKE_KUBELET_RULES),
        *(role for role, _ in _controllers()),
    ]


CONTROLLER_PREFIX = "system:controller:"
KUBE_SYSTEM = "kube-system"


def _controllers() -> list[tuple[rbac_pb2.ClusterRole, str]]:
    """(role, service account) of each controller tinykube's controller manager runs."""
    roles = [
        (
            # Writes any rules into aggregated roles, so it may escalate clusterroles.
            "clusterrole-aggregation-controller",
            [kind_rule(("escalate", "get", "list", "watch", "update", "patch"), CLUSTER_ROLE)],
        ),
        (
            "replicaset-controller",
            [
                kind_rule(("get", "list", "watch", "update"), REPLICA_SET),
                subresource_rule(("update",), REPLICA_SET, "status"),
                rule(("update",), (_APPS,), ("replicasets/finalizers",)),
                kind_rule(("list", "watch", "patch", "create", "delete"), POD),
                _events(),
            ],
        ),
        (
            "deployment-controller",
            [
                kind_rule(("get", "list", "watch", "update"), DEPLOYMENT),
                subresource_rule(("update",), DEPLOYMENT, "status"),
                rule(("update",), (_APPS,), ("deployments/finalizers",)),
                kind_rule(
                    ("get", "list", "watch", "create", "update", "patch", "delete"), REPLICA_SET
                ),
                kind_rule(("get", "list", "update", "watch"), POD),
                _events(),
            ],
        ),
        (
            "node-controller",
            [
                kind_rule(("get", "list", "update", "delete", "patch"), NODE),
                subresource_rule(("patch", "update"), NODE, "status"),
                subresource_rule(("patch", "update"), POD, "status"),
                kind_rule(("list", "delete"), POD),
                _events(),
                kind_rule(("get",), POD),
            ],
        ),
        (
            "daemon-set-controller",
            [
                kind_rule(READ, DAEMON_SET),
                subresource_rule(("update",), DAEMON_SET, "status"),
                rule(("update",), (_APPS,), ("daemonsets/finalizers",)),
                kind_rule(("list", "watch"), NODE),
                kind_rule(("list", "watch", "create", "delete", "patch"), POD),
                # kube's role also creates pods/binding (daemon pods were bound by the
                # controller before 1.12); the scheduler places them now, and here the role's
                # rights are the whole controller manager's.
                kind_rule(
                    ("get", "list", "watch", "create", "delete", "update", "patch"),
                    CONTROLLER_REVISION,
                ),
                _events(),
            ],
        ),
        (
            "generic-garbage-collector",
            [rule(("get", "list", "watch", "patch", "update", "delete"), "*", "*"), _events()],
        ),
        (
            "endpoint-controller",
            [
                rule(READ, (_CORE,), ("services", "pods")),
                kind_rule(("get", "list", "create", "update", "delete"), ENDPOINTS),
                rule(("create",), (_CORE,), ("endpoints/restricted",)),
                _events(),
            ],
        ),
        (
            "endpointslice-controller",
            [
                rule(READ, (_CORE,), ("services", "pods", "nodes")),
                # Slices are owned by their Service with blockOwnerDeletion.
                rule(("update",), (_CORE,), ("services/finalizers",)),
                kind_rule(("get", "list", "create", "update", "delete"), ENDPOINT_SLICE),
                _events(),
            ],
        ),
        (
            "endpointslicemirroring-controller",
            [
                rule(READ, (_CORE,), ("services", "endpoints")),
                rule(("update",), (_CORE,), ("services/finalizers",)),
                rule(("update",), (_CORE,), ("endpoints/finalizers",)),
                kind_rule(("get", "list", "create", "update", "delete"), ENDPOINT_SLICE),
                _events(),
            ],
        ),
        (
            "namespace-controller",
            [
                kind_rule(("get", "list", "watch", "delete"), NAMESPACE),
                subresource_rule(("update",), NAMESPACE, "finalize", "status"),
                rule(("get", "list", "delete", "deletecollection"), "*", "*"),
            ],
        ),
        (
            "disruption-controller",
            [
                kind_rule(READ, REPLICA_SET),
                kind_rule(READ, POD_DISRUPTION_BUDGET),
                subresource_rule(("update",), POD_DISRUPTION_BUDGET, "status"),
                rule(("get",), "*", ("*/scale",)),
                _events(),
                subresource_rule(("patch", "update"), POD, "status"),
            ],
        ),
        (
            "job-controller",
            [
                kind_rule(("get", "list", "watch", "update", "patch"), JOB),
                subresource_rule(("update", "patch"), JOB, "status"),
                rule(("update",), (_BATCH,), ("jobs/finalizers",)),
                # kube's rule has patch only: tinykube's gRPC API removes the tracking
                # finalizer with an update.
                kind_rule(("list", "watch", "create", "delete", "patch", "update"), POD),
                _events(),
            ],
        ),
        (
            "root-ca-cert-publisher",
            [kind_rule(("create", "update"), CONFIG_MAP), _events()],
        ),
        (
            "service-account-controller",
            [kind_rule(("create",), SERVICE_ACCOUNT), _events()],
        ),
        (
            "ttl-after-finished-controller",
            [kind_rule(("get", "list", "watch", "delete"), JOB), _events()],
        ),
    ]
    return [(cluster_role(CONTROLLER_PREFIX + name, rules), name) for name, rules in roles]


def cluster_role_bindings() -> list[rbac_pb2.ClusterRoleBinding]:
    """The bootstrap ClusterRoleBindings."""
    return [
        cluster_binding("cluster-admin", [group("system:masters")]),
        cluster_binding("system:discovery", [group("system:authenticated")]),
        cluster_binding("system:basic-user", [group("system:authenticated")]),
        cluster_binding(
            "system:service-account-issuer-discovery", [group("system:serviceaccounts")]
        ),
        cluster_binding(
            "system:public-info-viewer",
            [group("system:authenticated"), group("system:unauthenticated")],
        ),
        cluster_binding("system:node-proxier", [user("system:kube-proxy")]),
        cluster_binding("system:kube-controller-manager", [user("system:kube-controller-manager")]),
        cluster_binding("system:kube-scheduler", [user("system:kube-scheduler")]),
        cluster_binding(FAKE_KUBELETS, [group(FAKE_KUBELETS)]),
        # Deprecated since the Node authorizer (kube 1.7): kept with no subjects, as kube does.
        cluster_binding("system:node", []),
        *(
            cluster_binding(
                role.metadata.name,
                [service_account(KUBE_SYSTEM, account), user("system:kube-controller-manager")],
            )
            for role, account in _controllers()
        ),
    ]
