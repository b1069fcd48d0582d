"""kubeconfig files as kubectl reads them: written with embedded credentials, read back through
the current context, merged from $KUBECONFIG, relative paths, tokens, and clear errors."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from tinykube.kubeconfig import GRPC_EXTENSION, KubeconfigError, load, write_kubeconfig


def _doc(path: Path, **cluster: Any) -> dict[str, Any]:
    user = cluster.pop("user", {})
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://h:8080", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(doc))
    return doc


def _grpc(extension: Any) -> dict[str, Any]:
    return {"name": GRPC_EXTENSION, "extension": extension}


def _cluster(extra: dict[str, Any]) -> dict[str, Any]:
    return {"name": "c", "cluster": {"server": "https://h", **extra}}


def test_written_credentials_are_read_back(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        "https://127.0.0.1:8080",
        user="kubernetes-admin",
        ca=b"CA",
        cert=b"CERT",
        key=b"KEY",
        grpc_server="127.0.0.1:6443",
    )
    assert path.stat().st_mode & 0o777 == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc["clusters"][0]["cluster"]["extensions"] == [
        {"name": GRPC_EXTENSION, "extension": {"server": "127.0.0.1:6443"}}
    ]
    config = load(path)
    assert (config.server, config.grpc_server, config.namespace) == (
        "https://127.0.0.1:8080",
        "127.0.0.1:6443",
        "default",
    )
    creds = config.credentials
    assert (creds.ca, creds.cert, creds.key, creds.insecure) == (b"CA", b"CERT", b"KEY", False)


@pytest.mark.parametrize(
    ("cluster", "grpc_server", "insecure"),
    [
        # no extension: the server URL's own host:port
        ({}, "h:8080", False),
        ({"server": "https://h"}, "h:443", False),
        ({"server": "http://h:8080"}, "h:8080", True),  # http: plaintext, as kubectl
        ({"server": "https://[::1]:6443"}, "[::1]:6443", False),
        # the extension: one address, several in `server`, a `servers` list, or both
        ({"extensions": [_grpc({"server": "g:1"})]}, "g:1", False),
        ({"extensions": [_grpc({"server": "g:1, g:2"})]}, "g:1,g:2", False),
        ({"extensions": [_grpc({"servers": ["g:1", "g:2", "g:1"]})]}, "g:1,g:2", False),
        ({"extensions": [_grpc({"server": "g:0", "servers": ["g:1"]})]}, "g:0,g:1", False),
        ({"extensions": [_grpc(None)]}, "h:8080", False),
    ],
)
def test_the_grpc_address_and_plaintext(
    tmp_path: Path, cluster: dict[str, Any], grpc_server: str, insecure: bool
) -> None:
    _doc(tmp_path / "k", **cluster)
    config = load(tmp_path / "k")
    assert (config.grpc_server, config.credentials.insecure) == (grpc_server, insecure)


@pytest.mark.parametrize(
    ("written", "extension"),
    [
        ("g:1", {"server": "g:1"}),
        ("g:1,g:2", {"servers": ["g:1", "g:2"]}),
        (["g:1", "g:2"], {"servers": ["g:1", "g:2"]}),
    ],
)
def test_several_grpc_servers_are_written_as_a_list_and_read_back(
    tmp_path: Path, written: str | list[str], extension: dict[str, Any]
) -> None:
    write_kubeconfig(tmp_path / "k", "https://h:6443", grpc_server=written)
    doc = yaml.safe_load((tmp_path / "k").read_text())
    assert doc["clusters"][0]["cluster"]["extensions"] == [_grpc(extension)]
    config = load(tmp_path / "k")
    assert config.grpc_servers == tuple(extension.get("servers") or [extension["server"]])
    assert config.grpc_server == ",".join(config.grpc_servers)


def test_file_references_are_relative_to_the_kubeconfig_and_tokens_are_read(
    tmp_path: Path,
) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(b"CA")
    (tmp_path / "token").write_text("tok\n")
    _doc(
        tmp_path / "k",
        **{"certificate-authority": "pki/ca.crt", "tls-server-name": "kubernetes"},
        user={"tokenFile": "token"},
    )
    creds = load(tmp_path / "k").credentials
    assert (creds.ca, creds.token, creds.server_name, creds.has_client_cert) == (
        b"CA",
        "tok",
        "kubernetes",
        False,
    )
    assert creds.headers() == {"Authorization": "Bearer tok"}


def test_kubeconfig_env_files_merge_first_wins(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://first:1"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    second = tmp_path / "second"
    second.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://second:2"}}],
                "users": [{"name": "u", "user": {"token": "t2"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "nobody"}}],
                "current-context": "x",
            }
        )
    )
    env = {"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"}
    config = load(env=env)
    # the cluster and context of the first file, the current-context and user of the second
    assert (config.server, config.context, config.credentials.token) == (
        "https://first:1",
        "x",
        "t2",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"current-context": ""}, "no current-context is set"),
        ({"current-context": "nope"}, 'context "nope" does not exist'),
        ({"clusters": []}, 'cluster "c" does not exist'),
        ({"users": [{"name": "u", "user": {"client-key-data": "S0VZ"}}]}, "must be given together"),
        ({"clusters": [_cluster({"certificate-authority-data": "@@"})]}, "data: not base64"),
        ({"clusters": [_cluster({"certificate-authority": "/no/such"})]}, "'/no/such': No such"),
        ({"clusters": [_cluster({"extensions": [_grpc(["g:1"])]})]}, "tinykube.io/grpc: not a map"),
        ({"clusters": [_cluster({"extensions": [_grpc({"servers": [1]})]})]}, "must be a list"),
    ],
)  # fmt: skip
def test_unusable_kubeconfigs_name_the_problem(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    doc = _doc(tmp_path / "k")
    doc.update(change)
    (tmp_path / "k").write_text(yaml.safe_dump(doc))
    with pytest.raises(KubeconfigError, match=message) as info:
        load(tmp_path / "k")
    assert str(tmp_path / "k") in str(info.value)


def test_no_kubeconfig_at_all_is_an_error_naming_the_flag() -> None:
    with pytest.raises(KubeconfigError, match="--kubeconfig"):
        load(env={})


def test_embedded_data_is_base64(tmp_path: Path) -> None:
    _doc(
        tmp_path / "k",
        user={
            "client-certificate-data": base64.b64encode(b"C").decode(),
            "client-key-data": base64.b64encode(b"K").decode(),
        },
    )
    creds = load(tmp_path / "k").credentials
    assert (creds.cert, creds.key, creds.has_client_cert) == (b"C", b"K", True)
