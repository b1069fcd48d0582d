"""pods/ephemeralcontainers: adding debugging containers to a running pod (`kubectl debug`), as
kube-apiserver's EphemeralContainersREST (KEP-277).

GET answers the pod; PUT and PATCH (JSON, merge and strategic merge patches: the list's merge
key is `name`) write it, of which only `spec.ephemeralContainers` is taken: the rest of the
body is dropped, the stored pod kept (kube's dropNonEphemeralContainerUpdates). The update is
checked as kube's ValidatePodEphemeralContainersUpdate: existing ephemeral containers may not be
removed or changed, a new one is a container with a unique name and an image, and without the
fields that make no sense for it (ports, resources, probes); `targetContainerName` names one of
the pod's containers. A regular pod update may not change `spec.ephemeralContainers` (kube's
"pod updates may not change fields" error), nor may a pod be created with them.

The pod store's `ephemeralcontainers` subresource (apiserver/podstore.py) writes through the
store's one update path with these rules; the REST router sends GET, PUT and PATCH there.

The kubelet starts each new ephemeral container once in the running pod and reports it in
`status.ephemeralContainerStatuses` (kubelet/ephemeral.py).
"""

from __future__ import annotations

from apiserver.validation import (
    PULL_POLICIES,
    dns1123_label,
    duplicate,
    forbidden,
    not_found,
    required,
    unsupported,
    validate_env,
    validate_env_from,
)
from tinykube.errors import FieldError, InvalidError
from tinykube.v1 import pod_pb2

# What an ephemeral container may not have (kube's validateEphemeralContainers).
_FORBIDDEN = ("ports", "resources", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle")


def prepare(new: pod_pb2.Pod, old: pod_pb2.Pod) -> pod_pb2.Pod:
    """The stored pod with the new pod's ephemeral containers (and its resourceVersion, a
    precondition)."""
    pod = pod_pb2.Pod()
    pod.CopyFrom(old)
    pod.metadata.resourceVersion = new.metadata.resourceVersion
    del pod.spec.ephemeralContainers[:]
    pod.spec.ephemeralContainers.extend(new.spec.ephemeralContainers)
    return pod


def validate_create(pod: pod_pb2.Pod) -> list[FieldError]:
    if pod.spec.ephemeralContainers:
        return [forbidden("spec.ephemeralContainers", "cannot be set on create")]
    return []


def validate_update(new: pod_pb2.Pod, old: pod_pb2.Pod) -> list[FieldError]:
    """kube's ValidatePodEphemeralContainersUpdate."""
    errs: list[FieldError] = []
    path = "spec.ephemeralContainers"
    new_by_name = {ec.name: (i, ec) for i, ec in enumerate(new.spec.ephemeralContainers)}
    for oc in old.spec.ephemeralContainers:
        found = new_by_name.get(oc.name)
        if found is None:
            errs.append(
                forbidden(path, f'existing ephemeral containers "{oc.name}" may not be removed')
            )
        elif found[1] != oc:
            errs.append(
                forbidden(
                    f"{path}[{found[0]}]",
                    f'existing ephemeral containers "{oc.name}" may not be changed',
                )
            )
    names = {c.name for c in (*new.spec.containers, *new.spec.initContainers)}
    targets = {c.name for c in (*new.spec.containers, *new.spec.initContainers)}
    volumes = {v.name for v in new.spec.volumes}
    for i, ec in enumerate(new.spec.ephemeralContainers):
        p = f"{path}[{i}]"
        if not ec.name:
            errs.append(required(f"{p}.name"))
        else:
            errs.extend(dns1123_label(f"{p}.name", ec.name))
            if ec.name in names:
                errs.append(duplicate(f"{p}.name", ec.name))
            names.add(ec.name)
        if not ec.image:
            errs.append(required(f"{p}.image"))
        if ec.imagePullPolicy and ec.imagePullPolicy not in PULL_POLICIES:
            errs.append(unsupported(f"{p}.imagePullPolicy", ec.imagePullPolicy, PULL_POLICIES))
        set_fields = {f.name for f, _ in ec.ListFields()}
        for name in _FORBIDDEN:
            if name in set_fields and (name == "ports" or getattr(ec, name).ListFields()):
                errs.append(forbidden(f"{p}.{name}", "cannot be set for an Ephemeral Container"))
        errs.extend(validate_env(f"{p}.env", ec.env))
        errs.extend(validate_env_from(f"{p}.envFrom", ec.envFrom))
        for j, mount in enumerate(ec.volumeMounts):
            if mount.name not in volumes:
                errs.append(not_found(f"{p}.volumeMounts[{j}].name", mount.name))
        if ec.targetContainerName and ec.targetContainerName not in targets:
            errs.append(not_found(f"{p}.targetContainerName", ec.targetContainerName))
    return errs


def invalid_error(pod: pod_pb2.Pod, errs: list[FieldError]) -> InvalidError:
    return InvalidError.for_object("Pod", pod.metadata.name, errs)
