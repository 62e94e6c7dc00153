"""No credential of the ingest operator leaves through spark-submit's command line, a Spark setting,
the task log or an error, whatever the Spark master and deploy mode.

The operator runs for real against the moto and fakesnow servers (planning, leases, the Snowflake
provider's key handling) and submits through the Spark provider's SparkSubmitHook, which builds the
real command. ``spark-submit`` itself is a stand-in on the PATH that records the command line and
the environment it was started with, then fails as a cluster that cannot be reached does.

The secrets looked for are ones the connections never held, which Airflow's masker only knows when
this provider (or the Amazon provider) registers them: the AWS credentials of a role assumed through
moto's STS, a Snowflake password as it reads JSON-escaped, a private key as base64 DER and PEM lines.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from airflow.providers.apache.spark.hooks import spark_submit
from airflow.sdk import Context
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from structlog.testing import capture_logs

from airflow_kinesis_snowflake.compat import AirflowException, redact
from airflow_kinesis_snowflake.core.engine.wire import decode
from airflow_kinesis_snowflake.core.planning import BatchPlan
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, create_table, put_json, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY

pytestmark = pytest.mark.integration

ROLE_ARN = "arn:aws:iam::123456789012:role/kinesis-to-snowflake"
#: The published documentation (airflow_kinesis_snowflake.DOCS_URL), which messages point at.
SITE = "https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/"
# The names the job's AWS secrets reach the driver under (Spark copies the standard AWS_* into its Hadoop
# configuration, which a YARN client uploads: core/job.py, JOB_AWS_CREDENTIAL_ENV).
AWS_SECRET_ENV = ("KINESIS_SNOWFLAKE_AWS_SECRET_ACCESS_KEY", "KINESIS_SNOWFLAKE_AWS_SESSION_TOKEN")
SPARK_READ_AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# Quotes and a backslash: SNOWFLAKE_CONNECTION_JSON holds it escaped, a form Airflow never registers.
SNOWFLAKE_PASSWORD = 'snowflake-"password"\\Hk3Jd9Gs'
PASSPHRASE = "key-passphrase-Vb6Nm1Qa"
SECRET_ID = "kinesis/snowflake-connection"

FAKE_SPARK_SUBMIT = """#!{python}
import json, os, sys
with open(os.environ["FAKE_SPARK_SUBMIT_RECORD"], "w") as record:
    json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, record)
print("spark-submit: the cluster cannot be reached")
sys.exit(1)
"""

# (master, port, deploy mode, extra extras)
SPARK_CONNECTIONS: dict[str, tuple[str, int | None, str, dict[str, Any]]] = {
    "local client": ("local[2]", None, "client", {}),
    "local cluster": ("local[2]", None, "cluster", {}),
    "standalone client": ("spark://spark-master.example", 7077, "client", {}),
    "standalone cluster": ("spark://spark-master.example", 7077, "cluster", {}),
    "yarn client": ("yarn", None, "client", {"queue": "ingest"}),
    "yarn cluster": ("yarn", None, "cluster", {"queue": "ingest"}),
    "k8s client": ("k8s://https://k8s.example", 443, "client", {"namespace": "ingest"}),
    "k8s cluster": ("k8s://https://k8s.example", 443, "cluster", {"namespace": "ingest"}),
    "yarn client, driver identity": (
        "yarn",
        None,
        "client",
        {"driver_identity": True, "snowflake_connection_ref": SECRET_ID},
    ),
    "yarn cluster, driver identity": (
        "yarn",
        None,
        "cluster",
        {"driver_identity": True, "snowflake_connection_ref": SECRET_ID},
    ),
    "k8s cluster, driver identity": (
        "k8s://https://k8s.example",
        443,
        "cluster",
        {"driver_identity": True, "snowflake_connection_ref": SECRET_ID},
    ),
}
# Submissions refused before any lease is taken, and what the refusal says.
WITHOUT_IDENTITY = 'uses cluster deploy mode without the extras "driver_identity": true and "snowflake_connection_ref"'
REFUSED = {
    "local cluster": "which Spark refuses with a local master",
    "standalone cluster": "Cluster deploy mode is currently not supported for python applications on standalone",
    "yarn cluster": WITHOUT_IDENTITY,
    "k8s cluster": WITHOUT_IDENTITY,
}


@pytest.fixture
def key() -> rsa.RSAPrivateKey:
    # A key of its own per test: Airflow's masker keeps what any earlier test registered.
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def spark_submit_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in spark-submit first on the PATH; where it records how it was started."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text(FAKE_SPARK_SUBMIT.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "spark-submit.json"
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ["PATH"]]))
    monkeypatch.setenv("FAKE_SPARK_SUBMIT_RECORD", str(record))
    # SparkSubmitHook refuses a k8s:// master unless the Kubernetes provider is installed; it only
    # talks to the cluster when it tracks a driver, which none of these submissions ask for.
    monkeypatch.setattr(spark_submit, "kube_client", SimpleNamespace(), raising=False)
    return record


def secrets_of(auth: str, key: rsa.RSAPrivateKey) -> tuple[dict[str, Any], list[str]]:
    """The Snowflake connection's password/key fields, and every Snowflake secret value to look for."""
    if auth == "password":
        return {"password": SNOWFLAKE_PASSWORD}, [SNOWFLAKE_PASSWORD, json.dumps(SNOWFLAKE_PASSWORD)[1:-1]]
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSPHRASE.encode()),
    ).decode()
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fields = {"password": "", "extra": {"private_key_content": encrypted, "private_key_passphrase": PASSPHRASE}}
    pem_lines = encrypted.splitlines()[1:-1]
    return fields, [PASSPHRASE, base64.b64encode(der).decode(), *pem_lines]


