"""Fixtures shared by every test layer: a real etcd server per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tinykube.localetcd import EtcdServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """A real etcd on free ports, shared by the session; tests use distinct key prefixes."""
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.cleanup()
