"""The namespaces a benchmark writes into, created first as on Kubernetes (only default and the
kube-* namespaces exist in a new cluster), with their default ServiceAccount, which the
ServiceAccount admission needs before it admits a pod there. One helper, imported by path by
the bench scripts."""

from __future__ import annotations

import contextlib

from tinykube.client import Client
from tinykube.errors import AlreadyExistsError
from tinykube.v1 import namespace_pb2, serviceaccount_pb2


async def ensure_namespace(client: Client, name: str) -> None:
    """Create namespace `name` unless it exists, and its default ServiceAccount: the controller
    manager makes it too, but a benchmark that creates pods at once (or runs no controller
    manager) must not race it."""
    ns = namespace_pb2.Namespace()
    ns.metadata.name = name
    with contextlib.suppress(AlreadyExistsError):
        await client.namespaces.create(ns)
    sa = serviceaccount_pb2.ServiceAccount()
    sa.metadata.name, sa.metadata.namespace = "default", name
    with contextlib.suppress(AlreadyExistsError):
        await client.service_accounts.create(sa)
