"""TLS on the apiserver's links and the identity each kind of credential authenticates as.

An in-process apiserver with the PKI's certificates (gRPC and REST on TLS, its own etcd on TLS
with client-certificate auth, a static token file), reached with the library, grpc, aiohttp and
a raw etcd channel. The identity a front end derives is read back through a probe on the
same server credentials (gRPC) and through the apiserver's own `identify` (REST).
"""

from __future__ import annotations

import datetime
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from aetcd import rpc
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apiserver.app import APIServer
from apiserver.auth.authn import ANONYMOUS_IDENTITY, AuthenticationError, Authenticator
from apiserver.auth.authorizer import Identity
from tests.integration.conftest import make_settings
from tinykube.client import Client
from tinykube.errors import TinykubeError
from tinykube.localetcd import EtcdServer, EtcdTLS
from tinykube.pki import PKI, cluster_specs
from tinykube.serving import GrpcServer
from tinykube.tls import PLAINTEXT, Credentials, ServingTLS, TransportSecurityError

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"
AUTHENTICATED = "system:authenticated"


@dataclass
class Cluster:
    pki: PKI
    other: PKI  # a CA the cluster does not trust
    etcd: EtcdServer
    server: APIServer

    def creds(self, name: str | None, *, pki: PKI | None = None, **kw: Any) -> Credentials:
        ca = self.pki.ca_cert_path.read_bytes()
        if name is None:
            return Credentials(ca=ca, **kw)
        paths = (pki or self.pki).paths(name)
        return Credentials(ca=ca, cert=paths.cert.read_bytes(), key=paths.key.read_bytes(), **kw)

    def expired(self) -> Credentials:
        """The admin's identity (system:masters) in a certificate of the cluster CA that
        expired yesterday."""
        ca_cert, ca_key = self.pki.ca()
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-admin"),
            ]
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=30))
            .not_valid_after(now - datetime.timedelta(days=1))
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        return Credentials(
            ca=self.pki.ca_cert_path.read_bytes(),
            cert=cert.public_bytes(serialization.Encoding.PEM),
            key=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )


@pytest.fixture(scope="module")
def pkis(tmp_path_factory: pytest.TempPathFactory) -> tuple[PKI, PKI]:
    base = tmp_path_factory.mktemp("tls")
    pki, other = PKI(base / "pki"), PKI(base / "other")
    pki.ensure_all(cluster_specs(["n1"]))
    other.ensure_all(cluster_specs(["n1"]))
    return pki, other


@pytest.fixture(scope="module")
def tls_etcd(pkis: tuple[PKI, PKI]) -> Iterator[EtcdServer]:
    pki = pkis[0]
    server, peer = pki.paths("etcd-server"), pki.paths("etcd-peer")
    etcd = EtcdServer(
        tls=EtcdTLS(
            str(server.cert),
            str(server.key),
            str(pki.ca_cert_path),
            str(peer.cert),
            str(peer.key),
        )
    )
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.cleanup()


@pytest.fixture
async def cluster(
    pkis: tuple[PKI, PKI], tls_etcd: EtcdServer, tmp_path: Path
) -> AsyncIterator[Cluster]:
    pki, other = pkis
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(f'{TOKEN},alice,uid-1,"dev,ops"\n')
    api, etcd_client = pki.paths("apiserver"), pki.paths("apiserver-etcd-client")
    settings = make_settings(
        tls_etcd.url,
        rest_port=0,
        tls_cert_file=str(api.cert),
        tls_private_key_file=str(api.key),
        client_ca_file=str(pki.ca_cert_path),
        token_auth_file=str(tokens),
        etcd_cafile=str(pki.ca_cert_path),
        etcd_certfile=str(etcd_client.cert),
        etcd_keyfile=str(etcd_client.key),
    )
    server = APIServer(settings)
    await server.start()
    try:
        yield Cluster(pki, other, tls_etcd, server)
    finally:
        await server.stop()


