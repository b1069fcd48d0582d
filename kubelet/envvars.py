"""A container's environment, as the kubelet's makeEnvironmentVariables builds it.

`make_environment(pod, container, sources)` takes `envFrom` first (every key of the ConfigMap's
data or the Secret's, with the source's prefix; a later source wins), then `env` in order: a
`value` has its $(VAR) references to the variables defined so far expanded (`expand`, kube's
expansion.Expand, which exec probe commands and the container's command and args use too); a
`valueFrom` reads the pod (fieldRef: status.podIP and status.hostIP are the IPs the kubelet
reports for the pod), the container's resources (resourceFieldRef: an unset cpu, memory or
ephemeral-storage limit is the node's allocatable, an unset request is the limit, as the API
defaults it; divided by the divisor and rounded up) or one key of a ConfigMap or Secret, fetched
from the apiserver with one GET per object per resolution (a Secret's bytes are passed as they
are: decoded as UTF-8 with surrogate escapes, so the process gets them unchanged). As in
Kubernetes 1.36, keys are not filtered: with relaxed env var names every ConfigMap key is a
valid name. Something missing that is not `optional` raises `ContainerConfigError` with kube's
message (`configmap "x" not found`, `couldn't find key k in ConfigMap default/x`); an optional
one leaves the variable unset.

`needs_sources(container)` says whether a container has any envFrom or valueFrom: the fake
runtime resolves nothing for a pod without them (no API call, no copy).

Concurrency: coroutines on the caller's loop; no state beyond one resolution's fetched objects.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from tinykube.errors import NotFoundError, TinykubeError
from tinykube.fieldpath import split_subscripted_path
from tinykube.protocols import ResourceAPI
from tinykube.quantity import QuantityError, parse_quantity
from tinykube.v1 import configmap_pb2, pod_pb2, secret_pb2, service_pb2

# kube's pod workers retry a failed sync (a container waiting on its config) after 10 s.
CONFIG_RETRY_SECONDS = 10.0
CONFIG_ERROR_REASON = "CreateContainerConfigError"


class ContainerConfigError(Exception):
    """The container cannot be configured yet (a missing ConfigMap, Secret or key)."""


class EnvAPI(Protocol):
    @property
    def config_maps(self) -> ResourceAPI[configmap_pb2.ConfigMap]: ...

    @property
    def secrets(self) -> ResourceAPI[secret_pb2.Secret]: ...


def _no_ip(node: str) -> str:
    return ""


def _no_allocatable(node: str) -> Mapping[str, str]:
    return {}


def _no_services() -> Iterable[service_pb2.Service]:
    return ()


@dataclass
class EnvSources:
    """Where values come from besides the pod: the API (None: no client, as a kubelet without
    an apiserver) and, per node name, the node's IP and allocatable resources."""

    api: EnvAPI | None = None
    host_ip: Callable[[str], str] = field(default=_no_ip)
    allocatable: Callable[[str], Mapping[str, str]] = field(default=_no_allocatable)
    # Every Service the kubelet knows (its informer), for the service variables.
    services: Callable[[], Iterable[service_pb2.Service]] = field(default=_no_services)


def expand(text: str, *mappings: Mapping[str, str]) -> str:
    """kube's expansion.Expand with MappingFuncFor(mappings): `$(NAME)` is the first mapping's
    value for NAME, kept as written when none has it; `$$` is `$`; any other `$` stays."""
    if "$" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : end]
            for mapping in mappings:
                if name in mapping:
                    out.append(mapping[name])
                    break
            else:
                out.append(f"$({name})")
            i = end + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


def needs_sources(container: pod_pb2.Container) -> bool:
    return bool(container.envFrom) or any(e.HasField("valueFrom") for e in container.env)


def static_environment(container: pod_pb2.Container) -> dict[str, str]:
    """The variables that need nothing but the spec (values, expanded); valueFrom ones left out."""
    env: dict[str, str] = {}
    for var in container.env:
        if not var.HasField("valueFrom") or var.value:
            env[var.name] = expand(var.value, env)
    return env


# ---- fieldRef (podFieldSelectorRuntimeValue, fieldpath.ExtractFieldPathAsString) -------------


