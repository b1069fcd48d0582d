"""Defaults of a pod spec, shared by Pods and the templates of ReplicaSets, Deployments,
DaemonSets and Jobs (kube's SetDefaults_PodSpec, SetDefaults_Container, SetDefaults_Probe).

Pure functions over messages, called by those kinds' strategies on create and update.
"""

from __future__ import annotations

from apiserver import serviceaccount
from apiserver.validation import PROBE_KINDS, each
from tinykube.v1 import pod_pb2


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


def default_pod_spec(spec: pod_pb2.PodSpec, grace_seconds: int) -> None:
    """The server's defaults of a pod spec; `grace_seconds` is the apiserver's default
    terminationGracePeriodSeconds."""
    serviceaccount.convert_pod_spec(spec)
    if not spec.schedulerName:
        spec.schedulerName = "tinykube"
    if not spec.restartPolicy:
        spec.restartPolicy = "Always"
    if not spec.dnsPolicy:
        spec.dnsPolicy = "ClusterFirst"
    # kube's SetDefaults_PodSpec: always a securityContext, {} at least (kubectl debug
    # dereferences it).
    spec.securityContext.SetInParent()
    if not spec.HasField("terminationGracePeriodSeconds"):
        spec.terminationGracePeriodSeconds = grace_seconds
    for c in (*each(spec.initContainers), *each(spec.containers)):
        for port in each(c.ports):
            if not port.protocol:
                port.protocol = "TCP"
        for kind in PROBE_KINDS:
            if c.HasField(kind):
                default_probe(getattr(c, kind))
        for env in each(c.env):
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
    for t in each(spec.tolerations):
        if not t.operator:
            t.operator = "Equal"
