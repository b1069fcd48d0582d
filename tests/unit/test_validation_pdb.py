"""PodDisruptionBudget validation and defaults: Kubernetes' ValidatePodDisruptionBudget wording."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.registry import strategy_for
from tinykube.kinds import POD_DISRUPTION_BUDGET as PDB
from tinykube.v1 import poddisruptionbudget_pb2 as pdb_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PERCENT = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
    "'93%', regex used for validation is '[0-9]+%')"
)


def make_pdb(spec: dict[str, Any]) -> pdb_pb2.PodDisruptionBudget:
    pdb = json_format.ParseDict(
        {"metadata": {"name": "web", "namespace": "default"}, "spec": spec},
        pdb_pb2.PodDisruptionBudget(),
    )
    strategy_for(PDB).prepare_for_create(pdb, NOW)
    return pdb


SELECTOR = {"matchLabels": {"app": "web"}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"minAvailable": 2, "selector": SELECTOR}, []),
        ({"minAvailable": "50%", "selector": SELECTOR}, []),
        ({"maxUnavailable": 0, "selector": SELECTOR}, []),
        ({"maxUnavailable": "100%", "selector": SELECTOR}, []),
        # Kubernetes allows neither bound (the budget then protects every selected pod).
        ({"selector": SELECTOR}, []),
        ({"minAvailable": None, "selector": SELECTOR}, []),
        (
            {"minAvailable": 1, "maxUnavailable": "10%", "selector": SELECTOR},
            [
                'spec: Invalid value: {minAvailable: 1, maxUnavailable: "10%"}: minAvailable '
                "and maxUnavailable cannot be both set"
            ],
        ),
        (
            {"minAvailable": -1},
            ["spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"],
        ),
        (
            {"maxUnavailable": "150%"},
            ['spec.maxUnavailable: Invalid value: "150%": must not be greater than 100%'],
        ),
        ({"minAvailable": "half"}, [f'spec.minAvailable: Invalid value: "half": {PERCENT}']),
        # An IntOrString's integer is an int32: a gRPC client's 1e300 was stored.
        ({"maxUnavailable": 2147483647, "selector": SELECTOR}, []),
        (
            {"minAvailable": 2147483648},
            [
                "spec.minAvailable: Invalid value: 2147483648: must be less than or equal to "
                "2147483647"
            ],
        ),
        (
            {"minAvailable": 1.5},
            ["spec.minAvailable: Invalid value: 1.5: must be an integer or percentage (e.g '5%')"],
        ),
        (
            {"minAvailable": 1, "unhealthyPodEvictionPolicy": "Sometimes"},
            [
                'spec.unhealthyPodEvictionPolicy: Unsupported value: "Sometimes": supported '
                'values: "AlwaysAllow", "IfHealthyBudget"'
            ],
        ),
        ({"minAvailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}, []),
        (
            {"minAvailable": 1, "selector": {"matchLabels": {"bad key!": "x"}}},
            [
                'spec.selector.matchLabels: Invalid value: "bad key!": name part must consist '
                "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ],
        ),
    ],
)
def test_pdb_spec_validation(spec: dict[str, Any], expected: list[str]) -> None:
    assert [str(e) for e in strategy_for(PDB).validate_create(make_pdb(spec))] == expected


def test_create_drops_the_clients_status() -> None:
    pdb = make_pdb({"minAvailable": 1})
    pdb.status.disruptionsAllowed = 5
    strategy_for(PDB).prepare_for_create(pdb, NOW)
    assert not pdb.HasField("status")
    assert pdb.apiVersion == "policy/v1"
    assert pdb.metadata.generation == 1


def test_spec_change_bumps_generation_and_keeps_status() -> None:
    old = make_pdb({"minAvailable": 1})
    old.status.disruptionsAllowed = 1
    new = make_pdb({"minAvailable": 2})
    strategy_for(PDB).prepare_for_update(new, old)
    assert new.metadata.generation == 2
    assert new.status.disruptionsAllowed == 1


def test_status_counts_are_not_negative() -> None:
    pdb = make_pdb({"minAvailable": 1})
    pdb.status.disruptionsAllowed = -1
    assert [str(e) for e in strategy_for(PDB).validate_status_update(pdb, pdb)] == [
        "status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0"
    ]