def pod_field_value(
    pod: pod_pb2.Pod, ref: pod_pb2.ObjectFieldSelector, pod_ip: str, host_ip: str
) -> str:
    """The value a fieldRef selects; raises ContainerConfigError as kube's conversion does."""
    if ref.apiVersion not in ("", "v1"):  # "" is the API default, v1
        raise ContainerConfigError(f"unsupported pod version: {ref.apiVersion}")
    path = ref.fieldPath
    split = split_subscripted_path(path)
    if split is not None:
        head, key = split
        if head == "metadata.annotations":
            return pod.metadata.annotations.get(key, "")
        if head == "metadata.labels":
            return pod.metadata.labels.get(key, "")
        raise ContainerConfigError(f"field label does not support subscript: {path}")
    if path in ("spec.nodeName", "spec.host"):
        return pod.spec.nodeName
    if path == "spec.serviceAccountName":
        return pod.spec.serviceAccountName
    if path in ("status.hostIP", "status.hostIPs"):
        return host_ip
    if path in ("status.podIP", "status.podIPs"):
        return pod_ip
    if path == "metadata.name":
        return pod.metadata.name
    if path == "metadata.namespace":
        return pod.metadata.namespace
    if path == "metadata.uid":
        return pod.metadata.uid
    raise ContainerConfigError(f"field label not supported: {path}")


# ---- resourceFieldRef (containerResourceRuntimeValue, MergeContainerResourceLimits) ----------

_DEFAULTED_LIMITS = ("cpu", "memory", "ephemeral-storage")


def _find_container(pod: pod_pb2.Pod, name: str) -> pod_pb2.Container:
    for c in (*pod.spec.containers, *pod.spec.initContainers):
        if c.name == name:
            return c
    raise ContainerConfigError(f"container {name} not found")


def _amount(text: str) -> Fraction:
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        raise ContainerConfigError(str(exc)) from None


def resource_value(
    pod: pod_pb2.Pod,
    container: pod_pb2.Container,
    ref: pod_pb2.ResourceFieldSelector,
    allocatable: Mapping[str, str],
) -> str:
    """The container's resource in units of the divisor, rounded up, as a decimal integer."""
    target = _find_container(pod, ref.containerName) if ref.containerName else container
    kind, _, name = ref.resource.partition(".")
    if kind not in ("limits", "requests") or not (
        name in _DEFAULTED_LIMITS or name.startswith("hugepages-")
    ):
        raise ContainerConfigError(f"unsupported container resource : {ref.resource}")
    limits, requests = target.resources.limits, target.resources.requests
    if kind == "requests":
        # The API defaults an unset request to the limit the container gave.
        text = requests.get(name) or limits.get(name, "0")
        amount = _amount(text)
    else:
        amount = _amount(limits.get(name, "0"))
        if amount == 0 and name in _DEFAULTED_LIMITS and name in allocatable:
            amount = _amount(allocatable[name])
    divisor = _amount(ref.divisor) if ref.HasField("divisor") else Fraction(0)
    if divisor == 0:
        divisor = Fraction(1)
    if name == "cpu":
        # MilliValue of each, rounded up, then the quotient rounded up.
        return str(math.ceil(Fraction(math.ceil(amount * 1000), math.ceil(divisor * 1000))))
    return str(math.ceil(Fraction(math.ceil(amount), math.ceil(divisor))))


# ---- the whole environment -------------------------------------------------------------------


