"""kube-apiserver's --advertise-address on tinykube's apiserver, and the launcher passing it
(with the address in the apiserver's serving certificate)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509

from apiserver.__main__ import parse_args
from tinykube.launcher import LocalCluster

TLS = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]


def test_default_is_the_bind_host() -> None:
    settings, _ = parse_args(TLS)
    assert settings.advertise_address == ""


def test_an_ip_is_taken() -> None:
    settings, _ = parse_args([*TLS, "--advertise-address", "10.112.255.1"])
    assert settings.advertise_address == "10.112.255.1"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("api.example", "--advertise-address 'api.example' is not an IP address"),
        ("0.0.0.0", "--advertise-address 0.0.0.0: must be a unicast address"),
    ],
)
def test_bad_addresses_are_refused(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args([*TLS, "--advertise-address", value])
    assert message in capsys.readouterr().err


def test_the_launcher_advertises_and_certifies_it(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, kubelets=(), advertise_address="10.112.255.1", etcd_endpoint="127.0.0.1:1"
    )
    cmd = cluster.command(cluster.components["apiserver"])
    assert cmd[cmd.index("--advertise-address") + 1] == "10.112.255.1"
    cluster.make_credentials()
    cert = x509.load_pem_x509_certificate(cluster.pki.paths("apiserver").cert.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.112.255.1") in sans.get_values_for_type(x509.IPAddress)
    plain = LocalCluster(tmp_path / "plain", kubelets=(), etcd_endpoint="127.0.0.1:1")
    assert "--advertise-address" not in plain.command(plain.components["apiserver"])
