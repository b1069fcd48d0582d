"""The OpenAPI documents the REST API serves: /openapi/v2 and /openapi/v3, from the proto API.

kubectl reads them for `explain`, to decide whether the server supports server-side field
validation (it looks for a `fieldValidation` parameter on the PATCH operation whose
x-kubernetes-group-version-kind is the object's), for client-side schema validation before
create/apply (the v2 document, in protobuf) and for strategic-merge patches in `apply` (the patch
strategy and merge keys on list fields). So the documents use Kubernetes' definition names
(io.k8s.api.core.v1.Pod, io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta, ...), its paths,
operation ids, parameters and vendor extensions, and the schemas come from the proto
descriptors, field by field, with JSON names.

Descriptions come from the comments in proto/tinykube/v1/*.proto, which protobuf does not keep in
the generated modules. The files are read at construction from the source tree; an installed
package has no proto/ directory, and then every description the comments would give is empty
(the documents are otherwise the same).

Everything is built and encoded once, in the constructor; the methods hand out bytes. The object
is immutable afterwards and safe to share between requests.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from apiserver.rest import openapi_proto
from tinykube.fieldfacts import KUBE_TYPE_NAMES, QUANTITY_FIELDS, QUANTITY_MAPS, REQUIRED
from tinykube.kinds import APIEXTENSIONS_GROUP, KindInfo, api_package
from tinykube.v1 import meta_pb2
from tinykube.zerofields import REQUIRED_FIELDS

JSON = dict[str, Any]
# (message full name, JSON field name) -> (patchStrategy, patchMergeKey), or None.
PatchMeta = Callable[[str, str], "tuple[str, str] | None"]

DEFAULT_PROTO_DIR = Path(__file__).resolve().parents[2] / "proto" / "tinykube" / "v1"

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
TIME = f"{META}.Time"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
STATUS = f"{META}.Status"
DELETE_OPTIONS = f"{META}.DeleteOptions"
WATCH_EVENT = f"{META}.WatchEvent"
PATCH = f"{META}.Patch"
RAW_EXTENSION = "io.k8s.apimachinery.pkg.runtime.RawExtension"
SCALE = "io.k8s.api.autoscaling.v1.Scale"
EVICTION = "io.k8s.api.policy.v1.Eviction"
_API_VERSION_TEXT = (
    "APIVersion defines the versioned schema of this representation of an object. Servers "
    "should convert recognized schemas to the latest internal value, and may reject "
    "unrecognized values. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#resources"
)
_KIND_TEXT = (
    "Kind is a string value representing the REST resource this object represents. Servers "
    "may infer this from the endpoint the client submits requests to. Cannot be updated. In "
    "CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
    "api-conventions.md#types-kinds"
)
# The CRD's types live in k8s.io/apiextensions-apiserver, not k8s.io/api.
_APIEXTENSIONS_PACKAGE = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions"

# The proto messages that are apimachinery's meta/v1 types in Kubernetes; every other message
# belongs to the API package of the kind that declares it (ObjectReference and PodTemplateSpec
# are core/v1 types in Kubernetes although tinykube declares them elsewhere).
_META_MESSAGES = frozenset(
    {
        "ObjectMeta",
        "ListMeta",
        "OwnerReference",
        "LabelSelector",
        "LabelSelectorRequirement",
        "Preconditions",
        "StatusCause",
        "StatusDetails",
    }
)
_CORE_MESSAGES = frozenset({"ObjectReference", "PodTemplateSpec", "Binding"})

# Descriptions of the fields every object and list has, where the .proto says nothing.
_COMMON_FIELDS = {
    "apiVersion": "The versioned schema of this representation of the object: the API group "
    'and version, as "v1" or "apps/v1". Servers convert recognized schemas to the latest '
    "internal value and may reject unrecognized values.",
    "kind": "The REST resource this object represents, in CamelCase (Pod, Node, ...). Servers "
    "may infer it from the endpoint the client submits requests to. It cannot be updated.",
    "spec": "The desired state of the object, as written by its users.",
    "status": "The most recently observed state of the object, as written by the system. "
    "Read-only for clients.",
    "items": "The objects of the list.",
}
_OBJECT_METADATA = "The object's metadata: name, namespace, labels, annotations, ownership."
_LIST_METADATA = "The list's metadata: its resourceVersion and the continue token of a page."


@dataclass(frozen=True)
class _Param:
    """One query or path parameter, as both documents publish it."""

    name: str
    kind: str  # "string", "boolean", "integer"
    description: str
    location: str = "query"

    def v2(self) -> JSON:
        out: JSON = {"name": self.name, "in": self.location, "type": self.kind}
        out["description"] = self.description
        if self.location == "path":
            out["required"] = True
        out["uniqueItems"] = True
        return out

    def v3(self) -> JSON:
        out: JSON = {"name": self.name, "in": self.location, "description": self.description}
        if self.location == "path":
            out["required"] = True
        out["schema"] = {"type": self.kind, "uniqueItems": True}
        return out


_P = {
    p.name: p
    for p in (
        _Param("name", "string", "The name of the object.", "path"),
        _Param("namespace", "string", "The namespace the objects live in.", "path"),
        _Param("pretty", "string", "If 'true', the output is indented for people to read."),
        _Param(
            "allowWatchBookmarks",
            "boolean",
            "Watch only: ask for BOOKMARK events, which carry only a resourceVersion to "
            "resume from. The server may send none.",
        ),
        _Param(
            "continue",
            "string",
            "The continue token of the previous page of a paginated list, to get the next.",
        ),
        _Param(
            "fieldSelector",
            "string",
            "Only objects whose fields match, as metadata.name=web,spec.nodeName!=n1.",
        ),
        _Param("labelSelector", "string", "Only objects whose labels match, as app=web,tier!=db."),
        _Param(
            "limit",
            "integer",
            "The most objects to return; a partial list carries a continue token for the rest.",
        ),
        _Param(
            "resourceVersion",
            "string",
            "Serve the request at or after this resourceVersion (see resourceVersionMatch); a "
            "watch streams the changes after it.",
        ),
        _Param(
            "resourceVersionMatch",
            "string",
            "How resourceVersion applies to a list: NotOlderThan or Exact.",
        ),
        _Param(
            "sendInitialEvents",
            "boolean",
            "Watch only: begin with a synthetic ADDED event for every existing object.",
        ),
        _Param("timeoutSeconds", "integer", "End the list or watch call after this many seconds."),
        _Param(
            "watch",
            "boolean",
            "Watch for changes to the described objects instead of listing them.",
        ),
        _Param(
            "dryRun",
            "string",
            "When present, the request is checked and answered but not persisted. The only "
            "valid value is All.",
        ),
        _Param(
            "fieldManager",
            "string",
            "The name of the actor making the change, for field ownership.",
        ),
        _Param(
            "fieldValidation",
            "string",
            "What to do with unknown or duplicate fields in the body: Ignore drops them, Warn "
            "drops them and returns a warning for each, Strict fails the request.",
        ),
        _Param(
            "force",
            "boolean",
            "Apply patches only: take ownership of fields other managers own.",
        ),
        _Param(
            "gracePeriodSeconds",
            "integer",
            "Seconds before the object is deleted; 0 deletes at once. Defaults per kind.",
        ),
        _Param(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            "boolean",
            "Delete an object that cannot be read from storage. Unsafe.",
        ),
        _Param(
            "orphanDependents",
            "boolean",
            "Deprecated: use propagationPolicy. Whether dependents are orphaned.",
        ),
        _Param(
            "propagationPolicy",
            "string",
            "What becomes of dependents: Orphan, Background or Foreground.",
        ),
        _Param("container", "string", "The container to read logs of."),
        _Param("follow", "boolean", "Stream the log as it grows."),
        _Param(
            "insecureSkipTLSVerifyBackend",
            "boolean",
            "Do not verify the kubelet's serving certificate when reading logs.",
        ),
        _Param("limitBytes", "integer", "The most bytes of log to return."),
        _Param("previous", "boolean", "The log of the container's previous run."),
        _Param("sinceSeconds", "integer", "Only log lines from the last this many seconds."),
        _Param("tailLines", "integer", "Only this many lines from the end of the log."),
        _Param("timestamps", "boolean", "Prefix every log line with its RFC 3339 timestamp."),
    )
}
_LIST_PARAMS = (
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
)
_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")
_PATCH_PARAMS = (*_WRITE_PARAMS, "force")
_DELETE_PARAMS = (
    "dryRun",
    "gracePeriodSeconds",
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "orphanDependents",
    "propagationPolicy",
)
_DELETECOLLECTION_PARAMS = tuple(
    sorted({*_DELETE_PARAMS, *(p for p in _LIST_PARAMS if p not in ("watch",))})
)
_LOG_PARAMS = (
    "container",
    "follow",
    "insecureSkipTLSVerifyBackend",
    "limitBytes",
    "previous",
    "sinceSeconds",
    "tailLines",
    "timestamps",
)
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_PRODUCES = ("application/json", "application/yaml")
_WATCH_PRODUCES = ("application/json", "application/json;stream=watch")


@dataclass(frozen=True)
class _Op:
    """One operation of one path, in a form both documents are rendered from."""

    method: str  # "get", "put", ...
    tag: str  # "core_v1": the group-version of the path, as kube-apiserver tags operations
    action: str  # x-kubernetes-action
    operation_id: str
    description: str
    gvk: tuple[str, str, str]  # (group, version, kind) of the operation's object
    params: tuple[str, ...]
    responses: tuple[tuple[str, str, str | None], ...]  # (code, description, definition)
    body: str | None = None  # the request body's definition
    consumes: tuple[str, ...] = ("*/*",)
    produces: tuple[str, ...] = _PRODUCES
    body_required: bool = True


@dataclass(frozen=True)
class _Path:
    path: str
    params: tuple[str, ...]
    ops: tuple[_Op, ...]
    group_version: str  # "api/v1", "apis/apps/v1": the v3 document it belongs to


class OpenAPI:
    """The v2 and v3 documents for `kinds`, encoded once.

    `patch_meta(message full name, json field name)` gives a list field's patch strategy and
    merge key; they become x-kubernetes-patch-strategy, x-kubernetes-patch-merge-key and the
    matching x-kubernetes-list-type / x-kubernetes-list-map-keys. `proto_dir` is where the
    .proto files with the descriptions are (None: no descriptions). Raises ValueError naming
    the message and field when a field has a type the documents cannot express.
    """

    def __init__(
        self,
        kinds: Sequence[KindInfo],
        patch_meta: PatchMeta | None = None,
        *,
        proto_dir: Path | None = DEFAULT_PROTO_DIR,
        version: str = "v0.1.0",
    ) -> None:
        self._kinds = tuple(kinds)
        self._patch_meta = patch_meta
        self._version = version
        comments = _ProtoComments.read(proto_dir)
        self._names = _name_messages(self._kinds)
        builder = _SchemaBuilder(self._names, comments, patch_meta)
        for info in self._kinds:
            builder.add_kind(info)
        # Status and DeleteOptions (written by hand below) refer to these.
        for name in ("Preconditions", "StatusCause", "StatusDetails"):
            builder.add_meta(_desc(getattr(meta_pb2, name)))
        schemas = {**builder.schemas, **_fixed_schemas()}
        self._definitions: dict[str, JSON] = dict(sorted(schemas.items()))
        self._paths = _paths(self._kinds, self._names, builder.binding_name)

        v2 = self._v2()
        self._v2_doc = v2
        self._v2_json = _encode(v2)
        self._v2_pb = openapi_proto.encode_document(v2)
        self._v3_docs: dict[str, bytes] = {}
        self._v3_hashes: dict[str, str] = {}
        for gv in sorted({p.group_version for p in self._paths}):
            data = _encode(self._v3(gv))
            self._v3_docs[gv] = data
            self._v3_hashes[gv] = hashlib.sha512(data).hexdigest().upper()
        self._v3_index = _encode(
            {
                "paths": {
                    gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={self._v3_hashes[gv]}"}
                    for gv in self._v3_docs
                }
            }
        )

        self._builtin_v3 = dict(self._v3_docs)
        self._builtin_hashes = dict(self._v3_hashes)

    def set_custom_kinds(self, kinds: Sequence[tuple[KindInfo, JSON]]) -> None:
        """Publish v3 documents for custom kinds (CRDs), each with its openAPIV3Schema: one
        document per group-version, the kind's definition named as kube names it
        (`com.example.stable.v1.CronTab`) with apiVersion, kind and metadata added and its
        x-kubernetes-group-version-kind, so `kubectl explain` finds it."""
        docs: dict[str, JSON] = {}
        meta = f"{META}.ObjectMeta"
        for info, schema in kinds:
            gv = f"apis/{info.group}/{info.version}"
            doc = docs.setdefault(
                gv,
                {
                    "openapi": "3.0.0",
                    "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
                    "paths": {},
                    "components": {"schemas": {}},
                },
            )
            definition: JSON = json.loads(json.dumps(schema or {"type": "object"}))
            definition.setdefault("type", "object")
            props = definition.setdefault("properties", {})
            props["apiVersion"] = {"type": "string", "description": _API_VERSION_TEXT}
            props["kind"] = {"type": "string", "description": _KIND_TEXT}
            props["metadata"] = {
                "allOf": [{"$ref": f"#/components/schemas/{meta}"}],
                "description": "Standard object's metadata. More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/"
                "api-conventions.md#metadata",
            }
            definition["x-kubernetes-group-version-kind"] = [
                {"group": info.group, "kind": info.kind, "version": info.version}
            ]
            name = ".".join([*reversed(info.group.split(".")), info.version, info.kind])
            schemas = doc["components"]["schemas"]
            schemas[name] = definition
            doc["paths"].update(_custom_paths(info, name))
            for ref in sorted(_reachable(self._definitions, [meta])):
                schemas[ref] = _V3_SCHEMAS.get(ref) or _to_v3(self._definitions[ref])
        self._v3_docs = dict(self._builtin_v3)
        self._v3_hashes = dict(self._builtin_hashes)
        for gv, doc in docs.items():
            if gv in self._v3_docs:
                continue
            data = _encode(doc)
            self._v3_docs[gv] = data
            self._v3_hashes[gv] = hashlib.sha512(data).hexdigest().upper()
        self._v3_index = _encode(
            {
                "paths": {
                    gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={self._v3_hashes[gv]}"}
                    for gv in self._v3_docs
                }
            }
        )

    # -- the served bytes ----------------------------------------------------------------------

    def v2_json(self) -> bytes:
        """/openapi/v2 as application/json."""
        return self._v2_json

    def v2_protobuf(self) -> bytes:
        """/openapi/v2 as application/com.github.proto-openapi.spec.v2@v1.0+protobuf.

        client-go's discovery asks only for this encoding and parses the body as gnostic's
        openapi_v2.Document, so kubectl's schema validation (create/apply/replace with the
        default --validate=strict) and the v2 fallbacks of explain and apply need it.
        """
        return self._v2_pb

    def v3_index(self) -> bytes:
        """/openapi/v3: each group-version's document path and the URL that names its hash."""
        return self._v3_index

    def v3_document(self, path: str) -> bytes | None:
        """/openapi/v3/<path> ("api/v1", "apis/apps/v1"); None when there is no such document."""
        return self._v3_docs.get(path.strip("/"))

    def v3_hash(self, path: str) -> str:
        """The hash of /openapi/v3/<path> (its ETag); raises KeyError naming an unknown path."""
        try:
            return self._v3_hashes[path.strip("/")]
        except KeyError:
            raise KeyError(f"no OpenAPI v3 document for {path!r}") from None

    def v3_paths(self) -> tuple[str, ...]:
        """The group-versions with a v3 document, as the index names them."""
        return tuple(self._v3_docs)

    def definitions(self) -> dict[str, JSON]:
        """A copy of every schema, by definition name (for tests and tools)."""
        return json.loads(json.dumps(self._definitions))  # type: ignore[no-any-return]

    # -- rendering -----------------------------------------------------------------------------

    def _v2(self) -> JSON:
        paths: JSON = {}
        for p in self._paths:
            item: JSON = {op.method: _v2_op(op) for op in p.ops}
            item["parameters"] = [_P[n].v2() for n in p.params]
            paths[p.path] = item
        return {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": self._version},
            "paths": paths,
            "definitions": {k: _to_v2(v) for k, v in self._definitions.items()},
            "securityDefinitions": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "type": "apiKey",
                    "name": "authorization",
                    "in": "header",
                }
            },
            "security": [{"BearerToken": []}],
        }

    def _v3(self, group_version: str) -> JSON:
        paths: JSON = {}
        for p in self._paths:
            if p.group_version != group_version:
                continue
            item: JSON = {op.method: _v3_op(op) for op in p.ops}
            item["parameters"] = [_P[n].v3() for n in p.params]
            paths[p.path] = item
        wanted = _reachable(
            self._definitions, (d for p in paths.values() for d in _refs(p, "#/components/"))
        )
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": self._version},
            "paths": paths,
            "components": {
                "schemas": {
                    k: _V3_SCHEMAS.get(k) or _to_v3(self._definitions[k]) for k in sorted(wanted)
                },
                "securitySchemes": {
                    "BearerToken": {
                        "type": "apiKey",
                        "description": "Bearer Token authentication",
                        "name": "authorization",
                        "in": "header",
                    }
                },
            },
            "security": [{"BearerToken": []}],
        }


