"""tinykube/zerofields.py is what its generator makes of Kubernetes' schemas, and every field
it names exists in the protobuf message it is listed under."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pool

from tinykube import zerofields, zerofields_gen


def test_the_committed_table_is_what_the_generator_writes() -> None:
    pytest.importorskip("kubernetes_validate")
    table, required, _ = zerofields_gen.build_all()
    assert zerofields_gen.render(table, required) == zerofields_gen.OUT.read_text(), (
        "tinykube/zerofields.py is stale: run python -m tinykube.zerofields_gen"
    )


def test_the_fields_kubernetes_requires_are_modelled() -> None:
    pytest.importorskip("kubernetes_validate")
    _, unmodelled = zerofields_gen.build()
    # Every required field has a protobuf field.
    assert unmodelled == []


def _check(desc: Any, zeros: dict[str, Any]) -> None:
    fields = {f.json_name: f for f in desc.fields}
    for name, value in zeros.items():
        assert name in fields, f"{desc.full_name} has no field {name}"
        if isinstance(value, dict) and value and fields[name].message_type is not None:
            _check(fields[name].message_type, value)


@pytest.mark.parametrize("name", sorted(zerofields.ZERO_FIELDS))
def test_every_listed_field_exists(name: str) -> None:
    desc = descriptor_pool.Default().FindMessageTypeByName(name)
    _check(desc, zerofields.ZERO_FIELDS[name])
