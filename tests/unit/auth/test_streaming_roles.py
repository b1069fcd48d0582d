"""RBAC's bootstrap roles and the streaming subresources, as kube's: edit and admin may
exec, attach and port-forward (create, and get for old clients), view may not."""

from __future__ import annotations

import pytest

from apiserver.auth.authorizer import Attributes
from apiserver.auth.bootstrap import _ADMIN_RULES, _EDIT_RULES, _VIEW_RULES
from apiserver.auth.rbac import Rule, rules_allow


@pytest.mark.parametrize("sub", ["exec", "attach", "portforward"])
@pytest.mark.parametrize("verb", ["create", "get"])
def test_edit_and_admin_stream_view_does_not(sub: str, verb: str) -> None:
    attrs = Attributes(
        verb=verb, resource="pods", api_group="", subresource=sub, namespace="ns", name="p"
    )
    edit, admin, view = (
        [Rule.of(r) for r in rules] for rules in (_EDIT_RULES, _ADMIN_RULES, _VIEW_RULES)
    )
    assert rules_allow(attrs, edit)
    assert rules_allow(attrs, admin)
    assert not rules_allow(attrs, view)
