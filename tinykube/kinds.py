"""The registry of API kinds: one row per kind tying together its name, messages and service.

Each row declares the kind's facts once: Kubernetes' group, version, plural, scope, short names,
categories, verbs, subresources and scale paths. The apiserver (discovery, OpenAPI, routing,
RBAC bootstrap), the typed client and the CLI all read this table, so adding a kind means adding
a .proto file and one row here. The facts about fields (patch strategies, list keys, required
fields) are tinykube.fieldfacts'.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from tinykube.v1 import (
    admissionregistration_pb2,
    admissionregistration_pb2_grpc,
    apiextensions_pb2,
    apiextensions_pb2_grpc,
    configmap_pb2,
    configmap_pb2_grpc,
    controllerrevision_pb2,
    controllerrevision_pb2_grpc,
    daemonset_pb2,
    daemonset_pb2_grpc,
    deployment_pb2,
    deployment_pb2_grpc,
    endpoints_pb2,
    endpoints_pb2_grpc,
    endpointslice_pb2,
    endpointslice_pb2_grpc,
    event_pb2,
    event_pb2_grpc,
    job_pb2,
    job_pb2_grpc,
    lease_pb2,
    lease_pb2_grpc,
    namespace_pb2,
    namespace_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    pod_pb2,
    pod_pb2_grpc,
    poddisruptionbudget_pb2,
    poddisruptionbudget_pb2_grpc,
    priorityclass_pb2,
    priorityclass_pb2_grpc,
    rbac_pb2,
    rbac_pb2_grpc,
    replicaset_pb2,
    replicaset_pb2_grpc,
    secret_pb2,
    secret_pb2_grpc,
    service_pb2,
    service_pb2_grpc,
    serviceaccount_pb2,
    serviceaccount_pb2_grpc,
)

# The core group's version: Pods, Nodes, Events, Services and Endpoints are "v1" objects.
API_VERSION = "v1"

# The verbs a stored kind serves (kube's discovery lists them in this order), those of a kind
# listed but not modelled, and those of the status and scale subresources.
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_VERBS = ("get", "list", "watch")
STATUS_VERBS = ("get", "patch", "update")


def api_package(group: str) -> str:
    """The Go package of an API group in k8s.io/api (and the prefix of its OpenAPI definition
    names, io.k8s.api.<package>): "core" for the core group, else the group's first label
    ("rbac" for rbac.authorization.k8s.io)."""
    return "core" if not group else group.split(".")[0]


@dataclass(frozen=True)
class Subresource:
    """One subresource of a kind, as discovery lists it ("pods/log")."""

    name: str  # "status"
    kind: str  # the kind it answers with: "Pod", "Binding", "Scale"
    verbs: tuple[str, ...]
    group: str = ""  # of `kind`, when it differs from the resource's ("autoscaling")
    version: str = ""


@dataclass(frozen=True)
class Scale:
    """A kind's scale subresource (autoscaling/v1 Scale): where its replicas and selector are,
    as a CustomResourceDefinition's `subresources.scale` names them (JSON paths)."""

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    # A LabelSelector object for the built-in kinds; Scale's status.selector prints it as text.
    label_selector_path: str = ".spec.selector"

    @property
    def subresource(self) -> Subresource:
        return Subresource("scale", "Scale", STATUS_VERBS, "autoscaling", "v1")


