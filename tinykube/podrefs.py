"""The ConfigMaps and Secrets a pod names, as (resource, namespace, name): kube's
podutil.VisitPodSecretNames and VisitPodConfigmapNames over what a tinykube pod can name.

Shared by the kubelet (kubelet/objectcache.py watches what its pods' volumes project) and the
apiserver's Node authorizer (apiserver/auth/node.py lets a node read what its pods reference),
so that the two cannot disagree about a volume kind. Pure functions.
"""

from __future__ import annotations

from tinykube.protowire import each
from tinykube.v1 import pod_pb2

# (resource: "configmaps" or "secrets", namespace, name)
Reference = tuple[str, str, str]


def volume_references(pod: pod_pb2.Pod) -> set[Reference]:
    """The ConfigMaps and Secrets the pod's volumes project: configMap and secret volumes and
    the configMap and secret sources of projected ones."""
    ns = pod.metadata.namespace
    out: set[Reference] = set()
    for vol in each(pod.spec.volumes):
        if vol.HasField("configMap"):
            out.add(("configmaps", ns, vol.configMap.name))
        elif vol.HasField("secret"):
            out.add(("secrets", ns, vol.secret.secretName))
        elif vol.HasField("projected"):
            for src in each(vol.projected.sources):
                if src.HasField("configMap"):
                    out.add(("configmaps", ns, src.configMap.name))
                elif src.HasField("secret"):
                    out.add(("secrets", ns, src.secret.name))
    return out


def pod_references(pod: pod_pb2.Pod) -> set[Reference]:
    """Every ConfigMap and Secret the pod names: its volumes', its imagePullSecrets, and the
    envFrom and env valueFrom of every container, init, regular and ephemeral (kube's
    podutil.AllContainers)."""
    ns = pod.metadata.namespace
    out = volume_references(pod)
    for ref in each(pod.spec.imagePullSecrets):
        out.add(("secrets", ns, ref.name))
    containers: tuple[pod_pb2.Container | pod_pb2.EphemeralContainer, ...] = (
        *each(pod.spec.initContainers),
        *each(pod.spec.containers),
        *each(pod.spec.ephemeralContainers),
    )
    for c in containers:
        for source in each(c.envFrom):
            if source.HasField("configMapRef"):
                out.add(("configmaps", ns, source.configMapRef.name))
            if source.HasField("secretRef"):
                out.add(("secrets", ns, source.secretRef.name))
        for var in each(c.env):
            if not var.HasField("valueFrom"):
                continue
            if var.valueFrom.HasField("configMapKeyRef"):
                out.add(("configmaps", ns, var.valueFrom.configMapKeyRef.name))
            if var.valueFrom.HasField("secretKeyRef"):
                out.add(("secrets", ns, var.valueFrom.secretKeyRef.name))
    return out
