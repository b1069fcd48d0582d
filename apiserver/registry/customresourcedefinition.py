"""CustomResourceDefinitions (apiextensions.k8s.io/v1): defaults, validation and update rules.

As kube's apiextensions-apiserver pkg/registry/customresourcedefinition/strategy.go and
pkg/apis/apiextensions/validation: the name is `<plural>.<group>`, the group a domain with a
dot, the names DNS-1035 labels, exactly one storage version among uniquely named versions, a
schema for every version (structural: `apiserver.crd.schema.schema_problems`, its
x-kubernetes-validations compiled by `apiserver.crd.cel.compile_rules`), printer columns and
scale paths simple JSON paths, and, once the CRD is Established, an unchanged scope and kind.
The status (conditions, acceptedNames, storedVersions) is the CRD controller's
(apiserver/crd/controller.py): a create drops the client's status, an update keeps the stored
one. Pure functions.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from google.protobuf import json_format

from apiserver.crd import cel
from apiserver.crd import schema as crdschema
from apiserver.registry.base import Strategy
from apiserver.validation import (
    dns1123_subdomain,
    duplicate,
    forbidden,
    invalid,
    required,
    unsupported,
)
from tinykube.errors import FieldError
from tinykube.manifest import whole_numbers
from tinykube.v1 import apiextensions_pb2

CRD = apiextensions_pb2.CustomResourceDefinition

SCOPES = ("Cluster", "Namespaced")
CONVERSION_STRATEGIES = ("None", "Webhook")
COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")
COLUMN_FORMATS = ("int32", "int64", "float", "double", "byte", "date", "date-time", "password")
MAX_SELECTABLE_FIELDS = 8
# The finalizer the CRD controller removes once every custom object is gone.
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"

_DNS1035_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
# A simple JSON path: dot-separated field names, optionally with array indexes or quoted keys.
_SIMPLE_JSON_PATH_RE = re.compile(
    r"^(\.[A-Za-z0-9_$-]+(\[(\d+|\*|'[^']*'|\"[^\"]*\")\])*|\[('[^']*'|\"[^\"]*\")\])+\Z"
)


def dns1035_problems(value: str) -> list[str]:
    """kube's IsDNS1035Label."""
    problems = []
    if len(value) > 63:
        problems.append("must be no more than 63 characters")
    if not _DNS1035_LABEL_RE.match(value):
        problems.append(DNS1035_LABEL_MSG)
    return problems


def _dns1035(path: str, value: str) -> list[FieldError]:
    problems = dns1035_problems(value)
    return [invalid(path, value, ",".join(problems))] if problems else []


def simple_json_path_problem(path: str) -> str:
    """Why `path` is not a simple JSON path ("" when it is one): `.spec.replicas`,
    `.status.conditions[0].type`, `.metadata.labels['app']`."""
    if not path.startswith("."):
        return "must be a simple json path starting with ."
    if not _SIMPLE_JSON_PATH_RE.match(path):
        return "must be a valid JSON path"
    return ""


def storage_version(crd: CRD) -> str:
    """The name of the version marked storage ("" when none is)."""
    for v in crd.spec.versions:
        if v.storage:
            return v.name
    return ""


def is_established(crd: CRD) -> bool:
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)


def schema_dict(version: apiextensions_pb2.CustomResourceDefinitionVersion) -> dict[str, Any]:
    """A version's openAPIV3Schema as JSON (whole numbers as ints, as the user wrote them)."""
    if not version.schema.HasField("openAPIV3Schema"):
        return {}
    return whole_numbers(json_format.MessageToDict(version.schema.openAPIV3Schema))  # type: ignore[no-any-return]


def default_crd(crd: CRD) -> None:
    """kube's SetDefaults for apiextensions/v1: singular, listKind, conversion strategy."""
    names = crd.spec.names
    if not names.singular and names.kind:
        names.singular = names.kind.lower()
    if not names.listKind and names.kind:
        names.listKind = names.kind + "List"
    if not crd.spec.conversion.strategy:
        crd.spec.conversion.strategy = "None"