def set_connections(
    emulators: Emulators, monkeypatch: pytest.MonkeyPatch, spark: str, snowflake_fields: dict[str, Any]
) -> None:
    # The operator works as a role assumed through STS: its keys are not the connection's.
    aws = emulators.aws_connection()
    aws["extra"]["role_arn"] = ROLE_ARN
    snowflake = emulators.snowflake_connection()
    snowflake["password"] = snowflake_fields["password"]
    snowflake["extra"].update(snowflake_fields.get("extra", {}))
    master, port, deploy_mode, extra = SPARK_CONNECTIONS[spark]
    spark_conn: dict[str, Any] = {"conn_type": "spark", "host": master, "extra": {"deploy-mode": deploy_mode, **extra}}
    if port:
        spark_conn["port"] = port
    monkeypatch.setenv("AIRFLOW_CONN_AWS_CREDENTIALS_TEST", json.dumps(aws))
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_CREDENTIALS_TEST", json.dumps(snowflake))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CREDENTIALS_TEST", json.dumps(spark_conn))


def ingest_operator(emulators: Emulators) -> SparkKinesisIngestOperator:
    stream, app = unique("creds"), unique("creds-app")
    table = "CREDS_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, 1)
    put_json(kinesis, stream, [{"id": 1}])
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    return SparkKinesisIngestOperator(
        task_id="ingest",
        stream_name=stream,
        application_name=app,
        database="ANALYTICS",
        schema="RAW",
        table=table,
        region_name="us-east-1",
        aws_conn_id="aws_credentials_test",
        snowflake_conn_id="snowflake_credentials_test",
        spark_conn_id="spark_credentials_test",
    )


def render(event: Mapping[str, Any]) -> str:
    """A structlog event as its log line would read: message, arguments, every other field."""
    text = str(event.get("event", ""))
    if event.get("positional_args"):
        text %= tuple(event["positional_args"])
    rest = {k: v for k, v in event.items() if k not in ("event", "positional_args")}
    return f"{text} {rest}"


def context() -> Context:
    return cast(Context, {"ti": SimpleNamespace(dag_id="credentials", run_id="manual", try_number=1)})


