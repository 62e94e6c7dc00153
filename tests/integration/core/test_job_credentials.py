"""The Spark job's credentials with ``driver_identity``: its own AWS identity, Snowflake's from Secrets Manager.

The moto server serves Secrets Manager and Kinesis; the fakesnow server verifies the key-pair login
against the service user's registered public key (tests/emulators/fakesnow_auth.py).
"""

from __future__ import annotations

import json
import traceback
import uuid

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials, snowflake_params_from_secret
from airflow_kinesis_snowflake.core.redaction import redacted_output
from tests.conftest import create_stream, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION

pytestmark = pytest.mark.integration

PASSPHRASE = "secret-key-passphrase-8c1d"


@pytest.fixture
def own_identity(emulators: Emulators, monkeypatch: pytest.MonkeyPatch) -> Emulators:
    """The driver's environment on a cluster node: its own AWS identity, no connection of Airflow's."""
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "SNOWFLAKE_CONNECTION_JSON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", emulators.aws_endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", emulators.aws_endpoint)
    return emulators


def service_user(emulators: Emulators) -> tuple[str, rsa.RSAPrivateKey]:
    user, key = f"KINESIS_SVC_{uuid.uuid4().hex[:8].upper()}", rsa.generate_private_key(65537, 2048)
    body = "".join(
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
        .splitlines()[1:-1]
    )
    conn = emulators.snowflake_connect(session_parameters={"nop_regexes": [r"^\s*CREATE\s+USER\s"]})
    try:
        conn.cursor().execute(f"CREATE USER {user} TYPE = SERVICE RSA_PUBLIC_KEY = '{body}'")
    finally:
        conn.close()
    return user, key


def test_the_driver_reads_snowflake_from_the_secret_and_ships_no_aws_credential(own_identity: Emulators) -> None:
    user, key = service_user(own_identity)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSPHRASE.encode()),
    ).decode()
    secret_id = unique("kinesis/snowflake")
    own_identity.boto3_client("secretsmanager").create_secret(
        Name=secret_id,
        SecretString=json.dumps(
            {
                "account": "fakesnow",
                "user": user,
                "host": "127.0.0.1",
                "port": own_identity.fakesnow_port,
                "protocol": "http",
                "private_key": encrypted,
                "private_key_passphrase": PASSPHRASE,
            }
        ),
    )
    stream = unique("identity")
    create_stream(own_identity, stream, 1)

    credentials = JobCredentials.from_driver_identity(secret_id)

    # Where AWS is, but no credential: executors use their own identity too.
    assert credentials.aws == {"AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_KINESIS": own_identity.aws_endpoint}
    assert "private_key" not in credentials.snowflake and "private_key_passphrase" not in credentials.snowflake
    with credentials.snowflake_connection() as conn:
        assert conn.cursor().execute("SELECT CURRENT_USER() IS NOT NULL").fetchone() == (True,)
    shards = credentials.kinesis_client(REGION).list_shards(StreamName=stream)["Shards"]
    assert [s["ShardId"] for s in shards] == ["shardId-000000000000"]


def test_a_missing_secret_is_named(own_identity: Emulators) -> None:
    with pytest.raises(
        RuntimeError, match=r"could not be read from secret 'kinesis/absent'.*ResourceNotFoundException"
    ):
        JobCredentials.from_driver_identity("kinesis/absent")


def test_a_secret_that_is_not_an_object_of_arguments_is_refused_without_quoting_it() -> None:
    with pytest.raises(ValueError, match="secret 's' is not JSON") as raised:
        snowflake_params_from_secret("password=hunter2-hunter2", "s")
    assert "hunter2" not in str(raised.value)
    with pytest.raises(ValueError, match="holds a JSON list"):
        snowflake_params_from_secret('["hunter2-hunter2"]', "s")


def test_the_jobs_output_hides_every_value_read_from_the_secret(
    own_identity: Emulators, capsys: pytest.CaptureFixture[str]
) -> None:
    key = rsa.generate_private_key(65537, 2048)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSPHRASE.encode()),
    ).decode()
    password = f'pass"word\\{uuid.uuid4().hex[:8]}'
    secret = {"account": "fakesnow", "user": "U", "password": password, "private_key": encrypted}
    secret["private_key_passphrase"] = PASSPHRASE
    secret_id = unique("kinesis/snowflake")
    own_identity.boto3_client("secretsmanager").create_secret(Name=secret_id, SecretString=json.dumps(secret))
    credentials = JobCredentials.from_driver_identity(secret_id)
    der_base64 = credentials.snowflake["private_key_der_base64"]
    # Values the Airflow worker never saw, so its masker cannot hide them in the task log.
    values = [password, json.dumps(password)[1:-1], PASSPHRASE, der_base64, *encrypted.splitlines()[1:-1]]

    with redacted_output(credentials.secret_values()):
        print(f"connecting as U with {password}")
        print(json.dumps(credentials.snowflake))
        print(encrypted)
        try:
            raise RuntimeError(f"login failed with passphrase {PASSPHRASE} and key {der_base64}")
        except RuntimeError:
            traceback.print_exc()

    out, err = capsys.readouterr()
    assert "connecting as U with ***" in out and "RuntimeError: login failed with passphrase ***" in err
    assert [v for v in values if v in out or v in err] == []