def _custom_paths(info: KindInfo, definition: str) -> JSON:
    """A custom kind's REST paths with their operations' GVK (what `kubectl explain` maps a
    resource to its definition by): list and create on the collection, get, replace, patch
    and delete on an object."""
    gvk = {"group": info.group, "kind": info.kind, "version": info.version}
    ns = "namespaces/{namespace}/" if info.namespaced else ""
    base = f"/apis/{info.group}/{info.version}/{ns}{info.plural}"
    ref = {"$ref": f"#/components/schemas/{definition}"}

    def op(action: str, op_id: str) -> JSON:
        return {
            "operationId": f"{op_id}{info.kind}",
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
            },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        }

    return {
        base: {"get": op("list", "list"), "post": op("post", "create")},
        base + "/{name}": {
            "get": op("get", "read"),
            "put": op("put", "replace"),
            "patch": op("patch", "patch"),
            "delete": op("delete", "delete"),
        },
    }


def _desc(message: type[Message]) -> Descriptor:
    return cast(Descriptor, message.DESCRIPTOR)


# -- naming ------------------------------------------------------------------------------------


def _name_messages(kinds: Sequence[KindInfo]) -> dict[str, str]:
    """Map every proto message the kinds reach to its Kubernetes definition name."""
    file_group: dict[str, tuple[str, str]] = {}
    for info in kinds:
        file_group.setdefault(_desc(info.message).file.name, (info.group, info.version))
    names: dict[str, str] = {}

    def visit(desc: Descriptor, group: str, version: str) -> None:
        if desc.full_name in names or desc.GetOptions().map_entry:
            return
        short = KUBE_TYPE_NAMES.get(desc.name, desc.name)
        group, version = file_group.get(desc.file.name, (group, version))
        if desc.name in _META_MESSAGES:
            names[desc.full_name] = f"{META}.{short}"
        elif desc.name in _CORE_MESSAGES:
            names[desc.full_name] = f"io.k8s.api.core.v1.{short}"
        elif group == APIEXTENSIONS_GROUP:
            names[desc.full_name] = f"{_APIEXTENSIONS_PACKAGE}.{version}.{short}"
        else:
            names[desc.full_name] = f"io.k8s.api.{api_package(group)}.{version}.{short}"
        for field in desc.fields:
            sub = field.message_type
            if sub is None or sub.full_name.startswith("google.protobuf."):
                continue
            if sub.GetOptions().map_entry:
                sub = sub.fields_by_name["value"].message_type
                if sub is None:
                    continue
            visit(sub, group, version)

    for info in kinds:
        visit(_desc(info.message), info.group, info.version)
        visit(_desc(info.list_message), info.group, info.version)
    return names


