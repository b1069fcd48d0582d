"""The serviceaccount controller: every active namespace has a ServiceAccount named "default".

Modelled on kube-controller-manager's pkg/controller/serviceaccount (ServiceAccountsController,
the "serviceaccount" controller): the work queue holds namespace names; a namespace added or
updated is queued, and so is the namespace of a deleted ServiceAccount, so a deleted `default`
is created again. `sync(namespace)` is level-triggered from the informers' stores: a namespace
that is gone or not Active is left alone; otherwise each account to ensure that the
ServiceAccount store lacks is created (an AlreadyExists answer is success, and a namespace
that began terminating meanwhile is not an error). The ServiceAccount admission plugin
refuses pods until their namespace's `default` exists (it looks for it for about a second), so
this is what lets pods into a new namespace.

Concurrency: one event loop; the work queue never hands the same namespace to two workers.
"""

from __future__ import annotations

import logging
from typing import Any

from controller.api import Queue, Store
from tinykube.errors import AlreadyExistsError, ForbiddenError
from tinykube.protocols import ResourceAPI
from tinykube.v1 import namespace_pb2, serviceaccount_pb2

log = logging.getLogger(__name__)

ServiceAccount = serviceaccount_pb2.ServiceAccount
Namespace = namespace_pb2.Namespace

# kube's DefaultServiceAccountsControllerOptions: the one account every namespace gets.
DEFAULT_ACCOUNTS = ("default",)
NAMESPACE_ACTIVE = "Active"


def _terminating(exc: ForbiddenError) -> bool:
    """Whether a create was refused because the namespace is being terminated (kube's
    NamespaceTerminatingCause; the cause does not survive gRPC, the message does)."""
    if any(reason == "NamespaceTerminating" for reason, _, _ in exc.causes):
        return True
    return "because it is being terminated" in exc.message


class ServiceAccountsController:
    """Creates the accounts every active namespace must have, and re-creates them."""

    def __init__(
        self,
        accounts: ResourceAPI[ServiceAccount],
        namespaces: Store[Namespace],
        account_store: Store[ServiceAccount],
        queue: Queue,
        *,
        names: tuple[str, ...] = DEFAULT_ACCOUNTS,
    ) -> None:
        self.accounts = accounts
        self.namespaces = namespaces
        self.account_store = account_store
        self.queue = queue
        self.names = names

    # ---- informer handlers -------------------------------------------------------------------

    def on_namespace_add(self, ns: Namespace) -> None:
        self.queue.add(ns.metadata.name)

    def on_namespace_update(self, old: Namespace, new: Namespace) -> None:
        self.queue.add(new.metadata.name)

    def on_account_delete(self, sa: Any) -> None:
        self.queue.add(sa.metadata.namespace)

    # ---- reconcile ---------------------------------------------------------------------------

    async def sync(self, namespace: str) -> None:
        ns = self.namespaces.get(namespace)
        if ns is None or ns.status.phase != NAMESPACE_ACTIVE:
            return
        for name in self.names:
            if self.account_store.get(f"{namespace}/{name}") is not None:
                continue
            sa = ServiceAccount()
            sa.metadata.name, sa.metadata.namespace = name, namespace
            try:
                await self.accounts.create(sa)
            except AlreadyExistsError:
                continue
            except ForbiddenError as exc:
                if _terminating(exc):
                    return
                raise
            log.info("serviceaccount %s/%s created", namespace, name)
