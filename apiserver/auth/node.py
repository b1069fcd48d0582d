"""The Node authorizer and NodeRestriction admission: a kubelet may act only for its own node.

Modelled on kube's plugin/pkg/auth/authorizer/node (with AuthorizeNodeWithSelectors, on by
default since Kubernetes 1.32) and plugin/pkg/admission/noderestriction. An identity is a node
when its user is "system:node:<name>" and it is in the group "system:nodes"; for anyone else
the authorizer has no opinion (RBAC decides). For a node:

- nodes: create, update and patch (admission then allows only its own Node, and no
  node-restriction.kubernetes.io/ or unknown kubernetes.io labels), get/list/watch of its own
  Node only (by name, or the metadata.name=<node> field selector), nodes/status update/patch.
- pods: get of a pod bound to it; list/watch with spec.nodeName=<node> (or of one named pod
  bound to it); create and delete (admission: only pods bound to it, and tinykube has no mirror
  pods, so no create at all); pods/status update/patch and pods/eviction create (admission: only
  pods bound to it).
- leases: get, create, update, patch, delete of the Lease named after it in kube-node-lease.
- secrets, configmaps: get (and list/watch of one named object) of one that a pod bound to
  the node references, through imagePullSecrets, a container's (init, regular or ephemeral)
  env valueFrom (configMapKeyRef, secretKeyRef) or envFrom, or a configMap, secret or projected
  volume (tinykube/podrefs.py), as kube's graph of pods, nodes and what they use; anything else
  about them is refused. PersistentVolumes are refused.
- serviceaccounts/token: create, for an account a pod bound to the node runs as (kube's graph
  edge pod -> serviceaccount); NodeRestriction admission (`admit_node_token`) then requires the
  token to be bound to a pod on that node, by name and uid, as kube's admitServiceAccount.
- everything else: kube's static node rules (`NODE_RULES`: read services, get endpoints,
  write events, ...).

Which pod is bound to which node comes from the pod watch cache (`PodsFromCache`): one
dictionary lookup of the pod's key, whose cached selectable fields hold spec.nodeName. What the
bound pods reference is an index kept from the same cache's events (a cache listener): per
(node, resource, namespace, name) the number of bound pods referencing it, so a check is one
lookup. A pod's containers are immutable and its ephemeral containers are only ever added, so
an event that leaves its node and its number of ephemeral containers unchanged (every status
write) costs two comparisons, as kube's graph_populator skips such updates. Pure and
synchronous; runs on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from apiserver.auth.authorizer import (
    ALLOWED,
    NO_OPINION,
    Attributes,
    Decision,
    Identity,
    Outcome,
    go_quote,
    node_name_of,
)
from apiserver.auth.rbac import Rule, rules_allow
from apiserver.watchcache import DELETED, CachedObject, CacheEvent, WatchCache
from tinykube import podrefs
from tinykube.podrefs import Reference
from tinykube.selectors import SelectorError, parse_field_selector
from tinykube.v1 import pod_pb2

NODE_LEASE_NAMESPACE = "kube-node-lease"
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
NODE_RESTRICTION_LABEL_DOMAIN = "node-restriction.kubernetes.io"

_LEGACY = ("",)

# kube's bootstrappolicy.NodeRules(), trimmed to the kinds tinykube serves (and the review
# APIs): what every node may do beyond the per-object checks below.
NODE_RULES: tuple[Rule, ...] = (
    Rule(("create",), ("authentication.k8s.io",), ("tokenreviews",)),
    Rule(
        ("create",),
        ("authorization.k8s.io",),
        ("subjectaccessreviews", "localsubjectaccessreviews"),
    ),
    Rule(("get", "list", "watch"), _LEGACY, ("services",)),
    Rule(("create", "get", "list", "watch"), _LEGACY, ("nodes",)),
    Rule(("update", "patch"), _LEGACY, ("nodes/status",)),
    Rule(("update", "patch"), _LEGACY, ("nodes",)),
    Rule(("create", "update", "patch"), _LEGACY, ("events",)),
    Rule(("create", "delete"), _LEGACY, ("pods",)),
    Rule(("update", "patch"), _LEGACY, ("pods/status",)),
    Rule(("create",), _LEGACY, ("pods/eviction",)),
    Rule(("get",), _LEGACY, ("endpoints",)),
    Rule(("get", "create", "update", "patch", "delete"), ("coordination.k8s.io",), ("leases",)),
)


class PodLocator(Protocol):
    def node_of(self, namespace: str, name: str) -> str | None:
        """The node the pod is bound to ("" if unbound), or None if there is no such pod."""
        ...

    def referenced(self, node: str, resource: str, namespace: str, name: str) -> bool:
        """Whether a pod bound to `node` references the configmap or secret."""
        ...


def pod_references(pod: pod_pb2.Pod) -> frozenset[Reference]:
    """The configmaps and secrets a pod names (tinykube/podrefs.py, kube's
    VisitPodConfigmapNames and VisitPodSecretNames), and the service account it runs as."""
    out = podrefs.pod_references(pod)
    if pod.spec.serviceAccountName:
        out.add(("serviceaccounts", pod.metadata.namespace, pod.spec.serviceAccountName))
    return frozenset(out)


_NONE: frozenset[Reference] = frozenset()


class ReferenceIndex:
    """Per node, the configmaps and secrets its bound pods reference, with pod counts."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str, str], int] = {}
        # pod key -> (its node, what it references, its number of ephemeral containers): what
        # to take back when it goes, and whether an update can have changed it.
        self.pods: dict[bytes, tuple[str, frozenset[Reference], int]] = {}
        # Each distinct reference set once, with the number of pods holding it: the pods of a
        # namespace mostly name the same account and configmap, and a set per pod was ~600
        # bytes of the apiserver's bytes per pod.
        self._sets: dict[frozenset[Reference], tuple[frozenset[Reference], int]] = {}

    def set(self, key: bytes, node: str, pod: pod_pb2.Pod | None) -> None:
        """Record pod `key` as bound to `node` ("" or pod None: unbound or gone)."""
        old = self.pods.get(key)
        if (
            old is not None
            and pod is not None
            and old[0] == node
            and old[2] == len(pod.spec.ephemeralContainers)
        ):
            # Containers are immutable and ephemeral ones are only ever added (kube's graph
            # populator compares the same): same node, same references.
            return
        if old is not None:
            del self.pods[key]
            for ref in old[1]:
                full = (old[0], *ref)
                left = self.counts[full] - 1
                if left:
                    self.counts[full] = left
                else:
                    del self.counts[full]
            shared, holders = self._sets[old[1]]
            if holders > 1:
                self._sets[old[1]] = (shared, holders - 1)
            else:
                del self._sets[old[1]]
        if pod is None or not node:
            return
        refs = pod_references(pod) or _NONE
        shared, holders = self._sets.get(refs, (refs, 0))
        self._sets[shared] = (shared, holders + 1)
        refs = shared
        self.pods[key] = (node, refs, len(pod.spec.ephemeralContainers))
        for ref in refs:
            full = (node, *ref)
            self.counts[full] = self.counts.get(full, 0) + 1

    def referenced(self, node: str, resource: str, namespace: str, name: str) -> bool:
        return (node, resource, namespace, name) in self.counts