async def test_the_library_reaches_a_tls_apiserver_over_tls_etcd(cluster: Cluster) -> None:
    async with Client(cluster.server.address, credentials=cluster.creds("admin")) as client:
        await client.nodes.list()  # a read goes through etcd (TLS, the apiserver's cert)
    assert cluster.server.rest_url.startswith("https://")


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("plaintext", "requires TLS, and this client connects in plaintext"),
        ("no certificate", "requires a client certificate signed by the cluster CA"),
        ("another CA's certificate", "refused this client's certificate"),
        ("an expired certificate", "refused this client's certificate"),
        ("trusts another CA", "x509: certificate signed by unknown authority"),
    ],
)
async def test_grpc_refuses_what_is_not_the_clusters_with_a_clear_error(
    cluster: Cluster, who: str, expected: str
) -> None:
    creds = {
        "plaintext": PLAINTEXT,
        "no certificate": cluster.creds(None),
        "another CA's certificate": cluster.creds("admin", pki=cluster.other),
        "an expired certificate": cluster.expired(),
        "trusts another CA": Credentials(
            ca=cluster.other.ca_cert_path.read_bytes(),
            cert=cluster.pki.paths("admin").cert.read_bytes(),
            key=cluster.pki.paths("admin").key.read_bytes(),
        ),
    }[who]
    async with Client(cluster.server.address, credentials=creds, retries=0, timeout=3) as client:
        with pytest.raises(TransportSecurityError) as info:
            await client.nodes.list()
    assert expected in info.value.message, info.value.message


def test_a_tls_client_against_a_plaintext_port_is_told_so(cluster: Cluster) -> None:
    from tinykube.tls import explain

    details = "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: WRONG_VERSION_NUMBER"
    message = explain("127.0.0.1:1", cluster.creds("admin"), details)
    assert message is not None and "does not speak TLS" in message


async def test_etcd_answers_only_a_client_with_a_certificate_of_the_cluster(
    cluster: Cluster,
) -> None:
    request = rpc.RangeRequest(key=b"\x00", count_only=True)
    outcomes = {}
    for who, creds in (
        ("apiserver", cluster.creds("apiserver-etcd-client")),
        ("no certificate", cluster.creds(None)),
        ("another CA", cluster.creds("apiserver-etcd-client", pki=cluster.other)),
        ("plaintext", PLAINTEXT),
    ):
        async with creds.channel(cluster.etcd.endpoint) as channel:
            try:
                await rpc.KVStub(channel).Range(request, timeout=3)
                outcomes[who] = "ok"
            except grpc.aio.AioRpcError as exc:
                outcomes[who] = exc.code().name
    assert outcomes == {
        "apiserver": "ok",
        "no certificate": "UNAVAILABLE",
        "another CA": "UNAVAILABLE",
        "plaintext": "UNAVAILABLE",
    }


# ---- identities ------------------------------------------------------------------------------


def _identity_text(identity: Identity) -> str:
    return f"{identity.name}|{','.join(identity.groups)}"


@pytest.fixture
async def grpc_probe(cluster: Cluster) -> AsyncIterator[str]:
    """A gRPC server with the apiserver's TLS settings whose one method answers the caller's
    identity as the apiserver's authenticator derives it."""
    authn = cluster.server.authenticator
    api = cluster.pki.paths("apiserver")
    server = GrpcServer(
        "127.0.0.1:0",
        [],
        tls=ServingTLS(str(api.cert), str(api.key), str(cluster.pki.ca_cert_path)),
    )

    async def whoami(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        try:
            return _identity_text(authn.grpc(context)).encode()
        except AuthenticationError as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, exc.message)
            raise

    handler = grpc.method_handlers_generic_handler(
        "test.WhoAmI",
        {
            "Get": grpc.unary_unary_rpc_method_handler(
                whoami, request_deserializer=bytes, response_serializer=bytes
            )
        },
    )
    server.add(lambda s: s.add_generic_rpc_handlers((handler,)))
    port = await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def _grpc_whoami(address: str, creds: Credentials) -> str:
    async with creds.channel(address) as channel:
        try:
            call: Any = channel.unary_unary("/test.WhoAmI/Get")
            answer: bytes = await call(b"", timeout=3)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
    return bytes(answer).decode()


