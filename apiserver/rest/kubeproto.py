"""The few Kubernetes protobuf bodies tinykube must read: a SelfSubjectAccessReview, Namespaces,
Deployments, Jobs, ConfigMaps, Secrets, ServiceAccounts and the RBAC kinds.

kubectl's typed clients (`kubectl auth can-i`, `kubectl create namespace`, `kubectl create
deployment`, `kubectl create job`, `kubectl create serviceaccount`, `kubectl create
rolebinding`) post built-in kinds as application/vnd.kubernetes.protobuf: the magic bytes
"k8s\\0", then a runtime.Unknown (typeMeta 1, raw 2) whose raw bytes are the object in
k8s.io/api's generated.proto numbering.
`self_subject_access_review(body)` turns one into the JSON dict the review code reads;
`decode(body)` does the same for the stored kinds in `SCHEMAS` (read with a small schema per
kind, so the body then goes through the same decoding as a JSON one; others stay 415). Only
the fields tinykube uses are read; unknown fields (timestamps, managedFields: server-owned)
are skipped, as protobuf readers do. Pure.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from tinykube.errors import BadRequestError

MAGIC = b"k8s\x00"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise BadRequestError("the protobuf body is truncated or malformed")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield number, value
        elif wire == 2:
            length, i = _varint(data, i)
            if i + length > len(data):
                raise BadRequestError("the protobuf body is truncated or malformed")
            yield number, data[i : i + length]
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise BadRequestError(f"the protobuf body has an unsupported wire type {wire}")


def _strings(data: bytes, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in fields(data):
        if number in names and isinstance(value, bytes):
            out[names[number]] = value.decode("utf-8", "replace")
    return out


_RESOURCE_ATTRIBUTES = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}


def self_subject_access_review(body: bytes) -> dict[str, Any]:
    """A protobuf SelfSubjectAccessReview as its JSON form (spec only)."""
    if not body.startswith(MAGIC):
        raise BadRequestError("the protobuf body does not start with the Kubernetes magic bytes")
    raw = b""
    for number, value in fields(body[len(MAGIC) :]):
        if number == 2 and isinstance(value, bytes):
            raw = value
    spec: dict[str, Any] = {}
    for number, value in fields(raw):
        if number != 2 or not isinstance(value, bytes):
            continue
        for part, attrs in fields(value):
            if not isinstance(attrs, bytes):
                continue
            if part == 1:
                resource = _strings(attrs, _RESOURCE_ATTRIBUTES)
                for sub, selector in fields(attrs):
                    if sub == 8 and isinstance(selector, bytes):
                        resource["fieldSelector"] = _strings(selector, {1: "rawSelector"})
                spec["resourceAttributes"] = resource
            elif part == 2:
                spec["nonResourceAttributes"] = _strings(attrs, {1: "path", 2: "verb"})
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "spec": spec,
    }


# ---- stored kinds ----------------------------------------------------------------------------

# A field: (JSON name, type), type one of "string", "int", "bool", "strings" (repeated), "map"
# (map<string,string>), "bytesmap" (map<string,bytes>: base64, as JSON carries bytes), "optint" /
# "optbool" (Kubernetes' pointer fields: kept when zero, as their presence is what they say: a
# Job's backoffLimit 0 is not an unset one), "intorstring" or the name of a nested schema
# ("+Name" for a repeated one, "<Name" for an embedded Go struct whose fields the JSON inlines),
# or "quantity" (a resource.Quantity message: its string, field 1).
Schema = dict[int, tuple[str, str]]

_NESTED: dict[str, Schema] = {
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        5: ("uid", "string"),
        6: ("resourceVersion", "string"),
        7: ("generation", "int"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        13: ("ownerReferences", "+OwnerReference"),
        14: ("finalizers", "strings"),
    },
    "OwnerReference": {
        1: ("kind", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("controller", "bool"),
        7: ("blockOwnerDeletion", "bool"),
    },
    "NamespaceSpec": {1: ("finalizers", "strings")},
    # apps/v1 and core/v1 as `kubectl create deployment` fills them (--image, --replicas,
    # --port, and the command after --).
    "DeploymentSpec": {
        1: ("replicas", "optint"),
        2: ("selector", "LabelSelector"),
        3: ("template", "PodTemplateSpec"),
        4: ("strategy", "DeploymentStrategy"),
        5: ("minReadySeconds", "int"),
        6: ("revisionHistoryLimit", "optint"),
        7: ("paused", "bool"),
        9: ("progressDeadlineSeconds", "optint"),
    },
    # batch/v1: what `kubectl create job` sends
    "JobSpec": {
        1: ("parallelism", "optint"),
        2: ("completions", "optint"),
        3: ("activeDeadlineSeconds", "optint"),
        4: ("selector", "LabelSelector"),
        5: ("manualSelector", "optbool"),
        6: ("template", "PodTemplateSpec"),
        7: ("backoffLimit", "optint"),
        8: ("ttlSecondsAfterFinished", "optint"),
        9: ("completionMode", "string"),
        10: ("suspend", "optbool"),
        12: ("backoffLimitPerIndex", "optint"),
        13: ("maxFailedIndexes", "optint"),
        14: ("podReplacementPolicy", "string"),
    },
    "DeploymentStrategy": {1: ("type", "string"), 2: ("rollingUpdate", "RollingUpdateDeployment")},
    "RollingUpdateDeployment": {
        1: ("maxUnavailable", "intorstring"),
        2: ("maxSurge", "intorstring"),
    },
    "LabelSelector": {
        1: ("matchLabels", "map"),
        2: ("matchExpressions", "+LabelSelectorRequirement"),
    },
    "LabelSelectorRequirement": {
        1: ("key", "string"),
        2: ("operator", "string"),
        3: ("values", "strings"),
    },
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec")},
    "PodSpec": {
        2: ("containers", "+Container"),
        3: ("restartPolicy", "string"),
        4: ("terminationGracePeriodSeconds", "optint"),
        6: ("dnsPolicy", "string"),
        7: ("nodeSelector", "map"),
        8: ("serviceAccountName", "string"),
        9: ("serviceAccount", "string"),
        10: ("nodeName", "string"),
        16: ("hostname", "string"),
        19: ("schedulerName", "string"),
        20: ("initContainers", "+Container"),
        21: ("automountServiceAccountToken", "optbool"),
        24: ("priorityClassName", "string"),
    },
    "Container": {
        1: ("name", "string"),
        2: ("image", "string"),
        3: ("command", "strings"),
        4: ("args", "strings"),
        5: ("workingDir", "string"),
        6: ("ports", "+ContainerPort"),
        7: ("env", "+EnvVar"),
        14: ("imagePullPolicy", "string"),
        16: ("stdin", "bool"),
        17: ("stdinOnce", "bool"),
        18: ("tty", "bool"),
        19: ("envFrom", "+EnvFromSource"),
    },
    "ContainerPort": {
        1: ("name", "string"),
        2: ("hostPort", "int"),
        3: ("containerPort", "int"),
        4: ("protocol", "string"),
        5: ("hostIP", "string"),
    },
    "EnvVar": {1: ("name", "string"), 2: ("value", "string"), 3: ("valueFrom", "EnvVarSource")},
    "EnvVarSource": {
        1: ("fieldRef", "ObjectFieldSelector"),
        2: ("resourceFieldRef", "ResourceFieldSelector"),
        3: ("configMapKeyRef", "ConfigMapKeySelector"),
        4: ("secretKeyRef", "SecretKeySelector"),
    },
    "ObjectFieldSelector": {1: ("apiVersion", "string"), 2: ("fieldPath", "string")},
    "ResourceFieldSelector": {
        1: ("containerName", "string"),
        2: ("resource", "string"),
        3: ("divisor", "quantity"),
    },
    # The name is an embedded LocalObjectReference (field 1), inlined in the JSON.
    "ConfigMapKeySelector": {
        1: ("", "<LocalObjectReference"),
        2: ("key", "string"),
        3: ("optional", "optbool"),
    },
    "SecretKeySelector": {
        1: ("", "<LocalObjectReference"),
        2: ("key", "string"),
        3: ("optional", "optbool"),
    },
    "EnvFromSource": {
        1: ("prefix", "string"),
        2: ("configMapRef", "ConfigMapEnvSource"),
        3: ("secretRef", "SecretEnvSource"),
    },
    "ConfigMapEnvSource": {1: ("", "<LocalObjectReference"), 2: ("optional", "optbool")},
    "SecretEnvSource": {1: ("", "<LocalObjectReference"), 2: ("optional", "optbool")},
    "LocalObjectReference": {1: ("name", "string")},
    "ObjectReference": {
        1: ("kind", "string"),
        2: ("namespace", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("resourceVersion", "string"),
        7: ("fieldPath", "string"),
    },
    "NamespaceStatus": {1: ("phase", "string")},
    # k8s.io/api/rbac/v1 and the apimachinery LabelSelector (`kubectl create role`,
    # `create rolebinding`, `create clusterrole --aggregation-rule`, ...).
    "PolicyRule": {
        1: ("verbs", "strings"),
        2: ("apiGroups", "strings"),
        3: ("resources", "strings"),
        4: ("resourceNames", "strings"),
        5: ("nonResourceURLs", "strings"),
    },
    "Subject": {
        1: ("kind", "string"),
        2: ("apiGroup", "string"),
        3: ("name", "string"),
        4: ("namespace", "string"),
    },
    "RoleRef": {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")},
    "AggregationRule": {1: ("clusterRoleSelectors", "+LabelSelector")},
}
_ROLE: Schema = {1: ("metadata", "ObjectMeta"), 2: ("rules", "+PolicyRule")}
_BINDING: Schema = {
    1: ("metadata", "ObjectMeta"),
    2: ("subjects", "+Subject"),
    3: ("roleRef", "RoleRef"),
}
# The stored kinds whose protobuf bodies are read, by (apiVersion, kind).
SCHEMAS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {
        1: ("metadata", "ObjectMeta"),
        2: ("spec", "NamespaceSpec"),
        3: ("status", "NamespaceStatus"),
    },
    # The status is the controller's: a create's is dropped anyway.
    ("apps/v1", "Deployment"): {1: ("metadata", "ObjectMeta"), 2: ("spec", "DeploymentSpec")},
    ("batch/v1", "Job"): {1: ("metadata", "ObjectMeta"), 2: ("spec", "JobSpec")},
    ("rbac.authorization.k8s.io/v1", "Role"): _ROLE,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): {
        **_ROLE,
        3: ("aggregationRule", "AggregationRule"),
    },
    # k8s.io/api/core/v1 generated.proto: ConfigMap data 2, binaryData 3, immutable 4; Secret
    # data 2, type 3, stringData 4, immutable 5.
    ("v1", "ConfigMap"): {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map"),
        3: ("binaryData", "bytesmap"),
        4: ("immutable", "optbool"),
    },
    ("v1", "Secret"): {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "bytesmap"),
        3: ("type", "string"),
        4: ("stringData", "map"),
        5: ("immutable", "optbool"),
    },
    # ServiceAccount: secrets 2, imagePullSecrets 3, automountServiceAccountToken 4.
    ("v1", "ServiceAccount"): {
        1: ("metadata", "ObjectMeta"),
        2: ("secrets", "+ObjectReference"),
        3: ("imagePullSecrets", "+LocalObjectReference"),
        4: ("automountServiceAccountToken", "optbool"),
    },
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _BINDING,
}


def supports(api_version: str, kind: str) -> bool:
    return (api_version, kind) in SCHEMAS


def _bad(detail: str) -> BadRequestError:
    return BadRequestError(f"the protobuf request body cannot be decoded: {detail}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise _bad("a string field holds a number")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad("a string field is not UTF-8") from None


# Schemas whose unread fields are the server's (ObjectMeta's uid, creationTimestamp,
# managedFields...): skipped. Anywhere else a field tinykube does not read, set to anything but
# its zero value (Go's protobuf writes every non-pointer field, zero or not), refuses the body:
# dropping it would store an object other than the one sent.
_SERVER_OWNED = frozenset({"ObjectMeta"})


def _message(data: bytes, schema: Schema, where: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    kept: set[str] = set()
    for number, value in fields(data):
        field = schema.get(number)
        if field is None:
            if where and where not in _SERVER_OWNED and value not in (0, b""):
                raise _bad(
                    f"{where} field {number} is set, and tinykube reads only some fields from "
                    "protobuf; send the object as JSON"
                )
            continue
        name, type_ = field
        if type_ in ("optint", "optbool"):
            if not isinstance(value, int):
                raise _bad(f"{name} is not a number")
            out[name] = bool(value) if type_ == "optbool" else _signed(value)
            kept.add(name)
        elif type_ == "intorstring":
            if not isinstance(value, bytes):
                raise _bad(f"{name} is not an IntOrString")
            parts = dict(fields(value))
            if parts.get(1, 0) == 1:
                out[name] = _text(parts.get(3, b""))
            else:
                number_value = parts.get(2, 0)
                if not isinstance(number_value, int):
                    raise _bad(f"{name} is not a number")
                out[name] = _signed(number_value)
            kept.add(name)
        elif type_ == "quantity":
            if not isinstance(value, bytes):
                raise _bad(f"{name} is not a quantity")
            out[name] = _text(dict(fields(value)).get(1, b""))
            kept.add(name)  # Go writes an unset one as "0", which is what kube shows too
        elif type_ == "string":
            out[name] = _text(value)
        elif type_ in ("int", "bool"):
            if not isinstance(value, int):
                raise _bad(f"{name} is not a number")
            out[name] = bool(value) if type_ == "bool" else _signed(value)
        elif type_ == "strings":
            out.setdefault(name, []).append(_text(value))
        elif type_ == "map":
            if not isinstance(value, bytes):
                raise _bad(f"{name} is not a map entry")
            entry = _message(value, {1: ("key", "string"), 2: ("value", "string")}, "map entry")
            out.setdefault(name, {})[entry.get("key", "")] = entry.get("value", "")
        elif type_ == "bytesmap":
            if not isinstance(value, bytes):
                raise _bad(f"{name} is not a map entry")
            key, raw = "", b""
            for part, item in fields(value):
                if part == 1:
                    key = _text(item)
                elif part == 2 and isinstance(item, bytes):
                    raw = item
            out.setdefault(name, {})[key] = base64.b64encode(raw).decode()
        else:
            if not isinstance(value, bytes):
                raise _bad(f"{name} is not a message")
            nested_name = type_.lstrip("+<")
            nested = _message(value, _NESTED[nested_name], nested_name)
            if type_.startswith("<"):
                out.update(nested)
            elif type_.startswith("+"):
                out.setdefault(name, []).append(nested)
            else:
                out[name] = nested
    return {k: v for k, v in out.items() if k in kept or v not in ("", {}, [], 0, False)}


def _signed(value: int) -> int:
    """A varint as the int32/int64 it encodes (negative numbers are ten-byte varints)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def decode(body: bytes) -> dict[str, Any]:
    """The stored-kind object a Kubernetes protobuf body holds, as a Kubernetes JSON dict."""
    if not body.startswith(MAGIC):
        raise _bad("it does not start with the k8s protobuf prefix")
    unknown = dict(fields(body[len(MAGIC) :]))
    type_meta = unknown.get(1, b"")
    raw = unknown.get(2, b"")
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise _bad("malformed envelope")
    meta = _message(type_meta, {1: ("apiVersion", "string"), 2: ("kind", "string")})
    api_version, kind = meta.get("apiVersion", ""), meta.get("kind", "")
    schema = SCHEMAS.get((api_version, kind))
    if schema is None:
        raise _bad(f"{api_version or '<none>'} {kind or '<none>'} is not read from protobuf")
    return {"apiVersion": api_version, "kind": kind, **_message(raw, schema)}
