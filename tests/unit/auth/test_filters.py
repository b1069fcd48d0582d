"""The enforcer: who a request acts as (anonymous refused but for the probes, bad tokens,
impersonation) and NodeRestriction through the request's context variable."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.auth import bootstrap
from apiserver.auth.authn import AuthenticationError, Authenticator, TokenUser
from apiserver.auth.authorizer import Attributes, Chain, Identity
from apiserver.auth.filters import Enforcer, admit_node_write
from apiserver.auth.node import NodeAuthorizer, StaticPods
from tests.unit.auth.test_rbac import authorizer as rbac_of
from tests.unit.auth.test_rbac import binding, subject
from tinykube.errors import BadRequestError, ForbiddenError
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2

AUTHENTICATED = "system:authenticated"

TOKENS = {
    "admin-token": TokenUser("root", "u0", ("system:masters",)),
    "alice-token": TokenUser("alice", "u1", ()),
    "imp-token": TokenUser("impersonator", "u2", ()),
}


def enforcer() -> Enforcer:
    impersonator = bootstrap.cluster_role(
        "impersonate-bob",
        [
            bootstrap.rule(("impersonate",), ("",), ("users",), ("bob",)),
            bootstrap.rule(("impersonate",), ("",), ("groups",), ("devs",)),
        ],
    )
    rbac = rbac_of(
        *bootstrap.cluster_roles(),
        *bootstrap.cluster_role_bindings(),
        impersonator,
        binding("imp", "", "ClusterRole", "impersonate-bob", subject("User", "impersonator")),
    )
    chain = Chain([NodeAuthorizer(StaticPods({("default", "p1"): "node-1"})), rbac])
    return Enforcer(Authenticator(tokens=TOKENS), chain)


class FakeContext:
    """What the enforcer reads of a grpc.aio ServicerContext."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


REST_ROWS = [
    # (behaviour, path, headers, who it acts as or the error's type and message)
    ("anonymous may read /healthz", "/healthz", {}, "system:anonymous|system:unauthenticated"),
    ("anonymous may read /version", "/version", {}, "system:anonymous|system:unauthenticated"),
    ("anonymous may read /readyz", "/readyz", {}, "system:anonymous|system:unauthenticated"),
    ("anonymous may not list pods", "/api/v1/pods", {}, (AuthenticationError, "Unauthorized")),
    ("anonymous may not discover", "/api", {}, (AuthenticationError, "Unauthorized")),
    (
        "a wrong token is refused even on /healthz",
        "/healthz",
        bearer("nope"),
        (AuthenticationError, "Unauthorized"),
    ),
    ("a token names its user", "/api/v1/pods", bearer("alice-token"), f"alice|{AUTHENTICATED}"),
    (
        "an admin impersonates anyone, with groups",
        "/api/v1/pods",
        {**bearer("admin-token"), "Impersonate-User": "carol", "Impersonate-Group": "qa"},
        f"carol|qa,{AUTHENTICATED}",
    ),
    (
        "impersonating a service account adds its groups",
        "/api/v1/pods",
        {**bearer("admin-token"), "Impersonate-User": "system:serviceaccount:ns1:robot"},
        "system:serviceaccount:ns1:robot|system:serviceaccounts,system:serviceaccounts:ns1,"
        f"{AUTHENTICATED}",
    ),
    (
        "impersonating anonymous makes it unauthenticated",
        "/api/v1/pods",
        {**bearer("admin-token"), "Impersonate-User": "system:anonymous"},
        "system:anonymous|system:unauthenticated",
    ),
    (
        "a user without the impersonate verb is refused",
        "/api/v1/pods",
        {**bearer("alice-token"), "Impersonate-User": "bob"},
        (
            ForbiddenError,
            'users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API '
            'group "" at the cluster scope',
        ),
    ),
    (
        "RBAC's resourceNames limit whom one impersonates",
        "/api/v1/pods",
        {**bearer("imp-token"), "Impersonate-User": "bob", "Impersonate-Group": "devs"},
        f"bob|devs,{AUTHENTICATED}",
    ),
    (
        "... and which groups",
        "/api/v1/pods",
        {**bearer("imp-token"), "Impersonate-User": "bob", "Impersonate-Group": "system:masters"},
        (
            ForbiddenError,
            'groups "system:masters" is forbidden: User "impersonator" cannot impersonate '
            'resource "groups" in API group "" at the cluster scope',
        ),
    ),
    (
        "groups without a user are a bad request",
        "/api/v1/pods",
        {**bearer("admin-token"), "Impersonate-Group": "qa"},
        (BadRequestError, "requested [{Group qa}] without impersonating a user"),
    ),
]


def _shown(identity: Identity) -> str:
    return f"{identity.name}|{','.join(identity.groups)}"


@pytest.mark.parametrize(
    ("path", "headers", "expected"), [r[1:] for r in REST_ROWS], ids=[r[0] for r in REST_ROWS]
)
def test_rest_identity(path: str, headers: dict[str, str], expected: Any) -> None:
    if isinstance(expected, str):
        assert _shown(enforcer().rest_identity(None, path, headers)) == expected
        return
    cls, message = expected
    with pytest.raises(cls) as info:
        enforcer().rest_identity(None, path, headers)
    assert info.value.message == message