class _Fetcher:
    """The ConfigMaps and Secrets of one resolution, each fetched once (None: optional and
    missing)."""

    def __init__(self, api: EnvAPI | None, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.config_maps: dict[str, configmap_pb2.ConfigMap | None] = {}
        self.secrets: dict[str, secret_pb2.Secret | None] = {}

    async def config_map(self, name: str, optional: bool) -> configmap_pb2.ConfigMap | None:
        if name in self.config_maps:
            return self.config_maps[name]
        if self.api is None:
            raise ContainerConfigError(
                f"couldn't get configMap {self.namespace}/{name}, no kubeClient defined"
            )
        try:
            found: configmap_pb2.ConfigMap | None = await self.api.config_maps.get(
                name, self.namespace
            )
        except NotFoundError:
            if not optional:
                raise ContainerConfigError(f'configmap "{name}" not found') from None
            found = None
        except TinykubeError as exc:
            raise ContainerConfigError(str(exc)) from exc
        self.config_maps[name] = found
        return found

    async def secret(self, name: str, optional: bool) -> secret_pb2.Secret | None:
        if name in self.secrets:
            return self.secrets[name]
        if self.api is None:
            raise ContainerConfigError(
                f"couldn't get secret {self.namespace}/{name}, no kubeClient defined"
            )
        try:
            found: secret_pb2.Secret | None = await self.api.secrets.get(name, self.namespace)
        except NotFoundError:
            if not optional:
                raise ContainerConfigError(f'secret "{name}" not found') from None
            found = None
        except TinykubeError as exc:
            raise ContainerConfigError(str(exc)) from exc
        self.secrets[name] = found
        return found


def _text(data: bytes) -> str:
    # The kubelet hands a Secret's bytes to the runtime as they are; surrogate escapes make
    # the process environment get exactly those bytes back.
    return data.decode("utf-8", "surrogateescape")


async def make_environment(
    pod: pod_pb2.Pod, container: pod_pb2.Container, sources: EnvSources
) -> dict[str, str]:
    """The container's variables, in the order they are defined; raises ContainerConfigError."""
    ns = pod.metadata.namespace
    links = not pod.spec.HasField("enableServiceLinks") or pod.spec.enableServiceLinks
    env: dict[str, str] = service_environment(sources.services(), ns, links=links)
    fetch = _Fetcher(sources.api, ns)
    for source in container.envFrom:
        if source.HasField("configMapRef"):
            cm = await fetch.config_map(source.configMapRef.name, source.configMapRef.optional)
            if cm is not None:
                for key in sorted(cm.data):
                    env[source.prefix + key] = cm.data[key]
        elif source.HasField("secretRef"):
            secret = await fetch.secret(source.secretRef.name, source.secretRef.optional)
            if secret is not None:
                for key in sorted(secret.data):
                    env[source.prefix + key] = _text(secret.data[key])
    ip: str | None = None
    for var in container.env:
        if var.value or not var.HasField("valueFrom"):
            env[var.name] = expand(var.value, env)
            continue
        vf = var.valueFrom
        if vf.HasField("fieldRef"):
            if ip is None:
                ip = sources.host_ip(pod.spec.nodeName)
            # Pods share their node's network: the pod's IP is the node's.
            env[var.name] = pod_field_value(pod, vf.fieldRef, pod.status.podIP or ip, ip)
        elif vf.HasField("resourceFieldRef"):
            allocatable = sources.allocatable(pod.spec.nodeName)
            env[var.name] = resource_value(pod, container, vf.resourceFieldRef, allocatable)
        elif vf.HasField("configMapKeyRef") or vf.HasField("secretKeyRef"):
            is_cm = vf.HasField("configMapKeyRef")
            ref: pod_pb2.ConfigMapKeySelector | pod_pb2.SecretKeySelector = (
                vf.configMapKeyRef if is_cm else vf.secretKeyRef
            )
            obj = await (fetch.config_map if is_cm else fetch.secret)(ref.name, ref.optional)
            if obj is None:
                continue
            if ref.key not in obj.data:
                if ref.optional:
                    continue
                kind = "ConfigMap" if is_cm else "Secret"
                raise ContainerConfigError(f"couldn't find key {ref.key} in {kind} {ns}/{ref.name}")
            value = obj.data[ref.key]
            env[var.name] = value if isinstance(value, str) else _text(value)
        else:
            env[var.name] = ""
    return env


# ---- Service variables (kube's getServiceEnvVarMap and envvars.FromServices) ----------------

# The Services of `default` every pod gets, enableServiceLinks or not (kube's masterServices).
MASTER_SERVICES = ("kubernetes",)


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_environment(
    services: Iterable[service_pb2.Service], namespace: str, *, links: bool = True
) -> dict[str, str]:
    """The variables kube's kubelet sets for Services: for `default/kubernetes` always, and
    with `links` for every Service of the pod's namespace that has a cluster IP:
    <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT (the first port), <NAME>_SERVICE_PORT_<PORT NAME>,
    and the docker-link ones (<NAME>_PORT=tcp://ip:port, <NAME>_PORT_<port>_<PROTO>[_PROTO,
    _PORT, _ADDR]). A Service of the pod's namespace wins over the master one of the same name."""
    chosen: dict[str, service_pb2.Service] = {}
    for svc in services:
        ip = svc.spec.clusterIP
        if not ip or ip == "None":
            continue
        name = svc.metadata.name
        if svc.metadata.namespace == namespace and links:
            chosen[name] = svc
        elif svc.metadata.namespace == "default" and name in MASTER_SERVICES:
            chosen.setdefault(name, svc)
    env: dict[str, str] = {}
    for name in sorted(chosen):
        svc = chosen[name]
        prefix = _env_name(name)
        ip = svc.spec.clusterIP
        ports = list(svc.spec.ports)
        env[f"{prefix}_SERVICE_HOST"] = ip
        if ports:
            env[f"{prefix}_SERVICE_PORT"] = str(ports[0].port)
        for port in ports:
            if port.name:
                env[f"{prefix}_SERVICE_PORT_{_env_name(port.name)}"] = str(port.port)
        if ports:
            first = ports[0]
            env[f"{prefix}_PORT"] = f"{(first.protocol or 'TCP').lower()}://{ip}:{first.port}"
        for port in ports:
            proto = (port.protocol or "TCP").lower()
            link = f"{prefix}_PORT_{port.port}_{proto.upper()}"
            env[link] = f"{proto}://{ip}:{port.port}"
            env[f"{link}_PROTO"] = proto
            env[f"{link}_PORT"] = str(port.port)
            env[f"{link}_ADDR"] = ip
    return env
