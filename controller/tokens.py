"""The serviceaccount-token controller: fills kubernetes.io/service-account-token Secrets.

Modelled on kube-controller-manager's pkg/controller/serviceaccount/tokens_controller.go (the
"serviceaccount-token" controller, on when --service-account-private-key-file is given): a
Secret of type kubernetes.io/service-account-token names its ServiceAccount in the annotation
`kubernetes.io/service-account.name`. `sync("<ns>/<name>")`, level-triggered from the
informers' stores:
- the account is gone, or it is not the one the Secret's `kubernetes.io/service-account.uid`
  annotation names: the Secret is deleted (its token would authenticate nobody);
- otherwise the Secret gets what kube's controller writes, each only when missing or wrong:
  `data.token` (a legacy token: iss kubernetes/serviceaccount, no expiry, signed with the
  controller manager's key, the apiserver's --service-account-key-file verifying it),
  `data["ca.crt"]` (--root-ca-file) and `data.namespace`, and the uid annotation.
A ServiceAccount deleted or recreated queues the token Secrets that name it. Conflicts and
errors requeue with the work queue's back-off.

Concurrency: one event loop; the work queue never hands the same Secret to two workers.
"""

from __future__ import annotations

import logging
from typing import Any

from controller.api import Queue, Store
from tinykube.errors import NotFoundError, PreconditionFailedError
from tinykube.jwt import PrivateKey, encode, legacy_claims
from tinykube.protocols import ResourceAPI
from tinykube.v1 import secret_pb2, serviceaccount_pb2

log = logging.getLogger(__name__)

Secret = secret_pb2.Secret
ServiceAccount = serviceaccount_pb2.ServiceAccount

TOKEN_TYPE = "kubernetes.io/service-account-token"
NAME_ANNOTATION = "kubernetes.io/service-account.name"
UID_ANNOTATION = "kubernetes.io/service-account.uid"
TOKEN_KEY = "token"
CA_KEY = "ca.crt"
NAMESPACE_KEY = "namespace"


class TokensController:
    """Writes the token, CA and namespace of every service account token Secret."""

    def __init__(
        self,
        secrets: ResourceAPI[Secret],
        secret_store: Store[Secret],
        account_store: Store[ServiceAccount],
        queue: Queue,
        *,
        key: PrivateKey,
        root_ca: bytes = b"",
    ) -> None:
        self.secrets = secrets
        self.secret_store = secret_store
        self.account_store = account_store
        self.queue = queue
        self.key = key
        self.root_ca = root_ca

    # ---- informer handlers -------------------------------------------------------------------

    def on_secret(self, secret: Secret) -> None:
        if secret.type == TOKEN_TYPE:
            self.queue.add(f"{secret.metadata.namespace}/{secret.metadata.name}")

    def on_secret_update(self, old: Secret, new: Secret) -> None:
        self.on_secret(new)

    def on_account(self, sa: Any) -> None:
        """An account created, changed, deleted: the token Secrets naming it are looked at."""
        namespace, name = sa.metadata.namespace, sa.metadata.name
        for secret in self.secret_store.list():
            meta = secret.metadata
            if (
                secret.type == TOKEN_TYPE
                and meta.namespace == namespace
                and meta.annotations.get(NAME_ANNOTATION) == name
            ):
                self.queue.add(f"{namespace}/{meta.name}")

    def on_account_update(self, old: Any, new: Any) -> None:
        self.on_account(new)

    # ---- reconcile ---------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        secret = self.secret_store.get(key)
        if secret is None or secret.type != TOKEN_TYPE or secret.metadata.deletionTimestamp.seconds:
            return
        meta = secret.metadata
        namespace = meta.namespace
        account_name = meta.annotations.get(NAME_ANNOTATION, "")
        sa = self.account_store.get(f"{namespace}/{account_name}")
        wanted_uid = meta.annotations.get(UID_ANNOTATION, "")
        if sa is None or (wanted_uid and wanted_uid != sa.metadata.uid):
            try:
                await self.secrets.delete(meta.name, namespace, uid=meta.uid)
            except (NotFoundError, PreconditionFailedError):
                return
            log.info("token secret %s deleted: its serviceaccount %s is gone", key, account_name)
            return
        updated = Secret()
        updated.CopyFrom(secret)
        changed = False
        if updated.metadata.annotations.get(UID_ANNOTATION) != sa.metadata.uid:
            updated.metadata.annotations[UID_ANNOTATION] = sa.metadata.uid
            changed = True
        if TOKEN_KEY not in updated.data:
            claims = legacy_claims(namespace, account_name, sa.metadata.uid, meta.name)
            updated.data[TOKEN_KEY] = encode(claims, self.key).encode()
            changed = True
        if self.root_ca and updated.data.get(CA_KEY) != self.root_ca:
            updated.data[CA_KEY] = self.root_ca
            changed = True
        if updated.data.get(NAMESPACE_KEY) != namespace.encode():
            updated.data[NAMESPACE_KEY] = namespace.encode()
            changed = True
        if not changed:
            return
        await self.secrets.update(updated)
        log.info("token secret %s populated for serviceaccount %s", key, account_name)
