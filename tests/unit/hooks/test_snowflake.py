"""KinesisSnowflakeHook hands a key-pair connection's key to the Spark job, masked, in every form."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_kinesis_snowflake.compat import redact
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

PASSPHRASE = "key-passphrase-4f1c2e"


@pytest.fixture
def key() -> rsa.RSAPrivateKey:
    # A key of its own per test: Airflow's masker keeps what any earlier test registered.
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def der(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem(key: rsa.RSAPrivateKey, passphrase: str | None = None) -> str:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode()) if passphrase else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption).decode()


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any], password: str = "") -> str:
    extra = {"account": "myorg-myaccount", "warehouse": "INGEST_WH", **extra}
    value = {"conn_type": "snowflake", "login": "KINESIS_INGEST", "password": password, "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(value))
    return conn_id


def key_pair_connections(key: rsa.RSAPrivateKey, tmp_path: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """Extras and password of each way a key-pair connection can be written."""
    key_file = tmp_path / "rsa_key.p8"
    key_file.write_text(pem(key))
    encrypted_file = tmp_path / "rsa_key_encrypted.p8"
    encrypted_file.write_text(pem(key, PASSPHRASE))
    return {
        "content": ({"private_key_content": pem(key)}, ""),
        "content, passphrase as the password": ({"private_key_content": pem(key, PASSPHRASE)}, PASSPHRASE),
        "content, passphrase extra": (
            {"private_key_content": pem(key, PASSPHRASE), "private_key_passphrase": PASSPHRASE},
            "",
        ),
        "file": ({"private_key_file": str(key_file)}, ""),
        "encrypted file, private_key_file_pwd extra": (
            {"private_key_file": str(encrypted_file), "private_key_file_pwd": PASSPHRASE},
            "",
        ),
    }


CASES = [
    "content",
    "content, passphrase as the password",
    "content, passphrase extra",
    "file",
    "encrypted file, private_key_file_pwd extra",
]


@pytest.mark.parametrize("case", CASES)
def test_the_job_gets_the_key_as_base64_der_and_it_is_masked(
    key: rsa.RSAPrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    extra, password = key_pair_connections(key, tmp_path)[case]
    conn_id = connection(monkeypatch, "snowflake_key_pair", extra, password)

    params = KinesisSnowflakeHook(snowflake_conn_id=conn_id).job_connection_params()

    assert base64.b64decode(params["private_key_der_base64"]) == der(key)
    assert "private_key" not in params and "password" not in params
    assert params["user"] == "KINESIS_INGEST" and params["account"] == "myorg-myaccount"
    # JSON-safe, as it travels, and the key never shows in a log: neither the DER that Airflow
    # never saw, nor any line of the PEM text (Airflow masks private_key_content as a whole only,
    # and never sees what private_key_file holds).
    assert json.loads(json.dumps(params)) == params
    assert set(str(redact(params["private_key_der_base64"]))) == {"*"}
    key_text = (
        extra["private_key_content"] if "private_key_content" in extra else Path(extra["private_key_file"]).read_text()
    )
    body = key_text.strip().splitlines()[1:-1]
    assert [redact(f"key line {line}") for line in body] == ["key line ***"] * len(body)
    assert not [line for line in body if line in str(redact(key_text))]


def test_a_password_is_masked_as_it_appears_in_the_jobs_json(monkeypatch: pytest.MonkeyPatch) -> None:
    # Quotes and backslashes are escaped in SNOWFLAKE_CONNECTION_JSON: a form Airflow never registers.
    password = f'sn0w"flake\\pass-{uuid.uuid4().hex[:8]}'
    conn_id = connection(monkeypatch, "snowflake_password", {}, password)

    params = KinesisSnowflakeHook(snowflake_conn_id=conn_id).job_connection_params()

    assert params["password"] == password
    shipped = json.dumps(params)
    assert json.dumps(password)[1:-1] in shipped
    assert password not in str(redact(shipped)) and json.dumps(password)[1:-1] not in str(redact(shipped))
    assert redact(f"connect with {password}") == "connect with ***"


def test_a_wrong_passphrase_names_the_connection_and_not_the_key(
    key: rsa.RSAPrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    encrypted = pem(key, PASSPHRASE)
    extra = {"private_key_content": encrypted, "private_key_passphrase": "not-the-passphrase"}
    conn_id = connection(monkeypatch, "snowflake_wrong_passphrase", extra)
    with pytest.raises(
        ValueError, match="connection 'snowflake_wrong_passphrase': the private key could not be read"
    ) as raised:
        KinesisSnowflakeHook(snowflake_conn_id=conn_id).job_connection_params()
    assert encrypted.splitlines()[1] not in str(raised.value)


def test_the_connection_bounds_its_requests_and_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = connection(monkeypatch, "snowflake_bounds", {"session_parameters": {"QUERY_TAG": "ingest"}}, "pw")
    params = KinesisSnowflakeHook(snowflake_conn_id=conn_id).job_connection_params()
    assert (params["network_timeout"], params["login_timeout"], params["socket_timeout"]) == (1800, 120, 60)
    assert params["session_parameters"] == {"QUERY_TAG": "ingest", "STATEMENT_TIMEOUT_IN_SECONDS": 1740}

    extra = {"network_timeout": 600, "login_timeout": "45", "socket_timeout": ""}
    conn_id = connection(monkeypatch, "snowflake_own_bounds", extra, "pw")
    params = KinesisSnowflakeHook(snowflake_conn_id=conn_id).job_connection_params()
    assert (params["network_timeout"], params["login_timeout"], params["socket_timeout"]) == (600, 45, 60)
    assert params["session_parameters"] == {"STATEMENT_TIMEOUT_IN_SECONDS": 540}

    conn_id = connection(monkeypatch, "snowflake_bad_bound", {"network_timeout": -1}, "pw")
    with pytest.raises(ValueError, match="connection 'snowflake_bad_bound': 'network_timeout' must be a whole"):
        KinesisSnowflakeHook(snowflake_conn_id=conn_id).get_conn()