class PodsFromCache:
    """`PodLocator` over the apiserver's pod watch cache (keys `<prefix><ns>/<name>`)."""

    def __init__(self, cache: WatchCache, prefix: bytes) -> None:
        self.cache = cache
        self.prefix = prefix
        self.index = ReferenceIndex()
        cache.listeners.append(self._on_event)
        self._rebuild()

    def _rebuild(self) -> None:
        self.index = ReferenceIndex()
        for key, cached in self.cache.state.items():
            self._apply(key, cached)

    def _apply(self, key: bytes, cached: CachedObject) -> None:
        node = cached.fields.get("spec.nodeName", "")
        self.index.set(key, node, cached.obj)  # type: ignore[arg-type]

    def _on_event(self, event: CacheEvent | None) -> None:
        if event is None:
            self._rebuild()  # relisted: the state was replaced
        elif event.type == DELETED:
            self.index.set(event.cur.key, "", None)
        else:
            self._apply(event.cur.key, event.cur)

    def node_of(self, namespace: str, name: str) -> str | None:
        hit = self.cache.state.get(self.prefix + f"{namespace}/{name}".encode())
        if hit is None:
            return None
        return hit.fields.get("spec.nodeName", "")

    def referenced(self, node: str, resource: str, namespace: str, name: str) -> bool:
        return self.index.referenced(node, resource, namespace, name)


class StaticPods:
    """`PodLocator` over a dict (namespace, name) -> node, for tests and benchmarks; `objects`
    gives pods whose references count (keyed and bound as in `pods`)."""

    def __init__(
        self,
        pods: Mapping[tuple[str, str], str],
        objects: Mapping[tuple[str, str], pod_pb2.Pod] | None = None,
    ) -> None:
        self.pods = dict(pods)
        self.index = ReferenceIndex()
        for (namespace, name), pod in (objects or {}).items():
            node = self.pods.get((namespace, name), "")
            self.index.set(f"{namespace}/{name}".encode(), node, pod)

    def node_of(self, namespace: str, name: str) -> str | None:
        return self.pods.get((namespace, name))

    def referenced(self, node: str, resource: str, namespace: str, name: str) -> bool:
        return self.index.referenced(node, resource, namespace, name)


