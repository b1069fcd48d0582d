"""Service account JWTs: claims as kube's, and every reason a token is refused."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from apiserver.auth.authn import AuthenticationError, Authenticator, StaleTokenError
from apiserver.auth.tokens import (
    BAD_SIGNATURE,
    FRESH_SECONDS,
    INVALIDATED,
    Found,
    KeyFileError,
    PublicKey,
    Ref,
    StaleLookup,
    TokenAuthenticator,
    TokenError,
    b64url,
    b64url_decode,
    claims,
    encode,
    jwks,
    key_id,
    load_private_key,
    load_public_keys,
    openid_configuration,
    parse,
    public_key_from_jwk,
    verify,
)
from tinykube.clock import FakeClock

ISSUER = "https://kubernetes.default.svc.cluster.local"
T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Objects:
    """An `ObjectLookup` over dicts (namespace, name) -> Found."""

    accounts: dict[tuple[str, str], Found] = field(default_factory=dict)
    pods: dict[tuple[str, str], Found] = field(default_factory=dict)
    secrets: dict[tuple[str, str], Found] = field(default_factory=dict)
    nodes: dict[str, Found] = field(default_factory=dict)

    def service_account(self, namespace: str, name: str) -> Found | None:
        return self.accounts.get((namespace, name))

    def pod(self, namespace: str, name: str) -> Found | None:
        return self.pods.get((namespace, name))

    def secret(self, namespace: str, name: str) -> Found | None:
        return self.secrets.get((namespace, name))

    def node(self, name: str) -> Found | None:
        return self.nodes.get(name)


def objects() -> Objects:
    return Objects(
        accounts={("ns", "robot"): Found("sa-uid")},
        pods={("ns", "web"): Found("pod-uid")},
        secrets={("ns", "s"): Found("secret-uid")},
        nodes={"n1": Found("node-uid")},
    )


def token_of(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = RSA_KEY, **kw: object) -> str:
    args: dict[str, object] = {
        "issuer": ISSUER,
        "namespace": "ns",
        "service_account": Ref("robot", "sa-uid"),
        "audiences": [ISSUER],
        "now": T0,
        "expiration_seconds": 3600,
        "jti": "the-jti",
    }
    args.update(kw)
    return encode(claims(**args), key)  # type: ignore[arg-type]


def authenticator(
    lookup: Objects | None = None, clock: FakeClock | None = None
) -> TokenAuthenticator:
    return TokenAuthenticator(
        issuers=(ISSUER,),
        keys=[RSA_KEY.public_key(), EC_KEY.public_key()],
        audiences=(ISSUER,),
        lookup=lookup or objects(),
        clock=clock or FakeClock(T0),
    )


def test_claims_are_kubes() -> None:
    token = token_of(pod=Ref("web", "pod-uid"), node=Ref("n1", "node-uid"))
    parsed = parse(token)
    assert parsed is not None
    assert parsed.header == {"alg": "RS256", "kid": key_id(RSA_KEY.public_key())}
    issued = int(T0.timestamp())
    assert parsed.claims == {
        "aud": [ISSUER],
        "exp": issued + 3600,
        "iat": issued,
        "iss": ISSUER,
        "jti": "the-jti",
        "kubernetes.io": {
            "namespace": "ns",
            "node": {"name": "n1", "uid": "node-uid"},
            "pod": {"name": "web", "uid": "pod-uid"},
            "serviceaccount": {"name": "robot", "uid": "sa-uid"},
        },
        "nbf": issued,
        "sub": "system:serviceaccount:ns:robot",
    }
    # Claims are serialized with sorted keys, as Go marshals a map.
    payload = token.split(".")[1]
    assert list(json.loads(b64url_decode(payload))) == sorted(parsed.claims)


def test_a_good_token_authenticates_as_its_account() -> None:
    found = authenticator().authenticate(token_of(pod=Ref("web", "pod-uid"), node=Ref("n1", "u")))
    assert found is not None
    assert found.audiences == (ISSUER,)
    user = found.user
    assert user.name == "system:serviceaccount:ns:robot"
    assert user.uid == "sa-uid"
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:ns")
    assert user.extra_dict() == {
        "authentication.kubernetes.io/credential-id": ["JTI=the-jti"],
        "authentication.kubernetes.io/node-name": ["n1"],
        "authentication.kubernetes.io/node-uid": ["u"],
        "authentication.kubernetes.io/pod-name": ["web"],
        "authentication.kubernetes.io/pod-uid": ["pod-uid"],
    }


def test_es256_tokens_verify_too() -> None:
    token = token_of(EC_KEY)
    parsed = parse(token)
    assert parsed is not None and parsed.header["alg"] == "ES256"
    assert len(parsed.signature) == 64  # JOSE's r||s, not DER
    assert authenticator().authenticate(token) is not None


def test_expiry_and_not_before_allow_a_minute_of_leeway() -> None:
    clock = FakeClock(T0)
    authn = authenticator(clock=clock)
    token = token_of()
    clock.advance(3600 + 60)
    assert authn.authenticate(token) is not None
    clock.advance(1)
    with pytest.raises(TokenError, match=r"^service account token has expired$"):
        authn.authenticate(token)
    early = authenticator(clock=FakeClock(datetime.fromtimestamp(T0.timestamp() - 61, UTC)))
    with pytest.raises(TokenError, match=r"^service account token is not valid yet$"):
        early.authenticate(token)


def test_audience_must_be_among_the_requested() -> None:
    authn = authenticator()
    with pytest.raises(TokenError) as refused:
        authn.authenticate(token_of(audiences=["vault"]))
    assert str(refused.value) == (
        f'token audiences ["vault"] is invalid for the target audiences ["{ISSUER}"]'
    )
    both = token_of(audiences=["vault", ISSUER])
    found = authn.authenticate(both, ["vault"])
    assert found is not None and found.audiences == ("vault",)


def test_signature_of_another_key_or_tampering_is_refused() -> None:
    authn = authenticator()
    with pytest.raises(TokenError, match=BAD_SIGNATURE):
        authn.authenticate(token_of(OTHER_KEY))
    head, body, sig = token_of().split(".")
    forged = json.loads(b64url_decode(body))
    forged["kubernetes.io"]["serviceaccount"]["name"] = "admin"
    with pytest.raises(TokenError, match=BAD_SIGNATURE):
        authn.authenticate(f"{head}.{b64url(json.dumps(forged).encode())}.{sig}")
    # "none" or HS256 headers never verify against our keys.
    none = b64url(json.dumps({"alg": "none"}).encode())
    with pytest.raises(TokenError, match=BAD_SIGNATURE):
        authn.authenticate(f"{none}.{body}.")


def test_tokens_of_other_issuers_or_no_jwt_are_not_ours() -> None:
    authn = authenticator()
    assert authn.authenticate(token_of(issuer="https://elsewhere.example")) is None
    for garbage in ("", "abc", "a.b.c", "a.b", "x.y.z.w", "é.é.é"):
        assert authn.authenticate(garbage) is None


def test_account_pod_and_secret_must_still_exist_with_their_uid() -> None:
    lookup = objects()
    authn = authenticator(lookup)
    token = token_of()
    pod_token = token_of(pod=Ref("web", "pod-uid"))
    secret_token = token_of(secret=Ref("s", "secret-uid"))
    for t in (token, pod_token, secret_token):
        assert authn.authenticate(t) is not None
    lookup.pods[("ns", "web")] = Found("recreated")
    with pytest.raises(TokenError, match=r"pod UID \(recreated\) does not match"):
        authn.authenticate(pod_token)
    del lookup.pods[("ns", "web")]
    with pytest.raises(TokenError, match=f"^{INVALIDATED}$"):
        authn.authenticate(pod_token)
    lookup.pods[("ns", "web")] = Found("pod-uid", deleted_at=T0.replace(minute=0, hour=11))
    with pytest.raises(TokenError, match=f"^{INVALIDATED}$"):
        authn.authenticate(pod_token)
    del lookup.secrets[("ns", "s")]
    with pytest.raises(TokenError, match=f"^{INVALIDATED}$"):
        authn.authenticate(secret_token)
    lookup.accounts[("ns", "robot")] = Found("other")
    with pytest.raises(TokenError, match=r"service account UID \(other\) does not match claim"):
        authn.authenticate(token)
    del lookup.accounts[("ns", "robot")]
    with pytest.raises(TokenError, match=r'^serviceaccounts "robot" not found$'):
        authn.authenticate(token)


def test_node_bound_tokens_end_with_the_node() -> None:
    lookup = objects()
    authn = authenticator(lookup)
    token = token_of(node=Ref("n1", "node-uid"))
    found = authn.authenticate(token)
    assert found is not None
    assert found.user.extra_dict()["authentication.kubernetes.io/node-name"] == ["n1"]
    lookup.nodes["n1"] = Found("new")
    with pytest.raises(TokenError, match=r"node UID \(new\) does not match"):
        authn.authenticate(token)
    del lookup.nodes["n1"]
    with pytest.raises(TokenError, match=f"^{INVALIDATED}$"):
        authn.authenticate(token)
    # A pod-bound token's node is informational: the pod is what is checked.
    assert authn.authenticate(token_of(pod=Ref("web", "pod-uid"), node=Ref("n1", "x")))


def test_bearer_tokens_through_the_authenticator() -> None:
    authn = Authenticator(service_accounts=authenticator())
    identity = authn.token(f"Bearer {token_of()}")
    assert identity is not None
    assert identity.name == "system:serviceaccount:ns:robot"
    assert identity.groups[-1] == "system:authenticated"
    with pytest.raises(AuthenticationError):
        authn.token(f"Bearer {token_of(OTHER_KEY)}")
    with pytest.raises(AuthenticationError):
        authn.token("Bearer not-a-jwt")
    user, auds, error = authn.review(token_of(), ())
    assert user is not None and auds == (ISSUER,) and error == ""
    user, auds, error = authn.review(token_of(OTHER_KEY), ())
    assert (user, auds, error) == (None, (), f"[invalid bearer token, {BAD_SIGNATURE}]")
    assert authn.review("nope", ()) == (None, (), "invalid bearer token")


def test_oidc_documents_and_jwks_round_trip() -> None:
    keys: list[PublicKey] = [RSA_KEY.public_key(), EC_KEY.public_key(), RSA_KEY.public_key()]
    doc = jwks(keys)
    assert len(doc["keys"]) == 2
    for key in doc["keys"]:
        public = public_key_from_jwk(key)
        assert key_id(public) == key["kid"]
    token = token_of()
    parsed = parse(token)
    assert parsed is not None
    rsa_jwk = next(k for k in doc["keys"] if k["kty"] == "RSA")
    assert verify(public_key_from_jwk(rsa_jwk), "RS256", parsed.signing_input, parsed.signature)
    assert openid_configuration(ISSUER, "", keys) == {
        "issuer": ISSUER,
        "jwks_uri": f"{ISSUER}/openid/v1/jwks",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256", "RS256"],
    }


def test_key_files(tmp_path: Path) -> None:
    private = tmp_path / "sa.key"
    private.write_bytes(
        RSA_KEY.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public = tmp_path / "sa.pub"
    pems = [
        k.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        for k in (RSA_KEY, EC_KEY)
    ]
    public.write_bytes(b"".join(pems))
    assert key_id(load_private_key(str(private)).public_key()) == key_id(RSA_KEY.public_key())
    assert [key_id(k) for k in load_public_keys(str(public))] == [
        key_id(RSA_KEY.public_key()),
        key_id(EC_KEY.public_key()),
    ]
    # A private key file verifies too (its public half), as kube's.
    assert len(load_public_keys(str(private))) == 1
    with pytest.raises(KeyFileError, match="no public keys found"):
        (tmp_path / "empty").write_text("nothing\n")
        load_public_keys(str(tmp_path / "empty"))
    with pytest.raises(KeyFileError, match="--service-account-signing-key-file"):
        load_private_key(str(tmp_path / "missing"))
    p384 = ec.generate_private_key(ec.SECP384R1())
    (tmp_path / "p384").write_bytes(
        p384.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(KeyFileError, match="only P-256"):
        load_private_key(str(tmp_path / "p384"))


def test_a_recent_tokens_missing_objects_may_be_the_caches_lag() -> None:
    lookup = objects()
    clock = FakeClock(T0)
    authn = authenticator(lookup, clock)
    token = token_of(pod=Ref("web", "pod-uid"))
    del lookup.pods[("ns", "web")]
    with pytest.raises(StaleLookup, match=f"^{INVALIDATED}$"):
        authn.authenticate(token)
    # Once the caches caught up, the answer is final.
    with pytest.raises(TokenError) as final:
        authn.authenticate(token, settled=True)
    assert type(final.value) is TokenError
    # A token older than FRESH_SECONDS named objects the caches have long seen.
    clock.advance(FRESH_SECONDS + 1)
    with pytest.raises(TokenError) as old:
        authn.authenticate(token)
    assert type(old.value) is TokenError
    bearer = Authenticator(service_accounts=authenticator(lookup, FakeClock(T0)))
    with pytest.raises(StaleTokenError):
        bearer.token(f"Bearer {token}")
    with pytest.raises(AuthenticationError) as settled:
        bearer.token(f"Bearer {token}", settled=True)
    assert type(settled.value) is AuthenticationError


def test_legacy_secret_tokens_live_as_long_as_their_secret() -> None:
    from tinykube.jwt import legacy_claims

    lookup = objects()
    token = encode(legacy_claims("ns", "robot", "sa-uid", "robot-token"), RSA_KEY)
    lookup.secrets[("ns", "robot-token")] = Found("s-uid", token=token.encode())
    clock = FakeClock(T0)
    authn = authenticator(lookup, clock)
    clock.advance(10 * 365 * 86400)  # no expiry
    found = authn.authenticate(token)
    assert found is not None
    assert found.user.name == "system:serviceaccount:ns:robot"
    assert found.user.uid == "sa-uid"
    assert found.audiences == (ISSUER,)
    lookup.secrets[("ns", "robot-token")] = Found("s-uid", token=b"another")
    with pytest.raises(TokenError, match=r"^Token does not match server's copy$"):
        authn.authenticate(token)
    del lookup.secrets[("ns", "robot-token")]
    with pytest.raises(TokenError, match=r"^Token has been invalidated$"):
        authn.authenticate(token)
    lookup.secrets[("ns", "robot-token")] = Found("s-uid", token=token.encode())
    lookup.accounts[("ns", "robot")] = Found("new-uid")
    with pytest.raises(TokenError, match=r"ServiceAccount UID \(new-uid\) does not match"):
        authn.authenticate(token)
    with pytest.raises(TokenError, match=BAD_SIGNATURE):
        authn.authenticate(encode(legacy_claims("ns", "robot", "sa-uid", "x"), OTHER_KEY))