@dataclass(frozen=True)
class PrinterColumn:
    """One additionalPrinterColumn of a CustomResourceDefinition version."""

    name: str
    type: str  # integer, number, string, boolean, date
    json_path: str  # ".spec.replicas"
    format: str = ""
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class KindInfo:
    """Everything generic code needs to know about one kind."""

    kind: str  # "Pod"
    plural: str  # "pods": the etcd key segment and the CLI resource name
    namespaced: bool
    message: type[Message]
    list_message: type[Message]
    watch_event: type[Message]
    create_request: type[Message]
    update_request: type[Message]
    # Name of the object field in Create/Update requests: {"pod": {...}}.
    request_field: str
    service: str  # full gRPC service name, "tinykube.v1.Pods"
    stub: type[Any]
    add_servicer: Any  # the generated add_XServicer_to_server function
    has_status: bool  # whether UpdateStatus exists (status is a subresource)
    short_names: tuple[str, ...] = ()
    # Kubernetes' API group ("" is the core group) and version: REST paths and apiVersion.
    group: str = ""
    version: str = "v1"
    # kube's ReturnDeletedObject: a DELETE answers with the deleted object rather than a
    # Success Status (pods, services and service accounts; clients' typed delete calls
    # deserialize the answer as the kind).
    returns_deleted_object: bool = False
    # Discovery categories: `kubectl get all` lists the kinds in "all".
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    # Subresources besides status (`has_status`) and scale (`scale`), in discovery's order.
    subresources: tuple[Subresource, ...] = ()
    scale: Scale | None = None
    # A custom kind's (CRD's) additionalPrinterColumns; built-in kinds' tables are
    # tinykube.tables'.
    printer_columns: tuple[PrinterColumn, ...] = ()
    # A kind built at run time from a CustomResourceDefinition (apiserver/crd/serving.py).
    custom: bool = False

    @property
    def all_subresources(self) -> tuple[Subresource, ...]:
        """Every subresource, as discovery lists them: the kind's own, scale, status."""
        subs = list(self.subresources)
        if self.scale is not None:
            subs.append(self.scale.subresource)
        if self.has_status:
            subs.append(Subresource("status", self.kind, STATUS_VERBS))
        return tuple(subs)

    @property
    def api_version(self) -> str:
        """The object's apiVersion, as Kubernetes writes it: "v1", "apps/v1"."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_kind(self) -> str:
        """Kubernetes' GroupKind as its error messages print it: "Pod", "ReplicaSet.apps"."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


