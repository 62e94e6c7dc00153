"""Private keys for Snowflake key-pair authentication, in every form they arrive in.

The Snowflake provider returns the key of a key-pair connection as PKCS#8 DER bytes (6.20 and
later) or as a key object (earlier releases); a secret in AWS Secrets Manager holds it as PEM
text, encrypted or not. Everything here turns any of them into unencrypted PKCS#8 DER, the form
``snowflake.connector.connect(private_key=...)`` takes. No error message ever contains key material.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

PEM_MARKER = b"-----BEGIN"


def _passphrase_bytes(passphrase: bytes | str | None) -> bytes | None:
    if passphrase is None or passphrase == "" or passphrase == b"":
        return None
    return passphrase.encode() if isinstance(passphrase, str) else passphrase


def _load(data: bytes, passphrase: bytes | None) -> PrivateKeyTypes:
    if data.lstrip().startswith(PEM_MARKER):
        return serialization.load_pem_private_key(data, password=passphrase)
    return serialization.load_der_private_key(data, password=passphrase)


def load_private_key(key: Any, passphrase: bytes | str | None = None) -> PrivateKeyTypes:
    """A private key object from a key object, DER or PEM bytes, PEM text, or base64 DER text.

    :param key: the key in any of those forms.
    :param passphrase: the passphrase of an encrypted key; ignored for a key object.
    :raises ValueError: the key cannot be read (wrong or missing passphrase, not a private key);
        the message names the cause, never the key.
    """
    if hasattr(key, "private_bytes"):
        loaded: PrivateKeyTypes = key
        return loaded
    password = _passphrase_bytes(passphrase)
    if isinstance(key, str):
        text = key.strip()
        if text.encode().startswith(PEM_MARKER):
            data = text.encode()
        else:
            try:
                data = base64.b64decode(text, validate=False)
            except (binascii.Error, ValueError):
                raise ValueError("the private key is neither PEM text nor base64-encoded DER") from None
    elif isinstance(key, bytes | bytearray | memoryview):
        data = bytes(key)
    else:
        raise ValueError(f"a private key cannot be read from a {type(key).__name__}")
    try:
        try:
            return _load(data, password)
        except TypeError:
            if password is None:
                raise
            # A passphrase given for a key that is not encrypted (the provider's DER bytes are not).
            return _load(data, None)
    except TypeError as err:
        # cryptography: "Password was not given but private key is encrypted", or the reverse.
        raise ValueError(f"the private key could not be decrypted: {err}") from None
    except ValueError as err:
        # Its message is about the format or a bad passphrase; it never quotes the key.
        raise ValueError(f"the private key could not be read: {err}") from None


def private_key_der(key: Any, passphrase: bytes | str | None = None) -> bytes:
    """Unencrypted PKCS#8 DER bytes of ``key`` (any form :func:`load_private_key` reads)."""
    return load_private_key(key, passphrase).private_bytes(
        encoding=serialization.Encoding.DER,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
