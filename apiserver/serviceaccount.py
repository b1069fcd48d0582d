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

Tokens come from TokenRequest (apiserver/auth/tokenrequest.py) and token Secrets (the
controller manager's serviceaccount-token controller); there is no projected token volume, so
automountServiceAccountToken is recorded and has no effect.
Pure functions over messages.
"""

from __future__ import annotations

from tinykube.v1 import pod_pb2, serviceaccount_pb2

# The account a pod runs as when it names none (admission's DefaultServiceAccountName), which
# the controller manager's serviceaccount controller keeps in every active namespace.
DEFAULT_SERVICE_ACCOUNT = "default"


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
