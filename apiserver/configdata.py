"""ConfigMaps and Secrets (core/v1) in the registry: defaults, stringData and validation.

Kubernetes' rules for the two kinds, message for message:
- ValidateConfigMap / ValidateConfigMapUpdate and ValidateSecret / ValidateSecretUpdate
  (pkg/apis/core/validation): keys are config keys (apimachinery's IsConfigMapKey), a
  ConfigMap key is in data or binaryData but not both, the values total at most 1 MiB, and once
  `immutable` is true neither the data nor `immutable` may change. A Secret's `type` never
  changes, and the kubernetes.io types need their keys (a dockercfg or dockerconfigjson value
  must be a JSON object; the error shows "<secret contents redacted>", never the value).
- SetDefaults_Secret: `type` is Opaque when unset, on every write (so a PUT that leaves it out
  of a kubernetes.io/tls Secret is refused as a change of type, as kube refuses it).
- `stringData` is write-only (kube's v1 to internal conversion): its entries are merged into
  `data` on create and update, winning over data's, and it is never stored or returned.
- Neither kind has a metadata.generation in Kubernetes (their strategies set none).
- REST bodies: `checked_json_body` gives Go's decoding errors for a map value that is not a
  string (`json: cannot unmarshal number into Go struct field ConfigMap.data of type string`)
  and for base64 that Go's StdEncoding refuses (`illegal base64 data at input byte 4`), before
  protobuf's laxer parser sees it. Neither message contains the value.

Pure functions over protobuf messages and JSON dicts; the two kinds' strategies
(apiserver/registry/configmap.py, secret.py) and the REST codec call them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from apiserver.validation import (
    config_map_key_problems,
    forbidden,
    invalid,
    required,
    too_long,
)
from tinykube.errors import BadRequestError, FieldError
from tinykube.kinds import CONFIG_MAP, SECRET, KindInfo
from tinykube.v1 import configmap_pb2, secret_pb2

KINDS = frozenset({CONFIG_MAP.kind, SECRET.kind})

# core.MaxSecretSize: the limit on the values of a Secret's data, and of a ConfigMap's data and
# binaryData together.
MAX_DATA_BYTES = 1024 * 1024

SECRET_TYPE_OPAQUE = "Opaque"
SECRET_TYPE_SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
SECRET_TYPE_DOCKERCFG = "kubernetes.io/dockercfg"
SECRET_TYPE_DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
SECRET_TYPE_BASIC_AUTH = "kubernetes.io/basic-auth"
SECRET_TYPE_SSH_AUTH = "kubernetes.io/ssh-auth"
SECRET_TYPE_TLS = "kubernetes.io/tls"
SERVICE_ACCOUNT_NAME_KEY = "kubernetes.io/service-account.name"
DOCKERCFG_KEY = ".dockercfg"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
BASIC_AUTH_USERNAME_KEY = "username"
BASIC_AUTH_PASSWORD_KEY = "password"
SSH_AUTH_PRIVATE_KEY = "ssh-privatekey"
TLS_CERT_KEY = "tls.crt"
TLS_PRIVATE_KEY_KEY = "tls.key"

REDACTED = "<secret contents redacted>"
IMMUTABLE_SET = "field is immutable when `immutable` is set"


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


# ---- defaults -------------------------------------------------------------------------------


def prepare_secret(secret: secret_pb2.Secret) -> None:
    """SetDefaults_Secret, then stringData merged into data (stringData wins) and dropped."""
    if not secret.type:
        secret.type = SECRET_TYPE_OPAQUE
    for key, value in secret.stringData.items():
        secret.data[key] = value.encode()
    secret.ClearField("stringData")


# ---- validation ---------------------------------------------------------------------------


def validate_config_map(cm: configmap_pb2.ConfigMap) -> list[FieldError]:
    errs: list[FieldError] = []
    total = 0
    for key in sorted(cm.data):
        path = f"data[{key}]"
        errs.extend(invalid(path, key, p) for p in config_map_key_problems(key))
        if key in cm.binaryData:
            errs.append(invalid(path, key, "duplicate of key present in binaryData"))
        total += _utf8_len(cm.data[key])
    for key in sorted(cm.binaryData):
        errs.extend(invalid(f"binaryData[{key}]", key, p) for p in config_map_key_problems(key))
        total += len(cm.binaryData[key])
    if total > MAX_DATA_BYTES:
        # kube's field.NewPath(""): the whole object, which Go prints as "[]".
        errs.append(too_long("[]", "", MAX_DATA_BYTES))
    return errs


def validate_config_map_update(
    new: configmap_pb2.ConfigMap, old: configmap_pb2.ConfigMap
) -> list[FieldError]:
    errs: list[FieldError] = []
    if old.HasField("immutable") and old.immutable:
        if not (new.HasField("immutable") and new.immutable):
            errs.append(forbidden("immutable", IMMUTABLE_SET))
        if dict(new.data) != dict(old.data):
            errs.append(forbidden("data", IMMUTABLE_SET))
        if dict(new.binaryData) != dict(old.binaryData):
            errs.append(forbidden("binaryData", IMMUTABLE_SET))
    return errs


def validate_secret(secret: secret_pb2.Secret) -> list[FieldError]:
    errs: list[FieldError] = []
    data = secret.data
    total = 0
    for key in sorted(data):
        errs.extend(invalid(f"data[{key}]", key, p) for p in config_map_key_problems(key))
        total += len(data[key])
    if total > MAX_DATA_BYTES:
        errs.append(too_long("data", "", MAX_DATA_BYTES))
    kind = secret.type
    if kind == SECRET_TYPE_SERVICE_ACCOUNT_TOKEN:
        # Only the name: the uid and the token are a controller's to add.
        if not secret.metadata.annotations.get(SERVICE_ACCOUNT_NAME_KEY):
            errs.append(required(f"metadata.annotations[{SERVICE_ACCOUNT_NAME_KEY}]"))
    elif kind in (SECRET_TYPE_DOCKERCFG, SECRET_TYPE_DOCKER_CONFIG_JSON):
        key = DOCKERCFG_KEY if kind == SECRET_TYPE_DOCKERCFG else DOCKER_CONFIG_JSON_KEY
        if key not in data:
            errs.append(required(f"data[{key}]"))
        else:
            problem = go_json_object_problem(data[key])
            if problem:
                errs.append(invalid(f"data[{key}]", REDACTED, problem))
    elif kind == SECRET_TYPE_BASIC_AUTH:
        # Either may be empty, but one must be there.
        if BASIC_AUTH_USERNAME_KEY not in data and BASIC_AUTH_PASSWORD_KEY not in data:
            errs.append(required(f"data[{BASIC_AUTH_USERNAME_KEY}]"))
            errs.append(required(f"data[{BASIC_AUTH_PASSWORD_KEY}]"))
    elif kind == SECRET_TYPE_SSH_AUTH:
        if not data.get(SSH_AUTH_PRIVATE_KEY):
            errs.append(required(f"data[{SSH_AUTH_PRIVATE_KEY}]"))
    elif kind == SECRET_TYPE_TLS:
        for key in (TLS_CERT_KEY, TLS_PRIVATE_KEY_KEY):
            if key not in data:
                errs.append(required(f"data[{key}]"))
    return errs


def validate_secret_update(new: secret_pb2.Secret, old: secret_pb2.Secret) -> list[FieldError]:
    errs: list[FieldError] = []
    if new.type != old.type:
        errs.append(invalid("type", new.type, "field is immutable"))
    if old.HasField("immutable") and old.immutable:
        if not (new.HasField("immutable") and new.immutable):
            errs.append(forbidden("immutable", IMMUTABLE_SET))
        # stringData is already in data here, so data is the whole comparison (as kube's).
        if dict(new.data) != dict(old.data):
            errs.append(forbidden("data", IMMUTABLE_SET))
    return errs


def go_json_object_problem(raw: bytes) -> str:
    """What Go's json.Unmarshal into a map[string]interface{} says about `raw`, or "" if it
    is a JSON object. Only the first offending character is named, as Go names it; a broken
    literal (`nul`) is reported at its first letter, where Go names the letter after it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid character looking for beginning of value"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated"):
            return "unexpected end of JSON input"
        char = text[exc.pos]
        context = _GO_JSON_CONTEXTS.get(exc.msg.split(":")[0], "looking for beginning of value")
        return f"invalid character {_go_char(char)} {context}"
    except RecursionError:
        return "exceeded max depth"
    if not isinstance(value, dict):
        shown = _GO_JSON_TYPES.get(type(value), "number")
        return f"json: cannot unmarshal {shown} into Go value of type map[string]interface {{}}"
    return ""


