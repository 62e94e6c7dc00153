"""KinesisSnowflakeHook reaches the fakesnow server over HTTP through the `protocol` extra, with a
password or a key pair (whose JWT the emulator verifies against the user's registered public key,
see tests/emulators/fakesnow_auth.py)."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
import snowflake.connector
from airflow.models.connection import Connection
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from snowflake.connector.errors import DatabaseError

from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials
from airflow_kinesis_snowflake.get_provider_info import SNOWFLAKE_CONN_TYPE
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def test_protocol_extra_reaches_the_connector(aws_connections: Emulators) -> None:
    hook = KinesisSnowflakeHook(snowflake_conn_id="snowflake_default")
    params = hook.job_connection_params()
    assert params["protocol"] == "http" and params["port"] == aws_connections.fakesnow_port
    conn = hook.get_conn()
    try:
        cur = conn.cursor()
        cur.execute("SELECT 41 + 1")
        assert cur.fetchone() == (42,)
    finally:
        conn.close()


def test_unknown_protocol_is_refused(aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = aws_connections.snowflake_connection()
    bad["extra"]["protocol"] = "ftp"
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_BAD", json.dumps(bad))
    with pytest.raises(ValueError, match="extra 'protocol' must be one of https, http"):
        KinesisSnowflakeHook(snowflake_conn_id="snowflake_bad").get_conn()


def test_connection_test_passes_against_the_emulator(aws_connections: Emulators) -> None:
    hook = KinesisSnowflakeHook(snowflake_conn_id="snowflake_default")
    result: Any = hook.test_connection()
    assert result == (True, "Snowflake connection 'snowflake_default': Connection successfully tested")


def test_a_connection_of_this_providers_type_is_tested_as_the_ui_tests_it(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow finds the hook by the connection's type (``kinesis_snowflake_snowflake``), which reads ``protocol``."""
    typed = aws_connections.snowflake_connection() | {"conn_type": SNOWFLAKE_CONN_TYPE}
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_TYPED", json.dumps(typed))
    connection = Connection(
        conn_id="snowflake_typed",
        conn_type=SNOWFLAKE_CONN_TYPE,
        login=typed["login"],
        password=typed["password"],
        extra=json.dumps(typed["extra"]),
    )
    assert connection.test_connection() == (
        True,
        "Snowflake connection 'snowflake_typed': Connection successfully tested",
    )


def test_the_connection_test_fails_on_bad_credentials_with_snowflakes_reason(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = f"KINESIS_SVC_{uuid.uuid4().hex[:8].upper()}"
    create_service_user(aws_connections, user, new_key())
    for conn_id, connection, reason in (
        (
            "snowflake_wrong_key",
            key_pair_connection(aws_connections, user, new_key(), "other-7d1e"),
            "JWT token is invalid",
        ),
        (
            "snowflake_password",
            aws_connections.snowflake_connection() | {"login": user, "password": "any-password"},
            "Incorrect username or password",
        ),
    ):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
        ok, message = KinesisSnowflakeHook(snowflake_conn_id=conn_id).test_connection()
        assert not ok
        assert message.startswith(f"Snowflake connection {conn_id!r}: ") and reason in message, message


# -- key-pair authentication ----------------------------------------------------------------------

USER_NOPS = {"nop_regexes": [r"^\s*CREATE\s+USER\s", r"^\s*ALTER\s+USER\s"]}


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_body(key: rsa.RSAPrivateKey) -> str:
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()


def encrypted_pem(key: rsa.RSAPrivateKey, passphrase: str) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(passphrase.encode()),
    ).decode()


def create_service_user(emulators: Emulators, user: str, key: rsa.RSAPrivateKey) -> None:
    """``CREATE USER ... TYPE = SERVICE RSA_PUBLIC_KEY``: a no-op in fakesnow, the key registered for logins."""
    conn = emulators.snowflake_connect(session_parameters=USER_NOPS)
    try:
        conn.cursor().execute(f"CREATE USER IF NOT EXISTS {user} TYPE = SERVICE RSA_PUBLIC_KEY = '{public_body(key)}'")
    finally:
        conn.close()


def key_pair_connection(emulators: Emulators, user: str, key: rsa.RSAPrivateKey, passphrase: str) -> dict[str, Any]:
    conn = emulators.snowflake_connection()
    conn["login"], conn["password"] = user, ""
    conn["extra"].update(private_key_content=encrypted_pem(key, passphrase), private_key_passphrase=passphrase)
    return conn