POD = KindInfo(
    kind="Pod",
    plural="pods",
    namespaced=True,
    message=pod_pb2.Pod,
    list_message=pod_pb2.PodList,
    watch_event=pod_pb2.PodWatchEvent,
    create_request=pod_pb2.CreatePodRequest,
    update_request=pod_pb2.UpdatePodRequest,
    request_field="pod",
    service="tinykube.v1.Pods",
    stub=pod_pb2_grpc.PodsStub,
    add_servicer=pod_pb2_grpc.add_PodsServicer_to_server,
    has_status=True,
    short_names=("po", "pod"),
    returns_deleted_object=True,
    categories=("all",),
    subresources=(
        Subresource("binding", "Binding", ("create",)),
        # kubectl debug (apiserver/ephemeral.py).
        Subresource("ephemeralcontainers", "Pod", ("get", "patch", "update")),
        # kubectl drain evicts only when discovery lists pods/eviction with its group and
        # version (policy/v1); otherwise it falls back to plain deletes.
        Subresource("eviction", "Eviction", ("create",), "policy", "v1"),
        Subresource("log", "Pod", ("get",)),
        # WebSocket streams relayed to the kubelet (apiserver/podstream.py).
        Subresource("attach", "PodAttachOptions", ("create", "get")),
        Subresource("exec", "PodExecOptions", ("create", "get")),
        Subresource("portforward", "PodPortForwardOptions", ("create", "get")),
    ),
)
NODE = KindInfo(
    kind="Node",
    plural="nodes",
    namespaced=False,
    message=node_pb2.Node,
    list_message=node_pb2.NodeList,
    watch_event=node_pb2.NodeWatchEvent,
    create_request=node_pb2.CreateNodeRequest,
    update_request=node_pb2.UpdateNodeRequest,
    request_field="node",
    service="tinykube.v1.Nodes",
    stub=node_pb2_grpc.NodesStub,
    add_servicer=node_pb2_grpc.add_NodesServicer_to_server,
    has_status=True,
    short_names=("no", "node"),
    # Relayed to the kubelet (apiserver/nodeproxy.py): GET stats/summary.
    subresources=(
        Subresource("proxy", "NodeProxyOptions", ("create", "delete", "get", "patch", "update")),
    ),
)
REPLICA_SET = KindInfo(
    kind="ReplicaSet",
    plural="replicasets",
    namespaced=True,
    message=replicaset_pb2.ReplicaSet,
    list_message=replicaset_pb2.ReplicaSetList,
    watch_event=replicaset_pb2.ReplicaSetWatchEvent,
    create_request=replicaset_pb2.CreateReplicaSetRequest,
    update_request=replicaset_pb2.UpdateReplicaSetRequest,
    request_field="replicaSet",
    service="tinykube.v1.ReplicaSets",
    stub=replicaset_pb2_grpc.ReplicaSetsStub,
    add_servicer=replicaset_pb2_grpc.add_ReplicaSetsServicer_to_server,
    has_status=True,
    short_names=("rs", "replicaset"),
    group="apps",
    categories=("all",),
    scale=Scale(),
)
DEPLOYMENT = KindInfo(
    kind="Deployment",
    plural="deployments",
    namespaced=True,
    message=deployment_pb2.Deployment,
    list_message=deployment_pb2.DeploymentList,
    watch_event=deployment_pb2.DeploymentWatchEvent,
    create_request=deployment_pb2.CreateDeploymentRequest,
    update_request=deployment_pb2.UpdateDeploymentRequest,
    request_field="deployment",
    service="tinykube.v1.Deployments",
    stub=deployment_pb2_grpc.DeploymentsStub,
    add_servicer=deployment_pb2_grpc.add_DeploymentsServicer_to_server,
    has_status=True,
    short_names=("deploy", "deployment"),
    group="apps",
    categories=("all",),
    scale=Scale(),
)
EVENT = KindInfo(
    kind="Event",
    plural="events",
    namespaced=True,
    message=event_pb2.Event,
    list_message=event_pb2.EventList,
    watch_event=event_pb2.EventWatchEvent,
    create_request=event_pb2.CreateEventRequest,
    update_request=event_pb2.UpdateEventRequest,
    request_field="event",
    service="tinykube.v1.Events",
    stub=event_pb2_grpc.EventsStub,
    add_servicer=event_pb2_grpc.add_EventsServicer_to_server,
    has_status=False,
    short_names=("ev", "event"),
)
LEASE = KindInfo(
    kind="Lease",
    plural="leases",
    namespaced=True,
    message=lease_pb2.Lease,
    list_message=lease_pb2.LeaseList,
    watch_event=lease_pb2.LeaseWatchEvent,
    create_request=lease_pb2.CreateLeaseRequest,
    update_request=lease_pb2.UpdateLeaseRequest,
    request_field="lease",
    service="tinykube.v1.Leases",
    stub=lease_pb2_grpc.LeasesStub,
    add_servicer=lease_pb2_grpc.add_LeasesServicer_to_server,
    has_status=False,
    short_names=("lease",),
    group="coordination.k8s.io",
)

SERVICE = KindInfo(
    kind="Service",
    plural="services",
    namespaced=True,
    message=service_pb2.Service,
    list_message=service_pb2.ServiceList,
    watch_event=service_pb2.ServiceWatchEvent,
    create_request=service_pb2.CreateServiceRequest,
    update_request=service_pb2.UpdateServiceRequest,
    request_field="service",
    service="tinykube.v1.Services",
    stub=service_pb2_grpc.ServicesStub,
    add_servicer=service_pb2_grpc.add_ServicesServicer_to_server,
    has_status=True,
    short_names=("svc", "service"),
    returns_deleted_object=True,
    categories=("all",),
)
# The message is ServiceEndpoints: protobuf gives the service tinykube.v1.Endpoints that name.
ENDPOINTS = KindInfo(
    kind="Endpoints",
    plural="endpoints",
    namespaced=True,
    message=endpoints_pb2.ServiceEndpoints,
    list_message=endpoints_pb2.EndpointsList,
    watch_event=endpoints_pb2.EndpointsWatchEvent,
    create_request=endpoints_pb2.CreateEndpointsRequest,
    update_request=endpoints_pb2.UpdateEndpointsRequest,
    request_field="endpoints",
    service="tinykube.v1.Endpoints",
    stub=endpoints_pb2_grpc.EndpointsStub,
    add_servicer=endpoints_pb2_grpc.add_EndpointsServicer_to_server,
    has_status=False,
    short_names=("ep",),
)

