"""The serviceaccount-token controller: token Secrets get a legacy token, ca.crt and namespace;
Secrets of accounts that are gone (or were recreated) are deleted (kube's TokensController)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa

from controller.tokens import NAME_ANNOTATION, UID_ANNOTATION, TokensController
from tests.unit.controller.fakes import FakeQueue, FakeResource, FakeStore
from tinykube.clock import FakeClock
from tinykube.jwt import LEGACY_ISSUER, parse, verify
from tinykube.v1 import secret_pb2, serviceaccount_pb2

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
CA = b"-----BEGIN CERTIFICATE-----\n...\n"


@dataclass
class Setup:
    secrets: FakeResource[secret_pb2.Secret]
    accounts: FakeResource[serviceaccount_pb2.ServiceAccount]
    queue: FakeQueue
    controller: TokensController


def setup() -> Setup:
    clock = FakeClock()
    rv = itertools.count(1)
    secrets = FakeResource("Secret", secret_pb2.Secret, clock, rv)
    accounts = FakeResource("ServiceAccount", serviceaccount_pb2.ServiceAccount, clock, rv)
    queue = FakeQueue()
    controller = TokensController(
        secrets, FakeStore(secrets), FakeStore(accounts), queue, key=KEY, root_ca=CA
    )
    return Setup(secrets, accounts, queue, controller)


async def account(s: Setup, name: str) -> serviceaccount_pb2.ServiceAccount:
    sa = serviceaccount_pb2.ServiceAccount()
    sa.metadata.name, sa.metadata.namespace = name, "ns"
    return await s.accounts.create(sa)


async def token_secret(s: Setup, name: str, account: str, **annotations: str) -> None:
    secret = secret_pb2.Secret(type="kubernetes.io/service-account-token")
    secret.metadata.name, secret.metadata.namespace = name, "ns"
    secret.metadata.annotations[NAME_ANNOTATION] = account
    secret.metadata.annotations.update(annotations)
    await s.secrets.create(secret)


async def test_a_token_secret_is_filled_once() -> None:
    s = setup()
    sa = await account(s, "robot")
    await token_secret(s, "robot-token", "robot")
    await s.controller.sync("ns/robot-token")
    secret = s.secrets.objects["ns/robot-token"]
    assert secret.metadata.annotations[UID_ANNOTATION] == sa.metadata.uid
    assert secret.data["ca.crt"] == CA and secret.data["namespace"] == b"ns"
    parsed = parse(secret.data["token"].decode())
    assert parsed is not None
    assert parsed.claims == {
        "iss": LEGACY_ISSUER,
        "sub": "system:serviceaccount:ns:robot",
        "kubernetes.io/serviceaccount/namespace": "ns",
        "kubernetes.io/serviceaccount/secret.name": "robot-token",
        "kubernetes.io/serviceaccount/service-account.name": "robot",
        "kubernetes.io/serviceaccount/service-account.uid": sa.metadata.uid,
    }
    assert verify(KEY.public_key(), "RS256", parsed.signing_input, parsed.signature)
    writes = len(s.secrets.calls)
    await s.controller.sync("ns/robot-token")
    assert len(s.secrets.calls) == writes  # nothing left to do


async def test_secrets_of_missing_or_recreated_accounts_are_deleted() -> None:
    s = setup()
    await token_secret(s, "orphan", "ghost")
    await s.controller.sync("ns/orphan")
    assert "ns/orphan" not in s.secrets.objects
    await account(s, "robot")
    await token_secret(s, "stale", "robot", **{UID_ANNOTATION: "an-older-uid"})
    await s.controller.sync("ns/stale")
    assert "ns/stale" not in s.secrets.objects


async def test_other_secrets_are_not_touched_and_accounts_queue_their_secrets() -> None:
    s = setup()
    opaque = secret_pb2.Secret(type="Opaque")
    opaque.metadata.name, opaque.metadata.namespace = "plain", "ns"
    await s.secrets.create(opaque)
    s.controller.on_secret(opaque)
    await s.controller.sync("ns/plain")
    assert s.queue.added == [] and s.secrets.calls == [("create", "ns/plain")]
    sa = await account(s, "robot")
    await token_secret(s, "robot-token", "robot")
    s.controller.on_account(sa)
    assert s.queue.added == ["ns/robot-token"]