def _names_problems(
    path: str, names: apiextensions_pb2.CustomResourceDefinitionNames
) -> list[FieldError]:
    """ValidateCustomResourceDefinitionNames."""
    errs: list[FieldError] = []
    if not names.plural:
        errs.append(required(f"{path}.plural"))
    else:
        errs.extend(_dns1035(f"{path}.plural", names.plural))
    if names.singular:
        errs.extend(_dns1035(f"{path}.singular", names.singular))
    if not names.kind:
        errs.append(required(f"{path}.kind"))
    else:
        problems = dns1035_problems(names.kind.lower())
        if problems:
            errs.append(
                invalid(
                    f"{path}.kind",
                    names.kind,
                    "may have mixed case, but should otherwise match: " + ",".join(problems),
                )
            )
    if not names.listKind:
        errs.append(required(f"{path}.listKind"))
    else:
        problems = dns1035_problems(names.listKind.lower())
        if problems:
            errs.append(
                invalid(
                    f"{path}.listKind",
                    names.listKind,
                    "may have mixed case, but should otherwise match: " + ",".join(problems),
                )
            )
        if names.kind and names.listKind == names.kind:
            errs.append(
                invalid(f"{path}.listKind", names.listKind, "kind and listKind may not be the same")
            )
    for i, short in enumerate(names.shortNames):
        errs.extend(_dns1035(f"{path}.shortNames[{i}]", short))
    for i, cat in enumerate(names.categories):
        errs.extend(_dns1035(f"{path}.categories[{i}]", cat))
    return errs


def _scale_problems(
    path: str, scale: apiextensions_pb2.CustomResourceSubresourceScale
) -> list[FieldError]:
    errs: list[FieldError] = []
    for field, value, roots in (
        ("specReplicasPath", scale.specReplicasPath, (".spec",)),
        ("statusReplicasPath", scale.statusReplicasPath, (".status",)),
    ):
        if not value:
            errs.append(required(f"{path}.{field}"))
            continue
        problem = simple_json_path_problem(value)
        if problem:
            errs.append(invalid(f"{path}.{field}", value, problem))
        elif not any(value.startswith(r + ".") for r in roots):
            errs.append(
                invalid(f"{path}.{field}", value, f"should be a json path under {roots[0]}")
            )
    if scale.HasField("labelSelectorPath"):
        value = scale.labelSelectorPath
        problem = simple_json_path_problem(value)
        if problem:
            errs.append(invalid(f"{path}.labelSelectorPath", value, problem))
        elif not (value.startswith(".spec.") or value.startswith(".status.")):
            errs.append(
                invalid(
                    f"{path}.labelSelectorPath",
                    value,
                    "should be a json path under either .spec or .status",
                )
            )
    return errs


def _column_problems(
    path: str, col: apiextensions_pb2.CustomResourceColumnDefinition
) -> list[FieldError]:
    errs: list[FieldError] = []
    if not col.name:
        errs.append(required(f"{path}.name"))
    if not col.type:
        errs.append(required(f"{path}.type", "must be one of " + ", ".join(COLUMN_TYPES)))
    elif col.type not in COLUMN_TYPES:
        errs.append(unsupported(f"{path}.type", col.type, COLUMN_TYPES))
    if col.format and col.format not in COLUMN_FORMATS:
        errs.append(unsupported(f"{path}.format", col.format, COLUMN_FORMATS))
    if col.priority < 0:
        errs.append(invalid(f"{path}.priority", col.priority, "must be greater than or equal to 0"))
    if not col.jsonPath:
        errs.append(required(f"{path}.jsonPath"))
    else:
        problem = simple_json_path_problem(col.jsonPath)
        if problem:
            errs.append(invalid(f"{path}.jsonPath", col.jsonPath, problem))
    return errs


