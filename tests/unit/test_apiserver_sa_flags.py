"""kube-apiserver's service account token flags on tinykube's apiserver."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from apiserver.__main__ import parse_args

TLS = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]


def test_defaults_are_kubeadms_issuer_and_no_keys() -> None:
    settings, _ = parse_args(TLS)
    assert settings.service_account_issuers == ("https://kubernetes.default.svc.cluster.local",)
    assert settings.audiences == settings.service_account_issuers
    assert settings.service_account_key_files == ()
    assert settings.service_account_max_token_expiration_seconds == 0


def test_flags(tmp_path: Path) -> None:
    key = tmp_path / "sa.key"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    settings, _ = parse_args(
        [
            *TLS,
            "--service-account-signing-key-file", str(key),
            "--service-account-key-file", str(key),
            "--service-account-issuer", "https://a.example",
            "--service-account-issuer", "https://b.example",
            "--api-audiences", "x,y",
            "--service-account-max-token-expiration", "1h30m",
        ]
    )  # fmt: skip
    assert settings.service_account_issuers == ("https://a.example", "https://b.example")
    assert settings.audiences == ("x", "y")
    assert settings.service_account_key_files == (str(key),)
    assert settings.service_account_max_token_expiration_seconds == 5400


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--service-account-key-file", "/nonexistent"], "No such file or directory"),
        (["--service-account-max-token-expiration", "2x"], "invalid duration '2x'"),
    ],
)
def test_bad_flags_are_flag_errors(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args([*TLS, *flags])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
