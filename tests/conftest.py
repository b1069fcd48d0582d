"""Fixtures shared by every test layer: a real etcd server per test session."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tinykube.localetcd import EtcdServer

# Processes the tests start (`tinykube up`, components, the CLI, through console scripts too)
# run this checkout's code, not whichever tree an editable install of tinykube points at.
_REPO = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_REPO, os.environ.get("PYTHONPATH", "")) if p
)

# A test run started in the background by a script (`make test &`) inherits SIGINT ignored, and
# so would every process it starts: the tests that press Ctrl-C on the CLI or on `tinykube up`
# would wait in vain. Run as from a terminal, where SIGINT interrupts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """A real etcd on free ports, shared by the session; tests use distinct key prefixes."""
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def saved_garbage() -> Iterator[None]:
    """The cyclic collector off and every object it finds unreachable kept in gc.garbage (for
    tests that count what a failure leaves in reference cycles); restored after the test."""
    enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
