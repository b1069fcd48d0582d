"""The namespace controller: empties a namespace being deleted, then finalizes it.

Modelled on kube-controller-manager's pkg/controller/namespace. Deleting a namespace only marks
it (deletionTimestamp, phase Terminating; the apiserver refuses new content in it). Informer
handlers enqueue terminating namespaces, and a namespace again when one of its pods goes;
`sync(name)` is level-triggered: it asks which namespaced kinds the API serves (discovery,
controller/discovery.py; a failure is the NamespaceDeletionDiscoveryFailure condition and a
retry), deletes every object of each in the namespace (each with its kind's default options,
so pods get their grace period), lists what is left, and records the outcome in the
namespace's status conditions as Kubernetes does (NamespaceDeletionDiscoveryFailure,
NamespaceDeletionGroupVersionParsingFailure, NamespaceDeletionContentFailure,
NamespaceContentRemaining, NamespaceFinalizersRemaining). While content remains it looks again
after a short wait; once nothing is left it removes the `kubernetes` finalizer through
Finalize, and the apiserver removes the namespace. The work queue guarantees one sync per
namespace at a time; many namespaces sync concurrently on one event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from controller.api import Queue, Store
from controller.util import datetime_to_ts, is_terminating
from tinykube.clock import Clock
from tinykube.errors import ConflictError, NotFoundError, TinykubeError
from tinykube.kinds import KindInfo
from tinykube.v1 import namespace_pb2

log = logging.getLogger(__name__)

Namespace = namespace_pb2.Namespace

# The finalizer the apiserver puts on every namespace: this controller's to remove.
FINALIZER = "kubernetes"
# How soon a namespace whose content is still going away is looked at again (pods leave
# after their grace period; a pod's deletion also enqueues its namespace at once).
RECHECK_SECONDS = 2.0

DISCOVERY_FAILURE = "NamespaceDeletionDiscoveryFailure"
GV_PARSING_FAILURE = "NamespaceDeletionGroupVersionParsingFailure"
CONTENT_FAILURE = "NamespaceDeletionContentFailure"
CONTENT_REMAINING = "NamespaceContentRemaining"
FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"
CONDITION_TYPES = (
    DISCOVERY_FAILURE,
    GV_PARSING_FAILURE,
    CONTENT_FAILURE,
    CONTENT_REMAINING,
    FINALIZERS_REMAINING,
)
# Kubernetes' wording for each condition when nothing is wrong (status False).
OK_CONDITIONS: dict[str, tuple[str, str]] = {
    DISCOVERY_FAILURE: ("ResourcesDiscovered", "All resources successfully discovered"),
    GV_PARSING_FAILURE: ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
    CONTENT_FAILURE: (
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    CONTENT_REMAINING: ("ContentRemoved", "All content successfully removed"),
    FINALIZERS_REMAINING: ("ContentRemoved", "All content successfully removed"),
}


class ContentAPI(Protocol):
    """List and delete of one namespaced kind (tinykube.client.ResourceClient)."""

    async def list(self, namespace: str = "") -> Any: ...

    async def delete(self, name: str, namespace: str = "") -> Any: ...


class NamespaceAPI(Protocol):
    async def update_status(self, obj: Namespace) -> Namespace: ...

    async def finalize(self, obj: Namespace) -> Namespace: ...


def resource_name(info: KindInfo) -> str:
    """How Kubernetes' conditions name a resource: "pods.", "replicasets.apps"."""
    return f"{info.plural}.{info.group}"


def conditions_for(
    old: Sequence[namespace_pb2.NamespaceCondition],
    problems: Mapping[str, tuple[str, str]],
    now_ts: Any,
) -> list[namespace_pb2.NamespaceCondition]:
    """Every condition type, True with (reason, message) where `problems` names it, else the
    ok variant; lastTransitionTime moves only when a condition's status changes."""
    by_type = {c.type: c for c in old}
    out = [c for c in old if c.type not in CONDITION_TYPES]
    for type_ in CONDITION_TYPES:
        if type_ in problems:
            status, (reason, message) = "True", problems[type_]
        else:
            status, (reason, message) = "False", OK_CONDITIONS[type_]
        cond = namespace_pb2.NamespaceCondition(
            type=type_, status=status, reason=reason, message=message
        )
        previous = by_type.get(type_)
        if previous is not None and previous.status == status:
            cond.lastTransitionTime.CopyFrom(previous.lastTransitionTime)
        else:
            cond.lastTransitionTime.CopyFrom(now_ts)
        out.append(cond)
    return out