def test_a_service_user_logs_in_with_its_key_pair_from_the_operator_and_from_the_job(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, key = f"KINESIS_SVC_{uuid.uuid4().hex[:8].upper()}", new_key()
    create_service_user(aws_connections, user, key)
    connection = key_pair_connection(aws_connections, user, key, "svc-passphrase-1b2c")
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_KEY_PAIR", json.dumps(connection))
    hook = KinesisSnowflakeHook(snowflake_conn_id="snowflake_key_pair")

    # The operator's own connection (the Snowflake provider's path) ...
    conn = hook.get_conn()
    try:
        cur = conn.cursor()
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    finally:
        conn.close()
    # ... and the Spark job's, from what the hook hands it.
    params = hook.job_connection_params()
    with JobCredentials(aws={}, snowflake=json.loads(json.dumps(params))).snowflake_connection() as job_conn:
        assert job_conn.cursor().execute("SELECT 2").fetchone() == (2,)


def test_the_emulator_refuses_another_key_and_a_password_for_a_service_user(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = f"KINESIS_SVC_{uuid.uuid4().hex[:8].upper()}"
    create_service_user(aws_connections, user, new_key())

    intruder = key_pair_connection(aws_connections, user, new_key(), "other-passphrase-77")
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_INTRUDER", json.dumps(intruder))
    with pytest.raises(DatabaseError, match="JWT token is invalid"):
        KinesisSnowflakeHook(snowflake_conn_id="snowflake_intruder").get_conn()

    with pytest.raises(DatabaseError, match="Incorrect username or password"):
        snowflake.connector.connect(
            user=user,
            password="any-password",
            account="fakesnow",
            host="127.0.0.1",
            port=aws_connections.fakesnow_port,
            protocol="http",
        )


# -- bounded requests and statements --------------------------------------------------------------


def test_every_connection_is_bounded_unless_its_extras_say_otherwise(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = KinesisSnowflakeHook(snowflake_conn_id="snowflake_default")
    job_params = json.loads(json.dumps(hook.job_connection_params()))  # as the job gets them
    # The operators' connection, the job's from what the hook hands it, and the job's from a
    # Secrets Manager secret (connector arguments that name no timeout).
    connections = [
        hook.get_conn(),
        JobCredentials(aws={}, snowflake=job_params).connect_snowflake(),
        JobCredentials(aws={}, snowflake=aws_connections.snowflake_params()).connect_snowflake(),
    ]
    try:
        for conn in connections:
            assert (conn.network_timeout, conn.login_timeout, conn.socket_timeout) == (1800, 120, 60)
            assert conn.cursor().execute("SELECT 1").fetchone() == (1,)
    finally:
        for conn in connections:
            conn.close()
    assert job_params["session_parameters"] == {"STATEMENT_TIMEOUT_IN_SECONDS": 1740}

    tuned = aws_connections.snowflake_connection()
    tuned["extra"].update(network_timeout="7200", login_timeout=30, socket_timeout=90)
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_TUNED", json.dumps(tuned))
    conn = KinesisSnowflakeHook(snowflake_conn_id="snowflake_tuned").get_conn()
    try:
        assert (conn.network_timeout, conn.login_timeout, conn.socket_timeout) == (7200, 30, 90)
    finally:
        conn.close()


def test_a_statement_the_server_keeps_failing_fails_after_a_bounded_retry(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connector retries an HTTP 500 only as long as network_timeout allows, on either side."""
    failing = aws_connections.snowflake_connection()
    failing["extra"]["network_timeout"] = 2
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_FAILING", json.dumps(failing))
    hook = KinesisSnowflakeHook(snowflake_conn_id="snowflake_failing")
    # Enough answers of 500 that a connector retrying without a bound would meet the last of them
    # and then succeed.
    attempts = 8
    connections = [hook.get_conn(), JobCredentials(aws={}, snowflake=hook.job_connection_params()).connect_snowflake()]
    served = []
    try:
        for n, conn in enumerate(connections):
            marker = f"SELECT 'the server keeps failing {n}'"
            aws_connections.inject_snowflake_faults([{"match": marker, "action": "http_500", "times": attempts}])
            with pytest.raises(snowflake.connector.errors.InternalServerError, match="HTTP 500"):
                conn.cursor().execute(marker)
            served.append(len(aws_connections.served_snowflake_faults()))
    finally:
        aws_connections.inject_snowflake_faults([])
        for conn in connections:
            conn.close()
    assert all(1 <= n < attempts for n in served), served
