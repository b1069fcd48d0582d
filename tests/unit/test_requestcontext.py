"""The request context's dryRun parsing: Kubernetes' dryRun list, "All" its only value."""

from __future__ import annotations

import pytest

from apiserver.requestcontext import INTERNAL, RequestContext, dry_run_of
from tinykube.errors import InvalidError


def test_an_empty_list_is_no_dry_run_and_all_is_one() -> None:
    assert dry_run_of([]) is False
    assert dry_run_of(["All"]) is True
    assert dry_run_of(["All", "All"]) is True


def test_any_other_value_is_invalid_naming_its_index() -> None:
    with pytest.raises(InvalidError) as info:
        dry_run_of(["All", "Some"])
    assert info.value.message == 'dryRun[1]: Unsupported value: "Some": supported values: "All"'
    assert [c.field for c in info.value.causes] == ["dryRun[1]"]


def test_internal_is_the_apiservers_own_write() -> None:
    assert RequestContext(identity=None, dry_run=False, field_manager=None) == INTERNAL