POD_DISRUPTION_BUDGET = KindInfo(
    kind="PodDisruptionBudget",
    plural="poddisruptionbudgets",
    namespaced=True,
    message=poddisruptionbudget_pb2.PodDisruptionBudget,
    list_message=poddisruptionbudget_pb2.PodDisruptionBudgetList,
    watch_event=poddisruptionbudget_pb2.PodDisruptionBudgetWatchEvent,
    create_request=poddisruptionbudget_pb2.CreatePodDisruptionBudgetRequest,
    update_request=poddisruptionbudget_pb2.UpdatePodDisruptionBudgetRequest,
    request_field="podDisruptionBudget",
    service="tinykube.v1.PodDisruptionBudgets",
    stub=poddisruptionbudget_pb2_grpc.PodDisruptionBudgetsStub,
    add_servicer=poddisruptionbudget_pb2_grpc.add_PodDisruptionBudgetsServicer_to_server,
    has_status=True,
    short_names=("pdb", "poddisruptionbudget"),
    group="policy",
)
NAMESPACE = KindInfo(
    kind="Namespace",
    plural="namespaces",
    namespaced=False,
    message=namespace_pb2.Namespace,
    list_message=namespace_pb2.NamespaceList,
    watch_event=namespace_pb2.NamespaceWatchEvent,
    create_request=namespace_pb2.CreateNamespaceRequest,
    update_request=namespace_pb2.UpdateNamespaceRequest,
    request_field="namespace",
    service="tinykube.v1.Namespaces",
    stub=namespace_pb2_grpc.NamespacesStub,
    add_servicer=namespace_pb2_grpc.add_NamespacesServicer_to_server,
    has_status=True,
    short_names=("ns", "namespace"),
    # As kube-apiserver: namespaces are deleted one at a time, never as a collection.
    verbs=tuple(v for v in ALL_VERBS if v != "deletecollection"),
    subresources=(Subresource("finalize", "Namespace", ("update",)),),
)
PRIORITY_CLASS = KindInfo(
    kind="PriorityClass",
    plural="priorityclasses",
    namespaced=False,
    message=priorityclass_pb2.PriorityClass,
    list_message=priorityclass_pb2.PriorityClassList,
    watch_event=priorityclass_pb2.PriorityClassWatchEvent,
    create_request=priorityclass_pb2.CreatePriorityClassRequest,
    update_request=priorityclass_pb2.UpdatePriorityClassRequest,
    request_field="priorityClass",
    service="tinykube.v1.PriorityClasses",
    stub=priorityclass_pb2_grpc.PriorityClassesStub,
    add_servicer=priorityclass_pb2_grpc.add_PriorityClassesServicer_to_server,
    has_status=False,
    short_names=("pc", "priorityclass"),
    group="scheduling.k8s.io",
)

ALL_KINDS: tuple[KindInfo, ...] = (
    POD,
    NODE,
    REPLICA_SET,
    EVENT,
    LEASE,
    SERVICE,
    ENDPOINTS,
    NAMESPACE,
    POD_DISRUPTION_BUDGET,
    PRIORITY_CLASS,
    DEPLOYMENT,
)

