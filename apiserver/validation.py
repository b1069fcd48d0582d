"""Shared field checks of API objects, naming every bad field in Kubernetes' JSON spelling and
wording: field errors, metadata, DNS names, labels and selectors, quantities, JSON-printable
times and numbers, and the pod spec's pieces (containers, env, probes, volumes, affinity,
placement) that Pods and the workload kinds' templates share.

What is particular to one kind lives in its module under `apiserver/registry/`, whose strategy
calls these. Each check returns a list of `FieldError`s (empty: valid) that the server turns
into one INVALID_ARGUMENT (`InvalidError.for_object`). Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Literal, Protocol

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import Value
from google.protobuf.timestamp_pb2 import Timestamp

from tinykube.errors import FieldError
from tinykube.fieldpath import split_subscripted_path
from tinykube.meta import int_or_string, int_or_string_problem
from tinykube.protowire import each as each
from tinykube.quantity import (
    MAX_DIGITS,
    QuantityError,
    QuantityTooLongError,
    format_quantity,
    int64_overflow,
    parse_quantity,
    quantity_format,
)
from tinykube.selectors import (
    DNS1123_SUBDOMAIN_MSG,
    QUALIFIED_NAME_MSG,
    validate_label_key,
    validate_label_value,
)
from tinykube.v1 import (
    meta_pb2,
    pod_pb2,
)

# \Z, not $: $ also matches before a trailing newline, which would let "web\n" through.
_DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)

DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)

RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
CONDITION_STATUSES = ("True", "False", "Unknown")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
PROTOCOLS = ("TCP", "UDP", "SCTP")
MAX_INT32 = 2**31 - 1
PULL_POLICIES = ("Always", "IfNotPresent", "Never")


_GO_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_GO_QUOTE = str.maketrans({**{chr(c): f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}, **_GO_ESCAPES})


def go_quote(value: object) -> str:
    """Go's %q for the strings we show: double-quoted, control characters escaped."""
    return '"' + str(value).translate(_GO_QUOTE) + '"'


def value_text(value: Value) -> float | str:
    """A google.protobuf.Value as its JSON text, for messages about a bad IntOrString."""
    if value.WhichOneof("kind") == "number_value":
        return value.number_value
    return json_format.MessageToJson(value, indent=None)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "Required value" + (f": {detail}" if detail else ""))


def invalid(path: str, value: object, detail: str) -> FieldError:
    shown = go_quote(value) if isinstance(value, str) else str(value)
    return FieldError(path, f"Invalid value: {shown}: {detail}")


def unsupported(path: str, value: str, supported: Iterable[str]) -> FieldError:
    allowed = ", ".join(go_quote(s) for s in supported)
    return FieldError(path, f"Unsupported value: {go_quote(value)}: supported values: {allowed}")


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, f"Forbidden: {detail}")


def duplicate(path: str, value: str) -> FieldError:
    return FieldError(path, f"Duplicate value: {go_quote(value)}")


def too_long(path: str, value: str, limit: int) -> FieldError:
    return FieldError(path, f"Too long: must have at most {limit} bytes")


# Kubernetes' limit on the total size of an object's annotations (keys plus values, in bytes).
TOTAL_ANNOTATION_BYTES = 256 * 1024


def _utf8_len(text: str) -> int:
    # isascii() is O(1) on CPython's compact strings: the common case skips the encode.
    return len(text) if text.isascii() else len(text.encode())


def dns1123_subdomain(path: str, value: str) -> list[FieldError]:
    errs = []
    if len(value) > 253:
        errs.append(invalid(path, value, "must be no more than 253 characters"))
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(invalid(path, value, DNS1123_SUBDOMAIN_MSG))
    return errs


def dns1123_label(path: str, value: str) -> list[FieldError]:
    errs = []
    if len(value) > 63:
        errs.append(invalid(path, value, "must be no more than 63 characters"))
    if not _DNS1123_LABEL_RE.match(value):
        errs.append(invalid(path, value, DNS1123_LABEL_MSG))
    return errs


def validate_labels(path: str, labels: Mapping[str, str]) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in sorted(labels):
        for p in validate_label_key(key):
            errs.append(invalid(path, key, p))
        # Kubernetes names the map, not the key, for a bad value too.
        for p in validate_label_value(labels[key]):
            errs.append(invalid(path, labels[key], p))
    return errs


# kube's ValidateNameFunc: the problems of a name at a path ("metadata.name").
NameCheck = Callable[[str, str], list[FieldError]]


def validate_metadata(
    meta: meta_pb2.ObjectMeta, *, namespaced: bool, name_problems: NameCheck = dns1123_subdomain
) -> list[FieldError]:
    """kube's ValidateObjectMeta: the name (by the kind's rule, a DNS subdomain unless the
    kind says), the namespace as the kind's scope wants it, labels, annotations, finalizers,
    owner references and generation."""
    errs: list[FieldError] = []
    if not meta.name:
        errs.append(required("metadata.name", "name or generateName is required"))
    else:
        errs.extend(name_problems("metadata.name", meta.name))
    if namespaced:
        if not meta.namespace:
            errs.append(required("metadata.namespace"))
        else:
            errs.extend(dns1123_label("metadata.namespace", meta.namespace))
    elif meta.namespace:
        errs.append(forbidden("metadata.namespace", "not allowed on this type"))
    # Each part is looked at only when present: empty ones have nothing to report, and this
    # runs on every write (a Lease renewal's metadata has none of them).
    labels = meta.labels
    if labels:
        errs.extend(validate_labels("metadata.labels", labels))
    annotations = meta.annotations
    if annotations:
        for key in sorted(annotations):
            # Annotation keys are checked lowercased (a prefix such as Example.com/ is accepted).
            for p in validate_label_key(key.lower()):
                errs.append(invalid("metadata.annotations", key, p))
        total = sum(_utf8_len(k) + _utf8_len(annotations[k]) for k in annotations)
        if total > TOTAL_ANNOTATION_BYTES:
            errs.append(too_long("metadata.annotations", "", TOTAL_ANNOTATION_BYTES))
    if meta.finalizers:
        seen: set[str] = set()
        for i, fin in enumerate(each(meta.finalizers)):
            path = f"metadata.finalizers[{i}]"
            for p in validate_label_key(fin):
                errs.append(invalid(path, fin, p))
            if fin in seen:
                errs.append(duplicate(path, fin))
            seen.add(fin)
    refs = each(meta.ownerReferences)
    for i, ref in enumerate(refs):
        path = f"metadata.ownerReferences[{i}]"
        if not ref.kind:
            errs.append(required(f"{path}.kind"))
        if not ref.name:
            errs.append(required(f"{path}.name"))
        if not ref.uid:
            errs.append(required(f"{path}.uid"))
    if refs and sum(1 for r in refs if r.controller) > 1:
        errs.append(
            invalid(
                "metadata.ownerReferences",
                "",
                "Only one reference can have Controller set to true",
            )
        )
    if meta.generation < 0:
        errs.append(
            invalid("metadata.generation", meta.generation, "must be greater than or equal to 0")
        )
    return errs


def quantity_map(
    path: str, resources: Mapping[str, str]
) -> tuple[list[FieldError], dict[str, Fraction]]:
    errs: list[FieldError] = []
    values: dict[str, Fraction] = {}
    for name in sorted(resources):
        text = resources[name]
        # only short strings are memoised: a hostile object could fill the cache with long ones
        check = _checked_quantity if len(text) + len(name) <= 128 else _checked_quantity.__wrapped__
        key_problems, shown, problem, q = check(name, text)
        for kp in key_problems:
            errs.append(invalid(path, name, kp))
        if q is None:  # a quantity is parsed exactly when it has no problem
            errs.append(invalid(f"{path}[{name}]", shown, problem))
            continue
        values[name] = q
    return errs, values


# Pure and on the path of every pod and node write (the pods of a ReplicaSet repeat the same
# strings), so memoised: (problems of the resource name, the value as shown in an error, the
# value's problem or "", the parsed quantity).
@functools.lru_cache(maxsize=4096)
def _checked_quantity(name: str, text: str) -> tuple[tuple[str, ...], str, str, Fraction | None]:
    key_problems = tuple(validate_label_key(name))
    try:
        q = parse_quantity(text)
    except QuantityTooLongError:
        # Echo only the start: the value may be thousands of digits long.
        shown = f"{text[:20]}... ({len(text)} characters)"
        return key_problems, shown, f"must have at most {MAX_DIGITS} digits", None
    except QuantityError:
        return (
            key_problems,
            text,
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            None,
        )
    if q < 0:
        return key_problems, text, "must be greater than or equal to 0", None
    overflow = int64_overflow(name, q)
    if overflow:
        return key_problems, text, overflow, None
    return key_problems, text, "", q