GRPC_ROWS = [
    ("no credentials", (), (AuthenticationError, "Unauthorized")),
    ("a wrong token", (("authorization", "Bearer nope"),), (AuthenticationError, "Unauthorized")),
    ("a token", (("authorization", "Bearer alice-token"),), f"alice|{AUTHENTICATED}"),
    (
        "impersonation metadata",
        (
            ("authorization", "Bearer admin-token"),
            ("impersonate-user", "carol"),
            ("impersonate-group", "qa"),
            ("impersonate-group", "dev"),
        ),
        f"carol|qa,dev,{AUTHENTICATED}",
    ),
    (
        "impersonation refused",
        (("authorization", "Bearer alice-token"), ("impersonate-user", "carol")),
        (ForbiddenError, 'users "carol" is forbidden'),
    ),
]


@pytest.mark.parametrize(
    ("metadata", "expected"), [r[1:] for r in GRPC_ROWS], ids=[r[0] for r in GRPC_ROWS]
)
def test_grpc_identity(metadata: tuple[tuple[str, str], ...], expected: Any) -> None:
    context: Any = FakeContext(metadata)
    if isinstance(expected, str):
        assert _shown(enforcer().grpc_identity(context)) == expected
        return
    cls, message = expected
    with pytest.raises(cls) as info:
        enforcer().grpc_identity(context)
    assert info.value.message.startswith(message), info.value.message


def test_check_answers_kubes_forbidden_message() -> None:
    with pytest.raises(ForbiddenError) as info:
        enforcer().check(
            Identity("alice", (AUTHENTICATED,)), Attributes("list", "pods", "", "", "default")
        )
    assert info.value.message == (
        'pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the '
        'namespace "default"'
    )


def _pod(node: str) -> pod_pb2.Pod:
    return pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name="p", namespace="default"),
        spec=pod_pb2.PodSpec(nodeName=node),
    )


NODE_1 = Identity("system:node:node-1", ("system:nodes", AUTHENTICATED))


@pytest.mark.parametrize(
    ("requester", "write", "refused"),
    [
        (None, ("update", "nodes", "", "", "", "node-2"), None),
        (NODE_1, ("update", "nodes", "", "", "", "node-1"), None),
        (
            NODE_1,
            ("update", "nodes", "", "", "", "node-2"),
            'nodes "node-2" is forbidden: node "node-1" is not allowed to modify node "node-2"',
        ),
        (
            NODE_1,
            ("update", "leases", "coordination.k8s.io", "", "kube-node-lease", "node-2"),
            'leases.coordination.k8s.io "node-2" is forbidden: can only access node lease with '
            "the same name as the requesting node",
        ),
        (
            NODE_1,
            ("update", "pods", "", "status", "default", "p"),
            'pods "p" is forbidden: node "node-1" can only update pod status for pods with '
            "spec.nodeName set to itself",
        ),
    ],
)
def test_node_restriction_applies_to_the_requesting_node_only(
    requester: Identity | None, write: tuple[str, ...], refused: str | None
) -> None:
    verb, resource, group, sub, namespace, name = write
    obj: Any = _pod("node-2") if resource == "pods" else None
    if resource == "nodes":
        obj = node_pb2.Node(metadata=meta_pb2.ObjectMeta(name=name))
    if requester is None:
        return  # the apiserver's own writes: the store never asks NodeRestriction
    if refused is None:
        admit_node_write(requester, verb, resource, group, sub, namespace, name, obj, obj)
        return
    with pytest.raises(ForbiddenError) as info:
        admit_node_write(requester, verb, resource, group, sub, namespace, name, obj, obj)
    assert info.value.message == refused


class SlotsTransport:
    """As uvloop's transports: no weak references."""

    __slots__ = ("closing", "der", "reads")

    def __init__(self, der: bytes | None) -> None:
        self.der = der
        self.closing = False
        self.reads = 0

    def get_extra_info(self, name: str) -> Any:
        return self if name == "ssl_object" and self.der is not None else None

    def getpeercert(self, binary_form: bool = False) -> bytes | None:
        self.reads += 1
        return self.der

    def is_closing(self) -> bool:
        return self.closing


def _der(name: str) -> bytes:
    import tempfile
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from tinykube.pki import PKI, CertSpec

    with tempfile.TemporaryDirectory() as tmp:  # (mkdtemp left one behind per run)
        paths = PKI(Path(tmp) / "pki").ensure(CertSpec("who", name, ("team",), client=True))
        cert = paths.cert.read_bytes()
    return x509.load_pem_x509_certificate(cert).public_bytes(Encoding.DER)


def test_a_connections_certificate_is_read_once_whatever_its_transport() -> None:
    enforce = enforcer()
    transport = SlotsTransport(_der("dora"))
    for _ in range(3):
        identity = enforce.rest_identity(transport, "/api/v1/pods", {})
        assert _shown(identity) == f"dora|team,{AUTHENTICATED}"
    assert transport.reads == 1
    plain = SlotsTransport(None)
    with pytest.raises(AuthenticationError):
        enforce.rest_identity(plain, "/api/v1/pods", {})
    # no certificate on the connection: a token per request still counts
    assert _shown(enforce.rest_identity(plain, "/", bearer("alice-token"))) == (
        f"alice|{AUTHENTICATED}"
    )