JOB = KindInfo(
    kind="Job",
    plural="jobs",
    namespaced=True,
    message=job_pb2.Job,
    list_message=job_pb2.JobList,
    watch_event=job_pb2.JobWatchEvent,
    create_request=job_pb2.CreateJobRequest,
    update_request=job_pb2.UpdateJobRequest,
    request_field="job",
    service="tinykube.v1.Jobs",
    stub=job_pb2_grpc.JobsStub,
    add_servicer=job_pb2_grpc.add_JobsServicer_to_server,
    has_status=True,
    short_names=("job",),
    group="batch",
    categories=("all",),
)
ALL_KINDS += (JOB,)

# RBAC (rbac.authorization.k8s.io/v1): what the apiserver's authorizer evaluates.
RBAC_GROUP = "rbac.authorization.k8s.io"


def _rbac_kind(kind: str, plural: str, field: str, namespaced: bool) -> KindInfo:
    return KindInfo(
        kind=kind,
        plural=plural,
        namespaced=namespaced,
        message=getattr(rbac_pb2, kind),
        list_message=getattr(rbac_pb2, f"{kind}List"),
        watch_event=getattr(rbac_pb2, f"{kind}WatchEvent"),
        create_request=getattr(rbac_pb2, f"Create{kind}Request"),
        update_request=getattr(rbac_pb2, f"Update{kind}Request"),
        request_field=field,
        service=f"tinykube.v1.{kind}s",
        stub=getattr(rbac_pb2_grpc, f"{kind}sStub"),
        add_servicer=getattr(rbac_pb2_grpc, f"add_{kind}sServicer_to_server"),
        has_status=False,
        short_names=(kind.lower(),),
        group=RBAC_GROUP,
    )


ROLE = _rbac_kind("Role", "roles", "role", True)
CLUSTER_ROLE = _rbac_kind("ClusterRole", "clusterroles", "clusterRole", False)
ROLE_BINDING = _rbac_kind("RoleBinding", "rolebindings", "roleBinding", True)
CLUSTER_ROLE_BINDING = _rbac_kind(
    "ClusterRoleBinding", "clusterrolebindings", "clusterRoleBinding", False
)
RBAC_KINDS: tuple[KindInfo, ...] = (ROLE, CLUSTER_ROLE, ROLE_BINDING, CLUSTER_ROLE_BINDING)

ALL_KINDS += RBAC_KINDS

DAEMON_SET = KindInfo(
    kind="DaemonSet",
    plural="daemonsets",
    namespaced=True,
    message=daemonset_pb2.DaemonSet,
    list_message=daemonset_pb2.DaemonSetList,
    watch_event=daemonset_pb2.DaemonSetWatchEvent,
    create_request=daemonset_pb2.CreateDaemonSetRequest,
    update_request=daemonset_pb2.UpdateDaemonSetRequest,
    request_field="daemonSet",
    service="tinykube.v1.DaemonSets",
    stub=daemonset_pb2_grpc.DaemonSetsStub,
    add_servicer=daemonset_pb2_grpc.add_DaemonSetsServicer_to_server,
    has_status=True,
    short_names=("ds", "daemonset"),
    group="apps",
    categories=("all",),
)
CONTROLLER_REVISION = KindInfo(
    kind="ControllerRevision",
    plural="controllerrevisions",
    namespaced=True,
    message=controllerrevision_pb2.ControllerRevision,
    list_message=controllerrevision_pb2.ControllerRevisionList,
    watch_event=controllerrevision_pb2.ControllerRevisionWatchEvent,
    create_request=controllerrevision_pb2.CreateControllerRevisionRequest,
    update_request=controllerrevision_pb2.UpdateControllerRevisionRequest,
    request_field="controllerRevision",
    service="tinykube.v1.ControllerRevisions",
    stub=controllerrevision_pb2_grpc.ControllerRevisionsStub,
    add_servicer=controllerrevision_pb2_grpc.add_ControllerRevisionsServicer_to_server,
    has_status=False,
    short_names=("controllerrevision",),
    group="apps",
)
ALL_KINDS += (DAEMON_SET, CONTROLLER_REVISION)