def validate_container(path: str, c: pod_pb2.Container) -> list[FieldError]:
    errs: list[FieldError] = []
    if not c.name:
        errs.append(required(f"{path}.name"))
    else:
        errs.extend(dns1123_label(f"{path}.name", c.name))
    if not c.image:
        errs.append(required(f"{path}.image"))
    if c.imagePullPolicy and c.imagePullPolicy not in PULL_POLICIES:
        errs.append(unsupported(f"{path}.imagePullPolicy", c.imagePullPolicy, PULL_POLICIES))
    port_names: set[str] = set()
    for i, port in enumerate(each(c.ports)):
        pp = f"{path}.ports[{i}]"
        if not 1 <= port.containerPort <= 65535:
            errs.append(
                invalid(
                    f"{pp}.containerPort",
                    port.containerPort,
                    "must be between 1 and 65535, inclusive",
                )
            )
        if port.hostPort and not 1 <= port.hostPort <= 65535:
            errs.append(
                invalid(f"{pp}.hostPort", port.hostPort, "must be between 1 and 65535, inclusive")
            )
        if port.protocol not in PROTOCOLS:
            errs.append(unsupported(f"{pp}.protocol", port.protocol, PROTOCOLS))
        if port.name:
            if port.name in port_names:
                errs.append(duplicate(f"{pp}.name", port.name))
            port_names.add(port.name)
    errs.extend(validate_env(f"{path}.env", each(c.env)))
    errs.extend(validate_env_from(f"{path}.envFrom", each(c.envFrom)))
    rpath = f"{path}.resources"
    lim_errs, limits = quantity_map(f"{rpath}.limits", c.resources.limits)
    req_errs, requests = quantity_map(f"{rpath}.requests", c.resources.requests)
    errs.extend(lim_errs)
    errs.extend(req_errs)
    for name in sorted(requests):
        if name in limits and requests[name] > limits[name]:
            errs.append(
                invalid(
                    f"{rpath}.requests",
                    c.resources.requests[name],
                    f"must be less than or equal to {name} limit of {c.resources.limits[name]}",
                )
            )
    return errs


# ---- container environment (kube's ValidateEnv, validateEnvVarValueFrom, ValidateEnvFrom) ----

# RelaxedEnvironmentVariableValidation is GA (locked on) since Kubernetes 1.34: a name (and an
# envFrom prefix) is any printable ASCII but '='.
RELAXED_ENV_VAR_NAME_MSG = (
    "a valid environment variable name must consist only of printable ASCII characters other "
    "than '='"
)
CONFIG_MAP_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
_CONFIG_MAP_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+\Z")
# The fieldRef paths an env var may read (validEnvDownwardAPIFieldPathExpressions), and the
# ones podshelper.ConvertDownwardAPIFieldLabel knows at all (v1 pods).
ENV_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
_POD_FIELD_LABELS = frozenset(
    {
        *ENV_FIELD_PATHS,
        "metadata.annotations",
        "metadata.labels",
        "spec.restartPolicy",
        "spec.schedulerName",
        "status.phase",
    }
)
ENV_RESOURCES = (
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
)
_HUGEPAGES_PREFIXES = ("limits.hugepages-", "requests.hugepages-")
_BYTE_DIVISORS = frozenset(
    {"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"}
)
_BYTE_DIVISORS_SHOWN = "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei"
QUANTITY_MSG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def env_var_name_problems(name: str) -> list[str]:
    """kube's IsRelaxedEnvVarName."""
    errs = []
    if not name:
        errs.append("environment variable name must be non-empty")
    if any(not " " <= ch <= "~" or ch == "=" for ch in name):
        errs.append(RELAXED_ENV_VAR_NAME_MSG)
    return errs


def config_map_key_problems(key: str) -> list[str]:
    """kube's IsConfigMapKey: the keys of ConfigMaps and Secrets."""
    errs = []
    if len(key.encode()) > 253:  # Go's len(): bytes
        errs.append("must be no more than 253 characters")
    if not _CONFIG_MAP_KEY_RE.match(key):
        errs.append(CONFIG_MAP_KEY_MSG)
    if key == ".":
        errs.append("must not be '.'")
    elif key == "..":
        errs.append("must not be '..'")
    elif key.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def convert_pod_field_path(api_version: str, path: str) -> str:
    """kube's ConvertDownwardAPIFieldLabel for a v1 pod: the internal field path; raises
    ValueError with kube's words. An empty apiVersion is v1 (the API default)."""
    if api_version not in ("", "v1"):
        raise ValueError(f"unsupported pod version: {api_version}")
    split = split_subscripted_path(path)
    if split is not None:
        if split[0] in ("metadata.annotations", "metadata.labels"):
            return path
        raise ValueError(f"field label does not support subscript: {path}")
    if path == "spec.host":  # old v1 clients' name for spec.nodeName
        return "spec.nodeName"
    if path not in _POD_FIELD_LABELS:
        raise ValueError(f"field label not supported: {path}")
    return path


def _object_field_selector(
    path: str, ref: pod_pb2.ObjectFieldSelector, allowed: Sequence[str] = ENV_FIELD_PATHS
) -> list[FieldError]:
    """kube's validateObjectFieldSelector: `allowed` is the field paths the caller takes (an
    env var's, by default, or a downward API volume's)."""
    # An empty apiVersion stands for the API's default, v1.
    if not ref.fieldPath:
        return [required(f"{path}.fieldPath")]
    try:
        internal = convert_pod_field_path(ref.apiVersion, ref.fieldPath)
    except ValueError as exc:
        return [invalid(f"{path}.fieldPath", ref.fieldPath, f"error converting fieldPath: {exc}")]
    split = split_subscripted_path(internal)
    if split is not None:
        head, subscript = split
        key = subscript.lower() if head == "metadata.annotations" else subscript
        return [invalid(path, key, p) for p in validate_label_key(key)]
    if internal not in allowed:
        return [unsupported(f"{path}.fieldPath", internal, allowed)]
    return []


def _divisor(path: str, resource: str, ref: pod_pb2.ResourceFieldSelector) -> list[FieldError]:
    if not ref.HasField("divisor"):
        return []
    text = ref.divisor
    try:
        amount = parse_quantity(text)
    except QuantityError:
        return [invalid(f"{path}.divisor", text, QUANTITY_MSG)]
    if amount == 0:
        return []  # the zero Quantity is an unset one: the divisor is then 1
    shown = format_quantity(amount, quantity_format(text))
    if resource in ("limits.cpu", "requests.cpu"):
        if shown not in ("1m", "1"):
            detail = "only divisor's values 1m and 1 are supported with the cpu resource"
            return [invalid(f"{path}.divisor", resource, detail)]
        return []
    what = ""
    if resource in ("limits.memory", "requests.memory"):
        what = "memory"
    elif resource in ("limits.ephemeral-storage", "requests.ephemeral-storage"):
        what = "local ephemeral storage"
    elif resource.startswith(_HUGEPAGES_PREFIXES):
        what = "hugepages"
    if what and shown not in _BYTE_DIVISORS:
        detail = (
            f"only divisor's values {_BYTE_DIVISORS_SHOWN} are supported with the {what} resource"
        )
        return [invalid(f"{path}.divisor", resource, detail)]
    return []


def _resource_field_selector(path: str, ref: pod_pb2.ResourceFieldSelector) -> list[FieldError]:
    errs: list[FieldError] = []
    if not ref.resource:
        errs.append(required(f"{path}.resource"))
    elif ref.resource not in ENV_RESOURCES and not ref.resource.startswith(_HUGEPAGES_PREFIXES):
        errs.append(unsupported(f"{path}.resource", ref.resource, ENV_RESOURCES))
    errs.extend(_divisor(path, ref.resource, ref))
    return errs


def _key_selector(
    path: str, ref: pod_pb2.ConfigMapKeySelector | pod_pb2.SecretKeySelector
) -> list[FieldError]:
    errs = dns1123_subdomain(f"{path}.name", ref.name)
    if not ref.key:
        errs.append(required(f"{path}.key"))
    else:
        errs.extend(invalid(f"{path}.key", ref.key, p) for p in config_map_key_problems(ref.key))
    return errs


def _env_var_source(path: str, env: pod_pb2.EnvVar) -> list[FieldError]:
    source = env.valueFrom
    errs: list[FieldError] = []
    sources = 0
    if source.HasField("fieldRef"):
        sources += 1
        errs.extend(_object_field_selector(f"{path}.fieldRef", source.fieldRef))
    if source.HasField("resourceFieldRef"):
        sources += 1
        errs.extend(_resource_field_selector(f"{path}.resourceFieldRef", source.resourceFieldRef))
    if source.HasField("configMapKeyRef"):
        sources += 1
        errs.extend(_key_selector(f"{path}.configMapKeyRef", source.configMapKeyRef))
    if source.HasField("secretKeyRef"):
        sources += 1
        errs.extend(_key_selector(f"{path}.secretKeyRef", source.secretKeyRef))
    if sources == 0:
        errs.append(
            invalid(
                path,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or "
                "`secretKeyRef`",
            )
        )
    elif env.value:
        errs.append(invalid(path, "", "may not be specified when `value` is not empty"))
    elif sources > 1:
        errs.append(invalid(path, "", "may not have more than one field specified at a time"))
    return errs


def validate_env(path: str, env: Iterable[pod_pb2.EnvVar]) -> list[FieldError]:
    """A container's `env`, as kube's ValidateEnv (duplicate names are allowed: the last wins)."""
    errs: list[FieldError] = []
    for i, var in enumerate(env):
        here = f"{path}[{i}]"
        if not var.name:
            errs.append(required(f"{here}.name"))
        else:
            errs.extend(
                invalid(f"{here}.name", var.name, p) for p in env_var_name_problems(var.name)
            )
        if var.HasField("valueFrom"):
            errs.extend(_env_var_source(f"{here}.valueFrom", var))
    return errs


