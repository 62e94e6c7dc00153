"""KinesisJobSubmitHook: how the job's driver gets credentials, decided from the Spark connection."""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

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
    with pytest.raises(ValueError, match="driver_identity needs snowflake_secret_id"):
        KinesisJobSubmitHook(conn_id=conn_id)


def test_driver_identity_names_the_secret_to_the_job_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = spark_connection(monkeypatch, "local[2]", driver_identity="true", snowflake_secret_id="kinesis/sf")
    hook = KinesisJobSubmitHook(conn_id=conn_id, application_args=["--plan", "p.json"])
    command = hook._build_spark_submit_command("job.py")
    assert command[-4:] == ["--plan", "p.json", "--snowflake-secret-id", "kinesis/sf"]
    hook.check_credential_delivery()  # client mode: nothing to refuse


@pytest.mark.parametrize(
    ("extra", "conf"),
    [({"deploy-mode": "cluster"}, None), ({}, {"spark.submit.deployMode": "cluster"})],
    ids=["connection deploy-mode", "spark.submit.deployMode"],
)
def test_cluster_deploy_mode_is_refused_with_what_to_configure(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], conf: dict[str, Any] | None
) -> None:
    conn_id = spark_connection(monkeypatch, "yarn", **extra)
    hook = KinesisJobSubmitHook(conn_id=conn_id, conf=conf)
    assert hook.deploy_mode == "cluster"
    with pytest.raises(AirflowException, match=r"cluster deploy mode.*\"driver_identity\": true"):
        hook.submit("job.py")
