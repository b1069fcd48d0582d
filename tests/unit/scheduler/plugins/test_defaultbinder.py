"""DefaultBinder: the bind call's outcome as a Status, and what the cycle state keeps of it."""

from __future__ import annotations

import gc

import pytest

from scheduler.framework import CycleState, Handle
from scheduler.plugins.defaultbinder import DefaultBinder, bind_already_exists
from scheduler.podinfo import PodInfo
from tests.unit.scheduler.builders import PodBuilder
from tinykube.errors import AlreadyExistsError, TinykubeError, UnavailableError


def binder_failing_with(error: type[TinykubeError] | None) -> DefaultBinder:
    async def bind(pod: PodInfo, node: str) -> None:
        if error is not None:
            raise error(f"bind of {pod.key} to {node} failed")  # a fresh error, as a client's

    return DefaultBinder(Handle(bind=bind))


@pytest.mark.parametrize(
    ("error", "ok", "already_bound"),
    [
        (None, True, False),
        (AlreadyExistsError, False, True),
        (UnavailableError, False, False),
    ],
)
async def test_bind_outcomes(
    error: type[TinykubeError] | None, ok: bool, already_bound: bool
) -> None:
    state = CycleState()
    st = await binder_failing_with(error).bind(state, PodBuilder("p").info(), "n1")
    assert st.ok is ok
    assert bind_already_exists(state) is already_bound


async def test_a_failed_bind_leaves_no_reference_cycle() -> None:
    # The error's traceback holds the plugin's frame, which holds the cycle state: the state
    # must not keep the error.
    binder = binder_failing_with(UnavailableError)
    pod = PodBuilder("p").info()
    enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            assert not (await binder.bind(CycleState(), pod, "n1")).ok
        gc.collect()
        assert [o for o in gc.garbage if isinstance(o, BaseException)] == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