@pytest.mark.parametrize("auth", ["password", "key pair"])
@pytest.mark.parametrize("spark", list(SPARK_CONNECTIONS))
def test_no_secret_on_the_command_line_in_spark_settings_logs_or_errors(
    aws_connections: Emulators,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    spark_submit_record: Path,
    key: rsa.RSAPrivateKey,
    spark: str,
    auth: str,
) -> None:
    snowflake_fields, secrets = secrets_of(auth, key)
    set_connections(aws_connections, monkeypatch, spark, snowflake_fields)
    operator = ingest_operator(aws_connections)
    _, _, deploy_mode, extra = SPARK_CONNECTIONS[spark]

    with capture_logs() as events, caplog.at_level(logging.DEBUG), pytest.raises(AirflowException) as raised:
        operator.execute(context())

    message = str(raised.value)
    started = json.loads(spark_submit_record.read_text()) if spark_submit_record.exists() else None
    argv, env = (started["argv"], started["env"]) if started else ([], {})
    shipped_aws = [env[k] for k in AWS_SECRET_ENV if env.get(k) and env[k] != os.environ.get(k)]
    secrets += shipped_aws
    # Airflow's own loggers (operators, hooks) are structlog's; libraries log through logging.
    records = [(e.get("log_level", "info").upper(), render(e)) for e in events]
    records += [(r.levelname, r.getMessage()) for r in caplog.records]
    # At the task log's level nothing logs a secret; at DEBUG (botocore prints request headers),
    # Airflow's secret masker, which the task log goes through, hides every one of them.
    logged = [text for level, text in records if level != "DEBUG"]
    masked = [str(redact(text)) for _, text in records]
    for secret in secrets:
        assert secret not in message, f"a secret is in the error: {message}"
        assert not [m for m in logged if secret in m], "a secret is in the task log"
        assert not [m for m in masked if secret in m], "a secret is in the DEBUG log, unmasked"
    if spark in REFUSED:
        # Refused before any lease is taken or spark-submit runs, saying why and what to use.
        assert started is None
        assert LeaseTable(aws_connections.boto3_client("dynamodb"), operator.application_name).leases() == {}
        assert REFUSED[spark] in message and "client deploy mode" in message and f"{SITE}spark/" in message
        return

    assert started is not None
    command = " ".join(argv)
    for secret in secrets:
        assert secret not in command, f"a secret is on the spark-submit command line: {command}"
    settings = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--conf"]
    assert not any(s.startswith(("spark.yarn.appMasterEnv.", "spark.kubernetes.driverEnv.")) for s in settings)
    # The plan travels in the command, compressed: no secret in it once decoded either.
    plan = BatchPlan.from_work(decode(argv[argv.index("--plan") + 1]))
    assert plan.stream_name == operator.stream_name
    for secret in secrets:
        assert secret not in plan.to_json(), "a secret is in the batch plan"
    assert argv[argv.index("--deploy-mode") + 1] == deploy_mode
    (command_line,) = [str(redact(m)) for m in logged if "Spark-Submit cmd:" in m]
    # The failure says what spark-submit wrote last (here, nothing at ERROR: its last lines), masked.
    assert "failed: spark-submit exited with code 1. Its last lines (none at ERROR)" in message
    assert message.endswith("spark-submit: the cluster cannot be reached")
    if extra.get("driver_identity"):
        # Nothing shipped: the job reads Snowflake's connection from the named secret, whose name
        # the task log shows.
        assert argv[-2:] == ["--snowflake-connection-ref", SECRET_ID]
        assert f"--snowflake-connection-ref {SECRET_ID}" in command_line
        assert "SNOWFLAKE_CONNECTION_JSON" not in env and not shipped_aws
        return
    # The client-mode driver is this process's child: its environment carries the credentials,
    # the assumed role's (a session token and keys the AWS connection does not hold), under names
    # Spark does not copy into its Hadoop configuration.
    assert env["KINESIS_SNOWFLAKE_AWS_ACCESS_KEY_ID"] != AWS_KEY and len(shipped_aws) == 2
    assert not [k for k in SPARK_READ_AWS_ENV if k in env]
    # Every secret shipped is known to Airflow's masker, which the task log goes through.
    assert {s: set(str(redact(s))) for s in secrets} == {s: {"*"} for s in secrets}
    snowflake = json.loads(env["SNOWFLAKE_CONNECTION_JSON"])
    assert not [s for s in secrets if s in str(redact(env["SNOWFLAKE_CONNECTION_JSON"]))]
    if auth == "password":
        assert snowflake["password"] == SNOWFLAKE_PASSWORD
    else:
        assert snowflake["private_key_der_base64"] in secrets and "password" not in snowflake
