"""Polling helper of the e2e tests: wait on a condition, never on a fixed sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tinykube.errors import TinykubeError


async def eventually(
    check: Callable[[], Awaitable[Any]],
    limit: float = 60.0,
    what: str = "condition",
    *,
    tolerate: tuple[type[BaseException], ...] = (TinykubeError,),
) -> Any:
    """Poll `check` until it returns something truthy; fail with its last value or error.

    Errors of the `tolerate` types count as "not yet" (an apiserver restarting, a port not
    listening yet); anything else propagates at once.
    """
    deadline = asyncio.get_running_loop().time() + limit
    last: Any = None
    while True:
        try:
            last = await check()
        except tolerate as exc:
            last = exc
        if last and not isinstance(last, BaseException):
            return last
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}; last: {last!r}")
        await asyncio.sleep(0.2)
