"""A container's effective securityContext, as kube's kubelet derives it (pkg/securitycontext
and kuberuntime's security_context.go): the container's fields win over the pod's; the pod's
supplementalGroups and fsGroup are extra groups of every container. `verify_run_as_non_root`
is kube's verifyRunAsNonRoot, whose error keeps the container waiting with
CreateContainerConfigError. `seccomp_profile` and `apparmor_profile` are kube's
getSeccompProfile and getAppArmorProfile (kuberuntime helpers.go): the container's field,
else the pod's, as (type, localhost ref). Pure functions, but for `apparmor_enabled`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kubelet.lifecycle import pod_ref
from tinykube.v1 import pod_pb2


@dataclass(frozen=True)
class Effective:
    run_as_user: int | None = None
    run_as_group: int | None = None
    run_as_non_root: bool = False
    # The pod's supplementalGroups, then its fsGroup (kube's order).
    groups: list[int] = field(default_factory=list)
    privileged: bool = False
    read_only_root: bool = False
    # False: no_new_privs (kube: allowPrivilegeEscalation explicitly false).
    allow_privilege_escalation: bool = True
    add_capabilities: list[str] = field(default_factory=list)
    drop_capabilities: list[str] = field(default_factory=list)


def effective(pod: pod_pb2.Pod, container: pod_pb2.Container) -> Effective:
    psc = pod.spec.securityContext
    sc = container.securityContext

    def pick(name: str) -> int | None:
        if sc.HasField(name):  # type: ignore[arg-type]
            return int(getattr(sc, name))
        if psc.HasField(name):  # type: ignore[arg-type]
            return int(getattr(psc, name))
        return None

    non_root = (
        sc.runAsNonRoot
        if sc.HasField("runAsNonRoot")
        else (psc.runAsNonRoot if psc.HasField("runAsNonRoot") else False)
    )
    groups = list(psc.supplementalGroups)
    if psc.HasField("fsGroup") and psc.fsGroup not in groups:
        groups.append(psc.fsGroup)
    return Effective(
        run_as_user=pick("runAsUser"),
        run_as_group=pick("runAsGroup"),
        run_as_non_root=non_root,
        groups=groups,
        privileged=sc.privileged,
        read_only_root=sc.readOnlyRootFilesystem,
        allow_privilege_escalation=not (
            sc.HasField("allowPrivilegeEscalation") and not sc.allowPrivilegeEscalation
        ),
        add_capabilities=list(sc.capabilities.add),
        drop_capabilities=list(sc.capabilities.drop),
    )


def verify_run_as_non_root(
    pod: pod_pb2.Pod, container: pod_pb2.Container, image_uid: int | None, image_user: str
) -> str:
    """kube's verifyRunAsNonRoot: "" if the container may run, else why not. `image_uid` and
    `image_user` are the user the image runs as (numeric, or a name) when runAsUser is unset."""
    eff = effective(pod, container)
    if not eff.run_as_non_root:
        return ""
    who = f'(pod: "{pod_ref(pod)}", container: {container.name})'
    if eff.run_as_user is not None:
        if eff.run_as_user == 0:
            return f"container's runAsUser breaks non-root policy {who}"
        return ""
    if image_uid is not None and image_uid == 0:
        return f"container has runAsNonRoot and image will run as root {who}"
    if image_uid is None and image_user:
        return (
            f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
            f"cannot verify user is non-root {who}"
        )
    return ""


# A profile as the CRI's SecurityProfile carries it: RuntimeDefault, Unconfined or Localhost,
# and for Localhost the profile's path (seccomp) or name (AppArmor).
Profile = tuple[str, str]


def seccomp_profile(
    pod: pod_pb2.Pod,
    container: pod_pb2.Container | None,
    root: Path,
    *,
    default_runtime: bool = False,
) -> Profile:
    """kube's getSeccompProfile: the container's seccompProfile, else the pod's (`container`
    None: the pod sandbox's, the pod's only), else RuntimeDefault under the kubelet's
    --seccomp-default, else Unconfined. A Localhost profile's path is `root` (the kubelet's
    <root-dir>/seccomp) joined with localhostProfile."""
    sp: pod_pb2.SeccompProfile | None = None
    if container is not None and container.securityContext.HasField("seccompProfile"):
        sp = container.securityContext.seccompProfile
    elif pod.spec.securityContext.HasField("seccompProfile"):
        sp = pod.spec.securityContext.seccompProfile
    if sp is None:
        return ("RuntimeDefault" if default_runtime else "Unconfined", "")
    if sp.type == "RuntimeDefault":
        return ("RuntimeDefault", "")
    if sp.type == "Localhost":
        if not sp.localhostProfile:
            # kube's words; the apiserver's validation makes this unreachable.
            raise ValueError("localhostProfile must be set if seccompProfile type is Localhost.")
        return ("Localhost", os.path.normpath(os.path.join(root, sp.localhostProfile)))
    return ("Unconfined", "")


def apparmor_profile(pod: pod_pb2.Pod, container: pod_pb2.Container) -> Profile | None:
    """kube's getAppArmorProfile: the container's appArmorProfile, else the pod's; None when
    neither sets one (the runtime then applies its default where AppArmor is enabled)."""
    if container.securityContext.HasField("appArmorProfile"):
        ap = container.securityContext.appArmorProfile
    elif pod.spec.securityContext.HasField("appArmorProfile"):
        ap = pod.spec.securityContext.appArmorProfile
    else:
        return None
    if ap.type == "Localhost":
        return ("Localhost", ap.localhostProfile)
    return (ap.type, "")


def apparmor_required(pod: pod_pb2.Pod, container: pod_pb2.Container) -> bool:
    """kube's apparmor isRequired, for one container: a profile other than Unconfined."""
    profile = apparmor_profile(pod, container)
    return profile is not None and profile[0] != "Unconfined"


def apparmor_enabled(module: Path = Path("/sys/module/apparmor/parameters/enabled")) -> bool:
    """Whether this host enforces AppArmor (kube's apparmor.IsEnabled reads the same file)."""
    try:
        return module.read_text().strip().startswith("Y")
    except OSError:
        return False


# kube's AppArmor admit message on a host without AppArmor (reason "AppArmor").
APPARMOR_DISABLED = "Cannot enforce AppArmor: AppArmor is not enabled on the host"
