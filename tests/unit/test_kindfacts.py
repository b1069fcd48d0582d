"""Kind facts (tinykube.kinds) and field facts (tinykube.fieldfacts) are consistent with the
messages they describe and with what the apiserver serves from them."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from apiserver.auth import bootstrap
from apiserver.rest.discovery import RESOURCES, Discovery
from apiserver.rest.openapi import OpenAPI
from tinykube import fieldfacts
from tinykube.kinds import ALL_KINDS, ALL_VERBS, BY_KIND, SCALABLE_KINDS, STATUS_VERBS, KindInfo

KIND_IDS = [k.kind for k in ALL_KINDS]


def _json_field(desc: Descriptor, json_name: str) -> FieldDescriptor | None:
    return next((f for f in desc.fields if f.json_name == json_name), None)


def _path_field(desc: Descriptor, path: str) -> FieldDescriptor | None:
    """The field a ".spec.replicas" style path names, or None."""
    field: FieldDescriptor | None = None
    for part in path.lstrip(".").split("."):
        if field is not None:
            assert field.message_type is not None, path
            desc = field.message_type
        field = _json_field(desc, part)
        if field is None:
            return None
    return field


def test_kinds_plurals_and_short_names_are_unique() -> None:
    assert len(BY_KIND) == len(ALL_KINDS)
    plurals = [k.plural for k in ALL_KINDS]
    assert len(set(plurals)) == len(plurals)
    names = [n for k in ALL_KINDS for n in {k.plural, k.kind.lower(), *k.short_names}]
    assert len(set(names)) == len(names), "a name resolves to two kinds"


@pytest.mark.parametrize("info", ALL_KINDS, ids=KIND_IDS)
def test_kind_facts_match_the_message(info: KindInfo) -> None:
    desc = cast(Descriptor, info.message.DESCRIPTOR)
    assert info.plural == info.plural.lower() and info.plural.isalpha()
    assert set(info.verbs) <= set(ALL_VERBS) and {"get", "list", "watch"} <= set(info.verbs)
    subs = [s.name for s in info.all_subresources]
    assert len(set(subs)) == len(subs)
    # A status subresource needs a status to write.
    if info.has_status:
        assert _json_field(desc, "status") is not None
    if info.scale is not None:
        assert info.kind in SCALABLE_KINDS
        scale = info.scale
        for path in (scale.spec_replicas_path, scale.status_replicas_path):
            field = _path_field(desc, path)
            assert field is not None and field.cpp_type == FieldDescriptor.CPPTYPE_INT32, path
        selector = _path_field(desc, scale.label_selector_path)
        assert selector is not None and selector.message_type is not None
        assert selector.message_type.name == "LabelSelector"
        scale_sub = next(s for s in info.all_subresources if s.name == "scale")
        assert (scale_sub.group, scale_sub.version, scale_sub.verbs) == (
            "autoscaling",
            "v1",
            STATUS_VERBS,
        )
    else:
        assert info.kind not in SCALABLE_KINDS


@pytest.mark.parametrize("info", ALL_KINDS, ids=KIND_IDS)
def test_discovery_serves_exactly_the_kind_facts(info: KindInfo) -> None:
    d = Discovery()
    gv = d.lookup(info.group, info.version)
    assert gv is not None
    listed = d.resource_list(gv)["resources"]
    entry = next(r for r in listed if r["name"] == info.plural)
    assert entry["kind"] == info.kind
    assert entry["namespaced"] == info.namespaced
    assert entry["verbs"] == list(info.verbs)
    assert entry.get("categories", []) == list(info.categories)
    # Discovery lists only real abbreviations; the singular is served on its own.
    shorts = [s for s in info.short_names if s not in (info.kind.lower(), info.plural)]
    assert entry.get("shortNames", []) == shorts
    subs = [r["name"] for r in listed if r["name"].startswith(f"{info.plural}/")]
    assert subs == [f"{info.plural}/{s.name}" for s in info.all_subresources]


def test_the_all_category_is_kubes_for_the_kinds_tinykube_stores() -> None:
    in_all = {k.kind for k in ALL_KINDS if "all" in k.categories}
    assert in_all == {"Pod", "Service", "ReplicaSet", "Deployment", "DaemonSet", "Job"}


def _message(full_name: str) -> Descriptor:
    return descriptor_pool.Default().FindMessageTypeByName(full_name)


def test_patch_facts_name_repeated_fields_that_exist() -> None:
    for (message, field), (strategy, key) in fieldfacts.PATCH_META.items():
        f = _json_field(_message(message), field)
        assert f is not None, (message, field)
        assert f.is_repeated, (message, field)
        assert strategy == "merge"
        if f.message_type is not None:
            assert key and _json_field(f.message_type, key) is not None, (message, field, key)
        else:
            assert key == "", "a primitive list has no merge key"


def test_list_map_keys_widen_the_merge_key() -> None:
    for (message, field), keys in fieldfacts.LIST_MAP_KEYS.items():
        meta = fieldfacts.patch_meta(message, field)
        assert meta is not None and keys[0] == meta[1], (message, field)
        f = _json_field(_message(message), field)
        assert f is not None and f.message_type is not None
        for key in keys:
            assert _json_field(f.message_type, key) is not None, (message, field, key)
        assert fieldfacts.list_map_keys(message, field, meta[1]) == keys
    assert fieldfacts.list_map_keys("tinykube.v1.PodSpec", "containers", "name") == ("name",)


def test_atomic_fields_are_structs_or_maps_that_exist() -> None:
    for message, field in fieldfacts.ATOMIC:
        f = _json_field(_message(message), field)
        assert f is not None and f.message_type is not None, (message, field)


def test_stored_resources_come_from_the_kinds() -> None:
    stored = [r for r in RESOURCES if r.info is not None and r.view is None]
    assert [r.info for r in stored] == list(ALL_KINDS)


def _bootstrap_rules() -> list[tuple[str, Any]]:
    roles = [(r.metadata.name, r.rules) for r in bootstrap.cluster_roles()]
    return [(name, rule) for name, rules in roles for rule in rules]


# Names kube's policy authorizes that are no served path, copied from its roles as they are:
# <resource>/finalizers (what OwnerReferencesPermissionEnforcement checks before an owner
# reference may block its owner's deletion), endpoints/restricted (EndpointRestrictions), the
# legacy core `bindings` resource beside pods/binding, and the disruption controller's */scale.
_AUTHORIZATION_ONLY = {"finalizers", "restricted"}
_KUBE_POLICY_ONLY = {("", "bindings"), ("*", "*/scale")}


def test_bootstrap_roles_name_only_served_resources_and_subresources() -> None:
    """Every resource in the bootstrap RBAC policy is one discovery serves (from the kind
    facts), in its group, with the subresource the kind declares: a renamed plural or a
    dropped subresource fails here instead of silently granting nothing."""
    served = {(r.group, r.plural): r for r in RESOURCES}
    unknown = []
    for role, rule in _bootstrap_rules():
        if "*" in rule.resources or not rule.resources:
            continue
        for group in rule.apiGroups:
            for name in rule.resources:
                plural, _, sub = name.partition("/")
                if (group, name) in _KUBE_POLICY_ONLY:
                    continue
                resource = served.get((group, plural))
                if resource is None or (
                    sub and sub not in _AUTHORIZATION_ONLY and resource.subresource(sub) is None
                ):
                    unknown.append(f"{role}: {group or 'core'}/{name}")
    assert not unknown


def test_openapi_paths_follow_the_status_and_scale_facts() -> None:
    d = Discovery()
    paths = json.loads(OpenAPI(d.schemas, fieldfacts.patch_meta, proto_dir=None).v2_json())["paths"]
    for info in ALL_KINDS:
        prefix = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
        scope = "/namespaces/{namespace}" if info.namespaced else ""
        item = f"{prefix}{scope}/{info.plural}/{{name}}"
        assert item in paths
        assert (f"{item}/status" in paths) == info.has_status, info.kind
        assert (f"{item}/scale" in paths) == (info.scale is not None), info.kind