def _no(reason: str) -> Decision:
    return Decision(Outcome.NO_OPINION, reason)


def _requires(field_selector: str, field: str) -> str | None:
    """The value `field_selector` pins `field` to (field=value or field==value), else None."""
    if field not in field_selector:
        return None
    try:
        return parse_field_selector(field_selector).equality_value(field)
    except SelectorError:
        return None


def _no_relationship(node: str) -> Decision:
    return _no(f"no relationship found between node '{node}' and this object")


class NodeAuthorizer:
    """kube's NodeAuthorizer over tinykube's kinds; `pods` says which pod is on which node."""

    def __init__(self, pods: PodLocator) -> None:
        self.pods = pods

    def authorize(self, identity: Identity, attrs: Attributes) -> Decision:
        node, is_node = node_name_of(identity)
        if not is_node:
            return NO_OPINION
        if not node:
            return _no(f"unknown node for user {go_quote(identity.name)}")
        if attrs.resource_request:
            group, resource = attrs.api_group, attrs.resource
            if group == "":
                if resource == "pods":
                    return self._pod(node, attrs)
                if resource == "nodes":
                    return self._node(node, attrs)
                if resource in ("secrets", "configmaps"):
                    return self._read_referenced(node, attrs)
                if resource in ("persistentvolumeclaims", "persistentvolumes"):
                    return self._get_referenced(node, attrs)
                if resource == "serviceaccounts":
                    return self._create_token(node, attrs)
            elif group == "coordination.k8s.io" and resource == "leases":
                return self._lease(node, attrs)
        if rules_allow(attrs, NODE_RULES):
            return ALLOWED
        return NO_OPINION

    def _node(self, node: str, attrs: Attributes) -> Decision:
        verb, sub = attrs.verb, attrs.subresource
        if sub == "":
            if verb in ("create", "update", "patch"):
                return ALLOWED  # NodeRestriction admission: only its own Node
            if verb in ("get", "list", "watch"):
                # A list or watch names its object by the metadata.name field selector (the
                # request attributes carry it as the name, as kube's RequestInfo).
                name = attrs.name
                if name == node:
                    return ALLOWED
                if not name:
                    return _no(f"node '{node}' cannot read all nodes, only its own Node object")
                return _no(f"node '{node}' cannot read '{name}', only its own Node object")
        elif sub == "status" and verb in ("update", "patch"):
            return ALLOWED
        return NO_OPINION

    def _pod(self, node: str, attrs: Attributes) -> Decision:
        verb, sub = attrs.verb, attrs.subresource
        if sub == "":
            if verb == "get":
                return self._bound(node, attrs)
            if verb in ("list", "watch"):
                if _requires(attrs.field_selector, "spec.nodeName") == node:
                    return ALLOWED
                if attrs.name:
                    return self._bound(node, attrs)
                return _no("can only list/watch pods with spec.nodeName field selector")
            if verb in ("create", "delete"):
                return ALLOWED  # NodeRestriction admission: only pods bound to it
        elif sub == "status":
            if verb in ("update", "patch"):
                return ALLOWED
        elif sub == "eviction" and verb == "create":
            return ALLOWED
        return NO_OPINION

    def _bound(self, node: str, attrs: Attributes) -> Decision:
        name = attrs.name
        if not name:
            return _no("No Object name found")
        if self.pods.node_of(attrs.namespace, name) == node:
            return ALLOWED
        return _no_relationship(node)

    def _read_referenced(self, node: str, attrs: Attributes) -> Decision:
        # kube's authorizeReadNamespacedObject: one named object a pod on the node references
        # (a list or watch names it by the metadata.name field selector).
        if attrs.verb not in ("get", "list", "watch"):
            return _no("can only read resources of this type")
        if attrs.subresource:
            return _no("cannot read subresource")
        if not attrs.namespace:
            return _no("can only read namespaced object of this type")
        if not attrs.name:
            return _no("No Object name found")
        if self.pods.referenced(node, attrs.resource, attrs.namespace, attrs.name):
            return ALLOWED
        return _no_relationship(node)

    def _create_token(self, node: str, attrs: Attributes) -> Decision:
        # kube's authorizeCreateToken: a token of an account a pod on the node runs as.
        if attrs.verb != "create" or not attrs.name:
            return _no("can only create tokens for individual service accounts")
        if attrs.subresource != "token":
            return _no("can only create token subresource of serviceaccount")
        if self.pods.referenced(node, "serviceaccounts", attrs.namespace, attrs.name):
            return ALLOWED
        return _no_relationship(node)

    def _get_referenced(self, node: str, attrs: Attributes) -> Decision:
        if attrs.verb != "get":
            return _no("can only get individual resources of this type")
        if attrs.subresource:
            return _no("cannot get subresource")
        if not attrs.name:
            return _no("No Object name found")
        return _no_relationship(node)

    def _lease(self, node: str, attrs: Attributes) -> Decision:
        verb = attrs.verb
        if verb not in ("get", "create", "update", "patch", "delete"):
            return _no("can only get, create, update, patch, or delete a node lease")
        if attrs.namespace != NODE_LEASE_NAMESPACE:
            return _no(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
        # A create names its lease in the body: NodeRestriction admission checks it.
        if verb != "create" and attrs.name != node:
            return _no("can only access node lease with the same name as the requesting node")
        return ALLOWED


# ---- NodeRestriction admission -------------------------------------------------------------

# kubeletapis.IsKubeletLabel: the kubernetes.io labels a kubelet may set on its Node.
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    }
)
_KUBELET_LABEL_DOMAINS = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _in_domain(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def forbidden_node_labels(labels: Mapping[str, str], old: Mapping[str, str]) -> list[str]:
    """The labels added, changed or removed between `old` and `labels` that a node may not
    touch: node-restriction.kubernetes.io ones, and kubernetes.io/k8s.io ones a kubelet does
    not own (sorted, as kube lists them)."""
    changed = {k for k in (*labels, *old) if labels.get(k) != old.get(k)}
    out = []
    for label in changed:
        namespace = label.split("/", 1)[0] if "/" in label else ""
        restricted = _in_domain(namespace, NODE_RESTRICTION_LABEL_DOMAIN)
        kubernetes = _in_domain(namespace, "kubernetes.io") or _in_domain(namespace, "k8s.io")
        kubelets = label in _KUBELET_LABELS or any(
            _in_domain(namespace, d) for d in _KUBELET_LABEL_DOMAINS
        )
        if restricted or (kubernetes and not kubelets):
            out.append(label)
    return sorted(out)


def _forbidden(plural: str, name: str, why: str) -> str:
    shown = f"{plural} {go_quote(name)}" if name else plural
    return f"{shown} is forbidden: {why}"


# Admission names operations, not verbs.
_OPERATIONS = {
    "create": "CREATE",
    "update": "UPDATE",
    "patch": "UPDATE",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


def _same_labels(a: Any, b: Any) -> bool:
    """Equal label maps; protobuf map equality costs ~1 µs even when both are empty, and a
    pod status update (a kubelet's hottest write) pays it on every request."""
    if len(a) != len(b):
        return False
    return not a or dict(a) == dict(b)


def _admit_pod(node: str, attrs: Attributes, name: str, obj: Any, old: Any) -> str | None:
    verb, sub = attrs.verb, attrs.subresource
    operation = _OPERATIONS.get(verb, verb.upper())
    # The common case (a kubelet's status update of its own pod), before any message is built.
    if (
        sub == "status"
        and operation == "UPDATE"
        and (old is None or old.spec.nodeName == node)
        and (old is None or obj is None or _same_labels(obj.metadata.labels, old.metadata.labels))
    ):
        return None
    quoted = go_quote(node)
    if sub == "":
        if verb == "create":
            if obj is None or MIRROR_POD_ANNOTATION not in obj.metadata.annotations:
                return _forbidden(
                    "pods",
                    name,
                    f'pod does not have "{MIRROR_POD_ANNOTATION}" annotation, node {quoted} '
                    "can only create mirror pods",
                )
            # tinykube runs no static pods, so a node has no mirror pod to create either.
            return _forbidden("pods", name, f"node {quoted} can only create mirror pods")
        if verb == "delete":
            if old is not None and old.spec.nodeName != node:
                why = f"node {quoted} can only delete pods with spec.nodeName set to itself"
                return _forbidden("pods", name, why)
            return None
        return _forbidden(
            "pods",
            name,
            f"unexpected operation {go_quote(operation)}, node {quoted} can only create and "
            "delete mirror pods",
        )
    if sub == "status":
        if operation != "UPDATE":
            return _forbidden("pods", name, f"unexpected operation {go_quote(operation)}")
        if old is not None and old.spec.nodeName != node:
            return _forbidden(
                "pods",
                name,
                f"node {quoted} can only update pod status for pods with spec.nodeName set to "
                "itself",
            )
        if (
            old is not None
            and obj is not None
            and not _same_labels(obj.metadata.labels, old.metadata.labels)
        ):
            return _forbidden(
                "pods", name, f"node {quoted} cannot update labels through pod status"
            )
        return None
    if sub == "eviction":
        if operation != "CREATE":
            return _forbidden("pods", name, f"unexpected operation {operation}")
        if old is not None and old.spec.nodeName != node:
            why = f"node {node} can only evict pods with spec.nodeName set to itself"
            return _forbidden("pods", name, why)
        return None
    return _forbidden(
        "pods",
        name,
        f"unexpected pod subresource {go_quote(sub)}, only 'status' and 'eviction' are allowed",
    )


def node_restriction(
    identity: Identity,
    attrs: Attributes,
    obj: Any | None = None,
    old: Any | None = None,
) -> str | None:
    """NodeRestriction admission for a write the authorizers allowed: None to admit, else the
    403 message (`pods "web" is forbidden: node "node-1" can only ...`).

    `obj` is the object written (create/update), `old` the stored one (update, delete, pod
    status, eviction). Requests from identities that are not nodes are always admitted.
    """
    node, is_node = node_name_of(identity)
    if not is_node:
        return None
    resource, verb = attrs.resource, attrs.verb
    name = attrs.name or (obj.metadata.name if obj is not None else "")
    if not node:
        shown = f"{resource}.{attrs.api_group}" if attrs.api_group else resource
        return _forbidden(
            shown, name, f"could not determine node from user {go_quote(identity.name)}"
        )
    if attrs.api_group == "" and resource == "pods":
        return _admit_pod(node, attrs, name, obj, old)
    if attrs.api_group == "" and resource == "nodes":
        quoted = go_quote(node)  # (only the nodes' messages: not built per Lease renewal)
        if name != node:
            return _forbidden(
                "nodes", name, f"node {quoted} is not allowed to modify node {go_quote(name)}"
            )
        if obj is None:
            return None
        if verb == "create":
            bad = forbidden_node_labels(dict(obj.metadata.labels), {})
            if bad:
                return _forbidden(
                    "nodes",
                    name,
                    f"node {quoted} is not allowed to set the following labels: {', '.join(bad)}",
                )
        elif old is not None and verb in ("update", "patch"):
            if list(obj.spec.taints) != list(old.spec.taints):
                return _forbidden("nodes", name, f"node {quoted} is not allowed to modify taints")
            bad = forbidden_node_labels(dict(obj.metadata.labels), dict(old.metadata.labels))
            if bad:
                # kube's message has no subject here.
                return _forbidden(
                    "nodes", name, f"is not allowed to modify labels: {', '.join(bad)}"
                )
        return None
    if attrs.api_group == "coordination.k8s.io" and resource == "leases":
        shown = "leases.coordination.k8s.io"
        if attrs.namespace != NODE_LEASE_NAMESPACE:
            return _forbidden(
                shown,
                name,
                f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace',
            )
        if name != node:
            return _forbidden(
                shown, name, "can only access node lease with the same name as the requesting node"
            )
        return None
    return None
    return None


def admit_node_token(
    identity: Identity, namespace: str, account: str, bound: Mapping[str, Any] | None, pod: Any
) -> str | None:
    """NodeRestriction for a TokenRequest a node sends: None to admit, else the 403 message.
    `bound` is the request's spec.boundObjectRef, `pod` the pod it names (None: not found)."""
    node, is_node = node_name_of(identity)
    if not is_node:
        return None
    if not node:
        return _forbidden(
            "serviceaccounts",
            account,
            f"could not determine node from user {go_quote(identity.name)}",
        )
    if (
        bound is None
        or bound.get("apiVersion") != "v1"
        or bound.get("kind") != "Pod"
        or not bound.get("name")
    ):
        return _forbidden("serviceaccounts", account, "node requested token not bound to a pod")
    uid = bound.get("uid")
    if not uid:
        return _forbidden(
            "serviceaccounts", account, "node requested token with a pod binding without a uid"
        )
    if pod is None:
        return None  # TokenRequest answers the pod's NotFound
    if uid != pod.metadata.uid:
        return _forbidden(
            "serviceaccounts",
            account,
            f"the UID in the bound object reference ({uid}) does not match the UID in record. "
            "The object might have been deleted and then recreated",
        )
    if pod.spec.nodeName != node:
        return _forbidden(
            "serviceaccounts",
            account,
            "node requested token bound to a pod scheduled on a different node",
        )
    return None
