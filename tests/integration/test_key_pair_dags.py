"""The provisioning and ingest DAGs with key-pair Snowflake connections, end to end.

An administrator's key-pair connection (encrypted key, passphrase as the password, as the Snowflake
provider reads it) runs the provisioning DAG, which creates the connector's ``TYPE = SERVICE`` user
with its RSA public key. The ingest DAG then logs in as that user with its private key file, from
the operator and from the Spark job. The fakesnow server verifies every key-pair login's JWT against
the public key the user was created with (tests/emulators/fakesnow_auth.py), and refuses the
service user a password.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import snowflake.connector
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from snowflake.connector.errors import DatabaseError

from airflow_kinesis_snowflake.core.iam import policy_document, required_permissions
from tests.conftest import create_stream, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.test_ingest_dag import write_connector

pytestmark = pytest.mark.integration

# Statements fakesnow cannot run (it has no roles, users or grants), run as no-ops; the emulator
# still learns the users' keys from them. Their SQL is checked as text by the provisioning goldens.
TEXT_ONLY = [r"^\s*CREATE\s+ROLE\s", r"^\s*CREATE\s+USER\s", r"^\s*GRANT\s"]
ADMIN_PASSPHRASE = "admin-key-passphrase-3e9d"


def public_pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def private_pem(key: rsa.RSAPrivateKey, passphrase: str | None = None) -> str:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode()) if passphrase else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption).decode()


def key_pair_connection(emulators: Emulators, user: str, password: str, **extra: Any) -> str:
    conn = emulators.snowflake_connection()
    conn.update(login=user, password=password)
    conn["extra"].update(extra)
    return json.dumps(conn)


def test_provision_then_ingest_as_the_service_user_with_its_key_pair(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8].upper()
    admin, service = f"KP_ADMIN_{suffix}", f"KP_SVC_{suffix}"
    admin_key, service_key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    # The administrator exists already, with its public key.
    conn = emulators.snowflake_connect(session_parameters={"nop_regexes": TEXT_ONLY})
    try:
        body = "".join(public_pem(admin_key).splitlines()[1:-1])
        conn.cursor().execute(f"CREATE USER IF NOT EXISTS {admin} RSA_PUBLIC_KEY = '{body}'")
    finally:
        conn.close()

    stream, app = unique("keypair"), unique("keypair-app")
    table = f"KEYPAIR_{suffix}"
    kinesis = create_stream(emulators, stream, 1)
    put_json(kinesis, stream, [{"id": i} for i in range(25)])
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "snowflake": {
            "role": f"KP_ROLE_{suffix}",
            "user": service,
            "public_key_variable": "kinesis_service_public_key",
            "columns": {"ID": "NUMBER(38,0)"},
        },
        "batch": {"schedule": None, "retries": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    prefix = f"kinesis_snowflake_{connector['connector_id']}"

    # The IAM check simulates an IAM user's policy: the connector's user holds the generated one.
    permissions = required_permissions(
        stream_name=stream, region="us-east-1", account_id="123456789012", application_name=app
    )
    aws = emulators.iam_user_connection(unique("keypair-user"), policy_document(permissions))
    dag_env = {**dag_env, "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws)}
    provision_env = {
        **dag_env,
        "AIRFLOW_CONN_SNOWFLAKE_DEFAULT": key_pair_connection(
            emulators,
            admin,
            ADMIN_PASSPHRASE,
            private_key_content=private_pem(admin_key, ADMIN_PASSPHRASE),
            session_parameters={"nop_regexes": TEXT_ONLY},
        ),
        "AIRFLOW_VAR_KINESIS_SERVICE_PUBLIC_KEY": public_pem(service_key),
    }
    proc = run_dag(f"{prefix}_provision", provision_env, dag_file=dag_file, log_path=tmp_path / "provision.log")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]

    # The service user now exists with its key: Snowflake (and the emulator) refuse it a password.
    with pytest.raises(DatabaseError, match="Incorrect username or password"):
        snowflake.connector.connect(
            user=service,
            password="x" * 12,
            account="fakesnow",
            host="127.0.0.1",
            port=emulators.fakesnow_port,
            protocol="http",
        )

    key_file = tmp_path / "service_key.p8"
    key_file.write_text(private_pem(service_key))
    key_file.chmod(0o600)
    ingest_env = {
        **dag_env,
        "AIRFLOW_CONN_SNOWFLAKE_DEFAULT": key_pair_connection(emulators, service, "", private_key_file=str(key_file)),
    }
    proc = run_dag(f"{prefix}_ingest", ingest_env, dag_file=dag_file, log_path=tmp_path / "ingest.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(25))
    der = service_key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert base64.b64encode(der).decode() not in output
    assert all(line not in output for line in private_pem(service_key).splitlines()[1:-1])
