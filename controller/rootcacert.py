"""The root-ca-cert-publisher controller: every active namespace has ConfigMap kube-root-ca.crt.

Modelled on kube-controller-manager's pkg/controller/certificates/rootcacertpublisher: the
ConfigMap `kube-root-ca.crt` holds key `ca.crt`, the cluster CA (--root-ca-file), with kube's
`kubernetes.io/description` annotation, in every namespace. The work queue holds namespace
names; a namespace added or updated is queued, and so is the namespace of a kube-root-ca.crt
ConfigMap that was changed or deleted, so an edited or deleted one is put back. `sync` is
level-triggered from the informers' stores: a namespace that is gone or not Active is left
alone; a missing ConfigMap is created, one whose ca.crt differs (or that has other keys) is
updated. Pods read it through the projected kube-api-access volume (apiserver/serviceaccount.py).
"""

from __future__ import annotations

import logging
from typing import Any

from controller.api import Queue, Store
from controller.serviceaccount import NAMESPACE_ACTIVE, _terminating
from tinykube.errors import AlreadyExistsError, ConflictError, ForbiddenError, NotFoundError
from tinykube.protocols import ResourceAPI
from tinykube.v1 import configmap_pb2, namespace_pb2

log = logging.getLogger(__name__)

ConfigMap = configmap_pb2.ConfigMap
Namespace = namespace_pb2.Namespace

ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
ROOT_CA_KEY = "ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters."
)


class RootCACertPublisher:
    def __init__(
        self,
        config_maps: ResourceAPI[ConfigMap],
        namespaces: Store[Namespace],
        config_map_store: Store[ConfigMap],
        queue: Queue,
        *,
        root_ca: bytes,
    ) -> None:
        self.config_maps = config_maps
        self.namespaces = namespaces
        self.store = config_map_store
        self.queue = queue
        self.root_ca = root_ca.decode()

    # ---- informer handlers -------------------------------------------------------------------

    def on_namespace_add(self, ns: Namespace) -> None:
        self.queue.add(ns.metadata.name)

    def on_namespace_update(self, old: Namespace, new: Namespace) -> None:
        self.queue.add(new.metadata.name)

    def on_config_map(self, cm: Any) -> None:
        if cm.metadata.name == ROOT_CA_CONFIG_MAP:
            self.queue.add(cm.metadata.namespace)

    def on_config_map_update(self, old: Any, new: Any) -> None:
        self.on_config_map(new)

    # ---- reconcile ---------------------------------------------------------------------------

    def _wanted(self, namespace: str) -> ConfigMap:
        cm = ConfigMap()
        cm.metadata.name, cm.metadata.namespace = ROOT_CA_CONFIG_MAP, namespace
        cm.metadata.annotations[DESCRIPTION_ANNOTATION] = DESCRIPTION
        cm.data[ROOT_CA_KEY] = self.root_ca
        return cm

    async def sync(self, namespace: str) -> None:
        ns = self.namespaces.get(namespace)
        if ns is None or ns.status.phase != NAMESPACE_ACTIVE:
            return
        current = self.store.get(f"{namespace}/{ROOT_CA_CONFIG_MAP}")
        try:
            if current is None:
                try:
                    await self.config_maps.create(self._wanted(namespace))
                except AlreadyExistsError:
                    return
                log.info("configmap %s/%s created", namespace, ROOT_CA_CONFIG_MAP)
                return
            if (
                dict(current.data) == {ROOT_CA_KEY: self.root_ca}
                and not current.binaryData
                and current.metadata.annotations.get(DESCRIPTION_ANNOTATION) == DESCRIPTION
            ):
                return
            updated = ConfigMap()
            updated.CopyFrom(current)
            updated.data.clear()
            updated.binaryData.clear()
            updated.data[ROOT_CA_KEY] = self.root_ca
            updated.metadata.annotations[DESCRIPTION_ANNOTATION] = DESCRIPTION
            try:
                await self.config_maps.update(updated)
            except (ConflictError, NotFoundError):
                self.queue.add(namespace)
        except ForbiddenError as exc:
            if _terminating(exc):
                return
            raise
