"""The submit step's platforms: spark-submit by default, EMR Serverless from ``spark_platform``; what an
EMR Serverless submission refuses before anything is uploaded or submitted, and what it sends."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.hooks.emr_serverless import EMR_ARGUMENT_LIMIT, EmrServerlessSubmitter
from airflow_kinesis_snowflake.hooks.platforms import job_submit_hook
from airflow_kinesis_snowflake.hooks.spark import CLUSTER

ROLE = "arn:aws:iam::123456789012:role/orders-emr-job"
PLATFORM = {
    "platform": "emr_serverless",
    "application_id": "00fabc123",
    "execution_role_arn": ROLE,
    "artifacts": "s3://jobs-bucket/orders",
}


def hook(monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], **spark: Any) -> Any:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_EMR", json.dumps({"conn_type": "kinesis_snowflake_spark", "extra": extra}))
    arguments: dict[str, Any] = {"conf": None, "spark_submit": {}, "spark_platform": PLATFORM, **spark}
    return job_submit_hook(conn_id="spark_emr", aws_conn_id="aws_unit", region_name="eu-west-1", **arguments)


IDENTITY = {"driver_identity": True, "snowflake_connection_ref": "kinesis/snowflake"}


def test_spark_submit_is_the_platform_without_spark_platform(unit_connections: None) -> None:
    spark = job_submit_hook(
        conn_id="spark_unit",
        conf=None,
        spark_submit={},
        spark_platform=None,
        aws_conn_id="aws_unit",
        region_name=None,
    )
    assert spark.submitter is None and spark.master == "local[2]"


def test_emr_serverless_runs_the_driver_on_the_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    spark = hook(monkeypatch, IDENTITY)
    assert isinstance(spark.submitter, EmrServerlessSubmitter)
    assert (spark.submitter.application_id, spark.submitter.execution_role_arn) == ("00fabc123", ROLE)
    assert (spark.submitter.aws_conn_id, spark.submitter.region_name) == ("aws_unit", "eu-west-1")
    assert spark.deploy_mode == CLUSTER  # the driver's report is logged by the task
    spark.check_submission()  # no spark-submit needed on this worker


def test_a_connection_without_the_driver_s_identity_is_refused_before_anything_is_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, {})
    with pytest.raises(AirflowException) as raised:
        spark.check_submission()
    message = str(raised.value)
    assert "Spark connection 'spark_emr' (connections.spark of the connector file)" in message
    assert f"as the execution role {ROLE}" in message
    assert '"driver_identity": true and "snowflake_connection_ref"' in message
    assert "nothing was submitted" in message and "spark/#emr-serverless" in message


def test_the_spark_settings_hold_the_zip_the_settings_and_where_aws_is_but_no_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(
        monkeypatch,
        IDENTITY,
        conf={"spark.log.level": "INFO", "spark.emr-serverless.executor.disk": "30g"},
        spark_submit={"executor_memory": "4g", "num_executors": 3},
    )
    location = {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_ENDPOINT_URL_KINESIS": "https://kinesis.example"}
    words = shlex.split(spark.submitter.spark_parameters(spark, "s3://jobs-bucket/orders/sha256-1/core.zip", location))

    assert words[:2] == ["--py-files", "s3://jobs-bucket/orders/sha256-1/core.zip"]
    settings = dict(word.split("=", 1) for word in words[3::2])
    assert set(words[2::2]) == {"--conf"}
    assert settings == {
        "spark.executor.memory": "4g",
        "spark.executor.instances": "3",
        "spark.log.level": "INFO",
        "spark.emr-serverless.executor.disk": "30g",
        "spark.emr-serverless.driverEnv.AWS_DEFAULT_REGION": "eu-west-1",
        "spark.executorEnv.AWS_DEFAULT_REGION": "eu-west-1",
        "spark.emr-serverless.driverEnv.AWS_ENDPOINT_URL_KINESIS": "https://kinesis.example",
        "spark.executorEnv.AWS_ENDPOINT_URL_KINESIS": "https://kinesis.example",
    }


def test_a_plan_longer_than_a_job_run_argument_is_refused_before_anything_is_uploaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, IDENTITY)
    plan = "x" * (EMR_ARGUMENT_LIMIT + 1)
    spark._plan_argument = plan

    with pytest.raises(AirflowException, match="10,280 characters EMR Serverless takes in one job argument") as raised:
        spark.submitter.submit(
            spark, "job.py", ["--plan", plan], name="job", label="<plan of batch b: 10281 characters>", location={}
        )

    assert str(raised.value).startswith("<plan of batch b: 10281 characters> is longer than")
    assert spark.submitter.job_run_id is None


def test_on_kill_before_a_job_run_started_cancels_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    spark = hook(monkeypatch, IDENTITY)
    spark.on_kill()  # no job run, no call to EMR Serverless (no AWS connection aws_unit here)
    assert spark.submitter.job_run_id is None


def test_spark_logs_at_warn_on_the_platform_unless_the_connector_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = hook(monkeypatch, IDENTITY)
    words = shlex.split(spark.submitter.spark_parameters(spark, "s3://jobs-bucket/orders/sha256-1/core.zip", {}))
    assert words[2:] == ["--conf", "spark.log.level=WARN"]