def _camel(group: str) -> str:
    """The group as operation ids spell it: "" -> "Core", "coordination.k8s.io" -> ..."""
    if not group:
        return "Core"
    first = group.removesuffix(".k8s.io").split(".")[0]
    return "".join(part[:1].upper() + part[1:] for part in first.split("-"))


# -- proto comments ----------------------------------------------------------------------------

_MESSAGE_RE = re.compile(r"^\s*message\s+(\w+)\s*\{")
_BLOCK_RE = re.compile(r"^\s*(?:enum|oneof|service)\s+\w+\s*\{")
_FIELD_RE = re.compile(
    r"^\s*(?:repeated\s+|optional\s+)?(map\s*<[^>]*>|[\w.]+)\s+(\w+)\s*=\s*\d+[^;]*;\s*(//.*)?$"
)


@dataclass(frozen=True)
class _ProtoComments:
    """Leading (or trailing) comments of proto messages and fields, by full name."""

    messages: dict[str, str]
    fields: dict[tuple[str, str], str]  # (message full name, proto field name)
    files: dict[str, str]  # proto file name ("tinykube/v1/pod.proto") -> header comment

    @classmethod
    def read(cls, proto_dir: Path | None) -> _ProtoComments:
        out = cls({}, {}, {})
        if proto_dir is None or not proto_dir.is_dir():
            return out
        for path in sorted(proto_dir.glob("*.proto")):
            out._parse(f"tinykube/v1/{path.name}", path.read_text(encoding="utf-8"))
        return out

    def _parse(self, file_name: str, text: str) -> None:
        package = ""
        stack: list[str | None] = []  # message names; None for other blocks
        pending: list[str] = []
        header_done = False
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("//"):
                pending.append(line[2:].strip())
                continue
            if not line:
                if not header_done and pending and not package:
                    self.files[file_name] = " ".join(pending)
                    header_done = True
                pending = []
                continue
            if line.startswith("syntax") and not header_done and pending:
                self.files[file_name] = " ".join(pending)
                header_done = True
            if line.startswith("package "):
                package = line.removeprefix("package ").rstrip(";").strip()
            comment = " ".join(pending)
            pending = []
            if m := _MESSAGE_RE.match(line):
                stack.append(m.group(1))
                names = [n for n in stack if n is not None]
                if comment:
                    self.messages[".".join([package, *names])] = comment
            elif _BLOCK_RE.match(line):
                stack.append(None)
            elif (m := _FIELD_RE.match(line)) and stack and m.group(1) not in ("option",):
                owner = ".".join([package, *(n for n in stack if n is not None)])
                trailing = (m.group(3) or "").removeprefix("//").strip()
                if comment or trailing:
                    self.fields[(owner, m.group(2))] = comment or trailing
            if line.endswith("}") and "{" not in line and stack:
                stack.pop()


