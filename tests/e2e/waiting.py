"""Polling helper of the e2e tests: wait on a condition, never on a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from tinykube.errors import TinykubeError

T = TypeVar("T")


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


def until(check: Callable[[], T], what: str, limit: float = 60.0, pause: float = 0.3) -> T:
    """The blocking form, for checks that run a command (a kubectl round trip) each time."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {limit:g}s waiting for {what}; last: {value!r}")
        time.sleep(pause)
