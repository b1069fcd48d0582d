"""DefaultBinder (Bind): commits the placement through the apiserver's Bind call.

The only asynchronous plugin; a failed bind is an error status, and the failure's type is
kept in the cycle state so the scheduler can tell "someone else bound it" (AlreadyExists) from
a failure. The type, not the error: the error's traceback holds this plugin's frame, which
holds the cycle state, so keeping the error there would make a reference cycle per failed bind.
"""

from __future__ import annotations

from typing import ClassVar

from scheduler.cache import (
    EventKind,
)
from scheduler.framework import (
    SUCCESS,
    CycleState,
    Handle,
    Status,
)
from scheduler.podinfo import PodInfo
from tinykube.errors import AlreadyExistsError, TinykubeError


class DefaultBinder:
    name: ClassVar[str] = "DefaultBinder"
    events: ClassVar[frozenset[EventKind]] = frozenset()
    node_static: ClassVar[bool] = False
    ERROR_KEY = "DefaultBinder/error"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        if self.handle.bind is None:
            return Status.error("no binder configured", plugin=self.name)
        try:
            await self.handle.bind(pod, node)
        except TinykubeError as exc:
            state.write(self.ERROR_KEY, type(exc))
            return Status.error(str(exc), plugin=self.name)
        return SUCCESS


def bind_already_exists(state: CycleState) -> bool:
    failure = state.read(DefaultBinder.ERROR_KEY)
    return isinstance(failure, type) and issubclass(failure, AlreadyExistsError)