# -- schemas -----------------------------------------------------------------------------------


def _ref(name: str) -> JSON:
    """A reference in neutral form; _to_v2/_to_v3 turn it into each document's $ref."""
    return {"$ref": name}


class _SchemaBuilder:
    """Turns proto descriptors into definitions in a neutral form (refs by bare name)."""

    def __init__(
        self,
        names: dict[str, str],
        comments: _ProtoComments,
        patch_meta: PatchMeta | None,
    ) -> None:
        self._names = names
        self._comments = comments
        self._patch_meta = patch_meta
        self.schemas: dict[str, JSON] = {}
        self.binding_name: str | None = None

    def add_kind(self, info: KindInfo) -> None:
        gvk = {"group": info.group, "kind": info.kind, "version": info.version}
        self._message(_desc(info.message), gvk=gvk, top=True)
        list_gvk = {**gvk, "kind": f"{info.kind}List"}
        self._message(_desc(info.list_message), gvk=list_gvk, top=True, list_of=info.kind)
        if info.kind == "Pod":
            binding = _desc(info.message).file.message_types_by_name.get("Binding")
            if binding is not None:
                self._names.setdefault(binding.full_name, "io.k8s.api.core.v1.Binding")
                self.binding_name = self._names[binding.full_name]
                self._message(
                    binding, gvk={"group": "", "kind": "Binding", "version": "v1"}, top=True
                )

    def add_meta(self, desc: Descriptor) -> None:
        self._names.setdefault(desc.full_name, f"{META}.{desc.name}")
        self._message(desc)

    def _message(
        self,
        desc: Descriptor,
        *,
        gvk: dict[str, str] | None = None,
        top: bool = False,
        list_of: str | None = None,
    ) -> str:
        name = self._names[desc.full_name]
        if name in self.schemas:
            return name
        schema: JSON = {"type": "object"}
        self.schemas[name] = schema  # before the fields: messages may be recursive
        description = self._comments.messages.get(desc.full_name, "")
        if not description and top and list_of is None:
            description = self._comments.files.get(desc.file.name, "")
        if not description and list_of is not None:
            description = f"A list of {list_of} objects."
        if description:
            schema["description"] = description
        props: JSON = {}
        if top:
            for common in ("apiVersion", "kind"):
                if common not in {f.json_name for f in desc.fields}:
                    props[common] = {"type": "string", "description": _COMMON_FIELDS[common]}
        for field in desc.fields:
            props[field.json_name] = self._field(desc, field, top=top, is_list=list_of is not None)
        schema["properties"] = dict(sorted(props.items()))
        # Kubernetes' own required lists (generated, tinykube/zerofields.py), and this file's
        # table for the types that one does not walk (lists, Binding).
        wanted = (
            *REQUIRED_FIELDS.get(desc.full_name, ()),
            *REQUIRED.get(name, REQUIRED.get(name.rsplit(".", 1)[1], ())),
        )
        required = [r for r in dict.fromkeys(wanted) if r in props]
        if required:
            schema["required"] = required
        if gvk is not None:
            schema["x-kubernetes-group-version-kind"] = [gvk]
        return name

    def _field(
        self, owner: Descriptor, field: FieldDescriptor, *, top: bool, is_list: bool
    ) -> JSON:
        json_name = field.json_name
        description = self._comments.fields.get((owner.full_name, field.name), "")
        if not description and top:
            if json_name == "metadata":
                description = _LIST_METADATA if is_list else _OBJECT_METADATA
            else:
                description = _COMMON_FIELDS.get(json_name, "")
        where = f"{owner.full_name}.{field.name}"
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value = entry.fields_by_name["value"]
            if json_name in QUANTITY_MAPS and value.type == FieldDescriptor.TYPE_STRING:
                values: JSON = _ref(QUANTITY)
            else:
                values = self._scalar_or_ref(value, where)
            out: JSON = {"type": "object", "additionalProperties": values}
        elif _is_repeated(field):
            out = {"type": "array", "items": self._scalar_or_ref(field, where)}
            meta = self._patch_meta(owner.full_name, json_name) if self._patch_meta else None
            if meta is not None:
                strategy, key = meta
                if strategy:
                    out["x-kubernetes-patch-strategy"] = strategy
                if key:
                    out["x-kubernetes-patch-merge-key"] = key
                    out["x-kubernetes-list-type"] = "map"
                    out["x-kubernetes-list-map-keys"] = [key]
                elif "merge" in strategy.split(","):
                    out["x-kubernetes-list-type"] = "set"
        elif (owner.full_name, field.name) in QUANTITY_FIELDS:
            out = _ref(QUANTITY)
        else:
            out = self._scalar_or_ref(field, where)
        if description:
            out = {**out, "description": description}
        return out

    def _scalar_or_ref(self, field: FieldDescriptor, where: str) -> JSON:
        t = field.type
        sub = field.message_type
        if sub is not None:
            well_known = {
                "google.protobuf.Timestamp": TIME,
                "google.protobuf.Value": INT_OR_STRING,
            }
            if sub.full_name in well_known:
                return _ref(well_known[sub.full_name])
            if sub.full_name == "google.protobuf.Duration":
                return {"type": "string"}
            if sub.full_name == "google.protobuf.Struct":
                return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            if sub.full_name not in self._names:
                raise ValueError(f"{where}: message {sub.full_name} has no OpenAPI name")
            return _ref(self._message(sub))
        if field.enum_type is not None:
            return {"type": "string", "enum": [v.name for v in field.enum_type.values]}
        scalar = _SCALARS.get(t)
        if scalar is None:
            raise ValueError(f"{where}: protobuf field type {t} has no OpenAPI type")
        owner = field.containing_type
        if owner is not None and (owner.full_name, field.name) in KUBERNETES_INT64:
            return {"type": "integer", "format": "int64"}
        return dict(scalar)


