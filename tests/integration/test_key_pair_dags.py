"""The provisioning and ingest DAGs with key-pair Snowflake connections, end to end.

An administrator's key-pair connection (encrypted key, passphrase as the password, as the Snowflake
provider reads it) runs the provisioning DAG, which creates the connector's ``TYPE = SERVICE`` user
with its RSA public key. The ingest DAG then logs in as that user with its private key file, from
the operator and from the Spark job. The fakesnow server verifies every key-pair login's JWT against
the public key the user was created with (tests/emulators/fakesnow_auth.py), and refuses the
service user a password. With the Spark connection's ``driver_identity``, the ingest DAG's job reads
the service user's key pair from AWS Secrets Manager instead (moto serves it).
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

from airflow_kinesis_snowflake.core.admin.iam import policy_document, required_permissions
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.servers import AWS_KEY
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


def test_ingest_with_driver_identity_reads_the_key_pair_from_secrets_manager(
    aws_connections: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    emulators = aws_connections
    suffix = uuid.uuid4().hex[:8].upper()
    service, key = f"KP_SECRET_SVC_{suffix}", rsa.generate_private_key(public_exponent=65537, key_size=2048)
    conn = emulators.snowflake_connect(session_parameters={"nop_regexes": TEXT_ONLY})
    try:
        body = "".join(public_pem(key).splitlines()[1:-1])
        conn.cursor().execute(f"CREATE USER {service} TYPE = SERVICE RSA_PUBLIC_KEY = '{body}'")
    finally:
        conn.close()
    secret_id = unique("kinesis/snowflake")
    secret = {
        "account": "fakesnow",
        "user": service,
        "host": "127.0.0.1",
        "port": emulators.fakesnow_port,
        "protocol": "http",
        "private_key": private_pem(key, ADMIN_PASSPHRASE),
        "private_key_passphrase": ADMIN_PASSPHRASE,
    }
    emulators.boto3_client("secretsmanager").create_secret(Name=secret_id, SecretString=json.dumps(secret))

    stream, app = unique("identity"), unique("identity-app")
    table = f"IDENTITY_{suffix}"
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 1), stream, [{"id": i} for i in range(10)])
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retries": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    prefix = f"kinesis_snowflake_{connector['connector_id']}"
    spark = {
        "conn_type": "spark",
        "host": "local[2]",
        "extra": {"driver_identity": True, "snowflake_connection_ref": secret_id},
    }
    env = {
        **dag_env,
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark),
        # The worker's own AWS identity, which the client-mode driver and executors use.
        "AWS_ACCESS_KEY_ID": AWS_KEY,
        "AWS_SECRET_ACCESS_KEY": AWS_KEY,
    }
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    proc = run_dag(f"{prefix}_ingest", env, dag_file=dag_file, log_path=tmp_path / "ingest.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    # The job was told which secret to read, and the task log names it unmasked.
    (command,) = [line for line in output.splitlines() if "Spark-Submit cmd:" in line]
    assert f"--snowflake-connection-ref {secret_id}" in command and "SNOWFLAKE_CONNECTION_JSON" not in output
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(10))
