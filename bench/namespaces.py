"""The namespaces a benchmark writes into, created first as on Kubernetes (only default and the
kube-* namespaces exist in a new cluster). One helper, imported by path by the bench scripts."""

from __future__ import annotations

import contextlib

from tinykube.client import Client
from tinykube.errors import AlreadyExistsError
from tinykube.v1 import namespace_pb2


async def ensure_namespace(client: Client, name: str) -> None:
    """Create namespace `name` unless it exists."""
    ns = namespace_pb2.Namespace()
    ns.metadata.name = name
    with contextlib.suppress(AlreadyExistsError):
        await client.namespaces.create(ns)