# Fields Kubernetes declares int64 that tinykube's protos narrow to int32, only so that proto3
# JSON (grpcurl) prints them as numbers (see proto/tinykube/v1/meta.proto): the published
# schema stays Kubernetes'.
KUBERNETES_INT64: frozenset[tuple[str, str]] = frozenset(
    {
        ("tinykube.v1.ObjectMeta", "generation"),
        ("tinykube.v1.ObjectMeta", "deletionGracePeriodSeconds"),
        ("tinykube.v1.ListMeta", "remainingItemCount"),
        ("tinykube.v1.Toleration", "tolerationSeconds"),
        ("tinykube.v1.PodSpec", "terminationGracePeriodSeconds"),
        ("tinykube.v1.Probe", "terminationGracePeriodSeconds"),
        ("tinykube.v1.ReplicaSetStatus", "observedGeneration"),
        ("tinykube.v1.DeploymentStatus", "observedGeneration"),
        ("tinykube.v1.DaemonSetStatus", "observedGeneration"),
        ("tinykube.v1.ControllerRevision", "revision"),
    }
)

_SCALARS: dict[int, JSON] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_INT64: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_SINT64: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_SFIXED64: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_UINT64: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_FIXED64: {"type": "integer", "format": "int64"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number", "format": "double"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number", "format": "float"},
}


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _fixed_schemas() -> dict[str, JSON]:
    """The apimachinery types the proto API has no message for, and the subresources' kinds."""
    meta_gvk = [{"group": "", "kind": k, "version": "v1"} for k in ("DeleteOptions",)]
    common = {
        "apiVersion": {"type": "string", "description": _COMMON_FIELDS["apiVersion"]},
        "kind": {"type": "string", "description": _COMMON_FIELDS["kind"]},
    }
    object_meta = {**_ref(f"{META}.ObjectMeta"), "description": _OBJECT_METADATA}
    out: dict[str, JSON] = {
        TIME: {
            "type": "string",
            "format": "date-time",
            "description": "A point in time, as an RFC 3339 string with seconds: "
            "2026-12-01T10:00:00Z.",
        },
        QUANTITY: {
            "type": "string",
            "description": "An amount of a resource, as a decimal or binary-suffixed string: "
            '"500m" cpu, "128Mi" memory, "2" pods.',
        },
        INT_OR_STRING: {
            "type": "string",
            "format": "int-or-string",
            "description": "A number or a string: a port number (8080) or a port name (http).",
        },
        PATCH: {
            "type": "object",
            "description": "The body of a PATCH: a JSON patch, a merge patch, a strategic "
            "merge patch or an apply configuration, as the Content-Type says.",
        },
        RAW_EXTENSION: {
            "type": "object",
            "description": "An embedded object, in its own JSON.",
        },
        STATUS: {
            "type": "object",
            "description": "The outcome of a call that returns no object, and every error.",
            "properties": {
                **common,
                "code": {"type": "integer", "format": "int32", "description": "HTTP code."},
                "details": {**_ref(f"{META}.StatusDetails"), "description": "More detail."},
                "message": {"type": "string", "description": "What happened, for people."},
                "metadata": {**_ref(f"{META}.ListMeta"), "description": _LIST_METADATA},
                "reason": {"type": "string", "description": "Why, for programs."},
                "status": {"type": "string", "description": "Success or Failure."},
            },
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Status", "version": "v1"}],
        },
        DELETE_OPTIONS: {
            "type": "object",
            "description": "Options of a DELETE, in its body.",
            "properties": {
                **common,
                "dryRun": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "All: check the delete without persisting it.",
                },
                "gracePeriodSeconds": {
                    "type": "integer",
                    "format": "int64",
                    "description": "Seconds before the object is deleted; 0 deletes at once.",
                },
                "orphanDependents": {"type": "boolean", "description": "Deprecated."},
                "preconditions": {
                    **_ref(f"{META}.Preconditions"),
                    "description": "Delete only if the object still has this uid and "
                    "resourceVersion.",
                },
                "propagationPolicy": {
                    "type": "string",
                    "description": "Orphan, Background or Foreground.",
                },
            },
            "x-kubernetes-group-version-kind": meta_gvk,
        },
        WATCH_EVENT: {
            "type": "object",
            "description": "One change in a watch stream.",
            "properties": {
                "object": {**_ref(RAW_EXTENSION), "description": "The object, or a Status."},
                "type": {"type": "string", "description": "ADDED, MODIFIED, DELETED, BOOKMARK."},
            },
            "required": ["type", "object"],
            "x-kubernetes-group-version-kind": [
                {"group": "", "kind": "WatchEvent", "version": "v1"}
            ],
        },
        SCALE: {
            "type": "object",
            "description": "The scale subresource: the desired and observed replica counts.",
            "properties": {
                **common,
                "metadata": object_meta,
                "spec": {**_ref(f"{SCALE}Spec"), "description": "The desired replicas."},
                "status": {**_ref(f"{SCALE}Status"), "description": "The observed replicas."},
            },
            "x-kubernetes-group-version-kind": [
                {"group": "autoscaling", "kind": "Scale", "version": "v1"}
            ],
        },
        f"{SCALE}Spec": {
            "type": "object",
            "description": "The desired replica count.",
            "properties": {"replicas": {"type": "integer", "format": "int32"}},
        },
        f"{SCALE}Status": {
            "type": "object",
            "description": "The observed replica count and the selector counting them.",
            "properties": {
                "replicas": {"type": "integer", "format": "int32"},
                "selector": {"type": "string"},
            },
            "required": ["replicas"],
        },
        EVICTION: {
            "type": "object",
            "description": "A request to evict a pod, honouring its disruption budgets.",
            "properties": {
                **common,
                "deleteOptions": {**_ref(DELETE_OPTIONS), "description": "How to delete it."},
                "metadata": {**_ref(f"{META}.ObjectMeta"), "description": "The pod's name."},
            },
            "x-kubernetes-group-version-kind": [
                {"group": "policy", "kind": "Eviction", "version": "v1"}
            ],
        },
    }
    for schema in out.values():
        if "properties" in schema:
            schema["properties"] = dict(sorted(schema["properties"].items()))
    return out


