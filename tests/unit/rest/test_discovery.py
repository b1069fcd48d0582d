"""Discovery documents: which resources are served where, legacy and aggregated shapes."""

from __future__ import annotations

import pytest

from apiserver.rest.discovery import RESOURCES, Discovery, wants_aggregated
from apiserver.rest.handlers import label_selector_text


def test_every_group_version_has_its_resources() -> None:
    d = Discovery()
    paths = [gv.path for gv in d.group_versions]
    assert paths == [
        "api/v1",
        "apis/apps/v1",
        "apis/events.k8s.io/v1",
        "apis/authentication.k8s.io/v1",
        "apis/authorization.k8s.io/v1",
        "apis/batch/v1",
        "apis/policy/v1",
        "apis/rbac.authorization.k8s.io/v1",
        # kube-aggregator's priorities: storage 16800 before coordination 16500
        "apis/storage.k8s.io/v1",
        "apis/admissionregistration.k8s.io/v1",
        "apis/apiextensions.k8s.io/v1",
        "apis/scheduling.k8s.io/v1",
        "apis/coordination.k8s.io/v1",
        "apis/discovery.k8s.io/v1",
        "apis/resource.k8s.io/v1",
    ]
    apps = d.lookup("apps", "v1")
    assert apps is not None
    assert [r.plural for r in apps.resources] == [
        "replicasets",
        "deployments",
        "daemonsets",
        "controllerrevisions",
        "statefulsets",
    ]


@pytest.mark.parametrize(
    ("plural", "namespaced", "stored", "shorts"),
    [
        ("pods", True, True, ("po",)),
        ("nodes", False, True, ("no",)),
        ("leases", True, True, ()),
        ("namespaces", False, True, ("ns",)),
        ("priorityclasses", False, True, ("pc",)),
        ("persistentvolumes", False, False, ("pv",)),
        ("csistoragecapacities", True, False, ()),
        ("deviceclasses", False, False, ()),
    ],
)
def test_resources(plural: str, namespaced: bool, stored: bool, shorts: tuple[str, ...]) -> None:
    r = next(r for r in RESOURCES if r.plural == plural)
    assert (r.namespaced, r.stored, r.short_names) == (namespaced, stored, shorts)


def test_legacy_resource_list_names_subresources() -> None:
    d = Discovery()
    core = d.lookup("", "v1")
    assert core is not None
    names = [r["name"] for r in d.resource_list(core)["resources"]]
    assert {"pods", "pods/binding", "pods/status", "nodes/status", "services/status"} <= set(names)
    assert {"namespaces", "namespaces/status", "namespaces/finalize"} <= set(names)
    assert "events/status" not in names


def test_aggregated_core_group_has_no_name() -> None:
    doc = Discovery().aggregated(core=True)
    assert doc["apiVersion"] == "apidiscovery.k8s.io/v2"
    assert doc["items"][0]["metadata"] == {}
    assert doc["items"][0]["versions"][0]["freshness"] == "Current"


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
         True),
        ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", False),
        ("application/json,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
         False),
        ("", False),
    ],
)  # fmt: skip
def test_wants_aggregated(accept: str, expected: bool) -> None:
    assert wants_aggregated(accept) is expected


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["y", "x"]}]},
         "env in (x,y)"),
        ({"matchExpressions": [{"key": "k", "operator": "DoesNotExist"}]}, "!k"),
        ({}, ""),
    ],
)  # fmt: skip
def test_scale_selector_text(selector: dict[str, object], text: str) -> None:
    assert label_selector_text(selector) == text
