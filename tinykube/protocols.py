"""Structural views of the typed client, for code that wants a narrow, fakeable dependency.

`tinykube.client.ResourceClient` satisfies these; the controller manager and the kubelet type
their reconcilers against them so unit tests can pass in-memory fakes instead of a channel.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

T = TypeVar("T")


class ResourceAPI(Protocol[T]):
    """The write verbs of one kind (reads come from informers' stores)."""

    async def create(self, obj: T) -> T: ...

    async def get(self, name: str, namespace: str = "") -> T: ...

    async def update(self, obj: T) -> T: ...

    async def delete(
        self,
        name: str,
        namespace: str = "",
        *,
        grace_period_seconds: int | None = None,
        uid: str = "",
        resource_version: str = "",
        propagation_policy: str = "",
    ) -> T: ...


class StatusResourceAPI(ResourceAPI[T], Protocol[T]):
    """A kind with a status subresource."""

    async def update_status(self, obj: T) -> T: ...


R = TypeVar("R")


def pipelined(api: R) -> R:
    """`api` with write streams of its own (`ResourceClient.pipelined()`: its Create, Update and
    UpdateStatus go as messages of streams no other caller shares, tinykube/writestream.py),
    or `api` itself where it has none (an in-memory fake)."""
    make = getattr(api, "pipelined", None)
    return make() if make is not None else api