CONFIG_MAP = KindInfo(
    kind="ConfigMap",
    plural="configmaps",
    namespaced=True,
    message=configmap_pb2.ConfigMap,
    list_message=configmap_pb2.ConfigMapList,
    watch_event=configmap_pb2.ConfigMapWatchEvent,
    create_request=configmap_pb2.CreateConfigMapRequest,
    update_request=configmap_pb2.UpdateConfigMapRequest,
    request_field="configMap",
    service="tinykube.v1.ConfigMaps",
    stub=configmap_pb2_grpc.ConfigMapsStub,
    add_servicer=configmap_pb2_grpc.add_ConfigMapsServicer_to_server,
    has_status=False,
    short_names=("cm", "configmap"),
)
SECRET = KindInfo(
    kind="Secret",
    plural="secrets",
    namespaced=True,
    message=secret_pb2.Secret,
    list_message=secret_pb2.SecretList,
    watch_event=secret_pb2.SecretWatchEvent,
    create_request=secret_pb2.CreateSecretRequest,
    update_request=secret_pb2.UpdateSecretRequest,
    request_field="secret",
    service="tinykube.v1.Secrets",
    stub=secret_pb2_grpc.SecretsStub,
    add_servicer=secret_pb2_grpc.add_SecretsServicer_to_server,
    has_status=False,
    short_names=("secret",),
)
ALL_KINDS += (CONFIG_MAP, SECRET)

SERVICE_ACCOUNT = KindInfo(
    kind="ServiceAccount",
    plural="serviceaccounts",
    namespaced=True,
    message=serviceaccount_pb2.ServiceAccount,
    list_message=serviceaccount_pb2.ServiceAccountList,
    watch_event=serviceaccount_pb2.ServiceAccountWatchEvent,
    create_request=serviceaccount_pb2.CreateServiceAccountRequest,
    update_request=serviceaccount_pb2.UpdateServiceAccountRequest,
    request_field="serviceAccount",
    service="tinykube.v1.ServiceAccounts",
    stub=serviceaccount_pb2_grpc.ServiceAccountsStub,
    add_servicer=serviceaccount_pb2_grpc.add_ServiceAccountsServicer_to_server,
    has_status=False,
    short_names=("sa", "serviceaccount"),
    returns_deleted_object=True,
    subresources=(
        # TokenRequest (apiserver/auth/tokenrequest.py): `kubectl create token`.
        Subresource("token", "TokenRequest", ("create",), "authentication.k8s.io", "v1"),
    ),
)
ALL_KINDS += (SERVICE_ACCOUNT,)

# discovery.k8s.io/v1 EndpointSlices: what kube-proxy and `kubectl describe svc` read.
ENDPOINT_SLICE = KindInfo(
    kind="EndpointSlice",
    plural="endpointslices",
    namespaced=True,
    message=endpointslice_pb2.EndpointSlice,
    list_message=endpointslice_pb2.EndpointSliceList,
    watch_event=endpointslice_pb2.EndpointSliceWatchEvent,
    create_request=endpointslice_pb2.CreateEndpointSliceRequest,
    update_request=endpointslice_pb2.UpdateEndpointSliceRequest,
    request_field="endpointSlice",
    service="tinykube.v1.EndpointSlices",
    stub=endpointslice_pb2_grpc.EndpointSlicesStub,
    add_servicer=endpointslice_pb2_grpc.add_EndpointSlicesServicer_to_server,
    has_status=False,
    short_names=("endpointslice",),
    group="discovery.k8s.io",
)
ALL_KINDS += (ENDPOINT_SLICE,)
# admissionregistration.k8s.io/v1: the admission webhooks the apiserver calls on writes
# (apiserver/webhooks.py). Cluster-scoped.
ADMISSION_GROUP = "admissionregistration.k8s.io"


