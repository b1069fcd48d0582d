"""The OpenAPI documents: definitions, types, references, paths, parameters, index and protobuf."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from apiserver.rest import openapi_proto
from apiserver.rest.openapi import OpenAPI
from tinykube.kinds import ALL_KINDS, POD

CORE = "io.k8s.api.core.v1"
RBAC = "io.k8s.api.rbac.v1"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
PATCH_META = {
    ("tinykube.v1.PodSpec", "containers"): ("merge", "name"),
    ("tinykube.v1.ObjectMeta", "finalizers"): ("merge", ""),
}


@pytest.fixture(scope="module")
def api() -> OpenAPI:
    return OpenAPI(ALL_KINDS, lambda message, field: PATCH_META.get((message, field)))


@pytest.fixture(scope="module")
def v2(api: OpenAPI) -> dict[str, Any]:
    return json.loads(api.v2_json())  # type: ignore[no-any-return]


def v3(api: OpenAPI, path: str) -> dict[str, Any]:
    data = api.v3_document(path)
    assert data is not None
    return json.loads(data)  # type: ignore[no-any-return]


def group_version(group: str) -> str:
    return f"apis/{group}/v1" if group else "api/v1"


DEFINITION_NAMES = [
    (
        "CustomResourceDefinition",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionList",
    ),
    ("Pod", f"{CORE}.Pod", f"{CORE}.PodList"),
    ("Node", f"{CORE}.Node", f"{CORE}.NodeList"),
    ("ReplicaSet", "io.k8s.api.apps.v1.ReplicaSet", "io.k8s.api.apps.v1.ReplicaSetList"),
    ("Deployment", "io.k8s.api.apps.v1.Deployment", "io.k8s.api.apps.v1.DeploymentList"),
    ("Event", f"{CORE}.Event", f"{CORE}.EventList"),
    ("Lease", "io.k8s.api.coordination.v1.Lease", "io.k8s.api.coordination.v1.LeaseList"),
    ("Service", f"{CORE}.Service", f"{CORE}.ServiceList"),
    ("Endpoints", f"{CORE}.Endpoints", f"{CORE}.EndpointsList"),
    ("Job", "io.k8s.api.batch.v1.Job", "io.k8s.api.batch.v1.JobList"),
    (
        "PodDisruptionBudget",
        "io.k8s.api.policy.v1.PodDisruptionBudget",
        "io.k8s.api.policy.v1.PodDisruptionBudgetList",
    ),
    *(
        (kind, f"{RBAC}.{kind}", f"{RBAC}.{kind}List")
        for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    ),
    ("Namespace", f"{CORE}.Namespace", f"{CORE}.NamespaceList"),
    (
        "PriorityClass",
        "io.k8s.api.scheduling.v1.PriorityClass",
        "io.k8s.api.scheduling.v1.PriorityClassList",
    ),
    ("DaemonSet", "io.k8s.api.apps.v1.DaemonSet", "io.k8s.api.apps.v1.DaemonSetList"),
    (
        "ControllerRevision",
        "io.k8s.api.apps.v1.ControllerRevision",
        "io.k8s.api.apps.v1.ControllerRevisionList",
    ),
    ("ConfigMap", f"{CORE}.ConfigMap", f"{CORE}.ConfigMapList"),
    ("Secret", f"{CORE}.Secret", f"{CORE}.SecretList"),
    ("ServiceAccount", f"{CORE}.ServiceAccount", f"{CORE}.ServiceAccountList"),
    (
        "EndpointSlice",
        "io.k8s.api.discovery.v1.EndpointSlice",
        "io.k8s.api.discovery.v1.EndpointSliceList",
    ),
    *(
        (
            kind,
            f"io.k8s.api.admissionregistration.v1.{kind}",
            f"io.k8s.api.admissionregistration.v1.{kind}List",
        )
        for kind in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
    ),
]


def test_the_table_covers_every_kind() -> None:
    assert {k for k, _, _ in DEFINITION_NAMES} == {info.kind for info in ALL_KINDS}


@pytest.mark.parametrize(("kind", "name", "list_name"), DEFINITION_NAMES)
def test_every_kind_has_a_definition_with_its_gvk(
    api: OpenAPI, v2: dict[str, Any], kind: str, name: str, list_name: str
) -> None:
    info = next(i for i in ALL_KINDS if i.kind == kind)
    gvk = {"group": info.group, "kind": kind, "version": "v1"}
    list_gvk = {**gvk, "kind": f"{kind}List"}
    components = v3(api, group_version(info.group))["components"]["schemas"]
    for defs in (v2["definitions"], components):
        assert defs[name]["x-kubernetes-group-version-kind"] == [gvk]
        assert defs[list_name]["x-kubernetes-group-version-kind"] == [list_gvk]
        assert {"apiVersion", "kind", "metadata"} <= set(defs[name]["properties"])
        assert {"apiVersion", "kind", "metadata", "items"} <= set(defs[list_name]["properties"])


FIELD_TYPES = [
    # (definition, property, what the v2 property must contain)
    (f"{CORE}.Pod", "metadata", {"$ref": f"#/definitions/{META}.ObjectMeta"}),
    (f"{CORE}.Pod", "spec", {"$ref": f"#/definitions/{CORE}.PodSpec"}),
    (f"{META}.ObjectMeta", "generation", {"type": "integer", "format": "int64"}),
    (f"{META}.ObjectMeta", "creationTimestamp", {"$ref": f"#/definitions/{META}.Time"}),
    (
        f"{META}.ObjectMeta",
        "labels",
        {"type": "object", "additionalProperties": {"type": "string"}},
    ),
    (
        f"{META}.ObjectMeta",
        "ownerReferences",
        {"type": "array", "items": {"$ref": f"#/definitions/{META}.OwnerReference"}},
    ),
    (f"{META}.ListMeta", "continue", {"type": "string"}),
    (f"{CORE}.ContainerPort", "containerPort", {"type": "integer", "format": "int32"}),
    (f"{CORE}.ContainerPort", "hostIP", {"type": "string"}),
    (f"{CORE}.ContainerStatus", "ready", {"type": "boolean"}),
    (
        f"{CORE}.ResourceRequirements",
        "limits",
        {"type": "object", "additionalProperties": {"$ref": f"#/definitions/{QUANTITY}"}},
    ),
    (
        f"{CORE}.NodeStatus",
        "allocatable",
        {"type": "object", "additionalProperties": {"$ref": f"#/definitions/{QUANTITY}"}},
    ),
    (
        f"{CORE}.PodSpec",
        "nodeSelector",
        {"type": "object", "additionalProperties": {"type": "string"}},
    ),
    (
        "io.k8s.api.apps.v1.ReplicaSetSpec",
        "template",
        {"$ref": f"#/definitions/{CORE}.PodTemplateSpec"},
    ),
    (
        "io.k8s.api.apps.v1.ReplicaSetSpec",
        "selector",
        {"$ref": f"#/definitions/{META}.LabelSelector"},
    ),
    ("io.k8s.api.coordination.v1.LeaseSpec", "renewTime", {"$ref": f"#/definitions/{META}.Time"}),
    (f"{CORE}.Event", "involvedObject", {"$ref": f"#/definitions/{CORE}.ObjectReference"}),
    (f"{CORE}.DaemonEndpoint", "Port", {"type": "integer", "format": "int32"}),
]


@pytest.mark.parametrize(("definition", "prop", "expected"), FIELD_TYPES)
def test_field_types(
    v2: dict[str, Any], definition: str, prop: str, expected: dict[str, Any]
) -> None:
    schema = v2["definitions"][definition]["properties"][prop]
    assert {k: schema.get(k) for k in expected} == expected


@pytest.mark.parametrize(
    ("definition", "required"),
    [
        (f"{CORE}.Container", ["name"]),
        (f"{CORE}.PodSpec", ["containers"]),
        (f"{CORE}.ContainerPort", ["containerPort"]),
        (f"{CORE}.Taint", ["key", "effect"]),
        (f"{META}.OwnerReference", ["apiVersion", "kind", "name", "uid"]),
        ("io.k8s.api.apps.v1.ReplicaSetSpec", ["selector"]),
        (f"{CORE}.Binding", ["target"]),
    ],
)
def test_required_fields(v2: dict[str, Any], definition: str, required: list[str]) -> None:
    assert v2["definitions"][definition]["required"] == required


def test_every_required_field_is_a_property(v2: dict[str, Any]) -> None:
    for name, schema in v2["definitions"].items():
        missing = set(schema.get("required", ())) - set(schema.get("properties", {}))
        assert not missing, f"{name} requires {missing}"


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def test_v2_references_resolve(v2: dict[str, Any]) -> None:
    found = list(refs(v2))
    assert f"#/definitions/{CORE}.Pod" in found
    for ref in found:
        assert ref.startswith("#/definitions/")
        assert ref.removeprefix("#/definitions/") in v2["definitions"], ref


@pytest.mark.parametrize("path", ["api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1"])
def test_v3_references_resolve_within_each_document(api: OpenAPI, path: str) -> None:
    doc = v3(api, path)
    schemas = doc["components"]["schemas"]
    found = list(refs(doc))
    assert found
    for ref in found:
        assert ref.startswith("#/components/schemas/")
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_v3_refs_with_siblings_are_wrapped_in_all_of(api: OpenAPI) -> None:
    schemas = v3(api, "api/v1")["components"]["schemas"]
    metadata = schemas[f"{CORE}.Pod"]["properties"]["metadata"]
    assert metadata["allOf"] == [{"$ref": f"#/components/schemas/{META}.ObjectMeta"}]
    assert metadata["description"]
    assert "$ref" not in metadata


def test_v3_quantity_and_int_or_string_have_no_single_type(api: OpenAPI) -> None:
    # kubectl explain prints the definition's name only for a ref to a schema without a type.
    schemas = v3(api, "api/v1")["components"]["schemas"]
    assert "type" not in schemas[QUANTITY]
    assert schemas[QUANTITY]["oneOf"] == [{"type": "string"}, {"type": "number"}]
    assert schemas[f"{META}.Time"]["type"] == "string"
    assert schemas[f"{META}.Time"]["format"] == "date-time"


def test_the_apps_document_carries_the_core_types_it_refers_to(api: OpenAPI) -> None:
    schemas = v3(api, "apis/apps/v1")["components"]["schemas"]
    assert {f"{CORE}.PodTemplateSpec", f"{CORE}.PodSpec", f"{CORE}.Container"} <= set(schemas)
    assert f"{CORE}.Node" not in schemas


def test_v3_index_names_each_document_with_its_hash(api: OpenAPI) -> None:
    index = json.loads(api.v3_index())
    assert set(index["paths"]) == {
        "api/v1",
        "apis/admissionregistration.k8s.io/v1",
        "apis/apiextensions.k8s.io/v1",
        "apis/apps/v1",
        "apis/batch/v1",
        "apis/coordination.k8s.io/v1",
        "apis/discovery.k8s.io/v1",
        "apis/policy/v1",
        "apis/rbac.authorization.k8s.io/v1",
        "apis/scheduling.k8s.io/v1",
    }
    for path, entry in index["paths"].items():
        data = api.v3_document(path)
        assert data is not None
        digest = hashlib.sha512(data).hexdigest().upper()
        assert api.v3_hash(path) == digest
        assert entry == {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}


def test_documents_are_stable_across_builds(api: OpenAPI) -> None:
    again = OpenAPI(ALL_KINDS, lambda message, field: PATCH_META.get((message, field)))
    assert again.v3_index() == api.v3_index()
    assert again.v2_json() == api.v2_json()
    assert again.v2_protobuf() == api.v2_protobuf()


def test_unknown_v3_paths(api: OpenAPI) -> None:
    assert api.v3_document("apis/networking.k8s.io/v1") is None
    assert api.v3_document("/api/v1") == api.v3_document("api/v1")
    with pytest.raises(KeyError, match=r"apis/networking\.k8s\.io/v1"):
        api.v3_hash("apis/networking.k8s.io/v1")


def item_path(group: str, plural: str, namespaced: bool) -> str:
    prefix = f"/apis/{group}/v1" if group else "/api/v1"
    scope = "/namespaces/{namespace}" if namespaced else ""
    return f"{prefix}{scope}/{plural}/{{name}}"


PATHS = [(item_path(i.group, i.plural, i.namespaced), i.group, i.kind, i.plural) for i in ALL_KINDS]


@pytest.mark.parametrize(("path", "group", "kind", "plural"), PATHS)
def test_item_and_collection_operations(
    api: OpenAPI, v2: dict[str, Any], path: str, group: str, kind: str, plural: str
) -> None:
    gvk = {"group": group, "kind": kind, "version": "v1"}
    collection = path.removesuffix("/{name}")
    for doc in (v2, v3(api, group_version(group))):
        item, coll = doc["paths"][path], doc["paths"][collection]
        assert set(item) == {"get", "put", "patch", "delete", "parameters"}
        assert set(coll) == {"get", "post", "delete", "parameters"}
        actions = {
            item["get"]["x-kubernetes-action"],
            item["put"]["x-kubernetes-action"],
            coll["get"]["x-kubernetes-action"],
            coll["delete"]["x-kubernetes-action"],
        }
        assert actions == {"get", "put", "list", "deletecollection"}
        for op in (item["get"], item["patch"], coll["post"], coll["delete"]):
            assert op["x-kubernetes-group-version-kind"] == gvk
        names = {p["name"] for p in coll["get"]["parameters"]}
        assert {"watch", "labelSelector", "fieldSelector", "limit", "continue"} <= names
        assert {"resourceVersion", "allowWatchBookmarks", "timeoutSeconds"} <= names
        assert {p["name"] for p in item["parameters"]} >= {"name", "pretty"}


def patch_operations(doc: dict[str, Any], gvk: dict[str, str]) -> list[dict[str, Any]]:
    return [
        item["patch"]
        for item in doc["paths"].values()
        if "patch" in item and item["patch"]["x-kubernetes-group-version-kind"] == gvk
    ]


@pytest.mark.parametrize("info", ALL_KINDS, ids=lambda i: i.kind)
def test_kubectl_finds_server_side_validation_and_dry_run(
    api: OpenAPI, v2: dict[str, Any], info: Any
) -> None:
    # cli-runtime's verifiers take the first PATCH operation with the object's GVK, in map
    # order, and look for the parameter by name among its own (inline) parameters.
    gvk = {"group": info.group, "kind": info.kind, "version": "v1"}
    for doc in (v2, v3(api, group_version(info.group))):
        ops = patch_operations(doc, gvk)
        assert len(ops) == (2 if info.has_status else 1)
        for op in ops:
            names = [p.get("name") for p in op["parameters"] if "$ref" not in p]
            assert {"fieldValidation", "dryRun", "fieldManager", "force"} <= set(names)


def test_patch_operations_accept_the_patch_types(api: OpenAPI, v2: dict[str, Any]) -> None:
    path = "/api/v1/namespaces/{namespace}/pods/{name}"
    content = v3(api, "api/v1")["paths"][path]["patch"]["requestBody"]["content"]
    assert "application/strategic-merge-patch+json" in content
    assert "application/merge-patch+json" in content
    assert "application/strategic-merge-patch+json" in v2["paths"][path]["patch"]["consumes"]


@pytest.mark.parametrize(
    ("path", "method", "operation_id"),
    [
        ("/api/v1/namespaces/{namespace}/pods", "get", "listCoreV1NamespacedPod"),
        ("/api/v1/namespaces/{namespace}/pods", "delete", "deleteCoreV1CollectionNamespacedPod"),
        ("/api/v1/pods", "get", "listCoreV1PodForAllNamespaces"),
        ("/api/v1/nodes/{name}", "patch", "patchCoreV1Node"),
        ("/api/v1/nodes/{name}/status", "put", "replaceCoreV1NodeStatus"),
        ("/api/v1/watch/nodes", "get", "watchCoreV1NodeList"),
        (
            "/api/v1/namespaces/{namespace}/pods/{name}/binding",
            "post",
            "createCoreV1NamespacedPodBinding",
        ),
        (
            "/apis/apps/v1/namespaces/{namespace}/replicasets/{name}/scale",
            "get",
            "readAppsV1NamespacedReplicaSetScale",
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            "put",
            "replaceCoordinationV1NamespacedLease",
        ),
    ],
)
def test_operation_ids(v2: dict[str, Any], path: str, method: str, operation_id: str) -> None:
    assert v2["paths"][path][method]["operationId"] == operation_id


def test_patch_meta_becomes_list_extensions(v2: dict[str, Any]) -> None:
    containers = v2["definitions"][f"{CORE}.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-list-type"] == "map"
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    finalizers = v2["definitions"][f"{META}.ObjectMeta"]["properties"]["finalizers"]
    assert finalizers["x-kubernetes-list-type"] == "set"
    assert "x-kubernetes-patch-merge-key" not in finalizers
    tolerations = v2["definitions"][f"{CORE}.PodSpec"]["properties"]["tolerations"]
    assert not [k for k in tolerations if k.startswith("x-")]


def test_descriptions_come_from_the_proto_comments(v2: dict[str, Any]) -> None:
    props = v2["definitions"][f"{CORE}.ContainerPort"]["properties"]
    assert props["protocol"]["description"] == "TCP (default), UDP or SCTP."
    assert "description" not in props["name"]
    state = v2["definitions"][f"{CORE}.ContainerState"]
    assert state["description"] == "At most one of the three is set."
    # A kind without a message comment is described by its file's header.
    assert v2["definitions"][f"{CORE}.Pod"]["description"] == "Pods: the unit of scheduling."


def test_without_proto_sources_only_the_comment_descriptions_are_missing() -> None:
    bare = json.loads(OpenAPI(ALL_KINDS, proto_dir=None).v2_json())
    props = bare["definitions"][f"{CORE}.ContainerPort"]["properties"]
    assert "description" not in props["protocol"]
    assert bare["definitions"][f"{CORE}.Pod"]["properties"]["kind"]["description"]


def test_the_proto_comment_parser(tmp_path: Path) -> None:
    (tmp_path / "x.proto").write_text(
        "// Header of the file.\n"
        'syntax = "proto3";\n\npackage tinykube.v1;\n\n'
        "// Outer's comment\n// on two lines.\n"
        "message Outer {\n"
        "  // Leading.\n"
        "  string a = 1;\n"
        "  int32 b = 2; // Trailing.\n"
        "\n"
        "  string unrelated = 3;\n"
        "  oneof choice {\n"
        "    // Inside a oneof.\n"
        "    string c = 4;\n"
        "  }\n"
        "  message Inner {\n"
        "    // Nested.\n"
        "    map<string, string> d = 1;\n"
        "  }\n"
        "  string e = 5;\n"
        "}\n",
        encoding="utf-8",
    )
    from apiserver.rest.openapi import _ProtoComments

    comments = _ProtoComments.read(tmp_path)
    assert comments.files == {"tinykube/v1/x.proto": "Header of the file."}
    assert comments.messages == {"tinykube.v1.Outer": "Outer's comment on two lines."}
    assert comments.fields == {
        ("tinykube.v1.Outer", "a"): "Leading.",
        ("tinykube.v1.Outer", "b"): "Trailing.",
        ("tinykube.v1.Outer", "c"): "Inside a oneof.",
        ("tinykube.v1.Outer.Inner", "d"): "Nested.",
    }


def test_an_unsupported_field_type_names_the_field() -> None:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(
        descriptor_pb2.FileDescriptorProto(
            name="any.proto",
            package="google.protobuf",
            message_type=[descriptor_pb2.DescriptorProto(name="Any")],
        ).SerializeToString()
    )
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="odd.proto",
        package="odd",
        dependency=["any.proto"],
        message_type=[
            descriptor_pb2.DescriptorProto(
                name="Odd",
                field=[
                    field(
                        name="payload",
                        number=1,
                        type=field.TYPE_MESSAGE,
                        type_name=".google.protobuf.Any",
                        json_name="payload",
                    )
                ],
            )
        ],
    )
    pool.AddSerializedFile(proto.SerializeToString())
    odd = message_factory.GetMessageClass(pool.FindMessageTypeByName("odd.Odd"))
    kind = dataclasses.replace(POD, kind="Odd", plural="odds", message=odd, list_message=odd)
    with pytest.raises(ValueError, match=r"odd\.Odd\.payload: message google\.protobuf\.Any"):
        OpenAPI([kind], proto_dir=None)


# -- the protobuf encoding ---------------------------------------------------------------------


def decode(data: bytes) -> list[tuple[int, int | bytes]]:
    """A generic protobuf wire decoder: (field number, varint or length-delimited bytes)."""
    out: list[tuple[int, int | bytes]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 2:
            n = varint()
            out.append((number, data[i : i + n]))
            i += n
        elif wire == 1:
            out.append((number, data[i : i + 8]))
            i += 8
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def field(message: bytes, number: int) -> list[Any]:
    return [v for n, v in decode(message) if n == number]


def named(message: bytes, number: int) -> dict[str, bytes]:
    """A gnostic repeated Named* field as {name: encoded value}."""
    out = {}
    for entry in field(message, number):
        name = field(entry, 1)[0].decode()
        out[name] = field(entry, 2)[0]
    return out


def test_v2_protobuf_is_gnostics_document(api: OpenAPI, v2: dict[str, Any]) -> None:
    doc = api.v2_protobuf()
    assert field(doc, 1) == [b"2.0"]
    definitions = named(field(doc, 9)[0], 1)
    assert set(definitions) == set(v2["definitions"])
    pod = definitions[f"{CORE}.Pod"]
    extensions = named(pod, 31)
    yaml = field(extensions["x-kubernetes-group-version-kind"], 2)[0]
    assert json.loads(yaml) == [{"group": "", "kind": "Pod", "version": "v1"}]
    properties = named(field(pod, 25)[0], 1)
    assert field(properties["metadata"], 1) == [f"#/definitions/{META}.ObjectMeta".encode()]
    # TypeItem: the type names, field 1.
    assert field(field(properties["kind"], 22)[0], 1) == [b"string"]

    paths = named(field(doc, 8)[0], 2)
    assert set(paths) == set(v2["paths"])
    patch = field(paths["/api/v1/namespaces/{namespace}/pods/{name}"], 8)[0]
    query_names = []
    for item in field(patch, 8):  # ParametersItem -> Parameter -> NonBodyParameter -> query
        parameter = field(item, 1)[0]
        for non_body in field(parameter, 2):
            for query in field(non_body, 3):
                query_names.append(field(query, 4)[0].decode())
    assert {"fieldValidation", "dryRun", "fieldManager", "force"} <= set(query_names)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"swagger": "2.0", "webhooks": {}}, "document: 'webhooks' has no protobuf encoding"),
        ({"swagger": 2}, r"document.swagger: expected a string"),
        (
            {"definitions": {"X": {"type": "object", "oneOf": []}}},
            r"document.definitions.X: 'oneOf' has no protobuf encoding",
        ),
        (
            {"paths": {"/a": {"get": {"parameters": [{"name": "h", "in": "header"}]}}}},
            r"document.paths./a.get.parameters\[0\]: parameters in 'header'",
        ),
    ],
)
def test_the_protobuf_encoder_refuses_what_it_cannot_encode(
    doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        openapi_proto.encode_document(doc)


def test_fields_narrowed_to_int32_are_published_as_kubernetes_int64() -> None:
    from google.protobuf import descriptor_pool
    from google.protobuf.descriptor import FieldDescriptor

    from apiserver.rest.openapi import KUBERNETES_INT64

    pool = descriptor_pool.Default()
    for message, field in sorted(KUBERNETES_INT64):
        descriptor = pool.FindMessageTypeByName(message).fields_by_name[field]
        assert descriptor.type == FieldDescriptor.TYPE_INT32, (message, field)
