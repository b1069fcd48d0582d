"""JSON Web Tokens as Kubernetes' service account tokens use them: compact JWS, RS256 or ES256.

The few lines of RFC 7515/7519/7517 these tokens need (kube's go-jose usage): `encode` signs
claims with an RSA or EC P-256 private key (header `alg` and `kid`, kid being the unpadded
base64url SHA-256 of the public key's PKIX DER, kube's keyIDFromPublicKey), `parse` splits a
token without verifying it, `verify` checks a signature, `jwk` / `public_key_from_jwk` convert
keys for JWKS documents, and the key file readers accept what kube's
--service-account-(signing-)key-file do. Signatures are the `cryptography` library's. Shared by
the apiserver (TokenRequest, authentication) and the controller manager (token Secrets). Pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


class KeyFileError(ValueError):
    """A service account key file that cannot be used; the message names the file."""


# ---- base64url and keys ----------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not text.isascii() or "=" in text:
        raise ValueError("not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


def key_id(public: PublicKey) -> str:
    """kube's key id: unpadded base64url of the SHA-256 of the key's PKIX DER."""
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return b64url(hashlib.sha256(der).digest())


def algorithm_of(public: PublicKey) -> str:
    if isinstance(public, rsa.RSAPublicKey):
        return "RS256"
    if isinstance(public.curve, ec.SECP256R1):
        return "ES256"
    raise KeyFileError(f"unsupported elliptic curve {public.curve.name}: only P-256 (ES256)")


def _int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8 or 1, "big")


def jwk(public: PublicKey) -> dict[str, str]:
    """The key as a JSON Web Key (RFC 7517), as kube's /openid/v1/jwks lists it."""
    kid, alg = key_id(public), algorithm_of(public)
    if isinstance(public, rsa.RSAPublicKey):
        numbers = public.public_numbers()
        return {
            "use": "sig",
            "kty": "RSA",
            "kid": kid,
            "alg": alg,
            "n": b64url(_int_bytes(numbers.n)),
            "e": b64url(_int_bytes(numbers.e)),
        }
    point = public.public_numbers()
    return {
        "use": "sig",
        "kty": "EC",
        "kid": kid,
        "crv": "P-256",
        "alg": alg,
        "x": b64url(point.x.to_bytes(32, "big")),
        "y": b64url(point.y.to_bytes(32, "big")),
    }


def public_key_from_jwk(key: Mapping[str, Any]) -> PublicKey:
    """A JWK (RSA or EC P-256) back as a key: what a relying party does with the JWKS."""
    if key.get("kty") == "RSA":
        n = int.from_bytes(b64url_decode(str(key["n"])), "big")
        e = int.from_bytes(b64url_decode(str(key["e"])), "big")
        return rsa.RSAPublicNumbers(e, n).public_key()
    if key.get("kty") == "EC" and key.get("crv") == "P-256":
        x = int.from_bytes(b64url_decode(str(key["x"])), "big")
        y = int.from_bytes(b64url_decode(str(key["y"])), "big")
        return ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    raise ValueError(f"unsupported JWK key type {key.get('kty')!r}")


def sign(key: PrivateKey, data: bytes) -> bytes:
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def verify(public: PublicKey, alg: str, data: bytes, signature: bytes) -> bool:
    try:
        if alg == "RS256" and isinstance(public, rsa.RSAPublicKey):
            public.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
            return True
        if alg == "ES256" and isinstance(public, ec.EllipticCurvePublicKey):
            if len(signature) != 64:
                return False
            r = int.from_bytes(signature[:32], "big")
            s = int.from_bytes(signature[32:], "big")
            public.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
            return True
    except InvalidSignature:
        return False
    return False


def encode(claims: Mapping[str, Any], key: PrivateKey) -> str:
    """A compact JWS of `claims`, signed with `key` (header alg and kid as kube's)."""
    public = key.public_key()
    header = {"alg": algorithm_of(public), "kid": key_id(public)}
    signing_input = (
        b64url(json.dumps(header, separators=(",", ":")).encode())
        + "."
        + b64url(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    )
    return signing_input + "." + b64url(sign(key, signing_input.encode("ascii")))


@dataclass(frozen=True)
class Parsed:
    header: dict[str, Any]
    claims: dict[str, Any]
    signing_input: bytes
    signature: bytes


def parse(token: str) -> Parsed | None:
    """A compact JWS's parts, unverified; None when `token` is no JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except ValueError:  # bad base64, bad JSON (JSONDecodeError), bad UTF-8
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return Parsed(header, claims, f"{parts[0]}.{parts[1]}".encode("ascii"), signature)


def load_private_key(path: str, flag: str = "--service-account-signing-key-file") -> PrivateKey:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise KeyFileError(f"{flag} {path!r}: {exc.strerror}") from exc
    try:
        key = serialization.load_pem_private_key(data, None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{flag} {path!r}: not a PEM private key ({exc})") from exc
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise KeyFileError(f"{flag} {path!r}: not an RSA or EC key")
    algorithm_of(key.public_key())
    return key


def _pem_blocks(data: bytes) -> list[bytes]:
    blocks, rest = [], data
    while b"-----BEGIN " in rest:
        start = rest.index(b"-----BEGIN ")
        end_marker = rest.find(b"-----END ", start)
        if end_marker < 0:
            break
        end = rest.find(b"-----", end_marker + 9)
        if end < 0:
            break
        blocks.append(rest[start : end + 5] + b"\n")
        rest = rest[end + 5 :]
    return blocks


def load_public_keys(path: str) -> list[PublicKey]:
    """Every key in a `--service-account-key-file`: PEM public keys, private keys (their public
    half) or certificates, as kube's keyutil.PublicKeysFromFile reads."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise KeyFileError(f"--service-account-key-file {path!r}: {exc.strerror}") from exc
    keys: list[PublicKey] = []
    for block in _pem_blocks(data):
        try:
            if b"CERTIFICATE" in block.split(b"\n", 1)[0]:
                found: Any = x509.load_pem_x509_certificate(block).public_key()
            elif b"PRIVATE KEY" in block.split(b"\n", 1)[0]:
                found = serialization.load_pem_private_key(block, None).public_key()
            else:
                found = serialization.load_pem_public_key(block)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"--service-account-key-file {path!r}: {exc}") from exc
        if isinstance(found, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
            algorithm_of(found)
            keys.append(found)
    if not keys:
        raise KeyFileError(f"--service-account-key-file {path!r}: no public keys found")
    return keys


# ---- Kubernetes' legacy (Secret-held) service account tokens ----------------------------------

LEGACY_ISSUER = "kubernetes/serviceaccount"
LEGACY_PREFIX = "kubernetes.io/serviceaccount/"


def legacy_claims(namespace: str, account: str, account_uid: str, secret: str) -> dict[str, Any]:
    """kube's LegacyClaims: what the token controller writes into a
    kubernetes.io/service-account-token Secret (no audience, no expiry)."""
    return {
        "iss": LEGACY_ISSUER,
        "sub": f"system:serviceaccount:{namespace}:{account}",
        LEGACY_PREFIX + "namespace": namespace,
        LEGACY_PREFIX + "secret.name": secret,
        LEGACY_PREFIX + "service-account.name": account,
        LEGACY_PREFIX + "service-account.uid": account_uid,
    }
