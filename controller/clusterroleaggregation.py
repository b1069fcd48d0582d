"""The clusterrole-aggregation controller: an aggregated ClusterRole's rules are the union of the
rules of the ClusterRoles its aggregationRule selects.

Modelled on kube-controller-manager's pkg/controller/clusterroleaggregation. For a ClusterRole
with an aggregationRule, `aggregated_rules` walks its clusterRoleSelectors in order; for each,
the ClusterRoles whose labels match (sorted by name, the role itself skipped) contribute their
rules in order, each rule once (an equal rule already gathered is not added again). When the
result differs from the role's rules, the role is updated with exactly that list; roles without
an aggregationRule are never touched. So `admin`, `edit` and `view` follow the
`system:aggregate-to-*` roles and any ClusterRole a user labels
`rbac.authorization.k8s.io/aggregate-to-view: "true"`, and chains (view into edit into admin)
settle in a few passes.

Like kube's, any ClusterRole event enqueues every aggregated ClusterRole (the dependency graph
is not tracked; the set is small), and `sync(name)` is level-triggered from the informer's
store. The update carries the resourceVersion read, so a concurrent writer makes it fail with a
conflict and the key is retried with backoff. The controller needs `escalate` on clusterroles
(its bootstrap role grants it): it writes rules its identity may not hold.

Concurrency: one event loop; the work queue never hands the same key to two workers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from controller.api import Queue, Store
from controller.util import key_of, selector_matches
from tinykube.protocols import ResourceAPI
from tinykube.v1 import rbac_pb2

log = logging.getLogger(__name__)

ClusterRole = rbac_pb2.ClusterRole


def aggregated_rules(role: ClusterRole, roles: Iterable[ClusterRole]) -> list[rbac_pb2.PolicyRule]:
    """The rules `role`'s aggregationRule gathers from `roles` (kube's order, deduplicated)."""
    by_name = sorted(roles, key=lambda r: r.metadata.name)
    out: list[rbac_pb2.PolicyRule] = []
    for selector in role.aggregationRule.clusterRoleSelectors:
        for other in by_name:
            if other.metadata.name == role.metadata.name:
                continue
            if not selector_matches(selector, other.metadata.labels):
                continue
            for rule in other.rules:
                if rule not in out:
                    out.append(rule)
    return out


class ClusterRoleAggregationController:
    """Keeps aggregated ClusterRoles' rules equal to what their selectors gather."""

    def __init__(
        self, roles: ResourceAPI[ClusterRole], store: Store[ClusterRole], queue: Queue
    ) -> None:
        self.roles = roles
        self.store = store
        self.queue = queue

    # ---- informer handlers: every change may matter to every aggregated role ---------------

    def enqueue_all(self) -> None:
        for role in self.store.list():
            if role.HasField("aggregationRule"):
                self.queue.add(key_of(role))

    def on_add(self, obj: Any) -> None:
        self.enqueue_all()

    def on_update(self, old: Any, new: Any) -> None:
        self.enqueue_all()

    def on_delete(self, obj: Any) -> None:
        self.enqueue_all()

    # ---- reconcile ---------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        role = self.store.get(key)
        if role is None or not role.HasField("aggregationRule"):
            return
        rules = aggregated_rules(role, self.store.list())
        if rules == list(role.rules):
            return
        updated = ClusterRole()
        updated.CopyFrom(role)
        del updated.rules[:]
        updated.rules.extend(rules)
        await self.roles.update(updated)
        log.info("clusterrole %s aggregated: %d rules", role.metadata.name, len(rules))