@pytest.mark.parametrize(
    ("credential", "expected"),
    [
        ("node certificate", f"system:node:n1|system:nodes,{AUTHENTICATED}"),
        ("admin certificate", f"kubernetes-admin|system:masters,{AUTHENTICATED}"),
        # gRPC requires a certificate (grpc Python cannot make client certificates optional),
        # so a token comes with one, and the certificate wins: kube's authenticator union
        # checks x509 before tokens
        ("certificate and token", f"system:kube-scheduler|{AUTHENTICATED}"),
        ("no certificate", "UNAVAILABLE"),
    ],
)
async def test_grpc_identity_of_each_credential(
    cluster: Cluster, grpc_probe: str, credential: str, expected: str
) -> None:
    creds = {
        "node certificate": cluster.creds("kubelet-n1"),
        "admin certificate": cluster.creds("admin"),
        "certificate and token": cluster.creds("scheduler", token=TOKEN),
        "no certificate": cluster.creds(None),
    }[credential]
    assert await _grpc_whoami(grpc_probe, creds) == expected


@pytest.fixture
async def rest_probe(cluster: Cluster) -> AsyncIterator[str]:
    """An HTTPS server with the apiserver's REST TLS context answering `identify(request)`."""
    assert cluster.server.rest is not None and cluster.server.rest.ssl_context is not None

    async def whoami(request: web.Request) -> web.Response:
        try:
            return web.Response(text=_identity_text(cluster.server.identify(request)))
        except AuthenticationError as exc:
            return web.Response(status=401, text=exc.message)

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cluster.server.rest.ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("credential", "expected"),
    [
        ("node certificate", (200, f"system:node:n1|system:nodes,{AUTHENTICATED}")),
        ("token", (200, f"alice|dev,ops,{AUTHENTICATED}")),
        ("wrong token", (401, "Unauthorized")),
        ("nothing", (200, "system:anonymous|system:unauthenticated")),
        # a certificate the TLS layer did not verify never names a user
        ("another CA's certificate", "handshake refused"),
        ("an expired certificate", "handshake refused"),
    ],
)
async def test_rest_identity_of_each_credential(
    cluster: Cluster, rest_probe: str, credential: str, expected: object
) -> None:
    creds = {
        "node certificate": cluster.creds("kubelet-n1"),
        "token": cluster.creds(None, token=TOKEN),
        "wrong token": cluster.creds(None, token="nope"),
        "nothing": cluster.creds(None),
        "another CA's certificate": cluster.creds("admin", pki=cluster.other),
        "an expired certificate": cluster.expired(),
    }[credential]
    ctx = creds.ssl_context()
    assert ctx is not None
    got: object
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{rest_probe}/whoami", ssl=ctx, headers=creds.headers()) as resp,
        ):
            got = (resp.status, await resp.text())
    except (aiohttp.ClientError, ssl.SSLError, ConnectionError):
        got = "handshake refused"
    assert got == expected


async def test_the_rest_api_serves_https_to_the_admin(cluster: Cluster) -> None:
    ctx = cluster.creds("admin").ssl_context()
    assert ctx is not None
    url = f"{cluster.server.rest_url}/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as session, session.get(url, ssl=ctx) as resp:
        assert resp.status == 200
        assert (await resp.json())["kind"] == "PodList"
    # plaintext HTTP against the TLS port gets Go's answer, then the connection closes
    async with (
        aiohttp.ClientSession() as session,
        session.get(url.replace("https://", "http://"), timeout=aiohttp.ClientTimeout(10)) as r,
    ):
        assert r.status == 400
        assert await r.text() == "Client sent an HTTP request to an HTTPS server.\n"


def test_token_file_parsing_follows_kubes_format() -> None:
    from apiserver.auth.authn import TokenFileError, parse_token_file

    tokens = parse_token_file('t1,bob,u1\nt2,carol,u2,"a,b"\n\n,nobody,u3\n')
    assert {k: (v.name, v.uid, v.groups) for k, v in tokens.items()} == {
        "t1": ("bob", "u1", ()),
        "t2": ("carol", "u2", ("a", "b")),
    }
    with pytest.raises(TokenFileError, match="at least 3 columns"):
        parse_token_file("t1,bob\n")
    authn = Authenticator(tokens=tokens)
    assert authn.rest(None, {}) == ANONYMOUS_IDENTITY
    assert authn.rest(None, {"Authorization": "Basic x"}) == ANONYMOUS_IDENTITY
    with pytest.raises(TinykubeError):
        authn.rest(None, {"Authorization": "Bearer t3"})
