"""The cluster's certificate authority and the certificates its components present.

`PKI(directory)` keeps a cluster CA (`ca.crt`, `ca.key`) and leaf certificates in one directory,
as kubeadm keeps /etc/kubernetes/pki: `ensure(spec)` returns the paths of a certificate and key
matching `spec` (subject, SANs, key usage), issuing them when missing and re-issuing them when
they no longer match: another CA signed them, a SAN is missing, the subject changed, or they
expire within `renew_before`. Certificates that still match are reused across restarts, so
kubeconfig files and clients holding them keep working.

Identities follow Kubernetes' x509 authenticator: the subject's CommonName is the user name and
each Organization a group (`system:node:<name>` in `system:nodes` for a kubelet). `identity`
reads them back. Keys are ECDSA P-256 (cheap TLS handshakes, supported by gRPC, OpenSSL and
etcd); files are written atomically, keys with mode 0600.

Synchronous and file-based: called at process start, not on a request path.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "tinykube-ca"
CA_VALIDITY = datetime.timedelta(days=3650)
LEAF_VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
# clocks of the machines in a cluster differ a little: certificates are valid from slightly
# before they are made
BACKDATE = datetime.timedelta(minutes=5)


class PKIError(ValueError):
    """A CA or certificate file that exists but cannot be used (unreadable, not a CA)."""


@dataclass(frozen=True)
class CertSpec:
    """One leaf certificate: who it names and what it may be used for."""

    name: str  # file stem in the PKI directory: "apiserver" -> apiserver.crt, apiserver.key
    common_name: str
    organizations: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    server: bool = False  # TLS server authentication (a serving certificate)
    client: bool = False  # TLS client authentication (an identity)


@dataclass(frozen=True)
class CertPaths:
    cert: Path
    key: Path


def identity(cert: x509.Certificate) -> tuple[str, tuple[str, ...]]:
    """(user, groups) as Kubernetes' x509 authenticator reads them: CN and every O."""
    subject = cert.subject
    cns = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    user = str(cns[0].value) if cns else ""
    groups = tuple(str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
    return user, groups


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)  # O_CREAT's mode is masked by the umask
    os.replace(tmp, path)


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_bytes(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class PKI:
    """A directory holding the cluster CA and the leaf certificates it issued."""

    def __init__(self, directory: Path, *, renew_before: datetime.timedelta = RENEW_BEFORE) -> None:
        self.directory = directory
        self.renew_before = renew_before
        self._ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None

    @property
    def ca_cert_path(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key_path(self) -> Path:
        return self.directory / "ca.key"

    def paths(self, name: str) -> CertPaths:
        return CertPaths(self.directory / f"{name}.crt", self.directory / f"{name}.key")

    # ----- the service account key ------------------------------------------------------
    @property
    def service_account_key_path(self) -> Path:
        return self.directory / "sa.key"

    @property
    def service_account_pub_path(self) -> Path:
        return self.directory / "sa.pub"

    def ensure_service_account_key(self) -> CertPaths:
        """kubeadm's sa.key/sa.pub: the RSA key pair the apiservers sign and verify service
        account tokens with (--service-account-signing-key-file, --service-account-key-file).
        Made once and kept, so tokens stay valid across restarts; every apiserver of an HA
        control plane loads the same pair. `cert` is the public key's path."""
        key_path, pub_path = self.service_account_key_path, self.service_account_pub_path
        if key_path.exists():
            try:
                key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            except (ValueError, TypeError) as exc:
                raise PKIError(
                    f"service account key {key_path}: cannot read it ({exc}); remove sa.key "
                    "and sa.pub to make a new pair (tokens issued so far stop working)"
                ) from exc
            if not isinstance(key, rsa.RSAPrivateKey):
                raise PKIError(f"service account key {key_path}: not an RSA private key")
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            _write(
                key_path,
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.TraditionalOpenSSL,
                    serialization.NoEncryption(),
                ),
                0o600,
            )
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        if not pub_path.exists() or pub_path.read_bytes() != public:
            _write(pub_path, public, 0o644)
        return CertPaths(pub_path, key_path)

    # ----- the CA -----------------------------------------------------------------------
    def ca(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """The CA certificate and key: loaded when present, created when not."""
        if self._ca is not None:
            return self._ca
        if self.ca_cert_path.exists() or self.ca_key_path.exists():
            self._ca = self._load_ca()
        else:
            self._ca = self._create_ca()
        return self._ca

    def _load_ca(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        try:
            cert = x509.load_pem_x509_certificate(self.ca_cert_path.read_bytes())
            key = serialization.load_pem_private_key(self.ca_key_path.read_bytes(), None)
        except (OSError, ValueError, TypeError) as exc:
            raise PKIError(
                f"cluster CA in {self.directory}: cannot read ca.crt/ca.key ({exc}); remove both "
                "to create a new CA (every certificate it issued is then re-issued)"
            ) from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not _same_key(key, cert):
            raise PKIError(f"cluster CA in {self.directory}: ca.key does not belong to ca.crt")
        try:
            constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            constraints = None
        if constraints is None or not constraints.ca:
            raise PKIError(f"cluster CA in {self.directory}: ca.crt is not a CA certificate")
        return cert, key

    def _create_ca(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        self.directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        now = _now()
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        _write(self.ca_key_path, _key_bytes(key), 0o600)
        _write(self.ca_cert_path, _cert_bytes(cert), 0o644)
        return cert, key

    # ----- leaves -----------------------------------------------------------------------
    def ensure(self, spec: CertSpec) -> CertPaths:
        """Paths of a certificate and key matching `spec`, issued now if the stored ones
        are missing or no longer match it."""
        paths = self.paths(spec.name)
        if not self._usable(spec, paths):
            self._issue(spec, paths)
        return paths

    def ensure_all(self, specs: Sequence[CertSpec]) -> dict[str, CertPaths]:
        return {spec.name: self.ensure(spec) for spec in specs}

    def _usable(self, spec: CertSpec, paths: CertPaths) -> bool:
        ca_cert, _ = self.ca()
        try:
            cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
            key = serialization.load_pem_private_key(paths.key.read_bytes(), None)
        except (OSError, ValueError, TypeError):
            return False
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            return False
        if not _same_key(key, cert):
            return False
        if cert.issuer != ca_cert.subject:
            return False
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (InvalidSignature, ValueError, TypeError):
            return False
        if cert.not_valid_after_utc - self.renew_before <= _now():
            return False
        if identity(cert) != (spec.common_name, spec.organizations):
            return False
        return _sans(cert) == (
            set(spec.dns_names),
            {ipaddress.ip_address(a) for a in spec.ip_addresses},
        ) and (_usages(cert) == (spec.server, spec.client))

    def _issue(self, spec: CertSpec, paths: CertPaths) -> None:
        ca_cert, ca_key = self.ca()
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in spec.organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, spec.common_name))
        now = _now()
        usages = [
            oid
            for oid, wanted in (
                (ExtendedKeyUsageOID.SERVER_AUTH, spec.server),
                (ExtendedKeyUsageOID.CLIENT_AUTH, spec.client),
            )
            if wanted
        ]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(min(now + LEAF_VALIDITY, ca_cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in spec.dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in spec.ip_addresses]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        self.directory.mkdir(parents=True, exist_ok=True)
        _write(paths.key, _key_bytes(key), 0o600)
        _write(paths.cert, _cert_bytes(cert), 0o644)


def _same_key(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> bool:
    der, spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return key.public_key().public_bytes(der, spki) == cert.public_key().public_bytes(der, spki)


def _sans(
    cert: x509.Certificate,
) -> tuple[set[str], set[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    ips = {
        a
        for a in san.get_values_for_type(x509.IPAddress)
        if isinstance(a, ipaddress.IPv4Address | ipaddress.IPv6Address)
    }
    return set(san.get_values_for_type(x509.DNSName)), ips


def _usages(cert: x509.Certificate) -> tuple[bool, bool]:
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False, False
    return ExtendedKeyUsageOID.SERVER_AUTH in eku, ExtendedKeyUsageOID.CLIENT_AUTH in eku


# The names a client may use for the apiserver: Kubernetes' in-cluster names, as kubeadm's
# serving certificate carries them, and localhost.
APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


FAKE_KUBELETS = "tinykube:fake-kubelets"
# The kubernetes Service's cluster IP (apiserver/masterservice.py: the first address of the
# service CIDR) under each range tinykube uses: the default one inside 127.0.0.0/8 (the
# user-space proxy) and kube's 10.96.0.0/12 (`up --runtime containerd`, the nftables proxy).
KUBERNETES_SERVICE_IPS = ("127.100.0.1", "10.96.0.1")


def cluster_specs(
    nodes: Sequence[str],
    *,
    hosts: Sequence[str] = (),
    ips: Sequence[str] = ("127.0.0.1",),
    node_ips: dict[str, str] | None = None,
    etcd_members: Sequence[tuple[str, str]] = (),
) -> list[CertSpec]:
    """Every certificate a cluster needs, named as Kubernetes names the identities.

    `hosts`/`ips`: extra names and addresses the control plane is reached at (the apiserver's
    and etcd's serving certificates carry them); `node_ips`: each kubelet's address, for its
    serving certificate (the apiserver's log proxy verifies it); `etcd_members`: (name, IP)
    of each member of an etcd cluster, which gets its own serving and peer certificate
    (`etcd_member_specs`)."""
    node_ips = node_ips or {}
    dns = tuple(dict.fromkeys((*APISERVER_DNS, *hosts)))
    # The kubernetes Service's cluster IPs, which in-cluster clients dial.
    addrs = tuple(dict.fromkeys(("127.0.0.1", *KUBERNETES_SERVICE_IPS, *ips)))
    specs = [
        CertSpec("apiserver", "kube-apiserver", dns_names=dns, ip_addresses=addrs, server=True),
        # etcd's own server and peer certificates also authenticate it as a client (kubeadm's do)
        CertSpec(
            "etcd-server",
            "etcd-server",
            dns_names=("localhost", *hosts),
            ip_addresses=addrs,
            server=True,
            client=True,
        ),
        CertSpec(
            "etcd-peer",
            "etcd-peer",
            dns_names=("localhost", *hosts),
            ip_addresses=addrs,
            server=True,
            client=True,
        ),
        CertSpec("apiserver-etcd-client", "kube-apiserver-etcd-client", client=True),
        # what the apiserver's log proxy presents to kubelets, named and grouped as kubeadm's
        CertSpec(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            ("kubeadm:cluster-admins",),
            client=True,
        ),
        # the scheduler's and controller manager's own ports (kube's self-sign theirs)
        CertSpec(
            "scheduler-serving",
            "kube-scheduler",
            dns_names=("localhost", *hosts),
            ip_addresses=addrs,
            server=True,
        ),
        CertSpec(
            "controller-manager-serving",
            "kube-controller-manager",
            dns_names=("localhost", *hosts),
            ip_addresses=addrs,
            server=True,
        ),
        # the cluster DNS's gRPC health port (a multi-host cluster's `dns` bundle)
        CertSpec(
            "dns-serving",
            "kube-dns",
            dns_names=("localhost", *hosts),
            ip_addresses=addrs,
            server=True,
        ),
        CertSpec("scheduler", "system:kube-scheduler", client=True),
        CertSpec("controller-manager", "system:kube-controller-manager", client=True),
        CertSpec("proxy", "system:kube-proxy", client=True),
        CertSpec("admin", "kubernetes-admin", organizations=("system:masters",), client=True),
        # One kubelet process hosting many fake nodes (--fake-nodes N) is no single node: it
        # acts for all of them under a group bound to tinykube:fake-kubelets (bootstrap RBAC).
        CertSpec("fake-kubelets", FAKE_KUBELETS, organizations=(FAKE_KUBELETS,), client=True),
    ]
    specs += etcd_member_specs(etcd_members, hosts=hosts, ips=addrs)
    for node in nodes:
        user = f"system:node:{node}"
        specs.append(CertSpec(f"kubelet-{node}", user, ("system:nodes",), client=True))
        ip = node_ips.get(node, "127.0.0.1")
        specs.append(
            CertSpec(
                f"kubelet-{node}-serving",
                user,
                ("system:nodes",),
                dns_names=(node,),
                ip_addresses=(ip,),
                server=True,
            )
        )
        specs.append(
            CertSpec(
                f"proxy-{node}-serving",
                "kube-proxy",
                dns_names=tuple(dict.fromkeys(("localhost", node, *hosts))),
                ip_addresses=tuple(dict.fromkeys(("127.0.0.1", ip))),
                server=True,
            )
        )
    return specs


def etcd_member_specs(
    members: Sequence[tuple[str, str]],
    *,
    hosts: Sequence[str] = (),
    ips: Sequence[str] = ("127.0.0.1",),
) -> list[CertSpec]:
    """A serving and a peer certificate per etcd member (`etcd-server-<name>`,
    `etcd-peer-<name>`), as kubeadm issues them per control-plane node: each names its member
    (DNS name and IP) besides localhost and the control plane's `hosts`/`ips`, and is also a
    client certificate, since members dial each other with their peer certificates (every
    member trusts the cluster CA on its peer port: `--peer-client-cert-auth`)."""
    specs = []
    for name, ip in members:
        dns = tuple(dict.fromkeys(("localhost", name, *hosts)))
        addrs = tuple(dict.fromkeys((ip, *ips)))
        for kind in ("server", "peer"):
            specs.append(
                CertSpec(
                    f"etcd-{kind}-{name}",
                    name,
                    dns_names=dns,
                    ip_addresses=addrs,
                    server=True,
                    client=True,
                )
            )
    return specs
