"""Field facts: what Kubernetes' API types say about each field tinykube has, declared once.

Kubernetes keeps these facts in struct tags and markers on its Go types (`patchStrategy`,
`patchMergeKey`, `+listType`, `+listMapKey`, `+structType=atomic`, `+required`). tinykube's
messages are protobuf, so the facts live here, as one declarative table per fact, and every
reader takes them from here: strategic merge patch (apiserver/rest/patch.py), the field manager
of server-side apply (apiserver/fieldmanager.py) and the OpenAPI documents
(apiserver/rest/openapi.py: x-kubernetes-patch-strategy and -merge-key, list types, required).
Kubernetes' protobuf field numbers, where they differ from tinykube's, are a table of their
own (apiserver/rest/kubeproto_tables.py), read by the protobuf codec only.

Keys are (tinykube message full name, JSON field name); REQUIRED is keyed by Kubernetes type
name, as the OpenAPI documents name definitions. Pure data; no imports of the process packages.

A table rather than custom options on the .proto fields: these are Kubernetes' facts about its
types, not about tinykube's wire format, they are read only by Python, and options would make
every *_pb2 module change with each fact. tests/unit/test_kindfacts.py checks each row names a
field that exists, of the right shape.
"""

from __future__ import annotations

# tinykube message names that are not Kubernetes' Go type names: protobuf gives services and
# messages one namespace, and the events.k8s.io view needs its own messages. Errors and the
# OpenAPI definitions name the Go type.
KUBE_TYPE_NAMES: dict[str, str] = {
    "ServiceEndpoints": "Endpoints",
    "EndpointSlicePort": "EndpointPort",
    "EventsV1Event": "Event",
    "EventsV1EventList": "EventList",
    # admissionregistration.k8s.io (prefixed: apiextensions has types of the same names).
    "AdmissionServiceReference": "ServiceReference",
    "AdmissionWebhookClientConfig": "WebhookClientConfig",
    "ValidatingAdmissionPolicyCondition": "Condition",
    "ConversionServiceReference": "ServiceReference",
    "ConversionWebhookClientConfig": "WebhookClientConfig",
}

# Fields holding resource amounts (Kubernetes' resource.Quantity, a string): the
# map<string, string> fields Kubernetes types ResourceList, by name, and single fields by
# (message, field). OpenAPI types them Quantity; manifests read a YAML number there as one
# ("cpu: 1").
QUANTITY_MAPS = frozenset({"requests", "limits", "capacity", "allocatable"})
QUANTITY_FIELDS = frozenset({("tinykube.v1.ResourceFieldSelector", "divisor")})

# (message full name, JSON field) -> (patchStrategy, patchMergeKey), from the struct tags of
# k8s.io/api and k8s.io/apimachinery. Every other repeated field tinykube has is atomic there
# (no patchStrategy: a strategic patch replaces it whole), including NodeSpec.taints,
# PodSpec.tolerations, PodStatus.containerStatuses and Endpoints.subsets;
# tests/unit/rest/test_patch.py lists them and fails when a new repeated field is in neither.
PATCH_META: dict[tuple[str, str], tuple[str, str]] = {
    ("tinykube.v1.ObjectMeta", "ownerReferences"): ("merge", "uid"),
    ("tinykube.v1.ObjectMeta", "finalizers"): ("merge", ""),
    ("tinykube.v1.PodSpec", "initContainers"): ("merge", "name"),
    ("tinykube.v1.PodSpec", "topologySpreadConstraints"): ("merge", "topologyKey"),
    ("tinykube.v1.PodSpec", "schedulingGates"): ("merge", "name"),
    ("tinykube.v1.PodSpec", "containers"): ("merge", "name"),
    ("tinykube.v1.PodSpec", "ephemeralContainers"): ("merge", "name"),
    ("tinykube.v1.Container", "ports"): ("merge", "containerPort"),
    ("tinykube.v1.Container", "env"): ("merge", "name"),
    # kube's is "merge,retainKeys": the retained keys matter only for a volume's source.
    ("tinykube.v1.PodSpec", "volumes"): ("merge", "name"),
    ("tinykube.v1.Container", "volumeMounts"): ("merge", "mountPath"),
    ("tinykube.v1.PodSpec", "imagePullSecrets"): ("merge", "name"),
    ("tinykube.v1.EphemeralContainer", "ports"): ("merge", "containerPort"),
    ("tinykube.v1.EphemeralContainer", "env"): ("merge", "name"),
    ("tinykube.v1.EphemeralContainer", "volumeMounts"): ("merge", "mountPath"),
    ("tinykube.v1.PodStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.PodStatus", "podIPs"): ("merge", "ip"),
    ("tinykube.v1.PodStatus", "hostIPs"): ("merge", "ip"),
    ("tinykube.v1.NodeStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.NodeStatus", "addresses"): ("merge", "type"),
    ("tinykube.v1.ReplicaSetStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.DeploymentStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.ServiceSpec", "ports"): ("merge", "port"),
    ("tinykube.v1.PodDisruptionBudgetStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.DaemonSetStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.NamespaceStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.JobStatus", "conditions"): ("merge", "type"),
    ("tinykube.v1.ServiceAccount", "secrets"): ("merge", "name"),
    # admissionregistration.k8s.io: webhooks and their matchConditions by name.
    ("tinykube.v1.MutatingWebhookConfiguration", "webhooks"): ("merge", "name"),
    ("tinykube.v1.ValidatingWebhookConfiguration", "webhooks"): ("merge", "name"),
    ("tinykube.v1.MutatingWebhook", "matchConditions"): ("merge", "name"),
    ("tinykube.v1.ValidatingWebhook", "matchConditions"): ("merge", "name"),
    ("tinykube.v1.ValidatingAdmissionPolicySpec", "matchConditions"): ("merge", "name"),
    ("tinykube.v1.ValidatingAdmissionPolicyStatus", "conditions"): ("merge", "type"),
}


