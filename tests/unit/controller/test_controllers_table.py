"""The controller table and kube's --controllers flag (`*`, `foo`, `-foo`, names and aliases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.controllers import (
    CONTROLLERS,
    ControllerDescriptor,
    Running,
    canonical_names,
    check_selection,
    enabled_controllers,
)
from controller.settings import Settings


def names(selection: tuple[str, ...]) -> set[str]:
    return {d.name for d in enabled_controllers(selection)}


ALL = {d.name for d in CONTROLLERS}


def test_the_table_uses_kubes_names_and_every_name_is_unique() -> None:
    assert {
        "replicaset-controller",
        "deployment-controller",
        "daemonset-controller",
        "job-controller",
        "garbage-collector-controller",
        "namespace-controller",
        "endpoints-controller",
        "endpointslice-controller",
        "endpointslice-mirroring-controller",
        "disruption-controller",
        "serviceaccount-controller",
        "serviceaccount-token-controller",
        "ttl-after-finished-controller",
        "clusterrole-aggregation-controller",
        "node-lifecycle-controller",
        "node-ipam-controller",
        "service-lb-controller",
        "root-ca-certificate-publisher-controller",
    } == ALL
    known = canonical_names()  # raises on a name used twice
    assert known["garbagecollector"] == "garbage-collector-controller"
    assert known["nodelifecycle"] == "node-lifecycle-controller"
    assert known["endpoints"] == known["endpoint"] == "endpoints-controller"


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (("*",), ALL),
        ((), set()),
        (("replicaset",), {"replicaset-controller"}),
        (("job-controller", "deployment"), {"job-controller", "deployment-controller"}),
        (("*", "-garbagecollector"), ALL - {"garbage-collector-controller"}),
        (("-node-lifecycle-controller", "*"), ALL - {"node-lifecycle-controller"}),
        # the first entry naming a controller decides
        (("replicaset", "-replicaset"), {"replicaset-controller"}),
        (("-replicaset", "replicaset-controller", "*"), ALL - {"replicaset-controller"}),
        (("-replicaset",), set()),
    ],
)
def test_which_controllers_a_selection_enables(
    selection: tuple[str, ...], expected: set[str]
) -> None:
    assert names(selection) == expected


def test_star_leaves_disabled_by_default_controllers_off_unless_named() -> None:
    async def init(ctx: object) -> Running | None:
        return None

    table = (
        ControllerDescriptor("a-controller", ("a",), init),
        ControllerDescriptor("b-controller", ("b",), init, disabled_by_default=True),
    )
    assert [d.name for d in enabled_controllers(("*",), table)] == ["a-controller"]
    assert [d.name for d in enabled_controllers(("*", "b"), table)] == [
        "a-controller",
        "b-controller",
    ]


def test_unknown_names_are_refused_naming_the_entry() -> None:
    check_selection(("*", "-job", "node-ipam-controller"))
    for bad in ("nope", "-nope", "**"):
        with pytest.raises(ValueError) as info:
            check_selection(("*", bad))
        assert f'"{bad}" is not in the list of known controllers: ' in str(info.value)


def test_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert Settings.from_args([]).controllers == ("*",)
    s = Settings.from_args(["--controllers", "*,-garbagecollector, -nodeipam"])
    assert s.controllers == ("*", "-garbagecollector", "-nodeipam")
    assert names(s.controllers) == ALL - {"garbage-collector-controller", "node-ipam-controller"}
    with pytest.raises(SystemExit):
        Settings.from_args(["--controllers", "*,-garbage-collection"])
    assert '--controllers: "-garbage-collection" is not in the list' in capsys.readouterr().err


def test_the_docs_list_every_controller_with_its_aliases() -> None:
    page = (Path(__file__).parents[3] / "docs" / "controller-manager.md").read_text()
    rows = {
        cells[0]: cells[1]
        for line in page.splitlines()
        if line.startswith("| ") and line.count("|") == 4
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    for d in CONTROLLERS:
        assert rows.get(d.name) == ", ".join(d.aliases), d.name