def _env_source_name(path: str, name: str) -> list[FieldError]:
    """ValidateConfigMapName / ValidateSecretName with prefix=true: a trailing '-' is allowed."""
    if not name:
        return [required(f"{path}.name")]
    masked = name[:-1] + "a" if name.endswith("-") else name
    problems = []
    if len(masked) > 253:
        problems.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN_RE.match(masked):
        problems.append(DNS1123_SUBDOMAIN_MSG)
    return [invalid(f"{path}.name", name, p) for p in problems]


def validate_env_from(path: str, sources: Iterable[pod_pb2.EnvFromSource]) -> list[FieldError]:
    """A container's `envFrom`, as kube's ValidateEnvFrom."""
    errs: list[FieldError] = []
    for i, source in enumerate(sources):
        here = f"{path}[{i}]"
        if source.prefix:
            errs.extend(
                invalid(f"{here}.prefix", source.prefix, p)
                for p in env_var_name_problems(source.prefix)
            )
        count = 0
        if source.HasField("configMapRef"):
            count += 1
            errs.extend(_env_source_name(f"{here}.configMapRef", source.configMapRef.name))
        if source.HasField("secretRef"):
            count += 1
            errs.extend(_env_source_name(f"{here}.secretRef", source.secretRef.name))
        # kube names the list here, not the entry.
        if count == 0:
            errs.append(invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif count > 1:
            errs.append(invalid(path, "", "may not have more than one field specified at a time"))
    return errs


# ---- probes (Kubernetes' validateProbe, validateHandler and the per-kind rules) ---------------

ProbeKind = Literal["livenessProbe", "readinessProbe", "startupProbe"]
PROBE_KINDS: tuple[ProbeKind, ...] = ("livenessProbe", "readinessProbe", "startupProbe")
_HANDLERS: tuple[Literal["exec", "httpGet", "tcpSocket", "grpc"], ...] = (
    "exec",
    "httpGet",
    "tcpSocket",
    "grpc",
)
HTTP_SCHEMES = ("HTTP", "HTTPS")
_NEGATIVE = "must be greater than or equal to 0"
_PORT_RANGE = "must be between 1 and 65535, inclusive"
_PORT_NAME_CHARSET_RE = re.compile(r"^[-a-z0-9]+\Z")
_HTTP_HEADER_NAME_RE = re.compile(r"^[-A-Za-z0-9]+\Z")
HTTP_HEADER_NAME_MSG = (
    "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', "
    "regex used for validation is '[-A-Za-z0-9]+')"
)


def port_name_problems(name: str) -> list[str]:
    """apimachinery's IsValidPortName (an IANA_SVC_NAME)."""
    problems = []
    if len(name) > 15:
        problems.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARSET_RE.match(name):
        problems.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search("[a-z]", name):
        problems.append("must contain at least one letter (a-z)")
    if "--" in name:
        problems.append("must not contain consecutive hyphens")
    if name and (name[0] == "-" or name[-1] == "-"):
        problems.append("must not begin or end with a hyphen")
    return problems


def _port_num_or_name(path: str, port: Value) -> list[FieldError]:
    """ValidatePortNumOrName; unset is the number 0, as a Go IntOrString's zero value."""
    problem = int_or_string_problem(port)
    if problem:
        return [invalid(path, value_text(port), problem)]
    held = int_or_string(port)
    if isinstance(held, str):
        return [invalid(path, held, p) for p in port_name_problems(held)]
    number = held or 0
    return [] if 1 <= number <= 65535 else [invalid(path, number, _PORT_RANGE)]


def _probe_handler(path: str, probe: pod_pb2.Probe) -> list[FieldError]:
    errs: list[FieldError] = []
    handlers = 0
    for name in _HANDLERS:
        if not probe.HasField(name):
            continue
        hp = f"{path}.{name}"
        if handlers:
            errs.append(forbidden(hp, "may not specify more than 1 handler type"))
            continue
        handlers += 1
        if name == "exec" and not probe.exec.command:
            errs.append(required(f"{hp}.command"))
        elif name == "httpGet":
            http = probe.httpGet
            if not http.path:
                errs.append(required(f"{hp}.path"))
            errs.extend(_port_num_or_name(f"{hp}.port", http.port))
            if http.scheme not in HTTP_SCHEMES:
                errs.append(unsupported(f"{hp}.scheme", http.scheme, HTTP_SCHEMES))
            for header in each(http.httpHeaders):
                if not _HTTP_HEADER_NAME_RE.match(header.name):
                    errs.append(invalid(f"{hp}.httpHeaders", header.name, HTTP_HEADER_NAME_MSG))
        elif name == "tcpSocket":
            errs.extend(_port_num_or_name(f"{hp}.port", probe.tcpSocket.port))
        elif name == "grpc" and not 1 <= probe.grpc.port <= 65535:
            errs.append(invalid(f"{hp}.port", probe.grpc.port, _PORT_RANGE))
    if not handlers:
        errs.append(required(path, "must specify a handler type"))
    return errs


def validate_probe(path: str, kind: str, probe: pod_pb2.Probe) -> list[FieldError]:
    """One of a container's probes (kind: livenessProbe, readinessProbe or startupProbe), as
    stored after defaulting."""
    errs = _probe_handler(path, probe)
    for name in (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ):
        value = getattr(probe, name)
        if value < 0:
            errs.append(invalid(f"{path}.{name}", value, _NEGATIVE))
    grace: Literal["terminationGracePeriodSeconds"] = "terminationGracePeriodSeconds"
    if probe.HasField(grace) and probe.terminationGracePeriodSeconds <= 0:
        errs.append(
            invalid(
                f"{path}.{grace}", probe.terminationGracePeriodSeconds, "must be greater than 0"
            )
        )
    if kind in ("livenessProbe", "startupProbe") and probe.successThreshold != 1:
        errs.append(invalid(f"{path}.successThreshold", probe.successThreshold, "must be 1"))
    if kind == "readinessProbe" and probe.HasField(grace):
        errs.append(
            invalid(
                f"{path}.{grace}",
                probe.terminationGracePeriodSeconds,
                "must not be set for readinessProbes",
            )
        )
    return errs


def _container_probes(path: str, c: pod_pb2.Container, *, init: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    for kind in PROBE_KINDS:
        if not c.HasField(kind):
            continue
        if init:
            # tinykube has no restartable (sidecar) init containers, where Kubernetes allows them.
            errs.append(
                forbidden(
                    f"{path}.{kind}",
                    "may not be set for init containers without restartPolicy=Always",
                )
            )
        else:
            errs.extend(validate_probe(f"{path}.{kind}", kind, getattr(c, kind)))
    return errs


TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
_LIFECYCLE_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
_ID_RANGE = f"must be between 0 and {2**31 - 1}, inclusive"


def _lifecycle_handler(
    path: str, handler: pod_pb2.LifecycleHandler, grace: int | None
) -> list[FieldError]:
    """kube's validateLifecycleHandler: exactly one handler; tcpSocket is accepted as kube
    accepts it (and fails when run); sleep must fit in the pod's grace period."""
    errs: list[FieldError] = []
    handlers = 0
    for name in _LIFECYCLE_HANDLERS:
        if not handler.HasField(name):  # type: ignore[arg-type]
            continue
        hp = f"{path}.{name}"
        if handlers:
            errs.append(forbidden(hp, "may not specify more than 1 handler type"))
            continue
        handlers += 1
        if name == "sleep":
            seconds = handler.sleep.seconds
            limit = 30 if grace is None else grace
            if not 0 <= seconds <= limit:
                errs.append(
                    invalid(
                        f"{hp}.seconds",
                        seconds,
                        "must be non-negative and less than terminationGracePeriodSeconds "
                        f"({limit})",
                    )
                )
            continue
        probe = pod_pb2.Probe()
        getattr(probe, name).CopyFrom(getattr(handler, name))
        errs.extend(_probe_handler(path, probe))
    if not handlers:
        errs.append(required(path, "must specify a handler type"))
    return errs


def _container_lifecycle(
    path: str, c: pod_pb2.Container, *, init: bool, grace: int | None
) -> list[FieldError]:
    """lifecycle (forbidden on init containers, as kube without restartable ones),
    terminationMessagePolicy and securityContext of a container."""
    errs: list[FieldError] = []
    if c.HasField("lifecycle"):
        if init:
            errs.append(
                forbidden(
                    f"{path}.lifecycle",
                    "may not be set for init containers without restartPolicy=Always",
                )
            )
        else:
            for hook in ("postStart", "preStop"):
                if c.lifecycle.HasField(hook):
                    errs.extend(
                        _lifecycle_handler(
                            f"{path}.lifecycle.{hook}", getattr(c.lifecycle, hook), grace
                        )
                    )
    policy = c.terminationMessagePolicy
    # "" is what a spec validated before defaulting holds (defaulting makes it "File").
    if policy and policy not in TERMINATION_MESSAGE_POLICIES:
        errs.append(
            unsupported(f"{path}.terminationMessagePolicy", policy, TERMINATION_MESSAGE_POLICIES)
        )
    if c.HasField("securityContext"):
        sc = c.securityContext
        sp = f"{path}.securityContext"
        for name in ("runAsUser", "runAsGroup"):
            if sc.HasField(name) and not 0 <= getattr(sc, name) <= 2**31 - 1:
                errs.append(invalid(f"{sp}.{name}", getattr(sc, name), _ID_RANGE))
        no_escalation = sc.HasField("allowPrivilegeEscalation") and not sc.allowPrivilegeEscalation
        if no_escalation and sc.privileged:
            errs.append(
                invalid(
                    sp,
                    "",
                    "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
                )
            )
        if no_escalation and "CAP_SYS_ADMIN" in sc.capabilities.add:
            errs.append(
                invalid(
                    sp,
                    "",
                    "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` "
                    "CAP_SYS_ADMIN",
                )
            )
        errs.extend(_security_profiles(sp, sc))
    return errs


def _pod_security_context(path: str, sc: pod_pb2.PodSecurityContext) -> list[FieldError]:
    """kube's ValidatePodSecurityContext: user and group ids in range, fsGroupChangePolicy,
    the seccomp and AppArmor profiles."""
    errs: list[FieldError] = []
    for name in ("runAsUser", "runAsGroup", "fsGroup"):
        if sc.HasField(name) and not 0 <= getattr(sc, name) <= 2**31 - 1:
            errs.append(invalid(f"{path}.{name}", getattr(sc, name), _ID_RANGE))
    for i, gid in enumerate(each(sc.supplementalGroups)):
        if not 0 <= gid <= 2**31 - 1:
            errs.append(invalid(f"{path}.supplementalGroups[{i}]", gid, _ID_RANGE))
    if (
        sc.HasField("fsGroupChangePolicy")
        and sc.fsGroupChangePolicy not in FS_GROUP_CHANGE_POLICIES
    ):
        errs.append(
            unsupported(
                f"{path}.fsGroupChangePolicy", sc.fsGroupChangePolicy, FS_GROUP_CHANGE_POLICIES
            )
        )
    errs.extend(_security_profiles(path, sc))
    return errs


# kube's PodFSGroupChangePolicy values, sorted as its NotSupported message lists them.
FS_GROUP_CHANGE_POLICIES = ("Always", "OnRootMismatch")
# kube's SeccompProfileType and AppArmorProfileType values, in its messages' order.
PROFILE_TYPES = ("Localhost", "RuntimeDefault", "Unconfined")
# PATH_MAX - 1: the longest AppArmor localhostProfile.
_APPARMOR_PROFILE_MAX = 4095


def _security_profiles(
    path: str, sc: pod_pb2.PodSecurityContext | pod_pb2.SecurityContext
) -> list[FieldError]:
    """kube's validateSeccompProfileField and ValidateAppArmorProfileField for a pod's or a
    container's securityContext."""
    errs: list[FieldError] = []
    if sc.HasField("seccompProfile"):
        sp, fp = sc.seccompProfile, f"{path}.seccompProfile"
        if not sp.type:
            errs.append(required(f"{fp}.type", "type is required when seccompProfile is set"))
        elif sp.type not in PROFILE_TYPES:
            errs.append(unsupported(f"{fp}.type", sp.type, PROFILE_TYPES))
        if sp.type == "Localhost":
            if not sp.HasField("localhostProfile"):
                errs.append(
                    required(f"{fp}.localhostProfile", "must be set when seccomp type is Localhost")
                )
            else:
                local = sp.localhostProfile
                if local.startswith("/"):
                    errs.append(invalid(f"{fp}.localhostProfile", local, "must be a relative path"))
                if ".." in local.split("/"):
                    errs.append(invalid(f"{fp}.localhostProfile", local, "must not contain '..'"))
        elif sp.HasField("localhostProfile"):
            # kube shows the whole profile (Go's %#v of the struct, whose pointer it prints
            # as an address; here the string it points at).
            shown = (
                f"core.SeccompProfile{{Type:{go_quote(sp.type)}, "
                f"LocalhostProfile:{go_quote(sp.localhostProfile)}}}"
            )
            errs.append(
                FieldError(
                    f"{fp}.localhostProfile",
                    f"Invalid value: {shown}: can only be set when seccomp type is Localhost",
                )
            )
    if sc.HasField("appArmorProfile"):
        ap, fp = sc.appArmorProfile, f"{path}.appArmorProfile"
        if ap.type == "Localhost":
            if not ap.HasField("localhostProfile"):
                errs.append(
                    required(
                        f"{fp}.localhostProfile", "must be set when AppArmor type is Localhost"
                    )
                )
            else:
                local = ap.localhostProfile
                if local.strip() != local:
                    errs.append(
                        invalid(
                            f"{fp}.localhostProfile", local, "must not be padded with whitespace"
                        )
                    )
                elif not local:
                    errs.append(
                        required(
                            f"{fp}.localhostProfile", "must be set when AppArmor type is Localhost"
                        )
                    )
                if len(local.encode()) > _APPARMOR_PROFILE_MAX:
                    errs.append(too_long(f"{fp}.localhostProfile", local, _APPARMOR_PROFILE_MAX))
        elif ap.type in ("RuntimeDefault", "Unconfined"):
            if ap.HasField("localhostProfile"):
                errs.append(
                    invalid(
                        f"{fp}.localhostProfile",
                        ap.localhostProfile,
                        "can only be set when AppArmor type is Localhost",
                    )
                )
        elif not ap.type:
            errs.append(required(f"{fp}.type", "type is required when appArmorProfile is set"))
        else:
            errs.append(unsupported(f"{fp}.type", ap.type, PROFILE_TYPES))
    return errs


def _node_selector_requirement(path: str, req: pod_pb2.NodeSelectorRequirement) -> list[FieldError]:
    errs: list[FieldError] = []
    for p in validate_label_key(req.key):
        errs.append(invalid(f"{path}.key", req.key, p))
    if req.operator not in NODE_SELECTOR_OPERATORS:
        errs.append(unsupported(f"{path}.operator", req.operator, NODE_SELECTOR_OPERATORS))
    elif req.operator in ("In", "NotIn") and not req.values:
        errs.append(
            required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
        )
    elif req.operator in ("Exists", "DoesNotExist") and req.values:
        errs.append(
            forbidden(
                f"{path}.values",
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )
        )
    elif req.operator in ("Gt", "Lt"):
        if len(req.values) != 1:
            errs.append(
                required(
                    f"{path}.values",
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                )
            )
        else:
            try:
                int(req.values[0])
            except ValueError:
                errs.append(invalid(f"{path}.values[0]", req.values[0], "must be an integer"))
    return errs


def _node_selector_term(path: str, term: pod_pb2.NodeSelectorTerm) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, req in enumerate(each(term.matchExpressions)):
        errs.extend(_node_selector_requirement(f"{path}.matchExpressions[{i}]", req))
    for i, req in enumerate(each(term.matchFields)):
        fp = f"{path}.matchFields[{i}]"
        if req.key != "metadata.name":
            errs.append(invalid(f"{fp}.key", req.key, "not a valid field selector key"))
        if req.operator not in ("In", "NotIn"):
            errs.append(unsupported(f"{fp}.operator", req.operator, ("In", "NotIn")))
        elif len(req.values) != 1:
            errs.append(
                required(
                    f"{fp}.values",
                    "must be only one value when `operator` is 'In' or 'NotIn' for node "
                    "field selector",
                )
            )
    return errs


def validate_pod_spec(path: str, spec: pod_pb2.PodSpec) -> list[FieldError]:
    errs: list[FieldError] = []
    if not spec.containers:
        errs.append(required(f"{path}.containers"))
    names: set[str] = set()
    grace = (
        spec.terminationGracePeriodSeconds
        if spec.HasField("terminationGracePeriodSeconds")
        else None
    )
    if spec.HasField("securityContext"):
        errs.extend(_pod_security_context(f"{path}.securityContext", spec.securityContext))
    for i, ref in enumerate(each(spec.imagePullSecrets)):
        if not ref.name:
            errs.append(required(f"{path}.imagePullSecrets[{i}].name"))
    for group, containers in (
        ("initContainers", each(spec.initContainers)),
        ("containers", each(spec.containers)),
    ):
        for i, c in enumerate(containers):
            cp = f"{path}.{group}[{i}]"
            errs.extend(validate_container(cp, c))
            errs.extend(_container_probes(cp, c, init=group == "initContainers"))
            errs.extend(_container_lifecycle(cp, c, init=group == "initContainers", grace=grace))
            if c.name:
                if c.name in names:
                    errs.append(duplicate(f"{cp}.name", c.name))
                names.add(c.name)
    errs.extend(validate_pod_volumes(path, spec))
    if spec.restartPolicy not in RESTART_POLICIES:
        errs.append(unsupported(f"{path}.restartPolicy", spec.restartPolicy, RESTART_POLICIES))
    if spec.dnsPolicy not in DNS_POLICIES:
        errs.append(unsupported(f"{path}.dnsPolicy", spec.dnsPolicy, DNS_POLICIES))
    errs.extend(validate_pod_dns_config(path, spec))
    if spec.HasField("terminationGracePeriodSeconds") and spec.terminationGracePeriodSeconds < 0:
        errs.append(
            invalid(
                f"{path}.terminationGracePeriodSeconds",
                spec.terminationGracePeriodSeconds,
                "must be greater than or equal to 0",
            )
        )
    if spec.HasField("activeDeadlineSeconds") and not 1 <= spec.activeDeadlineSeconds <= MAX_INT32:
        errs.append(
            invalid(
                f"{path}.activeDeadlineSeconds",
                spec.activeDeadlineSeconds,
                f"must be between 1 and {MAX_INT32}, inclusive",
            )
        )
    if spec.serviceAccountName:
        # ValidateServiceAccountName: a DNS subdomain, as the account's own name.
        errs.extend(dns1123_subdomain(f"{path}.serviceAccountName", spec.serviceAccountName))
    if spec.nodeName:
        errs.extend(dns1123_subdomain(f"{path}.nodeName", spec.nodeName))
    errs.extend(validate_labels(f"{path}.nodeSelector", spec.nodeSelector))
    na = spec.affinity.nodeAffinity
    req = na.requiredDuringSchedulingIgnoredDuringExecution
    ap = f"{path}.affinity.nodeAffinity"
    if na.HasField("requiredDuringSchedulingIgnoredDuringExecution"):
        rp = f"{ap}.requiredDuringSchedulingIgnoredDuringExecution"
        if not req.nodeSelectorTerms:
            errs.append(
                required(f"{rp}.nodeSelectorTerms", "must have at least one node selector term")
            )
        for i, term in enumerate(each(req.nodeSelectorTerms)):
            errs.extend(_node_selector_term(f"{rp}.nodeSelectorTerms[{i}]", term))
    for i, pref in enumerate(each(na.preferredDuringSchedulingIgnoredDuringExecution)):
        pp = f"{ap}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        if not 1 <= pref.weight <= 100:
            errs.append(invalid(f"{pp}.weight", pref.weight, "must be in the range 1-100"))
        errs.extend(_node_selector_term(f"{pp}.preference", pref.preference))
    for i, t in enumerate(each(spec.tolerations)):
        tp = f"{path}.tolerations[{i}]"
        if t.key:
            for p in validate_label_key(t.key):
                errs.append(invalid(f"{tp}.key", t.key, p))
        if t.operator not in TOLERATION_OPERATORS:
            errs.append(unsupported(f"{tp}.operator", t.operator, TOLERATION_OPERATORS))
        elif t.operator == "Exists" and t.value:
            errs.append(
                invalid(
                    f"{tp}.operator", t.value, "value must be empty when `operator` is 'Exists'"
                )
            )
        elif t.operator == "Equal" and not t.key:
            errs.append(
                invalid(
                    f"{tp}.operator",
                    t.operator,
                    "operator must be Exists when `key` is empty, which means "
                    '"match all values and all keys"',
                )
            )
        if t.effect and t.effect not in TAINT_EFFECTS:
            errs.append(unsupported(f"{tp}.effect", t.effect, TAINT_EFFECTS))
        if t.HasField("tolerationSeconds") and t.effect != "NoExecute":
            errs.append(
                invalid(
                    f"{tp}.effect",
                    t.effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
    if spec.schedulerName:
        errs.extend(dns1123_subdomain(f"{path}.schedulerName", spec.schedulerName))
    errs.extend(validate_pod_placement(path, spec))
    return errs


# ---- pod affinity, topology spread, scheduling gates, preemption policy ----------------------
# As Kubernetes v1.36's pkg/apis/core/validation (validateAffinity, validateTopologySpread-
# Constraints, validateSchedulingGates, ValidatePreemptionPolicy): the same checks in the same
# order, with the same paths and wording, including kube's quirks (a term's namespace errors
# name `namespace`, a matchLabelKeys key also in the selector names `<term>[i]`).

WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
NODE_INCLUSION_POLICIES = ("Honor", "Ignore")
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
_NOT_POSITIVE = "must be greater than zero"


def no_template_deadline(spec: pod_pb2.PodSpec, owner: str) -> list[FieldError]:
    """A controller that keeps pods running may not give them a deadline (kube's
    ValidatePodTemplateSpecForReplicaSet and ValidateDaemonSetSpec)."""
    if not spec.HasField("activeDeadlineSeconds"):
        return []
    return [
        forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            f"activeDeadlineSeconds in {owner} is not Supported",
        )
    ]


def json_text(value: object) -> str:
    """A bad value Kubernetes prints as JSON (maps, lists of objects)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def label_name(path: str, key: str) -> list[FieldError]:
    """Kubernetes' ValidateLabelName: an empty name part is both empty and not matching."""
    problems = validate_label_key(key)
    if key.count("/") <= 1 and not key.rpartition("/")[2]:
        problems.append(QUALIFIED_NAME_MSG)
    return [invalid(path, key, p) for p in problems]


def validate_label_selector(path: str, sel: meta_pb2.LabelSelector) -> list[FieldError]:
    """Kubernetes' metav1 ValidateLabelSelector, message for message."""
    errs: list[FieldError] = []
    for key in sorted(sel.matchLabels):
        errs.extend(label_name(f"{path}.matchLabels", key))
        for p in validate_label_value(sel.matchLabels[key]):
            errs.append(invalid(f"{path}.matchLabels", sel.matchLabels[key], p))
    for i, expr in enumerate(each(sel.matchExpressions)):
        ep = f"{path}.matchExpressions[{i}]"
        if expr.operator in ("In", "NotIn"):
            if not expr.values:
                errs.append(
                    required(f"{ep}.values", "must be specified when `operator` is 'In' or 'NotIn'")
                )
        elif expr.operator in ("Exists", "DoesNotExist"):
            if expr.values:
                errs.append(
                    forbidden(
                        f"{ep}.values",
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            errs.append(invalid(f"{ep}.operator", expr.operator, "not a valid selector operator"))
        errs.extend(label_name(f"{ep}.key", expr.key))
        for j, value in enumerate(each(expr.values)):
            for p in validate_label_value(value):
                errs.append(invalid(f"{ep}.values[{j}]", value, p))
    return errs


def _match_label_keys(
    path: str,
    match_keys: Iterable[str],
    mismatch_keys: Iterable[str],
    sel: meta_pb2.LabelSelector | None,
) -> list[FieldError]:
    """Kubernetes' ValidateMatchLabelKeysAndMismatchLabelKeys, run on the selector after the
    keys were folded into it: a key of matchLabelKeys that the selector names twice was also
    in the user's selector."""
    match, mismatch = list(match_keys), list(mismatch_keys)
    errs: list[FieldError] = []
    for name, keys in (("matchLabelKeys", match), ("mismatchLabelKeys", mismatch)):
        if not keys:
            continue
        if sel is None:
            errs.append(
                forbidden(f"{path}.{name}", "must not be specified when labelSelector is not set")
            )
            continue
        for i, key in enumerate(keys):
            errs.extend(label_name(f"{path}.{name}[{i}]", key))
    if sel is not None:
        index = {key: i for i, key in enumerate(match)}
        seen = set(sel.matchLabels)
        for expr in each(sel.matchExpressions):
            if expr.key in index and expr.key in seen:
                errs.append(
                    invalid(
                        f"{path}[{index[expr.key]}]",
                        expr.key,
                        "exists in both matchLabelKeys and labelSelector",
                    )
                )
            seen.add(expr.key)
    mismatched = set(mismatch)
    for i, key in enumerate(match):
        if key in mismatched:
            errs.append(
                invalid(
                    f"{path}.matchLabelKeys[{i}]",
                    key,
                    "exists in both matchLabelKeys and mismatchLabelKeys",
                )
            )
    return errs


def _pod_affinity_term(path: str, term: pod_pb2.PodAffinityTerm) -> list[FieldError]:
    errs: list[FieldError] = []
    errs.extend(validate_label_selector(f"{path}.labelSelector", term.labelSelector))
    errs.extend(validate_label_selector(f"{path}.namespaceSelector", term.namespaceSelector))
    for name in each(term.namespaces):
        errs.extend(dns1123_label(f"{path}.namespace", name))
    sel = term.labelSelector if term.HasField("labelSelector") else None
    errs.extend(_match_label_keys(path, term.matchLabelKeys, term.mismatchLabelKeys, sel))
    if not term.topologyKey:
        errs.append(required(f"{path}.topologyKey", "can not be empty"))
    errs.extend(label_name(f"{path}.topologyKey", term.topologyKey))
    return errs


def _pod_affinity(
    path: str, aff: pod_pb2.PodAffinity | pod_pb2.PodAntiAffinity
) -> list[FieldError]:
    errs: list[FieldError] = []
    rp = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(each(aff.requiredDuringSchedulingIgnoredDuringExecution)):
        errs.extend(_pod_affinity_term(f"{rp}[{i}]", term))
    pp = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for i, weighted in enumerate(each(aff.preferredDuringSchedulingIgnoredDuringExecution)):
        if not 1 <= weighted.weight <= 100:
            errs.append(invalid(f"{pp}[{i}].weight", weighted.weight, "must be in the range 1-100"))
        errs.extend(_pod_affinity_term(f"{pp}[{i}].podAffinityTerm", weighted.podAffinityTerm))
    return errs


def _topology_spread_constraints(
    path: str, constraints: Sequence[pod_pb2.TopologySpreadConstraint]
) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, c in enumerate(constraints):
        cp = f"{path}[{i}]"
        if c.maxSkew <= 0:
            errs.append(invalid(f"{cp}.maxSkew", c.maxSkew, _NOT_POSITIVE))
        if not c.topologyKey:
            errs.append(required(f"{cp}.topologyKey", "can not be empty"))
        if c.whenUnsatisfiable not in WHEN_UNSATISFIABLE:
            errs.append(
                unsupported(f"{cp}.whenUnsatisfiable", c.whenUnsatisfiable, WHEN_UNSATISFIABLE)
            )
        # {topologyKey, whenUnsatisfiable} is one kind of constraint: kube reports the first of
        # a repeated pair, against the constraints after it.
        if any(
            c.topologyKey == rest.topologyKey and c.whenUnsatisfiable == rest.whenUnsatisfiable
            for rest in constraints[i + 1 :]
        ):
            errs.append(
                duplicate(
                    f"{cp}.{{topologyKey, whenUnsatisfiable}}",
                    f"{{{c.topologyKey}, {c.whenUnsatisfiable}}}",
                )
            )
        if c.HasField("minDomains"):
            if c.minDomains <= 0:
                errs.append(invalid(f"{cp}.minDomains", c.minDomains, _NOT_POSITIVE))
            if c.whenUnsatisfiable != "DoNotSchedule":
                errs.append(
                    invalid(
                        f"{cp}.minDomains",
                        c.minDomains,
                        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, "
                        f"not {c.whenUnsatisfiable}",
                    )
                )
        for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            policy = getattr(c, name)
            if policy and policy not in NODE_INCLUSION_POLICIES:
                errs.append(unsupported(f"{cp}.{name}", policy, NODE_INCLUSION_POLICIES))
        # v1.36 merges matchLabelKeys into labelSelector at creation
        # (MatchLabelKeysInPodTopologySpreadSelectorMerge, on by default), so the keys are
        # checked as pod affinity's are, on the merged selector.
        sel = c.labelSelector if c.HasField("labelSelector") else None
        errs.extend(_match_label_keys(cp, c.matchLabelKeys, (), sel))
        errs.extend(validate_label_selector(f"{cp}.labelSelector", c.labelSelector))
    return errs


def validate_pod_placement(path: str, spec: pod_pb2.PodSpec) -> list[FieldError]:
    """Pod (anti-)affinity, topology spread constraints, scheduling gates, preemptionPolicy."""
    errs: list[FieldError] = []
    if spec.affinity.HasField("podAffinity"):
        errs.extend(_pod_affinity(f"{path}.affinity.podAffinity", spec.affinity.podAffinity))
    if spec.affinity.HasField("podAntiAffinity"):
        errs.extend(
            _pod_affinity(f"{path}.affinity.podAntiAffinity", spec.affinity.podAntiAffinity)
        )
    gates: set[str] = set()
    for i, gate in enumerate(each(spec.schedulingGates)):
        gp = f"{path}.schedulingGates[{i}]"
        errs.extend(label_name(gp, gate.name))
        if gate.name in gates:
            errs.append(duplicate(gp, gate.name))
        gates.add(gate.name)
    errs.extend(
        _topology_spread_constraints(
            f"{path}.topologySpreadConstraints", spec.topologySpreadConstraints
        )
    )
    if spec.preemptionPolicy and spec.preemptionPolicy not in PREEMPTION_POLICIES:
        errs.append(
            unsupported(f"{path}.preemptionPolicy", spec.preemptionPolicy, PREEMPTION_POLICIES)
        )
    return errs


class Condition(Protocol):
    """What every kind's status condition has (PodCondition, NodeCondition, metav1.Condition)."""

    @property
    def type(self) -> str: ...

    @property
    def status(self) -> str: ...


def validate_conditions(path: str, conditions: Iterable[Condition]) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, cond in enumerate(conditions):
        cp = f"{path}[{i}]"
        if not cond.type:
            errs.append(required(f"{cp}.type"))
        if cond.status not in CONDITION_STATUSES:
            errs.append(unsupported(f"{cp}.status", cond.status, CONDITION_STATUSES))
    return errs


class GoValue:
    """A value Kubernetes prints with Go's %#v or a String method: shown as is, unquoted."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def go_string_map(labels: Mapping[str, str]) -> GoValue:
    """A map[string]string as Go's %#v prints it (keys sorted, as fmt sorts them)."""
    if not labels:
        return GoValue("map[string]string(nil)")
    inner = ", ".join(f"{go_quote(k)}:{go_quote(v)}" for k, v in sorted(labels.items()))
    return GoValue("map[string]string{" + inner + "}")


def go_label_selector(sel: meta_pb2.LabelSelector) -> GoValue:
    """A metav1.LabelSelector as Go's %#v prints it, as Kubernetes' immutable-field errors do."""
    labels = go_string_map(sel.matchLabels).text
    if sel.matchExpressions:
        reqs = []
        for r in each(sel.matchExpressions):
            values = (
                "[]string{" + ", ".join(go_quote(v) for v in each(r.values)) + "}"
                if r.values
                else "[]string(nil)"
            )
            reqs.append(
                f"v1.LabelSelectorRequirement{{Key:{go_quote(r.key)}, "
                f"Operator:{go_quote(r.operator)}, Values:{values}}}"
            )
        exprs = "[]v1.LabelSelectorRequirement{" + ", ".join(reqs) + "}"
    else:
        exprs = "[]v1.LabelSelectorRequirement(nil)"
    return GoValue(f"v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{exprs}}}")


def int_or_percent_value(value: Value) -> int:
    """Kubernetes' getIntOrPercentValue: the number, or a percentage's number; 0 otherwise."""
    held = int_or_string(value)
    if isinstance(held, int):
        return held
    if isinstance(held, str):
        digits = held[:-1] if held.endswith("%") else held
        return int(digits) if digits.isdigit() else 0
    return 0


def port_number(path: str, value: int) -> list[FieldError]:
    if not 1 <= value <= 65535:
        return [invalid(path, value, "must be between 1 and 65535, inclusive")]
    return []


PERCENT_RE = re.compile(r"^[0-9]+%\Z")
PERCENT_MSG = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
    "'93%', regex used for validation is '[0-9]+%')"
)


def int_or_percent(path: str, value: Value) -> list[FieldError]:
    """Kubernetes' ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    problem = int_or_string_problem(value)
    if problem:
        return [invalid(path, value_text(value), "must be an integer or percentage (e.g '5%')")]
    held = int_or_string(value)
    if isinstance(held, int):
        if held < 0:
            return [invalid(path, held, "must be greater than or equal to 0")]
        if held > 2**31 - 1:
            # An IntOrString's integer is an int32 in Kubernetes: 1e300 cannot be one.
            return [invalid(path, held, "must be less than or equal to 2147483647")]
        return []
    if held is None:
        return []
    if not PERCENT_RE.match(held):
        return [invalid(path, held, PERCENT_MSG)]
    if int(held[:-1]) > 100:
        return [invalid(path, held, "must not be greater than 100%")]
    return []


def is_set(value: Value) -> bool:
    """Whether an IntOrString field is present (JSON null is absent, as for a Go nil pointer)."""
    return value.WhichOneof("kind") not in (None, "null_value")


# What protobuf's JSON form, and so the REST API, can print: times from 0001-01-01T00:00:00Z
# through 9999-12-31T23:59:59.999999999Z, and finite numbers in a google.protobuf.Value (a
# managedFields entry's fieldsV1, an IntOrString). Kubernetes' times are RFC 3339 strings and its
# JSON has no NaN; a gRPC client can send either, and one such stored object made every REST list
# and watch of its kind a 500.
_MIN_SECONDS, _MAX_SECONDS = -62135596800, 253402300799
_TIMESTAMP = "google.protobuf.Timestamp"
_VALUE = "google.protobuf.Value"
_LEAVES = (_TIMESTAMP, _VALUE)


@functools.cache
def _checked_fields(descriptor: Descriptor) -> tuple[FieldDescriptor, ...]:
    """The message-typed fields of `descriptor` that are or may hold a Timestamp or a Value."""
    return tuple(
        f for f in descriptor.fields if f.message_type is not None and _holds_leaf(f.message_type)
    )


def _holds_leaf(descriptor: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    if descriptor.full_name in _LEAVES:
        return True
    if descriptor.full_name in seen:
        return False
    inner = seen | {descriptor.full_name}
    return any(
        f.message_type is not None and _holds_leaf(f.message_type, inner) for f in descriptor.fields
    )


_MAP, _LIST, _TIME, _NUMBERS, _MESSAGE = range(5)


@functools.cache
def _plan(descriptor: Descriptor) -> tuple[tuple[str, str, int], ...]:
    """(field name, JSON name, shape) of each field `printable` visits."""
    plan = []
    for f in _checked_fields(descriptor):
        mt = f.message_type
        assert mt is not None  # _checked_fields holds message fields only
        if mt.GetOptions().map_entry:
            shape = _MAP
        elif f.is_repeated:
            shape = _LIST
        elif mt.full_name == _TIMESTAMP:
            shape = _TIME
        elif mt.full_name == _VALUE:
            shape = _NUMBERS
        else:
            shape = _MESSAGE
        plan.append((f.name, f.json_name, shape))
    return tuple(plan)


_NANOS = 10**9


def _time_ok(ts: Timestamp) -> bool:
    return _MIN_SECONDS <= ts.seconds <= _MAX_SECONDS and 0 <= ts.nanos < _NANOS


def _finite(value: Value) -> bool:
    """Whether a Value (and every Value inside it) holds no NaN or infinity."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return math.isfinite(value.number_value)
    if kind == "struct_value":
        return all(_finite(v) for v in value.struct_value.fields.values())
    if kind == "list_value":
        return all(_finite(v) for v in each(value.list_value.values))
    return True


# `_plan` of each message class `_all_printable` meets, by the class itself: a dict lookup,
# where `isinstance(msg, Value)` (an ABC check, about 2,000 instructions) and the descriptor's
# cache (an attribute lookup and a call) cost several times that per message visited.
_PLANS: dict[type, tuple[tuple[str, str, int], ...]] = {}


def _all_printable(msg: Message) -> bool:
    """Whether every time and number under `msg` is printable. Visited on every write (a pod
    status's ten messages, a Lease's two), so it loops by hand: no generator per list, no
    IndexError ending a loop over a repeated field (its copy ends without one), no call per
    Timestamp."""
    cls = msg.__class__
    plan = _PLANS.get(cls)
    if plan is None:
        if isinstance(msg, Value):
            return _finite(msg)  # (Value itself is never given a plan)
        plan = _PLANS[cls] = _plan(msg.DESCRIPTOR)
    for name, _, shape in plan:
        if shape == _LIST:
            value = getattr(msg, name)
            if value:
                for item in value[:]:
                    if not _all_printable(item):
                        return False
        elif shape == _MAP:
            value = getattr(msg, name)
            if value:
                for key in value:
                    if not _all_printable(value[key]):
                        return False
        elif not msg.HasField(name):
            continue  # the common case: most of these fields are unset
        elif shape == _TIME:
            ts = getattr(msg, name)
            if not (_MIN_SECONDS <= ts.seconds <= _MAX_SECONDS and 0 <= ts.nanos < _NANOS):
                return False
        elif shape == _MESSAGE:
            if not _all_printable(getattr(msg, name)):
                return False
        elif not _finite(getattr(msg, name)):
            return False
    return True


_NOT_FINITE = "must be a finite number: JSON has no NaN or Infinity"
_WRAPPERS = ("google.protobuf.Struct", "google.protobuf.ListValue")


def printable(path: str, msg: Message) -> list[FieldError]:
    """Every time or number under `msg` that JSON cannot print. Only the fields that may hold
    one are visited, and paths are spelled out only when one is bad: this is on the path of
    every write, Lease renewals and pod status updates included."""
    if _all_printable(msg):
        return []
    if msg.DESCRIPTOR.full_name == _VALUE:
        kind = msg.WhichOneof("kind")
        if kind in ("struct_value", "list_value"):
            return printable(path, getattr(msg, kind))
        return [invalid(path, "NaN or Infinity", _NOT_FINITE)]
    errs: list[FieldError] = []
    # A Struct or ListValue is its map or list in JSON: no field name in the path.
    transparent = msg.DESCRIPTOR.full_name in _WRAPPERS
    for name, json_name, shape in _plan(msg.DESCRIPTOR):
        fp = path if transparent else f"{path}.{json_name}" if path else json_name
        value = getattr(msg, name)
        if shape == _MAP:
            for key in sorted(value):
                errs.extend(printable(f"{fp}[{key}]", value[key]))
        elif shape == _LIST:
            for i, item in enumerate(value):
                errs.extend(printable(f"{fp}[{i}]", item))
        elif not msg.HasField(name):
            continue
        elif shape in (_MESSAGE, _NUMBERS):
            errs.extend(printable(fp, value))
        elif not _time_ok(value):
            errs.append(
                invalid(
                    fp,
                    f"{{seconds: {value.seconds}, nanos: {value.nanos}}}",
                    "must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z",
                )
            )
    return errs


# ---- pod volumes and volume mounts (kube's ValidateVolumes, ValidateVolumeMounts) -----------
# The sources tinykube's kubelet prepares: hostPath, emptyDir, secret, downwardAPI, configMap
# and projected; the checks, paths and wording are kube's. kube does not require an absolute
# mountPath at the API (a Linux kubelet refuses a relative one when it starts the container).

HOST_PATH_TYPES = (
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
)
STORAGE_MEDIA = ("", "Memory", "HugePages")
FILE_MODE_MSG = "must be a number between 0 and 0777 (octal), both inclusive"
# validVolumeDownwardAPIFieldPathExpressions (besides subscripted labels and annotations).
VOLUME_FIELD_PATHS = (
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
)
VolumeSource = Literal["hostPath", "emptyDir", "secret", "downwardAPI", "configMap", "projected"]
VOLUME_SOURCES: tuple[VolumeSource, ...] = (
    "hostPath",
    "emptyDir",
    "secret",
    "downwardAPI",
    "configMap",
    "projected",
)
# A projected token's lifetime bounds (kube's ValidateServiceAccountTokenProjection).
MIN_TOKEN_SECONDS = 600
MAX_TOKEN_SECONDS = 1 << 32


def _backsteps(path: str, target: str) -> list[FieldError]:
    """validatePathNoBacksteps: no '..' path element."""
    if ".." in target.replace("\\", "/").split("/"):
        return [invalid(path, target, "must not contain '..'")]
    return []


def _local_descending_path(path: str, target: str) -> list[FieldError]:
    """validateLocalDescendingPath: relative, no '..' element."""
    errs: list[FieldError] = []
    if target.startswith("/"):
        errs.append(invalid(path, target, "must be a relative path"))
    errs.extend(_backsteps(path, target))
    return errs


def _local_non_reserved_path(path: str, target: str) -> list[FieldError]:
    """validateLocalNonReservedPath: as descending, and not starting with '..' (the atomic
    writer's own names)."""
    errs = _local_descending_path(path, target)
    if target.startswith(".."):
        errs.append(invalid(path, target, "must not start with '..'"))
    return errs


def _file_mode(path: str, mode: int) -> list[FieldError]:
    if not 0 <= mode <= 0o777:
        return [invalid(path, mode, FILE_MODE_MSG)]
    return []


def _key_to_paths(path: str, items: Iterable[pod_pb2.KeyToPath]) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, item in enumerate(items):
        ip = f"{path}[{i}]"
        if not item.key:
            errs.append(required(f"{ip}.key"))
        if not item.path:
            errs.append(required(f"{ip}.path"))
        else:
            errs.extend(_local_non_reserved_path(f"{ip}.path", item.path))
        if item.HasField("mode"):
            errs.extend(_file_mode(f"{ip}.mode", item.mode))
    return errs


def _downward_api_files(
    path: str, items: Iterable[pod_pb2.DownwardAPIVolumeFile]
) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, item in enumerate(items):
        ip = f"{path}[{i}]"
        if not item.path:
            errs.append(required(f"{ip}.path"))
        else:
            errs.extend(_local_non_reserved_path(f"{ip}.path", item.path))
        has_field, has_resource = item.HasField("fieldRef"), item.HasField("resourceFieldRef")
        if has_field and has_resource:
            errs.append(
                invalid(
                    ip,
                    "resource",
                    "fieldRef and resourceFieldRef can not be specified simultaneously",
                )
            )
        elif has_field:
            errs.extend(_volume_field_selector(f"{ip}.fieldRef", item.fieldRef))
        elif has_resource:
            rp = f"{ip}.resourceFieldRef"
            if not item.resourceFieldRef.containerName:
                errs.append(required(f"{rp}.containerName"))
            errs.extend(_resource_field_selector(rp, item.resourceFieldRef))
        else:
            errs.append(required(ip, "one of fieldRef and resourceFieldRef is required"))
        if item.HasField("mode"):
            errs.extend(_file_mode(f"{ip}.mode", item.mode))
    return errs


def _volume_field_selector(path: str, ref: pod_pb2.ObjectFieldSelector) -> list[FieldError]:
    return _object_field_selector(path, ref, VOLUME_FIELD_PATHS)


def _projected(path: str, source: pod_pb2.ProjectedVolumeSource) -> list[FieldError]:
    errs: list[FieldError] = []
    paths: set[str] = set()
    for i, src in enumerate(each(source.sources)):
        sp = f"{path}.sources[{i}]"
        kinds = [
            k
            for k in ("secret", "configMap", "downwardAPI", "serviceAccountToken")
            if src.HasField(k)
        ]
        if not kinds:
            errs.append(required(sp, "must specify exactly 1 volume type"))
            continue
        for extra in kinds[1:]:
            errs.append(
                forbidden(f"{sp}.{extra}", "may not specify more than 1 volume type per source")
            )
        kind = kinds[0]
        file_paths: list[str] = []
        if kind == "secret" or kind == "configMap":
            proj = src.secret if kind == "secret" else src.configMap
            if not proj.name:
                errs.append(required(f"{sp}.{kind}.name"))
            errs.extend(_key_to_paths(f"{sp}.{kind}.items", proj.items))
            file_paths = [item.path for item in each(proj.items)]
        elif kind == "downwardAPI":
            errs.extend(_downward_api_files(f"{sp}.downwardAPI.items", src.downwardAPI.items))
            file_paths = [item.path for item in each(src.downwardAPI.items)]
        else:
            tok = src.serviceAccountToken
            tp = f"{sp}.serviceAccountToken"
            if tok.HasField("expirationSeconds"):
                if tok.expirationSeconds < MIN_TOKEN_SECONDS:
                    errs.append(
                        invalid(
                            f"{tp}.expirationSeconds",
                            tok.expirationSeconds,
                            "may not specify a duration less than 10 minutes",
                        )
                    )
                elif tok.expirationSeconds > MAX_TOKEN_SECONDS:
                    errs.append(
                        invalid(
                            f"{tp}.expirationSeconds",
                            tok.expirationSeconds,
                            "may not specify a duration larger than 2^32 seconds",
                        )
                    )
            if not tok.path:
                errs.append(required(f"{tp}.path"))
            else:
                errs.extend(_local_non_reserved_path(f"{tp}.path", tok.path))
            file_paths = [tok.path]
        for fp in file_paths:
            if fp and fp in paths:
                errs.append(invalid(sp, fp, "conflicting duplicate paths"))
            paths.add(fp)
    if source.HasField("defaultMode"):
        errs.extend(_file_mode(f"{path}.defaultMode", source.defaultMode))
    return errs


def _volume_source(path: str, vol: pod_pb2.Volume) -> list[FieldError]:
    kinds = [k for k in VOLUME_SOURCES if vol.HasField(k)]
    if not kinds:
        return [required(path, "must specify a volume type")]
    errs = [forbidden(f"{path}.{k}", "may not specify more than 1 volume type") for k in kinds[1:]]
    kind = kinds[0]
    kp = f"{path}.{kind}"
    if kind == "hostPath":
        if not vol.hostPath.path:
            errs.append(required(f"{kp}.path"))
        else:
            errs.extend(_backsteps(f"{kp}.path", vol.hostPath.path))
        if vol.hostPath.HasField("type") and vol.hostPath.type not in HOST_PATH_TYPES:
            errs.append(unsupported(f"{kp}.type", vol.hostPath.type, HOST_PATH_TYPES))
    elif kind == "emptyDir":
        if vol.emptyDir.medium not in STORAGE_MEDIA:
            errs.append(unsupported(f"{kp}.medium", vol.emptyDir.medium, STORAGE_MEDIA))
        if vol.emptyDir.HasField("sizeLimit"):
            try:
                size = parse_quantity(vol.emptyDir.sizeLimit)
            except QuantityError:
                errs.append(
                    invalid(
                        f"{kp}.sizeLimit",
                        vol.emptyDir.sizeLimit,
                        "quantities must match the regular expression "
                        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                )
            else:
                if size < 0:
                    errs.append(
                        forbidden(
                            f"{kp}.sizeLimit", "SizeLimit field must be a valid resource quantity"
                        )
                    )
    elif kind in ("secret", "configMap"):
        name = vol.secret.secretName if kind == "secret" else vol.configMap.name
        src = vol.secret if kind == "secret" else vol.configMap
        if not name:
            errs.append(required(f"{kp}.{'secretName' if kind == 'secret' else 'name'}"))
        if src.HasField("defaultMode"):
            errs.extend(_file_mode(f"{kp}.defaultMode", src.defaultMode))
        errs.extend(_key_to_paths(f"{kp}.items", src.items))
    elif kind == "downwardAPI":
        if vol.downwardAPI.HasField("defaultMode"):
            errs.extend(_file_mode(f"{kp}.defaultMode", vol.downwardAPI.defaultMode))
        errs.extend(_downward_api_files(f"{kp}.items", vol.downwardAPI.items))
    else:
        errs.extend(_projected(kp, vol.projected))
    return errs


def validate_volumes(
    path: str, volumes: Iterable[pod_pb2.Volume]
) -> tuple[list[FieldError], set[str]]:
    """kube's ValidateVolumes: the errors and the names of the volumes declared."""
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, vol in enumerate(volumes):
        vp = f"{path}[{i}]"
        if not vol.name:
            errs.append(required(f"{vp}.name"))
        else:
            errs.extend(dns1123_label(f"{vp}.name", vol.name))
            if vol.name in names:
                errs.append(duplicate(f"{vp}.name", vol.name))
        if not _known_valid_source(vol):
            errs.extend(_volume_source(vp, vol))
        if vol.name:
            names.add(vol.name)
    return errs, names


def _known_valid_source(vol: pod_pb2.Volume) -> bool:
    """Whether the volume's one source is one already found valid. Every pod carries the same
    kube-api-access projected volume (ServiceAccount admission) and a workload's pods the same
    volumes: their checks run once per distinct source, not once per pod."""
    kinds = [k for k in VOLUME_SOURCES if vol.HasField(k)]
    if len(kinds) != 1:
        return False
    source: Message = getattr(vol, kinds[0])
    return _source_is_valid(kinds[0], source.SerializeToString(deterministic=True))


@functools.lru_cache(maxsize=1024)
def _source_is_valid(kind: str, data: bytes) -> bool:
    vol = pod_pb2.Volume()
    getattr(vol, kind).ParseFromString(data)
    return not _volume_source("", vol)


def not_found(path: str, value: str) -> FieldError:
    return FieldError(path, f"Not found: {go_quote(value)}")


def validate_volume_mounts(
    path: str, mounts: Iterable[pod_pb2.VolumeMount], volumes: set[str]
) -> list[FieldError]:
    """kube's ValidateVolumeMounts for one container."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, m in enumerate(mounts):
        mp = f"{path}[{i}]"
        if not m.name:
            errs.append(required(f"{mp}.name"))
        elif m.name not in volumes:
            errs.append(not_found(f"{mp}.name", m.name))
        if not m.mountPath:
            errs.append(required(f"{mp}.mountPath"))
        elif m.mountPath in seen:
            errs.append(invalid(f"{mp}.mountPath", m.mountPath, "must be unique"))
        seen.add(m.mountPath)
        if m.subPath:
            errs.extend(_local_descending_path(f"{mp}.subPath", m.subPath))
    return errs


def validate_pod_volumes(path: str, spec: pod_pb2.PodSpec) -> list[FieldError]:
    errs, names = validate_volumes(f"{path}.volumes", each(spec.volumes))
    for group, containers in (
        ("initContainers", each(spec.initContainers)),
        ("containers", each(spec.containers)),
    ):
        for i, c in enumerate(containers):
            errs.extend(
                validate_volume_mounts(
                    f"{path}.{group}[{i}].volumeMounts", each(c.volumeMounts), names
                )
            )
    return errs


def go_strings(values: Iterable[str]) -> GoValue:
    """A []string as Go's %#v prints it in Kubernetes' messages."""
    return GoValue("[]string{" + ", ".join(go_quote(v) for v in values) + "}")


# kube's MaxDNSNameservers, MaxDNSSearchPaths, MaxDNSSearchListChars (libc's limits)
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048


def validate_pod_dns_config(path: str, spec: pod_pb2.PodSpec) -> list[FieldError]:
    """kube's validatePodDNSConfig: dnsPolicy None needs dnsConfig with a nameserver; at most 3
    nameservers (IP addresses), 32 search domains of 2048 characters with their spaces (DNS
    subdomains, a trailing dot allowed), options with names."""
    errs: list[FieldError] = []
    dp = f"{path}.dnsConfig"
    has = spec.HasField("dnsConfig")
    cfg = spec.dnsConfig
    if spec.dnsPolicy == "None":
        if not has:
            return [required(dp, "must provide `dnsConfig` when `dnsPolicy` is None")]
        if not cfg.nameservers:
            detail = "must provide at least one DNS nameserver when `dnsPolicy` is None"
            return [required(f"{dp}.nameservers", detail)]
    if not has:
        return errs
    if len(cfg.nameservers) > MAX_DNS_NAMESERVERS:
        errs.append(
            invalid(
                f"{dp}.nameservers",
                go_strings(cfg.nameservers),
                f"must not have more than {MAX_DNS_NAMESERVERS} nameservers",
            )
        )
    for i, ns in enumerate(each(cfg.nameservers)):
        try:
            ipaddress.ip_address(ns)
        except ValueError:
            detail = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            errs.append(invalid(f"{dp}.nameservers[{i}]", ns, detail))
    if len(cfg.searches) > MAX_DNS_SEARCH_PATHS:
        errs.append(
            invalid(
                f"{dp}.searches",
                go_strings(cfg.searches),
                f"must not have more than {MAX_DNS_SEARCH_PATHS} search paths",
            )
        )
    if len(" ".join(cfg.searches)) > MAX_DNS_SEARCH_LIST_CHARS:
        errs.append(
            invalid(
                f"{dp}.searches",
                go_strings(cfg.searches),
                f"must not have more than {MAX_DNS_SEARCH_LIST_CHARS} characters (including "
                "spaces) in the search list",
            )
        )
    for i, search in enumerate(each(cfg.searches)):
        # a trailing dot is fine (an absolute name)
        errs.extend(dns1123_subdomain(f"{dp}.searches[{i}]", search.removesuffix(".")))
    for i, option in enumerate(each(cfg.options)):
        if not option.name:
            errs.append(required(f"{dp}.options[{i}]", "Option.Name must not be empty"))
    return errs