def _schema_problems(path: str, schema: dict[str, Any], status: bool) -> list[FieldError]:
    """The structural schema checks (apiserver/crd/schema.py) and the compilation of its
    x-kubernetes-validations (apiserver/crd/cel.py)."""
    errs = crdschema.schema_problems(schema, path, status_subresource=status)
    _, cel_errs = cel.compile_rules(schema, path)
    return errs + cel_errs


def validate_crd(crd: CRD) -> list[FieldError]:
    """ValidateCustomResourceDefinition (the metadata is checked by the caller)."""
    errs: list[FieldError] = []
    spec = crd.spec
    names = spec.names
    named = crd.metadata.name and names.plural and spec.group
    if named and crd.metadata.name != f"{names.plural}.{spec.group}":
        errs.append(
            invalid("metadata.name", crd.metadata.name, 'must be spec.names.plural+"."+spec.group')
        )
    if not spec.group:
        errs.append(required("spec.group"))
    else:
        errs.extend(dns1123_subdomain("spec.group", spec.group))
        if "." not in spec.group:
            errs.append(
                invalid("spec.group", spec.group, "should be a domain with at least one dot")
            )
    if not spec.scope:
        errs.append(required("spec.scope"))
    elif spec.scope not in SCOPES:
        errs.append(unsupported("spec.scope", spec.scope, SCOPES))
    errs.extend(_names_problems("spec.names", names))
    if not spec.versions:
        errs.append(
            required("spec.versions", "must have exactly one version marked as storage version")
        )
    seen: set[str] = set()
    storage = 0
    for i, v in enumerate(spec.versions):
        vpath = f"spec.versions[{i}]"
        if v.storage:
            storage += 1
        if not v.name:
            errs.append(required(f"{vpath}.name"))
        else:
            errs.extend(_dns1035(f"{vpath}.name", v.name))
            if v.name in seen:
                errs.append(duplicate(f"{vpath}.name", v.name))
            seen.add(v.name)
        if v.HasField("deprecationWarning"):
            if not v.deprecated:
                errs.append(
                    invalid(
                        f"{vpath}.deprecationWarning",
                        v.deprecationWarning,
                        "can only be set for deprecated versions",
                    )
                )
            elif len(v.deprecationWarning) > 256:
                errs.append(
                    invalid(
                        f"{vpath}.deprecationWarning",
                        v.deprecationWarning,
                        "must be <= 256 characters long",
                    )
                )
        if not v.schema.HasField("openAPIV3Schema"):
            errs.append(required(f"{vpath}.schema.openAPIV3Schema", "schemas are required"))
        else:
            status = v.subresources.HasField("status")
            errs.extend(_schema_problems(f"{vpath}.schema.openAPIV3Schema", schema_dict(v), status))
        if v.subresources.HasField("scale"):
            errs.extend(_scale_problems(f"{vpath}.subresources.scale", v.subresources.scale))
        columns: set[str] = set()
        for j, col in enumerate(v.additionalPrinterColumns):
            cpath = f"{vpath}.additionalPrinterColumns[{j}]"
            errs.extend(_column_problems(cpath, col))
            if col.name in columns:
                errs.append(duplicate(f"{cpath}.name", col.name))
            columns.add(col.name)
        if len(v.selectableFields) > MAX_SELECTABLE_FIELDS:
            errs.append(
                FieldError(
                    f"{vpath}.selectableFields",
                    f"Too many: {len(v.selectableFields)}: must have at most "
                    f"{MAX_SELECTABLE_FIELDS} items",
                )
            )
        fields: set[str] = set()
        for j, sf in enumerate(v.selectableFields):
            fpath = f"{vpath}.selectableFields[{j}].jsonPath"
            if not sf.jsonPath:
                errs.append(required(fpath))
                continue
            problem = simple_json_path_problem(sf.jsonPath)
            if problem:
                errs.append(invalid(fpath, sf.jsonPath, problem))
            elif sf.jsonPath.startswith(".metadata"):
                errs.append(forbidden(fpath, "must not select metadata fields"))
            if sf.jsonPath in fields:
                errs.append(duplicate(fpath, sf.jsonPath))
            fields.add(sf.jsonPath)
    if spec.versions and storage != 1:
        errs.append(
            invalid(
                "spec.versions",
                f"{storage} storage versions",
                "must have exactly one version marked as storage version",
            )
        )
    conv = spec.conversion
    if conv.strategy not in CONVERSION_STRATEGIES:
        errs.append(unsupported("spec.conversion.strategy", conv.strategy, CONVERSION_STRATEGIES))
    elif conv.strategy == "Webhook":
        cc = conv.webhook.clientConfig
        if not conv.webhook.HasField("clientConfig"):
            errs.append(
                required(
                    "spec.conversion.webhook.clientConfig",
                    "required when strategy is set to Webhook",
                )
            )
        elif cc.HasField("url") == cc.HasField("service"):
            errs.append(
                required(
                    "spec.conversion.webhook.clientConfig",
                    "exactly one of url or service is required",
                )
            )
        if not conv.webhook.conversionReviewVersions:
            errs.append(
                required(
                    "spec.conversion.webhook.conversionReviewVersions",
                    "must include at least one of v1, v1beta1",
                )
            )
    elif conv.HasField("webhook"):
        errs.append(
            forbidden(
                "spec.conversion.webhook", "should not be set when strategy is not set to Webhook"
            )
        )
    if spec.preserveUnknownFields:
        errs.append(
            invalid(
                "spec.preserveUnknownFields",
                True,
                "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in "
                "spec.versions[*].schema instead",
            )
        )
    return errs