# Where OpenAPI 3 can say more than a type: a quantity is a string or a number, an IntOrString an
# integer or a string. With no "type", kubectl explain names them (<map[string]Quantity>) as it
# does against Kubernetes instead of printing "string".
_V3_SCHEMAS: dict[str, JSON] = {
    QUANTITY: {
        "description": _fixed_schemas()[QUANTITY]["description"],
        "oneOf": [{"type": "string"}, {"type": "number"}],
    },
    INT_OR_STRING: {
        "description": _fixed_schemas()[INT_OR_STRING]["description"],
        "format": "int-or-string",
        "oneOf": [{"type": "integer"}, {"type": "string"}],
    },
}


def _refs(node: Any, prefix: str = "") -> Iterable[str]:
    """Every definition name a neutral or rendered schema refers to."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v.rsplit("/", 1)[-1] if prefix and v.startswith("#/") else v
            else:
                yield from _refs(v, prefix)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v, prefix)


def _reachable(definitions: dict[str, JSON], roots: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in definitions:
            raise ValueError(f"reference to undefined OpenAPI definition {name}")
        seen.add(name)
        todo.extend(_refs(definitions[name]))
    return seen


def _to_v2(schema: Any) -> Any:
    """Neutral refs -> "#/definitions/X" (a $ref may carry a description in v2)."""
    if isinstance(schema, dict):
        return {k: (f"#/definitions/{v}" if k == "$ref" else _to_v2(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_to_v2(v) for v in schema]
    return schema


def _to_v3(schema: Any) -> Any:
    """Neutral refs -> "#/components/schemas/X"; a ref with siblings goes into allOf.

    OpenAPI 3.0 ignores keywords beside a $ref, so kube-apiserver wraps a described reference as
    {"allOf": [{"$ref": ...}], "description": ...}; object-typed references also carry
    "default": {} as Kubernetes' do for non-pointer struct fields.
    """
    if isinstance(schema, dict):
        if "$ref" in schema:
            ref = {"$ref": f"#/components/schemas/{schema['$ref']}"}
            rest = {k: _to_v3(v) for k, v in schema.items() if k != "$ref"}
            if not rest:
                return ref
            return {"allOf": [ref], **rest}
        return {k: _to_v3(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_to_v3(v) for v in schema]
    return schema


# -- paths -------------------------------------------------------------------------------------


def _paths(kinds: Sequence[KindInfo], names: dict[str, str], binding: str | None) -> list[_Path]:
    out: list[_Path] = []
    for info in kinds:
        obj = names[_desc(info.message).full_name]
        lst = names[_desc(info.list_message).full_name]
        out.extend(_kind_paths(info, obj, lst, binding))
    return sorted(out, key=lambda p: p.path)


def _kind_paths(info: KindInfo, obj: str, lst: str, binding: str | None) -> list[_Path]:
    g, v, kind, plural = info.group, info.version, info.kind, info.plural
    gv = f"apis/{g}/{v}" if g else f"api/{v}"
    prefix = f"/{gv}"
    tag = f"{_camel(g)}{v.capitalize()}"  # "CoreV1"
    gvk = (g, v, kind)
    ns = "Namespaced" if info.namespaced else ""
    scope = "/namespaces/{namespace}" if info.namespaced else ""
    scope_params: tuple[str, ...] = ("namespace",) if info.namespaced else ()
    list_produces = (*_PRODUCES, "application/json;stream=watch")
    ok_obj = (("200", "OK", obj), ("401", "Unauthorized", None))
    created = (
        ("200", "OK", obj),
        ("201", "Created", obj),
        ("202", "Accepted", obj),
        ("401", "Unauthorized", None),
    )

    def op(method: str, action: str, verb: str, what: str, suffix: str = "", **kw: Any) -> _Op:
        return _Op(
            method=method,
            tag=f"{_camel(g).lower()}_{v}",
            action=action,
            operation_id=f"{verb}{tag}{suffix or ns + kind}",
            description=what,
            gvk=kw.pop("gvk", gvk),
            **kw,
        )

    collection = _Path(
        f"{prefix}{scope}/{plural}",
        (*scope_params, "pretty"),
        (
            op(
                "get",
                "list",
                "list",
                f"list or watch objects of kind {kind}",
                params=_LIST_PARAMS,
                responses=(("200", "OK", lst), ("401", "Unauthorized", None)),
                produces=list_produces,
            ),
            op(
                "post",
                "post",
                "create",
                f"create a {kind}",
                params=_WRITE_PARAMS,
                responses=created,
                body=obj,
            ),
            op(
                "delete",
                "deletecollection",
                "delete",
                f"delete collection of {kind}",
                suffix=f"Collection{ns}{kind}",
                params=_DELETECOLLECTION_PARAMS,
                responses=(("200", "OK", STATUS), ("401", "Unauthorized", None)),
                body=DELETE_OPTIONS,
                body_required=False,
            ),
        ),
        gv,
    )
    item = _Path(
        f"{prefix}{scope}/{plural}/{{name}}",
        ("name", *scope_params, "pretty"),
        (
            op("get", "get", "read", f"read the specified {kind}", params=(), responses=ok_obj),
            op(
                "put",
                "put",
                "replace",
                f"replace the specified {kind}",
                params=_WRITE_PARAMS,
                responses=(
                    ("200", "OK", obj),
                    ("201", "Created", obj),
                    ("401", "Unauthorized", None),
                ),
                body=obj,
            ),
            op(
                "patch",
                "patch",
                "patch",
                f"partially update the specified {kind}",
                params=_PATCH_PARAMS,
                responses=(
                    ("200", "OK", obj),
                    ("201", "Created", obj),
                    ("401", "Unauthorized", None),
                ),
                body=PATCH,
                consumes=_PATCH_TYPES,
            ),
            op(
                "delete",
                "delete",
                "delete",
                f"delete a {kind}",
                params=_DELETE_PARAMS,
                responses=(
                    ("200", "OK", obj),
                    ("202", "Accepted", obj),
                    ("401", "Unauthorized", None),
                ),
                body=DELETE_OPTIONS,
                body_required=False,
            ),
        ),
        gv,
    )
    paths = [collection, item]
    watch_ops = (
        (
            f"{prefix}/watch{scope}/{plural}",
            (*scope_params, "pretty", *_LIST_PARAMS),
            "watchlist",
            f"{ns}{kind}List",
            f"watch individual changes to a list of {kind}. deprecated: use the 'watch' "
            "parameter with a list operation instead.",
        ),
        (
            f"{prefix}/watch{scope}/{plural}/{{name}}",
            ("name", *scope_params, "pretty", *_LIST_PARAMS),
            "watch",
            f"{ns}{kind}",
            f"watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter "
            "with a list operation instead, filtered to a single item with the 'fieldSelector' "
            "parameter.",
        ),
    )
    for path, params, action, suffix, what in watch_ops:
        paths.append(
            _Path(
                path,
                tuple(sorted(params, key=_param_order)),
                (
                    op(
                        "get",
                        action,
                        "watch",
                        what,
                        suffix=suffix,
                        params=(),
                        responses=(("200", "OK", WATCH_EVENT), ("401", "Unauthorized", None)),
                        produces=_WATCH_PRODUCES,
                    ),
                ),
                gv,
            )
        )
    if info.namespaced:
        paths.append(
            _Path(
                f"{prefix}/{plural}",
                tuple(sorted(("pretty", *_LIST_PARAMS), key=_param_order)),
                (
                    op(
                        "get",
                        "list",
                        "list",
                        f"list or watch objects of kind {kind}",
                        suffix=f"{kind}ForAllNamespaces",
                        params=(),
                        responses=(("200", "OK", lst), ("401", "Unauthorized", None)),
                        produces=list_produces,
                    ),
                ),
                gv,
            )
        )
        paths.append(
            _Path(
                f"{prefix}/watch/{plural}",
                tuple(sorted(("pretty", *_LIST_PARAMS), key=_param_order)),
                (
                    op(
                        "get",
                        "watchlist",
                        "watch",
                        f"watch individual changes to a list of {kind}. deprecated: use the "
                        "'watch' parameter with a list operation instead.",
                        suffix=f"{kind}ListForAllNamespaces",
                        params=(),
                        responses=(("200", "OK", WATCH_EVENT), ("401", "Unauthorized", None)),
                        produces=_WATCH_PRODUCES,
                    ),
                ),
                gv,
            )
        )
    item_params = ("name", *scope_params, "pretty")
    if info.has_status:
        paths.append(
            _subresource_path(
                f"{prefix}{scope}/{plural}/{{name}}/status",
                item_params,
                gv,
                op,
                obj,
                f"{ns}{kind}Status",
                f"status of the specified {kind}",
            )
        )
    if info.scale is not None:
        paths.append(
            _subresource_path(
                f"{prefix}{scope}/{plural}/{{name}}/scale",
                item_params,
                gv,
                op,
                SCALE,
                f"{ns}{kind}Scale",
                f"scale of the specified {kind}",
                gvk=("autoscaling", "v1", "Scale"),
            )
        )
    if kind == "Pod":
        paths.extend(_pod_subresources(prefix, item_params, gv, op, binding))
    return paths


def _subresource_path(
    path: str,
    params: tuple[str, ...],
    gv: str,
    op: Callable[..., _Op],
    obj: str,
    suffix: str,
    what: str,
    **kw: Any,
) -> _Path:
    ok = (("200", "OK", obj), ("401", "Unauthorized", None))
    ok_created = (("200", "OK", obj), ("201", "Created", obj), ("401", "Unauthorized", None))
    return _Path(
        path,
        params,
        (
            op("get", "get", "read", f"read {what}", suffix=suffix, params=(), responses=ok, **kw),
            op(
                "put",
                "put",
                "replace",
                f"replace {what}",
                suffix=suffix,
                params=_WRITE_PARAMS,
                responses=ok_created,
                body=obj,
                **kw,
            ),
            op(
                "patch",
                "patch",
                "patch",
                f"partially update {what}",
                suffix=suffix,
                params=_PATCH_PARAMS,
                responses=ok_created,
                body=PATCH,
                consumes=_PATCH_TYPES,
                **kw,
            ),
        ),
        gv,
    )


def _pod_subresources(
    prefix: str, item_params: tuple[str, ...], gv: str, op: Callable[..., _Op], binding: str | None
) -> list[_Path]:
    out = []
    for sub, body, gvk in (
        ("binding", binding, ("", "v1", "Binding")),
        ("eviction", EVICTION, ("policy", "v1", "Eviction")),
    ):
        if body is None:
            continue
        posted = (
            ("200", "OK", body),
            ("201", "Created", body),
            ("202", "Accepted", body),
            ("401", "Unauthorized", None),
        )
        out.append(
            _Path(
                f"{prefix}/namespaces/{{namespace}}/pods/{{name}}/{sub}",
                item_params,
                (
                    op(
                        "post",
                        "post",
                        "create",
                        f"create {sub} of a Pod",
                        suffix=f"NamespacedPod{sub.capitalize()}",
                        params=_WRITE_PARAMS,
                        responses=posted,
                        body=body,
                        gvk=gvk,
                    ),
                ),
                gv,
            )
        )
    out.append(
        _Path(
            f"{prefix}/namespaces/{{namespace}}/pods/{{name}}/log",
            item_params,
            (
                op(
                    "get",
                    "get",
                    "read",
                    "read log of the specified Pod",
                    suffix="NamespacedPodLog",
                    params=_LOG_PARAMS,
                    responses=(("200", "OK", "string"), ("401", "Unauthorized", None)),
                    produces=("text/plain", "application/json"),
                ),
            ),
            gv,
        )
    )
    return out


def _param_order(name: str) -> tuple[int, str]:
    """Path parameters first (name, namespace), then query parameters by name."""
    return ({"name": 0, "namespace": 1}.get(name, 2), name)


def _gvk_json(gvk: tuple[str, str, str]) -> dict[str, str]:
    return {"group": gvk[0], "kind": gvk[2], "version": gvk[1]}


def _response_schema(definition: str) -> JSON:
    return {"type": "string"} if definition == "string" else _ref(definition)


def _v2_op(op: _Op) -> JSON:
    params = [_P[n].v2() for n in op.params]
    if op.body is not None:
        body: JSON = {"name": "body", "in": "body", "schema": _to_v2(_ref(op.body))}
        if op.body_required:
            body["required"] = True
        params.insert(0, body)
    responses: JSON = {}
    for code, description, definition in op.responses:
        resp: JSON = {"description": description}
        if definition is not None:
            resp["schema"] = _to_v2(_response_schema(definition))
        responses[code] = resp
    out: JSON = {
        "description": op.description,
        "consumes": list(op.consumes),
        "produces": list(op.produces),
        "schemes": ["https"],
        "tags": [op.tag],
        "operationId": op.operation_id,
        "responses": responses,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": _gvk_json(op.gvk),
    }
    if params:
        out["parameters"] = params
    return out


def _v3_op(op: _Op) -> JSON:
    out: JSON = {
        "tags": [op.tag],
        "description": op.description,
        "operationId": op.operation_id,
    }
    if op.params:
        # Inline, never $ref: kubectl's field-validation check reads the parameter names of the
        # PATCH operation directly.
        out["parameters"] = [_P[n].v3() for n in op.params]
    if op.body is not None:
        schema = _to_v3(_ref(op.body))
        types = op.consumes if op.consumes != ("*/*",) else ("*/*",)
        body: JSON = {"content": {t: {"schema": schema} for t in types}}
        if op.body_required:
            body["required"] = True
        out["requestBody"] = body
    responses: JSON = {}
    for code, description, definition in op.responses:
        resp: JSON = {"description": description}
        if definition is not None:
            schema = _to_v3(_response_schema(definition))
            resp["content"] = {t: {"schema": schema} for t in op.produces}
        responses[code] = resp
    out["responses"] = responses
    out["x-kubernetes-action"] = op.action
    out["x-kubernetes-group-version-kind"] = _gvk_json(op.gvk)
    return out


def _encode(doc: JSON) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
