"""A private key in any form the Snowflake provider or a secret gives it becomes unencrypted PKCS#8 DER."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_kinesis_snowflake.core.keys import load_private_key, private_key_der

PASSPHRASE = "correct horse battery staple"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def der(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem(key: rsa.RSAPrivateKey, passphrase: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode()) if passphrase else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


FORMS: dict[str, Callable[[rsa.RSAPrivateKey], Any]] = {
    "key object (Snowflake provider before 6.20)": lambda k: k,
    "DER bytes (Snowflake provider 6.20)": der,
    "PEM bytes": pem,
    "PEM text": lambda k: pem(k).decode(),
    "base64 DER text": lambda k: base64.b64encode(der(k)).decode(),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_gives_the_same_der(key: rsa.RSAPrivateKey, form: str) -> None:
    assert private_key_der(FORMS[form](key)) == der(key)


@pytest.mark.parametrize("passphrase", [PASSPHRASE, PASSPHRASE.encode()])
def test_an_encrypted_key_is_decrypted_with_its_passphrase(key: rsa.RSAPrivateKey, passphrase: str | bytes) -> None:
    assert private_key_der(pem(key, PASSPHRASE).decode(), passphrase) == der(key)


def test_a_passphrase_given_for_a_key_that_is_not_encrypted_is_ignored(key: rsa.RSAPrivateKey) -> None:
    # The provider hands over DER it already decrypted, while the connection still names the passphrase.
    assert private_key_der(der(key), PASSPHRASE) == der(key)


@pytest.mark.parametrize(
    ("passphrase", "cause"),
    [(None, "could not be decrypted"), ("wrong passphrase", "could not be read")],
)
def test_an_encrypted_key_without_its_passphrase_is_refused_without_quoting_it(
    key: rsa.RSAPrivateKey, passphrase: str | None, cause: str
) -> None:
    encrypted = pem(key, PASSPHRASE).decode()
    with pytest.raises(ValueError, match=cause) as raised:
        load_private_key(encrypted, passphrase)
    body = "".join(encrypted.splitlines()[1:-1])
    assert body[:40] not in str(raised.value) and PASSPHRASE not in str(raised.value)


def test_something_that_is_not_a_key_is_refused() -> None:
    with pytest.raises(ValueError, match="could not be read"):
        private_key_der(b"not a key")
    with pytest.raises(ValueError, match="cannot be read from a int"):
        private_key_der(42)
