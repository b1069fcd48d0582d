"""Per-kind strategies: defaults on create, what Update and UpdateStatus may change, validation.

Mirrors the Kubernetes registry strategies (PrepareForCreate / PrepareForUpdate / Validate /
ValidateUpdate, with status as a subresource): `Update` keeps the stored status and
`UpdateStatus` keeps the stored spec and metadata, each ignoring the other part. Pure functions
over protobuf messages; the server calls them between its etcd read and its compare-and-swap
write, so they run once per attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from google.protobuf.message import Message

from apiserver import (
    batch,
    configdata,
    daemonset,
    endpointslice,
    podmutation,
    serviceaccount,
    validation,
)
from apiserver.validation import PROBE_KINDS
from tinykube.errors import FieldError
from tinykube.kinds import (
    CLUSTER_ROLE_BINDING,
    DAEMON_SET,
    DEPLOYMENT,
    ENDPOINT_SLICE,
    EVENT,
    JOB,
    LEASE,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    PRIORITY_CLASS,
    RBAC_GROUP,
    REPLICA_SET,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    KindInfo,
)
from tinykube.meta import int_or_string, int_or_string_problem, set_int_or_string, set_timestamp
from tinykube.v1 import deployment_pb2, namespace_pb2, pod_pb2, service_pb2

# Fields every kind supports in field selectors.
META_FIELDS = ("metadata.name", "metadata.namespace")

SELECTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    POD.kind: (
        *META_FIELDS,
        "spec.nodeName",
        "spec.schedulerName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    NODE.kind: (*META_FIELDS, "spec.unschedulable"),
    REPLICA_SET.kind: (*META_FIELDS, "status.replicas"),
    JOB.kind: (*META_FIELDS, "status.successful"),
    SERVICE.kind: (*META_FIELDS, "spec.clusterIP", "spec.type"),
    EVENT.kind: (
        *META_FIELDS,
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "type",
        "source",
    ),
    LEASE.kind: META_FIELDS,
    NAMESPACE.kind: (*META_FIELDS, "status.phase"),
    SECRET.kind: (*META_FIELDS, "type"),
}

# The label Kubernetes keeps on every namespace, equal to its name (namespaceSelector uses it).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# The field selector term the watch cache indexes watchers and objects by: every kubelet watches
# its node's pods (spec.nodeName=<node>) and its own Node (metadata.name=<node>), so an event
# reaches the one interested kubelet without being tested against a thousand filters.
INDEX_FIELD: dict[str, str] = {POD.kind: "spec.nodeName", NODE.kind: "metadata.name"}


def fields_of(kind: str) -> Callable[[Message], dict[str, str]]:
    """A function giving the selectable field values of an object of `kind`."""
    if kind == POD.kind:

        def pod_fields(obj: Message) -> dict[str, str]:
            p: pod_pb2.Pod = obj  # type: ignore[assignment]
            return {
                "metadata.name": p.metadata.name,
                "metadata.namespace": p.metadata.namespace,
                "spec.nodeName": p.spec.nodeName,
                "spec.schedulerName": p.spec.schedulerName,
                "spec.restartPolicy": p.spec.restartPolicy,
                "spec.serviceAccountName": p.spec.serviceAccountName,
                "spec.hostNetwork": "true" if p.spec.hostNetwork else "false",
                "status.phase": p.status.phase,
                # kube selects on the first of status.podIPs.
                "status.podIP": p.status.podIPs[0].ip if p.status.podIPs else p.status.podIP,
                "status.nominatedNodeName": p.status.nominatedNodeName,
            }

        return pod_fields
    if kind == NODE.kind:

        def node_fields(obj: Message) -> dict[str, str]:
            return {
                "metadata.name": obj.metadata.name,  # type: ignore[attr-defined]
                "metadata.namespace": "",
                "spec.unschedulable": "true" if obj.spec.unschedulable else "false",  # type: ignore[attr-defined]
            }

        return node_fields
    if kind == REPLICA_SET.kind:

        def rs_fields(obj: Message) -> dict[str, str]:
            return {
                "metadata.name": obj.metadata.name,  # type: ignore[attr-defined]
                "metadata.namespace": obj.metadata.namespace,  # type: ignore[attr-defined]
                "status.replicas": str(obj.status.replicas),  # type: ignore[attr-defined]
            }

        return rs_fields
    if kind == JOB.kind:

        def job_fields(obj: Message) -> dict[str, str]:
            return {
                "metadata.name": obj.metadata.name,  # type: ignore[attr-defined]
                "metadata.namespace": obj.metadata.namespace,  # type: ignore[attr-defined]
                # kube's name for the count of succeeded pods.
                "status.successful": str(obj.status.succeeded),  # type: ignore[attr-defined]
            }

        return job_fields
    if kind == SERVICE.kind:

        def service_fields(obj: Message) -> dict[str, str]:
            return {
                "metadata.name": obj.metadata.name,  # type: ignore[attr-defined]
                "metadata.namespace": obj.metadata.namespace,  # type: ignore[attr-defined]
                "spec.clusterIP": obj.spec.clusterIP,  # type: ignore[attr-defined]
                "spec.type": obj.spec.type,  # type: ignore[attr-defined]
            }

        return service_fields
    if kind == EVENT.kind:

        def event_fields(obj: Message) -> dict[str, str]:
            e = obj
            ref = e.involvedObject  # type: ignore[attr-defined]
            return {
                "metadata.name": e.metadata.name,  # type: ignore[attr-defined]
                "metadata.namespace": e.metadata.namespace,  # type: ignore[attr-defined]
                "involvedObject.kind": ref.kind,
                "involvedObject.namespace": ref.namespace,
                "involvedObject.name": ref.name,
                "involvedObject.uid": ref.uid,
                "involvedObject.apiVersion": ref.apiVersion,
                "involvedObject.resourceVersion": ref.resourceVersion,
                "involvedObject.fieldPath": ref.fieldPath,
                "reason": e.reason,  # type: ignore[attr-defined]
                "reportingComponent": e.reportingComponent,  # type: ignore[attr-defined]
                "type": e.type,  # type: ignore[attr-defined]
                "source": e.source.component,  # type: ignore[attr-defined]
            }

        return event_fields
    if kind == NAMESPACE.kind:

        def namespace_fields(obj: Message) -> dict[str, str]:
            return {
                "metadata.name": obj.metadata.name,  # type: ignore[attr-defined]
                "metadata.namespace": "",
                "status.phase": obj.status.phase,  # type: ignore[attr-defined]
            }

        return namespace_fields
    if kind == SECRET.kind:

        def secret_fields(obj: Message) -> dict[str, str]:
            return {
                "metadata.name": obj.metadata.name,  # type: ignore[attr-defined]
                "metadata.namespace": obj.metadata.namespace,  # type: ignore[attr-defined]
                "type": obj.type,  # type: ignore[attr-defined]
            }

        return secret_fields

    def meta_fields(obj: Message) -> dict[str, str]:
        return {
            "metadata.name": obj.metadata.name,  # type: ignore[attr-defined]
            "metadata.namespace": obj.metadata.namespace,  # type: ignore[attr-defined]
        }

    return meta_fields


def _has_spec(info: KindInfo) -> bool:
    return "spec" in info.message.DESCRIPTOR.fields_by_name


DEFAULT_MAX_SURGE = "25%"
DEFAULT_MAX_UNAVAILABLE = "25%"


def default_deployment_spec(spec: deployment_pb2.DeploymentSpec) -> None:
    """Kubernetes' apps/v1 Deployment defaults: 1 replica, RollingUpdate with 25% surge and 25%
    unavailable, 10 old ReplicaSets kept, a 600 s progress deadline."""
    if not spec.HasField("replicas"):
        spec.replicas = 1
    strategy = spec.strategy
    if not strategy.type:
        strategy.type = "RollingUpdate"
    if strategy.type == "RollingUpdate":
        ru = strategy.rollingUpdate
        ru.SetInParent()  # present even when both bounds are defaulted, as Kubernetes'
        if ru.maxUnavailable.WhichOneof("kind") in (None, "null_value"):
            set_int_or_string(ru.maxUnavailable, DEFAULT_MAX_UNAVAILABLE)
        if ru.maxSurge.WhichOneof("kind") in (None, "null_value"):
            set_int_or_string(ru.maxSurge, DEFAULT_MAX_SURGE)
    if not spec.HasField("revisionHistoryLimit"):
        spec.revisionHistoryLimit = 10
    if not spec.HasField("progressDeadlineSeconds"):
        spec.progressDeadlineSeconds = 600


def default_service_spec(spec: service_pb2.ServiceSpec) -> None:
    """Kubernetes' Service defaults: type ClusterIP, protocol TCP, targetPort = port, session
    affinity None, single-stack IPv4, traffic policies Cluster (the allocator sets clusterIPs)."""
    if not spec.type:
        spec.type = "ClusterIP"
    if not spec.clusterIP and spec.clusterIPs:
        spec.clusterIP = spec.clusterIPs[0]
    if not spec.sessionAffinity:
        spec.sessionAffinity = "None"
    if not spec.ipFamilies:
        spec.ipFamilies.append("IPv4")
    if not spec.HasField("ipFamilyPolicy"):
        spec.ipFamilyPolicy = "SingleStack"
    if not spec.HasField("internalTrafficPolicy"):
        spec.internalTrafficPolicy = "Cluster"
    if spec.type in ("NodePort", "LoadBalancer") and not spec.externalTrafficPolicy:
        spec.externalTrafficPolicy = "Cluster"
    for port in spec.ports:
        if not port.protocol:
            port.protocol = "TCP"
        if int_or_string(port.targetPort) in (None, 0, "") and not int_or_string_problem(
            port.targetPort
        ):
            set_int_or_string(port.targetPort, port.port)


def default_probe(probe: pod_pb2.Probe) -> None:
    """Kubernetes' Probe defaults (SetDefaults_Probe, SetDefaults_HTTPGetAction): timeout 1 s,
    period 10 s, thresholds 1 success and 3 failures, an HTTP GET of "/"."""
    if probe.timeoutSeconds == 0:
        probe.timeoutSeconds = 1
    if probe.periodSeconds == 0:
        probe.periodSeconds = 10
    if probe.successThreshold == 0:
        probe.successThreshold = 1
    if probe.failureThreshold == 0:
        probe.failureThreshold = 3
    if probe.HasField("httpGet"):
        if not probe.httpGet.path:
            probe.httpGet.path = "/"
        if not probe.httpGet.scheme:
            probe.httpGet.scheme = "HTTP"


def keep_service_allocations(new: service_pb2.ServiceSpec, old: service_pb2.ServiceSpec) -> None:
    """An Update that leaves clusterIP or a nodePort out keeps the allocated one (applying the
    original manifest again must not change or free them). A change to type ExternalName
    drops the cluster IP the update kept (kube's dropTypeDependentFields): it is released."""
    if new.type == "ExternalName" and old.type != "ExternalName":
        if new.clusterIP in ("", old.clusterIP):
            new.clusterIP = ""
            del new.clusterIPs[:]
        return
    if not new.clusterIP:
        new.clusterIP = old.clusterIP
        new.clusterIPs[:] = old.clusterIPs
    if new.type not in ("NodePort", "LoadBalancer") or old.type not in (
        "NodePort",
        "LoadBalancer",
    ):
        return
    by_name = {(p.name, p.port): p.nodePort for p in old.ports}
    by_port = {p.port: p.nodePort for p in old.ports}
    for i, p in enumerate(new.ports):
        if p.nodePort == 0:
            p.nodePort = by_name.get((p.name, p.port)) or by_port.get(p.port, 0)
        if p.nodePort == 0 and i < len(old.ports) and old.ports[i].name == p.name:
            p.nodePort = old.ports[i].nodePort  # the same port entry, renumbered


_BINDING_KINDS = frozenset({ROLE_BINDING.kind, CLUSTER_ROLE_BINDING.kind})


def default_binding(binding: Any) -> None:
    """rbac/v1's defaults: roleRef and User/Group subjects are in the RBAC group unless said."""
    if not binding.roleRef.apiGroup:
        binding.roleRef.apiGroup = RBAC_GROUP
    for subject in binding.subjects:
        if not subject.apiGroup and subject.kind in ("User", "Group"):
            subject.apiGroup = RBAC_GROUP


class Strategy:
    """Create/update rules of one kind."""

    def __init__(self, info: KindInfo, *, default_grace_seconds: int = 30) -> None:
        self.info = info
        self.default_grace_seconds = default_grace_seconds

    # ---- create ----------------------------------------------------------------------------

    def prepare_for_create(self, obj: Message, now: datetime) -> None:
        """Fill server-owned metadata and defaults in place."""
        meta = obj.metadata  # type: ignore[attr-defined]
        obj.apiVersion = self.info.api_version  # type: ignore[attr-defined]
        obj.kind = self.info.kind  # type: ignore[attr-defined]
        meta.uid = str(uuid.uuid4())
        meta.resourceVersion = ""
        meta.generation = 1
        set_timestamp(meta.creationTimestamp, now)
        meta.ClearField("deletionTimestamp")
        meta.ClearField("deletionGracePeriodSeconds")
        if not self.info.namespaced:
            meta.namespace = ""
        kind = self.info.kind
        if kind == POD.kind:
            pod: pod_pb2.Pod = obj  # type: ignore[assignment]
            # As Kubernetes: a new pod's status is the server's, not the client's.
            pod.ClearField("status")
            pod.status.phase = "Pending"
            self._default_pod_spec(pod.spec)
            podmutation.prepare_pod_for_create(pod, now)
        elif kind == REPLICA_SET.kind:
            obj.ClearField("status")
            spec = obj.spec  # type: ignore[attr-defined]
            if not spec.HasField("replicas"):
                spec.replicas = 1
            self._default_pod_spec(spec.template.spec)
        elif kind == JOB.kind:
            batch.prepare_for_create(obj)  # type: ignore[arg-type]
            self._default_pod_spec(obj.spec.template.spec)  # type: ignore[attr-defined]
        elif kind == DEPLOYMENT.kind:
            obj.ClearField("status")
            default_deployment_spec(obj.spec)  # type: ignore[attr-defined]
            self._default_pod_spec(obj.spec.template.spec)  # type: ignore[attr-defined]
        elif kind == SERVICE.kind:
            obj.ClearField("status")
            default_service_spec(obj.spec)  # type: ignore[attr-defined]
        elif kind == DAEMON_SET.kind:
            daemonset.prepare_for_create(obj)  # type: ignore[arg-type]
            self._default_pod_spec(obj.spec.template.spec)  # type: ignore[attr-defined]
        elif kind == POD_DISRUPTION_BUDGET.kind:
            obj.ClearField("status")  # the disruption controller's, as in Kubernetes
        elif kind == NAMESPACE.kind:
            ns: namespace_pb2.Namespace = obj  # type: ignore[assignment]
            ns.ClearField("status")
            ns.status.phase = "Active"
            if validation.NAMESPACE_FINALIZER not in ns.spec.finalizers:
                ns.spec.finalizers.append(validation.NAMESPACE_FINALIZER)
            self.canonicalize(ns)
        elif kind == PRIORITY_CLASS.kind:
            if not obj.HasField("preemptionPolicy"):
                obj.preemptionPolicy = "PreemptLowerPriority"  # type: ignore[attr-defined]
        elif kind == EVENT.kind:
            # A legacy (core/v1) Event counts itself; one with an eventTime (events.k8s.io/v1
            # style) keeps its count in `series`, and deprecatedCount stays unset, as in kube.
            if obj.count == 0 and not obj.HasField("eventTime"):  # type: ignore[attr-defined]
                obj.count = 1  # type: ignore[attr-defined]
            if not obj.type:  # type: ignore[attr-defined]
                obj.type = "Normal"  # type: ignore[attr-defined]
        elif kind in _BINDING_KINDS:
            default_binding(obj)
        elif kind in configdata.KINDS:
            configdata.prepare(self.info, obj)
        elif kind == SERVICE_ACCOUNT.kind:
            serviceaccount.prepare(obj)  # type: ignore[arg-type]
        elif kind == ENDPOINT_SLICE.kind:
            endpointslice.prepare(obj)  # type: ignore[arg-type]

    def _default_pod_spec(self, spec: pod_pb2.PodSpec) -> None:
        serviceaccount.convert_pod_spec(spec)
        if not spec.schedulerName:
            spec.schedulerName = "tinykube"
        if not spec.restartPolicy:
            spec.restartPolicy = "Always"
        if not spec.dnsPolicy:
            spec.dnsPolicy = "ClusterFirst"
        if not spec.HasField("terminationGracePeriodSeconds"):
            spec.terminationGracePeriodSeconds = self.default_grace_seconds
        for c in (*spec.initContainers, *spec.containers):
            for port in c.ports:
                if not port.protocol:
                    port.protocol = "TCP"
            for kind in PROBE_KINDS:
                if c.HasField(kind):
                    default_probe(getattr(c, kind))
            for env in c.env:
                # kube's SetDefaults_ObjectFieldSelector; an unset divisor is the zero Quantity,
                # which kube's JSON shows as "0".
                source = env.valueFrom
                if source.HasField("fieldRef") and not source.fieldRef.apiVersion:
                    source.fieldRef.apiVersion = "v1"
                if source.HasField("resourceFieldRef") and not source.resourceFieldRef.HasField(
                    "divisor"
                ):
                    source.resourceFieldRef.divisor = "0"
            # kube's SetDefaults_Container and SetDefaults_HTTPGetAction (lifecycle hooks too).
            if not c.terminationMessagePath:
                c.terminationMessagePath = "/dev/termination-log"
            if not c.terminationMessagePolicy:
                c.terminationMessagePolicy = "File"
            for hook in (c.lifecycle.postStart, c.lifecycle.preStop):
                if hook.HasField("httpGet"):
                    hook.httpGet.path = hook.httpGet.path or "/"
                    hook.httpGet.scheme = hook.httpGet.scheme or "HTTP"
            if not c.imagePullPolicy:
                tag = c.image.rsplit("/", 1)[-1]
                c.imagePullPolicy = (
                    "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent"
                )
        for t in spec.tolerations:
            if not t.operator:
                t.operator = "Equal"

    def canonicalize(self, obj: Message) -> None:
        """What depends on the final name (a generateName create names the object after
        prepare_for_create): a namespace's kubernetes.io/metadata.name label."""
        if self.info.kind == NAMESPACE.kind:
            meta = obj.metadata  # type: ignore[attr-defined]
            if meta.name:
                meta.labels[NAMESPACE_NAME_LABEL] = meta.name

    def validate_create(self, obj: Message) -> list[FieldError]:
        errs = validation.validate(self.info, obj)
        if self.info.kind == JOB.kind:
            errs.extend(batch.validate_job(obj))  # type: ignore[arg-type]
        elif self.info.kind in daemonset.KINDS:
            errs.extend(daemonset.validate(self.info.kind, obj))
        elif self.info.kind in configdata.KINDS:
            errs.extend(configdata.validate(self.info, obj))
        elif self.info.kind == ENDPOINT_SLICE.kind:
            errs.extend(endpointslice.validate(obj))  # type: ignore[arg-type]
        return errs

    # ---- update ----------------------------------------------------------------------------

    def prepare_for_update(self, new: Message, old: Message) -> None:
        """Update: keep server-owned metadata and the stored status; a spec change bumps
        metadata.generation."""
        self._keep_server_metadata(new, old)
        target: Any = new
        if self.info.has_status:
            target.ClearField("status")
            target.status.CopyFrom(old.status)  # type: ignore[attr-defined]
        if self.info.kind == POD.kind:
            self._default_pod_spec(target.spec)
            _keep_admitted_priority(target.spec, old.spec)  # type: ignore[attr-defined]
        elif self.info.kind == NAMESPACE.kind:
            # Only Finalize changes spec.finalizers (Kubernetes' namespace strategy).
            target.spec.finalizers[:] = old.spec.finalizers  # type: ignore[attr-defined]
            self.canonicalize(target)
        elif self.info.kind == PRIORITY_CLASS.kind:
            if not target.HasField("preemptionPolicy"):
                target.preemptionPolicy = "PreemptLowerPriority"
        elif self.info.kind == REPLICA_SET.kind:
            if not target.spec.HasField("replicas"):
                target.spec.replicas = 1
            self._default_pod_spec(target.spec.template.spec)
        elif self.info.kind == JOB.kind:
            batch.prepare_for_update(target, old)  # type: ignore[arg-type]
            self._default_pod_spec(target.spec.template.spec)
        elif self.info.kind == DEPLOYMENT.kind:
            default_deployment_spec(target.spec)
            self._default_pod_spec(target.spec.template.spec)
            # As Kubernetes' deployment strategy: annotations are copied to the ReplicaSets, so
            # a change to them is a new generation too.
            if target.metadata.annotations != old.metadata.annotations:  # type: ignore[attr-defined]
                target.metadata.generation = old.metadata.generation + 1  # type: ignore[attr-defined]
        elif self.info.kind == DAEMON_SET.kind:
            self._default_pod_spec(target.spec.template.spec)
            daemonset.prepare_for_update(target, old)  # type: ignore[arg-type]
        elif self.info.kind == SERVICE.kind:
            default_service_spec(target.spec)
            keep_service_allocations(target.spec, old.spec)  # type: ignore[attr-defined]
        elif self.info.kind in _BINDING_KINDS:
            default_binding(target)
        elif self.info.kind in configdata.KINDS:
            configdata.prepare(self.info, target)
        elif self.info.kind == SERVICE_ACCOUNT.kind:
            serviceaccount.prepare(target)
        elif self.info.kind == ENDPOINT_SLICE.kind:
            endpointslice.prepare(target)
            endpointslice.bump_generation(target, old)  # type: ignore[arg-type]
        if _has_spec(self.info) and target.spec != old.spec:  # type: ignore[attr-defined]
            target.metadata.generation = old.metadata.generation + 1  # type: ignore[attr-defined]

    def prepare_for_status_update(self, new: Message, old: Message) -> Message:
        """UpdateStatus: the stored object with only the status replaced."""
        merged = type(old)()
        merged.CopyFrom(old)
        merged.status.CopyFrom(new.status)  # type: ignore[attr-defined]
        if self.info.kind == DEPLOYMENT.kind:
            # Kubernetes' deployment status strategy keeps only spec and labels: the controller
            # records the current revision annotation with the status.
            annotations = merged.metadata.annotations  # type: ignore[attr-defined]
            annotations.clear()
            annotations.update(new.metadata.annotations)  # type: ignore[attr-defined]
        return merged

    def prepare_for_finalize(self, new: Message, old: Message) -> Message:
        """A namespace's Finalize: the stored object with only spec.finalizers replaced."""
        merged = type(old)()
        merged.CopyFrom(old)
        merged.spec.finalizers[:] = new.spec.finalizers  # type: ignore[attr-defined]
        return merged

    def _keep_server_metadata(self, new: Message, old: Message) -> None:
        nm = new.metadata  # type: ignore[attr-defined]
        om = old.metadata  # type: ignore[attr-defined]
        new.apiVersion = self.info.api_version  # type: ignore[attr-defined]
        new.kind = self.info.kind  # type: ignore[attr-defined]
        nm.uid = om.uid
        nm.creationTimestamp.CopyFrom(om.creationTimestamp)
        nm.generation = om.generation
        nm.generateName = om.generateName
        # Deletion is driven by Delete, never by an Update.
        if om.HasField("deletionTimestamp"):
            nm.deletionTimestamp.CopyFrom(om.deletionTimestamp)
        else:
            nm.ClearField("deletionTimestamp")
        if om.HasField("deletionGracePeriodSeconds"):
            nm.deletionGracePeriodSeconds = om.deletionGracePeriodSeconds
        else:
            nm.ClearField("deletionGracePeriodSeconds")
        if not self.info.namespaced:
            nm.namespace = ""

    def validate_update(self, new: Message, old: Message) -> list[FieldError]:
        errs = validation.validate(self.info, new) + validation.validate_update(self.info, new, old)
        if self.info.kind == JOB.kind:
            errs.extend(batch.validate_job(new))  # type: ignore[arg-type]
            errs.extend(batch.validate_job_update(new, old))  # type: ignore[arg-type]
        if self.info.kind in daemonset.KINDS:
            errs += daemonset.validate(self.info.kind, new)
            errs += daemonset.validate_update(self.info.kind, new, old)
        if self.info.kind in configdata.KINDS:
            errs += configdata.validate_update(self.info, new, old)
            errs += configdata.validate(self.info, new)
        if self.info.kind == ENDPOINT_SLICE.kind:
            errs += endpointslice.validate(new)  # type: ignore[arg-type]
            errs += endpointslice.validate_update(new, old)  # type: ignore[arg-type]
        return errs

    def validate_status_update(self, new: Message, old: Message) -> list[FieldError]:
        # `new` is `old` with its status replaced (prepare_for_status_update): nothing but the
        # status can be invalid, and nothing immutable can have changed.
        if self.info.kind == DAEMON_SET.kind:
            return validation.validate_status(self.info, new) + daemonset.validate_status_update(
                new,  # type: ignore[arg-type]
                old,  # type: ignore[arg-type]
            )
        if self.info.kind == JOB.kind:
            # Like pods': the spec is as stored; only the status and its transitions.
            return batch.validate_job_status_update(new, old) + validation.printable(  # type: ignore[arg-type]
                "status",
                new.status,  # type: ignore[attr-defined]
            )
        return validation.validate_status(self.info, new)


def _keep_admitted_priority(new: pod_pb2.PodSpec, old: pod_pb2.PodSpec) -> None:
    """An update that leaves out what the Priority admission filled in at creation keeps it
    (Kubernetes' Priority admission does the same on update)."""
    if not new.HasField("priority") and old.HasField("priority"):
        new.priority = old.priority
    if not new.preemptionPolicy and old.preemptionPolicy:
        new.preemptionPolicy = old.preemptionPolicy