class NamespaceController:
    name = "namespace"

    def __init__(
        self,
        namespaces: NamespaceAPI,
        ns_store: Store[Namespace],
        contents: Sequence[tuple[KindInfo, ContentAPI]],
        queue: Queue,
        *,
        clock: Clock | None = None,
        recheck_seconds: float = RECHECK_SECONDS,
        discover: Callable[[], Awaitable[Sequence[tuple[KindInfo, ContentAPI]]]] | None = None,
    ) -> None:
        """`contents`: the kinds to empty; or `discover`, asked at every sync (the kinds the
        API serves now, custom ones included)."""
        self.discover = discover
        self.namespaces = namespaces
        self.ns_store = ns_store
        self.contents = contents
        self.queue = queue
        self.clock = clock or Clock()
        self.recheck_seconds = recheck_seconds

    # ---- informer handlers: cheap, synchronous, only enqueue ----

    def on_namespace_add(self, ns: Namespace) -> None:
        if is_terminating(ns):
            self.queue.add(ns.metadata.name)

    def on_namespace_update(self, old: Namespace, new: Namespace) -> None:
        self.on_namespace_add(new)

    def on_namespace_delete(self, ns: Namespace) -> None:
        return None

    def on_content_delete(self, obj: Any) -> None:
        """Something in a namespace went away: the namespace may be empty now."""
        ns = self.ns_store.get(obj.metadata.namespace)
        if ns is not None and is_terminating(ns):
            self.queue.add(ns.metadata.name)

    # ---- the reconcile ----

    async def sync(self, key: str) -> None:
        ns = self.ns_store.get(key)
        if ns is None or not is_terminating(ns) or FINALIZER not in ns.spec.finalizers:
            return
        contents = self.contents
        if self.discover is not None:
            try:
                contents = await self.discover()
            except TinykubeError as exc:
                # Nothing can be known empty: say so on the namespace and try again later.
                problem = ("DiscoveryFailed", f"Discovery failed for some groups: {exc.message}")
                await self._update_conditions(ns, {DISCOVERY_FAILURE: problem})
                raise
        remaining: dict[str, int] = {}
        by_finalizer: dict[str, int] = {}
        failures: list[str] = []
        for info, api in contents:
            try:
                left = await self._delete_all(info, api, key)
            except TinykubeError as exc:
                failures.append(f"{resource_name(info)}: {exc.message}")
                continue
            if left:
                remaining[resource_name(info)] = len(left)
            for obj in left:
                for fin in obj.metadata.finalizers:
                    by_finalizer[fin] = by_finalizer.get(fin, 0) + 1
        problems: dict[str, tuple[str, str]] = {}
        if failures:
            problems[CONTENT_FAILURE] = (
                "ContentDeletionFailed",
                f"Failed to delete all resource types, {len(failures)} remaining: "
                + ", ".join(sorted(failures)),
            )
        if remaining:
            listed = sorted(f"{r} has {n} resource instances" for r, n in remaining.items())
            problems[CONTENT_REMAINING] = (
                "SomeResourcesRemain",
                "Some resources are remaining: " + ", ".join(listed),
            )
        if by_finalizer:
            listed = sorted(f"{f} in {n} resource instances" for f, n in by_finalizer.items())
            problems[FINALIZERS_REMAINING] = (
                "SomeFinalizerRemain",
                "Some finalizers are remaining: " + ", ".join(listed),
            )
        ns = await self._update_conditions(ns, problems)
        if ns is None:
            return
        if failures:
            raise TinykubeError(f"namespace {key}: {problems[CONTENT_FAILURE][1]}")
        if remaining:
            self.queue.add_after(key, self.recheck_seconds)
            return
        await self._finalize(ns)

    async def _delete_all(self, info: KindInfo, api: ContentAPI, namespace: str) -> list[Any]:
        """Delete everything of `info`'s kind in `namespace`; what is still there after."""
        listed = await api.list(namespace)
        for obj in listed.items:
            if is_terminating(obj):
                continue  # already going (a pod in its grace period, or held by finalizers)
            try:
                await api.delete(obj.metadata.name, namespace)
            except NotFoundError:
                continue
        return list((await api.list(namespace)).items)

    async def _update_conditions(
        self, ns: Namespace, problems: Mapping[str, tuple[str, str]]
    ) -> Namespace | None:
        """Write the conditions if they changed; the namespace as stored, None if gone."""
        conditions = conditions_for(
            ns.status.conditions, problems, datetime_to_ts(self.clock.now())
        )
        if list(ns.status.conditions) == conditions:
            return ns
        updated = Namespace()
        updated.CopyFrom(ns)
        del updated.status.conditions[:]
        updated.status.conditions.extend(conditions)
        try:
            return await self.namespaces.update_status(updated)
        except NotFoundError:
            return None

    async def _finalize(self, ns: Namespace) -> None:
        finalized = Namespace()
        finalized.CopyFrom(ns)
        keep = [f for f in ns.spec.finalizers if f != FINALIZER]
        del finalized.spec.finalizers[:]
        finalized.spec.finalizers.extend(keep)
        try:
            await self.namespaces.finalize(finalized)
        except NotFoundError:
            return
        except ConflictError:
            # Changed since the informer's copy: look again with the next version.
            self.queue.add(ns.metadata.name)
            return
        log.info("namespace %s: content removed, finalized", ns.metadata.name)
