"""--etcd-servers as gRPC targets: TCP endpoints and a unix socket in etcd's client's forms."""

from __future__ import annotations

import pytest

from apiserver.settings import Settings, etcd_target, etcd_targets
from apiserver.storage import cluster_target, socket_server_name
from tinykube.localetcd import SOCKET_PATH_MAX, EtcdServer


@pytest.mark.parametrize(
    ("endpoint", "target"),
    [
        ("127.0.0.1:2379", "127.0.0.1:2379"),
        ("http://127.0.0.1:2379", "127.0.0.1:2379"),
        ("https://etcd-1:2379/", "etcd-1:2379"),
        # etcd's client (and so kube-apiserver): an absolute path, or one from the cwd
        ("unix:///run/etcd/localhost:2379", "unix:/run/etcd/localhost:2379"),
        ("unixs:///run/etcd/localhost:2379", "unix:/run/etcd/localhost:2379"),
        ("unix://localhost:2379", "unix:localhost:2379"),
    ],
)
def test_an_endpoint_as_a_grpc_target(endpoint: str, target: str) -> None:
    assert etcd_target(endpoint) == target


def test_a_socket_is_the_only_endpoint() -> None:
    assert etcd_targets(" unix:///run/etcd.sock ,") == ["unix:/run/etcd.sock"]
    with pytest.raises(ValueError, match="a unix socket endpoint must be the only one"):
        etcd_targets("unix:///run/etcd.sock,127.0.0.1:2379")
    with pytest.raises(ValueError, match="must be the only one"):
        cluster_target(["unix:/run/etcd.sock", "127.0.0.1:2379"])
    with pytest.raises(ValueError, match="names no socket path"):
        etcd_target("unix://")


@pytest.mark.parametrize(
    ("endpoints", "tls"),
    [
        ("http://127.0.0.1:2379", False),
        ("https://127.0.0.1:2379", True),
        ("unix:///run/etcd/localhost:2379", False),
        ("unixs:///run/etcd/localhost:2379", True),
    ],
)
def test_the_scheme_says_tls(endpoints: str, tls: bool) -> None:
    assert Settings(etcd_endpoints=endpoints).etcd_tls is tls


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("unix:/run/etcd/localhost:2379", "localhost"),
        ("unix:/run/etcd/etcd.example.com:0", "etcd.example.com"),
        ("unix:/run/etcd.sock", "etcd.sock"),
    ],
)
def test_the_name_a_socket_checks_etcds_certificate_against(target: str, name: str) -> None:
    assert socket_server_name(target) == name


def test_a_socket_path_too_long_for_an_address_moves_to_a_private_directory() -> None:
    short = EtcdServer("/var/lib/tinykube/etcd", client_port=2379, peer_port=2380, socket=True)
    assert short.socket_url == "unix:///var/lib/tinykube/etcd/localhost:2379"
    deep = "/home/someone/" + "d" * 90 + "/etcd"
    far = EtcdServer(deep, client_port=2379, peer_port=2380, socket=True)
    first = far.socket_path
    assert not first.startswith(deep)
    assert len(first) <= SOCKET_PATH_MAX
    assert first.endswith("/localhost:2379")
    assert far.socket_path == first  # named once: a restarted etcd is where the apiserver looks
