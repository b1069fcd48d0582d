"""ServiceAccounts (core/v1) in the registry, and the service-account fields of pod specs.

Kubernetes' rules, as pkg/registry/core/serviceaccount and pkg/apis/core/v1 have them:
- A ServiceAccount's name is a DNS subdomain (ValidateServiceAccountName; the generic metadata
  check); nothing else of it is validated. Its strategy keeps only the name of each entry of
  `secrets` (cleanSecretReferences) and, with no spec, sets no metadata.generation.
- A pod spec's `serviceAccount` is the deprecated alias of `serviceAccountName` (kube's v1
  conversion): when only the alias is set it fills serviceAccountName; serviceAccountName wins
  when both are, and the alias is then written back equal to it. Every pod spec (pods and the
  templates of workloads) is converted so.
- The ServiceAccount admission plugin (apiserver/admission.py) names "default" for a pod that
  names none and refuses a pod whose account does not exist.

- The admission plugin's token volume (kube's mountServiceAccountToken): a pod whose
  automountServiceAccountToken (else its account's) is not false gets a projected volume
  `kube-api-access-<5 random>` of a serviceAccountToken (expirationSeconds 3607, path token),
  ConfigMap kube-root-ca.crt's ca.crt and the downward API's metadata.namespace (path
  namespace), defaultMode 0644, mounted read-only at /var/run/secrets/kubernetes.io/
  serviceaccount in every container (init containers too) that mounts nothing there. The
  kubelet mints the token through TokenRequest (apiserver/auth/tokenrequest.py).
Pure functions over messages.
"""

from __future__ import annotations

import functools
import random

from tinykube.protowire import each
from tinykube.v1 import pod_pb2, serviceaccount_pb2

# The account a pod runs as when it names none (admission's DefaultServiceAccountName), which
# the controller manager's serviceaccount controller keeps in every active namespace.
DEFAULT_SERVICE_ACCOUNT = "default"

# kube's DefaultAPITokenMountPath, the token volume's name prefix, its token lifetime
# (kube's 1 h plus 7 s, so clients can tell a projected token from a legacy one) and the
# ConfigMap the controller manager publishes the cluster CA in.
API_TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
API_ACCESS_PREFIX = "kube-api-access-"
API_TOKEN_EXPIRATION_SECONDS = 3607
ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
ROOT_CA_KEY = "ca.crt"
# The alphabet of apimachinery's rand.String (no vowels, no confusable digits).
_RAND_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def prepare(sa: serviceaccount_pb2.ServiceAccount) -> None:
    """Create and update alike: secrets are references by name only; no generation."""
    sa.metadata.generation = 0
    for ref in sa.secrets:
        name = ref.name
        ref.Clear()
        ref.name = name


def convert_pod_spec(spec: pod_pb2.PodSpec) -> None:
    """The deprecated `serviceAccount` and `serviceAccountName` made one (kube's conversion)."""
    if not spec.serviceAccountName:
        spec.serviceAccountName = spec.serviceAccount
    spec.serviceAccount = spec.serviceAccountName


def set_pod_service_account(spec: pod_pb2.PodSpec, name: str) -> None:
    spec.serviceAccountName = name
    spec.serviceAccount = name


def random_suffix(length: int = 5) -> str:
    return "".join(random.choice(_RAND_ALPHABET) for _ in range(length))


def should_automount(spec: pod_pb2.PodSpec, account: serviceaccount_pb2.ServiceAccount) -> bool:
    if spec.HasField("automountServiceAccountToken"):
        return spec.automountServiceAccountToken
    if account.HasField("automountServiceAccountToken"):
        return account.automountServiceAccountToken
    return True


def api_access_volume(name: str) -> pod_pb2.Volume:
    """kube's TokenVolumeSource: the projected token, CA and namespace volume."""
    vol = pod_pb2.Volume()
    vol.CopyFrom(_api_access_template())
    vol.name = name
    return vol


@functools.cache
def _api_access_template() -> pod_pb2.Volume:
    # Built once: every pod's copy is one CopyFrom (the create path's admission runs per pod).
    vol = pod_pb2.Volume()
    vol.projected.defaultMode = 0o644
    token = vol.projected.sources.add().serviceAccountToken
    token.expirationSeconds = API_TOKEN_EXPIRATION_SECONDS
    token.path = "token"
    ca = vol.projected.sources.add().configMap
    ca.name = ROOT_CA_CONFIG_MAP
    ca.items.add(key=ROOT_CA_KEY, path=ROOT_CA_KEY)
    ns = vol.projected.sources.add().downwardAPI
    ns.items.add(
        path="namespace",
        fieldRef=pod_pb2.ObjectFieldSelector(apiVersion="v1", fieldPath="metadata.namespace"),
    )
    return vol


def add_api_access_volume(spec: pod_pb2.PodSpec, suffix: str) -> None:
    """Adds the token volume and its mounts, as kube's admission (nothing when every container
    already mounts something at the token path)."""
    containers = [
        c
        for c in (*each(spec.initContainers), *each(spec.containers))
        if not any(m.mountPath == API_TOKEN_MOUNT_PATH for m in each(c.volumeMounts))
    ]
    if not containers:
        return
    taken = {v.name for v in each(spec.volumes)}
    name = API_ACCESS_PREFIX + suffix
    while name in taken:
        name = API_ACCESS_PREFIX + random_suffix()
    vol = spec.volumes.add()
    vol.CopyFrom(_api_access_template())
    vol.name = name
    for c in containers:
        c.volumeMounts.add(name=name, readOnly=True, mountPath=API_TOKEN_MOUNT_PATH)
