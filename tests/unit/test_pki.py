"""The cluster PKI: what it issues, what it reuses across restarts, and when it re-issues."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tinykube.cli.certs import write_bundles
from tinykube.pki import (
    LEAF_VALIDITY,
    PKI,
    CertSpec,
    PKIError,
    cluster_specs,
    identity,
)

NODE = CertSpec("kubelet-n1", "system:node:n1", ("system:nodes",), client=True)
SERVING = CertSpec(
    "apiserver",
    "kube-apiserver",
    dns_names=("localhost",),
    ip_addresses=("127.0.0.1",),
    server=True,
)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_issues_a_ca_and_leaves_it_signed(tmp_path: Path) -> None:
    pki = PKI(tmp_path)
    paths = pki.ensure(NODE)
    ca = load(pki.ca_cert_path)
    cert = load(paths.cert)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert identity(cert) == ("system:node:n1", ("system:nodes",))
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(pki.ca_key_path.stat().st_mode) == 0o600


def test_serving_certificate_names(tmp_path: Path) -> None:
    cert = load(PKI(tmp_path).ensure(SERVING).cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_matching_certificates_are_reused_across_restarts(tmp_path: Path) -> None:
    first = PKI(tmp_path).ensure_all([NODE, SERVING])
    before = {name: (p.cert.read_bytes(), p.key.read_bytes()) for name, p in first.items()}
    ca_before = (tmp_path / "ca.crt").read_bytes()
    again = PKI(tmp_path).ensure_all([NODE, SERVING])  # a new process, same directory
    assert {name: (p.cert.read_bytes(), p.key.read_bytes()) for name, p in again.items()} == before
    assert (tmp_path / "ca.crt").read_bytes() == ca_before


def _new_ca(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").unlink()
    (tmp_path / "ca.key").unlink()


def _corrupt_key(tmp_path: Path) -> None:
    (tmp_path / "apiserver.key").write_text("not a key")


def _other_key(tmp_path: Path) -> None:
    other = PKI(tmp_path / "other").ensure(SERVING)
    (tmp_path / "apiserver.key").write_bytes(other.key.read_bytes())


def changed(**kw: object) -> CertSpec:
    return dataclasses.replace(SERVING, **kw)  # type: ignore[arg-type]


REISSUE: list[tuple[str, CertSpec, Callable[[Path], None] | None, datetime.timedelta | None]] = [
    ("a SAN was added", changed(dns_names=("localhost", "cp1")), None, None),
    ("an address was added", changed(ip_addresses=("127.0.0.1", "10.0.0.5")), None, None),
    ("the groups changed", changed(organizations=("system:masters",)), None, None),
    ("the usage changed", changed(client=True), None, None),
    ("a new CA", SERVING, _new_ca, None),
    ("an unreadable key", SERVING, _corrupt_key, None),
    ("a key that is not the certificate's", SERVING, _other_key, None),
    ("it expires within renew_before", SERVING, None, LEAF_VALIDITY + datetime.timedelta(days=1)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "change", "renew_before"),
    [r[1:] for r in REISSUE],
    ids=[r[0] for r in REISSUE],
)
def test_reissued_when_the_stored_one_no_longer_matches(
    tmp_path: Path,
    spec: CertSpec,
    change: Callable[[Path], None] | None,
    renew_before: datetime.timedelta | None,
) -> None:
    old = PKI(tmp_path).ensure(SERVING).cert.read_bytes()
    if change is not None:
        change(tmp_path)
    pki = PKI(tmp_path) if renew_before is None else PKI(tmp_path, renew_before=renew_before)
    paths = pki.ensure(spec)
    assert paths.cert.read_bytes() != old
    cert = load(paths.cert)
    cert.verify_directly_issued_by(load(pki.ca_cert_path))
    assert identity(cert) == (spec.common_name, spec.organizations)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: (d / "ca.crt").write_text("junk"), "cannot read ca.crt/ca.key"),
        (
            lambda d: (d / "ca.crt").write_bytes((d / "apiserver.crt").read_bytes()),
            "does not belong",
        ),
    ],
    ids=["unreadable", "key of another certificate"],
)
def test_a_broken_ca_is_an_error_naming_the_files(
    tmp_path: Path, setup: Callable[[Path], object], message: str
) -> None:
    PKI(tmp_path).ensure(SERVING)
    setup(tmp_path)
    with pytest.raises(PKIError, match=message):
        PKI(tmp_path).ensure(NODE)


def test_cluster_specs_name_every_identity() -> None:
    specs = {
        s.name: s for s in cluster_specs(["n1", "n2"], hosts=("cp",), node_ips={"n2": "10.0.0.2"})
    }
    assert specs["admin"].organizations == ("system:masters",)
    assert specs["scheduler"].common_name == "system:kube-scheduler"
    assert specs["controller-manager"].common_name == "system:kube-controller-manager"
    assert specs["proxy"].common_name == "system:kube-proxy"
    assert specs["kubelet-n2"].common_name == "system:node:n2"
    assert specs["kubelet-n2"].organizations == ("system:nodes",)
    assert specs["fake-kubelets"].organizations == ("tinykube:fake-kubelets",)
    assert specs["kubelet-n2-serving"].ip_addresses == ("10.0.0.2",)
    assert specs["kubelet-n2-serving"].server and not specs["kubelet-n2-serving"].client
    assert (
        "cp" in specs["apiserver"].dns_names
        and "kubernetes.default.svc" in specs["apiserver"].dns_names
    )
    assert not specs["apiserver"].client


def test_each_etcd_member_gets_its_own_serving_and_peer_certificate() -> None:
    members = [("etcd-0", "10.0.0.10"), ("etcd-1", "10.0.0.11")]
    specs = {s.name: s for s in cluster_specs([], etcd_members=members)}
    for name, ip in members:
        for kind in ("server", "peer"):
            spec = specs[f"etcd-{kind}-{name}"]
            assert spec.common_name == name
            assert name in spec.dns_names and "localhost" in spec.dns_names
            assert ip in spec.ip_addresses and "127.0.0.1" in spec.ip_addresses
            # Members dial each other with their peer certificates.
            assert spec.server and spec.client
    assert "10.0.0.11" not in specs["etcd-server-etcd-0"].ip_addresses
    assert not any(n.startswith("etcd-server-") for n in (s.name for s in cluster_specs([])))


def test_certs_writes_each_etcd_member_its_bundle(tmp_path: Path) -> None:
    write_bundles(
        tmp_path,
        nodes={},
        hosts=["etcd", "apiserver"],
        ips=["10.0.0.5"],
        server="https://apiserver:8080",
        grpc_server="apiserver:6443",
        etcd_members={"etcd": "10.0.0.10", "etcd-1": "10.0.0.11"},
    )
    for member, address in (("etcd", "10.0.0.10"), ("etcd-1", "10.0.0.11")):
        for kind in ("server", "peer"):
            cert = x509.load_pem_x509_certificate((tmp_path / member / f"{kind}.crt").read_bytes())
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert identity(cert) == (member, ())
            # every member also answers to the control plane's names, "etcd" among them: the
            # one name the apiserver checks all members' certificates against
            assert {member, "etcd"} <= set(san.get_values_for_type(x509.DNSName))
            assert ipaddress.ip_address(address) in san.get_values_for_type(x509.IPAddress)
        assert (tmp_path / member / "ca.crt").exists() and (
            tmp_path / member / "server.key"
        ).exists()


def test_service_account_key_pair_is_made_once_and_kept(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pki = PKI(tmp_path / "pki")
    paths = pki.ensure_service_account_key()
    assert (paths.key.name, paths.cert.name) == ("sa.key", "sa.pub")
    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    key = serialization.load_pem_private_key(paths.key.read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    public = serialization.load_pem_public_key(paths.cert.read_bytes())
    assert public.public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]
    before = paths.key.read_bytes()
    paths.cert.unlink()  # a lost sa.pub is written again from sa.key
    again = PKI(tmp_path / "pki").ensure_service_account_key()
    assert again.key.read_bytes() == before and again.cert.exists()
    paths.key.write_text("not a key\n")
    with pytest.raises(PKIError, match=r"remove sa\.key and sa\.pub"):
        PKI(tmp_path / "pki").ensure_service_account_key()


def test_certs_gives_the_apiserver_bundle_the_service_account_keys(tmp_path: Path) -> None:
    write_bundles(
        tmp_path, nodes={}, hosts=[], ips=[], server="https://a:8080", grpc_server="a:6443"
    )
    pki = tmp_path / "pki"
    assert (tmp_path / "apiserver" / "sa.key").read_bytes() == (pki / "sa.key").read_bytes()
    assert (tmp_path / "apiserver" / "sa.pub").read_bytes() == (pki / "sa.pub").read_bytes()
    assert stat.S_IMODE((tmp_path / "apiserver" / "sa.key").stat().st_mode) == 0o600
