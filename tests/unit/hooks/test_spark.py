"""KinesisJobSubmitHook: how the job's driver gets credentials, decided from the Spark connection."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.apache.spark.hooks import spark_submit
from airflow.sdk.exceptions import AirflowException
from airflow.sdk.log import redact
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import KinesisJobSubmitHook


def spark_connection(monkeypatch: pytest.MonkeyPatch, host: str, **extra: Any) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNIT", json.dumps({"conn_type": "spark", "host": host, "extra": extra}))
    return "spark_unit"


def test_env_vars_are_refused_they_would_become_spark_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = spark_connection(monkeypatch, "yarn")
    with pytest.raises(ValueError, match="env_vars would reach the driver as Spark settings"):
        KinesisJobSubmitHook(conn_id=conn_id, env_vars={"AWS_SECRET_ACCESS_KEY": "x"})


def test_driver_identity_needs_the_secret_that_holds_the_snowflake_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = spark_connection(monkeypatch, "yarn", driver_identity=True)
    with pytest.raises(ValueError, match="driver_identity needs snowflake_connection_ref"):
        KinesisJobSubmitHook(conn_id=conn_id)


def test_the_secret_name_is_not_masked_in_logs_and_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    # A short secret name, a common word: masked, it would hide that word in every log line.
    name = f"sf{uuid.uuid4().hex[:6]}"
    conn_id = spark_connection(monkeypatch, "local[2]", driver_identity="true", snowflake_connection_ref=name)

    hook = KinesisJobSubmitHook(conn_id=conn_id)  # reads the connection, which registers its secrets

    assert hook.driver_identity and hook.snowflake_connection_ref == name
    assert redact(f"reading the Snowflake connection from secret {name}") == (
        f"reading the Snowflake connection from secret {name}"
    )
    assert str(redact(RuntimeError(f"secret {name!r} holds binary data"))) == f"secret {name!r} holds binary data"
    hook.check_credential_delivery()  # client mode: nothing to refuse


def test_snowflake_secret_id_still_works_deprecated_and_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"kinesis/snowflake-{uuid.uuid4().hex[:8]}"
    conn_id = spark_connection(monkeypatch, "yarn", driver_identity=True, snowflake_secret_id=name)

    with pytest.warns(AirflowProviderDeprecationWarning, match="rename it 'snowflake_connection_ref'"):
        hook = KinesisJobSubmitHook(conn_id=conn_id)

    assert hook.snowflake_connection_ref == name
    # Why it is deprecated: Airflow masks the value of any extra whose name says "secret".
    assert redact(f"secret {name}") == "secret ***"


@pytest.mark.parametrize("master", ["yarn", "k8s://https://k8s.example:443", "spark://spark-master:7077"])
@pytest.mark.parametrize(
    ("extra", "conf"),
    [
        ({"deploy-mode": "cluster"}, None),
        ({}, {"spark.submit.deployMode": "cluster"}),
        ({"deploy-mode": "cluster", "driver_identity": True, "snowflake_connection_ref": "kinesis/sf"}, None),
    ],
    ids=["connection deploy-mode", "spark.submit.deployMode", "with driver_identity"],
)
def test_cluster_deploy_mode_is_refused_saying_to_use_client_mode(
    monkeypatch: pytest.MonkeyPatch, master: str, extra: dict[str, Any], conf: dict[str, Any] | None
) -> None:
    conn_id = spark_connection(monkeypatch, master, **extra)
    # SparkSubmitHook refuses a k8s:// master without the Kubernetes provider, which it only uses to
    # track a driver; nothing here reaches a cluster.
    monkeypatch.setattr(spark_submit, "kube_client", SimpleNamespace(), raising=False)
    hook = KinesisJobSubmitHook(conn_id=conn_id, conf=conf)
    assert hook.deploy_mode == "cluster"
    with pytest.raises(AirflowException) as raised:
        hook.submit("job.py")
    message = str(raised.value)
    assert "cluster deploy mode, which is not supported yet" in message
    assert "the batch plan and the job's result are files on this Airflow worker" in message
    assert 'Use client deploy mode (the extra "deploy-mode": "client"' in message
    # How to have a YARN or Kubernetes driver in client mode use its own identity.
    assert '"driver_identity": true and "snowflake_connection_ref":' in message


def job_connections(monkeypatch: pytest.MonkeyPatch) -> tuple[KinesisStreamHook, KinesisSnowflakeHook]:
    """An AWS connection with keys, and a Snowflake one whose key cannot be decrypted (wrong passphrase)."""
    aws = {
        "conn_type": "aws",
        "login": "AKIAJOBENVTEST000001",
        "password": "job-env-secret-key-3Xq9",
        "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:4566"},
    }
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"the-right-passphrase"),
    ).decode()
    snowflake = {
        "conn_type": "snowflake",
        "login": "KINESIS_INGEST",
        "extra": {"account": "myorg", "private_key_content": encrypted, "private_key_passphrase": "wrong-one"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_JOB_ENV", json.dumps(aws))
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_JOB_ENV", json.dumps(snowflake))
    return KinesisStreamHook(aws_conn_id="aws_job_env"), KinesisSnowflakeHook(snowflake_conn_id="snowflake_job_env")


def test_with_driver_identity_the_job_is_told_where_aws_is_and_no_credential_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    conn_id = spark_connection(monkeypatch, "local[2]", driver_identity=True, snowflake_connection_ref="kinesis/sf")

    env = KinesisJobSubmitHook(conn_id=conn_id).job_environment(kinesis, snowflake)

    # The Snowflake key is never decrypted: its wrong passphrase goes unnoticed.
    assert env == {
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL_KINESIS": "http://127.0.0.1:4566",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": "http://127.0.0.1:4566",
    }


def test_without_driver_identity_the_job_gets_both_connections_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    kinesis, snowflake = job_connections(monkeypatch)
    conn_id = spark_connection(monkeypatch, "local[2]")
    hook = KinesisJobSubmitHook(conn_id=conn_id)

    with pytest.raises(ValueError, match="connection 'snowflake_job_env': the private key could not be read"):
        hook.job_environment(kinesis, snowflake)

    monkeypatch.setenv(
        "AIRFLOW_CONN_SNOWFLAKE_JOB_ENV",
        json.dumps({"conn_type": "snowflake", "login": "U", "password": "pw-4f1c2e9a", "extra": {"account": "a"}}),
    )
    env = hook.job_environment(kinesis, snowflake)
    assert env["AWS_ACCESS_KEY_ID"] == "AKIAJOBENVTEST000001" and env["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert json.loads(env["SNOWFLAKE_CONNECTION_JSON"])["password"] == "pw-4f1c2e9a"


def test_the_py_files_zip_holds_every_module_of_core_and_nothing_of_airflow(tmp_path: Any) -> None:
    import zipfile
    from pathlib import Path

    import airflow_kinesis_snowflake
    from airflow_kinesis_snowflake.hooks.spark import DEFAULT_APPLICATION, package_core

    package = Path(airflow_kinesis_snowflake.__file__).parent
    with zipfile.ZipFile(package_core(tmp_path)) as zf:
        names = set(zf.namelist())
    core = {f"airflow_kinesis_snowflake/{p.relative_to(package).as_posix()}" for p in (package / "core").rglob("*.py")}
    assert "airflow_kinesis_snowflake/core/state/leases.py" in core  # subpackages too
    assert names == {"airflow_kinesis_snowflake/__init__.py", *core}
    # The file submitted is the packaged entry point, which runs core.job's main.
    assert DEFAULT_APPLICATION == str(package / "spark_jobs" / "kinesis_to_snowflake.py")
    assert "from airflow_kinesis_snowflake.core.job import main" in Path(DEFAULT_APPLICATION).read_text()
