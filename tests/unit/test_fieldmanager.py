"""Table tests of apiserver/fieldmanager.py: field sets, fieldsV1, merge, ownership, pruning,
conflicts and force, and the records of non-apply writes."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver import fieldmanager as fm
from tinykube.errors import BadRequestError
from tinykube.v1 import pod_pb2, replicaset_pb2, service_pb2

POD: Any = pod_pb2.Pod.DESCRIPTOR
RS: Any = replicaset_pb2.ReplicaSet.DESCRIPTOR
SVC: Any = service_pb2.Service.DESCRIPTOR
NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:01:00Z"


def pod(*containers: dict[str, Any], **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": list(containers)},
    }


def c(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def apply(live: dict[str, Any], config: dict[str, Any], manager: str, **kw: Any) -> fm.Applied:
    return fm.apply(
        live, config, POD, manager=manager, api_version="v1", now=NOW, has_status=True, **kw
    )


# ---- field sets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("descriptor", "config", "expected"),
    [
        (
            POD,
            pod(c("web", image="nginx"), app="web"),
            {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:containers": {'k:{"name":"web"}': {".": {}, "f:image": {}, "f:name": {}}}
                },
            },
        ),
        (  # keys with a default (protocol) are filled in; atomic lists are leaves
            POD,
            pod(c("web", ports=[{"containerPort": 80}], command=["a", "b"])),
            {
                "f:spec": {
                    "f:containers": {
                        'k:{"name":"web"}': {
                            ".": {},
                            "f:command": {},
                            "f:name": {},
                            "f:ports": {
                                'k:{"containerPort":80,"protocol":"TCP"}': {
                                    ".": {},
                                    "f:containerPort": {},
                                }
                            },
                        }
                    }
                }
            },
        ),
        (  # set lists by value, empty structs as members, status never on the main resource
            POD,
            {
                "metadata": {"finalizers": ["a/b"]},
                "spec": {"affinity": {}},
                "status": {"phase": "Running"},
            },
            {"f:metadata": {"f:finalizers": {'v:"a/b"': {}}}, "f:spec": {"f:affinity": {}}},
        ),
        (  # atomic maps and structs (selectors) are owned whole
            SVC,
            {"spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}},
            {
                "f:spec": {
                    "f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}}},
                    "f:selector": {},
                }
            },
        ),
    ],
)
def test_applied_field_sets(descriptor: Any, config: dict[str, Any], expected: Any) -> None:
    got = fm.apply({}, config, descriptor, manager="m", api_version="v1", now=NOW, has_status=True)
    assert got.obj["metadata"]["managedFields"][0]["fieldsV1"] == expected


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"spec": {"bogus": 1}}, ".spec.bogus: field not declared in schema"),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            ".spec.containers: associative list with keys has an element that omits key field "
            '"name" (and doesn\'t have default value)',
        ),
        (
            {"spec": {"containers": [c("a"), c("a")]}},
            '.spec.containers: duplicate entries for key [name="a"]',
        ),
        ({"metadata": {"managedFields": []}}, "metadata.managedFields must be nil"),
    ],
)
def test_bad_configurations(config: dict[str, Any], error: str) -> None:
    with pytest.raises(BadRequestError) as info:
        apply({}, config, "m")
    assert info.value.message == error


@pytest.mark.parametrize(
    "fields",
    [
        {"f:spec": {"f:replicas": {}}},
        {"f:metadata": {"f:labels": {".": {}, "f:a": {}}}},
        {"f:spec": {"f:containers": {'k:{"name":"x"}': {".": {}, "f:name": {}}}}},
    ],
)
def test_fields_round_trip(fields: dict[str, Any]) -> None:
    assert fm.set_to_fields(fm.fields_to_set(fields)) == fields


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("f:spec", "f:replicas"), ".spec.replicas"),
        (
            ("f:spec", "f:containers", 'k:{"name":"web"}', "f:image"),
            '.spec.containers[name="web"].image',
        ),
        (
            ("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}'),
            '.spec.ports[port=80,protocol="TCP"]',
        ),
        (("f:metadata", "f:finalizers", 'v:"a"'), '.metadata.finalizers[="a"]'),
    ],
)
def test_path_string(path: fm.Path, text: str) -> None:
    assert fm.path_string(path) == text


# ---- apply: merge, prune, ownership -----------------------------------------------------


def test_apply_merges_keyed_lists_and_maps() -> None:
    live = apply({}, pod(c("a", image="1"), x="1"), "alice").obj
    got = apply(live, pod(c("b", image="2"), y="2"), "bob").obj
    assert [k["name"] for k in got["spec"]["containers"]] == ["a", "b"]
    assert got["metadata"]["labels"] == {"x": "1", "y": "2"}


@pytest.mark.parametrize(
    ("second", "expected_containers", "expected_labels"),
    [
        # the label alice stops applying goes; the container she still applies stays
        (pod(c("a", image="1")), [c("a", image="1")], None),
        # a container she stops applying goes with everything in it
        (pod(c("b", image="2"), x="1"), [c("b", image="2")], {"x": "1"}),
        # a field inside an item she still applies goes
        (pod(c("a"), x="1"), [c("a")], {"x": "1"}),
    ],
)
def test_apply_prunes_what_the_manager_stopped_applying(
    second: dict[str, Any], expected_containers: Any, expected_labels: Any
) -> None:
    live = apply({}, pod(c("a", image="1"), x="1"), "alice").obj
    got = apply(live, second, "alice").obj
    assert got["spec"]["containers"] == expected_containers
    assert (got["metadata"].get("labels") or None) == expected_labels  # {} decodes as absent


def test_prune_keeps_fields_another_manager_owns() -> None:
    live = apply({}, pod(c("a", image="1"), x="1"), "alice").obj
    live = apply(live, pod(c("a", image="1"), x="1"), "bob").obj  # shared ownership
    got = apply(live, pod(), "alice").obj
    assert got["spec"]["containers"] == [c("a", image="1")]
    assert got["metadata"]["labels"] == {"x": "1"}
    managers = {e["manager"] for e in got["metadata"]["managedFields"]}
    assert managers == {"bob"}  # alice's set is empty now, so her entry goes


@pytest.mark.parametrize(
    ("force", "error", "owners_of_image"),
    [
        (
            False,
            'Apply failed with 1 conflict: conflict with "alice": .spec.containers[name="a"].image',
            None,
        ),
        (True, None, {"bob"}),
    ],
)
def test_conflict_and_force(force: bool, error: str | None, owners_of_image: Any) -> None:
    live = apply({}, pod(c("a", image="1")), "alice").obj
    if error is not None:
        with pytest.raises(fm.ApplyConflict) as info:
            apply(live, pod(c("a", image="2")), "bob", force=force)
        assert info.value.message == error
        assert info.value.causes == [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "alice"',
                "field": '.spec.containers[name="a"].image',
            }
        ]
        return
    got = apply(live, pod(c("a", image="2")), "bob", force=force).obj
    image = ("f:spec", "f:containers", 'k:{"name":"a"}', "f:image")
    owners = {
        e["manager"]
        for e in got["metadata"]["managedFields"]
        if image in fm.fields_to_set(e["fieldsV1"])
    }
    assert owners == owners_of_image
    assert got["spec"]["containers"][0]["image"] == "2"


def test_conflicts_with_several_managers_are_grouped() -> None:
    live = apply({}, pod(x="1"), "alice").obj
    live = apply(live, {"metadata": {"labels": {"y": "1"}}}, "carol").obj
    with pytest.raises(fm.ApplyConflict) as info:
        apply(live, pod(x="2", y="2"), "bob")
    assert info.value.message == (
        'Apply failed with 2 conflicts: conflicts with "alice":\n- .metadata.labels.x\n'
        'conflicts with "carol":\n- .metadata.labels.y'
    )


def test_unchanged_apply_keeps_the_time() -> None:
    live = apply({}, pod(c("a")), "alice").obj
    again = fm.apply(
        live, pod(c("a")), POD, manager="alice", api_version="v1", now=LATER, has_status=True
    )
    assert not again.changed
    assert again.obj["metadata"]["managedFields"][0]["time"] == NOW


# ---- update records -----------------------------------------------------------------------


def test_update_takes_changed_fields_from_other_managers() -> None:
    live = apply({}, pod(c("a", image="1"), x="1"), "alice").obj
    new = {**live, "metadata": {**live["metadata"], "labels": {"x": "2"}}}
    entries = fm.update(live, new, POD, manager="edit", api_version="v1", now=LATER)
    assert entries is not None
    by = {e["manager"]: e for e in entries}
    assert by["edit"]["operation"] == "Update"
    assert by["edit"]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:x": {}}}}
    assert "f:metadata" not in by["alice"]["fieldsV1"]
    assert [e["manager"] for e in entries] == ["alice", "edit"]  # Apply before Update


def test_update_that_changes_nothing_records_nothing() -> None:
    live = apply({}, pod(c("a")), "alice").obj
    assert fm.update(live, live, POD, manager="edit", api_version="v1", now=LATER) is None


def test_create_records_every_field_with_members_of_new_maps() -> None:
    entries = fm.update(
        {}, pod(c("a"), x="1"), POD, manager="kubectl-create", api_version="v1", now=NOW
    )
    assert entries is not None
    assert entries[0]["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:x": {}}},
        "f:spec": {"f:containers": {'k:{"name":"a"}': {".": {}, "f:name": {}}}},
    }


def test_status_updates_own_only_status() -> None:
    live = {"metadata": {"name": "p"}, "spec": {"nodeName": "n"}, "status": {}}
    new = {"metadata": {"name": "p"}, "spec": {"nodeName": "n"}, "status": {"phase": "Running"}}
    entries = fm.update(
        live,
        new,
        POD,
        manager="kubelet",
        api_version="v1",
        now=NOW,
        subresource="status",
        has_status=True,
    )
    assert entries is not None
    assert entries[0]["subresource"] == "status"
    assert entries[0]["fieldsV1"] == {"f:status": {"f:phase": {}}}


@pytest.mark.parametrize(
    ("agent", "manager"),
    [
        ("kubectl/v1.37.0 (linux/amd64) kubernetes/abc", "kubectl"),
        ("OpenAPI-Generator/31.0.0/python", "OpenAPI-Generator"),
        ("", ""),
        ("x" * 200, "x" * 128),
    ],
)
def test_manager_from_user_agent(agent: str, manager: str) -> None:
    assert fm.manager_from_user_agent(agent) == manager


def test_replica_set_selector_is_atomic() -> None:
    config = {"spec": {"selector": {"matchLabels": {"a": "b"}}, "replicas": 1}}
    got = fm.apply({}, config, RS, manager="m", api_version="apps/v1", now=NOW, has_status=True)
    assert got.obj["metadata"]["managedFields"][0]["fieldsV1"] == {
        "f:spec": {"f:replicas": {}, "f:selector": {}}
    }