def _webhook_kind(kind: str, plural: str, field: str, service: str = "") -> KindInfo:
    service = service or f"{kind}s"
    return KindInfo(
        kind=kind,
        plural=plural,
        namespaced=False,
        message=getattr(admissionregistration_pb2, kind),
        list_message=getattr(admissionregistration_pb2, f"{kind}List"),
        watch_event=getattr(admissionregistration_pb2, f"{kind}WatchEvent"),
        create_request=getattr(admissionregistration_pb2, f"Create{kind}Request"),
        update_request=getattr(admissionregistration_pb2, f"Update{kind}Request"),
        request_field=field,
        service=f"tinykube.v1.{service}",
        stub=getattr(admissionregistration_pb2_grpc, f"{service}Stub"),
        add_servicer=getattr(admissionregistration_pb2_grpc, f"add_{service}Servicer_to_server"),
        has_status=False,
        short_names=(kind.lower(),),
        group=ADMISSION_GROUP,
        categories=("api-extensions",),
    )


MUTATING_WEBHOOK_CONFIGURATION = _webhook_kind(
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    "mutatingWebhookConfiguration",
)
VALIDATING_WEBHOOK_CONFIGURATION = _webhook_kind(
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
    "validatingWebhookConfiguration",
)
ALL_KINDS += (MUTATING_WEBHOOK_CONFIGURATION, VALIDATING_WEBHOOK_CONFIGURATION)
# CEL admission policies the apiserver runs itself (apiserver/policies.py); kube 1.30's v1.
VALIDATING_ADMISSION_POLICY = dataclasses.replace(
    _webhook_kind(
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "validatingAdmissionPolicy",
        "ValidatingAdmissionPolicies",
    ),
    has_status=True,
)
VALIDATING_ADMISSION_POLICY_BINDING = _webhook_kind(
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    "validatingAdmissionPolicyBinding",
)
ALL_KINDS += (VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING)

# apiextensions.k8s.io/v1 CustomResourceDefinitions: kinds defined at run time (docs/crds.md).
APIEXTENSIONS_GROUP = "apiextensions.k8s.io"
CUSTOM_RESOURCE_DEFINITION = KindInfo(
    kind="CustomResourceDefinition",
    plural="customresourcedefinitions",
    namespaced=False,
    message=apiextensions_pb2.CustomResourceDefinition,
    list_message=apiextensions_pb2.CustomResourceDefinitionList,
    watch_event=apiextensions_pb2.CustomResourceDefinitionWatchEvent,
    create_request=apiextensions_pb2.CreateCustomResourceDefinitionRequest,
    update_request=apiextensions_pb2.UpdateCustomResourceDefinitionRequest,
    request_field="customResourceDefinition",
    service="tinykube.v1.CustomResourceDefinitions",
    stub=apiextensions_pb2_grpc.CustomResourceDefinitionsStub,
    add_servicer=apiextensions_pb2_grpc.add_CustomResourceDefinitionsServicer_to_server,
    has_status=True,
    short_names=("crd", "crds"),
    group=APIEXTENSIONS_GROUP,
    categories=("api-extensions",),
)
ALL_KINDS += (CUSTOM_RESOURCE_DEFINITION,)
BY_KIND: dict[str, KindInfo] = {k.kind: k for k in ALL_KINDS}
BY_PLURAL: dict[str, KindInfo] = {k.plural: k for k in ALL_KINDS}
# Kinds with a scale subresource (autoscaling/v1 Scale over spec.replicas): kubectl scale.
SCALABLE_KINDS: frozenset[str] = frozenset(k.kind for k in ALL_KINDS if k.scale is not None)


def lookup(resource: str) -> KindInfo:
    """Find a kind by plural, singular, short name or Kind, case-insensitively ("po", "Pod")."""
    wanted = resource.lower()
    for info in ALL_KINDS:
        if wanted in (info.plural, info.kind.lower(), *info.short_names):
            return info
    known = ", ".join(k.plural for k in ALL_KINDS)
    raise KeyError(f'the server doesn\'t have a resource type "{resource}" (known: {known})')