# Kubernetes' list-map keys where they are longer than the strategic merge key.
LIST_MAP_KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("tinykube.v1.Container", "ports"): ("containerPort", "protocol"),
    ("tinykube.v1.ServiceSpec", "ports"): ("port", "protocol"),
    ("tinykube.v1.PodSpec", "topologySpreadConstraints"): ("topologyKey", "whenUnsatisfiable"),
}
# Structs and maps Kubernetes marks atomic (structType/mapType=atomic): owned whole.
ATOMIC: frozenset[tuple[str, str]] = frozenset(
    {
        ("tinykube.v1.ReplicaSetSpec", "selector"),
        ("tinykube.v1.DeploymentSpec", "selector"),
        ("tinykube.v1.DaemonSetSpec", "selector"),
        ("tinykube.v1.ServiceSpec", "selector"),
        ("tinykube.v1.PodSpec", "nodeSelector"),
        ("tinykube.v1.PodAffinityTerm", "labelSelector"),
        ("tinykube.v1.PodAffinityTerm", "namespaceSelector"),
        ("tinykube.v1.TopologySpreadConstraint", "labelSelector"),
    }
)

# The fields Kubernetes marks required, by Kubernetes type name (JSON names); the OpenAPI
# documents emit only those the message has. They add them to tinykube.zerofields'
# REQUIRED_FIELDS, generated from Kubernetes' schemas for every message reached from a kind, so
# what matters here are the types that table does not walk (lists, Binding).
REQUIRED: dict[str, tuple[str, ...]] = {
    "Container": ("name",),
    "ContainerPort": ("containerPort",),
    "EnvVar": ("name",),
    "HTTPGetAction": ("port",),
    "HTTPHeader": ("name", "value"),
    "TCPSocketAction": ("port",),
    "GRPCAction": ("port",),
    "PodSpec": ("containers",),
    "NodeSelector": ("nodeSelectorTerms",),
    "NodeSelectorRequirement": ("key", "operator"),
    "PreferredSchedulingTerm": ("weight", "preference"),
    "PodCondition": ("type", "status"),
    "ContainerStatus": ("name", "ready", "restartCount", "image"),
    "ContainerStateTerminated": ("exitCode",),
    "Taint": ("key", "effect"),
    "NodeCondition": ("type", "status"),
    "NodeAddress": ("type", "address"),
    "NodeSystemInfo": (
        "machineID",
        "bootID",
        "kernelVersion",
        "osImage",
        "containerRuntimeVersion",
        "kubeletVersion",
        "operatingSystem",
        "architecture",
    ),
    "DaemonEndpoint": ("Port",),
    "ReplicaSetSpec": ("selector",),
    "ReplicaSetCondition": ("type", "status"),
    "ReplicaSetStatus": ("replicas",),
    "DeploymentSpec": ("selector", "template"),
    "DeploymentCondition": ("type", "status"),
    "DaemonSetSpec": ("selector", "template"),
    "DaemonSetCondition": ("type", "status"),
    "DaemonSetStatus": (
        "currentNumberScheduled",
        "numberMisscheduled",
        "desiredNumberScheduled",
        "numberReady",
    ),
    "ControllerRevision": ("revision",),
    "LabelSelectorRequirement": ("key", "operator"),
    "OwnerReference": ("apiVersion", "kind", "name", "uid"),
    "Event": ("metadata", "involvedObject"),
    "ServicePort": ("port",),
    "EndpointAddress": ("ip",),
    "EndpointPort": ("port",),
    "EndpointSlice": ("addressType", "endpoints"),
    "Endpoint": ("addresses",),
    # Same short name as core/v1 EndpointPort, nothing required (a full name wins).
    "io.k8s.api.discovery.v1.EndpointPort": (),
    "io.k8s.api.events.v1.Event": ("eventTime",),
    "Binding": ("target",),
    "PodList": ("items",),
}


def patch_meta(message_full_name: str, json_field: str) -> tuple[str, str] | None:
    """The (patchStrategy, patchMergeKey) of a field, or None where Kubernetes has none.

    A primitive list with the merge strategy has an empty merge key: ("merge", "")."""
    return PATCH_META.get((message_full_name, json_field))


def list_map_keys(message_full_name: str, json_field: str, merge_key: str) -> tuple[str, ...]:
    """The keys of a keyed list's items: Kubernetes' list-map keys, which are the strategic
    merge key unless LIST_MAP_KEYS widens them."""
    return LIST_MAP_KEYS.get((message_full_name, json_field), (merge_key,))
