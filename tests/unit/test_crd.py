"""CustomResourceDefinitions: kube's validation of the kind and the naming controller's
decisions (apiserver/registry/customresourcedefinition.py, apiserver/crd/names.py)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from apiserver import fieldmanager as fm
from apiserver.auth.rbac import Rule, rule_allows
from apiserver.crd import names
from apiserver.crd.serving import (
    CustomResourceStrategy,
    custom_kind,
    deprecation_warning,
    from_dict,
    version_priority,
)
from apiserver.grpcattributes import grpc_attributes
from apiserver.registry import strategy_for
from apiserver.registry.customresourcedefinition import (
    default_crd,
    simple_json_path_problem,
    validate_crd,
)
from apiserver.rest.attributes import rest_attributes
from tinykube import tables
from tinykube.kinds import CUSTOM_RESOURCE_DEFINITION, PrinterColumn
from tinykube.manifest import to_dict
from tinykube.v1 import apiextensions_pb2

CRD = apiextensions_pb2.CustomResourceDefinition
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def manifest(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {
                "plural": "crontabs",
                "singular": "crontab",
                "kind": "CronTab",
                "shortNames": ["ct"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"replicas": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}
                    ],
                }
            ],
        },
    }
    body["spec"].update(changes)
    return body


def crd(body: dict[str, Any] | None = None) -> CRD:
    obj = json_format.ParseDict(body or manifest(), CRD())
    default_crd(obj)
    return obj


def problems(obj: CRD) -> list[str]:
    return [str(e) for e in validate_crd(obj)]


def test_a_valid_crd_has_no_problems_and_gets_kubes_defaults() -> None:
    obj = crd()
    assert problems(obj) == []
    assert obj.spec.names.listKind == "CronTabList"
    assert obj.spec.conversion.strategy == "None"


def test_the_schema_prints_whole_numbers_and_the_empty_status_subresource() -> None:
    out = to_dict(crd())
    version = out["spec"]["versions"][0]
    replicas = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
    assert replicas == {"type": "integer", "minimum": 1}
    assert version["subresources"]["status"] == {}


def test_the_name_must_be_plural_dot_group() -> None:
    body = manifest()
    body["metadata"]["name"] = "crontab.stable.example.com"
    assert problems(crd(body)) == [
        'metadata.name: Invalid value: "crontab.stable.example.com": '
        'must be spec.names.plural+"."+spec.group'
    ]


def test_group_needs_a_dot_and_scope_is_namespaced_or_cluster() -> None:
    body = manifest(group="example", scope="Global")
    body["metadata"]["name"] = "crontabs.example"
    assert problems(crd(body)) == [
        'spec.group: Invalid value: "example": should be a domain with at least one dot',
        'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
    ]


def test_exactly_one_storage_version_with_unique_dns_label_names() -> None:
    body = manifest()
    v1 = body["spec"]["versions"][0]
    body["spec"]["versions"] = [v1, {**v1, "name": "v1"}, {**v1, "name": "V2", "storage": False}]
    got = problems(crd(body))
    assert 'spec.versions[1].name: Duplicate value: "v1"' in got
    assert any(
        p.startswith('spec.versions[2].name: Invalid value: "V2": a DNS-1035 label') for p in got
    )
    assert any(
        p.startswith("spec.versions: Invalid value:")
        and p.endswith("must have exactly one version marked as storage version")
        for p in got
    )


def test_versions_need_a_schema_and_simple_json_paths() -> None:
    body = manifest()
    v = body["spec"]["versions"][0]
    del v["schema"]
    v["subresources"]["scale"] = {
        "specReplicasPath": ".status.replicas",
        "statusReplicasPath": "status.replicas",
    }
    v["additionalPrinterColumns"] = [{"name": "X", "type": "map", "jsonPath": "spec"}]
    v0 = "spec.versions[0]"
    assert problems(crd(body)) == [
        f"{v0}.schema.openAPIV3Schema: Required value: schemas are required",
        f'{v0}.subresources.scale.specReplicasPath: Invalid value: ".status.replicas": '
        "should be a json path under .spec",
        f'{v0}.subresources.scale.statusReplicasPath: Invalid value: "status.replicas": '
        "must be a simple json path starting with .",
        f'{v0}.additionalPrinterColumns[0].type: Unsupported value: "map": '
        'supported values: "integer", "number", "string", "boolean", "date"',
        f'{v0}.additionalPrinterColumns[0].jsonPath: Invalid value: "spec": '
        "must be a simple json path starting with .",
    ]


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        (".spec.replicas", True),
        (".status.conditions[0].type", True),
        (".metadata.labels['app.kubernetes.io/name']", True),
        (".spec..x", False),
        ("spec", False),
    ],
)
def test_simple_json_paths(path: str, ok: bool) -> None:
    assert (simple_json_path_problem(path) == "") is ok


def test_kind_and_list_kind_are_checked() -> None:
    body = manifest()
    body["spec"]["names"] = {"plural": "crontabs", "kind": "Cron_Tab", "listKind": "Cron_Tab"}
    got = problems(crd(body))[1:]  # [0]: the singular defaulted from the kind
    assert got[0].startswith(
        'spec.names.kind: Invalid value: "Cron_Tab": '
        "may have mixed case, but should otherwise match:"
    )
    assert (
        'spec.names.listKind: Invalid value: "Cron_Tab": kind and listKind may not be the same'
        in got
    )


def test_create_resets_the_status_and_records_the_storage_version() -> None:
    strategy = strategy_for(CUSTOM_RESOURCE_DEFINITION)
    obj = crd()
    obj.status.storedVersions.append("v0")
    strategy.prepare_for_create(obj, NOW)
    assert list(obj.status.storedVersions) == ["v1"]
    assert obj.metadata.uid


def test_scope_is_immutable_once_established() -> None:
    strategy = strategy_for(CUSTOM_RESOURCE_DEFINITION)
    old = crd()
    strategy.prepare_for_create(old, NOW)
    new = CRD()
    new.CopyFrom(old)
    new.spec.scope = "Cluster"
    assert strategy.check_update(new, old) == []
    old.status.conditions.add(type="Established", status="True")
    assert [str(e) for e in strategy.check_update(new, old)] == [
        'spec.scope: Invalid value: "Cluster": field is immutable'
    ]


def accepted(obj: CRD) -> CRD:
    new = names.reconcile(obj, [], NOW)
    assert new is not None
    return new


def test_the_naming_controller_accepts_free_names_and_establishes() -> None:
    obj = accepted(crd())
    assert obj.status.acceptedNames.plural == "crontabs"
    assert list(obj.status.acceptedNames.shortNames) == ["ct"]
    conds = {c.type: (c.status, c.reason, c.message) for c in obj.status.conditions}
    assert conds == {
        "NamesAccepted": ("True", "NoConflicts", "no conflicts found"),
        "Established": ("True", "InitialNamesAccepted", "the initial names have been accepted"),
    }
    assert names.reconcile(obj, [], NOW) is None


def test_a_name_another_crd_of_the_group_serves_is_refused() -> None:
    first = accepted(crd())
    body = manifest()
    body["metadata"]["name"] = "crontabz.stable.example.com"
    body["spec"]["names"] = {"plural": "crontabz", "kind": "CronTabz", "shortNames": ["ct"]}
    second = names.reconcile(crd(body), [first], NOW)
    assert second is not None
    conds = {c.type: (c.status, c.reason, c.message) for c in second.status.conditions}
    assert conds["NamesAccepted"] == ("False", "ShortNamesConflict", '"ct" is already in use')
    assert conds["Established"] == ("False", "NotAccepted", "not all names are accepted")
    # The names that do not conflict are accepted.
    assert second.status.acceptedNames.plural == "crontabz"
    assert list(second.status.acceptedNames.shortNames) == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.replicas", 3),
        (".status.conditions[0].type", "Ready"),
        (".status.conditions[1].type", None),
        (".metadata.labels['app.kubernetes.io/name']", "web"),
        (".spec.missing.deeper", None),
    ],
)
def test_printer_column_json_paths(path: str, expected: object) -> None:
    obj = {
        "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
        "spec": {"replicas": 3},
        "status": {"conditions": [{"type": "Ready"}]},
    }
    assert tables.json_path_value(obj, path) == expected


def test_a_custom_kinds_table_has_its_printer_columns() -> None:
    info = dataclasses.replace(
        CUSTOM_RESOURCE_DEFINITION,
        kind="CronTab",
        custom=True,
        printer_columns=(
            PrinterColumn("Replicas", "integer", ".spec.replicas", priority=1),
            PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
        ),
    )
    obj = {
        "metadata": {"name": "a", "creationTimestamp": "2026-12-05T11:59:00Z"},
        "spec": {"replicas": 2.0},
    }
    assert [(c["name"], c["type"], c["priority"]) for c in tables.column_definitions(info)] == [
        ("Name", "string", 0),
        ("Replicas", "integer", 1),
        ("Age", "date", 0),
    ]
    (row,) = tables.rows(info, [obj], now=NOW)
    assert row["cells"] == ["a", 2, "60s"]
    plain = dataclasses.replace(info, printer_columns=())
    assert [c["name"] for c in tables.column_definitions(plain)] == ["Name", "Age"]


def test_versions_are_ordered_as_kube_orders_them() -> None:
    names_ = ["v1alpha1", "v2beta1", "v1", "foo", "v1beta2", "v2", "v1beta1"]
    assert sorted(names_, key=version_priority) == [
        "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "foo",
    ]  # fmt: skip


def test_deprecated_versions_warn_as_kube() -> None:
    body = manifest()
    v1 = body["spec"]["versions"][0]
    body["spec"]["versions"] = [
        {**v1, "name": "v1beta1", "storage": False, "deprecated": True},
        v1,
        {
            **v1,
            "name": "v1alpha1",
            "storage": False,
            "deprecated": True,
            "deprecationWarning": "gone soon",
        },
    ]
    obj = accepted(crd(body))
    assert deprecation_warning(obj, "v1") == ""
    assert deprecation_warning(obj, "v1beta1") == (
        "stable.example.com/v1beta1 CronTab is deprecated; use stable.example.com/v1 CronTab"
    )
    assert deprecation_warning(obj, "v1alpha1") == "gone soon"


def test_grpc_custom_resources_are_authorized_by_the_requests_resource() -> None:
    obj = struct_pb2.Struct()
    obj.update({"metadata": {"name": "n", "namespace": "team"}})
    request = apiextensions_pb2.CustomResourceRequest(
        group="stable.example.com", version="v1", plural="crontabs", object=obj
    )
    (create,) = grpc_attributes("/tinykube.v1.CustomResources/Create", request)
    assert (create.verb, create.resource, create.api_group, create.namespace, create.name) == (
        "create", "crontabs", "stable.example.com", "team", "",
    )  # fmt: skip
    (status,) = grpc_attributes("/tinykube.v1.CustomResources/UpdateStatus", request)
    assert (status.verb, status.subresource, status.name) == ("update", "status", "n")
    listing = apiextensions_pb2.CustomResourceRequest(
        group="stable.example.com", plural="crontabs", namespace="team"
    )
    (watch,) = grpc_attributes("/tinykube.v1.CustomResources/Watch", listing)
    assert (watch.verb, watch.namespace) == ("watch", "team")
    assert grpc_attributes("/tinykube.v1.CustomResources/ListKinds", request) == ()


def test_rbac_sees_a_custom_object_by_its_group_and_resource() -> None:
    """RBAC needs nothing particular for custom kinds: a role names their group and plural."""
    attrs = rest_attributes(
        "PUT", "/apis/stable.example.com/v1/namespaces/team/crontabs/nightly/scale", {}
    )
    assert (attrs.verb, attrs.api_group, attrs.resource, attrs.subresource) == (
        "update", "stable.example.com", "crontabs", "scale",
    )  # fmt: skip
    assert (attrs.namespace, attrs.name) == ("team", "nightly")
    reader = Rule(
        verbs=("get", "list"), api_groups=("stable.example.com",), resources=("crontabs",)
    )
    listing = rest_attributes("GET", "/apis/stable.example.com/v1/namespaces/team/crontabs", {})
    assert rule_allows(reader, listing)
    assert not rule_allows(reader, attrs)


def test_custom_objects_bump_generation_on_any_non_metadata_change() -> None:
    body = manifest()
    schema = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["data"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    obj = accepted(crd(body))
    info = custom_kind(obj)
    strategy = CustomResourceStrategy(info, obj)
    old = from_dict(info.message, {"metadata": {"name": "a", "generation": 1}, "data": {"k": 1}})
    new = from_dict(info.message, {"metadata": {"name": "a"}, "data": {"k": 2}})
    strategy.prepare_for_update(new, old)
    assert new.metadata.generation == 2  # type: ignore[attr-defined]
    same = from_dict(
        info.message, {"metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": 1}}
    )
    strategy.prepare_for_update(same, old)
    assert same.metadata.generation == 1  # type: ignore[attr-defined]
    # With the status subresource a status change is not a new generation either.
    status = from_dict(
        info.message, {"metadata": {"name": "a"}, "data": {"k": 1}, "status": {"replicas": 3}}
    )
    strategy.prepare_for_update(status, old)
    assert status.metadata.generation == 1  # type: ignore[attr-defined]


# ---- managed fields of custom objects (apiserver/fieldmanager.py over google.protobuf.Value)


def _cron(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "stable.example.com/v1",
        "kind": "CronTab",
        "metadata": {"name": "a"},
        "spec": dict(spec),
    }


def _owners(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


def test_managers_own_fields_of_a_custom_objects_spec_not_the_whole_spec() -> None:
    """As Kubernetes' field manager with the CRD's schema: each manager owns the fields it
    set, so applying other fields of the spec neither conflicts nor drops them."""
    message: Any = custom_kind(accepted(crd())).message.DESCRIPTOR
    t0, t1, t2 = "2026-12-05T12:00:00Z", "2026-12-05T12:01:00Z", "2026-12-05T12:02:00Z"
    kw: dict[str, Any] = {"api_version": "stable.example.com/v1", "has_status": True}
    live = fm.apply(
        {}, _cron(replicas=1, cronSpec="* * * * *"), message, manager="helm", now=t0, **kw
    ).obj
    assert _owners(live)["helm"] == {"f:spec": {"f:cronSpec": {}, "f:replicas": {}}}
    # another manager (kubectl patch: an Update) sets a field of the spec helm does not apply
    new = {**live, "spec": {**live["spec"], "note": {"by": "ops"}, "tags": ["a"]}}
    entries = fm.update(live, new, message, manager="kubectl-patch", now=t1, **kw)
    assert entries is not None
    new["metadata"] = {**new["metadata"], "managedFields": entries}
    assert _owners(new)["kubectl-patch"] == {
        "f:spec": {"f:note": {".": {}, "f:by": {}}, "f:tags": {}}  # lists are atomic
    }
    assert _owners(new)["helm"] == {"f:spec": {"f:cronSpec": {}, "f:replicas": {}}}
    # helm applies a changed replicas: no conflict, and the other manager's fields stay
    got = fm.apply(
        new, _cron(replicas=2, cronSpec="* * * * *"), message, manager="helm", now=t2, **kw
    ).obj
    assert got["spec"] == {
        "replicas": 2,
        "cronSpec": "* * * * *",
        "note": {"by": "ops"},
        "tags": ["a"],
    }
    # helm stops applying cronSpec: it goes (helm owned it alone); note stays
    got = fm.apply(got, _cron(replicas=2), message, manager="helm", now=t2, **kw).obj
    assert got["spec"] == {"replicas": 2, "note": {"by": "ops"}, "tags": ["a"]}
    # changing a field another manager owns is a conflict naming that field
    with pytest.raises(fm.ApplyConflict) as info:
        fm.apply(got, _cron(replicas=2, note={"by": "helm"}), message, manager="helm", now=t2, **kw)
    assert info.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-patch" using stable.example.com/v1: '
        ".spec.note.by"
    )
