"""Ports for components: `free_port` never hands out a port twice nor one the kernel gives to
outgoing connections, and a component whose port is taken all the same ends with one line
naming its flag (issue 28: two components were given one port and the apiserver died with a
traceback, failing a whole test cluster)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tinykube.localetcd import free_port

pytestmark = pytest.mark.integration


def test_free_ports_are_distinct_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    if low > 21_000:
        assert all(p < low for p in ports)
    for port in ports[:20]:  # each is bindable now
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


@pytest.fixture
def taken() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--bind-address", "127.0.0.1:{port}", "--rest-port", "-1"], "(--bind-address/--port)"),
        (["--port", "0", "--rest-port", "{port}"], "(--rest-port)"),
    ],
)
def test_an_apiserver_whose_port_is_taken_says_so_in_one_line(
    taken: int, flags: list[str], flag: str
) -> None:
    args = [a.replace("{port}", str(taken)) for a in flags]
    done = subprocess.run(
        [sys.executable, "-m", "apiserver", "--insecure", "--etcd-servers", "127.0.0.1:1", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"apiserver: cannot listen on 127.0.0.1:{taken} {flag}: "), last
    assert last.endswith("Address already in use"), last
    assert "Traceback" not in done.stderr