def validate_status(crd: CRD) -> list[FieldError]:
    """ValidateCustomResourceDefinitionStatus and the stored versions' rules."""
    errs: list[FieldError] = []
    status = crd.status
    if status.acceptedNames.plural or status.acceptedNames.kind:
        errs.extend(_names_problems("status.acceptedNames", status.acceptedNames))
    versions = {v.name for v in crd.spec.versions}
    for i, stored in enumerate(status.storedVersions):
        if stored not in versions:
            errs.append(
                invalid(f"status.storedVersions[{i}]", stored, "must appear in spec.versions")
            )
    storage = storage_version(crd)
    if status.storedVersions and storage and storage not in status.storedVersions:
        errs.append(
            invalid(
                "status.storedVersions",
                "[" + " ".join(status.storedVersions) + "]",
                f"must have the storage version {storage}",
            )
        )
    return errs


class CustomResourceDefinitionStrategy(Strategy[CRD]):
    reset_status_on_create = True

    def decode_defaults(self, obj: CRD) -> None:
        default_crd(obj)

    def default(self, obj: CRD, now: datetime) -> None:
        default_crd(obj)
        # kube's PrepareForCreate: the storage version is the first stored one.
        storage = storage_version(obj)
        if storage:
            obj.status.storedVersions.append(storage)

    def on_update(self, new: CRD, old: CRD) -> None:
        default_crd(new)
        new.status.CopyFrom(old.status)
        # kube's PrepareForUpdate: a new storage version joins storedVersions.
        storage = storage_version(new)
        if storage and storage not in new.status.storedVersions:
            new.status.storedVersions.append(storage)

    def check(self, obj: CRD) -> list[FieldError]:
        return validate_crd(obj) + validate_status(obj)

    def check_update(self, new: CRD, old: CRD) -> list[FieldError]:
        errs: list[FieldError] = []
        if new.spec.group != old.spec.group:
            errs.append(invalid("spec.group", new.spec.group, "field is immutable"))
        if is_established(old):
            if new.spec.scope != old.spec.scope:
                errs.append(invalid("spec.scope", new.spec.scope, "field is immutable"))
            if new.spec.names.kind != old.spec.names.kind:
                errs.append(invalid("spec.names.kind", new.spec.names.kind, "field is immutable"))
        return errs

    def check_status(self, new: CRD, old: CRD) -> list[FieldError]:
        return self.validate_object(new)