_GO_JSON_CONTEXTS = {
    "Expecting value": "looking for beginning of value",
    "Expecting property name enclosed in double quotes": "looking for beginning of object key "
    "string",
    "Expecting ':' delimiter": "after object key",
    "Expecting ',' delimiter": "after object key:value pair",
    "Extra data": "after top-level value",
    "Invalid control character at": "in string literal",
}
_GO_JSON_TYPES: dict[type, str] = {
    list: "array",
    str: "string",
    bool: "bool",
    type(None): "null",
}


def _go_char(char: str) -> str:
    """Go's quoteChar: 'x', with ' and control characters escaped."""
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    if char.isprintable():
        return f"'{char}'"
    return "'" + json.dumps(char)[1:-1] + "'"


# ---- REST bodies ---------------------------------------------------------------------------

# (field, Go type) of each map whose values kube decodes with encoding/json.
_BODY_MAPS: dict[str, tuple[tuple[str, str], ...]] = {
    CONFIG_MAP.kind: (("data", "string"), ("binaryData", "[]uint8")),
    SECRET.kind: (("data", "[]uint8"), ("stringData", "string")),
}
_JSON_NAMES: dict[type, str] = {bool: "bool", int: "number", float: "number", list: "array"}
_STD_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def checked_json_body(info: KindInfo, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with its map values checked as kube's JSON decoder checks them: one it refuses is
    a 400 in Go's words, a null one becomes empty (as Go decodes it). `doc` is not modified."""
    out = dict(doc)
    for name, go_type in _BODY_MAPS.get(info.kind, ()):
        if not isinstance(doc.get(name), Mapping):
            continue
        values = out[name] = dict(doc[name])
        for key, value in values.items():
            if value is None:
                values[key] = ""
                continue
            if not isinstance(value, str):
                shown = "object" if isinstance(value, Mapping) else _JSON_NAMES[type(value)]
                raise BadRequestError(
                    f"{_cannot_handle(info)}: json: cannot unmarshal {shown} into Go struct "
                    f"field {info.kind}.{name} of type {go_type}"
                )
            if go_type == "[]uint8":
                at = go_base64_error(value)
                if at is not None:
                    raise BadRequestError(
                        f"{_cannot_handle(info)}: illegal base64 data at input byte {at}"
                    )
    return out


def _cannot_handle(info: KindInfo) -> str:
    return f'{info.kind} in version "{info.version}" cannot be handled as a {info.kind}'


def go_base64_error(text: str) -> int | None:
    """Where Go's base64.StdEncoding.Decode fails on `text` (its CorruptInputError offset), or
    None if it decodes. Padding is required, \\r and \\n are skipped, as Go's decoder does."""
    src = text.encode()
    si = 0
    n = len(src)
    while si < n:
        j = 0
        while j < 4:
            if si == n:
                if j == 0:
                    return None
                return si - j
            c = src[si]
            si += 1
            if c in _STD_BASE64:
                j += 1
                continue
            if c in (0x0A, 0x0D):
                continue
            if c != 0x3D:  # "="
                return si - 1
            if j in (0, 1):
                return si - 1
            if j == 2:
                while si < n and src[si] in (0x0A, 0x0D):
                    si += 1
                if si == n:
                    return n
                if src[si] != 0x3D:
                    return si - 1
                si += 1
            while si < n and src[si] in (0x0A, 0x0D):
                si += 1
            return si if si < n else None
    return None
